//! Small endpoints: version, aggregators, config, stats, dropcaches, metadata, 404.

use std::sync::Arc;

use axum::extract::{Path, State as Extract};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::ApiError;
use super::error::json_response;
use crate::State;
use crate::stats::{collect, hostname, proc_status_bytes, report_tags};

fn get_or_post(method: &Method) -> Result<(), ApiError> {
    if *method == Method::GET || *method == Method::POST {
        Ok(())
    } else {
        Err(ApiError::method_not_allowed(method))
    }
}

pub(crate) async fn version(
    method: Method,
    Extract(state): Extract<Arc<State>>,
) -> Result<Response, ApiError> {
    get_or_post(&method)?;
    Ok(version_json(&state))
}

/// For load balancers: 200 while the TSD serves, 503 once it is stopping. Hourglass's own
/// (OpenTSDB has none); with `tsd.core.authentication.allow_unauthenticated` it can answer
/// without credentials.
pub(crate) async fn health(
    method: Method,
    Extract(state): Extract<Arc<State>>,
) -> Result<Response, ApiError> {
    get_or_post(&method)?;
    if state.stopping() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Shutting down",
        ));
    }
    Ok(json_response(StatusCode::OK, &json!({ "status": "ok" })))
}

/// OpenTSDB's version map: its API version, this build's revision and build time (Unix
/// seconds as a string, as OpenTSDB's `BuildData.timestamp`), keys in the order OpenTSDB's
/// hash map gives them; then Hourglass's own version.
pub(crate) fn version_json(state: &State) -> Response {
    let text = state
        .version_answer
        .get_or_init(|| version_map(state).to_string().into());
    super::error::json_text_response(StatusCode::OK, text.clone())
}

/// The map [`version_json`] answers.
pub(crate) fn version_map(state: &State) -> Value {
    let b = &state.settings.build;
    let short: String = b.revision.chars().take(7).collect();
    json!({
            "short_revision": short,
            "repo": "hourglass",
            "host": hostname(),
            "version": "2.4.1",
            "full_revision": b.revision,
            "repo_status": "MINT",
            "user": "hourglass",
            "branch": "main",
            "timestamp": b.timestamp.to_string(),
            "hourglass": b.version,
    })
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
    // Every key with its default, then what was set over it, in key order; any key naming a
    // password is masked, as OpenTSDB masks it.
    let mut all: std::collections::BTreeMap<&str, &str> =
        hourglass_core::config::DEFAULTS.iter().copied().collect();
    for (k, v) in state.config.iter() {
        all.insert(k, v);
    }
    let map: Map<String, Value> = all
        .into_iter()
        .map(|(k, v)| {
            let v = if k.to_ascii_uppercase().contains("PASS") {
                "********"
            } else {
                v
            };
            (k.to_string(), Value::String(v.to_string()))
        })
        .collect();
    Ok(json_response(StatusCode::OK, &Value::Object(map)))
}

pub(crate) async fn stats(
    method: Method,
    Extract(state): Extract<Arc<State>>,
) -> Result<Response, ApiError> {
    get_or_post(&method)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let report = report_tags(&state);
    let list: Vec<Value> = collect(&state)
        .into_iter()
        .map(|s| {
            let mut tags = Map::new();
            for (k, v) in s.tags {
                tags.insert(k.to_string(), Value::String(v));
            }
            for (k, v) in &report {
                tags.insert(k.clone(), Value::String(v.clone()));
            }
            json!({ "metric": s.metric, "timestamp": now, "value": s.value.to_string(), "tags": tags })
        })
        .collect();
    Ok(json_response(StatusCode::OK, &Value::Array(list)))
}

/// `/api/stats/query`, `/threads`, `/jvm` and `/region_clients`, in OpenTSDB's shapes with
/// this process's figures.
pub(crate) async fn stats_sub(
    method: Method,
    Path(sub): Path<String>,
    Extract(state): Extract<Arc<State>>,
) -> Result<Response, ApiError> {
    get_or_post(&method)?;
    let body = match sub.as_str() {
        "query" => state.stats.queries.to_json(),
        "threads" => threads_json(),
        "jvm" => process_json(&state),
        "region_clients" => storage_json(&state),
        _ => return stats(method, Extract(state)).await,
    };
    Ok(json_response(StatusCode::OK, &body))
}

/// The process's threads, from `/proc/self/task`.
fn threads_json() -> Value {
    let mut threads = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Value::Array(threads);
    };
    for entry in dir.flatten() {
        let id: u64 = entry.file_name().to_string_lossy().parse().unwrap_or(0);
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ... priority ...`: the name may hold spaces, read around it.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = &stat[open + 1..close];
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let state = match fields.first().copied() {
            Some("R") => "RUNNABLE",
            Some("D") => "BLOCKED",
            Some("T" | "t") => "WAITING",
            Some("Z" | "X") => "TERMINATED",
            _ => "TIMED_WAITING",
        };
        let priority: i64 = fields.get(15).and_then(|p| p.parse().ok()).unwrap_or(0);
        // Keys in the order OpenTSDB's hash map gives them.
        threads.push(json!({
            "threadID": id,
            "stack": [],
            "name": name,
            "state": state,
            "interrupted": false,
            "priority": priority,
        }));
    }
    Value::Array(threads)
}

/// OpenTSDB's `/api/stats/jvm` shape, filled with the process's figures: memory is resident
/// and virtual size, the runtime is this server.
fn process_json(state: &State) -> Value {
    let uptime = state.started.elapsed().as_millis() as i64;
    let now = hourglass_storage::now_ms();
    let rss = proc_status_bytes("VmRSS:");
    let peak = proc_status_bytes("VmHWM:");
    let virtual_size = proc_status_bytes("VmSize:");
    let load: f64 = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(-1.0);
    // Keys in the order OpenTSDB's hash maps give them; Hourglass's own last.
    json!({
        "memory": {
            "nonHeapMemoryUsage": {"init": 0, "used": 0, "committed": 0, "max": 0},
            "objectsPendingFinalization": 0,
            "heapMemoryUsage": {"init": 0, "used": rss, "committed": rss, "max": virtual_size},
            "peakResident": peak,
            "bufferedPointBytes": state.tsdb.buffered_bytes(),
        },
        "os": {"systemLoadAverage": load},
        "runtime": {
            "vmName": "hourglass",
            "vmVersion": env!("CARGO_PKG_VERSION"),
            "startTime": now - uptime,
            "vmVendor": "hourglass",
            "uptime": uptime,
        },
        "pools": {},
        "gc": {},
    })
}

/// OpenTSDB's `/api/stats/region_clients` shape: one entry for the store this TSD writes
/// to, with the calls made to it.
fn storage_json(state: &State) -> Value {
    let store = state.tsdb.store_stats();
    let w = state.tsdb.write_stats();
    // Keys in the order OpenTSDB's hash map gives them.
    json!([{
        "pendingBreached": w.batches_throttled.load(std::sync::atomic::Ordering::Relaxed),
        "writesBlocked": state.stats.throttled.load(std::sync::atomic::Ordering::Relaxed),
        "inflightBreached": 0,
        "dead": state.tsdb.store_failing(),
        "rpcsInFlight": store.in_flight(),
        "rpcsSent": store.total_calls(),
        "rpcResponsesUnknown": store.failed(),
        "pendingBatchedRPCs": state.tsdb.buffered_points(),
        "endpoint": state.tsdb.store().backend(),
        "rpcResponsesTimedout": 0,
        "rpcid": store.total_calls(),
        "rpcsTimedout": 0,
        "pendingRPCs": 0,
    }])
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
    // In the order OpenTSDB's hash map gives them.
    Ok(json_response(
        StatusCode::OK,
        &json!({ "message": "Caches dropped", "status": "200" }),
    ))
}

/// scollector posts metadata here; it is accepted and not stored.
pub(crate) async fn metadata_put() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

pub(crate) async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "Endpoint not found")
}

/// What the router answers for a path it does not know: OpenTSDB's JSON error under
/// `/api`, its HTML page elsewhere.
pub(crate) async fn fallback(uri: axum::http::Uri) -> Response {
    if uri.path().starts_with("/api") {
        return not_found().await.into_response();
    }
    let json = super::request::Params::parse(uri.query()).has("json");
    super::deprecated::not_found(json)
}
