//! Where a consumer starts and how it fetches: the settings both
//! consumers and both transports share.

use std::time::Duration;

/// Where to start reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartOffset {
    /// The oldest stored record.
    Earliest,
    /// Only records produced from now on.
    Latest,
    /// This offset.
    At(u64),
}

impl StartOffset {
    /// The offset itself for [`StartOffset::At`]; the others are resolved
    /// at the broker on the first fetch.
    pub(crate) fn offset(self) -> Option<u64> {
        match self {
            StartOffset::At(o) => Some(o),
            _ => None,
        }
    }
}

impl std::str::FromStr for StartOffset {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "earliest" => Ok(StartOffset::Earliest),
            "latest" => Ok(StartOffset::Latest),
            n => n
                .parse::<u64>()
                .map(StartOffset::At)
                .map_err(|_| format!("offset must be earliest, latest or a number, not {n:?}")),
        }
    }
}

/// Fetch settings shared by the consumers: start from [`FetchConfig::default`]
/// and change fields with the builder methods.
///
/// ```
/// use std::time::Duration;
/// let f = flume_client::FetchConfig::default().max_wait(Duration::from_millis(100));
/// assert_eq!(f.max_wait, Duration::from_millis(100));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FetchConfig {
    /// Longest a fetch waits on the broker for new records.
    pub max_wait: Duration,
    /// Most record bytes per partition per fetch.
    pub partition_max_bytes: i32,
    /// Most record bytes per fetch.
    pub max_bytes: i32,
}

impl Default for FetchConfig {
    fn default() -> Self {
        FetchConfig {
            max_wait: Duration::from_millis(500),
            partition_max_bytes: 1024 * 1024,
            max_bytes: 8 * 1024 * 1024,
        }
    }
}

impl FetchConfig {
    /// Sets [`FetchConfig::max_wait`].
    #[must_use]
    pub fn max_wait(mut self, v: Duration) -> Self {
        self.max_wait = v;
        self
    }
    /// Sets [`FetchConfig::partition_max_bytes`].
    #[must_use]
    pub fn partition_max_bytes(mut self, v: i32) -> Self {
        self.partition_max_bytes = v;
        self
    }
    /// Sets [`FetchConfig::max_bytes`].
    #[must_use]
    pub fn max_bytes(mut self, v: i32) -> Self {
        self.max_bytes = v;
        self
    }
}
