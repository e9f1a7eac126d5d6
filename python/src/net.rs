//! The network SDK (`flume.Producer`, `GroupConsumer`, `PartitionConsumer`,
//! `Admin`) over `flume_client`, and `flume.Broker`, the TCP broker run
//! in-process. Each blocking method has an `*_async` twin returning an
//! asyncio future (see `bridge`); `flume.aio` wraps those in coroutine classes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::deps::protocol::CreateTopicRequest;
use crate::deps::rt::sync::lock;
use flume_client::{
    Compression, ConsumerRecord, Partitioner, ProducerConfig, ProducerRecord, RequiredAcks,
    StartOffset,
};
use futures::lock::Mutex as AsyncMutex;
use futures::StreamExt;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::bridge::{run, seconds, to_asyncio, wait};
use crate::errors::{broker_error, client_error, closed, code_error, until_closed};
use crate::record::{for_each_keyed, headers, opt_bytes, RawRecord, Record, RecordMetadata};

fn meta(m: flume_client::RecordMetadata) -> RecordMetadata {
    RecordMetadata {
        partition: u32::try_from(m.partition).unwrap_or(0),
        offset: u64::try_from(m.offset).unwrap_or(0),
    }
}

fn raw(topic: String, partition: i32, record: flume_client::Record) -> RawRecord {
    RawRecord {
        topic,
        partition: u32::try_from(partition).unwrap_or(0),
        record,
    }
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

// ------------------------------------------------------------------ Broker

/// A Flume TCP broker running inside this process (its own threads), for
/// tests and tools. `Broker.start(data_dir, port=0)` picks a free port; see
/// `address`. With `kafka_port` it also serves Kafka's protocol there; see
/// `kafka_address`.
#[pyclass(module = "flume", frozen)]
pub struct Broker {
    /// Taken at shutdown, so the engine (and its hold on the directory) goes with it.
    inner: std::sync::Mutex<Option<Arc<flume_broker::Broker>>>,
    addr: std::net::SocketAddr,
    kafka: Option<std::net::SocketAddr>,
}

impl Broker {
    fn take(&self) -> Option<Arc<flume_broker::Broker>> {
        lock(&self.inner).take()
    }
}

#[pymethods]
impl Broker {
    /// Opens `data_dir` and starts listening on `host:port` (port 0: any free port).
    /// `kafka_port`: also serve Kafka's protocol on `host:kafka_port` (0: any
    /// free port). `group_initial_rebalance_delay_ms`: how long a new Kafka
    /// group waits for more members before its first assignment (Kafka's
    /// `group.initial.rebalance.delay.ms`, 3 s by default).
    #[staticmethod]
    #[pyo3(signature = (data_dir, *, host = "127.0.0.1", port = 0, fsync = None, default_partitions = 3, auto_create_topics = true, kafka_port = None, group_initial_rebalance_delay_ms = None))]
    #[allow(clippy::too_many_arguments)]
    fn start(
        py: Python<'_>,
        data_dir: PathBuf,
        host: &str,
        port: u16,
        fsync: Option<&Bound<'_, PyAny>>,
        default_partitions: u32,
        auto_create_topics: bool,
        kafka_port: Option<u16>,
        group_initial_rebalance_delay_ms: Option<u64>,
    ) -> PyResult<Broker> {
        let mut config = flume_broker::BrokerConfig::new(data_dir);
        config.listen = format!("{host}:{port}");
        if let Some(f) = fsync {
            config.fsync = crate::embedded::parse_fsync(f)?;
        }
        config.default_topic.partitions = default_partitions;
        config.auto_create_topics = auto_create_topics;
        config.kafka_listen = kafka_port.map(|p| format!("{host}:{p}"));
        if let Some(d) = group_initial_rebalance_delay_ms {
            config.group_initial_rebalance_delay = ms(d);
        }
        let b = run(py, flume_broker::Broker::start(config)).map_err(broker_error)?;
        Ok(Broker {
            addr: b.local_addr(),
            kafka: b.kafka_addr(),
            inner: std::sync::Mutex::new(Some(Arc::new(b))),
        })
    }

    /// `"host:port"` the broker listens on.
    #[getter]
    fn address(&self) -> String {
        self.addr.to_string()
    }

    /// `"kafka://host:port"` of the Kafka listener (started with
    /// `kafka_port`), for the network classes and any Kafka client; None
    /// without one.
    #[getter]
    fn kafka_address(&self) -> Option<String> {
        self.kafka.map(|a| format!("kafka://{a}"))
    }

    /// The port the broker listens on.
    #[getter]
    fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Stops accepting, drains in-flight requests and queues, fsyncs. Idempotent.
    fn shutdown(&self, py: Python<'_>) {
        if let Some(b) = self.take() {
            run(py, async move { b.shutdown().await });
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.shutdown(py);
        false
    }

    fn __repr__(&self) -> String {
        format!("Broker({:?})", self.address())
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(b) = self.take() {
            crate::deps::rt::block_on(b.shutdown());
        }
    }
}

// ------------------------------------------------------------------ Producer

/// A batching producer connected to a broker. Thread-safe: share one
/// between threads. Records with the same key keep their order.
#[pyclass(module = "flume", frozen)]
pub struct Producer {
    inner: Arc<flume_client::Producer>,
}

fn send_record(
    topic: &str,
    value: &Bound<'_, PyAny>,
    key: Option<&Bound<'_, PyAny>>,
    hdrs: Option<&Bound<'_, PyAny>>,
    partition: Option<u32>,
    timestamp: Option<i64>,
) -> PyResult<ProducerRecord> {
    let mut rec =
        ProducerRecord::nullable(topic, opt_bytes(Some(value), "value")?).headers(headers(hdrs)?);
    if let Some(k) = opt_bytes(key, "key")? {
        rec = rec.key(k);
    }
    if let Some(p) = partition {
        rec = rec.partition(i32::try_from(p).unwrap_or(i32::MAX));
    }
    if let Some(ts) = timestamp {
        rec = rec.timestamp(ts);
    }
    Ok(rec)
}

fn send_records(
    topic: &str,
    values: &Bound<'_, PyAny>,
    keys: Option<&Bound<'_, PyAny>>,
    partition: Option<u32>,
) -> PyResult<Vec<ProducerRecord>> {
    let mut out = Vec::new();
    for_each_keyed(values, keys, |v, key| {
        out.push(send_record(topic, &v, key.as_ref(), None, partition, None)?);
        Ok(())
    })?;
    Ok(out)
}

async fn producer_connect(address: String, config: ProducerConfig) -> PyResult<Producer> {
    let p = flume_client::Producer::with_config(&address, config)
        .await
        .map_err(client_error)?;
    Ok(Producer { inner: Arc::new(p) })
}

async fn producer_flush(p: Arc<flume_client::Producer>) -> PyResult<()> {
    p.flush().await;
    Ok(())
}

async fn producer_close(p: Arc<flume_client::Producer>) -> PyResult<()> {
    p.close().await;
    Ok(())
}

async fn send_one(p: Arc<flume_client::Producer>, rec: ProducerRecord) -> PyResult<RecordMetadata> {
    p.send_record(rec).await.map(meta).map_err(client_error)
}

async fn send_all(
    p: Arc<flume_client::Producer>,
    recs: Vec<ProducerRecord>,
) -> PyResult<Vec<RecordMetadata>> {
    // Buffer all (waiting for room as needed), then collect the acknowledgements.
    let mut acks = Vec::with_capacity(recs.len());
    for r in recs {
        acks.push(p.enqueue(r).await.map_err(client_error)?);
    }
    let mut out = Vec::with_capacity(acks.len());
    for a in acks {
        out.push(meta(a.await.map_err(client_error)?));
    }
    Ok(out)
}

/// The Kafka-only producer settings (`acks`, `idempotence`, `compression`,
/// `partitioner`), read from their Python spelling; a Flume broker ignores
/// them (but refuses "murmur2": it routes by FNV-1a itself). Idempotence
/// unset is on with `acks="all"` and off otherwise, as in Kafka's Java client.
fn kafka_settings(
    mut config: ProducerConfig,
    acks: Option<&Bound<'_, PyAny>>,
    idempotence: Option<bool>,
    compression: &str,
    partitioner: &str,
) -> PyResult<ProducerConfig> {
    let acks = match acks {
        None => RequiredAcks::All,
        Some(a) => acks_arg(a)?,
    };
    let compression = match compression {
        "none" => Compression::None,
        "gzip" => Compression::Gzip,
        "snappy" => Compression::Snappy,
        "lz4" => Compression::Lz4,
        "zstd" => Compression::Zstd,
        other => {
            return Err(PyValueError::new_err(format!(
                "compression must be none, gzip, snappy, lz4 or zstd, not {other:?}"
            )))
        }
    };
    let partitioner: Partitioner = partitioner.parse().map_err(PyValueError::new_err)?;
    config = config
        .acks(acks)
        .idempotence(idempotence.unwrap_or(acks == RequiredAcks::All))
        .compression(compression)
        .partitioner(partitioner);
    Ok(config)
}

/// `acks=`: 0, 1, -1 or "all" (also "0", "1").
fn acks_arg(acks: &Bound<'_, PyAny>) -> PyResult<RequiredAcks> {
    let acks = match acks.extract::<i64>() {
        Ok(n) => n.to_string(),
        Err(_) => acks.extract::<String>()?,
    };
    acks.parse().map_err(PyValueError::new_err)
}

#[pymethods]
impl Producer {
    /// Connects to the broker at `address`: "host:port" (a Flume broker) or
    /// "kafka://host:port[,host:port...]" (any Kafka cluster).
    /// `linger_ms`: extra wait to fill batches; `buffer_max_bytes`: most bytes
    /// waiting in the client (send waits for room beyond it). Over Kafka only:
    /// `acks` (0, 1 or "all", the default), `idempotence` (default: on with
    /// acks "all"), `compression` ("none", "gzip", "snappy", "lz4", "zstd")
    /// and `partitioner` ("fnv1a", Flume's, or "murmur2", the Java client's).
    #[new]
    #[pyo3(signature = (address, *, linger_ms = 0, batch_max_bytes = 1024 * 1024, buffer_max_bytes = 32 * 1024 * 1024, max_in_flight = 8, request_timeout_ms = 30_000, acks = None, idempotence = None, compression = "none", partitioner = "fnv1a"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        address: &str,
        linger_ms: u64,
        batch_max_bytes: usize,
        buffer_max_bytes: usize,
        max_in_flight: usize,
        request_timeout_ms: u64,
        acks: Option<&Bound<'_, PyAny>>,
        idempotence: Option<bool>,
        compression: &str,
        partitioner: &str,
    ) -> PyResult<Self> {
        let mut config = ProducerConfig::default()
            .linger(ms(linger_ms))
            .batch_max_bytes(batch_max_bytes)
            .buffer_max_bytes(buffer_max_bytes)
            .max_in_flight(max_in_flight);
        config.connection.request_timeout = ms(request_timeout_ms);
        let config = kafka_settings(config, acks, idempotence, compression, partitioner)?;
        run(py, producer_connect(address.to_owned(), config))
    }

    /// Connects without blocking the event loop; resolves to a Producer.
    #[staticmethod]
    #[pyo3(signature = (address, *, linger_ms = 0, acks = None, idempotence = None, compression = "none", partitioner = "fnv1a"))]
    fn connect_async<'py>(
        py: Python<'py>,
        address: String,
        linger_ms: u64,
        acks: Option<&Bound<'py, PyAny>>,
        idempotence: Option<bool>,
        compression: &str,
        partitioner: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let config = kafka_settings(
            ProducerConfig::default().linger(ms(linger_ms)),
            acks,
            idempotence,
            compression,
            partitioner,
        )?;
        to_asyncio(py, producer_connect(address, config))
    }

    /// Sends one record and waits for the broker's acknowledgement.
    /// Raises QueueFull, RecordTooLarge, ConnectionFailed, ...
    #[pyo3(signature = (topic, value, key = None, *, headers = None, partition = None, timestamp = None))]
    #[allow(clippy::too_many_arguments)]
    fn send(
        &self,
        py: Python<'_>,
        topic: &str,
        value: &Bound<'_, PyAny>,
        key: Option<&Bound<'_, PyAny>>,
        headers: Option<&Bound<'_, PyAny>>,
        partition: Option<u32>,
        timestamp: Option<i64>,
    ) -> PyResult<RecordMetadata> {
        let rec = send_record(topic, value, key, headers, partition, timestamp)?;
        run(py, send_one(Arc::clone(&self.inner), rec))
    }

    /// `send` for asyncio: returns an awaitable of RecordMetadata.
    #[pyo3(signature = (topic, value, key = None, *, headers = None, partition = None, timestamp = None))]
    #[allow(clippy::too_many_arguments)]
    fn send_async<'py>(
        &self,
        py: Python<'py>,
        topic: &str,
        value: &Bound<'py, PyAny>,
        key: Option<&Bound<'py, PyAny>>,
        headers: Option<&Bound<'py, PyAny>>,
        partition: Option<u32>,
        timestamp: Option<i64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let rec = send_record(topic, value, key, headers, partition, timestamp)?;
        to_asyncio(py, send_one(Arc::clone(&self.inner), rec))
    }

    /// Sends many records with many in flight and returns their metadata in order.
    #[pyo3(signature = (topic, values, *, keys = None, partition = None))]
    fn send_many(
        &self,
        py: Python<'_>,
        topic: &str,
        values: &Bound<'_, PyAny>,
        keys: Option<&Bound<'_, PyAny>>,
        partition: Option<u32>,
    ) -> PyResult<Vec<RecordMetadata>> {
        let recs = send_records(topic, values, keys, partition)?;
        run(py, send_all(Arc::clone(&self.inner), recs))
    }

    /// `send_many` for asyncio.
    #[pyo3(signature = (topic, values, *, keys = None, partition = None))]
    fn send_many_async<'py>(
        &self,
        py: Python<'py>,
        topic: &str,
        values: &Bound<'py, PyAny>,
        keys: Option<&Bound<'py, PyAny>>,
        partition: Option<u32>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let recs = send_records(topic, values, keys, partition)?;
        to_asyncio(py, send_all(Arc::clone(&self.inner), recs))
    }

    /// Waits until every record sent before is acknowledged (or failed).
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        run(py, producer_flush(Arc::clone(&self.inner)))
    }

    /// `flush` for asyncio.
    fn flush_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_asyncio(py, producer_flush(Arc::clone(&self.inner)))
    }

    /// Flushes and closes the connection. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        run(py, producer_close(Arc::clone(&self.inner)))
    }

    /// `close` for asyncio.
    fn close_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_asyncio(py, producer_close(Arc::clone(&self.inner)))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }
}

// ------------------------------------------------------------------ GroupConsumer

type SharedGroup = Arc<AsyncMutex<Option<flume_client::GroupConsumer>>>;

/// A consumer-group member: the broker assigns it partitions, it heartbeats
/// in the background and follows rebalances. With `auto_commit` (default) a
/// record counts as processed once the next one is asked for; otherwise call
/// `commit(record)`.
#[pyclass(module = "flume", frozen)]
pub struct GroupConsumer {
    inner: SharedGroup,
}

fn topics_arg(topics: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if let Ok(s) = topics.extract::<String>() {
        return Ok(vec![s]);
    }
    topics.extract::<Vec<String>>()
}

/// `start=`: "earliest" (also None), "latest" or an offset.
fn start_arg(start: Option<&Bound<'_, PyAny>>) -> PyResult<StartOffset> {
    let Some(start) = start else {
        return Ok(StartOffset::Earliest);
    };
    if let Ok(o) = start.extract::<u64>() {
        return Ok(StartOffset::At(o));
    }
    start
        .extract::<String>()?
        .parse::<StartOffset>()
        .map_err(PyValueError::new_err)
}

async fn group_recv(inner: SharedGroup) -> PyResult<RawRecord> {
    let mut g = inner.lock().await;
    let c = g.as_mut().ok_or_else(|| closed("GroupConsumer"))?;
    match c.recv().await {
        Some(Ok(r)) => Ok(raw(r.topic, r.partition, r.record)),
        Some(Err(e)) => Err(client_error(e)),
        None => Err(closed("GroupConsumer")),
    }
}

fn consumer_record(r: &Record) -> ConsumerRecord {
    ConsumerRecord {
        topic: r.topic.clone(),
        partition: i32::try_from(r.partition).unwrap_or(i32::MAX),
        record: flume_client::Record {
            offset: r.offset,
            timestamp: r.timestamp,
            key: None,
            value: None,
            headers: Vec::new(),
        },
    }
}

async fn group_commit(inner: SharedGroup, rec: Option<ConsumerRecord>) -> PyResult<()> {
    let g = inner.lock().await;
    let c = g.as_ref().ok_or_else(|| closed("GroupConsumer"))?;
    match rec {
        Some(r) => c.commit(&r).await,
        None => c.commit_processed().await,
    }
    .map_err(client_error)
}

async fn group_close(inner: SharedGroup) -> PyResult<()> {
    let c = inner.lock().await.take();
    match c {
        Some(c) => c.close().await.map_err(client_error),
        None => Ok(()),
    }
}

#[allow(clippy::too_many_arguments)]
async fn group_build(
    address: String,
    group: String,
    topics: Vec<String>,
    auto_commit: bool,
    start: StartOffset,
    session_timeout_ms: u64,
    heartbeat_interval_ms: Option<u64>,
    max_wait_ms: u64,
    assignor: String,
) -> PyResult<GroupConsumer> {
    let mut b = flume_client::GroupConsumer::builder(&address, &group)
        .auto_commit(auto_commit)
        .start(start)
        .session_timeout(ms(session_timeout_ms))
        .max_wait(ms(max_wait_ms))
        .assignor(&assignor);
    if let Some(h) = heartbeat_interval_ms {
        b = b.heartbeat_interval(ms(h));
    }
    for t in &topics {
        b = b.topic(t);
    }
    let c = b.build().await.map_err(client_error)?;
    Ok(GroupConsumer {
        inner: Arc::new(AsyncMutex::new(Some(c))),
    })
}

#[pymethods]
impl GroupConsumer {
    /// Connects to `address` ("host:port", or "kafka://host:port[,...]" for a
    /// Kafka cluster), joins `group` subscribed to `topics` (a name or a list)
    /// and waits for the first assignment. `start`: where to begin where the
    /// group has no committed offset ("earliest" or "latest"). `assignor`
    /// over Kafka: "range", "roundrobin" or "cooperative-sticky".
    #[new]
    #[pyo3(signature = (address, group, topics, *, auto_commit = true, start = None, session_timeout_ms = 10_000, heartbeat_interval_ms = None, max_wait_ms = 500, assignor = String::from("range")))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        address: String,
        group: String,
        topics: &Bound<'_, PyAny>,
        auto_commit: bool,
        start: Option<&Bound<'_, PyAny>>,
        session_timeout_ms: u64,
        heartbeat_interval_ms: Option<u64>,
        max_wait_ms: u64,
        assignor: String,
    ) -> PyResult<Self> {
        let topics = topics_arg(topics)?;
        let start = start_arg(start)?;
        run(
            py,
            group_build(
                address,
                group,
                topics,
                auto_commit,
                start,
                session_timeout_ms,
                heartbeat_interval_ms,
                max_wait_ms,
                assignor,
            ),
        )
    }

    /// `GroupConsumer(...)` for asyncio: resolves to a joined consumer.
    #[staticmethod]
    #[pyo3(signature = (address, group, topics, *, auto_commit = true, start = None, session_timeout_ms = 10_000, heartbeat_interval_ms = None, max_wait_ms = 500, assignor = String::from("range")))]
    #[allow(clippy::too_many_arguments)]
    fn connect_async<'py>(
        py: Python<'py>,
        address: String,
        group: String,
        topics: &Bound<'py, PyAny>,
        auto_commit: bool,
        start: Option<&Bound<'py, PyAny>>,
        session_timeout_ms: u64,
        heartbeat_interval_ms: Option<u64>,
        max_wait_ms: u64,
        assignor: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let topics = topics_arg(topics)?;
        let start = start_arg(start)?;
        to_asyncio(
            py,
            group_build(
                address,
                group,
                topics,
                auto_commit,
                start,
                session_timeout_ms,
                heartbeat_interval_ms,
                max_wait_ms,
                assignor,
            ),
        )
    }

    /// The next record, waiting up to `timeout` seconds (None: until one
    /// arrives). None when the time ran out.
    #[pyo3(signature = (timeout = None))]
    fn poll(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<RawRecord>> {
        wait(py, group_recv(Arc::clone(&self.inner)), seconds(timeout)?)
    }

    /// The next record, for asyncio.
    fn poll_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_asyncio(py, group_recv(Arc::clone(&self.inner)))
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<RawRecord>> {
        until_closed(py, self.poll(py, None))
    }

    /// Commits `record.offset + 1` for its partition (manual commits).
    fn commit(&self, py: Python<'_>, record: PyRef<'_, Record>) -> PyResult<()> {
        let rec = consumer_record(&record);
        run(py, group_commit(Arc::clone(&self.inner), Some(rec)))
    }

    /// `commit` for asyncio.
    fn commit_async<'py>(
        &self,
        py: Python<'py>,
        record: PyRef<'py, Record>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let rec = consumer_record(&record);
        to_asyncio(py, group_commit(Arc::clone(&self.inner), Some(rec)))
    }

    /// Commits every record handed out so far.
    fn commit_processed(&self, py: Python<'_>) -> PyResult<()> {
        run(py, group_commit(Arc::clone(&self.inner), None))
    }

    /// The (topic, partition) pairs assigned to this member.
    fn assignment(&self, py: Python<'_>) -> PyResult<Vec<(String, i32)>> {
        let inner = Arc::clone(&self.inner);
        run(py, async move {
            let g = inner.lock().await;
            match g.as_ref() {
                Some(c) => Ok(c.assignment().await),
                None => Err(closed("GroupConsumer")),
            }
        })
    }

    /// Commits (auto-commit mode) and leaves the group. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        run(py, group_close(Arc::clone(&self.inner)))
    }

    /// `close` for asyncio.
    fn close_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_asyncio(py, group_close(Arc::clone(&self.inner)))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }
}

// ------------------------------------------------------------------ PartitionConsumer

type SharedPartition = Arc<AsyncMutex<Option<flume_client::PartitionConsumer>>>;

/// Reads one partition from a start offset ("earliest", "latest" or a number).
#[pyclass(module = "flume", frozen)]
pub struct PartitionConsumer {
    inner: SharedPartition,
    topic: String,
    partition: i32,
}

async fn partition_recv(
    inner: SharedPartition,
    topic: String,
    partition: i32,
) -> PyResult<RawRecord> {
    let mut g = inner.lock().await;
    let c = g.as_mut().ok_or_else(|| closed("PartitionConsumer"))?;
    // The stream never ends; an error is one item and the next poll fetches again.
    let r = c
        .next()
        .await
        .ok_or_else(|| closed("PartitionConsumer"))?
        .map_err(client_error)?;
    Ok(raw(topic, partition, r))
}

/// Connects to read `topic`/`partition` from `start`.
async fn partition_connect(
    address: String,
    topic: String,
    partition: i32,
    start: StartOffset,
) -> PyResult<PartitionConsumer> {
    let c = flume_client::PartitionConsumer::connect(&address, &topic, partition, start)
        .await
        .map_err(client_error)?;
    Ok(PartitionConsumer {
        inner: Arc::new(AsyncMutex::new(Some(c))),
        topic,
        partition,
    })
}

fn partition_arg(partition: u32) -> PyResult<i32> {
    i32::try_from(partition).map_err(|_| PyValueError::new_err("partition too large"))
}

async fn partition_close(inner: SharedPartition) -> PyResult<()> {
    inner.lock().await.take();
    Ok(())
}

#[pymethods]
impl PartitionConsumer {
    /// Connects to `address` ("host:port", or "kafka://host:port[,...]": the
    /// partition's leader in a Kafka cluster) to read `topic`/`partition` from `start`.
    #[new]
    #[pyo3(signature = (address, topic, partition, *, start = None))]
    fn new(
        py: Python<'_>,
        address: &str,
        topic: String,
        partition: u32,
        start: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let start = start_arg(start)?;
        let p = partition_arg(partition)?;
        run(py, partition_connect(address.to_owned(), topic, p, start))
    }

    /// `PartitionConsumer(...)` for asyncio.
    #[staticmethod]
    #[pyo3(signature = (address, topic, partition, *, start = None))]
    fn connect_async<'py>(
        py: Python<'py>,
        address: String,
        topic: String,
        partition: u32,
        start: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let start = start_arg(start)?;
        let p = partition_arg(partition)?;
        to_asyncio(py, partition_connect(address, topic, p, start))
    }

    /// The next record, waiting up to `timeout` seconds (None: until one arrives).
    #[pyo3(signature = (timeout = None))]
    fn poll(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<RawRecord>> {
        let fut = partition_recv(Arc::clone(&self.inner), self.topic.clone(), self.partition);
        wait(py, fut, seconds(timeout)?)
    }

    /// The next record, for asyncio.
    fn poll_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_asyncio(
            py,
            partition_recv(Arc::clone(&self.inner), self.topic.clone(), self.partition),
        )
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<RawRecord>> {
        until_closed(py, self.poll(py, None))
    }

    /// The next offset this consumer reads, once known.
    #[getter]
    fn position(&self, py: Python<'_>) -> Option<u64> {
        let inner = Arc::clone(&self.inner);
        run(py, async move {
            inner.lock().await.as_ref().and_then(|c| c.position())
        })
    }

    /// Closes the connection. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        run(py, partition_close(Arc::clone(&self.inner)))
    }

    /// `close` for asyncio.
    fn close_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_asyncio(py, partition_close(Arc::clone(&self.inner)))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }
}

// ------------------------------------------------------------------ Admin

/// Topics (create, describe, configs by Kafka's names, more partitions,
/// deleting records), their offsets, committed offsets and lag, groups'
/// offsets, over the network.
#[pyclass(module = "flume", frozen)]
pub struct Admin {
    inner: Arc<flume_client::Admin>,
}

type Described = BTreeMap<String, BTreeMap<u32, (u64, u64)>>;

async fn describe(a: Arc<flume_client::Admin>, names: Vec<String>) -> PyResult<Described> {
    let topics = a.topics(&names).await.map_err(client_error)?;
    let mut out = BTreeMap::new();
    for t in topics {
        if !t.error.is_ok() {
            return Err(code_error(
                t.error,
                format!("topic {:?}: {}", t.name, t.error),
            ));
        }
        let parts = t
            .partitions
            .iter()
            .map(|p| {
                (
                    u32::try_from(p.partition).unwrap_or(0),
                    (
                        u64::try_from(p.log_start).unwrap_or(0),
                        u64::try_from(p.log_end).unwrap_or(0),
                    ),
                )
            })
            .collect();
        out.insert(t.name, parts);
    }
    Ok(out)
}

async fn lag(
    a: Arc<flume_client::Admin>,
    group: String,
    topic: String,
) -> PyResult<BTreeMap<u32, u64>> {
    let parts = a
        .group_offsets(&group, std::slice::from_ref(&topic))
        .await
        .map_err(client_error)?;
    let mut out = BTreeMap::new();
    for p in parts {
        if !p.error.is_ok() {
            return Err(code_error(p.error, format!("topic {topic:?}: {}", p.error)));
        }
        out.insert(
            u32::try_from(p.partition).unwrap_or(0),
            u64::try_from(p.lag()).unwrap_or(0),
        );
    }
    Ok(out)
}

async fn admin_connect(address: String) -> PyResult<Admin> {
    let a = flume_client::Admin::connect(&address)
        .await
        .map_err(client_error)?;
    Ok(Admin { inner: Arc::new(a) })
}

/// How `create_topic` creates: Flume's own settings, or configs by Kafka's names.
enum Create {
    Settings(CreateTopicRequest),
    Configs {
        name: String,
        partitions: i32,
        configs: Vec<(String, String)>,
    },
}

async fn create_topic(a: Arc<flume_client::Admin>, how: Create) -> PyResult<()> {
    match how {
        Create::Settings(req) => a.create_topic(req).await,
        Create::Configs {
            name,
            partitions,
            configs,
        } => a
            .create_topic_with_configs(&name, partitions, &borrowed(&configs))
            .await
            .map(|_| ()),
    }
    .map_err(client_error)
}

/// `{name: value}` configs from Python: values as text, in Kafka's spelling
/// (`True` is `"true"`, `3600000` is `"3600000"`).
fn configs_arg(configs: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<(String, String)>> {
    let Some(configs) = configs else {
        return Ok(Vec::new());
    };
    let map = configs
        .cast::<pyo3::types::PyDict>()
        .map_err(|_| PyValueError::new_err("configs must be a dict of config name to value"))?;
    let mut out = Vec::with_capacity(map.len());
    for (k, v) in map.iter() {
        let name: String = k
            .extract()
            .map_err(|_| PyValueError::new_err("a config name must be a str"))?;
        let value = if let Ok(b) = v.extract::<bool>() {
            if b { "true" } else { "false" }.to_owned()
        } else if let Ok(s) = v.extract::<String>() {
            s
        } else if v.extract::<i64>().is_ok() || v.extract::<f64>().is_ok() {
            v.str()?.to_string()
        } else {
            return Err(PyValueError::new_err(format!(
                "config {name}: the value must be a str, int, float or bool"
            )));
        };
        out.push((name, value));
    }
    Ok(out)
}

fn borrowed(configs: &[(String, String)]) -> Vec<(&str, &str)> {
    configs
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect()
}

/// A topic's configs as Python sees them: `{name: (value, source)}`, source
/// "topic" (set on the topic), "broker" (the broker's default, set at its
/// start) or "default" (the built-in default), as `flume-cli topics describe`.
type Configs = BTreeMap<String, (String, &'static str)>;

fn configs_out(resp: flume_client::TopicConfigsResponse) -> Configs {
    resp.configs
        .into_iter()
        .map(|c| {
            let source = match c.source {
                flume_client::CONFIG_SOURCE_TOPIC => "topic",
                flume_client::CONFIG_SOURCE_BROKER => "broker",
                _ => "default",
            };
            (c.name, (c.value, source))
        })
        .collect()
}

async fn describe_configs(a: Arc<flume_client::Admin>, topic: String) -> PyResult<Configs> {
    a.describe_topic_configs(&topic)
        .await
        .map(configs_out)
        .map_err(client_error)
}

async fn alter_configs(
    a: Arc<flume_client::Admin>,
    topic: String,
    set: Vec<(String, String)>,
    delete: Vec<String>,
) -> PyResult<Configs> {
    let delete: Vec<&str> = delete.iter().map(String::as_str).collect();
    a.alter_topic_configs(&topic, &borrowed(&set), &delete)
        .await
        .map(configs_out)
        .map_err(client_error)
}

async fn delete_records(
    a: Arc<flume_client::Admin>,
    topic: String,
    partition: i32,
    before: Option<u64>,
) -> PyResult<u64> {
    a.delete_records(&topic, partition, before)
        .await
        .map_err(client_error)
}

async fn create_partitions(
    a: Arc<flume_client::Admin>,
    topic: String,
    partitions: i32,
    validate_only: bool,
) -> PyResult<u32> {
    a.create_partitions(&topic, partitions, validate_only)
        .await
        .map(|before| u32::try_from(before).unwrap_or(0))
        .map_err(client_error)
}

/// The partitions whose offsets went; the first partition that could not
/// (UNKNOWN_PARTITION, GROUP_NOT_EMPTY) raises, naming it.
async fn delete_group_offsets(
    a: Arc<flume_client::Admin>,
    group: String,
    topic: String,
    partitions: Vec<i32>,
) -> PyResult<Vec<u32>> {
    let outcomes = a
        .delete_offsets(&group, &topic, &partitions)
        .await
        .map_err(client_error)?;
    let mut deleted = Vec::with_capacity(outcomes.len());
    for o in outcomes {
        if !o.error.is_ok() {
            return Err(code_error(
                o.error,
                format!(
                    "group {group:?}, topic {topic:?} partition {}: {}",
                    o.partition, o.error
                ),
            ));
        }
        deleted.push(u32::try_from(o.partition).unwrap_or(0));
    }
    deleted.sort_unstable();
    Ok(deleted)
}

async fn delete_group(a: Arc<flume_client::Admin>, group: String) -> PyResult<u32> {
    a.delete_group(&group)
        .await
        .map(|n| u32::try_from(n).unwrap_or(0))
        .map_err(client_error)
}

fn partitions_arg(partitions: Option<Vec<u32>>) -> PyResult<Vec<i32>> {
    partitions
        .unwrap_or_default()
        .into_iter()
        .map(partition_arg)
        .collect()
}

fn count_arg(partitions: u32) -> PyResult<i32> {
    i32::try_from(partitions).map_err(|_| PyValueError::new_err("partitions too large"))
}

#[allow(clippy::too_many_arguments)]
fn create_request(
    name: &str,
    partitions: Option<u32>,
    configs: Option<&Bound<'_, PyAny>>,
    retention_bytes: Option<u64>,
    retention_ms: Option<u64>,
    segment_bytes: Option<u64>,
    max_pending: Option<u32>,
    backpressure: Option<&str>,
) -> PyResult<Create> {
    let i64_of = |v: Option<u64>| v.map_or(-1, |v| i64::try_from(v).unwrap_or(i64::MAX));
    let i32_of = |v: Option<u32>| v.map_or(-1, |v| i32::try_from(v).unwrap_or(i32::MAX));
    if configs.is_some() {
        // One request carries either Flume's settings or Kafka's configs.
        if retention_bytes.is_some()
            || retention_ms.is_some()
            || segment_bytes.is_some()
            || max_pending.is_some()
            || backpressure.is_some()
        {
            return Err(PyValueError::new_err(
                "configs= cannot be combined with the other settings: give retention and \
                 segment size in it by Kafka's names (retention.bytes, retention.ms, \
                 segment.bytes); max_pending and backpressure need a topic created without configs=",
            ));
        }
        return Ok(Create::Configs {
            name: name.to_owned(),
            partitions: i32_of(partitions),
            configs: configs_arg(configs)?,
        });
    }
    Ok(Create::Settings(CreateTopicRequest {
        name: name.to_owned(),
        partitions: i32_of(partitions),
        retention_bytes: i64_of(retention_bytes),
        retention_ms: i64_of(retention_ms),
        segment_bytes: i64_of(segment_bytes),
        max_pending: i32_of(max_pending),
        backpressure: match backpressure {
            None => -1,
            Some(b) => match crate::embedded::parse_backpressure(b)? {
                flume_broker::Backpressure::Block => 0,
                flume_broker::Backpressure::Reject => 1,
            },
        },
    }))
}

#[pymethods]
impl Admin {
    /// Connects to the broker at `address` ("host:port", or
    /// "kafka://host:port[,...]" for a Kafka cluster).
    #[new]
    fn new(py: Python<'_>, address: &str) -> PyResult<Self> {
        run(py, admin_connect(address.to_owned()))
    }

    /// `Admin(address)` for asyncio.
    #[staticmethod]
    fn connect_async(py: Python<'_>, address: String) -> PyResult<Bound<'_, PyAny>> {
        to_asyncio(py, admin_connect(address))
    }

    /// Creates a topic; unset settings take the broker's defaults. `configs`:
    /// topic configs by Kafka's names (`{"cleanup.policy": "compact"}`),
    /// instead of the keyword settings. Raises TopicAlreadyExists,
    /// InvalidName, InvalidRequest, InvalidConfig (naming the config and value).
    #[pyo3(signature = (name, partitions = None, *, configs = None, retention_bytes = None, retention_ms = None, segment_bytes = None, max_pending = None, backpressure = None))]
    #[allow(clippy::too_many_arguments)]
    fn create_topic(
        &self,
        py: Python<'_>,
        name: &str,
        partitions: Option<u32>,
        configs: Option<&Bound<'_, PyAny>>,
        retention_bytes: Option<u64>,
        retention_ms: Option<u64>,
        segment_bytes: Option<u64>,
        max_pending: Option<u32>,
        backpressure: Option<&str>,
    ) -> PyResult<()> {
        let req = create_request(
            name,
            partitions,
            configs,
            retention_bytes,
            retention_ms,
            segment_bytes,
            max_pending,
            backpressure,
        )?;
        run(py, create_topic(Arc::clone(&self.inner), req))
    }

    /// `create_topic` for asyncio.
    #[pyo3(signature = (name, partitions = None, *, configs = None, retention_bytes = None, retention_ms = None, segment_bytes = None, max_pending = None, backpressure = None))]
    #[allow(clippy::too_many_arguments)]
    fn create_topic_async<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        partitions: Option<u32>,
        configs: Option<&Bound<'_, PyAny>>,
        retention_bytes: Option<u64>,
        retention_ms: Option<u64>,
        segment_bytes: Option<u64>,
        max_pending: Option<u32>,
        backpressure: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let req = create_request(
            name,
            partitions,
            configs,
            retention_bytes,
            retention_ms,
            segment_bytes,
            max_pending,
            backpressure,
        )?;
        to_asyncio(py, create_topic(Arc::clone(&self.inner), req))
    }

    /// `{topic: {partition: (start_offset, end_offset)}}` for every topic, or those named.
    #[pyo3(signature = (topics = None))]
    fn describe(&self, py: Python<'_>, topics: Option<Vec<String>>) -> PyResult<Described> {
        run(
            py,
            describe(Arc::clone(&self.inner), topics.unwrap_or_default()),
        )
    }

    /// `describe` for asyncio.
    #[pyo3(signature = (topics = None))]
    fn describe_async<'py>(
        &self,
        py: Python<'py>,
        topics: Option<Vec<String>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        to_asyncio(
            py,
            describe(Arc::clone(&self.inner), topics.unwrap_or_default()),
        )
    }

    /// Topic names, sorted.
    fn topics(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        Ok(self.describe(py, None)?.into_keys().collect())
    }

    /// `{partition: records not yet committed by group}` for `topic`.
    fn lag(&self, py: Python<'_>, group: String, topic: String) -> PyResult<BTreeMap<u32, u64>> {
        run(py, lag(Arc::clone(&self.inner), group, topic))
    }

    /// `lag` for asyncio.
    fn lag_async<'py>(
        &self,
        py: Python<'py>,
        group: String,
        topic: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        to_asyncio(py, lag(Arc::clone(&self.inner), group, topic))
    }

    /// `{partition: committed offset (the next one the group reads), or None}`.
    fn committed(
        &self,
        py: Python<'_>,
        group: String,
        topic: String,
    ) -> PyResult<BTreeMap<u32, Option<u64>>> {
        let a = Arc::clone(&self.inner);
        let parts = run(py, async move {
            a.group_offsets(&group, std::slice::from_ref(&topic)).await
        })
        .map_err(client_error)?;
        let mut out = BTreeMap::new();
        for p in parts {
            if !p.error.is_ok() {
                return Err(code_error(p.error, format!("{}", p.error)));
            }
            out.insert(
                u32::try_from(p.partition).unwrap_or(0),
                u64::try_from(p.committed).ok(),
            );
        }
        Ok(out)
    }

    /// Every config of `topic` by Kafka's name: `{name: (value, source)}`,
    /// source "topic", "broker" or "default". Raises UnknownTopic.
    fn describe_configs(&self, py: Python<'_>, topic: String) -> PyResult<Configs> {
        run(py, describe_configs(Arc::clone(&self.inner), topic))
    }

    /// `describe_configs` for asyncio.
    fn describe_configs_async<'py>(
        &self,
        py: Python<'py>,
        topic: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        to_asyncio(py, describe_configs(Arc::clone(&self.inner), topic))
    }

    /// Sets `configs` (`{name: value}`, Kafka's names) and takes the configs
    /// named in `delete` back to their defaults, all or nothing and durably;
    /// the others stay as they are (Kafka's IncrementalAlterConfigs SET and
    /// DELETE). Returns every config after the change, as `describe_configs`.
    /// Raises UnknownTopic, InvalidConfig (naming the config and value).
    #[pyo3(signature = (topic, configs = None, *, delete = None))]
    fn alter_configs(
        &self,
        py: Python<'_>,
        topic: String,
        configs: Option<&Bound<'_, PyAny>>,
        delete: Option<Vec<String>>,
    ) -> PyResult<Configs> {
        let set = configs_arg(configs)?;
        let fut = alter_configs(
            Arc::clone(&self.inner),
            topic,
            set,
            delete.unwrap_or_default(),
        );
        run(py, fut)
    }

    /// `alter_configs` for asyncio.
    #[pyo3(signature = (topic, configs = None, *, delete = None))]
    fn alter_configs_async<'py>(
        &self,
        py: Python<'py>,
        topic: String,
        configs: Option<&Bound<'py, PyAny>>,
        delete: Option<Vec<String>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let set = configs_arg(configs)?;
        let fut = alter_configs(
            Arc::clone(&self.inner),
            topic,
            set,
            delete.unwrap_or_default(),
        );
        to_asyncio(py, fut)
    }

    /// Deletes the records of `topic`/`partition` below offset `before`
    /// (None: every record), as Kafka's DeleteRecords: the partition's log
    /// start moves there durably, and reads below it fail with
    /// OffsetOutOfRange. Returns the log start now (a `before` below it
    /// leaves it). Raises UnknownTopic, UnknownPartition, OffsetOutOfRange
    /// (past the log end).
    #[pyo3(signature = (topic, partition, before = None))]
    fn delete_records(
        &self,
        py: Python<'_>,
        topic: String,
        partition: u32,
        before: Option<u64>,
    ) -> PyResult<u64> {
        let p = partition_arg(partition)?;
        run(
            py,
            delete_records(Arc::clone(&self.inner), topic, p, before),
        )
    }

    /// `delete_records` for asyncio.
    #[pyo3(signature = (topic, partition, before = None))]
    fn delete_records_async<'py>(
        &self,
        py: Python<'py>,
        topic: String,
        partition: u32,
        before: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let p = partition_arg(partition)?;
        to_asyncio(
            py,
            delete_records(Arc::clone(&self.inner), topic, p, before),
        )
    }

    /// Grows `topic` to `partitions` in all (never fewer); with
    /// `validate_only` the broker only checks. Returns the count before.
    /// Groups reading the topic rebalance onto the new partitions. Raises
    /// UnknownTopic, InvalidRequest (not more than it has).
    #[pyo3(signature = (topic, partitions, *, validate_only = false))]
    fn create_partitions(
        &self,
        py: Python<'_>,
        topic: String,
        partitions: u32,
        validate_only: bool,
    ) -> PyResult<u32> {
        let n = count_arg(partitions)?;
        let fut = create_partitions(Arc::clone(&self.inner), topic, n, validate_only);
        run(py, fut)
    }

    /// `create_partitions` for asyncio.
    #[pyo3(signature = (topic, partitions, *, validate_only = false))]
    fn create_partitions_async<'py>(
        &self,
        py: Python<'py>,
        topic: String,
        partitions: u32,
        validate_only: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let n = count_arg(partitions)?;
        let fut = create_partitions(Arc::clone(&self.inner), topic, n, validate_only);
        to_asyncio(py, fut)
    }

    /// Deletes `group`'s committed offsets on `partitions` of `topic` (None:
    /// every partition), as Kafka's OffsetDelete. Returns the partitions
    /// done, sorted. Raises UnknownGroup, UnknownTopic, GroupNotEmpty (a
    /// member of the group reads the topic: its offsets stay),
    /// UnknownPartition (naming the partition; the others are done).
    #[pyo3(signature = (group, topic, partitions = None))]
    fn delete_group_offsets(
        &self,
        py: Python<'_>,
        group: String,
        topic: String,
        partitions: Option<Vec<u32>>,
    ) -> PyResult<Vec<u32>> {
        let parts = partitions_arg(partitions)?;
        let fut = delete_group_offsets(Arc::clone(&self.inner), group, topic, parts);
        run(py, fut)
    }

    /// `delete_group_offsets` for asyncio.
    #[pyo3(signature = (group, topic, partitions = None))]
    fn delete_group_offsets_async<'py>(
        &self,
        py: Python<'py>,
        group: String,
        topic: String,
        partitions: Option<Vec<u32>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let parts = partitions_arg(partitions)?;
        let fut = delete_group_offsets(Arc::clone(&self.inner), group, topic, parts);
        to_asyncio(py, fut)
    }

    /// Deletes a group with no members and every offset it committed, as
    /// Kafka's DeleteGroups. Returns how many (topic, partition) offsets
    /// went. Raises GroupNotEmpty, UnknownGroup.
    fn delete_group(&self, py: Python<'_>, group: String) -> PyResult<u32> {
        run(py, delete_group(Arc::clone(&self.inner), group))
    }

    /// `delete_group` for asyncio.
    fn delete_group_async<'py>(
        &self,
        py: Python<'py>,
        group: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        to_asyncio(py, delete_group(Arc::clone(&self.inner), group))
    }
}
