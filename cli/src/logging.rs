//! Logs on stderr: human-readable, or one JSON object per line
//! (`--log-format json`: `timestamp`, `level`, `fields` with the `message`,
//! `target`, and the current `span`), filtered by `--log-level` (or
//! `RUST_LOG`), which a SIGHUP can change.

use std::sync::OnceLock;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

static FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

/// The filter of `level`, else `RUST_LOG`, else `default`.
fn filter(level: Option<&str>, default: &str) -> EnvFilter {
    match level {
        Some(l) => EnvFilter::builder()
            .parse(l)
            .unwrap_or_else(|_| EnvFilter::new(default)),
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default)),
    }
}

/// Installs the subscriber: `json` or human lines, at `level` (a filter the
/// flag parser already checked), else `RUST_LOG`, else `default`.
pub fn init(json: bool, level: Option<&str>, default: &str) {
    let (filter, handle) = reload::Layer::new(filter(level, default));
    let _ = FILTER.set(handle);
    let human = (!json).then(|| {
        tracing_subscriber::fmt::layer()
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
    });
    let json = json.then(|| {
        tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(std::io::stderr)
    });
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(human)
        .with(json)
        .try_init();
}

/// Changes the filter of a running process (SIGHUP).
///
/// # Errors
/// When the subscriber is not ours or is gone.
pub fn set_level(level: Option<&str>) -> Result<(), String> {
    let handle = FILTER.get().ok_or("logging is not initialised")?;
    handle
        .reload(filter(level, "info"))
        .map_err(|e| e.to_string())
}
