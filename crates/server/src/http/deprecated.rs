//! OpenTSDB's older, non-API paths that 2.4 still serves: `/aggregators`, `/version`,
//! `/stats`, `/suggest`, `/logs` and `/diediedie`. Their errors are OpenTSDB's HTML pages, or
//! `{"err": …}` when the query string has `json`; they never honour `jsonp`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{RawQuery, State as Extract};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::error::json_response;
use super::request::Params;
use super::ui::escape_html;
use crate::State;

/// An HTML page shaped as OpenTSDB's: a title, a subtitle and a body.
fn page(status: StatusCode, title: &str, subtitle: &str, body: &str) -> Response {
    let html = format!(
        "<!DOCTYPE html><html><head><meta http-equiv=content-type content=\"text/html;charset=utf-8\">\
         <title>{title}</title></head><body text=#000000 bgcolor=#ffffff><table border=0 cellpadding=2 \
         cellspacing=0 width=100%><tr><td><font color=#507e9b><b>{subtitle}</b></font></td></tr>\
         </table>{body}</body></html>"
    );
    let mut resp = (status, html).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=UTF-8"),
    );
    resp
}

/// OpenTSDB's answer to a bad request on these paths: always 400.
pub(crate) fn bad_request(message: &str, json: bool) -> Response {
    if json {
        return json_response(StatusCode::BAD_REQUEST, &json!({ "err": message }));
    }
    page(
        StatusCode::BAD_REQUEST,
        "Bad Request",
        "Looks like it's your fault this time",
        &format!(
            "<blockquote><h1>Bad Request</h1>Sorry but your request was rejected as being invalid.\
             <br/><br/>The reason provided was:<blockquote>{}</blockquote></blockquote>",
            escape_html(message)
        ),
    )
}

/// OpenTSDB's page for a path it does not serve.
pub(crate) fn not_found(json: bool) -> Response {
    if json {
        return json_response(StatusCode::NOT_FOUND, &json!({ "err": "Page Not Found" }));
    }
    page(
        StatusCode::NOT_FOUND,
        "Page Not Found",
        "Error 404",
        "<blockquote><h1>Page Not Found</h1>The requested URL was not found on this server.\
         </blockquote>",
    )
}

fn wants_json(raw: Option<&str>) -> bool {
    Params::parse(raw).has("json")
}

/// The refusal of a method other than GET and POST.
fn refuse_method(method: &Method, json: bool) -> Option<Response> {
    (*method != Method::GET && *method != Method::POST).then(|| {
        bad_request(
            &format!("The HTTP method [{method}] is not permitted for this endpoint"),
            json,
        )
    })
}

fn text(body: String) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=UTF-8"),
    );
    resp
}

pub(crate) async fn aggregators(method: Method, RawQuery(raw): RawQuery) -> Response {
    if let Some(r) = refuse_method(&method, wants_json(raw.as_deref())) {
        return r;
    }
    json_response(
        StatusCode::OK,
        &json!(hourglass_engine::query::aggregator::NAMES),
    )
}

/// Two lines of text, or OpenTSDB's version map when the request ends with `json`.
pub(crate) async fn version(
    method: Method,
    uri: axum::http::Uri,
    Extract(state): Extract<Arc<State>>,
) -> Response {
    let full = uri.to_string();
    if let Some(r) = refuse_method(&method, full.ends_with("json")) {
        return r;
    }
    if full.ends_with("json") {
        return super::misc::version_json(&state);
    }
    text(state.settings.build.text())
}

/// The telnet `stats` lines, or (with `json`) a JSON array of them.
pub(crate) async fn stats(
    method: Method,
    RawQuery(raw): RawQuery,
    Extract(state): Extract<Arc<State>>,
) -> Response {
    let json = wants_json(raw.as_deref());
    if let Some(r) = refuse_method(&method, json) {
        return r;
    }
    let lines = crate::telnet::stats_text(&state);
    if json {
        let list: Vec<Value> = lines.lines().map(|l| Value::String(l.into())).collect();
        return json_response(StatusCode::OK, &Value::Array(list));
    }
    text(lines)
}

/// `/suggest?type=…&q=…`: as `/api/suggest`, with this path's errors.
pub(crate) async fn suggest(
    method: Method,
    RawQuery(raw): RawQuery,
    state: Extract<Arc<State>>,
    body: Bytes,
) -> Response {
    let json = wants_json(raw.as_deref());
    match super::suggest::serve(method, RawQuery(raw), state, body, false).await {
        Ok(r) => r,
        Err(e) => bad_request(&e.message, json),
    }
}

/// The last log lines, newest first: text, or a JSON array with `json`. Changing log levels
/// (`level`, `logger`) is refused: the levels are set when the process starts (`RUST_LOG`).
pub(crate) async fn logs(method: Method, RawQuery(raw): RawQuery) -> Response {
    let params = Params::parse(raw.as_deref());
    let json = params.has("json");
    if let Some(r) = refuse_method(&method, json) {
        return r;
    }
    if params.has("level") || params.has("logger") {
        return bad_request(
            "Changing log levels at run time is not supported: set RUST_LOG (for example RUST_LOG=info) before the TSD starts",
            json,
        );
    }
    let lines = crate::logs::recent();
    if json {
        return json_response(
            StatusCode::OK,
            &Value::Array(lines.into_iter().map(Value::String).collect()),
        );
    }
    let mut out = lines.join("\n");
    out.push('\n');
    text(out)
}

/// Stops the TSD, as the telnet command does, when `tsd.no_diediedie = false`.
pub(crate) async fn diediedie(
    RawQuery(raw): RawQuery,
    Extract(state): Extract<Arc<State>>,
) -> Response {
    if !state.settings.diediedie {
        return not_found(wants_json(raw.as_deref()));
    }
    tracing::warn!("shutdown requested over HTTP");
    state.begin_shutdown();
    page(
        StatusCode::OK,
        "TSD Exiting",
        "You killed me",
        "Cleaning up and exiting now.",
    )
}
