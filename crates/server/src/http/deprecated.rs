//! OpenTSDB's older, non-API paths that 2.4 still serves: `/aggregators`, `/version`,
//! `/stats`, `/suggest`, `/logs` and `/diediedie`. Their errors are OpenTSDB's HTML pages, or
//! `{"err": …}` when the query string has `json`; they never honour `jsonp`.

use std::fmt::Write;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{RawQuery, State as Extract};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::request::Params;
use super::ui::escape_html;
use crate::State;

/// OpenTSDB's small HTML page (`HttpQuery.makePage`): its boilerplate, a title, a subtitle and
/// a body. The logo cell holds no image (OpenTSDB's `s/opentsdb_header.jpg` is not served).
pub(crate) fn make_page(title: &str, subtitle: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html><html><head><meta http-equiv=content-type content=\"text/html;charset=utf-8\">\
         <title>{title}</title>\n<style><!--\nbody{{font-family:arial,sans-serif;margin-left:2em}}\
         A.l:link{{color:#6f6f6f}}A.u:link{{color:green}}.fwf{{font-family:monospace;\
         white-space:pre-wrap}}//--></style></head>\n<body text=#000000 bgcolor=#ffffff>\
         <table border=0 cellpadding=2 cellspacing=0 width=100%><tr><td rowspan=3 width=1% \
         nowrap><td>&nbsp;</td></tr><tr><td><font color=#507e9b><b>{subtitle}</b></td></tr>\
         <tr><td>&nbsp;</td></tr></table>{body}<table width=100% cellpadding=0 cellspacing=0>\
         <tr><td class=subg><img alt=\"\" width=1 height=6></td></tr></table></body></html>"
    )
}

/// The content type OpenTSDB's HTTP layer gives a non-API answer it does not name: read from
/// the body's first byte (`HttpQuery.guessMimeTypeFromContents`).
pub(crate) fn sniffed_type(body: &[u8]) -> &'static str {
    match body.first() {
        Some(b'<') => "text/html; charset=UTF-8",
        Some(b'{' | b'[') => "application/json",
        Some(0x89) => "image/png",
        _ => "text/plain",
    }
}

/// An answer of these paths, typed as OpenTSDB types it ([`sniffed_type`]).
pub(crate) fn reply(status: StatusCode, body: impl Into<Vec<u8>>) -> Response {
    let body = body.into();
    let kind = sniffed_type(&body);
    let mut resp = (status, body).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    resp
}

/// Java's `HttpQuery.escapeJson`: `"`, `\\` and the named control characters escaped, other
/// characters below U+001F as `\u00XX` (U+001F itself kept, as there), the rest as is.
pub(crate) fn java_escape_json(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x1F => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
}

/// `{"err":"…"}`, as OpenTSDB writes an error of these paths when the request has `json`.
fn err_json(status: StatusCode, message: &str) -> Response {
    let mut body = String::with_capacity(message.len() + 10);
    body.push_str("{\"err\":\"");
    java_escape_json(message, &mut body);
    body.push_str("\"}");
    reply(status, body)
}

/// A message in a page: OpenTSDB writes it as it is, markup and all; here `&`, `<` and `>`
/// are escaped (it may quote the request), but for the `<code>` tags OpenTSDB's own messages
/// use, so that a message without them reads as OpenTSDB's.
fn page_text(message: &str) -> String {
    message
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace("&lt;code&gt;", "<code>")
        .replace("&lt;/code&gt;", "</code>")
}

/// OpenTSDB's answer to a bad request on these paths: always 400.
pub(crate) fn bad_request(message: &str, json: bool) -> Response {
    if json {
        return err_json(StatusCode::BAD_REQUEST, message);
    }
    reply(
        StatusCode::BAD_REQUEST,
        make_page(
            "Bad Request",
            "Looks like it's your fault this time",
            &format!(
                "<blockquote><h1>Bad Request</h1>Sorry but your request was rejected as being \
                 invalid.<br/><br/>The reason provided was:<blockquote>{}</blockquote></blockquote>",
                page_text(message)
            ),
        ),
    )
}

/// OpenTSDB's answer to a failure on its side on these paths (without its stack trace).
pub(crate) fn internal_error(message: &str, json: bool) -> Response {
    if json {
        return err_json(StatusCode::INTERNAL_SERVER_ERROR, message);
    }
    reply(
        StatusCode::INTERNAL_SERVER_ERROR,
        make_page(
            "Internal Server Error",
            "Houston, we have a problem",
            &format!(
                "<blockquote><h1>Internal Server Error</h1>Oops, sorry but your request failed \
                 due to a server error.<br/><br/>Please try again in 30 seconds.<pre>{}</pre>\
                 </blockquote>",
                escape_html(message)
            ),
        ),
    )
}

/// OpenTSDB's page for a path it does not serve.
pub(crate) fn not_found(json: bool) -> Response {
    if json {
        return reply(StatusCode::NOT_FOUND, "{\"err\":\"Page Not Found\"}");
    }
    reply(
        StatusCode::NOT_FOUND,
        make_page(
            "Page Not Found",
            "Error 404",
            "<blockquote><h1>Page Not Found</h1>The requested URL was not found on this server.\
             </blockquote>",
        ),
    )
}

fn wants_json(raw: Option<&str>) -> bool {
    Params::parse(raw).has("json")
}

/// The refusal of a method other than GET and POST.
fn refuse_method(method: &Method, json: bool) -> Option<Response> {
    (*method != Method::GET && *method != Method::POST).then(|| {
        // `Method not allowed` (its details, naming the method, are not shown here), with
        // the 400 every error of these paths has.
        bad_request("Method not allowed", json)
    })
}

fn text(body: String) -> Response {
    reply(StatusCode::OK, body)
}

/// A JSON answer of these paths (`application/json`, no charset, as OpenTSDB types it).
fn json_ok(body: &Value) -> Response {
    reply(StatusCode::OK, body.to_string())
}

pub(crate) async fn aggregators(method: Method, RawQuery(raw): RawQuery) -> Response {
    if let Some(r) = refuse_method(&method, wants_json(raw.as_deref())) {
        return r;
    }
    json_ok(&json!(hourglass_engine::query::aggregator::NAMES))
}

/// Two lines of text, or OpenTSDB's version map when the request ends with `json`.
pub(crate) async fn version(
    method: Method,
    uri: axum::http::Uri,
    Extract(state): Extract<Arc<State>>,
) -> Response {
    let full = uri.to_string();
    // The refusal reads `json` as every error of these paths does; the answer, the URI's end.
    if let Some(r) = refuse_method(&method, wants_json(uri.query())) {
        return r;
    }
    if full.ends_with("json") {
        return json_ok(&super::misc::version_map(&state));
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
        return json_ok(&Value::Array(list));
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
        Ok(mut r) => {
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r
        }
        Err(e) => bad_request(&e.message, json),
    }
}

/// The last log lines, newest first: text, or a JSON array with `json`, for any method (as
/// OpenTSDB). Changing log levels (`level`, `logger`, read only without `json`) is refused:
/// the levels are set when the process starts (`RUST_LOG`).
pub(crate) async fn logs(RawQuery(raw): RawQuery) -> Response {
    let params = Params::parse(raw.as_deref());
    let lines = crate::logs::recent();
    if params.has("json") {
        return json_ok(&Value::Array(
            lines.into_iter().map(Value::String).collect(),
        ));
    }
    if params.has("level") {
        return bad_request(
            "Changing log levels at run time is not supported: set RUST_LOG (for example RUST_LOG=info) before the TSD starts",
            false,
        );
    }
    let mut out = String::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
    for line in lines {
        out.push_str(&line);
        out.push('\n');
    }
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
    reply(
        StatusCode::OK,
        make_page(
            "TSD Exiting",
            "You killed me",
            "Cleaning up and exiting now.",
        ),
    )
}
