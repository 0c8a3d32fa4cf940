use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
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
pub(crate) fn json_text_response(status: StatusCode, body: String) -> Response {
    let mut resp = (status, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=UTF-8"),
    );
    resp
}
