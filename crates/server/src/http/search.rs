//! `/api/search/*`: `lookup` finds series by metric and tags (meta table or data table);
//! `tsmeta`, `tsmeta_summary`, `tsuids`, `uidmeta` and `annotation` answer a Lucene-style
//! query from the tag index (RFC 0007, "Search endpoints without a plugin"), where OpenTSDB
//! needs a search plugin; with the index off they answer `Searching is not enabled`.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State as Extract};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use hourglass_core::uid::hex_upper;
use hourglass_engine::search::query_string;
use hourglass_engine::search::{LookupQuery, Search, SearchType, lookup, search};
use serde_json::{Map, Value, json};

use super::ApiError;
use super::error::json_response;
use super::request::{
    Params, api_method, blocking, has_body, json_object, not_found_as, small_or_blocking,
};
use crate::State;

const TYPES: [&str; 6] = [
    "tsmeta",
    "tsmeta_summary",
    "tsuids",
    "uidmeta",
    "annotation",
    "lookup",
];

/// OpenTSDB's default lookup limit.
const DEFAULT_LIMIT: i64 = 25;

/// Lookups answered from at most this many kept candidates run on the connection's thread.
const SMALL_LOOKUP: usize = 1_000;

pub(crate) async fn handle_root(
    method: Method,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let params = Params::parse(raw.as_deref());
    check_method(&method, &params)?;
    Err(ApiError::bad_request("Invalid search query type supplied")
        .with_details("Type provided was null or empty"))
}

fn check_method(method: &Method, params: &Params) -> Result<(), ApiError> {
    let m = api_method(method, params)?;
    if m != Method::GET && m != Method::POST {
        return Err(ApiError::bad_request(format!("Unsupported method: {m}")));
    }
    Ok(())
}

pub(crate) async fn handle(
    method: Method,
    Path(kind): Path<String>,
    RawQuery(raw): RawQuery,
    Extract(state): Extract<Arc<State>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let params = Params::parse(raw.as_deref());
    check_method(&method, &params)?;
    let kind = kind.to_ascii_lowercase();
    if !TYPES.contains(&kind.as_str()) {
        return Err(ApiError::bad_request("Invalid search query type supplied")
            .with_details(format!("Unknown type: {kind}")));
    }
    if let Some(search_type) = SearchType::parse(&kind) {
        return plugin_search(&state, search_type, &params, &body).await;
    }
    let tracking = state.tsdb.settings().meta.tracks_series();
    let request = if has_body(&body) {
        from_body(&json_object(&body)?, tracking)?
    } else {
        from_params(&params, tracking)?
    };
    // A metric of `*` (also a body's default) passes: every series is looked up.
    if request.metric_text.is_none() && request.query.tags.is_empty() {
        return Err(ApiError::bad_request(
            "Missing metric and tags. Please supply at least one value.",
        ));
    }
    let started = Instant::now();
    let query = request.query.clone();
    // Small: answered from candidates this TSD keeps (few, nothing to flush first). A
    // lookup that reads the index or scans the table goes to a blocking thread.
    let small = !state.tsdb.store().is_shared()
        && hourglass_engine::search::lookup_is_kept(&state.tsdb, &query, SMALL_LOOKUP);
    let found = small_or_blocking(&state, small, move |db| {
        lookup(db, &query).map_err(|e| match e.kind() {
            hourglass_engine::ErrorKind::NotFound
                if matches!(e, hourglass_engine::Error::NoSuchId { .. }) =>
            {
                not_found_as(e, "Unable to resolve one or more TSUIDs")
            }
            _ => not_found_as(e, "Unable to resolve one or more UIDs"),
        })
    })
    .await?;
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    // Written straight as JSON, in the order and forms the object OpenTSDB's serializer
    // writes (no `serde_json::Value` built between).
    let answer = LookupAnswer {
        kind: "LOOKUP",
        metric: request.metric_text.as_deref(),
        // Not given in a body: not echoed (Jackson leaves out null fields).
        tags: request.tags_given.then(|| {
            request
                .query
                .tags
                .iter()
                .map(|(key, value)| LookupPair { key, value })
                .collect()
        }),
        limit: request.limit,
        time: (elapsed_ms * 1000.0).round() / 1000.0,
        results: found.iter().map(LookupFound).collect(),
        start_index: request.start_index,
        total_results: found.len(),
    };
    let mut out = Vec::with_capacity(256);
    serde_json::to_writer(&mut out, &answer)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(super::error::json_text_response(StatusCode::OK, out))
}

/// A lookup's answer, as OpenTSDB writes its `SearchQuery`.
#[derive(serde::Serialize)]
struct LookupAnswer<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    metric: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tags: Option<Vec<LookupPair<'a>>>,
    limit: i64,
    time: f64,
    results: Vec<LookupFound<'a>>,
    #[serde(rename = "startIndex")]
    start_index: i64,
    #[serde(rename = "totalResults")]
    total_results: usize,
}

/// A tag pair of the request, echoed (`null` for a key or value not given).
#[derive(serde::Serialize)]
struct LookupPair<'a> {
    key: &'a Option<String>,
    value: &'a Option<String>,
}

/// A series found: its TSUID, metric and tags, the tags in the order Java iterates the
/// `HashMap` `Tags.resolveIdsAsync` fills (made for this many tags).
struct LookupFound<'a>(&'a hourglass_engine::search::LookupResult);

impl serde::Serialize for LookupFound<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let r = self.0;
        let mut map = s.serialize_map(Some(3))?;
        map.serialize_entry("tsuid", &hex_upper(&r.tsuid))?;
        map.serialize_entry("metric", &r.metric)?;
        map.serialize_entry("tags", &JavaOrderTags(&r.tags))?;
        map.end()
    }
}

/// Tag pairs as an object in Java's `HashMap` order ([`super::json::java_sized_map_order`]).
struct JavaOrderTags<'a>(&'a [(String, String)]);

impl serde::Serialize for JavaOrderTags<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let keys: Vec<&str> = self.0.iter().map(|(k, _)| k.as_str()).collect();
        let mut map = s.serialize_map(Some(keys.len()))?;
        for i in super::json::java_sized_map_order(&keys, keys.len()) {
            map.serialize_entry(&self.0[i].0, &self.0[i].1)?;
        }
        map.end()
    }
}

/// A search request of one of the plugin types, as OpenTSDB's `SearchQuery` reads it.
struct SearchRequest {
    /// The query as given (None: a body without one).
    query: Option<String>,
    /// The body's `metric` (OpenTSDB's default `*`; None: given as null), echoed.
    metric: Option<String>,
    limit: i32,
    start_index: i32,
}

fn search_from_params(params: &Params) -> Result<SearchRequest, ApiError> {
    let query = params.required("query")?.to_string();
    let int = |key: &str, default: i32| -> Result<i32, ApiError> {
        match params.get(key) {
            None => Ok(default),
            // `Integer.parseInt`: no spaces, an empty value refused.
            Some(v) => v.parse::<i32>().map_err(|_| {
                ApiError::bad_request(format!("Unable to convert '{key}' to a valid number"))
            }),
        }
    };
    Ok(SearchRequest {
        query: Some(query),
        metric: Some("*".into()),
        limit: int("limit", DEFAULT_LIMIT as i32)?,
        start_index: int("start_index", 0)?,
    })
}

fn search_from_body(obj: &Map<String, Value>) -> Result<SearchRequest, ApiError> {
    let bad = |what: &str| {
        ApiError::bad_request("Unable to parse the given JSON")
            .with_details(format!("field '{what}' has the wrong type"))
    };
    let text = |k: &str, default: Option<&str>| -> Result<Option<String>, ApiError> {
        match obj.get(k) {
            None => Ok(default.map(str::to_string)),
            Some(v) => scalar_text(v).ok_or_else(|| bad(k)),
        }
    };
    let int = |k: &str, default: i32| -> Result<i32, ApiError> {
        match obj.get(k) {
            None | Some(Value::Null) => Ok(default),
            // A Java int as Jackson fills it: a float truncated.
            Some(Value::Number(n)) => n
                .as_i64()
                .or_else(|| n.as_f64().filter(|f| f.is_finite()).map(|f| f as i64))
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(|| bad(k)),
            Some(Value::String(s)) => s.trim().parse().map_err(|_| bad(k)),
            Some(_) => Err(bad(k)),
        }
    };
    Ok(SearchRequest {
        query: text("query", None)?,
        metric: text("metric", Some("*"))?,
        limit: int("limit", DEFAULT_LIMIT as i32)?,
        start_index: int("startIndex", 0)?,
    })
}

/// `tsmeta`, `tsmeta_summary`, `tsuids`, `uidmeta`, `annotation`: OpenTSDB's `SearchQuery`
/// in, the same object out with `totalResults`, `time` and `results` filled.
async fn plugin_search(
    state: &Arc<State>,
    kind: SearchType,
    params: &Params,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let request = if has_body(body) {
        search_from_body(&json_object(body)?)?
    } else {
        search_from_params(params)?
    };
    if !state.tsdb.settings().index {
        return Err(ApiError::bad_request("Searching is not enabled")
            .with_details("Searching has not been enabled on this TSD"));
    }
    for (key, value) in [
        ("limit", request.limit),
        ("startIndex", request.start_index),
    ] {
        if value < 0 {
            return Err(ApiError::bad_request(format!(
                "Unable to convert '{key}' to a valid number"
            ))
            .with_details(format!("'{key}' must be 0 or more, was {value}")));
        }
    }
    let parsed = query_string::parse(request.query.as_deref().unwrap_or(""))
        .map_err(|e| ApiError::bad_request("Unable to parse query").with_details(e.to_string()))?;
    if let Some(field) = parsed.fields().into_iter().find(|f| !kind.knows_field(f)) {
        return Err(
            ApiError::bad_request("Unable to parse query").with_details(format!(
                "Unknown field '{field}' for search type {}",
                kind.name()
            )),
        );
    }
    let started = Instant::now();
    let run = Search {
        kind,
        query: parsed,
        limit: request.limit.max(0) as usize,
        start_index: request.start_index.max(0) as usize,
        timeout: state.settings.query_limits.timeout,
    };
    let answer = blocking(&state.tsdb, move |db| {
        search(db, &run).map_err(ApiError::from)
    })
    .await?;
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    let mut out = Map::new();
    out.insert("type".into(), json!(kind.name()));
    if let Some(q) = &request.query {
        out.insert("query".into(), json!(q));
    }
    if let Some(m) = &request.metric {
        out.insert("metric".into(), json!(m));
    }
    // Jackson's order for OpenTSDB's `SearchQuery`: its fields, then `startIndex` and
    // `totalResults`, which only getters name.
    out.insert("limit".into(), json!(request.limit));
    out.insert("time".into(), json!((elapsed_ms * 1000.0).round() / 1000.0));
    out.insert("results".into(), Value::Array(answer.results));
    out.insert("startIndex".into(), json!(request.start_index));
    out.insert("totalResults".into(), json!(answer.total));
    Ok(json_response(StatusCode::OK, &Value::Object(out)))
}

struct LookupRequest {
    query: LookupQuery,
    /// The metric as the request gave it (`*` kept).
    metric_text: Option<String>,
    /// Tags were given (a URL's `m` always gives them, maybe none).
    tags_given: bool,
    limit: i64,
    start_index: i64,
}

fn limit_of(limit: i64) -> usize {
    if limit > 0 { limit as usize } else { 0 }
}

/// Where to look when the request does not say: the meta table when series tracking is on,
/// else the data table (so lookups work without meta tracking).
fn use_meta_of(given: Option<bool>, tracking: bool) -> bool {
    given.unwrap_or(tracking)
}

fn from_params(params: &Params, tracking: bool) -> Result<LookupRequest, ApiError> {
    let m = params.required("m")?;
    let (metric, tags) = parse_metric_tags(m)
        .map_err(|e| ApiError::bad_request("Unable to parse query").with_details(e))?;
    // `Integer.parseInt`: no spaces, an empty value refused.
    let limit = match params.get("limit") {
        None => DEFAULT_LIMIT,
        Some(l) => l
            .parse::<i32>()
            .map(i64::from)
            .map_err(|_| ApiError::bad_request("Unable to convert 'limit' to a valid number"))?,
    };
    let use_meta = params
        .value("use_meta")
        .or_else(|| params.value("useMeta"))
        .map(|v| v.eq_ignore_ascii_case("true"));
    Ok(LookupRequest {
        query: LookupQuery {
            metric: metric.clone().filter(|m| m != "*"),
            tags,
            use_meta: use_meta_of(use_meta, tracking),
            limit: limit_of(limit),
        },
        metric_text: metric,
        tags_given: true,
        limit,
        start_index: 0,
    })
}

/// A JSON value read into a Java `String` field as Jackson reads it: `null` as null, numbers
/// and booleans as their text; `None` for a list or an object, which refuse the body.
fn scalar_text(v: &Value) -> Option<Option<String>> {
    match v {
        Value::Null => Some(None),
        Value::String(s) => Some(Some(s.clone())),
        Value::Number(n) => Some(Some(n.to_string())),
        Value::Bool(b) => Some(Some(b.to_string())),
        Value::Array(_) | Value::Object(_) => None,
    }
}

fn from_body(obj: &Map<String, Value>, tracking: bool) -> Result<LookupRequest, ApiError> {
    let bad = |what: &str| {
        ApiError::bad_request("Unable to parse the given JSON")
            .with_details(format!("field '{what}' has the wrong type"))
    };
    let metric = match obj.get("metric") {
        None => Some("*".to_string()),
        Some(v) => scalar_text(v).ok_or_else(|| bad("metric"))?,
    };
    let mut tags = Vec::new();
    let tags_given = !matches!(obj.get("tags"), None | Some(Value::Null));
    match obj.get("tags") {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) => {
            for t in list {
                let Value::Object(p) = t else {
                    return Err(bad("tags"));
                };
                let side = |k: &str| -> Result<Option<String>, ApiError> {
                    match p.get(k) {
                        None => Ok(None),
                        Some(v) => scalar_text(v).ok_or_else(|| bad("tags")),
                    }
                };
                tags.push((side("key")?, side("value")?));
            }
        }
        Some(_) => return Err(bad("tags")),
    }
    let int = |k: &str, d: i64| -> Result<i64, ApiError> {
        match obj.get(k) {
            None | Some(Value::Null) => Ok(d),
            // A Java int as Jackson fills it: a float truncated, a string trimmed.
            Some(Value::Number(n)) => n
                .as_i64()
                .or_else(|| n.as_f64().filter(|f| f.is_finite()).map(|f| f as i64))
                .and_then(|n| i32::try_from(n).ok())
                .map(i64::from)
                .ok_or_else(|| bad(k)),
            Some(Value::String(s)) => s.trim().parse::<i32>().map(i64::from).map_err(|_| bad(k)),
            Some(_) => Err(bad(k)),
        }
    };
    let limit = int("limit", DEFAULT_LIMIT)?;
    let start_index = int("startIndex", 0)?;
    let use_meta = match obj.get("useMeta") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(Value::String(s)) => Some(s.eq_ignore_ascii_case("true")),
        Some(_) => return Err(bad("useMeta")),
    };
    let is_wild = |m: &Option<String>| m.as_deref().is_none_or(|m| m.is_empty() || m == "*");
    let query_metric = if is_wild(&metric) {
        None
    } else {
        metric.clone()
    };
    Ok(LookupRequest {
        query: LookupQuery {
            metric: query_metric,
            tags,
            use_meta: use_meta_of(use_meta, tracking),
            limit: limit_of(limit),
        },
        metric_text: metric,
        tags_given,
        limit,
        start_index,
    })
}

/// A lookup's tag key and value; None is a wildcard.
pub(crate) type TagPattern = (Option<String>, Option<String>);

/// OpenTSDB's `metric{tagk=tagv,...}` for lookups: `tagk=` / `*` any value, `=tagv` any key,
/// a leading `{` no metric.
pub(crate) fn parse_metric_tags(text: &str) -> Result<(Option<String>, Vec<TagPattern>), String> {
    let Some(open) = text.find('{') else {
        if text.is_empty() {
            return Err("Metric string was empty".into());
        }
        return Ok((Some(text.to_string()), Vec::new()));
    };
    if !text.ends_with('}') {
        return Err(format!("Missing '}}' at the end of: {text}"));
    }
    if text == "{}" {
        return Err("Missing metric and tags: {}".into());
    }
    let metric = (open > 0).then(|| text[..open].to_string());
    let inner = &text[open + 1..text.len() - 1];
    let mut tags = Vec::new();
    // Empty words are tags too (`a{b=c,}` is refused), as `Tags.splitString` splits.
    for tag in inner.split(',').filter(|_| !inner.is_empty()) {
        let wrap = |m: &str| format!("When parsing tag '{tag}': {m}");
        if tag.chars().count() < 2 {
            return Err(wrap("Missing tag pair"));
        }
        if let Some(v) = tag.strip_prefix('=') {
            tags.push((None, Some(v.to_string())));
        } else if let Some(k) = tag.strip_suffix('=') {
            tags.push((Some(k.to_string()), None));
        } else {
            let parts: Vec<&str> = tag.split('=').collect();
            match parts.as_slice() {
                [k, v] if !k.is_empty() && !v.is_empty() => {
                    tags.push((Some((*k).to_string()), Some((*v).to_string())));
                }
                _ => return Err(wrap(&format!("invalid tag: {tag}"))),
            }
        }
    }
    Ok((metric, tags))
}

#[cfg(test)]
mod tests {
    use super::parse_metric_tags;

    #[test]
    fn lookup_expressions() {
        let (m, t) = parse_metric_tags("sys.cpu{host=web01,dc=}").unwrap();
        assert_eq!(m.as_deref(), Some("sys.cpu"));
        assert_eq!(
            t,
            vec![
                (Some("host".into()), Some("web01".into())),
                (Some("dc".into()), None)
            ]
        );
        let (m, t) = parse_metric_tags("{=web01}").unwrap();
        assert_eq!(m, None);
        assert_eq!(t, vec![(None, Some("web01".into()))]);
        assert_eq!(
            parse_metric_tags("a{b").unwrap_err(),
            "Missing '}' at the end of: a{b"
        );
        assert!(
            parse_metric_tags("a{b=c=d}")
                .unwrap_err()
                .contains("invalid tag")
        );
        assert_eq!(
            parse_metric_tags("").unwrap_err(),
            "Metric string was empty"
        );
    }
}
