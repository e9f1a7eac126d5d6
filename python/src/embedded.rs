//! `flume.EmbeddedBroker`: the engine in-process, no network.
//!
//! Built on `flume_broker::EmbeddedBroker` and its engine. Every call that
//! touches the disk or waits runs with the GIL released, so Python threads
//! produce and poll in parallel. Polling is the Rust broker's
//! (`EmbeddedBroker::poll_batch`): it reads on the calling thread (no
//! hand-off to another) and rotates over the consumer's partitions.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::deps::protocol::record;
use crate::deps::protocol::{ErrorCode, ProduceResult};
use crate::deps::rt;
use bytes::Bytes;
use flume_broker::{
    Backpressure, BrokerConfig, BrokerError, FsyncPolicy, ProduceBatch, Route, TopicConfig,
};
use futures::FutureExt;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::{broker_error, closed, code_error};
use crate::record::{for_each_keyed, opt_bytes, RawRecord, RecordMetadata};
use flume_broker::embedded::AckType;

/// Most bytes of records in one produce entry of `produce_many`.
const ENTRY_MAX_BYTES: usize = 1024 * 1024;
/// Most records `poll_many` returns at once.
const POLL_MANY_LIMIT: usize = 100_000;
/// How long one wait for data lasts before signals are checked.
const SLICE: Duration = Duration::from_millis(100);

/// An in-process broker on a data directory.
#[pyclass(module = "flume", frozen)]
pub struct EmbeddedBroker {
    inner: RwLock<Option<Arc<flume_broker::EmbeddedBroker>>>,
    path: PathBuf,
}

pub fn parse_fsync(fsync: &Bound<'_, PyAny>) -> PyResult<FsyncPolicy> {
    if let Ok(ms) = fsync.extract::<u64>() {
        return Ok(FsyncPolicy::Interval(Duration::from_millis(ms)));
    }
    match fsync.extract::<String>()?.as_str() {
        "never" => Ok(FsyncPolicy::Never),
        "always" => Ok(FsyncPolicy::Always),
        other => Err(PyValueError::new_err(format!(
            "fsync must be 'never', 'always' or a number of milliseconds, not {other:?}"
        ))),
    }
}

pub fn parse_backpressure(s: &str) -> PyResult<Backpressure> {
    s.parse::<Backpressure>().map_err(PyValueError::new_err)
}

fn not_found(topic: &str) -> PyErr {
    code_error(ErrorCode::UnknownTopic, format!("unknown topic {topic:?}"))
}

/// The (partition, offset) of every record of the entries, in order; the first error, if any.
fn metadata(results: &[ProduceResult], topic: &str) -> PyResult<Vec<RecordMetadata>> {
    let mut out = Vec::new();
    for r in results {
        if !r.error.is_ok() {
            return Err(code_error(
                r.error,
                format!(
                    "produce to {topic}: {} ({} records before this batch were stored)",
                    r.error,
                    out.len()
                ),
            ));
        }
        for (p, o) in r.record_offsets() {
            out.push(RecordMetadata {
                partition: u32::try_from(p).unwrap_or(0),
                offset: u64::try_from(o).unwrap_or(0),
            });
        }
    }
    Ok(out)
}

impl EmbeddedBroker {
    /// One acknowledgement of a record acquired through `share_poll`.
    fn acknowledge(
        &self,
        py: Python<'_>,
        (topic, group, consumer): (&str, &str, &str),
        partition: u32,
        offset: u64,
        ack: AckType,
    ) -> PyResult<()> {
        let b = self.get()?;
        py.detach(|| {
            rt::block_on(b.share_acknowledge(topic, group, consumer, partition, offset, ack))
        })
        .map_err(broker_error)
    }

    fn get(&self) -> PyResult<Arc<flume_broker::EmbeddedBroker>> {
        self.inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .ok_or_else(|| closed("EmbeddedBroker"))
    }

    /// Takes the engine out at close: later calls raise Closed.
    fn take(&self) -> Option<Arc<flume_broker::EmbeddedBroker>> {
        self.inner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    /// Up to `max` uncommitted records of the consumer's partitions, rotating
    /// over them ([`flume_broker::EmbeddedBroker::poll_batch`]). `Err` for a
    /// consumer that has not joined.
    fn poll_now(
        &self,
        b: &flume_broker::EmbeddedBroker,
        topic: &str,
        group: &str,
        consumer: &str,
        max: usize,
    ) -> Result<Vec<RawRecord>, BrokerError> {
        Ok(b.poll_batch(topic, group, consumer, max)?
            .into_iter()
            .map(|(partition, record)| RawRecord {
                topic: topic.to_owned(),
                partition,
                record,
            })
            .collect())
    }

    /// Polls, waiting up to `timeout` (None: forever) for a record to arrive.
    fn poll_wait(
        &self,
        py: Python<'_>,
        topic: &str,
        group: &str,
        consumer: &str,
        max: usize,
        timeout: Option<f64>,
    ) -> PyResult<Vec<RawRecord>> {
        let b = self.get()?;
        let deadline = crate::bridge::seconds(timeout)?.map(|t| Instant::now() + t);
        loop {
            let (got, listeners) = py.detach(|| {
                let got = self.poll_now(&b, topic, group, consumer, max);
                if !matches!(&got, Ok(g) if g.is_empty()) {
                    return (got, Vec::new());
                }
                // Listen, then look again, so an append in between is not missed.
                let listeners = b.listen(topic, group, consumer);
                (self.poll_now(&b, topic, group, consumer, max), listeners)
            });
            let got = got.map_err(broker_error)?;
            if !got.is_empty() {
                return Ok(got);
            }
            let now = Instant::now();
            let slice = match deadline {
                Some(d) if now >= d => return Ok(got),
                Some(d) => (d - now).min(SLICE),
                None => SLICE,
            };
            py.detach(|| {
                rt::block_on(async {
                    if listeners.is_empty() {
                        rt::sleep(slice).await;
                    } else {
                        let any = futures::future::select_all(listeners.into_iter().map(Box::pin));
                        let _ = rt::timeout(slice, any).await;
                    }
                })
            });
            py.check_signals()?;
        }
    }
}

/// Appends `entries` (encoded records) to `topic` in order and returns the
/// metadata of every record. Admits every batch first (in order), then waits
/// for all: the writer appends one while the next is being queued.
fn append(
    py: Python<'_>,
    b: &flume_broker::EmbeddedBroker,
    topic: &str,
    route: Route,
    entries: Vec<Vec<u8>>,
) -> PyResult<Vec<RecordMetadata>> {
    let engine = Arc::clone(b.engine());
    let topic_owned = topic.to_owned();
    let results = crate::bridge::run(py, async move {
        let mut pending = Vec::with_capacity(entries.len());
        for e in entries {
            let batch = ProduceBatch {
                topic: topic_owned.clone(),
                route,
                records: Bytes::from(e),
            };
            pending.push(engine.records().admit_produce(batch).await);
        }
        let mut results = Vec::with_capacity(pending.len());
        for p in pending {
            results.push(ProduceResult::from(p.finish().await));
        }
        results
    });
    metadata(&results, topic)
}

#[pymethods]
impl EmbeddedBroker {
    /// Opens (or creates) a broker on the directory `path`.
    ///
    /// `fsync`: "never" (default: an acknowledged record survives a process
    /// crash, not a power loss), "always", or a number of milliseconds.
    /// `auto_create_topics`: produce or join on an unknown topic creates it
    /// with `default_partitions` partitions; off, they raise UnknownTopic.
    #[new]
    #[pyo3(signature = (path, *, fsync = None, auto_create_topics = true, default_partitions = 1, max_record_bytes = None))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        fsync: Option<&Bound<'_, PyAny>>,
        auto_create_topics: bool,
        default_partitions: u32,
        max_record_bytes: Option<usize>,
    ) -> PyResult<Self> {
        let mut config = BrokerConfig::new(path.clone());
        if let Some(f) = fsync {
            config.fsync = parse_fsync(f)?;
        }
        config.auto_create_topics = auto_create_topics;
        config.default_topic.partitions = default_partitions;
        if let Some(m) = max_record_bytes {
            config.max_record_bytes = m;
            config.max_frame_bytes = config.max_frame_bytes.max(m.saturating_add(64 * 1024));
            config.max_request_memory = config.max_request_memory.max(config.max_frame_bytes);
        }
        let b = py
            .detach(|| flume_broker::EmbeddedBroker::with_config(config))
            .map_err(broker_error)?;
        Ok(EmbeddedBroker {
            inner: RwLock::new(Some(Arc::new(b))),
            path,
        })
    }

    /// The data directory.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// True once `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.get().is_err()
    }

    /// Creates a topic. Returns True if it was created, False if it existed
    /// and `exist_ok` is true (its stored settings are kept).
    #[pyo3(signature = (name, partitions = 1, *, max_pending = 1024, retention_bytes = None, retention_ms = None, segment_bytes = 64 * 1024 * 1024, backpressure = "block", exist_ok = false))]
    #[allow(clippy::too_many_arguments)]
    fn create_topic(
        &self,
        py: Python<'_>,
        name: &str,
        partitions: u32,
        max_pending: usize,
        retention_bytes: Option<u64>,
        retention_ms: Option<u64>,
        segment_bytes: u64,
        backpressure: &str,
        exist_ok: bool,
    ) -> PyResult<bool> {
        let b = self.get()?;
        let config = TopicConfig {
            partitions,
            max_pending,
            retention_bytes,
            retention_ms,
            segment_bytes,
            backpressure: parse_backpressure(backpressure)?,
            ..TopicConfig::default()
        };
        match py.detach(|| b.engine().records().create_topic(name, config)) {
            Ok(_) => Ok(true),
            Err(e) if exist_ok && e.code() == ErrorCode::TopicAlreadyExists => Ok(false),
            Err(e) => Err(broker_error(e)),
        }
    }

    /// Topic names, sorted.
    fn topics(&self) -> PyResult<Vec<String>> {
        Ok(self
            .get()?
            .engine()
            .records()
            .topics()
            .iter()
            .map(|t| t.name.clone())
            .collect())
    }

    /// A topic's settings as a dict (partitions, max_pending, retention_bytes,
    /// retention_ms, segment_bytes, backpressure).
    fn topic_config<'py>(
        &self,
        py: Python<'py>,
        topic: &str,
    ) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let t = self
            .get()?
            .engine()
            .records()
            .topic(topic)
            .ok_or_else(|| not_found(topic))?;
        let c = &t.config;
        let d = pyo3::types::PyDict::new(py);
        d.set_item("partitions", c.partitions)?;
        d.set_item("max_pending", c.max_pending)?;
        d.set_item("retention_bytes", c.retention_bytes)?;
        d.set_item("retention_ms", c.retention_ms)?;
        d.set_item("segment_bytes", c.segment_bytes)?;
        d.set_item("backpressure", c.backpressure.to_string())?;
        Ok(d)
    }

    /// `{partition: (start_offset, end_offset)}`: the oldest stored offset and the next one to be written.
    fn offsets(&self, topic: &str) -> PyResult<BTreeMap<u32, (u64, u64)>> {
        let t = self
            .get()?
            .engine()
            .records()
            .topic(topic)
            .ok_or_else(|| not_found(topic))?;
        Ok(t.offsets()
            .into_iter()
            .map(|o| {
                let at = |v: i64| u64::try_from(v).unwrap_or(0);
                (
                    u32::try_from(o.partition).unwrap_or(0),
                    (at(o.log_start), at(o.log_end)),
                )
            })
            .collect())
    }

    /// Appends one record and returns where it landed once it is in the log.
    /// A key routes the record (FNV-1a of the key modulo the partition count);
    /// no key spreads records round robin. `headers`: a dict or (name, value)
    /// pairs. `timestamp`: milliseconds since the epoch (default now).
    ///
    /// Raises QueueFull (reject mode), RecordTooLarge, UnknownTopic (auto-create off).
    #[pyo3(signature = (topic, value, key = None, *, headers = None, partition = None, timestamp = None))]
    #[allow(clippy::too_many_arguments)]
    fn produce(
        &self,
        py: Python<'_>,
        topic: &str,
        value: &Bound<'_, PyAny>,
        key: Option<&Bound<'_, PyAny>>,
        headers: Option<&Bound<'_, PyAny>>,
        partition: Option<u32>,
        timestamp: Option<i64>,
    ) -> PyResult<RecordMetadata> {
        let b = self.get()?;
        let value = opt_bytes(Some(value), "value")?;
        let key = opt_bytes(key, "key")?;
        let headers = crate::record::headers(headers)?;
        let mut buf = Vec::with_capacity(record::encoded_len_nullable(
            key.as_deref(),
            value.as_deref(),
            &headers,
        ));
        record::encode_nullable(
            &mut buf,
            0,
            timestamp.unwrap_or_else(flume_broker::now_ms),
            key.as_deref(),
            value.as_deref(),
            &headers,
        );
        append(py, &b, topic, Route::to(partition), vec![buf])?
            .into_iter()
            .next()
            .ok_or_else(|| code_error(ErrorCode::Unknown, format!("produce to {topic}: no offset")))
    }

    /// Appends many records in few batches (much faster than a loop of
    /// `produce`) and returns their metadata in order. `keys`: None, or one
    /// key (or None) per value. Records without a key go to one partition per
    /// batch of up to 1 MiB. If a batch fails, the exception says how many
    /// records before it were stored.
    #[pyo3(signature = (topic, values, *, keys = None, partition = None))]
    fn produce_many(
        &self,
        py: Python<'_>,
        topic: &str,
        values: &Bound<'_, PyAny>,
        keys: Option<&Bound<'_, PyAny>>,
        partition: Option<u32>,
    ) -> PyResult<Vec<RecordMetadata>> {
        let b = self.get()?;
        let now = flume_broker::now_ms();
        let part = Route::to(partition);
        let mut entries = Vec::new();
        let mut buf: Vec<u8> = Vec::new();
        for_each_keyed(values, keys, |value, key| {
            let v = opt_bytes(Some(&value), "value")?;
            let key = opt_bytes(key.as_ref(), "key")?;
            let len = record::encoded_len_nullable(key.as_deref(), v.as_deref(), &[]);
            if !buf.is_empty() && buf.len() + len > ENTRY_MAX_BYTES {
                entries.push(std::mem::take(&mut buf));
            }
            record::encode_nullable(&mut buf, 0, now, key.as_deref(), v.as_deref(), &[]);
            Ok(())
        })?;
        if !buf.is_empty() {
            entries.push(buf);
        }
        append(py, &b, topic, part, entries)
    }

    /// Adds `consumer` to the (topic, group); the topic's partitions are split
    /// among the group's consumers (range assignor over their sorted names).
    fn join_group(&self, py: Python<'_>, topic: &str, group: &str, consumer: &str) -> PyResult<()> {
        let b = self.get()?;
        py.detach(|| b.join_group(topic, group, consumer))
            .map_err(broker_error)
    }

    /// Removes `consumer` from the (topic, group).
    fn leave_group(&self, topic: &str, group: &str, consumer: &str) -> PyResult<()> {
        self.get()?.leave_group(topic, group, consumer);
        Ok(())
    }

    /// The partitions `consumer` owns in the (topic, group).
    fn assignment(&self, topic: &str, group: &str, consumer: &str) -> PyResult<Vec<u32>> {
        Ok(self.get()?.assignment(topic, group, consumer))
    }

    /// The next uncommitted record of one of the consumer's partitions
    /// (rotating over them), or None. Records not committed are handed out
    /// again (at-least-once). `timeout`: seconds to wait for one to arrive
    /// (0, the default: do not wait; None: wait until one arrives).
    ///
    /// Raises UnknownMember if the consumer has not joined.
    #[pyo3(signature = (topic, group, consumer, timeout = Some(0.0)))]
    fn poll(
        &self,
        py: Python<'_>,
        topic: &str,
        group: &str,
        consumer: &str,
        timeout: Option<f64>,
    ) -> PyResult<Option<RawRecord>> {
        let got = self.poll_wait(py, topic, group, consumer, 1, timeout)?;
        Ok(got.into_iter().next())
    }

    /// Up to `max_records` uncommitted records, from each of the consumer's
    /// partitions in turn, in offset order per partition. Like `poll`, it
    /// does not move anything: commit the last offset processed per partition.
    #[pyo3(signature = (topic, group, consumer, max_records = 500, timeout = Some(0.0)))]
    fn poll_many(
        &self,
        py: Python<'_>,
        topic: &str,
        group: &str,
        consumer: &str,
        max_records: usize,
        timeout: Option<f64>,
    ) -> PyResult<Vec<RawRecord>> {
        let max = max_records.clamp(1, POLL_MANY_LIMIT);
        self.poll_wait(py, topic, group, consumer, max, timeout)
    }

    /// Queues (share groups): up to `max_records` records of `topic` acquired
    /// for `consumer` of share group `group` (joined on the first call), as
    /// `(record, delivery_count)` pairs; each is the consumer's for the
    /// group's lock duration: `ack`, `release` or `reject` it, or it goes
    /// back to the others. `timeout`: seconds to wait for one (0, the
    /// default: do not wait; None: until one comes).
    #[pyo3(signature = (topic, group, consumer, max_records = 500, timeout = Some(0.0)))]
    fn share_poll(
        &self,
        py: Python<'_>,
        topic: &str,
        group: &str,
        consumer: &str,
        max_records: usize,
        timeout: Option<f64>,
    ) -> PyResult<Vec<(RawRecord, u16)>> {
        let b = self.get()?;
        let max = max_records.clamp(1, POLL_MANY_LIMIT);
        let deadline = crate::bridge::seconds(timeout)?.map(|t| Instant::now() + t);
        loop {
            let slice = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()).min(SLICE),
                None => SLICE,
            };
            let got = py
                .detach(|| rt::block_on(b.share_poll(topic, group, consumer, max, slice)))
                .map_err(broker_error)?;
            if !got.is_empty() || deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(got
                    .into_iter()
                    .map(|r| {
                        (
                            RawRecord {
                                topic: topic.to_owned(),
                                partition: r.partition,
                                record: r.record,
                            },
                            r.delivery_count,
                        )
                    })
                    .collect());
            }
            py.check_signals()?;
        }
    }

    /// Accepts a record `consumer` acquired through `share_poll`: done,
    /// never delivered again. Raises InvalidRequest if it does not hold it
    /// (its lock ran out, or it was acknowledged already).
    fn ack(
        &self,
        py: Python<'_>,
        topic: &str,
        group: &str,
        consumer: &str,
        partition: u32,
        offset: u64,
    ) -> PyResult<()> {
        self.acknowledge(
            py,
            (topic, group, consumer),
            partition,
            offset,
            AckType::Accept,
        )
    }

    /// Releases a record `consumer` acquired: delivered again (to any
    /// consumer), until the group's delivery limit archives it.
    fn release(
        &self,
        py: Python<'_>,
        topic: &str,
        group: &str,
        consumer: &str,
        partition: u32,
        offset: u64,
    ) -> PyResult<()> {
        self.acknowledge(
            py,
            (topic, group, consumer),
            partition,
            offset,
            AckType::Release,
        )
    }

    /// Rejects a record `consumer` acquired: archived, never delivered again.
    fn reject(
        &self,
        py: Python<'_>,
        topic: &str,
        group: &str,
        consumer: &str,
        partition: u32,
        offset: u64,
    ) -> PyResult<()> {
        self.acknowledge(
            py,
            (topic, group, consumer),
            partition,
            offset,
            AckType::Reject,
        )
    }

    /// Takes `consumer` out of share group `group`: what it holds goes back
    /// to the others at once.
    fn share_leave(&self, py: Python<'_>, group: &str, consumer: &str) -> PyResult<()> {
        let b = self.get()?;
        py.detach(|| rt::block_on(b.share_leave(group, consumer)))
            .map_err(broker_error)
    }

    /// Marks the record at `offset` of `partition` as processed (stores
    /// `offset + 1`, the next one the group reads).
    fn commit(
        &self,
        py: Python<'_>,
        topic: &str,
        group: &str,
        partition: u32,
        offset: u64,
    ) -> PyResult<()> {
        let b = self.get()?;
        py.detach(|| b.commit(topic, group, partition, offset))
            .map_err(broker_error)
    }

    /// The group's committed position in a partition (the next offset it
    /// reads), or None if it never committed there.
    fn committed(&self, group: &str, topic: &str, partition: u32) -> PyResult<Option<u64>> {
        Ok(self
            .get()?
            .engine()
            .groups()
            .committed(group, topic, i32::try_from(partition).unwrap_or(i32::MAX))
            .and_then(|c| u64::try_from(c).ok()))
    }

    /// `{partition: records not yet committed by the group}`.
    fn lag(&self, topic: &str, group: &str) -> PyResult<BTreeMap<u32, u64>> {
        self.get()?.lag(topic, group).map_err(broker_error)
    }

    /// Drains every queue to disk, fsyncs and releases the directory.
    /// Further calls raise Closed. Idempotent.
    fn close(&self, py: Python<'_>) {
        if let Some(b) = self.take() {
            py.detach(|| rt::block_on(b.close()));
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self) -> String {
        format!(
            "EmbeddedBroker({:?}{})",
            self.path.display().to_string(),
            if self.closed() { ", closed" } else { "" }
        )
    }
}

impl Drop for EmbeddedBroker {
    fn drop(&mut self) {
        if let Some(b) = self.take() {
            // Flush and release the directory now, not whenever the engine's
            // background tasks let go of it.
            rt::block_on(b.close().fuse());
        }
    }
}
