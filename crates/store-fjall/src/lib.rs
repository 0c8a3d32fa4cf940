//! The embedded backend: each table is a fjall keyspace; each row is one key whose value is
//! the row's cells ([`hourglass_storage::model::RowData`] encoding), so a row mutation is a
//! single atomic insert and a scan reads rows in key order.
//!
//! One process owns a data dir: a lock file (`LOCK`) is held while the store is open, and a
//! second process gets a "data dir in use" error. Every write reaches the journal in OS buffers
//! before it returns, so a killed process loses nothing it acknowledged; [`Store::sync`]
//! adds an fsync for power loss.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fjall::config::CompressionPolicy;
use fjall::{CompressionType, Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use hourglass_storage::model::{RowData, ScanFilter};
use hourglass_storage::{
    CellCodec, Check, Error, FamilySpec, Mutation, ReadOptions, Result, Row, RowIter, RowMutation,
    ScanRequest, SkipHint, Store, TableSpec, now_ms,
};
use parking_lot::{Mutex, RwLock};

const TABLES_KEYSPACE: &str = "_tables";
const TABLE_PREFIX: &str = "t:";
/// Batches of at least this many rows are written as a new table (bulk ingestion).
const INGEST_MIN_ROWS: usize = 256;

#[derive(Clone)]
struct Table {
    spec: Arc<TableSpec>,
    rows: Keyspace,
    codec: Option<Arc<dyn CellCodec>>,
}

/// The fjall database and its handles, replaced whole when the database is reopened.
struct Open {
    db: Database,
    catalog: Keyspace,
    tables: RwLock<HashMap<String, Table>>,
}

/// The embedded store.
///
/// fjall poisons its database when a journal write or sync fails (a full disk): every
/// later write is refused. Then the store reopens the database, recovering its journal,
/// once no operation is using it; meanwhile operations answer "unavailable" and the
/// write path keeps its points in its log and buffers until writes succeed again.
pub struct FjallStore {
    path: PathBuf,
    /// `None` only while a reopen failed (tried again on the next operation).
    open: RwLock<Option<Arc<Open>>>,
    codecs: RwLock<HashMap<String, Arc<dyn CellCodec>>>,
    /// Serializes read-modify-write of rows. Readers never take it.
    write_lock: Mutex<()>,
    /// fjall reported the database poisoned: reopen it before the next operation.
    poisoned: AtomicBool,
    /// When a reopen was last tried (attempts are spaced while the disk stays full).
    last_reopen: Mutex<Option<Instant>>,
    _lock_file: File,
}

/// Shortest time between two attempts to reopen a poisoned database.
const REOPEN_INTERVAL: Duration = Duration::from_millis(500);

impl std::fmt::Debug for FjallStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FjallStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn io_err(context: &str, e: impl std::fmt::Display) -> Error {
    Error::Internal(format!("{context}: {e}"))
}

impl FjallStore {
    /// Opens (creating if needed) the store in `dir`.
    pub fn open(dir: &Path) -> Result<FjallStore> {
        std::fs::create_dir_all(dir)
            .map_err(|e| io_err(&format!("cannot create data dir {}", dir.display()), e))?;
        let lock_path = dir.join("LOCK");
        let lock_file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| io_err(&format!("cannot open {}", lock_path.display()), e))?;
        match lock_file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::Unavailable(format!(
                    "data dir in use: {} is held by another process (stop it, or talk to it over HTTP)",
                    dir.display()
                )));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io_err("cannot lock data dir", e)),
        }
        let open = Self::open_db(dir, &HashMap::new())?;
        Ok(FjallStore {
            path: dir.to_path_buf(),
            open: RwLock::new(Some(Arc::new(open))),
            codecs: RwLock::new(HashMap::new()),
            write_lock: Mutex::new(()),
            poisoned: AtomicBool::new(false),
            last_reopen: Mutex::new(None),
            _lock_file: lock_file,
        })
    }

    /// Opens the database in `dir/store` (recovering its journal) and its tables.
    fn open_db(dir: &Path, codecs: &HashMap<String, Arc<dyn CellCodec>>) -> Result<Open> {
        let db = Database::builder(dir.join("store"))
            .open()
            .map_err(|e| io_err("cannot open embedded store", e))?;
        let catalog = db
            .keyspace(TABLES_KEYSPACE, KeyspaceCreateOptions::default)
            .map_err(|e| io_err("cannot open table catalog", e))?;
        let mut tables = HashMap::new();
        for guard in catalog.iter() {
            let (name, spec) = guard
                .into_inner()
                .map_err(|e| io_err("cannot read table catalog", e))?;
            let name = String::from_utf8(name.to_vec())
                .map_err(|_| Error::Corrupt("table name is not UTF-8".into()))?;
            let spec = decode_spec(&name, &spec)?;
            let rows = open_keyspace(&db, &name)?;
            tables.insert(
                name.clone(),
                Table {
                    spec: Arc::new(spec),
                    rows,
                    codec: codecs.get(&name).cloned(),
                },
            );
        }
        Ok(Open {
            db,
            catalog,
            tables: RwLock::new(tables),
        })
    }

    /// The open database, reopened first if fjall poisoned it.
    fn handle(&self) -> Result<Arc<Open>> {
        if !self.poisoned.load(Ordering::Acquire)
            && let Some(open) = self.open.read().as_ref()
        {
            return Ok(Arc::clone(open));
        }
        self.reopen()
    }

    /// The database for a read: a poisoned one still reads, so a read uses it while the
    /// reopen must wait for operations in flight.
    fn handle_for_read(&self) -> Result<Arc<Open>> {
        match self.handle() {
            Err(e) => match self.open.read().as_ref() {
                Some(open) => Ok(Arc::clone(open)),
                None => Err(e),
            },
            ok => ok,
        }
    }

    fn reopen(&self) -> Result<Arc<Open>> {
        let _w = self.write_lock.lock();
        let mut slot = self.open.write();
        if let Some(open) = slot.as_ref() {
            if !self.poisoned.load(Ordering::Acquire) {
                return Ok(Arc::clone(open));
            }
            if Arc::strong_count(open) > 1 {
                return Err(Error::Unavailable(
                    "embedded store: a write failed (disk full?); it reopens once the operations in flight finish".into(),
                ));
            }
        }
        {
            let mut last = self.last_reopen.lock();
            if last.is_some_and(|t| t.elapsed() < REOPEN_INTERVAL) {
                return Err(Error::Unavailable(
                    "embedded store: reopening after a failed write (disk full?)".into(),
                ));
            }
            *last = Some(Instant::now());
        }
        // Every handle of the poisoned database goes, releasing its directory lock.
        *slot = None;
        let open = Self::open_db(&self.path, &self.codecs.read()).map_err(|e| {
            Error::Unavailable(format!(
                "embedded store: reopening after a failed write failed: {e}"
            ))
        })?;
        let open = Arc::new(open);
        *slot = Some(Arc::clone(&open));
        self.poisoned.store(false, Ordering::Release);
        tracing::warn!("embedded store reopened after a failed write; its journal was recovered");
        Ok(open)
    }

    /// Runs a write; when it found the database poisoned, reopens it (if nothing else uses
    /// it) and runs the write once more. A poisoned write applied nothing, so the retry is safe.
    fn retrying<T>(&self, write: impl Fn() -> Result<T>) -> Result<T> {
        match write() {
            Err(e) if self.poisoned.load(Ordering::Acquire) => match self.reopen() {
                Ok(_) => write(),
                Err(_) => Err(e),
            },
            other => other,
        }
    }

    /// The error of a failed write; fjall's "poisoned" schedules a reopen.
    fn write_failed(&self, context: &str, e: fjall::Error) -> Error {
        if matches!(e, fjall::Error::Poisoned) {
            self.poisoned.store(true, Ordering::Release);
            return Error::Unavailable(format!("{context}: {e} (the store reopens itself)"));
        }
        io_err(context, e)
    }

    /// The open database and one of its tables.
    fn table(&self, name: &str) -> Result<(Arc<Open>, Table)> {
        Self::table_of(self.handle()?, name)
    }

    /// [`FjallStore::table`] for a read.
    fn table_for_read(&self, name: &str) -> Result<(Arc<Open>, Table)> {
        Self::table_of(self.handle_for_read()?, name)
    }

    fn table_of(open: Arc<Open>, name: &str) -> Result<(Arc<Open>, Table)> {
        let table = open
            .tables
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| Error::TableNotFound(name.to_string()))?;
        Ok((open, table))
    }

    fn load_row(table: &Table, key: &[u8]) -> Result<RowData> {
        match table.rows.get(key).map_err(|e| io_err("read failed", e))? {
            Some(bytes) => RowData::decode(&bytes, table.codec.as_deref()),
            None => Ok(RowData::default()),
        }
    }

    /// Stores the cells of `table` through `codec` from now on (reads decode either form).
    /// A data dir written with a codec must be opened with it.
    pub fn with_cell_codec(self, table: &str, codec: Arc<dyn CellCodec>) -> Self {
        self.codecs
            .write()
            .insert(table.to_string(), Arc::clone(&codec));
        if let Some(open) = self.open.read().as_ref()
            && let Some(t) = open.tables.write().get_mut(table)
        {
            t.codec = Some(codec);
        }
        self
    }

    /// Disk space used by the store's files, in bytes.
    pub fn disk_space(&self) -> u64 {
        self.handle()
            .map_or(0, |open| open.db.disk_space().unwrap_or(0))
    }

    /// Flushes memtables and compacts every table fully (for benchmarks and tools that
    /// measure the settled size on disk).
    pub fn major_compact(&self) -> Result<()> {
        let open = self.handle()?;
        let tables: Vec<Table> = open.tables.read().values().cloned().collect();
        for t in tables {
            t.rows
                .rotate_memtable_and_wait()
                .map_err(|e| io_err("flush failed", e))?;
            t.rows
                .major_compact()
                .map_err(|e| io_err("compaction failed", e))?;
        }
        Ok(())
    }
}

fn open_keyspace(db: &Database, table: &str) -> Result<Keyspace> {
    // LZ4 on every level: rows are written once and read many times.
    let options = || {
        KeyspaceCreateOptions::default()
            .data_block_compression_policy(CompressionPolicy::all(CompressionType::Lz4))
    };
    db.keyspace(&format!("{TABLE_PREFIX}{table}"), options)
        .map_err(|e| io_err(&format!("cannot open table {table}"), e))
}

/// Table spec in the catalog: `name:max_versions` per family, one per line (0 = unlimited).
fn encode_spec(spec: &TableSpec) -> Vec<u8> {
    spec.families
        .iter()
        .map(|f| format!("{}:{}\n", f.name, f.max_versions.unwrap_or(0)))
        .collect::<String>()
        .into_bytes()
}

fn decode_spec(name: &str, bytes: &[u8]) -> Result<TableSpec> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| Error::Corrupt(format!("table spec is not UTF-8. table={name}")))?;
    let families = text
        .lines()
        .map(|line| {
            let (family, versions) = line
                .rsplit_once(':')
                .ok_or_else(|| Error::Corrupt(format!("bad table spec. table={name}")))?;
            let versions: u32 = versions
                .parse()
                .map_err(|_| Error::Corrupt(format!("bad table spec. table={name}")))?;
            Ok(FamilySpec::new(family, (versions > 0).then_some(versions)))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(TableSpec {
        name: name.to_string(),
        families,
    })
}

/// Keys read past toward a skip hint's target before seeking there instead.
const READ_ON_BEFORE_SEEK: u32 = 8;

/// A range scan over one table; follows the request's skip hint by seeking when the next
/// possible match is further than a few keys away.
struct Scan {
    /// Keeps the database from being reopened under the scan.
    _open: Arc<Open>,
    rows: Keyspace,
    codec: Option<Arc<dyn CellCodec>>,
    keep_encoded: bool,
    filter: ScanFilter,
    skip: Option<SkipHint>,
    upper: Bound<Vec<u8>>,
    iter: fjall::Iter,
    /// Where the hint says the next match may be, and keys read since.
    target: Option<(Vec<u8>, u32)>,
    returned: usize,
}

impl Iterator for Scan {
    type Item = Result<Row>;

    fn next(&mut self) -> Option<Result<Row>> {
        loop {
            if self.filter.is_full(self.returned) {
                return None;
            }
            let (key, value) = match self.iter.next()?.into_inner() {
                Ok(kv) => kv,
                Err(e) => return Some(Err(io_err("scan failed", e))),
            };
            if let Some((target, read)) = &mut self.target {
                if key.as_ref() < target.as_slice() {
                    *read += 1;
                    if *read >= READ_ON_BEFORE_SEEK {
                        let from = Bound::Included(std::mem::take(target));
                        self.iter = self.rows.range::<Vec<u8>, _>((from, self.upper.clone()));
                        self.target = None;
                    }
                    continue;
                }
                self.target = None;
            }
            if !self.filter.key_matches(&key) {
                if let Some(skip) = &self.skip {
                    self.target = (skip.0)(&key)
                        .filter(|t| t.as_slice() > key.as_ref())
                        .map(|t| (t, 0));
                }
                continue;
            }
            let row = match RowData::decode_with(&value, self.codec.as_deref(), self.keep_encoded) {
                Ok(row) => row,
                Err(e) => return Some(Err(e)),
            };
            if let Some(out) = self.filter.accept(&key, &row) {
                self.returned += 1;
                return Some(Ok(out));
            }
        }
    }
}

/// The writes of [`Store`], run once (the trait's methods retry them after a reopen).
impl FjallStore {
    fn create_table_once(&self, spec: &TableSpec) -> Result<()> {
        let open = self.handle()?;
        let _w = self.write_lock.lock();
        let existing = open.tables.read().get(&spec.name).cloned();
        let mut merged = existing.as_ref().map_or_else(
            || TableSpec {
                name: spec.name.clone(),
                families: Vec::new(),
            },
            |t| (*t.spec).clone(),
        );
        for f in &spec.families {
            if !merged.families.iter().any(|have| have.name == f.name) {
                merged.families.push(f.clone());
            }
        }
        if existing.as_ref().is_some_and(|t| *t.spec == merged) {
            return Ok(());
        }
        let rows = match existing {
            Some(t) => t.rows,
            None => open_keyspace(&open.db, &spec.name)?,
        };
        open.catalog
            .insert(spec.name.as_bytes(), encode_spec(&merged))
            .map_err(|e| self.write_failed("cannot write table catalog", e))?;
        open.db
            .persist(PersistMode::SyncAll)
            .map_err(|e| self.write_failed("cannot sync", e))?;
        open.tables.write().insert(
            spec.name.clone(),
            Table {
                spec: Arc::new(merged),
                rows,
                codec: self.codecs.read().get(&spec.name).cloned(),
            },
        );
        Ok(())
    }

    fn mutate_rows_once(&self, table: &str, rows: &[RowMutation]) -> Result<()> {
        let (open, t) = self.table(table)?;
        let now = now_ms();
        let _w = self.write_lock.lock();
        // Rows repeated in one batch apply in order on the pending state.
        let mut pending: HashMap<&[u8], RowData> = HashMap::new();
        for r in rows {
            let row = match pending.remove(r.key.as_slice()) {
                Some(row) => row,
                None => Self::load_row(&t, &r.key)?,
            };
            let mut row = row;
            row.apply(&t.spec, &r.mutations, now)?;
            pending.insert(&r.key, row);
        }
        if pending.len() >= INGEST_MIN_ROWS {
            // Large batches (flushes of many rows) become a new table directly: no journal
            // copy, no memtable, no memtable flush. The table is registered atomically.
            let mut sorted: Vec<(&[u8], RowData)> = pending.into_iter().collect();
            sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
            let mut ingestion = t
                .rows
                .start_ingestion()
                .map_err(|e| self.write_failed("write failed", e))?;
            for (key, row) in sorted {
                if row.is_empty() {
                    ingestion.write_tombstone(key)
                } else {
                    ingestion.write(key, row.encode(t.codec.as_deref()))
                }
                .map_err(|e| self.write_failed("write failed", e))?;
            }
            return ingestion
                .finish()
                .map_err(|e| self.write_failed("write failed", e));
        }
        let mut batch = open.db.batch();
        for (key, row) in pending {
            if row.is_empty() {
                batch.remove(&t.rows, key);
            } else {
                batch.insert(&t.rows, key, row.encode(t.codec.as_deref()));
            }
        }
        batch
            .commit()
            .map_err(|e| self.write_failed("write failed", e))
    }

    fn increment_once(
        &self,
        table: &str,
        key: &[u8],
        family: &str,
        qualifier: &[u8],
        delta: i64,
    ) -> Result<i64> {
        let (_open, t) = self.table(table)?;
        let _w = self.write_lock.lock();
        let mut row = Self::load_row(&t, key)?;
        let v = row.increment(&t.spec, family, qualifier, delta, now_ms())?;
        t.rows
            .insert(key, row.encode(t.codec.as_deref()))
            .map_err(|e| self.write_failed("write failed", e))?;
        Ok(v)
    }

    fn check_and_mutate_once(
        &self,
        table: &str,
        key: &[u8],
        check: &Check,
        mutations: &[Mutation],
    ) -> Result<bool> {
        let (_open, t) = self.table(table)?;
        let _w = self.write_lock.lock();
        let mut row = Self::load_row(&t, key)?;
        if !row.check(check) {
            return Ok(false);
        }
        row.apply(&t.spec, mutations, now_ms())?;
        if row.is_empty() {
            t.rows
                .remove(key)
                .map_err(|e| self.write_failed("write failed", e))?;
        } else {
            t.rows
                .insert(key, row.encode(t.codec.as_deref()))
                .map_err(|e| self.write_failed("write failed", e))?;
        }
        Ok(true)
    }

    fn sync_once(&self) -> Result<()> {
        self.handle()?
            .db
            .persist(PersistMode::SyncData)
            .map_err(|e| self.write_failed("sync failed", e))
    }

    fn checkpoint_once(&self) -> Result<()> {
        let open = self.handle()?;
        let tables: Vec<Table> = open.tables.read().values().cloned().collect();
        for t in tables {
            t.rows
                .rotate_memtable_and_wait()
                .map_err(|e| self.write_failed("flush failed", e))?;
        }
        open.db
            .persist(PersistMode::SyncAll)
            .map_err(|e| self.write_failed("sync failed", e))
    }
}

impl Store for FjallStore {
    fn create_table(&self, spec: &TableSpec) -> Result<()> {
        self.retrying(|| self.create_table_once(spec))
    }

    fn mutate_rows(&self, table: &str, rows: &[RowMutation]) -> Result<()> {
        self.retrying(|| self.mutate_rows_once(table, rows))
    }

    fn increment(
        &self,
        table: &str,
        key: &[u8],
        family: &str,
        qualifier: &[u8],
        delta: i64,
    ) -> Result<i64> {
        self.retrying(|| self.increment_once(table, key, family, qualifier, delta))
    }

    fn check_and_mutate(
        &self,
        table: &str,
        key: &[u8],
        check: &Check,
        mutations: &[Mutation],
    ) -> Result<bool> {
        self.retrying(|| self.check_and_mutate_once(table, key, check, mutations))
    }

    fn sync(&self) -> Result<()> {
        self.retrying(|| self.sync_once())
    }

    fn checkpoint(&self) -> Result<()> {
        self.retrying(|| self.checkpoint_once())
    }

    fn backend(&self) -> &'static str {
        "embedded"
    }

    fn table_exists(&self, table: &str) -> Result<bool> {
        Ok(self.handle_for_read()?.tables.read().contains_key(table))
    }

    fn get(&self, table: &str, key: &[u8], read: &ReadOptions) -> Result<Option<Row>> {
        let (_open, t) = self.table_for_read(table)?;
        Ok(Self::load_row(&t, key)?.read(key, read))
    }

    fn mutate_row(&self, table: &str, key: &[u8], mutations: &[Mutation]) -> Result<()> {
        self.mutate_rows(
            table,
            &[RowMutation {
                key: key.to_vec(),
                mutations: mutations.to_vec(),
            }],
        )
    }

    fn scan(&self, table: &str, request: &ScanRequest) -> Result<RowIter> {
        let (open, t) = self.table_for_read(table)?;
        let filter = ScanFilter::new(request)?;
        let upper = match &request.end {
            Some(end) => Bound::Excluded(end.clone()),
            None => Bound::Unbounded,
        };
        let iter = t
            .rows
            .range::<Vec<u8>, _>((Bound::Included(request.start.clone()), upper.clone()));
        let rows = Scan {
            _open: open,
            codec: t.codec.clone(),
            rows: t.rows,
            keep_encoded: request.read.encoded_cells,
            filter,
            skip: request.skip.clone(),
            upper,
            iter,
            target: None,
            returned: 0,
        };
        // Stop pulling from the tree once the limit is reached.
        let limit = request.limit.unwrap_or(usize::MAX);
        Ok(Box::new(rows.take(limit)))
    }
}
