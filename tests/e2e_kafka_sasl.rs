//! SASL on the Kafka listener with an independent client
//! (rskafka, its SASL from rsasl): SCRAM-SHA-256 and PLAIN against the
//! broker's users, wrong passwords and missing logins refused.

use crate::common;

use std::time::Duration;

use anyhow::{Context, Result};
use flume_broker::security::auth::AuthMode;
use flume_broker::security::Principal;
use flume_broker::Broker;
use rskafka::client::partition::{Compression, UnknownTopicHandling};
use rskafka::client::{ClientBuilder, Credentials, SaslConfig};
use rskafka::record::Record;

fn tokio() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Give up on a broker that refuses after a short while (rskafka retries).
fn quick() -> rskafka::BackoffConfig {
    rskafka::BackoffConfig {
        init_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
        base: 2.0,
        deadline: Some(Duration::from_millis(200)),
    }
}

fn creds(user: &str, pw: &str) -> Credentials {
    Credentials::new(user.to_owned(), pw.to_owned())
}

#[test]
fn scram_and_plain_log_in_and_others_are_refused() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut c = common::config(dir.path());
    c.kafka_listen = Some("127.0.0.1:0".into());
    c.read_timeout = Duration::from_secs(1);
    c.auth = AuthMode::Required;
    let broker = flume_rt::block_on(async {
        let b = Broker::start(c).await?;
        b.add_user("kuser", "kpw").await?;
        Ok::<_, anyhow::Error>(b)
    })?;
    let kafka = broker.kafka_addr().context("kafka listener")?.to_string();
    tokio().block_on(async {
        let client = ClientBuilder::new(vec![kafka.clone()])
            .sasl_config(SaslConfig::ScramSha256(creds("kuser", "kpw")))
            .build()
            .await?;
        client
            .controller_client()?
            .create_topic("sasl", 1, 1, 5_000)
            .await?;
        let pc = client
            .partition_client("sasl", 0, UnknownTopicHandling::Error)
            .await?;
        let record = Record {
            key: None,
            value: Some(b"over scram".to_vec()),
            headers: Default::default(),
            timestamp: chrono::DateTime::from_timestamp_millis(1_700_000_000_000)
                .context("timestamp")?,
        };
        pc.produce(vec![record], Compression::NoCompression).await?;
        let (got, _) = pc.fetch_records(0, 1..1_000_000, 1_000).await?;
        assert_eq!(got[0].record.value.as_deref(), Some(&b"over scram"[..]));
        assert!(broker
            .connection_principals()
            .contains(&Principal::User("kuser".into())));

        let plain = ClientBuilder::new(vec![kafka.clone()])
            .sasl_config(SaslConfig::Plain(creds("kuser", "kpw")))
            .build()
            .await?;
        assert!(plain.list_topics().await?.iter().any(|t| t.name == "sasl"));

        for bad in [
            SaslConfig::ScramSha256(creds("kuser", "wrong")),
            SaslConfig::Plain(creds("kuser", "wrong")),
            SaslConfig::Plain(creds("nobody", "kpw")),
        ] {
            let refused = async {
                let c = ClientBuilder::new(vec![kafka.clone()])
                    .sasl_config(bad)
                    .backoff_config(quick())
                    .build()
                    .await?;
                c.list_topics().await?;
                Ok::<_, anyhow::Error>(())
            };
            let r = tokio::time::timeout(Duration::from_secs(5), refused).await;
            assert!(matches!(r, Ok(Err(_))), "a wrong login is refused: {r:?}");
        }
        let anonymous = async {
            let c = ClientBuilder::new(vec![kafka.clone()])
                .backoff_config(quick())
                .build()
                .await?;
            c.list_topics().await?;
            Ok::<_, anyhow::Error>(())
        };
        let r = tokio::time::timeout(Duration::from_secs(5), anonymous).await;
        assert!(matches!(r, Ok(Err(_))), "no login, no metadata: {r:?}");
        Ok::<_, anyhow::Error>(())
    })?;
    flume_rt::block_on(broker.shutdown());
    Ok(())
}
