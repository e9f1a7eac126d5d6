//! One application, written once against the SDK, run unchanged on a broker
//! in its own process without TCP (`EmbeddedBroker::address`,
//! `Broker::in_process_address`: `inproc://...`), on a Flume broker over TCP
//! and on a Kafka listener (`kafka://`): only the address differs.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, Result};
use flume_broker::{Broker, EmbeddedBroker};
use flume_client::{Admin, CreateTopicRequest, GroupConsumer, PartitionConsumer, Producer};
use flume_client::{ShareConsumer, StartOffset};
use futures::StreamExt;

/// What a service does: create its topic, produce keyed records, read them
/// back with a consumer group (commit as it goes), check the group has no
/// lag, and read one partition from the start. Returns the values read by
/// the group, sorted.
async fn application(addr: &str, topic: &str) -> Result<Vec<String>> {
    let admin = Admin::connect(addr).await.context("admin")?;
    admin
        .create_topic(CreateTopicRequest {
            name: topic.into(),
            partitions: 3,
            ..CreateTopicRequest::default()
        })
        .await
        .context("create the topic")?;
    let producer = Producer::connect(addr).await.context("producer")?;
    for i in 0..30 {
        producer
            .send(
                topic,
                Some(format!("k{i}").as_bytes()),
                format!("v{i}").as_bytes(),
            )
            .await?;
    }
    producer.close().await;

    let mut group = GroupConsumer::builder(addr, "app")
        .topic(topic)
        .max_wait(Duration::from_millis(100))
        .auto_commit(false)
        .build()
        .await
        .context("join the group")?;
    let mut seen = BTreeSet::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while seen.len() < 30 {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "read {} of 30",
            seen.len()
        );
        if let Some(r) = flume_rt::timeout(Duration::from_millis(500), group.recv())
            .await
            .flatten()
        {
            let r = r?;
            anyhow::ensure!(
                seen.insert(String::from_utf8_lossy(r.payload()).into_owned()),
                "a record twice"
            );
            group.commit(&r).await?;
        }
    }
    group.close().await?;
    let offsets = admin.group_offsets("app", &[topic.to_string()]).await?;
    anyhow::ensure!(offsets.len() == 3, "{offsets:?}");
    anyhow::ensure!(
        offsets.iter().all(|o| o.committed == o.log_end),
        "lag left: {offsets:?}"
    );

    // One partition from the start: its records, in order, all from the group's set.
    let mut part = PartitionConsumer::connect(addr, topic, 0, StartOffset::Earliest).await?;
    let end = offsets
        .iter()
        .find(|o| o.partition == 0)
        .map_or(0, |o| o.log_end);
    let mut read = 0i64;
    while read < end {
        let r = flume_rt::timeout(Duration::from_secs(10), part.next())
            .await
            .flatten()
            .context("partition 0's records")??;
        anyhow::ensure!(
            i64::try_from(r.offset)? == read,
            "offset {} after {read}",
            r.offset
        );
        anyhow::ensure!(seen.contains(&*String::from_utf8_lossy(r.payload())));
        read += 1;
    }
    Ok(seen.into_iter().collect())
}

fn expected() -> Vec<String> {
    let mut v: Vec<String> = (0..30).map(|i| format!("v{i}")).collect();
    v.sort();
    v
}

#[test]
fn the_same_application_runs_embedded_in_process_over_tcp_and_over_kafka() -> Result<()> {
    // Embedded: the engine in this process, reached by the SDK without a port.
    let dir = tempfile::tempdir()?;
    let embedded = EmbeddedBroker::open(dir.path())?;
    let addr = embedded.address()?;
    assert!(addr.starts_with("inproc://"), "{addr}");
    let got = flume_rt::block_on(application(&addr, "embedded"))?;
    assert_eq!(got, expected());
    // What the SDK wrote is the embedded API's too: the same engine.
    assert_eq!(
        embedded
            .blocking()
            .lag("embedded", "app")?
            .values()
            .sum::<u64>(),
        0
    );
    flume_rt::block_on(embedded.close());

    // A TCP broker: its in-process address, its port, its Kafka listener.
    let dir = tempfile::tempdir()?;
    let mut c = common::config(dir.path());
    c.kafka_listen = Some("127.0.0.1:0".into());
    let broker = flume_rt::block_on(Broker::start(c))?;
    let kafka = format!("kafka://{}", broker.kafka_addr().context("kafka listener")?);
    for (addr, topic) in [
        (broker.in_process_address().to_owned(), "inproc"),
        (broker.local_addr().to_string(), "tcp"),
        (kafka, "kafka"),
    ] {
        let got = flume_rt::block_on(application(&addr, topic)).with_context(|| addr.clone())?;
        assert_eq!(got, expected(), "{addr}");
    }
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

/// Share groups (queues) in process: two members of one share group split
/// the records of a partition, each accepted exactly once.
#[test]
fn a_share_group_works_in_process() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let embedded = EmbeddedBroker::open(dir.path())?;
    let addr = embedded.address()?;
    flume_rt::block_on(async {
        Admin::connect(&addr)
            .await?
            .create_topic(CreateTopicRequest {
                name: "jobs".into(),
                partitions: 1,
                ..CreateTopicRequest::default()
            })
            .await?;
        let member = || {
            ShareConsumer::builder(&addr, "workers")
                .subscribe(["jobs"])
                .max_wait(Duration::from_millis(50))
                .build()
        };
        let (mut a, mut b) = (member().await?, member().await?);
        // A share group starts at the end of the log (KIP-932's default):
        // both members are assigned and have fetched before anything is produced.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            anyhow::ensure!(std::time::Instant::now() < deadline, "members not assigned");
            let mut ready = true;
            for c in [&mut a, &mut b] {
                anyhow::ensure!(c.poll().await?.is_empty(), "nothing produced yet");
                ready &= !c.assignment().is_empty();
            }
            if ready {
                break;
            }
        }
        let producer = Producer::connect(&addr).await?;
        for i in 0..100 {
            producer
                .send("jobs", None, format!("job{i}").as_bytes())
                .await?;
        }
        producer.close().await;
        let mut done = BTreeSet::new();
        while done.len() < 100 {
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "{} of 100",
                done.len()
            );
            for c in [&mut a, &mut b] {
                for r in c.poll().await? {
                    anyhow::ensure!(done.insert(r.payload().to_vec()), "a job accepted twice");
                    r.accept();
                }
                c.commit().await?;
            }
        }
        a.close().await?;
        b.close().await?;
        anyhow::Ok(())
    })?;
    flume_rt::block_on(embedded.close());
    Ok(())
}

/// An address nobody listens on is a clear connect error, not a hang.
#[test]
fn an_unknown_in_process_address_is_refused_at_once() {
    let Err(err) = flume_rt::block_on(Producer::connect("inproc://nobody-here")) else {
        panic!("connected to nobody");
    };
    let text = err.to_string();
    assert!(text.contains("inproc://nobody-here"), "{text}");
}
