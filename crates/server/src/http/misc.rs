//! Small endpoints: version, aggregators, config, stats, dropcaches, metadata, 404.

use std::sync::Arc;

use axum::extract::State as Extract;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::ApiError;
use super::error::json_response;
use crate::State;
use crate::stats::{collect, hostname};

fn get_or_post(method: &Method) -> Result<(), ApiError> {
    if *method == Method::GET || *method == Method::POST {
        Ok(())
    } else {
        Err(ApiError::method_not_allowed(method))
    }
}

pub(crate) async fn version(method: Method) -> Result<Response, ApiError> {
    get_or_post(&method)?;
    let v = env!("CARGO_PKG_VERSION");
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "version": "2.4.0",
            "short_revision": v,
            "full_revision": format!("hourglass-{v}"),
            "timestamp": "0",
            "repo_status": "MINT",
            "user": "hourglass",
            "host": hostname(),
            "repo": "hourglass",
            "branch": "main",
            "hourglass": v,
        }),
    ))
}

pub(crate) async fn aggregators(method: Method) -> Result<Response, ApiError> {
    get_or_post(&method)?;
    Ok(json_response(
        StatusCode::OK,
        &json!(hourglass_engine::query::aggregator::NAMES),
    ))
}

pub(crate) async fn filters(method: Method) -> Result<Response, ApiError> {
    use hourglass_engine::query::filter::{TYPES, describe};
    get_or_post(&method)?;
    let mut map = Map::new();
    for t in TYPES {
        if let Some((description, examples)) = describe(t) {
            map.insert(
                (*t).to_string(),
                json!({ "examples": examples, "description": description }),
            );
        }
    }
    Ok(json_response(StatusCode::OK, &Value::Object(map)))
}

pub(crate) async fn config(
    method: Method,
    Extract(state): Extract<Arc<State>>,
) -> Result<Response, ApiError> {
    get_or_post(&method)?;
    let mut map = Map::new();
    for (k, v) in state.config.iter() {
        map.insert(k.to_string(), Value::String(v.to_string()));
    }
    Ok(json_response(StatusCode::OK, &Value::Object(map)))
}

pub(crate) async fn stats(
    method: Method,
    Extract(state): Extract<Arc<State>>,
) -> Result<Response, ApiError> {
    get_or_post(&method)?;
    let host = hostname();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let list: Vec<Value> = collect(&state)
        .into_iter()
        .map(|s| {
            let mut tags = Map::new();
            if let Some((k, v)) = s.tag {
                tags.insert(k.to_string(), Value::String(v));
            }
            tags.insert("host".into(), Value::String(host.clone()));
            json!({ "metric": s.metric, "timestamp": now, "value": s.value.to_string(), "tags": tags })
        })
        .collect();
    Ok(json_response(StatusCode::OK, &Value::Array(list)))
}

pub(crate) async fn dropcaches(
    method: Method,
    Extract(state): Extract<Arc<State>>,
) -> Result<Response, ApiError> {
    // GET and DELETE, as OpenTSDB allows.
    if method != Method::GET && method != Method::DELETE {
        return Err(ApiError::method_not_allowed(&method));
    }
    state.tsdb.uids().drop_caches();
    Ok(json_response(
        StatusCode::OK,
        &json!({ "status": "200", "message": "Caches dropped" }),
    ))
}

/// scollector posts metadata here; it is accepted and not stored.
pub(crate) async fn metadata_put() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

pub(crate) async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "Endpoint not found")
}
