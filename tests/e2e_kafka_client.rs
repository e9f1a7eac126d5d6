//! The SDK's Kafka client (`kafka://` addresses) against Flume's own Kafka
//! listener, in process: the same SDK calls as over Flume's protocol, only
//! the address changes; and records crossing between the two protocols.

use crate::common;

use std::time::Duration;

use anyhow::{Context, Result};
use flume_broker::Broker;
use flume_client::{
    Admin, Compression, CreateTopicRequest, ErrorCode, GroupConsumer, PartitionConsumer,
    Partitioner, Producer, ProducerConfig, ProducerRecord, RebalanceEvent, StartOffset,
};
use futures::FutureExt;

/// A broker with both listeners: (broker, "kafka://host:port", "host:port").
fn start(dir: &std::path::Path) -> (Broker, String, String) {
    let mut c = common::config(dir);
    c.kafka_listen = Some("127.0.0.1:0".into());
    let broker = flume_rt::block_on(Broker::start(c)).expect("broker starts");
    let kafka = format!(
        "kafka://{}",
        broker.kafka_addr().expect("the Kafka listener")
    );
    let native = broker.local_addr().to_string();
    (broker, kafka, native)
}

/// Topics through the admin over Kafka: create (with configs), list with
/// offsets, describe configs, delete; a second create is refused with the
/// code Flume's own protocol gives.
#[test]
fn admin_over_kafka_creates_describes_and_deletes_topics() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (broker, kafka, _) = start(dir.path());
    flume_rt::block_on(async {
        let admin = Admin::connect(&kafka).await?;
        admin
            .create_topic(CreateTopicRequest {
                name: "ka".into(),
                partitions: 3,
                ..CreateTopicRequest::default()
            })
            .await?;
        let again = admin
            .create_topic(CreateTopicRequest {
                name: "ka".into(),
                partitions: 3,
                ..CreateTopicRequest::default()
            })
            .await
            .expect_err("exists");
        assert_eq!(again.code(), Some(ErrorCode::TopicAlreadyExists), "{again}");
        let made = admin
            .create_topic_with_configs("kb", 2, &[("retention.ms", "60000")])
            .await?;
        assert_eq!(made.partitions, 2);
        let described = admin.describe_topic_configs("kb").await?;
        let retention = described
            .configs
            .iter()
            .find(|c| c.name == "retention.ms")
            .context("retention.ms described")?;
        assert_eq!(retention.value, "60000");
        assert_eq!(retention.source, flume_client::CONFIG_SOURCE_TOPIC);
        let topics = admin.topics(&[]).await?;
        let names: Vec<&str> = topics.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["ka", "kb"]);
        assert_eq!(topics[0].partitions.len(), 3);
        assert!(topics[0]
            .partitions
            .iter()
            .all(|p| p.log_start == 0 && p.log_end == 0));
        admin.delete_topic("ka").await?;
        let gone = admin.delete_topic("ka").await.expect_err("deleted");
        assert_eq!(gone.code(), Some(ErrorCode::UnknownTopic), "{gone}");
        admin.close().await;
        anyhow::Ok(())
    })?;
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

/// Reads `n` records of `topic`/`partition` from the start through `addr`.
async fn read_partition(
    addr: &str,
    topic: &str,
    partition: i32,
    n: usize,
) -> Result<Vec<flume_client::Record>> {
    let mut c = PartitionConsumer::connect(addr, topic, partition, StartOffset::Earliest).await?;
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while out.len() < n {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "read {} of {n} records of {topic}/{partition} through {addr}",
            out.len()
        );
        out.extend(c.poll_batch().await?);
    }
    Ok(out)
}

/// The same producer program over Kafka and over Flume's protocol: keyed
/// records land on the same partitions (FNV-1a), at the offsets the
/// producer reports, readable through both protocols with keys, values,
/// headers and timestamps intact; each codec; murmur2 routes as the Java
/// client does; idempotent batches are not appended twice.
#[test]
fn producer_over_kafka_routes_like_flume_and_both_protocols_read_it() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (broker, kafka, native) = start(dir.path());
    flume_rt::block_on(async {
        let admin = Admin::connect(&native).await?;
        for t in ["over-kafka", "over-flume"] {
            admin
                .create_topic(CreateTopicRequest {
                    name: t.into(),
                    partitions: 4,
                    ..CreateTopicRequest::default()
                })
                .await?;
        }
        let mut placed = Vec::new();
        for (addr, topic) in [(&kafka, "over-kafka"), (&native, "over-flume")] {
            let config = ProducerConfig::default().linger(Duration::from_millis(2));
            let producer = Producer::with_config(addr, config).await?;
            let mut deliveries = Vec::new();
            for i in 0..200 {
                let rec = ProducerRecord::new(topic, format!("value-{i}"))
                    .key(format!("key-{}", i % 17))
                    .header("h", format!("{i}"))
                    .timestamp(1_700_000_000_000 + i);
                deliveries.push(producer.enqueue(rec).await?);
            }
            let mut metas = Vec::new();
            for d in deliveries {
                metas.push(d.await?);
            }
            producer.close().await;
            placed.push(metas);
        }
        let parts = |m: &Vec<flume_client::RecordMetadata>| -> Vec<i32> {
            m.iter().map(|r| r.partition).collect()
        };
        assert_eq!(
            parts(&placed[0]),
            parts(&placed[1]),
            "keys land on the same partitions"
        );
        // Read back through both protocols, in order per partition.
        for addr in [&kafka, &native] {
            for p in 0..4 {
                let want: Vec<usize> = (0..200).filter(|i| placed[0][*i].partition == p).collect();
                let got = read_partition(addr, "over-kafka", p, want.len()).await?;
                assert_eq!(got.len(), want.len(), "{addr} p{p}");
                for (r, i) in got.iter().zip(&want) {
                    assert_eq!(r.payload(), format!("value-{i}").as_bytes(), "{addr} p{p}");
                    assert_eq!(r.key.as_deref(), Some(format!("key-{}", i % 17).as_bytes()));
                    assert_eq!(r.offset, u64::try_from(placed[0][*i].offset)?);
                    assert_eq!(r.timestamp, 1_700_000_000_000 + i64::try_from(*i)?);
                    assert_eq!(r.headers.len(), 1);
                    assert_eq!(
                        r.headers[0].value.as_deref(),
                        Some(format!("{i}").as_bytes())
                    );
                }
            }
        }
        // A batch per record: each partition's batches go in successive
        // requests (one batch per partition per request), offsets in order.
        let producer =
            Producer::with_config(&kafka, ProducerConfig::default().batch_max_bytes(1)).await?;
        let mut deliveries = Vec::new();
        for i in 0..50 {
            deliveries.push(
                producer
                    .enqueue(ProducerRecord::new("over-kafka", format!("{i}")).partition(3))
                    .await?,
            );
        }
        let mut last = -1;
        for d in deliveries {
            let m = d.await?;
            assert_eq!(m.partition, 3);
            assert!(m.offset > last, "offset {} after {last}", m.offset);
            last = m.offset;
        }
        producer.close().await;
        // Each codec, and murmur2 (the Java client's partition of "foobar" of 10 is 6).
        admin
            .create_topic(CreateTopicRequest {
                name: "codecs".into(),
                partitions: 10,
                ..CreateTopicRequest::default()
            })
            .await?;
        for c in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let config = ProducerConfig::default()
                .compression(c)
                .partitioner(Partitioner::Murmur2)
                .linger(Duration::from_millis(2));
            let producer = Producer::with_config(&kafka, config).await?;
            let m = producer
                .send(
                    "codecs",
                    Some(b"foobar"),
                    format!("{c:?} ").repeat(50).as_bytes(),
                )
                .await?;
            assert_eq!(m.partition, 6, "{c:?}");
            producer.close().await;
        }
        let got = read_partition(&native, "codecs", 6, 5).await?;
        assert!(got[4].payload().starts_with(b"Zstd "));
        anyhow::Ok(())
    })?;
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

/// A group of two SDK members over Kafka splits the partitions, reads
/// every record once, commits, and a member that leaves hands its
/// partitions over; a new member resumes from the commits.
#[test]
fn group_over_kafka_splits_commits_and_resumes() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (broker, kafka, native) = start(dir.path());
    flume_rt::block_on(async {
        let admin = Admin::connect(&kafka).await?;
        admin
            .create_topic(CreateTopicRequest {
                name: "g".into(),
                partitions: 4,
                ..CreateTopicRequest::default()
            })
            .await?;
        let producer = Producer::connect(&kafka).await?;
        for i in 0..40 {
            producer
                .send(
                    "g",
                    Some(format!("k{i}").as_bytes()),
                    format!("v{i}").as_bytes(),
                )
                .await?;
        }
        let build = |assignor: &str| {
            GroupConsumer::builder(&kafka, "grp")
                .topic("g")
                .assignor(assignor)
                .session_timeout(Duration::from_secs(6))
                .heartbeat_interval(Duration::from_millis(100))
                .max_wait(Duration::from_millis(100))
                .auto_commit(false)
                .build()
        };
        let mut a = build("cooperative-sticky").await?;
        let events_a = a.events();
        assert_eq!(a.assignment().await.len(), 4);
        // The second member joins while the first reads (a member rejoins
        // in its `recv`, as Kafka's consumers do in `poll`).
        let mut seen = std::collections::BTreeSet::new();
        let joining = build("cooperative-sticky");
        futures::pin_mut!(joining);
        let mut b = loop {
            futures::select! {
                b = joining.as_mut().fuse() => break b?,
                r = a.recv().fuse() => {
                    let r = r.context("open")??;
                    assert!(seen.insert(r.payload().to_vec()), "a record twice");
                    a.commit(&r).await?;
                }
            }
        };
        // Both members read until every record is seen once; the split settles.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while seen.len() < 40 || a.assignment().await.is_empty() || b.assignment().await.is_empty()
        {
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "saw {} of 40",
                seen.len()
            );
            for c in [&mut a, &mut b] {
                if let Some(Ok(r)) = flume_rt::timeout(Duration::from_millis(200), c.recv())
                    .await
                    .flatten()
                {
                    assert!(seen.insert(r.payload().to_vec()), "a record twice");
                    c.commit(&r).await?;
                }
            }
        }
        let (pa, pb) = (a.assignment().await, b.assignment().await);
        assert_eq!(pa.len() + pb.len(), 4, "{pa:?} {pb:?}");
        assert!(!pa.is_empty() && !pb.is_empty(), "{pa:?} {pb:?}");
        let revoked: Vec<RebalanceEvent> = std::iter::from_fn(|| events_a.try_recv()).collect();
        assert!(
            revoked
                .iter()
                .any(|e| matches!(e, RebalanceEvent::Revoked(p) if !p.is_empty())),
            "{revoked:?}"
        );
        b.close().await?;
        a.close().await?;
        // Offsets are Kafka's and Flume's alike: the group is caught up on both.
        for addr in [&kafka, &native] {
            let offsets = Admin::connect(addr)
                .await?
                .group_offsets("grp", &["g".to_string()])
                .await?;
            assert_eq!(offsets.len(), 4, "{addr}");
            assert!(
                offsets.iter().all(|o| o.committed == o.log_end),
                "{addr}: {offsets:?}"
            );
        }
        // A new member resumes after the commits: only new records.
        producer.send("g", Some(b"late"), b"late").await?;
        let mut c = build("range").await?;
        let r = flume_rt::timeout(Duration::from_secs(20), c.recv())
            .await
            .context("a record")?
            .context("open")??;
        assert_eq!(r.payload(), b"late");
        c.close().await?;
        producer.close().await;
        anyhow::Ok(())
    })?;
    flume_rt::block_on(broker.shutdown());
    Ok(())
}
