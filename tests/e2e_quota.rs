//! Limits per principal end to end: the connection limit per
//! principal on both listeners, the produce quota's throttle (Kafka's
//! throttle_time_ms, and a throttled connection reads nothing while another
//! tenant is served), the per-address limit on failed logins over both
//! protocols, and their metrics. Brokers run on a manual clock, so a bucket
//! refills only when a test moves the clock.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use flume_broker::security::auth::AuthMode;
use flume_broker::security::quota::{Mechanism, PrincipalClass, LOGIN_BURST, LOGIN_REFILL};
use flume_broker::{Broker, Clock};
use flume_client::lowlevel::Client;
use flume_client::{ConnectionConfig, ErrorCode};
use flume_protocol::MetadataRequest;
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ProduceRequest, ProduceResponse, RequestHeader, SaslAuthenticateRequest,
    SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

const TOPIC: &str = "quota";

/// A broker on a manual clock with the Kafka listener, `--auth optional`,
/// users a, b and u (password "pw"), and the limits given.
fn start(
    max_per_principal: usize,
    produce_rate: Option<u64>,
) -> Result<(tempfile::TempDir, Broker, Clock)> {
    let dir = tempfile::tempdir()?;
    let (mut c, clock) = common::manual_config(dir.path());
    c.kafka_listen = Some("127.0.0.1:0".into());
    c.auth = AuthMode::Optional;
    c.max_connections_per_principal = Some(max_per_principal);
    c.produce_quota_bytes_per_sec = produce_rate;
    let broker = flume_rt::block_on(async {
        let b = Broker::start(c).await?;
        for u in ["a", "b", "u"] {
            b.add_user(u, "pw").await?;
        }
        b.engine().records().create_topic(TOPIC, common::topic(1))?;
        Ok::<_, anyhow::Error>(b)
    })?;
    Ok((dir, broker, clock))
}

/// One Kafka connection speaking raw requests.
struct Kafka {
    s: TcpStream,
    correlation: i32,
}

impl Kafka {
    fn open(broker: &Broker) -> Result<Kafka> {
        let s = TcpStream::connect(broker.kafka_addr().context("kafka listener")?)?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        Ok(Kafka { s, correlation: 0 })
    }

    /// Sends `req`; returns the frame's size (without its length prefix).
    fn send<R: Request + Encodable>(&mut self, req: &R, version: i16) -> Result<usize> {
        self.correlation += 1;
        let mut body = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(StrBytes::from_static_str("quota-test")))
            .encode(&mut body, R::header_version(version))?;
        req.encode(&mut body, version)?;
        let mut frame = Vec::with_capacity(body.len() + 4);
        frame.put_i32(i32::try_from(body.len())?);
        frame.extend_from_slice(&body);
        self.s.write_all(&frame)?;
        Ok(body.len())
    }

    fn recv<R: Request>(&mut self, version: i16) -> Result<R::Response>
    where
        R::Response: Decodable,
    {
        let mut len = [0u8; 4];
        self.s.read_exact(&mut len)?;
        let mut resp = vec![0u8; usize::try_from(i32::from_be_bytes(len))?];
        self.s.read_exact(&mut resp)?;
        let mut resp = Bytes::from(resp);
        let api = ApiKey::try_from(R::KEY).map_err(|()| anyhow::anyhow!("api key"))?;
        let correlation = resp.get_i32();
        ensure!(correlation == self.correlation, "correlation {correlation}");
        if api.response_header_version(version) >= 1 {
            ensure!(resp.get_u8() == 0, "tagged fields in the response header");
        }
        R::Response::decode(&mut resp, version)
    }

    fn call<R: Request + Encodable>(&mut self, req: &R, version: i16) -> Result<R::Response>
    where
        R::Response: Decodable,
    {
        self.send(req, version)?;
        self.recv::<R>(version)
    }

    /// SASL PLAIN as `user`; the SaslAuthenticate response.
    fn plain(&mut self, user: &str, pw: &str) -> Result<SaslAuthenticateResponse> {
        let h: SaslHandshakeResponse = self.call(
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
            1,
        )?;
        ensure!(h.error_code == 0, "handshake error {}", h.error_code);
        let token = format!("\0{user}\0{pw}");
        self.call(
            &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token.into_bytes())),
            1,
        )
    }

    fn produce_request(value_bytes: usize) -> Result<ProduceRequest> {
        let records = [Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: 0,
            sequence: -1,
            timestamp: 1_700_000_000_000,
            key: None,
            value: Some(Bytes::from(vec![b'x'; value_bytes])),
            headers: IndexMap::new(),
        }];
        let mut batch = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut batch,
            &records,
            &RecordEncodeOptions {
                version: 2,
                compression: Compression::None,
            },
        )?;
        Ok(ProduceRequest::default()
            .with_acks(1)
            .with_timeout_ms(5_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(batch.freeze()))])]))
    }

    /// Produces one record of `value_bytes`; (frame size, throttle_time_ms).
    fn produce(&mut self, value_bytes: usize) -> Result<(usize, i32)> {
        let size = self.send(&Self::produce_request(value_bytes)?, 9)?;
        let resp: ProduceResponse = self.recv::<ProduceRequest>(9)?;
        let p = resp
            .responses
            .first()
            .and_then(|t| t.partition_responses.first())
            .context("a partition response")?;
        ensure!(p.error_code == 0, "produce error {}", p.error_code);
        Ok((size, resp.throttle_time_ms))
    }
}

fn login(user: &str) -> ConnectionConfig {
    ConnectionConfig::default().credentials(user, "pw")
}

#[test]
fn kafka_produce_over_quota_is_throttled_and_another_tenant_is_not() -> Result<()> {
    // 1000 bytes a second, one second of burst; the clock stands still.
    let (_dir, broker, _clock) = start(100, Some(1000))?;
    let mut a = Kafka::open(&broker)?;
    let mut b = Kafka::open(&broker)?;
    ensure!(a.plain("a", "pw")?.error_code == 0);
    ensure!(b.plain("b", "pw")?.error_code == 0);

    let (small, t) = a.produce(100)?;
    assert!(small < 1000);
    assert_eq!(t, 0, "within the burst");
    // The bucket holds 1000 - small: this one runs it into debt by exactly
    // what it does not cover, paid back at 1 byte/ms.
    let (big, t) = a.produce(3000)?;
    let debt = i32::try_from(small + big)? - 1000;
    assert_eq!(t, debt, "throttle_time_ms is the debt at the quota's rate");

    // A's next produce is sent now, but its connection is not read during
    // the throttle time; B's produce is served meanwhile, unthrottled.
    a.send(&Kafka::produce_request(10)?, 9)?;
    let (_, t) = b.produce(10)?;
    assert_eq!(t, 0, "another tenant's produce is not throttled");
    a.s.set_nonblocking(true)?;
    let mut byte = [0u8; 1];
    let pending = a.s.read(&mut byte);
    assert!(
        matches!(&pending, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "A was answered while throttled: {pending:?}"
    );
    let q = broker.engine().quotas().stats();
    assert_eq!(q.throttle_ms(PrincipalClass::User), u64::try_from(debt)?);
    assert_eq!(q.throttle_ms(PrincipalClass::Anonymous), 0);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn flume_produce_over_quota_stops_reading_while_another_tenant_is_served() -> Result<()> {
    let (_dir, broker, _clock) = start(100, Some(1000))?;
    let addr = broker.local_addr().to_string();
    let produce = |value: &[u8]| {
        let mut rec = Vec::new();
        flume_protocol::record::encode(&mut rec, 0, 0, None, value, &[]);
        flume_protocol::ProduceRequest {
            entries: vec![flume_protocol::ProduceEntry {
                topic: TOPIC.into(),
                partition: 0,
                records: rec.into(),
            }],
        }
    };
    flume_rt::block_on(async {
        let a = Client::connect(&addr, login("a")).await?;
        let b = Client::connect(&addr, login("b")).await?;
        // Over the quota: served, and A's connection then reads nothing for ~3 s.
        let r = a.call(&produce(&[b'x'; 4000])).await?;
        assert_eq!(r.results[0].error, ErrorCode::None);
        // A's next request waits unread while B is served.
        let (tx, rx) = async_channel::bounded(1);
        let a2 = flume_rt::spawn(async move {
            let r = a.call(&MetadataRequest { topics: Vec::new() }).await;
            let _ = tx.send(r.is_ok()).await;
        });
        let r = b.call(&produce(b"b")).await?;
        assert_eq!(r.results[0].error, ErrorCode::None);
        b.call(&MetadataRequest { topics: Vec::new() }).await?;
        assert!(
            rx.try_recv().is_err(),
            "A was served while throttled, before B"
        );
        let q = broker.engine().quotas().stats();
        assert!(
            q.throttle_ms(PrincipalClass::User) > 3000,
            "{}",
            q.throttle_ms(PrincipalClass::User)
        );
        drop(a2);
        broker.shutdown().await;
        Ok(())
    })
}

#[test]
fn connections_per_principal_are_limited_on_both_listeners() -> Result<()> {
    let (_dir, broker, _clock) = start(2, None)?;
    let addr = broker.local_addr().to_string();
    flume_rt::block_on(async {
        // Two of u's connections: one Flume, one Kafka; the third login fails.
        let _u1 = Client::connect(&addr, login("u")).await?;
        let mut k = Kafka::open(&broker)?;
        ensure!(k.plain("u", "pw")?.error_code == 0);
        let err = Client::connect(&addr, login("u"))
            .await
            .expect_err("a third connection of u is refused");
        assert!(err.to_string().contains("LIMIT_REACHED"), "{err}");
        let mut k2 = Kafka::open(&broker)?;
        let r = k2.plain("u", "pw")?;
        assert_eq!(r.error_code, 58);
        let msg = r.error_message.map(|m| m.to_string()).unwrap_or_default();
        assert!(
            msg.contains("user:u") && msg.contains("--max-connections-per-principal 2"),
            "{msg}"
        );
        // Closed after the answer.
        let mut byte = [0u8; 1];
        assert_eq!(k2.s.read(&mut byte)?, 0);
        // Another principal is not affected.
        let _b = Client::connect(&addr, login("b")).await?;
        // Anonymous: per address. Two are served, the third gets LIMIT_REACHED.
        let meta = MetadataRequest { topics: Vec::new() };
        let anon1 = Client::connect(&addr, ConnectionConfig::default()).await?;
        let anon2 = Client::connect(&addr, ConnectionConfig::default()).await?;
        anon1.call(&meta).await?;
        anon2.call(&meta).await?;
        let anon3 = Client::connect(&addr, ConnectionConfig::default()).await?;
        let err = anon3
            .call(&meta)
            .await
            .expect_err("over the address' limit");
        assert_eq!(err.code(), Some(ErrorCode::LimitReached), "{err}");
        // ... but a connection over it may still log in as someone with room.
        let b = Client::connect(&addr, login("b")).await?;
        b.call(&meta).await?;
        assert_eq!(broker.engine().quotas().stats().connections_refused(), 4);
        broker.shutdown().await;
        Ok(())
    })
}

#[test]
fn failed_logins_are_limited_per_address_over_both_protocols() -> Result<()> {
    let (_dir, broker, clock) = start(100, None)?;
    let addr = broker.local_addr().to_string();
    for i in 0..LOGIN_BURST {
        let mut k = Kafka::open(&broker)?;
        let r = k.plain("u", "wrong")?;
        assert_eq!(r.error_code, 58, "attempt {i}");
    }
    // The right password from the same address is refused now, unchecked.
    let mut k = Kafka::open(&broker)?;
    let r = k.plain("u", "pw")?;
    assert_eq!(r.error_code, 58);
    let msg = r.error_message.map(|m| m.to_string()).unwrap_or_default();
    assert!(
        msg.contains("too many failed logins from 127.0.0.1"),
        "{msg}"
    );
    flume_rt::block_on(async {
        let err = Client::connect(&addr, login("u"))
            .await
            .expect_err("Flume logins from the address are limited too");
        assert!(err.to_string().contains("AUTHENTICATION_FAILED"), "{err}");
        // Time gives one attempt back.
        clock.advance(LOGIN_REFILL);
        Client::connect(&addr, login("u")).await?;
        Ok::<_, anyhow::Error>(())
    })?;
    let q = broker.engine().quotas().stats();
    assert_eq!(q.logins(Mechanism::Plain), (0, LOGIN_BURST));
    assert_eq!(q.logins(Mechanism::ScramSha256), (1, 0));
    assert_eq!(q.logins_limited(), 2);
    flume_rt::block_on(broker.shutdown());
    Ok(())
}

#[test]
fn a_peer_that_never_finishes_a_login_is_cut_by_the_read_timeout() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let mut c = common::config(dir.path());
    c.kafka_listen = Some("127.0.0.1:0".into());
    c.auth = AuthMode::Required;
    c.read_timeout = Duration::from_millis(300);
    let broker = flume_rt::block_on(async {
        let b = Broker::start(c).await?;
        b.add_user("u", "pw").await?;
        Ok::<_, anyhow::Error>(b)
    })?;
    let addr = broker.local_addr().to_string();
    // Kafka: the handshake and SCRAM's first message, then silence.
    let mut k = Kafka::open(&broker)?;
    let h: SaslHandshakeResponse = k.call(
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("SCRAM-SHA-256")),
        1,
    )?;
    ensure!(h.error_code == 0);
    let first: SaslAuthenticateResponse = k.call(
        &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from_static(b"n,,n=u,r=abc")),
        1,
    )?;
    ensure!(first.error_code == 0 && !first.auth_bytes.is_empty());
    let mut byte = [0u8; 1];
    assert_eq!(
        k.s.read(&mut byte)?,
        0,
        "closed by the broker within the read timeout"
    );
    flume_rt::block_on(async {
        // Flume: AUTHENTICATE's first step answered, then silence; and a
        // connection that never starts one (--auth required).
        let conn =
            flume_client::lowlevel::Connection::connect(&addr, ConnectionConfig::default()).await?;
        let req = flume_protocol::AuthenticateRequest {
            mechanism: "SCRAM-SHA-256".into(),
            payload: Bytes::from_static(b"n,,n=u,r=abc"),
        };
        conn.call(&req, Duration::ZERO).await?;
        let _silent =
            flume_client::lowlevel::Connection::connect(&addr, ConnectionConfig::default()).await?;
        // A login under way holds no request budget (its answer's charge goes
        // once written).
        common::wait_until("no request memory held", Duration::from_secs(2), || async {
            broker.request_memory().used == 0
        })
        .await;
        common::wait_until("both are cut", Duration::from_secs(2), || async {
            broker.connection_count() == 0
        })
        .await;
        broker.shutdown().await;
        Ok(())
    })
}
