//! The embedded backend: each table is a fjall keyspace; each row is one key whose value is
//! the row's cells ([`hourglass_storage::model::RowData`] encoding), so a row mutation is a
//! single atomic insert and a scan reads rows in key order.
//!
//! One process owns a data dir: a lock file (`LOCK`) is held while the store is open, and a
//! second process gets a "data dir in use" error. Every write reaches the journal in OS buffers
//! before it returns, so a killed process loses nothing it acknowledged; [`Store::sync`]
//! adds an fsync for power loss.

mod groups;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fjall::config::{CompressionPolicy, PinningPolicy};
use fjall::{
    CompressionType, Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable, Snapshot,
};
use hourglass_storage::model::{self, RowData, ScanFilter, encode_joint_row};
use hourglass_storage::{
    Cell, CellCodec, CellForm, CellRef, CellRow, CellVisitor, Check, Error, FamilySpec,
    JointMember, JointVisitor, LentCells, LentGroup, Mutation, ReadOptions, Result, Row, RowCheck,
    RowIter, RowMutation, ScanRequest, Scanned, SeriesRow, SeriesRows, SkipHint, Store, TableSpec,
    now_ms,
};
use parking_lot::{Mutex, RwLock};

pub use groups::Grouping;
use groups::{
    JointScratch, Member, decode_group, decode_joint_members, encode_group, encode_rows_group,
    group_members, member_rows, row_members, stored_members,
};

const TABLES_KEYSPACE: &str = "_tables";
const TABLE_PREFIX: &str = "t:";
/// The keyspace of a grouped table's groups (RFC 0006).
const GROUP_PREFIX: &str = "g:";
/// The catalog line of a grouped table: `@grouped=<timestamp offset>,<period>,<grace>`.
const GROUPED_LINE: &str = "@grouped=";
/// The catalog line of a data table whose writers maintain the tag index (RFC 0007):
/// binaries without the index refuse the table, so none writes points without entries.
const INDEXED_LINE: &str = "@indexed=1";
/// Bytes of rows one grouping step moves under the write lock.
const GROUPING_STEP_BYTES: usize = 32 << 20;
/// A groups keyspace is merged whole once the group values replaced or removed since its
/// last merge reach 1/`RECLAIM_SHARE` of its files' bytes. A group is rewritten each time
/// a row of its closed period is (points loaded into past days: a member an hour), and
/// fjall merges its first level only after several runs, so until then the files of a
/// small store held every earlier version of its groups (1.5 times the live bytes after
/// loading a day into closed periods). Merging at an eighth bounds that to about 1.13 times,
/// at one rewrite of the keyspace per eighth of it superseded. The count is of values as
/// written, the files' bytes compressed, and versions replaced before their memtable was
/// flushed never reach a file: a count too high merges early, never too late.
const RECLAIM_SHARE: u64 = 8;
/// Groups keyspaces are merged so only up to this size: a merge rewrites the whole keyspace
/// (needing as much free disk), a close waits for one under way, and in a larger keyspace
/// the first level fjall has not merged yet is a small share of the files. The count does
/// not outlive the process: versions left at a close are left to fjall's own merges.
const RECLAIM_MAX_BYTES: u64 = 1 << 30;
/// Batches of at least this many rows are written as a new table (bulk ingestion).
const INGEST_MIN_ROWS: usize = 256;

#[derive(Clone)]
struct Table {
    spec: Arc<TableSpec>,
    rows: Keyspace,
    codec: Option<Arc<dyn CellCodec>>,
    groups: Option<Groups>,
    /// Its catalog entry carries [`INDEXED_LINE`].
    indexed: bool,
}

/// A grouped table's groups (RFC 0006).
#[derive(Clone)]
struct Groups {
    rows: Keyspace,
    grouping: Grouping,
    /// Periods ending at or before this (seconds) are grouped: writes to their rows go to
    /// their groups. 0 until the first grouping pass of this open.
    grouped_through: Arc<AtomicU64>,
    /// The last grouping pass that finished moved every row of periods ending at or
    /// before this into their groups.
    passed_through: Arc<AtomicU64>,
    /// Bytes of group values replaced or removed since this open or the keyspace's last
    /// whole merge: what its files may hold besides the live groups ([`RECLAIM_SHARE`]).
    superseded: Arc<AtomicU64>,
}

/// A group read during one call: the length of its stored value and its member rows.
struct CachedGroup {
    stored_len: usize,
    members: BTreeMap<u32, RowData>,
}

/// Groups read during one call, by group key (`None`: no such group).
type GroupCache = HashMap<Vec<u8>, Option<CachedGroup>, foldhash::fast::RandomState>;

/// A change to one member of a group: its offset and its new row (`None`: gone).
type MemberWrite = (u32, Option<RowData>);

/// A row as a write finds it: its cells, and whether the row keyspace holds it.
struct Loaded {
    row: RowData,
    in_rows: bool,
}

/// The fjall database and its handles, replaced whole when the database is reopened.
struct Open {
    db: Database,
    catalog: Keyspace,
    tables: RwLock<HashMap<String, Table>>,
}

/// What one keyspace holds ([`FjallStore::keyspace_bytes`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyspaceBytes {
    /// `_tables`, `t:<table>` or `g:<table>`.
    pub name: String,
    pub entries: u64,
    pub key_bytes: u64,
    pub value_bytes: u64,
    /// Its files on disk.
    pub disk_bytes: u64,
}

/// One group of a grouped table ([`FjallStore::visit_groups`]).
#[derive(Debug)]
pub struct StoredGroup<'a> {
    pub key: &'a [u8],
    /// The group value's length.
    pub value_len: usize,
    /// The joint members, in order, and the joint stream, when the group has any.
    pub joint: Option<(Vec<JointMember>, &'a [u8])>,
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
    /// Tables to group (RFC 0006), applied when each is created or bound.
    groupings: RwLock<HashMap<String, Grouping>>,
    /// Data tables whose catalog entry is to say the tag index is maintained (RFC 0007).
    indexed: RwLock<std::collections::HashSet<String>>,
    /// Tables whose keyspace, when created, merges its first level's files only once this
    /// many are there (fjall's default: 4).
    l0_thresholds: RwLock<HashMap<String, u8>>,
    /// Of each table whose first level is merged late: its first level's runs when last
    /// counted, and since when (ms) that count has not changed.
    idle_runs: Mutex<HashMap<String, (usize, i64)>>,
    /// The merge of an idle table's runs running in the background, if any (joined before
    /// the next, and when the store is dropped).
    merging: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Serializes read-modify-write of rows. Readers never take it.
    write_lock: Mutex<()>,
    /// fjall reported the database poisoned: reopen it before the next operation.
    poisoned: AtomicBool,
    /// When a reopen was last tried (attempts are spaced while the disk stays full).
    last_reopen: Mutex<Option<Instant>>,
    /// Held locked while the store is open; also tells the data dir this process opened
    /// from one put in its place.
    lock_file: File,
}

/// Shortest time between two attempts to reopen a poisoned database.
const REOPEN_INTERVAL: Duration = Duration::from_millis(500);

/// How long a memtable's flush is waited for before it counts as failed (a healthy flush of
/// fjall's largest memtable takes seconds; a failed one poisons the database at once).
const FLUSH_WAIT: Duration = Duration::from_secs(120);

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
            groupings: RwLock::new(HashMap::new()),
            indexed: RwLock::new(std::collections::HashSet::new()),
            l0_thresholds: RwLock::new(HashMap::new()),
            idle_runs: Mutex::new(HashMap::new()),
            merging: Mutex::new(None),
            write_lock: Mutex::new(()),
            poisoned: AtomicBool::new(false),
            last_reopen: Mutex::new(None),
            lock_file,
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
            let (spec, grouping, indexed) = decode_spec(&name, &spec)?;
            let rows = open_keyspace(&db, TABLE_PREFIX, &name)?;
            relieve_first_level(&rows, &name)?;
            let groups = grouping
                .map(|grouping| open_groups(&db, &name, grouping))
                .transpose()?;
            tables.insert(
                name.clone(),
                Table {
                    spec: Arc::new(spec),
                    rows,
                    codec: codecs.get(&name).cloned(),
                    groups,
                    indexed,
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
        // A data dir deleted or unmounted under the process is not reopened: that would
        // start an empty database where this one was, and build on it.
        self.check_dir_is_ours()?;
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

    /// Whether the data dir is still the one this process locked at open: its `LOCK` file
    /// the same file, its store directory there. A dir that is gone does not come back by
    /// waiting, so the error is not `Unavailable` (which callers retry): a stopping TSD
    /// gives up at once instead of retrying its final flush.
    fn check_dir_is_ours(&self) -> Result<()> {
        use std::os::unix::fs::MetadataExt;
        let gone = || {
            Error::Internal(format!(
                "embedded store: its data dir {} is gone (deleted or unmounted); not reopened, so as not to start an empty database in its place",
                self.path.display()
            ))
        };
        let held = self.lock_file.metadata().map_err(|_| gone())?;
        let there = std::fs::metadata(self.path.join("LOCK")).map_err(|_| gone())?;
        if (held.dev(), held.ino()) != (there.dev(), there.ino())
            || !self.path.join("store").is_dir()
        {
            return Err(gone());
        }
        Ok(())
    }

    /// Runs a write; when it found the database poisoned, reopens it (if nothing else uses
    /// it) and runs the write once more. A poisoned write applied nothing, so the retry is safe.
    fn retrying<T>(&self, write: impl Fn() -> Result<T>) -> Result<T> {
        match write() {
            Err(e) if self.poisoned.load(Ordering::Acquire) => {
                // Said rather than the write's own error: the reason it cannot be retried.
                self.check_dir_is_ours()?;
                match self.reopen() {
                    Ok(_) => write(),
                    Err(_) => Err(e),
                }
            }
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

    /// A row where it is: the row keyspace, else its group's member, else empty. Groups
    /// read are kept in `cache` for the other rows of the same call. Writers (under the
    /// write lock) read the latest state; readers pass a snapshot, so a grouping pass
    /// moving the row between its two lookups cannot hide it.
    fn load(
        table: &Table,
        key: &[u8],
        cache: &mut GroupCache,
        snapshot: Option<&Snapshot>,
    ) -> Result<Loaded> {
        let get = |keyspace: &Keyspace, key: &[u8]| match snapshot {
            Some(s) => s.get(keyspace, key),
            None => keyspace.get(key),
        };
        if let Some(bytes) = get(&table.rows, key).map_err(|e| io_err("read failed", e))? {
            return Ok(Loaded {
                row: RowData::decode(&bytes, table.codec.as_deref())?,
                in_rows: true,
            });
        }
        let mut row = RowData::default();
        if let Some(groups) = &table.groups
            && let Some((group_key, offset)) = groups.grouping.split(key)
        {
            // Without a codec a member is its row value: decoded alone, the group's other
            // members left as stored.
            if table.codec.is_none() {
                let value = get(&groups.rows, &group_key).map_err(|e| io_err("read failed", e))?;
                if let Some(value) = value {
                    for (at, member) in decode_group(&value)?.members {
                        match member {
                            Member::Row(bytes) if at == offset => {
                                row = RowData::decode(bytes, None)?;
                            }
                            Member::Row(_) => {}
                            Member::Joint { .. } => {
                                return Err(Error::Corrupt(
                                    "cell was stored with a codec this store was not given".into(),
                                ));
                            }
                        }
                    }
                }
                return Ok(Loaded {
                    row,
                    in_rows: false,
                });
            }
            if !cache.contains_key(&group_key) {
                let value = get(&groups.rows, &group_key).map_err(|e| io_err("read failed", e))?;
                let group = value
                    .map(|v| {
                        group_members(Some(&v), table.codec.as_deref()).map(|members| CachedGroup {
                            stored_len: v.len(),
                            members,
                        })
                    })
                    .transpose()?;
                cache.insert(group_key.clone(), group);
            }
            if let Some(Some(group)) = cache.get(&group_key)
                && let Some(member) = group.members.get(&offset)
            {
                row = member.clone();
            }
        }
        Ok(Loaded {
            row,
            in_rows: false,
        })
    }

    /// Groups the rows of `table` with `grouping` (RFC 0006) from now on: when the table is
    /// created, or at once if it exists. A data dir whose table is grouped stays grouped
    /// (its catalog says so), whatever later opens bind.
    pub fn with_grouping(self, table: &str, grouping: Grouping) -> Self {
        let grouping = Grouping {
            period_secs: grouping.period_secs.max(3600),
            ..grouping
        };
        self.groupings.write().insert(table.to_string(), grouping);
        self.rewrite_spec(table, "cannot switch grouping on");
        self
    }

    /// Writes an existing table's catalog entry again (with its grouping and marks as now
    /// set); a failure is logged with `what`.
    fn rewrite_spec(&self, table: &str, what: &str) {
        let exists = self
            .open
            .read()
            .as_ref()
            .is_some_and(|open| open.tables.read().contains_key(table));
        if exists {
            let spec = TableSpec {
                name: table.to_string(),
                families: Vec::new(),
            };
            if let Err(e) = self.create_table(&spec) {
                tracing::error!(table, error = %e, "{what}");
            }
        }
    }

    /// Marks `table`'s catalog entry `@indexed=1` (RFC 0007): when it is created, or at once
    /// if it exists. The mark stays; binaries that do not maintain the tag index refuse the
    /// data dir (`bad table spec`).
    pub fn with_indexed(self, table: &str) -> Self {
        self.indexed.write().insert(table.to_string());
        self.rewrite_spec(table, "cannot mark the table indexed");
        self
    }

    /// Creates `table`, when it does not exist yet, with a keyspace that merges the files of
    /// its first level only once `threshold` are there (fjall's default: 4). For a table
    /// whose large writes each become several files (the tag index: one file per kind of
    /// entry), merged at every such write with the default, each merge rewriting the files
    /// of the next level they overlap. Point reads check more files' bloom filters, and a
    /// scan merges more files, while that many are waiting.
    pub fn with_l0_threshold(self, table: &str, threshold: u8) -> Self {
        self.l0_thresholds
            .write()
            .insert(table.to_string(), threshold.clamp(1, MAX_L0_THRESHOLD));
        self
    }

    /// Whether `table`'s catalog entry says the tag index is maintained (`@indexed=1`).
    pub fn is_indexed(&self, table: &str) -> bool {
        self.open
            .read()
            .as_ref()
            .is_some_and(|open| open.tables.read().get(table).is_some_and(|t| t.indexed))
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

    /// Each keyspace's entries, key and value bytes and files on disk (the catalog, each
    /// table's rows and, for a grouped table, its groups), by name: what the store's own files
    /// (blocks, their compression, indexes, filters) add to what it holds. For tools and
    /// benchmarks: it reads every entry.
    pub fn keyspace_bytes(&self) -> Result<Vec<KeyspaceBytes>> {
        let open = self.handle_for_read()?;
        let mut keyspaces = vec![(TABLES_KEYSPACE.to_string(), open.catalog.clone())];
        let mut tables: Vec<(String, Table)> = open
            .tables
            .read()
            .iter()
            .map(|(n, t)| (n.clone(), t.clone()))
            .collect();
        tables.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, t) in tables {
            keyspaces.push((format!("{TABLE_PREFIX}{name}"), t.rows));
            if let Some(g) = t.groups {
                keyspaces.push((format!("{GROUP_PREFIX}{name}"), g.rows));
            }
        }
        let mut out = Vec::with_capacity(keyspaces.len());
        for (name, keyspace) in keyspaces {
            let mut bytes = KeyspaceBytes {
                name,
                disk_bytes: keyspace.disk_space(),
                ..KeyspaceBytes::default()
            };
            for guard in keyspace.iter() {
                let (k, v) = guard.into_inner().map_err(|e| io_err("read failed", e))?;
                bytes.entries += 1;
                bytes.key_bytes += k.len() as u64;
                bytes.value_bytes += v.len() as u64;
            }
            out.push(bytes);
        }
        Ok(out)
    }

    /// Calls `f` with every group of a grouped `table` (none for another table), in key
    /// order: its key, its value's length, and its joint members and stream if it has any.
    /// For tools that account for the store's bytes.
    pub fn visit_groups(&self, table: &str, f: &mut dyn FnMut(StoredGroup<'_>)) -> Result<()> {
        let (_open, t) = Self::table_of(self.handle_for_read()?, table)?;
        let Some(groups) = t.groups else {
            return Ok(());
        };
        for guard in groups.rows.iter() {
            let (key, value) = guard.into_inner().map_err(|e| io_err("read failed", e))?;
            let group = decode_group(&value)?;
            let joint = group.joint.map(|(_, stream)| {
                let members = group
                    .members
                    .iter()
                    .filter_map(|(offset, m)| match m {
                        Member::Joint { shape, .. } => Some(JointMember {
                            offset_secs: *offset,
                            shape: *shape,
                        }),
                        Member::Row(_) => None,
                    })
                    .collect();
                (members, stream)
            });
            f(StoredGroup {
                key: &key,
                value_len: value.len(),
                joint,
            });
        }
        Ok(())
    }

    /// Flushes a keyspace's memtable into a table and waits for it. Fails when the flush
    /// does: fjall's worker then poisons the database (a vanished data dir, a disk error),
    /// and the sealed memtable stays, so waiting for it to go would wait for ever.
    fn flush_memtable(&self, open: &Open, rows: &Keyspace) -> Result<()> {
        if !rows
            .rotate_memtable()
            .map_err(|e| self.write_failed("flush failed", e))?
        {
            return Ok(());
        }
        let deadline = Instant::now() + FLUSH_WAIT;
        while rows.sealed_memtable_count() > 0 {
            // A no-op on a healthy database, an error once a failed flush poisoned it.
            open.db
                .persist(PersistMode::Buffer)
                .map_err(|e| self.write_failed("flush failed", e))?;
            if Instant::now() >= deadline {
                return Err(Error::Unavailable(format!(
                    "flush failed: a memtable was not written within {} s",
                    FLUSH_WAIT.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
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
            for rows in std::iter::once(&t.rows).chain(t.groups.as_ref().map(|g| &g.rows)) {
                self.flush_memtable(&open, rows)?;
                rows.major_compact()
                    .map_err(|e| io_err("compaction failed", e))?;
            }
        }
        Ok(())
    }
}

fn open_keyspace(db: &Database, prefix: &str, table: &str) -> Result<Keyspace> {
    open_keyspace_with(db, prefix, table, None)
}

/// [`open_keyspace`], a keyspace created now merging its first level's files only once
/// `l0_threshold` are there (an existing keyspace keeps what it was created with).
fn open_keyspace_with(
    db: &Database,
    prefix: &str,
    table: &str,
    l0_threshold: Option<u8>,
) -> Result<Keyspace> {
    // LZ4 on every level: rows are written once and read many times. Bloom filters of
    // every level kept in memory (fjall keeps only the first level's): a table file's
    // filter is one block, read through the block cache otherwise, and the cache does not
    // admit a block over a tenth of its size (32 MiB / 8 shards x 0.8, with two cores), so once a table
    // of a few million keys (the tag index's, past a few hundred thousand series) was
    // merged below the first level, every point read of the keyspace read its whole
    // filter from the file and checksummed it: 3 ms a read at 300,000 series, 15 ms at
    // 1,000,000. Kept, a filter costs about 10 bits a key of memory.
    let options = || {
        let options = KeyspaceCreateOptions::default()
            .data_block_compression_policy(CompressionPolicy::all(CompressionType::Lz4))
            .filter_block_pinning_policy(PinningPolicy::all(true));
        match l0_threshold {
            Some(n) => options.compaction_strategy(Arc::new(
                fjall::compaction::Leveled::default().with_l0_threshold(n),
            )),
            None => options,
        }
    };
    db.keyspace(&format!("{prefix}{table}"), options)
        .map_err(|e| io_err(&format!("cannot open table {table}"), e))
}

/// fjall slows every write to a keyspace whose first level holds this many runs, and halts
/// them from 30 until its merges bring the level back under 30: a first level merged only
/// at more runs than that would halt writes for good (keyspaces of the tag index were made
/// with 32 once). Thresholds asked for are kept under it, and a first level that reaches it
/// is merged at open and at each upkeep.
const STALL_RUNS: usize = 20;

/// The highest first-level threshold a keyspace is made with (under [`STALL_RUNS`]).
const MAX_L0_THRESHOLD: u8 = 16;

/// Merges `rows` whole when its first level holds [`STALL_RUNS`] files or more.
fn relieve_first_level(rows: &Keyspace, table: &str) -> Result<()> {
    let files = rows.l0_table_count();
    if files < STALL_RUNS {
        return Ok(());
    }
    tracing::info!(table, files, "merging a first level at which writes stall");
    rows.major_compact()
        .map_err(|e| io_err(&format!("cannot merge table {table}"), e))
}

/// Runs of a late-merged first level from which an idle table's runs are merged.
const IDLE_MERGE_RUNS: usize = 4;
/// How long a late-merged first level's runs must stay unchanged before they are merged.
const IDLE_MERGE_AFTER_MS: i64 = 60_000;

impl Drop for FjallStore {
    /// A merge of idle runs holds the database open: it ends before the store is gone, so
    /// the directory is not opened again while it runs.
    fn drop(&mut self) {
        if let Some(merging) = self.merging.get_mut().take() {
            let _ = merging.join();
        }
    }
}

/// The smallest key after every key starting with `prefix` (`None`: there is none).
fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut next = prefix.to_vec();
    while let Some(last) = next.pop() {
        if last < 0xFF {
            next.push(last + 1);
            return Some(next);
        }
    }
    None
}

fn open_groups(db: &Database, table: &str, grouping: Grouping) -> Result<Groups> {
    Ok(Groups {
        rows: open_keyspace(db, GROUP_PREFIX, table)?,
        grouping,
        grouped_through: Arc::new(AtomicU64::new(0)),
        passed_through: Arc::new(AtomicU64::new(0)),
        superseded: Arc::new(AtomicU64::new(0)),
    })
}

/// Table spec in the catalog: `name:max_versions` per family, one per line (0 = unlimited),
/// then `@grouped=<timestamp offset>,<period>,<grace>` for a grouped table (a line older
/// binaries refuse, so they do not open a table whose closed periods they cannot read), then
/// `@indexed=1` for a data table whose writers maintain the tag index (RFC 0007).
fn encode_spec(spec: &TableSpec, grouping: Option<Grouping>, indexed: bool) -> Vec<u8> {
    let mut text: String = spec
        .families
        .iter()
        .map(|f| format!("{}:{}\n", f.name, f.max_versions.unwrap_or(0)))
        .collect();
    if let Some(g) = grouping {
        text.push_str(&format!(
            "{GROUPED_LINE}{},{},{}\n",
            g.timestamp_offset, g.period_secs, g.grace_secs
        ));
    }
    if indexed {
        text.push_str(INDEXED_LINE);
        text.push('\n');
    }
    text.into_bytes()
}

fn decode_grouping(name: &str, text: &str) -> Result<Grouping> {
    let bad = || Error::Corrupt(format!("bad table spec. table={name}"));
    let parts: Vec<u64> = text
        .split(',')
        .map(|p| p.parse().map_err(|_| bad()))
        .collect::<Result<_>>()?;
    match parts[..] {
        [offset, period, grace] if period >= 3600 && period <= u64::from(u32::MAX) => {
            Ok(Grouping {
                timestamp_offset: usize::try_from(offset).map_err(|_| bad())?,
                period_secs: period as u32,
                grace_secs: u32::try_from(grace).map_err(|_| bad())?,
            })
        }
        _ => Err(bad()),
    }
}

fn decode_spec(name: &str, bytes: &[u8]) -> Result<(TableSpec, Option<Grouping>, bool)> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| Error::Corrupt(format!("table spec is not UTF-8. table={name}")))?;
    let mut grouping = None;
    let mut indexed = false;
    let families = text
        .lines()
        .filter(|line| {
            if *line == INDEXED_LINE {
                indexed = true;
                return false;
            }
            match line.strip_prefix(GROUPED_LINE) {
                Some(g) => {
                    grouping = Some(decode_grouping(name, g));
                    false
                }
                None => true,
            }
        })
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
    let spec = TableSpec {
        name: name.to_string(),
        families,
    };
    Ok((spec, grouping.transpose()?, indexed))
}

/// A range of a keyspace, as of `snapshot` when given.
fn range_of(
    rows: &Keyspace,
    snapshot: Option<&Snapshot>,
    from: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
) -> Bounded {
    // fjall is asked for the range without its end, which is checked here instead: given an
    // end, lsm-tree seeks it within every data block it loads (it decodes the block's items
    // up to it, about 30,000 instructions a block of groups), where a scan stops at the first
    // key past the end anyway.
    let iter = match snapshot {
        Some(s) => s.range::<Vec<u8>, _>(rows, (from, Bound::Unbounded)),
        None => rows.range::<Vec<u8>, _>((from, Bound::Unbounded)),
    };
    Bounded {
        iter,
        upper,
        done: false,
    }
}

/// The keys and values of a range of a keyspace up to its end (see [`range_of`]).
struct Bounded {
    iter: fjall::Iter,
    upper: Bound<Vec<u8>>,
    /// A key past the end was read: nothing more is.
    done: bool,
}

impl Bounded {
    fn next(&mut self) -> Option<Result<(fjall::Slice, fjall::Slice)>> {
        if self.done {
            return None;
        }
        let (key, value) = match self.iter.next()?.into_inner() {
            Ok(kv) => kv,
            Err(e) => return Some(Err(io_err("scan failed", e))),
        };
        if past_end(&self.upper, &key) {
            self.done = true;
            return None;
        }
        Some(Ok((key, value)))
    }
}

/// `key` is past a range's end.
fn past_end(upper: &Bound<Vec<u8>>, key: &[u8]) -> bool {
    match upper {
        Bound::Excluded(end) => key >= end.as_slice(),
        Bound::Included(end) => key > end.as_slice(),
        Bound::Unbounded => false,
    }
}

/// Keys read past toward a skip hint's target before seeking there instead.
const READ_ON_BEFORE_SEEK: u32 = 8;
/// The same for groups, which hold a day of a series each: a group counts once and once
/// more for each data block its value fills ([`GROUP_BLOCK`]), so groups of a few points are
/// read past four at a time and groups a block or more in size are sought past at once.
const GROUPS_READ_ON_BEFORE_SEEK: u32 = 4;
/// The bytes of a data block of the groups keyspace (lsm-tree's default, 4 KiB): reading
/// past a group this large or larger loads a block of its own.
const GROUP_BLOCK: usize = 4096;

/// Whole data blocks a group's value fills ([`GROUP_BLOCK`]).
fn blocks_of(value: &[u8]) -> u32 {
    u32::try_from(value.len() / GROUP_BLOCK).unwrap_or(u32::MAX)
}

/// The keys and values of a range whose keys pass a scan's regex; follows the request's
/// skip hint by seeking when the next possible match is further than a few keys away.
struct RawRows {
    rows: Keyspace,
    /// Reads (and seeks) through this snapshot when set.
    snapshot: Option<Snapshot>,
    skip: Option<SkipHint>,
    upper: Bound<Vec<u8>>,
    iter: Bounded,
    /// Where the hint says the next match may be, and keys read since.
    target: Option<(Vec<u8>, u32)>,
}

impl RawRows {
    fn new(
        rows: Keyspace,
        snapshot: Option<Snapshot>,
        start: Vec<u8>,
        upper: Bound<Vec<u8>>,
        skip: Option<SkipHint>,
    ) -> Self {
        let iter = range_of(
            &rows,
            snapshot.as_ref(),
            Bound::Included(start),
            upper.clone(),
        );
        RawRows {
            rows,
            snapshot,
            skip,
            upper,
            iter,
            target: None,
        }
    }

    fn next(&mut self, filter: &ScanFilter) -> Option<Result<(fjall::Slice, fjall::Slice)>> {
        loop {
            let (key, value) = match self.iter.next()? {
                Ok(kv) => kv,
                Err(e) => return Some(Err(e)),
            };
            if let Some((target, read)) = &mut self.target {
                if key.as_ref() < target.as_slice() {
                    *read += 1;
                    if *read >= READ_ON_BEFORE_SEEK {
                        let target = std::mem::take(target);
                        self.target = None;
                        // Past the end: nothing left, no iterator built to find nothing.
                        if past_end(&self.upper, &target) {
                            self.iter.done = true;
                            return None;
                        }
                        let from = Bound::Included(target);
                        self.iter =
                            range_of(&self.rows, self.snapshot.as_ref(), from, self.upper.clone());
                    }
                    continue;
                }
                self.target = None;
            }
            if !filter.key_matches(&key) {
                if let Some(skip) = &self.skip {
                    self.target = (skip.0)(&key)
                        .filter(|t| t.as_slice() > key.as_ref())
                        .map(|t| (t, 0));
                }
                continue;
            }
            return Some(Ok((key, value)));
        }
    }
}

/// An empty vector keeping `v`'s allocation, for things borrowed from another value.
fn reuse_vec<T, U>(mut v: Vec<T>) -> Vec<U> {
    v.clear();
    // Collecting a vector's own iterator into a vector of the same layout reuses its buffer;
    // the filter changes the element type (or only its lifetime), which `filter` cannot.
    #[allow(clippy::unnecessary_filter_map)]
    v.into_iter().filter_map(|_| None).collect()
}

/// Buffers [`GroupedScan::lend_series`] keeps from group to group.
#[derive(Default)]
struct SeriesScratch {
    key: Vec<u8>,
    bases: Vec<u32>,
    members: Vec<(u32, &'static [u8])>,
    stored: Vec<&'static [u8]>,
    cells: Vec<(model::ColumnCells<'static>, bool)>,
    rows: Vec<SeriesRow<'static>>,
}

/// A range scan over one table.
struct Scan {
    /// Keeps the database from being reopened under the scan.
    _open: Arc<Open>,
    codec: Option<Arc<dyn CellCodec>>,
    keep_encoded: bool,
    filter: ScanFilter,
    raw: RawRows,
}

impl Iterator for Scan {
    type Item = Result<Row>;

    fn next(&mut self) -> Option<Result<Row>> {
        loop {
            let (key, value) = match self.raw.next(&self.filter)? {
                Ok(kv) => kv,
                Err(e) => return Some(Err(e)),
            };
            let row = match RowData::decode_with(&value, self.codec.as_deref(), self.keep_encoded) {
                Ok(row) => row,
                Err(e) => return Some(Err(e)),
            };
            // `RawRows` passed the key through the regex already.
            if let Some(out) = self.filter.accept_matched(key.to_vec(), row) {
                return Some(Ok(out));
            }
        }
    }
}

/// A range scan over a grouped table, in period order (RFC 0006): window by window (salt,
/// metric and period); a window without groups streams its rows in key order, a window with
/// groups gives each group's series in time order, merged with that series' rows in the row
/// keyspace (which shadow the group's), then the series that have no group.
struct GroupedScan {
    _open: Arc<Open>,
    codec: Option<Arc<dyn CellCodec>>,
    keep_encoded: bool,
    /// Groups of joint members only may come back as one row (`ReadOptions::joint_rows`).
    joint_rows: bool,
    /// Such groups are lent (`Store::scan_joint`): queued as they are, checked and decoded
    /// when taken.
    lend_groups: bool,
    /// A group of row values, none of its members shadowed, is queued whole to be lent as
    /// one series' rows (`Store::scan_cells` with `ReadOptions::series_rows`, RFC 0012).
    lend_series: bool,
    filter: ScanFilter,
    grouping: Grouping,
    start: Vec<u8>,
    upper: Bound<Vec<u8>>,
    rows: RawRows,
    row_next: Option<(fjall::Slice, fjall::Slice)>,
    groups: Bounded,
    group_next: Option<(fjall::Slice, fjall::Slice)>,
    /// The groups keyspace, to seek in when the request's filter is a series filter.
    group_rows: Keyspace,
    /// Both keyspaces are read as of one moment: a grouping pass moving rows meanwhile
    /// neither hides nor repeats them.
    snapshot: Snapshot,
    series_filter: bool,
    skip: Option<SkipHint>,
    /// Where the hint says the next matching group may be, and what was read past since
    /// (groups and their blocks, [`GROUPS_READ_ON_BEFORE_SEEK`]: a seek builds a new
    /// iterator over every table, reading on past a few small groups is cheaper).
    group_target: Option<(Vec<u8>, u32)>,
    /// Iterators built over the groups keyspace, the first included (each a search of every
    /// table's index).
    group_iters: u32,
    /// Keys read from the groups keyspace.
    groups_read: u32,
    out: VecDeque<Pending>,
    done: bool,
}

/// A row a [`GroupedScan`] found, whose key passed the regex: decoded already, or its
/// stored value (a row value of the row keyspace, or a member's row value within its group
/// value), decoded or lent as it is taken.
enum Pending {
    Row(Row),
    Stored {
        key: Vec<u8>,
        value: fjall::Slice,
        at: std::ops::Range<usize>,
    },
    /// A member of a group without codec: its key is the group's with its offset.
    Member {
        group: Arc<[u8]>,
        offset: u32,
        value: fjall::Slice,
        at: std::ops::Range<usize>,
    },
    /// A group of a window, none of its members shadowed, to lend whole if every member is
    /// joint (`GroupedScan::lend_groups`), else to read as its members' rows.
    Group {
        key: fjall::Slice,
        value: fjall::Slice,
    },
    /// A group of row values of a window, none of its members shadowed, to lend as one
    /// series' column rows (`GroupedScan::lend_series`), else as its members' rows.
    Series {
        key: fjall::Slice,
        value: fjall::Slice,
    },
}

impl Pending {
    /// A row found as stored: its key (written into `key`), its value's bytes.
    fn stored<'p>(&'p self, grouping: &Grouping, key: &mut Vec<u8>) -> Option<&'p [u8]> {
        let (value, at) = match self {
            Pending::Row(_) | Pending::Group { .. } | Pending::Series { .. } => return None,
            Pending::Stored { key: k, value, at } => {
                key.clear();
                key.extend_from_slice(k);
                (value, at)
            }
            Pending::Member {
                group,
                offset,
                value,
                at,
            } => {
                key.clear();
                key.extend_from_slice(group);
                grouping.make_member_key(key, *offset)?;
                (value, at)
            }
        };
        Some(value.get(at.clone()).unwrap_or_default())
    }
}

impl GroupedScan {
    /// A row found, decoded and filtered (`None`: the filters take none of its cells); a
    /// stored value that does not decode ends the scan with its error.
    fn take_row(&mut self, pending: Pending) -> Result<Option<Row>> {
        if let Pending::Row(row) = pending {
            return Ok(Some(row));
        }
        if matches!(pending, Pending::Group { .. } | Pending::Series { .. }) {
            // Queued only for `Store::scan_joint` and `Store::scan_cells`, which take them
            // themselves.
            self.done = true;
            self.out.clear();
            return Err(Error::Internal("a group to lend in a scan of rows".into()));
        }
        let mut key = Vec::new();
        let Some(bytes) = pending.stored(&self.grouping, &mut key) else {
            return Ok(None);
        };
        match RowData::decode_with(bytes, self.codec.as_deref(), self.keep_encoded) {
            Ok(row) => Ok(self.filter.accept_matched(key, row)),
            Err(e) => {
                self.done = true;
                self.out.clear();
                Err(e)
            }
        }
    }

    fn in_range(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice()
            && match &self.upper {
                Bound::Excluded(end) => key < end.as_slice(),
                _ => true,
            }
    }

    fn pull_row(&mut self) -> Result<()> {
        if self.row_next.is_none() {
            self.row_next = self.rows.next(&self.filter).transpose()?;
        }
        Ok(())
    }

    fn pull_group(&mut self) -> Result<()> {
        while self.group_next.is_none() {
            let Some(item) = self.groups.next() else {
                return Ok(());
            };
            let (key, value) = item?;
            self.groups_read = self.groups_read.saturating_add(1);
            // A key too short to be a group cannot be one: never written, skipped.
            if self.grouping.window(&key).is_none() {
                continue;
            }
            // Short of the hint's target: read on, or seek there after a few groups.
            if let Some((target, passed)) = &mut self.group_target {
                if key.as_ref() < target.as_slice() {
                    *passed = passed.saturating_add(1).saturating_add(blocks_of(&value));
                    if *passed >= GROUPS_READ_ON_BEFORE_SEEK {
                        let target = std::mem::take(target);
                        self.seek_groups(target);
                    }
                    continue;
                }
                self.group_target = None;
            }
            // A series filter refusing the group refuses every member: skip it, toward
            // where the hint says the next matching series can be (floored to its period:
            // every group key before that is a row key the hint passes over).
            if self.series_filter && !self.filter.key_matches(&key) {
                if let Some(skip) = &self.skip
                    && let Some(target) =
                        (skip.0)(&key).and_then(|t| Self::skip_target(self.grouping, &key, &t))
                {
                    // Groups as large as a data block are a block read each: passing even
                    // one costs more than a seek, so the next (most often of the same
                    // series' neighbours, alike in size) is sought at once. A target past
                    // the scan's end ends it (a series filter's last series in its last
                    // period: no group after it can match).
                    if blocks_of(&value) > 0 || past_end(&self.upper, &target) {
                        self.seek_groups(target);
                    } else {
                        self.group_target = Some((target, 0));
                    }
                }
                continue;
            }
            self.group_next = Some((key, value));
        }
        Ok(())
    }

    /// Reads groups on from `target` (a new iterator over the snapshot).
    fn seek_groups(&mut self, target: Vec<u8>) {
        self.group_target = None;
        // Past the scan's end (most often the next period of a series filter's last one):
        // no group is left to read, and no iterator is built to find none.
        if past_end(&self.upper, &target) {
            self.groups.done = true;
            return;
        }
        self.groups = range_of(
            &self.group_rows,
            Some(&self.snapshot),
            Bound::Included(target),
            self.upper.clone(),
        );
        self.group_iters = self.group_iters.saturating_add(1);
    }

    /// Where to go on among groups after `group_key`, refused by a series filter whose hint
    /// names `row_target` as the next row key that may match: the target floored to its
    /// period when that is past the group. Else the target is in the group's period at a
    /// later hour (the hint moved past the group's tags), which rules out every later group
    /// of this period: a later group's series has a row key at the period's start between
    /// the two, which the filter refuses by its tags alone, and refuses at every hour. It
    /// rules out as well every series whose tags sort before the target's: such a series has
    /// a row key at the target's hour between the two. So the target's series' group of the
    /// next period, sought at once (not the next period's first group, then the series').
    fn skip_target(g: Grouping, group_key: &[u8], row_target: &[u8]) -> Option<Vec<u8>> {
        let floored = g.floor_key(row_target);
        if floored.as_slice() > group_key {
            return Some(floored);
        }
        if !g.same_window(group_key, row_target) {
            return None;
        }
        let (_, start) = g.window(group_key)?;
        let next = start.checked_add(g.period_secs)?;
        let mut target = row_target.to_vec();
        let at = g.timestamp_offset;
        target
            .get_mut(at..at + 4)?
            .copy_from_slice(&next.to_be_bytes());
        Some(target)
    }

    /// One stored row value (`value[at]`), whose key passed the regex, into the output:
    /// decoded (and filtered) when taken.
    fn emit(&mut self, key: Vec<u8>, value: fjall::Slice, at: std::ops::Range<usize>) {
        self.out.push_back(Pending::Stored { key, value, at });
    }

    /// Filters one decoded row, whose key passed the regex, into the output.
    fn emit_row(&mut self, key: Vec<u8>, row: RowData) {
        if let Some(out) = self.filter.accept_matched(key, row) {
            self.out.push_back(Pending::Row(out));
        }
    }

    /// The next row found, decoded or as stored; `None` at the end.
    fn next_pending(&mut self) -> Option<Result<Pending>> {
        loop {
            if let Some(p) = self.out.pop_front() {
                return Some(Ok(p));
            }
            if self.done {
                return None;
            }
            if let Err(e) = self.fill() {
                self.done = true;
                return Some(Err(e));
            }
        }
    }

    /// A group as one row of form `CellForm::Joint` (`ReadOptions::joint_rows`), when every
    /// member is joint, passes the regex and the cell filters, and some member is in the
    /// scan's key range (members outside it are listed too, for the stream's sake: the reader
    /// skips them). `Some(None)`: no member is in range, the group has nothing to give.
    fn joint_row(&self, group_key: &[u8], value: &[u8]) -> Result<Option<Option<Row>>> {
        let group = decode_group(value)?;
        let Some((family, stream)) = group.joint else {
            return Ok(None);
        };
        let read = self.filter.read();
        if !read.wants_family(family) {
            return Ok(None);
        }
        let mut members = Vec::with_capacity(group.members.len());
        let (mut first, mut any_in_range) = (None, false);
        let mut key = group_key.to_vec();
        for (offset, member) in &group.members {
            let Member::Joint { shape, timestamp } = member else {
                return Ok(None);
            };
            if self.grouping.make_member_key(&mut key, *offset).is_none() {
                return Ok(None);
            }
            if !read.time_range.contains(*timestamp)
                || !(self.series_filter || self.filter.key_matches(&key))
            {
                return Ok(None);
            }
            // One member in range is enough (most groups: the first).
            any_in_range = any_in_range || self.in_range(&key);
            first.get_or_insert(*timestamp);
            members.push((
                JointMember {
                    offset_secs: *offset,
                    shape: *shape,
                },
                *timestamp,
            ));
        }
        if !any_in_range {
            return Ok(Some(None));
        }
        Ok(Some(Some(Row {
            key: group_key.to_vec(),
            cells: vec![Cell {
                family: family.to_string(),
                qualifier: Vec::new(),
                timestamp: first.unwrap_or(0),
                value: encode_joint_row(&members, stream),
                form: CellForm::Joint,
            }],
        })))
    }

    /// Fills the output with the next window's rows (or one row of a window without groups).
    fn fill(&mut self) -> Result<()> {
        self.pull_row()?;
        self.pull_group()?;
        let g = self.grouping;
        let window_has_groups = match (&self.row_next, &self.group_next) {
            (None, None) => {
                self.done = true;
                return Ok(());
            }
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (Some((row, _)), Some((group, _))) => {
                g.cmp_windows(row, group) != std::cmp::Ordering::Less
            }
        };
        if !window_has_groups {
            if let Some((key, value)) = self.row_next.take() {
                let all = 0..value.len();
                self.emit(key.to_vec(), value, all);
            }
            return Ok(());
        }
        let Some((first_group, _)) = &self.group_next else {
            return Ok(());
        };
        let window = first_group.clone();
        // The window's rows in the row keyspace, series by series.
        let mut rows: BTreeMap<Vec<u8>, (fjall::Slice, fjall::Slice)> = BTreeMap::new();
        loop {
            self.pull_row()?;
            match self.row_next.take() {
                Some((key, value)) if g.same_window(&key, &window) => {
                    rows.insert(g.series_major(&key), (key, value));
                }
                other => {
                    self.row_next = other;
                    break;
                }
            }
        }
        loop {
            self.pull_group()?;
            let Some((group_key, value)) = self.group_next.take() else {
                break;
            };
            if !g.same_window(&group_key, &window) {
                self.group_next = Some((group_key, value));
                break;
            }
            // This series' rows in the row keyspace: its series-major keys are the group's
            // key (period start at the end) with the base time in place of the start.
            let mut own: Vec<(u32, fjall::Slice, fjall::Slice)> = Vec::new();
            if !rows.is_empty() {
                let series = g.series_major(&group_key);
                let prefix = &series[..series.len() - 4];
                let from = prefix.to_vec();
                let keys: Vec<Vec<u8>> = rows
                    .range(from..)
                    .take_while(|(k, _)| k.starts_with(prefix))
                    .filter(|(k, _)| k.len() == series.len())
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in keys {
                    if let Some((key, value)) = rows.remove(&k)
                        && let Some(base) = g.base(&key)
                    {
                        own.push((base, key, value));
                    }
                }
            }
            // A group of joint members only, none shadowed: one row, if the reader asks (or
            // lent, when taken).
            if self.joint_rows && own.is_empty() {
                if self.lend_groups {
                    self.out.push_back(Pending::Group {
                        key: group_key,
                        value,
                    });
                    continue;
                }
                if let Some(row) = self.joint_row(&group_key, &value)? {
                    self.out.extend(row.map(Pending::Row));
                    continue;
                }
            }
            if self.lend_series && own.is_empty() && self.codec.is_none() {
                self.out.push_back(Pending::Series {
                    key: group_key,
                    value,
                });
                continue;
            }
            self.emit_group(&group_key, &value, own)?;
        }
        for (_, (key, value)) in std::mem::take(&mut rows) {
            let all = 0..value.len();
            self.emit(key.to_vec(), value, all);
        }
        Ok(())
    }

    /// A group's members (but for those `own` shadows) and `own`, the series' rows of the
    /// row keyspace in time order, into the output in time order.
    fn emit_group(
        &mut self,
        group_key: &[u8],
        value: &fjall::Slice,
        own: Vec<(u32, fjall::Slice, fjall::Slice)>,
    ) -> Result<()> {
        let g = self.grouping;
        // A group of row values only (a table without codec): each member's row value
        // taken from the group's as it is, decoded or lent when taken.
        if self.codec.is_none() {
            return self.emit_members(group_key, value, own);
        }
        let members = member_rows(value, self.codec.as_deref(), self.keep_encoded)?;
        // Members are read under the period's start plus their offsets (`make_member_key`),
        // whatever base time the group's key holds: rows of the row keyspace are matched so.
        let period = g.window(group_key).map_or(0, |(_, start)| start);
        let mut own = own.into_iter().peekable();
        for (offset, row) in members {
            let Some(base) = period.checked_add(offset) else {
                continue;
            };
            // Its rows in the row keyspace up to this time go first; one at this time
            // replaces the member.
            let mut shadowed = false;
            while let Some((b, key, value)) = own.next_if(|(b, _, _)| *b <= base) {
                shadowed |= b == base;
                let all = 0..value.len();
                self.emit(key.to_vec(), value, all);
            }
            if shadowed {
                continue;
            }
            let Some(key) = g.member_key(group_key, offset) else {
                continue;
            };
            // Under a series filter the group's key passed it for every member.
            if self.in_range(&key) && (self.series_filter || self.filter.key_matches(&key)) {
                self.emit_row(key, row);
            }
        }
        for (_, key, value) in own {
            let all = 0..value.len();
            self.emit(key.to_vec(), value, all);
        }
        Ok(())
    }

    /// A group queued to be lent ([`Pending::Group`]), lent to `visit` when every member is
    /// joint and the read takes them all as [`GroupedScan::joint_row`] would; else its
    /// members' rows go next in the output. Whether it was visited.
    fn lend_group(
        &mut self,
        group_key: &fjall::Slice,
        value: &fjall::Slice,
        scratch: &mut JointScratch,
        visit: JointVisitor<'_>,
    ) -> Result<bool> {
        match self.lendable(group_key, value, scratch)? {
            Some(Some((family, stream))) => {
                visit(Scanned::Group(LentGroup {
                    key: group_key,
                    family,
                    members: &scratch.members,
                    timestamps: &scratch.timestamps,
                    stream,
                }))?;
                Ok(true)
            }
            Some(None) => Ok(false),
            None => {
                // Its members go before what the window had queued after it.
                let rest = std::mem::take(&mut self.out);
                self.emit_group(group_key, value, Vec::new())?;
                self.out.extend(rest);
                Ok(false)
            }
        }
    }

    /// A group queued to be lent as one series' rows ([`Pending::Series`]): its members the
    /// scan takes (in its key range, passing its filters), lent to `visit` together when
    /// each is a column row the read keeps whole ([`model::lend_column_rows`]); else its
    /// members' rows go next in the output, as [`GroupedScan::emit_members`] gives them.
    /// How many rows were visited.
    fn lend_series(
        &mut self,
        group_key: &fjall::Slice,
        value: &fjall::Slice,
        scratch: &mut SeriesScratch,
        visit: CellVisitor<'_>,
    ) -> Result<usize> {
        let g = self.grouping;
        let mut members = reuse_vec(std::mem::take(&mut scratch.members));
        // Row values only (else, or bytes that do not decode: as members, below).
        let whole = row_members(value, &mut members);
        // Members are read under the period's start plus their offsets (`make_member_key`),
        // whatever base time the group's key holds: rows of the row keyspace are matched so.
        let period = g.window(group_key).map_or(0, |(_, start)| start);
        let key = &mut scratch.key;
        key.clear();
        key.extend_from_slice(group_key);
        // The first member taken: the visit's key is its key.
        let mut first: Option<u32> = None;
        let mut bases = std::mem::take(&mut scratch.bases);
        bases.clear();
        let mut stored = reuse_vec(std::mem::take(&mut scratch.stored));
        for (offset, bytes) in members.iter().filter(|_| whole) {
            // Skipped as `emit_members` skips them.
            if period.checked_add(*offset).is_none() || g.make_member_key(key, *offset).is_none() {
                continue;
            }
            // The base time of the key the member is read under (its group key's period
            // start and its offset: the group key's own base time, unless stored bytes went
            // wrong).
            let Some(base) = g.base(key) else {
                continue;
            };
            if self.in_range(key) && (self.series_filter || self.filter.key_matches(key)) {
                first.get_or_insert(*offset);
                bases.push(base);
                stored.push(*bytes);
            }
        }
        let mut cells = reuse_vec(std::mem::take(&mut scratch.cells));
        let lent = whole
            && first.is_some_and(|offset| g.make_member_key(key, offset).is_some())
            && model::lend_column_rows(stored.iter().copied(), self.filter.read(), &mut cells);
        let mut visited = 0;
        if lent {
            let mut rows = reuse_vec(std::mem::take(&mut scratch.rows));
            rows.extend(
                bases
                    .iter()
                    .zip(&cells)
                    .map(|(base, (cells, same_layout))| SeriesRow {
                        base: *base,
                        cells: *cells,
                        same_layout: *same_layout,
                    }),
            );
            let series = SeriesRows {
                base_at: g.timestamp_offset,
                rows: &rows,
            };
            let visited_ok = visit(key, LentCells::Series(series));
            visited = rows.len();
            scratch.rows = reuse_vec(rows);
            visited_ok?;
        } else if first.is_some() || !whole {
            // Its members go before what the window had queued after it.
            let rest = std::mem::take(&mut self.out);
            self.emit_members(group_key, value, Vec::new())?;
            self.out.extend(rest);
        }
        scratch.cells = reuse_vec(cells);
        scratch.bases = bases;
        scratch.stored = reuse_vec(stored);
        scratch.members = reuse_vec(members);
        Ok(visited)
    }

    /// [`GroupedScan::joint_row`]'s checks on a group decoded into `scratch`: its family
    /// and stream when it goes as one; `Some(None)` when no member is in the scan's range;
    /// `None` when it is read as rows.
    #[allow(clippy::type_complexity)]
    fn lendable<'v>(
        &self,
        group_key: &[u8],
        value: &'v [u8],
        scratch: &mut JointScratch,
    ) -> Result<Option<Option<(&'v str, &'v [u8])>>> {
        let read = self.filter.read();
        // Members' cell timestamps are read only for a read with a time range.
        let timestamps = !read.time_range.is_all();
        let Some((family, stream)) = decode_joint_members(value, scratch, timestamps)? else {
            return Ok(None);
        };
        if !read.wants_family(family) {
            return Ok(None);
        }
        let g = self.grouping;
        let key = &mut scratch.key;
        key.clear();
        key.extend_from_slice(group_key);
        // Offsets increase: when the last member's key can be made, every one's can.
        let Some(last) = scratch.members.last() else {
            return Ok(None);
        };
        if g.make_member_key(key, last.offset_secs).is_none() {
            return Ok(None);
        }
        // Each member is checked when the read filters by time or key; else one member in
        // range is enough.
        let each = !read.time_range.is_all() || !self.series_filter;
        let mut any_in_range = false;
        for (i, m) in scratch.members.iter().enumerate() {
            if !each && any_in_range {
                break;
            }
            if g.make_member_key(key, m.offset_secs).is_none() {
                return Ok(None);
            }
            if each
                && (!scratch
                    .timestamps
                    .get(i)
                    .is_none_or(|t| read.time_range.contains(*t))
                    || !(self.series_filter || self.filter.key_matches(key)))
            {
                return Ok(None);
            }
            any_in_range = any_in_range || self.in_range(key);
        }
        Ok(Some(any_in_range.then_some((family, stream))))
    }

    /// The members of a group of row values (no joint member), merged with the series'
    /// rows of the row keyspace (`own`, in time order; one at a member's time replaces
    /// it), as [`GroupedScan::fill`] merges decoded members: each member's row value
    /// stays a range of the group's value.
    fn emit_members(
        &mut self,
        group_key: &[u8],
        value: &fjall::Slice,
        own: Vec<(u32, fjall::Slice, fjall::Slice)>,
    ) -> Result<()> {
        let g = self.grouping;
        let group = decode_group(value)?;
        if group.joint.is_some() {
            return Err(Error::Corrupt(
                "cell was stored with a codec this store was not given".into(),
            ));
        }
        // Members are read under the period's start plus their offsets (`make_member_key`),
        // whatever base time the group's key holds: rows of the row keyspace are matched so.
        let period = g.window(group_key).map_or(0, |(_, start)| start);
        let start = value.as_ptr() as usize;
        let shared: Arc<[u8]> = Arc::from(group_key);
        let mut key = group_key.to_vec();
        let mut own = own.into_iter().peekable();
        for (offset, member) in group.members {
            let Member::Row(bytes) = member else {
                return Err(Error::Corrupt(
                    "cell was stored with a codec this store was not given".into(),
                ));
            };
            let Some(base) = period.checked_add(offset) else {
                continue;
            };
            let mut shadowed = false;
            while let Some((b, key, row)) = own.next_if(|(b, _, _)| *b <= base) {
                shadowed |= b == base;
                let all = 0..row.len();
                self.emit(key.to_vec(), row, all);
            }
            if shadowed || g.make_member_key(&mut key, offset).is_none() {
                continue;
            }
            if self.in_range(&key) && (self.series_filter || self.filter.key_matches(&key)) {
                // The member's bytes lie within the group's value.
                let from = bytes.as_ptr() as usize - start;
                self.out.push_back(Pending::Member {
                    group: shared.clone(),
                    offset,
                    value: value.clone(),
                    at: from..from + bytes.len(),
                });
            }
        }
        for (_, key, row) in own {
            let all = 0..row.len();
            self.emit(key.to_vec(), row, all);
        }
        Ok(())
    }
}

impl Iterator for GroupedScan {
    type Item = Result<Row>;

    fn next(&mut self) -> Option<Result<Row>> {
        loop {
            let pending = match self.next_pending()? {
                Ok(pending) => pending,
                Err(e) => return Some(Err(e)),
            };
            match self.take_row(pending) {
                Ok(Some(row)) => return Some(Ok(row)),
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// Lends one stored row value, whose key passed the regex, to `visit`: as its columns
/// when it is a column row the read keeps whole, else its cells (none: not visited).
/// Whether it was visited.
fn lend_one<'a>(
    key: &[u8],
    bytes: &'a [u8],
    read: &ReadOptions,
    lent: &mut Vec<CellRef<'a>>,
    visit: CellVisitor<'_>,
) -> Result<bool> {
    match model::lend_row(bytes, read, lent)? {
        Some(columns) => visit(key, LentCells::Columns(columns)).map(|()| true),
        None if !lent.is_empty() => visit(key, LentCells::Cells(lent)).map(|()| true),
        None => Ok(false),
    }
}

impl FjallStore {
    /// The scan of a grouped table (RFC 0006), `None` for a table without groups.
    fn grouped_scan(
        open: Arc<Open>,
        t: &Table,
        request: &ScanRequest,
    ) -> Result<Option<GroupedScan>> {
        let Some(groups) = &t.groups else {
            return Ok(None);
        };
        let filter = ScanFilter::new(request)?;
        let upper = match &request.end {
            Some(end) => Bound::Excluded(end.clone()),
            None => Bound::Unbounded,
        };
        let snapshot = open.db.snapshot();
        let grouping = groups.grouping;
        let mut from = grouping.group_scan_start(&request.start);
        let mut rows_from = request.start.clone();
        // A series filter refusing the start's group key (most often a metric's period start,
        // without tags) with a hint: both keyspaces read from where it points, not from the
        // period's first group and row (a seek in each saved).
        if request.series_filter
            && let Some(skip) = &request.skip
            && !filter.key_matches(&from)
            && let Some(target) = (skip.0)(&from).filter(|t| t.as_slice() > from.as_slice())
        {
            if let Some(groups_from) = GroupedScan::skip_target(grouping, &from, &target) {
                from = groups_from;
            }
            if target > rows_from {
                rows_from = target;
            }
        }
        let raw = RawRows::new(
            t.rows.clone(),
            Some(snapshot.clone()),
            rows_from,
            upper.clone(),
            request.skip.clone(),
        );
        Ok(Some(GroupedScan {
            codec: t.codec.clone(),
            keep_encoded: request.read.encoded_cells,
            joint_rows: request.read.joint_rows,
            lend_groups: false,
            lend_series: false,
            filter,
            grouping,
            start: request.start.clone(),
            upper: upper.clone(),
            rows: raw,
            row_next: None,
            groups: range_of(&groups.rows, Some(&snapshot), Bound::Included(from), upper),
            group_next: None,
            group_rows: groups.rows.clone(),
            snapshot,
            series_filter: request.series_filter,
            skip: request.skip.clone(),
            group_target: None,
            group_iters: 1,
            groups_read: 0,
            out: VecDeque::new(),
            done: false,
            _open: open,
        }))
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
        // A grouped table stays grouped as its catalog says; otherwise grouping is switched
        // on when bound.
        let wanted = self.groupings.read().get(&spec.name).copied();
        let grouped = existing.as_ref().and_then(|t| t.groups.clone());
        if let (Some(have), Some(want)) = (&grouped, wanted)
            && have.grouping != want
        {
            tracing::warn!(table = %spec.name, "table is grouped as its catalog says, not as configured");
        }
        let indexed = existing.as_ref().is_some_and(|t| t.indexed)
            || self.indexed.read().contains(&spec.name);
        if existing.as_ref().is_some_and(|t| {
            *t.spec == merged && (grouped.is_some() || wanted.is_none()) && t.indexed == indexed
        }) {
            return Ok(());
        }
        let rows = match &existing {
            Some(t) => t.rows.clone(),
            None => {
                let l0 = self.l0_thresholds.read().get(&spec.name).copied();
                open_keyspace_with(&open.db, TABLE_PREFIX, &spec.name, l0)?
            }
        };
        let groups = match grouped {
            Some(g) => Some(g),
            None => wanted
                .map(|g| open_groups(&open.db, &spec.name, g))
                .transpose()?,
        };
        open.catalog
            .insert(
                spec.name.as_bytes(),
                encode_spec(&merged, groups.as_ref().map(|g| g.grouping), indexed),
            )
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
                groups,
                indexed,
            },
        );
        Ok(())
    }

    /// [`Store::put_cells`]: rows in strictly ascending key order of a table neither grouped
    /// nor coded are encoded as they come (no row model, nothing to read) and written as a
    /// new table file when there are many; other calls go through `mutate_rows`.
    fn put_cells_once(&self, table: &str, rows: &[CellRow<'_>]) -> Result<()> {
        let (open, t) = self.table(table)?;
        let plain =
            t.groups.is_none() && t.codec.is_none() && rows.windows(2).all(|w| w[0].key < w[1].key);
        if !plain {
            let rows: Vec<RowMutation> = rows.iter().map(CellRow::to_mutation).collect();
            return self.mutate_rows_once(table, &rows);
        }
        // Every family checked before anything is written: all or nothing, as mutate_rows.
        let mut checked: Option<&str> = None;
        for r in rows {
            if checked != Some(r.family) {
                if !t.spec.families.iter().any(|f| f.name == r.family) {
                    return Err(Error::FamilyNotFound {
                        table: table.to_string(),
                        family: r.family.to_string(),
                    });
                }
                checked = Some(r.family);
            }
        }
        let encode = |r: &CellRow<'_>| {
            RowData::encode_one_plain(r.family, r.qualifier, r.timestamp, r.value)
        };
        let _w = self.write_lock.lock();
        if rows.len() >= INGEST_MIN_ROWS {
            let mut ingestion = t
                .rows
                .start_ingestion()
                .map_err(|e| self.write_failed("write failed", e))?;
            // One buffer for every row's value: the table file copies it anyway.
            let mut value = Vec::new();
            for r in rows {
                RowData::encode_one_plain_into(
                    &mut value,
                    r.family,
                    r.qualifier,
                    r.timestamp,
                    r.value,
                );
                ingestion
                    .write(r.key, value.as_slice())
                    .map_err(|e| self.write_failed("write failed", e))?;
            }
            return ingestion
                .finish()
                .map_err(|e| self.write_failed("write failed", e));
        }
        let mut batch = open.db.batch();
        for r in rows {
            batch.insert(&t.rows, r.key, encode(r));
        }
        batch
            .commit()
            .map_err(|e| self.write_failed("write failed", e))
    }

    fn mutate_rows_once(&self, table: &str, rows: &[RowMutation]) -> Result<()> {
        let (open, t) = self.table(table)?;
        let now = now_ms();
        let _w = self.write_lock.lock();
        // Rows each replaced whole, in strictly ascending key order (as the tag index writes
        // its entries): no repeated row to apply in order, nothing to read, and already in
        // the order a new table file is written in.
        if t.groups.is_none()
            && rows.windows(2).all(|w| w[0].key < w[1].key)
            && rows
                .iter()
                .all(|r| matches!(r.mutations.first(), Some(Mutation::DeleteRow)))
        {
            let mut sorted = Vec::with_capacity(rows.len());
            for r in rows {
                let mut loaded = Loaded {
                    row: RowData::default(),
                    in_rows: false,
                };
                loaded.row.apply(&t.spec, &r.mutations, now)?;
                sorted.push((r.key.as_slice(), loaded));
            }
            return self.commit(&open, &t, sorted, GroupCache::default());
        }
        // Rows repeated in one batch apply in order on the pending state. Sized once and
        // hashed once per row: large batches (a flush's rows, its tag index entries) spent
        // much of their time growing and probing this map.
        let mut pending: HashMap<&[u8], Loaded, foldhash::fast::RandomState> =
            HashMap::with_capacity_and_hasher(rows.len(), Default::default());
        let mut cache = GroupCache::default();
        for r in rows {
            let loaded = match pending.entry(r.key.as_slice()) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                // A row replaced whole (its mutations start by deleting it) needs no read,
                // unless its table is grouped (the row may live in a group to remove it from).
                std::collections::hash_map::Entry::Vacant(e)
                    if t.groups.is_none()
                        && matches!(r.mutations.first(), Some(Mutation::DeleteRow)) =>
                {
                    e.insert(Loaded {
                        row: RowData::default(),
                        in_rows: false,
                    })
                }
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(Self::load(&t, &r.key, &mut cache, None)?)
                }
            };
            loaded.row.apply(&t.spec, &r.mutations, now)?;
        }
        self.commit(&open, &t, pending.into_iter().collect(), cache)
    }

    /// Writes rows as they now are (an empty row is removed). Under the write lock; `cache`
    /// holds groups the call already read.
    fn commit(
        &self,
        open: &Open,
        t: &Table,
        rows: Vec<(&[u8], Loaded)>,
        cache: GroupCache,
    ) -> Result<()> {
        if let Some(groups) = &t.groups {
            return self.commit_grouped(open, t, groups, rows, cache);
        }
        if rows.len() >= INGEST_MIN_ROWS {
            // Large batches (flushes of many rows) become a new table directly: no journal
            // copy, no memtable, no memtable flush. The table is registered atomically.
            let mut sorted = rows;
            sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
            let mut ingestion = t
                .rows
                .start_ingestion()
                .map_err(|e| self.write_failed("write failed", e))?;
            for (key, loaded) in sorted {
                if loaded.row.is_empty() {
                    ingestion.write_tombstone(key)
                } else {
                    ingestion.write(key, loaded.row.encode(t.codec.as_deref()))
                }
                .map_err(|e| self.write_failed("write failed", e))?;
            }
            return ingestion
                .finish()
                .map_err(|e| self.write_failed("write failed", e));
        }
        let mut batch = open.db.batch();
        for (key, loaded) in rows {
            if loaded.row.is_empty() {
                batch.remove(&t.rows, key);
            } else {
                batch.insert(&t.rows, key, loaded.row.encode(t.codec.as_deref()));
            }
        }
        batch
            .commit()
            .map_err(|e| self.write_failed("write failed", e))
    }

    /// [`FjallStore::commit`] for a grouped table: rows of grouped periods go to their groups
    /// (and leave the row keyspace), other rows to the row keyspace; a row emptied in an
    /// ungrouped period also leaves a group that holds it (the clock went back).
    fn commit_grouped(
        &self,
        open: &Open,
        t: &Table,
        groups: &Groups,
        rows: Vec<(&[u8], Loaded)>,
        mut cache: GroupCache,
    ) -> Result<()> {
        let g = &groups.grouping;
        let through = groups.grouped_through.load(Ordering::Acquire);
        let mut row_writes: Vec<(&[u8], Option<Vec<u8>>)> = Vec::new();
        let mut member_writes: BTreeMap<Vec<u8>, Vec<MemberWrite>> = BTreeMap::new();
        for (key, loaded) in rows {
            let empty = loaded.row.is_empty();
            match g.split(key) {
                Some((group_key, offset))
                    if g.period_end(key).is_some_and(|end| end <= through) =>
                {
                    member_writes
                        .entry(group_key)
                        .or_default()
                        .push((offset, (!empty).then_some(loaded.row)));
                    if loaded.in_rows {
                        row_writes.push((key, None));
                    }
                }
                Some((group_key, offset)) if empty => {
                    member_writes
                        .entry(group_key)
                        .or_default()
                        .push((offset, None));
                    if loaded.in_rows {
                        row_writes.push((key, None));
                    }
                }
                _ => {
                    if !empty || loaded.in_rows {
                        let value = (!empty).then(|| loaded.row.encode(t.codec.as_deref()));
                        row_writes.push((key, value));
                    }
                }
            }
        }
        let mut group_writes: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        let mut superseded = 0usize;
        for (group_key, changes) in member_writes {
            // Without a codec, members not written stay the row values they are.
            if t.codec.is_none() {
                let stored = groups
                    .rows
                    .get(&group_key)
                    .map_err(|e| io_err("read failed", e))?;
                let stored_len = stored.as_ref().map(|v| v.len());
                let existed = stored_len.is_some();
                let mut members = stored_members(stored.as_deref())?;
                let mut changed = false;
                for (offset, row) in changes {
                    changed |= match row {
                        Some(row) => {
                            members.insert(offset, row.encode(None));
                            true
                        }
                        None => members.remove(&offset).is_some(),
                    };
                }
                if changed {
                    let value = (!members.is_empty()).then(|| encode_rows_group(&members));
                    if value.is_some() || existed {
                        superseded += stored_len.unwrap_or(0);
                        group_writes.push((group_key, value));
                    }
                }
                continue;
            }
            let stored = match cache.remove(&group_key) {
                Some(group) => group,
                None => groups
                    .rows
                    .get(&group_key)
                    .map_err(|e| io_err("read failed", e))?
                    .map(|v| {
                        group_members(Some(&v), t.codec.as_deref()).map(|members| CachedGroup {
                            stored_len: v.len(),
                            members,
                        })
                    })
                    .transpose()?,
            };
            let existed = stored.is_some();
            let stored_len = stored.as_ref().map_or(0, |g| g.stored_len);
            let mut members = stored.map(|g| g.members).unwrap_or_default();
            let mut changed = false;
            for (offset, value) in changes {
                changed |= match value {
                    Some(v) => {
                        members.insert(offset, v);
                        true
                    }
                    None => members.remove(&offset).is_some(),
                };
            }
            if changed {
                let value =
                    (!members.is_empty()).then(|| encode_group(&members, t.codec.as_deref()));
                if value.is_some() || existed {
                    superseded += stored_len;
                    group_writes.push((group_key, value));
                }
            }
        }
        // Counted before the write: a count too high merges early, one too low never.
        groups
            .superseded
            .fetch_add(superseded as u64, Ordering::AcqRel);
        let ingest = |keyspace: &Keyspace, writes: Vec<(&[u8], Option<Vec<u8>>)>| -> Result<()> {
            let mut writes = writes;
            writes.sort_unstable_by(|a, b| a.0.cmp(b.0));
            let mut ingestion = keyspace
                .start_ingestion()
                .map_err(|e| self.write_failed("write failed", e))?;
            for (key, value) in writes {
                match value {
                    Some(v) => ingestion.write(key, v),
                    None => ingestion.write_tombstone(key),
                }
                .map_err(|e| self.write_failed("write failed", e))?;
            }
            ingestion
                .finish()
                .map_err(|e| self.write_failed("write failed", e))
        };
        // One keyspace written: a large batch is ingested as a table of its own. Both: one
        // atomic batch, so a row is never in neither place nor stale in both.
        if group_writes.is_empty() && row_writes.len() >= INGEST_MIN_ROWS {
            return ingest(&t.rows, row_writes);
        }
        if row_writes.is_empty() && group_writes.len() >= INGEST_MIN_ROWS {
            return ingest(
                &groups.rows,
                group_writes
                    .iter()
                    .map(|(k, v)| (k.as_slice(), v.clone()))
                    .collect(),
            );
        }
        let mut batch = open.db.batch();
        for (key, value) in row_writes {
            match value {
                Some(v) => batch.insert(&t.rows, key, v),
                None => batch.remove(&t.rows, key),
            }
        }
        for (key, value) in group_writes {
            match value {
                Some(v) => batch.insert(&groups.rows, key, v),
                None => batch.remove(&groups.rows, key),
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
        let (open, t) = self.table(table)?;
        let _w = self.write_lock.lock();
        let mut loaded = Self::load(&t, key, &mut GroupCache::default(), None)?;
        let v = loaded
            .row
            .increment(&t.spec, family, qualifier, delta, now_ms())?;
        self.commit(&open, &t, vec![(key, loaded)], GroupCache::default())?;
        Ok(v)
    }

    fn check_and_mutate_once(
        &self,
        table: &str,
        key: &[u8],
        check: &Check,
        mutations: &[Mutation],
    ) -> Result<bool> {
        let (open, t) = self.table(table)?;
        let _w = self.write_lock.lock();
        let mut loaded = Self::load(&t, key, &mut GroupCache::default(), None)?;
        if !loaded.row.check(check) {
            return Ok(false);
        }
        loaded.row.apply(&t.spec, mutations, now_ms())?;
        self.commit(&open, &t, vec![(key, loaded)], GroupCache::default())?;
        Ok(true)
    }

    /// [`Store::check_and_mutate_rows`]: under the write lock (the only writer of the data
    /// dir, which this process has locked), every row read, checked and written as one
    /// batch, one journal entry.
    fn check_and_mutate_rows_once(
        &self,
        table: &str,
        checks: &[RowCheck],
        rows: &[RowMutation],
    ) -> Result<bool> {
        let (open, t) = self.table(table)?;
        let now = now_ms();
        let _w = self.write_lock.lock();
        // Each row read once; whether a mutation names it (rows only checked are not
        // written).
        let mut pending: HashMap<&[u8], (Loaded, bool), foldhash::fast::RandomState> =
            HashMap::with_capacity_and_hasher(checks.len() + rows.len(), Default::default());
        let mut cache = GroupCache::default();
        for c in checks {
            let (loaded, _) = match pending.entry(c.key.as_slice()) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert((Self::load(&t, &c.key, &mut cache, None)?, false))
                }
            };
            if !loaded.row.check(&c.check) {
                return Ok(false);
            }
        }
        // A row of an ungrouped table without a codec that was absent and gets one cell
        // (a new UID's mappings) is encoded as that cell, without the row model:
        // [`RowData::encode_one_plain`] gives the bytes `apply` and `encode` would.
        let plain = t.groups.is_none() && t.codec.is_none() && rows.len() < INGEST_MIN_ROWS;
        let mut new_cells: Vec<(&[u8], Vec<u8>)> = Vec::new();
        for r in rows {
            let (loaded, written) = match pending.entry(r.key.as_slice()) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert((Self::load(&t, &r.key, &mut cache, None)?, false))
                }
            };
            if plain
                && !*written
                && loaded.row.is_empty()
                && let [
                    Mutation::SetCell {
                        family,
                        qualifier,
                        timestamp: None,
                        value,
                    },
                ] = r.mutations.as_slice()
                && t.spec
                    .families
                    .iter()
                    .any(|f| f.name == *family && f.max_versions != Some(0))
                && rows.iter().filter(|other| other.key == r.key).count() == 1
            {
                new_cells.push((
                    r.key.as_slice(),
                    RowData::encode_one_plain(family, qualifier, now, value),
                ));
                continue;
            }
            loaded.row.apply(&t.spec, &r.mutations, now)?;
            *written = true;
        }
        if plain {
            let mut batch = open.db.batch();
            for (key, (loaded, written)) in pending {
                if !written {
                    continue;
                }
                if loaded.row.is_empty() {
                    batch.remove(&t.rows, key);
                } else {
                    batch.insert(&t.rows, key, loaded.row.encode(None));
                }
            }
            for (key, value) in new_cells {
                batch.insert(&t.rows, key, value);
            }
            return batch
                .commit()
                .map(|()| true)
                .map_err(|e| self.write_failed("write failed", e));
        }
        let written: Vec<(&[u8], Loaded)> = pending
            .into_iter()
            .filter_map(|(key, (loaded, written))| written.then_some((key, loaded)))
            .collect();
        self.commit(&open, &t, written, cache)?;
        Ok(true)
    }

    /// Groups every grouped table's periods closed at `now_ms` (RFC 0006): from now on
    /// writes to their rows go to their groups, and the rows still in the row keyspace move
    /// there, a bounded step at a time under the write lock.
    fn maintain_once(&self, now_ms: i64) -> Result<()> {
        let open = self.handle()?;
        let tables: Vec<Table> = open
            .tables
            .read()
            .values()
            .filter(|t| t.groups.is_some())
            .cloned()
            .collect();
        for t in tables {
            let Some(groups) = &t.groups else { continue };
            let closed = groups.grouping.closed_through(now_ms.div_euclid(1000));
            if closed <= groups.passed_through.load(Ordering::Acquire) {
                continue;
            }
            let moved = self.group_rows(&open, &t, groups, closed)?;
            groups.passed_through.fetch_max(closed, Ordering::AcqRel);
            if moved > 0 {
                tracing::info!(table = %t.spec.name, rows = moved, "rows of closed periods moved into their groups");
                // The moved rows left tombstones: drop them with the rows they cover. They
                // are in the memtable, which a compaction does not reach: flushed first
                // (which also lets fjall drop versions no snapshot reads, the compaction's
                // watermark). Left there, every scan of the table read past them.
                self.flush_memtable(&open, &t.rows)?;
                t.rows
                    .major_compact()
                    .map_err(|e| io_err("compaction failed", e))?;
            }
        }
        // A first level fjall stalls writes at (a keyspace made when the index's threshold
        // was above it): merged here, before the flush's writes wait on it.
        let tables: Vec<Table> = open.tables.read().values().cloned().collect();
        for t in &tables {
            relieve_first_level(&t.rows, &t.spec.name)?;
            // In the background (a merge would hold up the flush), its memtable flushed
            // first so the merge reaches every version counted.
            if let Some(groups) = &t.groups
                && let Some(counted) = Self::superseded_to_reclaim(groups)
                && !self.merge_running()
            {
                self.flush_memtable(&open, &groups.rows)?;
                let (name, groups) = (t.spec.name.clone(), groups.clone());
                self.in_background(&open, move || Self::reclaim(&name, &groups, counted));
            }
        }
        self.merge_idle_runs(&open, now_ms);
        Ok(())
    }

    /// Whether a merge runs on the store's merge thread.
    fn merge_running(&self) -> bool {
        self.merging
            .lock()
            .as_ref()
            .is_some_and(|m| !m.is_finished())
    }

    /// Runs `merge` on the store's merge thread unless a merge runs there already (then
    /// not at all: the next upkeep decides again); whether it started. The database stays
    /// open until it ends.
    fn in_background(&self, open: &Arc<Open>, merge: impl FnOnce() + Send + 'static) -> bool {
        let mut merging = self.merging.lock();
        if merging.as_ref().is_some_and(|m| !m.is_finished()) {
            return false;
        }
        if let Some(done) = merging.take() {
            let _ = done.join();
        }
        let open = Arc::clone(open);
        let spawned = std::thread::Builder::new()
            .name("hourglass-merge".into())
            .spawn(move || {
                merge();
                drop(open);
            });
        match spawned {
            Ok(handle) => {
                *merging = Some(handle);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot start a merge");
                false
            }
        }
    }

    /// Merges the runs of a table whose first level is merged late (the tag index: many
    /// runs keep its writes cheap) once its first level has held [`IDLE_MERGE_RUNS`] runs
    /// or more, unchanged, for [`IDLE_MERGE_AFTER_MS`]: a prefix scan merges an iterator of
    /// every run, so a lookup read 25 runs where one would do. In the background, one merge
    /// at a time; the store's answers are the same before, during and after.
    fn merge_idle_runs(&self, open: &Arc<Open>, now_ms: i64) {
        let late: Vec<String> = self
            .l0_thresholds
            .read()
            .iter()
            .filter(|(_, n)| usize::from(**n) > IDLE_MERGE_RUNS)
            .map(|(name, _)| name.clone())
            .collect();
        for name in late {
            let Some(t) = open.tables.read().get(&name).cloned() else {
                continue;
            };
            let runs = t.rows.l0_table_count();
            let idle = {
                let mut seen = self.idle_runs.lock();
                let entry = seen.entry(name.clone()).or_insert((runs, now_ms));
                if entry.0 != runs {
                    *entry = (runs, now_ms);
                }
                runs >= IDLE_MERGE_RUNS && now_ms - entry.1 >= IDLE_MERGE_AFTER_MS
            };
            if !idle {
                continue;
            }
            let started = self.in_background(open, move || {
                if let Err(e) = t.rows.major_compact() {
                    tracing::warn!(table = %t.spec.name, error = %e, "merging an idle table's runs failed");
                }
            });
            if started && let Some(entry) = self.idle_runs.lock().get_mut(&name) {
                // Not again before the runs change and stay unchanged again.
                entry.1 = now_ms;
            }
        }
    }

    /// The runs of `table`'s first level (its files not yet merged into the next).
    pub fn first_level_runs(&self, table: &str) -> Result<usize> {
        let (_, t) = self.table_for_read(table)?;
        Ok(t.rows.l0_table_count())
    }

    /// Moves the rows of periods ending at or before `closed` from the row keyspace into
    /// their groups. Returns how many moved.
    fn group_rows(&self, open: &Open, t: &Table, groups: &Groups, closed: u64) -> Result<usize> {
        let g = groups.grouping;
        let mut cursor: Vec<u8> = Vec::new();
        let mut moved = 0;
        // Writes wait for the whole pass: none finds a row of a grouped period still in
        // the row keyspace (a step at a time bounds only the memory).
        let _w = self.write_lock.lock();
        groups.grouped_through.fetch_max(closed, Ordering::AcqRel);
        loop {
            let mut changes: BTreeMap<Vec<u8>, Vec<(u32, fjall::Slice, fjall::Slice)>> =
                BTreeMap::new();
            let mut bytes = 0usize;
            let mut resume = None;
            let mut iter = t.rows.range::<Vec<u8>, _>(cursor.clone()..);
            while let Some(item) = iter.next() {
                let (key, value) = item.into_inner().map_err(|e| io_err("read failed", e))?;
                match g.period_end(&key) {
                    Some(end) if end <= closed => {
                        if moved == 0 && changes.is_empty() {
                            tracing::info!(table = %t.spec.name, closed, "moving the rows of closed periods into their groups");
                        }
                        if let Some((group_key, offset)) = g.split(&key) {
                            bytes += key.len() + value.len();
                            changes.entry(group_key).or_default().push((
                                offset,
                                key.clone(),
                                value,
                            ));
                        }
                    }
                    Some(_) => {
                        // Later keys of this salt and metric are later periods, open too.
                        match prefix_successor(&key[..g.timestamp_offset]) {
                            Some(next) => {
                                iter = t.rows.range::<Vec<u8>, _>(next..);
                                continue;
                            }
                            None => break,
                        }
                    }
                    None => {}
                }
                if bytes >= GROUPING_STEP_BYTES {
                    let mut next = key.to_vec();
                    next.push(0);
                    resume = Some(next);
                    break;
                }
            }
            let mut batch = open.db.batch();
            for (group_key, rows) in changes {
                let stored = groups
                    .rows
                    .get(&group_key)
                    .map_err(|e| io_err("read failed", e))?;
                if let Some(v) = &stored {
                    groups
                        .superseded
                        .fetch_add(v.len() as u64, Ordering::AcqRel);
                }
                let codec = t.codec.as_deref();
                if codec.is_none() {
                    // Row values join the group as they are.
                    let mut members = stored_members(stored.as_deref())?;
                    for (offset, key, value) in rows {
                        members.insert(offset, value.to_vec());
                        batch.remove(&t.rows, key);
                        moved += 1;
                    }
                    batch.insert(&groups.rows, group_key, encode_rows_group(&members));
                    continue;
                }
                let mut members = group_members(stored.as_deref(), codec)?;
                for (offset, key, value) in rows {
                    members.insert(offset, RowData::decode(&value, codec)?);
                    batch.remove(&t.rows, key);
                    moved += 1;
                }
                batch.insert(&groups.rows, group_key, encode_group(&members, codec));
            }
            batch
                .commit()
                .map_err(|e| self.write_failed("write failed", e))?;
            match resume {
                Some(next) => cursor = next,
                None => return Ok(moved),
            }
        }
    }

    /// The superseded bytes of `groups` when they reach 1/[`RECLAIM_SHARE`] of its files and
    /// its files are at most [`RECLAIM_MAX_BYTES`]: then its keyspace is to be merged whole.
    fn superseded_to_reclaim(groups: &Groups) -> Option<u64> {
        let superseded = groups.superseded.load(Ordering::Acquire);
        if superseded == 0 {
            // The common case at every upkeep: no walk over the keyspace's files.
            return None;
        }
        let files = groups.rows.disk_space();
        (superseded.saturating_mul(RECLAIM_SHARE) >= files && files <= RECLAIM_MAX_BYTES)
            .then_some(superseded)
    }

    /// Merges `groups`' keyspace whole (its memtable flushed by the caller, so the merge
    /// reaches every version counted): what was counted superseded before is then gone.
    /// Counted off even when the merge fails (logged): its versions are left to fjall's own
    /// merges rather than tried again at every upkeep.
    fn reclaim(table: &str, groups: &Groups, counted: u64) {
        tracing::info!(
            table,
            superseded = counted,
            "merging groups to drop superseded versions"
        );
        if let Err(e) = groups.rows.major_compact() {
            tracing::warn!(table, error = %e, "merging groups failed; superseded versions left to the store's own merges");
        }
        // What was counted since may not be gone: kept.
        let _ = groups
            .superseded
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(counted))
            });
    }

    fn sync_once(&self) -> Result<()> {
        self.handle()?
            .db
            .persist(PersistMode::SyncData)
            .map_err(|e| self.write_failed("sync failed", e))
    }

    /// Flushes every keyspace's memtable (the catalog's too) into tables, syncs, then starts
    /// a new journal: the old one, holding only what the tables now hold, is deleted, so a
    /// graceful close leaves no journal to keep or replay (up to 64 MB of it otherwise: fjall
    /// starts a new journal only past that size).
    fn checkpoint_once(&self) -> Result<()> {
        let open = self.handle()?;
        let tables: Vec<Table> = open.tables.read().values().cloned().collect();
        let keyspaces = tables
            .iter()
            .flat_map(|t| std::iter::once(&t.rows).chain(t.groups.as_ref().map(|g| &g.rows)))
            .chain(std::iter::once(&open.catalog));
        for rows in keyspaces {
            self.flush_memtable(&open, rows)?;
        }
        // Flushed above, so the merge reaches every superseded version; a merge that fails
        // fails nothing else (the close goes on).
        for t in &tables {
            if let Some(groups) = &t.groups
                && let Some(counted) = Self::superseded_to_reclaim(groups)
            {
                Self::reclaim(&t.spec.name, groups, counted);
            }
        }
        open.db
            .persist(PersistMode::SyncAll)
            .map_err(|e| self.write_failed("sync failed", e))?;
        open.db
            .rotate_journal()
            .map_err(|e| self.write_failed("journal rotation failed", e))
    }
}

impl Store for FjallStore {
    fn create_table(&self, spec: &TableSpec) -> Result<()> {
        self.retrying(|| self.create_table_once(spec))
    }

    fn mutate_rows(&self, table: &str, rows: &[RowMutation]) -> Result<()> {
        self.retrying(|| self.mutate_rows_once(table, rows))
    }

    fn put_cells(&self, table: &str, rows: &[CellRow<'_>]) -> Result<()> {
        self.retrying(|| self.put_cells_once(table, rows))
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

    fn check_and_mutate_rows(
        &self,
        table: &str,
        checks: &[RowCheck],
        rows: &[RowMutation],
    ) -> Result<Option<bool>> {
        self.retrying(|| self.check_and_mutate_rows_once(table, checks, rows))
            .map(Some)
    }

    fn sync(&self) -> Result<()> {
        self.retrying(|| self.sync_once())
    }

    fn checkpoint(&self) -> Result<()> {
        self.retrying(|| self.checkpoint_once())
    }

    /// Flushes the table's memtables. A table file is synced before it joins the tree, so
    /// what a failed sync can have left in the OS's cache only is the journal's, replayed
    /// into the memtables at open: flushed, it is in a synced table file. Nothing else is
    /// written again, however large the table.
    fn make_table_durable(&self, table: &str) -> Result<()> {
        self.retrying(|| {
            let (open, t) = self.table(table)?;
            self.flush_memtable(&open, &t.rows)?;
            if let Some(groups) = &t.groups {
                self.flush_memtable(&open, &groups.rows)?;
            }
            Ok(())
        })
    }

    fn maintain(&self, now_ms: i64) -> Result<()> {
        self.retrying(|| self.maintain_once(now_ms))
    }

    fn backend(&self) -> &'static str {
        "embedded"
    }

    fn table_exists(&self, table: &str) -> Result<bool> {
        Ok(self.handle_for_read()?.tables.read().contains_key(table))
    }

    fn get(&self, table: &str, key: &[u8], read: &ReadOptions) -> Result<Option<Row>> {
        let (open, t) = self.table_for_read(table)?;
        // A grouped row is read from the row keyspace, then its group: from one snapshot,
        // or a grouping pass between the two reads would hide it.
        let snapshot = t.groups.is_some().then(|| open.db.snapshot());
        let loaded = Self::load(&t, key, &mut GroupCache::default(), snapshot.as_ref())?;
        if loaded.row.is_empty() {
            // No key copied for a row that is not there (a new name's forward mapping).
            return Ok(None);
        }
        Ok(loaded.row.into_read(key.to_vec(), read))
    }

    fn get_rows(
        &self,
        table: &str,
        keys: &[Vec<u8>],
        read: &ReadOptions,
    ) -> Result<Vec<Option<Row>>> {
        let (open, t) = self.table_for_read(table)?;
        // Rows of one group (a series' hours) read it once, all from one snapshot.
        let snapshot = t.groups.is_some().then(|| open.db.snapshot());
        let mut cache = GroupCache::default();
        keys.iter()
            .map(|key| {
                let loaded = Self::load(&t, key, &mut cache, snapshot.as_ref())?;
                Ok(loaded.row.into_read(key.clone(), read))
            })
            .collect()
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
        // Stop pulling from the tree once the limit is reached.
        let limit = request.limit.unwrap_or(usize::MAX);
        if let Some(rows) = Self::grouped_scan(open.clone(), &t, request)? {
            return Ok(Box::new(rows.take(limit)));
        }
        let filter = ScanFilter::new(request)?;
        let upper = match &request.end {
            Some(end) => Bound::Excluded(end.clone()),
            None => Bound::Unbounded,
        };
        let raw = RawRows::new(
            t.rows.clone(),
            None,
            request.start.clone(),
            upper,
            request.skip.clone(),
        );
        let rows = Scan {
            _open: open,
            codec: t.codec.clone(),
            keep_encoded: request.read.encoded_cells,
            filter,
            raw,
        };
        Ok(Box::new(rows.take(limit)))
    }

    /// A grouped table's groups of joint members are lent from their group values, decoded
    /// into buffers kept for the whole scan; other rows are handed over as [`Store::scan`]
    /// returns them.
    fn scan_joint(
        &self,
        table: &str,
        request: &ScanRequest,
        visit: JointVisitor<'_>,
    ) -> Result<()> {
        let (open, t) = self.table_for_read(table)?;
        let Some(mut rows) = Self::grouped_scan(open, &t, request)? else {
            for row in self.scan(table, request)? {
                visit(Scanned::Row(row?))?;
            }
            return Ok(());
        };
        rows.lend_groups = rows.joint_rows;
        let mut scratch = JointScratch::default();
        let mut returned = 0;
        while !rows.filter.is_full(returned) {
            let pending = match rows.next_pending() {
                None => break,
                Some(pending) => pending?,
            };
            if let Pending::Group { key, value } = &pending {
                if rows.lend_group(key, value, &mut scratch, &mut *visit)? {
                    returned += 1;
                }
                continue;
            }
            if let Some(row) = rows.take_row(pending)? {
                returned += 1;
                visit(Scanned::Row(row))?;
            }
        }
        Ok(())
    }

    /// Rows of a table without codec lend cells borrowed from their stored bytes (one
    /// parse of the row value, no copy per cell; a grouped table's members from their
    /// group's value, RFC 0012); other tables visit [`Store::scan`]'s rows.
    fn scan_cells(&self, table: &str, request: &ScanRequest, visit: CellVisitor<'_>) -> Result<()> {
        let (open, t) = self.table_for_read(table)?;
        if t.codec.is_some() {
            for row in self.scan(table, request)? {
                let row = row?;
                let cells: Vec<CellRef<'_>> = row.cells.iter().map(CellRef::from).collect();
                visit(&row.key, LentCells::Cells(&cells))?;
            }
            return Ok(());
        }
        let filter = ScanFilter::new(request)?;
        let mut returned = 0;
        let mut cells: Vec<CellRef<'_>> = Vec::new();
        if let Some(mut rows) = Self::grouped_scan(open.clone(), &t, request)? {
            let grouping = rows.grouping;
            // Rows lent a series at a time count each toward a limit: only without one.
            rows.lend_series = request.read.series_rows && request.limit.is_none();
            let mut series = SeriesScratch::default();
            let mut key = Vec::new();
            while !filter.is_full(returned) {
                let pending = match rows.next_pending() {
                    None => break,
                    Some(Err(e)) => return Err(e),
                    Some(Ok(Pending::Series { key, value })) => {
                        returned += rows.lend_series(&key, &value, &mut series, &mut *visit)?;
                        continue;
                    }
                    Some(Ok(Pending::Row(row))) => {
                        let lent: Vec<CellRef<'_>> = row.cells.iter().map(CellRef::from).collect();
                        returned += 1;
                        visit(&row.key, LentCells::Cells(&lent))?;
                        continue;
                    }
                    Some(Ok(pending)) => pending,
                };
                let Some(bytes) = pending.stored(&grouping, &mut key) else {
                    continue;
                };
                let mut lent = reuse_vec(std::mem::take(&mut cells));
                if lend_one(&key, bytes, filter.read(), &mut lent, &mut *visit)? {
                    returned += 1;
                }
                cells = reuse_vec(lent);
            }
            return Ok(());
        }
        let upper = match &request.end {
            Some(end) => Bound::Excluded(end.clone()),
            None => Bound::Unbounded,
        };
        let mut raw = RawRows::new(
            t.rows.clone(),
            None,
            request.start.clone(),
            upper,
            request.skip.clone(),
        );
        while !filter.is_full(returned) {
            let Some(item) = raw.next(&filter) else {
                break;
            };
            let (key, value) = item?;
            // `RawRows` passed the key through the regex already.
            let mut lent = reuse_vec(std::mem::take(&mut cells));
            if lend_one(&key, &value, filter.read(), &mut lent, &mut *visit)? {
                returned += 1;
            }
            cells = reuse_vec(lent);
        }
        drop(open);
        Ok(())
    }

    fn is_shared(&self) -> bool {
        false
    }

    fn increment_many(
        &self,
        table: &str,
        key: &[u8],
        increments: &[hourglass_storage::Increment],
    ) -> hourglass_storage::Result<Vec<i64>> {
        hourglass_storage::fallback::increment_many(self, table, key, increments)
    }

    fn append(
        &self,
        table: &str,
        key: &[u8],
        family: &str,
        qualifier: &[u8],
        suffix: &[u8],
    ) -> hourglass_storage::Result<()> {
        hourglass_storage::fallback::append(self, table, key, family, qualifier, suffix)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_indexed_line_is_written_read_and_refused_by_older_parsers() {
        let spec = TableSpec {
            name: "tsdb".into(),
            families: vec![FamilySpec::new("t", Some(1))],
        };
        let grouping = Grouping {
            timestamp_offset: 3,
            period_secs: 86_400,
            grace_secs: 3600,
        };
        let bytes = encode_spec(&spec, Some(grouping), true);
        assert_eq!(bytes, b"t:1\n@grouped=3,86400,3600\n@indexed=1\n");
        let (read, g, indexed) = decode_spec("tsdb", &bytes).unwrap();
        assert_eq!((read, g, indexed), (spec.clone(), Some(grouping), true));
        assert!(
            !decode_spec("tsdb", &encode_spec(&spec, None, false))
                .unwrap()
                .2
        );
        // Binaries before RFC 0007 read every other line as `family:versions`: this one
        // has no ':', so they refuse the table (`bad table spec`).
        assert!(INDEXED_LINE.rsplit_once(':').is_none());
        assert!(decode_spec("tsdb", b"t:1\n@indexed=2\n").is_err());
    }

    /// The first-level merge threshold of a table's keyspace, as fjall keeps it.
    fn l0_threshold(store: &FjallStore, table: &str) -> u8 {
        let (_, t) = store.table(table).unwrap();
        let config = t.rows.config.compaction_strategy.get_config();
        let (_, value) = config
            .iter()
            .find(|(k, _)| &**k == b"leveled_l0_threshold")
            .unwrap();
        value[0]
    }

    /// A table created with a threshold keeps it across reopening (fjall stores a
    /// keyspace's options when creating it); other tables keep fjall's default, and a
    /// threshold asked for a table that exists already changes nothing.
    #[test]
    fn a_table_is_created_with_its_first_level_threshold() {
        let dir = tempfile::tempdir().unwrap();
        let spec = |name: &str| TableSpec {
            name: name.into(),
            families: vec![FamilySpec::new("f", Some(1))],
        };
        {
            let store = FjallStore::open(dir.path())
                .unwrap()
                .with_l0_threshold("idx", 32);
            store.create_table(&spec("idx")).unwrap();
            store.create_table(&spec("plain")).unwrap();
            assert_eq!(l0_threshold(&store, "idx"), MAX_L0_THRESHOLD);
            assert_eq!(l0_threshold(&store, "plain"), 4);
        }
        let store = FjallStore::open(dir.path())
            .unwrap()
            .with_l0_threshold("plain", 16);
        store.create_table(&spec("plain")).unwrap();
        assert_eq!(l0_threshold(&store, "idx"), MAX_L0_THRESHOLD);
        assert_eq!(l0_threshold(&store, "plain"), 4);
    }

    /// Writes rows `a{i}` and `z{i}` to `table` and flushes them: one first-level run that
    /// spans the others' keys (as a flush's index entries span the kinds), so none is moved
    /// down without a merge.
    fn put_overlapping_run(store: &FjallStore, table: &str, i: usize) {
        for key in [format!("a{i:03}"), format!("z{i:03}")] {
            store
                .mutate_row(
                    table,
                    key.as_bytes(),
                    &[Mutation::SetCell {
                        family: "f".into(),
                        qualifier: b"q".to_vec(),
                        timestamp: Some(1),
                        value: vec![i as u8],
                    }],
                )
                .unwrap();
        }
        store.make_table_durable(table).unwrap();
    }

    /// A keyspace made with a first-level threshold above fjall's write stall (the tag
    /// index's was 32) has its first level merged at the next upkeep and at the next open
    /// once it holds [`STALL_RUNS`] files: at 30 runs fjall halts writes until a merge,
    /// which that threshold never started. Thresholds asked for now stay under it.
    #[test]
    fn a_first_level_at_the_write_stall_is_merged() {
        let dir = tempfile::tempdir().unwrap();
        let spec = TableSpec {
            name: "idx".into(),
            families: vec![FamilySpec::new("f", Some(1))],
        };
        let fill = |store: &FjallStore, from: usize| {
            for i in from..from + STALL_RUNS + 1 {
                put_overlapping_run(store, "idx", i);
            }
        };
        {
            let store = FjallStore::open(dir.path()).unwrap();
            // As an older binary made it, past what `with_l0_threshold` now allows.
            store.l0_thresholds.write().insert("idx".into(), 32);
            store.create_table(&spec).unwrap();
            assert_eq!(l0_threshold(&store, "idx"), 32);
            fill(&store, 0);
            assert!(store.first_level_runs("idx").unwrap() >= STALL_RUNS);
            store.maintain(0).unwrap();
            assert!(
                store.first_level_runs("idx").unwrap() < STALL_RUNS / 2,
                "the upkeep"
            );
            fill(&store, STALL_RUNS + 1);
        }
        let store = FjallStore::open(dir.path()).unwrap();
        assert!(
            store.first_level_runs("idx").unwrap() < STALL_RUNS / 2,
            "the open"
        );
        let rows = store.scan("idx", &ScanRequest::default()).unwrap().count();
        assert_eq!(rows, 4 * (STALL_RUNS + 1));
    }

    /// A table whose first level is merged late has its runs merged once they stay
    /// unchanged for a minute of the store's upkeep (not before), in the background, and
    /// reads the same after.
    #[test]
    fn idle_runs_of_a_late_merged_table_are_merged() {
        let dir = tempfile::tempdir().unwrap();
        let store = FjallStore::open(dir.path())
            .unwrap()
            .with_l0_threshold("idx", 32);
        store
            .create_table(&TableSpec {
                name: "idx".into(),
                families: vec![FamilySpec::new("f", Some(1))],
            })
            .unwrap();
        let rows = 6;
        for i in 0..rows {
            put_overlapping_run(&store, "idx", i);
        }
        let runs = store.first_level_runs("idx").unwrap();
        assert!(runs >= IDLE_MERGE_RUNS, "{runs} runs");
        let t0 = 1_000_000;
        store.maintain(t0).unwrap();
        store.maintain(t0 + IDLE_MERGE_AFTER_MS - 1).unwrap();
        assert!(store.merging.lock().is_none());
        assert_eq!(
            store.first_level_runs("idx").unwrap(),
            runs,
            "not merged before the runs stayed a minute"
        );
        store.maintain(t0 + IDLE_MERGE_AFTER_MS).unwrap();
        if let Some(merging) = store.merging.lock().take() {
            merging.join().unwrap();
        }
        assert!(
            store.first_level_runs("idx").unwrap() < IDLE_MERGE_RUNS,
            "merged"
        );
        let read: Vec<Vec<u8>> = store
            .scan("idx", &ScanRequest::default())
            .unwrap()
            .map(|r| r.unwrap().cells[0].value.clone())
            .collect();
        let want: Vec<Vec<u8>> = (0..2)
            .flat_map(|_| (0..rows as u8).map(|i| vec![i]))
            .collect();
        assert_eq!(read, want);
    }

    /// Every keyspace a table makes (rows, groups, a first-level threshold or not) keeps
    /// its Bloom filters of every level in memory, across reopening: a filter read through
    /// the block cache was refused by it once over 3.2 MiB, and each point read then read
    /// the whole filter from its file (15 ms a lookup at 1,000,000 series).
    #[test]
    fn every_keyspace_keeps_the_filters_of_every_level() {
        let dir = tempfile::tempdir().unwrap();
        let spec = |name: &str| TableSpec {
            name: name.into(),
            families: vec![FamilySpec::new("f", Some(1))],
        };
        let grouping = Grouping {
            timestamp_offset: 3,
            period_secs: 86_400,
            grace_secs: 3600,
        };
        let pinned = |store: &FjallStore, table: &str| {
            let (_, t) = store.table(table).unwrap();
            let mut policies = vec![t.rows.config.filter_block_pinning_policy.clone()];
            if let Some(g) = &t.groups {
                policies.push(g.rows.config.filter_block_pinning_policy.clone());
            }
            policies
        };
        let all = PinningPolicy::all(true);
        {
            let store = FjallStore::open(dir.path())
                .unwrap()
                .with_grouping("data", grouping)
                .with_l0_threshold("idx", 32);
            for name in ["data", "idx", "plain"] {
                store.create_table(&spec(name)).unwrap();
            }
            assert_eq!(pinned(&store, "data"), vec![all.clone(), all.clone()]);
            assert_eq!(pinned(&store, "idx"), vec![all.clone()]);
            assert_eq!(pinned(&store, "plain"), vec![all.clone()]);
        }
        let store = FjallStore::open(dir.path()).unwrap();
        assert_eq!(pinned(&store, "data"), vec![all.clone(), all.clone()]);
        assert_eq!(pinned(&store, "idx"), vec![all.clone()]);
    }

    /// A check-and-mutate across rows writes a row that was absent and gets one cell as the
    /// bytes the row model gives it (the row written whole from its mutations), beside a row
    /// that existed and is rewritten through the model, and reads back both; a key named
    /// twice, or a family not in the table, still goes through the model.
    #[test]
    fn new_one_cell_rows_are_stored_as_the_row_model_stores_them() {
        let dir = tempfile::tempdir().unwrap();
        let spec = TableSpec {
            name: "uid".into(),
            families: vec![
                FamilySpec::new("id", Some(1)),
                FamilySpec::new("name", Some(1)),
            ],
        };
        let store = FjallStore::open(dir.path()).unwrap();
        store.create_table(&spec).unwrap();
        store
            .mutate_row(
                "uid",
                b"ctr",
                &[
                    Mutation::set("id", b"q".to_vec(), vec![1]),
                    Mutation::set("name", b"q".to_vec(), b"kept".to_vec()),
                ],
            )
            .unwrap();
        let before = now_ms();
        let new_cell = |key: &[u8], family: &str, value: &[u8]| RowMutation {
            key: key.to_vec(),
            mutations: vec![Mutation::set(family, b"q".to_vec(), value.to_vec())],
        };
        let rows = [
            new_cell(b"ctr", "id", &[2]),
            new_cell(b"fresh", "name", b"a name"),
            new_cell(b"twice", "id", b"1"),
            new_cell(b"twice", "name", b"2"),
        ];
        let absent = RowCheck {
            key: b"fresh".to_vec(),
            check: Check {
                family: "name".into(),
                qualifier: b"q".to_vec(),
                expected: None,
            },
        };
        assert_eq!(
            store
                .check_and_mutate_rows("uid", &[absent], &rows)
                .unwrap(),
            Some(true)
        );
        let after = now_ms();
        let (_, t) = store.table("uid").unwrap();
        for (key, cells) in [
            (&b"ctr"[..], vec![("id", &[2][..]), ("name", b"kept")]),
            (b"fresh", vec![("name", b"a name")]),
            (b"twice", vec![("id", b"1"), ("name", b"2")]),
        ] {
            let row = store
                .get("uid", key, &ReadOptions::default())
                .unwrap()
                .unwrap();
            let read: Vec<(&str, &[u8])> = row
                .cells
                .iter()
                .map(|c| (c.family.as_str(), c.value.as_slice()))
                .collect();
            assert_eq!(read, cells, "{key:?}");
            let mut written = row.cells.iter().filter(|c| c.value != b"kept");
            assert!(
                written.all(|c| (before..=after).contains(&c.timestamp)),
                "{key:?}: written at the store's clock"
            );
            // The stored bytes are the model's for the cells read back (their timestamps).
            let model = RowData::from_cells(row.cells.clone());
            let stored = t.rows.get(key).unwrap().unwrap();
            assert_eq!(&*stored, model.encode(None).as_slice(), "{key:?}");
        }
        // A family the table has not: refused, nothing written.
        let bad = [new_cell(b"p", "id", b"1"), new_cell(b"r", "nope", b"1")];
        assert!(store.check_and_mutate_rows("uid", &[], &bad).is_err());
        assert_eq!(
            store.get("uid", b"p", &ReadOptions::default()).unwrap(),
            None
        );
    }

    /// A group stored under a key whose base time is not its period's start (stored bytes
    /// gone wrong): a series' rows lent together (`ReadOptions::series_rows`) are the rows
    /// lent one by one, each with the base time of the key it is read under (the visit's
    /// key with that base time).
    #[test]
    fn a_series_rows_lent_together_have_the_base_times_of_their_keys() {
        let dir = tempfile::tempdir().unwrap();
        let grouping = Grouping {
            timestamp_offset: 1,
            period_secs: 7200,
            grace_secs: 0,
        };
        let store = FjallStore::open(dir.path())
            .unwrap()
            .with_grouping("t", grouping);
        store
            .create_table(&TableSpec {
                name: "t".into(),
                families: vec![FamilySpec::new("t", Some(1))],
            })
            .unwrap();
        let key = |hour: u32| {
            let mut k = vec![1u8];
            k.extend_from_slice(&(hour * 3600).to_be_bytes());
            k.push(1);
            k
        };
        let rows: Vec<RowMutation> = (0u8..2)
            .map(|hour| RowMutation {
                key: key(u32::from(hour)),
                mutations: (0u8..3)
                    .map(|q| Mutation::set_at("t", vec![q], 1_000, vec![q + hour]))
                    .collect(),
            })
            .collect();
        store.mutate_rows("t", &rows).unwrap();
        store.maintain(4 * 3_600_000).unwrap();
        // The group of hours 0 and 1 moved under the key of hour 1.
        {
            let (open, t) = store.table("t").unwrap();
            let groups = t.groups.as_ref().unwrap();
            let stored: Vec<_> = groups
                .rows
                .iter()
                .map(|g| g.into_inner().unwrap())
                .collect();
            assert_eq!(stored.len(), 1);
            assert_eq!(&*stored[0].0, key(0).as_slice());
            let mut batch = open.db.batch();
            batch.remove(&groups.rows, key(0));
            batch.insert(&groups.rows, key(1), stored[0].1.to_vec());
            batch.commit().unwrap();
        }
        type Lent = Vec<(Vec<u8>, Vec<(Vec<u8>, i64, Vec<u8>)>)>;
        let read = |series_rows: bool| {
            let (mut out, mut series_visits): (Lent, usize) = (Vec::new(), 0);
            let request = ScanRequest {
                read: ReadOptions {
                    series_rows,
                    ..ReadOptions::default()
                },
                ..ScanRequest::range(Vec::new(), None)
            };
            let mut visit = |key: &[u8], cells: LentCells<'_, '_>| {
                let (mut rows, mut buf) = (Vec::new(), Vec::new());
                match cells {
                    LentCells::Series(series) => {
                        series_visits += 1;
                        for r in series.rows {
                            let mut k = key.to_vec();
                            let at = series.base_at;
                            k[at..at + 4].copy_from_slice(&r.base.to_be_bytes());
                            r.cells.lend(&mut buf);
                            rows.push((k, buf.clone()));
                        }
                    }
                    cells => rows.push((key.to_vec(), cells.cells(&mut buf).to_vec())),
                }
                for (k, cells) in rows {
                    let cells = cells
                        .iter()
                        .map(|c| (c.qualifier.to_vec(), c.timestamp, c.value.to_vec()))
                        .collect();
                    out.push((k, cells));
                }
                Ok(())
            };
            store.scan_cells("t", &request, &mut visit).unwrap();
            (out, series_visits)
        };
        let (one_by_one, _) = read(false);
        assert_eq!(
            one_by_one
                .iter()
                .map(|(k, _)| k.clone())
                .collect::<Vec<_>>(),
            vec![key(0), key(1)]
        );
        assert_eq!(read(true), (one_by_one, 1));
    }

    /// A group stored under a key whose base time is not its period's start (stored bytes
    /// gone wrong), with a row written since in the row keyspace at one of its members' keys:
    /// the row replaces that member, the member read under the key the row replaces, and no
    /// other; every other member reads as before. Members are read under the period's start
    /// plus their offsets, so that is what a row of the row keyspace is matched against.
    #[test]
    fn a_row_shadows_the_member_read_under_its_key_in_a_misplaced_group() {
        for codec in [false, true] {
            a_row_shadows_the_member_read_under_its_key_in_a_misplaced_group_with(codec);
        }
    }

    /// A codec that keeps every cell as written: a table with it reads its groups through
    /// the codec's path.
    #[derive(Debug)]
    struct Plain;

    impl CellCodec for Plain {
        fn encode(&self, _family: &str, _qualifier: &[u8], _value: &[u8]) -> Option<Vec<u8>> {
            None
        }

        fn decode(&self, _family: &str, _encoded: &[u8]) -> Result<(Vec<u8>, Vec<u8>)> {
            Err(Error::Corrupt("no blobs".into()))
        }
    }

    fn a_row_shadows_the_member_read_under_its_key_in_a_misplaced_group_with(codec: bool) {
        let dir = tempfile::tempdir().unwrap();
        let grouping = Grouping {
            timestamp_offset: 1,
            period_secs: 7200,
            grace_secs: 0,
        };
        let store = FjallStore::open(dir.path()).unwrap();
        let store = if codec {
            store.with_cell_codec("t", Arc::new(Plain))
        } else {
            store
        };
        let store = store.with_grouping("t", grouping);
        store
            .create_table(&TableSpec {
                name: "t".into(),
                families: vec![FamilySpec::new("t", Some(1))],
            })
            .unwrap();
        let key = |hour: u32| {
            let mut k = vec![1u8];
            k.extend_from_slice(&(hour * 3600).to_be_bytes());
            k.push(1);
            k
        };
        let row = |hour: u32, value: u8| RowMutation {
            key: key(hour),
            mutations: (0u8..3)
                .map(|q| Mutation::set_at("t", vec![q], 1_000, vec![q + value]))
                .collect(),
        };
        // Hour 1's row as the row keyspace holds it, then the rows grouped.
        store.mutate_rows("t", &[row(1, 20)]).unwrap();
        let late = {
            let (_open, t) = store.table("t").unwrap();
            t.rows.get(key(1)).unwrap().unwrap()
        };
        store.mutate_rows("t", &[row(0, 0), row(1, 10)]).unwrap();
        store.maintain(4 * 3_600_000).unwrap();
        // The group of hours 0 and 1 moved under the key of hour 1, and hour 1's row of
        // value 20 in the row keyspace over its member (as a write since the grouping pass).
        {
            let (open, t) = store.table("t").unwrap();
            let groups = t.groups.as_ref().unwrap();
            let stored: Vec<_> = groups
                .rows
                .iter()
                .map(|g| g.into_inner().unwrap())
                .collect();
            assert_eq!(stored.len(), 1);
            let mut batch = open.db.batch();
            batch.remove(&groups.rows, key(0));
            batch.insert(&groups.rows, key(1), stored[0].1.to_vec());
            batch.insert(&t.rows, key(1), late.to_vec());
            batch.commit().unwrap();
        }
        let values = |read: ReadOptions| {
            let request = ScanRequest {
                read,
                ..ScanRequest::range(Vec::new(), None)
            };
            let mut rows: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            for r in store.scan("t", &request).unwrap() {
                let r = r.unwrap();
                rows.push((r.key, r.cells.iter().map(|c| c.value[0]).collect()));
            }
            let mut lent: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            let mut visit = |k: &[u8], cells: LentCells<'_, '_>| {
                let mut buf = Vec::new();
                match cells {
                    LentCells::Series(series) => {
                        for r in series.rows {
                            let mut k = k.to_vec();
                            let at = series.base_at;
                            k[at..at + 4].copy_from_slice(&r.base.to_be_bytes());
                            r.cells.lend(&mut buf);
                            lent.push((k, buf.iter().map(|c| c.value[0]).collect()));
                        }
                    }
                    cells => lent.push((
                        k.to_vec(),
                        cells.cells(&mut buf).iter().map(|c| c.value[0]).collect(),
                    )),
                }
                Ok(())
            };
            store.scan_cells("t", &request, &mut visit).unwrap();
            assert_eq!(lent, rows, "lent as scanned, codec {codec}");
            rows
        };
        let want = vec![(key(0), vec![0, 1, 2]), (key(1), vec![20, 21, 22])];
        assert_eq!(values(ReadOptions::default()), want, "codec {codec}");
        assert_eq!(
            values(ReadOptions {
                series_rows: true,
                ..ReadOptions::default()
            }),
            want,
            "codec {codec}"
        );
    }

    /// The key of `series` (one byte of tags) at `hour` in the series-filter tests' table.
    fn hour_key(hour: u32, series: u8) -> Vec<u8> {
        let mut k = vec![1u8];
        k.extend_from_slice(&(hour * 3600).to_be_bytes());
        k.push(series);
        k
    }

    /// A store whose table `t` groups rows by periods of two hours, and that table's spec.
    fn two_hour_groups(dir: &std::path::Path) -> (FjallStore, TableSpec) {
        let grouping = Grouping {
            timestamp_offset: 1,
            period_secs: 7200,
            grace_secs: 0,
        };
        let spec = TableSpec {
            name: "t".into(),
            families: vec![FamilySpec::new("t", Some(1))],
        };
        let store = FjallStore::open(dir).unwrap().with_grouping("t", grouping);
        store.create_table(&spec).unwrap();
        (store, spec)
    }

    /// Twelve series a row each hour of `hours`, their values `len` bytes.
    fn twelve_series(hours: u32, len: usize) -> Vec<RowMutation> {
        (0..hours)
            .flat_map(|hour| {
                (0..12u8).map(move |s| RowMutation {
                    key: hour_key(hour, s),
                    mutations: vec![Mutation::set_at("t", vec![0], 1, vec![s; len])],
                })
            })
            .collect()
    }

    /// A series filter's scan for `wanted` from hour `from` to hour `to` (excluded), with a
    /// hint from a refused key to `wanted`'s row at that hour, or at the next if the refused
    /// key's series sorts after it.
    fn series_request(wanted: u8, from: u32, to: u32) -> ScanRequest {
        let hint = SkipHint(Arc::new(move |k: &[u8]| {
            let hour = u32::from_be_bytes(k.get(1..5)?.try_into().ok()?);
            match k.get(5) {
                Some(s) if *s >= wanted => Some(hour_key(hour / 3600 + 1, wanted)),
                _ => Some(hour_key(hour / 3600, wanted)),
            }
        }));
        ScanRequest {
            key_regex: Some(format!("(?s)^.{{5}}\\x{wanted:02x}$")),
            skip: Some(hint),
            series_filter: true,
            ..ScanRequest::range(
                hour_key(from, 0)[..5].to_vec(),
                Some(hour_key(to, 0)[..5].to_vec()),
            )
        }
    }

    /// `request`'s rows from the store's grouped scan (returned, spent, for its counts) and
    /// from the model.
    fn scan_both(
        store: &FjallStore,
        model: &hourglass_storage::memory::MemoryStore,
        request: &ScanRequest,
    ) -> (Vec<Row>, Vec<Row>, GroupedScan) {
        let (open, t) = store.table_for_read("t").unwrap();
        let mut scan = FjallStore::grouped_scan(open, &t, request)
            .unwrap()
            .unwrap();
        let got: Vec<Row> = scan.by_ref().map(|r| r.unwrap()).collect();
        let expected: Vec<Row> = model
            .scan("t", request)
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        (got, expected, scan)
    }

    /// A series filter's scan builds one iterator over the groups keyspace a period: it
    /// starts at the hint's target in the first period, goes from each period's group of the
    /// series straight to its group of the next period, and builds none past the scan's end.
    /// Groups a block or more in size (two 2,500-byte members), so that none is read past;
    /// twelve series over four periods of two hours, one hour of each rewritten since the
    /// grouping pass; the rows are those of the model.
    #[test]
    fn a_series_filter_builds_one_group_iterator_a_period() {
        let dir = tempfile::tempdir().unwrap();
        let (store, spec) = two_hour_groups(dir.path());
        let model = hourglass_storage::memory::MemoryStore::new();
        model.create_table(&spec).unwrap();
        let rows = twelve_series(8, 2500);
        store.mutate_rows("t", &rows).unwrap();
        model.mutate_rows("t", &rows).unwrap();
        store.maintain(9 * 3_600_000).unwrap();
        // Since the pass: every series' member of hour 1 replaced (rows of the row
        // keyspace, read from the hint's target too).
        let late: Vec<RowMutation> = (0..12u8)
            .map(|s| RowMutation {
                key: hour_key(1, s),
                mutations: vec![Mutation::set_at("t", vec![0], 2, vec![s ^ 0x80; 10])],
            })
            .collect();
        store.mutate_rows("t", &late).unwrap();
        model.mutate_rows("t", &late).unwrap();
        for wanted in [0u8, 5, 11] {
            let (got, expected, scan) = scan_both(&store, &model, &series_request(wanted, 0, 8));
            assert_eq!(got.len(), 8, "series {wanted}");
            assert_eq!(got, expected, "series {wanted}");
            assert_eq!(scan.group_iters, 4, "series {wanted}");
        }
    }

    /// A series filter's scan over groups smaller than a block reads past a few of them
    /// toward the hint's target, but none once the target is past the scan's end: after the
    /// series' group of the last period it reads one more, the group the hint refuses.
    #[test]
    fn a_series_filter_reads_no_group_toward_a_target_past_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let (store, spec) = two_hour_groups(dir.path());
        let model = hourglass_storage::memory::MemoryStore::new();
        model.create_table(&spec).unwrap();
        let rows = twelve_series(4, 10);
        store.mutate_rows("t", &rows).unwrap();
        model.mutate_rows("t", &rows).unwrap();
        store.maintain(5 * 3_600_000).unwrap();
        // The second period only: its first hour to the end of the data.
        let (got, expected, scan) = scan_both(&store, &model, &series_request(5, 2, 4));
        assert_eq!(got.len(), 2);
        assert_eq!(got, expected);
        // From the hint's target: series 5's group, then series 6's, refused.
        assert_eq!(scan.groups_read, 2);
    }
}
