//! A broker-wide cache of open segment files (least recently used ones go,
//! approximated by CLOCK), so the number of file descriptors does not grow
//! with the number of partitions.
//!
//! A segment names its two files by a [`CachedFile`]; each use asks the cache
//! for the open file ([`CachedFile::get`]), which opens it on a miss and
//! closes one not used lately (the first the clock hand finds not used since
//! it last passed) when more than `capacity` are open. A
//! caller holds the returned `Arc<File>` only for one read or write, so an
//! evicted file in use stays valid until that call is done (the descriptors
//! open at once are at most `capacity` plus the calls in progress).
//!
//! Files are opened read-write without `O_APPEND` (segments write at explicit
//! positions), so a reopened file behaves exactly as the one it replaces.
//!
//! Durability: Linux reports a writeback error only to descriptors open when
//! it happened, so a file whose data waits for an fsync must not be closed
//! before it. Logs with an fsync policy other than `Never` therefore keep
//! their active segment's files open outside the cache ("pinned", see
//! [`crate::storage::segment`]); under `Never` there is no fsync promise to
//! keep and every file goes through the cache.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{io_err, StorageError};

/// Default of [`FileCache`] capacity (`max_open_files`).
pub const DEFAULT_MAX_OPEN_FILES: usize = 16_384;

/// An open file in the cache.
#[derive(Debug)]
struct Entry {
    file: Arc<File>,
    /// Used since the clock hand last passed (second chance).
    referenced: bool,
    /// Its place in `Lru::ring`.
    slot: usize,
}

/// The open files, evicted by the CLOCK approximation of least-recently-used:
/// a use only sets the entry's `referenced` bit (a hash lookup, no
/// reordering: with thousands of partitions written round-robin, the ordered
/// map this replaced cost a few cache misses per append); an eviction moves
/// the hand over the ring, clearing bits, to the first entry not used since
/// the hand last passed it.
#[derive(Debug, Default)]
struct Lru {
    open: HashMap<u64, Entry>,
    /// The keys of `open`, in the order the hand visits them.
    ring: Vec<u64>,
    hand: usize,
}

impl Lru {
    fn touch(&mut self, key: u64) -> Option<Arc<File>> {
        let e = self.open.get_mut(&key)?;
        e.referenced = true;
        Some(Arc::clone(&e.file))
    }

    fn remove(&mut self, key: u64) -> Option<Arc<File>> {
        let e = self.open.remove(&key)?;
        self.ring.swap_remove(e.slot);
        if let Some(&moved) = self.ring.get(e.slot) {
            if let Some(m) = self.open.get_mut(&moved) {
                m.slot = e.slot;
            }
        }
        Some(e.file)
    }

    /// The slot of the file to evict: the hand's next entry not used since
    /// the hand last passed it (bits are cleared on the way).
    fn victim(&mut self) -> Option<usize> {
        // Two sweeps at most: the first clears every bit it passes.
        for _ in 0..2 * self.ring.len() {
            if self.hand >= self.ring.len() {
                self.hand = 0;
            }
            let key = *self.ring.get(self.hand)?;
            let e = self.open.get_mut(&key)?;
            if !e.referenced {
                return Some(self.hand);
            }
            e.referenced = false;
            self.hand += 1;
        }
        None
    }

    /// Inserts `file` (or returns the one another caller inserted first);
    /// evicted files are pushed to `closed` to be dropped outside the lock.
    /// When full, the new file takes the evicted one's slot and the hand
    /// moves past it, so it is the last the hand comes back to.
    fn insert(
        &mut self,
        key: u64,
        file: Arc<File>,
        capacity: usize,
        closed: &mut Vec<Arc<File>>,
    ) -> Arc<File> {
        if let Some(existing) = self.touch(key) {
            closed.push(file);
            return existing;
        }
        let entry = |slot| Entry {
            file: Arc::clone(&file),
            referenced: false,
            slot,
        };
        if self.open.len() >= capacity {
            if let Some(slot) = self.victim() {
                if let Some(old) = self.ring.get(slot).and_then(|k| self.open.remove(k)) {
                    closed.push(old.file);
                }
                if let Some(k) = self.ring.get_mut(slot) {
                    *k = key;
                }
                self.open.insert(key, entry(slot));
                self.hand = slot + 1;
                return file;
            }
        }
        self.open.insert(key, entry(self.ring.len()));
        self.ring.push(key);
        file
    }
}

/// The open files of all segments, at most `capacity` at once.
#[derive(Debug)]
pub struct FileCache {
    lru: Mutex<Lru>,
    capacity: usize,
    next_key: AtomicU64,
    opened: AtomicU64,
}

impl Default for FileCache {
    fn default() -> Self {
        FileCache::with_capacity(DEFAULT_MAX_OPEN_FILES)
    }
}

impl FileCache {
    fn with_capacity(capacity: usize) -> Self {
        FileCache {
            lru: Mutex::new(Lru::default()),
            capacity: capacity.max(1),
            next_key: AtomicU64::new(0),
            opened: AtomicU64::new(0),
        }
    }

    /// A cache keeping at most `capacity` files open (at least 1).
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(FileCache::with_capacity(capacity))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        self.lru
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Most files kept open.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Files open in the cache now.
    pub fn open_files(&self) -> usize {
        self.lock().open.len()
    }

    /// Files opened on a miss so far (reopens after eviction included).
    pub fn opens(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Names `path` (not opened until used).
    pub fn file(self: &Arc<Self>, path: PathBuf) -> CachedFile {
        CachedFile {
            key: self.next_key.fetch_add(1, Ordering::Relaxed),
            path,
            cache: Arc::clone(self),
        }
    }

    /// Names `path` and keeps `file`, already open on it, in the cache.
    pub fn adopt(self: &Arc<Self>, path: PathBuf, file: File) -> CachedFile {
        let cf = self.file(path);
        let mut closed = Vec::new();
        self.lock()
            .insert(cf.key, Arc::new(file), self.capacity, &mut closed);
        drop(closed);
        cf
    }

    fn get(&self, key: u64, path: &Path) -> Result<Arc<File>, StorageError> {
        if let Some(f) = self.lock().touch(key) {
            return Ok(f);
        }
        // Opened outside the lock: other partitions' reads do not wait for this open.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io_err("open", path))?;
        self.opened.fetch_add(1, Ordering::Relaxed);
        let mut closed = Vec::new();
        let f = self
            .lock()
            .insert(key, Arc::new(file), self.capacity, &mut closed);
        // Evicted files are closed here, after the lock is released.
        drop(closed);
        Ok(f)
    }

    fn forget(&self, key: u64) {
        let f = self.lock().remove(key);
        drop(f);
    }
}

/// A file reached through the [`FileCache`]; closing it on drop.
#[derive(Debug)]
pub struct CachedFile {
    key: u64,
    path: PathBuf,
    cache: Arc<FileCache>,
}

impl CachedFile {
    /// The open file (opened again if it was evicted).
    ///
    /// # Errors
    /// When it cannot be opened (deleted, or the process is out of descriptors).
    pub fn get(&self) -> Result<Arc<File>, StorageError> {
        self.cache.get(self.key, &self.path)
    }

    /// Closes the file now if it is open (it is opened again on next use).
    pub fn close(&self) {
        self.cache.forget(self.key);
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for CachedFile {
    fn drop(&mut self) {
        self.cache.forget(self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    fn files(dir: &Path, n: usize) -> Vec<PathBuf> {
        (0..n)
            .map(|i| {
                let p = dir.join(format!("f{i}"));
                let mut f = File::create(&p).expect("create");
                write!(f, "file {i}").expect("write");
                p
            })
            .collect()
    }

    #[test]
    fn never_holds_more_than_its_capacity_and_reopens_evicted_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = FileCache::new(3);
        let handles: Vec<CachedFile> = files(dir.path(), 10)
            .into_iter()
            .map(|p| cache.file(p))
            .collect();
        for round in 0..3 {
            for (i, h) in handles.iter().enumerate() {
                let f = h.get().expect("get");
                let mut buf = vec![0u8; format!("file {i}").len()];
                f.read_exact_at(&mut buf, 0).expect("read");
                assert_eq!(buf, format!("file {i}").into_bytes(), "round {round}");
                assert!(cache.open_files() <= 3, "{} open", cache.open_files());
            }
        }
        assert_eq!(cache.opens(), 30, "every use after eviction reopened");
        // Recently used files stay open: a hit opens nothing.
        let before = cache.opens();
        handles[9].get().expect("get");
        assert_eq!(cache.opens(), before);
        drop(handles);
        assert_eq!(cache.open_files(), 0, "dropped handles close their files");
    }

    #[test]
    fn a_file_used_since_the_hand_passed_gets_a_second_chance() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = FileCache::new(3);
        let h: Vec<CachedFile> = files(dir.path(), 5)
            .into_iter()
            .map(|p| cache.file(p))
            .collect();
        for f in &h[..3] {
            f.get().expect("fill");
        }
        h[0].get().expect("0 used again");
        h[3].get().expect("3 evicts 1, the first not used again");
        let opens = cache.opens();
        h[0].get().expect("0 still open");
        h[2].get().expect("2 still open");
        assert_eq!(cache.opens(), opens);
        // 0 and 2 were used again, 3 not since it was opened: 3 goes.
        h[4].get().expect("4");
        assert_eq!(cache.open_files(), 3);
        let opens = cache.opens();
        h[0].get().expect("0");
        h[2].get().expect("2");
        h[4].get().expect("4");
        assert_eq!(cache.opens(), opens, "0, 2 and 4 stayed");
        h[3].get().expect("3 is reopened");
        h[1].get().expect("1 is reopened");
        assert_eq!(cache.opens(), opens + 2);
        assert_eq!(cache.open_files(), 3);
        // Closing handles keeps the ring consistent.
        drop(h);
        assert_eq!(cache.open_files(), 0);
        assert!(cache.lock().ring.is_empty());
    }

    #[test]
    fn least_recently_used_goes_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = FileCache::new(2);
        let h: Vec<CachedFile> = files(dir.path(), 3)
            .into_iter()
            .map(|p| cache.file(p))
            .collect();
        h[0].get().expect("0");
        h[1].get().expect("1");
        h[0].get().expect("0 again");
        h[2].get().expect("2 evicts 1");
        let opens = cache.opens();
        h[0].get().expect("0 is still open");
        assert_eq!(cache.opens(), opens);
        h[1].get().expect("1 is reopened");
        assert_eq!(cache.opens(), opens + 1);
    }

    #[test]
    fn a_file_in_use_survives_its_eviction() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = FileCache::new(1);
        let p = files(dir.path(), 2);
        let a = cache.file(p[0].clone());
        let b = cache.file(p[1].clone());
        let in_use = a.get().expect("a");
        b.get().expect("b evicts a");
        assert_eq!(cache.open_files(), 1);
        let mut buf = [0u8; 6];
        in_use.read_exact_at(&mut buf, 0).expect("still readable");
        assert_eq!(&buf, b"file 0");
    }

    #[test]
    fn a_deleted_file_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = FileCache::new(1);
        let p = files(dir.path(), 1);
        let a = cache.file(p[0].clone());
        std::fs::remove_file(&p[0]).expect("rm");
        assert!(matches!(a.get(), Err(StorageError::Io { op: "open", .. })));
    }
}
