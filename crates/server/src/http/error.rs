use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hourglass_engine::query::memory::Hold;

use crate::state::BYTES_A_HELD_POINT;
use hourglass_engine::{Error as EngineError, ErrorKind};
use serde_json::json;

/// An error answered in OpenTSDB's shape.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
    pub(crate) details: Option<String>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            details: None,
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub(crate) fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = Some(details.into());
        self
    }

    pub(crate) fn method_not_allowed(method: &axum::http::Method) -> Self {
        ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "Method not allowed").with_details(format!(
            "The HTTP method [{method}] is not permitted for this endpoint"
        ))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // An update that changes nothing: OpenTSDB answers a bare 304.
        if self.status == StatusCode::NOT_MODIFIED {
            return self.status.into_response();
        }
        let mut error = json!({ "code": self.status.as_u16(), "message": self.message });
        if let Some(d) = self.details.filter(|d| !d.is_empty()) {
            error["details"] = json!(d);
        }
        let mut resp = json_response(self.status, &json!({ "error": error }));
        // Refused for now (writes throttled, storage away): worth retrying soon.
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp
    }
}

/// A JSON body with OpenTSDB's content type.
pub(crate) fn json_response(status: StatusCode, body: &serde_json::Value) -> Response {
    json_text_response(status, body.to_string())
}

/// An already serialized JSON body with OpenTSDB's content type.
pub(crate) fn json_text_response(
    status: StatusCode,
    body: impl Into<axum::body::Body>,
) -> Response {
    let mut resp = (status, body.into()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=UTF-8"),
    );
    resp
}

/// An answer's text being written, counted against the query memory budget as its bytes
/// over [`BYTES_A_HELD_POINT`] ([`Hold`]): the budget's lock is taken each time the text has
/// grown by a [`HeldBody::PIECE`], not at each group written.
pub(crate) struct CountedText(Hold);

impl CountedText {
    pub(crate) fn new(tsdb: &hourglass_engine::Tsdb) -> CountedText {
        CountedText(Hold::new(std::sync::Arc::clone(tsdb.query_memory())))
    }

    /// Counts `text` as it is now, when it has grown a piece's worth since last counted.
    pub(crate) fn grew(&mut self, text: &(impl AsRef<[u8]> + ?Sized)) {
        let points = text.as_ref().len() as u64 / BYTES_A_HELD_POINT;
        if points >= self.0.points() + (HeldBody::PIECE as u64 / BYTES_A_HELD_POINT) {
            self.0.set(points);
        }
    }

    /// The finished text as a body holding its count until the connection has taken it.
    pub(crate) fn into_body(mut self, text: axum::body::Bytes) -> HeldBody {
        self.0.set(text.len() as u64 / BYTES_A_HELD_POINT);
        HeldBody::new(text, self.0)
    }
}

/// An answer's text with the query memory it holds ([`Hold`]), handed to the connection in
/// pieces of [`HeldBody::PIECE`] bytes (the connection takes the next once it has room for
/// it, so a slow client keeps the last pieces, and the hold, until it has read the rest);
/// the hold is given back when the body is dropped, after its last piece (or unsent).
pub(crate) struct HeldBody {
    text: Option<axum::body::Bytes>,
    _hold: Hold,
}

impl HeldBody {
    pub(crate) const PIECE: usize = 64 * 1024;

    pub(crate) fn new(text: axum::body::Bytes, hold: Hold) -> HeldBody {
        HeldBody {
            text: Some(text),
            _hold: hold,
        }
    }
}

impl hyper::body::Body for HeldBody {
    type Data = axum::body::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let piece = match &mut this.text {
            Some(text) if text.len() > HeldBody::PIECE => Some(text.split_to(HeldBody::PIECE)),
            _ => this.text.take(),
        };
        std::task::Poll::Ready(piece.map(|p| Ok(hyper::body::Frame::data(p))))
    }

    fn is_end_stream(&self) -> bool {
        self.text.is_none()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.text.as_ref().map_or(0, |t| t.len() as u64))
    }
}

impl From<HeldBody> for axum::body::Body {
    fn from(body: HeldBody) -> axum::body::Body {
        axum::body::Body::new(body)
    }
}

/// An engine error as an HTTP answer: OpenTSDB's 400 for bad input and unknown names, 413 for
/// a query past its limits, 424 while storage is away, 503 while running queries hold all
/// the memory they may hold together, 500 for the rest.
impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> ApiError {
        let msg = e.to_string();
        match e.kind() {
            ErrorKind::NotFound | ErrorKind::InvalidInput => {
                ApiError::bad_request(msg.clone()).with_details(msg)
            }
            ErrorKind::LimitExceeded => ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, msg),
            ErrorKind::NotModified => ApiError::new(StatusCode::NOT_MODIFIED, msg),
            ErrorKind::Busy => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, msg),
            ErrorKind::Unavailable => ApiError::new(StatusCode::FAILED_DEPENDENCY, msg),
            _ => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, msg),
        }
    }
}

/// How a point the write path refused is reported, in OpenTSDB's words: the telnet reply
/// (`put: unknown metric: ...`, `put: illegal argument: ...`, `put: HBase error: ...`) and
/// the `/api/put` per-point error (`Unknown metric`, the message itself, `Storage
/// exception: ...`).
pub(crate) struct PointError {
    pub(crate) telnet: String,
    pub(crate) http: String,
    /// The store failed or throttled the write (OpenTSDB's storage error path): the telnet
    /// reply is sent only with `tsd.rpc.telnet.return_errors`.
    pub(crate) storage: bool,
}

impl PointError {
    pub(crate) fn of(e: &EngineError) -> PointError {
        PointError::of_command("put", e)
    }

    /// [`PointError::of`] for a telnet command other than `put` (`rollup`).
    pub(crate) fn of_command(command: &str, e: &EngineError) -> PointError {
        let text = e.to_string();
        let (prefix, http, storage) = match e.kind() {
            // "Please throttle writes: ..." as OpenTSDB words it.
            _ if matches!(e, EngineError::Throttled(_)) => ("", text.clone(), true),
            ErrorKind::NotFound => ("unknown metric: ", "Unknown metric".to_string(), false),
            ErrorKind::InvalidInput => ("illegal argument: ", text.clone(), false),
            // A write the store failed: OpenTSDB's telnet words for any storage failure.
            _ => ("HBase error: ", format!("Storage exception: {text}"), true),
        };
        PointError {
            telnet: format!("{command}: {prefix}{text}"),
            http,
            storage,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use hourglass_engine::query::memory::QueryMemory;
    use hyper::body::Body as _;

    use super::*;

    /// Text is counted a piece's worth at a time while written, exactly when finished.
    #[test]
    fn answer_text_is_counted_a_piece_at_a_time_then_whole() {
        let memory = Arc::new(QueryMemory::default());
        let mut counted = CountedText(Hold::new(Arc::clone(&memory)));
        let step = HeldBody::PIECE / BYTES_A_HELD_POINT as usize;
        let mut text = "x".repeat(HeldBody::PIECE - 36);
        counted.grew(&text);
        assert_eq!(memory.held(), 0, "less than a piece");
        text.push_str(&"x".repeat(72));
        counted.grew(&text);
        assert_eq!(memory.held() as usize, text.len() / 36);
        assert!(memory.held() as usize >= step);
        text.push_str("tail");
        let body = counted.into_body(axum::body::Bytes::from(text.clone()));
        assert_eq!(memory.held() as usize, text.len() / 36, "the whole text");
        drop(body);
        assert_eq!(memory.held(), 0);
    }

    /// The hold stays while pieces remain and goes with the body; the pieces rebuild the
    /// text, none longer than a piece.
    #[test]
    fn a_held_body_keeps_its_hold_until_dropped() {
        let memory = Arc::new(QueryMemory::default());
        let mut hold = Hold::new(Arc::clone(&memory));
        hold.set(500);
        let text: Vec<u8> = (0..HeldBody::PIECE * 2 + 10)
            .map(|i| (i % 251) as u8)
            .collect();
        let mut body = HeldBody::new(axum::body::Bytes::from(text.clone()), hold);
        assert_eq!(body.size_hint().exact(), Some(text.len() as u64));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let mut got = Vec::new();
        while let std::task::Poll::Ready(Some(Ok(frame))) =
            std::pin::Pin::new(&mut body).poll_frame(&mut cx)
        {
            let piece = frame.into_data().unwrap();
            assert!(piece.len() <= HeldBody::PIECE);
            got.extend_from_slice(&piece);
            assert_eq!(memory.held(), 500, "held while the body lives");
        }
        assert_eq!(got, text);
        assert!(body.is_end_stream());
        drop(body);
        assert_eq!(memory.held(), 0);
    }
}
