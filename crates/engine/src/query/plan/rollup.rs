//! Reading rollup and pre-aggregate tables (RFC 0008, phase 2), as OpenTSDB 2.4.1's
//! `TsdbQuery` chooses and reads them.
//!
//! With a rollup configuration, a sub-query whose downsample has a fixed interval reads the
//! rollup table of the longest configured interval that divides it (`RollupConfig
//! .getRollupInterval`), unless that is the default interval (raw data) or `rollupUsage` is
//! `ROLLUP_RAW`. The downsample then runs over the rollup values: `sum`, `min` and `max` fold
//! the stored sums, minimums and maximums; `count` adds the stored counts; `avg` divides the
//! sum of the stored sums by the sum of the stored counts. A read that finds no series falls
//! back as `rollupUsage` says: `ROLLUP_FALLBACK` to the next divisor interval (raw data when
//! that is the default interval), `ROLLUP_FALLBACK_RAW` to raw data.
//!
//! Pre-aggregated series are read from the pre-aggregate table of the same interval (or the
//! default interval's, at raw resolution) when the sub-query asks for them (`preAggregate`,
//! `pre-agg`) or filters the aggregate tag (`_aggregate`) with `literal_or` on another value
//! than the raw one.

use hourglass_core::rollup::{AGGREGATOR_MASK, RollupInterval};
use hourglass_core::value::{FLAGS_MASK, Value};
use hourglass_storage::{CellRef, ColumnCells, LentCells, Row};

use super::*;
use crate::query::fold::{Fold, Running, with_fold};
use crate::rollup::RollupSettings;

/// Where a sub-query's points come from.
#[derive(Debug, Clone, Copy)]
pub(super) enum Source<'a> {
    /// The data table, write buffers included.
    Data,
    /// A table of data-point cells other than the data table (the default interval's
    /// pre-aggregate table).
    Points(&'a str),
    /// A rollup (or pre-aggregate rollup) table.
    Rollup {
        table: &'a str,
        interval: &'a RollupInterval,
        read: RollupRead,
    },
}

/// Which rollup cells a read takes, by aggregator id (and the older `name:` qualifiers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RollupRead {
    /// One aggregator's cells: `sum`, `count`, `min`, `max` (or any other configured id).
    One { id: u8, name: &'static str },
    /// `avg`: the `sum` and `count` cells.
    Avg { sum: u8, count: u8 },
}

/// 2.4.1's words for `dev` over rollups. It fails only once a `dev` cell is read (its scan
/// takes them by id and `RollupSeq` refuses them); a read finding none answers nothing, or
/// falls back, as any other.
const DEV_REFUSED: &str = "Standard deviation over rolled up data is not supported at this time";

/// The rollup's aggregator for a downsampling function: OpenTSDB reads `zimsum` as `sum`,
/// `mimmax` as `max` and `mimmin` as `min` (`RollupQuery`).
fn rollup_aggregator(function: Aggregator) -> Aggregator {
    match function {
        Aggregator::ZimSum => Aggregator::Sum,
        Aggregator::MimMax => Aggregator::Max,
        Aggregator::MimMin => Aggregator::Min,
        other => other,
    }
}

/// The rollup usages, as `TsdbQuery.ROLLUP_USAGE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Usage {
    Raw,
    NoFallback,
    Fallback,
    FallbackRaw,
}

/// A sub-query's way through the rollup tables: the interval it reads now, and the ones it
/// may fall back to.
pub(super) struct Plan<'a> {
    settings: &'a RollupSettings,
    q: &'a SubQuery,
    usage: Usage,
    pre_aggregate: bool,
    /// The interval read now; `None`: raw resolution.
    current: Option<&'a RollupInterval>,
    /// Further divisors of the downsample interval, longest first (`best_match_rollups`).
    next: Vec<&'a RollupInterval>,
}

impl<'a> Plan<'a> {
    pub(super) fn new(settings: &'a RollupSettings, q: &'a SubQuery) -> Plan<'a> {
        // No usage given reads rollups without fallback, as 2.4.1 does with a null usage.
        let usage = match q.rollup_usage.as_deref() {
            Some("ROLLUP_RAW") => Usage::Raw,
            Some("ROLLUP_FALLBACK") => Usage::Fallback,
            Some("ROLLUP_FALLBACK_RAW") => Usage::FallbackRaw,
            _ => Usage::NoFallback,
        };
        let pre_aggregate = q.pre_aggregate
            || q.filters.iter().any(|f| {
                f.tagk == settings.agg_tag_key
                    && matches!(f.type_name.as_str(), "literal_or" | "iliteral_or")
                    && f.expression != settings.raw_agg_tag_value
            });
        let mut next = match (usage, q.downsample) {
            (Usage::Raw, _) | (_, None) => Vec::new(),
            (_, Some(ds)) => divisors(settings, &ds),
        };
        let current = if next.is_empty() {
            None
        } else {
            Some(next.remove(0)).filter(|i| !i.default_interval)
        };
        Plan {
            settings,
            q,
            usage,
            pre_aggregate,
            current,
            next,
        }
    }

    /// The source to read now, or OpenTSDB's refusal when the rollup's aggregator has no id
    /// or cannot be read from rollups.
    pub(super) fn source(&self, tsdb: &'a Tsdb) -> Result<Source<'a>> {
        let config = &self.settings.config;
        let Some(interval) = self.current else {
            if self.pre_aggregate {
                let table = config.default_interval().pre_aggregation_table.as_str();
                if table == tsdb.settings().schema.data_table {
                    return Ok(Source::Data);
                }
                return Ok(Source::Points(table));
            }
            return Ok(Source::Data);
        };
        let function = self
            .q
            .downsample
            .map_or(Aggregator::Sum, |d| rollup_aggregator(d.function));
        let read = match function {
            Aggregator::Avg => RollupRead::Avg {
                sum: config.id_for("sum")?,
                count: config.id_for("count")?,
            },
            // `dev` reads its cells to refuse them (see [`DEV_REFUSED`]).
            other => RollupRead::One {
                id: config.id_for(other.name())?,
                name: other.name(),
            },
        };
        let table = if self.pre_aggregate {
            interval.pre_aggregation_table.as_str()
        } else {
            interval.table.as_str()
        };
        Ok(Source::Rollup {
            table,
            interval,
            read,
        })
    }

    /// After a read that found no series: moves to the next source as the rollup usage
    /// says; false when there is none (the empty answer stands).
    pub(super) fn fall_back(&mut self) -> bool {
        if self.current.is_none() {
            return false;
        }
        match self.usage {
            Usage::FallbackRaw => {
                self.current = None;
                true
            }
            Usage::Fallback if !self.next.is_empty() => {
                let next = self.next.remove(0);
                self.current = Some(next).filter(|i| !i.default_interval);
                true
            }
            _ => false,
        }
    }
}

/// The configured intervals dividing a fixed downsample interval, longest first
/// (`RollupConfig.getRollupInterval`); none for calendar, `all` and sub-second intervals.
fn divisors<'a>(settings: &'a RollupSettings, ds: &DownsampleSpec) -> Vec<&'a RollupInterval> {
    if ds.calendar.is_some() || ds.interval_ms < 1000 {
        return Vec::new();
    }
    let seconds = ds.interval_ms / 1000;
    let mut out: Vec<&RollupInterval> = settings
        .config
        .intervals()
        .iter()
        .filter(|i| seconds % i64::from(i.interval_seconds) == 0)
        .collect();
    out.sort_by_key(|i| std::cmp::Reverse(i.interval_seconds));
    out
}

/// One rollup cell's time (ms), value, whether it is a count (for `avg`) and whether its
/// qualifier has the older string form; `None` when the read does not take it.
fn rollup_cell(
    read: RollupRead,
    interval: &RollupInterval,
    base: u32,
    qualifier: &[u8],
    value: &[u8],
) -> Result<Option<(i64, f64, bool, bool)>> {
    // The id's own byte: 2.4.1's scan keeps no other (its qualifier filters compare the
    // first byte whole), so a cell with the compacted bit over the id never reaches it.
    let (at, is_count) = match read {
        RollupRead::One { id, name } => match qualifier.first() {
            Some(&first) if first == id => (1, false),
            _ if has_name(qualifier, name) => (name.len() + 1, false),
            _ => return Ok(None),
        },
        RollupRead::Avg { sum, count } => match qualifier.first() {
            Some(&first) if first == sum => (1, false),
            Some(&first) if first == count => (1, true),
            _ if has_name(qualifier, "sum") => (4, false),
            _ if has_name(qualifier, "count") => (6, true),
            _ => return Ok(None),
        },
    };
    let Some(&[hi, lo]) = qualifier.get(at..at + 2) else {
        return Ok(None);
    };
    let offset = u16::from_be_bytes([hi, lo]) >> 4;
    let flags = lo & FLAGS_MASK;
    let v = Value::decode(flags, value)?;
    let t = (i64::from(base) + i64::from(offset) * i64::from(interval.interval_seconds)) * 1000;
    Ok(Some((t, v.as_f64(), is_count, at > 1)))
}

/// Whether a qualifier has the older string form `name:` (2.4.1 still reads it).
fn has_name(qualifier: &[u8], name: &str) -> bool {
    qualifier.len() > name.len()
        && qualifier.starts_with(name.as_bytes())
        && qualifier[name.len()] == b':'
}

/// Bytes a row holds (key, qualifiers and values).
pub(super) fn row_bytes(row: &Row) -> usize {
    row.key.len()
        + row
            .cells
            .iter()
            .map(|c| c.qualifier.len() + c.value.len())
            .sum::<usize>()
}

/// A series' points of one row: time (ms), value, and for `avg` the count beside the sum.
type RowPoints = Vec<(i64, Num, Option<f64>)>;

/// A rollup cell as a read takes it: time (ms), value, whether it is a count (for `avg`),
/// whether its qualifier has the older string form.
type RollupCell = (i64, f64, bool, bool);

/// The points of one rollup row from its cells (`cells` a buffer, cleared first): one value
/// per time and kind, the id form's over the string one's; for `avg` a sum with the count of
/// its time, as 2.4.1's `RollupSeq` pairs them (either one alone is left out).
fn rollup_points(
    read: RollupRead,
    interval: &RollupInterval,
    base: u32,
    row: &[CellRef<'_>],
    cells: &mut Vec<RollupCell>,
    points: &mut RowPoints,
) -> Result<()> {
    cells.clear();
    for c in row.iter().filter(|c| c.family == DATA_FAMILY) {
        if let Some(cell) = rollup_cell(read, interval, base, c.qualifier, c.value)? {
            cells.push(cell);
        }
    }
    // Cells come in qualifier order: a read of one id's cells finds them in time order
    // already, unless string qualifiers are mixed in.
    if !cells.is_sorted_by_key(|c| (c.2, c.0, c.3)) {
        cells.sort_by_key(|c| (c.2, c.0, c.3));
    }
    cells.dedup_by_key(|c| (c.2, c.0));
    match read {
        RollupRead::One { .. } => {
            points.extend(cells.iter().map(|c| (c.0, Num::Float(c.1), None)));
        }
        RollupRead::Avg { .. } => {
            let split = cells.partition_point(|c| !c.2);
            let (sums, counts) = cells.split_at(split);
            let mut counts = counts.iter().peekable();
            for sum in sums {
                while counts.next_if(|c| c.0 < sum.0).is_some() {}
                if let Some(count) = counts.peek().filter(|c| c.0 == sum.0) {
                    points.push((sum.0, Num::Float(sum.1), Some(count.1)));
                }
            }
        }
    }
    Ok(())
}

const _: () = assert!(matches!(DATA_FAMILY.as_bytes(), [b't']));

/// A rollup value as a number, as `Value::decode(flags, value)?.as_f64()` gives it; the
/// widths OpenTSDB writes are read inline, any other goes through `Value::decode` (which
/// accepts or refuses it).
#[inline]
fn rollup_value(flags: u8, value: &[u8]) -> Result<f64> {
    Ok(match (flags, value) {
        (0x0, &[a]) => f64::from(a as i8),
        (0x1, &[a, b]) => f64::from(i16::from_be_bytes([a, b])),
        (0x3, &[a, b, c, d]) => f64::from(i32::from_be_bytes([a, b, c, d])),
        (0x7, v) if v.len() == 8 => {
            let mut b = [0u8; 8];
            b.copy_from_slice(v);
            i64::from_be_bytes(b) as f64
        }
        (0xB, &[a, b, c, d]) => f64::from(f32::from_be_bytes([a, b, c, d])),
        (0xF, v) if v.len() == 8 => {
            let mut b = [0u8; 8];
            b.copy_from_slice(v);
            f64::from_be_bytes(b)
        }
        _ => Value::decode(flags, value)?.as_f64(),
    })
}

/// One rollup row's cells as the read takes them: true when read into `cols`' columns of
/// `avg` pairs, false when into `points` (from a row lent as columns when its qualifiers
/// allow, else by the general reading, [`rollup_points`]).
///
/// `same_layout`: the row's qualifiers and value lengths are those of the row read before
/// it (the store says so of a series' rows lent together, [`LentCells::Series`]): when
/// that row's shape is the one kept, the row is read through it without comparing.
#[allow(clippy::too_many_arguments)]
fn read_row(
    read: RollupRead,
    interval: &RollupInterval,
    base: u32,
    row: LentCells<'_, '_>,
    same_layout: bool,
    cols: &mut AvgColumns,
    cells: &mut Vec<RollupCell>,
    points: &mut RowPoints,
) -> Result<bool> {
    // Whether the shape kept is the row before's: set again below when it is this row's.
    let same = std::mem::take(&mut cols.shape_is_last) && same_layout;
    cols.integer_counts = false;
    match (read, row) {
        (RollupRead::Avg { sum, count }, LentCells::Cells(lent)) => {
            if avg_columns((sum, count), interval, base, lent, cols)? {
                return Ok(true);
            }
        }
        (RollupRead::Avg { sum, count }, LentCells::Columns(c)) => {
            if avg_from_columns((sum, count), interval, base, &c, same, cols)? {
                return Ok(true);
            }
        }
        (RollupRead::One { id, .. }, LentCells::Columns(c)) => {
            let (times, values) = (&mut cols.times, &mut cols.sums);
            if one_from_columns(id, interval, base, &c, (times, values), points)? {
                return Ok(false);
            }
        }
        (RollupRead::One { .. }, LentCells::Cells(_)) => {}
        // Read a row at a time by the caller.
        (_, LentCells::Series(_)) => {
            return Err(Error::Internal("series rows read as one row".into()));
        }
    }
    let mut lent = Vec::new();
    let row = row.cells(&mut lent);
    rollup_points(read, interval, base, row, cells, points)?;
    Ok(false)
}

/// One row's `avg` pairs as columns: times (ms), summed sums, summed counts; and the count
/// cells' times and values while pairing.
#[derive(Default)]
struct AvgColumns {
    times: Vec<i64>,
    sums: Vec<f64>,
    counts: Vec<f64>,
    count_times: Vec<i64>,
    /// The shape of the last row read as computed ([`paired_columns`]) of one integer
    /// width a run, for the rows after it with the same qualifiers and lengths. One: at
    /// 100 series x 90 days 92% of the rows read have it (a grouped tier gives a series'
    /// rows together); keeping four took more instructions (a row of none of them compared
    /// with each).
    shape: PairedShape,
    /// Whether `shape` is the last row's (read through it, or kept from it).
    shape_is_last: bool,
    /// Whether `counts` were decoded from integers (as [`count_as_long`] leaves them).
    integer_counts: bool,
}

/// What [`paired_columns`] found of a row as computed that depends on its qualifiers and
/// value lengths alone: a row with the same qualifier and length columns (of the same ids,
/// at the same interval) pairs its cells alike and has integer values of the same widths,
/// so it is read by computing its times and decoding its values, without a check a cell.
/// Computed tiers write most rows of a series alike (the same hours, counts of one width,
/// sums of one width).
#[derive(Default)]
struct PairedShape {
    /// The ids and the interval (s) the shape was found for; `None`: no shape yet.
    read: Option<((u8, u8), i64)>,
    qualifiers: Vec<u8>,
    lens: Vec<u8>,
    /// Each pair's offset in the row (ms after its base time).
    offsets_ms: Vec<i64>,
    /// The sums' and the counts' first value (bytes into the values) and width (bytes,
    /// every value of the run; 0: widths mixed).
    sums: (usize, u8),
    counts: (usize, u8),
}

impl PairedShape {
    /// The shape's pairs of `row` into `cols` (cleared before) when `row` has the shape's
    /// qualifiers and lengths; false otherwise (`cols` untouched).
    /// `same`: the row's qualifiers and lengths are known to be the shape's (not compared).
    fn read(
        &self,
        ids: (u8, u8),
        (base, step): (i64, i64),
        row: &ColumnCells<'_>,
        same: bool,
        (times, sums, counts): (&mut Vec<i64>, &mut Vec<f64>, &mut Vec<f64>),
    ) -> bool {
        let (lens, values) = row.value_run(0..row.len());
        if self.read != Some((ids, step))
            || !(same
                || (row.qualifiers() == self.qualifiers.as_slice() && lens == self.lens.as_slice()))
        {
            return false;
        }
        let n = self.offsets_ms.len();
        let base_ms = base * 1000;
        let from = times.len();
        times.extend_from_slice(&self.offsets_ms);
        times[from..].iter_mut().for_each(|t| *t += base_ms);
        // The lengths add up to the values' bytes (checked when lent): the runs are there.
        let sum_bytes = values.get(self.sums.0..).unwrap_or_default();
        let count_bytes = values.get(self.counts.0..).unwrap_or_default();
        decode_ints(self.sums.1, n, sum_bytes, sums)
            && decode_ints(self.counts.1, n, count_bytes, counts)
    }

    /// Keeps the shape of `row`, just read by [`paired_columns`] (its pairs from the cells
    /// `sums` and `counts`, at `times`) in place of this one, when both runs are of one
    /// integer width (else this one stays). Whether it is kept.
    fn keep(
        &mut self,
        ids: (u8, u8),
        (base, step): (i64, i64),
        row: &ColumnCells<'_>,
        (sums, counts): (std::ops::Range<usize>, std::ops::Range<usize>),
        times: &[i64],
    ) -> bool {
        let (lens, _) = row.value_run(0..row.len());
        let width = |range: &std::ops::Range<usize>| {
            let run = lens.get(range.clone()).unwrap_or_default();
            let first = run.first().copied().unwrap_or(0);
            let at: usize = lens
                .get(..range.start)
                .unwrap_or_default()
                .iter()
                .map(|b| usize::from(*b))
                .sum();
            (at, first, run.iter().all(|l| *l == first))
        };
        let (s, c) = (width(&sums), width(&counts));
        let widths = matches!(s.1, 1 | 2 | 4 | 8) && matches!(c.1, 1 | 2 | 4 | 8);
        if !(s.2 && c.2 && widths) {
            // Widths mixed: the shape kept before stays.
            return false;
        }
        self.qualifiers.clear();
        self.qualifiers.extend_from_slice(row.qualifiers());
        self.lens.clear();
        self.lens.extend_from_slice(lens);
        let base_ms = base * 1000;
        self.offsets_ms.clear();
        self.offsets_ms.extend(times.iter().map(|t| t - base_ms));
        self.sums = (s.0, s.1);
        self.counts = (c.0, c.1);
        self.read = Some((ids, step));
        true
    }
}

/// `n` big-endian integers of `width` bytes (1, 2, 4 or 8) from `bytes` appended to `out`
/// as numbers; false (`out` as it was) when `bytes` is short of them or the width is
/// another.
fn decode_ints(width: u8, n: usize, bytes: &[u8], out: &mut Vec<f64>) -> bool {
    let Some(bytes) = bytes.get(..n * usize::from(width)) else {
        return false;
    };
    match width {
        1 => out.extend(bytes.iter().map(|b| f64::from(*b as i8))),
        2 => out.extend(
            bytes
                .as_chunks::<2>()
                .0
                .iter()
                .map(|b| f64::from(i16::from_be_bytes(*b))),
        ),
        4 => out.extend(
            bytes
                .as_chunks::<4>()
                .0
                .iter()
                .map(|b| f64::from(i32::from_be_bytes(*b))),
        ),
        8 => out.extend(
            bytes
                .as_chunks::<8>()
                .0
                .iter()
                .map(|b| i64::from_be_bytes(*b) as f64),
        ),
        _ => return false,
    }
    true
}

/// The `avg` pairs of one rollup row straight into columns, when every cell the read takes
/// has a 3-byte qualifier with the `sum` or `count` id itself (what Hourglass and 2.4.1
/// write): the pairs [`rollup_points`] would give, in the same order. False (and the
/// columns left to be cleared) when a cell needs [`rollup_points`]'s general reading (a
/// compacted id, a string qualifier, cells out of time order).
fn avg_columns(
    (sum, count): (u8, u8),
    interval: &RollupInterval,
    base: u32,
    row: &[CellRef<'_>],
    cols: &mut AvgColumns,
) -> Result<bool> {
    cols.times.clear();
    cols.sums.clear();
    cols.counts.clear();
    cols.count_times.clear();
    let step = i64::from(interval.interval_seconds);
    let base = i64::from(base);
    for c in row {
        // `t` (DATA_FAMILY), compared without a call.
        if c.family.as_bytes() != [b't'] {
            continue;
        }
        let &[id, hi, lo] = c.qualifier else {
            return Ok(false);
        };
        let is_count = if id == sum {
            false
        } else if id == count {
            true
        } else if id & AGGREGATOR_MASK == sum || id & AGGREGATOR_MASK == count {
            return Ok(false);
        } else {
            continue;
        };
        let offset = u16::from_be_bytes([hi, lo]) >> 4;
        let v = rollup_value(lo & FLAGS_MASK, c.value)?;
        let t = (base + i64::from(offset) * step) * 1000;
        let (times, values) = if is_count {
            (&mut cols.count_times, &mut cols.counts)
        } else {
            (&mut cols.times, &mut cols.sums)
        };
        match times.last() {
            // Two widths of one time: the first in qualifier order stands.
            Some(&last) if last == t => continue,
            Some(&last) if last > t => return Ok(false),
            _ => {}
        }
        times.push(t);
        values.push(v);
    }
    pair_avg(cols);
    Ok(true)
}

/// Keeps each sum of `cols` with the count of its time (either alone is left out): the
/// columns of times, sums and counts of the pairs.
fn pair_avg(cols: &mut AvgColumns) {
    if cols.times == cols.count_times {
        // Every sum has its count (a row as computed).
        return;
    }
    let (mut kept, mut j) = (0, 0);
    for i in 0..cols.times.len() {
        let t = cols.times[i];
        while j < cols.count_times.len() && cols.count_times[j] < t {
            j += 1;
        }
        if j < cols.count_times.len() && cols.count_times[j] == t {
            cols.times[kept] = t;
            cols.sums[kept] = cols.sums[i];
            cols.counts[kept] = cols.counts[j];
            kept += 1;
        }
    }
    cols.times.truncate(kept);
    cols.sums.truncate(kept);
    cols.counts.truncate(kept);
}

/// The cells of a column row with the rollup id `id` (3-byte qualifiers): their index range,
/// found by binary search (the qualifiers ascend).
fn id_range(qualifiers: &[[u8; 3]], id: u8) -> std::ops::Range<usize> {
    let from = qualifiers.partition_point(|q| q[0] < id);
    let to = from + qualifiers[from..].partition_point(|q| q[0] == id);
    from..to
}

/// Whether a column row of 3-byte qualifiers holds a cell with a compacted form of one of
/// `ids` (`id | COMPACTED_MASK`): such rows go to the general reading, which leaves those
/// cells out as 2.4.1 does.
fn has_compacted(qualifiers: &[[u8; 3]], ids: &[u8]) -> bool {
    match qualifiers.last() {
        Some(last) if last[0] & !AGGREGATOR_MASK != 0 => ids
            .iter()
            .any(|id| !id_range(qualifiers, id | !AGGREGATOR_MASK).is_empty()),
        _ => false,
    }
}

/// The cells `range` (all of one id) of a column row as times (ms) and values, appended to
/// `times` and `values` (empty, or holding this id's only): a time seen already (two widths of one time, or two versions of one
/// cell) keeps its first cell, as the general reading does.
fn column_values(
    row: &ColumnCells<'_>,
    qualifiers: &[[u8; 3]],
    range: std::ops::Range<usize>,
    (base, step): (i64, i64),
    times: &mut Vec<i64>,
    values: &mut Vec<f64>,
) -> Result<()> {
    let (lens, bytes) = row.value_run(range.clone());
    let qualifiers = qualifiers.get(range).unwrap_or_default();
    let (had, had_values) = (times.len(), values.len());
    let (base_ms, step_ms) = (base * 1000, step * 1000);
    // A column a pass: the times, then the values, when the times ascend strictly (no time
    // twice) and every value is an integer of its flags' width.
    let time_of =
        |q: &[u8; 3]| base_ms + i64::from(u16::from_be_bytes([q[1], q[2]]) >> 4) * step_ms;
    times.extend(qualifiers.iter().map(time_of));
    let ascending = times
        .get(had.saturating_sub(1)..)
        .unwrap_or_default()
        .windows(2)
        .all(|w| w[0] < w[1]);
    if ascending && int_values(qualifiers, lens, bytes, values) {
        return Ok(());
    }
    times.truncate(had);
    values.truncate(had_values);
    let mut last = times.last().copied();
    let mut at = 0usize;
    for (q, len) in qualifiers.iter().zip(lens) {
        let len = usize::from(*len);
        let v = rollup_value(
            q[2] & FLAGS_MASK,
            bytes.get(at..at + len).unwrap_or_default(),
        )?;
        at += len;
        let t = time_of(q);
        // The qualifiers ascend: so do the times (`times` holds this id's alone).
        if last == Some(t) {
            continue;
        }
        last = Some(t);
        times.push(t);
        values.push(v);
    }
    Ok(())
}

/// The width of an integer value (flags 0, 1, 3, 7: 1, 2, 4, 8 bytes) by its flags; 0xFF
/// (no value's length) for other flags.
const INT_WIDTH: [u8; 16] = [
    1, 2, 0xFF, 4, 0xFF, 0xFF, 0xFF, 8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
];

/// The values of a run of rollup cells (3-byte qualifiers, one length a cell, the values
/// from the first on) appended to `out` when every one is an integer of its flags' width
/// (what `rollup_value` reads them as); false, with `out` holding garbage past its length
/// before, when one is not.
fn int_values(qualifiers: &[[u8; 3]], lens: &[u8], bytes: &[u8], out: &mut Vec<f64>) -> bool {
    let n = qualifiers.len().min(lens.len());
    let (qualifiers, lens) = (&qualifiers[..n], &lens[..n]);
    let from = out.len();
    // A run of one integer width (a row's counts, most series' sums): its lengths and
    // flags checked in a pass each (no branch a value), its values decoded many at a time.
    // Flags 0, 1, 3, 7 are the widths 1, 2, 4, 8 less one.
    let first = lens.first().copied().unwrap_or(1);
    if matches!(first, 1 | 2 | 4 | 8)
        && lens.iter().fold(0u8, |all, l| all | (l ^ first)) == 0
        && qualifiers
            .iter()
            .fold(0u8, |all, q| all | ((q[2] & FLAGS_MASK) ^ (first - 1)))
            == 0
    {
        let Some(bytes) = bytes.get(..n * usize::from(first)) else {
            return false;
        };
        out.resize(from + n, 0.0);
        let out = &mut out[from..];
        match first {
            1 => out
                .iter_mut()
                .zip(bytes)
                .for_each(|(v, b)| *v = f64::from(*b as i8)),
            2 => out
                .iter_mut()
                .zip(bytes.as_chunks::<2>().0)
                .for_each(|(v, b)| *v = f64::from(i16::from_be_bytes(*b))),
            4 => out
                .iter_mut()
                .zip(bytes.as_chunks::<4>().0)
                .for_each(|(v, b)| *v = f64::from(i32::from_be_bytes(*b))),
            _ => out
                .iter_mut()
                .zip(bytes.as_chunks::<8>().0)
                .for_each(|(v, b)| *v = i64::from_be_bytes(*b) as f64),
        }
        return true;
    }
    // Widths mixed: every value an integer of its flags' width, within the bytes.
    let (mut ok, mut total) = (true, 0usize);
    for (q, len) in qualifiers.iter().zip(lens) {
        ok &= INT_WIDTH[usize::from(q[2] & FLAGS_MASK)] == *len;
        total += usize::from(*len);
    }
    if !ok || total > bytes.len() {
        return false;
    }
    out.resize(from + n, 0.0);
    let mut at = 0usize;
    for (v, len) in out[from..].iter_mut().zip(lens) {
        let len = usize::from(*len);
        // The 8 bytes at the value, big-endian, shifted down with its sign; the last
        // values, short of 8 bytes, one byte at a time.
        let word = match bytes.get(at..).and_then(<[u8]>::first_chunk::<8>) {
            Some(w) => i64::from_be_bytes(*w),
            None => {
                let mut w = [0u8; 8];
                for (to, from) in w.iter_mut().zip(bytes.get(at..).unwrap_or_default()) {
                    *to = *from;
                }
                i64::from_be_bytes(w)
            }
        };
        at += len;
        *v = word.wrapping_shr(64u32.wrapping_sub(8 * len as u32)) as f64;
    }
    true
}

/// [`avg_columns`] of a row lent as columns: the `sum` and `count` cells found by binary
/// search over the qualifiers (the other aggregators' cells are not touched), the same
/// columns in the same cases; false when the general reading must read the row (qualifiers
/// not of 3 bytes, compacted ids).
fn avg_from_columns(
    (sum, count): (u8, u8),
    interval: &RollupInterval,
    base: u32,
    row: &ColumnCells<'_>,
    same: bool,
    cols: &mut AvgColumns,
) -> Result<bool> {
    cols.times.clear();
    cols.sums.clear();
    cols.counts.clear();
    cols.count_times.clear();
    if row.family().as_bytes() != [b't'] {
        return Ok(true);
    }
    let (qualifiers, []) = row.qualifiers().as_chunks::<3>() else {
        return Ok(false);
    };
    if row.qualifier_len() != 3 {
        return Ok(false);
    }
    let at = (i64::from(base), i64::from(interval.interval_seconds));
    // A row shaped as the last one read as computed (known so when `same`).
    let out = (&mut cols.times, &mut cols.sums, &mut cols.counts);
    if cols.shape.read((sum, count), at, row, same, out) {
        cols.shape_is_last = true;
        cols.integer_counts = true;
        return Ok(true);
    }
    cols.times.clear();
    cols.sums.clear();
    cols.counts.clear();
    let (sums, counts) = (id_range(qualifiers, sum), id_range(qualifiers, count));
    if !has_compacted(qualifiers, &[sum, count])
        && paired_columns(row, qualifiers, (sums.clone(), counts.clone()), at, cols)
    {
        let mut shape = std::mem::take(&mut cols.shape);
        cols.shape_is_last = shape.keep((sum, count), at, row, (sums, counts), &cols.times);
        cols.shape = shape;
        cols.integer_counts = true;
        return Ok(true);
    }
    cols.times.clear();
    cols.sums.clear();
    cols.counts.clear();
    // In qualifier order, as the cells are read one by one (the first failing value fails).
    let mut ranges = [(sums, false), (counts, true)];
    if count < sum {
        ranges.swap(0, 1);
    }
    for (range, is_count) in ranges {
        let (times, values) = if is_count {
            (&mut cols.count_times, &mut cols.counts)
        } else {
            (&mut cols.times, &mut cols.sums)
        };
        column_values(row, qualifiers, range, at, times, values)?;
    }
    if has_compacted(qualifiers, &[sum, count]) {
        return Ok(false);
    }
    pair_avg(cols);
    Ok(true)
}

/// The `avg` pairs of a row as computed, straight into `cols`' columns: each `sum` cell
/// with a `count` cell of the same time, times strictly ascending, every value an integer
/// of its flags' width. False (the columns left to be cleared) for any other row.
fn paired_columns(
    row: &ColumnCells<'_>,
    qualifiers: &[[u8; 3]],
    (sums, counts): (std::ops::Range<usize>, std::ops::Range<usize>),
    (base, step): (i64, i64),
    cols: &mut AvgColumns,
) -> bool {
    let (Some(s), Some(c)) = (qualifiers.get(sums.clone()), qualifiers.get(counts.clone())) else {
        return false;
    };
    // The same offsets (the qualifiers less their flags), ascending strictly: each checked
    // in a pass of its own, then the times written in one.
    let offset = |q: &[u8; 3]| u16::from_be_bytes([q[1], q[2]]) >> 4;
    let same = s.len() == c.len()
        && s.iter()
            .zip(c)
            .all(|(a, b)| a[1] == b[1] && (a[2] ^ b[2]) < 0x10)
        && s.windows(2).all(|w| offset(&w[0]) < offset(&w[1]));
    if !same {
        return false;
    }
    let (base_ms, step_ms) = (base * 1000, step * 1000);
    cols.times
        .extend(s.iter().map(|q| base_ms + i64::from(offset(q)) * step_ms));
    let (s_lens, s_bytes) = row.value_run(sums);
    let (c_lens, c_bytes) = row.value_run(counts);
    int_values(s, s_lens, s_bytes, &mut cols.sums)
        && int_values(c, c_lens, c_bytes, &mut cols.counts)
}

/// [`rollup_points`] of a row lent as columns for a read of one id: its cells found by
/// binary search; false when the general reading must read the row.
fn one_from_columns(
    id: u8,
    interval: &RollupInterval,
    base: u32,
    row: &ColumnCells<'_>,
    (times, values): (&mut Vec<i64>, &mut Vec<f64>),
    points: &mut RowPoints,
) -> Result<bool> {
    times.clear();
    values.clear();
    if row.family().as_bytes() != [b't'] {
        return Ok(true);
    }
    let (qualifiers, []) = row.qualifiers().as_chunks::<3>() else {
        return Ok(false);
    };
    if row.qualifier_len() != 3 || has_compacted(qualifiers, &[id]) {
        return Ok(false);
    }
    let at = (i64::from(base), i64::from(interval.interval_seconds));
    column_values(row, qualifiers, id_range(qualifiers, id), at, times, values)?;
    points.extend(
        times
            .iter()
            .zip(values.iter())
            .map(|(t, v)| (*t, Num::Float(*v), None)),
    );
    Ok(true)
}

impl Scan<'_> {
    /// Reads a rollup or pre-aggregate table's rows of `[start_secs, end_secs]` (row base
    /// times) into per-series state, one thread, as the store streams them (in key order:
    /// each series' rows in time order). Rollup rows are visited as the store lends their
    /// cells ([`hourglass_storage::Store::scan_cells`]): nothing is copied per cell.
    pub(super) fn part_from(
        &self,
        source: &Source<'_>,
        start_secs: i64,
        end_secs: i64,
    ) -> Result<Part> {
        let schema = &self.tsdb.settings().schema;
        let ts_at = schema.timestamp_offset();
        let until_ms = (end_secs.saturating_add(1).saturating_mul(1000)).min(self.window.1);
        let (table, rollup) = match *source {
            Source::Data => return Err(Error::Internal("a data table read as a rollup".into())),
            Source::Points(table) => (table, None),
            Source::Rollup {
                table,
                interval,
                read,
            } => (table, Some((interval, read))),
        };
        let avg = match rollup {
            Some((interval, RollupRead::Avg { .. })) => {
                if buckets_are_intervals(self.q.downsample, interval) {
                    AvgState::Pairs
                } else {
                    AvgState::Buckets
                }
            }
            _ => AvgState::None,
        };
        let mut part = Part::empty();
        let query = self.row_query(start_secs, end_secs);
        let mut points: RowPoints = Vec::new();
        let mut cells: Vec<RollupCell> = Vec::new();
        let mut cols = AvgColumns::default();
        let base_of = |key: &[u8]| {
            key.get(ts_at..ts_at + 4)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .map(u32::from_be_bytes)
        };
        for mut request in crate::scan::scan_requests(schema, &query) {
            // Key order, or period order for a grouped tier (RFC 0012): either way a
            // series' rows in time order; a grouped tier's rows of a series and period
            // may come in one visit.
            request.read.series_rows = true;
            match rollup {
                Some((interval, read)) => {
                    // The visitor's own error, kept while the store's scan stops.
                    let mut failed: Option<Error> = None;
                    // One row: its key (for its series), base time, cells, and whether its
                    // layout is the row before's (rows of a series lent together).
                    let mut one_row =
                        |key: &[u8],
                         base: u32,
                         row: LentCells<'_, '_>,
                         same,
                         slot: &mut Option<Option<usize>>| {
                            points.clear();
                            let bytes = key.len()
                                + match row {
                                    LentCells::Cells(cells) => cells
                                        .iter()
                                        .map(|c| c.qualifier.len() + c.value.len())
                                        .sum::<usize>(),
                                    LentCells::Columns(c) => c.qualifiers().len() + c.value_bytes(),
                                    LentCells::Series(_) => 0,
                                };
                            // A series' next row of the layout of the one before, read
                            // through its shape: its pairs straight into the series'.
                            if let (
                                true,
                                AvgState::Pairs,
                                RollupRead::Avg { sum, count },
                                LentCells::Columns(c),
                                Some(Some(i)),
                            ) = (same && cols.shape_is_last, avg, read, row, *slot)
                                && self.pairs_in_place(
                                    &mut part,
                                    i,
                                    bytes,
                                    (base, interval),
                                    &c,
                                    (sum, count),
                                    &cols.shape,
                                )?
                            {
                                return Ok(());
                            }
                            let as_columns = read_row(
                                read,
                                interval,
                                base,
                                row,
                                same,
                                &mut cols,
                                &mut cells,
                                &mut points,
                            )?;
                            if matches!(read, RollupRead::One { name: "dev", .. })
                                && !points.is_empty()
                            {
                                return Err(Error::invalid(DEV_REFUSED));
                            }
                            if as_columns {
                                self.take_avg_row(
                                    &mut part, key, &mut cols, bytes, avg, until_ms, slot,
                                )
                            } else {
                                self.take_row(&mut part, key, &mut points, bytes, avg, until_ms)
                            }
                        };
                    let mut visit = |key: &[u8], row: LentCells<'_, '_>| {
                        let taken = match row {
                            // Each row's key differs from the first's in its base time
                            // alone: the series is the same.
                            LentCells::Series(series) => {
                                let mut slot = None;
                                series.rows.iter().try_for_each(|r| {
                                    let cells = LentCells::Columns(r.cells);
                                    one_row(key, r.base, cells, r.same_layout, &mut slot)
                                })
                            }
                            row => match base_of(key) {
                                Some(base) => one_row(key, base, row, false, &mut None),
                                None => Ok(()),
                            },
                        };
                        taken.map_err(|e| {
                            failed = Some(e);
                            hourglass_storage::Error::Unavailable("the rollup read stopped".into())
                        })
                    };
                    let scanned = self.tsdb.store().scan_cells(table, &request, &mut visit);
                    if let Some(e) = failed {
                        return Err(e);
                    }
                    scanned?;
                }
                None => {
                    for row in self.tsdb.store().scan(table, &request)? {
                        let row = row?;
                        let Some(base) = base_of(&row.key) else {
                            continue;
                        };
                        points.clear();
                        for p in crate::rows::decode_row(Some(&row), &[])?.points {
                            let v = match p.value() {
                                Value::Int(i) => Num::Int(i),
                                Value::Float(f) => Num::Float(f64::from(f)),
                                Value::Double(d) => Num::Float(d),
                            };
                            points.push((p.qualifier.timestamp_ms(base), v, None));
                        }
                        let bytes = row_bytes(&row);
                        self.take_row(
                            &mut part,
                            &row.key,
                            &mut points,
                            bytes,
                            AvgState::None,
                            until_ms,
                        )?;
                    }
                }
            }
        }
        Ok(part)
    }

    /// Feeds one row's points (`bytes` stored) into its series' state, counted and checked
    /// against the limits.
    fn take_row(
        &self,
        part: &mut Part,
        key: &[u8],
        points: &mut RowPoints,
        bytes: usize,
        avg: AvgState,
        until_ms: i64,
    ) -> Result<()> {
        let (lo, hi) = (self.window.0, self.window.1 - 1);
        let stats = &mut part.stats;
        stats.rows += 1;
        stats.bytes += bytes as u64;
        // A row without a cell the read takes is no series (2.4.1 filters the cells in the
        // scan: such a row never reaches it).
        if points.is_empty() {
            return Ok(());
        }
        points.retain(|p| p.0 >= lo && p.0 <= hi);
        stats.points += points.len() as u64;
        let slot = self.slot_of(part, key, avg, until_ms)?;
        let mut held = 0u64;
        if let Some(i) = slot {
            let s = &mut part.series[i];
            match &mut s.points {
                Points::Raw(out) => {
                    out.extend(points.iter().map(|p| (p.0, p.1)));
                    held += points.len() as u64;
                }
                Points::Downsampled(d) => {
                    for p in points.iter() {
                        held += d.push(p.0, p.1.as_f64()) as u64;
                    }
                }
                Points::RollupAvg(avg) => {
                    for p in points.iter() {
                        let count = count_as_long(p.2.unwrap_or(0.0));
                        held += avg.push(p.0, p.1.as_f64(), count) as u64;
                    }
                }
            }
        }
        part.held += held;
        self.options
            .limits
            .check(&part.stats, part.held, self.deadline)?;
        self.memory.track(part.held)
    }

    /// The slot of the series of a row key (its state made at its first row), `None` when
    /// the filters leave it out.
    fn slot_of(
        &self,
        part: &mut Part,
        key: &[u8],
        avg: AvgState,
        until_ms: i64,
    ) -> Result<Option<usize>> {
        let tags_at = self.tsdb.settings().schema.tags_offset();
        let tag_bytes = key.get(tags_at..).unwrap_or_default();
        // The series after the row before's (rows in key order), the row before's own (a
        // grouped tier gives a series' rows of a period together, RFC 0012), or the first
        // one (the next time's rows).
        let (next, same) = part.last.map_or((0, usize::MAX), |i| (i + 1, i));
        for slot in [next, same, 0] {
            if part
                .keys
                .get(slot)
                .is_some_and(|k| k.as_slice() == tag_bytes)
            {
                part.last = Some(slot);
                return Ok(Some(slot));
            }
        }
        if let Some(&slot) = part.index.get(tag_bytes) {
            part.last = slot.or(part.last);
            return Ok(slot);
        }
        let slot = match self.new_series(key, tag_bytes, until_ms)? {
            Some(mut state) => {
                if avg != AvgState::None && matches!(state.points, Points::Downsampled(_)) {
                    state.points = self.avg_points(until_ms, avg == AvgState::Pairs);
                }
                part.series.push(state);
                part.keys.push(tag_bytes.to_vec());
                Some(part.series.len() - 1)
            }
            None => None,
        };
        part.stats.series += u64::from(slot.is_some());
        part.index.insert(tag_bytes.to_vec(), slot);
        part.last = slot.or(part.last);
        Ok(slot)
    }

    /// [`Scan::take_row`] for an `avg` row read into columns by [`avg_columns`]: the same
    /// counts and buckets, the pairs pushed a column at a time. `slot`: the row's series'
    /// slot when known already (`Some`), else found and kept there (rows of one series lent
    /// together find it once).
    #[allow(clippy::too_many_arguments)]
    fn take_avg_row(
        &self,
        part: &mut Part,
        key: &[u8],
        cols: &mut AvgColumns,
        bytes: usize,
        avg: AvgState,
        until_ms: i64,
        slot: &mut Option<Option<usize>>,
    ) -> Result<()> {
        let (lo, hi) = (self.window.0, self.window.1 - 1);
        let stats = &mut part.stats;
        stats.rows += 1;
        stats.bytes += bytes as u64;
        if cols.times.is_empty() {
            return Ok(());
        }
        // Counts decoded from integers are longs already.
        if !cols.integer_counts {
            for c in &mut cols.counts {
                *c = count_as_long(*c);
            }
        }
        // Times ascend: the window keeps a run of them.
        let from = cols.times.partition_point(|t| *t < lo);
        let to = cols.times.partition_point(|t| *t <= hi).max(from);
        let (times, sums, counts) = (
            &cols.times[from..to],
            &cols.sums[from..to],
            &cols.counts[from..to],
        );
        stats.points += times.len() as u64;
        let slot = match *slot {
            Some(known) => known,
            None => *slot.insert(self.slot_of(part, key, avg, until_ms)?),
        };
        let mut held = 0u64;
        if let Some(i) = slot {
            match &mut part.series[i].points {
                Points::RollupAvg(avg) => {
                    held += avg.push_all(times, sums, counts) as u64;
                }
                Points::Downsampled(d) => {
                    for (t, v) in times.iter().zip(sums) {
                        held += d.push(*t, *v) as u64;
                    }
                }
                Points::Raw(out) => {
                    out.extend(times.iter().zip(sums).map(|(t, v)| (*t, Num::Float(*v))));
                    held += times.len() as u64;
                }
            }
        }
        part.held += held;
        self.options
            .limits
            .check(&part.stats, part.held, self.deadline)?;
        self.memory.track(part.held)
    }

    /// A row of `avg` pairs read through `shape` (the row before's, of the same layout:
    /// not compared) straight into the pairs its series `i` keeps, when they are kept as
    /// read ([`RollupAvg::Pairs`]) and [`RollupAvg::push_all`] would append the row's pairs
    /// as they are (times after the series' last, on a bucket start) and the window keeps
    /// them all: the counts, buckets and checks of [`Scan::take_avg_row`]. False (nothing
    /// changed) otherwise: the row is read the usual way.
    #[allow(clippy::too_many_arguments)]
    fn pairs_in_place(
        &self,
        part: &mut Part,
        i: usize,
        bytes: usize,
        (base, interval): (u32, &RollupInterval),
        row: &ColumnCells<'_>,
        ids: (u8, u8),
        shape: &PairedShape,
    ) -> Result<bool> {
        let (lo, hi) = (self.window.0, self.window.1 - 1);
        let Some(Points::RollupAvg(avg)) = part.series.get_mut(i).map(|s| &mut s.points) else {
            return Ok(false);
        };
        let RollupAvg::Pairs(p) = &mut **avg else {
            return Ok(false);
        };
        let had = p.now.times.len();
        let empty = p.len() == 0;
        let last = p.now.times.last().copied().or_else(|| p.last_time());
        let at = (i64::from(base), i64::from(interval.interval_seconds));
        let now = &mut p.now;
        let out = (&mut now.times, &mut now.sums, &mut now.counts);
        let read = shape.read(ids, at, row, true, out);
        let added = now.times.get(had..).unwrap_or_default();
        let appended = match (added.first(), added.last()) {
            (Some(&first), Some(&end)) => {
                last.is_none_or(|last| first > last)
                    && first.rem_euclid(p.spec.interval_ms) == 0
                    && first >= lo
                    && end <= hi
            }
            _ => false,
        };
        let n = added.len();
        if !(read && appended) {
            p.now.times.truncate(had);
            p.now.sums.truncate(had);
            p.now.counts.truncate(had);
            return Ok(false);
        }
        let stats = &mut part.stats;
        stats.rows += 1;
        stats.bytes += bytes as u64;
        stats.points += n as u64;
        part.held += 2 * (n - usize::from(empty)) as u64;
        self.options
            .limits
            .check(&part.stats, part.held, self.deadline)?;
        self.memory.track(part.held)?;
        Ok(true)
    }

    /// The state of a series whose `avg` is read from sums and counts: its pairs as read
    /// when the downsample's buckets are the tier's intervals (`pairs`), else buckets.
    fn avg_points(&self, until_ms: i64, pairs: bool) -> Points {
        let spec = self
            .q
            .downsample
            .unwrap_or_else(|| DownsampleSpec::fixed(3_600_000, Aggregator::Sum, FillPolicy::None));
        let mut sums = spec;
        sums.function = Aggregator::Sum;
        sums.fill = FillPolicy::None;
        Points::RollupAvg(Box::new(if pairs {
            RollupAvg::Pairs(AvgPairs::new(sums, self.query, until_ms))
        } else {
            RollupAvg::buckets(sums, self.query, until_ms)
        }))
    }
}

/// How a read's series hold their points: not as `avg` pairs, or as `avg` pairs in
/// buckets, or as the pairs themselves (each its own bucket).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AvgState {
    None,
    Buckets,
    Pairs,
}

/// Whether a downsample's buckets are a tier's intervals, so that each (sum, count) pair
/// read is its own bucket (fixed buckets of the interval's width; the rows' times are
/// checked to fall on bucket starts as they come).
pub(super) fn buckets_are_intervals(ds: Option<DownsampleSpec>, interval: &RollupInterval) -> bool {
    ds.is_some_and(|ds| {
        ds.calendar.is_none()
            && ds.interval_ms > 0
            && ds.interval_ms == i64::from(interval.interval_seconds) * 1000
    })
}

/// The `avg` pairs of a series read from a tier whose interval is the downsample's: each
/// pair its own bucket while times ascend and fall on bucket starts, so the series' means
/// are its pairs' (no downsampler).
pub(super) struct AvgPairs {
    /// The pairs of earlier parts (see [`RollupAvg::append`]), then `now`'s: each part's
    /// columns kept as they are, joined once when finished.
    earlier: Vec<PairColumns>,
    now: PairColumns,
    /// The sums' and counts' buckets, the query range and where the points stop: what the
    /// buckets are made of when a pair is not its own bucket.
    spec: DownsampleSpec,
    query: (i64, i64),
    until: i64,
}

/// Times (ms), sums and counts of `avg` pairs.
#[derive(Default)]
struct PairColumns {
    times: Vec<i64>,
    sums: Vec<f64>,
    counts: Vec<f64>,
}

impl AvgPairs {
    fn new(spec: DownsampleSpec, query: (i64, i64), until: i64) -> AvgPairs {
        AvgPairs {
            earlier: Vec::new(),
            now: PairColumns::default(),
            spec,
            query,
            until,
        }
    }

    fn parts(&self) -> impl Iterator<Item = &PairColumns> {
        self.earlier.iter().chain(std::iter::once(&self.now))
    }

    fn len(&self) -> usize {
        self.parts().map(|p| p.times.len()).sum()
    }

    fn last_time(&self) -> Option<i64> {
        self.parts().filter_map(|p| p.times.last()).last().copied()
    }

    fn first_time(&self) -> Option<i64> {
        self.parts().find_map(|p| p.times.first()).copied()
    }
}

impl RollupAvg {
    fn buckets(spec: DownsampleSpec, query: (i64, i64), until: i64) -> RollupAvg {
        RollupAvg::Buckets {
            sums: Downsampler::new(spec, query).expect_until(until),
            counts: Downsampler::new(spec, query).expect_until(until),
        }
    }

    /// Adds one row's pairs: times strictly ascending, all `base + k x interval` (a rollup
    /// row's). Returns how many buckets they closed, as the buckets count them (two a pair
    /// after the first: its sum's and its count's).
    pub(super) fn push_all(&mut self, times: &[i64], sums: &[f64], counts: &[f64]) -> usize {
        if let RollupAvg::Pairs(p) = self {
            let Some(&first) = times.first() else {
                return 0;
            };
            let last = p.now.times.last().copied().or_else(|| p.last_time());
            let empty = last.is_none();
            // The row's later times are its first plus whole intervals.
            if last.is_none_or(|last| first > last) && first.rem_euclid(p.spec.interval_ms) == 0 {
                let now = &mut p.now;
                if now.times.capacity() == 0 {
                    // One pair an interval up to where the points stop.
                    let expected = (p.until - first).max(0) / p.spec.interval_ms + 1;
                    let expected = usize::try_from(expected)
                        .unwrap_or(0)
                        .clamp(times.len(), 1 << 20);
                    now.times.reserve(expected);
                    now.sums.reserve(expected);
                    now.counts.reserve(expected);
                }
                now.times.extend_from_slice(times);
                now.sums.extend_from_slice(sums);
                now.counts.extend_from_slice(counts);
                return 2 * (times.len() - usize::from(empty));
            }
            self.make_buckets();
        }
        match self {
            RollupAvg::Buckets { sums: s, counts: c } => {
                s.push_all(times, sums) + c.push_all(times, counts)
            }
            RollupAvg::Pairs(_) => 0,
        }
    }

    /// [`RollupAvg::push_all`] of one pair.
    pub(super) fn push(&mut self, t: i64, sum: f64, count: f64) -> usize {
        match self {
            RollupAvg::Buckets { sums, counts } => sums.push(t, sum) + counts.push(t, count),
            RollupAvg::Pairs(_) => self.push_all(&[t], &[sum], &[count]),
        }
    }

    /// Turns pairs into the buckets pushing them would have made.
    fn make_buckets(&mut self) {
        if let RollupAvg::Pairs(p) = self {
            let mut buckets = RollupAvg::buckets(p.spec, p.query, p.until);
            if let RollupAvg::Buckets { sums, counts } = &mut buckets {
                for part in p.parts() {
                    sums.push_all(&part.times, &part.sums);
                    counts.push_all(&part.times, &part.counts);
                }
            }
            *self = buckets;
        }
    }

    /// Buckets held (closed ones, as the buckets count them).
    pub(super) fn held(&self) -> usize {
        match self {
            RollupAvg::Pairs(p) => 2 * p.len().saturating_sub(1),
            RollupAvg::Buckets { sums, counts } => sums.buckets() + counts.buckets(),
        }
    }

    /// Appends the same series' state over later times, which start on a bucket boundary.
    pub(super) fn append(&mut self, mut later: RollupAvg) {
        if let (RollupAvg::Pairs(a), RollupAvg::Pairs(b)) = (&mut *self, &mut later)
            && a.last_time()
                .is_none_or(|last| b.first_time().is_none_or(|first| first > last))
        {
            // Kept as parts: no copy.
            let now = std::mem::take(&mut a.now);
            a.earlier.push(now);
            a.earlier.append(&mut b.earlier);
            a.now = std::mem::take(&mut b.now);
            return;
        }
        self.make_buckets();
        later.make_buckets();
        if let (
            RollupAvg::Buckets { sums, counts },
            RollupAvg::Buckets {
                sums: later_sums,
                counts: later_counts,
            },
        ) = (self, later)
        {
            sums.append(later_sums);
            counts.append(later_counts);
        }
    }
}

/// A stored count as 2.4.1's `avg` over rollups takes it (`RollupSeq.valueCount`): a
/// `long`, a float count truncated toward zero (Java's cast: NaN is 0, the infinities the
/// extremes), before the bucket's counts are added.
#[inline]
fn count_as_long(count: f64) -> f64 {
    count as i64 as f64
}

/// The mean of a pair that is its own bucket: its sum over its count, 0 for a count of 0
/// (as [`finish_avg`] divides a bucket's sums by its counts).
#[inline]
fn pair_mean(sum: f64, count: f64) -> f64 {
    // The bucket's sum of the one value, from 0.0 (-0.0 is 0.0).
    let sum = 0.0 + sum;
    if count == 0.0 { 0.0 } else { sum / count }
}

/// The aggregation across a group's series, when every member keeps its `avg` pairs
/// ([`RollupAvg::Pairs`]) at the same times, the sub-query has no fill policy and no rate,
/// and its aggregator folds as values arrive: what aggregating the members' finished means
/// gives (`aggregate_floats`, the same additions in the same order), in one pass over the
/// members' columns, no series finished. `None` when it does not apply.
pub(super) fn aggregate_pairs(
    members: &[SeriesState],
    q: &SubQuery,
) -> Option<Result<Vec<(i64, f64)>>> {
    if q.rate || q.downsample.is_none_or(|ds| ds.fill != FillPolicy::None) {
        return None;
    }
    fn pairs(s: &SeriesState) -> Option<&AvgPairs> {
        match &s.points {
            Points::RollupAvg(avg) => match &**avg {
                RollupAvg::Pairs(p) => Some(p),
                RollupAvg::Buckets { .. } => None,
            },
            _ => None,
        }
    }
    let first = pairs(members.first()?)?;
    let times = || first.parts().flat_map(|p| p.times.iter());
    let mut all = Vec::with_capacity(members.len());
    for s in members {
        let p = pairs(s)?;
        // Parts alike (the halves of one split) compared whole, else time by time.
        let same = (p.parts().count() == first.parts().count()
            && p.parts()
                .zip(first.parts())
                .all(|(a, b)| a.times == b.times))
            || p.parts().flat_map(|p| p.times.iter()).eq(times());
        if !same {
            return None;
        }
        all.push(p);
    }
    let n = first.len();
    Some(with_fold!(Running::of(q.aggregator),
        F => fold_pairs::<F>(&all, n, times()),
        _ => return None))
}

/// [`aggregate_pairs`]' fold: each member's means folded into a row of accumulators, member
/// after member.
fn fold_pairs<'a, F: Fold>(
    members: &[&AvgPairs],
    n: usize,
    times: impl Iterator<Item = &'a i64>,
) -> Result<Vec<(i64, f64)>> {
    let mut acc = vec![F::START; n];
    let mut finite = vec![0u64; n];
    for p in members {
        let (mut acc, mut finite) = (&mut acc[..], &mut finite[..]);
        for part in p.parts() {
            let k = part.sums.len().min(part.counts.len()).min(acc.len());
            let (a, rest_a) = acc.split_at_mut(k);
            let (f, rest_f) = finite.split_at_mut(k);
            for (((a, f), s), c) in a
                .iter_mut()
                .zip(f.iter_mut())
                .zip(&part.sums)
                .zip(&part.counts)
            {
                F::add(a, f, pair_mean(*s, *c));
            }
            (acc, finite) = (rest_a, rest_f);
        }
    }
    let mut out = Vec::with_capacity(n);
    for ((x, a), f) in times.zip(acc).zip(finite) {
        let v = F::value(a, f);
        if v.is_infinite() {
            return Err(Error::invalid(format!("Got Infinity: {v} at {x}")));
        }
        out.push((*x, v));
    }
    Ok(out)
}

/// A series' `avg` buckets from its buckets of summed sums and summed counts (OpenTSDB's
/// `Downsampler` over rolled-up averages: a bucket whose counts add up to 0 is 0), filled as
/// the sub-query's fill policy says. Sums and counts were pushed in pairs, so their buckets
/// are the same.
pub(super) fn finish_avg(
    avg: RollupAvg,
    spec: DownsampleSpec,
    query: (i64, i64),
    window: (i64, i64),
    budget: u64,
) -> Result<Vec<(i64, f64)>> {
    let mut filled = spec;
    filled.function = Aggregator::Sum;
    let mut out = Downsampler::new(filled, query);
    let (sums, counts) = match avg {
        RollupAvg::Buckets { sums, counts } => (sums, counts),
        RollupAvg::Pairs(p) => {
            // Each pair its own bucket: the bucket's sum is the pair's sum (a sum of one
            // value is the value plus 0.0), its count the pair's count.
            let mean = |(sum, count): (&f64, &f64)| pair_mean(*sum, *count);
            let mut means = Vec::with_capacity(p.len());
            for part in p.parts() {
                let pairs = part.sums.iter().zip(&part.counts).map(mean);
                means.extend(part.times.iter().copied().zip(pairs));
            }
            if spec.fill == FillPolicy::None {
                // One value a bucket comes out as it went in.
                return Ok(means);
            }
            for (t, mean) in means {
                out.push(t, mean);
            }
            return out.finish(window, budget);
        }
    };
    let sums = sums.finish(window, budget)?;
    let counts = counts.finish(window, budget)?;
    let mut counts = counts.into_iter().peekable();
    let (mut times, mut means) = (
        Vec::with_capacity(sums.len()),
        Vec::with_capacity(sums.len()),
    );
    for (t, sum) in sums {
        while counts.next_if(|c| c.0 < t).is_some() {}
        let count = counts.next_if(|c| c.0 == t).map_or(0.0, |c| c.1);
        times.push(t);
        means.push(if count == 0.0 { 0.0 } else { sum / count });
    }
    // One push per bucket, in time order: as many single pushes would.
    out.push_all(&times, &means);
    out.finish(window, budget)
}

/// The query's downsample as the rollup read runs it: a `count` adds the stored counts, an
/// `avg` is finished from sums and counts (see [`finish_avg`]).
pub(super) fn rollup_downsample(
    source: &Source<'_>,
    ds: Option<DownsampleSpec>,
) -> Option<DownsampleSpec> {
    match (source, ds) {
        (Source::Rollup { .. }, Some(mut ds)) => {
            ds.function = match rollup_aggregator(ds.function) {
                Aggregator::Count => Aggregator::Sum,
                other => other,
            };
            Some(ds)
        }
        (_, ds) => ds,
    }
}

/// The first row base time (seconds) of the later half when a rollup read of the rows
/// `[first, last]` can run on two threads: more than one core, a sub-query not naming its
/// series (see `names_its_series`), and a row boundary near the middle that is also a
/// downsampling bucket boundary (so no bucket is cut in two). Rows of one series come in
/// time order in each half, so the halves join as the data table's do.
pub(super) fn split_row(
    source: &Source<'_>,
    q: &SubQuery,
    first: i64,
    last: i64,
    options: &RunOptions,
) -> Option<i64> {
    let Source::Rollup { interval, .. } = *source else {
        return None;
    };
    let ds = q.downsample?;
    if ds.interval_ms == 0
        || last <= first
        || !super::super::two_cores()
        || options.delete
        || !options.parallel
        || super::names_its_series(q)
    {
        return None;
    }
    let span = i64::from(interval.interval_seconds) * i64::from(interval.intervals);
    let middle = first + (last - first) / 2;
    // Row starts from the first to the last, the one nearest the middle that starts a bucket.
    let mut best: Option<i64> = None;
    let mut base = i64::from(interval.base_time(first).ok()?);
    while base <= last {
        let next = i64::from(interval.base_time(base + span).ok()?);
        if next <= base {
            return None;
        }
        base = next;
        if base > first
            && base <= last
            && ds.is_boundary(base * 1000)
            && best.is_none_or(|b| (base - middle).abs() < (b - middle).abs())
        {
            best = Some(base);
        }
    }
    best
}

/// The window (ms, end exclusive) a read of a rollup table covers for a query of
/// `[start_ms, end_ms]`, as 2.4.1's `TsdbQuery.getScanStartTimeSeconds` /
/// `getScanEndTimeSeconds` compute it for rollups: from the row holding the start (for a
/// rate, the row before it: its last bucket rates the first one) to the row holding the end
/// one row span later, exclusive (the end's second plus one, as there). Whole rows: the
/// points around the range take part in interpolation, fill and rates as there.
pub(super) fn rollup_scan_window(
    interval: &RollupInterval,
    (start_ms, end_ms): (i64, i64),
    rate: bool,
) -> Result<(i64, i64)> {
    let mut start = i64::from(interval.base_time(start_ms.div_euclid(1000))?);
    if rate && start > 0 {
        start = i64::from(interval.base_time(start - 1)?);
    }
    let end_secs = end_ms.div_euclid(1000) + 1;
    let span = i64::from(interval.interval_seconds) * i64::from(interval.intervals);
    let stop = i64::from(interval.base_time(end_secs + span)?);
    Ok((start * 1000, stop * 1000))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hourglass_core::config::Config;

    const CONFIG: &str = r#"{"aggregationIds":{"sum":0,"count":1,"max":2},"intervals":[
        {"table":"tsdb","preAggregationTable":"tsdb-agg","interval":"1m","rowSpan":"1h","defaultInterval":true},
        {"table":"r10m","preAggregationTable":"p10m","interval":"10m","rowSpan":"6h"},
        {"table":"r1h","preAggregationTable":"p1h","interval":"1h","rowSpan":"1d"},
        {"table":"r1d","preAggregationTable":"p1d","interval":"1d","rowSpan":"1n"}]}"#;

    fn settings() -> RollupSettings {
        let mut c = Config::default();
        c.set("tsd.rollups.enable", "true");
        c.set("tsd.rollups.config", &CONFIG.replace('\n', ""));
        RollupSettings::from_config(&c).unwrap().unwrap()
    }

    fn sub(downsample: &str, usage: Option<&str>) -> SubQuery {
        let mut q = SubQuery::new(Aggregator::Sum, "m");
        q.downsample = Some(DownsampleSpec::parse(downsample).unwrap());
        q.rollup_usage = usage.map(str::to_string);
        q
    }

    /// The intervals a plan reads, in order, as each read finds nothing (`None`: raw).
    fn walk(settings: &RollupSettings, q: &SubQuery) -> Vec<Option<String>> {
        let mut plan = Plan::new(settings, q);
        let mut out = vec![plan.current.map(|i| i.interval.clone())];
        while plan.fall_back() {
            out.push(plan.current.map(|i| i.interval.clone()));
        }
        out
    }

    #[test]
    fn plans_take_the_longest_dividing_interval_then_fall_back_as_the_usage_says() {
        let s = settings();
        let some = |i: &str| Some(i.to_string());
        assert_eq!(walk(&s, &sub("1d-sum", None)), [some("1d")]);
        assert_eq!(
            walk(&s, &sub("1d-sum", Some("ROLLUP_NOFALLBACK"))),
            [some("1d")]
        );
        assert_eq!(
            walk(&s, &sub("1d-sum", Some("ROLLUP_FALLBACK"))),
            [some("1d"), some("1h"), some("10m"), None]
        );
        assert_eq!(
            walk(&s, &sub("2h-max", Some("ROLLUP_FALLBACK"))),
            [some("1h"), some("10m"), None]
        );
        assert_eq!(
            walk(&s, &sub("1d-sum", Some("ROLLUP_FALLBACK_RAW"))),
            [some("1d"), None]
        );
        assert_eq!(walk(&s, &sub("1d-sum", Some("ROLLUP_RAW"))), [None]);
        // Only the default interval divides 15m (or 1m itself): raw data, no fallback.
        assert_eq!(walk(&s, &sub("15m-sum", Some("ROLLUP_FALLBACK"))), [None]);
        assert_eq!(walk(&s, &sub("1m-sum", Some("ROLLUP_FALLBACK"))), [None]);
        // Nothing divides 90s; calendar and `all` downsamples read raw data.
        assert_eq!(walk(&s, &sub("90s-sum", None)), [None]);
        assert_eq!(walk(&s, &sub("1dc-sum", None)), [None]);
        assert_eq!(walk(&s, &sub("0all-sum", None)), [None]);
    }

    #[test]
    fn literal_filters_on_the_aggregate_tag_ask_for_pre_aggregates() {
        let s = settings();
        let source = |q: &SubQuery| {
            let plan = Plan::new(&s, q);
            let interval = plan.current.map(|i| i.interval.clone());
            (interval, plan.pre_aggregate)
        };
        assert_eq!(source(&sub("1h-avg", None)), (Some("1h".into()), false));
        let mut pre = sub("1h-sum", None);
        pre.filters
            .push(TagFilter::new("literal_or", "_aggregate", "SUM", false).unwrap());
        assert_eq!(source(&pre), (Some("1h".into()), true));
        let mut raw = sub("1h-sum", None);
        raw.filters
            .push(TagFilter::new("literal_or", "_aggregate", "RAW", false).unwrap());
        assert_eq!(source(&raw), (Some("1h".into()), false));
        let mut wild = sub("1h-sum", None);
        wild.filters
            .push(TagFilter::new("wildcard", "_aggregate", "S*", false).unwrap());
        assert_eq!(source(&wild), (Some("1h".into()), false));
    }

    #[test]
    fn rollup_cells_are_read_by_id_or_older_name() {
        let s = settings();
        let hour = s.config.interval("1h").unwrap();
        let sum = RollupRead::One { id: 0, name: "sum" };
        let base = 1_356_998_400u32;
        // Offset 2 (02:00), flags 0 (one-byte integer): 42.
        assert_eq!(
            rollup_cell(sum, hour, base, &[0x00, 0x00, 0x20], &[42]).unwrap(),
            Some((i64::from(base + 7200) * 1000, 42.0, false, false))
        );
        // A compacted id (0x80 over it) is not taken, as 2.4.1's scan does not take it;
        // nor is another id.
        assert_eq!(
            rollup_cell(sum, hour, base, &[0x80, 0x00, 0x20], &[42]).unwrap(),
            None
        );
        assert_eq!(
            rollup_cell(sum, hour, base, &[0x02, 0x00, 0x20], &[42]).unwrap(),
            None
        );
        // `sum:` then the offset and flags (4-byte float 1.5 at 01:00).
        let q = [b's', b'u', b'm', b':', 0x00, 0x1B];
        assert_eq!(
            rollup_cell(sum, hour, base, &q, &1.5f32.to_be_bytes()).unwrap(),
            Some((i64::from(base + 3600) * 1000, 1.5, false, true))
        );
        let avg = RollupRead::Avg { sum: 0, count: 1 };
        let q = [b'c', b'o', b'u', b'n', b't', b':', 0x00, 0x10];
        assert_eq!(
            rollup_cell(avg, hour, base, &q, &[3]).unwrap(),
            Some((i64::from(base + 3600) * 1000, 3.0, true, true))
        );
        assert_eq!(
            rollup_cell(avg, hour, base, &[0x01, 0x00, 0x00], &[3]).unwrap(),
            Some((i64::from(base) * 1000, 3.0, true, false))
        );
    }

    /// A rollup cell's value in the width its flags name.
    fn value_bytes(flags: u8, v: i64) -> Vec<u8> {
        match flags {
            0x0 => vec![v as u8],
            0x1 => (v as i16).to_be_bytes().to_vec(),
            0x3 => (v as i32).to_be_bytes().to_vec(),
            0x7 => v.to_be_bytes().to_vec(),
            0xB => (v as f32 / 4.0).to_be_bytes().to_vec(),
            _ => (v as f64 / 3.0).to_be_bytes().to_vec(),
        }
    }

    /// A computed tier's cell (family `t`): aggregation `id`, `offset` from the row's base,
    /// `v` in the width its `flags` name.
    fn tier_cell(id: u8, offset: u16, flags: u8, v: i64) -> hourglass_storage::Cell {
        let [hi, lo] = ((offset << 4) | u16::from(flags)).to_be_bytes();
        hourglass_storage::Cell {
            family: "t".into(),
            qualifier: vec![id, hi, lo],
            timestamp: 1_356_998_400_000,
            value: value_bytes(flags, v),
            form: hourglass_storage::CellForm::Plain,
        }
    }

    proptest::proptest! {
        /// Reading an `avg` row into columns gives the pairs of the general reading, in its
        /// order, or declines the row; rows of `sum` and `count` ids alone are never
        /// declined.
        #[test]
        fn avg_columns_are_the_pairs_of_the_general_reading(
            cells in proptest::collection::vec(
                (proptest::sample::select(vec![0u8, 1, 2, 0x80, 0x81]), 0u16..24,
                 proptest::sample::select(vec![0u8, 1, 3, 7, 0xB, 0xF]), -1000i64..1000),
                0..40),
            other_family in proptest::prelude::any::<bool>(),
            compacted in proptest::prelude::any::<bool>(),
        ) {
            let s = settings();
            let hour = s.config.interval("1h").unwrap();
            let base = 1_356_998_400u32;
            let mut stored: Vec<(Vec<u8>, Vec<u8>)> = cells
                .iter()
                .map(|&(id, offset, flags, v)| {
                    // Compacted ids (0x80 set) in half the rows only: rows without them
                    // take the column reading.
                    let id = if compacted { id } else { id & 0x7F };
                    let q = (offset << 4) | u16::from(flags);
                    let [hi, lo] = q.to_be_bytes();
                    (vec![id, hi, lo], value_bytes(flags, v))
                })
                .collect();
            // A row's cells in qualifier order, one per qualifier, as the store keeps them.
            stored.sort();
            stored.dedup_by(|a, b| a.0 == b.0);
            let mut row: Vec<CellRef<'_>> = stored
                .iter()
                .map(|(q, v)| CellRef {
                    family: DATA_FAMILY,
                    qualifier: q,
                    timestamp: 0,
                    value: v,
                    form: hourglass_storage::CellForm::Plain,
                })
                .collect();
            if other_family && !row.is_empty() {
                row[0].family = "x";
            }
            let read = RollupRead::Avg { sum: 0, count: 1 };
            let (mut general, mut points) = (Vec::new(), Vec::new());
            rollup_points(read, hour, base, &row, &mut general, &mut points).unwrap();
            let mut cols = AvgColumns::default();
            let fast = avg_columns((0, 1), hour, base, &row, &mut cols).unwrap();
            let plain = row
                .iter()
                .filter(|c| c.family == DATA_FAMILY)
                .all(|c| c.qualifier[0] & 0x80 == 0);
            proptest::prop_assert_eq!(fast, plain);
            if fast {
                let got: Vec<(i64, u64, u64)> = (0..cols.times.len())
                    .map(|i| (cols.times[i], cols.sums[i].to_bits(), cols.counts[i].to_bits()))
                    .collect();
                let want: Vec<(i64, u64, u64)> = points
                    .iter()
                    .map(|p| (p.0, p.1.as_f64().to_bits(), p.2.unwrap().to_bits()))
                    .collect();
                proptest::prop_assert_eq!(got, want);
            }
        }
    }

    proptest::proptest! {
        /// A row lent as columns (RFC 0011) reads as its cells lent one by one read by the
        /// general reading: the same `avg` pairs or points, in the same order, the same
        /// errors; a row of plain `sum`, `count` and other ids is read from its columns.
        #[test]
        fn rows_lent_as_columns_read_as_their_cells(
            cells in proptest::collection::vec(
                (proptest::sample::select(vec![0u8, 1, 2, 3, 0x80, 0x81, 0x82]), 0u16..24,
                 proptest::sample::select(vec![0u8, 1, 3, 7, 0xB, 0xF]), -1000i64..1000,
                 0i64..3),
                2..40),
            compacted in proptest::prelude::any::<bool>(),
            family in proptest::sample::select(vec!["t", "x"]),
            bad in proptest::option::of(0usize..40),
            wide in proptest::prelude::any::<bool>(),
            regular in proptest::prelude::any::<bool>(),
            one_width in proptest::option::of(proptest::sample::select(vec![0u8, 1, 3, 7])),
        ) {
            use hourglass_storage::model::{RowData, lend_row};
            let s = settings();
            let interval = s.config.interval(if wide { "1d" } else { "1h" }).unwrap();
            let base = 1_356_998_400u32;
            // A row as computed: a `sum` and a `count` cell at each offset.
            let cells: Vec<(u8, u16, u8, i64, i64)> = if regular {
                cells
                    .iter()
                    .flat_map(|&(_, offset, flags, v, age)| {
                        // Sums of one width (read many at a time) or of several.
                        let flags = one_width.unwrap_or(flags & 0x7);
                        [(0, offset, flags, v, age), (1, offset, 0x0, v.rem_euclid(100), age)]
                    })
                    .collect()
            } else {
                cells
            };
            let mut stored: Vec<hourglass_storage::Cell> = cells
                .iter()
                .map(|&(id, offset, flags, v, age)| {
                    let id = if compacted { id } else { id & 0x7F };
                    let [hi, lo] = ((offset << 4) | u16::from(flags)).to_be_bytes();
                    hourglass_storage::Cell {
                        family: family.into(),
                        qualifier: vec![id, hi, lo],
                        // Older versions of a cell beside the newest.
                        timestamp: 1_356_998_400_000 - age,
                        value: value_bytes(flags, v),
                        form: hourglass_storage::CellForm::Plain,
                    }
                })
                .collect();
            if let Some(i) = bad.filter(|i| *i < stored.len()) {
                // A value of a width its flags do not name.
                stored[i].value.extend_from_slice(&[1, 2, 3]);
            }
            let bytes = RowData::from_cells(stored).encode(None);
            let read = hourglass_storage::ReadOptions::default();
            let mut lent = Vec::new();
            let columns = lend_row(&bytes, &read, &mut lent).unwrap();
            let Some(columns) = columns else {
                // Fewer than two cells after merging versions: a plain row.
                proptest::prop_assert!(lent.len() < 2);
                return Ok(());
            };
            columns.lend(&mut lent);
            let sum_count_compacted = lent.iter().any(|c| c.qualifier[0] == 0x80 || c.qualifier[0] == 0x81);
            for read in [
                RollupRead::Avg { sum: 0, count: 1 },
                RollupRead::Avg { sum: 1, count: 0 },
                RollupRead::One { id: 0, name: "sum" },
                RollupRead::One { id: 2, name: "max" },
                RollupRead::One { id: 3, name: "min" },
            ] {
                let mut want_points = Vec::new();
                let want = rollup_points(read, interval, base, &lent, &mut Vec::new(), &mut want_points);
                let (mut cols, mut points) = (AvgColumns::default(), Vec::new());
                let got = read_row(read, interval, base, LentCells::Columns(columns), false, &mut cols, &mut Vec::new(), &mut points);
                match (want, got) {
                    (Err(w), Err(g)) => proptest::prop_assert_eq!(w.to_string(), g.to_string()),
                    (Ok(()), Ok(as_columns)) => {
                        let got: Vec<(i64, u64, Option<u64>)> = if as_columns {
                            (0..cols.times.len())
                                .map(|i| (cols.times[i], cols.sums[i].to_bits(), Some(cols.counts[i].to_bits())))
                                .collect()
                        } else {
                            points.iter().map(|p| (p.0, p.1.as_f64().to_bits(), p.2.map(f64::to_bits))).collect()
                        };
                        let want: Vec<(i64, u64, Option<u64>)> = want_points
                            .iter()
                            .map(|p| (p.0, p.1.as_f64().to_bits(), p.2.map(f64::to_bits)))
                            .collect();
                        proptest::prop_assert_eq!(got, want, "{:?}", read);
                        if matches!(read, RollupRead::Avg { .. }) {
                            proptest::prop_assert_eq!(as_columns, !sum_count_compacted || family != "t");
                        }
                    }
                    (w, g) => proptest::prop_assert!(false, "{:?}: general {:?}, columns {:?}", read, w, g),
                }
            }
        }
    }

    /// One row's reading by [`read_row`] from its columns, through `cols` (holding what
    /// the rows read before it left), against the general reading of its cells;
    /// `same_layout` as a store lending a series' rows together says it.
    fn read_as_general(
        read: RollupRead,
        interval: &RollupInterval,
        base: u32,
        bytes: &[u8],
        same_layout: bool,
        cols: &mut AvgColumns,
    ) -> Result<Option<bool>, proptest::test_runner::TestCaseError> {
        use hourglass_storage::model::lend_row;
        let mut lent = Vec::new();
        let read_all = hourglass_storage::ReadOptions::default();
        let Some(columns) = lend_row(bytes, &read_all, &mut lent).unwrap() else {
            return Ok(None);
        };
        columns.lend(&mut lent);
        let mut want_points = Vec::new();
        let want = rollup_points(
            read,
            interval,
            base,
            &lent,
            &mut Vec::new(),
            &mut want_points,
        );
        let mut points = Vec::new();
        let got = read_row(
            read,
            interval,
            base,
            LentCells::Columns(columns),
            same_layout,
            cols,
            &mut Vec::new(),
            &mut points,
        );
        match (want, got) {
            (Err(w), Err(g)) => {
                proptest::prop_assert_eq!(w.to_string(), g.to_string());
                Ok(None)
            }
            (Ok(()), Ok(as_columns)) => {
                let got: Vec<(i64, u64, Option<u64>)> = if as_columns {
                    (0..cols.times.len())
                        .map(|i| {
                            (
                                cols.times[i],
                                cols.sums[i].to_bits(),
                                Some(cols.counts[i].to_bits()),
                            )
                        })
                        .collect()
                } else {
                    points
                        .iter()
                        .map(|p| (p.0, p.1.as_f64().to_bits(), p.2.map(f64::to_bits)))
                        .collect()
                };
                let want: Vec<(i64, u64, Option<u64>)> = want_points
                    .iter()
                    .map(|p| (p.0, p.1.as_f64().to_bits(), p.2.map(f64::to_bits)))
                    .collect();
                proptest::prop_assert_eq!(got, want, "{:?}", read);
                Ok(Some(as_columns))
            }
            (w, g) => {
                proptest::prop_assert!(false, "{:?}: general {:?}, columns {:?}", read, w, g);
                Ok(None)
            }
        }
    }

    proptest::proptest! {
        /// Rows read one after another through one reading state (a row as computed keeps
        /// its shape for the rows after it with the same qualifiers and lengths) read as
        /// each alone by the general reading: rows of the same shape with other values and
        /// base times, rows whose qualifiers or lengths differ, rows not as computed. Read
        /// again as a store lends them as one series' rows (`lend_column_rows`: a row of the
        /// layout of the row before said so), each again as the general reading reads it.
        #[test]
        fn rows_read_in_sequence_read_as_their_cells(
            offsets in proptest::collection::btree_set(0u16..24, 1..24),
            rows in proptest::collection::vec(
                (proptest::sample::select(vec![0u8, 1, 3, 7]), 0u32..40,
                 proptest::collection::vec(-40_000i64..40_000, 24),
                 proptest::option::of(0usize..48), proptest::prelude::any::<bool>(),
                 proptest::prelude::any::<bool>(), proptest::prelude::any::<bool>()),
                1..8),
            wide in proptest::prelude::any::<bool>(),
        ) {
            use hourglass_storage::model::{RowData, lend_column_rows};
            let s = settings();
            let interval = s.config.interval(if wide { "1d" } else { "1h" }).unwrap();
            // A row `like_before` takes the row before's flags, bad value and ids (its
            // layout), with its own values and day.
            let mut rows = rows.clone();
            for i in 1..rows.len() {
                if rows[i].6 {
                    let before = rows[i - 1].clone();
                    rows[i] = (before.0, rows[i].1, rows[i].2.clone(), before.3, before.4, before.5, true);
                }
            }
            let mut stored = Vec::new();
            for (flags, day, values, bad, drop_count, other_ids, _) in &rows {
                let base = 1_356_998_400u32 + day * 86_400;
                let mut cells = Vec::new();
                for (i, offset) in offsets.iter().enumerate() {
                    let v = values[i];
                    for (id, flags, v) in [(0u8, *flags, v), (1, 0x0, v.rem_euclid(100))] {
                        if id == 1 && *drop_count && i == 0 {
                            // A sum without its count: not a row as computed.
                            continue;
                        }
                        let id = if *other_ids { id + 2 } else { id };
                        cells.push(tier_cell(id, *offset, flags, v));
                    }
                }
                if let Some(i) = bad.filter(|i| *i < cells.len()) {
                    // A value of a width its flags do not name.
                    cells[i].value.extend_from_slice(&[1, 2, 3]);
                }
                stored.push((base, RowData::from_cells(cells).encode(None)));
            }
            let mut lent = Vec::new();
            let all = hourglass_storage::ReadOptions::default();
            let together = lend_column_rows(stored.iter().map(|(_, b)| b.as_slice()), &all, &mut lent);
            for read in [RollupRead::Avg { sum: 0, count: 1 }, RollupRead::Avg { sum: 1, count: 0 }] {
                let mut cols = AvgColumns::default();
                for (base, bytes) in &stored {
                    read_as_general(read, interval, *base, bytes, false, &mut cols)?;
                }
                if together {
                    let mut cols = AvgColumns::default();
                    for ((base, bytes), (_, same)) in stored.iter().zip(&lent) {
                        read_as_general(read, interval, *base, bytes, *same, &mut cols)?;
                    }
                }
            }
        }
    }

    /// A row as computed keeps its shape, and the next row of that shape (other values,
    /// another day) is read through it, as the general reading reads it.
    #[test]
    fn a_row_of_the_shape_before_is_read_through_it() {
        use hourglass_storage::model::{RowData, lend_row};
        let s = settings();
        let interval = s.config.interval("1h").unwrap();
        let row = |v: i64| {
            let mut cells = Vec::new();
            for offset in [0u16, 5, 23] {
                for (id, flags, v) in [(0u8, 0x1, v + i64::from(offset)), (1, 0x0, 60), (2, 0x1, v)]
                {
                    cells.push(tier_cell(id, offset, flags, v));
                }
            }
            RowData::from_cells(cells).encode(None)
        };
        let read = RollupRead::Avg { sum: 0, count: 1 };
        let mut cols = AvgColumns::default();
        let (first, second) = (row(1000), row(-2000));
        assert_eq!(
            read_as_general(read, interval, 1_356_998_400, &first, false, &mut cols).unwrap(),
            Some(true)
        );
        assert_eq!(cols.shape.read, Some(((0, 1), 3600)));
        assert_eq!(
            cols.shape.offsets_ms,
            vec![0, 5 * 3_600_000, 23 * 3_600_000]
        );
        // The second row through the shape alone.
        let mut lent = Vec::new();
        let columns = lend_row(
            &second,
            &hourglass_storage::ReadOptions::default(),
            &mut lent,
        )
        .unwrap()
        .unwrap();
        let (mut times, mut sums, mut counts) = (Vec::new(), Vec::new(), Vec::new());
        let base = 1_356_998_400 + 86_400;
        assert!(cols.shape.read(
            (0, 1),
            (base, 3600),
            &columns,
            false,
            (&mut times, &mut sums, &mut counts)
        ));
        let day_ms = base * 1000;
        assert_eq!(
            times,
            vec![day_ms, day_ms + 5 * 3_600_000, day_ms + 23 * 3_600_000]
        );
        assert_eq!(sums, vec![-2000.0, -1995.0, -1977.0]);
        assert_eq!(counts, vec![60.0; 3]);
        assert_eq!(
            read_as_general(read, interval, base as u32, &second, false, &mut cols).unwrap(),
            Some(true)
        );
        // Another ids' read, or another interval, is not the shape's.
        assert!(!cols.shape.read(
            (1, 0),
            (base, 3600),
            &columns,
            false,
            (&mut times, &mut sums, &mut counts)
        ));
        assert!(!cols.shape.read(
            (0, 1),
            (base, 86_400),
            &columns,
            false,
            (&mut times, &mut sums, &mut counts)
        ));
    }

    proptest::proptest! {
        /// A series' `avg` pairs kept as read (each its own bucket) finish, and count the
        /// buckets they close, exactly as the buckets the general reading pushes them into:
        /// rows in order or not, on bucket starts or not, pushed a row or a pair at a time,
        /// in two halves appended, under every fill policy.
        #[test]
        fn pairs_kept_as_read_finish_as_their_buckets(
            rows in proptest::collection::vec(
                (0i64..40, 0i64..3, proptest::collection::vec(
                    (0i64..6, proptest::sample::select(vec![0.0, -0.0, 1.5, -7.0, 3.0, f64::NAN, 1e300])), 0..6),
                 proptest::prelude::any::<bool>()),
                0..12),
            split in 0usize..12,
            fill in proptest::sample::select(vec!["none", "zero", "nan", "null"]),
            (window_from, window_to) in (0i64..10, 30i64..50),
        ) {
            const STEP: i64 = 3_600_000;
            let spec = DownsampleSpec::parse(&format!("1h-avg-{fill}")).unwrap();
            let mut sums_spec = spec;
            sums_spec.function = Aggregator::Sum;
            sums_spec.fill = FillPolicy::None;
            let query = (window_from * STEP, window_to * STEP);
            let until = query.1;
            let pairs = || RollupAvg::Pairs(AvgPairs::new(sums_spec, query, until));
            // Two halves, each its own state, as two threads read them.
            let (mut fast, mut general) = ([pairs(), pairs()], [
                RollupAvg::buckets(sums_spec, query, until),
                RollupAvg::buckets(sums_spec, query, until),
            ]);
            for (i, (base, skew, cells, one_by_one)) in rows.iter().enumerate() {
                // A row's times: its base (off a bucket start by `skew` minutes) plus whole
                // intervals, ascending.
                let base = base * STEP + skew * 60_000;
                let mut cells = cells.clone();
                cells.sort_by_key(|c| c.0);
                cells.dedup_by_key(|c| c.0);
                let times: Vec<i64> = cells.iter().map(|c| base + c.0 * STEP).collect();
                let sums: Vec<f64> = cells.iter().map(|c| c.1).collect();
                let counts: Vec<f64> = cells.iter().map(|c| if c.0 % 3 == 0 { 0.0 } else { c.0 as f64 }).collect();
                let half = usize::from(i >= split);
                let (f, g) = (&mut fast[half], &mut general[half]);
                let (a, b) = if *one_by_one {
                    let mut closed = (0, 0);
                    for k in 0..times.len() {
                        closed.0 += f.push(times[k], sums[k], counts[k]);
                        closed.1 += g.push(times[k], sums[k], counts[k]);
                    }
                    closed
                } else {
                    (f.push_all(&times, &sums, &counts), g.push_all(&times, &sums, &counts))
                };
                proptest::prop_assert_eq!(a, b);
                proptest::prop_assert_eq!(f.held(), g.held());
            }
            let [mut fast, later_fast] = fast;
            let [mut general, later_general] = general;
            fast.append(later_fast);
            general.append(later_general);
            let bits = |r: Result<Vec<(i64, f64)>>| {
                r.map(|v| v.into_iter().map(|(t, x)| (t, x.to_bits())).collect::<Vec<_>>())
                    .map_err(|e| e.to_string())
            };
            let got = bits(finish_avg(fast, spec, query, query, u64::MAX));
            let want = bits(finish_avg(general, spec, query, query, u64::MAX));
            proptest::prop_assert_eq!(got, want);
        }
    }

    proptest::proptest! {
        /// A group of series keeping `avg` pairs aggregates from their columns exactly as
        /// their finished means aggregate (same bits, same errors), or declines (times
        /// differing, fill policies, rates, aggregators that do not fold).
        #[test]
        fn pairs_aggregate_as_their_finished_means(
            series in proptest::collection::vec(
                (proptest::collection::vec(
                    (proptest::sample::select(vec![0.0, -0.0, 2.5, -7.0, 3.0, f64::NAN, f64::MAX]),
                     proptest::sample::select(vec![0.0, 1.0, 3.0, f64::NAN])), 6),
                 proptest::prelude::any::<bool>(), 0usize..6),
                1..5),
            aggregator in proptest::sample::select(vec!["sum", "avg", "min", "max", "count", "dev", "zimsum", "none", "squareSum"]),
            fill in proptest::sample::select(vec!["", "-nan"]),
            rate in proptest::prelude::any::<bool>(),
        ) {
            const STEP: i64 = 3_600_000;
            let spec = DownsampleSpec::parse(&format!("1h-avg{fill}")).unwrap();
            let mut sums_spec = spec;
            sums_spec.function = Aggregator::Sum;
            sums_spec.fill = FillPolicy::None;
            let window = (0, 12 * STEP);
            let members: Vec<SeriesState> = series
                .iter()
                .map(|(pairs, gap, split)| {
                    // Pairs at hours 0..6 (one left out when `gap`), in two parts.
                    let hours: Vec<i64> = (0..6).filter(|h| !(*gap && *h == 2)).collect();
                    let mut a = RollupAvg::Pairs(AvgPairs::new(sums_spec, window, window.1));
                    let mut b = RollupAvg::Pairs(AvgPairs::new(sums_spec, window, window.1));
                    for (k, h) in hours.iter().enumerate() {
                        let (sum, count) = pairs[k];
                        let half = if k < *split { &mut a } else { &mut b };
                        half.push(h * STEP, sum, count);
                    }
                    a.append(b);
                    SeriesState {
                        tags: Vec::new(),
                        tsuid: String::new(),
                        order: Vec::new(),
                        points: Points::RollupAvg(Box::new(a)),
                        annotations: Vec::new(),
                    }
                })
                .collect();
            let mut q = SubQuery::new(Aggregator::parse(aggregator).unwrap(), "m");
            q.downsample = Some(spec);
            q.rate = rate;
            let bits = |r: Result<Vec<(i64, f64)>>| {
                r.map(|v| v.into_iter().map(|(t, x)| (t, x.to_bits())).collect::<Vec<_>>())
                    .map_err(|e| e.to_string())
            };
            let Some(got) = aggregate_pairs(&members, &q) else {
                let same = series.iter().all(|s| s.1 == series[0].1);
                let folds = !matches!(aggregator, "dev" | "none");
                proptest::prop_assert!(!same || !folds || rate || !fill.is_empty());
                return Ok(());
            };
            proptest::prop_assert!(!rate && fill.is_empty());
            let finished: Vec<Vec<(i64, f64)>> = members
                .into_iter()
                .map(|s| match s.points {
                    Points::RollupAvg(avg) => finish_avg(*avg, spec, window, window, u64::MAX).unwrap(),
                    _ => unreachable!(),
                })
                .collect();
            let want = crate::query::aggregate::aggregate_floats(&finished, q.aggregator);
            proptest::prop_assert_eq!(bits(got), bits(want));
        }
    }

    #[test]
    fn rollup_values_read_inline_as_value_decode_reads_them() {
        for (flags, bytes) in [
            (0x0, vec![0xFF]),
            (0x1, vec![0x80, 0x00]),
            (0x3, vec![0x7F, 0xFF, 0xFF, 0xFF]),
            (0x7, vec![0x80, 0, 0, 0, 0, 0, 0, 1]),
            (0xB, 1.5f32.to_be_bytes().to_vec()),
            (0xF, (-2.25f64).to_be_bytes().to_vec()),
            // An old writer's 8-byte cell of a 4-byte float: through `Value::decode`.
            (0xB, [&[0, 0, 0, 0][..], &1.5f32.to_be_bytes()].concat()),
        ] {
            let want = Value::decode(flags, &bytes).unwrap().as_f64();
            assert_eq!(
                rollup_value(flags, &bytes).unwrap().to_bits(),
                want.to_bits()
            );
        }
        // A width its flags do not name is refused as `Value::decode` refuses it.
        assert!(Value::decode(0x1, &[1]).is_err());
        assert!(rollup_value(0x1, &[1]).is_err());
    }

    #[test]
    fn rollup_scans_cover_the_rows_of_the_window() {
        let s = settings();
        let day = s.config.interval("1d").unwrap();
        // 2013-01-15 10:00 to 2013-02-03 00:00: the January and February rows (the end is
        // pushed one month-sized span on, as 2.4.1 does).
        let range = (1_358_244_000_000, 1_359_849_600_000);
        let window = rollup_scan_window(day, range, false).unwrap();
        assert_eq!(window, (1_356_998_400_000, 1_362_096_000_000));
        // A rate reads the December row too.
        let window = rollup_scan_window(day, range, true).unwrap();
        assert_eq!(window, (1_354_320_000_000, 1_362_096_000_000));
        // 1h rollups in day rows: from the start's day (the day before for a rate) to the
        // day after the end's, exclusive.
        let hour = s.config.interval("1h").unwrap();
        let range = (1_357_041_600_000, 1_357_048_800_000);
        assert_eq!(
            rollup_scan_window(hour, range, false).unwrap(),
            (1_356_998_400_000, 1_357_084_800_000)
        );
        assert_eq!(
            rollup_scan_window(hour, range, true).unwrap(),
            (1_356_912_000_000, 1_357_084_800_000)
        );
    }
}
