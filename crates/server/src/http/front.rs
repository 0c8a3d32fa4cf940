//! What every HTTP request goes through before and after its endpoint, as OpenTSDB's request
//! handling does it: the route is read from the path's first segments (case-insensitive, a
//! trailing slash or deeper segments ignored, `/api/v1/` as `/api/`, a higher API version
//! refused), endpoints the mode or `tsd.core.enable_*` switch off are not found, CORS is
//! applied before the endpoint, and a JSON answer is wrapped in the `jsonp` callback.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use super::ApiError;
use crate::State;

/// The highest API version served (`/api/v1/...`).
const MAX_API_VERSION: u32 = 1;

/// Endpoints (second path segment under `/api/`) that read deeper segments themselves, with
/// the third segments they know. Any other deeper segment is ignored, as OpenTSDB ignores it.
const SUB_ROUTES: &[(&str, &[&str])] = &[
    ("query", &["last", "exp", "gexp"]),
    ("config", &["filters"]),
    ("stats", &["threads", "jvm", "query", "region_clients"]),
    ("annotation", &["bulk"]),
    ("annotations", &["bulk"]),
    ("metadata", &["put"]),
];

/// Endpoints whose every deeper segment is theirs.
const OPEN_ROUTES: &[&str] = &["search", "uid", "tree"];

/// API endpoints only served when the TSD takes writes (not in `ro` mode).
const WRITE_ROUTES: &[&str] = &[
    "put",
    "rollup",
    "histogram",
    "annotation",
    "annotations",
    "uid",
    "tree",
];

/// API endpoints only served when the TSD answers reads (not in `wo` mode).
const READ_ROUTES: &[&str] = &["query", "search", "suggest"];

/// UI paths (the first segment) that are not served in `wo` mode.
const UI_READ_ROUTES: &[&str] = &[
    "",
    "index.html",
    "app.js",
    "app.css",
    "s",
    "favicon.ico",
    "q",
    "suggest",
];

/// A request from `peer` through the front, then (when served) [`super::endpoint`].
pub(crate) async fn front(
    state: Arc<State>,
    router: axum::Router,
    peer: Option<SocketAddr>,
    mut req: Request,
) -> Response {
    let settings = &state.settings;
    let route = match route(req.uri().path()) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    // A query string OpenTSDB's HTTP layer cannot decode is refused before anything else.
    let pairs = match req
        .uri()
        .query()
        .map(|q| super::request::decode_query(q, true))
    {
        None => Vec::new(),
        Some(Ok(pairs)) => pairs,
        Some(Err(why)) => {
            let message = format!("Bad query string: {why}");
            return match route {
                Route::Api { .. } => ApiError::bad_request(message).into_response(),
                Route::Other { .. } => super::deprecated::bad_request(&message, false),
            };
        }
    };
    // `serializer` names how to read and answer: JSON is the only one there is.
    let last = |key: &str| pairs.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v);
    if let Some(name) = last("serializer")
        && name != "json"
    {
        const MISSING: &str = "Requested serializer was not found";
        return match route {
            Route::Api { .. } => {
                let resp = ApiError::bad_request(MISSING)
                    .with_details(format!("Could not find a serializer with the name: {name}"))
                    .into_response();
                match last("jsonp").filter(|cb| !cb.is_empty()) {
                    Some(cb) => wrap_jsonp(resp, cb).await,
                    None => resp,
                }
            }
            Route::Other { .. } => super::deprecated::bad_request(MISSING, last("json").is_some()),
        };
    }
    let served = match &route {
        Route::Api { endpoint, .. } => {
            settings.enable_api
                && !(settings.read_only && WRITE_ROUTES.contains(&endpoint.as_str()))
                && !(settings.write_only && READ_ROUTES.contains(&endpoint.as_str()))
        }
        Route::Other { first, .. } => {
            settings.enable_ui && !(settings.write_only && UI_READ_ROUTES.contains(&first.as_str()))
        }
    };
    let cors = match cors_check(&state, &req) {
        CorsCheck::Skip => None,
        CorsCheck::Refused(resp) => return *resp,
        CorsCheck::Allowed(origin) => Some(origin),
    };
    if cors.is_some() && req.method() == Method::OPTIONS {
        let mut resp = StatusCode::OK.into_response();
        add_cors_headers(&state, cors.as_deref(), &mut resp);
        return resp;
    }
    let api = matches!(route, Route::Api { .. });
    // The callback named in the query string (its last non-empty value), read from the
    // pairs decoded above (a strict decoding that succeeded reads as the endpoints' does).
    let jsonp = api
        .then(|| last("jsonp").filter(|cb| !cb.is_empty()).cloned())
        .flatten();
    // The endpoints that read the query string take these pairs instead of decoding it again.
    req.extensions_mut().insert(QueryPairs(Arc::new(pairs)));
    let started = Instant::now();
    let stats = &state.stats;
    stats.http_rpcs.fetch_add(1, Ordering::Relaxed);
    let is_query = served && route.is(&["api", "query"]);
    let mut query_id = None;
    // Credentials are checked before anything else is revealed (even which endpoints the
    // mode serves).
    let authorized = if state.settings.auth.is_some() {
        super::access::authorize(&state, &route.access_key(), &mut req, peer).await
    } else {
        req.extensions_mut().insert(crate::auth::Access::Open);
        Ok(())
    };
    let mut resp = if let Err(refusal) = authorized {
        refusal
    } else if !served {
        match &route {
            Route::Api { .. } => super::misc::not_found().await.into_response(),
            Route::Other { .. } => super::deprecated::not_found(
                super::request::Params::parse(req.uri().query()).has("json"),
            ),
        }
    } else {
        if let Some(uri) = route.rewritten(req.uri()) {
            *req.uri_mut() = uri;
        }
        if is_query {
            let (id, rebuilt) = start_query(&state, req, peer).await;
            query_id = Some(id);
            req = rebuilt;
        }
        super::endpoint(&state, router, req).await
    };
    let status = resp.status();
    let ms = started.elapsed().as_millis() as u64;
    stats.http_latency.record(ms);
    if status.is_server_error() {
        stats.rpc_exceptions.fetch_add(1, Ordering::Relaxed);
    }
    if matches!(&route, Route::Other { first, .. } if first == "q") {
        stats.graph_latency.record(ms);
        stats.graph_requests.fetch_add(1, Ordering::Relaxed);
    }
    if let Some(id) = query_id {
        let counter = if status.is_server_error() {
            &stats.query_exceptions
        } else if status.is_client_error() {
            &stats.query_invalid
        } else {
            &stats.query_success
        };
        counter.fetch_add(1, Ordering::Relaxed);
        stats.queries.finish(id, status);
    }
    if let Some(cb) = jsonp {
        resp = wrap_jsonp(resp, &cb).await;
    }
    add_cors_headers(&state, cors.as_deref(), &mut resp);
    resp
}

/// Notes a query in the running ones: its JSON body, or its URL parameters.
async fn start_query(state: &State, req: Request, peer: Option<SocketAddr>) -> (u64, Request) {
    let remote = peer.map_or_else(String::new, |a| a.to_string());
    let (parts, body) = req.into_parts();
    let (query, body) = if parts.method == Method::GET {
        (
            serde_json::Value::String(parts.uri.query().unwrap_or_default().to_string()),
            body,
        )
    } else {
        match axum::body::to_bytes(body, state.settings.max_body_bytes).await {
            Ok(bytes) => (
                serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                    serde_json::Value::String(String::from_utf8_lossy(&bytes).into_owned())
                }),
                Body::from(bytes),
            ),
            // Too large: the endpoint answers it (its body limit applies).
            Err(_) => (serde_json::Value::Null, Body::empty()),
        }
    };
    let id = state.stats.queries.start(query, remote);
    (id, Request::from_parts(parts, body))
}

/// Where a request goes.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    /// `/api/<endpoint>[/<sub>]`, version segment dropped.
    Api { endpoint: String, rest: Vec<String> },
    /// Anything else: its first segment, lower-cased, and the rest as sent.
    Other { first: String, rest: String },
}

impl Route {
    /// Whether this is the route of these segments (`["api", "query"]`, `["q"]`) with no
    /// deeper segment.
    fn is(&self, segments: &[&str]) -> bool {
        match (self, segments) {
            (Route::Api { endpoint, rest }, ["api", e]) => endpoint == e && rest.is_empty(),
            (Route::Other { first, rest }, [f]) => first == f && rest.is_empty(),
            _ => false,
        }
    }

    /// The route as the access table names it ([`super::access::RULES`]).
    fn access_key(&self) -> String {
        match self {
            Route::Api { endpoint, rest } => super::access::route_key(Some((endpoint, rest)), ""),
            Route::Other { first, .. } => super::access::route_key(None, first),
        }
    }

    /// Whether `path` is already the one the router sees (checked without writing it).
    fn is_path(&self, path: &str) -> bool {
        match self {
            Route::Api { endpoint, rest } => {
                let Some(mut left) = path
                    .strip_prefix("/api/")
                    .and_then(|p| p.strip_prefix(endpoint.as_str()))
                else {
                    return false;
                };
                for r in rest {
                    match left
                        .strip_prefix('/')
                        .and_then(|p| p.strip_prefix(r.as_str()))
                    {
                        Some(p) => left = p,
                        None => return false,
                    }
                }
                left.is_empty()
            }
            Route::Other { first, rest } => {
                match path
                    .strip_prefix('/')
                    .and_then(|p| p.strip_prefix(first.as_str()))
                {
                    Some("") => rest.is_empty(),
                    Some(left) => !rest.is_empty() && left.strip_prefix('/') == Some(rest),
                    None => false,
                }
            }
        }
    }

    /// The path as the router sees it, written out (what [`Route::is_path`] checks without
    /// writing it).
    fn path(&self) -> String {
        match self {
            Route::Api { endpoint, rest } => {
                let mut p = format!("/api/{endpoint}");
                for r in rest {
                    p.push('/');
                    p.push_str(r);
                }
                p
            }
            Route::Other { first, rest } if rest.is_empty() => format!("/{first}"),
            Route::Other { first, rest } => format!("/{first}/{rest}"),
        }
    }

    /// The path the router sees, when it differs from the one sent.
    fn rewritten(&self, uri: &Uri) -> Option<Uri> {
        if self.is_path(uri.path()) {
            return None;
        }
        let path = self.path();
        if path == uri.path() {
            return None;
        }
        let full = match uri.query() {
            Some(q) => format!("{path}?{q}"),
            None => path,
        };
        full.parse().ok()
    }
}

/// Reads the route from a path as OpenTSDB does.
fn route(path: &str) -> Result<Route, ApiError> {
    let trimmed = path.trim_start_matches('/');
    let mut segments: Vec<&str> = trimmed.split('/').collect();
    // Java's split drops trailing empty segments: `/api/query/` is `/api/query`.
    while segments.len() > 1 && segments.last() == Some(&"") {
        segments.pop();
    }
    let first = segments[0].to_ascii_lowercase();
    if first != "api" {
        return Ok(Route::Other {
            first,
            rest: segments[1..].join("/"),
        });
    }
    let mut rest = segments[1..].iter().copied();
    let mut endpoint = rest.next().unwrap_or_default().to_ascii_lowercase();
    if let Some(v) = endpoint.strip_prefix('v')
        && v.starts_with(|c: char| c.is_ascii_digit())
    {
        let version: u32 = v.parse().map_err(|_| {
            ApiError::bad_request("Invalid API version format supplied")
                .with_details(format!("API version [{v}] cannot be parsed to an integer"))
        })?;
        if version > MAX_API_VERSION {
            return Err(ApiError::new(
                StatusCode::NOT_IMPLEMENTED,
                "Requested API version is greater than the max implemented",
            )
            .with_details(format!(
                "API version [{version}] is greater than the max [{MAX_API_VERSION}]"
            )));
        }
        endpoint = rest.next().unwrap_or_default().to_ascii_lowercase();
    }
    let rest: Vec<String> = rest.map(String::from).collect();
    let rest = if OPEN_ROUTES.contains(&endpoint.as_str()) {
        rest
    } else {
        match SUB_ROUTES.iter().find(|(e, _)| *e == endpoint) {
            Some((_, subs)) => match rest.first() {
                Some(sub) if subs.contains(&sub.to_ascii_lowercase().as_str()) => {
                    vec![sub.to_ascii_lowercase()]
                }
                // `/api/annotations/<anything>bulk` is the bulk endpoint.
                Some(sub) if endpoint.starts_with("annotation") && sub.ends_with("bulk") => {
                    vec!["bulk".to_string()]
                }
                _ => Vec::new(),
            },
            None => Vec::new(),
        }
    };
    Ok(Route::Api { endpoint, rest })
}

/// The query string's parameters as the front decoded them (in order, as
/// [`super::request::url_params`] reads them), for an endpoint to read without decoding the
/// query string again.
#[derive(Clone)]
pub(crate) struct QueryPairs(pub(crate) Arc<Vec<(String, String)>>);

/// A JSON answer with a body becomes `cb(<body>)`.
async fn wrap_jsonp(resp: Response, cb: &str) -> Response {
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !is_json {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    if bytes.is_empty() {
        return Response::from_parts(parts, Body::empty());
    }
    let mut wrapped = Vec::with_capacity(bytes.len() + cb.len() + 2);
    wrapped.extend_from_slice(cb.as_bytes());
    wrapped.push(b'(');
    wrapped.extend_from_slice(&bytes);
    wrapped.push(b')');
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(wrapped))
}

enum CorsCheck {
    /// Not a cross-origin request (or CORS is off and it is not a preflight).
    Skip,
    /// Answered already.
    Refused(Box<Response>),
    /// Allowed, from this origin.
    Allowed(String),
}

/// OpenTSDB's CORS rules: a request with an `Origin` (when CORS is on) or any `OPTIONS`
/// request is checked before its endpoint. `OPTIONS` without CORS or without an origin is
/// not allowed; an origin not in `tsd.http.request.cors_domains` is answered with an error
/// (status 200, as OpenTSDB answers it).
fn cors_check(state: &State, req: &Request) -> CorsCheck {
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .filter(|o| !o.is_empty());
    let cors = state.settings.cors.as_ref();
    let preflight = req.method() == Method::OPTIONS;
    if !preflight && (cors.is_none() || origin.is_none()) {
        return CorsCheck::Skip;
    }
    let (Some(cors), Some(origin)) = (cors, origin) else {
        let e = ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "Method not allowed")
            .with_details("The HTTP method [OPTIONS] is not permitted");
        return CorsCheck::Refused(Box::new(e.into_response()));
    };
    if cors.allows(origin) {
        CorsCheck::Allowed(origin.to_string())
    } else {
        let e = ApiError::new(StatusCode::OK, "CORS domain not allowed")
            .with_details(format!("The domain [{origin}] is not permitted access"));
        CorsCheck::Refused(Box::new(e.into_response()))
    }
}

fn add_cors_headers(state: &State, origin: Option<&str>, resp: &mut Response) {
    let (Some(origin), Some(cors)) = (origin, state.settings.cors.as_ref()) else {
        return;
    };
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(origin) {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
    }
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, PUT, DELETE"),
    );
    if let Ok(v) = HeaderValue::from_str(&cors.headers) {
        h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(endpoint: &str, rest: &[&str]) -> Route {
        Route::Api {
            endpoint: endpoint.into(),
            rest: rest.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn routes_read_as_opentsdb_reads_them() {
        assert_eq!(route("/api/put").unwrap(), api("put", &[]));
        assert_eq!(route("/api/v1/put").unwrap(), api("put", &[]));
        assert_eq!(route("/API/Query/").unwrap(), api("query", &[]));
        assert_eq!(route("/api/query/last").unwrap(), api("query", &["last"]));
        assert_eq!(route("/api/query/anything").unwrap(), api("query", &[]));
        assert_eq!(route("/api/put/extra/bits").unwrap(), api("put", &[]));
        assert_eq!(route("/api/stats/jvm").unwrap(), api("stats", &["jvm"]));
        assert_eq!(route("/api/stats/nope").unwrap(), api("stats", &[]));
        assert_eq!(route("/api/uid/tsmeta").unwrap(), api("uid", &["tsmeta"]));
        assert_eq!(
            route("/api/annotations/bulk").unwrap(),
            api("annotations", &["bulk"])
        );
        assert_eq!(
            route("/Q").unwrap(),
            Route::Other {
                first: "q".into(),
                rest: String::new()
            }
        );
        let e = route("/api/v2/put").unwrap_err();
        assert_eq!(e.status, StatusCode::NOT_IMPLEMENTED);
        assert_eq!(
            e.message,
            "Requested API version is greater than the max implemented"
        );
        assert_eq!(
            e.details.as_deref(),
            Some("API version [2] is greater than the max [1]")
        );
        let e = route("/api/v1x/put").unwrap_err();
        assert_eq!(
            (e.status, e.message.as_str()),
            (
                StatusCode::BAD_REQUEST,
                "Invalid API version format supplied"
            )
        );
    }

    #[test]
    fn paths_are_rewritten_only_when_they_differ() {
        for path in [
            "/api/version",
            "/api/version/",
            "/api/v1/version",
            "/API/Version",
            "/api/query/last",
            "/api/query/last/x",
            "/api/uid/tsmeta",
            "/api/search/lookup",
            "/api/versionx",
            "/api/",
            "/api",
            "/",
            "/q",
            "/q/",
            "/Q",
            "/s/app.js",
            "/s//app.js",
            "/index.html",
        ] {
            let r = route(path).unwrap();
            let uri: Uri = format!("{path}?a=1").parse().unwrap();
            assert_eq!(r.is_path(path), r.path() == path, "{path}");
            match r.rewritten(&uri) {
                None => assert_eq!(r.path(), path),
                Some(to) => {
                    assert_eq!(to.path(), r.path(), "{path}");
                    assert_eq!(to.query(), Some("a=1"));
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn routing_never_panics(path in "/\\PC{0,40}") {
            let _ = route(&path);
        }

        #[test]
        fn a_path_is_the_routers_when_written_the_same(path in "(/(api|API)(/v1)?)?/(query|uid|search|q|s)?[a-zA-Z0-9/]{0,20}") {
            if let Ok(r) = route(&path) {
                proptest::prop_assert_eq!(r.is_path(&path), r.path() == path);
            }
        }
    }
}
