//! `tsdb fsck`: checks the data table row by row and optionally repairs what it finds, as
//! OpenTSDB 2.4's `Fsck` tool does, with its options, finding texts and summary labels.
//!
//! Per row, in order: the row key (length, then metric and tag UIDs resolving to names), then
//! each cell of family `t`: unknown columns (qualifier shorter than 2 bytes, or odd and not 3
//! or 5), annotations (`0x01` prefix, counted), objects of future versions (other odd
//! qualifiers, counted), compacted columns (must parse, in time order, meta byte 0 or 1) and
//! single data points. Points are then grouped by time in milliseconds, so a second and a
//! millisecond qualifier of one instant are duplicates; the kept point of each time has its
//! value checked (lengths against the qualifier flags, 4-byte floats written on 8 bytes,
//! 8-byte integers that fit fewer bytes). Finally, our addition: a row whose hour closed
//! more than an hour ago but still holds several data cells was left uncompacted.
//!
//! Differences from OpenTSDB, on purpose:
//! - The global annotation row (all-zero salt and metric, base hour, no tags; never salted)
//!   is not an orphan: its annotations are counted and it is never deleted.
//! - A kept duplicate is chosen among points whose value can be read, and duplicates inside
//!   compacted cells are resolved by rewriting the row (OpenTSDB leaves them).
//! - Value fixes never overwrite a duplicate that is not being resolved, and 8-byte integers
//!   inside compacted cells are shortened only by a rewrite of the row (OpenTSDB deletes the
//!   whole compacted column).
//! - `--compact` only rewrites rows of hours closed for an hour (open hours are the writer's).
//! - Qualifiers whose offset lies outside the row's hour, and integer or float lengths the
//!   format does not allow, are bad values (readers cannot decode them).
//! - Totals include out-of-order compacted columns rewritten, unparseable compacted columns
//!   deleted and past rows compacted among the fixes, and past rows left uncompacted among
//!   the errors.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use hourglass_core::annotation::is_annotation_qualifier;
use hourglass_core::compact::{self, Point};
use hourglass_core::qualifier::Qualifier;
use hourglass_core::rowkey::{decode_row_key, salt_prefixes};
use hourglass_core::schema::{DATA_FAMILY, Schema};
use hourglass_core::time::MAX_TIMESPAN;
use hourglass_core::uid::{Uid, UidKind, hex_upper};
use hourglass_core::value::{FLAG_FLOAT, Value, decode_bits, int_width};
use hourglass_storage::{Cell, Mutation, ReadOptions, Row, ScanRequest};
use parking_lot::Mutex;

use crate::scan::{RowQuery, scan_requests};
use crate::uid::UidRegistry;
use crate::{Error, Result, Tsdb};

mod report;
pub mod uid;
mod values;

pub use report::FsckReport;
use values::*;
#[cfg(test)]
mod tests;

/// Seconds after an hour ends before a row still holding several data cells counts as left
/// uncompacted (and before `--compact` touches it): late points may still arrive until then.
pub const UNCOMPACTED_GRACE_SECS: i64 = 3600;

/// What to repair. Nothing is written without [`FsckOptions::fix`]; each `delete_*` flag
/// (and `resolve_duplicates`, `compact`) only acts together with it, as in OpenTSDB.
#[derive(Debug, Clone, Default)]
pub struct FsckOptions {
    /// `--fix`: repair what the other flags allow; alone it rewrites badly encoded floats,
    /// shortens 8-byte integers, re-sorts out-of-order compacted columns and compacts past
    /// rows left uncompacted.
    pub fix: bool,
    /// `--compact`: rewrite every row (of a closed hour) as one compacted column.
    pub compact: bool,
    /// `--resolve-duplicates`: keep one point per time, the oldest write unless
    /// `last_write_wins`.
    pub resolve_duplicates: bool,
    /// `--last-write-wins` (or `tsd.storage.fix_duplicates`): keep the newest duplicate.
    pub last_write_wins: bool,
    /// `--delete-orphans`: delete rows whose metric or tag UIDs have no name.
    pub delete_orphans: bool,
    /// `--delete-unknown-columns`: delete columns that are not OpenTSDB's.
    pub delete_unknown_columns: bool,
    /// `--delete-bad-values`: delete single data point columns with bad values.
    pub delete_bad_values: bool,
    /// `--delete-bad-rows`: delete rows with invalid keys.
    pub delete_bad_rows: bool,
    /// `--delete-bad-compacts`: delete compacted columns that cannot be parsed.
    pub delete_bad_compacts: bool,
    /// Worker threads; 0 means twice the number of cores.
    pub threads: usize,
    /// The clock, in ms (tests); `None` reads the system clock.
    pub now_ms: Option<i64>,
}

impl FsckOptions {
    /// `--fix-all`: every fix except `last_write_wins`.
    pub fn fix_all() -> FsckOptions {
        FsckOptions {
            fix: true,
            compact: true,
            resolve_duplicates: true,
            delete_orphans: true,
            delete_unknown_columns: true,
            delete_bad_values: true,
            delete_bad_rows: true,
            delete_bad_compacts: true,
            ..FsckOptions::default()
        }
    }
}

/// Which rows to check.
#[derive(Debug, Clone)]
pub enum FsckScope {
    /// The whole data table.
    FullScan,
    /// The rows of these queries (hours overlapping each range), one after the other.
    Queries(Vec<RowQuery>),
}

/// Checks (and with `options.fix`, repairs) the rows of `scope`.
pub fn fsck(tsdb: &Tsdb, scope: &FsckScope, options: &FsckOptions) -> Result<FsckReport> {
    let schema = &tsdb.settings().schema;
    let threads = match options.threads {
        0 => std::thread::available_parallelism().map_or(2, |n| n.get() * 2),
        n => n,
    };
    // A registry of our own: names are checked against storage, not a cache.
    let uids = UidRegistry::new(Arc::clone(tsdb.store()), schema.clone());
    let ctx = Context {
        tsdb,
        schema,
        uids: &uids,
        options,
        now_secs: options.now_ms.unwrap_or_else(hourglass_storage::now_ms) / 1000,
    };
    match scope {
        FsckScope::FullScan => {
            let requests = full_scan_requests(tsdb, schema, threads)?;
            tracing::info!(
                workers = requests.len().min(threads),
                "starting full table scan"
            );
            ctx.run_requests(&requests, threads)
        }
        FsckScope::Queries(queries) => {
            let mut report = FsckReport::default();
            for q in queries {
                let mut requests = scan_requests(schema, q);
                for r in &mut requests {
                    r.read = read_options();
                }
                report.merge(ctx.run_requests(&requests, threads)?);
            }
            Ok(report)
        }
    }
}

/// OpenTSDB's bytes of family `t`, newest version only.
fn read_options() -> ReadOptions {
    ReadOptions {
        latest_only: true,
        ..ReadOptions::family(DATA_FAMILY)
    }
}

/// Contiguous ranges covering the whole table: one per salt bucket, or (unsalted) split by
/// metric UID up to the metric MAXID. The first starts at the empty key and the last has no
/// end, so rows outside the expected ranges are checked too.
fn full_scan_requests(tsdb: &Tsdb, schema: &Schema, threads: usize) -> Result<Vec<ScanRequest>> {
    let mut starts: Vec<Vec<u8>> = Vec::new();
    if schema.salt_width > 0 {
        starts = salt_prefixes(schema);
    } else {
        let max = tsdb.uids().max_id(UidKind::Metric)?.max(1);
        let n = (threads as u64).clamp(1, max);
        let step = max.div_ceil(n);
        starts.push(Vec::new());
        for k in 1..n {
            let first = 1 + k * step;
            if first > max {
                break;
            }
            starts.push(Uid(first).to_bytes(schema.metric_width));
        }
    }
    if let Some(first) = starts.first_mut() {
        first.clear();
    }
    let mut requests = Vec::with_capacity(starts.len());
    for (i, start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).cloned();
        requests.push(ScanRequest {
            start: start.clone(),
            end,
            read: read_options(),
            ..Default::default()
        });
    }
    Ok(requests)
}

#[derive(Debug)]
struct Context<'a> {
    tsdb: &'a Tsdb,
    schema: &'a Schema,
    uids: &'a UidRegistry,
    options: &'a FsckOptions,
    now_secs: i64,
}

impl Context<'_> {
    /// Checks each request's rows, `threads` requests at a time; reports merged in order.
    fn run_requests(&self, requests: &[ScanRequest], threads: usize) -> Result<FsckReport> {
        let workers = threads.clamp(1, requests.len().max(1));
        let mut report = FsckReport::default();
        if workers == 1 {
            for r in requests {
                report.merge(self.check_range(r)?);
            }
            return Ok(report);
        }
        let next = AtomicUsize::new(0);
        let results: Mutex<Vec<Option<Result<FsckReport>>>> =
            Mutex::new((0..requests.len()).map(|_| None).collect());
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(request) = requests.get(i) else {
                            break;
                        };
                        let r = self.check_range(request);
                        let failed = r.is_err();
                        results.lock()[i] = Some(r);
                        if failed {
                            // Stop handing out work; the error is reported below.
                            next.store(requests.len(), Ordering::Relaxed);
                            break;
                        }
                    }
                });
            }
        });
        for r in results.into_inner().into_iter().flatten() {
            report.merge(r?);
        }
        Ok(report)
    }

    fn check_range(&self, request: &ScanRequest) -> Result<FsckReport> {
        let mut checker = RowChecker {
            ctx: self,
            missing: HashSet::new(),
            report: FsckReport::default(),
        };
        for row in self.tsdb.store().scan(&self.schema.data_table, request)? {
            checker.check_row(&row?)?;
        }
        Ok(checker.report)
    }
}

/// A finding of one row, rendered once the row's repairs are decided.
#[derive(Debug)]
struct Finding {
    text: String,
    /// The flags that repair it (`None`: no automatic repair).
    hint: Option<String>,
    /// What was done, once done.
    done: Option<String>,
}

impl Finding {
    fn new(text: String, hint: Option<&str>) -> Finding {
        Finding {
            text,
            hint: hint.map(str::to_string),
            done: None,
        }
    }

    fn render(&self) -> String {
        match (&self.done, &self.hint) {
            (Some(done), _) => format!("{}; fixed: {done}", self.text),
            (None, Some(hint)) => format!("{}; {hint}", self.text),
            (None, None) => format!("{}; no automatic repair", self.text),
        }
    }
}

/// One data point of a row, from a single or a compacted column.
#[derive(Debug)]
struct Dp {
    /// Index of its cell in the row's cells.
    cell: usize,
    compacted: bool,
    /// The point's own qualifier (inside the compacted column for compacted points).
    qualifier: Qualifier,
    /// The point; for single columns, read from the value when its length is right.
    point: Option<Point>,
}

/// What the value check of a single column says.
#[derive(Debug)]
enum ValueCheck {
    Valid(Point),
    /// Valid, and it fits fewer bytes: (shortened point, bytes saved).
    Vle(Point, Point, u64),
    /// A float written on 8 bytes: the point rewritten on 4 bytes, and the message.
    Encoding(Point, String),
    /// A value that cannot be read.
    Bad(String),
}

impl ValueCheck {
    fn usable(&self) -> bool {
        !matches!(self, ValueCheck::Bad(_))
    }
}

/// A repair of one kept single column, applied unless the row is rewritten as a whole.
#[derive(Debug)]
struct ValueFix {
    old_qualifier: Vec<u8>,
    new: Point,
    finding: Option<usize>,
    vle: bool,
}

#[derive(Debug)]
struct RowChecker<'a, 'b> {
    ctx: &'a Context<'b>,
    /// UIDs known to have no name, so each is looked up once.
    missing: HashSet<(UidKind, u64)>,
    report: FsckReport,
}

impl RowChecker<'_, '_> {
    fn opts(&self) -> &FsckOptions {
        self.ctx.options
    }

    fn finish(&mut self, findings: Vec<Finding>) {
        self.report
            .findings
            .extend(findings.iter().map(Finding::render));
    }

    fn mutate(&self, key: &[u8], mutations: &[Mutation]) -> Result<()> {
        if mutations.is_empty() {
            return Ok(());
        }
        // A repair changes raw points: computed rollups of the hour are computed again.
        let tsdb = self.ctx.tsdb;
        tsdb.mark_raw_rows_changed([key])?;
        tsdb.store()
            .mutate_row(&self.ctx.schema.data_table, key, mutations)?;
        tsdb.mark_raw_rows_changed([key])?;
        Ok(())
    }

    fn check_row(&mut self, row: &Row) -> Result<()> {
        let schema = self.ctx.schema;
        let cells: Vec<&Cell> = row
            .cells
            .iter()
            .filter(|c| c.family == DATA_FAMILY)
            .collect();
        self.report.rows_processed += 1;
        self.report.kvs_processed += cells.len() as u64;
        let key = row.key.as_slice();
        if is_global_annotation_row(schema, key) {
            return self.check_global_row(key, &cells);
        }
        let pair = schema.tag_pair_width();
        if key.len() < schema.tags_offset()
            || !(key.len() - schema.tags_offset()).is_multiple_of(pair)
        {
            self.report.bad_key += 1;
            let mut f = Finding::new(
                format!(
                    "Invalid row key. Key: {} ({} bytes; expected {} plus a multiple of {})",
                    hex_upper(key),
                    key.len(),
                    schema.tags_offset(),
                    pair
                ),
                Some("--fix --delete-bad-rows deletes the row"),
            );
            if self.opts().fix && self.opts().delete_bad_rows {
                self.mutate(key, &[Mutation::DeleteRow])?;
                self.report.bad_key_fixed += 1;
                f.done = Some("deleted the row".into());
            }
            self.finish(vec![f]);
            return Ok(());
        }
        if let Some(text) = self.unresolved_uid(key)? {
            self.report.orphans += 1;
            let mut f = Finding::new(text, Some("--fix --delete-orphans deletes the row"));
            if self.opts().fix && self.opts().delete_orphans {
                self.mutate(key, &[Mutation::DeleteRow])?;
                self.report.orphans_fixed += 1;
                f.done = Some("deleted the row".into());
            }
            self.finish(vec![f]);
            return Ok(());
        }
        self.check_data_row(key, &cells)
    }

    /// The message of the first metric or tag UID of `key` that has no name.
    fn unresolved_uid(&mut self, key: &[u8]) -> Result<Option<String>> {
        let row = decode_row_key(self.ctx.schema, key)?;
        let mut ids = vec![(UidKind::Metric, row.series.metric)];
        for (k, v) in &row.series.tags {
            ids.push((UidKind::TagKey, *k));
            ids.push((UidKind::TagValue, *v));
        }
        for (kind, uid) in ids {
            let error = if self.missing.contains(&(kind, uid.0)) {
                Error::NoSuchId {
                    kind,
                    uid: crate::uid::format_signed_bytes(
                        &uid.to_bytes(self.ctx.schema.uid_width(kind)),
                    ),
                }
            } else {
                match self.ctx.uids.get_name(kind, uid) {
                    Ok(_) => continue,
                    Err(e @ Error::NoSuchId { .. }) => {
                        self.missing.insert((kind, uid.0));
                        e
                    }
                    Err(e) => return Err(e),
                }
            };
            let what = if kind == UidKind::Metric {
                "Unable to resolve the metric from the row key."
            } else {
                "Unable to resolve a tagk or tagv from the row key."
            };
            return Ok(Some(format!("{what} Key: {}: {error}", hex_upper(key))));
        }
        Ok(None)
    }

    /// The global annotation row: annotations are counted, anything else is an unknown
    /// column. The row itself is never deleted.
    fn check_global_row(&mut self, key: &[u8], cells: &[&Cell]) -> Result<()> {
        let mut findings = Vec::new();
        let mut mutations = Vec::new();
        for c in cells {
            if is_annotation_qualifier(&c.qualifier) {
                self.report.annotations += 1;
                continue;
            }
            self.report.unknown += 1;
            let mut f = Finding::new(
                format!(
                    "Unknown column in the global annotation row (only annotations belong there). Key: {}, {}",
                    hex_upper(key),
                    describe_cell(c)
                ),
                Some(
                    "--fix --delete-unknown-columns deletes the column (the row and its annotations stay)",
                ),
            );
            if self.opts().fix && self.opts().delete_unknown_columns {
                mutations.push(Mutation::delete(DATA_FAMILY, c.qualifier.clone()));
                self.report.unknown_fixed += 1;
                f.done = Some("deleted the column".into());
            }
            findings.push(f);
        }
        self.mutate(key, &mutations)?;
        self.finish(findings);
        Ok(())
    }

    fn check_data_row(&mut self, key: &[u8], cells: &[&Cell]) -> Result<()> {
        let mut row = RowState {
            key_hex: hex_upper(key),
            base_time: hourglass_core::rowkey::base_time_of(self.ctx.schema, key).unwrap_or(0),
            cells,
            ..RowState::default()
        };
        for i in 0..cells.len() {
            self.check_cell(&mut row, i);
        }
        let dps = std::mem::take(&mut row.dps);
        for (ts, list) in &dps {
            self.check_time(&mut row, *ts, list);
        }
        let mutations = self.repairs(&mut row);
        self.mutate(key, &mutations)?;
        self.finish(row.findings);
        Ok(())
    }

    /// First pass: one cell. Unknown columns, annotations, future objects and compacted
    /// columns are judged here; data points are grouped by time for the second pass.
    fn check_cell(&mut self, row: &mut RowState<'_>, i: usize) {
        let opts = self.ctx.options;
        let fix = opts.fix;
        let c = row.cells[i];
        let q = c.qualifier.as_slice();
        let key_hex = &row.key_hex;
        if q.len() < 2 || (q.len() % 2 == 1 && q.len() != 3 && q.len() != 5) {
            self.report.unknown += 1;
            let what = if q.len() < 2 {
                "Invalid qualifier, must be on 2 bytes or more."
            } else {
                "Unknown qualifier, must be 2, 3, 5 or an even number of bytes."
            };
            let mut f = Finding::new(
                format!("{what} Key: {key_hex}, {}", describe_cell(c)),
                Some("--fix --delete-unknown-columns deletes the column"),
            );
            if fix && opts.delete_unknown_columns {
                row.deletes.push(q.to_vec());
                self.report.unknown_fixed += 1;
                f.done = Some("deleted the column".into());
            }
            row.findings.push(f);
            return;
        }
        if q.len() % 2 == 1 {
            if q[0] == hourglass_core::annotation::ANNOTATION_PREFIX {
                self.report.annotations += 1;
            } else {
                self.report.future += 1;
                let what = if q[0] == 0x05 {
                    "Found an append data point column."
                } else {
                    "Found an object possibly from a future version of OpenTSDB."
                };
                row.findings.push(Finding::new(
                    format!("{what} Key: {key_hex}, {}", describe_cell(c)),
                    Some("not an error, left as is"),
                ));
            }
            return;
        }
        row.data_cells += 1;
        if !compact::is_compacted(q) {
            match Qualifier::parse(q) {
                Ok(qualifier) => {
                    row.unique_columns.push(q.to_vec());
                    row.dps
                        .entry(qualifier.timestamp_ms(row.base_time))
                        .or_default()
                        .push(Dp {
                            cell: i,
                            compacted: false,
                            qualifier,
                            point: None,
                        });
                }
                Err(_) => {
                    self.report.bad_values += 1;
                    let mut f = Finding::new(
                        format!(
                            "Data point qualifier is out of range for its row (offset past the hour, or a 2-byte qualifier with the millisecond flag). Key: {key_hex}, {}",
                            describe_cell(c)
                        ),
                        Some("--fix --delete-bad-values deletes the column"),
                    );
                    if fix && opts.delete_bad_values {
                        row.deletes.push(q.to_vec());
                        self.report.bad_values_deleted += 1;
                        f.done = Some("deleted the column".into());
                    } else {
                        row.uncorrected = true;
                    }
                    row.findings.push(f);
                }
            }
            return;
        }
        let mut points = Vec::new();
        if let Err(e) = compact::decode_cell(q, &c.value, &mut points) {
            self.report.bad_compacted_columns += 1;
            let mut f = Finding::new(
                format!(
                    "Corrupted value: couldn't break down into individual values ({e}). Key: {key_hex}, {}",
                    describe_cell(c)
                ),
                Some("--fix --delete-bad-compacts deletes the column"),
            );
            if fix && opts.delete_bad_compacts {
                row.deletes.push(q.to_vec());
                self.report.bad_compacted_columns_deleted += 1;
                f.done = Some("deleted the column".into());
            }
            row.findings.push(f);
            return;
        }
        let values_len: usize = points.iter().map(|p| p.qualifier.value_len()).sum();
        let meta = (c.value.len() == values_len + 1)
            .then(|| c.value.last().copied())
            .flatten();
        if let Some(meta) = meta.filter(|m| *m > 1) {
            // As OpenTSDB: counted, and the column is left out of everything else.
            self.report.bad_compacted_columns += 1;
            row.findings.push(Finding::new(
                format!(
                    "The last byte of a compacted should be 0 or 1. Either this value is corrupted or it was written by a future version of OpenTSDB (last byte 0x{meta:02X}). Key: {key_hex}, {}",
                    describe_cell(c)
                ),
                None,
            ));
            return;
        }
        if points
            .windows(2)
            .any(|w| w[0].offset_ms() > w[1].offset_ms())
        {
            self.report.out_of_order_compacted += 1;
            row.compact_row = true;
            row.out_of_order.push(row.findings.len());
            row.findings.push(Finding::new(
                format!(
                    "Compacted column was out of order or requires a fixup. Key: {key_hex}, {}",
                    describe_cell(c)
                ),
                Some("--fix rewrites the row as one sorted compacted column"),
            ));
        }
        row.unique_columns.push(q.to_vec());
        for p in points {
            row.dps
                .entry(p.qualifier.timestamp_ms(row.base_time))
                .or_default()
                .push(Dp {
                    cell: i,
                    compacted: true,
                    qualifier: p.qualifier,
                    point: Some(p),
                });
        }
    }

    /// Second pass: the points at one time (ms). Picks the one to keep (oldest write, or
    /// newest with `last_write_wins`, among those whose value can be read), reports the
    /// others as duplicates, and checks the kept value.
    fn check_time(&mut self, row: &mut RowState<'_>, ts: i64, list: &[Dp]) {
        let opts = self.ctx.options;
        let fix = opts.fix;
        let cells = row.cells;
        let checks: Vec<Option<ValueCheck>> = list
            .iter()
            .map(|dp| (!dp.compacted).then(|| check_value(dp.qualifier, &cells[dp.cell].value)))
            .collect();
        let usable = |i: usize| checks[i].as_ref().is_none_or(ValueCheck::usable);
        let mut order: Vec<usize> = (0..list.len()).collect();
        order.sort_by_key(|i| cells[list[*i].cell].timestamp); // stable: row order on ties
        let keep = if opts.last_write_wins {
            let mut newest_first = order.iter().rev().copied();
            newest_first.find(|i| usable(*i)).or(order.last().copied())
        } else {
            let mut oldest_first = order.iter().copied();
            oldest_first.find(|i| usable(*i)).or(order.first().copied())
        };
        let Some(keep) = keep else { return };
        if list.len() > 1 {
            row.has_duplicates = true;
            let mut others = Vec::new();
            for &i in order.iter().filter(|i| **i != keep) {
                let dp = &list[i];
                self.report.duplicates += 1;
                row.discarded += 1;
                if dp.compacted {
                    // Only a rewrite of the row takes a point out of a compacted column.
                    if fix && opts.resolve_duplicates {
                        row.compact_row = true;
                    }
                } else {
                    row.discarded_singles.push(cells[dp.cell].qualifier.clone());
                }
                others.push(describe_dp(dp, cells, checks[i].as_ref()));
            }
            row.dup_findings.push(row.findings.len());
            row.findings.push(Finding::new(
                format!(
                    "Duplicate data point at {ts} ({}) in row {}: kept {}, discarded {}",
                    iso_utc(ts),
                    row.key_hex,
                    describe_dp(&list[keep], cells, checks[keep].as_ref()),
                    others.join(", ")
                ),
                Some(&format!(
                    "--fix --resolve-duplicates keeps {}",
                    keep_rule(opts.last_write_wins, true)
                )),
            ));
        }
        self.report.valid_datapoints += 1;
        let dp = &list[keep];
        let cell = cells[dp.cell];
        // A value fix must not overwrite a duplicate that stays.
        let resolving = list.len() == 1 || (fix && opts.resolve_duplicates);
        match (&checks[keep], dp.point) {
            (None, Some(p)) => {
                // A point of a compacted column (its length came from its flags): shortened
                // only when the row is rewritten.
                match shorter_int(p) {
                    Some((short, saved)) => {
                        self.report.vle += 1;
                        self.report.vle_bytes += saved;
                        if fix {
                            row.vle_in_rewrite += 1;
                            row.kept.push(short);
                        } else {
                            row.kept.push(p);
                        }
                    }
                    None => row.kept.push(p),
                }
            }
            (None, None) => {}
            (Some(ValueCheck::Valid(p)), _) => row.kept.push(*p),
            (Some(ValueCheck::Vle(p, short, saved)), _) => {
                self.report.vle += 1;
                self.report.vle_bytes += saved;
                if fix && resolving {
                    row.kept.push(*short);
                    row.value_fixes.push(ValueFix {
                        old_qualifier: cell.qualifier.clone(),
                        new: *short,
                        finding: None,
                        vle: true,
                    });
                } else {
                    row.kept.push(*p);
                }
            }
            (Some(ValueCheck::Encoding(p, msg)), _) => {
                self.report.value_encoding += 1;
                let at = row.findings.len();
                row.findings.push(Finding::new(
                    format!("{msg} Key: {}, {}", row.key_hex, describe_cell(cell)),
                    Some("--fix rewrites it on 4 bytes"),
                ));
                if fix && resolving {
                    row.kept.push(*p);
                    row.value_fixes.push(ValueFix {
                        old_qualifier: cell.qualifier.clone(),
                        new: *p,
                        finding: Some(at),
                        vle: false,
                    });
                } else {
                    row.uncorrected = true;
                }
            }
            (Some(ValueCheck::Bad(msg)), _) => {
                self.report.bad_values += 1;
                let mut f = Finding::new(
                    format!("{msg} Key: {}, {}", row.key_hex, describe_cell(cell)),
                    Some("--fix --delete-bad-values deletes the column"),
                );
                if fix && opts.delete_bad_values {
                    row.deletes.push(cell.qualifier.clone());
                    self.report.bad_values_deleted += 1;
                    f.done = Some("deleted the column".into());
                } else {
                    row.uncorrected = true;
                }
                row.findings.push(f);
            }
        }
    }

    /// Last: the past-hour check, then the row's mutations. A row is rewritten as one
    /// compacted column when a fix needs it (out-of-order columns, duplicates inside
    /// compacted columns, a past row left uncompacted, `--compact`) and nothing it would
    /// lose is left unmarked for repair; otherwise columns are repaired one by one.
    fn repairs(&mut self, row: &mut RowState<'_>) -> Vec<Mutation> {
        let opts = self.ctx.options;
        let fix = opts.fix;
        let closed = i64::from(row.base_time) + i64::from(MAX_TIMESPAN) + UNCOMPACTED_GRACE_SECS
            <= self.ctx.now_secs;
        let uncompacted = closed && row.data_cells > 1;
        let mut uncompacted_finding = None;
        if uncompacted {
            self.report.uncompacted_rows += 1;
            uncompacted_finding = Some(row.findings.len());
            row.findings.push(Finding::new(
                format!(
                    "Past row left uncompacted: row {} of the hour {} holds {} data columns",
                    row.key_hex,
                    iso_utc(i64::from(row.base_time) * 1000),
                    row.data_cells
                ),
                Some("--fix compacts it into one column"),
            ));
        }
        let wants_rewrite = fix
            && (row.compact_row || uncompacted || (opts.compact && closed && row.data_cells > 0));
        let blocked = (row.has_duplicates && !opts.resolve_duplicates)
            || (row.uncorrected && !opts.delete_bad_values);
        let mut mutations = Mutations::default();
        for q in &row.deletes {
            mutations.delete(q);
        }
        if wants_rewrite && blocked {
            row.findings.push(Finding::new(
                format!(
                    "One or more errors found in row {} that were not marked for repair: the row was not rewritten",
                    row.key_hex
                ),
                Some("add the flags named above"),
            ));
        }
        if wants_rewrite && !blocked {
            let rewritten = self.rewrite(row, &mut mutations);
            // Data columns left besides the rewritten one (unparseable ones not deleted).
            let left = row.cells.iter().any(|c| {
                compact::is_data_qualifier(&c.qualifier)
                    && !row.unique_columns.contains(&c.qualifier)
                    && !row.deletes.contains(&c.qualifier)
                    && rewritten.as_ref() != Some(&c.qualifier)
            });
            if let Some(i) = uncompacted_finding
                && !left
            {
                self.report.uncompacted_rows_fixed += 1;
                row.findings[i].done = Some("compacted into one column".into());
            }
        } else if fix {
            if row.has_duplicates && opts.resolve_duplicates {
                for q in &row.discarded_singles {
                    mutations.delete(q);
                }
                self.report.duplicates_fixed += row.discarded_singles.len() as u64;
                if row.discarded_singles.len() as u64 == row.discarded {
                    for &i in &row.dup_findings {
                        row.findings[i].done = Some(format!(
                            "deleted the discarded column(s), kept {}",
                            keep_rule(opts.last_write_wins, false)
                        ));
                    }
                }
            }
            for fx in &row.value_fixes {
                let mut bytes = Vec::with_capacity(8);
                hourglass_core::value::write_bits(
                    fx.new.bits,
                    fx.new.qualifier.flags(),
                    &mut bytes,
                );
                let new_q = fx.new.qualifier.to_bytes();
                mutations
                    .0
                    .push(Mutation::set(DATA_FAMILY, new_q.clone(), bytes));
                if new_q != fx.old_qualifier {
                    mutations.delete(&fx.old_qualifier);
                }
                self.count_value_fix(&mut row.findings, fx);
            }
        }
        mutations.0
    }

    /// Rewrites the row as one column of the kept points, deleting every other data column
    /// whose points were read. Returns the qualifier of the column that holds them.
    fn rewrite(&mut self, row: &mut RowState<'_>, mutations: &mut Mutations) -> Option<Vec<u8>> {
        let opts = self.ctx.options;
        let new_cell = (!row.kept.is_empty()).then(|| compact::encode_cell(&row.kept));
        if let Some((q, _)) = &new_cell {
            row.unique_columns.retain(|c| c != q);
            row.deletes.retain(|c| c != q);
            mutations.keep(q);
        }
        for q in &row.unique_columns {
            mutations.delete(q);
        }
        if let Some((q, v)) = &new_cell {
            let unchanged = row.cells.iter().any(|c| c.qualifier == *q && c.value == *v);
            if !unchanged {
                mutations.0.push(Mutation::set_at(
                    DATA_FAMILY,
                    q.clone(),
                    hourglass_storage::now_ms(),
                    v.clone(),
                ));
            }
        }
        if row.has_duplicates {
            self.report.duplicates_fixed += row.discarded;
            for &i in &row.dup_findings {
                row.findings[i].done =
                    Some(format!("kept {}", keep_rule(opts.last_write_wins, false)));
            }
        }
        self.report.vle_fixed += row.vle_in_rewrite;
        for fx in &row.value_fixes {
            self.count_value_fix(&mut row.findings, fx);
        }
        self.report.out_of_order_compacted_fixed += row.out_of_order.len() as u64;
        for &i in &row.out_of_order {
            row.findings[i].done = Some("rewrote the row in time order".into());
        }
        new_cell.map(|(q, _)| q)
    }

    fn count_value_fix(&mut self, findings: &mut [Finding], fx: &ValueFix) {
        if fx.vle {
            self.report.vle_fixed += 1;
        } else {
            self.report.value_encoding_fixed += 1;
        }
        if let Some(i) = fx.finding {
            findings[i].done = Some("rewritten on 4 bytes".into());
        }
    }
}

/// What one row's check found so far, and what its repair needs.
#[derive(Debug, Default)]
struct RowState<'c> {
    key_hex: String,
    base_time: u32,
    /// The row's cells of family `t`, in stored order.
    cells: &'c [&'c Cell],
    findings: Vec<Finding>,
    /// Columns to delete whatever else happens (unknown, unparseable, bad values).
    deletes: Vec<Vec<u8>>,
    /// Data columns whose points were read: a rewrite of the row replaces them all.
    unique_columns: Vec<Vec<u8>>,
    /// Columns with even-length (data point) qualifiers.
    data_cells: usize,
    /// A fix needs the row rewritten (out-of-order column, duplicate in a compacted one).
    compact_row: bool,
    /// An error without a repair in this run.
    uncorrected: bool,
    /// Findings of out-of-order compacted columns.
    out_of_order: Vec<usize>,
    /// Points by time in ms.
    dps: BTreeMap<i64, Vec<Dp>>,
    /// The point kept at each time, with value fixes applied: a rewrite's content.
    kept: Vec<Point>,
    has_duplicates: bool,
    dup_findings: Vec<usize>,
    /// Discarded duplicates in single columns.
    discarded_singles: Vec<Vec<u8>>,
    /// Every discarded duplicate.
    discarded: u64,
    /// Repairs of kept single columns, made in place unless the row is rewritten.
    value_fixes: Vec<ValueFix>,
    /// 8-byte integers in compacted columns shortened by a rewrite.
    vle_in_rewrite: u64,
}

/// A row's mutations, each column deleted once.
#[derive(Debug, Default)]
struct Mutations(Vec<Mutation>);

impl Mutations {
    fn delete(&mut self, q: &[u8]) {
        if !self.0.iter().any(|m| is_delete_of(m, q)) {
            self.0.push(Mutation::delete(DATA_FAMILY, q.to_vec()));
        }
    }

    /// Drops a planned deletion of `q` (the rewritten column lands there).
    fn keep(&mut self, q: &[u8]) {
        self.0.retain(|m| !is_delete_of(m, q));
    }
}

fn is_delete_of(m: &Mutation, q: &[u8]) -> bool {
    matches!(m, Mutation::DeleteCells { qualifier, .. } if qualifier == q)
}

/// Which duplicate a fix keeps, for finding lines.
fn keep_rule(last_write_wins: bool, name_flag: bool) -> &'static str {
    match (last_write_wins, name_flag) {
        (true, true) => "the newest write (--last-write-wins)",
        (true, false) => "the newest write",
        (false, _) => "the oldest write",
    }
}

/// The global annotation row: all-zero salt and metric, then the base hour, no tags (the
/// salt bytes, when salting is on, stay zero). A key of the metric's zero bytes and the hour
/// alone is taken as one too.
pub fn is_global_annotation_row(schema: &Schema, key: &[u8]) -> bool {
    let full = schema.tags_offset();
    let short = usize::from(schema.metric_width) + 4;
    (key.len() == full || key.len() == short) && key[..key.len() - 4].iter().all(|b| *b == 0)
}
