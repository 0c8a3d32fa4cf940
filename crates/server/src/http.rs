//! The HTTP API: `/api/*` endpoints with OpenTSDB's request and response shapes. Errors
//! always have OpenTSDB's shape `{"error":{"code":…,"message":…,"details":…}}`.

mod access;
mod annotation;
pub(crate) mod body;
mod deprecated;
mod dps;
mod encode;
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

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request};
use axum::response::Response;
use axum::routing::any;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::sync::watch;
use tower_http::compression::predicate::{Predicate, SizeAbove};
use tower_http::decompression::RequestDecompression;
use tower_service::Service;

use crate::State;
pub(crate) use error::{ApiError, PointError};
pub use put::check_put_body;

/// Every endpoint, routed by the path [`front::front`] rewrote. Nothing is layered on it:
/// what every request goes through (the front, request bodies decompressed and held, answers
/// compressed) is plain code around it ([`Tsd`], [`endpoint`]), so that a request costs one
/// boxed future and no service clones beyond the router's own.
pub(crate) fn router(state: Arc<State>) -> Router {
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
        .with_state(state)
}

/// A request's `Content-Encoding` as OpenTSDB's HTTP layer (Netty 3's
/// `HttpContentDecompressor`) reads it: trimmed, in any case, `x-gzip` and `x-deflate` as
/// `gzip` and `deflate`; any other encoding is not decoded (the header is dropped, the body
/// read as sent). True when the body is to be decoded.
fn content_encoding(req: &mut Request) -> bool {
    use axum::http::{HeaderValue, header::CONTENT_ENCODING};
    let Some(given) = req.headers().get(CONTENT_ENCODING) else {
        return false;
    };
    let name = String::from_utf8_lossy(given.as_bytes())
        .trim()
        .to_ascii_lowercase();
    let known = match name.as_str() {
        "gzip" | "x-gzip" => Some("gzip"),
        "deflate" | "x-deflate" => Some("deflate"),
        _ => None,
    };
    match known {
        Some(name) => {
            req.headers_mut()
                .insert(CONTENT_ENCODING, HeaderValue::from_static(name));
            true
        }
        None => {
            req.headers_mut().remove(CONTENT_ENCODING);
            false
        }
    }
}

/// What follows the front: the body decoded (gzip or deflate, as [`content_encoding`] reads
/// the header) and held ([`body::hold`]), under `tsd.http.request.max_body` (also the limit
/// of the endpoints' body extractors), then the endpoint the router picks.
async fn endpoint(state: &Arc<State>, router: Router, mut req: Request) -> Response {
    // Read by the endpoints' body extractors; a request without a body has nothing to limit.
    if !hyper::body::Body::is_end_stream(req.body()) {
        DefaultBodyLimit::max(state.settings.max_body_bytes).apply(&mut req);
    }
    if !content_encoding(&mut req) {
        return held(state, router, req).await;
    }
    let mut decoding = RequestDecompression::new(Held {
        state: Arc::clone(state),
        router,
    });
    match decoding.call(req).await {
        Ok(resp) => resp.map(Body::new),
        Err(never) => match never {},
    }
}

/// The body read whole under the server's budget, then the endpoint run on it; what the
/// body held is given back once the endpoint has answered.
async fn held(state: &State, mut router: Router, req: Request) -> Response {
    let head = req.method() == axum::http::Method::HEAD;
    let (req, permits) = match body::hold(state, req).await {
        Ok(held) => held,
        Err(refused) => return finished(refused, head),
    };
    let resp = match router.call(req).await {
        Ok(resp) => resp,
        Err(never) => match never {},
    };
    drop(permits);
    resp
}

/// An answer given before the router, finished as the router finishes its own: its length
/// set when known (so it is listed before what compression adds), no body for `HEAD`.
fn finished(mut resp: Response, head: bool) -> Response {
    use axum::http::{HeaderValue, header::CONTENT_LENGTH};
    if !resp.headers().contains_key(CONTENT_LENGTH)
        && let Some(len) = hyper::body::Body::size_hint(resp.body()).exact()
    {
        resp.headers_mut()
            .insert(CONTENT_LENGTH, HeaderValue::from(len));
    }
    if head {
        *resp.body_mut() = Body::empty();
    }
    resp
}

/// [`held`] as a service, behind the decompression of an encoded body.
struct Held {
    state: Arc<State>,
    router: Router,
}

type Answer = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

impl<B> Service<axum::http::Request<B>> for Held
where
    B: hyper::body::Body<Data = axum::body::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Answer;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: axum::http::Request<B>) -> Answer {
        let state = Arc::clone(&self.state);
        let router = self.router.clone();
        Box::pin(async move { Ok(held(&state, router, req.map(Body::new)).await) })
    }
}

/// Which answers are compressed: tower-http's default rule (32 bytes and more, or of a size
/// not known; not gRPC, images other than SVG, or server-sent events), reading the content
/// type once instead of once a clause.
#[derive(Debug, Clone, Copy)]
struct Compressible;

impl Predicate for Compressible {
    fn should_compress<B>(&self, response: &axum::http::Response<B>) -> bool
    where
        B: hyper::body::Body,
    {
        if !SizeAbove::new(32).should_compress(response) {
            return false;
        }
        let kind = response
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        (kind.starts_with("application/grpc-web") || !kind.starts_with("application/grpc"))
            && (kind.starts_with("image/svg+xml") || !kind.starts_with("image/"))
            && !kind.starts_with("text/event-stream")
    }
}

/// A connection's service: each request through [`front::front`], its answer compressed
/// (gzip or deflate) when the client accepts it ([`encode`]).
#[derive(Clone)]
struct Tsd {
    state: Arc<State>,
    router: Router,
    peer: Option<std::net::SocketAddr>,
}

impl Service<hyper::Request<hyper::body::Incoming>> for Tsd {
    type Response = Response;
    type Error = Infallible;
    type Future = Answer;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: hyper::Request<hyper::body::Incoming>) -> Answer {
        let state = Arc::clone(&self.state);
        let router = self.router.clone();
        let peer = self.peer;
        let coding = encode::chosen(req.headers());
        Box::pin(async move {
            let resp = front::front(state, router, peer, req.map(Body::new)).await;
            Ok(encode::encoded(coding, resp).await)
        })
    }
}

/// Serves HTTP/1.1 (keep-alive, chunked bodies) on one connection until it closes or the
/// server shuts down (then the request in flight finishes first).
/// Longest wait for a request's headers, from the end of the previous response (or the
/// connection's start): slow-header clients and idle keep-alive connections are closed.
const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

pub(crate) async fn serve<S>(
    stream: S,
    state: &Arc<State>,
    router: Router,
    mut stop: watch::Receiver<bool>,
    peer: Option<std::net::SocketAddr>,
) -> std::io::Result<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = TowerToHyperService::new(Tsd {
        state: Arc::clone(state),
        router,
        peer,
    });
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

#[cfg(test)]
mod tests {
    use super::*;
    use tower_http::compression::predicate::DefaultPredicate;

    #[test]
    fn compressible_answers_are_those_of_the_default_rule() {
        let kinds = [
            None,
            Some("application/json; charset=UTF-8"),
            Some("text/html; charset=UTF-8"),
            Some("text/plain"),
            Some("image/png"),
            Some("image/svg+xml"),
            Some("image/"),
            Some("application/grpc"),
            Some("application/grpc+proto"),
            Some("application/grpc-web"),
            Some("application/grpc-web+proto"),
            Some("text/event-stream"),
            Some("text/event-streamed"),
            Some(""),
        ];
        let mut compressed = 0;
        for kind in kinds {
            for size in [0usize, 1, 31, 32, 33, 4096] {
                for known in [true, false] {
                    let body = axum::body::Bytes::from(vec![b'x'; size]);
                    let ours = if known {
                        same_rule(typed(Body::from(body), kind))
                    } else {
                        same_rule(typed(Unsized(Some(body)), kind))
                    };
                    assert_eq!(ours.0, ours.1, "{kind:?} {size} {known}");
                    let ours = ours.0;
                    compressed += usize::from(ours);
                }
            }
        }
        // Both answers occur: the rule is not all one way.
        assert!(compressed > 0 && compressed < kinds.len() * 12);
    }

    fn typed<B>(body: B, kind: Option<&'static str>) -> axum::http::Response<B> {
        let mut resp = axum::http::Response::new(body);
        if let Some(kind) = kind {
            resp.headers_mut().insert(
                axum::http::header::CONTENT_TYPE,
                axum::http::HeaderValue::from_static(kind),
            );
        }
        resp
    }

    /// Ours, then the default rule's.
    fn same_rule<B: hyper::body::Body>(resp: axum::http::Response<B>) -> (bool, bool) {
        (
            Compressible.should_compress(&resp),
            DefaultPredicate::new().should_compress(&resp),
        )
    }

    /// A body of a size not known ahead.
    struct Unsized(Option<axum::body::Bytes>);

    impl hyper::body::Body for Unsized {
        type Data = axum::body::Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<hyper::body::Frame<axum::body::Bytes>, Infallible>>> {
            Poll::Ready(self.0.take().map(|b| Ok(hyper::body::Frame::data(b))))
        }
    }
}
