//! Observability end to end: a broker with its HTTP side on port 0, a known
//! workload over the wire, then `/metrics` scraped and parsed with a
//! Prometheus text-format parser, `/api/overview`, `/healthz` and the page.

use crate::common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use flume_client::lowlevel::Client;
use flume_client::{AckMode, Admin, ConnectionConfig, ShareConsumer};
use flume_protocol::record;
use flume_protocol::{
    ErrorCode, FetchPartition, FetchRequest, PartitionOffset, ProduceEntry, ProduceRequest,
};
use flume_rt as rt;
use futures::io::{AsyncReadExt, AsyncWriteExt};
use http_body_util::BodyExt;

/// GET `path` through hyper's client: (status, content type, body).
async fn get(addr: SocketAddr, path: &str) -> Result<(u16, String, String)> {
    let stream = rt::TcpStream::connect(&addr.to_string()).await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(smol_hyper::rt::FuturesIo::new(stream)).await?;
    let driver = rt::spawn(async move {
        let _ = conn.await;
    });
    let req = hyper::Request::get(path)
        .header("host", addr.to_string())
        .body(http_body_util::Empty::<Bytes>::new())?;
    let resp = sender.send_request(req).await?;
    let status = resp.status().as_u16();
    let ct = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = resp.into_body().collect().await?.to_bytes();
    drop(sender);
    driver.cancel().await;
    Ok((status, ct, String::from_utf8(body.to_vec())?))
}

/// The samples of a scrape by (metric, sorted labels).
struct Metrics(HashMap<(String, Vec<(String, String)>), f64>);

impl Metrics {
    async fn scrape(addr: SocketAddr) -> Result<Self> {
        let (status, ct, body) = get(addr, "/metrics").await?;
        anyhow::ensure!(status == 200, "status {status}");
        anyhow::ensure!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
        let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_owned())))
            .context("parse")?;
        let mut map = HashMap::new();
        for s in scrape.samples {
            let mut labels: Vec<(String, String)> = s
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            labels.sort();
            let v = match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => continue,
            };
            map.insert((s.metric, labels), v);
        }
        Ok(Metrics(map))
    }

    fn get(&self, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut l: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        l.sort();
        self.0.get(&(metric.to_owned(), l)).copied()
    }

    fn value(&self, metric: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(metric, labels)
            .unwrap_or_else(|| panic!("no sample {metric} {labels:?}"))
    }
}

fn records(n: usize) -> Bytes {
    let mut buf = Vec::new();
    for i in 0..n {
        record::encode(&mut buf, 0, 1, None, format!("value-{i}").as_bytes(), &[]);
    }
    Bytes::from(buf)
}

async fn start() -> (tempfile::TempDir, flume_broker::Broker, SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let mut c = common::config(dir.path());
    c.http_listen = Some("127.0.0.1:0".into());
    let broker = flume_broker::Broker::start(c).await.expect("broker starts");
    broker
        .engine()
        .records()
        .create_topic("obs", common::topic(3))
        .expect("topic");
    let http = broker.http_addr().expect("http is on");
    (dir, broker, http)
}

#[test]
fn metrics_count_a_known_workload_exactly() {
    rt::block_on(async {
        let (_dir, broker, http) = start().await;
        let addr = broker.local_addr().to_string();
        let client = Client::connect(&addr, ConnectionConfig::default())
            .await
            .unwrap();

        // 10 records to partition 0 and 7 to partition 1, in one request.
        let resp = client
            .call(&ProduceRequest {
                entries: vec![
                    ProduceEntry {
                        topic: "obs".into(),
                        partition: 0,
                        records: records(10),
                    },
                    ProduceEntry {
                        topic: "obs".into(),
                        partition: 1,
                        records: records(7),
                    },
                ],
            })
            .await
            .unwrap();
        assert!(resp.results.iter().all(|r| r.error.is_ok()));
        // A produce to a partition that does not exist.
        let resp = client
            .call(&ProduceRequest {
                entries: vec![ProduceEntry {
                    topic: "obs".into(),
                    partition: 9,
                    records: records(1),
                }],
            })
            .await
            .unwrap();
        assert_eq!(resp.results[0].error, ErrorCode::UnknownPartition);
        // Fetch all of partition 0, and a topic that does not exist (twice).
        let fetch = |topic: &str| FetchRequest {
            max_wait_ms: 0,
            min_bytes: 0,
            max_bytes: 1 << 20,
            partitions: vec![FetchPartition {
                topic: topic.into(),
                partition: 0,
                offset: 0,
                max_bytes: 1 << 20,
            }],
        };
        let r = client.call(&fetch("obs")).await.unwrap();
        assert_eq!(r.partitions[0].error, ErrorCode::None);
        for _ in 0..2 {
            let r = client.call(&fetch("nope")).await.unwrap();
            assert_eq!(r.partitions[0].error, ErrorCode::UnknownTopic);
        }
        // An API key the broker does not know, in raw bytes: size, api key, request id.
        let mut raw = rt::TcpStream::connect(&addr).await.unwrap();
        let mut frame = Vec::new();
        frame.extend_from_slice(&6i32.to_be_bytes());
        frame.extend_from_slice(&99i16.to_be_bytes());
        frame.extend_from_slice(&1i32.to_be_bytes());
        raw.write_all(&frame).await.unwrap();
        let mut head = [0u8; 10];
        raw.read_exact(&mut head).await.unwrap();
        assert_eq!(
            i16::from_be_bytes([head[8], head[9]]),
            ErrorCode::UnsupportedApi.code()
        );
        // Committed offsets: lag 6 on partition 0, 0 on partition 1.
        let admin = Admin::connect(&addr).await.unwrap();
        admin
            .commit(
                "g1",
                vec![
                    PartitionOffset {
                        topic: "obs".into(),
                        partition: 0,
                        offset: 4,
                    },
                    PartitionOffset {
                        topic: "obs".into(),
                        partition: 1,
                        offset: 7,
                    },
                ],
            )
            .await
            .unwrap();

        let m = Metrics::scrape(http).await.unwrap();
        let p = |n: &'static str| [("topic", "obs"), ("partition", n)];
        assert_eq!(m.value("flume_partition_records_in_total", &p("0")), 10.0);
        assert_eq!(m.value("flume_partition_records_in_total", &p("1")), 7.0);
        assert_eq!(m.value("flume_partition_records_in_total", &p("2")), 0.0);
        assert_eq!(m.value("flume_partition_records_out_total", &p("0")), 10.0);
        assert_eq!(m.value("flume_partition_records_out_total", &p("1")), 0.0);
        assert_eq!(
            m.value("flume_partition_bytes_in_total", &p("0")),
            m.value("flume_partition_bytes_out_total", &p("0"))
        );
        assert_eq!(m.value("flume_partition_end_offset", &p("0")), 10.0);
        assert_eq!(m.value("flume_partition_end_offset", &p("1")), 7.0);
        assert_eq!(m.value("flume_partition_log_start_offset", &p("0")), 0.0);
        assert_eq!(m.value("flume_partition_segments", &p("0")), 1.0);
        assert!(m.value("flume_partition_size_bytes", &p("0")) > 0.0);
        for (part, committed) in [("0", 4.0), ("1", 7.0)] {
            let l = [("group", "g1"), ("topic", "obs"), ("partition", part)];
            let end = m.value("flume_partition_end_offset", &p(part));
            assert_eq!(m.value("flume_group_committed_offset", &l), committed);
            assert_eq!(m.value("flume_group_lag_records", &l), end - committed);
        }
        let req = |api: &'static str, error: &'static str| [("api", api), ("error", error)];
        assert_eq!(
            m.value("flume_requests_total", &req("produce", "UNKNOWN_PARTITION")),
            1.0
        );
        assert_eq!(
            m.value("flume_requests_total", &req("produce", "NONE")),
            1.0
        );
        assert_eq!(
            m.value("flume_requests_total", &req("fetch", "UNKNOWN_TOPIC")),
            2.0
        );
        assert_eq!(m.value("flume_requests_total", &req("fetch", "NONE")), 1.0);
        assert_eq!(
            m.value("flume_requests_total", &req("unknown", "UNSUPPORTED_API")),
            1.0
        );
        assert_eq!(
            m.value("flume_requests_total", &req("offset_commit", "NONE")),
            1.0
        );
        assert_eq!(m.value("flume_connections_refused_total", &[]), 0.0);
        assert!(m.value("flume_connections_open", &[]) >= 2.0);
        assert!(m.value("process_resident_memory_bytes", &[]) > 0.0);
        assert!(m.value("process_open_fds", &[]) > 0.0);
        assert!(m.value("flume_request_memory_limit_bytes", &[]) > 0.0);
        assert_eq!(m.value("flume_transactions_open", &[]), 0.0);
        assert_eq!(m.value("flume_transactional_ids", &[]), 0.0);
        assert_eq!(
            m.value(
                "flume_transactions_refused_total",
                &[("bound", "open_transactions")]
            ),
            0.0
        );

        // The overview says the same, with the recent errors.
        let (status, ct, body) = get(http, "/api/overview").await.unwrap();
        assert_eq!((status, ct.as_str()), (200, "application/json"));
        let o: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(o["topics"][0]["name"], "obs");
        assert_eq!(o["topics"][0]["partitions"][0]["records_in"], 10);
        let lag0 = o["offsets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["group"] == "g1" && x["partition"] == 0)
            .unwrap();
        assert_eq!(lag0["lag"], 6);
        assert_eq!(o["transactions"]["open"], 0);
        assert_eq!(
            o["transactions"]["oldest"].as_array().map(Vec::len),
            Some(0)
        );
        let errors: Vec<&str> = o["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["error"].as_str().unwrap())
            .collect();
        assert_eq!(errors.len(), 4, "{errors:?}");
        assert!(errors.contains(&"UNKNOWN_PARTITION"));
        broker.shutdown().await;
    });
}

/// A share group's metrics and overview after a known workload: 10
/// records handed to one member, 6 accepted, 2 released (then delivered
/// again), 1 rejected, 1 held.
#[test]
fn share_group_metrics_count_a_known_workload_exactly() {
    rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let mut c = common::config(dir.path());
        c.http_listen = Some("127.0.0.1:0".into());
        c.share.auto_offset_reset = flume_broker::config::ShareReset::Earliest;
        let broker = flume_broker::Broker::start(c).await.expect("broker starts");
        broker
            .engine()
            .records()
            .create_topic("q", common::topic(1))
            .expect("topic");
        let http = broker.http_addr().expect("http is on");
        let addr = broker.local_addr().to_string();
        let client = Client::connect(&addr, ConnectionConfig::default())
            .await
            .unwrap();
        let resp = client
            .call(&ProduceRequest {
                entries: vec![ProduceEntry {
                    topic: "q".into(),
                    partition: 0,
                    records: records(10),
                }],
            })
            .await
            .unwrap();
        assert!(resp.results.iter().all(|r| r.error.is_ok()));

        let mut member = ShareConsumer::builder(&addr, "jobs")
            .subscribe(["q"])
            .ack_mode(AckMode::Explicit)
            .max_wait(Duration::from_millis(100))
            .build()
            .await
            .unwrap();
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while got.len() < 10 {
            assert!(
                std::time::Instant::now() < deadline,
                "records stopped coming"
            );
            got.extend(member.poll().await.unwrap());
        }
        for r in &got {
            match r.offset {
                0..=5 => r.accept(),
                6 | 7 => r.release(),
                8 => r.reject(),
                _ => {}
            }
        }
        member.commit().await.unwrap();

        let m = Metrics::scrape(http).await.unwrap();
        let g = [("group", "jobs")];
        let l = [("group", "jobs"), ("topic", "q"), ("partition", "0")];
        assert_eq!(m.value("flume_share_group_members", &g), 1.0);
        assert!(m.value("flume_share_group_epoch", &g) >= 1.0);
        assert_eq!(m.value("flume_share_partition_start_offset", &l), 6.0);
        // 6 and 7 waiting, 9 held, 8 archived: three not done.
        assert_eq!(m.value("flume_share_partition_lag_records", &l), 3.0);
        assert_eq!(m.value("flume_share_partition_in_flight_records", &l), 4.0);
        assert_eq!(m.value("flume_share_partition_acquired_records", &l), 1.0);
        assert_eq!(m.value("flume_share_partition_available_records", &l), 2.0);
        assert_eq!(m.value("flume_share_partition_deliveries_total", &l), 10.0);
        assert_eq!(m.value("flume_share_partition_redeliveries_total", &l), 0.0);
        assert_eq!(
            m.value("flume_share_partition_archived_records_total", &l),
            1.0
        );
        assert_eq!(
            m.value("flume_share_partition_lock_expiries_total", &l),
            0.0
        );
        let ack = |t: &'static str| {
            [
                ("group", "jobs"),
                ("topic", "q"),
                ("partition", "0"),
                ("type", t),
            ]
        };
        assert_eq!(
            m.value(
                "flume_share_partition_acknowledgements_total",
                &ack("accept")
            ),
            6.0
        );
        assert_eq!(
            m.value(
                "flume_share_partition_acknowledgements_total",
                &ack("release")
            ),
            2.0
        );
        assert_eq!(
            m.value(
                "flume_share_partition_acknowledgements_total",
                &ack("reject")
            ),
            1.0
        );

        // The released two come again, each a redelivery.
        let mut again = Vec::new();
        while again.len() < 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "released records did not come back"
            );
            again.extend(member.poll().await.unwrap());
        }
        assert_eq!(again.iter().map(|r| r.offset).collect::<Vec<_>>(), [6, 7]);
        let m = Metrics::scrape(http).await.unwrap();
        assert_eq!(m.value("flume_share_partition_deliveries_total", &l), 12.0);
        assert_eq!(m.value("flume_share_partition_redeliveries_total", &l), 2.0);
        assert_eq!(m.value("flume_share_partition_acquired_records", &l), 3.0);

        // The overview has the group for the dashboard's card.
        let (_, _, body) = get(http, "/api/overview").await.unwrap();
        let o: serde_json::Value = serde_json::from_str(&body).unwrap();
        let s = &o["share_groups"][0];
        assert_eq!(s["group"], "jobs");
        assert_eq!(s["members"], 1);
        let p = &s["partitions"][0];
        assert_eq!(
            (p["topic"].as_str(), p["partition"].as_i64()),
            (Some("q"), Some(0))
        );
        assert_eq!(p["start_offset"], 6);
        assert_eq!(p["end_offset"], 10);
        assert_eq!(p["lag"], 3);
        assert_eq!(p["acquired"], 3);
        assert_eq!(p["available"], 0);
        assert_eq!(p["delivered"], 12);
        assert_eq!(p["redelivered"], 2);
        assert_eq!(p["accepted"], 6);
        assert_eq!(p["released"], 2);
        assert_eq!(p["rejected"], 1);
        assert_eq!(p["archived"], 1);
        assert_eq!(o["share_groups_truncated"], false);
        member.close().await.unwrap();
        broker.shutdown().await;
    });
}

#[test]
fn the_http_side_serves_health_the_page_and_refuses_the_rest() {
    rt::block_on(async {
        let (_dir, broker, http) = start().await;
        let (status, _, body) = get(http, "/healthz").await.unwrap();
        assert_eq!((status, body.as_str()), (200, "ok\n"));
        let (status, ct, body) = get(http, "/").await.unwrap();
        assert_eq!(status, 200);
        assert!(ct.starts_with("text/html"));
        assert!(body.contains("/api/overview"));
        assert!(
            !body.contains("http://") && !body.contains("https://"),
            "no external resources"
        );
        let (status, _, _) = get(http, "/nope").await.unwrap();
        assert_eq!(status, 404);

        // A request with a body is refused without reading it.
        let mut s = rt::TcpStream::connect(&http.to_string()).await.unwrap();
        s.write_all(b"POST /metrics HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello")
            .await
            .unwrap();
        let mut buf = vec![0u8; 12];
        s.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"HTTP/1.1 405");
        // A GET with a body is refused (413) without reading it.
        let mut s = rt::TcpStream::connect(&http.to_string()).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello")
            .await
            .unwrap();
        let mut buf = vec![0u8; 12];
        s.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"HTTP/1.1 413");
        // A request head past the limit is refused.
        let mut s = rt::TcpStream::connect(&http.to_string()).await.unwrap();
        let big = format!("GET / HTTP/1.1\r\nx: {}\r\n\r\n", "a".repeat(64 * 1024));
        let _ = s.write_all(big.as_bytes()).await;
        let mut reply = Vec::new();
        let _ = rt::timeout(Duration::from_secs(5), s.read_to_end(&mut reply)).await;
        assert!(
            reply.starts_with(b"HTTP/1.1 431"),
            "{:?}",
            String::from_utf8_lossy(&reply[..reply.len().min(40)])
        );

        // Health fails once a partition has stopped after a storage failure.
        broker
            .engine()
            .records()
            .create_topic("t", common::topic(1))
            .unwrap();
        let part = broker
            .engine()
            .records()
            .topic("t")
            .unwrap()
            .partition(0)
            .unwrap()
            .clone();
        part.faults().fail_writes(1);
        let _ = part.append(records(1), 1, 1).await;
        let (status, _, body) = get(http, "/healthz").await.unwrap();
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("t/0"), "{body}");
        broker.shutdown().await;
    });
}

#[test]
fn at_the_http_connection_limit_a_new_connection_closes_the_oldest_idle_one() {
    rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let mut c = common::config(dir.path());
        c.http_listen = Some("127.0.0.1:0".into());
        c.max_connections = 1;
        let broker = flume_broker::Broker::start(c).await.unwrap();
        let http = broker.http_addr().unwrap();
        // One idle connection holds the only slot; a scrape is served anyway,
        // and the idle connection is the one closed.
        let mut idle = rt::TcpStream::connect(&http.to_string()).await.unwrap();
        // (Accepted in the order they connected: the idle one first.)
        let m = Metrics::scrape(http).await.expect("served at the limit");
        assert!(m.value("flume_http_connections_refused_total", &[]) >= 1.0);
        let mut rest = Vec::new();
        let closed = rt::timeout(Duration::from_secs(5), idle.read_to_end(&mut rest)).await;
        assert!(
            matches!(closed, Some(Ok(0))),
            "the idle connection was closed: {closed:?}"
        );
        assert!(broker.engine().metrics().connections_refused().1 >= 1);
        broker.shutdown().await;
    });
}

#[test]
fn a_silent_http_peer_is_cut_off_after_the_read_timeout() {
    rt::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let mut c = common::config(dir.path());
        c.http_listen = Some("127.0.0.1:0".into());
        c.read_timeout = Duration::from_millis(200);
        let broker = flume_broker::Broker::start(c).await.unwrap();
        let http = broker.http_addr().unwrap();
        // Half a request head, then nothing: the connection is closed, not held.
        // (Timed from before the connect: the broker's timer may start at accept.)
        let started = std::time::Instant::now();
        let mut s = rt::TcpStream::connect(&http.to_string()).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n")
            .await
            .unwrap();
        let mut rest = Vec::new();
        let closed = rt::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
        assert!(closed.is_some(), "the connection was held past 5 s");
        assert!(started.elapsed() >= Duration::from_millis(150));
        broker.shutdown().await;
    });
}
