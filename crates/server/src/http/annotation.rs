//! `/api/annotation` (one note: GET, POST merge, PUT replace, DELETE), `/api/annotations`
//! (GET global notes of a time range) and `/api/annotation/bulk` (POST/PUT a list, DELETE a
//! time range of series or global notes).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{RawQuery, State as Extract};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use hourglass_core::time::{Tz, parse_time_in};
use hourglass_core::uid::parse_hex;
use hourglass_engine::ErrorKind;
use hourglass_engine::annotation::{self, Annotation, AnnotationUpdate};
use serde_json::{Map, Value, json};

use super::ApiError;
use super::error::json_response;
use super::request::{
    Params, api_method, blocking, check_writable, has_body, json_body, json_object, no_content,
};
use crate::State;

fn now_ms() -> i64 {
    hourglass_storage::now_ms()
}

/// A time parameter in milliseconds (OpenTSDB's date forms, absolute dates in the TSD's
/// zone); absent or empty: None.
fn time_param(params: &Params, key: &str, tz: Tz) -> Result<Option<i64>, ApiError> {
    params
        .value(key)
        .map(|t| parse_time_in(t, now_ms(), tz))
        .transpose()
        .map_err(|e| ApiError::bad_request(e.to_string()))
}

/// An annotation from the URL: times are whole seconds, as OpenTSDB reads them there.
fn from_params(params: &Params, tz: Tz) -> Result<AnnotationUpdate, ApiError> {
    let start = time_param(params, "start_time", tz)?.unwrap_or(-1);
    if start < 1 {
        return Err(ApiError::bad_request("Missing start time"));
    }
    let mut obj = Map::new();
    obj.insert("startTime".into(), json!(start / 1000));
    if let Some(end) = time_param(params, "end_time", tz)? {
        obj.insert("endTime".into(), json!(end / 1000));
    }
    for key in ["tsuid", "description", "notes"] {
        if let Some(v) = params.get(key) {
            obj.insert(key.into(), json!(v));
        }
    }
    AnnotationUpdate::from_json(&obj).map_err(ApiError::from)
}

fn from_body(body: &Bytes) -> Result<AnnotationUpdate, ApiError> {
    AnnotationUpdate::from_json(&json_object(body)?).map_err(ApiError::from)
}

pub(crate) async fn handle(
    method: Method,
    RawQuery(raw): RawQuery,
    Extract(state): Extract<Arc<State>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let params = Params::parse(raw.as_deref());
    let method = api_method(&method, &params)?;
    // The note is read before the method is looked at, as OpenTSDB reads it: one without a
    // start time is refused for that whatever the method.
    let update = if has_body(&body) {
        from_body(&body)?
    } else {
        from_params(&params, state.settings.timezone)?
    };
    if !matches!(
        method,
        Method::GET | Method::POST | Method::PUT | Method::DELETE
    ) {
        return Err(ApiError::method_not_allowed(&method));
    }
    match method {
        Method::GET => {
            let note = blocking(&state.tsdb, move |db| {
                annotation::get(db, &update.note.tsuid, update.note.start_time)
                    .map_err(ApiError::from)
            })
            .await?;
            match note {
                Some(n) => Ok(json_response(StatusCode::OK, &n.to_json())),
                None => Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    "Unable to locate annotation in storage",
                )),
            }
        }
        Method::POST | Method::PUT => {
            check_writable(&state)?;
            let overwrite = method == Method::PUT;
            let note = blocking(&state.tsdb, move |db| {
                annotation::sync(db, &update, overwrite).map_err(ApiError::from)
            })
            .await?;
            Ok(json_response(StatusCode::OK, &note.to_json()))
        }
        _ => {
            check_writable(&state)?;
            if update.note.start_time < 1 {
                return Err(
                    ApiError::bad_request("Unable to delete Annotation information")
                        .with_details("The start timestamp has not been set"),
                );
            }
            blocking(&state.tsdb, move |db| {
                annotation::delete(db, &update.note.tsuid, update.note.start_time)
                    .map_err(ApiError::from)
            })
            .await?;
            Ok(no_content())
        }
    }
}

/// GET `/api/annotations?start_time=…[&end_time=…]`: global annotations of a range. Other
/// methods write one annotation, as on `/api/annotation` (OpenTSDB serves both paths with
/// one handler).
pub(crate) async fn global(
    method: Method,
    RawQuery(raw): RawQuery,
    Extract(state): Extract<Arc<State>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let params = Params::parse(raw.as_deref());
    if api_method(&method, &params)? != Method::GET {
        return handle(method, RawQuery(raw), Extract(state), body).await;
    }
    let tz = state.settings.timezone;
    let start = time_param(&params, "start_time", tz)?.unwrap_or(-1);
    if start < 1 {
        return Err(ApiError::bad_request("Missing start time"));
    }
    // Whole seconds, as OpenTSDB reads the range here.
    let start = start - start.rem_euclid(1000);
    // No end: no bound (OpenTSDB takes the current time in milliseconds for seconds there).
    let end = time_param(&params, "end_time", tz)?.unwrap_or(i64::MAX);
    if end < start {
        return Err(ApiError::bad_request(
            "The end timestamp cannot be less than the start timestamp",
        ));
    }
    let notes = blocking(&state.tsdb, move |db| {
        annotation::global_between(db, start, end).map_err(ApiError::from)
    })
    .await?;
    Ok(json_response(
        StatusCode::OK,
        &Value::Array(notes.iter().map(Annotation::to_json).collect()),
    ))
}

pub(crate) async fn bulk(
    method: Method,
    RawQuery(raw): RawQuery,
    Extract(state): Extract<Arc<State>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let params = Params::parse(raw.as_deref());
    let api = api_method(&method, &params)?;
    match api {
        Method::POST | Method::PUT => {
            check_writable(&state)?;
            let list = match json_body(&body)? {
                Value::Array(items) => items,
                _ => {
                    return Err(ApiError::bad_request("Unable to parse the given JSON")
                        .with_details("expected a JSON array of annotations"));
                }
            };
            let mut updates = Vec::with_capacity(list.len());
            for item in &list {
                let Value::Object(obj) = item else {
                    return Err(ApiError::bad_request("Unable to parse the given JSON")
                        .with_details("expected a JSON array of annotations"));
                };
                updates.push(AnnotationUpdate::from_json(obj).map_err(ApiError::from)?);
            }
            let overwrite = api == Method::PUT;
            let notes = blocking(&state.tsdb, move |db| {
                let mut out = Vec::with_capacity(updates.len());
                for u in &updates {
                    match annotation::sync(db, u, overwrite) {
                        Ok(n) => out.push(n.to_json()),
                        Err(e) if e.kind() == ErrorKind::NotModified => {}
                        Err(e) => {
                            let msg = e.to_string();
                            return Err(match e.kind() {
                                ErrorKind::InvalidInput | ErrorKind::NotFound => {
                                    ApiError::bad_request(msg).with_details(format!(
                                        "Annotation error: TSUID: {} Start: {}  Description: {}",
                                        u.note.tsuid, u.note.start_time, u.note.description
                                    ))
                                }
                                _ => ApiError::from(e),
                            });
                        }
                    }
                }
                Ok(out)
            })
            .await?;
            Ok(json_response(StatusCode::OK, &Value::Array(notes)))
        }
        Method::DELETE => {
            check_writable(&state)?;
            bulk_delete(&state, &params, &body).await
        }
        _ => Err(ApiError::method_not_allowed(&method)),
    }
}

async fn bulk_delete(
    state: &Arc<State>,
    params: &Params,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let (start, end, tsuids, global) = if has_body(body) {
        let obj = json_object(body)?;
        let text = |k: &str| match obj.get(k) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => Some(other.to_string()),
        };
        let tsuids = match obj.get("tsuids") {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) => Some(
                items
                    .iter()
                    .map(|i| i.as_str().unwrap_or_default().to_string())
                    .collect::<Vec<_>>(),
            ),
            Some(_) => {
                return Err(ApiError::bad_request("Unable to parse the given JSON")
                    .with_details("'tsuids' must be a list"));
            }
        };
        let global = match obj.get("global") {
            None => false,
            Some(v) => super::json::java_flag(v).ok_or_else(|| {
                ApiError::bad_request("Unable to parse the given JSON")
                    .with_details(format!("'global' must be a boolean, got {v}"))
            })?,
        };
        (text("startTime"), text("endTime"), tsuids, global)
    } else {
        let start = params.required("start_time")?.to_string();
        let tsuids = params
            .get("tsuids")
            .map(|t| t.split(',').map(|s| s.trim().to_string()).collect());
        (
            Some(start),
            params.value("end_time").map(str::to_string),
            tsuids,
            params.has("global"),
        )
    };
    let start_text = start
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ApiError::bad_request("Missing the start time value"))?;
    if !global && tsuids.as_ref().is_none_or(Vec::is_empty) {
        return Err(ApiError::bad_request(
            "Missing the TSUIDs or global annotations flag",
        ));
    }
    let (now, tz) = (now_ms(), state.settings.timezone);
    let start_ms =
        parse_time_in(&start_text, now, tz).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let end_ms = match end.filter(|e| !e.is_empty()) {
        Some(e) => parse_time_in(&e, now, tz).map_err(|e| ApiError::bad_request(e.to_string()))?,
        None => now,
    };
    let mut ids = Vec::new();
    for t in tsuids.iter().flatten() {
        ids.push(parse_hex(t).map_err(|e| ApiError::bad_request(e.to_string()))?);
    }
    let deleted = blocking(&state.tsdb, move |db| {
        let mut total = 0u64;
        if global {
            total += annotation::delete_range(db, None, start_ms, end_ms)
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
        }
        for id in &ids {
            total += annotation::delete_range(db, Some(id), start_ms, end_ms)
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
        }
        Ok(total)
    })
    .await?;
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "tsuids": tsuids,
            "global": global,
            "startTime": start_ms,
            "endTime": end_ms,
            "totalDeleted": deleted,
        }),
    ))
}
