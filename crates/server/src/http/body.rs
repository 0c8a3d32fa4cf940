//! Request bodies are read whole before their endpoint runs, under one budget for the whole
//! server: twice `tsd.http.request.max_body`, so that any one body fits and the bodies held
//! at once stay bounded however many clients send. A body that finds the budget spent is
//! not read until some is given back (its client waits, its bytes held back by TCP); what a
//! body holds is given back once its endpoint has answered. Bodies are counted as the
//! endpoint sees them, after gzip or deflate is undone.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use hyper::body::Body as _;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::ApiError;
use crate::State;

/// The budget's unit: permits are counted in KiB, so that a budget of gigabytes fits a
/// semaphore's permits.
const UNIT: usize = 1024;

/// The bytes all request bodies held at once may take.
#[derive(Debug)]
pub(crate) struct BodyBudget {
    units: Arc<Semaphore>,
    /// The most one body holds: its limit, so one body never waits for more than there is.
    max_units: usize,
}

impl BodyBudget {
    /// Twice `max_body`, one body's most.
    pub(crate) fn new(max_body: usize) -> BodyBudget {
        let max_units = max_body.div_ceil(UNIT).max(1);
        let total = (2 * max_units).min(Semaphore::MAX_PERMITS);
        BodyBudget {
            units: Arc::new(Semaphore::new(total)),
            max_units: max_units.min(total).min(u32::MAX as usize),
        }
    }

    /// Units free now (for tests and stats).
    pub(crate) fn available_bytes(&self) -> usize {
        self.units.available_permits() * UNIT
    }
}

/// A request read whole, and the part of the budget its body holds (`None` for none): to be
/// dropped once its endpoint has answered.
pub(crate) type Held = (Request, Option<OwnedSemaphorePermit>);

/// Reads a request's body under the budget, as the request its endpoint is to run on; `Err`
/// is the answer instead.
pub(crate) async fn hold(state: &State, req: Request) -> Result<Held, Response> {
    let max = state.settings.max_body_bytes;
    let (parts, mut body) = req.into_parts();
    if body.is_end_stream() {
        return Ok((Request::from_parts(parts, body), None));
    }
    let budget = &state.body_budget;
    // Kept as read (most bodies come in one piece), joined once at the end.
    let mut chunks: Vec<axum::body::Bytes> = Vec::new();
    let mut len = 0usize;
    let mut permits: Option<OwnedSemaphorePermit> = None;
    let mut units = 0usize;
    loop {
        let frame = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await;
        let data = match frame {
            None => break,
            Some(Err(e)) => {
                return Err(ApiError::bad_request("Unable to read the request body")
                    .with_details(e.to_string())
                    .into_response());
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => data,
                // Trailers: nothing an endpoint reads.
                Err(_) => continue,
            },
        };
        if len + data.len() > max {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("The request body is larger than tsd.http.request.max_body ({max} bytes)"),
            )
            .into_response());
        }
        len += data.len();
        let want = len.div_ceil(UNIT).min(budget.max_units);
        if want > units {
            let more = u32::try_from(want - units).unwrap_or(u32::MAX);
            let Ok(permit) = Arc::clone(&budget.units).acquire_many_owned(more).await else {
                return Err(
                    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response(),
                );
            };
            match &mut permits {
                Some(p) => p.merge(permit),
                None => permits = Some(permit),
            }
            units = want;
        }
        chunks.push(data);
    }
    let whole = match chunks.len() {
        1 => chunks.pop().unwrap_or_default(),
        _ => {
            let mut joined = Vec::with_capacity(len);
            for c in &chunks {
                joined.extend_from_slice(c);
            }
            joined.into()
        }
    };
    drop(chunks);
    Ok((Request::from_parts(parts, Body::from(whole)), permits))
}
