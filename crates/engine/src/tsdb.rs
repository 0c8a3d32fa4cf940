use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use hourglass_storage::Store;
use parking_lot::Mutex;

use crate::uid::UidRegistry;
use crate::write::{BatchOutcome, IncomingPoint, WriteStats, Writer};
use crate::{Result, Settings, tables, wal};

/// A database: schema, UIDs and the write path over one store.
#[derive(Debug)]
pub struct Tsdb {
    store: Arc<dyn Store>,
    settings: Settings,
    uids: Arc<UidRegistry>,
    writer: Writer,
    stop: AtomicBool,
    flusher: Mutex<Option<JoinHandle<()>>>,
}

impl Tsdb {
    /// Opens a database: creates missing tables, replays the write-ahead log and flushes it.
    pub fn open(store: Arc<dyn Store>, settings: Settings) -> Result<Arc<Tsdb>> {
        // An unreachable store must not keep the TSD down: it starts, answers what it can and
        // reports storage errors until the store is back.
        match tables::create_tables(store.as_ref(), &settings.schema) {
            Err(e) if e.kind() == crate::ErrorKind::Unavailable => {
                tracing::error!(error = %e, "storage unreachable at start; tables not checked, retrying on use");
            }
            other => {
                other?;
            }
        }
        let uids = Arc::new(
            UidRegistry::new(Arc::clone(&store), settings.schema.clone())
                .with_realtime_meta(settings.meta.realtime_uid),
        );
        let (log, entries) = match (&settings.wal_dir, settings.wal) {
            (Some(dir), true) => {
                let (log, entries) = wal::Log::open(dir)?;
                (Some(log), entries)
            }
            _ => (None, Vec::new()),
        };
        let writer = Writer::new(Arc::clone(&store), settings.clone(), Arc::clone(&uids), log)?;
        let replayed = writer.recover(&entries)?;
        if replayed > 0 {
            tracing::info!(points = replayed, "replayed the write-ahead log");
            match writer.flush() {
                Err(e) if e.kind() == crate::ErrorKind::Unavailable => {
                    tracing::error!(error = %e, "storage unreachable: replayed points stay logged and buffered");
                }
                other => {
                    other?;
                }
            }
        }
        Ok(Arc::new(Tsdb {
            store,
            settings,
            uids,
            writer,
            stop: AtomicBool::new(false),
            flusher: Mutex::new(None),
        }))
    }

    /// Starts the thread that flushes buffered rows when the flush interval or buffer
    /// size says so, and compacts rows whose hour has closed.
    pub fn start_background(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let handle = std::thread::Builder::new()
            .name("hourglass-flush".into())
            .spawn(move || {
                loop {
                    std::thread::park_timeout(Duration::from_millis(100));
                    let Some(db) = weak.upgrade() else { return };
                    if db.stop.load(Ordering::Acquire) {
                        return;
                    }
                    if db.writer.flush_due()
                        && let Err(e) = db.writer.flush() {
                            tracing::error!(error = %e, "flush failed; points stay buffered and logged");
                        }
                }
            });
        match handle {
            Ok(h) => *self.flusher.lock() = Some(h),
            Err(e) => tracing::error!(error = %e, "cannot start the flush thread"),
        }
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn uids(&self) -> &UidRegistry {
        &self.uids
    }

    pub(crate) fn writer(&self) -> &Writer {
        &self.writer
    }

    pub fn write_stats(&self) -> &WriteStats {
        &self.writer.stats
    }

    /// Stores a batch of points; acknowledged points are in the write-ahead log.
    pub fn add_points(&self, points: &[IncomingPoint<'_>]) -> BatchOutcome {
        let outcome = self.writer.add_points(points);
        if self.writer.buffered_points() >= self.settings.max_buffered_points {
            if let Some(h) = self.flusher.lock().as_ref() {
                h.thread().unpark();
            } else if let Err(e) = self.writer.flush() {
                tracing::error!(error = %e, "flush failed; points stay buffered and logged");
            }
        }
        outcome
    }

    /// Writes every buffered point to the data table now.
    pub fn flush(&self) -> Result<usize> {
        self.writer.flush()
    }

    /// Compacts the given data rows now (on demand), whatever their hour: each ends with one
    /// compacted cell, except rows whose duplicates `fix_duplicates` forbids resolving.
    /// Returns how many rows were rewritten.
    pub fn compact_rows(&self, keys: &[Vec<u8>]) -> Result<usize> {
        self.writer.flush()?;
        self.writer.compact_keys(keys)
    }

    /// Makes every acknowledged point durable against power loss: fsyncs the log, or (with
    /// the log off) flushes the buffers to the data table and syncs it.
    pub fn sync_writes(&self) -> Result<()> {
        if self.writer.has_log() {
            self.writer.sync_log()
        } else {
            self.writer.flush()?;
            self.store.sync()?;
            Ok(())
        }
    }

    pub fn buffered_points(&self) -> usize {
        self.writer.buffered_points()
    }

    /// Stops the flush thread, flushes, and syncs the store.
    pub fn close(&self) -> Result<()> {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.flusher.lock().take() {
            h.thread().unpark();
            if h.join().is_err() {
                tracing::error!("flush thread panicked");
            }
        }
        self.writer.flush()?;
        self.store.sync()?;
        self.store.checkpoint()?;
        Ok(())
    }
}
