//! Reading series: stored rows of a metric over a time range merged with the points still
//! buffered in memory, so a query sees every acknowledged point at once.

use std::collections::BTreeMap;

use hourglass_core::compact::Point;
use hourglass_core::rowkey::{SeriesKey, decode_row_key};
use hourglass_core::value::Value;

use crate::scan::{RowQuery, scan_rows};
use crate::{Result, Tsdb, rows};

/// One series' points in time order.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesPoints {
    pub series: SeriesKey,
    /// (time in ms, value)
    pub points: Vec<(i64, Value)>,
}

impl Tsdb {
    /// Every series of `query.metric` having all of `query.tags`, with its points between
    /// `query.start_secs` and `query.end_secs` (inclusive, in seconds), stored or buffered.
    pub fn read_series(&self, query: &RowQuery) -> Result<Vec<SeriesPoints>> {
        let schema = &self.settings().schema;
        let start_ms = query.start_secs.saturating_mul(1000);
        let end_ms = query.end_secs.saturating_mul(1000).saturating_add(999);
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
                && query.tags.iter().all(|t| row.series.tags.contains(t))
        });
        let mut buffered: BTreeMap<Vec<u8>, Vec<Point>> = buffered.into_iter().collect();
        let mut by_series: BTreeMap<SeriesKey, Vec<(i64, Value)>> = BTreeMap::new();
        let mut add = |key: &[u8], points: Vec<Point>| -> Result<()> {
            let row = decode_row_key(schema, key)?;
            let out = by_series.entry(row.series).or_default();
            for p in points {
                let t = p.qualifier.timestamp_ms(row.base_time);
                if t >= start_ms && t <= end_ms {
                    out.push((t, p.value()));
                }
            }
            Ok(())
        };
        for row in scan_rows(self.store().as_ref(), schema, query)? {
            let extra = buffered.remove(&row.key).unwrap_or_default();
            let decoded = rows::decode_row(Some(&row), &extra)?;
            add(&row.key, decoded.points)?;
        }
        for (key, points) in buffered {
            let decoded = rows::decode_row(None, &points)?;
            add(&key, decoded.points)?;
        }
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
