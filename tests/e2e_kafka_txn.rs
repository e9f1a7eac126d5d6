//! The transaction coordinator on the Kafka listener, end to end over raw
//! Kafka frames: FindCoordinator for a transactional id, InitProducerId
//! (epochs, fencing), AddOffsetsToTxn + TxnOffsetCommit + EndTxn committing
//! a group's offsets (OffsetFetch `require_stable` sees them pending until
//! then), AddPartitionsToTxn + EndTxn refused while the log
//! cannot store markers (the end stays recorded), ListTransactions and
//! DescribeTransactions, and the state after a restart.

use crate::common;
use crate::common::kafka::Kc;

use anyhow::{ensure, Context, Result};
use flume_broker::Broker;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, ApiKey, ApiVersionsRequest,
    DescribeTransactionsRequest, EndTxnRequest, FindCoordinatorRequest, GroupId,
    InitProducerIdRequest, ListTransactionsRequest, OffsetFetchRequest, ProducerId, TopicName,
    TransactionalId, TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::StrBytes;

const NONE: i16 = 0;
const UNSTABLE_OFFSET_COMMIT: i16 = 88;
const PRODUCER_FENCED: i16 = 90;

fn start(dir: &std::path::Path) -> Result<(Broker, String)> {
    let mut cfg = common::config(dir);
    cfg.kafka_listen = Some("127.0.0.1:0".into());
    let broker = flume_rt::block_on(Broker::start(cfg)).context("broker starts")?;
    if broker.engine().records().topic("t").is_none() {
        broker
            .engine()
            .records()
            .create_topic("t", common::topic(2))?;
    }
    let addr = broker.kafka_addr().context("kafka listener")?.to_string();
    Ok((broker, addr))
}

fn tid(id: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(id.to_owned()))
}

fn init(c: &mut Kc, id: &str) -> Result<(i64, i16)> {
    let r = c.call(
        4,
        &InitProducerIdRequest::default()
            .with_transactional_id(Some(tid(id)))
            .with_transaction_timeout_ms(60_000),
    )?;
    ensure!(r.error_code == NONE, "{r:?}");
    Ok((r.producer_id.0, r.producer_epoch))
}

fn end(c: &mut Kc, id: &str, (pid, epoch): (i64, i16), commit: bool) -> Result<i16> {
    let mut r = EndTxnRequest::default();
    r.transactional_id = tid(id);
    r.producer_id = ProducerId(pid);
    r.producer_epoch = epoch;
    r.committed = commit;
    Ok(c.call(3, &r)?.error_code)
}

fn add_offsets(c: &mut Kc, id: &str, (pid, epoch): (i64, i16), group: &str) -> Result<i16> {
    let mut r = AddOffsetsToTxnRequest::default();
    r.transactional_id = tid(id);
    r.producer_id = ProducerId(pid);
    r.producer_epoch = epoch;
    r.group_id = GroupId(StrBytes::from_string(group.to_owned()));
    Ok(c.call(3, &r)?.error_code)
}

fn committed(c: &mut Kc, group: &str, partition: i32) -> Result<i64> {
    Ok(fetch(c, group, partition, false)?.0)
}

/// OffsetFetch v7 of one partition of "t": (offset, error).
fn fetch(c: &mut Kc, group: &str, partition: i32, require_stable: bool) -> Result<(i64, i16)> {
    let mut t = OffsetFetchRequestTopic::default();
    t.name = TopicName(StrBytes::from_static_str("t"));
    t.partition_indexes = vec![partition];
    let mut r = OffsetFetchRequest::default();
    r.group_id = GroupId(StrBytes::from_string(group.to_owned()));
    r.topics = Some(vec![t]);
    r.require_stable = require_stable;
    let resp = c.call(7, &r)?;
    let p = &resp.topics[0].partitions[0];
    Ok((p.committed_offset, p.error_code))
}

#[test]
fn a_transaction_commits_offsets_fences_old_producers_and_writes_its_markers() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (broker, addr) = start(dir.path())?;
    let mut c = Kc::connect(&addr)?;
    // Advertised exactly as served.
    let v = c.call(3, &ApiVersionsRequest::default())?;
    let range = |k: ApiKey| {
        v.api_keys
            .iter()
            .find(|a| a.api_key == k as i16)
            .map(|a| (a.min_version, a.max_version))
    };
    ensure!(range(ApiKey::AddPartitionsToTxn) == Some((0, 3)));
    ensure!(range(ApiKey::EndTxn) == Some((0, 3)));
    ensure!(range(ApiKey::TxnOffsetCommit) == Some((0, 3)));
    ensure!(range(ApiKey::ListTransactions) == Some((0, 1)));
    ensure!(range(ApiKey::DescribeTransactions) == Some((0, 0)));
    // This broker coordinates transactional ids.
    let mut f = FindCoordinatorRequest::default();
    f.key_type = 1;
    f.coordinator_keys = vec![StrBytes::from_static_str("tx")];
    let r = c.call(4, &f)?;
    ensure!(
        r.coordinators[0].error_code == NONE && r.coordinators[0].port > 0,
        "{r:?}"
    );

    // A transaction of offsets only: committed into the group by EndTxn.
    let p = init(&mut c, "tx")?;
    ensure!(add_offsets(&mut c, "tx", p, "g")? == NONE);
    let mut part = TxnOffsetCommitRequestPartition::default();
    part.partition_index = 1;
    part.committed_offset = 42;
    let mut topic = TxnOffsetCommitRequestTopic::default();
    topic.name = TopicName(StrBytes::from_static_str("t"));
    topic.partitions = vec![part];
    let mut commit = TxnOffsetCommitRequest::default();
    commit.transactional_id = tid("tx");
    commit.group_id = GroupId(StrBytes::from_static_str("g"));
    commit.producer_id = ProducerId(p.0);
    commit.producer_epoch = p.1;
    commit.generation_id = -1;
    commit.topics = vec![topic];
    let r = c.call(3, &commit)?;
    ensure!(r.topics[0].partitions[0].error_code == NONE, "{r:?}");
    ensure!(committed(&mut c, "g", 1)? == -1, "not before the commit");
    ensure!(
        fetch(&mut c, "g", 1, true)? == (-1, UNSTABLE_OFFSET_COMMIT),
        "require_stable: a transaction holds an offset for it"
    );
    ensure!(fetch(&mut c, "g", 0, true)? == (-1, NONE));
    ensure!(end(&mut c, "tx", p, true)? == NONE);
    ensure!(committed(&mut c, "g", 1)? == 42);
    ensure!(
        fetch(&mut c, "g", 1, true)? == (42, NONE),
        "stable once committed"
    );

    // A second producer with the same id fences the first.
    let p2 = init(&mut c, "tx")?;
    ensure!(p2 == (p.0, p.1 + 1), "{p2:?}");
    ensure!(add_offsets(&mut c, "tx", p, "g")? == PRODUCER_FENCED);

    // A transaction with partitions: listed and described while open, and
    // ended with its markers.
    let mut add = AddPartitionsToTxnRequest::default();
    add.v3_and_below_transactional_id = tid("tx");
    add.v3_and_below_producer_id = ProducerId(p2.0);
    add.v3_and_below_producer_epoch = p2.1;
    let mut t = AddPartitionsToTxnTopic::default();
    t.name = TopicName(StrBytes::from_static_str("t"));
    t.partitions = vec![0, 1];
    add.v3_and_below_topics = vec![t];
    let r = c.call(3, &add)?;
    ensure!(
        r.results_by_topic_v3_and_below[0]
            .results_by_partition
            .iter()
            .all(|p| p.partition_error_code == NONE),
        "{r:?}"
    );
    let l = c.call(1, &ListTransactionsRequest::default())?;
    ensure!(l.transaction_states.len() == 1, "{l:?}");
    ensure!(l.transaction_states[0].transaction_state.as_str() == "Ongoing");
    let mut d = DescribeTransactionsRequest::default();
    d.transactional_ids = vec![tid("tx"), tid("unknown")];
    let r = c.call(0, &d)?;
    let s = &r.transaction_states[0];
    ensure!(s.transaction_state.as_str() == "Ongoing" && s.producer_epoch == p2.1);
    ensure!(
        s.topics.len() == 1 && s.topics[0].partitions == vec![0, 1],
        "{s:?}"
    );
    ensure!(
        r.transaction_states[1].error_code == 105,
        "TRANSACTIONAL_ID_NOT_FOUND"
    );
    ensure!(end(&mut c, "tx", p2, true)? == NONE);
    let r = c.call(0, &d)?;
    ensure!(r.transaction_states[0].transaction_state.as_str() == "CompleteCommit");
    // Each partition got its COMMIT marker: an offset past the records.
    for p in [0, 1] {
        let (_, end) = flume_rt::block_on(async {
            let t = broker.engine().records().topic("t").context("topic")?;
            let part = t.partition(p).context("partition")?;
            anyhow::Ok((part.stable_offset(), part.end_offset()))
        })?;
        ensure!(end == 1, "partition {p}: one marker, end {end}");
    }
    // DescribeProducers answers for the partition (no transaction open).
    let mut dp = kafka_protocol::messages::DescribeProducersRequest::default();
    let mut tr = kafka_protocol::messages::describe_producers_request::TopicRequest::default();
    tr.name = TopicName(StrBytes::from_static_str("t"));
    tr.partition_indexes = vec![0];
    dp.topics = vec![tr];
    let r = c.call(0, &dp)?;
    let p0 = &r.topics[0].partitions[0];
    ensure!(p0.error_code == NONE, "{p0:?}");
    ensure!(
        p0.active_producers
            .iter()
            .all(|s| s.current_txn_start_offset == -1),
        "{p0:?}"
    );
    flume_rt::block_on(broker.shutdown());
    drop(broker);

    // After a restart the transaction is still complete.
    let (broker, addr) = start(dir.path())?;
    let mut c = Kc::connect(&addr)?;
    let r = c.call(0, &d)?;
    ensure!(r.transaction_states[0].transaction_state.as_str() == "CompleteCommit");
    ensure!(committed(&mut c, "g", 1)? == 42);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

/// An open transaction as the SDK's `Admin::list_transactions` shows it,
/// over Flume's protocol (LIST_TRANSACTIONS) and over Kafka's
/// (ListTransactions + DescribeTransactions) alike: its producer, state,
/// age and partitions; the filters by state and by age; an unknown state
/// refused; after the commit, no open transaction.
#[test]
fn an_open_transaction_is_listed_alike_over_both_protocols() -> Result<()> {
    use flume_client::{Admin, ErrorCode, TopicPartitions};
    use std::time::Duration;

    let dir = tempfile::tempdir()?;
    let (broker, addr) = start(dir.path())?;
    let mut c = Kc::connect(&addr)?;
    let p = init(&mut c, "lister")?;
    init(&mut c, "idle")?;
    let mut add = AddPartitionsToTxnRequest::default();
    add.v3_and_below_transactional_id = tid("lister");
    add.v3_and_below_producer_id = ProducerId(p.0);
    add.v3_and_below_producer_epoch = p.1;
    let mut t = AddPartitionsToTxnTopic::default();
    t.name = TopicName(StrBytes::from_static_str("t"));
    t.partitions = vec![1, 0];
    add.v3_and_below_topics = vec![t];
    let r = c.call(3, &add)?;
    ensure!(
        r.results_by_topic_v3_and_below[0]
            .results_by_partition
            .iter()
            .all(|p| p.partition_error_code == NONE),
        "{r:?}"
    );
    let native = broker.local_addr().to_string();
    let kafka = format!("kafka://{addr}");
    for address in [&native, &kafka] {
        flume_rt::block_on(async {
            let admin = Admin::connect(address).await?;
            let all = admin.list_transactions(&[], None).await?;
            ensure!(all.len() == 2, "{address}: {all:?}");
            let (idle, open) = (&all[0], &all[1]);
            ensure!(idle.transactional_id == "idle" && idle.state == "Empty");
            ensure!(idle.started_ms == -1 && idle.partitions.is_empty());
            ensure!(open.transactional_id == "lister", "{address}: {open:?}");
            ensure!((open.producer_id, open.producer_epoch) == p);
            ensure!(open.state == "Ongoing" && open.timeout_ms == 60_000);
            ensure!(open.started_ms > 0, "{address}: {open:?}");
            ensure!(
                open.partitions
                    == vec![TopicPartitions {
                        topic: "t".into(),
                        partitions: vec![0, 1]
                    }],
                "{address}: {open:?}"
            );
            let ongoing = admin.list_transactions(&["Ongoing"], None).await?;
            ensure!(ongoing.len() == 1 && ongoing[0].transactional_id == "lister");
            let lingering = admin
                .list_transactions(&[], Some(Duration::from_secs(3600)))
                .await?;
            ensure!(lingering.is_empty(), "{address}: none open an hour");
            let open_now = admin.list_transactions(&[], Some(Duration::ZERO)).await?;
            ensure!(
                open_now.len() == 1 && open_now[0].transactional_id == "lister",
                "{address}: an age filter keeps open transactions only: {open_now:?}"
            );
            let err = admin
                .list_transactions(&["Sleeping"], None)
                .await
                .err()
                .context("an unknown state is refused")?;
            ensure!(err.code() == Some(ErrorCode::InvalidRequest), "{err}");
            anyhow::Ok(())
        })?;
    }
    ensure!(end(&mut c, "lister", p, false)? == NONE);
    for address in [&native, &kafka] {
        flume_rt::block_on(async {
            let admin = Admin::connect(address).await?;
            let open = admin.list_transactions(&[], Some(Duration::ZERO)).await?;
            ensure!(open.is_empty(), "{address}: {open:?}");
            let aborted = admin.list_transactions(&["CompleteAbort"], None).await?;
            ensure!(
                aborted.len() == 1 && aborted[0].started_ms == -1,
                "{aborted:?}"
            );
            anyhow::Ok(())
        })?;
    }
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

/// A partition whose last entry is a transaction marker: a Flume reader
/// (its protocol has no "next offset" to move it past the marker) that has
/// read every record before it is at its end (its high watermark is its
/// position, so `flume-cli consume` and `-e` stop), and a group that
/// committed there has no lag; a record after the marker is read from there.
#[test]
fn a_flume_reader_caught_up_before_a_trailing_marker_is_at_its_end() -> Result<()> {
    use flume_broker::partition::txns::Marker;
    use flume_client::{
        Admin, FetchConfig, PartitionConsumer, PartitionOffset, Producer, ProducerRecord,
        StartOffset,
    };

    let dir = tempfile::tempdir()?;
    let (broker, _) = start(dir.path())?;
    let native = broker.local_addr().to_string();
    flume_rt::block_on(async {
        let p = Producer::connect(&native).await?;
        for v in ["a", "b"] {
            p.send_record(ProducerRecord::new("t", v).partition(0))
                .await?;
        }
        let part = broker
            .engine()
            .records()
            .topic("t")
            .context("t")?
            .partition(0)
            .context("partition 0")?
            .clone();
        let at = part
            .write_marker(7, 0, Marker::Commit, 1_700_000_000_000)
            .await
            .map_err(|e| anyhow::anyhow!("marker: {e:?}"))?;
        ensure!(at == 2, "the marker at {at}");
        let mut c = PartitionConsumer::connect_with(
            &native,
            "t",
            0,
            StartOffset::Earliest,
            FetchConfig::default().max_wait(std::time::Duration::from_millis(50)),
            Default::default(),
        )
        .await?;
        let got = c.poll_batch().await?;
        ensure!(got.len() == 2, "{got:?}");
        ensure!(c.high_watermark() == 3, "the log end while records came");
        let more = c.poll_batch().await?;
        ensure!(more.is_empty(), "{more:?}");
        ensure!(
            c.position() == Some(2) && c.high_watermark() == 2,
            "at its end: position {:?}, high watermark {}",
            c.position(),
            c.high_watermark()
        );

        let admin = Admin::connect(&native).await?;
        let offsets = |committed| PartitionOffset {
            topic: "t".into(),
            partition: 0,
            offset: committed,
        };
        // Partition 1 holds only a marker: a group with no commit there is at its end.
        let p1 = broker
            .engine()
            .records()
            .topic("t")
            .context("t")?
            .partition(1)
            .context("partition 1")?
            .clone();
        p1.write_marker(7, 0, Marker::Abort, 1_700_000_000_000)
            .await
            .map_err(|e| anyhow::anyhow!("marker: {e:?}"))?;
        let o = admin.group_offsets("fresh", &["t".to_owned()]).await?;
        let q1 = o.iter().find(|o| o.partition == 1).context("partition 1")?;
        ensure!(
            (q1.committed, q1.log_start, q1.log_end) == (-1, 0, 0),
            "nothing to read from the log start: no lag, {q1:?}"
        );
        admin.commit("g", vec![offsets(1)]).await?;
        let o = admin.group_offsets("g", &["t".to_owned()]).await?;
        let p0 = o.iter().find(|o| o.partition == 0).context("partition 0")?;
        ensure!(
            p0.log_end == 3,
            "a record left to read: the log end, {p0:?}"
        );
        admin.commit("g", vec![offsets(2)]).await?;
        let o = admin.group_offsets("g", &["t".to_owned()]).await?;
        let p0 = o.iter().find(|o| o.partition == 0).context("partition 0")?;
        ensure!(
            (p0.committed, p0.log_end) == (2, 2),
            "nothing to read past the commit: no lag, {p0:?}"
        );

        let m = p
            .send_record(ProducerRecord::new("t", "c").partition(0))
            .await?;
        ensure!(m.offset == 3, "{m:?}");
        let after = c.poll_batch().await?;
        ensure!(
            after.len() == 1 && after[0].offset == 3 && c.high_watermark() == 4,
            "{after:?}"
        );
        anyhow::Ok(())
    })?;
    flume_rt::block_on(broker.shutdown());
    Ok(())
}
