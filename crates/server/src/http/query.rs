//! `/api/query`: OpenTSDB's query API, GET (`m=agg:[downsample:][rate{...}:]metric{tags}{filters}`)
//! and POST (JSON `queries`), answered with one object per result group.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{RawQuery, State as Extract};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use hourglass_core::time::parse_time;
use hourglass_engine::query::aggregator::Aggregator;
use hourglass_engine::query::downsample::DownsampleSpec;
use hourglass_engine::query::filter::TagFilter;
use hourglass_engine::query::plan::{GroupResult, SubQuery, run, writes_null};
use hourglass_engine::query::rate::{Num, RateOptions};
use hourglass_engine::{Error as EngineError, ErrorKind};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::ApiError;
use super::error::json_response;
use crate::State;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct QueryRequest {
    start: Option<Value>,
    end: Option<Value>,
    queries: Option<Vec<SubQueryRequest>>,
    ms_resolution: bool,
    #[serde(rename = "showTSUIDs")]
    show_tsuids: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct SubQueryRequest {
    aggregator: Option<String>,
    metric: Option<String>,
    downsample: Option<String>,
    rate: bool,
    rate_options: Option<RateOptionsRequest>,
    tags: Option<HashMap<String, String>>,
    filters: Option<Vec<FilterRequest>>,
    explicit_tags: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct RateOptionsRequest {
    counter: bool,
    counter_max: Option<i64>,
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

fn engine_error(e: EngineError) -> ApiError {
    let msg = e.to_string();
    match e.kind() {
        ErrorKind::NotFound | ErrorKind::InvalidInput => {
            ApiError::bad_request(msg.clone()).with_details(msg)
        }
        _ => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, msg),
    }
}

fn time_of(v: &Value, now_ms: i64) -> Result<i64, ApiError> {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return Err(bad("Invalid time")),
    };
    parse_time(&text, now_ms).map_err(|e| bad(e.to_string()))
}

impl SubQueryRequest {
    fn into_sub(self) -> Result<SubQuery, ApiError> {
        let agg = self
            .aggregator
            .filter(|a| !a.is_empty())
            .ok_or_else(|| bad("Missing the aggregation function"))?;
        let aggregator = Aggregator::parse(&agg)
            .map_err(|_| bad(format!("No such aggregation function: {agg}")))?;
        let metric = self
            .metric
            .filter(|m| !m.is_empty())
            .ok_or_else(|| bad("Missing the metric or tsuids, provide at least one"))?;
        let downsample = self
            .downsample
            .filter(|d| !d.is_empty())
            .map(|d| DownsampleSpec::parse(&d))
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
            downsample,
            rate: self.rate,
            rate_options,
            filters,
            explicit_tags: self.explicit_tags,
        })
    }
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

fn parse_m(m: &str) -> Result<SubQuery, ApiError> {
    let parts: Vec<&str> = m.split(':').collect();
    if parts.len() < 2 {
        return Err(bad(format!(
            "Invalid parameter m={m} (not enough :-separated parts)"
        )));
    }
    if parts.len() > 5 {
        return Err(bad(format!(
            "Invalid parameter m={m} (too many :-separated parts)"
        )));
    }
    let aggregator = Aggregator::parse(parts[0])
        .map_err(|_| bad(format!("No such aggregation function: {}", parts[0])))?;
    let (metric, filters) = parse_metric_and_filters(parts[parts.len() - 1])?;
    let mut q = SubQuery {
        aggregator,
        metric,
        downsample: None,
        rate: false,
        rate_options: RateOptions::default(),
        filters,
        explicit_tags: false,
    };
    for token in &parts[1..parts.len() - 1] {
        if token.to_ascii_lowercase().starts_with("rate") {
            q.rate = true;
            if token.contains('{') {
                q.rate_options = RateOptions::parse_token(token).map_err(|e| bad(e.to_string()))?;
            }
        } else if token.starts_with(|c: char| c.is_ascii_digit()) {
            q.downsample = Some(DownsampleSpec::parse(token).map_err(|e| bad(e.to_string()))?);
        } else if *token == "explicit_tags" {
            q.explicit_tags = true;
        }
    }
    Ok(q)
}

fn value_json(v: Num, null_for_nan: bool) -> Value {
    match v {
        Num::Int(i) => json!(i),
        Num::Float(f) if f.is_nan() => {
            if null_for_nan {
                Value::Null
            } else {
                json!("NaN")
            }
        }
        Num::Float(f) => json!(f),
    }
}

fn group_json(g: &GroupResult, ms: bool, arrays: bool, tsuids: bool, null_for_nan: bool) -> Value {
    let mut o = Map::new();
    o.insert("metric".into(), json!(g.metric));
    o.insert("tags".into(), json!(g.tags));
    o.insert("aggregateTags".into(), json!(g.aggregate_tags));
    if tsuids {
        o.insert("tsuids".into(), json!(g.tsuids));
    }
    let key = |t: i64| if ms { t } else { t / 1000 };
    let dps = if arrays {
        Value::Array(
            g.dps
                .iter()
                .map(|(t, v)| json!([key(*t), value_json(*v, null_for_nan)]))
                .collect(),
        )
    } else {
        let mut m = Map::new();
        for (t, v) in &g.dps {
            m.insert(key(*t).to_string(), value_json(*v, null_for_nan));
        }
        Value::Object(m)
    };
    o.insert("dps".into(), dps);
    Value::Object(o)
}

pub(crate) async fn handle(
    method: Method,
    RawQuery(raw): RawQuery,
    Extract(state): Extract<Arc<State>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let params: Vec<(String, String)> =
        serde_urlencoded::from_str(raw.as_deref().unwrap_or("")).unwrap_or_default();
    let has = |k: &str| params.iter().any(|(p, _)| p == k);
    let get = |k: &str| params.iter().find(|(p, _)| p == k).map(|(_, v)| v.clone());
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let (start, end, subs, ms, tsuids) = match method {
        Method::GET => {
            let start = get("start").ok_or_else(|| bad("Missing parameter <code>start</code>"))?;
            let start = parse_time(&start, now_ms).map_err(|e| bad(e.to_string()))?;
            let end = get("end")
                .map(|e| parse_time(&e, now_ms))
                .transpose()
                .map_err(|e| bad(e.to_string()))?;
            let subs = params
                .iter()
                .filter(|(k, _)| k == "m")
                .map(|(_, m)| parse_m(m))
                .collect::<Result<Vec<_>, _>>()?;
            if subs.is_empty() {
                return Err(bad("Missing sub queries"));
            }
            (start, end, subs, has("ms"), has("show_tsuids"))
        }
        Method::POST => {
            if body.iter().all(u8::is_ascii_whitespace) {
                return Err(bad("Missing message content"));
            }
            let req: QueryRequest = serde_json::from_slice(&body)
                .map_err(|e| bad("Unable to parse the given JSON").with_details(e.to_string()))?;
            let start = req
                .start
                .as_ref()
                .ok_or_else(|| bad("Missing start time"))?;
            let start = time_of(start, now_ms)?;
            let end = req.end.as_ref().map(|e| time_of(e, now_ms)).transpose()?;
            let queries = req.queries.unwrap_or_default();
            if queries.is_empty() {
                return Err(bad("Missing queries"));
            }
            let subs = queries
                .into_iter()
                .map(SubQueryRequest::into_sub)
                .collect::<Result<Vec<_>, _>>()?;
            (
                start,
                end,
                subs,
                req.ms_resolution || has("ms"),
                req.show_tsuids || has("show_tsuids"),
            )
        }
        other => return Err(ApiError::method_not_allowed(&other)),
    };
    let end = end.unwrap_or(now_ms);
    if end <= start {
        return Err(bad(format!(
            "End time [{end}] must be greater than the start time [{start}]"
        )));
    }
    let arrays = has("arrays");
    let tsdb = Arc::clone(&state.tsdb);
    let results = tokio::task::spawn_blocking(move || -> Result<Vec<Value>, ApiError> {
        let mut out = Vec::new();
        for q in &subs {
            let groups = run(&tsdb, start, end, q).map_err(engine_error)?;
            let null_for_nan = writes_null(q);
            out.extend(
                groups
                    .iter()
                    .map(|g| group_json(g, ms, arrays, tsuids, null_for_nan)),
            );
        }
        Ok(out)
    })
    .await
    .map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("query failed: {e}"),
        )
    })??;
    Ok(json_response(StatusCode::OK, &Value::Array(results)))
}
