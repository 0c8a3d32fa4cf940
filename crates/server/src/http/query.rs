//! `/api/query`: OpenTSDB's query API, GET (`m=agg:[downsample:][rate{...}:]metric{tags}{filters}`)
//! and POST (JSON `queries`), answered with one object per result group.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{RawQuery, State as Extract};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use hourglass_core::time::{Tz, parse_time_in, parse_timezone};
use hourglass_core::value::{java_double_text, push_java_double};
use hourglass_engine::annotation::Annotation;
use hourglass_engine::num::Num;
use hourglass_engine::query::aggregator::Aggregator;
use hourglass_engine::query::downsample::DownsampleSpec;
use hourglass_engine::query::filter::TagFilter;
use hourglass_engine::query::plan::{
    GroupResult, Outcome, RunOptions, StoredAnnotation, SubQuery, global_annotations, run,
    writes_null,
};
use hourglass_engine::query::rate::RateOptions;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::ApiError;
use super::error::json_text_response;
use super::request::small_or_blocking;
use super::request::url_params;
use crate::State;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct QueryRequest {
    start: Option<Value>,
    end: Option<Value>,
    timezone: Option<String>,
    use_calendar: bool,
    queries: Option<Vec<SubQueryRequest>>,
    ms_resolution: bool,
    #[serde(rename = "showTSUIDs")]
    show_tsuids: bool,
    no_annotations: bool,
    global_annotations: bool,
    show_query: bool,
    show_stats: bool,
    show_summary: bool,
    delete: bool,
    override_byte_limit: bool,
    override_data_point_limit: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct SubQueryRequest {
    aggregator: Option<String>,
    metric: Option<String>,
    tsuids: Option<Vec<String>>,
    downsample: Option<String>,
    rate: bool,
    rate_options: Option<RateOptionsRequest>,
    tags: Option<HashMap<String, String>>,
    filters: Option<Vec<FilterRequest>>,
    explicit_tags: bool,
    /// Histogram options and rollup options (RFC 0008).
    percentiles: Option<serde_json::Value>,
    show_histogram_buckets: bool,
    pre_aggregate: bool,
    rollup_usage: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct RateOptionsRequest {
    counter: bool,
    #[serde(deserialize_with = "super::json::opt_long")]
    counter_max: Option<i64>,
    #[serde(deserialize_with = "super::json::opt_long")]
    reset_value: Option<i64>,
    drop_resets: bool,
}

#[derive(Debug, Deserialize)]
struct FilterRequest {
    #[serde(rename = "type")]
    kind: String,
    tagk: String,
    filter: String,
    #[serde(rename = "groupBy", default)]
    group_by: bool,
}

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::bad_request(msg)
}

fn time_of(v: &Value, now_ms: i64, tz: Tz) -> Result<i64, ApiError> {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return Err(bad("Invalid time")),
    };
    parse_time_in(&text, now_ms, tz).map_err(|e| bad(e.to_string()))
}

impl SubQueryRequest {
    fn into_sub(self) -> Result<SubQuery, ApiError> {
        let percentiles = sorted_percentiles(json_percentiles(self.percentiles.as_ref())?);
        let rollup_usage = self.rollup_usage.as_deref().map(rollup_usage).transpose()?;
        let agg = self
            .aggregator
            .filter(|a| !a.is_empty())
            .ok_or_else(|| bad("Missing the aggregation function"))?;
        let aggregator = Aggregator::parse(&agg)
            .map_err(|_| bad(format!("No such aggregation function: {agg}")))?;
        let tsuids: Vec<String> = self
            .tsuids
            .unwrap_or_default()
            .into_iter()
            .filter(|t| !t.is_empty())
            .collect();
        let metric = self.metric.filter(|m| !m.is_empty()).unwrap_or_default();
        if metric.is_empty() && tsuids.is_empty() {
            return Err(bad("Missing the metric or tsuids, provide at least one"));
        }
        let downsample_text = self.downsample.filter(|d| !d.is_empty());
        let downsample = downsample_text
            .as_deref()
            .map(DownsampleSpec::parse)
            .transpose()
            .map_err(|e| bad(e.to_string()))?;
        let mut filters = Vec::new();
        for (k, v) in self.tags.into_iter().flatten() {
            filters.push(TagFilter::from_legacy(&k, &v, true).map_err(|e| bad(e.to_string()))?);
        }
        for f in self.filters.into_iter().flatten() {
            filters.push(
                TagFilter::new(&f.kind, &f.tagk, &f.filter, f.group_by)
                    .map_err(|e| bad(e.to_string()))?,
            );
        }
        let o = self.rate_options.unwrap_or_default();
        let rate_options = RateOptions {
            counter: o.counter,
            counter_max: o.counter_max.unwrap_or(i64::MAX),
            reset_value: o.reset_value.unwrap_or(0),
            drop_resets: o.drop_resets,
        };
        Ok(SubQuery {
            aggregator,
            metric,
            tsuids,
            downsample,
            downsample_text,
            rate: self.rate,
            rate_options,
            filters,
            explicit_tags: self.explicit_tags,
            rollup_usage,
            pre_aggregate: self.pre_aggregate,
            percentiles,
            show_histogram_buckets: self.show_histogram_buckets,
        })
    }
}

/// `percentiles` of a JSON sub-query, as Jackson reads a `List<Float>`: numbers or numeric
/// strings; `null` or absent is none.
fn json_percentiles(value: Option<&Value>) -> Result<Vec<f32>, ApiError> {
    let unparsable = |why: String| bad("Unable to parse the given JSON").with_details(why);
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::Number(n) => n.as_f64().map(|f| f as f32),
                Value::String(s) => hourglass_core::histogram::parse_java_float(s),
                _ => None,
            })
            .map(|p| {
                p.ok_or_else(|| {
                    unparsable(format!("percentiles: not a list of numbers: {value:?}"))
                })
            })
            .collect(),
        Some(other) => Err(unparsable(format!(
            "percentiles must be a list of numbers, not {other}"
        ))),
    }
}

/// Percentiles in order, as 2.4.1's `TSSubQuery.setPercentiles` sorts them (so the echoed
/// query lists them sorted, and equal lists are one query).
fn sorted_percentiles(mut p: Vec<f32>) -> Vec<f32> {
    p.sort_by(|a, b| hourglass_core::histogram::java_float_cmp(*a, *b));
    p
}

/// 2.4.1's `QueryRpc.parsePercentiles`: `percentiles[50,99.9]`.
fn token_percentiles(token: &str) -> Result<Vec<f32>, ApiError> {
    let (Some(open), Some(close)) = (token.find('['), token.find(']')) else {
        return Err(bad(format!(
            "Malformated percentile query paramater: {token}"
        )));
    };
    let inner = token
        .get(open + 1..close)
        .ok_or_else(|| bad(format!("Malformated percentile query paramater: {token}")))?;
    inner
        .split(',')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let p = p.trim();
            hourglass_core::histogram::parse_java_float(p).ok_or_else(|| {
                bad(format!("For input string: \"{p}\""))
                    .with_details("percentiles[...] takes numbers separated by commas")
            })
        })
        .collect()
}

/// `metric{tags}{filters}` of a GET `m=` parameter.
fn parse_metric_and_filters(text: &str) -> Result<(String, Vec<TagFilter>), ApiError> {
    let Some(open) = text.find('{') else {
        return Ok((text.to_string(), Vec::new()));
    };
    let metric = text[..open].to_string();
    let mut filters = Vec::new();
    let mut rest = &text[open..];
    let mut group_by = true;
    while let Some(body) = rest.strip_prefix('{') {
        let close = body
            .find('}')
            .ok_or_else(|| bad(format!("Missing '}}' at the end of: {text}")))?;
        for item in body[..close].split(',').filter(|i| !i.is_empty()) {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| bad(format!("invalid tag: {item}")))?;
            let f = TagFilter::from_legacy(k, v, group_by)
                .map_err(|e| bad(format!("When parsing tag '{item}': {e}")))?;
            filters.push(f);
        }
        rest = &body[close + 1..];
        group_by = false;
    }
    Ok((metric, filters))
}

/// Splits `AGG:[tokens:]LAST` (at most `max_parts` parts) and reads the aggregator.
fn split_param<'a>(
    text: &'a str,
    empty: &str,
    max_parts: usize,
) -> Result<(Aggregator, Vec<&'a str>), ApiError> {
    if text.is_empty() {
        return Err(bad(empty));
    }
    let parts: Vec<&str> = text.split(':').collect();
    if parts.len() < 2 {
        return Err(bad(format!(
            "Invalid parameter m={text} (not enough :-separated parts)"
        )));
    }
    if parts.len() > max_parts {
        return Err(bad(format!(
            "Invalid parameter m={text} (too many :-separated parts)"
        )));
    }
    let aggregator = Aggregator::parse(parts[0])
        .map_err(|_| bad(format!("No such aggregation function: {}", parts[0])))?;
    Ok((aggregator, parts))
}

pub(crate) fn parse_m(m: &str) -> Result<SubQuery, ApiError> {
    let (aggregator, parts) = split_param(m, "The query string was empty", 5)?;
    let (metric, filters) = parse_metric_and_filters(parts[parts.len() - 1])?;
    let mut q = SubQuery::new(aggregator, &metric);
    q.filters = filters;
    apply_tokens(&mut q, &parts[1..parts.len() - 1])?;
    Ok(q)
}

/// A `rollupUsage` (any case) as its upper-cased name, or OpenTSDB's refusal.
fn rollup_usage(text: &str) -> Result<String, ApiError> {
    let upper = text.to_ascii_uppercase();
    match upper.as_str() {
        "ROLLUP_RAW" | "ROLLUP_NOFALLBACK" | "ROLLUP_FALLBACK" | "ROLLUP_FALLBACK_RAW" => Ok(upper),
        _ => Err(bad(format!("Unknown rollup usage: {upper}")).with_details(
            "one of ROLLUP_RAW, ROLLUP_NOFALLBACK, ROLLUP_FALLBACK, ROLLUP_FALLBACK_RAW",
        )),
    }
}

/// The middle `:`-separated tokens of `m=` and `tsuid=`: rate, downsampling, explicit_tags,
/// the rollup tokens (`pre-agg`, `rollup_*`) and the histogram ones (`percentiles[...]`,
/// `show-histogram-buckets`); anything else is ignored, as OpenTSDB does.
fn apply_tokens(q: &mut SubQuery, tokens: &[&str]) -> Result<(), ApiError> {
    for token in tokens {
        let lower = token.to_ascii_lowercase();
        if lower.starts_with("percentiles") {
            q.percentiles = sorted_percentiles(token_percentiles(token)?);
        } else if lower.starts_with("show-histogram-buckets") {
            q.show_histogram_buckets = true;
        } else if lower == "pre-agg" {
            q.pre_aggregate = true;
        } else if lower.starts_with("rollup_") {
            q.rollup_usage = Some(rollup_usage(token)?);
        } else if lower.starts_with("rate") {
            q.rate = true;
            if token.contains('{') {
                q.rate_options = RateOptions::parse_token(token).map_err(|e| bad(e.to_string()))?;
            }
        } else if token.starts_with(|c: char| c.is_ascii_digit()) {
            q.downsample = Some(DownsampleSpec::parse(token).map_err(|e| bad(e.to_string()))?);
            q.downsample_text = Some(token.to_string());
        } else if lower.starts_with("explicit_tags") {
            q.explicit_tags = true;
        }
    }
    Ok(())
}

/// A GET `tsuid=AGG:[tokens:]TSUID[,TSUID...]` sub-query.
pub(crate) fn parse_tsuid_param(text: &str) -> Result<SubQuery, ApiError> {
    let (aggregator, parts) = split_param(text, "The tsuid query string was empty", 4)?;
    let mut q = SubQuery::new(aggregator, "");
    q.tsuids = parts[parts.len() - 1]
        .split(',')
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect();
    apply_tokens(&mut q, &parts[1..parts.len() - 1])?;
    Ok(q)
}

/// What a request asks for besides its sub-queries.
#[derive(Debug, Default, Clone)]
pub(crate) struct Flags {
    ms: bool,
    arrays: bool,
    show_tsuids: bool,
    pub(crate) no_annotations: bool,
    pub(crate) global_annotations: bool,
    show_query: bool,
    show_stats: bool,
    pub(crate) show_summary: bool,
    delete: bool,
    override_bytes: bool,
    override_points: bool,
}

impl Flags {
    /// The flags a GET request's URL sets (`ms`, `arrays`, `show_tsuids`, ...).
    pub(crate) fn from_url(params: &[(String, String)]) -> Flags {
        let has = |k: &str| params.iter().any(|(p, _)| p == k);
        Flags {
            ms: has("ms"),
            arrays: has("arrays"),
            show_tsuids: has("show_tsuids"),
            no_annotations: has("no_annotations"),
            global_annotations: has("global_annotations"),
            show_query: has("show_query"),
            show_stats: has("show_stats"),
            show_summary: has("show_summary"),
            ..Flags::default()
        }
    }
}

/// A JSON string literal.
pub(crate) fn push_str_json(out: &mut String, s: &str) {
    out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into()));
}

/// A value as OpenTSDB writes it: integers as they are, doubles as Java's
/// `Double.toString`, NaN as `"NaN"` (or `null` under fill policy `null`).
pub(crate) fn push_num(out: &mut String, v: Num, null_for_nan: bool) {
    match v {
        Num::Int(i) => out.push_str(itoa::Buffer::new().format(i)),
        Num::Float(f) if f.is_nan() && null_for_nan => out.push_str("null"),
        Num::Float(f) if !f.is_finite() => {
            out.push('"');
            out.push_str(&java_double_text(f));
            out.push('"');
        }
        Num::Float(f) => push_java_double(out, f),
    }
}

pub(crate) fn annotations_json(list: &[StoredAnnotation]) -> Value {
    Value::Array(
        list.iter()
            .filter_map(|a| Annotation::from_stored(&a.json).ok())
            .map(|n| n.to_json())
            .collect(),
    )
}

/// The `query` object of showQuery: the sub-query as OpenTSDB describes it, with the rollup
/// fields 2.4 adds (`rollupTable`: the interval whose table answered, or `raw`).
fn sub_query_json(q: &SubQuery, index: usize, o: &Outcome) -> Value {
    let filters: Vec<Value> = q
        .filters
        .iter()
        .map(|f| {
            json!({
                "tagk": f.tagk,
                "filter": f.expression,
                "group_by": f.group_by,
                "type": f.type_name,
            })
        })
        .collect();
    let tags: Map<String, Value> = q
        .filters
        .iter()
        .filter(|f| f.group_by)
        .map(|f| {
            (
                f.tagk.clone(),
                json!(format!("{}({})", f.type_name, f.expression)),
            )
        })
        .collect();
    json!({
        "aggregator": q.aggregator.name(),
        "metric": q.metric,
        "tsuids": if q.tsuids.is_empty() { Value::Null } else { json!(q.tsuids) },
        "downsample": q.downsample_text,
        "rate": q.rate,
        "filters": filters,
        "explicitTags": q.explicit_tags,
        "preAggregate": q.pre_aggregate,
        "rollupUsage": q.rollup_usage,
        "rollupTable": o.rollup_table.as_deref().unwrap_or("raw"),
        "percentiles": if q.percentiles.is_empty() {
            Value::Null
        } else {
            // Java's floats as Jackson writes them (`99.9`, not the double nearest).
            json!(q.percentiles.iter().map(|p| {
                hourglass_core::histogram::java_float_text(*p).parse::<f64>().unwrap_or(f64::from(*p))
            }).collect::<Vec<f64>>())
        },
        "showHistogramBuckets": q.show_histogram_buckets,
        "index": index,
        "tags": tags,
        "rateOptions": if q.rate {
            json!({
                "counter": q.rate_options.counter,
                "counterMax": q.rate_options.counter_max,
                "resetValue": q.rate_options.reset_value,
                "dropResets": q.rate_options.drop_resets,
            })
        } else {
            Value::Null
        },
    })
}

fn millis(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Writes result groups as `/api/query` answers them.
pub(crate) struct Serialized<'a> {
    pub(crate) flags: &'a Flags,
    /// The global annotations to write with each group (`global_annotations`).
    pub(crate) global: Option<Value>,
}

impl Serialized<'_> {
    /// One group `g` of sub-query `q` (number `index` of the request) that ran as `o`.
    pub(crate) fn group(
        &self,
        out: &mut String,
        q: &SubQuery,
        index: usize,
        o: &Outcome,
        g: &GroupResult,
    ) {
        let flags = self.flags;
        out.push_str("{\"metric\":");
        push_str_json(out, &g.metric);
        out.push_str(",\"tags\":");
        out.push_str(&json!(g.tags).to_string());
        out.push_str(",\"aggregateTags\":");
        out.push_str(&json!(g.aggregate_tags).to_string());
        if flags.show_query {
            out.push_str(",\"query\":");
            out.push_str(&sub_query_json(q, index, o).to_string());
        }
        if flags.show_tsuids {
            out.push_str(",\"tsuids\":");
            out.push_str(&json!(g.tsuids).to_string());
        }
        if !flags.no_annotations && !g.annotations.is_empty() {
            out.push_str(",\"annotations\":");
            out.push_str(&annotations_json(&g.annotations).to_string());
        }
        if let Some(global) = &self.global {
            out.push_str(",\"globalAnnotations\":");
            out.push_str(&global.to_string());
        }
        out.push_str(",\"dps\":");
        let null_for_nan = writes_null(q);
        super::dps::write_dps(out, &g.dps, flags.ms, flags.arrays, null_for_nan);
        if flags.show_stats {
            let s = &o.stats;
            let stats = json!({
                "queryIndex": index,
                "rowsPreFilter": s.rows,
                "dpsPreFilter": s.points,
                "bytesFetched": s.bytes,
                "seriesMatched": s.series,
                "emittedDPs": g.dps.len(),
                "queryScanTime": millis(s.scan_time),
                "aggregationTime": millis(s.aggregation_time),
            });
            out.push_str(",\"stats\":");
            out.push_str(&stats.to_string());
        }
        out.push('}');
    }
}

/// The sub-queries of a URL: its `m=` and `tsuid=` parameters, in order.
pub(crate) fn url_sub_queries(params: &[(String, String)]) -> Result<Vec<SubQuery>, ApiError> {
    let mut subs = Vec::new();
    for (k, v) in params {
        match k.as_str() {
            "m" => subs.push(parse_m(v)?),
            "tsuid" => subs.push(parse_tsuid_param(v)?),
            _ => {}
        }
    }
    if subs.is_empty() {
        return Err(bad("Missing sub queries"));
    }
    Ok(subs)
}

pub(crate) async fn handle(
    method: Method,
    RawQuery(raw): RawQuery,
    Extract(state): Extract<Arc<State>>,
    access: Option<axum::Extension<crate::auth::Access>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let params = url_params(raw.as_deref());
    let get = |k: &str| params.iter().find(|(p, _)| p == k).map(|(_, v)| v.clone());
    let now_ms = hourglass_storage::now_ms();
    let mut flags = Flags {
        delete: method == Method::DELETE,
        ..Flags::from_url(&params)
    };
    let mut tz = Tz::UTC;
    let mut use_calendar = false;
    let (start, end, mut subs) = match method {
        Method::GET | Method::DELETE if body.iter().all(u8::is_ascii_whitespace) => {
            let start = get("start").ok_or_else(|| bad("Missing parameter <code>start</code>"))?;
            let start = parse_time_in(&start, now_ms, tz).map_err(|e| bad(e.to_string()))?;
            let end = get("end")
                .map(|e| parse_time_in(&e, now_ms, tz))
                .transpose()
                .map_err(|e| bad(e.to_string()))?;
            (start, end, url_sub_queries(&params)?)
        }
        Method::POST | Method::DELETE => {
            if body.iter().all(u8::is_ascii_whitespace) {
                return Err(bad("Missing message content"));
            }
            let req: QueryRequest = super::json::from_slice(&body)
                .map_err(|e| bad("Unable to parse the given JSON").with_details(e.to_string()))?;
            if let Some(name) = req.timezone.as_deref().filter(|n| !n.is_empty()) {
                tz = parse_timezone(name).map_err(|e| bad(e.to_string()))?;
            }
            use_calendar = req.use_calendar;
            let start = req
                .start
                .as_ref()
                .ok_or_else(|| bad("Missing start time"))?;
            let start = time_of(start, now_ms, tz)?;
            let end = req
                .end
                .as_ref()
                .map(|e| time_of(e, now_ms, tz))
                .transpose()?;
            let queries = req.queries.unwrap_or_default();
            if queries.is_empty() {
                return Err(bad("Missing queries"));
            }
            let subs = queries
                .into_iter()
                .map(SubQueryRequest::into_sub)
                .collect::<Result<Vec<_>, _>>()?;
            flags.ms |= req.ms_resolution;
            flags.show_tsuids |= req.show_tsuids;
            flags.no_annotations |= req.no_annotations;
            flags.global_annotations |= req.global_annotations;
            flags.show_query |= req.show_query;
            flags.show_stats |= req.show_stats;
            flags.show_summary |= req.show_summary;
            flags.delete |= req.delete;
            flags.override_bytes = req.override_byte_limit;
            flags.override_points = req.override_data_point_limit;
            (start, end, subs)
        }
        other => return Err(ApiError::method_not_allowed(&other)),
    };
    if flags.delete {
        // A deletion needs `delete`, and `read` as well: its answer holds the points it
        // deletes (the route asks for one of the two, by its method).
        for permission in [
            hourglass_core::permission::Permission::Delete,
            hourglass_core::permission::Permission::Read,
        ] {
            super::access::require(access.as_ref().map(|a| &a.0), permission)?;
        }
    }
    if flags.delete && !state.settings.allow_delete {
        return Err(bad("Bad request")
            .with_details("Deleting data is not enabled (tsd.http.query.allow_delete=false)"));
    }
    let end = end.unwrap_or(now_ms);
    if end <= start {
        return Err(bad(format!(
            "End time [{end}] must be greater than the start time [{start}]"
        )));
    }
    for q in &mut subs {
        if let Some(ds) = q.downsample {
            q.downsample = Some(ds.in_zone(tz, use_calendar).map_err(ApiError::from)?);
        }
    }
    // Duplicate sub-queries are answered once, as OpenTSDB does.
    let mut unique: Vec<SubQuery> = Vec::with_capacity(subs.len());
    for q in subs {
        if !unique.iter().any(|u| same_query(u, &q)) {
            unique.push(q);
        }
    }
    // The same query again, while nothing it read has changed: its kept answer. (Timings
    // and deletions are not kept; `nocache`, as `/q` and OpenTSDB's graph cache read it,
    // computes the answer and keeps nothing.)
    let nocache = params.iter().any(|(k, _)| k == "nocache");
    let cache_key = state
        .query_cache
        .as_ref()
        .filter(|_| !flags.delete && !flags.show_stats && !flags.show_summary && !nocache)
        .filter(|_| !expires_within(&state, start))
        .map(|_| format!("{start} {end} {tz:?} {use_calendar} {flags:?} {unique:?}"));
    if let (Some(cache), Some(key)) = (&state.query_cache, &cache_key)
        && let Some(body) = cache.get(key)
    {
        return Ok(json_text_response(StatusCode::OK, body));
    }
    let started = std::time::Instant::now();
    let options: Vec<RunOptions> = unique
        .iter()
        .map(|q| run_options(&state, q, &flags, started))
        .collect();
    let global_notes = flags.global_annotations && !flags.no_annotations;
    let keeping = cache_key.is_some();
    let small = !flags.delete && unique.iter().all(|q| small_query(q, start, end));
    let (body, watch) = small_or_blocking(&state, small, move |tsdb| {
        // Registered before anything is read: a change from here on makes the answer stale.
        let watch = keeping
            .then(|| watch_reads(tsdb, &unique, start, end, global_notes))
            .flatten();
        let global = if flags.global_annotations && !flags.no_annotations {
            let list = global_annotations(tsdb, start, end).map_err(ApiError::from)?;
            (!list.is_empty()).then(|| annotations_json(&list))
        } else {
            None
        };
        let ser = Serialized {
            flags: &flags,
            global,
        };
        let mut out = String::with_capacity(4096);
        out.push('[');
        let mut first = true;
        let mut summary = Summary::default();
        for (index, q) in unique.iter().enumerate() {
            let outcome = run(tsdb, start, end, q, &options[index]).map_err(ApiError::from)?;
            summary.add_run(&outcome);
            for g in &outcome.groups {
                if !first {
                    out.push(',');
                }
                first = false;
                summary.add_emitted(g.dps.len());
                ser.group(&mut out, q, index, &outcome, g);
            }
        }
        if flags.show_summary {
            summary.write(&mut out, first, started);
        }
        out.push(']');
        Ok((Bytes::from(out), watch))
    })
    .await?;
    if let (Some(cache), Some(key), Some(watch)) = (&state.query_cache, cache_key, watch) {
        cache.insert(key, body.clone(), watch);
    }
    Ok(json_text_response(StatusCode::OK, body))
}

/// The longest range a query naming its series may span and still be answered on the
/// connection's thread: a five-minute series over it is some 26,000 points, a few ms.
const SMALL_SPAN_MS: i64 = 92 * 86_400_000;

/// Whether sub-query `q` over `[start, end]` is small enough to answer on the connection's
/// thread (see [`small_or_blocking`]): it names its series (literal tag values or a few
/// TSUIDs, as a query read by one thread does) over at most [`SMALL_SPAN_MS`].
fn small_query(q: &SubQuery, start: i64, end: i64) -> bool {
    hourglass_engine::query::plan::names_its_series(q) && end.saturating_sub(start) <= SMALL_SPAN_MS
}

/// Whether a retention (`tsd.storage.retention`, an interval's `retention`) may clip data
/// from `start` on before a kept answer grows too old to serve: the cutoff moves with the
/// clock, not with a change, so such answers are not kept.
fn expires_within(state: &State, start: i64) -> bool {
    let tsdb = &state.tsdb;
    let now_ms = tsdb.settings().clock.now_ms();
    let tiers = tsdb
        .rollups()
        .map(|r| r.config.intervals().iter().filter_map(|i| i.retention_ms))
        .into_iter()
        .flatten();
    let Some(shortest) = tsdb.settings().retention_ms.into_iter().chain(tiers).min() else {
        return false;
    };
    let horizon = state.settings.query_cache_max_age.as_millis() as i64 + 3_600_000;
    start < now_ms.saturating_sub(shortest).saturating_add(horizon)
}

/// A watch over what the sub-queries `unique` read over `[start, end]` (and the global
/// annotations of that time when they are answered too); `None` when a name or TSUID does
/// not resolve (the query fails on it) or changes are not tracked.
fn watch_reads(
    tsdb: &hourglass_engine::Tsdb,
    unique: &[SubQuery],
    start: i64,
    end: i64,
    global_notes: bool,
) -> Option<hourglass_engine::changes::Watch> {
    let changes = tsdb.changes()?;
    let mut deps = unique
        .iter()
        .map(|q| hourglass_engine::query::plan::dependency(tsdb, q, start, end))
        .collect::<Result<Vec<_>, _>>()
        .ok()?;
    if global_notes {
        let hour = 3_600_000;
        deps.push(hourglass_engine::changes::Dependency {
            metric: vec![0; usize::from(tsdb.settings().schema.metric_width)],
            lo_ms: start.saturating_sub(hour),
            hi_ms: end.saturating_add(hour),
        });
    }
    Some(changes.watch(&deps))
}

/// How sub-query `q` runs: the default limits, or its metric's override; a request may
/// lift the byte and point limits where the configuration allows it.
pub(crate) fn run_options(
    state: &State,
    q: &SubQuery,
    flags: &Flags,
    started: std::time::Instant,
) -> RunOptions {
    let defaults = state.settings.query_limits;
    let mut limits = match &state.settings.limit_overrides {
        Some(o) if !q.metric.is_empty() => o.limits_for(&q.metric, defaults),
        _ => defaults,
    };
    if flags.override_bytes && state.settings.allow_byte_limit_override {
        limits.max_bytes = 0;
    }
    if flags.override_points && state.settings.allow_point_limit_override {
        limits.max_points = 0;
    }
    RunOptions {
        limits,
        started,
        delete: flags.delete,
        parallel: true,
        use_index: true,
    }
}

/// The figures of `show_summary`, summed over a request's sub-queries.
#[derive(Debug, Default)]
pub(crate) struct Summary {
    points: u64,
    raw: u64,
    storage: f64,
    aggregation: f64,
}

impl Summary {
    /// What one sub-query's run read.
    pub(crate) fn add_run(&mut self, o: &Outcome) {
        self.raw += o.stats.points;
        self.storage += millis(o.stats.scan_time);
        self.aggregation += millis(o.stats.aggregation_time);
    }

    /// Points written in the answer.
    pub(crate) fn add_emitted(&mut self, points: usize) {
        self.points += points as u64;
    }

    /// The `{"statsSummary":...}` element, after the results (`first`: none were written).
    pub(crate) fn write(&self, out: &mut String, first: bool, started: std::time::Instant) {
        if !first {
            out.push(',');
        }
        let total = millis(started.elapsed());
        let summary = json!({"statsSummary": {
            "datapoints": self.points,
            "rawDatapoints": self.raw,
            "aggregationTime": self.aggregation,
            "storageTime": self.storage,
            "serializationTime": (total - self.storage - self.aggregation).max(0.0),
            "timeTotal": total,
        }});
        out.push_str(&summary.to_string());
    }
}

/// Whether two sub-queries ask for the same thing.
pub(crate) fn same_query(a: &SubQuery, b: &SubQuery) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn m_parameters_parse_as_opentsdb_reads_them() {
        let q = parse_m("sum:1m-avg:rate{counter,,1000}:sys.cpu{host=*}{dc=lga|sjc}").unwrap();
        assert_eq!(q.metric, "sys.cpu");
        assert!(q.rate && q.rate_options.counter);
        assert_eq!(q.rate_options.counter_max, i64::MAX);
        assert_eq!(q.rate_options.reset_value, 1000);
        assert_eq!(q.downsample_text.as_deref(), Some("1m-avg"));
        assert_eq!(q.filters.len(), 2);
        assert!(q.filters[0].group_by && !q.filters[1].group_by);
        assert!(
            parse_m("sum:avg-1m:m").unwrap().downsample.is_none(),
            "ignored"
        );
        let err = |m: &str| parse_m(m).unwrap_err().message;
        assert_eq!(
            err("sum"),
            "Invalid parameter m=sum (not enough :-separated parts)"
        );
        assert_eq!(
            err("a:b:c:d:e:f"),
            "Invalid parameter m=a:b:c:d:e:f (too many :-separated parts)"
        );
        assert_eq!(err(""), "The query string was empty");
        let t = parse_tsuid_param("sum:rate:000001000001000001,000001000001000002").unwrap();
        assert_eq!(t.tsuids.len(), 2);
        assert!(t.rate);
        assert_eq!(
            parse_tsuid_param("").unwrap_err().message,
            "The tsuid query string was empty"
        );
    }

    proptest! {
        /// Whatever a client puts in `m=` or `tsuid=`, parsing answers (Ok or an error).
        #[test]
        fn query_parameters_never_panic(m in "[a-z0-9:{}=|,*().\\-]{0,40}") {
            let _ = parse_m(&m);
            let _ = parse_tsuid_param(&m);
            let _ = parse_metric_and_filters(&m);
        }
    }
}
