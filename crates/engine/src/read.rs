//! Reading series: stored rows of a metric over a time range merged with the points still
//! buffered in memory, so a query sees every acknowledged point at once.
//!
//! [`Tsdb::visit_rows`] streams rows (each series in time order), one at a time: nothing but the current
//! row is held, so a reader that reduces as it goes (downsampling, counting) runs in memory
//! bounded by its output, whatever the range.

use std::collections::BTreeMap;

use hourglass_core::annotation::is_annotation_qualifier;
use hourglass_core::compact::{self, Point};
use hourglass_core::rowkey::{SeriesKey, base_time_of, decode_row_key};
use hourglass_core::schema::DATA_FAMILY;
use hourglass_core::value::Value;
use hourglass_storage::{CellCodec, CellForm, JointMember, Row, Scanned};

use crate::cell_codec::{
    DataCellCodec, HOUR_MS, MemberSummary, decode_columns, decode_joint_columns, decode_points,
    for_each_summary, strictly_increasing,
};
use crate::index::select::SeriesSelector;
use crate::num::{Num, Sample};
use crate::scan::{RowQuery, candidate_requests, scan_requests};
use crate::{Error, Result, Tsdb, rows};

/// One series' points in time order.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesPoints {
    pub series: SeriesKey,
    /// (time in ms, value)
    pub points: Vec<(i64, Value)>,
}

/// One row as [`Tsdb::visit_rows`] hands it over.
#[derive(Debug)]
pub struct RowView<'a> {
    pub key: &'a [u8],
    /// Data points sorted by time, one per time (newest write kept).
    pub points: &'a [Point],
    /// Annotation cells: (qualifier, JSON value).
    pub annotations: Vec<(&'a [u8], &'a [u8])>,
    /// Bytes read from storage for this row (key, qualifiers and values).
    pub stored_bytes: usize,
}

fn stored_bytes(row: &Row) -> usize {
    row.key.len()
        + row
            .cells
            .iter()
            .map(|c| c.qualifier.len() + c.value.len())
            .sum::<usize>()
}

/// Which rows a one-hour downsample reads by their summaries (RFC 0009): members whose hour
/// lies in `lo..=hi` (ms), with their least and greatest values when `extremes` (a
/// downsample by min or max) or their sums alone.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SummaryUse {
    pub lo: i64,
    pub hi: i64,
    pub extremes: bool,
}

/// One row's columns as [`Tsdb::visit_columns`] hands them over.
#[derive(Debug)]
pub struct RowColumns<'a, V> {
    pub key: &'a [u8],
    /// The row's base time in ms.
    pub base_ms: i64,
    /// Point times in ms, strictly increasing (newest write kept per time).
    pub times: &'a [i64],
    /// The points' values: as stored (integers stay integers) or as doubles.
    pub values: &'a [V],
    /// Annotation cells: (qualifier, JSON value).
    pub annotations: Vec<(&'a [u8], &'a [u8])>,
    /// Bytes read from storage for this row (key, qualifiers and values).
    pub stored_bytes: usize,
    /// The rows' points summarized instead of listed (`times` and `values` empty), each
    /// with its hour's start (ms): only from [`Tsdb::visit_columns_within`], for rows whose
    /// hour lies in its range.
    pub summaries: &'a [(i64, MemberSummary)],
    /// The rows handed over: one, or from [`Tsdb::visit_columns_within`] a run of a group's
    /// members (`key` and `base_ms` the first one's, `times` and `summaries` all of theirs).
    pub rows: usize,
}

/// A row's data cells before decoding.
enum RowData<'a, V> {
    /// The row's only data cell (single point, compacted, appended): OpenTSDB's bytes, or
    /// the embedded store's compact form when the cell says so (`Cell::is_encoded`).
    Single(&'a hourglass_storage::Cell),
    /// Several data cells, or points still buffered for the row: merged by time.
    Merge(&'a Row, &'a [Point]),
    /// Points of a row not stored yet.
    Buffered(&'a [Point]),
    /// The points of a run of a group's members (that many rows, the first one's key),
    /// decoded with the rest of the group, strictly increasing.
    Columns(&'a [i64], &'a [V], usize),
    /// A run of a group's members as their summaries (each with its hour's start, ms), not
    /// decoded.
    Summaries(&'a [(i64, MemberSummary)]),
}

fn is_encoded(c: &hourglass_storage::Cell) -> bool {
    c.family == DATA_FAMILY && c.is_encoded()
}

impl<V: Sample> RowData<'_, V> {
    /// The general path: every cell back to OpenTSDB's bytes, decoded, sorted and
    /// deduplicated (newest write first).
    fn merged(&self) -> Result<Vec<Point>> {
        let (row, extra) = match self {
            RowData::Single(cell) => {
                let row = Row {
                    key: Vec::new(),
                    cells: vec![(*cell).clone()],
                };
                return RowData::<V>::Merge(&row, &[]).merged();
            }
            RowData::Merge(row, extra) => (*row, *extra),
            RowData::Buffered(points) => return Ok(rows::decode_row(None, points)?.points),
            RowData::Columns(..) | RowData::Summaries(_) => {
                return Err(Error::Internal(
                    "a group member's columns read as points".into(),
                ));
            }
        };
        if row.cells.iter().any(is_encoded) {
            let mut row = row.clone();
            for c in row.cells.iter_mut().filter(|c| is_encoded(c)) {
                let (q, v) = DataCellCodec.decode(DATA_FAMILY, &c.value)?;
                c.qualifier = q;
                c.value = v;
            }
            return Ok(rows::decode_row(Some(&row), extra)?.points);
        }
        Ok(rows::decode_row(Some(row), extra)?.points)
    }

    /// The points, ordered by time, into `out` (cleared first).
    fn points(&self, out: &mut Vec<Point>) -> Result<()> {
        out.clear();
        if let RowData::Single(c) = self {
            if is_encoded(c) {
                decode_points(&c.value, out)?;
            } else {
                compact::decode_cell(&c.qualifier, &c.value, out)?;
            }
            if strictly_increasing(out) {
                return Ok(());
            }
        }
        *out = self.merged()?;
        Ok(())
    }

    /// The points' times (ms) and values into `times` and `values` (cleared first).
    fn columns(&self, base_ms: i64, times: &mut Vec<i64>, values: &mut Vec<V>) -> Result<()> {
        times.clear();
        values.clear();
        if let RowData::Columns(t, v, _) = self {
            times.extend_from_slice(t);
            values.extend_from_slice(v);
            return Ok(());
        }
        if let RowData::Single(c) = self
            && is_encoded(c)
        {
            if decode_columns(&c.value, base_ms, times, values)? {
                return Ok(());
            }
            times.clear();
            values.clear();
        }
        let mut points = Vec::new();
        self.points(&mut points)?;
        for p in points {
            times.push(base_ms + i64::from(p.offset_ms()));
            values.push(match p.value() {
                Value::Int(i) => V::from_int(i),
                other => V::from_float(other.as_f64()),
            });
        }
        Ok(())
    }
}

/// Buffered rows keyed series first, then hour: (row key, points).
type Buffered = BTreeMap<Vec<u8>, (Vec<u8>, Vec<Point>)>;

/// Whether the row `key` has buffered points.
/// `key` (a joint row's key) made the key of its member `m` of the period starting at
/// `period` (seconds), in place.
fn member_key_in<'k>(
    key: &'k mut [u8],
    at: usize,
    period: u32,
    m: &JointMember,
) -> Result<&'k [u8]> {
    let base = period
        .checked_add(m.offset_secs)
        .ok_or_else(|| Error::Corrupt("group member past the end of time".into()))?;
    if let Some(b) = key.get_mut(at..at + 4) {
        b.copy_from_slice(&base.to_be_bytes());
    }
    Ok(key)
}

/// No usable summary for a member (`summary_at`).
const NO_SUMMARY: usize = usize::MAX;

/// Whether member `m` of the period starting at `period` (seconds) is in the key range
/// `start..end`; its key is made in `key` (a key of its group) in place.
fn member_in_scan(
    key: &mut [u8],
    at: usize,
    period: u32,
    m: &JointMember,
    start: &[u8],
    end: Option<&[u8]>,
) -> Result<bool> {
    let key = member_key_in(key, at, period, m)?;
    Ok(key >= start && end.is_none_or(|e| key < e))
}

fn has_buffered(buffered: &Buffered, at: usize, key: &[u8]) -> bool {
    !buffered.is_empty() && buffered.contains_key(&hourglass_storage::series_major(key, at))
}

/// Whether the series of row keys `first` and `last` (same series) has buffered points in
/// the hours from `first`'s through `last`'s.
fn buffered_between(buffered: &Buffered, at: usize, first: &[u8], last: &[u8]) -> bool {
    !buffered.is_empty()
        && buffered
            .range(
                hourglass_storage::series_major(first, at)
                    ..=hourglass_storage::series_major(last, at),
            )
            .next()
            .is_some()
}

/// Before the stored row `key`: visits its series' buffered rows of earlier hours, and
/// returns its own buffered points (taken out of `buffered`).
fn take_buffered<V>(
    buffered: &mut Buffered,
    earlier: &mut Vec<Vec<u8>>,
    at: usize,
    key: &[u8],
    visit: &mut impl FnMut(&[u8], RowData<'_, V>, Vec<(&[u8], &[u8])>, usize) -> Result<()>,
) -> Result<Option<Vec<Point>>> {
    if buffered.is_empty() {
        return Ok(None);
    }
    let this = hourglass_storage::series_major(key, at);
    let mut series_start = this.clone();
    let n = series_start.len();
    series_start[n.saturating_sub(4)..].fill(0);
    earlier.clear();
    earlier.extend(
        buffered
            .range(series_start..this.clone())
            .map(|(k, _)| k.clone()),
    );
    for k in earlier.iter() {
        if let Some((key, points)) = buffered.remove(k) {
            visit(&key, RowData::Buffered(&points), Vec::new(), 0)?;
        }
    }
    Ok(buffered.remove(&this).map(|(_, points)| points))
}

impl Tsdb {
    /// Calls `visit` with the data of every row of `query.metric` between `query.start_secs`
    /// and `query.end_secs` (hours overlapping the range) having all of `query.tags`, stored
    /// or buffered, with the row's annotations and stored size: each series' rows in time
    /// order, series in the order the store returns them (`Store::scan`'s key or period
    /// order), buffered rows of a series before its stored rows of later hours.
    ///
    /// With `joint`, a group of the embedded store read whole (`ReadOptions::joint_rows`) is
    /// decoded in one pass and its members handed over as [`RowData::Columns`] (or, merged
    /// with buffered points or out of order, as their rebuilt cells).
    ///
    /// With `within`, a member of such a group whose stream summarizes it (with its least
    /// and greatest values when `within` needs them), whose hour lies in `within` and which
    /// has no buffered points, is handed over as [`RowData::Summaries`]; a group whose members
    /// in the scan all go so is not decoded.
    ///
    /// With `whole`, the members in the scan of such a group, when none of their hours has
    /// buffered points and each one's times strictly increase, go in one call: one
    /// [`RowData::Columns`] or [`RowData::Summaries`] over them all, keyed by the first.
    ///
    /// With `select`, stored rows are read only for the series the tag index lists (taken
    /// after the buffered rows, so a series flushed in between has its entries already),
    /// when the index can say; buffered rows are all taken, as without it. Returns whether
    /// the index chose the rows.
    fn visit_row_data<V: Sample>(
        &self,
        query: &RowQuery,
        joint: bool,
        within: Option<SummaryUse>,
        whole: bool,
        select: Option<&SeriesSelector>,
        mut visit: impl FnMut(&[u8], RowData<'_, V>, Vec<(&[u8], &[u8])>, usize) -> Result<()>,
    ) -> Result<bool> {
        let schema = &self.settings().schema;
        let first_hour = query.start_secs - query.start_secs.rem_euclid(3600);
        let metric_at = usize::from(schema.salt_width);
        let metric = query.metric.to_bytes(schema.metric_width);
        let buffered = self.writer().buffered_rows(|key| {
            let Ok(row) = decode_row_key(schema, key) else {
                return false;
            };
            key.get(metric_at..metric_at + metric.len()) == Some(metric.as_slice())
                && i64::from(row.base_time) >= first_hour
                && i64::from(row.base_time) <= query.end_secs
                && query.matches_tags(&row.series.tags)
        });
        // Keyed series first, then hour: a series' buffered rows are found by range, in
        // time order, whatever order the store returns series in.
        let at = schema.timestamp_offset();
        let mut buffered: Buffered = buffered
            .into_iter()
            .map(|(key, points)| (hourglass_storage::series_major(&key, at), (key, points)))
            .collect();
        let mut earlier = Vec::new();
        // A group's members decoded together.
        let (mut group_times, mut group_values) = (Vec::new(), Vec::<V>::new());
        let mut group_summaries = Vec::new();
        let candidates = match select {
            Some(s) => s.candidates(self, query.start_secs, query.end_secs)?,
            None => None,
        };
        let requests = match &candidates {
            Some(listed) => candidate_requests(schema, query, listed),
            None => scan_requests(schema, query),
        };
        // Buffers kept from group to group: a member's key, which members are in the scan,
        // where each one's usable summary is, and the keys of the first and last of them.
        let mut key_buf = Vec::new();
        let mut inside: Vec<bool> = Vec::new();
        let mut summary_at: Vec<usize> = Vec::new();
        let (mut first_key, mut last_key) = (Vec::new(), Vec::new());
        for mut request in requests {
            // Compacted cells in the embedded store's compact form are decoded straight
            // from it, without rebuilding OpenTSDB's bytes first.
            request.read.encoded_cells = true;
            request.read.joint_rows = joint;
            let (start, end) = (request.start.as_slice(), request.end.as_deref());
            let mut take = |item: Scanned<'_>| -> Result<()> {
                let row = match item {
                    Scanned::Row(row) => row,
                    // A group lent: its members handed over from its stream.
                    Scanned::Group(group) => {
                        if group.family != DATA_FAMILY {
                            return Ok(());
                        }
                        let (members, stream) = (group.members, group.stream);
                        let period = base_time_of(schema, group.key).ok_or_else(|| {
                            Error::Corrupt("group key without a base time".into())
                        })?;
                        // Whether each member is in the scan (a group lists its members
                        // outside it too); their keys are built in one buffer, and owned
                        // only where a member is given on its own.
                        key_buf.clear();
                        key_buf.extend_from_slice(group.key);
                        // Members' keys grow with their offsets: with the first and the last
                        // in the scan, every one is (most groups, all but the scan's two ends).
                        let increasing = members
                            .windows(2)
                            .all(|w| w[0].offset_secs < w[1].offset_secs);
                        inside.clear();
                        let all_inside = match (members.first(), members.last()) {
                            (Some(first), Some(last)) => {
                                increasing
                                    && member_in_scan(&mut key_buf, at, period, first, start, end)?
                                    && member_in_scan(&mut key_buf, at, period, last, start, end)?
                            }
                            _ => false,
                        };
                        if all_inside {
                            inside.resize(members.len(), true);
                        } else {
                            for m in members {
                                inside.push(member_in_scan(
                                    &mut key_buf,
                                    at,
                                    period,
                                    m,
                                    start,
                                    end,
                                )?);
                            }
                        }
                        let period_ms = i64::from(period) * 1000;
                        // The usable summaries of the members in the scan, each with its
                        // hour's start, in member order; each member's place among them.
                        group_summaries.clear();
                        summary_at.clear();
                        if let Some(SummaryUse { lo, hi, extremes }) = within {
                            summary_at.resize(members.len(), NO_SUMMARY);
                            for_each_summary(stream, members, |i, s| -> Result<()> {
                                let (Some(m), Some(true)) = (members.get(i), inside.get(i)) else {
                                    return Ok(());
                                };
                                let hour = period_ms + i64::from(m.offset_secs) * 1000;
                                let usable = hour >= lo
                                    && hour + HOUR_MS - 1 <= hi
                                    && (s.extremes || !extremes)
                                    && (buffered.is_empty()
                                        || !has_buffered(
                                            &buffered,
                                            at,
                                            member_key_in(&mut key_buf, at, period, m)?,
                                        ));
                                if usable {
                                    summary_at[i] = group_summaries.len();
                                    group_summaries.push((hour, s));
                                }
                                Ok(())
                            })?;
                        }
                        let summarized = |i: usize| {
                            summary_at
                                .get(i)
                                .and_then(|at| group_summaries.get(*at))
                                .map(|(_, s)| *s)
                        };
                        group_times.clear();
                        group_values.clear();
                        let in_scan = if all_inside {
                            members.len()
                        } else {
                            inside.iter().filter(|i| **i).count()
                        };
                        let decode = group_summaries.len() < in_scan;
                        let increasing = !decode
                            || decode_joint_columns(
                                stream,
                                members,
                                period_ms,
                                &mut group_times,
                                &mut group_values,
                            )?;
                        let total = members
                            .iter()
                            .map(|m| m.shape.points as usize)
                            .sum::<usize>()
                            .max(1);
                        // The members in the scan: a run (the scan's range is contiguous).
                        let (first, last) = if all_inside {
                            (Some(0), members.len().checked_sub(1))
                        } else {
                            (
                                inside.iter().position(|i| *i),
                                inside.iter().rposition(|i| *i),
                            )
                        };
                        if let (true, true, Some(first), Some(last)) =
                            (whole, increasing, first, last)
                        {
                            first_key.clear();
                            first_key.extend_from_slice(member_key_in(
                                &mut key_buf,
                                at,
                                period,
                                &members[first],
                            )?);
                            last_key.clear();
                            last_key.extend_from_slice(member_key_in(
                                &mut key_buf,
                                at,
                                period,
                                &members[last],
                            )?);
                        }
                        if let (true, true, Some(first), Some(last)) =
                            (whole, increasing, first, last)
                            && !buffered_between(&buffered, at, &first_key, &last_key)
                        {
                            // The series' buffered rows of earlier hours go first.
                            take_buffered(&mut buffered, &mut earlier, at, &first_key, &mut visit)?;
                            let before: usize = members[..first]
                                .iter()
                                .map(|m| m.shape.points as usize)
                                .sum();
                            let points: usize = members[first..=last]
                                .iter()
                                .map(|m| m.shape.points as usize)
                                .sum();
                            let rows = last + 1 - first;
                            // As the members one by one would count: a key each, their share
                            // of the stream.
                            let stored = first_key.len() * rows + stream.len() * points / total;
                            if decode {
                                let (times, values) = (
                                    group_times.get(before..before + points).unwrap_or_default(),
                                    group_values
                                        .get(before..before + points)
                                        .unwrap_or_default(),
                                );
                                visit(
                                    &first_key,
                                    RowData::Columns(times, values, rows),
                                    Vec::new(),
                                    stored,
                                )?;
                            } else {
                                // Every member in the scan, the run from `first` to `last`, has
                                // its summary.
                                if group_summaries.len() != rows {
                                    return Err(Error::Internal(
                                        "a member in the scan without its summary".into(),
                                    ));
                                }
                                visit(
                                    &first_key,
                                    RowData::Summaries(&group_summaries),
                                    Vec::new(),
                                    stored,
                                )?;
                            }
                            return Ok(());
                        }
                        let mut rebuilt: Option<Vec<(Vec<u8>, Vec<u8>)>> = None;
                        let mut from = 0usize;
                        for (i, (m, inside)) in members.iter().zip(&inside).enumerate() {
                            let to = from + m.shape.points as usize;
                            if !inside {
                                from = to;
                                continue;
                            }
                            let key = member_key_in(&mut key_buf, at, period, m)?.to_vec();
                            let extra =
                                take_buffered(&mut buffered, &mut earlier, at, &key, &mut visit)?;
                            let stored = key.len() + stream.len() * (to - from) / total;
                            if let (None, Some(s)) = (&extra, summarized(i)) {
                                let one = [(i64::from(period + m.offset_secs) * 1000, s)];
                                visit(&key, RowData::Summaries(&one), Vec::new(), stored)?;
                                from = to;
                                continue;
                            }
                            let (times, values) = (
                                group_times.get(from..to).unwrap_or_default(),
                                group_values.get(from..to).unwrap_or_default(),
                            );
                            if extra.is_none() && times.windows(2).all(|w| w[0] < w[1]) {
                                visit(
                                    &key,
                                    RowData::Columns(times, values, 1),
                                    Vec::new(),
                                    stored,
                                )?;
                            } else {
                                // Merged with buffered points, or out of order: as its cell.
                                if rebuilt.is_none() {
                                    rebuilt = Some(DataCellCodec.decode_joint(
                                        group.family,
                                        stream,
                                        members,
                                    )?);
                                }
                                let (q, v) = rebuilt
                                    .as_ref()
                                    .and_then(|r| r.get(i))
                                    .cloned()
                                    .unwrap_or_default();
                                let member = Row {
                                    key: key.clone(),
                                    cells: vec![hourglass_storage::Cell {
                                        family: group.family.to_string(),
                                        qualifier: q,
                                        timestamp: group
                                            .timestamps
                                            .get(i)
                                            .copied()
                                            .unwrap_or_default(),
                                        value: v,
                                        form: CellForm::Plain,
                                    }],
                                };
                                let data = match &extra {
                                    None => RowData::Single(&member.cells[0]),
                                    Some(points) => RowData::Merge(&member, points),
                                };
                                visit(&key, data, Vec::new(), stored)?;
                            }
                            from = to;
                        }
                        return Ok(());
                    }
                };
                // The series' buffered rows of earlier hours (not stored yet) go first.
                let extra = take_buffered(&mut buffered, &mut earlier, at, &row.key, &mut visit)?;
                let stored_bytes = stored_bytes(&row);
                let mut data_cells = row.cells.iter().filter(|c| {
                    is_encoded(c)
                        || (c.family == DATA_FAMILY && compact::is_data_qualifier(&c.qualifier))
                });
                let data = match (data_cells.next(), data_cells.next(), &extra) {
                    (Some(cell), None, None) => RowData::Single(cell),
                    _ => RowData::Merge(&row, extra.as_deref().unwrap_or(&[])),
                };
                let annotations: Vec<(&[u8], &[u8])> = row
                    .cells
                    .iter()
                    .filter(|c| c.family == DATA_FAMILY && is_annotation_qualifier(&c.qualifier))
                    .map(|c| (c.qualifier.as_slice(), c.value.as_slice()))
                    .collect();
                visit(&row.key, data, annotations, stored_bytes)
            };
            // The visitor's own error, kept while the store's scan stops.
            let mut failed: Option<Error> = None;
            let scanned =
                self.store()
                    .scan_joint(&schema.data_table, &request, &mut |item: Scanned<'_>| {
                        take(item).map_err(|e| {
                            failed = Some(e);
                            hourglass_storage::Error::Unavailable("the read stopped".into())
                        })
                    });
            if let Some(e) = failed {
                return Err(e);
            }
            scanned?;
        }
        for (key, points) in buffered.into_values() {
            visit(&key, RowData::Buffered(&points), Vec::new(), 0)?;
        }
        Ok(candidates.is_some())
    }

    /// Calls `visit` for every row of `query.metric` between `query.start_secs` and
    /// `query.end_secs` (hours overlapping the range) having all of `query.tags`, stored or
    /// buffered, each series' rows in time order (see `visit_row_data`). Points outside the
    /// range are included; callers trim.
    pub fn visit_rows(
        &self,
        query: &RowQuery,
        visit: impl FnMut(RowView<'_>) -> Result<()>,
    ) -> Result<()> {
        self.visit_rows_selected(query, None, visit).map(|_| ())
    }

    /// [`Tsdb::visit_rows`], stored rows read only for the series `select` lists when the
    /// tag index covers the range (the rows of other series may be left out: the caller
    /// filters as `select` does). Returns whether the index chose the rows.
    pub fn visit_rows_selected(
        &self,
        query: &RowQuery,
        select: Option<&SeriesSelector>,
        mut visit: impl FnMut(RowView<'_>) -> Result<()>,
    ) -> Result<bool> {
        let mut points = Vec::new();
        self.visit_row_data::<Num>(
            query,
            false,
            None,
            false,
            select,
            |key, data, annotations, stored_bytes| {
                data.points(&mut points)?;
                visit(RowView {
                    key,
                    points: &points,
                    annotations,
                    stored_bytes,
                })
            },
        )
    }

    /// [`Tsdb::visit_rows`] with each row's points as columns of times and values: the
    /// query path, decoding the embedded store's compact cells without building points.
    pub fn visit_columns<V: Sample>(
        &self,
        query: &RowQuery,
        visit: impl FnMut(RowColumns<'_, V>) -> Result<()>,
    ) -> Result<()> {
        self.visit_columns_within(query, None, false, visit)
    }

    /// [`Tsdb::visit_columns`] for the query path: a row of a group whose stream summarizes
    /// it and whose hour lies in `within` (ms, inclusive) is handed over as its summary
    /// ([`RowColumns::summaries`]) instead of its points, so a one-hour downsample by sum,
    /// avg, min, max or count reads no point of such rows; with `whole`, a group's members
    /// in the scan go in one call when they can (see `visit_row_data`), their rows counted
    /// in [`RowColumns::rows`].
    pub fn visit_columns_within<V: Sample>(
        &self,
        query: &RowQuery,
        within: Option<SummaryUse>,
        whole: bool,
        visit: impl FnMut(RowColumns<'_, V>) -> Result<()>,
    ) -> Result<()> {
        self.visit_columns_selected(query, within, whole, None, visit)
            .map(|_| ())
    }

    /// [`Tsdb::visit_columns_within`], stored rows read only for the series `select`
    /// lists when the tag index covers the range (see [`Tsdb::visit_rows_selected`]).
    /// Returns whether the index chose the rows.
    pub fn visit_columns_selected<V: Sample>(
        &self,
        query: &RowQuery,
        within: Option<SummaryUse>,
        whole: bool,
        select: Option<&SeriesSelector>,
        mut visit: impl FnMut(RowColumns<'_, V>) -> Result<()>,
    ) -> Result<bool> {
        let schema = &self.settings().schema;
        let (mut times, mut values) = (Vec::new(), Vec::new());
        self.visit_row_data::<V>(
            query,
            true,
            within,
            whole,
            select,
            |key, data, annotations, stored_bytes| {
                let base_ms = i64::from(base_time_of(schema, key).unwrap_or(0)) * 1000;
                let (times, values, summaries, rows): (&[i64], &[V], _, _) = match data {
                    RowData::Summaries(s) => (&[], &[], s, s.len()),
                    RowData::Columns(t, v, rows) => (t, v, &[][..], rows),
                    data => {
                        data.columns(base_ms, &mut times, &mut values)?;
                        (&times, &values, &[][..], 1)
                    }
                };
                visit(RowColumns {
                    key,
                    base_ms,
                    times,
                    values,
                    annotations,
                    stored_bytes,
                    summaries,
                    rows,
                })
            },
        )
    }

    /// Every series of `query.metric` having all of `query.tags`, with its points between
    /// `query.start_secs` and `query.end_secs` (inclusive, in seconds), stored or buffered.
    pub fn read_series(&self, query: &RowQuery) -> Result<Vec<SeriesPoints>> {
        let schema = &self.settings().schema;
        let start_ms = query.start_secs.saturating_mul(1000);
        let end_ms = query.end_secs.saturating_mul(1000).saturating_add(999);
        let mut by_series: BTreeMap<SeriesKey, Vec<(i64, Value)>> = BTreeMap::new();
        self.visit_rows(query, |row| {
            let key = decode_row_key(schema, row.key)?;
            let out = by_series.entry(key.series).or_default();
            for p in row.points {
                let t = p.qualifier.timestamp_ms(key.base_time);
                if t >= start_ms && t <= end_ms {
                    out.push((t, p.value()));
                }
            }
            Ok(())
        })?;
        Ok(by_series
            .into_iter()
            .filter(|(_, p)| !p.is_empty())
            .map(|(series, mut points)| {
                points.sort_by_key(|p| p.0);
                SeriesPoints { series, points }
            })
            .collect())
    }
}
