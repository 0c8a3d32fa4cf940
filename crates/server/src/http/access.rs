//! Authentication and authorization of HTTP requests (with `tsd.core.authentication.enable`):
//! the credentials a request carries (`Authorization: Basic …` or `Bearer …`), and the one
//! table of the permission each route needs, by method.
//!
//! Missing or wrong credentials: 401 with `WWW-Authenticate` (Basic and Bearer, realm
//! `hourglass`); a principal lacking the permission: 403. Both in OpenTSDB's error shape;
//! neither echoes what was sent.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use hourglass_core::permission::{Permission, Permissions};

use super::ApiError;
use crate::State;
use crate::auth::{Access, Authenticator, Principal};

/// The permission a route needs, by the method it is called with: `(route, GET/HEAD,
/// POST/PUT, DELETE)`. Routes are written as [`route_key`] gives them (lower case, `/api/v1`
/// as `/api`, deeper segments only where an endpoint reads them). A route not listed needs
/// `read` (it answers 404 once authenticated).
///
/// `/api/query` with `"delete": true` in its body also needs `delete`, and a deletion needs
/// `read` too (its answer holds the deleted points): the query endpoint checks both itself,
/// as only it reads the body ([`require`]).
pub(crate) const RULES: &[(&str, Permission, Permission, Permission)] = {
    use Permission::{Admin, Annotate, Delete, Read, Uid, Write};
    &[
        // Writing points.
        ("/api/put", Write, Write, Write),
        ("/api/rollup", Write, Write, Write),
        ("/api/histogram", Write, Write, Write),
        // scollector's metadata posts (accepted, not stored).
        ("/api/metadata/put", Write, Write, Write),
        // Queries; DELETE deletes what the query matches.
        ("/api/query", Read, Read, Delete),
        ("/api/query/last", Read, Read, Read),
        ("/api/query/exp", Read, Read, Read),
        ("/api/query/gexp", Read, Read, Read),
        ("/api/suggest", Read, Read, Read),
        ("/api/search", Read, Read, Read),
        ("/api/aggregators", Read, Read, Read),
        ("/api/config/filters", Read, Read, Read),
        ("/api/version", Read, Read, Read),
        ("/api/health", Read, Read, Read),
        // Annotations.
        ("/api/annotation", Read, Annotate, Delete),
        ("/api/annotations", Read, Annotate, Delete),
        ("/api/annotation/bulk", Read, Annotate, Delete),
        ("/api/annotations/bulk", Read, Annotate, Delete),
        // UIDs and their meta data.
        ("/api/uid", Read, Read, Read),
        ("/api/uid/assign", Uid, Uid, Uid),
        ("/api/uid/rename", Uid, Uid, Uid),
        ("/api/uid/uidmeta", Read, Uid, Delete),
        ("/api/uid/tsmeta", Read, Uid, Delete),
        // Trees: definitions and rules are meta data; the rest reads.
        ("/api/tree", Read, Uid, Delete),
        ("/api/tree/rule", Read, Uid, Delete),
        ("/api/tree/rules", Read, Uid, Delete),
        // Administration.
        ("/api/config", Admin, Admin, Admin),
        ("/api/stats", Admin, Admin, Admin),
        ("/api/stats/threads", Admin, Admin, Admin),
        ("/api/stats/jvm", Admin, Admin, Admin),
        ("/api/stats/query", Admin, Admin, Admin),
        ("/api/stats/region_clients", Admin, Admin, Admin),
        ("/api/dropcaches", Admin, Admin, Admin),
        ("/api/serializers", Admin, Admin, Admin),
        // The web UI, graphs and OpenTSDB's older paths.
        ("/", Read, Read, Read),
        ("/q", Read, Read, Read),
        ("/status", Read, Read, Read),
        ("/aggregators", Read, Read, Read),
        ("/version", Read, Read, Read),
        ("/suggest", Read, Read, Read),
        ("/stats", Admin, Admin, Admin),
        ("/logs", Admin, Admin, Admin),
        ("/diediedie", Admin, Admin, Admin),
    ]
};

/// The permission `route` (a [`route_key`]) needs when called with `method` (after
/// `method_override`).
pub(crate) fn required(route: &str, method: &Method) -> Permission {
    let Some((_, get, post, delete)) = RULES.iter().find(|(r, ..)| *r == route) else {
        return Permission::Read;
    };
    match *method {
        Method::GET | Method::HEAD | Method::OPTIONS => *get,
        Method::DELETE => *delete,
        _ => *post,
    }
}

/// A route as [`RULES`] names it: `endpoint` and the deeper segments the endpoint reads, or
/// the first segment of a path outside `/api`.
pub(crate) fn route_key(api: Option<(&str, &[String])>, first: &str) -> String {
    match api {
        Some((endpoint, rest)) => {
            let sub = rest.first().map(|s| s.to_ascii_lowercase());
            match (endpoint, sub) {
                // Every path under /api/search is a search; under /api/uid, the first
                // segment picks the endpoint.
                ("search", _) | (_, None) => format!("/api/{endpoint}"),
                (_, Some(sub)) => format!("/api/{endpoint}/{sub}"),
            }
        }
        None => match first {
            // The UI's own files.
            "index.html" | "app.js" | "app.css" | "favicon.ico" | "s" => "/".to_string(),
            _ => format!("/{first}"),
        },
    }
}

/// The method a request acts as: a GET's `method_override` parameter counts, as the
/// endpoints honour it.
pub(crate) fn effective_method(method: &Method, query: Option<&str>) -> Method {
    if *method != Method::GET {
        return method.clone();
    }
    let params = super::request::Params::parse(query);
    match params.get("method_override").map(str::to_ascii_lowercase) {
        Some(m) if m == "post" => Method::POST,
        Some(m) if m == "put" => Method::PUT,
        Some(m) if m == "delete" => Method::DELETE,
        _ => Method::GET,
    }
}

/// Credentials as a request carries them.
enum Credentials {
    Basic { user: String, password: String },
    Bearer(String),
}

/// The `Authorization` header read; `Err` when it is there but malformed.
fn credentials(headers: &HeaderMap) -> Option<Result<Credentials, ()>> {
    let value = headers.get(header::AUTHORIZATION)?;
    let parse = || {
        let value = value.to_str().map_err(|_| ())?.trim();
        let (scheme, rest) = value.split_once(' ').ok_or(())?;
        let rest = rest.trim();
        if scheme.eq_ignore_ascii_case("basic") {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(rest)
                .map_err(|_| ())?;
            let decoded = String::from_utf8(decoded).map_err(|_| ())?;
            let (user, password) = decoded.split_once(':').ok_or(())?;
            Ok(Credentials::Basic {
                user: user.to_owned(),
                password: password.to_owned(),
            })
        } else if scheme.eq_ignore_ascii_case("bearer") && !rest.is_empty() {
            Ok(Credentials::Bearer(rest.to_owned()))
        } else {
            Err(())
        }
    };
    Some(parse())
}

/// Checks a request's credentials against the permission its route needs; on success the
/// request carries its [`Access`]. `Err` is the answer to send instead.
pub(crate) async fn authorize(
    state: &Arc<State>,
    route: &str,
    req: &mut Request,
    peer: Option<std::net::SocketAddr>,
) -> Result<(), Response> {
    let Some(auth) = state.settings.auth.as_ref().map(|file| file.current()) else {
        req.extensions_mut().insert(Access::Open);
        return Ok(());
    };
    if state.settings.open_paths.iter().any(|p| p == route) {
        // Served without credentials, as nobody: an endpoint checking more itself (a query
        // deleting by its body) still refuses.
        req.extensions_mut().insert(Access::As(Principal {
            name: "(unauthenticated)".to_string(),
            permissions: Permissions::NONE,
        }));
        return Ok(());
    }
    let needed = required(route, &effective_method(req.method(), req.uri().query()));
    let found = credentials(req.headers());
    if found.is_none() {
        return Err(unauthorized("Authentication required"));
    }
    let ip = peer.map(|a| a.ip());
    if !state.auth_throttle.allows(ip, Instant::now()) {
        state.stats.auth_throttled.fetch_add(1, Ordering::Relaxed);
        return Err(throttled());
    }
    let principal = match found {
        Some(Ok(credentials)) => verify(auth, credentials).await,
        _ => None,
    };
    let Some(principal) = principal else {
        state.auth_throttle.failed(ip, Instant::now());
        state
            .stats
            .auth_failures_http
            .fetch_add(1, Ordering::Relaxed);
        tracing::info!(route, client = ?ip, "HTTP authentication failed");
        return Err(unauthorized("Invalid credentials"));
    };
    if !principal.permissions.allows(needed) {
        state.stats.auth_forbidden.fetch_add(1, Ordering::Relaxed);
        return Err(forbidden(&principal, needed).into_response());
    }
    req.extensions_mut().insert(Access::As(principal));
    Ok(())
}

/// A password checked off the async threads unless remembered (argon2 takes tens of ms).
async fn verify(auth: Arc<Authenticator>, credentials: Credentials) -> Option<Principal> {
    match credentials {
        Credentials::Bearer(token) => auth.verify_token(&token),
        Credentials::Basic { user, password } => {
            if let Some(principal) = auth.remembered(&user, &password) {
                return Some(principal);
            }
            tokio::task::spawn_blocking(move || auth.verify_password(&user, &password))
                .await
                .ok()
                .flatten()
        }
    }
}

/// 401, with both challenges (a browser asks for a name and password on `Basic`).
fn unauthorized(message: &str) -> Response {
    let mut resp = ApiError::new(StatusCode::UNAUTHORIZED, message)
        .with_details("Send Authorization: Basic (user and password) or Bearer (API token)")
        .into_response();
    let headers = resp.headers_mut();
    headers.append(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"hourglass\", charset=\"UTF-8\""),
    );
    headers.append(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"hourglass\""),
    );
    resp
}

/// 429: too many failures from this address lately.
fn throttled() -> Response {
    let mut resp = ApiError::new(StatusCode::TOO_MANY_REQUESTS, "Too many failed authentications")
        .with_details("Failed authentications from this address are past tsd.core.authentication.max_failures a minute")
        .into_response();
    resp.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(crate::auth::throttle::WINDOW.as_secs()),
    );
    resp
}

fn forbidden(principal: &Principal, needed: Permission) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, "Permission denied").with_details(format!(
        "{} lacks the {needed} permission this request needs",
        principal.name
    ))
}

/// For an endpoint that finds out from the body that it needs more (a query deleting what
/// it matches): 403 unless the request's access allows `permission`.
pub(crate) fn require(access: Option<&Access>, permission: Permission) -> Result<(), ApiError> {
    match access {
        // No access recorded: the front did not run (cannot happen behind the router).
        None => Err(ApiError::new(StatusCode::FORBIDDEN, "Permission denied")),
        Some(access) if access.allows(permission) => Ok(()),
        Some(Access::As(principal)) => Err(forbidden(principal, permission)),
        Some(Access::Open) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Permission::{Admin, Annotate, Delete, Read, Uid, Write};

    #[test]
    fn every_route_needs_what_the_table_says() {
        let cases: &[(&str, Method, Permission)] = &[
            ("/api/put", Method::POST, Write),
            ("/api/rollup", Method::POST, Write),
            ("/api/histogram", Method::POST, Write),
            ("/api/query", Method::GET, Read),
            ("/api/query", Method::POST, Read),
            ("/api/query", Method::DELETE, Delete),
            ("/api/query/last", Method::GET, Read),
            ("/api/query/exp", Method::POST, Read),
            ("/api/suggest", Method::GET, Read),
            ("/api/search", Method::GET, Read),
            ("/api/annotation", Method::GET, Read),
            ("/api/annotation", Method::POST, Annotate),
            ("/api/annotation", Method::PUT, Annotate),
            ("/api/annotation", Method::DELETE, Delete),
            ("/api/annotations/bulk", Method::DELETE, Delete),
            ("/api/uid/assign", Method::GET, Uid),
            ("/api/uid/rename", Method::POST, Uid),
            ("/api/uid/uidmeta", Method::GET, Read),
            ("/api/uid/uidmeta", Method::POST, Uid),
            ("/api/uid/tsmeta", Method::DELETE, Delete),
            ("/api/dropcaches", Method::GET, Admin),
            ("/api/config", Method::GET, Admin),
            ("/api/stats", Method::GET, Admin),
            ("/api/stats/query", Method::GET, Admin),
            ("/", Method::GET, Read),
            ("/q", Method::GET, Read),
            ("/logs", Method::GET, Admin),
            ("/diediedie", Method::GET, Admin),
            ("/api/nothing_here", Method::POST, Read),
        ];
        for (route, method, expected) in cases {
            assert_eq!(required(route, method), *expected, "{method} {route}");
        }
    }

    #[test]
    fn route_keys_name_the_endpoint() {
        let rest = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(route_key(Some(("put", &[])), "api"), "/api/put");
        assert_eq!(
            route_key(Some(("uid", &rest(&["Assign"]))), "api"),
            "/api/uid/assign"
        );
        assert_eq!(
            route_key(Some(("search", &rest(&["lookup"]))), "api"),
            "/api/search"
        );
        assert_eq!(route_key(None, "app.js"), "/");
        assert_eq!(route_key(None, "q"), "/q");
        // Every table route is a key some path gives: none is unreachable by a typo.
        for (route, ..) in RULES {
            assert!(route.starts_with('/'), "{route}");
            assert_eq!(route.to_ascii_lowercase(), *route);
        }
    }

    #[test]
    fn method_override_acts_as_its_method() {
        let m = |q| effective_method(&Method::GET, Some(q));
        assert_eq!(m("method_override=delete"), Method::DELETE);
        assert_eq!(m("method_override=POST"), Method::POST);
        assert_eq!(m("x=1"), Method::GET);
        assert_eq!(
            effective_method(&Method::POST, Some("method_override=get")),
            Method::POST
        );
    }
}
