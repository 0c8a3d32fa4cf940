//! Running one sub-query: resolve names, read the metric's series (stored and buffered),
//! filter, group, then per series downsample and rate, then aggregate each group.

use std::collections::{BTreeMap, HashMap};

use hourglass_core::uid::{Uid, UidKind};
use hourglass_core::value::Value;

use super::aggregate::{aggregate, aggregate_rates};
use super::aggregator::Aggregator;
use super::downsample::{DownsampleSpec, FillPolicy};
use super::filter::TagFilter;
use super::rate::{Num, RateOptions, rates};
use crate::scan::RowQuery;
use crate::{Result, Tsdb};

/// One sub-query of a request.
#[derive(Debug, Clone)]
pub struct SubQuery {
    pub aggregator: Aggregator,
    pub metric: String,
    pub downsample: Option<DownsampleSpec>,
    pub rate: bool,
    pub rate_options: RateOptions,
    pub filters: Vec<TagFilter>,
    /// Only series with exactly the filtered tag keys.
    pub explicit_tags: bool,
}

/// One output series (a group).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupResult {
    pub metric: String,
    pub tags: BTreeMap<String, String>,
    pub aggregate_tags: Vec<String>,
    pub tsuids: Vec<String>,
    /// Points within the query range (ms).
    pub dps: Vec<(i64, Num)>,
}

struct NamedSeries {
    tags: Vec<(Uid, Uid, String, String)>,
    tsuid: String,
    points: Vec<(i64, Num)>,
}

fn num(v: Value) -> Num {
    match v {
        Value::Int(i) => Num::Int(i),
        other => Num::Float(other.as_f64()),
    }
}

/// Runs `q` over `[start_ms, end_ms]`.
pub fn run(tsdb: &Tsdb, start_ms: i64, end_ms: i64, q: &SubQuery) -> Result<Vec<GroupResult>> {
    let uids = tsdb.uids();
    let schema = &tsdb.settings().schema;
    let metric = uids.get_id(UidKind::Metric, &q.metric)?;
    // Every filtered tag key must exist; literal values are resolved (unknown ones are errors,
    // as in OpenTSDB) and a tag key with a single literal is pushed into the row scan.
    let mut tagk_uids: HashMap<&str, Uid> = HashMap::new();
    let mut literals: BTreeMap<Uid, Vec<Uid>> = BTreeMap::new();
    for f in &q.filters {
        let k = uids.get_id(UidKind::TagKey, &f.tagk)?;
        tagk_uids.insert(&f.tagk, k);
        if let Some(values) = f.exact_literals() {
            for v in values {
                literals
                    .entry(k)
                    .or_default()
                    .push(uids.get_id(UidKind::TagValue, v)?);
            }
        }
    }
    let pushed: Vec<(Uid, Uid)> = literals
        .iter()
        .filter(|(_, v)| v.len() == 1)
        .map(|(k, v)| (*k, v[0]))
        .collect();
    let interval_ms = q.downsample.map_or(0, |d| d.interval_ms);
    let scan_start = start_ms.div_euclid(1000);
    let scan_start = scan_start - scan_start.rem_euclid(3600);
    let scan_end = (end_ms + interval_ms).div_euclid(1000);
    let scan_end = scan_end - scan_end.rem_euclid(3600) + 3599;
    let read = tsdb.read_series(&RowQuery {
        metric,
        start_secs: scan_start,
        end_secs: scan_end,
        tags: pushed,
    })?;

    // Filters on one tag key: literal_or ones are ORed together, the others ANDed.
    let mut by_tagk: BTreeMap<&str, Vec<&TagFilter>> = BTreeMap::new();
    for f in &q.filters {
        by_tagk.entry(f.tagk.as_str()).or_default().push(f);
    }
    let mut series = Vec::new();
    for s in read {
        let mut tags = Vec::with_capacity(s.series.tags.len());
        for (k, v) in &s.series.tags {
            tags.push((
                *k,
                *v,
                uids.get_name(UidKind::TagKey, *k)?,
                uids.get_name(UidKind::TagValue, *v)?,
            ));
        }
        let value_of = |k: &str| tags.iter().find(|t| t.2 == k).map(|t| t.3.as_str());
        let pass = by_tagk.iter().all(|(k, fs)| {
            let v = value_of(k);
            if v.is_none() {
                return false; // every filtered tag key must be present
            }
            let (lits, others): (Vec<&&TagFilter>, Vec<&&TagFilter>) =
                fs.iter().partition(|f| f.exact_literals().is_some());
            (lits.is_empty() || lits.iter().any(|f| f.matches(v)))
                && others.iter().all(|f| f.matches(v))
        });
        if !pass || (q.explicit_tags && tags.len() != by_tagk.len()) {
            continue;
        }
        let mut tsuid = metric.to_bytes(schema.metric_width);
        for (k, v, _, _) in &tags {
            k.write(schema.tagk_width, &mut tsuid);
            v.write(schema.tagv_width, &mut tsuid);
        }
        let points = s.points.into_iter().map(|(t, v)| (t, num(v))).collect();
        series.push(NamedSeries {
            tags,
            tsuid: hourglass_core::uid::hex_upper(&tsuid),
            points,
        });
    }

    // Groups by the values of the group-by tag keys (ordered by UID), or one per series for `none`.
    let group_keys: Vec<Uid> = {
        let mut ks: Vec<Uid> = q
            .filters
            .iter()
            .filter(|f| f.group_by)
            .filter_map(|f| tagk_uids.get(f.tagk.as_str()).copied())
            .collect();
        ks.sort();
        ks.dedup();
        ks
    };
    let mut groups: BTreeMap<Vec<Uid>, Vec<NamedSeries>> = BTreeMap::new();
    for (i, s) in series.into_iter().enumerate() {
        let key = if q.aggregator == Aggregator::None {
            vec![Uid(i as u64)]
        } else {
            group_keys
                .iter()
                .filter_map(|k| s.tags.iter().find(|t| t.0 == *k).map(|t| t.1))
                .collect()
        };
        groups.entry(key).or_default().push(s);
    }

    let mut out = Vec::with_capacity(groups.len());
    for members in groups.into_values() {
        let mut processed: Vec<Vec<(i64, Num)>> = Vec::with_capacity(members.len());
        for s in &members {
            let mut points = s.points.clone();
            if let Some(ds) = &q.downsample {
                let doubles: Vec<(i64, f64)> =
                    points.iter().map(|(t, v)| (*t, num_f64(*v))).collect();
                let window = (scan_start * 1000, (scan_end + 1) * 1000);
                points = ds
                    .apply(&doubles, window, (start_ms, end_ms))?
                    .into_iter()
                    .map(|(t, v)| (t, Num::Float(v)))
                    .collect();
            }
            processed.push(points);
        }
        let dps = if q.rate {
            let rate_series: Vec<(f64, Vec<(i64, f64)>)> = processed
                .iter()
                .filter(|p| p.len() >= 2)
                .map(|p| {
                    let (t0, v0) = p[0];
                    let hidden = if t0 > 0 {
                        num_f64(v0) / (t0 as f64 / 1000.0)
                    } else {
                        0.0
                    };
                    (hidden, rates(p, &q.rate_options))
                })
                .collect();
            aggregate_rates(&rate_series, q.aggregator)?
                .into_iter()
                .map(|(t, v)| (t, Num::Float(v)))
                .collect()
        } else {
            aggregate(&processed, q.aggregator)?
        };
        let dps: Vec<(i64, Num)> = dps
            .into_iter()
            .filter(|(t, _)| *t >= start_ms && *t <= end_ms)
            .collect();
        // A tag key with one value across the group goes to `tags`, else to `aggregateTags`.
        let mut seen: BTreeMap<Uid, (String, Option<String>)> = BTreeMap::new();
        for s in &members {
            for (k, _, kn, vn) in &s.tags {
                let entry = seen
                    .entry(*k)
                    .or_insert_with(|| (kn.clone(), Some(vn.clone())));
                if entry.1.as_ref().is_some_and(|existing| existing != vn) {
                    entry.1 = None;
                }
            }
        }
        let mut tags = BTreeMap::new();
        let mut aggregate_tags = Vec::new();
        for (_, (k, v)) in seen {
            match v {
                Some(v) => {
                    tags.insert(k, v);
                }
                None => aggregate_tags.push(k),
            }
        }
        let mut tsuids: Vec<String> = members.iter().map(|s| s.tsuid.clone()).collect();
        tsuids.sort();
        out.push(GroupResult {
            metric: q.metric.clone(),
            tags,
            aggregate_tags,
            tsuids,
            dps,
        });
    }
    Ok(out)
}

fn num_f64(n: Num) -> f64 {
    match n {
        Num::Int(i) => i as f64,
        Num::Float(f) => f,
    }
}

/// Whether a sub-query writes missing values as JSON `null` (fill policy `null`).
pub fn writes_null(q: &SubQuery) -> bool {
    q.downsample.is_some_and(|d| d.fill == FillPolicy::Null)
}
