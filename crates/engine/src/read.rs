//! Reading series: stored rows of a metric over a time range merged with the points still
//! buffered in memory, so a query sees every acknowledged point at once.
//!
//! [`Tsdb::visit_rows`] streams rows in key order, one at a time: nothing but the current
//! row is held, so a reader that reduces as it goes (downsampling, counting) runs in memory
//! bounded by its output, whatever the range.

use std::collections::BTreeMap;

use hourglass_core::annotation::is_annotation_qualifier;
use hourglass_core::compact::{self, Point};
use hourglass_core::rowkey::{SeriesKey, decode_row_key};
use hourglass_core::schema::DATA_FAMILY;
use hourglass_core::value::Value;
use hourglass_storage::{CellCodec, Row};

use crate::cell_codec::{DataCellCodec, decode_points};
use crate::scan::{RowQuery, scan_requests};
use crate::{Result, Tsdb, rows};

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

/// Whether decoded points are already strictly ordered by time (the normal case for a
/// compacted cell), so no sort or duplicate check is needed.
fn strictly_ordered(points: &[Point]) -> bool {
    points
        .windows(2)
        .all(|w| w[0].offset_ms() < w[1].offset_ms())
}

fn stored_bytes(row: &Row) -> usize {
    row.key.len()
        + row
            .cells
            .iter()
            .map(|c| c.qualifier.len() + c.value.len())
            .sum::<usize>()
}

impl Tsdb {
    /// Calls `visit` for every row of `query.metric` between `query.start_secs` and
    /// `query.end_secs` (hours overlapping the range) having all of `query.tags`, stored or
    /// buffered, in row-key order. Points outside the range are included; callers trim.
    pub fn visit_rows(
        &self,
        query: &RowQuery,
        mut visit: impl FnMut(RowView<'_>) -> Result<()>,
    ) -> Result<()> {
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
        let mut buffered: BTreeMap<Vec<u8>, Vec<Point>> = buffered.into_iter().collect();
        let mut scratch: Vec<Point> = Vec::new();
        let visit_buffered = |key: &[u8],
                              points: &[Point],
                              visit: &mut dyn FnMut(RowView<'_>) -> Result<()>|
         -> Result<()> {
            let decoded = rows::decode_row(None, points)?;
            visit(RowView {
                key,
                points: &decoded.points,
                annotations: Vec::new(),
                stored_bytes: 0,
            })
        };
        for mut request in scan_requests(schema, query) {
            // Compacted cells in the embedded store's compact form are decoded straight
            // into points below, without rebuilding OpenTSDB's bytes first.
            request.read.encoded_cells = true;
            for row in self.store().scan(&schema.data_table, &request)? {
                let mut row = row?;
                // Buffered rows sorting before this one (not stored yet) go first.
                while let Some(entry) = buffered.first_entry() {
                    if entry.key().as_slice() >= row.key.as_slice() {
                        break;
                    }
                    let (key, points) = entry.remove_entry();
                    visit_buffered(&key, &points, &mut visit)?;
                }
                let extra = buffered.remove(&row.key);
                let stored_bytes = stored_bytes(&row);
                let encoded =
                    |c: &hourglass_storage::Cell| c.family == DATA_FAMILY && c.qualifier.is_empty();
                let data_cells = row
                    .cells
                    .iter()
                    .filter(|c| {
                        encoded(c)
                            || (c.family == DATA_FAMILY && compact::is_data_qualifier(&c.qualifier))
                    })
                    .count();
                // Fast path: one data cell (the compacted form), already in order.
                let single = if data_cells == 1 && extra.is_none() {
                    scratch.clear();
                    for c in &row.cells {
                        if encoded(c) {
                            decode_points(&c.value, &mut scratch)?;
                        } else if c.family == DATA_FAMILY
                            && compact::is_data_qualifier(&c.qualifier)
                        {
                            compact::decode_cell(&c.qualifier, &c.value, &mut scratch)?;
                        }
                    }
                    strictly_ordered(&scratch)
                } else {
                    false
                };
                if !single {
                    // Several cells to merge: back to OpenTSDB's bytes, then the general path.
                    for c in row.cells.iter_mut().filter(|c| encoded(c)) {
                        let (q, v) = DataCellCodec.decode(DATA_FAMILY, &c.value)?;
                        c.qualifier = q;
                        c.value = v;
                    }
                }
                let annotations: Vec<(&[u8], &[u8])> = row
                    .cells
                    .iter()
                    .filter(|c| c.family == DATA_FAMILY && is_annotation_qualifier(&c.qualifier))
                    .map(|c| (c.qualifier.as_slice(), c.value.as_slice()))
                    .collect();
                if single {
                    visit(RowView {
                        key: &row.key,
                        points: &scratch,
                        annotations,
                        stored_bytes,
                    })?;
                } else {
                    let decoded = rows::decode_row(Some(&row), extra.as_deref().unwrap_or(&[]))?;
                    visit(RowView {
                        key: &row.key,
                        points: &decoded.points,
                        annotations,
                        stored_bytes,
                    })?;
                }
            }
        }
        for (key, points) in buffered {
            visit_buffered(&key, &points, &mut visit)?;
        }
        Ok(())
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
