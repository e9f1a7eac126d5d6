//! Upgrade in place: a data directory written by the release before Kafka
//! batches were stored (tests/fixtures/upgrade-aa68e1f, made by that
//! release's broker: records produced over both protocols, a tombstone,
//! headers, several segments per partition, a compacted topic whose cleaner
//! left offset gaps, a group's committed offsets) opens with this broker and
//! serves every record, as that release's own consumer read them, to Flume's
//! consumer and over Kafka's Fetch; the commits are there; new appends (a
//! Kafka batch among them) go on after a restart; the active segments carry
//! the new format's header, so the older release refuses the directory
//! instead of misreading it. Each topic gets an id at the first open (a
//! `topic-id` file in its directory), the same after a restart.

use crate::common;
use crate::common::kafka::Kc;

use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};
use bytes::Bytes;
use flume_broker::{Broker, BrokerConfig};
use flume_client::{Admin, PartitionConsumer, StartOffset};
use flume_protocol::kafka_batch;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, MetadataRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

/// (partition, offset, key, value, timestamp, headers) of one record.
type Rec = (
    i32,
    u64,
    Option<String>,
    Option<String>,
    i64,
    Vec<(String, String)>,
);

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upgrade-aa68e1f")
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let target = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &target)?;
        } else {
            std::fs::copy(e.path(), &target)?;
        }
    }
    Ok(())
}

/// What the old release's `flume-cli consume --format json` printed.
fn expected(topic: &str) -> Result<Vec<Rec>> {
    let text = std::fs::read_to_string(fixture().join(format!("{topic}.expected.jsonl")))?;
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l)?;
            let s = |k: &str| v[k].as_str().map(str::to_owned);
            let mut headers: Vec<(String, String)> = v["headers"]
                .as_object()
                .context("headers")?
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect();
            headers.sort();
            Ok((
                i32::try_from(v["partition"].as_i64().context("partition")?)?,
                v["offset"].as_u64().context("offset")?,
                s("key"),
                s("value"),
                v["timestamp"].as_i64().context("timestamp")?,
                headers,
            ))
        })
        .collect()
}

fn utf8(b: Option<&[u8]>) -> Option<String> {
    b.map(|b| String::from_utf8_lossy(b).into_owned())
}

/// Every record of `topic` through Flume's consumer.
fn read_flume(addr: &str, topic: &str) -> Result<Vec<Rec>> {
    flume_rt::block_on(async {
        let admin = Admin::connect(addr).await?;
        let meta = admin.topics(&[topic.to_owned()]).await?;
        let mut out = Vec::new();
        for p in &meta[0].partitions {
            let mut c =
                PartitionConsumer::connect(addr, topic, p.partition, StartOffset::Earliest).await?;
            let mut next = u64::try_from(p.log_start)?;
            while next < u64::try_from(p.log_end)? {
                let batch = c.poll_batch().await?;
                for r in batch {
                    let mut headers: Vec<(String, String)> = r
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.key.clone(),
                                utf8(Some(h.value_bytes())).unwrap_or_default(),
                            )
                        })
                        .collect();
                    headers.sort();
                    next = r.offset + 1;
                    out.push((
                        p.partition,
                        r.offset,
                        utf8(r.key.as_deref()),
                        utf8(r.value.as_deref()),
                        r.timestamp,
                        headers,
                    ));
                }
            }
        }
        anyhow::Ok(out)
    })
}

/// Every record of `topic` through Kafka's Fetch (raw requests).
fn read_kafka(kc: &mut Kc, topic: &str, partitions: i32) -> Result<Vec<Rec>> {
    let mut out = Vec::new();
    for p in 0..partitions {
        let mut next = 0i64;
        loop {
            let req = FetchRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_max_wait_ms(0)
                .with_max_bytes(1 << 20)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
                    .with_partitions(vec![FetchPartition::default()
                        .with_partition(p)
                        .with_fetch_offset(next)
                        .with_partition_max_bytes(1 << 20)])]);
            let resp = kc.call(11, &req)?;
            let part = &resp.responses[0].partitions[0];
            ensure!(
                part.error_code == 0,
                "fetch {topic}/{p}: {}",
                part.error_code
            );
            let records: Bytes = part.records.clone().unwrap_or_default();
            if records.is_empty() {
                break;
            }
            for b in kafka_batch::batches(&records) {
                let b = b?;
                let data = b.records(1 << 24)?;
                kafka_batch::for_each_record::<kafka_batch::BatchError>(
                    &b.header,
                    &data,
                    &mut |r| {
                        let offset = b.header.base_offset + i64::from(r.offset_delta);
                        if offset >= next {
                            let mut headers: Vec<(String, String)> = r
                                .headers
                                .iter()
                                .map(|(k, v)| ((*k).to_owned(), utf8(*v).unwrap_or_default()))
                                .collect();
                            headers.sort();
                            out.push((
                                p,
                                u64::try_from(offset).unwrap_or(0),
                                utf8(r.key),
                                utf8(r.value),
                                r.timestamp,
                                headers,
                            ));
                        }
                        Ok(())
                    },
                )?;
                next = next.max(b.header.base_offset + i64::from(b.header.last_offset_delta) + 1);
            }
            if next >= part.high_watermark {
                break;
            }
        }
    }
    Ok(out)
}

/// Every topic's (name, id) by Metadata v12, by name.
fn topic_ids(kc: &mut Kc) -> Result<Vec<(String, uuid::Uuid)>> {
    let mut ids: Vec<(String, uuid::Uuid)> = kc
        .call(12, &MetadataRequest::default().with_topics(None))?
        .topics
        .iter()
        .map(|t| {
            let n = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
            (n, t.topic_id)
        })
        .collect();
    ids.sort();
    Ok(ids)
}

fn config(dir: &Path) -> BrokerConfig {
    let mut c = common::config(dir);
    c.kafka_listen = Some("127.0.0.1:0".into());
    c
}

fn header(path: &Path) -> Result<Vec<u8>> {
    Ok(std::fs::read(path)?.get(..8).context("a header")?.to_vec())
}

#[test]
fn a_data_directory_of_the_previous_release_opens_and_serves_everything() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("data");
    copy_dir(&fixture().join("data"), &data)?;
    let (orders, compacted) = (expected("orders")?, expected("compacted")?);
    ensure!(orders.len() == 81 && compacted.len() == 12, "the fixture");
    ensure!(
        compacted.windows(2).any(|w| w[1].1 > w[0].1 + 1),
        "the fixture's compacted topic has gaps"
    );
    let broker = flume_rt::block_on(Broker::start(config(&data)))?;
    let addr = broker.local_addr().to_string();
    let mut kc = Kc::connect(&broker.kafka_addr().context("kafka")?.to_string())?;
    for (topic, want, partitions) in [("orders", &orders, 3), ("compacted", &compacted, 1)] {
        let mut flume = read_flume(&addr, topic)?;
        flume.sort();
        let mut want = want.clone();
        want.sort();
        ensure!(flume == want, "{topic} through Flume's protocol: {flume:?}");
        let mut kafka = read_kafka(&mut kc, topic, partitions)?;
        kafka.sort();
        ensure!(kafka == want, "{topic} through Kafka's protocol");
    }
    // Topics of a release before topic ids get one at the first open, kept
    // in their directories.
    let ids = topic_ids(&mut kc)?;
    ensure!(
        ids.len() == 2 && ids.iter().all(|(_, id)| !id.is_nil()) && ids[0].1 != ids[1].1,
        "{ids:?}"
    );
    for (topic, id) in &ids {
        let on_disk = std::fs::read_to_string(data.join(topic).join("topic-id"))?;
        ensure!(on_disk == format!("{id}\n"), "{topic}: {on_disk:?}");
    }
    // The group's commits are there.
    let committed = flume_rt::block_on(async {
        Admin::connect(&addr)
            .await?
            .group_offsets("billing", &["orders".to_owned()])
            .await
    })?;
    let mut c: Vec<(i32, i64)> = committed
        .iter()
        .map(|p| (p.partition, p.committed))
        .collect();
    c.sort_unstable();
    ensure!(c == vec![(0, 9), (1, 11), (2, 5)], "{c:?}");

    // New appends over both protocols, then a restart: everything is still there.
    let before = read_flume(&addr, "orders")?.len();
    flume_rt::block_on(async {
        let p = flume_client::Producer::connect(&addr).await?;
        p.send("orders", Some(b"after-upgrade"), b"flume").await?;
        anyhow::Ok(())
    })?;
    let mut b = kafka_batch::BatchBuilder::new(None);
    b.push(
        0,
        1_800_000_000_000,
        Some(b"k"),
        Some(b"kafka after upgrade"),
        [],
    );
    let batch = b.finish(
        &kafka_batch::BatchMeta::default(),
        kafka_batch::Compression::Lz4,
    )?;
    let req = kafka_protocol::messages::ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5_000)
        .with_topic_data(vec![
            kafka_protocol::messages::produce_request::TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_static_str("orders")))
                .with_partition_data(vec![
                    kafka_protocol::messages::produce_request::PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(Bytes::from(batch))),
                ]),
        ]);
    let resp = kc.call(9, &req)?;
    ensure!(resp.responses[0].partition_responses[0].error_code == 0);
    flume_rt::block_on(broker.shutdown());
    let broker = flume_rt::block_on(Broker::start(config(&data)))?;
    let addr = broker.local_addr().to_string();
    let after = read_flume(&addr, "orders")?;
    ensure!(after.len() == before + 2, "{} then {}", before, after.len());
    let mut kc = Kc::connect(&broker.kafka_addr().context("kafka")?.to_string())?;
    ensure!(topic_ids(&mut kc)? == ids, "the same ids after a restart");
    drop(kc);
    ensure!(after
        .iter()
        .any(|r| r.3.as_deref() == Some("kafka after upgrade")));
    flume_rt::block_on(broker.shutdown());
    // Every partition's newest segment now has the version 2 header; the
    // previous release reads only version 1 and refuses such a file.
    for topic in ["orders", "compacted"] {
        for p in std::fs::read_dir(data.join(topic))? {
            let p = p?.path();
            if !p.is_dir() {
                continue;
            }
            let mut logs: Vec<PathBuf> = std::fs::read_dir(&p)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "log"))
                .collect();
            logs.sort();
            let newest = logs.last().context("a segment")?;
            ensure!(header(newest)? == b"FLMLOG\x00\x02", "{}", newest.display());
        }
    }
    Ok(())
}
