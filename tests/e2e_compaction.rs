//! Log compaction end to end: a topic created with `cleanup.policy=compact`
//! through the SDK, many values per key and tombstones produced with the
//! SDK, the broker's own cleaner (its ticker, no test hook), then what every
//! reader sees: the Flume consumer, a Kafka client (rskafka) and a restarted
//! broker all get the newest value of each key and the tombstones, at their
//! original offsets, with the gaps the cleaner left. Keyless records are
//! refused on a compacted topic, as Kafka refuses them.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use flume_broker::Broker;
use flume_client::{Admin, PartitionConsumer, Producer, StartOffset};
use rskafka::client::partition::UnknownTopicHandling;
use rskafka::client::ClientBuilder;

/// (offset, key, value: None for a tombstone)
type Seen = Vec<(u64, String, Option<String>)>;

fn start(dir: &std::path::Path) -> Broker {
    let mut c = common::config(dir);
    c.kafka_listen = Some("127.0.0.1:0".into());
    c.maintenance_interval = Duration::from_millis(50);
    flume_rt::block_on(Broker::start(c)).expect("broker starts")
}

/// Every record of partition 0 of `topic`, from the start, through the SDK.
async fn read_all(addr: &str, topic: &str) -> Result<Seen> {
    let admin = Admin::connect(addr).await?;
    let end = admin.topics(&[topic.to_owned()]).await?[0].partitions[0].log_end;
    let mut c = PartitionConsumer::connect(addr, topic, 0, StartOffset::Earliest).await?;
    let mut out = Seen::new();
    while out.last().map_or(0, |r| r.0 + 1) < u64::try_from(end)? {
        let batch = c.poll_batch().await?;
        for r in batch {
            let key = String::from_utf8(r.key.clone().context("a key")?.to_vec())?;
            let value = r
                .value
                .as_ref()
                .map(|v| String::from_utf8_lossy(v).into_owned());
            out.push((r.offset, key, value));
        }
    }
    Ok(out)
}

#[test]
fn a_compacted_topic_keeps_the_newest_value_of_each_key_at_its_offset() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path());
    let addr = broker.local_addr().to_string();
    let kafka = broker.kafka_addr().context("kafka listener")?.to_string();
    let mut sent: BTreeMap<u64, (String, Option<String>)> = BTreeMap::new();
    flume_rt::block_on(async {
        let admin = Admin::connect(&addr).await?;
        admin
            .create_topic_with_configs(
                "changelog",
                1,
                &[
                    ("cleanup.policy", "compact"),
                    ("segment.bytes", "1024"),
                    ("min.cleanable.dirty.ratio", "0.01"),
                ],
            )
            .await?;
        let p = Producer::connect(&addr).await?;
        for round in 0..20 {
            for k in 0..5 {
                let (key, value) = (format!("key-{k}"), format!("v{round}"));
                let m = p
                    .send("changelog", Some(key.as_bytes()), value.as_bytes())
                    .await?;
                sent.insert(u64::try_from(m.offset)?, (key, Some(value)));
            }
        }
        for k in [3, 4] {
            let key = format!("key-{k}");
            let m = p.send_tombstone("changelog", key.as_bytes()).await?;
            sent.insert(u64::try_from(m.offset)?, (key, None));
        }
        // Records of another key roll the segments on, so that everything
        // above is in sealed segments the cleaner may clean.
        for i in 0..60 {
            let m = p
                .send("changelog", Some(b"filler"), format!("f{i}").as_bytes())
                .await?;
            sent.insert(
                u64::try_from(m.offset)?,
                ("filler".into(), Some(format!("f{i}"))),
            );
        }
        // A keyless record has nothing to be compacted by: refused.
        let keyless = p.send("changelog", None, b"no key").await;
        assert!(keyless.is_err(), "a keyless record was taken: {keyless:?}");
        p.close().await;
        anyhow::Ok(())
    })?;
    // The cleaner runs on the broker's ticker: wait for it (with a deadline).
    let newest: BTreeMap<&str, u64> = sent.iter().map(|(o, (k, _))| (k.as_str(), *o)).collect();
    let mut seen = Seen::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        seen = flume_rt::block_on(read_all(&addr, "changelog"))?;
        if seen.iter().filter(|r| r.1.starts_with("key-")).count() == 5 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let totals = broker.engine().metrics().cleaner.totals();
    println!(
        "cleaner: {totals:?}; {} of {} records left",
        seen.len(),
        sent.len()
    );
    assert!(totals.passes > 0, "{totals:?}");
    // Each of the five keys once, with its newest value (key-3 and key-4 as
    // tombstones); every record at the offset it was given; nothing invented.
    for k in 0..5 {
        let key = format!("key-{k}");
        let left: Vec<_> = seen.iter().filter(|r| r.1 == key).collect();
        assert_eq!(left.len(), 1, "{key}: {left:?}");
        assert_eq!(
            left[0].0,
            newest[key.as_str()],
            "{key} at its newest offset"
        );
        let want = if k >= 3 { None } else { Some("v19".to_owned()) };
        assert_eq!(left[0].2, want, "{key}");
    }
    for r in &seen {
        assert_eq!(
            sent.get(&r.0),
            Some(&(r.1.clone(), r.2.clone())),
            "offset {} kept its record",
            r.0
        );
    }
    assert!(seen.len() < sent.len());
    assert!(
        seen[0].0 > 0,
        "the first offsets were cleaned away: a gap at the start"
    );
    // A Kafka client reads the same records at the same offsets.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let via_kafka: Seen = rt.block_on(async {
        let client = ClientBuilder::new(vec![kafka]).build().await?;
        let pc = client
            .partition_client("changelog", 0, UnknownTopicHandling::Error)
            .await?;
        let mut out = Seen::new();
        let mut next = 0i64;
        while out.len() < seen.len() {
            let (batch, _) = pc.fetch_records(next, 1..1_000_000, 1_000).await?;
            for r in batch {
                next = r.offset + 1;
                let key = String::from_utf8(r.record.key.unwrap_or_default())?;
                let value = r
                    .record
                    .value
                    .map(|v| String::from_utf8_lossy(&v).into_owned());
                out.push((u64::try_from(r.offset)?, key, value));
            }
        }
        anyhow::Ok(out)
    })?;
    assert_eq!(via_kafka, seen);
    flume_rt::block_on(broker.shutdown());
    // After a restart (every sealed segment verified on open) the same.
    let mut c = common::config(dir.path());
    c.verify_on_open = true;
    let broker = flume_rt::block_on(Broker::start(c))?;
    let again = flume_rt::block_on(read_all(&broker.local_addr().to_string(), "changelog"))?;
    assert_eq!(again, seen);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}
