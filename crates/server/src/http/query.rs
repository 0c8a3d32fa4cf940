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
use super::error::{CountedText, json_text_response};
use super::json::java_bool;
use super::request::small_or_blocking;
use super::request::url_params;
use crate::State;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct QueryRequest {
    start: Option<Value>,
    end: Option<Value>,
    timezone: Option<String>,
    #[serde(deserialize_with = "java_bool")]
    use_calendar: bool,
    /// Each sub-query as its object, in document order (`tags` and `filters` are read in
    /// the order given, as OpenTSDB's setters are called).
    queries: Option<Vec<Value>>,
    #[serde(deserialize_with = "java_bool")]
    ms_resolution: bool,
    #[serde(rename = "showTSUIDs", deserialize_with = "java_bool")]
    show_tsuids: bool,
    #[serde(deserialize_with = "java_bool")]
    no_annotations: bool,
    #[serde(deserialize_with = "java_bool")]
    global_annotations: bool,
    #[serde(deserialize_with = "java_bool")]
    show_query: bool,
    #[serde(deserialize_with = "java_bool")]
    show_stats: bool,
    #[serde(deserialize_with = "java_bool")]
    show_summary: bool,
    #[serde(deserialize_with = "java_bool")]
    delete: bool,
    #[serde(deserialize_with = "java_bool")]
    override_byte_limit: bool,
    #[serde(deserialize_with = "java_bool")]
    override_data_point_limit: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct SubQueryRequest {
    aggregator: Option<String>,
    metric: Option<String>,
    tsuids: Option<Vec<String>>,
    downsample: Option<String>,
    #[serde(deserialize_with = "java_bool")]
    rate: bool,
    rate_options: Option<RateOptionsRequest>,
    tags: Option<HashMap<String, String>>,
    filters: Option<Vec<FilterRequest>>,
    #[serde(deserialize_with = "java_bool")]
    explicit_tags: bool,
    /// Histogram options and rollup options (RFC 0008).
    percentiles: Option<serde_json::Value>,
    #[serde(deserialize_with = "java_bool")]
    show_histogram_buckets: bool,
    #[serde(deserialize_with = "java_bool")]
    pre_aggregate: bool,
    rollup_usage: Option<String>,
}

/// `rateOptions` as OpenTSDB's `RateOptions` reads it: `counter` (or its setter's name
/// `isCounter`), `counterMax`, `resetValue`, `dropResets`; any other field refuses the body.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
struct RateOptionsRequest {
    #[serde(alias = "isCounter", deserialize_with = "java_bool")]
    counter: bool,
    #[serde(deserialize_with = "super::json::opt_long")]
    counter_max: Option<i64>,
    #[serde(deserialize_with = "super::json::opt_long")]
    reset_value: Option<i64>,
    #[serde(deserialize_with = "java_bool")]
    drop_resets: bool,
}

/// A `filters` entry as OpenTSDB's `TagVFilter.Builder` reads it (`groupBy`, or the field's
/// own name `group_by`; unknown fields ignored).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct FilterRequest {
    #[serde(rename = "type")]
    kind: Option<String>,
    tagk: Option<String>,
    filter: Option<String>,
    #[serde(rename = "groupBy", alias = "group_by", deserialize_with = "java_bool")]
    group_by: bool,
}

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::bad_request(msg)
}

/// An error OpenTSDB meets while its JSON reader fills the query (a filter its builder
/// refuses): the body is refused, with the reason in the details.
fn unparsable(why: impl Into<String>) -> ApiError {
    bad("Unable to parse the given JSON").with_details(why)
}

/// A `start` or `end` of a JSON body as OpenTSDB's `String` field holds it: numbers and
/// booleans as their text; `None` for `null`.
fn time_text(v: &Value) -> Result<Option<String>, ApiError> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        Value::Number(n) => Ok(Some(n.to_string())),
        Value::Bool(b) => Ok(Some(b.to_string())),
        other => Err(unparsable(format!(
            "Cannot deserialize value of type `java.lang.String` from {other}"
        ))),
    }
}

/// Whether OpenTSDB's `DateTime.parseDateTimeString` reads `text` as an absolute date with a
/// format (the only case that looks the time zone up).
fn reads_zone(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    let ms = text
        .strip_suffix("ms")
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
    !ms && lower != "now"
        && !lower.ends_with("-ago")
        && (text.contains('/') || text.contains(':'))
        && matches!(text.len(), 10 | 16 | 19)
}

/// A time of the query, read in the zone named `zone` (`None`: the TSD's,
/// `tsd.core.timezone`); a zone that is not known fails only when an absolute date reads it,
/// in OpenTSDB's words.
pub(crate) fn query_time(
    text: &str,
    now_ms: i64,
    zone: Option<&str>,
    default: Tz,
) -> Result<i64, ApiError> {
    let tz = match zone.map(parse_timezone) {
        Some(Ok(tz)) => tz,
        Some(Err(_)) if reads_zone(text) => {
            return Err(bad(format!(
                "Invalid timezone name: {}",
                zone.unwrap_or_default()
            )));
        }
        _ => default,
    };
    parse_time_in(text, now_ms, tz).map_err(|e| bad(e.to_string()))
}

/// A sub-query as OpenTSDB holds it between reading and validating
/// (`TSSubQuery.validateAndSetQuery`): the aggregator and downsampling still as text.
#[derive(Debug)]
pub(crate) struct RawSub {
    aggregator: String,
    downsample: Option<String>,
    /// The rest of the sub-query (its aggregator a placeholder until validated).
    q: SubQuery,
    /// `rateOptions` (`rate{...}`) as given: echoed by `show_query` (`null` when not).
    rate_options: Option<RateOptions>,
}

impl RawSub {
    fn new(aggregator: &str, metric: &str) -> RawSub {
        RawSub {
            aggregator: aggregator.to_string(),
            downsample: None,
            q: SubQuery::new(Aggregator::Sum, metric),
            rate_options: None,
        }
    }

    /// OpenTSDB's checks of one sub-query, in its order and words.
    pub(crate) fn validate(self) -> Result<(SubQuery, Echo), ApiError> {
        let RawSub {
            aggregator,
            downsample,
            mut q,
            rate_options,
        } = self;
        if aggregator.is_empty() {
            return Err(bad("Missing the aggregation function"));
        }
        q.aggregator = Aggregator::parse(&aggregator)
            .map_err(|_| bad(format!("No such aggregation function: {aggregator}")))?;
        if q.metric.is_empty() && q.tsuids.is_empty() {
            return Err(bad("Missing the metric or tsuids, provide at least one"));
        }
        let downsample = downsample.filter(|d| !d.is_empty());
        q.downsample = downsample
            .as_deref()
            .map(DownsampleSpec::parse)
            .transpose()
            .map_err(|e| bad(e.to_string()))?;
        q.downsample_text = downsample;
        Ok((q, Echo { rate_options }))
    }
}

/// What `show_query` echoes of a sub-query beyond what runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Echo {
    /// `rateOptions` as the request gave them (`null` when it did not).
    pub(crate) rate_options: Option<RateOptions>,
}

impl Echo {
    /// The echo of a sub-query built elsewhere: its rate options when it is a rate.
    pub(crate) fn of(q: &SubQuery) -> Echo {
        Echo {
            rate_options: q.rate.then_some(q.rate_options),
        }
    }
}

/// A filter of a JSON body, built as OpenTSDB's `TagVFilter.Builder` builds it (the type
/// name as written: `Wildcard` is no type); a refusal refuses the body.
fn json_filter(f: FilterRequest) -> Result<TagFilter, ApiError> {
    let kind = f.kind.unwrap_or_default();
    let tagk = f.tagk.unwrap_or_default();
    if kind.is_empty() {
        return Err(unparsable("The filter type cannot be null or empty"));
    }
    if tagk.is_empty() {
        return Err(unparsable("The tagk cannot be null or empty"));
    }
    if kind != kind.to_ascii_lowercase() {
        return Err(unparsable(format!(
            "Could not find a tag value filter of the type: {kind}"
        )));
    }
    TagFilter::new(&kind, &tagk, &f.filter.unwrap_or_default(), f.group_by)
        .map_err(|e| unparsable(e.to_string()))
}

/// `tags` of a JSON sub-query as `TagVFilter.tagsToFilters` turns them into filters.
fn json_tag_filters(tags: HashMap<String, String>) -> Result<Vec<TagFilter>, ApiError> {
    let mut filters: Vec<TagFilter> = Vec::new();
    for (k, v) in tags {
        let f = TagFilter::from_legacy(&k, &v, true).map_err(|e| unparsable(e.to_string()))?;
        add_group_by(&mut filters, f);
    }
    Ok(filters)
}

/// Adds a group-by filter as `TagVFilter.mapToFilters` does: one equal to a filter already
/// there makes that one group by instead.
fn add_group_by(filters: &mut Vec<TagFilter>, f: TagFilter) {
    match filters
        .iter_mut()
        .find(|e| e.tagk == f.tagk && e.type_name == f.type_name && e.expression == f.expression)
    {
        Some(existing) => existing.group_by = true,
        None => filters.push(f),
    }
}

impl SubQueryRequest {
    /// Reads one entry of `queries` as OpenTSDB's JSON reader fills a `TSSubQuery`: `tags`
    /// and `filters` each replace the filters the other set, so the later of the two wins.
    fn read(v: Value) -> Result<RawSub, ApiError> {
        let order = |key: &str| v.as_object().and_then(|o| o.keys().position(|k| k == key));
        let tags_last = order("tags") > order("filters");
        let r: SubQueryRequest =
            serde_json::from_value(v).map_err(|e| unparsable(e.to_string()))?;
        let tag_filters = r.tags.map(json_tag_filters).transpose()?;
        let json_filters = r
            .filters
            .map(|list| {
                list.into_iter()
                    .map(json_filter)
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        let filters = match (tag_filters, json_filters) {
            (Some(t), Some(_)) if tags_last => t,
            (_, Some(f)) => f,
            (Some(t), None) => t,
            (None, None) => Vec::new(),
        };
        let percentiles = sorted_percentiles(json_percentiles(r.percentiles.as_ref())?);
        let rollup_usage = r.rollup_usage.as_deref().map(rollup_usage).transpose()?;
        let rate_options = r.rate_options.map(|o| RateOptions {
            counter: o.counter,
            counter_max: o.counter_max.unwrap_or(i64::MAX),
            reset_value: o.reset_value.unwrap_or(0),
            drop_resets: o.drop_resets,
        });
        let mut raw = RawSub::new(
            r.aggregator.as_deref().unwrap_or_default(),
            r.metric.as_deref().unwrap_or_default(),
        );
        raw.downsample = r.downsample;
        raw.rate_options = rate_options;
        let q = &mut raw.q;
        q.tsuids = r
            .tsuids
            .unwrap_or_default()
            .into_iter()
            .filter(|t| !t.is_empty())
            .collect();
        q.rate = r.rate;
        q.rate_options = rate_options.unwrap_or_default();
        q.filters = filters;
        q.explicit_tags = r.explicit_tags;
        q.rollup_usage = rollup_usage;
        q.pre_aggregate = r.pre_aggregate;
        q.percentiles = percentiles;
        q.show_histogram_buckets = r.show_histogram_buckets;
        Ok(raw)
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

/// One `tagk=value` of an `m=` parameter, as OpenTSDB's `Tags.parse` reads it: exactly one
/// `=`, both sides non-empty.
fn tag_pair(tag: &str) -> Result<(&str, &str), String> {
    let kv: Vec<&str> = tag.split('=').collect();
    match kv[..] {
        [k, v] if !k.is_empty() && !v.is_empty() => Ok((k, v)),
        _ => Err(format!("invalid tag: {tag}")),
    }
}

/// `metric{tags}{filters}` of a GET `m=` parameter, as OpenTSDB's
/// `Tags.parseWithMetricAndFilters` reads it: the text must end at a `}`; the tags are the
/// first braces, the filters the last ones (read first, so a tag equal to a filter makes
/// that filter group by); an empty filter ends the filters, an empty tag ends the tags when
/// filters follow (else it is an invalid tag).
fn parse_metric_and_filters(text: &str) -> Result<(String, Vec<TagFilter>), ApiError> {
    if text.is_empty() {
        return Err(bad("Metric cannot be null or empty"));
    }
    let Some(curly) = text.find('{') else {
        return Ok((text.to_string(), Vec::new()));
    };
    let len = text.len();
    if !text.ends_with('}') {
        return Err(bad(format!("Missing '}}' at the end of: {text}")));
    }
    if curly + 2 == len {
        return Ok((text[..curly].to_string(), Vec::new()));
    }
    // The text ends with `}`: there is one.
    let close = text.find('}').unwrap_or(len - 1);
    let mut filters = Vec::new();
    if close != len - 1 {
        let bracket = text.rfind('{').unwrap_or(curly);
        for filter in text[bracket + 1..len - 1].split(',') {
            if filter.is_empty() {
                break;
            }
            let f = tag_pair(filter)
                .and_then(|(k, v)| TagFilter::from_legacy(k, v, false).map_err(|e| e.to_string()))
                .map_err(|e| bad(format!("When parsing filter '{filter}': {e}")))?;
            filters.push(f);
        }
    }
    if close < curly {
        // Java's `substring` of a negative length.
        return Err(bad(format!(
            "String index out of range: {}",
            close as i64 - curly as i64 - 1
        )));
    }
    for tag in text[curly + 1..close].split(',') {
        if tag.is_empty() && close != len - 1 {
            break;
        }
        let f = tag_pair(tag)
            .and_then(|(k, v)| TagFilter::from_legacy(k, v, true).map_err(|e| e.to_string()))
            .map_err(|e| bad(format!("When parsing tag '{tag}': {e}")))?;
        add_group_by(&mut filters, f);
    }
    Ok((text[..curly].to_string(), filters))
}

/// Splits `AGG:[tokens:]LAST` into its parts (2 to 5), as OpenTSDB does before anything is
/// checked (the aggregator is checked with the rest of the sub-query).
fn split_param<'a>(text: &'a str, empty: &str) -> Result<Vec<&'a str>, ApiError> {
    if text.is_empty() {
        return Err(bad(empty));
    }
    let parts: Vec<&str> = text.split(':').collect();
    if parts.len() < 2 || parts.len() > 5 {
        let which = if parts.len() < 2 {
            "not enough"
        } else {
            "too many"
        };
        return Err(bad(format!(
            "Invalid parameter m={text} ({which} :-separated parts)"
        )));
    }
    Ok(parts)
}

/// A GET `m=` sub-query, checked (the form other endpoints take).
pub(crate) fn parse_m(m: &str) -> Result<SubQuery, ApiError> {
    Ok(read_m(m)?.validate()?.0)
}

/// A GET `m=` sub-query as read, before its checks.
fn read_m(m: &str) -> Result<RawSub, ApiError> {
    let parts = split_param(m, "The query string was empty")?;
    let (metric, filters) = parse_metric_and_filters(parts[parts.len() - 1])?;
    let mut raw = RawSub::new(parts[0], &metric);
    raw.q.filters = filters;
    apply_tokens(&mut raw, &parts[1..parts.len() - 1], false)?;
    Ok(raw)
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

/// The middle `:`-separated tokens of `m=` and `tsuid=`: rate, downsampling, the histogram
/// ones (`percentiles[...]`, `show-histogram-buckets`), and for `m=` only explicit_tags and
/// the rollup tokens (`pre-agg`, `rollup_*`); anything else is ignored, and an empty token
/// fails (OpenTSDB reads its first character), as OpenTSDB does.
fn apply_tokens(raw: &mut RawSub, tokens: &[&str], tsuids: bool) -> Result<(), ApiError> {
    for token in tokens {
        let lower = token.to_ascii_lowercase();
        let q = &mut raw.q;
        if lower.starts_with("rate") {
            q.rate = true;
            if token.contains('{') {
                let o = RateOptions::parse_token(token).map_err(|e| bad(e.to_string()))?;
                q.rate_options = o;
                raw.rate_options = Some(o);
            }
        } else if token.is_empty() {
            return Err(bad("String index out of range: 0"));
        } else if token.starts_with(|c: char| c.is_ascii_digit()) {
            raw.downsample = Some(token.to_string());
        } else if !tsuids && lower == "pre-agg" {
            q.pre_aggregate = true;
        } else if !tsuids && lower.starts_with("rollup_") {
            q.rollup_usage = Some(rollup_usage(token)?);
        } else if lower.starts_with("percentiles") {
            q.percentiles = sorted_percentiles(token_percentiles(token)?);
        } else if lower.starts_with("show-histogram-buckets") {
            q.show_histogram_buckets = true;
        } else if !tsuids && lower.starts_with("explicit_tags") {
            q.explicit_tags = true;
        }
    }
    Ok(())
}

/// A GET `tsuid=AGG:[tokens:]TSUID[,TSUID...]` sub-query, checked.
pub(crate) fn parse_tsuid_param(text: &str) -> Result<SubQuery, ApiError> {
    Ok(read_tsuid_param(text)?.validate()?.0)
}

/// A GET `tsuid=` sub-query as read, before its checks.
fn read_tsuid_param(text: &str) -> Result<RawSub, ApiError> {
    let parts = split_param(text, "The tsuid query string was empty")?;
    let mut raw = RawSub::new(parts[0], "");
    raw.q.tsuids = parts[parts.len() - 1]
        .split(',')
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect();
    apply_tokens(&mut raw, &parts[1..parts.len() - 1], true)?;
    Ok(raw)
}

/// The sub-queries of a URL as read: its `tsuid=` parameters, then its `m=` ones (OpenTSDB
/// reads them in that order), or `Missing sub queries`.
pub(crate) fn read_url_sub_queries(params: &[(String, String)]) -> Result<Vec<RawSub>, ApiError> {
    let mut subs = Vec::new();
    for (k, v) in params {
        if k == "tsuid" {
            subs.push(read_tsuid_param(v)?);
        }
    }
    for (k, v) in params {
        if k == "m" {
            subs.push(read_m(v)?);
        }
    }
    if subs.is_empty() {
        return Err(bad("Missing sub queries"));
    }
    Ok(subs)
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

/// `value`'s JSON (compact, as `Display` writes a `serde_json::Value`) appended to an
/// answer's bytes; writing to memory does not fail, and none of the values written here is
/// one serde refuses (`null` if it were).
pub(crate) fn push_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    let start = out.len();
    if serde_json::to_writer(&mut *out, value).is_err() {
        out.truncate(start);
        out.extend_from_slice(b"null");
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

/// The `query` object of showQuery: the sub-query as OpenTSDB 2.4's JSON writer describes
/// its `TSSubQuery`, in that order (fields first, then getters), with the fields it writes
/// whatever was asked (`filterTagKs`: the filtered tag keys' UIDs in base64, sorted;
/// `useFuzzyFilter`, `useMultiGets`, `histogramQuery`) and `rateOptions` as given (`null`
/// when not).
fn sub_query_json(
    tsdb: &hourglass_engine::Tsdb,
    q: &SubQuery,
    echo: &Echo,
    index: usize,
    o: &Outcome,
) -> Value {
    use base64::Engine as _;
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
    let width = tsdb.settings().schema.tagk_width;
    let mut tagks: Vec<Vec<u8>> = q
        .filters
        .iter()
        .filter_map(|f| {
            tsdb.uids()
                .get_id(hourglass_core::uid::UidKind::TagKey, &f.tagk)
                .ok()
        })
        .map(|uid| uid.to_bytes(width))
        .collect();
    tagks.sort();
    tagks.dedup();
    let filter_tagks = if q.filters.is_empty() {
        Value::Null
    } else {
        json!(
            tagks
                .iter()
                .map(|t| base64::engine::general_purpose::STANDARD.encode(t))
                .collect::<Vec<_>>()
        )
    };
    json!({
        "aggregator": q.aggregator.name(),
        "metric": q.metric,
        "tsuids": if q.tsuids.is_empty() { Value::Null } else { json!(q.tsuids) },
        "downsample": q.downsample_text,
        "rate": q.rate,
        "filters": filters,
        "percentiles": if q.percentiles.is_empty() {
            Value::Null
        } else {
            // Java's floats as Jackson writes them (`99.9`, not the double nearest).
            json!(q.percentiles.iter().map(|p| {
                hourglass_core::histogram::java_float_text(*p).parse::<f64>().unwrap_or(f64::from(*p))
            }).collect::<Vec<f64>>())
        },
        "index": index,
        "rateOptions": match &echo.rate_options {
            Some(r) => json!({
                "counter": r.counter,
                "counterMax": r.counter_max,
                "resetValue": r.reset_value,
                "dropResets": r.drop_resets,
            }),
            None => Value::Null,
        },
        "filterTagKs": filter_tagks,
        "explicitTags": q.explicit_tags,
        "useFuzzyFilter": true,
        "preAggregate": q.pre_aggregate,
        "rollupUsage": q.rollup_usage,
        "rollupTable": o.rollup_table.as_deref().unwrap_or("raw"),
        "showHistogramBuckets": q.show_histogram_buckets,
        "useMultiGets": true,
        "tags": tags,
        "histogramQuery": !q.percentiles.is_empty() || q.show_histogram_buckets,
    })
}

fn millis(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Writes result groups as `/api/query` answers them.
pub(crate) struct Serialized<'a> {
    pub(crate) tsdb: &'a hourglass_engine::Tsdb,
    pub(crate) flags: &'a Flags,
    /// The global annotations to write with each group (`global_annotations`).
    pub(crate) global: Option<Value>,
}

impl Serialized<'_> {
    /// One group `g` of sub-query `q` (number `index` of the request, `echo` what showQuery
    /// tells of it) that ran as `o`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn group(
        &self,
        out: &mut Vec<u8>,
        q: &SubQuery,
        echo: &Echo,
        index: usize,
        o: &Outcome,
        g: &GroupResult,
    ) {
        let flags = self.flags;
        out.extend_from_slice(b"{\"metric\":");
        push_json(out, &g.metric);
        out.extend_from_slice(b",\"tags\":");
        push_json(out, &g.tags);
        out.extend_from_slice(b",\"aggregateTags\":");
        push_json(out, &g.aggregate_tags);
        if flags.show_query {
            out.extend_from_slice(b",\"query\":");
            push_json(out, &sub_query_json(self.tsdb, q, echo, index, o));
        }
        if flags.show_tsuids {
            out.extend_from_slice(b",\"tsuids\":");
            push_json(out, &json!(g.tsuids));
        }
        if !flags.no_annotations && !g.annotations.is_empty() {
            out.extend_from_slice(b",\"annotations\":");
            push_json(out, &annotations_json(&g.annotations));
        }
        if let Some(global) = &self.global {
            out.extend_from_slice(b",\"globalAnnotations\":");
            push_json(out, &global);
        }
        out.extend_from_slice(b",\"dps\":");
        let null_for_nan = writes_null(q);
        super::dps::write_dps(out, &g.dps, flags.ms, flags.arrays, null_for_nan);
        if flags.show_stats {
            let s = &o.stats;
            // Keys in order, as OpenTSDB writes its stats (a sorted map).
            let stats = json!({
                "aggregationTime": millis(s.aggregation_time),
                "bytesFetched": s.bytes,
                "dpsPreFilter": s.points,
                "emittedDPs": g.dps.len(),
                "queryIndex": index,
                "queryScanTime": millis(s.scan_time),
                "rowsPreFilter": s.rows,
                "seriesMatched": s.series,
            });
            out.extend_from_slice(b",\"stats\":");
            push_json(out, &stats);
        }
        out.push(b'}');
    }
}

pub(crate) async fn handle(
    method: Method,
    RawQuery(raw): RawQuery,
    Extract(state): Extract<Arc<State>>,
    access: Option<axum::Extension<crate::auth::Access>>,
    pairs: Option<axum::Extension<super::front::QueryPairs>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let params = match pairs {
        Some(axum::Extension(super::front::QueryPairs(pairs))) => pairs,
        None => Arc::new(url_params(raw.as_deref())),
    };
    // A parameter given more than once: its last value, as OpenTSDB reads it.
    let get = |k: &str| {
        params
            .iter()
            .rev()
            .find(|(p, _)| p == k)
            .map(|(_, v)| v.clone())
    };
    let now_ms = hourglass_storage::now_ms();
    // OpenTSDB refuses the DELETE method before reading anything when deleting is off.
    if method == Method::DELETE && !state.settings.allow_delete {
        return Err(bad("Bad request")
            .with_details("Deleting data is not enabled (tsd.http.query.allow_delete=false)"));
    }
    let mut flags = Flags {
        delete: method == Method::DELETE,
        ..Flags::from_url(&params)
    };
    // GET reads the URL whatever the body; so does DELETE without a body.
    let url_form = method == Method::GET
        || (method == Method::DELETE && body.iter().all(u8::is_ascii_whitespace));
    // The request as OpenTSDB holds it before `TSQuery.validateAndSetQuery`.
    let mut zone: Option<String> = None;
    let mut use_calendar = false;
    let (start, end, raws) = match method {
        _ if url_form => {
            let start = get("start")
                .filter(|s| !s.is_empty())
                .ok_or_else(|| bad("Missing parameter <code>start</code>"))?;
            (Some(start), get("end"), read_url_sub_queries(&params)?)
        }
        Method::POST | Method::DELETE => {
            if body.iter().all(u8::is_ascii_whitespace) {
                return Err(bad("Missing message content")
                    .with_details("Supply valid JSON formatted data in the body of your request"));
            }
            let req: QueryRequest =
                super::json::from_slice(&body).map_err(|e| unparsable(e.to_string()))?;
            // A body says it all: of the URL's flags only `arrays` (read as the answer is
            // written) counts.
            flags = Flags {
                arrays: flags.arrays,
                delete: flags.delete,
                ..Flags::default()
            };
            let queries = req
                .queries
                .ok_or_else(|| bad("Missing queries"))?
                .into_iter()
                .map(SubQueryRequest::read)
                .collect::<Result<Vec<_>, _>>()?;
            let start = req.start.as_ref().map(time_text).transpose()?.flatten();
            let end = req.end.as_ref().map(time_text).transpose()?.flatten();
            zone = req.timezone.filter(|n| !n.is_empty());
            use_calendar = req.use_calendar;
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
            (start, end, queries)
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
    // `TSQuery.validateAndSetQuery`: the times, then the sub-queries one by one (each one's
    // downsampling then reading the time zone).
    let start = start
        .filter(|s| !s.is_empty())
        .ok_or_else(|| bad("Missing start time"))?;
    let default_zone = state.settings.timezone;
    let start = query_time(&start, now_ms, zone.as_deref(), default_zone)?;
    let end = match end.filter(|e| !e.is_empty()) {
        Some(e) => query_time(&e, now_ms, zone.as_deref(), default_zone)?,
        None => now_ms,
    };
    if end <= start {
        return Err(bad(format!(
            "End time [{end}] must be greater than the start time [{start}]"
        )));
    }
    if raws.is_empty() {
        return Err(bad("Missing queries"));
    }
    let mut subs: Vec<(SubQuery, Echo)> = Vec::with_capacity(raws.len());
    for raw in raws {
        let (mut q, echo) = raw.validate()?;
        if let Some(ds) = q.downsample {
            let tz = match zone.as_deref().map(parse_timezone) {
                Some(Ok(tz)) => tz,
                Some(Err(_)) => {
                    return Err(bad("The timezone specification could not be found"));
                }
                None => Tz::UTC,
            };
            q.downsample = Some(ds.in_zone(tz, use_calendar).map_err(ApiError::from)?);
        }
        subs.push((q, echo));
    }
    let tz = zone
        .as_deref()
        .and_then(|n| parse_timezone(n).ok())
        .unwrap_or(Tz::UTC);
    // Duplicate sub-queries are answered once, as OpenTSDB does.
    let mut unique: Vec<SubQuery> = Vec::with_capacity(subs.len());
    let mut echoes: Vec<Echo> = Vec::with_capacity(subs.len());
    for (q, echo) in subs {
        if !unique
            .iter()
            .zip(&echoes)
            .any(|(u, e)| same_query(u, &q) && *e == echo)
        {
            unique.push(q);
            echoes.push(echo);
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
        .map(|_| format!("{start} {end} {tz:?} {use_calendar} {flags:?} {unique:?} {echoes:?}"));
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
    let (body, watch, counted) = small_or_blocking(&state, small, move |tsdb| {
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
            tsdb,
            flags: &flags,
            global,
        };
        // The answer built as bytes: its pieces are ASCII or JSON serde wrote, no UTF-8
        // check needed on the way.
        let mut out = Vec::with_capacity(4096);
        out.push(b'[');
        // The answer's text counts against the query memory budget until it is sent.
        let mut counted = CountedText::new(tsdb);
        let mut first = true;
        let mut summary = Summary::default();
        for (index, q) in unique.iter().enumerate() {
            let outcome = run(tsdb, start, end, q, &options[index]).map_err(ApiError::from)?;
            summary.add_run(&outcome);
            for g in &outcome.groups {
                if !first {
                    out.push(b',');
                }
                first = false;
                summary.add_emitted(g.dps.len());
                ser.group(&mut out, q, &echoes[index], index, &outcome, g);
                counted.grew(&out);
            }
        }
        if flags.show_summary {
            summary.write(&mut out, first, started);
        }
        out.push(b']');
        Ok((Bytes::from(out), watch, counted))
    })
    .await?;
    if let (Some(cache), Some(key), Some(watch)) = (&state.query_cache, cache_key, watch) {
        cache.insert(key, body.clone(), watch);
    }
    Ok(json_text_response(StatusCode::OK, counted.into_body(body)))
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
    pub(crate) fn write(&self, out: &mut Vec<u8>, first: bool, started: std::time::Instant) {
        if !first {
            out.push(b',');
        }
        let total = millis(started.elapsed());
        // Keys in order, as OpenTSDB writes its stats (a sorted map).
        let summary = json!({"statsSummary": {
            "aggregationTime": self.aggregation,
            "datapoints": self.points,
            "rawDatapoints": self.raw,
            "serializationTime": (total - self.storage - self.aggregation).max(0.0),
            "storageTime": self.storage,
            "timeTotal": total,
        }});
        push_json(out, &summary);
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
        // The filters' braces are read first.
        assert_eq!(
            (q.filters[0].tagk.as_str(), q.filters[0].group_by),
            ("dc", false)
        );
        assert_eq!(
            (q.filters[1].tagk.as_str(), q.filters[1].group_by),
            ("host", true)
        );
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
