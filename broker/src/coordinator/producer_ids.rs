//! Producer ids for idempotent producers: issued once, never twice.
//!
//! The ids are reserved in blocks of [`ID_BLOCK`]; the end of the reserved
//! block is written durably to `producer-ids` in the data directory (written
//! to a temporary file, fsynced, renamed, directory fsynced) before any id of
//! the block is given out, so an id is never issued twice, whatever the
//! broker's exit. An id at or above the next one to issue was never issued
//! (made up, or from another broker): its batches get UNKNOWN_PRODUCER_ID.
//! The per-partition sequence state lives with each partition
//! (`crate::partition::producers`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Producer ids reserved (and persisted) at a time.
pub const ID_BLOCK: i64 = 1000;

/// File in the data directory holding the end of the last reserved id block.
pub const IDS_FILE: &str = "producer-ids";

/// Why producer ids could not be issued or loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProducerIdError {
    /// The file could not be read or written.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file does not hold a valid high-water mark.
    #[error("{path}: {why}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// Every id up to `i64::MAX` is used.
    #[error("producer ids exhausted")]
    Exhausted,
}

#[derive(Debug)]
struct IdState {
    next: i64,
    reserved_end: i64,
}

/// Issues producer ids that never repeat across restarts.
#[derive(Debug)]
pub struct ProducerIds {
    path: PathBuf,
    state: Mutex<IdState>,
}

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ProducerIdError {
    let path = path.to_owned();
    move |source| ProducerIdError::Io { what, path, source }
}

impl ProducerIds {
    /// Loads the high-water mark from `dir` (none yet: ids start at 0). No
    /// block is reserved until the first id is asked for.
    ///
    /// # Errors
    /// An unreadable or corrupt file.
    pub fn open(dir: &Path) -> Result<Self, ProducerIdError> {
        let path = dir.join(IDS_FILE);
        let first = match std::fs::read_to_string(&path) {
            Ok(text) => parse_mark(&text).map_err(|why| ProducerIdError::Corrupt {
                path: path.clone(),
                why,
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(io_err("read", &path)(e)),
        };
        Ok(ProducerIds {
            path,
            state: Mutex::new(IdState {
                next: first,
                reserved_end: first,
            }),
        })
    }

    /// Issues a new id, reserving (and persisting) a new block when the
    /// current one is used up. Blocking file work: call off the executor.
    ///
    /// # Errors
    /// The block could not be persisted (no id is issued), or ids are exhausted.
    pub fn issue(&self) -> Result<i64, ProducerIdError> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.next >= s.reserved_end {
            let end = s
                .reserved_end
                .checked_add(ID_BLOCK)
                .ok_or(ProducerIdError::Exhausted)?;
            persist_mark(&self.path, end)?;
            s.reserved_end = end;
        }
        let id = s.next;
        s.next += 1;
        Ok(id)
    }

    /// True for an id that may have been issued (by this broker since it
    /// started, or before a restart): from 0 to below the next one to issue.
    pub fn issued(&self, id: i64) -> bool {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        (0..s.next).contains(&id)
    }
}

/// The file's text: `flume-producer-ids v1 <mark> <mark again>`, the mark
/// written twice so a damaged file is noticed rather than misread.
fn parse_mark(text: &str) -> Result<i64, String> {
    let parts: Vec<&str> = text.split_whitespace().collect();
    match parts.as_slice() {
        ["flume-producer-ids", "v1", a, b] if a == b => a
            .parse::<i64>()
            .ok()
            .filter(|v| *v >= 0)
            .ok_or_else(|| format!("high-water mark {a:?} is not a non-negative integer")),
        _ => Err(format!(
            "expected \"flume-producer-ids v1 N N\", found {:?}",
            text.chars().take(80).collect::<String>()
        )),
    }
}

fn persist_mark(path: &Path, mark: i64) -> Result<(), ProducerIdError> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(io_err("create", &tmp))?;
    f.write_all(format!("flume-producer-ids v1 {mark} {mark}\n").as_bytes())
        .map_err(io_err("write", &tmp))?;
    f.sync_all().map_err(io_err("fsync", &tmp))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io_err("rename", path))?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err("fsync directory of", path))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_across_reopen_and_only_issued_ones_are_known() {
        let dir = tempfile::tempdir().unwrap();
        let ids = ProducerIds::open(dir.path()).unwrap();
        assert!(!ids.issued(0));
        let a = ids.issue().unwrap();
        let b = ids.issue().unwrap();
        assert_eq!((a, b), (0, 1));
        assert!(ids.issued(a) && ids.issued(b) && !ids.issued(2) && !ids.issued(-1));
        drop(ids);
        let ids = ProducerIds::open(dir.path()).unwrap();
        let c = ids.issue().unwrap();
        assert_eq!(c, ID_BLOCK, "the next block after the persisted mark");
        assert!(ids.issued(a), "ids from before the restart are known");
        assert!(
            ids.issued(ID_BLOCK - 1),
            "the rest of the old block may have been issued"
        );
        assert!(!ids.issued(c + 1), "not issued yet");
        std::fs::write(dir.path().join(IDS_FILE), "flume-producer-ids v1 5 6").unwrap();
        assert!(matches!(
            ProducerIds::open(dir.path()),
            Err(ProducerIdError::Corrupt { .. })
        ));
    }
}
