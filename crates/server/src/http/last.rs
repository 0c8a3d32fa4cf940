//! `/api/query/last`: the newest point of series named by metric and tags (every series
//! having those tags) or by TSUID, looking back `backScan` hours from now.
//!
//! OpenTSDB answers `backScan: 0` from its meta-data counters; without them it finds nothing.
//! Here `backScan: 0` looks back [`DEFAULT_BACK_SCAN_HOURS`] instead, so the endpoint works
//! without meta tracking. A scan back (`backScan` > 0) of a metric and tags reads the one
//! series of exactly those tags, as OpenTSDB names it (`TSUIDQuery.tsuidFromMetric`).
//!
//! With `tsd.storage.retention` (Hourglass's own, RFC 0008 phase 4) a point before the raw
//! cutoff is never the answer, whether or not the sweep removed it yet: a series whose newest
//! point is older has no last point, as `/api/query` answers nothing before the cutoff.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{RawQuery, State as Extract};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use hourglass_core::rowkey::base_time_of;
use hourglass_core::uid::{Uid, UidKind, hex_upper, parse_hex};
use hourglass_core::value::{Value as Stored, java_double_text};
use hourglass_engine::Tsdb;
use hourglass_engine::index::select::{KeyFilters, SeriesSelector};
use hourglass_engine::query::filter::TagFilter;
use hourglass_engine::scan::RowQuery;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::ApiError;
use super::error::json_response;
use super::request::blocking;
use super::request::url_params;
use crate::State;

/// How far `backScan: 0` looks back, in hours.
pub(crate) const DEFAULT_BACK_SCAN_HOURS: i64 = 24;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
struct LastRequest {
    queries: Vec<LastSubQuery>,
    /// A Java `boolean` (`"true"` is true).
    #[serde(deserialize_with = "super::json::java_bool")]
    resolve_names: bool,
    /// A Java `int` as Jackson fills it (`"24"` and `24.0` are 24).
    #[serde(deserialize_with = "super::json::opt_long")]
    back_scan: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct LastSubQuery {
    metric: Option<String>,
    tags: HashMap<String, String>,
    tsuids: Vec<String>,
}

/// What to look for: a metric and tag pairs every series must have, or exact series.
enum Wanted {
    Tags {
        metric: String,
        tags: HashMap<String, String>,
    },
    Tsuid(String),
}

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::bad_request(msg)
}

/// `metric{k=v,...}` of a GET `timeseries=` parameter, as OpenTSDB's `Tags.parseWithMetric`
/// reads it: `metric{}` has no tags, each pair has one `=` and both sides, a pair given
/// twice with one value counts once, and errors are in its words.
fn parse_timeseries(text: &str) -> Result<Wanted, ApiError> {
    let (metric, inner) = super::request::split_metric(text).map_err(bad)?;
    let tags = super::request::exact_tag_pairs(inner).map_err(bad)?;
    Ok(Wanted::Tags {
        metric: metric.to_string(),
        tags: tags.into_iter().collect(),
    })
}

struct Found {
    tsuid: Vec<u8>,
    time_ms: i64,
    value: Stored,
}

/// The newest point of every series of `metric` having `pairs` (and exactly those tag bytes
/// when `exact` is given), over the hours `[from_secs, to_secs]`, at or after `cutoff_ms`
/// (the retention cutoff) when given.
#[allow(clippy::too_many_arguments)]
fn newest(
    tsdb: &Tsdb,
    metric: Uid,
    pairs: Vec<(Uid, Uid)>,
    exact: Option<&[u8]>,
    select: Option<&SeriesSelector>,
    from_secs: i64,
    to_secs: i64,
    cutoff_ms: Option<i64>,
) -> hourglass_engine::Result<Vec<Found>> {
    let schema = &tsdb.settings().schema;
    let tags_at = schema.tags_offset();
    let mut latest: BTreeMap<Vec<u8>, (i64, Stored)> = BTreeMap::new();
    tsdb.visit_rows_selected(
        &RowQuery {
            metric,
            start_secs: from_secs,
            end_secs: to_secs,
            tags: pairs,
        },
        select,
        |row| {
            let tags = row.key.get(tags_at..).unwrap_or_default();
            if exact.is_some_and(|e| e != tags) {
                return Ok(());
            }
            let (Some(base), Some(last)) = (base_time_of(schema, row.key), row.points.last())
            else {
                return Ok(());
            };
            let t = last.qualifier.timestamp_ms(base);
            // The row's newest point is before the cutoff: so are all of its points.
            if cutoff_ms.is_some_and(|cut| t < cut) {
                return Ok(());
            }
            let entry = latest.entry(tags.to_vec()).or_insert((t, last.value()));
            if t >= entry.0 {
                *entry = (t, last.value());
            }
            Ok(())
        },
    )?;
    Ok(latest
        .into_iter()
        .map(|(tags, (time_ms, value))| {
            let mut tsuid = metric.to_bytes(schema.metric_width);
            tsuid.extend_from_slice(&tags);
            Found {
                tsuid,
                time_ms,
                value,
            }
        })
        .collect())
}

fn answer(tsdb: &Tsdb, found: &Found, resolve: bool) -> hourglass_engine::Result<Value> {
    let mut o = Map::new();
    let value = match found.value {
        Stored::Int(i) => i.to_string(),
        other => java_double_text(other.as_f64()),
    };
    if resolve {
        let schema = &tsdb.settings().schema;
        let key = hourglass_core::rowkey::decode_tsuid(schema, &found.tsuid)?;
        let uids = tsdb.uids();
        o.insert(
            "metric".into(),
            json!(uids.get_name(UidKind::Metric, key.metric)?),
        );
        o.insert("timestamp".into(), json!(found.time_ms));
        o.insert("value".into(), json!(value));
        let mut tags = Map::new();
        for (k, v) in &key.tags {
            tags.insert(
                uids.get_name(UidKind::TagKey, *k)?,
                json!(uids.get_name(UidKind::TagValue, *v)?),
            );
        }
        o.insert("tags".into(), Value::Object(tags));
    } else {
        o.insert("timestamp".into(), json!(found.time_ms));
        o.insert("value".into(), json!(value));
    }
    o.insert("tsuid".into(), json!(hex_upper(&found.tsuid)));
    Ok(Value::Object(o))
}

fn run(
    tsdb: &Tsdb,
    wanted: &[Wanted],
    resolve: bool,
    back_scan: i64,
    now_ms: i64,
) -> Result<Vec<Value>, ApiError> {
    let schema = &tsdb.settings().schema;
    let uids = tsdb.uids();
    let now_secs = now_ms.div_euclid(1000);
    let hours = if back_scan <= 0 {
        DEFAULT_BACK_SCAN_HOURS
    } else {
        back_scan
    };
    let cutoff_ms = tsdb.raw_cutoff(now_ms).map(|cut| cut.saturating_mul(1000));
    // A scan back reads the current hour's row and `backScan` rows before it, as OpenTSDB
    // does.
    let first = if back_scan > 0 {
        now_secs - now_secs.rem_euclid(3600)
    } else {
        now_secs
    };
    let from = (first - hours.saturating_mul(3600))
        .max(cutoff_ms.map_or(i64::MIN, |cut| cut.div_euclid(1000)));
    let mut out = Vec::new();
    for w in wanted {
        let found = match w {
            Wanted::Tags { metric, tags } => {
                if metric.is_empty() {
                    return Err(bad("Metric cannot be null or empty"));
                }
                // A scan back (`backScan` > 0) reads the one series of exactly these tags,
                // as OpenTSDB's `TSUIDQuery.tsuidFromMetric` names it.
                let exact = back_scan > 0;
                if exact && tags.is_empty() {
                    return Err(bad("Tags cannot be null or empty when getting a TSUID"));
                }
                let metric = uids
                    .get_id(UidKind::Metric, metric)
                    .map_err(ApiError::from)?;
                let mut pairs = Vec::with_capacity(tags.len());
                let mut keys = Vec::with_capacity(tags.len());
                for (k, v) in tags {
                    let tagk = uids.get_id(UidKind::TagKey, k).map_err(ApiError::from)?;
                    pairs.push((
                        tagk,
                        uids.get_id(UidKind::TagValue, v).map_err(ApiError::from)?,
                    ));
                    // The index lists the series having every pair (a value never holds
                    // `|`, which a literal_or filter would split at).
                    if !v.contains('|')
                        && let Ok(f) = TagFilter::new("literal_or", k, v, false)
                    {
                        keys.push(KeyFilters {
                            tagk,
                            filters: vec![f],
                        });
                    }
                }
                let exact_tags = exact.then(|| {
                    let mut sorted = pairs.clone();
                    sorted.sort();
                    sorted
                        .iter()
                        .flat_map(|(k, v)| {
                            let mut b = k.to_bytes(schema.tagk_width);
                            b.extend(v.to_bytes(schema.tagv_width));
                            b
                        })
                        .collect::<Vec<u8>>()
                });
                let select = (keys.len() == pairs.len())
                    .then(|| SeriesSelector::new(metric, keys, false))
                    .flatten();
                newest(
                    tsdb,
                    metric,
                    pairs,
                    exact_tags.as_deref(),
                    select.as_ref(),
                    from,
                    now_secs,
                    cutoff_ms,
                )
            }
            Wanted::Tsuid(text) => {
                let bytes = parse_hex(text).map_err(|e| bad(e.to_string()))?;
                if bytes.len() < usize::from(schema.metric_width) + schema.tag_pair_width() {
                    return Err(bad(
                        "TSUID must not be null and must have a metric and at least one tag pair",
                    ));
                }
                if back_scan < 0 {
                    return Err(bad("Backscan must be zero or a positive number"));
                }
                let key = hourglass_core::rowkey::decode_tsuid(schema, &bytes)
                    .map_err(|e| bad(e.to_string()))?;
                let tags_len = bytes.len() - usize::from(schema.metric_width);
                newest(
                    tsdb,
                    key.metric,
                    key.tags.clone(),
                    Some(&bytes[bytes.len() - tags_len..]),
                    None,
                    from,
                    now_secs,
                    cutoff_ms,
                )
            }
        }
        .map_err(ApiError::from)?;
        for f in &found {
            out.push(answer(tsdb, f, resolve).map_err(ApiError::from)?);
        }
    }
    Ok(out)
}

pub(crate) async fn handle(
    method: Method,
    RawQuery(raw): RawQuery,
    Extract(state): Extract<Arc<State>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let params = url_params(raw.as_deref());
    // OpenTSDB's query endpoints share one gate: DELETE is refused while deleting is off,
    // else read as a GET (nothing is deleted).
    if method == Method::DELETE && !state.settings.allow_delete {
        return Err(bad("Bad request")
            .with_details("Deleting data is not enabled (tsd.http.query.allow_delete=false)"));
    }
    let (wanted, resolve, back_scan) = match method {
        Method::GET | Method::DELETE => {
            // As `parseLastPointQuery` reads them: `back_scan` (the last one given, a Java
            // int), then every `timeseries=`, then every `tsuids=` (split at commas as Java's
            // `String.split` does: inner empty TSUIDs kept, trailing ones dropped).
            let back_scan = match params.iter().rev().find(|(k, _)| k == "back_scan") {
                None => 0,
                Some((_, v)) => v
                    .parse::<i32>()
                    .map(i64::from)
                    .map_err(|_| bad("Unable to parse back_scan parameter"))?,
            };
            let mut wanted = Vec::new();
            for (k, v) in &params {
                if k == "timeseries" {
                    wanted.push(parse_timeseries(v)?);
                }
            }
            for (k, v) in &params {
                if k == "tsuids" {
                    let mut list: Vec<&str> = v.split(',').collect();
                    while list.len() > 1 && list.last() == Some(&"") {
                        list.pop();
                    }
                    if list == [""] && v.contains(',') {
                        list.clear();
                    }
                    wanted.extend(list.into_iter().map(|t| Wanted::Tsuid(t.to_string())));
                }
            }
            (
                wanted,
                params.iter().any(|(k, _)| k == "resolve"),
                back_scan,
            )
        }
        Method::POST => {
            if body.iter().all(u8::is_ascii_whitespace) {
                return Err(bad("Missing message content"));
            }
            let req: LastRequest = super::json::from_slice(&body)
                .map_err(|e| bad("Unable to parse the given JSON").with_details(e.to_string()))?;
            let mut wanted = Vec::new();
            for q in req.queries {
                if q.tsuids.is_empty() {
                    wanted.push(Wanted::Tags {
                        metric: q.metric.unwrap_or_default(),
                        tags: q.tags,
                    });
                } else {
                    wanted.extend(q.tsuids.into_iter().map(Wanted::Tsuid));
                }
            }
            let back_scan = req.back_scan.unwrap_or(0);
            if i32::try_from(back_scan).is_err() {
                return Err(bad("Unable to parse the given JSON")
                    .with_details(format!("Numeric value ({back_scan}) out of range of int")));
            }
            (wanted, req.resolve_names, back_scan)
        }
        other => return Err(ApiError::method_not_allowed(&other)),
    };
    if wanted.is_empty() {
        return Err(bad("Missing sub queries"));
    }
    // The TSD's clock (the system's, or a test's), as `/api/query`'s cutoffs read it.
    let now_ms = state.tsdb.settings().clock.now_ms();
    let results = blocking(&state.tsdb, move |tsdb| {
        run(tsdb, &wanted, resolve, back_scan, now_ms)
    })
    .await?;
    Ok(json_response(StatusCode::OK, &Value::Array(results)))
}
