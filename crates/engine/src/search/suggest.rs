//! `/api/suggest` restricted to a metric (RFC 0007, "Lookup, suggest"): the tag keys of a
//! metric's series, or the values of one of its tag keys, optionally only of series having
//! given tag pairs. From the tag index when it covers every hour of the metric (`0x02`
//! ranges skipped from key to key, `0x04` value names, candidates as lookup's), else from a
//! lookup scan of the data table; both give the same names.

use std::collections::BTreeMap;

use hourglass_core::uid::{UidKind, name_bytes};
use hourglass_storage::{ReadOptions, ScanRequest, prefix_end};

use super::{Conditions, LookupQuery, indexed, lookup_by_scan};
use crate::index::{GLOBAL_FAMILY, Series, kind, status};
use crate::{Result, Tsdb};

/// What to suggest within a metric.
#[derive(Debug, Clone, Default)]
pub struct MetricSuggest {
    pub metric: String,
    /// `None`: suggest tag keys; `Some(k)`: values of tag key `k`.
    pub tagk: Option<String>,
    /// Only series having every one of these pairs.
    pub tags: Vec<(String, String)>,
    /// Names starting with this.
    pub prefix: String,
    /// At most this many (0: none).
    pub max: usize,
}

/// Names in `tsdb-uid`'s order (their stored bytes), starting with the prefix, at most `max`.
/// An unknown metric, tag key or value has no series: no names.
pub fn suggest_in_metric(tsdb: &Tsdb, s: &MetricSuggest) -> Result<Vec<String>> {
    match indexed_suggest(tsdb, s) {
        Ok(Some(names)) => Ok(names),
        Ok(None) => suggest_by_scan(tsdb, s),
        Err(crate::Error::NoSuchName { .. }) => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// [`suggest_in_metric`] from a scan of the data table, whatever the index covers.
pub fn suggest_by_scan(tsdb: &Tsdb, s: &MetricSuggest) -> Result<Vec<String>> {
    let q = query_of(s);
    let found = match lookup_by_scan(tsdb, &q) {
        Ok(found) => found,
        Err(crate::Error::NoSuchName { .. }) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut names = Vec::new();
    for series in found {
        for (k, v) in series.tags {
            match &s.tagk {
                None => names.push(k),
                Some(want) if *want == k => names.push(v),
                Some(_) => {}
            }
        }
    }
    Ok(finish(names, s))
}

fn query_of(s: &MetricSuggest) -> LookupQuery {
    let mut tags: Vec<(Option<String>, Option<String>)> = s
        .tags
        .iter()
        .map(|(k, v)| (Some(k.clone()), Some(v.clone())))
        .collect();
    if let Some(k) = &s.tagk {
        tags.push((Some(k.clone()), None));
    }
    LookupQuery {
        metric: Some(s.metric.clone()),
        tags,
        use_meta: false,
        limit: 0,
    }
}

/// Sorted by stored bytes, each once, filtered by the prefix, cut at `max`.
fn finish(names: Vec<String>, s: &MetricSuggest) -> Vec<String> {
    let sorted: BTreeMap<Vec<u8>, String> = names
        .into_iter()
        .filter(|n| n.starts_with(&s.prefix))
        .map(|n| (name_bytes(&n).into_owned(), n))
        .collect();
    sorted.into_values().take(s.max).collect()
}

fn indexed_suggest(tsdb: &Tsdb, s: &MetricSuggest) -> Result<Option<Vec<String>>> {
    let settings = tsdb.settings();
    if !settings.index {
        return Ok(None);
    }
    let schema = &settings.schema;
    let store = tsdb.store();
    let uids = tsdb.uids();
    let metric = uids
        .get_id(UidKind::Metric, &s.metric)?
        .to_bytes(schema.metric_width);
    if !status::covers_all_hours(store.as_ref(), &schema.index_table, Some(&metric))? {
        return Ok(None);
    }
    if tsdb.buffered_points() > 0 {
        tsdb.flush()?;
    }
    let names = match (&s.tagk, s.tags.is_empty()) {
        (_, false) => {
            let q = query_of(s);
            let c = Conditions::resolve(tsdb, &q)?;
            let mut names = Vec::new();
            for tsuid in indexed::candidates(tsdb, &c, Some(&metric))? {
                let Some(series) = Series::from_tsuid(schema, &tsuid) else {
                    continue;
                };
                for (k, v) in series.pairs(schema) {
                    let key = hourglass_core::uid::Uid::from_bytes(k)?;
                    let key_name = uids.get_name(UidKind::TagKey, key)?;
                    match &s.tagk {
                        None => names.push(key_name),
                        Some(want) if *want == key_name => {
                            let value = hourglass_core::uid::Uid::from_bytes(v)?;
                            names.push(uids.get_name(UidKind::TagValue, value)?);
                        }
                        Some(_) => {}
                    }
                }
            }
            names
        }
        (None, true) => {
            let mut names = Vec::new();
            for tagk in tag_keys(tsdb, &metric)? {
                let key = hourglass_core::uid::Uid::from_bytes(&tagk)?;
                names.push(uids.get_name(UidKind::TagKey, key)?);
            }
            names
        }
        (Some(k), true) => {
            let tagk = uids.get_id(UidKind::TagKey, k)?.to_bytes(schema.tagk_width);
            let mut head = [&[kind::VALUE_NAME][..], &metric, &tagk].concat();
            let whole = head.len();
            // Rows come in stored-name order, one per name: an ASCII prefix is one range
            // and the first `max` rows are the answer. A non-ASCII prefix may be stored in
            // either of two encodings: every name is read.
            let limit = if s.prefix.is_ascii() {
                head.extend_from_slice(s.prefix.as_bytes());
                Some(s.max)
            } else {
                None
            };
            let request = ScanRequest {
                end: prefix_end(&head),
                start: head,
                read: ReadOptions {
                    keys_only: true,
                    ..ReadOptions::family(GLOBAL_FAMILY)
                },
                limit,
                ..ScanRequest::default()
            };
            let mut names = Vec::new();
            for row in store.scan(&schema.index_table, &request)? {
                let row = row?;
                if let Some(name) = row.key.get(whole..) {
                    names.push(hourglass_core::uid::name_from_bytes(name));
                }
            }
            names
        }
    };
    Ok(Some(finish(names, s)))
}

/// The tag key UIDs of a metric's series, from its `0x02` postings: one short scan per key,
/// each starting past the last key found.
fn tag_keys(tsdb: &Tsdb, metric: &[u8]) -> Result<Vec<Vec<u8>>> {
    let head = [&[kind::POSTING][..], metric].concat();
    let width = usize::from(tsdb.settings().schema.tagk_width);
    super::indexed::distinct_after(tsdb, &head, GLOBAL_FAMILY, width)
}
