//! The web UI and the status page.
//!
//! The UI's files are built from `web/` (see its README) into `web/dist`, which is committed
//! and compiled into the binary, so the TSD needs no web server, no Node and no network at run
//! time. With `tsd.http.staticroot` set they are read from that directory on each request
//! instead (OpenTSDB's key), which is how the UI is worked on without rebuilding the server.
//! OpenTSDB's static path `/s/<file>` is served as well.

use std::fmt::Write;
use std::path::{Component, Path};
use std::sync::{Arc, OnceLock};

use axum::extract::State as Extract;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use super::ApiError;
use crate::State;
use crate::stats::{collect, hostname};

/// The files built into the binary: `(name, bytes)`.
const EMBEDDED: &[(&str, &[u8])] = &[
    (
        "index.html",
        include_bytes!("../../../../web/dist/index.html"),
    ),
    ("app.js", include_bytes!("../../../../web/dist/app.js")),
    ("app.css", include_bytes!("../../../../web/dist/app.css")),
];

fn content_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=UTF-8",
        Some("js" | "mjs") => "text/javascript; charset=UTF-8",
        Some("css") => "text/css; charset=UTF-8",
        Some("json") => "application/json",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("txt") => "text/plain; charset=UTF-8",
        _ => "application/octet-stream",
    }
}

/// Entity tags of the embedded files, computed once.
fn embedded_etag(index: usize) -> &'static str {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    TAGS.get_or_init(|| {
        EMBEDDED
            .iter()
            .map(|(_, bytes)| format!("\"{:08x}-{:x}\"", crc32fast::hash(bytes), bytes.len()))
            .collect()
    })[index]
        .as_str()
}

/// A relative path that stays inside the static root (no `..`, no absolute parts).
fn safe_relative(name: &str) -> Option<&Path> {
    let path = Path::new(name);
    let plain = !name.is_empty()
        && !name.contains('\\')
        && path.components().all(|c| matches!(c, Component::Normal(_)));
    plain.then_some(path)
}

/// OpenTSDB's answer for a static file it cannot read: a 404 in its API error shape, worded
/// for a page (`{"error":{"code":404,"message":"Page not found"}}`), in the `jsonp` callback
/// when the request names one.
fn file_not_found(uri: &Uri) -> Response {
    let body = "{\"error\":{\"code\":404,\"message\":\"Page not found\"}}";
    let body = match super::request::Params::parse(uri.query()).value("jsonp") {
        Some(cb) => format!("{cb}({body})"),
        None => body.to_string(),
    };
    super::deprecated::reply(StatusCode::NOT_FOUND, body)
}

/// A file of the UI, for any method (OpenTSDB checks none here); `HEAD` gets the headers.
async fn serve_file(
    state: &State,
    method: &Method,
    headers: &HeaderMap,
    uri: &Uri,
    name: &str,
) -> Response {
    let (bytes, etag): (Vec<u8>, Option<&str>) = match &state.settings.static_root {
        Some(root) => {
            let Some(rel) = safe_relative(name) else {
                return file_not_found(uri);
            };
            match tokio::fs::read(root.join(rel)).await {
                Ok(bytes) => (bytes, None),
                Err(_) => return file_not_found(uri),
            }
        }
        None => {
            let Some(index) = EMBEDDED.iter().position(|(n, _)| *n == name) else {
                return file_not_found(uri);
            };
            let tag = embedded_etag(index);
            if headers
                .get(header::IF_NONE_MATCH)
                .is_some_and(|v| v.as_bytes() == tag.as_bytes())
            {
                return StatusCode::NOT_MODIFIED.into_response();
            }
            (EMBEDDED[index].1.to_vec(), Some(tag))
        }
    };
    let mut response = if *method == Method::HEAD {
        let mut r = ().into_response();
        r.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
        r
    } else {
        bytes.into_response()
    };
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(name)),
    );
    // Revalidated on each load: the file names carry no version.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Some(tag) = etag.and_then(|t| HeaderValue::from_str(t).ok()) {
        h.insert(header::ETAG, tag);
    }
    response
}

/// `/`: the UI's page.
pub(crate) async fn index(
    method: Method,
    headers: HeaderMap,
    uri: Uri,
    Extract(state): Extract<Arc<State>>,
) -> Response {
    serve_file(&state, &method, &headers, &uri, "index.html").await
}

/// `/app.js`, `/app.css`, `/favicon.ico` and OpenTSDB's `/s/<file>`, whose URI (query string
/// included) OpenTSDB checks first: `/s` alone is `URI too short`, and `..` anywhere after
/// `/s/` is `Malformed URI` (400s).
pub(crate) async fn file(
    method: Method,
    headers: HeaderMap,
    uri: Uri,
    Extract(state): Extract<Arc<State>>,
) -> Response {
    let path = uri.path();
    if path == "/s" || path.starts_with("/s/") {
        let full = uri.path_and_query().map_or(path, |p| p.as_str());
        if full.len() < 3 {
            return super::deprecated::bad_request(
                &format!("URI too short <code>{full}</code>"),
                false,
            );
        }
        if full.get(3..).is_some_and(|rest| rest.contains("..")) {
            return super::deprecated::bad_request(
                &format!("Malformed URI <code>{full}</code>"),
                false,
            );
        }
    }
    let name = path
        .strip_prefix("/s/")
        .unwrap_or_else(|| path.trim_start_matches('/'));
    serve_file(&state, &method, &headers, &uri, name).await
}

/// Text made safe for HTML.
pub(crate) fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `3d 4h 5m 6s`.
fn human_duration(mut secs: u64) -> String {
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
        if secs >= size || !out.is_empty() {
            let _ = write!(out, "{}{unit} ", secs / size);
            secs %= size;
        }
    }
    let _ = write!(out, "{secs}s");
    out
}

const STATUS_STYLE: &str = "body{font:14px/1.5 system-ui,sans-serif;margin:2rem auto;\
max-width:60rem;padding:0 1rem;color:#1f2328}h1{font-size:1.4rem}h2{font-size:1.1rem;\
margin-top:2rem}table{border-collapse:collapse;width:100%}th,td{text-align:left;\
padding:.3rem .6rem;border-bottom:1px solid #d0d7de}td.n{text-align:right;\
font-variant-numeric:tabular-nums}dl{display:grid;grid-template-columns:max-content auto;\
gap:.3rem 1.5rem}dt{color:#59636e}dd{margin:0}a{color:#0969da}";

/// `/status`: what a person wants to know about this TSD, as a page: version, uptime,
/// storage backend, settings that matter, and every statistic of `/api/stats`.
pub(crate) async fn status(
    method: Method,
    Extract(state): Extract<Arc<State>>,
) -> Result<Response, ApiError> {
    if method != Method::GET && method != Method::HEAD {
        return Err(ApiError::method_not_allowed(&method));
    }
    let store = state.tsdb.store();
    let uptime = state.started.elapsed().as_secs();
    let settings = state.tsdb.settings();
    let facts: [(&str, String); 9] = [
        (
            "Version",
            format!("Hourglass {} (OpenTSDB 2.4 API)", env!("CARGO_PKG_VERSION")),
        ),
        ("Host", hostname().to_string()),
        ("Uptime", human_duration(uptime)),
        ("Storage backend", store.backend().to_string()),
        ("Data table", settings.schema.data_table.clone()),
        (
            "Mode",
            if state.settings.read_only {
                "read-only"
            } else {
                "read-write"
            }
            .into(),
        ),
        ("Points buffered", state.tsdb.buffered_points().to_string()),
        (
            "Flush interval",
            format!("{} ms", settings.flush_interval.as_millis()),
        ),
        (
            "Write-ahead log",
            if settings.wal { "on" } else { "off" }.into(),
        ),
    ];
    let mut page = String::with_capacity(8192);
    let _ = write!(
        page,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>Hourglass status — {host}</title><style>{STATUS_STYLE}</style></head><body>\
         <h1>Hourglass TSD status</h1><p><a href=\"/\">Query UI</a> · \
         <a href=\"/api/stats\">/api/stats</a> · <a href=\"/api/version\">/api/version</a> · \
         <a href=\"/api/config\">/api/config</a></p><dl id=\"facts\">",
        host = escape_html(hostname()),
    );
    for (name, value) in &facts {
        let _ = write!(page, "<dt>{name}</dt><dd>{}</dd>", escape_html(value));
    }
    page.push_str("</dl>");
    rollup_tiers(&state, &mut page);
    page.push_str(
        "<h2>Statistics</h2><table id=\"stats\"><thead><tr><th>metric</th><th>tags</th>\
         <th>value</th></tr></thead><tbody>",
    );
    for s in collect(&state) {
        let tags: Vec<String> = s.tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let tags = tags.join(" ");
        let _ = write!(
            page,
            "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td></tr>",
            escape_html(&s.metric),
            escape_html(&tags),
            s.value
        );
    }
    page.push_str("</tbody></table></body></html>");
    let mut response = page.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=UTF-8"),
    );
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// The computed rollup tiers (RFC 0008 phase 4): each one's progress (the first unit not
/// computed, UTC) and how far it is behind; nothing unless `tsd.rollups.compute` is on.
fn rollup_tiers(state: &State, page: &mut String) {
    let tsdb = &state.tsdb;
    let Some(upkeep) = tsdb.upkeep() else { return };
    let Some(compute) = &upkeep.compute else {
        return;
    };
    page.push_str(
        "<h2>Computed rollups</h2><table id=\"rollups\"><thead><tr><th>interval</th>\
         <th>table</th><th>computed up to (UTC)</th><th>lag</th><th>units computed</th></tr>\
         </thead><tbody>",
    );
    let now = tsdb.settings().clock.now_ms().div_euclid(1000);
    let due = now - compute.delay_ms / 1000;
    for tier in &upkeep.tiers {
        let progress = tier.progress.load(std::sync::atomic::Ordering::Relaxed);
        let (at, lag) = if progress == i64::MIN {
            ("not started".to_string(), "-".to_string())
        } else {
            let at = chrono::DateTime::from_timestamp(progress, 0).map_or_else(
                || progress.to_string(),
                |d| d.format("%Y-%m-%d %H:%M").to_string(),
            );
            let lag = (due - due.rem_euclid(tier.unit_secs) - progress).max(0);
            (at, human_duration(lag as u64))
        };
        let _ = write!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            escape_html(&tier.interval.interval),
            escape_html(&tier.interval.table),
            escape_html(&at),
            escape_html(&lag),
            tier.units.load(std::sync::atomic::Ordering::Relaxed)
        );
    }
    page.push_str("</tbody></table>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_paths_stay_inside_the_root() {
        assert!(safe_relative("app.js").is_some());
        assert!(safe_relative("img/logo.png").is_some());
        for bad in [
            "",
            "../etc/passwd",
            "a/../../b",
            "/etc/passwd",
            "a\\..\\b",
            "./x/..",
        ] {
            assert!(safe_relative(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(3_600), "1h 0m 0s");
        assert_eq!(human_duration(90_061), "1d 1h 1m 1s");
    }

    #[test]
    fn html_is_escaped() {
        assert_eq!(
            escape_html("<a href='x'>&\"</a>"),
            "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;"
        );
    }
}
