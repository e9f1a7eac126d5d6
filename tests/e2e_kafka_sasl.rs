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

/// Logs `k` in with SCRAM (`hash`) as `user`; the SaslAuthenticate error
/// code of the step that ended it (0: logged in).
fn scram_login(
    k: &mut common::kafka::Kc,
    hash: flume_protocol::scram::ScramHash,
    user: &str,
    pw: &str,
) -> Result<i16> {
    use flume_protocol::scram::ClientExchange;
    use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
    use kafka_protocol::protocol::StrBytes;
    let hs = k.call(
        1,
        &SaslHandshakeRequest::default()
            .with_mechanism(StrBytes::from_static_str(hash.mechanism())),
    )?;
    anyhow::ensure!(hs.error_code == 0, "handshake: {}", hs.error_code);
    let (mut c, first) = ClientExchange::start_with(hash, user, pw, "e2enonce")?;
    let r = k.call(
        1,
        &SaslAuthenticateRequest::default().with_auth_bytes(bytes::Bytes::from(first)),
    )?;
    if r.error_code != 0 {
        return Ok(r.error_code);
    }
    let fin = c.respond(&r.auth_bytes)?;
    let r = k.call(
        1,
        &SaslAuthenticateRequest::default().with_auth_bytes(bytes::Bytes::from(fin)),
    )?;
    if r.error_code == 0 {
        c.verify(&r.auth_bytes)?;
    }
    Ok(r.error_code)
}

/// Describe/AlterUserScramCredentials (raw frames): only an admin manages
/// the users; an upsertion (salt + SaltedPassword, as Kafka's admin clients
/// send) is a password a SCRAM login then takes, kept across a restart;
/// Kafka's refusals for bad iterations, mechanisms, names, duplicates and
/// missing credentials; a user whose last credential is deleted cannot log in.
#[test]
fn scram_credentials_are_managed_with_kafkas_admin_apis() -> Result<()> {
    use common::kafka::Kc;
    use flume_protocol::scram::ScramHash;
    use kafka_protocol::messages::alter_user_scram_credentials_request::{
        ScramCredentialDeletion, ScramCredentialUpsertion,
    };
    use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
    use kafka_protocol::messages::{
        AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
        DescribeUserScramCredentialsRequest,
    };
    use kafka_protocol::protocol::StrBytes;

    fn upsert(name: &str, hash: ScramHash, iterations: i32, pw: &str) -> ScramCredentialUpsertion {
        let salt = format!("salt-of-{name}").into_bytes();
        let salted = hash.salted_password(pw, &salt, u32::try_from(iterations).unwrap_or(4096));
        ScramCredentialUpsertion::default()
            .with_name(StrBytes::from_string(name.to_owned()))
            .with_mechanism(if hash == ScramHash::Sha256 { 1 } else { 2 })
            .with_iterations(iterations)
            .with_salt(bytes::Bytes::from(salt))
            .with_salted_password(bytes::Bytes::from(salted))
    }
    fn delete(name: &str, mechanism: i8) -> ScramCredentialDeletion {
        ScramCredentialDeletion::default()
            .with_name(StrBytes::from_string(name.to_owned()))
            .with_mechanism(mechanism)
    }
    fn codes(r: &AlterUserScramCredentialsResponse) -> Vec<(String, i16)> {
        r.results
            .iter()
            .map(|r| (r.user.as_str().to_owned(), r.error_code))
            .collect()
    }
    fn describe(names: &[&str]) -> DescribeUserScramCredentialsRequest {
        let users = names
            .iter()
            .map(|n| UserName::default().with_name(StrBytes::from_string((*n).to_owned())))
            .collect::<Vec<_>>();
        DescribeUserScramCredentialsRequest::default().with_users(Some(users))
    }

    let dir = tempfile::tempdir()?;
    let mut c = common::config(dir.path());
    c.kafka_listen = Some("127.0.0.1:0".into());
    c.auth = AuthMode::Required;
    c.admin_users = vec!["admin".into()];
    let config = c.clone();
    let broker = flume_rt::block_on(async {
        let b = Broker::start(c).await?;
        b.add_user("admin", "admin-pw").await?;
        b.add_user("bob", "bob-pw").await?;
        Ok::<_, anyhow::Error>(b)
    })?;
    let kafka = broker.kafka_addr().context("kafka listener")?.to_string();

    // Not an admin: refused, and nothing changes.
    let mut k = Kc::connect(&kafka)?;
    assert_eq!(scram_login(&mut k, ScramHash::Sha256, "bob", "bob-pw")?, 0);
    let r = k.call(0, &describe(&[]))?;
    assert_eq!(r.error_code, 31, "DESCRIBE on the cluster is an admin's");
    let mut alter = AlterUserScramCredentialsRequest::default();
    alter.upsertions = vec![upsert("carol", ScramHash::Sha256, 4096, "carol-pw")];
    assert_eq!(codes(&k.call(0, &alter)?), vec![("carol".into(), 31)]);
    assert!(!broker.users().contains(&"carol".to_owned()));

    let mut k = Kc::connect(&kafka)?;
    assert_eq!(
        scram_login(&mut k, ScramHash::Sha512, "admin", "admin-pw")?,
        0
    );
    let mut wrong_length = upsert("hal", ScramHash::Sha512, 4096, "x");
    wrong_length.salted_password = wrong_length.salted_password.slice(..32);
    let mut unknown = upsert("erin", ScramHash::Sha256, 4096, "x");
    unknown.mechanism = 3;
    alter.upsertions = vec![
        upsert("carol", ScramHash::Sha256, 4096, "carol-pw"),
        upsert("carol", ScramHash::Sha512, 8192, "carol-pw"),
        upsert("dave", ScramHash::Sha256, 4095, "x"),
        upsert("frank", ScramHash::Sha256, 16_385, "x"),
        unknown,
        upsert("", ScramHash::Sha256, 4096, "x"),
        upsert("gina", ScramHash::Sha256, 4096, "x"),
        upsert("gina", ScramHash::Sha256, 5000, "y"),
        wrong_length,
        upsert("ivan", ScramHash::Sha256, 16_384, "ivan-pw"),
    ];
    alter.deletions = vec![delete("nobody", 1)];
    let r = k.call(0, &alter)?;
    assert_eq!(
        codes(&r),
        vec![
            ("nobody".into(), 91),
            ("carol".into(), 0),
            ("dave".into(), 93),
            ("frank".into(), 93),
            ("erin".into(), 33),
            ("".into(), 93),
            ("gina".into(), 92),
            ("hal".into(), 93),
            ("ivan".into(), 0),
        ]
    );
    let msg = |user: &str| {
        r.results
            .iter()
            .find(|r| r.user.as_str() == user)
            .and_then(|r| r.error_message.as_ref())
            .map(|m| m.as_str().to_owned())
            .unwrap_or_default()
    };
    assert_eq!(msg("dave"), "too few iterations: 4095, at least 4096");
    assert_eq!(msg("frank"), "too many iterations: 16385, at most 16384");
    assert_eq!(
        msg("hal"),
        "a salted password of 32 bytes: the hash's is 64"
    );
    assert_eq!(
        broker.users(),
        vec!["admin", "bob", "carol", "ivan"],
        "only the good users"
    );

    // Every user with its mechanisms and iterations; named ones each once.
    let all = k.call(0, &DescribeUserScramCredentialsRequest::default())?;
    assert_eq!(all.error_code, 0);
    let described: Vec<(String, Vec<(i8, i32)>)> = all
        .results
        .iter()
        .map(|r| {
            let infos = r
                .credential_infos
                .iter()
                .map(|i| (i.mechanism, i.iterations))
                .collect();
            (r.user.as_str().to_owned(), infos)
        })
        .collect();
    assert_eq!(
        described,
        vec![
            ("admin".into(), vec![(1, 4096), (2, 4096)]),
            ("bob".into(), vec![(1, 4096), (2, 4096)]),
            ("carol".into(), vec![(1, 4096), (2, 8192)]),
            ("ivan".into(), vec![(1, 16_384)]),
        ]
    );
    let named = k.call(0, &describe(&["carol", "nobody", "bob", "bob"]))?;
    let got: Vec<(&str, i16, usize)> = named
        .results
        .iter()
        .map(|r| (r.user.as_str(), r.error_code, r.credential_infos.len()))
        .collect();
    assert_eq!(
        got,
        vec![("carol", 0, 2), ("nobody", 91, 0), ("bob", 92, 0)]
    );

    // The salted password is the password: carol logs in with both hashes, across a restart.
    for hash in [ScramHash::Sha256, ScramHash::Sha512] {
        let mut c = Kc::connect(&kafka)?;
        assert_eq!(
            scram_login(&mut c, hash, "carol", "carol-pw")?,
            0,
            "{hash:?}"
        );
    }
    let mut c = Kc::connect(&kafka)?;
    assert_eq!(
        scram_login(&mut c, ScramHash::Sha256, "carol", "wrong")?,
        58
    );
    flume_rt::block_on(broker.shutdown());
    let broker = flume_rt::block_on(Broker::start(config))?;
    let kafka = broker.kafka_addr().context("kafka listener")?.to_string();
    let mut c = Kc::connect(&kafka)?;
    assert_eq!(
        scram_login(&mut c, ScramHash::Sha512, "carol", "carol-pw")?,
        0
    );

    // Deleting one credential keeps the other; deleting the last removes the user.
    let mut k = Kc::connect(&kafka)?;
    assert_eq!(
        scram_login(&mut k, ScramHash::Sha256, "admin", "admin-pw")?,
        0
    );
    let mut alter = AlterUserScramCredentialsRequest::default();
    alter.deletions = vec![delete("carol", 1)];
    assert_eq!(codes(&k.call(0, &alter)?), vec![("carol".into(), 0)]);
    let r = k.call(0, &describe(&["carol"]))?;
    assert_eq!(r.results[0].credential_infos.len(), 1);
    assert_eq!(r.results[0].credential_infos[0].mechanism, 2);
    let mut c = Kc::connect(&kafka)?;
    assert_eq!(
        scram_login(&mut c, ScramHash::Sha256, "carol", "carol-pw")?,
        58
    );
    alter.deletions = vec![delete("carol", 2)];
    assert_eq!(codes(&k.call(0, &alter)?), vec![("carol".into(), 0)]);
    assert_eq!(k.call(0, &describe(&["carol"]))?.results[0].error_code, 91);
    assert!(!broker.users().contains(&"carol".to_owned()));
    let mut c = Kc::connect(&kafka)?;
    assert_eq!(
        scram_login(&mut c, ScramHash::Sha512, "carol", "carol-pw")?,
        58
    );
    flume_rt::block_on(broker.shutdown());
    Ok(())
}
