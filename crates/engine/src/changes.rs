//! What changed since a reader read: the bookkeeping that lets a TSD keep a query's answer
//! and serve it again while nothing it depends on has changed (the query cache).
//!
//! A reader registers a [`Watch`] over the `(metric, time range)` pairs its answer depends on
//! *before* it reads. Every change that makes points visible or removes them notes the
//! metric and time range it touched *after* it is applied; a note that overlaps a watch
//! marks it stale. Registrations and notes of stored rows take one mutex, so for any write
//! either the watch was registered first (the note marks it stale) or the note, and so the
//! write, came first (and the read, which follows the registration, sees the write). Points
//! made visible in the write buffer are ordered by the buffer's own lock instead: the writer
//! checks [`Changes::watching`] after the points are in, under the same lock a reader takes
//! after registering. A fresh watch thus means the answer read after it was registered is
//! still the answer.
//!
//! Only a TSD that alone writes its store can know every change: a shared store (Bigtable
//! with several TSDs) is written by others, so [`Tsdb`](crate::Tsdb) tracks changes only
//! over a store that is not shared.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use hourglass_core::schema::Schema;
use hourglass_storage::{
    Check, Mutation, ReadOptions, Result, Row, RowIter, RowMutation, ScanRequest, Store, TableSpec,
};
use parking_lot::Mutex;

/// One thing an answer depends on: the points of a metric (its UID bytes) with timestamps in
/// `lo_ms..hi_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependency {
    pub metric: Vec<u8>,
    pub lo_ms: i64,
    pub hi_ms: i64,
}

/// The watches of one TSD and the changes noted against them.
#[derive(Debug, Default)]
pub struct Changes {
    /// Watches registered and not yet dropped (a hint writers read without the lock).
    registered: AtomicUsize,
    inner: Mutex<Watches>,
    /// Bumped after each write of tag index trigram rows (`0x05`): trigram lists read at
    /// an older generation may be missing values.
    trigrams: AtomicU64,
    /// Bumped after each write of the tag index rows a query's or a lookup's candidates are
    /// found from (catalog, postings, value names and metrics, trigrams, status): candidates
    /// found at an older generation may be missing series.
    entries: AtomicU64,
}

#[derive(Debug, Default)]
struct Watches {
    next: u64,
    /// The live interests of each metric (by UID bytes).
    by_metric: HashMap<Box<[u8]>, Vec<Interest>>,
    watches: HashMap<u64, WatchState>,
}

#[derive(Debug, Clone, Copy)]
struct Interest {
    lo: i64,
    hi: i64,
    id: u64,
}

#[derive(Debug)]
struct WatchState {
    fresh: bool,
    metrics: Vec<Box<[u8]>>,
}

/// A registration: fresh until a change overlapping one of its dependencies is noted.
/// Dropping it unregisters it.
#[derive(Debug)]
pub struct Watch {
    changes: Arc<Changes>,
    id: u64,
}

impl Watch {
    /// Whether nothing it depends on has changed since it was registered.
    pub fn is_fresh(&self) -> bool {
        let w = self.changes.inner.lock();
        w.watches.get(&self.id).is_some_and(|s| s.fresh)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.changes.unwatch(self.id);
    }
}

impl Changes {
    /// Registers a watch over `deps`. Register before reading what the answer is made of.
    pub fn watch(self: &Arc<Self>, deps: &[Dependency]) -> Watch {
        let mut w = self.inner.lock();
        let id = w.next;
        w.next += 1;
        let mut metrics: Vec<Box<[u8]>> = Vec::new();
        for d in deps {
            let interest = Interest {
                lo: d.lo_ms,
                hi: d.hi_ms,
                id,
            };
            w.by_metric
                .entry(d.metric.as_slice().into())
                .or_default()
                .push(interest);
            if !metrics.iter().any(|m| **m == *d.metric) {
                metrics.push(d.metric.as_slice().into());
            }
        }
        w.watches.insert(
            id,
            WatchState {
                fresh: true,
                metrics,
            },
        );
        self.registered.fetch_add(1, Ordering::SeqCst);
        Watch {
            changes: Arc::clone(self),
            id,
        }
    }

    /// Watches registered now (stale ones included). Writers that order their changes by a
    /// lock readers also take after registering may skip noting when this is 0.
    pub fn watching(&self) -> usize {
        self.registered.load(Ordering::SeqCst)
    }

    fn unwatch(&self, id: u64) {
        let mut w = self.inner.lock();
        let Some(state) = w.watches.remove(&id) else {
            return;
        };
        for m in &state.metrics {
            if let Some(list) = w.by_metric.get_mut(m) {
                list.retain(|i| i.id != id);
                if list.is_empty() {
                    w.by_metric.remove(m);
                }
            }
        }
        self.registered.fetch_sub(1, Ordering::SeqCst);
    }

    /// Notes that points of `metric` with timestamps in `lo_ms..hi_ms` may have changed.
    pub fn note(&self, metric: &[u8], lo_ms: i64, hi_ms: i64) {
        self.note_with(|out| out.push((metric.to_vec(), lo_ms, hi_ms)));
    }

    /// Notes the changes `collect` lists, computed only when a watch is registered.
    pub(crate) fn note_with(&self, collect: impl FnOnce(&mut Vec<(Vec<u8>, i64, i64)>)) {
        let mut w = self.inner.lock();
        if w.watches.is_empty() {
            return;
        }
        let mut changed = Vec::new();
        collect(&mut changed);
        let Watches {
            by_metric, watches, ..
        } = &mut *w;
        for (metric, lo, hi) in &changed {
            let Some(list) = by_metric.get_mut(metric.as_slice()) else {
                continue;
            };
            list.retain(|i| {
                let overlaps = i.lo < *hi && *lo < i.hi;
                if overlaps && let Some(s) = watches.get_mut(&i.id) {
                    s.fresh = false;
                }
                !overlaps
            });
            if list.is_empty() {
                by_metric.remove(metric.as_slice());
            }
        }
    }

    /// The generation of the tag index's trigram rows: it changes after every write of one.
    pub(crate) fn trigram_generation(&self) -> u64 {
        self.trigrams.load(Ordering::SeqCst)
    }

    /// The generation of the tag index rows candidates are found from: it changes after
    /// every write of one (and with [`Changes::note_all`]).
    pub(crate) fn entries_generation(&self) -> u64 {
        self.entries.load(Ordering::SeqCst)
    }

    /// Notes a change every answer may depend on (a name renamed or deleted). The trigram
    /// and entry generations move too: what kept filters passed was checked by name.
    pub fn note_all(&self) {
        self.trigrams.fetch_add(1, Ordering::SeqCst);
        self.entries.fetch_add(1, Ordering::SeqCst);
        let mut w = self.inner.lock();
        w.by_metric.clear();
        for s in w.watches.values_mut() {
            s.fresh = false;
        }
    }
}

/// The tables whose rows hold points, with each one's row span (ms): the data table (one
/// hour) and the rollup and pre-aggregate tables (their interval's span).
#[derive(Debug, Clone)]
pub(crate) struct WatchedTables {
    pub(crate) schema: Schema,
    /// Table name and row span (ms).
    pub(crate) spans: Vec<(String, i64)>,
}

/// A [`Store`] that notes, after each write to a table of points, the metric and the time
/// its rows span; and notes everything after a name in the UID table is deleted (a rename
/// or a deletion of a name).
#[derive(Debug)]
pub(crate) struct Watched {
    inner: Arc<dyn Store>,
    tables: WatchedTables,
    changes: Arc<Changes>,
}

impl Watched {
    pub(crate) fn new(inner: Arc<dyn Store>, tables: WatchedTables, changes: Arc<Changes>) -> Self {
        Watched {
            inner,
            tables,
            changes,
        }
    }

    fn span_of(&self, table: &str) -> Option<i64> {
        self.tables
            .spans
            .iter()
            .find(|(t, _)| t == table)
            .map(|(_, s)| *s)
    }

    /// Notes the rows `keys` of `table` changed.
    fn noted<'k>(&self, table: &str, keys: impl Iterator<Item = &'k [u8]>) {
        if let Some(span) = self.span_of(table) {
            let schema = &self.tables.schema;
            let m0 = usize::from(schema.salt_width);
            let t0 = schema.timestamp_offset();
            let mut unknown = false;
            self.changes.note_with(|out| {
                for key in keys {
                    match key.get(m0..t0).zip(key.get(t0..t0 + 4)) {
                        Some((metric, base)) => {
                            let mut b = [0u8; 4];
                            b.copy_from_slice(base);
                            let lo = i64::from(u32::from_be_bytes(b)) * 1000;
                            match out.last_mut() {
                                Some((m, l, h)) if m.as_slice() == metric => {
                                    *l = (*l).min(lo);
                                    *h = (*h).max(lo + span);
                                }
                                _ => out.push((metric.to_vec(), lo, lo + span)),
                            }
                        }
                        // Not a row key of points: anything may have changed.
                        None => unknown = true,
                    }
                }
            });
            if unknown {
                self.changes.note_all();
            }
        }
    }

    /// Bumps the trigram generation after a write to the index table touching a trigram
    /// row, and the entry generation after one touching a row candidates are found from.
    fn index_change<'k>(&self, table: &str, keys: impl Iterator<Item = &'k [u8]>) {
        use crate::index::kind;
        if table != self.tables.schema.index_table {
            return;
        }
        let (mut trigrams, mut entries) = (false, false);
        for k in keys {
            match k.first().copied() {
                Some(kind::TRIGRAM) => (trigrams, entries) = (true, true),
                Some(
                    kind::STATUS
                    | kind::CATALOG
                    | kind::POSTING
                    | kind::VALUE_METRIC
                    | kind::VALUE_NAME
                    | kind::PERIOD_POSTING
                    | kind::PERIOD_VALUE_NAME,
                ) => entries = true,
                _ => {}
            }
            if trigrams {
                break;
            }
        }
        if trigrams {
            self.changes.trigrams.fetch_add(1, Ordering::SeqCst);
        }
        if entries {
            self.changes.entries.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn uid_change(&self, table: &str, mutations: &[Mutation]) {
        let deletes = mutations
            .iter()
            .any(|m| !matches!(m, Mutation::SetCell { .. }));
        if table == self.tables.schema.uid_table && deletes {
            self.changes.note_all();
        }
    }
}

impl Store for Watched {
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
        let r = self.inner.mutate_row(table, key, mutations);
        self.noted(table, std::iter::once(key));
        self.index_change(table, std::iter::once(key));
        self.uid_change(table, mutations);
        r
    }

    fn mutate_rows(&self, table: &str, rows: &[RowMutation]) -> Result<()> {
        let r = self.inner.mutate_rows(table, rows);
        self.noted(table, rows.iter().map(|r| r.key.as_slice()));
        self.index_change(table, rows.iter().map(|r| r.key.as_slice()));
        for row in rows {
            self.uid_change(table, &row.mutations);
        }
        r
    }

    fn put_cells(&self, table: &str, rows: &[hourglass_storage::CellRow<'_>]) -> Result<()> {
        let r = self.inner.put_cells(table, rows);
        self.noted(table, rows.iter().map(|r| r.key));
        self.index_change(table, rows.iter().map(|r| r.key));
        if !rows.is_empty() {
            // Each row is replaced whole: a delete.
            self.uid_change(table, &[Mutation::DeleteRow]);
        }
        r
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
        let r = self.inner.increment(table, key, family, qualifier, delta);
        self.noted(table, std::iter::once(key));
        r
    }

    fn increment_many(
        &self,
        table: &str,
        key: &[u8],
        increments: &[hourglass_storage::Increment],
    ) -> Result<Vec<i64>> {
        let r = self.inner.increment_many(table, key, increments);
        self.noted(table, std::iter::once(key));
        r
    }

    fn check_and_mutate(
        &self,
        table: &str,
        key: &[u8],
        check: &Check,
        mutations: &[Mutation],
    ) -> Result<bool> {
        let r = self.inner.check_and_mutate(table, key, check, mutations);
        self.noted(table, std::iter::once(key));
        self.index_change(table, std::iter::once(key));
        self.uid_change(table, mutations);
        r
    }

    fn check_and_mutate_rows(
        &self,
        table: &str,
        checks: &[hourglass_storage::RowCheck],
        rows: &[RowMutation],
    ) -> Result<Option<bool>> {
        let r = self.inner.check_and_mutate_rows(table, checks, rows);
        self.noted(table, rows.iter().map(|r| r.key.as_slice()));
        self.index_change(table, rows.iter().map(|r| r.key.as_slice()));
        for row in rows {
            self.uid_change(table, &row.mutations);
        }
        r
    }

    fn append(
        &self,
        table: &str,
        key: &[u8],
        family: &str,
        qualifier: &[u8],
        suffix: &[u8],
    ) -> Result<()> {
        let r = self.inner.append(table, key, family, qualifier, suffix);
        self.noted(table, std::iter::once(key));
        r
    }

    fn sync(&self) -> Result<()> {
        self.inner.sync()
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

    fn dep(m: u8, lo: i64, hi: i64) -> Dependency {
        Dependency {
            metric: vec![0, 0, m],
            lo_ms: lo,
            hi_ms: hi,
        }
    }

    #[test]
    fn a_note_stales_the_watches_it_overlaps_only() {
        let c = Arc::new(Changes::default());
        let a = c.watch(&[dep(1, 0, 100)]);
        let b = c.watch(&[dep(1, 100, 200)]);
        let other = c.watch(&[dep(2, 0, 200)]);
        c.note(&[0, 0, 1], 150, 160);
        assert!(a.is_fresh());
        assert!(!b.is_fresh());
        assert!(other.is_fresh());
        // The end of a range is exclusive on both sides.
        c.note(&[0, 0, 1], 100, 120);
        assert!(a.is_fresh());
        c.note(&[0, 0, 1], 99, 100);
        assert!(!a.is_fresh());
        assert!(other.is_fresh());
        c.note_all();
        assert!(!other.is_fresh());
    }

    #[test]
    fn dropped_watches_leave_nothing_behind() {
        let c = Arc::new(Changes::default());
        let a = c.watch(&[dep(1, 0, 100), dep(2, 0, 100), dep(1, 200, 300)]);
        assert_eq!(c.watching(), 1);
        drop(a);
        assert_eq!(c.watching(), 0);
        let w = c.inner.lock();
        assert!(w.by_metric.is_empty() && w.watches.is_empty());
    }

    #[test]
    fn a_watch_registered_after_a_note_is_fresh() {
        let c = Arc::new(Changes::default());
        c.note(&[0, 0, 1], 0, 100);
        let a = c.watch(&[dep(1, 0, 100)]);
        assert!(a.is_fresh());
    }

    #[test]
    fn writes_to_tables_of_points_stale_the_watches_of_their_rows() {
        let store: Arc<dyn Store> = Arc::new(hourglass_storage::memory::MemoryStore::default());
        let changes = Arc::new(Changes::default());
        let schema = Schema::default();
        let watched = Watched::new(
            store,
            WatchedTables {
                schema: schema.clone(),
                spans: vec![(schema.data_table.clone(), 3_600_000)],
            },
            Arc::clone(&changes),
        );
        let mut key = vec![0, 0, 1];
        key.extend_from_slice(&7200u32.to_be_bytes());
        key.extend_from_slice(&[0, 0, 1, 0, 0, 1]);
        let before = changes.watch(&[dep(1, 0, 7_200_000)]);
        let during = changes.watch(&[dep(1, 7_199_999, 7_200_001)]);
        let later = changes.watch(&[dep(1, 10_800_000, 20_000_000)]);
        let set = [Mutation::set("t", vec![0, 0], vec![1])];
        // Another table's rows change nothing watched.
        watched.mutate_row("tsdb-meta", &key, &set).ok();
        assert!(during.is_fresh());
        watched.mutate_row(&schema.data_table, &key, &set).ok();
        assert!(before.is_fresh(), "the row holds 2:00 to 3:00 only");
        assert!(!during.is_fresh());
        assert!(later.is_fresh());
        // A key too short to name a metric and hour changes every answer.
        let short = changes.watch(&[dep(9, 0, 1)]);
        watched.mutate_row(&schema.data_table, &[0, 0], &set).ok();
        assert!(!short.is_fresh() && !later.is_fresh());
        let later = changes.watch(&[dep(1, 10_800_000, 20_000_000)]);
        // A name deleted from the UID table changes every answer.
        let del = [Mutation::DeleteRow];
        watched.mutate_row(&schema.uid_table, b"name", &set).ok();
        assert!(later.is_fresh(), "a new name changes no answer");
        watched.mutate_row(&schema.uid_table, b"name", &del).ok();
        assert!(!later.is_fresh());
    }
}
