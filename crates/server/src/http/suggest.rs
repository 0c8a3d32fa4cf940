//! `/api/suggest`: names of one kind starting with a prefix, for autocompletion (Grafana's
//! template variables and health check use it). Hourglass's optional `metric`, `tagk` and
//! `tags` (`k=v,...`) restrict tag keys and values to a metric's series (RFC 0007):
//! `type=tagk&metric=m`, `type=tagv&metric=m&tagk=k`, either with `tags`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{RawQuery, State as Extract};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use hourglass_core::uid::UidKind;
use hourglass_engine::search::suggest::{MetricSuggest, suggest_in_metric};
use serde_json::Value;

use super::ApiError;
use super::error::json_response;
use super::request::{Params, json_object, small_or_blocking};
use crate::State;

/// OpenTSDB's default number of suggestions.
pub(crate) const DEFAULT_MAX: usize = 25;

/// Suggestions up to this many are read on the connection's thread (a short range read
/// costs less than handing it to another thread and back).
const SMALL_MAX: usize = 1_000;

pub(crate) async fn handle(
    method: Method,
    raw: RawQuery,
    state: Extract<Arc<State>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    serve(method, raw, state, body, true).await
}

/// `/api/suggest` (`api`), or the deprecated `/suggest`, which reads a POST's URL as a
/// GET's, never its body (OpenTSDB reads bodies from versioned API paths only).
pub(crate) async fn serve(
    method: Method,
    RawQuery(raw): RawQuery,
    Extract(state): Extract<Arc<State>>,
    body: Bytes,
    api: bool,
) -> Result<Response, ApiError> {
    let params = Params::parse(raw.as_deref());
    let from_url = method == Method::GET || (method == Method::POST && !api);
    let (kind, prefix, max, within) = match method {
        _ if from_url => (
            params.required("type")?.to_string(),
            params.get("q").unwrap_or("").to_string(),
            params.get("max").map(str::to_string),
            Within {
                metric: params.get("metric").map(str::to_string),
                tagk: params.get("tagk").map(str::to_string),
                tags: params.get("tags").map(str::to_string),
            },
        ),
        Method::POST => {
            let obj = json_object(&body)?;
            // Jackson's `HashMap<String, String>`: scalars as text, a list or an object
            // refuses the body.
            if let Some((k, v)) = obj
                .iter()
                .find(|(_, v)| matches!(v, Value::Array(_) | Value::Object(_)))
            {
                return Err(
                    ApiError::bad_request("Unable to parse the given JSON").with_details(format!(
                        "'{k}' must be a string, got {}",
                        super::request::kind_of(v)
                    )),
                );
            }
            let text = |k: &str| match obj.get(k) {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(other) => Some(other.to_string()),
            };
            let kind = text("type")
                .filter(|t| !t.is_empty())
                .ok_or_else(|| ApiError::bad_request("Missing 'type' parameter"))?;
            let within = Within {
                metric: text("metric"),
                tagk: text("tagk"),
                tags: text("tags"),
            };
            (kind, text("q").unwrap_or_default(), text("max"), within)
        }
        other => return Err(ApiError::method_not_allowed(&other)),
    };
    let kind = match kind.as_str() {
        "metrics" => UidKind::Metric,
        "tagk" => UidKind::TagKey,
        "tagv" => UidKind::TagValue,
        _ => {
            return Err(ApiError::bad_request(format!(
                "Invalid 'type' parameter:{kind}"
            )));
        }
    };
    let max = match max.as_deref().filter(|m| !m.is_empty()) {
        None => DEFAULT_MAX,
        // `Integer.parseInt`: no spaces, at most 2147483647.
        Some(m) => match m.parse::<i32>() {
            Ok(n) if n > 0 => n as usize,
            Ok(_) => DEFAULT_MAX,
            Err(_) => return Err(ApiError::bad_request("Unable to parse 'max' as a number")),
        },
    };
    // Small: a bounded range of names, or of the tag index's rows (a scan of the metric's
    // rows without the index is not).
    let bounded = max <= SMALL_MAX;
    if let Some(request) = within.request(kind, &prefix, max)? {
        let small = bounded && state.tsdb.settings().index;
        let names = small_or_blocking(&state, small, move |db| {
            suggest_in_metric(db, &request).map_err(ApiError::from)
        })
        .await?;
        let list = names.into_iter().map(Value::String).collect();
        return Ok(json_response(StatusCode::OK, &Value::Array(list)));
    }
    let names = small_or_blocking(&state, bounded, move |db| {
        db.uids()
            .suggest(kind, &prefix, max)
            .map_err(ApiError::from)
    })
    .await?;
    let list = names.into_iter().map(Value::String).collect();
    let body = Value::Array(list);
    Ok(json_response(StatusCode::OK, &body))
}

/// The optional parameters restricting a suggestion to a metric's series.
#[derive(Debug, Default)]
struct Within {
    metric: Option<String>,
    tagk: Option<String>,
    tags: Option<String>,
}

impl Within {
    /// `None` when none is given (OpenTSDB's suggest); a combination that means nothing is
    /// refused rather than ignored.
    fn request(
        self,
        kind: UidKind,
        prefix: &str,
        max: usize,
    ) -> Result<Option<MetricSuggest>, ApiError> {
        let given = |v: &Option<String>| v.as_deref().is_some_and(|v| !v.is_empty());
        if !given(&self.metric) && !given(&self.tagk) && !given(&self.tags) {
            return Ok(None);
        }
        let refuse = |why: &str| Err(ApiError::bad_request(why.to_string()));
        let metric = match (kind, self.metric.filter(|m| !m.is_empty())) {
            (UidKind::Metric, _) => {
                return refuse("'metric', 'tagk' and 'tags' apply to type=tagk and type=tagv only");
            }
            (_, None) => return refuse("Missing parameter 'metric': 'tagk' and 'tags' need it"),
            (_, Some(m)) => m,
        };
        let tagk = self.tagk.filter(|k| !k.is_empty());
        match (kind, &tagk) {
            (UidKind::TagKey, Some(_)) => {
                return refuse("'tagk' applies to type=tagv only");
            }
            (UidKind::TagValue, None) => {
                return refuse("Missing parameter 'tagk': type=tagv with 'metric' needs it");
            }
            _ => {}
        }
        let mut tags = Vec::new();
        for pair in self.tags.iter().flat_map(|t| t.split(',')) {
            if pair.is_empty() {
                continue;
            }
            match pair.split_once('=') {
                Some((k, v)) if !k.is_empty() && !v.is_empty() => {
                    tags.push((k.to_string(), v.to_string()));
                }
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "Invalid 'tags' parameter: expected k=v,...: {pair}"
                    )));
                }
            }
        }
        Ok(Some(MetricSuggest {
            metric,
            tagk,
            tags,
            prefix: prefix.to_string(),
            max,
        }))
    }
}
