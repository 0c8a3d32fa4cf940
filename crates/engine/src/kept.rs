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

/// One acknowledged batch of one table, kept until a sync covers it.
#[derive(Debug, Clone)]
struct Batch {
    /// Taken when the batch's write (or its latest re-write) returned.
    ticket: u64,
    table: String,
    rows: Arc<Vec<RowMutation>>,
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
        let writing = Writing::new(&self.writing);
        let failures = self.failures.load(Ordering::Acquire);
        for (table, rows) in &tables {
            self.inner.mutate_rows(table, rows)?;
        }
        let (overlapped, ticket) = {
            let mut kept = self.kept.lock();
            let ticket = kept.next_ticket;
            kept.next_ticket += 1;
            let mut added = 0;
            for (table, rows) in tables {
                let bytes = rows_bytes(&table, &rows);
                added += bytes;
                kept.batches.push_back(Batch {
                    ticket,
                    table,
                    rows: Arc::new(rows),
                    bytes,
                    written_ms: now_ms,
                });
            }
            self.bytes.fetch_add(added, Ordering::Relaxed);
            // A sync failed while this batch was being written: it may be in the pages
            // the kernel dropped.
            let overlapped = self.failures.load(Ordering::Acquire) != failures;
            if overlapped {
                kept.rewrite = true;
            }
            (overlapped, ticket)
        };
        drop(writing);
        if overlapped {
            self.rewrite_kept()?;
        }
        Ok(ticket)
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
            self.inner.mutate_rows(&b.table, &b.rows)?;
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
    /// embedded store's skips its row model), where the trait's default makes mutations.
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
        fn sync(&self) -> Result<()> {
            self.inner.sync()
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
