//! The HTTP API: `/api/*` endpoints with OpenTSDB's request and response shapes. Errors
//! always have OpenTSDB's shape `{"error":{"code":…,"message":…,"details":…}}`.

mod access;
mod annotation;
pub(crate) mod body;
mod deprecated;
mod dps;
mod error;
mod exp;
mod front;
mod gexp;
mod graph;
mod json;
mod last;
mod misc;
pub(crate) mod put;
mod query;
pub(crate) mod request;
mod search;
mod suggest;
mod tree;
mod ui;
mod uid;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::any;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::sync::watch;
use tower_http::compression::CompressionLayer;
use tower_http::decompression::RequestDecompressionLayer;

use crate::State;
pub(crate) use error::{ApiError, PointError};
pub use put::check_put_body;

/// Every endpoint behind [`front::front`] (route reading, modes, CORS, JSONP), answers
/// compressed when the client accepts it.
pub(crate) fn router(state: Arc<State>) -> Router {
    Router::new()
        .fallback_service(endpoints(Arc::clone(&state)))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            front::front,
        ))
        .layer(CompressionLayer::new().gzip(true).deflate(true))
}

fn endpoints(state: Arc<State>) -> Router {
    let max_body = state.settings.max_body_bytes;
    Router::new()
        .route("/api/put", any(put::handle))
        .route("/api/rollup", any(put::rollup))
        .route("/api/histogram", any(put::histogram))
        .route("/api/query", any(query::handle))
        .route("/api/query/last", any(last::handle))
        .route("/api/query/gexp", any(gexp::handle))
        .route("/api/query/exp", any(exp::handle))
        .route("/api/config/filters", any(misc::filters))
        .route("/api/suggest", any(suggest::handle))
        .route("/api/search", any(search::handle_root))
        .route("/api/search/{kind}", any(search::handle))
        .route("/api/uid", any(uid::other))
        .route("/api/uid/assign", any(uid::assign))
        .route("/api/uid/rename", any(uid::rename))
        .route("/api/uid/uidmeta", any(uid::uidmeta))
        .route("/api/uid/tsmeta", any(uid::tsmeta))
        .route("/api/uid/{*rest}", any(uid::other))
        .route("/api/tree", any(tree::root))
        .route("/api/tree/{*rest}", any(tree::sub))
        .route("/api/annotation", any(annotation::handle))
        .route("/api/annotations", any(annotation::global))
        .route("/api/annotation/bulk", any(annotation::bulk))
        .route("/api/annotations/bulk", any(annotation::bulk))
        .route("/api/version", any(misc::version))
        .route("/api/health", any(misc::health))
        .route("/api/aggregators", any(misc::aggregators))
        .route("/api/config", any(misc::config))
        .route("/api/stats", any(misc::stats))
        .route("/api/stats/{sub}", any(misc::stats_sub))
        .route("/api/dropcaches", any(misc::dropcaches))
        .route("/api/metadata/put", any(misc::metadata_put))
        .route("/", any(ui::index))
        .route("/index.html", any(ui::index))
        .route("/app.js", any(ui::file))
        .route("/app.css", any(ui::file))
        .route("/favicon.ico", any(ui::file))
        .route("/s", any(ui::file))
        .route("/s/{*file}", any(ui::file))
        .route("/status", any(ui::status))
        // OpenTSDB routes these paths by their first segment: deeper ones reach them too.
        .route("/q", any(graph::handle))
        .route("/q/{*rest}", any(graph::handle))
        .route("/aggregators", any(deprecated::aggregators))
        .route("/aggregators/{*rest}", any(deprecated::aggregators))
        .route("/version", any(deprecated::version))
        .route("/version/{*rest}", any(deprecated::version))
        .route("/stats", any(deprecated::stats))
        .route("/stats/{*rest}", any(deprecated::stats))
        .route("/suggest", any(deprecated::suggest))
        .route("/suggest/{*rest}", any(deprecated::suggest))
        .route("/logs", any(deprecated::logs))
        .route("/logs/{*rest}", any(deprecated::logs))
        .route("/diediedie", any(deprecated::diediedie))
        .route("/diediedie/{*rest}", any(deprecated::diediedie))
        .fallback(misc::fallback)
        // Innermost: bodies are held as the endpoints see them, decompressed.
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            body::hold,
        ))
        .layer(DefaultBodyLimit::max(max_body))
        .layer(RequestDecompressionLayer::new())
        .layer(axum::middleware::map_request(content_encoding))
        .with_state(state)
}

/// A request's `Content-Encoding` as OpenTSDB's HTTP layer (Netty 3's
/// `HttpContentDecompressor`) reads it: trimmed, in any case, `x-gzip` and `x-deflate` as
/// `gzip` and `deflate`; any other encoding is not decoded (the body is read as sent).
async fn content_encoding(mut req: axum::extract::Request) -> axum::extract::Request {
    use axum::http::{HeaderValue, header::CONTENT_ENCODING};
    let Some(given) = req.headers().get(CONTENT_ENCODING) else {
        return req;
    };
    let name = String::from_utf8_lossy(given.as_bytes())
        .trim()
        .to_ascii_lowercase();
    match name.as_str() {
        "gzip" | "x-gzip" => {
            req.headers_mut()
                .insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
        "deflate" | "x-deflate" => {
            req.headers_mut()
                .insert(CONTENT_ENCODING, HeaderValue::from_static("deflate"));
        }
        _ => {
            req.headers_mut().remove(CONTENT_ENCODING);
        }
    }
    req
}

/// Serves HTTP/1.1 (keep-alive, chunked bodies) on one connection until it closes or the
/// server shuts down (then the request in flight finishes first).
/// Longest wait for a request's headers, from the end of the previous response (or the
/// connection's start): slow-header clients and idle keep-alive connections are closed.
const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The client's address, on each request of its connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub(crate) Option<std::net::SocketAddr>);

pub(crate) async fn serve<S>(
    stream: S,
    router: Router,
    mut stop: watch::Receiver<bool>,
    peer: Option<std::net::SocketAddr>,
) -> std::io::Result<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let router = router.layer(axum::Extension(Peer(peer)));
    let service = TowerToHyperService::new(router);
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = stop.changed() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    result.map_err(std::io::Error::other)
}
