//! `/api/suggest`: names of one kind starting with a prefix, for autocompletion (Grafana's
//! template variables and health check use it).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{RawQuery, State as Extract};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use hourglass_core::uid::UidKind;
use serde_json::Value;

use super::ApiError;
use super::error::json_response;
use super::request::{Params, blocking, json_object};
use crate::State;

/// OpenTSDB's default number of suggestions.
pub(crate) const DEFAULT_MAX: usize = 25;

pub(crate) async fn handle(
    method: Method,
    RawQuery(raw): RawQuery,
    Extract(state): Extract<Arc<State>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let params = Params::parse(raw.as_deref());
    let (kind, prefix, max) = match method {
        Method::GET => (
            params.required("type")?.to_string(),
            params.get("q").unwrap_or("").to_string(),
            params.get("max").map(str::to_string),
        ),
        Method::POST => {
            let obj = json_object(&body)?;
            let text = |k: &str| match obj.get(k) {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(other) => Some(other.to_string()),
            };
            let kind = text("type")
                .filter(|t| !t.is_empty())
                .ok_or_else(|| ApiError::bad_request("Missing 'type' parameter"))?;
            (kind, text("q").unwrap_or_default(), text("max"))
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
        Some(m) => match m.trim().parse::<i64>() {
            Ok(n) if n > 0 => n as usize,
            Ok(_) => DEFAULT_MAX,
            Err(_) => return Err(ApiError::bad_request("Unable to parse 'max' as a number")),
        },
    };
    let names = blocking(&state.tsdb, move |db| {
        db.uids()
            .suggest(kind, &prefix, max)
            .map_err(ApiError::from)
    })
    .await?;
    let list = names.into_iter().map(Value::String).collect();
    let body = Value::Array(list);
    Ok(json_response(StatusCode::OK, &body))
}
