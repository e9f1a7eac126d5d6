//! Kafka batches kept in the log: a compressed batch of an idempotent
//! producer, produced over Kafka's protocol beside records produced over
//! Flume's, is fetched by Kafka's protocol as it was produced (codec,
//! producer id, epoch, base sequence and the records' bytes), before and
//! after a restart, and read record by record by Flume's consumer.

use crate::common;
use crate::common::kafka::Kc;

use anyhow::{ensure, Context, Result};
use bytes::Bytes;
use flume_broker::{Broker, BrokerConfig};
use flume_client::{PartitionConsumer, Producer, StartOffset};
use flume_protocol::kafka_batch::{self, BatchBuilder, BatchMeta, Compression};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    BrokerId, FetchRequest, InitProducerIdRequest, ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

const TOPIC: &str = "batches";

fn config(dir: &std::path::Path) -> BrokerConfig {
    let mut c = common::config(dir);
    c.kafka_listen = Some("127.0.0.1:0".into());
    c
}

fn fetch(kc: &mut Kc, offset: i64) -> Result<Bytes> {
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(100)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])]);
    let resp = kc.call(11, &req)?;
    let p = &resp.responses[0].partitions[0];
    ensure!(p.error_code == 0, "fetch error {}", p.error_code);
    p.records.clone().context("records")
}

#[test]
fn a_compressed_idempotent_batch_is_served_as_it_was_produced_and_read_by_flume() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = flume_rt::block_on(Broker::start(config(dir.path())))?;
    broker
        .engine()
        .records()
        .create_topic(TOPIC, common::topic(1))?;
    let native = broker.local_addr().to_string();
    // Three records through Flume's protocol first: offsets 0..=2.
    flume_rt::block_on(async {
        let p = Producer::connect(&native).await?;
        for i in 0..3 {
            p.send_record(
                flume_client::ProducerRecord::new(TOPIC, format!("flume-{i}")).partition(0),
            )
            .await?;
        }
        anyhow::Ok(())
    })?;
    let mut kc = Kc::connect(&broker.kafka_addr().context("kafka")?.to_string())?;
    let init = kc.call(
        4,
        &InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000)
            .with_producer_id((-1).into())
            .with_producer_epoch(-1),
    )?;
    ensure!(init.error_code == 0, "InitProducerId {}", init.error_code);
    let mut b = BatchBuilder::new(None);
    for i in 0..50 {
        let v = format!("kafka-{i} {}", "compressible ".repeat(8));
        b.push(
            i,
            1_700_000_000_000 + i64::from(i),
            Some(b"k"),
            Some(v.as_bytes()),
            [],
        );
    }
    let meta = BatchMeta {
        producer_id: init.producer_id.0,
        producer_epoch: init.producer_epoch,
        base_sequence: 0,
        ..BatchMeta::default()
    };
    let sent = b.finish(&meta, Compression::Zstd)?;
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::from(sent.clone())))])]);
    let resp = kc.call(9, &req)?;
    let pr = &resp.responses[0].partition_responses[0];
    ensure!(pr.error_code == 0 && pr.base_offset == 3, "{pr:?}");

    let check = |records: Bytes| -> Result<()> {
        let batches: Vec<_> = kafka_batch::batches(&records).collect::<Result<_, _>>()?;
        ensure!(batches.len() == 2, "{} batches", batches.len());
        let (flume, kafka) = (batches[0].header, batches[1].header);
        ensure!((flume.base_offset, flume.count) == (0, 3), "{flume:?}");
        ensure!(flume.compression()? == Compression::None);
        ensure!(kafka.base_offset == 3 && kafka.count == 50, "{kafka:?}");
        ensure!(
            kafka.compression()? == Compression::Zstd,
            "served compressed"
        );
        ensure!(
            (kafka.producer_id, kafka.producer_epoch, kafka.base_sequence)
                == (init.producer_id.0, init.producer_epoch, 0),
            "producer fields kept: {kafka:?}"
        );
        ensure!(
            batches[1].data() == &sent[kafka_batch::BATCH_HEADER_LEN..],
            "the compressed records are the producer's own bytes"
        );
        Ok(())
    };
    check(fetch(&mut kc, 0)?)?;
    // From the middle of the batch: the whole batch, as Kafka serves it.
    let mid = fetch(&mut kc, 20)?;
    let first = kafka_batch::check(&mid)?.header;
    ensure!(first.base_offset == 3, "{first:?}");

    // Flume's consumer reads every record at its offset.
    let read = |from: u64| -> Result<Vec<(u64, String)>> {
        flume_rt::block_on(async {
            let mut c =
                PartitionConsumer::connect(&native, TOPIC, 0, StartOffset::At(from)).await?;
            let mut out = Vec::new();
            while out.last().map_or(from, |(o, _): &(u64, String)| o + 1) < 53 {
                for r in c.poll_batch().await? {
                    out.push((r.offset, String::from_utf8_lossy(r.payload()).into_owned()));
                }
            }
            anyhow::Ok(out)
        })
    };
    let all = read(0)?;
    ensure!(all.len() == 53, "{} records", all.len());
    ensure!(all.iter().enumerate().all(|(i, (o, _))| *o == i as u64));
    ensure!(all[2].1 == "flume-2" && all[3].1.starts_with("kafka-0 "));
    let tail = read(30)?;
    ensure!(tail.first().map(|r| r.0) == Some(30) && tail.len() == 23);

    // After a restart, the same bytes.
    flume_rt::block_on(broker.shutdown());
    let broker = flume_rt::block_on(Broker::start(config(dir.path())))?;
    let mut kc = Kc::connect(&broker.kafka_addr().context("kafka")?.to_string())?;
    check(fetch(&mut kc, 0)?)?;
    flume_rt::block_on(broker.shutdown());
    Ok(())
}
