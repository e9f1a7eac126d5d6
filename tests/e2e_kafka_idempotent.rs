//! Idempotent Kafka producers end to end: raw InitProducerId and Produce
//! requests (encoded with the `kafka-protocol` crate) over TCP to a broker on
//! port 0, read back through Kafka's Fetch (rskafka).

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use flume_broker::{Broker, BrokerConfig};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse,
    RequestHeader, TopicName, TransactionalId,
};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

const TOPIC: &str = "idem";

fn config(dir: &std::path::Path) -> BrokerConfig {
    let mut c = common::config(dir);
    c.kafka_listen = Some("127.0.0.1:0".into());
    c
}

fn start(dir: &std::path::Path) -> Result<Broker> {
    let broker = flume_rt::block_on(Broker::start(config(dir))).context("broker starts")?;
    if broker.engine().records().topic(TOPIC).is_none() {
        broker
            .engine()
            .records()
            .create_topic(TOPIC, common::topic(2))
            .context("topic")?;
    }
    Ok(broker)
}

/// One Kafka connection speaking raw requests.
struct Conn {
    s: TcpStream,
    correlation: i32,
}

impl Conn {
    fn open(broker: &Broker) -> Result<Conn> {
        let s = TcpStream::connect(broker.kafka_addr().context("kafka listener")?)?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        Ok(Conn { s, correlation: 0 })
    }

    fn call<R: Request + Encodable>(&mut self, req: &R, version: i16) -> Result<R::Response>
    where
        R::Response: Decodable,
    {
        self.correlation += 1;
        let mut body = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(StrBytes::from_static_str("idem-test")))
            .encode(&mut body, R::header_version(version))?;
        req.encode(&mut body, version)?;
        let mut frame = Vec::with_capacity(body.len() + 4);
        frame.put_i32(i32::try_from(body.len())?);
        frame.extend_from_slice(&body);
        self.s.write_all(&frame)?;
        let mut len = [0u8; 4];
        self.s.read_exact(&mut len)?;
        let mut resp = vec![0u8; usize::try_from(i32::from_be_bytes(len))?];
        self.s.read_exact(&mut resp)?;
        let mut resp = Bytes::from(resp);
        let api = ApiKey::try_from(R::KEY).map_err(|()| anyhow::anyhow!("api key"))?;
        let header_version = api.response_header_version(version);
        let correlation = resp.get_i32();
        ensure!(correlation == self.correlation, "correlation {correlation}");
        if header_version >= 1 {
            let tagged = resp.get_u8();
            ensure!(tagged == 0, "tagged fields in the response header");
        }
        R::Response::decode(&mut resp, version)
    }

    /// A new producer id and epoch (InitProducerId v4, as librdkafka sends).
    fn init(&mut self) -> Result<(i64, i16)> {
        let r: InitProducerIdResponse = self.call(
            &InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_transaction_timeout_ms(60_000)
                .with_producer_id((-1).into())
                .with_producer_epoch(-1),
            4,
        )?;
        ensure!(r.error_code == 0, "InitProducerId error {}", r.error_code);
        Ok((r.producer_id.0, r.producer_epoch))
    }

    /// Produces `values` as one batch stamped (pid, epoch, seq) to `partition`;
    /// returns (error code, base offset).
    fn produce(
        &mut self,
        partition: i32,
        stamp: (i64, i16, i32),
        values: &[&str],
    ) -> Result<(i16, i64)> {
        let (pid, epoch, seq) = stamp;
        let records: Vec<Record> = values
            .iter()
            .enumerate()
            .map(|(i, v)| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: -1,
                producer_id: pid,
                producer_epoch: epoch,
                timestamp_type: TimestampType::Creation,
                offset: i64::try_from(i).unwrap_or(0),
                sequence: seq + i32::try_from(i).unwrap_or(0),
                timestamp: 1_700_000_000_000,
                key: None,
                value: Some(Bytes::copy_from_slice(v.as_bytes())),
                headers: IndexMap::new(),
            })
            .collect();
        let mut batch = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut batch,
            &records,
            &RecordEncodeOptions {
                version: 2,
                compression: Compression::None,
            },
        )?;
        let req = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(5_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(batch.freeze()))])]);
        let resp: ProduceResponse = self.call(&req, 9)?;
        let p = resp
            .responses
            .first()
            .and_then(|t| t.partition_responses.first())
            .context("a partition response")?;
        Ok((p.error_code, p.base_offset))
    }
}

/// Every value stored in `partition`, in offset order (through Kafka's Fetch).
fn fetch_values(broker: &Broker, partition: i32) -> Result<Vec<String>> {
    let addr = broker.kafka_addr().context("kafka")?.to_string();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let client = rskafka::client::ClientBuilder::new(vec![addr])
            .build()
            .await?;
        let pc = client
            .partition_client(
                TOPIC,
                partition,
                rskafka::client::partition::UnknownTopicHandling::Error,
            )
            .await?;
        let (records, _hw) = pc.fetch_records(0, 1..1_000_000, 100).await?;
        Ok(records
            .into_iter()
            .map(|r| String::from_utf8_lossy(&r.record.value.unwrap_or_default()).into_owned())
            .collect())
    })
}

const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const UNKNOWN_PRODUCER_ID: i16 = 59;

#[test]
fn init_producer_id_issues_distinct_ids_and_hands_transactional_ids_to_the_coordinator(
) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path())?;
    let mut c = Conn::open(&broker)?;
    let (a, ea) = c.init()?;
    let (b, eb) = c.init()?;
    assert!(a >= 0 && b > a, "{a} {b}");
    assert_eq!((ea, eb), (0, 0));
    // Every version served answers (v0 as kafka-python may send, v5 as Java 3.x/4.x).
    for v in [0, 1, 2, 3, 5] {
        let r: InitProducerIdResponse = c.call(
            &InitProducerIdRequest::default().with_transactional_id(None),
            v,
        )?;
        assert_eq!(r.error_code, 0, "v{v}");
        assert!(r.producer_id.0 > b, "v{v}");
    }
    let tx = || {
        InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("tx"))))
    };
    let r: InitProducerIdResponse = c.call(&tx(), 4)?;
    assert_eq!(
        r.error_code, 50,
        "a transaction timeout of 0: INVALID_TRANSACTION_TIMEOUT"
    );
    assert_eq!(r.producer_id.0, -1);
    // The transaction coordinator: a producer id, then the next epoch for the same id.
    let r: InitProducerIdResponse = c.call(&tx().with_transaction_timeout_ms(60_000), 4)?;
    assert_eq!((r.error_code, r.producer_epoch), (0, 0));
    let again: InitProducerIdResponse = c.call(&tx().with_transaction_timeout_ms(60_000), 4)?;
    assert_eq!(
        (again.error_code, again.producer_id, again.producer_epoch),
        (0, r.producer_id, 1)
    );
    let r: InitProducerIdResponse = c.call(&InitProducerIdRequest::default(), 4)?;
    assert_eq!(
        r.error_code, 42,
        "an empty transactional id: INVALID_REQUEST"
    );
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn a_retried_batch_gets_its_original_offsets_and_is_stored_once() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path())?;
    let mut c = Conn::open(&broker)?;
    let (pid, epoch) = c.init()?;
    assert_eq!(c.produce(0, (pid, epoch, 0), &["a", "b", "c"])?, (0, 0));
    assert_eq!(c.produce(0, (pid, epoch, 3), &["d", "e"])?, (0, 3));
    // The first batch again (a retry after a lost response), on a new connection too.
    assert_eq!(c.produce(0, (pid, epoch, 0), &["a", "b", "c"])?, (0, 0));
    let mut c2 = Conn::open(&broker)?;
    assert_eq!(c2.produce(0, (pid, epoch, 3), &["d", "e"])?, (0, 3));
    assert_eq!(c.produce(0, (pid, epoch, 5), &["f"])?, (0, 5));
    assert_eq!(fetch_values(&broker, 0)?, ["a", "b", "c", "d", "e", "f"]);
    // A non-idempotent batch in between is unaffected.
    assert_eq!(c.produce(0, (-1, -1, -1), &["plain"])?, (0, 6));
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn a_sequence_gap_is_out_of_order_and_appends_nothing() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path())?;
    let mut c = Conn::open(&broker)?;
    let (pid, epoch) = c.init()?;
    assert_eq!(c.produce(1, (pid, epoch, 0), &["a"])?, (0, 0));
    let (code, _) = c.produce(1, (pid, epoch, 2), &["c"])?;
    assert_eq!(code, OUT_OF_ORDER_SEQUENCE_NUMBER);
    assert_eq!(c.produce(1, (pid, epoch, 1), &["b"])?, (0, 1));
    assert_eq!(fetch_values(&broker, 1)?, ["a", "b"]);
    // Sequences are per partition: partition 0 starts at 0 for the same producer.
    assert_eq!(c.produce(0, (pid, epoch, 0), &["x"])?, (0, 0));
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn a_stale_epoch_and_an_unknown_producer_are_refused() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path())?;
    let mut c = Conn::open(&broker)?;
    let (pid, _) = c.init()?;
    // The client bumped its epoch (as Java's idempotent producer does locally).
    assert_eq!(c.produce(0, (pid, 1, 0), &["new"])?, (0, 0));
    let (code, _) = c.produce(0, (pid, 0, 1), &["old"])?;
    assert_eq!(code, INVALID_PRODUCER_EPOCH);
    // A newer epoch must start at sequence 0.
    let (code, _) = c.produce(0, (pid, 2, 5), &["skip"])?;
    assert_eq!(code, OUT_OF_ORDER_SEQUENCE_NUMBER);
    let (code, _) = c.produce(0, (pid + 1000, 0, 0), &["who"])?;
    assert_eq!(code, UNKNOWN_PRODUCER_ID);
    assert_eq!(fetch_values(&broker, 0)?, ["new"]);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn two_producers_interleave_on_one_partition() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path())?;
    let mut c = Conn::open(&broker)?;
    let (p1, e1) = c.init()?;
    let (p2, e2) = c.init()?;
    assert_eq!(c.produce(0, (p1, e1, 0), &["1a"])?, (0, 0));
    assert_eq!(c.produce(0, (p2, e2, 0), &["2a", "2b"])?, (0, 1));
    assert_eq!(c.produce(0, (p1, e1, 1), &["1b"])?, (0, 3));
    // Each one's retry finds its own batch.
    assert_eq!(c.produce(0, (p2, e2, 0), &["2a", "2b"])?, (0, 1));
    assert_eq!(c.produce(0, (p1, e1, 0), &["1a"])?, (0, 0));
    assert_eq!(c.produce(0, (p2, e2, 2), &["2c"])?, (0, 4));
    assert_eq!(fetch_values(&broker, 0)?, ["1a", "2a", "2b", "1b", "2c"]);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn producer_ids_are_unique_across_a_restart_and_old_producers_keep_their_state() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let broker = start(dir.path())?;
    let (before, epoch) = {
        let mut c = Conn::open(&broker)?;
        let id = c.init()?;
        assert_eq!(c.produce(0, (id.0, id.1, 0), &["before"])?, (0, 0));
        id
    };
    flume_rt::block_on(broker.shutdown());
    drop(broker);
    let broker = start(dir.path())?;
    let mut c = Conn::open(&broker)?;
    let (after, _) = c.init()?;
    assert!(after > before, "{after} > {before}");
    // The producer from before the restart: its state was rebuilt (the
    // snapshot written at shutdown), so a retry of its batch from before the
    // restart gets its original offset and is not stored again.
    assert_eq!(
        c.produce(0, (before, epoch, 0), &["before"])?,
        (0, 0),
        "a retry across the restart"
    );
    assert_eq!(c.produce(0, (before, epoch, 1), &["old"])?, (0, 1));
    assert_eq!(
        c.produce(0, (before, epoch, 1), &["old"])?,
        (0, 1),
        "a retry"
    );
    let (code, _) = c.produce(0, (before, epoch, 3), &["gap"])?;
    assert_eq!(code, OUT_OF_ORDER_SEQUENCE_NUMBER);
    assert_eq!(c.produce(0, (after, 0, 0), &["after"])?, (0, 2));
    // An id above every one issued is unknown.
    let (code, _) = c.produce(0, (after + 1, 0, 0), &["who"])?;
    assert_eq!(code, UNKNOWN_PRODUCER_ID);
    assert_eq!(fetch_values(&broker, 0)?, ["before", "old", "after"]);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}
