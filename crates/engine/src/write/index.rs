//! Maintenance of the tag index at flush time (RFC 0007, "Maintenance at flush").
//!
//! A flush lists every buffered row as (key, series id, base hour). Before any data row
//! is written, [`IndexWriter::prepare`] writes the postings and value rows of the (series,
//! period) pairs not known to be indexed; once the data rows are stored and the store
//! synced, [`IndexWriter::finish`] adds the new pairs to the counters, then writes their
//! `0x10` markers and `0x01` catalog rows, then marks them known in memory. So a marker
//! always means its postings exist, and a crash anywhere replays the log into a process that
//! knows nothing, which checks every replayed pair again.

use std::collections::{HashMap, HashSet};

use hourglass_core::schema::Schema;
use hourglass_storage::{CellRow, Increment, ReadOptions, Store};
use parking_lot::Mutex;

use hourglass_core::uid::name_bytes;

use crate::Result;
use crate::index::{
    self, COUNTER_FAMILY, ENTRY_QUALIFIER, GLOBAL_FAMILY, PERIOD_FAMILY, PERIOD_SECS, Series,
    VALUE_QUALIFIER, kind,
};
use crate::uid::UidRegistry;

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
type Set<K> = HashSet<K, foldhash::fast::RandomState>;

/// Most rows per index write (the embedded store makes a large batch one table file of its
/// first level). A flush's entries are written sorted by key in as few writes as this
/// allows, whatever their kinds: the store merges its first level into the next once it
/// holds a number of files, rewriting every file of the next level within the key range of
/// the files merged, and a flush's entries span every kind's range whether written as one
/// file or as one file per kind. One file per kind (at most 65,536 rows a write, as before)
/// made about eight files a flush, so such a merge, rewriting most of the index, came every
/// four flushes instead of every thirty-two (`hourglass-bench meta`, 300,000 new series:
/// bytes written by the index down 57%, docs/benchmarks.md).
const INDEX_BATCH_ROWS: usize = 262_144;
/// Bound of each set of value rows known written: at it the set starts again empty (the
/// rows are then written again, idempotently, and counted again: an over-count).
const KNOWN_VALUES_MAX: usize = 1 << 20;

/// What this process knows of one series' entries.
#[derive(Debug, Clone, Copy, Default)]
struct Known {
    /// Its catalog row was read (or written) by this process: `cataloged` is true knowledge.
    seen: bool,
    /// Its catalog row and all-time entries exist.
    cataloged: bool,
    /// The two latest periods whose entries are known to exist, latest first.
    periods: [Option<u32>; 2],
}

impl Known {
    fn has(&self, period: u32) -> bool {
        self.periods.contains(&Some(period))
    }

    fn add(&mut self, period: u32) {
        match self.periods {
            _ if self.has(period) => {}
            [Some(latest), _] if period < latest => {
                if self.periods[1].is_none_or(|second| period > second) {
                    self.periods[1] = Some(period);
                }
            }
            [latest, _] => self.periods = [Some(period), latest],
        }
    }

    /// Whether a pair of this period is written without reading its marker first: the
    /// series' catalog was read by this process and the period is newer than any known
    /// (nearly always absent then). Otherwise (new to the process, or backfill) it is read.
    fn writes_blind(&self, period: u32) -> bool {
        self.seen && self.periods[0].is_none_or(|latest| period > latest)
    }
}

#[derive(Debug, Default)]
struct State {
    /// By series id.
    series: Vec<Known>,
    /// `metric | tagk | tagv` of `0x03` and `0x04` rows written and counted.
    values: Set<Vec<u8>>,
    /// `tagk | tagv` of `0x05` trigram rows written.
    key_values: Set<Vec<u8>>,
    /// `metric | period | tagk | tagv` of `0x12` rows written and counted.
    period_values: Set<Vec<u8>>,
}

impl State {
    fn known(&mut self, id: u32) -> &mut Known {
        let i = id as usize;
        if self.series.len() <= i {
            self.series.resize(i + 1, Known::default());
        }
        &mut self.series[i]
    }
}

/// Counter deltas of one flush: by counter row, by qualifier.
#[derive(Debug, Default)]
struct Counters(Map<Vec<u8>, Map<Vec<u8>, i64>>);

impl Counters {
    /// The deltas of one counter row.
    fn row(&mut self, row: Vec<u8>) -> &mut Map<Vec<u8>, i64> {
        self.0.entry(row).or_default()
    }
}

/// Adds `delta` to a counter of a row's deltas (the qualifier copied only when new).
fn bump(deltas: &mut Map<Vec<u8>, i64>, qualifier: &[u8], delta: i64) {
    match deltas.get_mut(qualifier) {
        Some(d) => *d += delta,
        None => {
            deltas.insert(qualifier.to_vec(), delta);
        }
    }
}

/// A counter qualifier (`k` or `v` then a tag key UID, as [`index::key_series_qualifier`]
/// and [`index::key_values_qualifier`] build them) into a reused buffer.
fn qualifier(buf: &mut Vec<u8>, head: u8, tagk: &[u8]) {
    buf.clear();
    buf.push(head);
    buf.extend_from_slice(tagk);
}

/// The second half of a flush's index work, run once its data rows are stored.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    /// (series id, period) pairs whose postings were written.
    pairs: Vec<(u32, u32)>,
    /// Series whose all-time entries were written.
    cataloged: Vec<u32>,
    /// `0x10` and `0x01` rows.
    markers: Entries,
    counters: Counters,
    values: Vec<Vec<u8>>,
    period_values: Vec<Vec<u8>>,
    key_values: Vec<Vec<u8>>,
}

/// The tag index's side of the write path.
#[derive(Debug)]
pub(crate) struct IndexWriter {
    schema: Schema,
    state: Mutex<State>,
}

/// One series' pairs to write in a flush, with what its entries need.
struct Missing<'a> {
    id: u32,
    series: Series<'a>,
    periods: Vec<u32>,
    catalog: bool,
}

impl IndexWriter {
    pub(crate) fn new(schema: Schema) -> IndexWriter {
        IndexWriter {
            schema,
            state: Mutex::new(State::default()),
        }
    }

    /// Steps 1 to 3: finds the (series, period) pairs of `rows` (key and row id, sorted by
    /// key) not known indexed, reads the markers of those that may exist, and writes the
    /// postings and value rows of the missing ones. An error fails the flush before any
    /// data row is written.
    pub(crate) fn prepare(
        &self,
        store: &dyn Store,
        uids: &UidRegistry,
        rows: &[(Vec<u8>, u64)],
        now_secs: i64,
    ) -> Result<Pending> {
        let schema = &self.schema;
        let table = &schema.index_table;
        let mut state = self.state.lock();
        // 1. Pairs not known, each once, by series (first key seen names the series).
        let mut wanted: Map<u32, (Series<'_>, Vec<u32>)> = Map::default();
        let mut last: Option<u64> = None;
        for (key, row) in rows {
            let id = (row >> 32) as u32;
            let base = *row as u32;
            let period = index::period_of(base);
            let row_key = (u64::from(id) << 32) | u64::from(period);
            if last == Some(row_key) && base % PERIOD_SECS != PERIOD_SECS - 3600 {
                continue; // same series and period as the row before, not its last hour
            }
            let known = state.known(id);
            let mut missing = Vec::with_capacity(2);
            if !known.has(period) {
                missing.push(period);
            }
            // The next period's entries are spread over this one's last hour.
            if let Some(next) = announced(base, now_secs)
                && !known.has(next)
                && let Some(series) = Series::from_row_key(schema, key)
                && (crc32fast::hash(&series.tsuid()) % 3600) < (now_secs - i64::from(base)) as u32
            {
                missing.push(next);
            }
            last = Some(row_key);
            // A series whose catalog row is not known written (its markers' write failed)
            // is written again even when its periods are known.
            if missing.is_empty() && known.cataloged {
                continue;
            }
            let Some(series) = Series::from_row_key(schema, key) else {
                continue; // a key without tags: the write path never makes one
            };
            let entry = wanted.entry(id).or_insert_with(|| (series, Vec::new()));
            for p in missing {
                if !entry.1.contains(&p) {
                    entry.1.push(p);
                }
            }
        }
        if wanted.is_empty() {
            return Ok(Pending::default());
        }
        // 2. Read the markers that may exist, and the catalog rows of series new here.
        let mut reads: Vec<Vec<u8>> = Vec::new();
        let mut read_of: Vec<(u32, Option<u32>)> = Vec::new();
        for (id, (series, periods)) in &wanted {
            let known = state.known(*id);
            if !known.seen {
                reads.push(index::catalog_key(*series));
                read_of.push((*id, None));
            }
            for p in periods {
                if !known.writes_blind(*p) {
                    reads.push(index::period_series_key(*series, *p));
                    read_of.push((*id, Some(*p)));
                }
            }
        }
        let found = if reads.is_empty() {
            Vec::new()
        } else {
            store.get_rows(table, &reads, &ReadOptions::keys_only())?
        };
        for ((id, what), row) in read_of.iter().zip(&found) {
            let known = state.known(*id);
            match what {
                None => {
                    known.seen = true;
                    known.cataloged = row.is_some();
                }
                Some(p) if row.is_some() => known.add(*p),
                Some(_) => {}
            }
        }
        let mut missing: Vec<Missing<'_>> = Vec::new();
        for (id, (series, periods)) in wanted {
            let known = state.known(id);
            let periods: Vec<u32> = periods.into_iter().filter(|p| !known.has(*p)).collect();
            let catalog = !known.cataloged;
            if !periods.is_empty() || catalog {
                missing.push(Missing {
                    id,
                    series,
                    periods,
                    catalog,
                });
            }
        }
        missing.sort_unstable_by_key(|m| m.id);
        // 3. Postings and value rows, values once per flush and process. A value's name
        // (a UID cache lookup) is fetched only when its rows are to be written, and keys of
        // values and counters are built in reused buffers: a series entering a period whose
        // values are known costs its postings and a few map probes.
        let mut pending = Pending::default();
        let mut writes = Entries::default();
        let mut flush_values: Set<Vec<u8>> = Set::default();
        let mut flush_key_values: Set<Vec<u8>> = Set::default();
        let mut id: Vec<u8> = Vec::new();
        let mut q: Vec<u8> = Vec::new();
        for m in &missing {
            let metric = m.series.metric;
            let pairs: Vec<(&[u8], &[u8])> = m.series.pairs(schema).collect();
            let mut names: Vec<Option<Option<String>>> = vec![None; pairs.len()];
            let mut name_of = |i: usize, tagv: &[u8]| -> Result<Option<String>> {
                if names[i].is_none() {
                    names[i] = Some(index::value_name(uids, tagv)?);
                }
                Ok(names[i].clone().flatten())
            };
            for &period in &m.periods {
                let counters = pending
                    .counters
                    .row(index::period_counters_key(metric, period));
                bump(counters, ENTRY_QUALIFIER, 1);
                for (i, (tagk, tagv)) in pairs.iter().enumerate() {
                    writes.period_posting(m.series, period, tagk, tagv);
                    qualifier(&mut q, b'k', tagk);
                    bump(counters, &q, 1);
                    id.clear();
                    id.extend_from_slice(metric);
                    id.extend_from_slice(&period.to_be_bytes());
                    id.extend_from_slice(tagk);
                    id.extend_from_slice(tagv);
                    if state.period_values.contains(&id) || flush_values.contains(&id) {
                        continue;
                    }
                    let Some(name) = name_of(i, tagv)? else {
                        continue;
                    };
                    flush_values.insert(id.clone());
                    qualifier(&mut q, b'v', tagk);
                    bump(counters, &q, 1);
                    pending.period_values.push(id.clone());
                    writes.period_value_name(metric, period, tagk, tagv, &name);
                }
                pending.pairs.push((m.id, period));
                pending.markers.period_series(m.series, period);
            }
            if m.catalog {
                let counters = pending.counters.row(index::series_counters_key(metric));
                bump(counters, ENTRY_QUALIFIER, 1);
                for (i, (tagk, tagv)) in pairs.iter().enumerate() {
                    writes.posting(m.series, tagk, tagv);
                    qualifier(&mut q, b'k', tagk);
                    bump(counters, &q, 1);
                    id.clear();
                    id.extend_from_slice(metric);
                    id.extend_from_slice(tagk);
                    id.extend_from_slice(tagv);
                    if state.values.contains(&id) || flush_values.contains(&id) {
                        continue;
                    }
                    // A value new to the metric: its metric row (`0x03`) whatever its name,
                    // its value row when named, and its trigrams when new to the key too.
                    let name = name_of(i, tagv)?;
                    writes.value_rows(metric, tagk, tagv, name.as_deref());
                    let Some(name) = name else {
                        continue;
                    };
                    flush_values.insert(id.clone());
                    qualifier(&mut q, b'v', tagk);
                    bump(counters, &q, 1);
                    pending.values.push(id.clone());
                    let key_value = &id[metric.len()..];
                    if !state.key_values.contains(key_value)
                        && !flush_key_values.contains(key_value)
                    {
                        writes.trigram_rows(tagk, tagv, &name);
                        flush_key_values.insert(key_value.to_vec());
                        pending.key_values.push(key_value.to_vec());
                    }
                }
                pending.cataloged.push(m.id);
                pending.markers.catalog(m.series);
            }
        }
        drop(state);
        write_sorted(store, table, &writes)?;
        Ok(pending)
    }

    /// Step 5, once the flush's data rows are stored and synced: counters, then markers,
    /// then the pairs known in memory. A failure is logged: the pairs stay unknown and the
    /// next flush writes (and counts) them again.
    /// Forgets what is known of series whose ids were freed (they go to other series).
    pub(crate) fn forget(&self, ids: &[u32]) {
        let mut state = self.state.lock();
        for id in ids {
            if let Some(known) = state.series.get_mut(*id as usize) {
                *known = Known::default();
            }
        }
    }

    /// Notes a series this process has just assigned one of its UIDs to: no process can have
    /// written its entries before (another learns the UID from the UID table only after
    /// this assignment), so its catalog row and markers are not read: its pairs are written
    /// without reading (see [`Known::writes_blind`]). Should another TSD sharing the store
    /// write the series' entries meanwhile, they are written again, the same rows, and
    /// counted again (counters are upper bounds). Series already known are left alone.
    pub(crate) fn unwritten(&self, id: u32) {
        let mut state = self.state.lock();
        let known = state.known(id);
        if !known.seen && known.periods == [None, None] {
            known.seen = true;
        }
    }

    pub(crate) fn finish(&self, store: &dyn Store, pending: Pending) -> usize {
        if pending.markers.is_empty() {
            return 0;
        }
        let table = &self.schema.index_table;
        let written = pending.markers.len();
        let result = (|| -> Result<()> {
            let mut rows: Vec<_> = pending.counters.0.into_iter().collect();
            rows.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            for (key, deltas) in rows {
                let mut increments: Vec<Increment> = deltas
                    .into_iter()
                    .map(|(q, d)| Increment::new(COUNTER_FAMILY, q, d))
                    .collect();
                increments.sort_unstable_by(|a, b| a.qualifier.cmp(&b.qualifier));
                store.increment_many(table, &key, &increments)?;
            }
            write_sorted(store, table, &pending.markers)
        })();
        if let Err(e) = result {
            tracing::error!(error = %e, "tag index: counters or markers not written; the next flush writes them again");
            return 0;
        }
        let mut state = self.state.lock();
        for (id, period) in &pending.pairs {
            state.known(*id).add(*period);
        }
        for id in &pending.cataloged {
            let known = state.known(*id);
            known.seen = true;
            known.cataloged = true;
        }
        remember(&mut state.values, pending.values);
        remember(&mut state.period_values, pending.period_values);
        remember(&mut state.key_values, pending.key_values);
        written
    }
}

/// The next period, when `base` is the last hour of its period and the clock is in it.
fn announced(base: u32, now_secs: i64) -> Option<u32> {
    let last_hour = base % PERIOD_SECS == PERIOD_SECS - 3600;
    let in_it = (i64::from(base)..i64::from(base) + 3600).contains(&now_secs);
    (last_hour && in_it).then(|| index::period_of(base).saturating_add(PERIOD_SECS))
}

/// Entry rows (one cell each, written whole) of one write, their keys and values in one
/// buffer: a flush of many new series builds a few hundred thousand, and one allocation
/// each (and moving 88-byte entries while sorting them) cost more than building them. The
/// builders make the rows [`index`]'s functions of the same names make (a test checks).
#[derive(Debug, Default)]
struct Entries {
    bytes: Vec<u8>,
    rows: Vec<Slot>,
}

/// One row of [`Entries`]: its key is `bytes[start..value]`, its value `bytes[value..end]`.
#[derive(Debug, Clone, Copy)]
struct Slot {
    start: usize,
    value: usize,
    end: usize,
    family: &'static str,
    qualifier: &'static [u8],
    timestamp: i64,
}

impl Entries {
    fn len(&self) -> usize {
        self.rows.len()
    }

    fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    fn key(&self, i: usize) -> &[u8] {
        let s = &self.rows[i];
        &self.bytes[s.start..s.value]
    }

    fn cell(&self, i: usize) -> CellRow<'_> {
        let s = &self.rows[i];
        CellRow {
            key: &self.bytes[s.start..s.value],
            family: s.family,
            qualifier: s.qualifier,
            timestamp: s.timestamp,
            value: &self.bytes[s.value..s.end],
        }
    }

    /// A row whose key is `parts` in order.
    fn push(
        &mut self,
        parts: &[&[u8]],
        family: &'static str,
        qualifier: &'static [u8],
        timestamp: i64,
        value: &[u8],
    ) {
        let start = self.bytes.len();
        for p in parts {
            self.bytes.extend_from_slice(p);
        }
        let at = self.bytes.len();
        self.bytes.extend_from_slice(value);
        self.rows.push(Slot {
            start,
            value: at,
            end: self.bytes.len(),
            family,
            qualifier,
            timestamp,
        });
    }

    /// `0x11` ([`index::period_posting_key`]).
    fn period_posting(&mut self, series: Series<'_>, period: u32, tagk: &[u8], tagv: &[u8]) {
        let key = [
            &[kind::PERIOD_POSTING][..],
            series.metric,
            &period.to_be_bytes(),
            tagk,
            tagv,
            series.tags,
        ];
        let ts = index::period_cell_ms(period);
        self.push(&key, PERIOD_FAMILY, ENTRY_QUALIFIER, ts, &[]);
    }

    /// `0x12` ([`index::period_value_name_key`]), the value's UID as its cell.
    fn period_value_name(
        &mut self,
        metric: &[u8],
        period: u32,
        tagk: &[u8],
        tagv: &[u8],
        name: &str,
    ) {
        let key = [
            &[kind::PERIOD_VALUE_NAME][..],
            metric,
            &period.to_be_bytes(),
            tagk,
            &name_bytes(name),
        ];
        let ts = index::period_cell_ms(period);
        self.push(&key, PERIOD_FAMILY, VALUE_QUALIFIER, ts, tagv);
    }

    /// `0x10` ([`index::period_series_key`]).
    fn period_series(&mut self, series: Series<'_>, period: u32) {
        let key = [
            &[kind::PERIOD_SERIES][..],
            series.metric,
            &period.to_be_bytes(),
            series.tags,
        ];
        let ts = index::period_cell_ms(period);
        self.push(&key, PERIOD_FAMILY, ENTRY_QUALIFIER, ts, &[]);
    }

    /// `0x02` ([`index::posting_key`]).
    fn posting(&mut self, series: Series<'_>, tagk: &[u8], tagv: &[u8]) {
        let key = [&[kind::POSTING][..], series.metric, tagk, tagv, series.tags];
        self.push(&key, GLOBAL_FAMILY, ENTRY_QUALIFIER, 0, &[]);
    }

    /// `0x01` ([`index::catalog_key`]).
    fn catalog(&mut self, series: Series<'_>) {
        let key = [&[kind::CATALOG][..], series.metric, series.tags];
        self.push(&key, GLOBAL_FAMILY, ENTRY_QUALIFIER, 0, &[]);
    }

    /// [`index::value_entries`]: `0x03`, and `0x04` when the name is known.
    fn value_rows(&mut self, metric: &[u8], tagk: &[u8], tagv: &[u8], name: Option<&str>) {
        let key = [&[kind::VALUE_METRIC][..], tagk, tagv, metric];
        self.push(&key, GLOBAL_FAMILY, ENTRY_QUALIFIER, 0, &[]);
        if let Some(name) = name {
            let key = [&[kind::VALUE_NAME][..], metric, tagk, &name_bytes(name)];
            self.push(&key, GLOBAL_FAMILY, VALUE_QUALIFIER, 0, tagv);
        }
    }

    /// [`index::trigram_entries`].
    fn trigram_rows(&mut self, tagk: &[u8], tagv: &[u8], name: &str) {
        for t in index::trigrams(name) {
            let key = [&[kind::TRIGRAM][..], tagk, &t, tagv];
            self.push(&key, GLOBAL_FAMILY, ENTRY_QUALIFIER, 0, &[]);
        }
    }
}

/// Writes entries sorted by key (each a one-cell row replaced whole, [`Store::put_cells`]),
/// at most [`INDEX_BATCH_ROWS`] a write (see there). A key met twice is written once.
fn write_sorted(store: &dyn Store, table: &str, entries: &Entries) -> Result<()> {
    let order = key_order(entries);
    let mut batch: Vec<CellRow<'_>> = Vec::with_capacity(order.len().min(INDEX_BATCH_ROWS));
    for i in order {
        if batch.len() >= INDEX_BATCH_ROWS {
            store.put_cells(table, &batch)?;
            batch.clear();
        }
        batch.push(entries.cell(i));
    }
    if !batch.is_empty() {
        store.put_cells(table, &batch)?;
    }
    Ok(())
}

/// The entries' positions in key order, a key met twice once. Sorted as (the key's first 16
/// bytes as a number, position) pairs, the rest of the key compared only when those are
/// equal: a flush's entries differ within their first 16 bytes mostly (kind, metric, period,
/// tag pair), and moving small pairs costs less than moving entries. (Adding the next 8
/// bytes as a second number changed no count of instructions.)
fn key_order(entries: &Entries) -> Vec<usize> {
    let head = |key: &[u8]| -> u128 {
        let mut b = [0u8; 16];
        let n = key.len().min(16);
        b[..n].copy_from_slice(&key[..n]);
        u128::from_be_bytes(b)
    };
    let mut order: Vec<(u128, usize)> = (0..entries.len())
        .map(|i| (head(entries.key(i)), i))
        .collect();
    // Equal heads: the keys agree on their first 16 bytes (zero-padded), so comparing the
    // whole keys orders them as comparing the keys would.
    order.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| entries.key(a.1).cmp(entries.key(b.1)))
    });
    order.dedup_by(|a, b| a.0 == b.0 && entries.key(a.1) == entries.key(b.1));
    order.into_iter().map(|(_, i)| i).collect()
}

fn remember(set: &mut Set<Vec<u8>>, ids: Vec<Vec<u8>>) {
    for id in ids {
        if set.len() >= KNOWN_VALUES_MAX {
            set.clear();
        }
        set.insert(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::Entry;

    fn entries_of(rows: &[Entry]) -> Entries {
        let mut out = Entries::default();
        for e in rows {
            out.push(&[&e.key], e.family, e.qualifier, e.timestamp, &e.value);
        }
        out
    }

    /// A row as (key, family, qualifier, timestamp, value).
    type Written = (Vec<u8>, &'static str, Vec<u8>, i64, Vec<u8>);

    fn rows_of(entries: &Entries) -> Vec<Written> {
        let mut rows: Vec<_> = (0..entries.len())
            .map(|i| {
                let c = entries.cell(i);
                let s = entries.rows[i];
                (
                    c.key.to_vec(),
                    s.family,
                    s.qualifier.to_vec(),
                    c.timestamp,
                    c.value.to_vec(),
                )
            })
            .collect();
        rows.sort();
        rows
    }

    /// The flush's builders make the rows `index`'s functions make (the rebuild and fsck
    /// use those): the same keys, cells and values.
    #[test]
    fn entries_are_the_rows_the_index_layout_names() {
        let schema = Schema::default();
        let tags = [0, 0, 1, 0, 0, 7, 0, 0, 2, 0, 0, 9];
        let series = Series {
            metric: &[0, 0, 1],
            tags: &tags,
        };
        let period = 1_370_995_200;
        let names = vec![Some("web01".to_string()), Some("lön".to_string())];
        let mut want: Vec<Entry> = Vec::new();
        let p = index::period_entries(&schema, series, period, &names);
        want.extend(p.postings);
        want.extend(p.values.into_iter().flat_map(|v| v.rows));
        want.push(p.marker);
        let a = index::series_entries(&schema, series);
        want.extend(a.postings);
        want.push(a.catalog);
        let mut got = Entries::default();
        for ((tagk, tagv), name) in series.pairs(&schema).zip(&names) {
            let name = name.as_deref().unwrap();
            got.period_posting(series, period, tagk, tagv);
            got.period_value_name(series.metric, period, tagk, tagv, name);
            got.posting(series, tagk, tagv);
            got.value_rows(series.metric, tagk, tagv, Some(name));
            got.value_rows(series.metric, tagk, tagv, None);
            got.trigram_rows(tagk, tagv, name);
            want.extend(index::value_entries(series.metric, tagk, tagv, Some(name)));
            want.extend(index::value_entries(series.metric, tagk, tagv, None));
            want.extend(index::trigram_entries(tagk, tagv, name));
        }
        got.period_series(series, period);
        got.catalog(series);
        assert_eq!(got.len(), want.len());
        assert_eq!(rows_of(&got), rows_of(&entries_of(&want)));
    }

    #[test]
    fn known_periods_keep_the_two_latest() {
        let mut k = Known::default();
        k.add(10);
        assert_eq!(k.periods, [Some(10), None]);
        k.add(20);
        assert_eq!(k.periods, [Some(20), Some(10)]);
        k.add(5);
        assert_eq!(k.periods, [Some(20), Some(10)], "older than both: not kept");
        k.add(15);
        assert_eq!(k.periods, [Some(20), Some(15)]);
        k.add(30);
        assert_eq!(k.periods, [Some(30), Some(20)]);
        k.add(30);
        assert_eq!(k.periods, [Some(30), Some(20)]);
    }

    #[test]
    fn only_newer_periods_of_seen_series_are_written_blind() {
        let mut k = Known::default();
        assert!(!k.writes_blind(10), "new to the process: read first");
        k.seen = true;
        assert!(k.writes_blind(10));
        k.add(10);
        assert!(k.writes_blind(11));
        assert!(!k.writes_blind(9), "backfill: read first");
    }

    #[test]
    fn entries_are_written_sorted_in_as_few_writes_as_the_batch_allows() {
        use crate::sim::{FaultStore, Faults, Op};
        use hourglass_storage::ScanRequest;
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let memory: Arc<dyn Store> = Arc::new(hourglass_storage::memory::MemoryStore::new());
        let schema = Schema::default();
        memory.create_table(&index::table_spec(&schema)).unwrap();
        let store = FaultStore::over(Arc::clone(&memory), Arc::new(Faults::new(1, 0)));
        let writes = Arc::new(AtomicUsize::new(0));
        let w = Arc::clone(&writes);
        store.set_hook(Some(Arc::new(move |op| {
            if op == Op::BeforeWrite {
                w.fetch_add(1, Ordering::SeqCst);
            }
        })));
        let entry = |kind: u8, i: u32| Entry {
            key: [&[kind][..], &i.to_be_bytes()].concat(),
            family: index::GLOBAL_FAMILY,
            qualifier: index::ENTRY_QUALIFIER,
            timestamp: 0,
            value: Vec::new(),
        };
        let table = &schema.index_table;
        // Few entries: one write, whatever their kinds and order.
        let few: Vec<Entry> = (0..100)
            .rev()
            .map(|i| entry(2 + (i % 3) as u8, i))
            .collect();
        write_sorted(&store, table, &entries_of(&few)).unwrap();
        assert_eq!(writes.swap(0, Ordering::SeqCst), 1);
        // More than a batch of three kinds: two writes (a full batch, then the rest), not
        // one a kind.
        let n = INDEX_BATCH_ROWS as u32 + 20;
        let kind = |i: u32| match i {
            0..10 => 5,
            10..20 => 6,
            _ => 7,
        };
        let many: Vec<Entry> = (0..n).rev().map(|i| entry(kind(i), i)).collect();
        write_sorted(&store, table, &entries_of(&many)).unwrap();
        assert_eq!(writes.load(Ordering::SeqCst), 2);
        let rows = memory
            .scan(table, &ScanRequest::prefix(&[]))
            .unwrap()
            .count();
        assert_eq!(rows, 100 + n as usize);
    }

    #[test]
    fn entries_are_ordered_as_their_keys_and_each_key_once() {
        let entry = |key: &[u8]| Entry {
            key: key.to_vec(),
            family: index::GLOBAL_FAMILY,
            qualifier: index::ENTRY_QUALIFIER,
            timestamp: 0,
            value: Vec::new(),
        };
        let long = |tail: u8| {
            let mut k = vec![0x11; 16];
            k.push(tail);
            k
        };
        let keys: Vec<Vec<u8>> = vec![
            long(2),
            vec![1, 0],
            vec![1],
            long(1),
            vec![0x11; 16],
            vec![2],
            long(2),
            vec![1, 0, 0],
            vec![],
            vec![0xFF; 20],
            // Past the first 16 bytes, equal there.
            [vec![0x11; 24], vec![2]].concat(),
            [vec![0x11; 24], vec![1, 5]].concat(),
            [vec![0x11; 24], vec![1]].concat(),
            vec![0x11; 24],
            [vec![0x11; 20], vec![0x10, 9]].concat(),
            [vec![0x11; 24], vec![2]].concat(),
        ];
        let entries: Vec<Entry> = keys.iter().map(|k| entry(k)).collect();
        let entries = entries_of(&entries);
        let got: Vec<Vec<u8>> = key_order(&entries)
            .into_iter()
            .map(|i| entries.key(i).to_vec())
            .collect();
        let mut want = keys.clone();
        want.sort();
        want.dedup();
        assert_eq!(got, want);
    }

    #[test]
    fn the_next_period_is_announced_in_the_last_hour_only() {
        let day = 86_400 * 20_000;
        let last = day + PERIOD_SECS - 3600;
        assert_eq!(
            announced(last, i64::from(last) + 10),
            Some(day + PERIOD_SECS)
        );
        assert_eq!(
            announced(last, i64::from(last) - 1),
            None,
            "clock before it"
        );
        assert_eq!(
            announced(last, i64::from(last) + 3600),
            None,
            "clock past it"
        );
        assert_eq!(announced(last - 3600, i64::from(last - 3600) + 10), None);
    }
}
