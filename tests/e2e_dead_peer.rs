//! A client that dies (or half-closes) while its requests wait: the broker
//! notices the peer closing at once, on both listeners, drops what waits on
//! others (a parked fetch) and releases its memory; a half-closed peer still
//! gets the answers that need no waiting.

use crate::common;

use std::net::Shutdown;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use bytes::{BufMut, BytesMut};
use flume_broker::{Broker, BrokerConfig};
use flume_protocol::{self as protocol, frame, FetchPartition, FetchRequest, MetadataRequest};
use flume_rt::{self as rt, TcpStream};
use futures::io::{AsyncReadExt, AsyncWriteExt};
use kafka_protocol::messages::{fetch_request, ApiKey, RequestHeader, TopicName};
use kafka_protocol::protocol::{Encodable, StrBytes};

/// Far beyond the time the broker needs to notice a closed peer, far below
/// the parked fetches' 30 s wait.
const NOTICED_WITHIN: Duration = Duration::from_secs(5);

fn config(dir: &std::path::Path) -> BrokerConfig {
    let mut c = common::config(dir);
    c.kafka_listen = Some("127.0.0.1:0".into());
    c
}

async fn start(c: BrokerConfig) -> Result<Broker> {
    let broker = Broker::start(c).await.context("broker starts")?;
    broker
        .engine()
        .records()
        .create_topic("empty", common::topic(1))
        .context("topic created")?;
    Ok(broker)
}

/// A FETCH of the empty topic that parks for up to 30 s.
fn parked_fetch(out: &mut Vec<u8>, id: i32) {
    protocol::encode_request(
        out,
        id,
        &FetchRequest {
            max_wait_ms: 30_000,
            min_bytes: 1,
            max_bytes: 1 << 20,
            partitions: vec![FetchPartition {
                topic: "empty".into(),
                partition: 0,
                offset: 0,
                max_bytes: 1 << 20,
            }],
        },
    );
}

/// Waits until the broker has charged what `flume` (or Kafka) serves: the
/// requests sent are admitted and parked.
async fn wait_parked(broker: &Broker, kafka: bool) {
    common::wait_until("the requests parked", NOTICED_WITHIN, || async {
        let used = if kafka {
            broker.kafka_request_memory().map_or(0, |m| m.used)
        } else {
            broker.request_memory().used
        };
        used > 0
    })
    .await;
}

/// Waits until the listener has no connection open and no request memory charged.
async fn wait_released(broker: &Broker, kafka: bool) {
    common::wait_until(
        "the dead peer's connection closed and its memory released",
        NOTICED_WITHIN,
        || async {
            if kafka {
                broker.kafka_connection_count() == 0
                    && broker.kafka_request_memory().is_some_and(|m| m.used == 0)
            } else {
                broker.connection_count() == 0 && broker.request_memory().used == 0
            }
        },
    )
    .await;
}

/// Reads response frames until EOF (or a reset) and returns their request ids,
/// failing if the broker does not close within [`NOTICED_WITHIN`].
async fn ids_until_closed(s: &mut TcpStream) -> Result<Vec<i32>> {
    let mut got = Vec::new();
    let mut ids = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        while let Ok(frame::Decoded::Frame(f, used)) = frame::decode_response(&got, 64 << 20) {
            ids.push(f.request_id);
            got.drain(..used);
        }
        match rt::timeout(NOTICED_WITHIN, s.read(&mut chunk)).await {
            None => anyhow::bail!("the broker did not close the half-closed connection"),
            Some(Ok(0)) => return Ok(ids),
            Some(Ok(n)) => got.extend_from_slice(&chunk[..n]),
            Some(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(ids),
            Some(Err(e)) => return Err(e).context("read responses"),
        }
    }
}

#[test]
fn a_dead_peer_with_a_parked_fetch_is_closed_at_once() -> Result<()> {
    rt::block_on(async {
        let dir = tempfile::tempdir()?;
        let broker = start(config(dir.path())).await?;
        let mut s = TcpStream::connect(&broker.local_addr().to_string()).await?;
        let mut frames = Vec::new();
        parked_fetch(&mut frames, 1);
        s.write_all(&frames).await?;
        wait_parked(&broker, false).await;
        ensure!(broker.connection_count() == 1);
        drop(s);
        wait_released(&broker, false).await;
        broker.shutdown().await;
        Ok(())
    })
}

#[test]
fn a_dead_peer_past_its_in_flight_limit_is_closed_at_once() -> Result<()> {
    // Two fetches take both places; the third frame waits for one, so the
    // connection is not reading requests when the peer goes.
    rt::block_on(async {
        let dir = tempfile::tempdir()?;
        let mut c = config(dir.path());
        c.max_in_flight_per_connection = 2;
        let broker = start(c).await?;
        let mut s = TcpStream::connect(&broker.local_addr().to_string()).await?;
        let mut frames = Vec::new();
        for id in 1..=3 {
            parked_fetch(&mut frames, id);
        }
        s.write_all(&frames).await?;
        wait_parked(&broker, false).await;
        drop(s);
        wait_released(&broker, false).await;
        broker.shutdown().await;
        Ok(())
    })
}

#[test]
fn a_half_closed_peer_gets_the_answers_that_need_no_wait() -> Result<()> {
    // One place in flight, taken by a parked fetch; a METADATA behind it is
    // read but not admitted when the peer shuts down its write side. The
    // fetch is dropped, the METADATA answered, then the connection closes.
    rt::block_on(async {
        let dir = tempfile::tempdir()?;
        let mut c = config(dir.path());
        c.max_in_flight_per_connection = 1;
        let broker = start(c).await?;
        let mut s = TcpStream::connect(&broker.local_addr().to_string()).await?;
        let mut frames = Vec::new();
        parked_fetch(&mut frames, 1);
        s.write_all(&frames).await?;
        wait_parked(&broker, false).await;
        let mut frames = Vec::new();
        protocol::encode_request(
            &mut frames,
            2,
            &MetadataRequest {
                topics: vec!["empty".into()],
            },
        );
        s.write_all(&frames).await?;
        s.shutdown(Shutdown::Write)?;
        let ids = ids_until_closed(&mut s).await?;
        ensure!(
            ids == vec![2],
            "answered {ids:?}, want only the METADATA (2)"
        );
        wait_released(&broker, false).await;
        broker.shutdown().await;
        Ok(())
    })
}

/// A Kafka frame: size, header v1 (client id "dead"), body.
fn kafka_frame(key: ApiKey, version: i16, correlation: i32, body: &[u8]) -> Result<Vec<u8>> {
    let mut f = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation)
        .with_client_id(Some(StrBytes::from_static_str("dead")))
        .encode(&mut f, 1)?;
    f.extend_from_slice(body);
    let mut out = Vec::new();
    out.put_i32(i32::try_from(f.len())?);
    out.extend_from_slice(&f);
    Ok(out)
}

/// A Kafka Fetch v4 of the empty topic that parks for up to 30 s.
fn kafka_parked_fetch(correlation: i32) -> Result<Vec<u8>> {
    let req = kafka_protocol::messages::FetchRequest::default()
        .with_max_wait_ms(30_000)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_topics(vec![fetch_request::FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str("empty")))
            .with_partitions(vec![fetch_request::FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)])]);
    let mut body = BytesMut::new();
    req.encode(&mut body, 4)?;
    kafka_frame(ApiKey::Fetch, 4, correlation, &body)
}

#[test]
fn a_dead_kafka_peer_with_a_parked_fetch_is_closed_at_once() -> Result<()> {
    rt::block_on(async {
        let dir = tempfile::tempdir()?;
        let broker = start(config(dir.path())).await?;
        let addr = broker.kafka_addr().context("kafka listener")?;
        let mut s = TcpStream::connect(&addr.to_string()).await?;
        s.write_all(&kafka_parked_fetch(1)?).await?;
        wait_parked(&broker, true).await;
        ensure!(broker.kafka_connection_count() == 1);
        drop(s);
        wait_released(&broker, true).await;
        broker.shutdown().await;
        Ok(())
    })
}

#[test]
fn a_half_closed_kafka_peer_gets_the_answer_in_progress_and_no_wait() -> Result<()> {
    // ApiVersions is answered; the Fetch behind it parks and is dropped when
    // the peer shuts down its write side; the connection closes at once.
    rt::block_on(async {
        let dir = tempfile::tempdir()?;
        let broker = start(config(dir.path())).await?;
        let addr = broker.kafka_addr().context("kafka listener")?;
        let mut s = TcpStream::connect(&addr.to_string()).await?;
        let mut frames = kafka_frame(ApiKey::ApiVersions, 0, 1, &[])?;
        frames.extend(kafka_parked_fetch(2)?);
        s.write_all(&frames).await?;
        wait_parked(&broker, true).await;
        s.shutdown(Shutdown::Write)?;
        let mut got = Vec::new();
        match rt::timeout(NOTICED_WITHIN, s.read_to_end(&mut got)).await {
            None => anyhow::bail!("the broker did not close the half-closed connection"),
            Some(Ok(_)) => {}
            Some(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Some(Err(e)) => return Err(e).context("read responses"),
        }
        // One response: ApiVersions' (size, then correlation id 1).
        let size = got.first_chunk::<4>().map(|b| i32::from_be_bytes(*b));
        let size = usize::try_from(size.context("no response")?)?;
        ensure!(
            got.len() == 4 + size,
            "{} bytes: more than one response",
            got.len()
        );
        ensure!(got.get(4..8) == Some(&1i32.to_be_bytes()[..]));
        wait_released(&broker, true).await;
        broker.shutdown().await;
        Ok(())
    })
}

#[test]
fn requests_pipelined_past_the_in_flight_limit_are_all_answered() -> Result<()> {
    // One place in flight: each METADATA behind the first is admitted when the
    // one before it has been answered, though the peer sends nothing more.
    rt::block_on(async {
        let dir = tempfile::tempdir()?;
        let mut c = config(dir.path());
        c.max_in_flight_per_connection = 1;
        let broker = start(c).await?;
        let mut s = TcpStream::connect(&broker.local_addr().to_string()).await?;
        let mut frames = Vec::new();
        for id in 1..=3 {
            protocol::encode_request(
                &mut frames,
                id,
                &MetadataRequest {
                    topics: vec!["empty".into()],
                },
            );
        }
        s.write_all(&frames).await?;
        let (mut got, mut ids) = (Vec::new(), Vec::new());
        let mut chunk = vec![0u8; 64 * 1024];
        while ids.len() < 3 {
            let n = rt::timeout(NOTICED_WITHIN, s.read(&mut chunk))
                .await
                .with_context(|| format!("answered in time (got {ids:?})"))??;
            ensure!(n > 0, "closed after {ids:?}");
            got.extend_from_slice(&chunk[..n]);
            while let Ok(frame::Decoded::Frame(f, used)) = frame::decode_response(&got, 1 << 20) {
                ids.push(f.request_id);
                got.drain(..used);
            }
        }
        ensure!(ids == vec![1, 2, 3], "answered {ids:?}");
        broker.shutdown().await;
        Ok(())
    })
}

/// Connections that close leave their buffers in the allocator (glibc keeps
/// what it freed): after a wave of them the broker hands the freed memory back
/// to the system, soon after the wave (`flume_broker::allocator_trims`).
#[test]
fn a_wave_of_closed_connections_hands_its_memory_back() -> Result<()> {
    // The trim waits until the process's open connections are down to half their
    // peak: not beside the tests that hold hundreds at once.
    let _alone = common::exclusive();
    rt::block_on(async {
        let dir = tempfile::tempdir()?;
        let broker = start(config(dir.path())).await?;
        let before = flume_broker::allocator_trims();
        let addr = broker.local_addr().to_string();
        let mut wave = Vec::new();
        for id in 0..100 {
            // Each connection is used (one METADATA answered) before it closes.
            let mut s = TcpStream::connect(&addr).await?;
            let mut out = Vec::new();
            protocol::encode_request(&mut out, id, &MetadataRequest { topics: vec![] });
            s.write_all(&out).await?;
            let mut head = [0u8; 8];
            s.read_exact(&mut head).await?;
            let size = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
            let answered = i32::from_be_bytes([head[4], head[5], head[6], head[7]]);
            ensure!(answered == id, "answer {answered} to request {id}");
            let mut body = vec![0u8; size.saturating_sub(4)];
            s.read_exact(&mut body).await?;
            wave.push(s);
        }
        drop(wave);
        common::wait_until(
            "the freed memory handed back after the wave",
            Duration::from_secs(30),
            || async { broker.connection_count() == 0 && flume_broker::allocator_trims() > before },
        )
        .await;
        broker.shutdown().await;
        Ok(())
    })
}
