//! The Kafka listener's admin APIs with an independent Kafka client
//! (rskafka): ListOffsets by timestamp and DeleteTopics, with the engine's
//! effects checked through the Flume side.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use flume_broker::Broker;
use rskafka::client::partition::{Compression, OffsetAt, UnknownTopicHandling};
use rskafka::client::ClientBuilder;
use rskafka::record::Record;

fn start(dir: &std::path::Path) -> Broker {
    let mut c = common::config(dir);
    c.kafka_listen = Some("127.0.0.1:0".into());
    c.read_timeout = Duration::from_secs(1);
    flume_rt::block_on(Broker::start(c)).expect("broker starts")
}

fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).expect("valid timestamp")
}

fn record(ts: i64) -> Record {
    Record {
        key: None,
        value: Some(format!("at {ts}").into_bytes()),
        headers: BTreeMap::new(),
        timestamp: at(ts),
    }
}

#[test]
fn list_offsets_by_timestamp_and_delete_topics() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path());
    let kafka = broker.kafka_addr().context("kafka listener")?.to_string();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let client = ClientBuilder::new(vec![kafka.clone()]).build().await?;
        let controller = client.controller_client()?;
        controller.create_topic("kt", 1, 1, 5_000).await?;
        let pc = client
            .partition_client("kt", 0, UnknownTopicHandling::Error)
            .await?;
        // Timestamps out of order, as several producers' clocks give them.
        let batch = [1_000, 3_000, 2_000, 4_000].map(record).to_vec();
        pc.produce(batch, Compression::NoCompression).await?;
        for (ts, want) in [
            (0, 0),
            (1_000, 0),
            (1_001, 1),
            (2_500, 1),
            (3_001, 3),
            (4_000, 3),
        ] {
            assert_eq!(
                pc.get_offset(OffsetAt::Timestamp(at(ts))).await?,
                want,
                "time {ts}"
            );
        }
        // No record that recent: -1, as Kafka answers.
        assert_eq!(pc.get_offset(OffsetAt::Timestamp(at(9_000))).await?, -1);
        assert_eq!(pc.get_offset(OffsetAt::Earliest).await?, 0);
        assert_eq!(pc.get_offset(OffsetAt::Latest).await?, 4);

        controller.delete_topic("kt", 5_000).await?;
        let topics = client.list_topics().await?;
        assert!(topics.iter().all(|t| t.name != "kt"), "{topics:?}");
        assert!(
            controller.delete_topic("kt", 5_000).await.is_err(),
            "a second delete is an error"
        );
        anyhow::Ok(())
    })?;
    assert!(broker.engine().records().topic("kt").is_none());
    assert!(!dir.path().join("kt").exists());
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn delete_records_moves_the_log_start_durably() -> Result<()> {
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    use kafka_protocol::messages::{DeleteRecordsRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path());
    let kafka = broker.kafka_addr().context("kafka listener")?.to_string();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let client = ClientBuilder::new(vec![kafka.clone()]).build().await?;
        client
            .controller_client()?
            .create_topic("dr", 1, 1, 5_000)
            .await?;
        let pc = client
            .partition_client("dr", 0, UnknownTopicHandling::Error)
            .await?;
        pc.produce((0..10).map(record).collect(), Compression::NoCompression)
            .await?;
        pc.delete_records(4, 5_000).await?;
        assert_eq!(pc.get_offset(OffsetAt::Earliest).await?, 4);
        assert_eq!(pc.get_offset(OffsetAt::Latest).await?, 10);
        // Below the new start: out of range; at it: the records from there.
        assert!(pc.fetch_records(2, 1..1_000_000, 100).await.is_err());
        let (got, _) = pc.fetch_records(4, 1..1_000_000, 100).await?;
        assert_eq!(got.first().map(|r| r.offset), Some(4));
        // A time before every record now finds the first one kept.
        assert_eq!(pc.get_offset(OffsetAt::Timestamp(at(0))).await?, 4);
        anyhow::Ok(())
    })?;
    // Raw requests: past the end is OFFSET_OUT_OF_RANGE; -1 deletes up to the end.
    let mut kc = common::kafka::Kc::connect(&kafka)?;
    let ask = |offset: i64| {
        let mut p = DeleteRecordsPartition::default();
        p.partition_index = 0;
        p.offset = offset;
        let mut t = DeleteRecordsTopic::default();
        t.name = TopicName(StrBytes::from_static_str("dr"));
        t.partitions.push(p);
        let mut r = DeleteRecordsRequest::default();
        r.topics.push(t);
        r.timeout_ms = 5_000;
        r
    };
    let past = kc.call(2, &ask(11))?;
    assert_eq!(
        past.topics[0].partitions[0].error_code, 1,
        "OFFSET_OUT_OF_RANGE"
    );
    let older = kc.call(0, &ask(2))?;
    assert_eq!(
        older.topics[0].partitions[0].low_watermark, 4,
        "never moves back"
    );
    let all = kc.call(1, &ask(-1))?;
    assert_eq!(all.topics[0].partitions[0].error_code, 0);
    assert_eq!(all.topics[0].partitions[0].low_watermark, 10);
    let offsets = |b: &Broker| {
        b.engine()
            .records()
            .topic("dr")
            .map(|t| t.statuses(false)[0].log_start)
    };
    assert_eq!(offsets(&broker), Some(10));
    flume_rt::block_on(broker.shutdown());
    // The start survives a restart.
    let broker = start(dir.path());
    assert_eq!(offsets(&broker), Some(10));
    flume_rt::block_on(broker.shutdown());
    Ok(())
}
