//! Histogram, rollup and pre-aggregate cells written straight to the store (RFC 0001,
//! "Points written straight to the store"): kept in memory from their acknowledgement until
//! a store sync covers them, and written again after a failed one.
//!
//! A raw point acknowledged without `sync` stays in the buffers until a flush has synced
//! the store, so a failed fsync cannot lose it while the process runs. These cells skip the
//! buffers: once written, they live in the store's journal (OS buffers) only, and after a
//! failed fsync the kernel may have dropped those pages and report the error once
//! ("fsyncgate"), so a later sync that succeeds says nothing about them. So each batch is
//! kept here until a sync that started after it was written succeeded; a failed sync marks
//! every kept batch to be written again, which happens before the next sync runs and
//! before the next batch is acknowledged.
//!
//! UID assignments are kept the same way ([`KeptStore::keep`]): a mapping the kernel dropped
//! would be lost by a power loss after a later sync that succeeded, and the log entries
//! naming its UID would name nothing (or, once the counter rolled back, another name). Their
//! cells were written by conditional writes (check-and-mutate, increment), so they are
//! written again as such: each mapping only while it still holds what was written, the
//! counter raised to at least the UID, never set back.
//!
//! [`KeptStore`] is the outermost store layer of a [`crate::Tsdb`]: every sync of the
//! database (a flush's, the UIDs', a request's) goes through it and so drops or re-writes
//! the kept batches. Syncs through it run one at a time. Its bytes count in the memory
//! budget (`tsd.storage.max_buffer_bytes`) with the buffered points. Requests waiting for
//! their cells to be synced share syncs ([`KeptStore::sync_through`], group commit).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use hourglass_storage::{
    Check, Mutation, ReadOptions, Result, Row, RowIter, RowMutation, ScanRequest, Store, TableSpec,
};
use parking_lot::Mutex;

use crate::group_commit::GroupCommit;

/// How long a sync waits for the writes under way to return, so it covers them too.
const GATHER: std::time::Duration = std::time::Duration::from_millis(1);

/// Counts a write under way while it lives.
struct Writing<'a>(&'a AtomicUsize);

impl<'a> Writing<'a> {
    fn new(count: &'a AtomicUsize) -> Writing<'a> {
        count.fetch_add(1, Ordering::AcqRel);
        Writing(count)
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A cell written by a conditional write, written again after a failed sync as what it
/// asserts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Asserted {
    pub key: Vec<u8>,
    /// One of the table's families (a constant of the schema).
    pub family: &'static str,
    pub qualifier: Vec<u8>,
    pub what: Assertion,
}

/// What an [`Asserted`] cell holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Assertion {
    /// These bytes: written again only while the cell still holds them (a later write, a
    /// rename's, is newer and its own).
    Holds(Vec<u8>),
    /// A counter (8 bytes, big-endian) at least this high: raised to it when below, else
    /// written again as it is, by a check-and-mutate on its current bytes, so a concurrent
    /// increment is never undone.
    AtLeast(i64),
}

/// How often a counter's raise is tried against concurrent increments before it fails.
const RAISE_ATTEMPTS: usize = 16;

/// What a kept batch writes again.
#[derive(Debug, Clone)]
enum Again {
    /// Its rows, as they were written.
    Rows(Arc<Vec<RowMutation>>),
    /// Cells of conditional writes, as they assert.
    Asserted(Arc<Vec<Asserted>>),
    /// Every cell of its table, as it is: UID mappings a previous process kept when a sync
    /// failed, and which it may not have written again before it stopped.
    Table,
}

/// One acknowledged batch of one table, kept until a sync covers it.
#[derive(Debug, Clone)]
struct Batch {
    /// Taken when the batch's write (or its latest re-write) returned.
    ticket: u64,
    table: String,
    again: Again,
    bytes: usize,
    /// When it was first written (ms on the writer's clock).
    written_ms: i64,
}

#[derive(Debug)]
struct Kept {
    /// The ticket of the next write.
    next_ticket: u64,
    batches: VecDeque<Batch>,
    /// A sync failed after some kept batch was written: every kept batch is written again
    /// before the next sync and before the next batch is acknowledged.
    rewrite: bool,
}

/// A write to be kept once it returned ([`KeptStore::start`], [`KeptStore::keep`]).
pub(crate) struct Started<'a> {
    _writing: Writing<'a>,
    /// Failed syncs when the write started: one failing meanwhile may have dropped it.
    failures: u64,
}

/// The store layer keeping straight-to-store cells; see the module docs.
pub(crate) struct KeptStore {
    inner: Arc<dyn Store>,
    kept: Mutex<Kept>,
    /// Bytes of the kept batches (read without the lock by admission checks).
    bytes: AtomicUsize,
    /// Failed syncs so far: a batch whose write overlapped one is written again.
    failures: AtomicU64,
    /// Syncs and re-writes run one at a time, holding this.
    syncing: Mutex<()>,
    commit: GroupCommit,
    /// Batches written again after a failed sync.
    rewrites: AtomicU64,
    /// Writes between their store write's start and their ticket.
    writing: AtomicUsize,
}

impl std::fmt::Debug for KeptStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptStore")
            .field("bytes", &self.bytes)
            .field("failures", &self.failures)
            .finish_non_exhaustive()
    }
}

/// Heap bytes of a batch's rows (keys, qualifiers, values, and a vector's worth per row).
fn rows_bytes(table: &str, rows: &[RowMutation]) -> usize {
    let per_row = std::mem::size_of::<RowMutation>() + std::mem::size_of::<Mutation>();
    table.len()
        + rows
            .iter()
            .map(|r| {
                per_row
                    + r.key.len()
                    + r.mutations
                        .iter()
                        .map(|m| match m {
                            Mutation::SetCell {
                                family,
                                qualifier,
                                value,
                                ..
                            } => family.len() + qualifier.len() + value.len(),
                            _ => 0,
                        })
                        .sum::<usize>()
            })
            .sum::<usize>()
}

/// Heap bytes of asserted cells.
fn asserted_bytes(table: &str, cells: &[Asserted]) -> usize {
    table.len()
        + cells
            .iter()
            .map(|c| {
                std::mem::size_of::<Asserted>()
                    + c.key.len()
                    + c.qualifier.len()
                    + match &c.what {
                        Assertion::Holds(v) => v.len(),
                        Assertion::AtLeast(_) => 0,
                    }
            })
            .sum::<usize>()
}

/// Writes `cell` of `table` again as it asserts (see [`Assertion`]).
fn assert_again(store: &dyn Store, table: &str, cell: &Asserted) -> Result<()> {
    let read = ReadOptions {
        families: Some(vec![cell.family.to_string()]),
        ..ReadOptions::default()
    };
    let check = |expected: Option<Vec<u8>>| Check {
        family: cell.family.to_string(),
        qualifier: cell.qualifier.clone(),
        expected,
    };
    let set = |value: Vec<u8>| [Mutation::set(cell.family, cell.qualifier.clone(), value)];
    match &cell.what {
        Assertion::Holds(value) => {
            store.check_and_mutate(
                table,
                &cell.key,
                &check(Some(value.clone())),
                &set(value.clone()),
            )?;
            Ok(())
        }
        Assertion::AtLeast(least) => {
            for _ in 0..RAISE_ATTEMPTS {
                let current = store.get(table, &cell.key, &read)?.and_then(|row| {
                    row.cells
                        .into_iter()
                        .find(|c| c.family == cell.family && c.qualifier == cell.qualifier)
                        .map(|c| c.value)
                });
                let now = match current.as_deref().map(<[u8; 8]>::try_from) {
                    None => 0,
                    Some(Ok(bytes)) => i64::from_be_bytes(bytes),
                    Some(Err(_)) => {
                        return Err(hourglass_storage::Error::Corrupt(format!(
                            "counter cell of {table} is not 8 bytes: {current:02x?}"
                        )));
                    }
                };
                let target = now.max(*least);
                if store.check_and_mutate(
                    table,
                    &cell.key,
                    &check(current),
                    &set(target.to_be_bytes().to_vec()),
                )? {
                    return Ok(());
                }
            }
            Err(hourglass_storage::Error::Unavailable(format!(
                "counter of {table} moved under {RAISE_ATTEMPTS} attempts to write it again"
            )))
        }
    }
}

impl KeptStore {
    pub(crate) fn new(inner: Arc<dyn Store>) -> KeptStore {
        KeptStore {
            inner,
            kept: Mutex::new(Kept {
                next_ticket: 1,
                batches: VecDeque::new(),
                rewrite: false,
            }),
            bytes: AtomicUsize::new(0),
            failures: AtomicU64::new(0),
            syncing: Mutex::new(()),
            commit: GroupCommit::default(),
            rewrites: AtomicU64::new(0),
            writing: AtomicUsize::new(0),
        }
    }

    /// Bytes held by kept batches.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Batches kept now.
    pub(crate) fn batches(&self) -> usize {
        self.kept.lock().batches.len()
    }

    /// Batches written again after failed syncs, since start.
    pub(crate) fn rewrites(&self) -> u64 {
        self.rewrites.load(Ordering::Relaxed)
    }

    /// The ticket of the last write.
    pub(crate) fn last_ticket(&self) -> u64 {
        self.kept.lock().next_ticket - 1
    }

    /// Whether kept batches wait for a sync: the oldest was written `interval_ms` ago or
    /// more, or a failed sync left them to be written again.
    pub(crate) fn needs_sync(&self, now_ms: i64, interval_ms: i64) -> bool {
        let kept = self.kept.lock();
        kept.rewrite
            || kept
                .batches
                .iter()
                .map(|b| b.written_ms)
                .min()
                .is_some_and(|t| now_ms - t >= interval_ms)
    }

    /// Writes the batches (one per table) and keeps them until a sync covers them; returns
    /// the write's ticket, for [`KeptStore::sync_through`]. Kept batches a failed sync left
    /// behind are written again first: nothing new is acknowledged before they are. A
    /// failed write fails the whole call (what it wrote stays unacknowledged).
    pub(crate) fn write(
        &self,
        tables: Vec<(String, Vec<RowMutation>)>,
        now_ms: i64,
    ) -> Result<u64> {
        self.rewrite_kept()?;
        let started = self.start();
        for (table, rows) in &tables {
            self.inner.mutate_rows(table, rows)?;
        }
        let batches = tables
            .into_iter()
            .map(|(table, rows)| {
                let bytes = rows_bytes(&table, &rows);
                (table, Again::Rows(Arc::new(rows)), bytes)
            })
            .collect();
        let (ticket, overlapped) = self.kept_after(started, batches, now_ms);
        if overlapped {
            self.rewrite_kept()?;
        }
        Ok(ticket)
    }

    /// Keeps every cell of `table` (the UID mappings a previous process left, at open)
    /// until a sync covers them, written again after a failed one like any kept batch, and
    /// before the next sync when `at_risk` (the previous process stopped without closing:
    /// a failed sync of its may have dropped some); returns the ticket a sync covering them
    /// must pass.
    pub(crate) fn recover_table(&self, table: &str, now_ms: i64, at_risk: bool) -> u64 {
        let mut kept = self.kept.lock();
        let ticket = kept.next_ticket;
        kept.next_ticket += 1;
        kept.batches.push_back(Batch {
            ticket,
            table: table.to_string(),
            again: Again::Table,
            bytes: 0,
            written_ms: now_ms,
        });
        if at_risk {
            kept.rewrite = true;
        }
        ticket
    }

    /// Marks the start of a write to be kept by [`KeptStore::keep`] once it returned.
    pub(crate) fn start(&self) -> Started<'_> {
        let writing = Writing::new(&self.writing);
        Started {
            _writing: writing,
            failures: self.failures.load(Ordering::Acquire),
        }
    }

    /// Keeps cells of `table` written by conditional writes since `started` (UID mappings
    /// and their counter) until a sync covers them, written again as they assert after a
    /// failed one; returns the ticket to pass to [`KeptStore::sync_through`]. When a sync
    /// failed meanwhile, they are written again before the next sync (which reports a
    /// failure to write them).
    pub(crate) fn keep(
        &self,
        started: Started<'_>,
        table: &str,
        cells: Vec<Asserted>,
        now_ms: i64,
    ) -> u64 {
        let bytes = asserted_bytes(table, &cells);
        let batch = (table.to_string(), Again::Asserted(Arc::new(cells)), bytes);
        self.kept_after(started, vec![batch], now_ms).0
    }

    /// Keeps batches whose write (started at `started`) returned: one ticket for all, and
    /// whether a sync failed meanwhile (they are to be written again).
    fn kept_after(
        &self,
        started: Started<'_>,
        batches: Vec<(String, Again, usize)>,
        now_ms: i64,
    ) -> (u64, bool) {
        let (overlapped, ticket) = {
            let mut kept = self.kept.lock();
            let ticket = kept.next_ticket;
            kept.next_ticket += 1;
            let mut added = 0;
            for (table, again, bytes) in batches {
                added += bytes;
                kept.batches.push_back(Batch {
                    ticket,
                    table,
                    again,
                    bytes,
                    written_ms: now_ms,
                });
            }
            self.bytes.fetch_add(added, Ordering::Relaxed);
            // A sync failed while this batch was being written: it may be in the pages
            // the kernel dropped.
            let overlapped = self.failures.load(Ordering::Acquire) != started.failures;
            if overlapped {
                kept.rewrite = true;
            }
            (overlapped, ticket)
        };
        drop(started);
        (ticket, overlapped)
    }

    /// Returns once a store sync that started after the write of `ticket` returned (or
    /// after the batch was last written again) has succeeded. Concurrent callers share one
    /// sync: it covers every write that returned before it started.
    pub(crate) fn sync_through(&self, ticket: u64) -> Result<()> {
        self.commit
            .sync_through(ticket, || self.sync_covering().map_err(Into::into))
            .map_err(|e| match e {
                crate::Error::Storage(e) => e,
                other => hourglass_storage::Error::Unavailable(other.to_string()),
            })
    }

    /// Writes again every kept batch when a failed sync asked for it.
    fn rewrite_kept(&self) -> Result<()> {
        if !self.kept.lock().rewrite {
            return Ok(());
        }
        let _one = self.syncing.lock();
        self.rewrite_locked()
    }

    /// [`KeptStore::rewrite_kept`] holding `syncing`.
    fn rewrite_locked(&self) -> Result<()> {
        let (batches, failures) = {
            let kept = self.kept.lock();
            if !kept.rewrite {
                return Ok(());
            }
            let batches: Vec<Batch> = kept.batches.iter().cloned().collect();
            (batches, self.failures.load(Ordering::Acquire))
        };
        // In write order: a later batch to the same cell stays the newer one.
        for b in &batches {
            match &b.again {
                Again::Rows(rows) => self.inner.mutate_rows(&b.table, rows)?,
                Again::Asserted(cells) => {
                    for cell in cells.iter() {
                        assert_again(self.inner.as_ref(), &b.table, cell)?;
                    }
                }
                Again::Table => self.write_table_again(&b.table)?,
            }
        }
        self.rewrites
            .fetch_add(batches.len() as u64, Ordering::Relaxed);
        let mut kept = self.kept.lock();
        // Syncs run under `syncing`, so none failed meanwhile; checked all the same.
        if self.failures.load(Ordering::Acquire) == failures {
            kept.rewrite = false;
            // Only a sync that starts after now covers what was written again.
            let ticket = kept.next_ticket;
            kept.next_ticket += 1;
            let rewritten = batches.len();
            for b in kept.batches.iter_mut().take(rewritten) {
                b.ticket = ticket;
            }
        }
        Ok(())
    }

    /// Writes every cell of `table` again as it is (its timestamps kept), merged into the
    /// rows as they are when written: safe beside concurrent writers, whose newer cells
    /// stay the newer versions.
    fn write_table_again(&self, table: &str) -> Result<()> {
        hourglass_storage::fallback::write_table_again(self.inner.as_ref(), table, false)
    }

    /// One sync of the store: kept batches a failed sync left are written again first;
    /// batches written before the sync started are dropped once it succeeded. Returns the
    /// last ticket it covered.
    fn sync_covering(&self) -> Result<u64> {
        let _one = self.syncing.lock();
        self.rewrite_locked()?;
        // Writes under way now are covered too when they return before the sync starts: a
        // store that holds writes off while it syncs (fjall's journal lock) lets the
        // writers held by the last sync through at once, and without this short wait each
        // of them would need a sync of its own.
        let deadline = std::time::Instant::now() + GATHER;
        while self.writing.load(Ordering::Acquire) > 0 && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        let through = self.last_ticket();
        match self.inner.sync() {
            Ok(()) => {
                let mut kept = self.kept.lock();
                if kept.rewrite {
                    // A batch whose write overlapped an earlier failed sync waits to be
                    // written again: this sync covers nothing new of the kept ones.
                    return Ok(self.commit.synced());
                }
                let mut freed = 0;
                kept.batches.retain(|b| {
                    let keep = b.ticket > through;
                    if !keep {
                        freed += b.bytes;
                    }
                    keep
                });
                self.bytes.fetch_sub(freed, Ordering::Relaxed);
                Ok(through)
            }
            Err(e) => {
                self.failures.fetch_add(1, Ordering::AcqRel);
                {
                    let mut kept = self.kept.lock();
                    if !kept.batches.is_empty() {
                        kept.rewrite = true;
                    }
                }
                // At once, so readers find them again if the kernel dropped them; when this
                // fails too, the next sync or write tries again.
                if let Err(again) = self.rewrite_locked() {
                    tracing::error!(error = %again, "histogram and rollup cells kept after a failed sync could not be written again; retried before the next sync");
                }
                Err(e)
            }
        }
    }
}

impl Store for KeptStore {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    fn is_shared(&self) -> bool {
        self.inner.is_shared()
    }

    fn create_table(&self, spec: &TableSpec) -> Result<()> {
        self.inner.create_table(spec)
    }

    fn table_exists(&self, table: &str) -> Result<bool> {
        self.inner.table_exists(table)
    }

    fn get(&self, table: &str, key: &[u8], read: &ReadOptions) -> Result<Option<Row>> {
        self.inner.get(table, key, read)
    }

    fn get_rows(
        &self,
        table: &str,
        keys: &[Vec<u8>],
        read: &ReadOptions,
    ) -> Result<Vec<Option<Row>>> {
        self.inner.get_rows(table, keys, read)
    }

    fn mutate_row(&self, table: &str, key: &[u8], mutations: &[Mutation]) -> Result<()> {
        self.inner.mutate_row(table, key, mutations)
    }

    fn mutate_rows(&self, table: &str, rows: &[RowMutation]) -> Result<()> {
        self.inner.mutate_rows(table, rows)
    }

    /// Handed to the inner store as such: its own way of writing one-cell rows (the
    /// embedded store's skips its row model), not the general one of mutations.
    fn put_cells(&self, table: &str, rows: &[hourglass_storage::CellRow<'_>]) -> Result<()> {
        self.inner.put_cells(table, rows)
    }

    fn scan(&self, table: &str, request: &ScanRequest) -> Result<RowIter> {
        self.inner.scan(table, request)
    }

    fn scan_cells(
        &self,
        table: &str,
        request: &ScanRequest,
        visit: hourglass_storage::CellVisitor<'_>,
    ) -> Result<()> {
        self.inner.scan_cells(table, request, visit)
    }

    fn scan_joint(
        &self,
        table: &str,
        request: &hourglass_storage::ScanRequest,
        visit: hourglass_storage::JointVisitor<'_>,
    ) -> hourglass_storage::Result<()> {
        self.inner.scan_joint(table, request, visit)
    }

    fn increment(
        &self,
        table: &str,
        key: &[u8],
        family: &str,
        qualifier: &[u8],
        delta: i64,
    ) -> Result<i64> {
        self.inner.increment(table, key, family, qualifier, delta)
    }

    fn increment_many(
        &self,
        table: &str,
        key: &[u8],
        increments: &[hourglass_storage::Increment],
    ) -> Result<Vec<i64>> {
        self.inner.increment_many(table, key, increments)
    }

    fn check_and_mutate(
        &self,
        table: &str,
        key: &[u8],
        check: &Check,
        mutations: &[Mutation],
    ) -> Result<bool> {
        self.inner.check_and_mutate(table, key, check, mutations)
    }

    fn check_and_mutate_rows(
        &self,
        table: &str,
        checks: &[hourglass_storage::RowCheck],
        rows: &[RowMutation],
    ) -> Result<Option<bool>> {
        self.inner.check_and_mutate_rows(table, checks, rows)
    }

    fn append(
        &self,
        table: &str,
        key: &[u8],
        family: &str,
        qualifier: &[u8],
        suffix: &[u8],
    ) -> Result<()> {
        self.inner.append(table, key, family, qualifier, suffix)
    }

    /// Every sync of the database: kept batches are written again first when a failed sync
    /// asked for it, dropped when this one covers them.
    fn sync(&self) -> Result<()> {
        let covered = self.sync_covering()?;
        self.commit.covered(covered);
        Ok(())
    }

    fn checkpoint(&self) -> Result<()> {
        self.inner.checkpoint()
    }

    fn make_table_durable(&self, table: &str) -> Result<()> {
        self.inner.make_table_durable(table)
    }

    fn maintain(&self, now_ms: i64) -> Result<()> {
        self.inner.maintain(now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hourglass_storage::memory::MemoryStore;
    use hourglass_storage::{CellRow, FamilySpec};

    /// A memory store telling its one-cell row writes from its mutations.
    #[derive(Debug, Default)]
    struct Recording {
        inner: MemoryStore,
        put_cells: AtomicUsize,
        mutate_rows: AtomicUsize,
    }

    impl Store for Recording {
        fn backend(&self) -> &'static str {
            self.inner.backend()
        }
        fn create_table(&self, spec: &TableSpec) -> Result<()> {
            self.inner.create_table(spec)
        }
        fn table_exists(&self, table: &str) -> Result<bool> {
            self.inner.table_exists(table)
        }
        fn get(&self, table: &str, key: &[u8], read: &ReadOptions) -> Result<Option<Row>> {
            self.inner.get(table, key, read)
        }
        fn get_rows(
            &self,
            table: &str,
            keys: &[Vec<u8>],
            read: &ReadOptions,
        ) -> Result<Vec<Option<Row>>> {
            self.inner.get_rows(table, keys, read)
        }
        fn mutate_row(&self, table: &str, key: &[u8], mutations: &[Mutation]) -> Result<()> {
            self.inner.mutate_row(table, key, mutations)
        }
        fn mutate_rows(&self, table: &str, rows: &[RowMutation]) -> Result<()> {
            self.mutate_rows.fetch_add(1, Ordering::SeqCst);
            self.inner.mutate_rows(table, rows)
        }
        fn put_cells(&self, table: &str, rows: &[CellRow<'_>]) -> Result<()> {
            self.put_cells.fetch_add(1, Ordering::SeqCst);
            self.inner.put_cells(table, rows)
        }
        fn scan(&self, table: &str, request: &ScanRequest) -> Result<RowIter> {
            self.inner.scan(table, request)
        }
        fn increment(
            &self,
            table: &str,
            key: &[u8],
            family: &str,
            qualifier: &[u8],
            delta: i64,
        ) -> Result<i64> {
            self.inner.increment(table, key, family, qualifier, delta)
        }
        fn check_and_mutate(
            &self,
            table: &str,
            key: &[u8],
            check: &Check,
            mutations: &[Mutation],
        ) -> Result<bool> {
            self.inner.check_and_mutate(table, key, check, mutations)
        }
        fn check_and_mutate_rows(
            &self,
            table: &str,
            checks: &[hourglass_storage::RowCheck],
            rows: &[RowMutation],
        ) -> Result<Option<bool>> {
            self.inner.check_and_mutate_rows(table, checks, rows)
        }
        fn sync(&self) -> Result<()> {
            self.inner.sync()
        }

        fn is_shared(&self) -> bool {
            self.inner.is_shared()
        }

        fn scan_cells(
            &self,
            table: &str,
            request: &hourglass_storage::ScanRequest,
            visit: hourglass_storage::CellVisitor<'_>,
        ) -> hourglass_storage::Result<()> {
            self.inner.scan_cells(table, request, visit)
        }
        fn scan_joint(
            &self,
            table: &str,
            request: &hourglass_storage::ScanRequest,
            visit: hourglass_storage::JointVisitor<'_>,
        ) -> hourglass_storage::Result<()> {
            self.inner.scan_joint(table, request, visit)
        }

        fn increment_many(
            &self,
            table: &str,
            key: &[u8],
            increments: &[hourglass_storage::Increment],
        ) -> hourglass_storage::Result<Vec<i64>> {
            self.inner.increment_many(table, key, increments)
        }

        fn append(
            &self,
            table: &str,
            key: &[u8],
            family: &str,
            qualifier: &[u8],
            suffix: &[u8],
        ) -> hourglass_storage::Result<()> {
            self.inner.append(table, key, family, qualifier, suffix)
        }

        fn checkpoint(&self) -> hourglass_storage::Result<()> {
            self.inner.checkpoint()
        }

        fn make_table_durable(&self, table: &str) -> hourglass_storage::Result<()> {
            self.inner.make_table_durable(table)
        }

        fn maintain(&self, now_ms: i64) -> hourglass_storage::Result<()> {
            self.inner.maintain(now_ms)
        }
    }

    /// One-cell rows reach the inner store as such, so the embedded store writes the tag
    /// index's entries its own cheaper way (the trait's default made them mutations).
    #[test]
    fn one_cell_rows_are_handed_on_as_such() {
        let inner = Arc::new(Recording::default());
        let kept = KeptStore::new(Arc::clone(&inner) as Arc<dyn Store>);
        kept.create_table(&TableSpec {
            name: "t".into(),
            families: vec![FamilySpec::new("f", Some(1))],
        })
        .unwrap();
        let row = CellRow {
            key: b"k",
            family: "f",
            qualifier: b"q",
            timestamp: 0,
            value: b"v",
        };
        kept.put_cells("t", &[row]).unwrap();
        assert_eq!(inner.put_cells.load(Ordering::SeqCst), 1);
        assert_eq!(inner.mutate_rows.load(Ordering::SeqCst), 0);
        let got = kept
            .get("t", b"k", &ReadOptions::latest())
            .unwrap()
            .unwrap();
        assert_eq!(got.value("f", b"q"), Some(&b"v"[..]));
    }
}
