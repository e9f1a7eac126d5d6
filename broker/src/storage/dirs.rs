//! Directories: fsync of a directory (so a created, renamed or rolled file's
//! name survives a power loss), durable directory creation, and the data
//! directory's lock and marker.
//!
//! The data directory (`<data>/`) is held by one broker at a time: an
//! exclusive `flock(2)` on `<data>/.lock`, taken at open and held until the
//! broker is shut down or dropped. The lock file holds the holder's PID (for
//! the error the next opener gets). A `flock` belongs to the open file, so two
//! opens in one process exclude each other too, and the kernel releases it
//! when the process dies: a crashed broker never leaves a stale lock.
//!
//! `<data>/.flume-data-dir` marks a Flume data directory; it is written at the
//! first open. A directory that is not empty is opened only if it has the
//! marker or already holds a Flume layout (a topic directory with
//! `topic.conf`, or `__consumer_offsets`: data directories made before the
//! marker existed), unless the caller allows a foreign directory.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use super::{io_err, StorageError};

/// Name of the lock file in the data directory.
pub const LOCK_FILE: &str = ".lock";
/// Name of the marker file of a Flume data directory.
pub const MARKER_FILE: &str = ".flume-data-dir";
pub(crate) const MARKER_TEXT: &[u8] = b"flume data directory, layout 1\n";

/// fsyncs a directory, so that the names created, renamed or removed in it
/// are durable (a file's own fsync does not cover its directory entry).
///
/// # Errors
/// When the directory cannot be opened or the OS reports a failure.
pub fn fsync_dir(dir: &Path) -> Result<(), StorageError> {
    File::open(dir)
        .map_err(io_err("open directory", dir))?
        .sync_all()
        .map_err(io_err("fsync directory", dir))
}

/// Writes a small file atomically: a temp file beside it, fsync, rename over
/// `path`, fsync of the directory. A crash leaves the old or the new content.
///
/// # Errors
/// I/O errors, naming the file.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<(), StorageError> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut f = File::create(&tmp).map_err(io_err("create", &tmp))?;
    f.write_all(data).map_err(io_err("write", &tmp))?;
    f.sync_all().map_err(io_err("fsync", &tmp))?;
    std::fs::rename(&tmp, path).map_err(io_err("rename", &tmp))?;
    if let Some(dir) = path.parent() {
        fsync_dir(dir)?;
    }
    Ok(())
}

/// Reads a small text file written by [`write_atomic`]; a file that does not
/// exist yet reads as empty.
///
/// # Errors
/// I/O errors other than "not found", naming the file.
pub fn read_optional(path: &Path) -> Result<String, StorageError> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(io_err("read", path)(e)),
    }
}

/// Creates a directory and any missing parents; each one created is made
/// durable by an fsync of its parent. An existing directory is left alone.
///
/// # Errors
/// I/O errors, naming the directory.
pub fn create_dir_durable(dir: &Path) -> Result<(), StorageError> {
    if dir.is_dir() {
        return Ok(());
    }
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(parent) = parent {
        create_dir_durable(parent)?;
    }
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        // Created by someone else in between: theirs to make durable.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => return Ok(()),
        Err(e) => return Err(io_err("create directory", dir)(e)),
    }
    fsync_dir(parent.unwrap_or_else(|| Path::new(".")))
}

/// Flushes every file of the filesystem holding `dir` with one `syncfs(2)`.
/// A clean shutdown under fsync `never` uses it instead of one fdatasync per
/// partition (50 000 of those took 25 s, and reopened every file the cache
/// had closed); it also flushes other programs' data on that filesystem.
///
/// # Errors
/// When `dir` cannot be opened or the OS reports a writeback failure.
pub fn sync_filesystem(dir: &Path) -> Result<(), StorageError> {
    let f = File::open(dir).map_err(io_err("open", dir))?;
    rustix::fs::syncfs(&f).map_err(|e| io_err("syncfs", dir)(e.into()))
}

/// The exclusive hold of a data directory; dropping it releases the lock.
#[derive(Debug)]
pub struct DataDirLock {
    dir: PathBuf,
    _file: File,
}

/// How long a lock held by this process itself is tried again (see
/// [`DataDirLock::acquire`]).
const OWN_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

impl DataDirLock {
    /// Creates `dir` if needed, refuses a foreign non-empty directory unless
    /// `allow_foreign`, takes the exclusive lock on `<dir>/.lock` (writing
    /// this process's PID into it) and writes the marker on first use.
    ///
    /// # Errors
    /// [`StorageError::DataDirLocked`] when another broker holds the
    /// directory, [`StorageError::ForeignDataDir`] for a directory that is
    /// not Flume's, I/O errors.
    pub fn acquire(dir: &Path, allow_foreign: bool) -> Result<Self, StorageError> {
        create_dir_durable(dir)?;
        let has_marker = dir.join(MARKER_FILE).is_file();
        if !has_marker && !allow_foreign {
            if let Some(entry) = foreign_entry(dir)? {
                return Err(StorageError::ForeignDataDir {
                    dir: dir.to_path_buf(),
                    entry,
                });
            }
        }
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err("open", &path))?;
        // A lock this very process released can still be held for a moment
        // by a child forked (by any thread) while it was open: the child
        // shares the open file until its exec closes it. So a lock whose
        // holder is this process is tried again for up to OWN_LOCK_WAIT
        // before it counts as held (a broker opened twice in one process
        // still fails, a little later).
        let waited_since = std::time::Instant::now();
        loop {
            match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => break,
                Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
                    let mut text = String::new();
                    let _ = file.rewind();
                    let _ = file.read_to_string(&mut text);
                    let holder_pid: Option<u32> = text.trim().parse().ok();
                    if holder_pid == Some(std::process::id())
                        && waited_since.elapsed() < OWN_LOCK_WAIT
                    {
                        std::thread::sleep(std::time::Duration::from_millis(10));
                        continue;
                    }
                    return Err(StorageError::DataDirLocked {
                        dir: dir.to_path_buf(),
                        holder_pid,
                    });
                }
                Err(e) => return Err(io_err("lock", &path)(e.into())),
            }
        }
        let pid = format!("{}\n", std::process::id());
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(pid.as_bytes()))
            .map_err(io_err("write", &path))?;
        if !has_marker {
            write_marker(dir)?;
        }
        Ok(DataDirLock {
            dir: dir.to_path_buf(),
            _file: file,
        })
    }

    /// The locked directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// The first entry that shows `dir` is not a Flume data directory, or `None`
/// when it is empty or holds a Flume layout.
pub(crate) fn foreign_entry(dir: &Path) -> Result<Option<String>, StorageError> {
    let mut first_other = None;
    for entry in std::fs::read_dir(dir).map_err(io_err("list", dir))? {
        let entry = entry.map_err(io_err("list", dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        // `lost+found` is in every fresh ext4 file system: a mount point is empty.
        if name == LOCK_FILE || name == "lost+found" {
            continue;
        }
        let flume =
            path.is_dir() && (name == "__consumer_offsets" || path.join("topic.conf").is_file());
        if flume {
            return Ok(None);
        }
        if first_other.is_none() {
            first_other = Some(name);
        }
    }
    Ok(first_other)
}

fn write_marker(dir: &Path) -> Result<(), StorageError> {
    let path = dir.join(MARKER_FILE);
    let mut f = File::create(&path).map_err(io_err("create", &path))?;
    f.write_all(MARKER_TEXT)
        .and_then(|()| f.sync_all())
        .map_err(io_err("write", &path))?;
    fsync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_names_the_directory_and_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let held = DataDirLock::acquire(&data, false).unwrap();
        let err = DataDirLock::acquire(&data, false).unwrap_err();
        match &err {
            StorageError::DataDirLocked { dir, holder_pid } => {
                assert_eq!(dir, &data);
                assert_eq!(*holder_pid, Some(std::process::id()));
            }
            other => panic!("{other}"),
        }
        let text = err.to_string();
        assert!(text.contains(&data.display().to_string()), "{text}");
        assert!(text.contains(&std::process::id().to_string()), "{text}");
        drop(held);
        let again = DataDirLock::acquire(&data, false).unwrap();
        assert_eq!(again.dir(), data);
    }

    #[test]
    fn a_foreign_directory_is_refused_unless_allowed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("thesis.tex"), b"precious").unwrap();
        let err = DataDirLock::acquire(dir.path(), false).unwrap_err();
        assert!(
            matches!(&err, StorageError::ForeignDataDir { entry, .. } if entry == "thesis.tex"),
            "{err}"
        );
        assert!(!dir.path().join(LOCK_FILE).exists(), "nothing written");
        assert!(!dir.path().join(MARKER_FILE).exists(), "nothing written");
        // Allowed: opened, and marked from then on.
        drop(DataDirLock::acquire(dir.path(), true).unwrap());
        drop(DataDirLock::acquire(dir.path(), false).unwrap());
    }

    #[test]
    fn empty_new_and_old_layouts_are_flume_directories() {
        let dir = tempfile::tempdir().unwrap();
        // Missing, and empty but for lost+found.
        drop(DataDirLock::acquire(&dir.path().join("new/nested"), false).unwrap());
        let mount = dir.path().join("mount");
        std::fs::create_dir_all(mount.join("lost+found")).unwrap();
        drop(DataDirLock::acquire(&mount, false).unwrap());
        // A data directory from before the marker: a topic with topic.conf.
        let old = dir.path().join("old");
        std::fs::create_dir_all(old.join("orders")).unwrap();
        std::fs::write(old.join("orders/topic.conf"), b"partitions=1\n").unwrap();
        std::fs::write(old.join("stray.txt"), b"").unwrap();
        drop(DataDirLock::acquire(&old, false).unwrap());
        assert!(old.join(MARKER_FILE).is_file(), "marked at first open");
        // Or only committed offsets.
        let offsets = dir.path().join("offsets-only");
        std::fs::create_dir_all(offsets.join("__consumer_offsets")).unwrap();
        drop(DataDirLock::acquire(&offsets, false).unwrap());
    }
}
