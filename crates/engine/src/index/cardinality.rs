//! Series counts per metric and tag key, from the index's counters (RFC 0007,
//! "Cardinality and the series cap"): `| 0x21 | metric |` over all time, `| 0x20 | metric |
//! period |` for the current period. Counters are upper bounds (a replayed flush may count a
//! series twice); `tsdb fsck --index --fix` recounts them.

use hourglass_core::uid::{Uid, UidKind, hex_upper};
use hourglass_storage::{ReadOptions, ScanRequest};

use super::{COUNTER_FAMILY, ENTRY_QUALIFIER, kind, period_counters_key, period_of};
use crate::{Result, Tsdb};

/// One tag key's counts within a metric (all time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagkCount {
    pub tagk: String,
    /// Series having the key.
    pub series: u64,
    /// Distinct values of the key.
    pub values: u64,
}

/// One metric's counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricCount {
    pub metric: String,
    /// Series ever written.
    pub series_all: u64,
    /// Series of the current period (UTC day).
    pub series_current: u64,
    /// Its tag keys, most series first, at most `top`.
    pub tagks: Vec<TagkCount>,
}

/// A tag key's UID bytes, its series and its values, as counted.
type KeyCounts = (Vec<u8>, u64, u64);

fn counter(value: &[u8]) -> u64 {
    <[u8; 8]>::try_from(value).map_or(0, |b| u64::from_be_bytes(b).min(i64::MAX as u64))
}

fn name(tsdb: &Tsdb, kind: UidKind, bytes: &[u8]) -> String {
    Uid::from_bytes(bytes)
        .ok()
        .and_then(|uid| tsdb.uids().get_name(kind, uid).ok())
        .unwrap_or_else(|| hex_upper(bytes))
}

/// The `top` metrics with the most series over all time, most first, each with its series
/// of the current period and its `top` tag keys. Empty when this TSD does not maintain the
/// index.
pub fn top_metrics(tsdb: &Tsdb, top: usize, now_ms: i64) -> Result<Vec<MetricCount>> {
    let settings = tsdb.settings();
    if !settings.index || top == 0 {
        return Ok(Vec::new());
    }
    let schema = &settings.schema;
    let kw = usize::from(schema.tagk_width);
    let table = &schema.index_table;
    let request = ScanRequest {
        read: ReadOptions {
            latest_only: true,
            ..ReadOptions::family(COUNTER_FAMILY)
        },
        ..ScanRequest::prefix(&[kind::SERIES_COUNTERS])
    };
    let mut all: Vec<(u64, Vec<u8>, Vec<KeyCounts>)> = Vec::new();
    for row in tsdb.store().scan(table, &request)? {
        let row = row?;
        let Some(metric) = row.key.get(1..) else {
            continue;
        };
        let mut series = 0;
        let mut keys: Vec<KeyCounts> = Vec::new();
        for cell in &row.cells {
            let q = cell.qualifier.as_slice();
            let n = counter(&cell.value);
            if q == ENTRY_QUALIFIER {
                series = n;
                continue;
            }
            let (Some(which), Some(tagk)) = (q.first(), q.get(1..)) else {
                continue;
            };
            if tagk.len() != kw {
                continue;
            }
            let slot = match keys.iter().position(|(k, _, _)| k == tagk) {
                Some(i) => i,
                None => {
                    keys.push((tagk.to_vec(), 0, 0));
                    keys.len() - 1
                }
            };
            match which {
                b'k' => keys[slot].1 = n,
                b'v' => keys[slot].2 = n,
                _ => {}
            }
        }
        all.push((series, metric.to_vec(), keys));
    }
    all.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    all.truncate(top);
    let period = period_of(u32::try_from((now_ms / 1000).max(0)).unwrap_or(u32::MAX));
    let mut out = Vec::with_capacity(all.len());
    for (series_all, metric, mut keys) in all {
        let current = tsdb
            .store()
            .get(
                table,
                &period_counters_key(&metric, period),
                &ReadOptions::latest(),
            )?
            .and_then(|r| r.value(COUNTER_FAMILY, ENTRY_QUALIFIER).map(counter))
            .unwrap_or(0);
        keys.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        keys.truncate(top);
        out.push(MetricCount {
            metric: name(tsdb, UidKind::Metric, &metric),
            series_all,
            series_current: current,
            tagks: keys
                .into_iter()
                .map(|(k, series, values)| TagkCount {
                    tagk: name(tsdb, UidKind::TagKey, &k),
                    series,
                    values,
                })
                .collect(),
        });
    }
    Ok(out)
}
