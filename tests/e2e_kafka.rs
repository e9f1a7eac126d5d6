//! The Kafka listener end to end, driven by an independent Kafka client
//! (rskafka, on a test-only tokio runtime) and by raw frames; and the same
//! topic through both protocols (Flume SDK <-> Kafka).

use crate::common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use chrono::{DateTime, Utc};
use flume_broker::Broker;
use flume_client::{Header, PartitionConsumer, Producer, ProducerRecord, StartOffset};
use futures::StreamExt;
use kafka_protocol::messages::{ApiKey, MetadataRequest, RequestHeader};
use kafka_protocol::protocol::{Encodable, StrBytes};
use rskafka::client::partition::{Compression, OffsetAt, UnknownTopicHandling};
use rskafka::client::ClientBuilder;
use rskafka::record::Record;

fn start(dir: &std::path::Path) -> Broker {
    let mut c = common::config(dir);
    c.kafka_listen = Some("127.0.0.1:0".into());
    c.read_timeout = Duration::from_secs(1);
    flume_rt::block_on(Broker::start(c)).expect("broker starts")
}

fn tokio() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn ts(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).expect("valid timestamp")
}

fn record(i: usize) -> Record {
    Record {
        key: Some(format!("key-{i}").into_bytes()),
        value: Some(format!("value-{i} {}", "x".repeat(50)).into_bytes()),
        headers: BTreeMap::from([
            ("h1".to_owned(), format!("one-{i}").into_bytes()),
            ("h2".to_owned(), vec![0, 1, 2, 255]),
        ]),
        timestamp: ts(1_700_000_000_000 + i as i64),
    }
}

#[test]
fn metadata_produce_each_codec_fetch_and_list_offsets() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path());
    let kafka = broker.kafka_addr().context("kafka listener")?.to_string();
    tokio().block_on(async {
        let client = ClientBuilder::new(vec![kafka.clone()]).build().await?;
        client
            .controller_client()?
            .create_topic("kt", 2, 1, 5_000)
            .await?;
        let topics = client.list_topics().await?;
        let kt = topics
            .iter()
            .find(|t| t.name == "kt")
            .context("kt listed")?;
        assert_eq!(kt.partitions.len(), 2);
        let pc = client
            .partition_client("kt", 1, UnknownTopicHandling::Error)
            .await?;
        assert_eq!(pc.get_offset(OffsetAt::Earliest).await?, 0);
        assert_eq!(pc.get_offset(OffsetAt::Latest).await?, 0);
        let codecs = [
            Compression::NoCompression,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ];
        let mut sent = Vec::new();
        for (c, codec) in codecs.into_iter().enumerate() {
            let batch: Vec<Record> = (0..3).map(|i| record(c * 3 + i)).collect();
            let offsets = pc.produce(batch.clone(), codec).await?;
            assert_eq!(
                offsets,
                vec![c as i64 * 3, c as i64 * 3 + 1, c as i64 * 3 + 2],
                "{codec:?}"
            );
            sent.extend(batch);
        }
        assert_eq!(pc.get_offset(OffsetAt::Latest).await?, 15);
        let mut got = Vec::new();
        while got.len() < sent.len() {
            let (records, hw) = pc
                .fetch_records(got.len() as i64, 1..1_000_000, 1_000)
                .await?;
            assert_eq!(hw, 15);
            assert!(!records.is_empty(), "fetch made progress");
            got.extend(records);
        }
        for (i, (r, s)) in got.iter().zip(&sent).enumerate() {
            assert_eq!(r.offset, i as i64);
            assert_eq!(&r.record, s, "record {i}: key, value, headers, timestamp");
        }
        // Nothing new: the long poll answers empty after max_wait.
        let (records, _) = pc.fetch_records(15, 1..1_000_000, 100).await?;
        assert!(records.is_empty());
        anyhow::Ok(())
    })?;
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn a_long_poll_wakes_when_records_arrive() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path());
    broker
        .engine()
        .records()
        .create_topic("lp", common::topic(1))?;
    let kafka = broker.kafka_addr().context("kafka listener")?.to_string();
    tokio().block_on(async {
        let client = ClientBuilder::new(vec![kafka.clone()]).build().await?;
        let reader = client
            .partition_client("lp", 0, UnknownTopicHandling::Error)
            .await?;
        let writer_client = ClientBuilder::new(vec![kafka]).build().await?;
        let writer = writer_client
            .partition_client("lp", 0, UnknownTopicHandling::Error)
            .await?;
        let fetch = reader.fetch_records(0, 1..1_000_000, 1_500);
        let produce = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            writer
                .produce(vec![record(0)], Compression::NoCompression)
                .await
        };
        let started = std::time::Instant::now();
        let ((records, _), offsets) =
            tokio::try_join!(async { fetch.await.map_err(anyhow::Error::from) }, async {
                produce.await.map_err(anyhow::Error::from)
            })?;
        assert_eq!(offsets, vec![0]);
        assert_eq!(records.len(), 1);
        assert!(
            started.elapsed() < Duration::from_millis(1_400),
            "woken by the record, not the timeout"
        );
        anyhow::Ok(())
    })?;
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn flume_sdk_and_kafka_read_each_others_records() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path());
    broker
        .engine()
        .records()
        .create_topic("both", common::topic(1))?;
    let native = broker.local_addr().to_string();
    let kafka = broker.kafka_addr().context("kafka listener")?.to_string();
    // Flume SDK -> Kafka.
    let meta = flume_rt::block_on(async {
        let p = Producer::connect(&native).await?;
        p.send_record(
            ProducerRecord::new("both", Bytes::from_static(b"from flume"))
                .key(Bytes::from_static(b"fk"))
                .header("origin", Bytes::from_static(b"flume"))
                .partition(0)
                .timestamp(1_600_000_000_123),
        )
        .await
    })?;
    assert_eq!(meta.offset, 0);
    tokio().block_on(async {
        let client = ClientBuilder::new(vec![kafka]).build().await?;
        let pc = client
            .partition_client("both", 0, UnknownTopicHandling::Error)
            .await?;
        let (records, _) = pc.fetch_records(0, 1..1_000_000, 1_000).await?;
        let r = &records.first().context("one record")?.record;
        assert_eq!(r.key.as_deref(), Some(&b"fk"[..]));
        assert_eq!(r.value.as_deref(), Some(&b"from flume"[..]));
        assert_eq!(
            r.headers.get("origin").map(Vec::as_slice),
            Some(&b"flume"[..])
        );
        assert_eq!(r.timestamp, ts(1_600_000_000_123));
        // Kafka -> Flume SDK.
        let rec = Record {
            key: Some(b"kk".to_vec()),
            value: Some(b"from kafka".to_vec()),
            headers: BTreeMap::from([("origin".to_owned(), b"kafka".to_vec())]),
            timestamp: ts(1_600_000_000_456),
        };
        assert_eq!(pc.produce(vec![rec], Compression::Zstd).await?, vec![1]);
        anyhow::Ok(())
    })?;
    let got = flume_rt::block_on(async {
        let mut c = PartitionConsumer::connect(&native, "both", 0, StartOffset::At(1)).await?;
        c.next()
            .await
            .context("a record")?
            .map_err(anyhow::Error::from)
    })?;
    assert_eq!(got.offset, 1);
    assert_eq!(got.key.as_deref(), Some(&b"kk"[..]));
    assert_eq!(got.payload(), b"from kafka");
    assert_eq!(
        got.headers,
        vec![Header::new("origin", Bytes::from_static(b"kafka"))]
    );
    assert_eq!(got.timestamp, 1_600_000_000_456);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

// ---------------------------------------------------------------- raw frames

fn frame(key: i16, version: i16, correlation: i32, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.put_i32(i32::try_from(8 + 2 + body.len()).unwrap());
    f.put_i16(key);
    f.put_i16(version);
    f.put_i32(correlation);
    f.put_i16(-1); // null client id (header v1)
    f.extend_from_slice(body);
    f
}

fn read_frame(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let mut buf = vec![0u8; usize::try_from(i32::from_be_bytes(len)).unwrap()];
    s.read_exact(&mut buf)?;
    Ok(buf)
}

fn connect(broker: &Broker) -> Result<TcpStream> {
    let s = TcpStream::connect(broker.kafka_addr().context("kafka")?)?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    Ok(s)
}

#[test]
fn unknown_apis_and_versions_get_unsupported_version_and_the_connection_lives() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path());
    let mut s = connect(&broker)?;
    // ApiVersions v9: the v0 body with error 35 and the served list.
    s.write_all(&frame(18, 9, 7, &[]))?;
    let mut r = Bytes::from(read_frame(&mut s)?);
    assert_eq!(r.get_i32(), 7);
    assert_eq!(r.get_i16(), 35);
    let n = r.get_i32();
    let mut keys = Vec::new();
    for _ in 0..n {
        keys.push((r.get_i16(), r.get_i16(), r.get_i16()));
    }
    assert!(keys.contains(&(18, 0, 3)));
    assert!(keys.iter().all(|(k, _, _)| *k != 71));
    // An unknown API key and an unserved version of a served one.
    for (key, version, id) in [
        (999, 0, 8),
        (ApiKey::JoinGroup as i16, 10, 9),
        (ApiKey::Fetch as i16, 19, 10),
    ] {
        s.write_all(&frame(key, version, id, &[]))?;
        let mut r = Bytes::from(read_frame(&mut s)?);
        assert_eq!(r.get_i32(), id);
        assert_eq!(r.get_i16(), 35, "api {key} v{version}");
    }
    // Still serving: Metadata v1 for all topics.
    let mut body = BytesMut::new();
    MetadataRequest::default()
        .with_topics(None)
        .encode(&mut body, 1)?;
    let mut f = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(3)
        .with_request_api_version(1)
        .with_correlation_id(11)
        .with_client_id(Some(StrBytes::from_static_str("raw")))
        .encode(&mut f, 1)?;
    f.extend_from_slice(&body);
    let mut full = Vec::new();
    full.put_i32(i32::try_from(f.len())?);
    full.extend_from_slice(&f);
    s.write_all(&full)?;
    let mut r = Bytes::from(read_frame(&mut s)?);
    assert_eq!(r.get_i32(), 11);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn bad_frame_sizes_close_the_connection_without_reading_or_allocating() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path());
    for size in [-1i32, 0, 7, i32::MAX] {
        let mut s = connect(&broker)?;
        s.write_all(&size.to_be_bytes())?;
        let mut b = [0u8; 1];
        // Closed at once: EOF (or a reset), not a timeout.
        match s.read(&mut b) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("size {size}: {other:?}"),
        }
    }
    // A malformed body of a served API closes the connection too (as Kafka does).
    let mut s = connect(&broker)?;
    s.write_all(&frame(3, 1, 1, &[0xff, 0xff, 0xff]))?;
    let mut b = [0u8; 1];
    assert!(matches!(s.read(&mut b), Ok(0) | Err(_)));
    // A frame that never completes is closed after the read timeout (1 s here).
    let mut s = connect(&broker)?;
    s.set_read_timeout(Some(Duration::from_secs(3)))?;
    s.write_all(&100i32.to_be_bytes())?;
    s.write_all(&[0, 18])?;
    let started = std::time::Instant::now();
    assert!(matches!(s.read(&mut b), Ok(0) | Err(_)));
    assert!(started.elapsed() < Duration::from_millis(2_500));
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn an_array_count_from_the_wire_does_not_reserve_memory() -> Result<()> {
    // Metadata v1 whose topic array claims 2^31-1 entries in 14 bytes: this
    // used to abort the broker (the codec reserved the whole count up front).
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path());
    let mut s = connect(&broker)?;
    s.write_all(&frame(3, 1, 5, &i32::MAX.to_be_bytes()))?;
    let mut b = [0u8; 1];
    assert!(
        matches!(s.read(&mut b), Ok(0) | Err(_)),
        "closed as malformed"
    );
    // The broker is still there.
    let mut s = connect(&broker)?;
    s.write_all(&frame(18, 0, 6, &[]))?;
    let mut r = Bytes::from(read_frame(&mut s)?);
    assert_eq!(r.get_i32(), 6);
    assert_eq!(r.get_i16(), 0);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}
