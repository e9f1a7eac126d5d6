//! Authentication end to end: SCRAM-SHA-256 over AUTHENTICATE,
//! `--auth required|optional`, users added and removed without a restart,
//! failed logins rate-limited and cut off, garbage AUTHENTICATE payloads.

use crate::common;

use std::time::Duration;

use anyhow::Result;
use bytes::Bytes;
use flume_broker::security::auth::{AuthMode, MAX_FAILURES};
use flume_broker::security::Principal;
use flume_broker::Broker;
use flume_client::lowlevel::{Client, Connection};
use flume_client::{ConnectionConfig, Error, ErrorCode, Producer, ProducerConfig};
use flume_protocol::{AuthenticateRequest, MetadataRequest};
use flume_rt as rt;

async fn broker(mode: AuthMode) -> Result<(tempfile::TempDir, Broker, String)> {
    let dir = tempfile::tempdir()?;
    let mut cfg = common::config(dir.path());
    cfg.auth = mode;
    let broker = Broker::start(cfg).await?;
    let addr = broker.local_addr().to_string();
    Ok((dir, broker, addr))
}

fn login(user: &str, password: &str) -> ConnectionConfig {
    ConnectionConfig::default().credentials(user, password)
}

#[test]
fn required_auth_serves_only_logged_in_connections() -> Result<()> {
    rt::block_on(async {
        let (_dir, broker, addr) = broker(AuthMode::Required).await?;
        // Added while the broker runs: takes effect for the next login.
        broker.add_user("alice", "correct horse").await?;

        let producer = Producer::with_config(
            &addr,
            ProducerConfig::default().connection(login("alice", "correct horse")),
        )
        .await?;
        producer.send("orders", None, b"hello").await?;
        assert!(broker
            .connection_principals()
            .contains(&Principal::User("alice".into())));

        let err = Client::connect(&addr, login("alice", "battery staple"))
            .await
            .expect_err("a wrong password is refused");
        assert!(matches!(err, Error::Auth { .. }), "{err:?}");
        assert!(err.to_string().contains("AUTHENTICATION_FAILED"), "{err}");
        let err = Client::connect(&addr, login("mallory", "correct horse"))
            .await
            .expect_err("an unknown user is refused the same way");
        assert!(err.to_string().contains("AUTHENTICATION_FAILED"), "{err}");

        // Without a login every request is refused and nothing happens.
        let anonymous = Client::connect(&addr, ConnectionConfig::default()).await?;
        let err = Producer::with_config(&addr, ProducerConfig::default())
            .await?
            .send("created-by-nobody", None, b"x")
            .await
            .expect_err("no login, no produce");
        assert_eq!(err.code(), Some(ErrorCode::AuthenticationRequired), "{err}");
        let err = anonymous
            .call(&MetadataRequest::default())
            .await
            .expect_err("no login, no metadata");
        assert_eq!(err.code(), Some(ErrorCode::AuthenticationRequired));
        assert!(
            broker
                .engine()
                .records()
                .topic("created-by-nobody")
                .is_none(),
            "a refused request does nothing"
        );

        // Removed: the next login fails; the open connection stays logged in.
        assert!(broker.remove_user("alice").await?);
        let err = Client::connect(&addr, login("alice", "correct horse"))
            .await
            .expect_err("a removed user is refused");
        assert!(matches!(err, Error::Auth { .. }), "{err:?}");
        producer.send("orders", None, b"still here").await?;
        assert_eq!(broker.users(), Vec::<String>::new());
        broker.shutdown().await;
        Ok(())
    })
}

#[test]
fn optional_auth_serves_anonymous_and_logged_in_clients() -> Result<()> {
    rt::block_on(async {
        let (_dir, broker, addr) = broker(AuthMode::Optional).await?;
        broker.add_user("bob", "pw-bob").await?;
        let anonymous = Client::connect(&addr, ConnectionConfig::default()).await?;
        anonymous.call(&MetadataRequest::default()).await?;
        let bob = Client::connect(&addr, login("bob", "pw-bob")).await?;
        bob.call(&MetadataRequest::default()).await?;
        // A new connection (a reconnect) logs in again.
        bob.close().await;
        bob.call(&MetadataRequest::default()).await?;
        // The closed connection leaves the broker's list when its task ends.
        let expected = vec![Principal::Anonymous, Principal::User("bob".into())];
        common::wait_until(
            "the closed connection to go",
            Duration::from_secs(5),
            || {
                let mut principals = broker.connection_principals();
                principals.sort();
                let done = principals == expected;
                async move { done }
            },
        )
        .await;
        let err = Client::connect(&addr, login("bob", "wrong"))
            .await
            .expect_err("a wrong password is refused in optional mode too");
        assert!(matches!(err, Error::Auth { .. }), "{err:?}");
        broker.shutdown().await;
        Ok(())
    })
}

#[test]
fn users_survive_a_restart() -> Result<()> {
    rt::block_on(async {
        let dir = tempfile::tempdir()?;
        let mut cfg = common::config(dir.path());
        cfg.auth = AuthMode::Required;
        let broker = Broker::start(cfg.clone()).await?;
        broker.add_user("carol", "pw-carol").await?;
        broker.shutdown().await;
        drop(broker);
        let text = std::fs::read_to_string(dir.path().join("__users"))?;
        assert!(!text.contains("pw-carol"), "only verifiers are stored");
        let broker = Broker::start(cfg).await?;
        let addr = broker.local_addr().to_string();
        Client::connect(&addr, login("carol", "pw-carol")).await?;
        broker.shutdown().await;
        Ok(())
    })
}

#[test]
fn failed_logins_are_slowed_and_the_connection_is_cut() -> Result<()> {
    rt::block_on(async {
        let (_dir, broker, addr) = broker(AuthMode::Required).await?;
        broker.add_user("dave", "pw").await?;
        let conn = Connection::connect(&addr, ConnectionConfig::default()).await?;
        let garbage = [
            &b""[..],
            b"n,,",
            b"y,,n=dave,r=abc",
            b"n,,n=dave,r=a b",
            &[0xff; 40][..],
        ];
        assert_eq!(garbage.len(), usize::try_from(MAX_FAILURES)?);
        for (i, g) in garbage.iter().enumerate() {
            let req = AuthenticateRequest {
                mechanism: "SCRAM-SHA-256".into(),
                payload: Bytes::copy_from_slice(g),
            };
            let err = conn
                .call(&req, Duration::ZERO)
                .await
                .expect_err("garbage does not log in");
            assert_eq!(
                err.code(),
                Some(ErrorCode::AuthenticationFailed),
                "attempt {i}: {err}"
            );
        }
        // The broker closes the connection after the last answer.
        common::wait_until("the connection is cut", Duration::from_secs(2), || async {
            broker.connection_count() == 0
        })
        .await;
        // An unknown mechanism fails too, and a fresh connection can still log in.
        let conn = Connection::connect(&addr, ConnectionConfig::default()).await?;
        let req = AuthenticateRequest {
            mechanism: "PLAIN".into(),
            payload: Bytes::from_static(b"\0dave\0pw"),
        };
        let err = conn
            .call(&req, Duration::ZERO)
            .await
            .expect_err("PLAIN is not offered");
        assert_eq!(err.code(), Some(ErrorCode::AuthenticationFailed));
        Client::connect(&addr, login("dave", "pw")).await?;
        broker.shutdown().await;
        Ok(())
    })
}

#[test]
fn with_auth_off_a_login_is_refused_and_requests_are_served() -> Result<()> {
    rt::block_on(async {
        let (_dir, broker, addr) = broker(AuthMode::Off).await?;
        broker.add_user("erin", "pw").await?;
        let err = Client::connect(&addr, login("erin", "pw"))
            .await
            .expect_err("no logins when auth is off");
        assert!(matches!(err, Error::Auth { .. }), "{err:?}");
        Client::connect(&addr, ConnectionConfig::default())
            .await?
            .call(&MetadataRequest::default())
            .await?;
        broker.shutdown().await;
        Ok(())
    })
}
