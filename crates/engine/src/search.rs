//! Series lookup (`/api/search/lookup`, `tsdb search lookup`): the series of a metric (or of
//! any metric) having given tags, from the meta table's TSUID rows or from the data table's
//! row keys. Exact tag pairs are pushed into the row-key regex; each series is returned once.

use std::collections::HashSet;

use hourglass_core::rowkey::tsuid_of;
use hourglass_core::schema::{DATA_FAMILY, META_FAMILY};
use hourglass_core::uid::{Uid, UidKind};
use hourglass_storage::{ReadOptions, ScanRequest, prefix_end};

use crate::scan::escape_bytes;
use crate::{Error, Result, Tsdb};

mod documents;
mod indexed;
pub mod query_string;
pub mod suggest;

pub use documents::{Search, SearchAnswer, SearchType, search};

/// What to look for. `None` (or `*`) in a pair means any tag key / any value.
#[derive(Debug, Clone, Default)]
pub struct LookupQuery {
    /// None: every metric.
    pub metric: Option<String>,
    pub tags: Vec<(Option<String>, Option<String>)>,
    /// Read the meta table (series tracked by `tsd.core.meta.*`) instead of the data table.
    pub use_meta: bool,
    /// Stop after this many series; 0: no limit.
    pub limit: usize,
}

/// One series found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupResult {
    pub tsuid: Vec<u8>,
    pub metric: String,
    /// Tag key and value names in TSUID order.
    pub tags: Vec<(String, String)>,
}

fn wild(s: &Option<String>) -> Option<&str> {
    s.as_deref().filter(|s| !s.is_empty() && *s != "*")
}

/// The conditions of a lookup, resolved to UIDs.
#[derive(Debug)]
struct Conditions {
    metric: Option<Uid>,
    /// (tagk, Some(tagv)) exact, (tagk, None) key present; sorted, a key wanted with any
    /// value has no exact values beside it.
    by_key: Vec<(Uid, Option<Uid>)>,
    /// Values that must appear under some key (any one of them).
    any_key_values: Vec<Vec<u8>>,
}

impl Conditions {
    fn resolve(tsdb: &Tsdb, q: &LookupQuery) -> Result<Conditions> {
        let schema = &tsdb.settings().schema;
        let uids = tsdb.uids();
        let metric = match wild(&q.metric) {
            Some(m) => Some(uids.get_id(UidKind::Metric, m)?),
            None => None,
        };
        let mut by_key: Vec<(Uid, Option<Uid>)> = Vec::new();
        let mut any_key_values: Vec<Vec<u8>> = Vec::new();
        for (k, v) in &q.tags {
            let v = match wild(v) {
                Some(v) => Some(uids.get_id(UidKind::TagValue, v)?),
                None => None,
            };
            match wild(k) {
                Some(k) => by_key.push((uids.get_id(UidKind::TagKey, k)?, v)),
                None => {
                    if let Some(v) = v {
                        any_key_values.push(v.to_bytes(schema.tagv_width));
                    }
                }
            }
        }
        // A key wanted with any value swallows exact values of the same key.
        let any_value: HashSet<Uid> = by_key
            .iter()
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| *k)
            .collect();
        by_key.retain(|(k, v)| v.is_none() || !any_value.contains(k));
        by_key.sort();
        by_key.dedup();
        Ok(Conditions {
            metric,
            by_key,
            any_key_values,
        })
    }
}

/// Finds series matching `q`, in the order of the table read (the data table's: salt
/// bucket, metric, first hour, tags; the meta table's: TSUID). Answered from the tag index
/// when this TSD maintains it and it covers every hour of the metric (RFC 0007), else by
/// scanning the table; both give the same answer.
pub fn lookup(tsdb: &Tsdb, q: &LookupQuery) -> Result<Vec<LookupResult>> {
    let conditions = Conditions::resolve(tsdb, q)?;
    if !q.use_meta && tsdb.buffered_points() > 0 {
        // Series still in the write buffers must be found too.
        tsdb.flush()?;
    }
    match indexed::lookup(tsdb, &conditions, q)? {
        Some(found) => Ok(found),
        None => scan(tsdb, &conditions, q),
    }
}

/// Whether [`lookup`] answers `q` from tag index candidates this TSD keeps (RFC 0007), at
/// most `most` of them, with nothing buffered to flush first: work small enough for the
/// caller's own thread. [`lookup`] gives the same answer either way.
pub fn lookup_is_kept(tsdb: &Tsdb, q: &LookupQuery, most: usize) -> bool {
    if tsdb.buffered_points() > 0 {
        return false;
    }
    Conditions::resolve(tsdb, q).is_ok_and(|c| indexed::kept_within(tsdb, &c, most))
}

/// [`lookup`] by scanning the table, whatever the index covers: the answer the index's
/// must equal.
pub fn lookup_by_scan(tsdb: &Tsdb, q: &LookupQuery) -> Result<Vec<LookupResult>> {
    let conditions = Conditions::resolve(tsdb, q)?;
    if !q.use_meta && tsdb.buffered_points() > 0 {
        tsdb.flush()?;
    }
    scan(tsdb, &conditions, q)
}

fn scan(tsdb: &Tsdb, c: &Conditions, q: &LookupQuery) -> Result<Vec<LookupResult>> {
    let schema = &tsdb.settings().schema;
    let (metric, by_key, any_key_values) = (c.metric, &c.by_key, &c.any_key_values);
    let (table, tags_at, family) = if q.use_meta {
        (
            &schema.meta_table,
            usize::from(schema.metric_width),
            META_FAMILY,
        )
    } else {
        (&schema.data_table, schema.tags_offset(), DATA_FAMILY)
    };
    let regex = key_regex(tsdb, tags_at, by_key);
    let mut starts: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
    let salts = if q.use_meta {
        vec![Vec::new()]
    } else {
        hourglass_core::rowkey::salt_prefixes(schema)
    };
    for salt in salts {
        match metric {
            Some(m) => {
                let mut prefix = salt.clone();
                m.write(schema.metric_width, &mut prefix);
                let end = prefix_end(&prefix);
                starts.push((prefix, end));
            }
            None => {
                let end = prefix_end(&salt);
                starts.push((salt, end));
            }
        }
    }
    let pair = schema.tag_pair_width();
    let metric_width = usize::from(schema.metric_width);
    let mut seen: HashSet<Vec<u8>> = HashSet::new();
    let mut out = Vec::new();
    'scan: for (start, end) in starts {
        let request = ScanRequest {
            start,
            end,
            key_regex: regex.clone(),
            read: ReadOptions {
                encoded_cells: true,
                ..ReadOptions::family(family)
            },
            ..Default::default()
        };
        for row in tsdb.store().scan(table, &request)? {
            let row = row?;
            if row.key.len() < tags_at || !(row.key.len() - tags_at).is_multiple_of(pair) {
                continue; // not a series row
            }
            let tsuid = if q.use_meta {
                row.key
            } else {
                tsuid_of(schema, &row.key)
            };
            if tsuid[..metric_width].iter().all(|b| *b == 0) {
                continue; // global annotation row
            }
            if !any_key_values.is_empty() {
                let has = tsuid[metric_width..].chunks_exact(pair).any(|p| {
                    let v = &p[usize::from(schema.tagk_width)..];
                    any_key_values.iter().any(|w| w.as_slice() == v)
                });
                if !has {
                    continue;
                }
            }
            if !seen.insert(tsuid.clone()) {
                continue;
            }
            out.push(resolve(tsdb, tsuid)?);
            if q.limit > 0 && out.len() >= q.limit {
                break 'scan;
            }
        }
    }
    Ok(out)
}

/// Full-match regex over keys whose tags start at `tags_at`: each key of `by_key` present,
/// with one of its listed values (or any value).
fn key_regex(tsdb: &Tsdb, tags_at: usize, by_key: &[(Uid, Option<Uid>)]) -> Option<String> {
    if by_key.is_empty() {
        return None;
    }
    let schema = &tsdb.settings().schema;
    let pair = schema.tag_pair_width();
    let mut re = format!("(?s)^.{{{tags_at}}}");
    for group in by_key.chunk_by(|a, b| a.0 == b.0) {
        re.push_str(&format!("(?:.{{{pair}}})*?"));
        escape_bytes(&group[0].0.to_bytes(schema.tagk_width), &mut re);
        if group.iter().any(|(_, v)| v.is_none()) {
            re.push_str(&format!(".{{{}}}", schema.tagv_width));
        } else {
            re.push_str("(?:");
            for (i, (_, v)) in group.iter().enumerate() {
                if i > 0 {
                    re.push('|');
                }
                if let Some(v) = v {
                    escape_bytes(&v.to_bytes(schema.tagv_width), &mut re);
                }
            }
            re.push(')');
        }
    }
    re.push_str(&format!("(?:.{{{pair}}})*$"));
    Some(re)
}

/// Names of a TSUID's UIDs.
pub fn resolve(tsdb: &Tsdb, tsuid: Vec<u8>) -> Result<LookupResult> {
    let schema = &tsdb.settings().schema;
    let series = hourglass_core::rowkey::decode_tsuid(schema, &tsuid)
        .map_err(|e| Error::Corrupt(e.to_string()))?;
    let uids = tsdb.uids();
    let metric = uids.get_name(UidKind::Metric, series.metric)?;
    let mut tags = Vec::with_capacity(series.tags.len());
    for (k, v) in &series.tags {
        tags.push((
            uids.get_name(UidKind::TagKey, *k)?,
            uids.get_name(UidKind::TagValue, *v)?,
        ));
    }
    Ok(LookupResult {
        tsuid,
        metric,
        tags,
    })
}
