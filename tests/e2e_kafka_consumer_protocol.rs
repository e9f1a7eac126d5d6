//! Consumer-protocol groups (KIP-848, `group.protocol=consumer`) on the
//! Kafka listener with raw `kafka-protocol` frames, on a manual clock:
//! ConsumerGroupHeartbeat and ConsumerGroupDescribe advertised as served;
//! a second member gets its partitions only after the first acknowledged
//! revoking them; commits fenced by member epoch (STALE_MEMBER_EPOCH);
//! ListGroups with the consumer type, DescribeGroups and a classic join
//! refused as Kafka refuses them; a classic group with members refused to a
//! consumer heartbeat; errors for an unknown assignor and a fenced epoch;
//! a silent member removed after the session timeout; a regex subscription.

use crate::common;
use crate::common::kafka::Kc;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use flume_broker::Broker;
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, DescribeGroupsRequest, GroupId, JoinGroupRequest,
    ListGroupsRequest, OffsetCommitRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

const NONE: i16 = 0;
const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
const UNKNOWN_MEMBER_ID: i16 = 25;
const GROUP_ID_NOT_FOUND: i16 = 69;
const FENCED_MEMBER_EPOCH: i16 = 110;
const UNSUPPORTED_ASSIGNOR: i16 = 112;
const STALE_MEMBER_EPOCH: i16 = 113;
const INVALID_REGULAR_EXPRESSION: i16 = 130;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

/// A heartbeat: (member, epoch, subscription if any, owned if any).
fn hb(
    k: &mut Kc,
    group: &str,
    member: &str,
    epoch: i32,
    topics: Option<&[&str]>,
    owned: Option<(Uuid, &BTreeSet<i32>)>,
) -> Result<ConsumerGroupHeartbeatResponse> {
    let req = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(member))
        .with_member_epoch(epoch)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(topics.map(|ts| ts.iter().map(|t| TopicName(s(t))).collect()))
        .with_topic_partitions(owned.map(|(id, ps)| {
            vec![TopicPartitions::default()
                .with_topic_id(id)
                .with_partitions(ps.iter().copied().collect())]
        }));
    k.call(0, &req)
}

fn parts(r: &ConsumerGroupHeartbeatResponse) -> BTreeSet<i32> {
    r.assignment
        .iter()
        .flat_map(|a| a.topic_partitions.iter())
        .flat_map(|t| t.partitions.iter().copied())
        .collect()
}

fn commit(group: &str, member: &str, epoch: i32) -> OffsetCommitRequest {
    OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(member))
        .with_generation_id_or_member_epoch(epoch)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(s("t")))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(5)])])
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        ensure!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

#[test]
fn consumer_protocol_members_reconcile_commit_and_expire() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (mut cfg, clock) = common::manual_config(dir.path());
    cfg.kafka_listen = Some("127.0.0.1:0".into());
    let broker = flume_rt::block_on(Broker::start(cfg)).context("broker starts")?;
    let engine = broker.engine().clone();
    engine
        .records()
        .create_topic("t", common::topic(4))
        .context("topic")?;
    let id = Uuid::from_bytes(engine.records().topic("t").context("t")?.id.0);
    let addr = broker.kafka_addr().context("kafka")?.to_string();
    let mut k = Kc::connect(&addr)?;

    let versions = k.call(3, &ApiVersionsRequest::default())?;
    for key in [
        ApiKey::ConsumerGroupHeartbeat,
        ApiKey::ConsumerGroupDescribe,
    ] {
        ensure!(
            versions
                .api_keys
                .iter()
                .any(|a| a.api_key == key as i16 && (a.min_version, a.max_version) == (0, 1)),
            "{key:?} advertised at v0-1"
        );
    }

    // m1 alone: everything.
    let a = hb(&mut k, "g", "", 0, Some(&["t"]), None)?;
    ensure!(a.error_code == NONE, "{a:?}");
    let m1 = a.member_id.clone().context("member id")?.to_string();
    let e1 = a.member_epoch;
    ensure!(e1 >= 1 && parts(&a).len() == 4, "{a:?}");
    ensure!(
        a.assignment.as_ref().unwrap().topic_partitions[0].topic_id == id,
        "by topic id"
    );
    // m2 joins: nothing yet, m1 still owns all four.
    let b = hb(&mut k, "g", "", 0, Some(&["t"]), None)?;
    let m2 = b.member_id.clone().context("member id")?.to_string();
    ensure!(b.error_code == NONE && parts(&b).is_empty(), "{b:?}");
    let e2 = b.member_epoch;
    ensure!(e2 > e1);
    // m1 is asked to give two up, keeps its epoch.
    let all = parts(&a);
    let a = hb(&mut k, "g", &m1, e1, None, Some((id, &all)))?;
    let kept = parts(&a);
    ensure!(a.member_epoch == e1 && kept.len() == 2, "{a:?}");
    let b = hb(&mut k, "g", &m2, e2, None, Some((id, &BTreeSet::new())))?;
    ensure!(parts(&b).is_empty(), "m2 waits for the revocation: {b:?}");
    // m1 acknowledges: it reaches the group's epoch; m2 gets the other two.
    let a = hb(&mut k, "g", &m1, e1, None, Some((id, &kept)))?;
    ensure!(a.member_epoch == e2 && parts(&a) == kept, "{a:?}");
    let b = hb(&mut k, "g", &m2, e2, None, None)?;
    let theirs = parts(&b);
    ensure!(theirs.len() == 2 && theirs.is_disjoint(&kept), "{b:?}");

    // Commits are fenced by member epoch.
    let r = k.call(9, &commit("g", &m1, e2))?;
    ensure!(r.topics[0].partitions[0].error_code == NONE, "{r:?}");
    ensure!(engine.groups().committed("g", "t", 0) == Some(5));
    let r = k.call(9, &commit("g", &m1, e1))?;
    ensure!(
        r.topics[0].partitions[0].error_code == STALE_MEMBER_EPOCH,
        "{r:?}"
    );
    let r = k.call(9, &commit("g", "nobody", e2))?;
    ensure!(
        r.topics[0].partitions[0].error_code == UNKNOWN_MEMBER_ID,
        "{r:?}"
    );

    // Describe, list; the classic APIs see no classic group.
    let d = k.call(
        0,
        &ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("g"))]),
    )?;
    let g = &d.groups[0];
    ensure!(g.error_code == NONE && g.members.len() == 2, "{d:?}");
    ensure!(g.group_state.as_str() == "Stable" && g.assignor_name.as_str() == "uniform");
    let l = k.call(5, &ListGroupsRequest::default())?;
    ensure!(
        l.groups
            .iter()
            .any(|x| x.group_id.0.as_str() == "g" && x.group_type.as_str() == "consumer"),
        "{l:?}"
    );
    let dg = k.call(
        5,
        &DescribeGroupsRequest::default().with_groups(vec![GroupId(s("g"))]),
    )?;
    ensure!(dg.groups[0].group_state.as_str() == "Dead", "{dg:?}");
    let join = JoinGroupRequest::default()
        .with_group_id(GroupId(s("g")))
        .with_session_timeout_ms(6000)
        .with_rebalance_timeout_ms(6000)
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![
            JoinGroupRequestProtocol::default().with_name(s("range"))
        ]);
    let j = k.call(3, &join)?;
    ensure!(j.error_code == INCONSISTENT_GROUP_PROTOCOL, "{j:?}");

    // Errors: a newer epoch, an unknown assignor, a classic group's id.
    let f = hb(&mut k, "g", &m1, e2 + 7, None, None)?;
    ensure!(f.error_code == FENCED_MEMBER_EPOCH, "{f:?}");
    let u = k.call(
        0,
        &ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_member_epoch(0)
            .with_subscribed_topic_names(Some(vec![TopicName(s("t"))]))
            .with_server_assignor(Some(s("cooperative-sticky"))),
    )?;
    ensure!(u.error_code == UNSUPPORTED_ASSIGNOR, "{u:?}");
    let classic = {
        let addr = addr.clone();
        let join = join.clone().with_group_id(GroupId(s("classic")));
        std::thread::spawn(move || Kc::connect(&addr)?.call(3, &join))
    };
    wait_until("the classic member", || {
        engine
            .groups()
            .group_members("classic")
            .is_some_and(|n| n > 0)
    })?;
    let c = hb(&mut k, "classic", "", 0, Some(&["t"]), None)?;
    ensure!(c.error_code == GROUP_ID_NOT_FOUND, "{c:?}");
    let joined = classic
        .join()
        .map_err(|_| anyhow::anyhow!("join thread"))??;
    ensure!(joined.error_code == NONE, "{joined:?}");

    // m2 falls silent: after the session timeout (45 s) m1 gets all four.
    for _ in 0..5 {
        clock.advance(Duration::from_secs(10));
        let a = hb(&mut k, "g", &m1, e2, None, None)?;
        ensure!(a.error_code == NONE, "{a:?}");
        flume_rt::block_on(engine.tick_now());
    }
    let gone = hb(&mut k, "g", &m2, e2, None, None)?;
    ensure!(gone.error_code == UNKNOWN_MEMBER_ID, "{gone:?}");
    let a = hb(&mut k, "g", &m1, e2, None, Some((id, &kept)))?;
    ensure!(parts(&a).len() == 4 && a.member_epoch > e2, "{a:?}");
    // A regex subscription matches whole topic names; a bad one is refused.
    let re = |k: &mut Kc, regex: &str| {
        k.call(
            1,
            &ConsumerGroupHeartbeatRequest::default()
                .with_group_id(GroupId(s("rg")))
                .with_member_id(s("regex-member-1"))
                .with_member_epoch(0)
                .with_rebalance_timeout_ms(30_000)
                .with_subscribed_topic_regex(Some(s(regex))),
        )
    };
    let r = re(&mut k, "(t")?;
    ensure!(r.error_code == INVALID_REGULAR_EXPRESSION, "{r:?}");
    let r = re(&mut k, "x|t")?;
    ensure!(r.error_code == NONE && parts(&r).len() == 4, "{r:?}");
    let d = k.call(
        1,
        &ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s("rg"))]),
    )?;
    ensure!(
        d.groups[0].members[0].subscribed_topic_regex.as_deref() == Some("x|t"),
        "{d:?}"
    );
    // Leaving empties the group.
    let left = hb(&mut k, "g", &m1, -1, None, None)?;
    ensure!(
        left.error_code == NONE && left.member_epoch == -1,
        "{left:?}"
    );
    ensure!(!engine.groups().is_consumer_group("g"));
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

/// The admin side of consumer-protocol groups, on both of the SDK's
/// transports: CONSUMER_GROUP_DESCRIBE (Flume) and ConsumerGroupDescribe
/// with ListGroups v5 (Kafka) answer the same group the same way, with
/// each member's epoch, partitions and target while one reconciles; Flume's
/// LIST_GROUPS lists it once (type consumer, its state) beside a classic
/// group and a group known by commits only; `/api/overview` shows it too.
#[test]
fn consumer_protocol_groups_are_described_over_both_transports_and_the_overview() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (mut cfg, _clock) = common::manual_config(dir.path());
    cfg.kafka_listen = Some("127.0.0.1:0".into());
    cfg.http_listen = Some("127.0.0.1:0".into());
    let broker = flume_rt::block_on(Broker::start(cfg)).context("broker starts")?;
    let engine = broker.engine().clone();
    engine
        .records()
        .create_topic("t", common::topic(4))
        .context("topic")?;
    let id = Uuid::from_bytes(engine.records().topic("t").context("t")?.id.0);
    let kafka = broker.kafka_addr().context("kafka")?.to_string();
    let flume = broker.local_addr().to_string();
    let http = broker.http_addr().context("http")?;
    let mut k = Kc::connect(&kafka)?;

    // m1 owns all four; m2 joins, so m1 is asked to give two up: the group
    // reconciles until m1 acknowledges.
    let a = hb(&mut k, "cg", "", 0, Some(&["t"]), None)?;
    let m1 = a.member_id.clone().context("member id")?.to_string();
    let b = hb(&mut k, "cg", "", 0, Some(&["t"]), None)?;
    let m2 = b.member_id.clone().context("member id")?.to_string();
    let all = parts(&a);
    let a = hb(&mut k, "cg", &m1, a.member_epoch, None, Some((id, &all)))?;
    ensure!(parts(&a).len() == 2, "{a:?}");
    // Committed offsets of the consumer group, and of a group with none else.
    let r = k.call(9, &commit("cg", &m1, a.member_epoch))?;
    ensure!(r.topics[0].partitions[0].error_code == NONE, "{r:?}");
    let r = k.call(9, &commit("old", "", -1))?;
    ensure!(r.topics[0].partitions[0].error_code == NONE, "{r:?}");

    let describe = |addr: String, names: Vec<&'static str>| {
        flume_rt::block_on(async move {
            let admin = flume_client::Admin::connect(&addr).await?;
            let d = admin.describe_consumer_groups(&names).await?;
            admin.close().await;
            anyhow::Ok(d)
        })
    };
    for addr in [flume.clone(), format!("kafka://{kafka}")] {
        for names in [vec![], vec!["cg", "old", "nobody"]] {
            let d = describe(addr.clone(), names.clone())?;
            ensure!(d.len() == 1, "{addr} {names:?}: only cg is one: {d:?}");
            let g = &d[0];
            ensure!(
                g.group == "cg" && g.state == "Reconciling" && g.assignor == "uniform",
                "{addr}: {g:?}"
            );
            ensure!(
                g.members.len() == 2 && g.epoch == b.member_epoch,
                "{addr}: {g:?}"
            );
            let one = g.members.iter().find(|m| m.member_id == m1).context("m1")?;
            let two = g.members.iter().find(|m| m.member_id == m2).context("m2")?;
            ensure!(
                one.member_epoch < g.epoch && one.subscribed == ["t"],
                "{one:?}"
            );
            // m1 was given two (the two it gives up are pending); m2's two
            // are its target until m1 acknowledges.
            let flat = |tps: &[flume_client::TopicPartitions]| -> Vec<i32> {
                tps.iter().flat_map(|t| t.partitions.clone()).collect()
            };
            ensure!(
                flat(&one.assignment).len() == 2 && one.assignment[0].topic == "t",
                "{addr}: {one:?}"
            );
            ensure!(
                flat(&one.target) == flat(&one.assignment),
                "{addr}: {one:?}"
            );
            ensure!(flat(&two.target).len() == 2, "{addr}: {two:?}");
            ensure!(
                two.assignment.iter().all(|t| t.partitions.is_empty()),
                "{two:?}"
            );
        }
    }

    // Flume's LIST_GROUPS: the consumer group once, with its state.
    let listed = flume_rt::block_on(async {
        let admin = flume_client::Admin::connect(&flume).await?;
        let l = admin.list_groups(&[]).await?;
        let only = admin.list_groups(&["Reconciling"]).await?;
        admin.close().await;
        anyhow::Ok((l, only))
    })?;
    let rows: Vec<(&str, &str, &str)> = listed
        .0
        .iter()
        .map(|g| (g.group.as_str(), g.state.as_str(), g.protocol_type.as_str()))
        .collect();
    ensure!(
        rows == [("cg", "Reconciling", "consumer"), ("old", "Empty", "")],
        "{rows:?}"
    );
    ensure!(
        listed.1.len() == 1 && listed.1[0].group == "cg",
        "{:?}",
        listed.1
    );

    // The overview: the group with its type, epochs and members.
    let body = http_get(http, "/api/overview")?;
    let o: serde_json::Value = serde_json::from_str(&body)?;
    let g = o["groups"]
        .as_array()
        .context("groups")?
        .iter()
        .find(|g| g["group"] == "cg")
        .context("cg in the overview")?;
    ensure!(
        g["type"] == "consumer" && g["state"] == "reconciling" && g["members"] == 2,
        "{g}"
    );
    ensure!(
        g["assignor"] == "uniform" && g["epoch"] == b.member_epoch,
        "{g}"
    );
    let list = g["member_list"].as_array().context("member_list")?;
    let two = list
        .iter()
        .find(|m| m["member_id"] == m2.as_str())
        .context("m2")?;
    ensure!(
        two["partitions"] == "" && two["target"].as_str().is_some_and(|t| t.len() == 5),
        "{two}"
    );
    ensure!(
        o["groups"]
            .as_array()
            .context("groups")?
            .iter()
            .filter(|g| g["group"] == "cg")
            .count()
            == 1,
        "once: {o}"
    );
    Ok(())
}

/// GET over HTTP/1.0 (the answer is not chunked): the body.
fn http_get(addr: std::net::SocketAddr, path: &str) -> Result<String> {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr)?;
    c.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(c, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut resp = String::new();
    c.read_to_string(&mut resp)?;
    ensure!(
        resp.starts_with("HTTP/1.0 200") || resp.starts_with("HTTP/1.1 200"),
        "{resp}"
    );
    let (_, body) = resp.split_once("\r\n\r\n").context("a body")?;
    Ok(body.to_owned())
}
