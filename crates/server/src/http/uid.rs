//! `/api/uid/*`: assign UIDs, rename them, and read or edit UID and series meta data.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{RawQuery, State as Extract};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use hourglass_core::names::validate_name;
use hourglass_core::uid::{UidKind, parse_hex};
use hourglass_engine::meta::{
    MetaUpdate, create_ts_meta, delete_ts_meta, delete_uid_meta, find_ts_metas, get_ts_meta,
    get_uid_meta, parse_type, sync_ts_meta, sync_uid_meta, tsuid_for,
};
use hourglass_engine::{Error as EngineError, Tsdb};
use serde_json::{Map, Value, json};

use super::ApiError;
use super::error::json_response;
use super::request::{
    Params, api_method, blocking, check_writable, has_body, json_body, json_object, no_content,
    not_found_as,
};
use crate::State;

/// Any other `/api/uid` path.
pub(crate) async fn other() -> ApiError {
    ApiError::new(
        StatusCode::NOT_IMPLEMENTED,
        "Other UID endpoints have not been implemented yet",
    )
}

/// The name lists of an assign request, by type key as given.
fn assign_lists(
    method: &Method,
    params: &Params,
    body: &Bytes,
) -> Result<Vec<(String, Vec<String>)>, ApiError> {
    let mut lists = Vec::new();
    if *method == Method::GET {
        for key in ["metric", "tagk", "tagv"] {
            if let Some(v) = params.value(key) {
                let mut names: Vec<String> = v.split(',').map(str::to_string).collect();
                while names.last().is_some_and(String::is_empty) {
                    names.pop();
                }
                lists.push((key.to_string(), names));
            }
        }
    } else {
        // Lists of names as OpenTSDB's JSON reader takes them: numbers and booleans read as
        // their text, anything else (a lone name included) refused.
        for (key, v) in json_object(body)? {
            let refused = |what: &Value| {
                ApiError::bad_request("Unable to parse the given JSON")
                    .with_details(format!("'{key}' must be a list of names, got {what}"))
            };
            let Value::Array(items) = &v else {
                return Err(refused(&v));
            };
            let mut names = Vec::with_capacity(items.len());
            for item in items {
                names.push(match item {
                    Value::String(s) => s.clone(),
                    Value::Number(_) | Value::Bool(_) => item.to_string(),
                    _ => return Err(refused(&v)),
                });
            }
            lists.push((key, names));
        }
    }
    Ok(lists)
}

pub(crate) async fn assign(
    method: Method,
    RawQuery(raw): RawQuery,
    Extract(state): Extract<Arc<State>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    if method != Method::GET && method != Method::POST {
        return Err(ApiError::method_not_allowed(&method));
    }
    check_writable(&state)?;
    let params = Params::parse(raw.as_deref());
    let lists = assign_lists(&method, &params, &body)?;
    if lists.is_empty() {
        return Err(ApiError::bad_request("Missing values to assign UIDs"));
    }
    let special = state.tsdb.settings().allow_special_chars.clone();
    let (out, failed) = blocking(&state.tsdb, move |db| {
        let mut assigned: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        let mut errors: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (key, names) in lists {
            // The type in any case, as OpenTSDB reads it; answered under the key as sent.
            let kind = match key.to_lowercase().as_str() {
                "metric" => Some(UidKind::Metric),
                "tagk" => Some(UidKind::TagKey),
                "tagv" => Some(UidKind::TagValue),
                _ => None,
            };
            assigned.entry(key.clone()).or_default();
            for name in names {
                let result = assign_one(db, kind, &key, &name, &special);
                match result {
                    Ok(uid) => {
                        assigned.entry(key.clone()).or_default().insert(name, uid);
                    }
                    Err(msg) => {
                        errors
                            .entry(format!("{key}_errors"))
                            .or_default()
                            .insert(name, msg);
                    }
                }
            }
        }
        let failed = !errors.is_empty();
        let mut all: BTreeMap<String, BTreeMap<String, String>> = assigned;
        all.extend(errors);
        // OpenTSDB's response is a Java HashMap; these keys come out in this order.
        let order = [
            "tagv_errors",
            "metric",
            "tagk",
            "tagk_errors",
            "metric_errors",
            "tagv",
        ];
        let mut out = Map::new();
        for key in order {
            if let Some(m) = all.remove(key) {
                out.insert(key.to_string(), json!(m));
            }
        }
        for (key, m) in all {
            out.insert(key, json!(m));
        }
        Ok((Value::Object(out), failed))
    })
    .await?;
    let status = if failed {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    Ok(json_response(status, &out))
}

/// One name of an assign request: the name is checked before the type, as OpenTSDB checks
/// them.
fn assign_one(
    db: &Tsdb,
    kind: Option<UidKind>,
    word: &str,
    name: &str,
    special: &str,
) -> Result<String, String> {
    validate_name(word, name, special).map_err(|e| e.to_string())?;
    let kind = kind.ok_or_else(|| "Unknown type name".to_string())?;
    let uids = db.uids();
    let width = db.settings().schema.uid_width(kind);
    match uids.get_id(kind, name) {
        Ok(uid) => Err(format!(
            "Name already exists with UID: {}",
            uid.to_hex(width)
        )),
        Err(EngineError::NoSuchName { .. }) => uids
            .get_or_create_id(kind, name)
            .map(|uid| uid.to_hex(width))
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

pub(crate) async fn rename(
    method: Method,
    RawQuery(raw): RawQuery,
    Extract(state): Extract<Arc<State>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    if method != Method::GET && method != Method::POST {
        return Err(
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "Method not allowed").with_details(
                format!("The HTTP method[{method}] is not permitted for this endpoint"),
            ),
        );
    }
    check_writable(&state)?;
    let params = Params::parse(raw.as_deref());
    let mut fields: Vec<(String, String)> = Vec::new();
    if method == Method::GET {
        for key in ["metric", "tagk", "tagv", "name"] {
            if let Some(v) = params.value(key) {
                fields.push((key.to_string(), v.to_string()));
            }
        }
    } else {
        // A map of texts as OpenTSDB's JSON reader takes it: numbers and booleans as their
        // text, a null as not given; a list or an object refuses the body.
        for (k, v) in json_object(&body)? {
            let v = match v {
                Value::String(s) => s,
                Value::Null => continue,
                Value::Number(_) | Value::Bool(_) => v.to_string(),
                other => {
                    return Err(ApiError::bad_request("Unable to parse the given JSON")
                        .with_details(format!("'{k}' must be a name, got {other}")));
                }
            };
            fields.push((k, v));
        }
    }
    let new_name = fields
        .iter()
        .find(|(k, _)| k == "name")
        .map(|(_, v)| v.clone());
    let target = fields.iter().find(|(k, _)| k != "name").cloned();
    let (Some(new_name), Some((type_word, old))) = (new_name, target) else {
        return Err(ApiError::bad_request(
            "Missing necessary values to rename UID",
        ));
    };
    let special = state.tsdb.settings().allow_special_chars.clone();
    let result = blocking(&state.tsdb, move |db| {
        Ok(rename_one(db, &type_word, &old, &new_name, &special))
    })
    .await?;
    Ok(match result {
        Ok(()) => json_response(StatusCode::OK, &json!({ "result": "true" })),
        Err(msg) => json_response(
            StatusCode::BAD_REQUEST,
            &json!({ "result": "false", "error": msg }),
        ),
    })
}

fn rename_one(db: &Tsdb, word: &str, old: &str, new: &str, special: &str) -> Result<(), String> {
    validate_name(word, old, special).map_err(|e| e.to_string())?;
    validate_name(word, new, special).map_err(|e| e.to_string())?;
    let kind = match word.to_ascii_lowercase().as_str() {
        "metric" => UidKind::Metric,
        "tagk" => UidKind::TagKey,
        "tagv" => UidKind::TagValue,
        _ => return Err("Unknown type name".into()),
    };
    match db.uids().rename(kind, old, new) {
        Ok(_) => Ok(()),
        Err(EngineError::NoSuchName { .. }) => Err(format!("Name(\"{old}\") does not exist")),
        Err(e) => Err(e.to_string()),
    }
}

/// A JSON body with 200.
fn ok_json(result: Result<Value, ApiError>) -> Result<Response, ApiError> {
    result.map(|v| json_response(StatusCode::OK, &v))
}

fn hex_arg(text: &str) -> Result<Vec<u8>, ApiError> {
    parse_hex(text).map_err(|e| ApiError::bad_request(e.to_string()))
}

/// uid and type of a UID meta request: from a JSON body or the URL.
struct UidTarget {
    kind: UidKind,
    uid: Vec<u8>,
    update: MetaUpdate,
}

fn uid_target(params: &Params, body: &Bytes, missing: &str) -> Result<UidTarget, ApiError> {
    let (uid, kind, update) = if has_body(body) {
        let obj = match json_body(body)? {
            Value::Object(o) => o,
            _ => return Err(ApiError::bad_request("Unable to parse the given JSON")),
        };
        let text = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let uid = text("uid");
        let kind = text("type");
        // A type OpenTSDB's JSON reader cannot read refuses the body, before anything else
        // is looked at.
        if !kind.is_empty()
            && let Err(e) = parse_type(&kind)
        {
            return Err(
                ApiError::bad_request("Unable to parse the given JSON").with_details(e.to_string())
            );
        }
        let missing_err = |d: &str| {
            if missing.is_empty() {
                ApiError::bad_request(d).with_details(d)
            } else {
                ApiError::bad_request(missing).with_details(d)
            }
        };
        if uid.is_empty() {
            return Err(missing_err("Missing UID"));
        }
        if kind.is_empty() {
            return Err(missing_err("Missing type"));
        }
        let update = MetaUpdate::from_json(&obj).map_err(ApiError::from)?;
        (uid, kind, update)
    } else {
        let uid = params.required("uid")?.to_string();
        let kind = params.required("type")?.to_string();
        let mut obj = Map::new();
        for (key, field) in [
            ("display_name", "displayName"),
            ("description", "description"),
            ("notes", "notes"),
        ] {
            if let Some(v) = params.get(key) {
                obj.insert(field.into(), json!(v));
            }
        }
        let update = MetaUpdate::from_json(&obj).map_err(ApiError::from)?;
        (uid, kind, update)
    };
    let kind = parse_type(&kind).map_err(ApiError::from)?;
    Ok(UidTarget {
        kind,
        uid: hex_arg(&uid)?,
        update,
    })
}

pub(crate) async fn uidmeta(
    method: Method,
    RawQuery(raw): RawQuery,
    Extract(state): Extract<Arc<State>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let params = Params::parse(raw.as_deref());
    let method = api_method(&method, &params)?;
    const NOT_FOUND: &str = "Could not find the requested UID";
    match method {
        Method::GET => {
            // Both parameters are required before either is read, as OpenTSDB requires them.
            let (uid, kind) = (params.required("uid")?, params.required("type")?);
            let kind = parse_type(kind).map_err(ApiError::from)?;
            let uid = hex_arg(uid)?;
            let meta = blocking(&state.tsdb, move |db| {
                get_uid_meta(db, kind, &uid).map_err(|e| not_found_as(e, NOT_FOUND))
            })
            .await?;
            Ok(json_response(StatusCode::OK, &meta.to_json()))
        }
        Method::POST | Method::PUT => {
            check_writable(&state)?;
            let t = uid_target(&params, &body, "")?;
            let overwrite = method == Method::PUT;
            ok_json(
                blocking(&state.tsdb, move |db| {
                    sync_uid_meta(db, t.kind, &t.uid, &t.update, overwrite)
                        .map(|m| m.to_json())
                        .map_err(|e| not_found_as(e, NOT_FOUND))
                })
                .await,
            )
        }
        Method::DELETE => {
            check_writable(&state)?;
            let t = uid_target(&params, &body, "Unable to delete UIDMeta information")?;
            blocking(&state.tsdb, move |db| {
                delete_uid_meta(db, t.kind, &t.uid).map_err(ApiError::from)
            })
            .await?;
            Ok(no_content())
        }
        other => Err(ApiError::method_not_allowed(&other)),
    }
}

/// `metric{tagk=tagv,...}` with exact pairs only (TSMeta by name), read as OpenTSDB reads it
/// there (`Tags.parseWithMetric`): `metric{}` has no tags, a pair given twice with one value
/// counts once, and errors are in its words.
fn parse_exact(m: &str) -> Result<(String, Vec<(String, String)>), ApiError> {
    let bad = |msg: String| ApiError::bad_request(msg.clone()).with_details(msg);
    let (metric, inner) = super::request::split_metric(m).map_err(bad)?;
    if metric.is_empty() {
        return Err(ApiError::bad_request("Metric cannot be null or empty"));
    }
    let tags = super::request::exact_tag_pairs(inner).map_err(bad)?;
    Ok((metric.to_string(), tags))
}

pub(crate) async fn tsmeta(
    method: Method,
    RawQuery(raw): RawQuery,
    Extract(state): Extract<Arc<State>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let params = Params::parse(raw.as_deref());
    let method = api_method(&method, &params)?;
    const NOT_FOUND: &str = "Could not find Timeseries meta data";
    const UIDS_NOT_FOUND: &str = "Unable to find one of the UIDs";
    match method {
        Method::GET => {
            if params.has("tsuid") {
                let tsuid = hex_arg(params.get("tsuid").unwrap_or(""))?;
                let meta = blocking(&state.tsdb, move |db| {
                    get_ts_meta(db, &tsuid).map_err(|e| not_found_as(e, NOT_FOUND))
                })
                .await?;
                return match meta {
                    Some(m) => Ok(json_response(StatusCode::OK, &m.to_json())),
                    None => Err(ApiError::new(StatusCode::NOT_FOUND, NOT_FOUND)),
                };
            }
            let (metric, tags) = parse_exact(params.required("m")?)?;
            let list = blocking(&state.tsdb, move |db| {
                find_ts_metas(db, &metric, &tags).map_err(|e| not_found_as(e, UIDS_NOT_FOUND))
            })
            .await?;
            Ok(json_response(
                StatusCode::OK,
                &Value::Array(list.iter().map(|m| m.to_json()).collect()),
            ))
        }
        Method::POST | Method::PUT => {
            check_writable(&state)?;
            let overwrite = method == Method::PUT;
            let (tsuid, update) = if has_body(&body) {
                let obj = json_object(&body)?;
                let tsuid = obj
                    .get("tsuid")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                (tsuid, MetaUpdate::from_json(&obj).map_err(ApiError::from)?)
            } else {
                (
                    params.get("tsuid").unwrap_or("").to_string(),
                    update_from_params(&params)?,
                )
            };
            if !tsuid.is_empty() {
                let tsuid = hex_arg(&tsuid)?;
                return ok_json(
                    blocking(&state.tsdb, move |db| {
                        sync_ts_meta(db, &tsuid, &update, overwrite)
                            .map(|m| m.to_json())
                            .map_err(|e| not_found_as(e, NOT_FOUND))
                    })
                    .await,
                );
            }
            // No TSUID, in the body or the URL: the series is named by `m`.
            let (metric, tags) = parse_exact(params.required("m")?)?;
            let create = params.get("create") == Some("true");
            ok_json(
                blocking(&state.tsdb, move |db| {
                    let tsuid = tsuid_for(db, &metric, &tags)
                        .map_err(|e| not_found_as(e, UIDS_NOT_FOUND))?;
                    let exists = get_ts_meta(db, &tsuid).map_err(ApiError::from)?.is_some();
                    let meta = if exists {
                        sync_ts_meta(db, &tsuid, &update, overwrite)
                    } else if create {
                        create_ts_meta(db, &tsuid, &update)
                    } else {
                        return Err(ApiError::bad_request(
                            "Could not find TSMeta, specify \"create=true\" to create a new one.",
                        ));
                    };
                    meta.map(|m| m.to_json())
                        .map_err(|e| not_found_as(e, NOT_FOUND))
                })
                .await,
            )
        }
        Method::DELETE => {
            check_writable(&state)?;
            let tsuid = if has_body(&body) {
                json_object(&body)?
                    .get("tsuid")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            } else {
                params.get("tsuid").unwrap_or("").to_string()
            };
            if tsuid.is_empty() {
                return Err(ApiError::bad_request("Unable to delete TSMeta information")
                    .with_details("Missing UID"));
            }
            let tsuid = hex_arg(&tsuid)?;
            blocking(&state.tsdb, move |db| {
                delete_ts_meta(db, &tsuid).map_err(ApiError::from)
            })
            .await?;
            Ok(no_content())
        }
        other => Err(ApiError::method_not_allowed(&other)),
    }
}

/// A TSMeta update from URL parameters (OpenTSDB's names).
fn update_from_params(params: &Params) -> Result<MetaUpdate, ApiError> {
    let mut obj = Map::new();
    for (key, field) in [
        ("display_name", "displayName"),
        ("description", "description"),
        ("notes", "notes"),
        ("units", "units"),
        ("data_type", "dataType"),
    ] {
        if let Some(v) = params.get(key) {
            obj.insert(field.into(), json!(v));
        }
    }
    // Empty numbers are not given, as OpenTSDB reads them; the retention is a Java int
    // (no spaces), max and min floats (spaces around them allowed).
    if let Some(v) = params.value("retention") {
        let n: i32 = v
            .parse()
            .map_err(|_| ApiError::bad_request("Unable to parse 'retention' value"))?;
        obj.insert("retention".into(), json!(n));
    }
    for key in ["max", "min"] {
        if let Some(v) = params.value(key) {
            let n: f64 = v
                .trim()
                .parse()
                .map_err(|_| ApiError::bad_request(format!("Unable to parse '{key}' value")))?;
            obj.insert(key.into(), json!(n));
        }
    }
    MetaUpdate::from_json(&obj).map_err(ApiError::from)
}
