//! Blocking and asyncio plumbing between Python and the async-std side.
//!
//! - Blocking calls run the Rust future on the calling thread with the GIL
//!   released ([`wait`]); long waits are cut into slices so Ctrl-C
//!   (`KeyboardInterrupt`) is seen between them.
//! - Asyncio calls ([`to_asyncio`]) spawn the future on the runtime (`rt`) and
//!   return an `asyncio.Future` of the running loop; when the Rust future ends,
//!   its result is handed to the loop with `loop.call_soon_threadsafe`, which
//!   sets it on the loop's own thread. Cancelling the asyncio future aborts the
//!   Rust future (every SDK call is cancel-safe where it matters: an abandoned
//!   consumer fetch is fetched again). This needs no third-party bridge crate:
//!   the one for pyo3 (pyo3-async-runtimes) follows pyo3's versions with a delay
//!   and has dropped async-std, which is all Flume's runtime seam offers.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use crate::deps::rt;
use futures::future::{AbortHandle, Abortable};
use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

/// How long a blocking call waits before it looks for a pending signal.
const SLICE: Duration = Duration::from_millis(100);

/// Runs `fut` to completion with the GIL released.
pub fn run<F>(py: Python<'_>, fut: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    py.detach(|| rt::block_on(fut))
}

/// Runs `fut` with the GIL released for at most `timeout` (None: no limit),
/// checking for signals every 100 ms. `Ok(None)` when the time ran out (the
/// future is dropped then).
pub fn wait<F, T>(py: Python<'_>, fut: F, timeout: Option<Duration>) -> PyResult<Option<T>>
where
    F: Future<Output = PyResult<T>> + Send,
    T: Send,
{
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut fut: Pin<Box<F>> = Box::pin(fut);
    loop {
        let slice = match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()).min(SLICE),
            None => SLICE,
        };
        let fut_ref = &mut fut;
        let out = py.detach(move || rt::block_on(rt::timeout(slice, fut_ref.as_mut())));
        if let Some(r) = out {
            return r.map(Some);
        }
        py.check_signals()?;
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(None);
        }
    }
}

/// A timeout in seconds from Python (None: wait forever).
pub fn seconds(timeout: Option<f64>) -> PyResult<Option<Duration>> {
    match timeout {
        None => Ok(None),
        Some(t) if t.is_finite() && t >= 0.0 => Ok(Some(
            Duration::try_from_secs_f64(t.min(1e9)).unwrap_or(Duration::ZERO),
        )),
        Some(t) => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "timeout must be None or a non-negative number of seconds, not {t}"
        ))),
    }
}

/// Sets the result (or exception) on the asyncio future, on the loop's thread.
#[pyclass(frozen)]
struct Complete {
    fut: Py<PyAny>,
    ok: bool,
    value: Py<PyAny>,
}

#[pymethods]
impl Complete {
    fn __call__(&self, py: Python<'_>) -> PyResult<()> {
        let fut = self.fut.bind(py);
        if fut.call_method0("done")?.is_truthy()? {
            return Ok(()); // cancelled meanwhile
        }
        let method = if self.ok {
            "set_result"
        } else {
            "set_exception"
        };
        fut.call_method1(method, (self.value.clone_ref(py),))?;
        Ok(())
    }
}

/// Aborts the Rust future when the asyncio future is cancelled.
#[pyclass(frozen)]
struct AbortOnCancel(AbortHandle);

#[pymethods]
impl AbortOnCancel {
    fn __call__(&self, fut: &Bound<'_, PyAny>) -> PyResult<()> {
        if fut.call_method0("cancelled")?.is_truthy()? {
            self.0.abort();
        }
        Ok(())
    }
}

/// Returns an `asyncio.Future` of the running loop that completes with `fut`'s output.
pub fn to_asyncio<'py, F, T>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
    let py_fut = event_loop.call_method0("create_future")?;
    let (handle, registration) = AbortHandle::new_pair();
    py_fut.call_method1("add_done_callback", (AbortOnCancel(handle),))?;
    let loop_obj: Py<PyAny> = event_loop.unbind();
    let fut_obj: Py<PyAny> = py_fut.clone().unbind();
    let task = rt::spawn(async move {
        let Ok(result) = Abortable::new(fut, registration).await else {
            return; // cancelled from Python
        };
        // Not attached when the interpreter is shutting down: nobody waits then.
        Python::try_attach(move |py| {
            let (ok, value) = match result {
                Ok(v) => match v.into_bound_py_any(py) {
                    Ok(obj) => (true, obj.unbind()),
                    Err(e) => (false, e.into_value(py).into_any()),
                },
                Err(e) => (false, e.into_value(py).into_any()),
            };
            let complete = Complete {
                fut: fut_obj,
                ok,
                value,
            };
            // Fails only when the loop is closed: nobody waits then either.
            let _ = loop_obj
                .bind(py)
                .call_method1("call_soon_threadsafe", (complete,));
        });
    });
    drop(task); // detached: runs to completion on its own
    Ok(py_fut)
}
