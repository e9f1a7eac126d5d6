//! TLS end to end: certificates made here with rcgen, a broker
//! with TLS on its Flume, Kafka and HTTP ports, the SDK over TLS, refusals,
//! mTLS principals, certificate reload, and the handshake deadline.

use crate::common;
use crate::common::pki::{pki, write_pair, Ca, Files};

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use flume_broker::security::Principal;
use flume_broker::{Broker, BrokerConfig};
use flume_client::lowlevel::Client;
use flume_client::{Admin, ConnectionConfig, Error, Producer, TlsConfig};
use flume_protocol::{FetchPartition, FetchRequest};
use flume_rt as rt;
use futures::io::{AsyncReadExt, AsyncWriteExt};
use http_body_util::BodyExt;

/// A broker with TLS on every port (HTTP and Kafka on port 0 too).
fn tls_config(data: &Path, server: &Files, client_ca: Option<&Path>) -> BrokerConfig {
    let mut c = common::config(data);
    c.http_listen = Some("127.0.0.1:0".into());
    c.kafka_listen = Some("127.0.0.1:0".into());
    c.tls_cert = Some(server.cert.clone());
    c.tls_key = Some(server.key.clone());
    c.tls_client_ca = client_ca.map(Path::to_path_buf);
    c
}

fn client_config(ca: &Path) -> ConnectionConfig {
    ConnectionConfig::default()
        .connect_timeout(Duration::from_secs(2))
        .tls(TlsConfig::new().ca_file(ca))
}

/// Records of `topic`/0 from offset 0, over `client`.
async fn fetch_values(client: &Client, topic: &str) -> Result<Vec<Bytes>> {
    let resp = client
        .call(&FetchRequest {
            max_wait_ms: 0,
            min_bytes: 0,
            max_bytes: 1 << 20,
            partitions: vec![FetchPartition {
                topic: topic.into(),
                partition: 0,
                offset: 0,
                max_bytes: 1 << 20,
            }],
        })
        .await?;
    let p = resp
        .partitions
        .into_iter()
        .next()
        .context("one partition")?;
    let records = flume_protocol::record::decode_all(&p.records)?;
    Ok(records
        .into_iter()
        .map(|r| r.value.unwrap_or_default())
        .collect())
}

#[test]
fn the_sdk_produces_and_fetches_over_tls() -> Result<()> {
    rt::block_on(async {
        let pki = pki()?;
        let data = tempfile::tempdir()?;
        let broker = Broker::start(tls_config(data.path(), &pki.server, None)).await?;
        broker
            .engine()
            .records()
            .create_topic("t", common::topic(1))?;
        let addr = broker.local_addr().to_string();
        let producer = Producer::with_config(
            &addr,
            flume_client::ProducerConfig::default().connection(client_config(&pki.ca_file)),
        )
        .await?;
        for v in ["one", "two", "three"] {
            producer.send("t", None, v.as_bytes()).await?;
        }
        // Verified under the address's host name too (a DNS name, not the IP).
        let by_name = format!("localhost:{}", broker.local_addr().port());
        let client = Client::connect(&by_name, client_config(&pki.ca_file)).await?;
        let values = fetch_values(&client, "t").await?;
        assert_eq!(values, vec!["one", "two", "three"]);
        let admin = Admin::connect_with(&addr, client_config(&pki.ca_file)).await?;
        assert_eq!(admin.topics(&["t".into()]).await?[0].partitions.len(), 1);
        assert!(broker
            .connection_principals()
            .iter()
            .all(Principal::is_anonymous));
        broker.shutdown().await;
        Ok(())
    })
}

#[test]
fn a_broker_certificate_from_another_ca_is_refused() -> Result<()> {
    rt::block_on(async {
        let pki = pki()?;
        let other = Ca::new("Someone Else")?;
        let other_file = other.write(pki.dir.path(), "other-ca.pem")?;
        let data = tempfile::tempdir()?;
        let broker = Broker::start(tls_config(data.path(), &pki.server, None)).await?;
        let addr = broker.local_addr().to_string();
        let err = Client::connect(&addr, client_config(&other_file))
            .await
            .expect_err("an unknown issuer is refused");
        assert!(matches!(err, Error::Tls { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("TLS") && text.contains("UnknownIssuer"),
            "{text}"
        );
        // A certificate for another name is refused as well.
        let cfg = ConnectionConfig::default().tls(
            TlsConfig::new()
                .ca_file(&pki.ca_file)
                .server_name("elsewhere.example"),
        );
        let err = Client::connect(&addr, cfg).await.expect_err("wrong name");
        assert!(err.to_string().contains("not valid for name"), "{err}");
        broker.shutdown().await;
        Ok(())
    })
}

#[test]
fn mtls_makes_the_certificate_subject_the_principal() -> Result<()> {
    rt::block_on(async {
        let pki = pki()?;
        let alice = write_pair(pki.dir.path(), "alice", pki.ca.issue("alice", &[])?)?;
        let data = tempfile::tempdir()?;
        let cfg = tls_config(data.path(), &pki.server, Some(&pki.ca_file));
        let broker = Broker::start(cfg).await?;
        broker
            .engine()
            .records()
            .create_topic("t", common::topic(1))?;
        let addr = broker.local_addr().to_string();
        let with_cert = ConnectionConfig::default().tls(
            TlsConfig::new()
                .ca_file(&pki.ca_file)
                .client_cert(&alice.cert, &alice.key),
        );
        let client = Client::connect(&addr, with_cert).await?;
        assert!(fetch_values(&client, "t").await?.is_empty());
        let expected = Principal::Certificate("CN=alice,O=Flume Tests".into());
        assert_eq!(broker.connection_principals(), vec![expected]);
        // Without a certificate the handshake fails (TLS 1.3 reports it on
        // the first read, so the error comes from the first call at the latest).
        let without = async {
            let c = Client::connect(&addr, client_config(&pki.ca_file)).await?;
            fetch_values(&c, "t").await
        };
        let err = without
            .await
            .expect_err("a client without a certificate is refused");
        assert!(err.to_string().contains("CertificateRequired"), "{err}");
        broker.shutdown().await;
        Ok(())
    })
}

#[test]
fn a_plain_client_on_the_tls_port_fails_and_costs_only_its_connection() -> Result<()> {
    rt::block_on(async {
        let pki = pki()?;
        let data = tempfile::tempdir()?;
        let broker = Broker::start(tls_config(data.path(), &pki.server, None)).await?;
        broker
            .engine()
            .records()
            .create_topic("t", common::topic(1))?;
        let addr = broker.local_addr().to_string();
        let plain = Client::connect(
            &addr,
            ConnectionConfig::default().request_timeout(Duration::from_secs(2)),
        )
        .await?;
        let err = fetch_values(&plain, "t")
            .await
            .expect_err("plain bytes on a TLS port");
        let err = err.downcast::<Error>()?;
        assert!(
            matches!(err, Error::Disconnected { .. } | Error::Protocol { .. }),
            "{err:?}"
        );
        common::wait_until(
            "the plain connection closed",
            Duration::from_secs(2),
            || async { broker.connection_count() == 0 },
        )
        .await;
        // The broker serves TLS clients as before.
        let client = Client::connect(&addr, client_config(&pki.ca_file)).await?;
        assert!(fetch_values(&client, "t").await?.is_empty());
        // And a TLS client against a plain broker gets a TLS error, not a hang.
        let plain_dir = tempfile::tempdir()?;
        let plain_broker = common::start(plain_dir.path()).await;
        let err = Client::connect(
            &plain_broker.local_addr().to_string(),
            client_config(&pki.ca_file),
        )
        .await
        .expect_err("no TLS there");
        assert!(
            matches!(err, Error::Tls { .. } | Error::Connect { .. }),
            "{err:?}"
        );
        plain_broker.shutdown().await;
        broker.shutdown().await;
        Ok(())
    })
}

#[test]
fn a_peer_that_never_finishes_the_handshake_is_cut_by_the_read_timeout() -> Result<()> {
    rt::block_on(async {
        let pki = pki()?;
        let data = tempfile::tempdir()?;
        let mut cfg = tls_config(data.path(), &pki.server, None);
        cfg.read_timeout = Duration::from_millis(300);
        let broker = Broker::start(cfg).await?;
        let addr = broker.local_addr().to_string();
        // Half a ClientHello record header, then silence.
        let mut raw = rt::TcpStream::connect(&addr).await?;
        raw.write_all(&[0x16, 0x03, 0x01]).await?;
        common::wait_until("the connection is open", Duration::from_secs(2), || async {
            broker.connection_count() == 1
        })
        .await;
        assert_eq!(
            broker.request_memory().used,
            0,
            "a handshake holds no request budget"
        );
        common::wait_until("the silent peer is cut", Duration::from_secs(2), || async {
            broker.connection_count() == 0
        })
        .await;
        let mut buf = [0u8; 16];
        let n = rt::timeout(Duration::from_secs(2), raw.read(&mut buf))
            .await
            .context("the broker closed the socket")?;
        assert!(matches!(n, Ok(0)) || n.is_err(), "{n:?}");
        broker.shutdown().await;
        Ok(())
    })
}

#[test]
fn reloading_swaps_the_certificate_and_open_connections_keep_working() -> Result<()> {
    rt::block_on(async {
        let pki = pki()?;
        let data = tempfile::tempdir()?;
        let broker = Broker::start(tls_config(data.path(), &pki.server, None)).await?;
        broker
            .engine()
            .records()
            .create_topic("t", common::topic(1))?;
        let addr = broker.local_addr().to_string();
        let old = Producer::with_config(
            &addr,
            flume_client::ProducerConfig::default().connection(client_config(&pki.ca_file)),
        )
        .await?;
        old.send("t", None, b"before").await?;

        // A new CA and server certificate in the same files.
        let new_ca = Ca::new("Rotated CA")?;
        let new_ca_file = new_ca.write(pki.dir.path(), "new-ca.pem")?;
        let (cert, key) = new_ca.issue("broker", &["localhost", "127.0.0.1"])?;
        std::fs::write(&pki.server.cert, cert)?;
        std::fs::write(&pki.server.key, key)?;
        broker.reload_tls().await?;

        // The open connection keeps its session.
        old.send("t", None, b"after").await?;
        // New handshakes use the new certificate.
        let new = Client::connect(&addr, client_config(&new_ca_file)).await?;
        assert_eq!(fetch_values(&new, "t").await?, vec!["before", "after"]);
        let err = Client::connect(&addr, client_config(&pki.ca_file))
            .await
            .expect_err("the old CA no longer matches");
        assert!(err.to_string().contains("UnknownIssuer"), "{err}");

        // A reload with a broken key keeps the config in use.
        std::fs::write(&pki.server.key, "not a key")?;
        let bad = broker
            .reload_tls()
            .await
            .expect_err("a broken key is refused");
        assert!(bad.to_string().contains("server.key"), "{bad}");
        Client::connect(&addr, client_config(&new_ca_file)).await?;
        broker.shutdown().await;
        Ok(())
    })
}

#[test]
fn metrics_are_served_over_https() -> Result<()> {
    rt::block_on(async {
        let pki = pki()?;
        let data = tempfile::tempdir()?;
        let broker = Broker::start(tls_config(data.path(), &pki.server, None)).await?;
        let http = broker.http_addr().context("http")?;
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls::pki_types::pem::PemObject::pem_file_iter(&pki.ca_file)? {
            let c: rustls::pki_types::CertificateDer<'static> = c?;
            roots.add(c)?;
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let tcp = rt::TcpStream::connect(&http.to_string()).await?;
        let name = rustls::pki_types::ServerName::try_from("localhost")?;
        let tls = futures_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(smol_hyper::rt::FuturesIo::new(tls)).await?;
        let driver = rt::spawn(async move {
            let _ = conn.await;
        });
        let req = hyper::Request::get("/metrics")
            .header("host", "localhost")
            .body(http_body_util::Empty::<Bytes>::new())?;
        let resp = sender.send_request(req).await?;
        assert_eq!(resp.status().as_u16(), 200);
        let body = resp.into_body().collect().await?.to_bytes();
        let text = String::from_utf8(body.to_vec())?;
        assert!(text.contains("# TYPE"), "{text}");
        drop(sender);
        driver.cancel().await;
        // Plain HTTP on the HTTPS port gets no page.
        let mut plain = rt::TcpStream::connect(&http.to_string()).await?;
        plain
            .write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")
            .await?;
        let mut got = Vec::new();
        let _ = rt::timeout(Duration::from_secs(2), plain.read_to_end(&mut got)).await;
        assert!(!String::from_utf8_lossy(&got).contains("200 OK"));
        broker.shutdown().await;
        Ok(())
    })
}

#[test]
fn the_kafka_listener_speaks_tls_with_the_same_certificate() -> Result<()> {
    rt::block_on(async {
        let pki = pki()?;
        let alice = write_pair(pki.dir.path(), "alice", pki.ca.issue("alice", &[])?)?;
        let data = tempfile::tempdir()?;
        let cfg = tls_config(data.path(), &pki.server, Some(&pki.ca_file));
        let broker = Broker::start(cfg).await?;
        let kafka = broker.kafka_addr().context("kafka")?;
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls::pki_types::pem::PemObject::pem_file_iter(&pki.ca_file)? {
            let c: rustls::pki_types::CertificateDer<'static> = c?;
            roots.add(c)?;
        }
        let certs: Vec<rustls::pki_types::CertificateDer<'static>> =
            rustls::pki_types::pem::PemObject::pem_file_iter(&alice.cert)?
                .collect::<Result<_, _>>()?;
        let key = rustls::pki_types::pem::PemObject::from_pem_file(&alice.key)?;
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)?;
        let tcp = rt::TcpStream::connect(&kafka.to_string()).await?;
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?;
        let mut tls = futures_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await?;
        // ApiVersions v0: size, api key 18, version 0, correlation id 7, no client id.
        let mut req = vec![0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 7, 0xff, 0xff];
        tls.write_all(&req).await?;
        tls.flush().await?;
        let mut head = [0u8; 8];
        tls.read_exact(&mut head).await?;
        assert_eq!(
            &head[4..8],
            &[0, 0, 0, 7],
            "the response carries our correlation id"
        );
        assert_eq!(
            broker.connection_principals(),
            vec![Principal::Certificate("CN=alice,O=Flume Tests".into())]
        );
        req.clear();
        broker.shutdown().await;
        Ok(())
    })
}
