//! The log's file operations behind a trait, so the write path runs unchanged over the disk
//! ([`DiskFiles`]) or over a simulated file system that fails, tears and loses writes at
//! chosen operations (the engine's simulation tests).
//!
//! The contract a [`LogFiles`] keeps is POSIX's: an append is in the OS's buffers when it
//! returns (a killed process keeps it), and survives power loss only once `sync` returned;
//! a created or removed segment survives power loss only once `sync_dir` returned.

use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One segment file, opened for appending.
pub trait SegmentFile: Send + Sync + Debug {
    /// Appends all of `bytes` (or fails, possibly having written a prefix of them).
    fn append(&self, bytes: &[u8]) -> io::Result<()>;
    /// Cuts the file back to `len` bytes (undoing a failed append).
    fn truncate(&self, len: u64) -> io::Result<()>;
    /// Makes the file's content durable (fdatasync).
    fn sync(&self) -> io::Result<()>;
}

/// A directory of numbered segment files plus small named files, owned by one process.
pub trait LogFiles: Send + Sync + Debug {
    /// Segment ids present, in any order.
    fn list(&self) -> io::Result<Vec<u64>>;
    /// A segment's whole content.
    fn read(&self, id: u64) -> io::Result<Vec<u8>>;
    /// Fsyncs an existing segment (one a previous process wrote, replayed now).
    fn sync_segment(&self, id: u64) -> io::Result<()>;
    /// Creates an empty segment for appending (not yet durable: see `sync_dir`).
    fn create(&self, id: u64) -> io::Result<Arc<dyn SegmentFile>>;
    /// Removes a segment (not yet durable: see `sync_dir`).
    fn remove(&self, id: u64) -> io::Result<()>;
    /// Makes creations and removals durable (fsync of the directory).
    fn sync_dir(&self) -> io::Result<()>;
    /// A named file's content, `None` when absent.
    fn read_named(&self, name: &str) -> io::Result<Option<Vec<u8>>>;
    /// Replaces a named file durably and atomically: a crash leaves the old or the new
    /// content, never a mix.
    fn write_named(&self, name: &str, bytes: &[u8]) -> io::Result<()>;
}

/// The log on local disk: `<dir>/NNNNNNNNNNNNNNNNNNNN.log` segments and a `LOCK` file held
/// while open (one process per log dir).
#[derive(Debug)]
pub struct DiskFiles {
    dir: PathBuf,
    _lock: File,
}

/// Why a log directory could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// Another process holds the directory's lock.
    InUse(PathBuf),
    Io(io::Error),
}

impl DiskFiles {
    /// Opens (creating) `dir` and takes its lock.
    pub fn open(dir: &Path) -> Result<DiskFiles, OpenError> {
        std::fs::create_dir_all(dir).map_err(OpenError::Io)?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("LOCK"))
            .map_err(OpenError::Io)?;
        if lock.try_lock().is_err() {
            return Err(OpenError::InUse(dir.to_path_buf()));
        }
        Ok(DiskFiles {
            dir: dir.to_path_buf(),
            _lock: lock,
        })
    }

    fn segment(&self, id: u64) -> PathBuf {
        self.dir.join(format!("{id:020}.log"))
    }
}

#[derive(Debug)]
struct DiskSegment(File);

impl SegmentFile for DiskSegment {
    fn append(&self, bytes: &[u8]) -> io::Result<()> {
        (&self.0).write_all(bytes)
    }

    fn truncate(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn sync(&self) -> io::Result<()> {
        self.0.sync_data()
    }
}

impl LogFiles for DiskFiles {
    fn list(&self) -> io::Result<Vec<u64>> {
        Ok(std::fs::read_dir(&self.dir)?
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".log")?.parse().ok())
            .collect())
    }

    fn read(&self, id: u64) -> io::Result<Vec<u8>> {
        std::fs::read(self.segment(id))
    }

    fn sync_segment(&self, id: u64) -> io::Result<()> {
        File::open(self.segment(id))?.sync_data()
    }

    fn create(&self, id: u64) -> io::Result<Arc<dyn SegmentFile>> {
        // Append mode: after `set_len` cuts a failed append, writes go to the new end.
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.segment(id))?;
        Ok(Arc::new(DiskSegment(file)))
    }

    fn remove(&self, id: u64) -> io::Result<()> {
        match std::fs::remove_file(self.segment(id)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    fn sync_dir(&self) -> io::Result<()> {
        File::open(&self.dir)?.sync_all()
    }

    fn read_named(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        match std::fs::read(self.dir.join(name)) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn write_named(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let tmp = self.dir.join(format!("{name}.tmp"));
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_data()?;
        drop(f);
        std::fs::rename(&tmp, self.dir.join(name))?;
        self.sync_dir()
    }
}
