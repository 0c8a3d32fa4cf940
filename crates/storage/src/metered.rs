//! A [`Store`] that counts the calls made to the store it wraps: calls by kind, calls in
//! flight, failures and the time spent, for a TSD's statistics (`tsd.storage.rpcs`, the
//! `/api/stats/region_clients` figures).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::{
    CellVisitor, Check, Mutation, ReadOptions, Result, Row, RowIter, RowMutation, ScanRequest,
    Store, TableSpec,
};

/// The kinds of store call counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Get,
    Put,
    Delete,
    Increment,
    CheckAndMutate,
    Append,
    Scan,
    Sync,
}

impl Call {
    pub const ALL: [Call; 8] = [
        Call::Get,
        Call::Put,
        Call::Delete,
        Call::Increment,
        Call::CheckAndMutate,
        Call::Append,
        Call::Scan,
        Call::Sync,
    ];

    /// Its name in statistics.
    pub fn name(self) -> &'static str {
        match self {
            Call::Get => "get",
            Call::Put => "put",
            Call::Delete => "delete",
            Call::Increment => "increment",
            Call::CheckAndMutate => "checkAndMutate",
            Call::Append => "append",
            Call::Scan => "scan",
            Call::Sync => "sync",
        }
    }
}

/// Counters of the calls made through a [`Metered`] store.
#[derive(Debug, Default)]
pub struct StoreStats {
    calls: [AtomicU64; 8],
    in_flight: AtomicU64,
    failed: AtomicU64,
    micros: AtomicU64,
}

impl StoreStats {
    /// Calls of one kind so far.
    pub fn calls(&self, call: Call) -> u64 {
        self.calls[call as usize].load(Ordering::Relaxed)
    }

    /// Calls of every kind so far.
    pub fn total_calls(&self) -> u64 {
        Call::ALL.iter().map(|c| self.calls(*c)).sum()
    }

    /// Calls started and not yet returned.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Calls that returned an error.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// Time spent in calls, in microseconds.
    pub fn micros(&self) -> u64 {
        self.micros.load(Ordering::Relaxed)
    }

    fn run<T>(&self, call: Call, f: impl FnOnce() -> Result<T>) -> Result<T> {
        self.calls[call as usize].fetch_add(1, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let out = f();
        self.micros
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        if out.is_err() {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
        out
    }
}

/// Wraps a store and counts the calls made to it; behaves exactly as the wrapped store.
#[derive(Debug)]
pub struct Metered {
    inner: Arc<dyn Store>,
    stats: Arc<StoreStats>,
}

impl Metered {
    pub fn new(inner: Arc<dyn Store>) -> Metered {
        Metered {
            inner,
            stats: Arc::default(),
        }
    }

    pub fn stats(&self) -> Arc<StoreStats> {
        Arc::clone(&self.stats)
    }
}

/// A batch of mutations counts as a delete when it only deletes.
fn kind_of(mutations: &[Mutation]) -> Call {
    let deletes = |m: &Mutation| !matches!(m, Mutation::SetCell { .. });
    if !mutations.is_empty() && mutations.iter().all(deletes) {
        Call::Delete
    } else {
        Call::Put
    }
}

impl Store for Metered {
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
        self.stats
            .run(Call::Get, || self.inner.get(table, key, read))
    }

    fn get_rows(
        &self,
        table: &str,
        keys: &[Vec<u8>],
        read: &ReadOptions,
    ) -> Result<Vec<Option<Row>>> {
        self.stats
            .run(Call::Get, || self.inner.get_rows(table, keys, read))
    }

    fn mutate_row(&self, table: &str, key: &[u8], mutations: &[Mutation]) -> Result<()> {
        self.stats.run(kind_of(mutations), || {
            self.inner.mutate_row(table, key, mutations)
        })
    }

    fn mutate_rows(&self, table: &str, rows: &[RowMutation]) -> Result<()> {
        let all: Vec<&Mutation> = rows.iter().flat_map(|r| &r.mutations).collect();
        let kind = if !all.is_empty() && all.iter().all(|m| !matches!(m, Mutation::SetCell { .. }))
        {
            Call::Delete
        } else {
            Call::Put
        };
        self.stats.run(kind, || self.inner.mutate_rows(table, rows))
    }

    fn put_cells(&self, table: &str, rows: &[crate::CellRow<'_>]) -> Result<()> {
        self.stats
            .run(Call::Put, || self.inner.put_cells(table, rows))
    }

    fn scan(&self, table: &str, request: &ScanRequest) -> Result<RowIter> {
        self.stats
            .run(Call::Scan, || self.inner.scan(table, request))
    }

    /// One scan call, timed with its visits; an error the visitor gave is not the store's
    /// failure.
    fn scan_cells(&self, table: &str, request: &ScanRequest, visit: CellVisitor<'_>) -> Result<()> {
        let visitor_failed = std::cell::Cell::new(false);
        let mut counted = |key: &[u8], cells: crate::LentCells<'_, '_>| {
            let r = visit(key, cells);
            visitor_failed.set(r.is_err());
            r
        };
        let out = self.stats.run(Call::Scan, || {
            match self.inner.scan_cells(table, request, &mut counted) {
                Err(e) if visitor_failed.get() => Ok(Err(e)),
                other => other.map(Ok),
            }
        });
        out?
    }

    /// One scan call, timed with its visits, as [`Store::scan_cells`].
    fn scan_joint(
        &self,
        table: &str,
        request: &ScanRequest,
        visit: crate::JointVisitor<'_>,
    ) -> Result<()> {
        let visitor_failed = std::cell::Cell::new(false);
        let mut counted = |item: crate::Scanned<'_>| {
            let r = visit(item);
            visitor_failed.set(r.is_err());
            r
        };
        let out = self.stats.run(Call::Scan, || {
            match self.inner.scan_joint(table, request, &mut counted) {
                Err(e) if visitor_failed.get() => Ok(Err(e)),
                other => other.map(Ok),
            }
        });
        out?
    }

    fn increment(
        &self,
        table: &str,
        key: &[u8],
        family: &str,
        qualifier: &[u8],
        delta: i64,
    ) -> Result<i64> {
        self.stats.run(Call::Increment, || {
            self.inner.increment(table, key, family, qualifier, delta)
        })
    }

    fn increment_many(
        &self,
        table: &str,
        key: &[u8],
        increments: &[crate::Increment],
    ) -> Result<Vec<i64>> {
        self.stats.run(Call::Increment, || {
            self.inner.increment_many(table, key, increments)
        })
    }

    fn check_and_mutate(
        &self,
        table: &str,
        key: &[u8],
        check: &Check,
        mutations: &[Mutation],
    ) -> Result<bool> {
        self.stats.run(Call::CheckAndMutate, || {
            self.inner.check_and_mutate(table, key, check, mutations)
        })
    }

    /// Counted as one check-and-mutate (the one write it is).
    fn check_and_mutate_rows(
        &self,
        table: &str,
        checks: &[crate::RowCheck],
        rows: &[RowMutation],
    ) -> Result<Option<bool>> {
        self.stats.run(Call::CheckAndMutate, || {
            self.inner.check_and_mutate_rows(table, checks, rows)
        })
    }

    fn append(
        &self,
        table: &str,
        key: &[u8],
        family: &str,
        qualifier: &[u8],
        suffix: &[u8],
    ) -> Result<()> {
        self.stats.run(Call::Append, || {
            self.inner.append(table, key, family, qualifier, suffix)
        })
    }

    fn sync(&self) -> Result<()> {
        self.stats.run(Call::Sync, || self.inner.sync())
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
    use crate::memory::MemoryStore;

    #[test]
    fn counts_calls_by_kind() {
        let m = Metered::new(Arc::new(MemoryStore::new()));
        let stats = m.stats();
        m.create_table(&TableSpec {
            name: "t".into(),
            families: vec![crate::FamilySpec::new("f", None)],
        })
        .unwrap();
        m.mutate_row("t", b"k", &[Mutation::set("f", b"q", b"v".to_vec())])
            .unwrap();
        m.get("t", b"k", &ReadOptions::default()).unwrap();
        m.get("t", b"k", &ReadOptions::default()).unwrap();
        m.increment("t", b"c", "f", b"n", 1).unwrap();
        assert_eq!(stats.calls(Call::Put), 1);
        assert_eq!(stats.calls(Call::Get), 2);
        assert_eq!(stats.calls(Call::Increment), 1);
        assert_eq!(stats.total_calls(), 4);
        assert_eq!(stats.in_flight(), 0);
        assert!(m.get("missing", b"k", &ReadOptions::default()).is_err());
        assert_eq!(stats.failed(), 1);
    }
}
