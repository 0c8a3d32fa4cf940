//! The write-ahead log: one entry per acknowledged batch (`entry`), appended as frames
//! to numbered segment files ([`files`]):
//!
//! ```text
//! frame: | payload len (4, LE) | crc32 of seq+payload (4, LE) | seq (8, LE) | payload |
//! ```
//!
//! The log never lies about what it holds:
//! - an append that fails is cut back to the last whole frame before anything else is
//!   appended; when even that fails the log is *poisoned*;
//! - an fsync that fails poisons the log (the kernel may have dropped the pages it could not
//!   write, so retrying the fsync would report success for lost data);
//! - a poisoned log refuses appends until every buffered point is in the store and the store
//!   is synced; then the log starts a fresh segment and is good again (`Log::heal`);
//! - segments are created and deleted with an fsync of the directory.
//!
//! So a segment holds whole frames up to its end, or ends in a torn frame that was never
//! acknowledged (a crash mid-append); replay reads each segment up to its last whole frame.

pub(crate) mod entry;
pub mod files;

use std::sync::Arc;

pub(crate) use entry::{Dictionary, EntryBuilder, decode_entry};
use files::{LogFiles, SegmentFile};

use crate::{Error, Result};

/// A logged entry found at open: the segment holding it, its sequence number and payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) segment: u64,
    pub(crate) seq: u64,
    pub(crate) payload: Vec<u8>,
}

/// Segment files past this size are closed and a new one started (the default of
/// `Settings::wal_segment_bytes`).
pub(crate) const SEGMENT_BYTES: u64 = 64 << 20;

/// The log: an open segment being appended to and closed segments awaiting release.
#[derive(Debug)]
pub(crate) struct Log {
    files: Arc<dyn LogFiles>,
    file: Arc<dyn SegmentFile>,
    file_id: u64,
    /// Bytes of whole frames in the open segment.
    file_bytes: u64,
    /// Past this many bytes the open segment is closed before the next append.
    segment_bytes: u64,
    /// Last sequence number in the open segment (0: none yet).
    file_last_seq: u64,
    /// Closed segments: (file id, last sequence number).
    closed: Vec<(u64, u64)>,
    /// Why appends are refused, when the log can no longer vouch for what it holds.
    poisoned: Option<String>,
}

fn io_error(context: &str, e: &std::io::Error) -> String {
    format!("write-ahead log: {context}: {e}")
}

/// A segment that could not be created. Most causes pass (a full disk, too many open
/// files): `Unavailable`, retried. Creating a file fails with "not found" only when the log
/// dir itself is gone (deleted, or its volume unmounted lazily), which waiting does not
/// undo: not `Unavailable`, so a stopping TSD gives up at once instead of retrying.
fn create_failed(e: &std::io::Error) -> Error {
    let why = io_error("cannot create a segment", e);
    if e.kind() == std::io::ErrorKind::NotFound {
        Error::Internal(format!("{why}; the log dir is gone (deleted or unmounted)"))
    } else {
        Error::Unavailable(why)
    }
}

/// An fsync of the open segment, run outside the writer's lock by the caller
/// (group commit), then reported with [`Log::synced`].
#[derive(Debug)]
pub(crate) struct PendingSync {
    file: Arc<dyn SegmentFile>,
    file_id: u64,
    /// Every entry at or below this is covered once the fsync returns.
    pub(crate) through: u64,
}

impl PendingSync {
    pub(crate) fn run(&self) -> std::io::Result<()> {
        self.file.sync()
    }
}

impl Log {
    /// Opens the log, returning it and every entry a previous process left, in order.
    pub(crate) fn open(files: Arc<dyn LogFiles>, segment_bytes: u64) -> Result<(Log, Vec<Entry>)> {
        let fail = |context: &str, e: std::io::Error| Error::Internal(io_error(context, &e));
        let mut ids = files
            .list()
            .map_err(|e| fail("cannot list the log dir", e))?;
        ids.sort_unstable();
        let mut entries = Vec::new();
        let mut closed = Vec::new();
        for id in &ids {
            let bytes = files
                .read(*id)
                .map_err(|e| fail("cannot read a segment", e))?;
            // What a previous process appended may still be in the OS's buffers only; the
            // entries are acknowledged, so they are made durable before anything else.
            files
                .sync_segment(*id)
                .map_err(|e| fail("cannot sync a segment", e))?;
            let mut last = 0;
            let mut pos = 0usize;
            while let Some((seq, payload, next)) = read_frame(&bytes, pos) {
                entries.push(Entry {
                    segment: *id,
                    seq,
                    payload: payload.to_vec(),
                });
                last = seq;
                pos = next;
            }
            if pos != bytes.len() {
                tracing::warn!(
                    segment = id,
                    offset = pos,
                    "write-ahead log segment ends in a torn frame; its tail was never acknowledged"
                );
            }
            closed.push((*id, last));
        }
        let file_id = ids.last().map_or(1, |l| l + 1);
        let file = files
            .create(file_id)
            .map_err(|e| fail("cannot create a segment", e))?;
        files
            .sync_dir()
            .map_err(|e| fail("cannot sync the log dir", e))?;
        let log = Log {
            files,
            file,
            file_id,
            file_bytes: 0,
            segment_bytes,
            file_last_seq: 0,
            closed,
            poisoned: None,
        };
        Ok((log, entries))
    }

    /// Why the log refuses appends, if it does.
    pub(crate) fn poisoned(&self) -> Option<&str> {
        self.poisoned.as_deref()
    }

    fn poison(&mut self, why: String) -> Error {
        tracing::error!(reason = %why, "write-ahead log poisoned: writes refused until buffered points are stored");
        self.poisoned = Some(why.clone());
        Error::Unavailable(why)
    }

    /// The segment the next append goes to, closing a full one first. An entry is built
    /// for a segment (it defines the series that segment has not seen): the caller appends
    /// it only if this is the segment it was built for.
    pub(crate) fn next_segment(&mut self) -> Result<u64> {
        if let Some(why) = &self.poisoned {
            return Err(Error::Unavailable(why.clone()));
        }
        if self.file_bytes >= self.segment_bytes {
            self.rotate()?;
        }
        Ok(self.file_id)
    }

    /// Appends a frame made by [`EntryBuilder::finish_framed`] for `seq` to OS buffers
    /// (`sync` adds an fsync), in the segment [`Log::next_segment`] names. On failure the log
    /// is cut back to its last good frame; when even that fails, the torn bytes stay and the
    /// log is poisoned (nothing more is acknowledged).
    pub(crate) fn append_frame(&mut self, seq: u64, frame: &[u8], sync: bool) -> Result<()> {
        self.next_segment()?;
        if let Err(e) = self.file.append(frame) {
            let why = io_error("append failed", &e);
            if let Err(t) = self.file.truncate(self.file_bytes) {
                return Err(self.poison(format!("{why}; cutting the torn frame failed too: {t}")));
            }
            tracing::error!(error = %e, "write-ahead log append failed; the frame was cut off");
            return Err(Error::Unavailable(why));
        }
        self.file_bytes += frame.len() as u64;
        self.file_last_seq = seq;
        if sync {
            self.sync()?;
        }
        Ok(())
    }

    /// Fsyncs the open segment now.
    pub(crate) fn sync(&mut self) -> Result<()> {
        if let Some(why) = &self.poisoned {
            return Err(Error::Unavailable(why.clone()));
        }
        match self.file.sync() {
            Ok(()) => Ok(()),
            Err(e) => Err(self.poison(io_error("fsync failed", &e))),
        }
    }

    /// An fsync of what is appended so far, to run without holding the log.
    pub(crate) fn pending_sync(&self, through: u64) -> Result<PendingSync> {
        if let Some(why) = &self.poisoned {
            return Err(Error::Unavailable(why.clone()));
        }
        Ok(PendingSync {
            file: Arc::clone(&self.file),
            file_id: self.file_id,
            through,
        })
    }

    /// Reports how a [`PendingSync`] ended: a failure poisons the log. (A segment closed
    /// since was synced when it was closed.)
    pub(crate) fn synced(
        &mut self,
        pending: &PendingSync,
        result: std::io::Result<()>,
    ) -> Result<()> {
        match result {
            Ok(()) => Ok(()),
            Err(e) if pending.file_id == self.file_id => {
                Err(self.poison(io_error("fsync failed", &e)))
            }
            Err(e) => Err(Error::Unavailable(io_error("fsync failed", &e))),
        }
    }

    fn rotate(&mut self) -> Result<()> {
        self.sync()?;
        let next = self.file_id + 1;
        let file = self.files.create(next).map_err(|e| create_failed(&e))?;
        if let Err(e) = self.files.sync_dir() {
            return Err(self.poison(io_error("cannot sync the log dir", &e)));
        }
        self.closed.push((self.file_id, self.file_last_seq));
        self.file = file;
        self.file_id = next;
        self.file_bytes = 0;
        self.file_last_seq = 0;
        Ok(())
    }

    /// Deletes every segment whose entries are all at or below `seq`. The caller has made
    /// those entries durable in the store first.
    pub(crate) fn release(&mut self, seq: u64) -> Result<()> {
        if self.poisoned.is_none() && self.file_bytes > 0 && self.file_last_seq <= seq {
            self.rotate()?;
        }
        let files = Arc::clone(&self.files);
        let mut failure = None;
        let before = self.closed.len();
        self.closed.retain(|(id, last)| {
            if *last > seq || failure.is_some() {
                return true;
            }
            match files.remove(*id) {
                Ok(()) => false,
                Err(e) => {
                    failure = Some(io_error("cannot delete a segment", &e));
                    true
                }
            }
        });
        if self.closed.len() != before
            && let Err(e) = self.files.sync_dir()
        {
            failure.get_or_insert(io_error("cannot sync the log dir", &e));
        }
        match failure {
            Some(why) => Err(Error::Unavailable(why)),
            None => Ok(()),
        }
    }

    /// Makes a poisoned log good again once every entry at or below `seq` (all of them) is
    /// durable in the store: appends go to a fresh segment, and the old ones are released.
    pub(crate) fn heal(&mut self, seq: u64) -> Result<()> {
        if self.poisoned.is_none() {
            return self.release(seq);
        }
        let next = self.file_id + 1;
        let file = self.files.create(next).map_err(|e| create_failed(&e))?;
        self.files
            .sync_dir()
            .map_err(|e| Error::Unavailable(io_error("cannot sync the log dir", &e)))?;
        self.closed
            .push((self.file_id, self.file_last_seq.max(seq)));
        self.file = file;
        self.file_id = next;
        self.file_bytes = 0;
        self.file_last_seq = 0;
        self.poisoned = None;
        tracing::info!("write-ahead log healed: buffered points are stored, appends resume");
        self.release(seq)
    }
}

/// The frame at `pos`: (seq, payload, next position), or `None` at the end or a torn frame.
fn read_frame(bytes: &[u8], pos: usize) -> Option<(u64, &[u8], usize)> {
    let head = bytes.get(pos..pos.checked_add(16)?)?;
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    let seq = u64::from_le_bytes([
        head[8], head[9], head[10], head[11], head[12], head[13], head[14], head[15],
    ]);
    let payload = bytes.get(pos + 16..(pos + 16).checked_add(len)?)?;
    let mut h = crc32fast::Hasher::new();
    h.update(&seq.to_le_bytes());
    h.update(payload);
    (h.finalize() == crc).then_some((seq, payload, pos + 16 + len))
}

#[cfg(test)]
mod tests;
