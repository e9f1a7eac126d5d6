//! `flume.Record` and `flume.RecordMetadata`, and conversions of Python values to bytes.

use std::borrow::Cow;

use bytes::Bytes;
use flume_client::Header;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

/// One record as read: where it is, when it was produced, and its contents.
#[pyclass(frozen, get_all, module = "flume")]
pub struct Record {
    /// Topic name.
    pub topic: String,
    /// Partition number.
    pub partition: u32,
    /// Offset in the partition.
    pub offset: u64,
    /// Milliseconds since the Unix epoch, as set by the producer.
    pub timestamp: i64,
    /// The key, or None.
    pub key: Option<Py<PyBytes>>,
    /// The value, or None for a tombstone (a null value, distinct from b"").
    pub value: Option<Py<PyBytes>>,
    /// Headers as (name, value) pairs, in order; a null header value is None.
    pub headers: Vec<(String, Option<Py<PyBytes>>)>,
}

/// A record from Rust, converted to Python with the GIL held.
pub struct RawRecord {
    pub topic: String,
    pub partition: u32,
    pub record: flume_client::Record,
}

impl<'py> IntoPyObject<'py> for RawRecord {
    type Target = Record;
    type Output = Bound<'py, Record>;
    type Error = PyErr;
    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, Record>> {
        Bound::new(py, Record::from_raw(py, self))
    }
}

impl Record {
    pub fn from_raw(py: Python<'_>, raw: RawRecord) -> Record {
        let r = raw.record;
        Record {
            topic: raw.topic,
            partition: raw.partition,
            offset: r.offset,
            timestamp: r.timestamp,
            key: r.key.map(|k| PyBytes::new(py, &k).unbind()),
            value: r.value.map(|v| PyBytes::new(py, &v).unbind()),
            headers: r
                .headers
                .into_iter()
                .map(|h| (h.key, h.value.map(|v| PyBytes::new(py, &v).unbind())))
                .collect(),
        }
    }
}

#[pymethods]
impl Record {
    fn __repr__(&self, py: Python<'_>) -> String {
        let Some(value) = self.value.as_ref().map(|v| v.bind(py).as_bytes()) else {
            return format!(
                "Record(topic={:?}, partition={}, offset={}, timestamp={}, value=None)",
                self.topic, self.partition, self.offset, self.timestamp
            );
        };
        let shown = if value.len() > 40 {
            format!("{:?}...", String::from_utf8_lossy(&value[..40]))
        } else {
            format!("{:?}", String::from_utf8_lossy(value))
        };
        format!(
            "Record(topic={:?}, partition={}, offset={}, timestamp={}, value={shown})",
            self.topic, self.partition, self.offset, self.timestamp
        )
    }
}

/// Where an acknowledged record landed.
#[pyclass(frozen, get_all, module = "flume", eq, hash)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecordMetadata {
    /// Partition number.
    pub partition: u32,
    /// Offset in the partition.
    pub offset: u64,
}

#[pymethods]
impl RecordMetadata {
    fn __repr__(&self) -> String {
        format!(
            "RecordMetadata(partition={}, offset={})",
            self.partition, self.offset
        )
    }
    fn __iter__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let t = (self.partition, self.offset).into_pyobject(py)?;
        Ok(t.try_iter()?.into_any().unbind())
    }
}

/// The bytes of a `bytes`, `bytearray` or `str` (UTF-8) argument.
pub fn as_bytes<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<Cow<'a, [u8]>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Cow::Borrowed(b.as_bytes()));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(match s.to_cow()? {
            Cow::Borrowed(s) => Cow::Borrowed(s.as_bytes()),
            Cow::Owned(s) => Cow::Owned(s.into_bytes()),
        });
    }
    if let Ok(v) = obj.extract::<Vec<u8>>() {
        if !obj.is_instance_of::<pyo3::types::PyList>() {
            return Ok(Cow::Owned(v));
        }
    }
    Err(PyTypeError::new_err(format!(
        "{what} must be bytes, bytearray or str, not {}",
        obj.get_type().name()?
    )))
}

/// An optional key.
pub fn opt_bytes(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<Bytes>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => Ok(Some(Bytes::from(as_bytes(o, what)?.into_owned()))),
    }
}

/// Calls `f` with each of `values` and its key: None without `keys`, else the
/// next of `keys` (None or one key per value; running out first is a ValueError).
pub fn for_each_keyed<'py>(
    values: &Bound<'py, PyAny>,
    keys: Option<&Bound<'py, PyAny>>,
    mut f: impl FnMut(Bound<'py, PyAny>, Option<Bound<'py, PyAny>>) -> PyResult<()>,
) -> PyResult<()> {
    let mut keys_iter = match keys {
        Some(k) if !k.is_none() => Some(k.try_iter()?),
        _ => None,
    };
    for value in values.try_iter()? {
        let value = value?;
        let key = match keys_iter.as_mut() {
            Some(it) => match it.next() {
                Some(k) => Some(k?),
                None => return Err(PyValueError::new_err("keys is shorter than values")),
            },
            None => None,
        };
        f(value, key)?;
    }
    Ok(())
}

/// Headers from a list of (name, value) pairs or a dict.
pub fn headers(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<Header>> {
    let Some(obj) = obj else {
        return Ok(Vec::new());
    };
    if obj.is_none() {
        return Ok(Vec::new());
    }
    let items = if let Ok(d) = obj.cast::<pyo3::types::PyDict>() {
        d.items().into_any()
    } else {
        obj.clone()
    };
    let mut out = Vec::new();
    for item in items.try_iter()? {
        let item = item?;
        let (k, v): (String, Bound<'_, PyAny>) = item.extract().map_err(|_| {
            PyTypeError::new_err("headers must be a dict or a list of (str, bytes) pairs")
        })?;
        out.push(Header {
            key: k,
            value: opt_bytes(Some(&v), "a header value")?,
        });
    }
    Ok(out)
}
