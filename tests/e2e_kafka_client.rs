//! The SDK's Kafka client (`kafka://` addresses) against Flume's own Kafka
//! listener, in process: the same SDK calls as over Flume's protocol, only
//! the address changes; and records crossing between the two protocols.

use crate::common;

use anyhow::{Context, Result};
use flume_broker::Broker;
use flume_client::{Admin, CreateTopicRequest, ErrorCode};

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
