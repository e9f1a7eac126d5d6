//! The SDK's Kafka client (`kafka://` addresses) logging in and encrypting
//! against Flume's own Kafka listener: SASL PLAIN, SCRAM-SHA-256 and
//! SCRAM-SHA-512 with the SDK's `Credentials`, TLS with its `TlsConfig`, and
//! both at once; a wrong password, an unknown user, a missing login and a
//! certificate from another CA each fail at once with their own error.

use crate::common;
use crate::common::pki::{pki, Ca, Pki};

use std::future::Future;
use std::time::Duration;

use anyhow::{Context, Result};
use flume_broker::security::auth::AuthMode;
use flume_broker::security::Principal;
use flume_broker::Broker;
use flume_client::{
    Admin, ConnectionConfig, CreateTopicRequest, Credentials, Error, GroupConsumer,
    PartitionConsumer, Producer, ProducerConfig, SaslMechanism, StartOffset, TlsConfig,
};

/// A broker whose Kafka listener requires a login (user "kuser", password
/// "kpw"), with TLS on every port when `tls` is given; and "kafka://host:port"
/// with `host` as the bootstrap name.
fn start(dir: &std::path::Path, tls: Option<&Pki>, host: &str) -> Result<(Broker, String)> {
    let mut c = common::config(dir);
    c.kafka_listen = Some("127.0.0.1:0".into());
    c.auth = AuthMode::Required;
    if let Some(pki) = tls {
        c.tls_cert = Some(pki.server.cert.clone());
        c.tls_key = Some(pki.server.key.clone());
    }
    let broker = flume_rt::block_on(async {
        let b = Broker::start(c).await?;
        b.add_user("kuser", "kpw").await?;
        anyhow::Ok(b)
    })?;
    let port = broker.kafka_addr().context("the Kafka listener")?.port();
    Ok((broker, format!("kafka://{host}:{port}")))
}

/// Connection settings that log in as `user` with `mechanism`; a short connect timeout.
fn login(user: &str, password: &str, mechanism: SaslMechanism) -> ConnectionConfig {
    let mut c = ConnectionConfig::default().connect_timeout(Duration::from_secs(2));
    c.credentials = Some(Credentials::new(user, password).mechanism(mechanism));
    c
}

/// `fut`'s result, failing the test if it takes more than 5 s (a refusal
/// must come at once, not after retries or a hang). Boxed: the SDK's
/// futures are large in a debug build, and the test thread's stack is not.
async fn promptly<T>(what: &str, fut: impl Future<Output = T>) -> T {
    flume_rt::timeout(Duration::from_secs(5), Box::pin(fut))
        .await
        .unwrap_or_else(|| panic!("{what}: no answer within 5 s"))
}

/// Creates `topic` (one partition) over `kafka` with `conn`, produces three
/// records to it, reads them back through a partition consumer and a group
/// member with the same settings, and checks the member's commit.
async fn round_trip(kafka: &str, conn: &ConnectionConfig, topic: &str, group: &str) -> Result<()> {
    let admin = Admin::connect_with(kafka, conn.clone()).await?;
    admin
        .create_topic(CreateTopicRequest {
            name: topic.to_owned(),
            partitions: 1,
            ..CreateTopicRequest::default()
        })
        .await?;
    let producer = Box::pin(Producer::with_config(
        kafka,
        ProducerConfig::default().connection(conn.clone()),
    ))
    .await?;
    for v in ["one", "two", "three"] {
        producer.send(topic, None, v.as_bytes()).await?;
    }
    producer.close().await;
    let mut pc = PartitionConsumer::connect_with(
        kafka,
        topic,
        0,
        StartOffset::Earliest,
        flume_client::FetchConfig::default(),
        conn.clone(),
    )
    .await?;
    let mut read = Vec::new();
    while read.len() < 3 {
        read.extend(
            promptly("partition fetch", pc.poll_batch())
                .await?
                .into_iter()
                .map(|r| r.payload().to_vec()),
        );
    }
    assert_eq!(read, [&b"one"[..], b"two", b"three"]);
    let mut member = Box::pin(
        GroupConsumer::builder(kafka, group)
            .topic(topic)
            .auto_commit(false)
            .connection(conn.clone())
            .build(),
    )
    .await?;
    let first = promptly("group record", member.recv())
        .await
        .context("a record")??;
    assert_eq!(first.payload(), b"one");
    member.commit(&first).await?;
    member.close().await?;
    let committed = admin.group_offsets(group, &[topic.to_owned()]).await?;
    assert_eq!(committed[0].committed, 1);
    admin.close().await;
    Ok(())
}

/// Each mechanism logs in and carries a producer, a partition consumer, a
/// group member (its coordinator's connection logs in too) and the admin;
/// a wrong password, an unknown user and no login at all are refused at
/// once with `Error::Auth` (a missing login: the connection the broker
/// closes), by every entry point.
#[test]
fn the_sdk_over_kafka_logs_in_with_plain_and_scram_and_wrong_logins_fail_at_once() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (broker, kafka) = start(dir.path(), None, "127.0.0.1")?;
    flume_rt::block_on(async {
        let mechanisms = [
            SaslMechanism::Plain,
            SaslMechanism::ScramSha256,
            SaslMechanism::ScramSha512,
        ];
        for (i, m) in mechanisms.into_iter().enumerate() {
            let conn = login("kuser", "kpw", m);
            Box::pin(round_trip(
                &kafka,
                &conn,
                &format!("sasl-{i}"),
                &format!("g-{i}"),
            ))
            .await
            .with_context(|| format!("{m:?}"))?;
        }
        assert!(broker
            .connection_principals()
            .iter()
            .all(|p| *p == Principal::User("kuser".into())));

        for m in mechanisms {
            for (user, pw) in [("kuser", "wrong"), ("nobody", "kpw")] {
                let conn = login(user, pw, m);
                let what = format!("{m:?} as {user}/{pw}");
                let p = promptly(
                    &what,
                    Producer::with_config(
                        &kafka,
                        ProducerConfig::default().connection(conn.clone()),
                    ),
                )
                .await;
                let e = p.expect_err("a wrong login is refused");
                assert!(matches!(e, Error::Auth { .. }), "{what}: {e}");
                assert!(!e.is_retriable(), "{what}: {e}");
                assert!(
                    e.to_string().contains("SASL_AUTHENTICATION_FAILED"),
                    "{what}: {e}"
                );
                let a = promptly(&what, Admin::connect_with(&kafka, conn.clone())).await;
                assert!(matches!(a, Err(Error::Auth { .. })), "{what}: {a:?}");
                let g = promptly(
                    &what,
                    GroupConsumer::builder(&kafka, "g-wrong")
                        .topic("sasl-0")
                        .connection(conn.clone())
                        .build(),
                )
                .await;
                assert!(matches!(g, Err(Error::Auth { .. })), "{what}: {g:?}");
                let c = promptly(
                    &what,
                    PartitionConsumer::connect_with(
                        &kafka,
                        "sasl-0",
                        0,
                        StartOffset::Earliest,
                        flume_client::FetchConfig::default(),
                        conn,
                    ),
                )
                .await;
                assert!(matches!(c, Err(Error::Auth { .. })), "{what}: {c:?}");
            }
        }
        // No login where one is required: the broker closes the connection at
        // the first request; that is an error at once, saying so.
        let anonymous = ConnectionConfig::default().connect_timeout(Duration::from_secs(2));
        let e = promptly(
            "no login",
            Producer::with_config(&kafka, ProducerConfig::default().connection(anonymous)),
        )
        .await
        .expect_err("no login, no metadata");
        assert!(
            e.to_string().contains("login"),
            "the error suggests a missing login: {e}"
        );
        anyhow::Ok(())
    })?;
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

/// TLS on the Kafka listener (the certificate the Flume port uses): the SDK
/// verifies it against the CA it is given, bootstrapping by host name, with
/// SCRAM-SHA-512 and PLAIN over it; a CA that did not sign it is refused at
/// once with `Error::Tls`, and a client without TLS gets an error at once too.
#[test]
fn the_sdk_over_kafka_speaks_tls_with_sasl_inside() -> Result<()> {
    let pki = pki()?;
    let dir = tempfile::tempdir()?;
    let (broker, kafka) = start(dir.path(), Some(&pki), "localhost")?;
    flume_rt::block_on(async {
        let tls = TlsConfig::new().ca_file(&pki.ca_file);
        for (i, m) in [SaslMechanism::ScramSha512, SaslMechanism::Plain]
            .into_iter()
            .enumerate()
        {
            let conn = login("kuser", "kpw", m).tls(tls.clone());
            Box::pin(round_trip(
                &kafka,
                &conn,
                &format!("tls-{i}"),
                &format!("tg-{i}"),
            ))
            .await
            .with_context(|| format!("TLS with {m:?}"))?;
        }
        assert!(broker.is_tls());

        let other = Ca::new("Someone Else")?;
        let other_file = other.write(pki.dir.path(), "other.pem")?;
        let wrong_ca = login("kuser", "kpw", SaslMechanism::ScramSha256)
            .tls(TlsConfig::new().ca_file(&other_file));
        let e = promptly("another CA", Admin::connect_with(&kafka, wrong_ca))
            .await
            .expect_err("a certificate from another CA is refused");
        assert!(matches!(e, Error::Tls { .. }), "{e}");
        assert!(!e.is_retriable(), "{e}");

        let plain = login("kuser", "kpw", SaslMechanism::ScramSha256);
        let e = promptly("no TLS on a TLS port", Admin::connect_with(&kafka, plain))
            .await
            .expect_err("a plain client on the TLS port fails");
        assert!(!matches!(e, Error::Auth { .. }), "{e}");
        assert!(e.to_string().contains("needs a TLS connection"), "{e}");
        anyhow::Ok(())
    })?;
    flume_rt::block_on(broker.shutdown());
    Ok(())
}
