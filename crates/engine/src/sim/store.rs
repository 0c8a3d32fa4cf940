//! A store wrapper that fails operations as the fault plan says, and (over a memory store)
//! can lose what was not synced: a power loss. Failed batch writes apply a prefix of their rows first, and failed
//! increments and check-and-mutates may have been applied: a remote store's timeout leaves
//! the caller not knowing.

use std::sync::Arc;

use hourglass_storage::memory::MemoryStore;
use hourglass_storage::{
    Check, Error, Mutation, ReadOptions, Result, Row, RowCheck, RowIter, RowMutation, ScanRequest,
    Store, TableSpec,
};
use parking_lot::{Mutex, RwLock};

use super::Faults;

/// Where a [`Hook`] is called from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A batch write, before its rows are applied.
    BeforeWrite,
    /// A batch write, after its rows were applied.
    AfterWrite,
    /// A one-row read, after it read (before the caller sees the row).
    Get,
    /// A read of several rows by key (how many were asked), after it read.
    GetRows(usize),
    /// A sync, before it runs (a slow disk, deterministically).
    Sync,
}

/// Called in the middle of store operations (a query racing a flush, deterministically).
pub type Hook = Arc<dyn Fn(Op) + Send + Sync>;

/// Which cells a failed sync loses (`table`, `qualifier`): see [`FaultStore::set_fsyncgate`].
pub type Lossy = Arc<dyn Fn(&str, &[u8]) -> bool + Send + Sync>;

/// A cell: table, row key, family, qualifier.
type CellId = (String, Vec<u8>, String, Vec<u8>);

/// The fsyncgate model's state: cells written since the last sync, and cells a failed
/// sync lost.
#[derive(Default)]
struct Gate {
    lossy: Option<Lossy>,
    unsynced: std::collections::BTreeSet<CellId>,
    lost: std::collections::BTreeSet<CellId>,
}

impl Gate {
    /// A cell written: not synced, and no longer lost (its new bytes are in new pages).
    fn note(&mut self, (table, key, family, qualifier): (&str, &[u8], &str, &[u8])) {
        let id = (
            table.to_string(),
            key.to_vec(),
            family.to_string(),
            qualifier.to_vec(),
        );
        self.lost.remove(&id);
        self.unsynced.insert(id);
    }
}

/// The wrapper; see the module docs.
pub struct FaultStore {
    current: RwLock<Arc<dyn Store>>,
    /// The memory store behind `current`, when it is one (power loss needs it).
    memory: RwLock<Option<Arc<MemoryStore>>>,
    /// The state as of the last successful `sync`.
    synced: Mutex<Arc<MemoryStore>>,
    faults: Arc<Faults>,
    hook: Mutex<Option<Hook>>,
    gate: Mutex<Gate>,
    /// Every sync fails while set (a disk whose fsyncs report errors; other operations
    /// work).
    syncs_fail: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for FaultStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultStore").finish_non_exhaustive()
    }
}

/// A memory store returning the default data table in period order (series by series
/// within a UTC day), the weakest scan order a store may use.
fn period_ordered() -> MemoryStore {
    let schema = hourglass_core::schema::Schema::default();
    MemoryStore::new().with_period_order(&schema.data_table, schema.timestamp_offset(), 86_400)
}

fn injected(what: &str) -> Error {
    Error::Unavailable(format!("simulated fault: {what}"))
}

impl FaultStore {
    /// Over a fresh memory store (power losses can be simulated).
    pub fn new(faults: Arc<Faults>) -> FaultStore {
        let memory = Arc::new(period_ordered());
        FaultStore {
            current: RwLock::new(Arc::clone(&memory) as Arc<dyn Store>),
            memory: RwLock::new(Some(memory)),
            synced: Mutex::new(Arc::new(period_ordered())),
            faults,
            hook: Mutex::new(None),
            gate: Mutex::new(Gate::default()),
            syncs_fail: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Over any store (power losses cannot be simulated).
    pub fn over(inner: Arc<dyn Store>, faults: Arc<Faults>) -> FaultStore {
        FaultStore {
            current: RwLock::new(inner),
            memory: RwLock::new(None),
            synced: Mutex::new(Arc::new(MemoryStore::new())),
            faults,
            hook: Mutex::new(None),
            gate: Mutex::new(Gate::default()),
            syncs_fail: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Makes every sync fail while `failing` (other operations work).
    pub fn set_syncs_fail(&self, failing: bool) {
        self.syncs_fail
            .store(failing, std::sync::atomic::Ordering::SeqCst);
    }

    /// Runs `hook` at batch writes (before and after the rows are applied) and reads by key.
    pub fn set_hook(&self, hook: Option<Hook>) {
        *self.hook.lock() = hook;
    }

    /// Models "fsyncgate" for the cells `lossy` names: a failed sync may have dropped the
    /// dirty pages holding what was written since the last successful sync and reports
    /// the error once, so those cells (still readable from the OS's cache) are not made
    /// durable by a later sync that succeeds, until they are written again. Only over a
    /// memory store (what survives is what [`FaultStore::power_loss`] keeps).
    pub fn set_fsyncgate(&self, lossy: Option<Lossy>) {
        *self.gate.lock() = Gate {
            lossy,
            ..Gate::default()
        };
    }

    /// Notes the cells of applied rows for the fsyncgate model.
    fn note_written(&self, table: &str, rows: &[RowMutation]) {
        let mut gate = self.gate.lock();
        let Some(lossy) = gate.lossy.clone() else {
            return;
        };
        for row in rows {
            for m in &row.mutations {
                if let Mutation::SetCell {
                    family, qualifier, ..
                } = m
                    && lossy(table, qualifier)
                {
                    gate.note((table, &row.key, family, qualifier));
                }
            }
        }
    }

    /// Notes counter cells an increment wrote, for the fsyncgate model.
    fn note_counters<'a>(
        &self,
        table: &str,
        key: &[u8],
        cells: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    ) {
        let mut gate = self.gate.lock();
        let Some(lossy) = gate.lossy.clone() else {
            return;
        };
        for (family, qualifier) in cells {
            if lossy(table, qualifier) {
                gate.note((table, key, family, qualifier));
            }
        }
    }

    /// A check-and-mutate's writes (when it applied them), for the fsyncgate model.
    fn note_checked(&self, table: &str, key: &[u8], mutations: &[Mutation]) {
        self.note_written(
            table,
            &[RowMutation {
                key: key.to_vec(),
                mutations: mutations.to_vec(),
            }],
        );
    }

    /// The durable state after a successful sync: the store as it is, but the cells a failed
    /// sync lost as they were durable before.
    fn synced_state(&self, memory: &MemoryStore) -> Result<MemoryStore> {
        let next = memory.snapshot();
        let mut gate = self.gate.lock();
        gate.unsynced.clear();
        if gate.lost.is_empty() {
            return Ok(next);
        }
        let before = self.synced.lock().clone();
        for (table, key, family, qualifier) in &gate.lost {
            let old = before.get(
                table,
                key,
                &ReadOptions {
                    families: Some(vec![family.clone()]),
                    ..ReadOptions::default()
                },
            )?;
            let mut restore = vec![Mutation::DeleteCells {
                family: family.clone(),
                qualifier: qualifier.clone(),
                range: hourglass_storage::TimeRange::ALL,
            }];
            for c in old.iter().flat_map(|r| &r.cells) {
                if c.family == *family && c.qualifier == *qualifier {
                    restore.push(Mutation::SetCell {
                        family: family.clone(),
                        qualifier: qualifier.clone(),
                        timestamp: Some(c.timestamp),
                        value: c.value.clone(),
                    });
                }
            }
            next.mutate_row(table, key, &restore)?;
        }
        Ok(next)
    }

    /// A power loss: everything written since the last successful sync is gone. Only over
    /// a memory store; returns whether it happened.
    pub fn power_loss(&self) -> bool {
        if self.memory.read().is_none() {
            return false;
        }
        {
            let mut gate = self.gate.lock();
            gate.unsynced.clear();
            gate.lost.clear();
        }
        let synced = Arc::new(self.synced.lock().snapshot());
        *self.memory.write() = Some(Arc::clone(&synced));
        *self.current.write() = synced;
        true
    }

    fn inner(&self) -> Arc<dyn Store> {
        Arc::clone(&self.current.read())
    }

    fn check(&self, what: &str) -> Result<()> {
        if self.faults.store_down() || self.faults.fail() {
            return Err(injected(what));
        }
        Ok(())
    }

    fn run_hook(&self, op: Op) {
        let hook = self.hook.lock().clone();
        if let Some(hook) = hook {
            hook(op);
        }
    }
}

impl Store for FaultStore {
    fn backend(&self) -> &'static str {
        "simulated"
    }

    fn is_shared(&self) -> bool {
        self.inner().is_shared()
    }

    fn create_table(&self, spec: &TableSpec) -> Result<()> {
        self.check("create table")?;
        self.inner().create_table(spec)?;
        // Table creation is durable at once (as the embedded store syncs it).
        self.synced.lock().create_table(spec)
    }

    fn table_exists(&self, table: &str) -> Result<bool> {
        self.check("table exists")?;
        self.inner().table_exists(table)
    }

    fn get(&self, table: &str, key: &[u8], read: &ReadOptions) -> Result<Option<Row>> {
        self.check("get")?;
        let row = self.inner().get(table, key, read);
        self.run_hook(Op::Get);
        row
    }

    fn get_rows(
        &self,
        table: &str,
        keys: &[Vec<u8>],
        read: &ReadOptions,
    ) -> Result<Vec<Option<Row>>> {
        self.check("get rows")?;
        let rows = self.inner().get_rows(table, keys, read);
        self.run_hook(Op::GetRows(keys.len()));
        rows
    }

    fn mutate_row(&self, table: &str, key: &[u8], mutations: &[Mutation]) -> Result<()> {
        self.check("mutate row")?;
        self.inner().mutate_row(table, key, mutations)?;
        self.note_written(
            table,
            &[RowMutation {
                key: key.to_vec(),
                mutations: mutations.to_vec(),
            }],
        );
        Ok(())
    }

    fn mutate_rows(&self, table: &str, rows: &[RowMutation]) -> Result<()> {
        self.run_hook(Op::BeforeWrite);
        if self.faults.store_down() {
            return Err(injected("mutate rows"));
        }
        if self.faults.fail() {
            let applied = self.faults.below(rows.len() as u64 + 1) as usize;
            self.inner().mutate_rows(table, &rows[..applied])?;
            self.note_written(table, &rows[..applied]);
            return Err(injected("mutate rows (part of the batch applied)"));
        }
        self.inner().mutate_rows(table, rows)?;
        self.note_written(table, rows);
        self.run_hook(Op::AfterWrite);
        Ok(())
    }

    fn scan(&self, table: &str, request: &ScanRequest) -> Result<RowIter> {
        self.check("scan")?;
        self.inner().scan(table, request)
    }

    fn increment(
        &self,
        table: &str,
        key: &[u8],
        family: &str,
        qualifier: &[u8],
        delta: i64,
    ) -> Result<i64> {
        if self.faults.store_down() {
            return Err(injected("increment"));
        }
        if self.faults.fail() {
            if self.faults.below(2) == 0 {
                self.inner()
                    .increment(table, key, family, qualifier, delta)?;
                self.note_counters(table, key, [(family, qualifier)]);
            }
            return Err(injected("increment (outcome unknown)"));
        }
        let value = self
            .inner()
            .increment(table, key, family, qualifier, delta)?;
        self.note_counters(table, key, [(family, qualifier)]);
        Ok(value)
    }

    fn increment_many(
        &self,
        table: &str,
        key: &[u8],
        increments: &[hourglass_storage::Increment],
    ) -> Result<Vec<i64>> {
        if self.faults.store_down() {
            return Err(injected("increment many"));
        }
        if self.faults.fail() {
            // A remote store's timeout: none, some or all of the counters may have moved.
            let applied = self.faults.below(increments.len() as u64 + 1) as usize;
            self.inner()
                .increment_many(table, key, &increments[..applied])?;
            self.note_counters(
                table,
                key,
                increments[..applied]
                    .iter()
                    .map(|i| (i.family.as_str(), i.qualifier.as_slice())),
            );
            return Err(injected("increment many (outcome unknown)"));
        }
        let values = self.inner().increment_many(table, key, increments)?;
        self.note_counters(
            table,
            key,
            increments
                .iter()
                .map(|i| (i.family.as_str(), i.qualifier.as_slice())),
        );
        Ok(values)
    }

    fn check_and_mutate(
        &self,
        table: &str,
        key: &[u8],
        check: &Check,
        mutations: &[Mutation],
    ) -> Result<bool> {
        if self.faults.store_down() {
            return Err(injected("check and mutate"));
        }
        if self.faults.fail() {
            if self.faults.below(2) == 0
                && self
                    .inner()
                    .check_and_mutate(table, key, check, mutations)?
            {
                self.note_checked(table, key, mutations);
            }
            return Err(injected("check and mutate (outcome unknown)"));
        }
        let applied = self
            .inner()
            .check_and_mutate(table, key, check, mutations)?;
        if applied {
            self.note_checked(table, key, mutations);
        }
        Ok(applied)
    }

    /// One write of several rows, all or none of it: a fault fails it before or after it
    /// was applied whole (outcome unknown, as a check-and-mutate's).
    fn check_and_mutate_rows(
        &self,
        table: &str,
        checks: &[RowCheck],
        rows: &[RowMutation],
    ) -> Result<Option<bool>> {
        if self.faults.store_down() {
            return Err(injected("check and mutate rows"));
        }
        if self.faults.fail() {
            if self.faults.below(2) == 0
                && self.inner().check_and_mutate_rows(table, checks, rows)? == Some(true)
            {
                self.note_written(table, rows);
            }
            return Err(injected("check and mutate rows (outcome unknown)"));
        }
        let applied = self.inner().check_and_mutate_rows(table, checks, rows)?;
        if applied == Some(true) {
            self.note_written(table, rows);
        }
        Ok(applied)
    }

    fn sync(&self) -> Result<()> {
        self.run_hook(Op::Sync);
        let failing = self.syncs_fail.load(std::sync::atomic::Ordering::SeqCst);
        if let Err(e) = if failing {
            Err(injected("sync (the disk reports an fsync error)"))
        } else {
            self.check("sync")
        } {
            // The pages may be gone: what was written since the last sync is lost.
            let mut gate = self.gate.lock();
            let unsynced = std::mem::take(&mut gate.unsynced);
            gate.lost.extend(unsynced);
            return Err(e);
        }
        if let Some(memory) = self.memory.read().as_ref() {
            let synced = self.synced_state(memory)?;
            *self.synced.lock() = Arc::new(synced);
        }
        self.inner().sync()
    }

    fn maintain(&self, now_ms: i64) -> Result<()> {
        // No fault check: the seeds' fault schedules count the operations above only.
        self.inner().maintain(now_ms)
    }

    fn put_cells(
        &self,
        table: &str,
        rows: &[hourglass_storage::CellRow<'_>],
    ) -> hourglass_storage::Result<()> {
        // Through `mutate_rows`: its faults (a prefix applied) and the fsyncgate model.
        hourglass_storage::fallback::put_cells(self, table, rows)
    }

    fn scan_cells(
        &self,
        table: &str,
        request: &hourglass_storage::ScanRequest,
        visit: hourglass_storage::CellVisitor<'_>,
    ) -> hourglass_storage::Result<()> {
        // Through `scan` and its faults.
        hourglass_storage::fallback::scan_cells(self, table, request, visit)
    }

    fn scan_joint(
        &self,
        table: &str,
        request: &hourglass_storage::ScanRequest,
        visit: hourglass_storage::JointVisitor<'_>,
    ) -> hourglass_storage::Result<()> {
        // Through `scan` and its faults.
        hourglass_storage::fallback::scan_joint(self, table, request, visit)
    }

    fn append(
        &self,
        table: &str,
        key: &[u8],
        family: &str,
        qualifier: &[u8],
        suffix: &[u8],
    ) -> hourglass_storage::Result<()> {
        // Through `get` and `check_and_mutate` and their faults.
        hourglass_storage::fallback::append(self, table, key, family, qualifier, suffix)
    }

    fn checkpoint(&self) -> hourglass_storage::Result<()> {
        self.inner().checkpoint()
    }

    fn make_table_durable(&self, table: &str) -> hourglass_storage::Result<()> {
        // Through this store's own scan and writes, their faults and what a failed sync
        // drops.
        hourglass_storage::fallback::write_table_again(self, table, true)
    }
}
