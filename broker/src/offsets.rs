//! Committed offsets, in `<data>/__consumer_offsets/offsets.log`.
//!
//! The file is a segment header followed by records in the log's format (so
//! each carries a CRC): key = group name, value = `[topic string][partition
//! i32][offset i64]`. A commit appends one record per partition with a single
//! write; on open the file is replayed, and a torn or corrupt tail is cut off,
//! so every partition's committed offset is the old value or the new one,
//! never torn. When the file grows well past its live content it is compacted
//! by writing `offsets.log.tmp`, fsyncing it and renaming it over the old
//! file; a stray temp file from an interrupted compaction is removed on open.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::BufMut;
use flume_client::protocol::record::{self, RecordIter};
use flume_client::protocol::wire::{Reader, WriteExt};

use crate::error::BrokerError;
use crate::storage::segment::{FILE_HEADER_LEN, LOG_MAGIC};

/// (group, topic, partition).
pub type OffsetKey = (String, String, i32);

/// The offset store.
#[derive(Debug)]
pub struct OffsetStore {
    path: PathBuf,
    file: File,
    size: u64,
    map: HashMap<OffsetKey, i64>,
    fsync: bool,
    compact_min_bytes: u64,
    /// Most (group, topic, partition) entries kept: commits that would add more are refused.
    max_keys: usize,
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> BrokerError {
    move |source| BrokerError::Io { what, source }
}

impl OffsetStore {
    /// Opens (or creates) the store in `dir`; `fsync` makes every commit durable before it returns.
    ///
    /// # Errors
    /// I/O errors, or a file that is not an offsets file.
    pub fn open(dir: &Path, fsync: bool) -> Result<Self, BrokerError> {
        std::fs::create_dir_all(dir).map_err(io(format!("create {}", dir.display())))?;
        let path = dir.join("offsets.log");
        let tmp = dir.join("offsets.log.tmp");
        if tmp.exists() {
            tracing::warn!(file = %tmp.display(), "removing a temp file left by an interrupted offsets compaction");
            std::fs::remove_file(&tmp).map_err(io(format!("remove {}", tmp.display())))?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io(format!("open {}", path.display())))?;
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut raw)
            .map_err(io(format!("read {}", path.display())))?;
        let mut map = HashMap::new();
        let size;
        if raw.len() < FILE_HEADER_LEN as usize {
            file.set_len(0)
                .map_err(io(format!("truncate {}", path.display())))?;
            file.write_all_at(&LOG_MAGIC, 0)
                .map_err(io(format!("write {}", path.display())))?;
            size = FILE_HEADER_LEN;
        } else {
            if raw[..8] != LOG_MAGIC {
                return Err(BrokerError::Io {
                    what: format!("open {}", path.display()),
                    source: std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "not a Flume offsets file (bad magic)",
                    ),
                });
            }
            let body = &raw[8..];
            let mut valid = 0usize;
            let mut damage = None;
            for r in RecordIter::new(body) {
                match r.map_err(|e| e.to_string()).and_then(|r| {
                    let end = r.pos + r.encoded_len();
                    decode(&r)
                        .map(|kv| (kv, end))
                        .ok_or_else(|| "malformed offset record".to_owned())
                }) {
                    Ok(((k, v), end)) => {
                        map.insert(k, v);
                        valid = end;
                    }
                    Err(e) => {
                        damage = Some(e);
                        break;
                    }
                }
            }
            size = FILE_HEADER_LEN + valid as u64;
            if let Some(reason) = damage {
                tracing::warn!(file = %path.display(), dropped_bytes = body.len() - valid, %reason, "truncated a torn or corrupt tail of the offsets file");
                file.set_len(size)
                    .map_err(io(format!("truncate {}", path.display())))?;
            }
        }
        Ok(OffsetStore {
            path,
            file,
            size,
            map,
            fsync,
            compact_min_bytes: 1 << 20,
            max_keys: 1_000_000,
        })
    }

    /// The committed offset (next to read), if any.
    pub fn get(&self, group: &str, topic: &str, partition: i32) -> Option<i64> {
        self.map
            .get(&(group.to_owned(), topic.to_owned(), partition))
            .copied()
    }

    /// Up to `limit` committed offsets, in no particular order.
    pub fn entries(&self, limit: usize) -> Vec<(OffsetKey, i64)> {
        self.map
            .iter()
            .take(limit)
            .map(|(k, o)| (k.clone(), *o))
            .collect()
    }

    /// Every committed offset of a group for a topic.
    pub fn for_topic(&self, group: &str, topic: &str) -> Vec<(i32, i64)> {
        let mut v: Vec<(i32, i64)> = self
            .map
            .iter()
            .filter(|((g, t, _), _)| g == group && t == topic)
            .map(|((_, _, p), o)| (*p, *o))
            .collect();
        v.sort_unstable();
        v
    }

    /// Stores offsets with one write (and an fsync if configured).
    ///
    /// # Errors
    /// I/O errors; nothing is applied in memory then.
    pub fn commit(
        &mut self,
        group: &str,
        offsets: &[(String, i32, i64)],
    ) -> Result<(), BrokerError> {
        if offsets.is_empty() {
            return Ok(());
        }
        let new_keys = offsets
            .iter()
            .filter(|(t, p, _)| !self.map.contains_key(&(group.to_owned(), t.clone(), *p)))
            .count();
        if self.map.len() + new_keys > self.max_keys {
            return Err(BrokerError::code_for(
                flume_client::protocol::ErrorCode::InvalidRequest,
                format!(
                    "the offset store holds {} (group, topic, partition) entries, the limit is {}",
                    self.map.len(),
                    self.max_keys
                ),
            ));
        }
        let mut buf = Vec::with_capacity(offsets.len() * 64);
        let ts = crate::now_ms();
        for (topic, partition, offset) in offsets {
            let mut value = Vec::with_capacity(topic.len() + 14);
            value.put_string(topic);
            value.put_i32(*partition);
            value.put_i64(*offset);
            record::encode(&mut buf, 0, ts, Some(group.as_bytes()), &value, &[]);
        }
        if let Err(e) = self.file.write_all_at(&buf, self.size) {
            let _ = self.file.set_len(self.size);
            return Err(io(format!("append to {}", self.path.display()))(e));
        }
        if self.fsync {
            self.file
                .sync_data()
                .map_err(io(format!("fsync {}", self.path.display())))?;
        }
        self.size += buf.len() as u64;
        for (topic, partition, offset) in offsets {
            self.map
                .insert((group.to_owned(), topic.clone(), *partition), *offset);
        }
        if self.size > self.compact_min_bytes.max(self.map.len() as u64 * 256) {
            if let Err(e) = self.compact() {
                tracing::warn!(error = %e, "offsets compaction failed; the log keeps growing until it succeeds");
            }
        }
        Ok(())
    }

    /// Rewrites the file with only the live offsets (temp file, fsync, rename).
    ///
    /// # Errors
    /// I/O errors; the old file stays in place then.
    pub fn compact(&mut self) -> Result<(), BrokerError> {
        let tmp = self.path.with_extension("log.tmp");
        let mut buf = Vec::with_capacity(8 + self.map.len() * 64);
        buf.extend_from_slice(&LOG_MAGIC);
        let ts = crate::now_ms();
        for ((group, topic, partition), offset) in &self.map {
            let mut value = Vec::new();
            value.put_string(topic);
            value.put_i32(*partition);
            value.put_i64(*offset);
            record::encode(&mut buf, 0, ts, Some(group.as_bytes()), &value, &[]);
        }
        let mut f = File::create(&tmp).map_err(io(format!("create {}", tmp.display())))?;
        f.write_all(&buf)
            .map_err(io(format!("write {}", tmp.display())))?;
        f.sync_all()
            .map_err(io(format!("fsync {}", tmp.display())))?;
        std::fs::rename(&tmp, &self.path).map_err(io(format!("rename {}", tmp.display())))?;
        if let Some(dir) = self.path.parent() {
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        self.file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .map_err(io(format!("open {}", self.path.display())))?;
        self.size = buf.len() as u64;
        Ok(())
    }

    /// Fsyncs the file.
    ///
    /// # Errors
    /// I/O errors.
    pub fn sync(&self) -> Result<(), BrokerError> {
        self.file
            .sync_data()
            .map_err(io(format!("fsync {}", self.path.display())))
    }

    #[cfg(test)]
    fn set_compact_min(&mut self, n: u64) {
        self.compact_min_bytes = n;
    }

    #[cfg(test)]
    fn set_max_keys(&mut self, n: usize) {
        self.max_keys = n;
    }
}

fn decode(r: &record::RawRecord<'_>) -> Option<(OffsetKey, i64)> {
    let (key, value) = r.key_value()?;
    let group = String::from_utf8(key?.to_vec()).ok()?;
    let mut rd = Reader::new(value);
    let topic = rd.string().ok()?;
    let partition = rd.i32().ok()?;
    let offset = rd.i64().ok()?;
    rd.finish().ok()?;
    Some(((group, topic, partition), offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_survive_reopen_and_torn_tails() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = OffsetStore::open(dir.path(), false).unwrap();
        s.commit("g", &[("t".into(), 0, 5), ("t".into(), 1, 7)])
            .unwrap();
        s.commit("g", &[("t".into(), 0, 6)]).unwrap();
        drop(s);
        let s = OffsetStore::open(dir.path(), false).unwrap();
        assert_eq!(s.get("g", "t", 0), Some(6));
        assert_eq!(s.for_topic("g", "t"), vec![(0, 6), (1, 7)]);
        drop(s);
        // Tear the last record: the previous value comes back.
        let path = dir.path().join("offsets.log");
        let len = std::fs::metadata(&path).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(len - 3)
            .unwrap();
        let mut s = OffsetStore::open(dir.path(), false).unwrap();
        assert_eq!(s.get("g", "t", 0), Some(5));
        s.commit("g", &[("t".into(), 0, 9)]).unwrap();
        drop(s);
        assert_eq!(
            OffsetStore::open(dir.path(), false)
                .unwrap()
                .get("g", "t", 0),
            Some(9)
        );
    }

    #[test]
    fn the_number_of_entries_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = OffsetStore::open(dir.path(), false).unwrap();
        s.set_max_keys(3);
        s.commit(
            "g",
            &[("t".into(), 0, 1), ("t".into(), 1, 1), ("t".into(), 2, 1)],
        )
        .unwrap();
        let err = s.commit("h", &[("t".into(), 0, 1)]).unwrap_err();
        assert_eq!(
            err.code(),
            flume_client::protocol::ErrorCode::InvalidRequest
        );
        // Updating an existing entry is always allowed.
        s.commit("g", &[("t".into(), 0, 2)]).unwrap();
        assert_eq!(s.get("g", "t", 0), Some(2));
    }

    #[test]
    fn compaction_keeps_live_offsets_and_stray_temp_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = OffsetStore::open(dir.path(), false).unwrap();
        s.set_compact_min(2000);
        for i in 0..500 {
            s.commit("g", &[("t".into(), i % 3, i64::from(i))]).unwrap();
        }
        assert!(
            std::fs::metadata(dir.path().join("offsets.log"))
                .unwrap()
                .len()
                < 4000
        );
        drop(s);
        std::fs::write(dir.path().join("offsets.log.tmp"), b"half written").unwrap();
        let s = OffsetStore::open(dir.path(), false).unwrap();
        assert!(!dir.path().join("offsets.log.tmp").exists());
        assert_eq!(s.for_topic("g", "t"), vec![(0, 498), (1, 499), (2, 497)]);
    }
}
