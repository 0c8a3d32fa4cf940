//! `/api/tree*`: tree definitions, rules, branches, test walks, collisions and not-matched
//! series, with OpenTSDB 2.4.1's shapes, status codes and words (its `TreeRpc`; RFC 0010).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State as Extract};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use hourglass_core::uid::{hex_upper, parse_hex};
use hourglass_engine::meta::get_ts_meta;
use hourglass_engine::tree::{
    self, RuleUpdate, TreeBuilder, TreeUpdate, check_tree_id, parse_branch_id, tree_id_bytes,
};
use hourglass_engine::{Error as EngineError, ErrorKind, Tsdb};
use serde_json::{Map, Value, json};

use super::ApiError;
use super::error::json_response;
use super::request::{
    Params, api_method, blocking, check_writable, has_body, json_body, json_object, no_content,
};
use crate::State;

fn not_found(message: String) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, message)
}

fn unsupported() -> ApiError {
    ApiError::bad_request("Unsupported HTTP request method")
}

/// `/api/tree`.
pub(crate) async fn root(
    method: Method,
    raw: RawQuery,
    state: Extract<Arc<State>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    dispatch(String::new(), method, raw, state, body).await
}

/// `/api/tree/<endpoint>` (any case; deeper segments ignored).
pub(crate) async fn sub(
    Path(rest): Path<String>,
    method: Method,
    raw: RawQuery,
    state: Extract<Arc<State>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let endpoint = rest.split('/').next().unwrap_or("").to_ascii_lowercase();
    dispatch(endpoint, method, raw, state, body).await
}

async fn dispatch(
    endpoint: String,
    method: Method,
    RawQuery(raw): RawQuery,
    Extract(state): Extract<Arc<State>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let params = Params::parse(raw.as_deref());
    let method = api_method(&method, &params)?;
    if matches!(method, Method::POST | Method::PUT | Method::DELETE)
        && matches!(endpoint.as_str(), "" | "rule" | "rules")
    {
        check_writable(&state)?;
    }
    let tsdb = state.tsdb.clone();
    match endpoint.as_str() {
        "" => handle_tree(&tsdb, method, params, body).await,
        "branch" => handle_branch(&tsdb, method, params).await,
        "rule" => handle_rule(&tsdb, method, params, body).await,
        "rules" => handle_rules(&tsdb, method, params, body).await,
        "test" => handle_test(&tsdb, method, params, body).await,
        "collisions" => handle_failures(&tsdb, method, params, body, true).await,
        "notmatched" => handle_failures(&tsdb, method, params, body, false).await,
        _ => Err(not_found("This endpoint is not supported".into())),
    }
}

/// A JSON object of distinct keys in the order Java iterates a `HashMap` made with
/// `new HashMap<>(initial)` and filled in this order.
fn java_map(entries: Vec<(String, Value)>, initial: usize) -> Value {
    let keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
    let order = super::json::java_sized_map_order(&keys, initial);
    let mut slots: Vec<Option<(String, Value)>> = entries.into_iter().map(Some).collect();
    let map: Map<String, Value> = order
        .into_iter()
        .filter_map(|i| slots.get_mut(i).and_then(Option::take))
        .collect();
    Value::Object(map)
}

fn ok(v: &Value) -> Response {
    json_response(StatusCode::OK, v)
}

/// The tree id of the `treeid` parameter: 0 when absent.
fn param_tree_id(params: &Params, required: bool) -> Result<i64, ApiError> {
    let text = if required {
        Some(params.required("treeid")?)
    } else {
        params.get("treeid")
    };
    match text {
        None => Ok(0),
        // `Integer.parseInt`: no spaces around the number.
        Some(t) => t
            .parse::<i32>()
            .map(i64::from)
            .map_err(|_| ApiError::bad_request("Unable to parse 'tree' value")),
    }
}

fn valid_id(id: i64) -> Result<u16, ApiError> {
    check_tree_id(id).map_err(ApiError::from)
}

/// A tree that must exist: 404 `Unable to locate tree: <id>` otherwise.
fn existing_tree(db: &Tsdb, id: i64) -> Result<tree::Tree, ApiError> {
    let tree_id = valid_id(id)?;
    tree::fetch_tree(db, tree_id)?.ok_or_else(|| not_found(format!("Unable to locate tree: {id}")))
}

fn engine_err(e: EngineError) -> ApiError {
    ApiError::from(e)
}

async fn handle_tree(
    tsdb: &Arc<Tsdb>,
    method: Method,
    params: Params,
    body: Bytes,
) -> Result<Response, ApiError> {
    let update = if has_body(&body) {
        TreeUpdate::from_json(&json_object(&body)?)?
    } else {
        let mut u = TreeUpdate {
            tree_id: param_tree_id(&params, false)?,
            ..TreeUpdate::default()
        };
        for key in [
            "name",
            "description",
            "notes",
            "strict_match",
            "enabled",
            "store_failures",
        ] {
            if let Some(v) = params.get(key) {
                u.set(key, v)?;
            }
        }
        u
    };
    let definition = if method == Method::DELETE {
        let flag = if has_body(&body) {
            json_object(&body)?.get("definition").map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
        } else {
            params.get("definition").map(String::from)
        };
        flag.is_some_and(|f| f.eq_ignore_ascii_case("true"))
    } else {
        false
    };
    blocking(tsdb, move |db| match method {
        Method::GET if update.tree_id == 0 => {
            let trees = tree::fetch_all_trees(db)?;
            Ok(ok(&Value::Array(
                trees.iter().map(tree::Tree::to_json).collect(),
            )))
        }
        Method::GET => Ok(ok(&existing_tree(db, update.tree_id)?.to_json())),
        Method::POST | Method::PUT => {
            let overwrite = method == Method::PUT;
            let id = if update.tree_id > 0 {
                let tree_id = existing_tree(db, update.tree_id)?.tree_id;
                tree::store_tree(db, tree_id, &update, overwrite).map_err(engine_err)?;
                tree_id
            } else {
                let now = db.settings().clock.now_ms() / 1000;
                tree::create_tree(db, &update, now).map_err(engine_err)?
            };
            let stored = tree::fetch_tree(db, id)?
                .ok_or_else(|| not_found(format!("Unable to locate tree: {id}")))?;
            Ok(ok(&stored.to_json()))
        }
        Method::DELETE => {
            let tree_id = existing_tree(db, update.tree_id)?.tree_id;
            tree::delete_tree(db, tree_id, definition)?;
            Ok(no_content())
        }
        _ => Err(unsupported()),
    })
    .await
}

async fn handle_branch(
    tsdb: &Arc<Tsdb>,
    method: Method,
    params: Params,
) -> Result<Response, ApiError> {
    if method != Method::GET {
        return Err(unsupported());
    }
    let tree_id = param_tree_id(&params, false)?;
    let branch_id = match params.value("branch") {
        Some(hex) => parse_branch_id(hex)?,
        None => {
            if tree_id < 1 {
                return Err(ApiError::bad_request(
                    "Missing or invalid branch and tree IDs",
                ));
            }
            let id = check_tree_id(tree_id)
                .map_err(|_| ApiError::bad_request("Missing or invalid tree ID"))?;
            tree_id_bytes(id).to_vec()
        }
    };
    blocking(tsdb, move |db| {
        match tree::fetch_branch(db, &branch_id, true)? {
            Some(b) => Ok(ok(&b.to_json())),
            None => Err(not_found(format!(
                "Unable to locate branch '{}' for tree '{}'",
                hex_upper(&branch_id),
                u16::from_be_bytes([branch_id[0], branch_id[1]])
            ))),
        }
    })
    .await
}

fn rule_from_params(params: &Params) -> Result<RuleUpdate, ApiError> {
    // The numbers are read by `Integer.parseInt`, which refuses surrounding spaces as it
    // refuses an empty value (the engine trims, as Jackson does for a body's strings).
    let int_text = |v: &str| {
        if v.trim() == v {
            v.to_string()
        } else {
            String::new()
        }
    };
    let mut u = RuleUpdate::default();
    u.set("treeId", &int_text(params.required("treeid")?))?;
    for (param, key) in [
        ("type", "type"),
        ("field", "field"),
        ("custom_field", "customField"),
        ("regex", "regex"),
        ("separator", "separator"),
        ("description", "description"),
        ("notes", "notes"),
        ("regex_group_idx", "regexGroupIdx"),
        ("display_format", "displayFormat"),
    ] {
        if let Some(v) = params.get(param) {
            let v = if key == "regexGroupIdx" {
                int_text(v)
            } else {
                v.to_string()
            };
            u.set(key, &v)?;
        }
    }
    u.set("level", &int_text(params.required("level")?))?;
    u.set("order", &int_text(params.required("order")?))?;
    Ok(u)
}

async fn handle_rule(
    tsdb: &Arc<Tsdb>,
    method: Method,
    params: Params,
    body: Bytes,
) -> Result<Response, ApiError> {
    let update = if has_body(&body) {
        RuleUpdate::from_json(&json_object(&body)?)?
    } else {
        rule_from_params(&params)?
    };
    blocking(tsdb, move |db| {
        let tree = existing_tree(db, i64::from(update.rule.tree_id))?;
        let (level, order) = (update.rule.level, update.rule.order);
        let missing = || not_found(format!("Unable to locate rule: {}", update.rule.label()));
        match method {
            Method::GET => Ok(ok(&tree.rule(level, order).ok_or_else(missing)?.to_json())),
            Method::POST | Method::PUT => {
                tree::store_rule(db, &update, method == Method::PUT).map_err(engine_err)?;
                let stored =
                    tree::fetch_rule(db, tree.tree_id, level, order)?.ok_or_else(missing)?;
                Ok(ok(&stored.to_json()))
            }
            Method::DELETE => {
                tree.rule(level, order).ok_or_else(missing)?;
                tree::delete_rule(db, tree.tree_id, level, order)?;
                Ok(no_content())
            }
            _ => Err(unsupported()),
        }
    })
    .await
}

async fn handle_rules(
    tsdb: &Arc<Tsdb>,
    method: Method,
    params: Params,
    body: Bytes,
) -> Result<Response, ApiError> {
    let (tree_id, rules) = if has_body(&body) {
        let items = match json_body(&body)? {
            Value::Array(items) => items,
            _ => {
                return Err(ApiError::bad_request("Unable to parse the given JSON")
                    .with_details("expected a JSON array of rules"));
            }
        };
        let mut rules = Vec::with_capacity(items.len());
        for item in items {
            let Value::Object(obj) = item else {
                return Err(ApiError::bad_request("Unable to parse the given JSON")
                    .with_details("each rule must be a JSON object"));
            };
            rules.push(RuleUpdate::from_json(&obj)?);
        }
        let Some(first) = rules.first() else {
            return Err(ApiError::bad_request("Missing tree rules"));
        };
        let id = first.rule.tree_id;
        if rules.iter().any(|r| r.rule.tree_id != id) {
            return Err(ApiError::bad_request(
                "All rules must belong to the same tree",
            ));
        }
        (i64::from(id), rules)
    } else {
        (param_tree_id(&params, false)?, Vec::new())
    };
    blocking(tsdb, move |db| {
        let tree = existing_tree(db, tree_id)?;
        match method {
            Method::POST | Method::PUT => {
                if rules.is_empty() {
                    return Err(ApiError::bad_request("Missing tree rules"));
                }
                let overwrite = method == Method::PUT;
                if overwrite {
                    // Every rule is checked before the stored ones are replaced.
                    for r in &rules {
                        r.rule.validate()?;
                    }
                    tree::delete_all_rules(db, tree.tree_id)?;
                }
                for r in &rules {
                    match tree::store_rule(db, r, overwrite) {
                        Ok(_) => {}
                        // A rule that changes nothing is left as it is.
                        Err(e) if e.kind() == ErrorKind::NotModified => {}
                        Err(e) => return Err(engine_err(e)),
                    }
                }
                Ok(no_content())
            }
            Method::DELETE => {
                tree::delete_all_rules(db, tree.tree_id)?;
                Ok(no_content())
            }
            _ => Err(unsupported()),
        }
    })
    .await
}

/// The tree id and TSUIDs of a test, collisions or not-matched request.
fn tsuids_request(params: &Params, body: &Bytes) -> Result<(i64, Option<Vec<String>>), ApiError> {
    if has_body(body) {
        let obj: Map<String, Value> = json_object(body)?;
        let id = match obj.get("treeId") {
            Some(Value::Number(n)) => n.as_i64(),
            _ => None,
        }
        .ok_or_else(|| ApiError::bad_request("Missing or invalid Tree ID"))?;
        let tsuids = match obj.get("tsuids") {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) => Some(
                items
                    .iter()
                    .map(|i| match i {
                        Value::String(s) => Ok(s.clone()),
                        _ => Err(ApiError::bad_request(
                            "Unable to convert the given data to a list",
                        )),
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            Some(_) => {
                return Err(ApiError::bad_request(
                    "Unable to convert the given data to a list",
                ));
            }
        };
        Ok((id, tsuids))
    } else {
        let id = param_tree_id(params, true)?;
        let tsuids = params.get("tsuids").map(java_split_commas);
        Ok((id, tsuids))
    }
}

/// `text.split(",")` as Java splits: trailing empty words dropped (`a,` is one word, `,`
/// none), text without a comma one word (`""` is one empty word).
fn java_split_commas(text: &str) -> Vec<String> {
    if !text.contains(',') {
        return vec![text.to_string()];
    }
    let mut words: Vec<String> = text.split(',').map(String::from).collect();
    while words.last().is_some_and(String::is_empty) {
        words.pop();
    }
    words
}

async fn handle_test(
    tsdb: &Arc<Tsdb>,
    method: Method,
    params: Params,
    body: Bytes,
) -> Result<Response, ApiError> {
    let (tree_id, tsuids) = tsuids_request(&params, &body)?;
    blocking(tsdb, move |db| {
        let tree = existing_tree(db, tree_id)?;
        let tsuids = tsuids
            .filter(|t| !t.is_empty())
            .ok_or_else(|| ApiError::bad_request("Missing or empty TSUID list"))?;
        if !matches!(method, Method::GET | Method::POST | Method::PUT) {
            return Err(unsupported());
        }
        let root = tree::root_for_test(db, tree.tree_id)?;
        let mut builder = TreeBuilder::new(tree);
        let asked = tsuids.len();
        let mut results: Vec<(String, Value)> = Vec::new();
        for tsuid in tsuids {
            let bytes = parse_hex(&tsuid).map_err(|e| ApiError::bad_request(e.to_string()))?;
            // A `HashMap` of `branch`, `meta` and `messages`, in Java's order.
            let entry = |branch: Value, meta: Value, messages: Value| {
                json!({ "meta": meta, "messages": messages, "branch": branch })
            };
            let entry = match get_ts_meta(db, &bytes) {
                // No meta row for it (a TSUID of no series' shape has none either).
                Ok(None) => entry(
                    Value::Null,
                    Value::Null,
                    json!(["Unable to locate TSUID meta data"]),
                ),
                Err(e) if e.kind() == ErrorKind::InvalidInput => entry(
                    Value::Null,
                    Value::Null,
                    json!(["Unable to locate TSUID meta data"]),
                ),
                Err(e) if e.kind() == ErrorKind::NotFound => entry(
                    Value::Null,
                    Value::Null,
                    json!([format!("TSUID was missing a UID name: {e}")]),
                ),
                Err(e) => return Err(engine_err(e)),
                Ok(Some(meta)) => {
                    let out = builder.run(&meta, &root)?;
                    entry(out.root.to_json(), meta.to_json(), json!(out.messages))
                }
            };
            // A TSUID asked twice keeps its first place and its last answer.
            match results.iter_mut().find(|(have, _)| *have == tsuid) {
                Some(slot) => slot.1 = entry,
                None => results.push((tsuid, entry)),
            }
        }
        Ok(ok(&java_map(results, asked)))
    })
    .await
}

async fn handle_failures(
    tsdb: &Arc<Tsdb>,
    method: Method,
    params: Params,
    body: Bytes,
    collisions: bool,
) -> Result<Response, ApiError> {
    let (tree_id, tsuids) = tsuids_request(&params, &body)?;
    blocking(tsdb, move |db| {
        let tree = existing_tree(db, tree_id)?;
        if !matches!(method, Method::GET | Method::POST | Method::PUT) {
            return Err(unsupported());
        }
        let found = tree::fetch_failures(db, tree.tree_id, collisions, tsuids.as_deref())?;
        // The `HashMap` `Tree.fetchCollisions` / `fetchNotMatched` makes for the row read.
        let size = found.len();
        let entries = found
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        Ok(ok(&java_map(entries, size)))
    })
    .await
}
