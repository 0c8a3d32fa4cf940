//! A simulated log directory in memory. Each file keeps what the OS holds (`content`) and
//! what an fsync made durable (`synced`); the directory keeps which names exist and which
//! were made durable by a directory sync. A process crash keeps the OS's view; a power loss
//! keeps only what was synced, plus perhaps a torn prefix of what was not.

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

use parking_lot::Mutex;

use super::Faults;
use crate::wal::files::{LogFiles, SegmentFile};

#[derive(Debug, Default, Clone)]
struct FileData {
    content: Vec<u8>,
    synced: Vec<u8>,
}

/// A file as open handles share it.
type Shared = Arc<Mutex<FileData>>;

#[derive(Debug, Default)]
struct Dir {
    /// Files by name as the OS sees them; a file handle keeps its data even after removal.
    files: BTreeMap<String, Shared>,
    /// Names as of the last directory sync.
    durable: BTreeMap<String, Shared>,
}

/// The simulated directory. Clone it to keep it across a simulated restart.
#[derive(Debug, Clone)]
pub struct SimFiles {
    dir: Arc<Mutex<Dir>>,
    faults: Arc<Faults>,
}

fn injected(what: &str) -> io::Error {
    io::Error::other(format!("simulated fault: {what}"))
}

fn segment_name(id: u64) -> String {
    format!("{id:020}.log")
}

impl SimFiles {
    pub fn new(faults: Arc<Faults>) -> SimFiles {
        SimFiles {
            dir: Arc::default(),
            faults,
        }
    }

    /// A process crash: the OS keeps everything it was given. Returns the directory as a
    /// new process finds it (open handles of the old one are cut off).
    pub fn crash(&self) -> SimFiles {
        let dir = self.dir.lock();
        // Each file copied once: a name in both maps keeps pointing at one file.
        let mut copies: Vec<(Shared, Shared)> = Vec::new();
        let mut copy = |m: &BTreeMap<String, Shared>| -> BTreeMap<_, _> {
            m.iter()
                .map(|(k, v)| {
                    let new = match copies.iter().find(|(old, _)| Arc::ptr_eq(old, v)) {
                        Some((_, new)) => Arc::clone(new),
                        None => {
                            let new = Arc::new(Mutex::new(v.lock().clone()));
                            copies.push((Arc::clone(v), Arc::clone(&new)));
                            new
                        }
                    };
                    (k.clone(), new)
                })
                .collect()
        };
        let files = copy(&dir.files);
        let durable = copy(&dir.durable);
        SimFiles {
            dir: Arc::new(Mutex::new(Dir { files, durable })),
            faults: Arc::clone(&self.faults),
        }
    }

    /// A power loss: only synced names and bytes survive; an unsynced tail may survive in
    /// part (a torn write), as the plan's stream decides.
    pub fn power_loss(&self) -> SimFiles {
        let dir = self.dir.lock();
        let mut files = BTreeMap::new();
        for (name, data) in &dir.durable {
            let data = data.lock();
            let mut content = data.synced.clone();
            if data.content.len() > content.len() && data.content.starts_with(&content) {
                let tail = &data.content[content.len()..];
                let keep = self.faults.below(tail.len() as u64 + 1) as usize;
                content.extend_from_slice(&tail[..keep]);
            }
            files.insert(
                name.clone(),
                Arc::new(Mutex::new(FileData {
                    synced: content.clone(),
                    content,
                })),
            );
        }
        SimFiles {
            dir: Arc::new(Mutex::new(Dir {
                durable: files.clone(),
                files,
            })),
            faults: Arc::clone(&self.faults),
        }
    }

    /// Total bytes in the directory (as the OS sees it).
    pub fn bytes(&self) -> usize {
        self.dir
            .lock()
            .files
            .values()
            .map(|f| f.lock().content.len())
            .sum()
    }

    /// Segment files present.
    pub fn segments(&self) -> usize {
        self.dir
            .lock()
            .files
            .keys()
            .filter(|k| k.ends_with(".log"))
            .count()
    }
}

#[derive(Debug)]
struct SimSegment {
    data: Arc<Mutex<FileData>>,
    faults: Arc<Faults>,
}

impl SegmentFile for SimSegment {
    fn append(&self, bytes: &[u8]) -> io::Result<()> {
        if self.faults.disk_full() || self.faults.fail() {
            // A write that fails part way: some prefix reached the file.
            let keep = self.faults.below(bytes.len() as u64 + 1) as usize;
            self.data.lock().content.extend_from_slice(&bytes[..keep]);
            return Err(injected("append (no space left on device)"));
        }
        self.data.lock().content.extend_from_slice(bytes);
        Ok(())
    }

    fn truncate(&self, len: u64) -> io::Result<()> {
        if self.faults.fail() {
            return Err(injected("truncate"));
        }
        let mut data = self.data.lock();
        data.content.truncate(len as usize);
        let synced = data.synced.len().min(len as usize);
        data.synced.truncate(synced);
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        if self.faults.fail() {
            return Err(injected("fsync"));
        }
        let mut data = self.data.lock();
        data.synced = data.content.clone();
        Ok(())
    }
}

impl LogFiles for SimFiles {
    fn list(&self) -> io::Result<Vec<u64>> {
        if self.faults.fail() {
            return Err(injected("list"));
        }
        Ok(self
            .dir
            .lock()
            .files
            .keys()
            .filter_map(|k| k.strip_suffix(".log")?.parse().ok())
            .collect())
    }

    fn read(&self, id: u64) -> io::Result<Vec<u8>> {
        if self.faults.fail() {
            return Err(injected("read"));
        }
        let dir = self.dir.lock();
        let data = dir
            .files
            .get(&segment_name(id))
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        Ok(data.lock().content.clone())
    }

    fn sync_segment(&self, id: u64) -> io::Result<()> {
        if self.faults.fail() {
            return Err(injected("fsync"));
        }
        if let Some(data) = self.dir.lock().files.get(&segment_name(id)) {
            let mut data = data.lock();
            data.synced = data.content.clone();
        }
        Ok(())
    }

    fn create(&self, id: u64) -> io::Result<Arc<dyn SegmentFile>> {
        if self.faults.disk_full() || self.faults.fail() {
            return Err(injected("create"));
        }
        let data = Arc::new(Mutex::new(FileData::default()));
        self.dir
            .lock()
            .files
            .insert(segment_name(id), Arc::clone(&data));
        Ok(Arc::new(SimSegment {
            data,
            faults: Arc::clone(&self.faults),
        }))
    }

    fn remove(&self, id: u64) -> io::Result<()> {
        if self.faults.fail() {
            return Err(injected("remove"));
        }
        self.dir.lock().files.remove(&segment_name(id));
        Ok(())
    }

    fn sync_dir(&self) -> io::Result<()> {
        if self.faults.fail() {
            return Err(injected("directory fsync"));
        }
        let mut dir = self.dir.lock();
        dir.durable = dir.files.clone();
        Ok(())
    }

    fn read_named(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        if self.faults.fail() {
            return Err(injected("read"));
        }
        Ok(self
            .dir
            .lock()
            .files
            .get(name)
            .map(|d| d.lock().content.clone()))
    }

    fn write_named(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        if self.faults.disk_full() || self.faults.fail() {
            return Err(injected("write"));
        }
        let data = Arc::new(Mutex::new(FileData {
            content: bytes.to_vec(),
            synced: bytes.to_vec(),
        }));
        let mut dir = self.dir.lock();
        dir.files.insert(name.to_string(), Arc::clone(&data));
        dir.durable.insert(name.to_string(), data);
        Ok(())
    }
}
