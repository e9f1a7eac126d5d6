//! The SDK's `GroupConsumer` over Kafka's consumer group protocol (KIP-848,
//! `GroupProtocol::Consumer`) against the broker's Kafka listener, in
//! process: one member reads and commits; a second member joins and the
//! partitions move incrementally (only the revoked ones in `Revoked`); a
//! member that closes hands its partitions over; a new member resumes from
//! the commits; assignor names; the setting on a Flume address.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use flume_broker::Broker;
use flume_client::{
    Admin, Error, GroupConsumer, GroupConsumerBuilder, GroupProtocol, Producer, RebalanceEvent,
    TopicPartition,
};
use futures::FutureExt;

/// A broker with both listeners whose consumer-protocol members heartbeat
/// every 100 ms, and a topic `t` of 4 partitions: (broker, "kafka://…",
/// Flume's "host:port").
async fn start(dir: &std::path::Path) -> (Broker, String, String) {
    let mut c = common::config(dir);
    c.kafka_listen = Some("127.0.0.1:0".into());
    c.consumer_groups.heartbeat_interval_ms = 100;
    let broker = Broker::start(c).await.expect("broker starts");
    broker
        .engine()
        .records()
        .create_topic("t", common::topic(4))
        .expect("topic created");
    let kafka = format!(
        "kafka://{}",
        broker.kafka_addr().expect("the Kafka listener")
    );
    let native = broker.local_addr().to_string();
    (broker, kafka, native)
}

/// Produces `v{from}`..`v{to-1}`, keyed so they spread over the partitions.
async fn produce(kafka: &str, from: usize, to: usize) -> Result<()> {
    let p = Producer::connect(kafka).await?;
    for i in from..to {
        p.send(
            "t",
            Some(format!("k{i}").as_bytes()),
            format!("v{i}").as_bytes(),
        )
        .await?;
    }
    p.close().await;
    Ok(())
}

fn member(addr: &str, group: &str) -> GroupConsumerBuilder {
    GroupConsumer::builder(addr, group)
        .topic("t")
        .group_protocol(GroupProtocol::Consumer)
        .max_wait(Duration::from_millis(100))
        .auto_commit(false)
}

/// One record from `c` within 200 ms, committed, its value recorded once.
async fn read_one(c: &mut GroupConsumer, seen: &mut BTreeSet<String>) -> Result<bool> {
    let Some(r) = flume_rt::timeout(Duration::from_millis(200), c.recv())
        .await
        .flatten()
    else {
        return Ok(false);
    };
    let r = r?;
    let v = String::from_utf8(r.payload().to_vec())?;
    ensure!(seen.insert(v.clone()), "{v} read twice");
    c.commit(&r).await?;
    Ok(true)
}

fn all_partitions() -> BTreeSet<TopicPartition> {
    (0..4).map(|p| ("t".to_owned(), p)).collect()
}

/// One member takes every partition, reads every record and commits; the
/// group's offsets are at the end; a new member after it resumes there.
#[test]
fn one_member_reads_everything_commits_and_a_new_member_resumes() -> Result<()> {
    let dir = tempfile::tempdir()?;
    flume_rt::block_on(async {
        let (broker, kafka, native) = start(dir.path()).await;
        produce(&kafka, 0, 40).await?;
        let mut a = member(&kafka, "solo").assignor("uniform").build().await?;
        let events = a.events();
        ensure!(a.assignment().await.into_iter().collect::<BTreeSet<_>>() == all_partitions());
        let epoch = a.generation().await;
        ensure!(epoch > 0, "member epoch {epoch}");
        let id = a.member_id().await;
        ensure!(
            id.len() == 36 && id.matches('-').count() == 4,
            "member id {id:?}"
        );
        match events.try_recv() {
            Some(RebalanceEvent::Assigned {
                generation,
                partitions,
            }) => {
                ensure!(generation == epoch);
                ensure!(partitions.into_iter().collect::<BTreeSet<_>>() == all_partitions());
            }
            other => anyhow::bail!("first event {other:?}"),
        }
        let mut seen = BTreeSet::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while seen.len() < 40 {
            ensure!(Instant::now() < deadline, "read {} of 40", seen.len());
            read_one(&mut a, &mut seen).await?;
        }
        a.close().await?;
        for addr in [&kafka, &native] {
            let offsets = Admin::connect(addr)
                .await?
                .group_offsets("solo", &["t".to_string()])
                .await?;
            ensure!(offsets.len() == 4, "{addr}: {offsets:?}");
            ensure!(
                offsets.iter().all(|o| o.committed == o.log_end),
                "{addr}: {offsets:?}"
            );
        }
        // The member left (epoch -1): a new one joins at once and reads
        // only what came after the commits.
        produce(&kafka, 40, 41).await?;
        let mut b = member(&kafka, "solo").build().await?;
        let r = flume_rt::timeout(Duration::from_secs(20), b.recv())
            .await
            .context("a record")?
            .context("open")??;
        ensure!(r.payload() == b"v40", "{:?}", r.payload());
        b.close().await?;
        broker.shutdown().await;
        Ok(())
    })
}

/// A second member joins while the first reads: the first gives up only
/// the partitions that move (its `Revoked` names just those, after it
/// committed them), the second takes them once released; every record is
/// read once across the two. Then the first closes (commit, leave) and
/// the second takes its partitions and reads on from its commits.
#[test]
fn partitions_move_incrementally_and_a_closing_member_hands_over() -> Result<()> {
    let dir = tempfile::tempdir()?;
    flume_rt::block_on(async {
        let (broker, kafka, _) = start(dir.path()).await;
        produce(&kafka, 0, 40).await?;
        let mut a = member(&kafka, "pair").build().await?;
        let events_a = a.events();
        ensure!(a.assignment().await.len() == 4);
        let mut seen = BTreeSet::new();
        // B joins while A reads (A reconciles in its `recv`).
        let joining = member(&kafka, "pair").build();
        futures::pin_mut!(joining);
        let mut b = loop {
            futures::select! {
                b = joining.as_mut().fuse() => break b?,
                r = a.recv().fuse() => {
                    // Committed here, not in the select: a commit is never cut short.
                    let r = r.context("open")??;
                    let v = String::from_utf8(r.payload().to_vec())?;
                    ensure!(seen.insert(v.clone()), "{v} read twice");
                    a.commit(&r).await?;
                }
            }
        };
        let events_b = b.events();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (pa, pb) = (a.assignment().await, b.assignment().await);
            if seen.len() == 40 && pa.len() == 2 && pb.len() == 2 {
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "read {} of 40; assignments {pa:?} {pb:?}",
                seen.len()
            );
            read_one(&mut a, &mut seen).await?;
            read_one(&mut b, &mut seen).await?;
        }
        let (pa, pb): (BTreeSet<_>, BTreeSet<_>) = (
            a.assignment().await.into_iter().collect(),
            b.assignment().await.into_iter().collect(),
        );
        ensure!(pa.is_disjoint(&pb), "{pa:?} {pb:?}");
        ensure!(
            pa.union(&pb).cloned().collect::<BTreeSet<_>>() == all_partitions(),
            "{pa:?} {pb:?}"
        );
        // A's events: Assigned with all four, Revoked with exactly what
        // went to B, Assigned with what it kept.
        let ev: Vec<RebalanceEvent> = std::iter::from_fn(|| events_a.try_recv()).collect();
        let revoked: BTreeSet<TopicPartition> = ev
            .iter()
            .filter_map(|e| match e {
                RebalanceEvent::Revoked(p) => Some(p.clone()),
                RebalanceEvent::Assigned { .. } => None,
            })
            .flatten()
            .collect();
        ensure!(revoked == pb, "A revoked {revoked:?}, B has {pb:?}: {ev:?}");
        match ev.last() {
            Some(RebalanceEvent::Assigned { partitions, .. }) => ensure!(
                partitions.iter().cloned().collect::<BTreeSet<_>>() == pa,
                "{ev:?}"
            ),
            other => anyhow::bail!("A's last event {other:?}"),
        }
        ensure!(
            !std::iter::from_fn(|| events_b.try_recv())
                .any(|e| matches!(e, RebalanceEvent::Revoked(_))),
            "B revoked nothing"
        );
        // A closes: B takes all four and reads the next records once.
        produce(&kafka, 40, 80).await?;
        a.close().await?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while seen.len() < 80 || b.assignment().await.len() < 4 {
            ensure!(
                Instant::now() < deadline,
                "read {} of 80; B has {:?}",
                seen.len(),
                b.assignment().await
            );
            read_one(&mut b, &mut seen).await?;
        }
        let epoch = b.generation().await;
        ensure!(epoch > 1, "B's epoch {epoch}");
        b.close().await?;
        broker.shutdown().await;
        Ok(())
    })
}

/// The classic protocol's client-side assignors are no server assignors:
/// an error before anything is sent. On a Flume address the setting is
/// accepted and ignored.
#[test]
fn assignor_names_are_checked_and_flume_addresses_ignore_the_setting() -> Result<()> {
    let dir = tempfile::tempdir()?;
    flume_rt::block_on(async {
        let (broker, kafka, native) = start(dir.path()).await;
        for bad in ["cooperative-sticky", "roundrobin", "nope"] {
            match member(&kafka, "g").assignor(bad).build().await {
                Err(Error::InvalidArgument(m)) => {
                    ensure!(m.contains(bad) && m.contains("uniform"), "{m}");
                }
                other => anyhow::bail!("{bad}: {:?}", other.map(|_| ())),
            }
        }
        let c = member(&kafka, "g").assignor("range").build().await?;
        ensure!(c.assignment().await.len() == 4);
        c.close().await?;
        let c = member(&native, "native").build().await?;
        ensure!(c.assignment().await.len() == 4);
        c.close().await?;
        broker.shutdown().await;
        Ok(())
    })
}
