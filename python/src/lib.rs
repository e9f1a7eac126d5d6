//! The `flume._flume` extension module: the embedded engine, the network SDK
//! and an in-process TCP broker, with the GIL released during I/O and waits.
//! The Python package `flume` re-exports it with docs and stubs; `nanokafka`
//! builds on `EmbeddedBroker`.

use pyo3::prelude::*;

mod bridge;
mod deps;
mod embedded;
mod errors;
mod net;
mod record;

#[pymodule]
fn _flume(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<record::Record>()?;
    m.add_class::<record::RecordMetadata>()?;
    m.add_class::<embedded::EmbeddedBroker>()?;
    m.add_class::<net::Broker>()?;
    m.add_class::<net::Producer>()?;
    m.add_class::<net::GroupConsumer>()?;
    m.add_class::<net::PartitionConsumer>()?;
    m.add_class::<net::Admin>()?;
    Ok(())
}
