use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use hourglass_storage::Store;
use parking_lot::Mutex;

use crate::changes::{Changes, Watched, WatchedTables};
use crate::kept::KeptStore;
use crate::uid::UidRegistry;
use crate::wal::files::{DiskFiles, LogFiles, OpenError};
use crate::write::{BatchOutcome, IncomingPoint, WriteStats, Writer};
use crate::{Error, Result, Settings, tables, wal};

/// How long a graceful close keeps trying to flush while the store is unavailable.
const CLOSE_RETRY: Duration = Duration::from_secs(10);

/// A database: schema, UIDs and the write path over one store.
#[derive(Debug)]
pub struct Tsdb {
    store: Arc<dyn Store>,
    store_stats: Arc<hourglass_storage::metered::StoreStats>,
    /// Changes noted for answers kept between queries; tracked only when this TSD alone
    /// writes its store (`changes_tracked`).
    changes: Arc<Changes>,
    changes_tracked: bool,
    settings: Settings,
    uids: Arc<UidRegistry>,
    writer: Writer,
    /// Histogram and rollup cells acknowledged and not yet covered by a store sync (also
    /// `store`'s outermost layer).
    kept: Arc<KeptStore>,
    stop: AtomicBool,
    flusher: Mutex<Option<JoinHandle<()>>>,
    /// Computed rollups and retention (RFC 0008 phase 4), when configured.
    upkeep: Option<crate::rollup::compute::Upkeep>,
    upkeeper: Mutex<Option<JoinHandle<()>>>,
    /// Runs new series through the trees (`tsd.core.tree.enable_processing`).
    tree_worker: Mutex<Option<JoinHandle<()>>>,
    /// Tag index trigram lists read by queries, kept while no trigram row is written
    /// (only when this TSD alone writes its store).
    kept_lists: crate::index::select::KeptLists,
    /// Points held by running sub-queries, under one budget (0: none until the server
    /// sets `tsd.query.limits.memory_points.total`).
    query_memory: Arc<crate::query::memory::QueryMemory>,
}

impl Tsdb {
    /// Opens a database: creates missing tables, replays the write-ahead log (in
    /// `settings.wal_dir` when `settings.wal`) and flushes it.
    pub fn open(store: Arc<dyn Store>, settings: Settings) -> Result<Arc<Tsdb>> {
        let files = match (&settings.wal_dir, settings.wal) {
            (Some(dir), true) => {
                let files = DiskFiles::open(dir).map_err(|e| match e {
                    OpenError::InUse(dir) => Error::InvalidInput(format!(
                        "write-ahead log dir in use: {} belongs to another running TSD (give each TSD its own --data-dir)",
                        dir.display()
                    )),
                    OpenError::Io(e) => {
                        Error::Internal(format!("write-ahead log: cannot open the log dir: {e}"))
                    }
                })?;
                Some(Arc::new(files) as Arc<dyn LogFiles>)
            }
            _ => None,
        };
        Tsdb::open_with_log(store, settings, files)
    }

    /// [`Tsdb::open`] with the log in `files` (none: no log). Simulations pass a simulated
    /// file system here.
    pub fn open_with_log(
        store: Arc<dyn Store>,
        settings: Settings,
        files: Option<Arc<dyn LogFiles>>,
    ) -> Result<Arc<Tsdb>> {
        // Every call to the store is counted, for the TSD's statistics.
        let metered = hourglass_storage::metered::Metered::new(store);
        let store_stats = metered.stats();
        let store: Arc<dyn Store> = Arc::new(metered);
        // Every change to points is noted when no other process writes the store.
        let changes = Arc::new(Changes::default());
        let changes_tracked = !store.is_shared();
        let store: Arc<dyn Store> = if changes_tracked {
            Arc::new(Watched::new(
                store,
                watched_tables(&settings),
                Arc::clone(&changes),
            ))
        } else {
            store
        };
        // Outermost: every sync of the database goes through the layer keeping histogram and
        // rollup cells until a sync covers them.
        let kept = Arc::new(KeptStore::new(store));
        let store: Arc<dyn Store> = Arc::clone(&kept) as Arc<dyn Store>;
        // An unreachable store must not keep the TSD down: it starts, answers what it can and
        // reports storage errors until the store is back.
        let tables_ready = match prepare_store(store.as_ref(), &settings) {
            Err(e) if e.kind() == crate::ErrorKind::Unavailable => {
                tracing::error!(error = %e, "storage unreachable at start; tables not checked, retried at each flush");
                false
            }
            other => {
                other?;
                true
            }
        };
        if tables_ready {
            maintain(store.as_ref(), settings.clock.now_ms());
        }
        let uids = Arc::new(
            UidRegistry::new(Arc::clone(&store), settings.schema.clone())
                .with_cache_bounds(settings.uid_cache_names, settings.uid_cache_ids)
                .with_realtime_meta(settings.meta.realtime_uid)
                .with_random_metrics(settings.random_metrics)
                .with_kept(Arc::clone(&kept), settings.clock.clone()),
        );
        let (log, entries) = match &files {
            Some(files) => {
                let (log, entries) = wal::Log::open(Arc::clone(files), settings.wal_segment_bytes)?;
                (Some(log), entries)
            }
            None => (None, Vec::new()),
        };
        recover_uids(&kept, &uids, files.as_deref(), &settings)?;
        let writer = Writer::new(
            Arc::clone(&store),
            settings.clone(),
            Arc::clone(&uids),
            log,
            files,
            changes_tracked.then(|| Arc::clone(&changes)),
            Arc::clone(&kept),
        )?;
        if tables_ready {
            writer.set_tables_ready();
        }
        let replayed = writer.recover(&entries)?;
        if replayed > 0 {
            tracing::info!(points = replayed, "replayed the write-ahead log");
        }
        if (replayed > 0 || writer.flush_due())
            && let Err(e) = writer.flush()
        {
            tracing::error!(error = %e, "replayed points stay logged and buffered until the store takes them");
        }
        let upkeep = crate::rollup::compute::Upkeep::new(&settings);
        Ok(Arc::new(Tsdb {
            store,
            store_stats,
            changes,
            changes_tracked,
            settings,
            uids,
            writer,
            kept,
            stop: AtomicBool::new(false),
            flusher: Mutex::new(None),
            upkeep,
            upkeeper: Mutex::new(None),
            tree_worker: Mutex::new(None),
            kept_lists: crate::index::select::KeptLists::default(),
            query_memory: Arc::default(),
        }))
    }

    /// Starts the thread that flushes buffered rows when the flush interval or buffer
    /// size says so, and compacts rows whose hour has closed; with computed rollups or
    /// retention, the upkeep thread; with tree processing, the trees' thread.
    pub fn start_background(self: &Arc<Self>) {
        *self.flusher.lock() = self.spawn_periodic(
            "hourglass-flush",
            Duration::from_millis(100),
            "flush failed; points stay buffered and logged, retried with backoff",
            |db| {
                if db.writer.flush_due() {
                    db.writer.flush()?;
                } else {
                    db.writer.idle_upkeep();
                }
                Ok(())
            },
        );
        if let Some(upkeep) = &self.upkeep {
            *self.upkeeper.lock() = self.spawn_periodic(
                "hourglass-rollups",
                Duration::from_millis(upkeep.period_ms().max(1) as u64),
                "rollup computation or retention failed; retried at the next round",
                |db| db.upkeep_round(false).map(|_| ()),
            );
        }
        // New series go through the trees on a thread of their own, so a burst of new series
        // never holds back flushes.
        if self.writer.tree_queue().is_some() {
            *self.tree_worker.lock() = self.spawn_periodic(
                "hourglass-trees",
                Duration::from_millis(100),
                "tree processing of new series failed; retried",
                |db| db.process_new_series_trees().map(|_| ()),
            );
        }
    }

    /// A thread named `name` running `step` every `period` until the Tsdb is closed or
    /// dropped, logging a failed step with `failed` (the next period tries again).
    fn spawn_periodic(
        self: &Arc<Self>,
        name: &str,
        period: Duration,
        failed: &'static str,
        step: fn(&Tsdb) -> Result<()>,
    ) -> Option<std::thread::JoinHandle<()>> {
        let weak = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                loop {
                    std::thread::park_timeout(period);
                    let Some(db) = weak.upgrade() else { return };
                    if db.stopping() {
                        return;
                    }
                    if let Err(e) = step(&db) {
                        tracing::error!(error = %e, "{failed}");
                    }
                }
            });
        match spawned {
            Ok(h) => Some(h),
            Err(e) => {
                tracing::error!(error = %e, thread = name, "cannot start a background thread");
                None
            }
        }
    }

    /// Whether [`Tsdb::close`] was called.
    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    pub(crate) fn upkeep_state(&self) -> Option<&crate::rollup::compute::Upkeep> {
        self.upkeep.as_ref()
    }

    /// Runs the series whose TSMeta the writer created since the last call through every
    /// enabled tree (`tsd.core.tree.enable_processing`; RFC 0010). A background thread of
    /// its own calls it every tenth of a second; returns the series processed.
    pub fn process_new_series_trees(&self) -> Result<usize> {
        match self.writer.tree_queue() {
            Some(q) => crate::tree::process_queued(self, q),
            None => Ok(0),
        }
    }

    /// The changes noted to points and names, when this TSD alone writes its store (else
    /// `None`: another process may change what an answer holds unseen).
    pub fn changes(&self) -> Option<&Arc<Changes>> {
        self.changes_tracked.then_some(&self.changes)
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The budget of points every running sub-query holds together.
    pub fn query_memory(&self) -> &Arc<crate::query::memory::QueryMemory> {
        &self.query_memory
    }

    /// The trigram lists kept between queries and the trigram generation now, when this TSD
    /// alone writes its store (else every list is read from the store).
    pub(crate) fn trigram_lists(&self) -> Option<(&crate::index::select::KeptLists, u64)> {
        self.changes()
            .map(|c| (&self.kept_lists, c.trigram_generation()))
    }

    /// The tag index's lists kept between queries, with the entry generation (candidates).
    pub(crate) fn kept_candidates(&self) -> Option<(&crate::index::select::KeptLists, u64)> {
        self.changes()
            .map(|c| (&self.kept_lists, c.entries_generation()))
    }

    /// Counts of the calls made to the store.
    pub fn store_stats(&self) -> &hourglass_storage::metered::StoreStats {
        &self.store_stats
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

    /// Stores a batch of points; acknowledged points are in the write-ahead log. Past the
    /// buffers' memory budget the batch is refused whole (`throttled`).
    pub fn add_points(&self, points: &[IncomingPoint<'_>]) -> BatchOutcome {
        let outcome = self.writer.add_points(points);
        if self.writer.buffered_points() >= self.settings.max_buffered_points || outcome.throttled {
            if let Some(h) = self.flusher.lock().as_ref() {
                h.thread().unpark();
            } else if self.writer.flush_due()
                && let Err(e) = self.writer.flush()
            {
                tracing::error!(error = %e, "flush failed; points stay buffered and logged");
            }
        }
        outcome
    }

    /// Whether new batches are accepted now (buffered points are under their budget).
    pub fn has_room(&self) -> bool {
        self.writer.has_room()
    }

    /// Writes every buffered point to the data table now.
    pub fn flush(&self) -> Result<usize> {
        self.writer.flush()
    }

    /// Compacts the given data rows now (on demand), whatever their hour: each ends with one
    /// compacted cell, except rows whose duplicates `fix_duplicates` forbids resolving.
    /// Returns how many rows were rewritten.
    pub fn compact_rows(&self, keys: &[Vec<u8>]) -> Result<usize> {
        let mut flush = self.writer.lock_flushes();
        self.writer.flush_with(&mut flush)?;
        self.writer.compact_keys(keys)
    }

    /// Makes every point and cell acknowledged so far durable against power loss: the raw
    /// points as [`Tsdb::sync_points`] does, then the histogram and rollup cells (a store
    /// sync that started after their write, shared with concurrent callers, unless one
    /// already covered them).
    pub fn sync_writes(&self) -> Result<()> {
        let ticket = self.kept.last_ticket();
        self.sync_points()?;
        self.sync_cells(ticket)
    }

    /// Makes every raw point acknowledged so far durable against power loss and, when other
    /// TSDs share the store, visible to them: on a shared store the points are written to
    /// it; else the log is fsynced (one fsync shared by concurrent callers), or without a log
    /// the buffers are flushed and the store synced. UIDs the points use are synced first.
    pub fn sync_points(&self) -> Result<()> {
        let seq = self.writer.last_seq();
        if self.store.is_shared() {
            self.writer.flush_through(seq)
        } else {
            self.writer.sync_through(seq)
        }
    }

    /// Returns once the histogram or rollup cells of the write that returned `ticket`
    /// ([`crate::histogram::HistogramOutcome::ticket`],
    /// [`crate::rollup::RollupOutcome::ticket`]), and every write before it, are durable
    /// against power loss: covered by a store sync that started after the write returned.
    /// Concurrent callers share one sync (group commit).
    pub fn sync_cells(&self, ticket: u64) -> Result<()> {
        self.kept.sync_through(ticket).map_err(Into::into)
    }

    /// Writes straight-to-store cells (one batch per table) and keeps them until a store
    /// sync covers them ([`crate::kept`]); with `sync`, returns once one has. Refused
    /// whole, before any work, when buffered points and kept cells are over the memory
    /// budget (without a flush thread, a flush is tried first). Returns the write's ticket.
    pub(crate) fn write_cells(
        &self,
        tables: Vec<(String, Vec<hourglass_storage::RowMutation>)>,
        sync: bool,
    ) -> Result<u64> {
        if tables.is_empty() {
            return Ok(0);
        }
        if !self.writer.has_room() {
            // A flush syncs the store, which lets kept cells go: the flush thread's, or,
            // without one (tools such as `tsdb import`), one run here.
            if let Some(h) = self.flusher.lock().as_ref() {
                h.thread().unpark();
            } else if let Err(e) = self.writer.flush() {
                tracing::error!(error = %e, "flush failed; kept cells stay kept");
            }
        }
        if !self.writer.has_room() {
            self.writer
                .stats
                .batches_throttled
                .fetch_add(1, Ordering::Relaxed);
            return Err(Error::Throttled(format!(
                "Please throttle writes: buffered points and unsynced histogram and rollup cells are over their memory budget ({} bytes, tsd.storage.max_buffer_bytes) while the store catches up",
                self.settings.max_buffer_bytes
            )));
        }
        let ticket = self.kept.write(tables, self.settings.clock.now_ms())?;
        if sync {
            self.sync_cells(ticket)?;
        }
        Ok(ticket)
    }

    /// Histogram and rollup cells kept until a store sync covers them: (batches, bytes,
    /// batches written again after failed syncs since start).
    pub fn kept_cells(&self) -> (usize, usize, u64) {
        (self.kept.batches(), self.kept.bytes(), self.kept.rewrites())
    }

    /// Bytes held by points accepted but not yet in the store.
    pub fn buffered_bytes(&self) -> usize {
        self.writer.buffered_bytes()
    }

    /// Series in the write path's series cache (recently written ones; idle ones leave it,
    /// `tsd.storage.series_cache.idle_ms`).
    pub fn cached_series(&self) -> usize {
        self.writer.cached_series()
    }

    /// New series refused by `tsd.index.max_series_per_metric`, per metric since start,
    /// most first.
    pub fn series_refusals(&self) -> Vec<(String, u64)> {
        self.writer.series_refusals()
    }

    /// Why the write-ahead log refuses writes, when it does (it heals once buffered points
    /// are stored).
    pub fn log_poisoned(&self) -> Option<String> {
        self.writer.log_poisoned()
    }

    /// Whether the last flush failed to write to the store.
    pub fn store_failing(&self) -> bool {
        self.writer.store_failing()
    }

    pub fn buffered_points(&self) -> usize {
        self.writer.buffered_points()
    }

    /// Stops the flush thread, flushes, and syncs the store.
    pub fn close(&self) -> Result<()> {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.upkeeper.lock().take() {
            h.thread().unpark();
            if h.join().is_err() {
                tracing::error!("rollup thread panicked");
            }
        }
        if let Some(h) = self.flusher.lock().take() {
            h.thread().unpark();
            if h.join().is_err() {
                tracing::error!("flush thread panicked");
            }
        }
        if let Some(h) = self.tree_worker.lock().take() {
            h.thread().unpark();
            if h.join().is_err() {
                tracing::error!("tree processing thread panicked");
            }
        }
        // A store that is away for a moment (a reopen after a full disk, a network blip)
        // gets a few seconds; what cannot be stored stays in the log for the next start.
        let deadline = std::time::Instant::now() + CLOSE_RETRY;
        loop {
            match self.writer.flush() {
                Err(e)
                    if e.kind() == crate::ErrorKind::Unavailable
                        && std::time::Instant::now() < deadline =>
                {
                    tracing::warn!(error = %e, "final flush failed; trying again");
                    std::thread::sleep(Duration::from_millis(200));
                }
                other => {
                    other?;
                    break;
                }
            }
        }
        self.store.sync()?;
        self.store.checkpoint()?;
        // Everything is synced: the next process need not write the UID table again.
        if let Some(files) = self.writer.log_files() {
            files
                .write_named(UIDS_AT_RISK, &[])
                .map_err(|e| crate::Error::Internal(format!("cannot write {UIDS_AT_RISK}: {e}")))?;
        }
        Ok(())
    }
}

/// The file in the log directory saying whether the UID table may hold mappings a failed
/// store sync dropped (RFC 0001, "UIDs after a failed sync"): `0x02` while a process runs,
/// empty once it closed with everything synced. A process that finds `0x02` (its
/// predecessor stopped without closing: a crash, kill -9, a power loss) writes the UID
/// table again before its first sync.
pub(crate) const UIDS_AT_RISK: &str = "uids-at-risk";

/// [`UIDS_AT_RISK`] while a process runs.
const RUNNING: u8 = 2;

/// At open: the UID mappings a previous process left in the OS's buffers are kept (the
/// whole UID table, [`KeptStore::recover_table`]) until the first store sync covers them,
/// and the first batch of points waits for that sync: a failed sync before it would drop
/// them while this process builds on them. When the previous process stopped without
/// closing, a failed sync of its may already have dropped some (readable from the OS's
/// cache, lost by a power loss), so the table is written again before that sync. Then
/// [`UIDS_AT_RISK`] says a process runs.
fn recover_uids(
    kept: &KeptStore,
    uids: &UidRegistry,
    files: Option<&dyn LogFiles>,
    settings: &Settings,
) -> Result<()> {
    let file_error = |what: &str, e: std::io::Error| {
        crate::Error::Internal(format!("cannot {what} {UIDS_AT_RISK}: {e}"))
    };
    if kept.is_shared() {
        // A shared store's writes are durable when they return (its syncs never fail),
        // and other writers' assignments must not be written over.
        return Ok(());
    }
    let unclean = match files {
        Some(files) => files
            .read_named(UIDS_AT_RISK)
            .map_err(|e| file_error("read", e))?
            .is_some_and(|bytes| !bytes.is_empty()),
        None => false,
    };
    let table = &settings.schema.uid_table;
    // Written again here, before the database serves, each row whole; when the store
    // refuses now, before the first store sync instead (merged with what is written by
    // then).
    let deferred = unclean
        && match kept.make_table_durable(table) {
            Ok(()) => {
                // Expected after a crash, as a log replay is: not trouble.
                tracing::info!(
                    "the previous process stopped without closing: the UID table was written again"
                );
                false
            }
            Err(e) => {
                tracing::warn!(error = %e, "the previous process stopped without closing and the UID table cannot be written again now; it is before the first store sync");
                true
            }
        };
    uids.kept_through(kept.recover_table(table, settings.clock.now_ms(), deferred));
    if let Some(files) = files {
        files
            .write_named(UIDS_AT_RISK, &[RUNNING])
            .map_err(|e| file_error("write", e))?;
    }
    Ok(())
}

/// Creates the tables that are missing and brings the tag index's status in line with
/// `tsd.index.enable` (RFC 0007): what opening a database and a flush after an unreachable
/// start do before writing.
pub(crate) fn prepare_store(store: &dyn Store, settings: &Settings) -> Result<()> {
    tables::create_tables(store, &settings.schema, settings.rollups.as_deref())?;
    crate::index::status::open(
        store,
        &settings.schema,
        settings.index,
        settings.clock.now_ms(),
    )?;
    Ok(())
}

/// The store's upkeep ([`Store::maintain`]); a failure is logged and retried at the next
/// flush (it never fails a write: the rows are stored either way).
pub(crate) fn maintain(store: &dyn Store, now_ms: i64) {
    if let Err(e) = store.maintain(now_ms) {
        tracing::error!(error = %e, "storage upkeep failed; retried at the next flush");
    }
}

/// The tables whose rows hold points, with their row spans: the data table's hour, and each
/// rollup interval's tables with the interval's span.
fn watched_tables(settings: &Settings) -> WatchedTables {
    let mut spans = vec![(
        settings.schema.data_table.clone(),
        crate::cell_codec::HOUR_MS,
    )];
    if let Some(rollups) = &settings.rollups {
        for i in rollups.config.intervals() {
            let span = i64::from(i.interval_seconds) * i64::from(i.intervals) * 1000;
            for t in [&i.table, &i.pre_aggregation_table] {
                match spans.iter_mut().find(|(name, _)| name == t) {
                    Some((_, s)) => *s = (*s).max(span),
                    None => spans.push((t.clone(), span)),
                }
            }
        }
    }
    WatchedTables {
        schema: settings.schema.clone(),
        spans,
    }
}
