//! The storage model: tables of rows in unsigned byte order of their keys; each row holds
//! cells `(family, qualifier, timestamp) -> value`. This is the part of Bigtable's (and
//! HBase's) data model that OpenTSDB uses, and every backend implements [`Store`].
//!
//! Cell timestamps are milliseconds chosen by the writer (or the store's clock when left
//! out) and are filterable, so logical-time patterns such as time shifting work.

#[cfg(feature = "conformance")]
pub mod conformance;
mod error;
pub mod memory;
pub mod metered;
pub mod model;
mod regex_filter;
pub mod rice;
mod types;

pub use error::{Error, ErrorKind, Result};
pub use model::{
    CellCodec, ColumnCells, ColumnValues, JointCell, JointForm, JointMember, JointShape,
};
pub use regex_filter::KeyRegex;
pub use types::*;

use std::fmt::Debug;

/// A data-table row key with its 4-byte base time (at `timestamp_offset`) moved to the end:
/// keys in this order come series by series, each in time order (the order within a period
/// of [`Store::scan`]'s period order). A key too short to hold a base time is returned as it is.
pub fn series_major(key: &[u8], timestamp_offset: usize) -> Vec<u8> {
    let at = timestamp_offset;
    match key.get(at..at + 4) {
        Some(time) => {
            let mut out = Vec::with_capacity(key.len());
            out.extend_from_slice(&key[..at]);
            out.extend_from_slice(&key[at + 4..]);
            out.extend_from_slice(time);
            out
        }
        None => key.to_vec(),
    }
}

/// Refuses an [`Store::increment_many`] naming one column twice (backends would disagree
/// on the value to return for it).
pub fn check_distinct(increments: &[Increment]) -> Result<()> {
    for (i, a) in increments.iter().enumerate() {
        if increments[..i]
            .iter()
            .any(|b| b.family == a.family && b.qualifier == a.qualifier)
        {
            return Err(Error::InvalidRequest(format!(
                "a column is named twice in one increment. family={} qualifier={:02x?}",
                a.family, a.qualifier
            )));
        }
    }
    Ok(())
}

/// Wall-clock milliseconds: the cell timestamp of writes that do not choose one.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Rows of a scan, in the order [`Store::scan`] states.
pub type RowIter = Box<dyn Iterator<Item = Result<Row>> + Send>;

/// A wide-column store. Implementations are internally synchronized; a row mutation is atomic.
pub trait Store: Send + Sync + Debug {
    /// Short name of the backend for logs and stats (`memory`, `embedded`, `bigtable`).
    fn backend(&self) -> &'static str;

    /// Whether other processes read this store directly (several TSDs share one Bigtable
    /// instance): a point is visible to them only once written here, so a TSD's `?sync`
    /// waits for the store write rather than for its own log.
    fn is_shared(&self) -> bool;

    /// Creates a table, or adds the families it lacks. Idempotent.
    fn create_table(&self, spec: &TableSpec) -> Result<()>;

    fn table_exists(&self, table: &str) -> Result<bool>;

    /// One row, filtered by `read`; `None` when no cell passes.
    fn get(&self, table: &str, key: &[u8], read: &ReadOptions) -> Result<Option<Row>>;

    /// Several rows at once (`None` where a row has no cell passing `read`), in `keys` order.
    /// Backends with a round trip per call override this with one multi-row read.
    fn get_rows(
        &self,
        table: &str,
        keys: &[Vec<u8>],
        read: &ReadOptions,
    ) -> Result<Vec<Option<Row>>>;

    /// Applies mutations to one row atomically.
    fn mutate_row(&self, table: &str, key: &[u8], mutations: &[Mutation]) -> Result<()>;

    /// Applies mutations to many rows; each row's mutations are atomic, the batch is not.
    fn mutate_rows(&self, table: &str, rows: &[RowMutation]) -> Result<()>;

    /// Replaces each row with its one cell: the same as [`Store::mutate_rows`] of a
    /// `DeleteRow` then the cell's set, row by row (atomic per row, not per batch; a key
    /// repeated: the last stands). A backend may write rows given in strictly ascending key
    /// order without building its row model (the embedded store does: the tag index's
    /// entries are such rows).
    fn put_cells(&self, table: &str, rows: &[CellRow<'_>]) -> Result<()>;

    /// Rows with `start <= key < end` (no end: to the last row) passing the filters, each
    /// once, in key order, or, for a data table a backend keeps a series' period together
    /// in (RFC 0006), in *period order*: the key order of each row's key with its base time
    /// replaced by the start of its period, then the base time. Either way the rows of one
    /// series come in time order, and all rows of a period before a later period's (for the
    /// same salt and metric). Callers of data-table scans must accept both orders.
    fn scan(&self, table: &str, request: &ScanRequest) -> Result<RowIter>;

    /// The rows [`Store::scan`] returns, in its order and with its cells, lent to `visit`
    /// one at a time instead of handed over: a backend keeping rows as bytes lends cells
    /// borrowed from them, without a copy (and an allocation) per cell. The default visits
    /// the rows of [`Store::scan`].
    fn scan_cells(&self, table: &str, request: &ScanRequest, visit: CellVisitor<'_>) -> Result<()>;

    /// The rows [`Store::scan`] returns, in its order, handed to `visit`; with
    /// [`ReadOptions::joint_rows`], a group that would come back as a [`CellForm::Joint`] row
    /// is lent instead ([`Scanned::Group`]: its members, their timestamps (which a read
    /// without a time range may go without) and its stream borrowed from what the store
    /// read, no row encoded for the reader to decode again).
    /// [`fallback::scan_joint`] visits the rows of [`Store::scan`], a joint row's value
    /// decoded into the group it stands for.
    fn scan_joint(&self, table: &str, request: &ScanRequest, visit: JointVisitor<'_>)
    -> Result<()>;

    /// Adds `delta` to an 8-byte big-endian counter (absent counts as 0); returns the new value.
    fn increment(
        &self,
        table: &str,
        key: &[u8],
        family: &str,
        qualifier: &[u8],
        delta: i64,
    ) -> Result<i64>;

    /// Adds several deltas to 8-byte big-endian counters of one row (absent counts as 0);
    /// returns the new values in `increments` order. Each counter is incremented
    /// atomically; Bigtable applies them all in one ReadModifyWriteRow, the default calls
    /// [`Store::increment`] once each (an error may leave the earlier ones applied). Each
    /// column may be named once (an invalid-input error otherwise, before any change).
    fn increment_many(&self, table: &str, key: &[u8], increments: &[Increment])
    -> Result<Vec<i64>>;

    /// Applies `mutations` only when `check` holds, atomically with the check.
    /// Returns whether it held.
    fn check_and_mutate(
        &self,
        table: &str,
        key: &[u8],
        check: &Check,
        mutations: &[Mutation],
    ) -> Result<bool>;

    /// Applies `rows` (each row's mutations in order, a key repeated applying on the
    /// state before it) only when every check holds, atomically with the checks and as
    /// one write: no other writer comes between, and readers and a crash see all of the
    /// rows or none. `Some(held)`: whether the checks held (nothing is written when one
    /// did not). `None`: the backend cannot write several rows so (Bigtable's
    /// check-and-mutate covers one row); nothing was read or written, and the caller takes
    /// a way made of one-row operations ([`Store::check_and_mutate`], [`Store::increment`]).
    /// The embedded store can: one process owns its data dir, and a batch of rows is one
    /// journal entry. [`fallback::check_and_mutate_rows`] answers `None`.
    fn check_and_mutate_rows(
        &self,
        table: &str,
        checks: &[RowCheck],
        rows: &[RowMutation],
    ) -> Result<Option<bool>>;

    /// Appends `suffix` to the newest value of one column (absent counts as empty),
    /// atomically with respect to every other writer of the column, as HBase's and
    /// Bigtable's append does. The default reads the value and writes it back with a
    /// compare-and-set, again while another writer got in between.
    fn append(
        &self,
        table: &str,
        key: &[u8],
        family: &str,
        qualifier: &[u8],
        suffix: &[u8],
    ) -> Result<()>;

    /// Makes every write acknowledged so far durable against power loss.
    fn sync(&self) -> Result<()>;

    /// Moves buffered state into the store's long-term files so recovery logs can be
    /// dropped (at shutdown). Backends without such state do nothing.
    fn checkpoint(&self) -> Result<()>;

    /// Writes again, so that the next [`Store::sync`] makes it durable, every cell of
    /// `table` that reads now: what an earlier process wrote whose sync failed may be
    /// readable from the OS's cache only, and lost by a power loss. Nothing else may write
    /// the table meanwhile (a backend may replace rows whole). A backend knowing which of
    /// its files may hold such writes rewrites those only; [`fallback::write_table_again`]
    /// writes every row again whole.
    fn make_table_durable(&self, table: &str) -> Result<()>;

    /// Upkeep a backend does at its caller's pace, given the writer's clock (ms): the
    /// embedded store moves rows of periods closed by `now_ms` into their groups (RFC 0006).
    /// Cheap when there is nothing to do. Backends without upkeep do nothing.
    fn maintain(&self, now_ms: i64) -> Result<()>;
}

/// The general ways of the [`Store`] methods a backend may do better: a backend without a
/// better way calls these from its own methods. [`Store`] has no default methods, so a
/// layer over another store (a wrapper) must say for every method what it does: forgetting
/// one would silently drop the inner store's better way (or, for `is_shared`,
/// `checkpoint` and `maintain`, its behaviour).
pub mod fallback {
    use super::*;

    /// [`Store::get_rows`] as one [`Store::get`] a key.
    pub fn get_rows<S: Store + ?Sized>(
        store: &S,
        table: &str,
        keys: &[Vec<u8>],
        read: &ReadOptions,
    ) -> Result<Vec<Option<Row>>> {
        keys.iter().map(|k| store.get(table, k, read)).collect()
    }

    /// [`Store::put_cells`] as [`Store::mutate_rows`].
    pub fn put_cells<S: Store + ?Sized>(
        store: &S,
        table: &str,
        rows: &[CellRow<'_>],
    ) -> Result<()> {
        let rows: Vec<RowMutation> = rows.iter().map(CellRow::to_mutation).collect();
        store.mutate_rows(table, &rows)
    }

    /// [`Store::scan_cells`] over the rows of [`Store::scan`].
    pub fn scan_cells<S: Store + ?Sized>(
        store: &S,
        table: &str,
        request: &ScanRequest,
        visit: CellVisitor<'_>,
    ) -> Result<()> {
        for row in store.scan(table, request)? {
            let row = row?;
            let cells: Vec<CellRef<'_>> = row.cells.iter().map(CellRef::from).collect();
            visit(&row.key, LentCells::Cells(&cells))?;
        }
        Ok(())
    }

    /// [`Store::scan_joint`] over the rows of [`Store::scan`]: a row of one
    /// [`CellForm::Joint`] cell lent as its group, the others handed over as they are.
    pub fn scan_joint<S: Store + ?Sized>(
        store: &S,
        table: &str,
        request: &ScanRequest,
        visit: JointVisitor<'_>,
    ) -> Result<()> {
        let (mut members, mut timestamps) = (Vec::new(), Vec::new());
        for row in store.scan(table, request)? {
            let row = row?;
            match row.cells.as_slice() {
                [cell] if cell.form == CellForm::Joint => {
                    let (joint, stream) = model::decode_joint_row(&cell.value)?;
                    members.clear();
                    timestamps.clear();
                    for (m, t) in joint {
                        members.push(m);
                        timestamps.push(t);
                    }
                    visit(Scanned::Group(LentGroup {
                        key: &row.key,
                        family: &cell.family,
                        members: &members,
                        timestamps: &timestamps,
                        stream,
                    }))?;
                }
                _ => visit(Scanned::Row(row))?,
            }
        }
        Ok(())
    }

    /// Rows a batch of [`write_table_again`]. The embedded store writes a batch of 256 rows
    /// or more as a table file of its own: at 1,024 rows a batch, writing again a UID table
    /// of 100,000 names made some 200 small files and as many merges of the first level.
    pub const TABLE_CHUNK_ROWS: usize = 65_536;

    /// Writes every cell of `table` again as it reads now, its timestamps kept:
    /// [`Store::make_table_durable`] with `whole` (each row replaces the stored one, which
    /// the store need not read to merge into: only while nothing else writes the table);
    /// without, the cells are merged into the rows as they are when written, so a
    /// concurrent writer's newer versions stay the newer ones.
    pub fn write_table_again<S: Store + ?Sized>(store: &S, table: &str, whole: bool) -> Result<()> {
        let mut chunk = Vec::with_capacity(TABLE_CHUNK_ROWS);
        for row in store.scan(table, &ScanRequest::default())? {
            let row = row?;
            let mut mutations = Vec::with_capacity(row.cells.len() + usize::from(whole));
            if whole {
                mutations.push(Mutation::DeleteRow);
            }
            mutations.extend(row.cells.into_iter().map(|c| Mutation::SetCell {
                family: c.family,
                qualifier: c.qualifier,
                timestamp: Some(c.timestamp),
                value: c.value,
            }));
            chunk.push(RowMutation {
                key: row.key,
                mutations,
            });
            if chunk.len() == TABLE_CHUNK_ROWS {
                store.mutate_rows(table, &chunk)?;
                chunk.clear();
            }
        }
        if !chunk.is_empty() {
            store.mutate_rows(table, &chunk)?;
        }
        Ok(())
    }

    /// [`Store::increment_many`] as one [`Store::increment`] a counter (an error may leave
    /// the earlier ones applied).
    pub fn increment_many<S: Store + ?Sized>(
        store: &S,
        table: &str,
        key: &[u8],
        increments: &[Increment],
    ) -> Result<Vec<i64>> {
        check_distinct(increments)?;
        increments
            .iter()
            .map(|i| store.increment(table, key, &i.family, &i.qualifier, i.delta))
            .collect()
    }

    /// [`Store::check_and_mutate_rows`] of a backend that cannot apply checks and rows
    /// across rows atomically: `None`, nothing read or written.
    pub fn check_and_mutate_rows<S: Store + ?Sized>(
        _store: &S,
        _table: &str,
        _checks: &[RowCheck],
        _rows: &[RowMutation],
    ) -> Result<Option<bool>> {
        Ok(None)
    }

    /// [`Store::append`] as a read and a compare-and-set, again while another writer got
    /// in between.
    pub fn append<S: Store + ?Sized>(
        store: &S,
        table: &str,
        key: &[u8],
        family: &str,
        qualifier: &[u8],
        suffix: &[u8],
    ) -> Result<()> {
        const ATTEMPTS: usize = 1000;
        let read = ReadOptions {
            families: Some(vec![family.to_string()]),
            latest_only: true,
            ..ReadOptions::default()
        };
        for _ in 0..ATTEMPTS {
            let current = store
                .get(table, key, &read)?
                .and_then(|r| r.value(family, qualifier).map(<[u8]>::to_vec));
            let mut value = current.clone().unwrap_or_default();
            value.extend_from_slice(suffix);
            let check = Check {
                family: family.to_string(),
                qualifier: qualifier.to_vec(),
                expected: current,
            };
            let set = [Mutation::set(family, qualifier.to_vec(), value)];
            if store.check_and_mutate(table, key, &check, &set)? {
                return Ok(());
            }
        }
        Err(Error::Unavailable(format!(
            "append to a column kept losing to other writers ({ATTEMPTS} attempts)"
        )))
    }
}
