//! Request plumbing shared by the metadata endpoints: URL parameters with OpenTSDB's rules,
//! JSON bodies, method overrides, blocking engine calls and empty-bodied replies.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use hourglass_engine::{Error as EngineError, ErrorKind, Tsdb};
use serde_json::{Map, Value};

use super::ApiError;

/// Query parameters of the URL, in order.
pub(crate) fn url_params(raw: Option<&str>) -> Vec<(String, String)> {
    serde_urlencoded::from_str(raw.unwrap_or("")).unwrap_or_default()
}

/// URL parameters; a repeated one reads as its last value, as OpenTSDB.
pub(crate) struct Params(Vec<(String, String)>);

impl Params {
    pub(crate) fn parse(raw: Option<&str>) -> Params {
        Params(url_params(raw))
    }

    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A non-empty value.
    pub(crate) fn value(&self, key: &str) -> Option<&str> {
        self.get(key).filter(|v| !v.is_empty())
    }

    pub(crate) fn has(&self, key: &str) -> bool {
        self.0.iter().any(|(k, _)| k == key)
    }

    /// A required non-empty value: OpenTSDB's `Missing parameter <code>key</code>`.
    pub(crate) fn required(&self, key: &str) -> Result<&str, ApiError> {
        self.value(key)
            .ok_or_else(|| ApiError::bad_request(format!("Missing parameter <code>{key}</code>")))
    }
}

pub(crate) fn has_body(body: &Bytes) -> bool {
    !body.iter().all(u8::is_ascii_whitespace)
}

/// Parses a JSON body: empty → `Missing message content`, bad → `Unable to parse the given JSON`.
pub(crate) fn json_body(body: &Bytes) -> Result<Value, ApiError> {
    if !has_body(body) {
        return Err(ApiError::bad_request("Missing message content")
            .with_details("Supply valid JSON formatted data in the body of your request"));
    }
    super::json::from_slice(body).map_err(|e| {
        ApiError::bad_request("Unable to parse the given JSON").with_details(e.to_string())
    })
}

/// A JSON body that must be an object.
pub(crate) fn json_object(body: &Bytes) -> Result<Map<String, Value>, ApiError> {
    match json_body(body)? {
        Value::Object(o) => Ok(o),
        other => Err(ApiError::bad_request("Unable to parse the given JSON")
            .with_details(format!("expected a JSON object, got: {}", kind_of(&other)))),
    }
}

pub(crate) fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The method an endpoint acts on: a GET may carry `method_override=post|put|delete|get`.
pub(crate) fn api_method(method: &Method, params: &Params) -> Result<Method, ApiError> {
    if *method != Method::GET {
        return Ok(method.clone());
    }
    match params.get("method_override") {
        None => Ok(Method::GET),
        Some("") => Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "Missing method override value",
        )),
        Some(v) => match v.to_ascii_lowercase().as_str() {
            "get" => Ok(Method::GET),
            "post" => Ok(Method::POST),
            "put" => Ok(Method::PUT),
            "delete" => Ok(Method::DELETE),
            _ => Err(ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "Unknown or unsupported method override value",
            )),
        },
    }
}

/// Runs blocking engine work off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    tsdb: &Arc<Tsdb>,
    f: impl FnOnce(&Tsdb) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let tsdb = Arc::clone(tsdb);
    tokio::task::spawn_blocking(move || f(&tsdb))
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("request failed: {e}"),
            )
        })?
}

pub(crate) fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

/// An engine error with a given message for "not found" (404) and the engine's text as
/// details; everything else as any engine error is answered (`ApiError::from`).
pub(crate) fn not_found_as(e: EngineError, message: &str) -> ApiError {
    match e.kind() {
        ErrorKind::NotFound => {
            ApiError::new(StatusCode::NOT_FOUND, message).with_details(e.to_string())
        }
        _ => ApiError::from(e),
    }
}

/// Refuses writes on a read-only TSD.
pub(crate) fn check_writable(state: &crate::State) -> Result<(), ApiError> {
    if state.settings.read_only {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "This TSD is in read-only mode",
        ));
    }
    Ok(())
}
