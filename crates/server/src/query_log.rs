//! Queries running now and the last ones completed, for `/api/stats/query`, in OpenTSDB's
//! shapes: a completed query that was asked again counts up its `executed`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use serde_json::{Value, json};

/// Completed queries kept.
const COMPLETED_KEPT: usize = 256;

#[derive(Debug, Default)]
pub(crate) struct QueryLog {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    running: BTreeMap<u64, Running>,
    /// Oldest first.
    completed: VecDeque<Completed>,
}

#[derive(Debug)]
struct Running {
    query: Value,
    remote: String,
    start_ms: i64,
    started: Instant,
}

#[derive(Debug)]
struct Completed {
    query: Value,
    executed: u64,
    start_ms: i64,
    end_ms: i64,
    status: u16,
    reason: &'static str,
    running_then: usize,
}

fn now_ms() -> i64 {
    hourglass_storage::now_ms()
}

impl QueryLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes a query starting; the id given back finishes it.
    pub(crate) fn start(&self, query: Value, remote: String) -> u64 {
        let mut inner = self.lock();
        let id = inner.next_id;
        inner.next_id += 1;
        inner.running.insert(
            id,
            Running {
                query,
                remote,
                start_ms: now_ms(),
                started: Instant::now(),
            },
        );
        id
    }

    /// Moves a query to the completed ones with the status it was answered with.
    pub(crate) fn finish(&self, id: u64, status: axum::http::StatusCode) {
        let mut inner = self.lock();
        let Some(run) = inner.running.remove(&id) else {
            return;
        };
        let running_then = inner.running.len();
        let end_ms = now_ms();
        let reason = status.canonical_reason().unwrap_or("");
        if let Some(same) = inner.completed.iter_mut().find(|c| c.query == run.query) {
            same.executed += 1;
            same.start_ms = run.start_ms;
            same.end_ms = end_ms;
            same.status = status.as_u16();
            same.reason = reason;
            same.running_then = running_then;
            return;
        }
        if inner.completed.len() == COMPLETED_KEPT {
            inner.completed.pop_front();
        }
        inner.completed.push_back(Completed {
            query: run.query,
            executed: 1,
            start_ms: run.start_ms,
            end_ms,
            status: status.as_u16(),
            reason,
            running_then,
        });
    }

    /// `{"completed": [...], "running": [...]}`.
    pub(crate) fn to_json(&self) -> Value {
        let inner = self.lock();
        let completed: Vec<Value> = inner
            .completed
            .iter()
            .rev()
            .map(|c| {
                json!({
                    "user": null,
                    "requestHeaders": {},
                    "numRunningQueries": c.running_then,
                    "exception": if c.status < 400 { "null".to_string() } else { format!("{} {}", c.status, c.reason) },
                    "httpResponse": {"code": c.status, "reasonPhrase": c.reason},
                    "executed": c.executed,
                    "query": c.query,
                    "queryStartTimestamp": c.start_ms,
                    "queryCompletedTimestamp": c.end_ms,
                    "sentToClient": true,
                    "stats": {"elapsed": (c.end_ms - c.start_ms).max(0)},
                })
            })
            .collect();
        let running: Vec<Value> = inner
            .running
            .values()
            .map(|r| {
                json!({
                    "query": r.query,
                    "remote": r.remote,
                    "user": null,
                    "headers": {},
                    "queryStart": r.start_ms,
                    "elapsed": r.started.elapsed().as_millis() as u64,
                })
            })
            .collect();
        json!({"completed": completed, "running": running})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_then_completed_and_counted_again() {
        let log = QueryLog::default();
        let q = json!({"start": "1h-ago"});
        let id = log.start(q.clone(), "127.0.0.1:5".into());
        let v = log.to_json();
        assert_eq!(v["running"][0]["query"], q);
        assert_eq!(v["completed"], json!([]));
        log.finish(id, axum::http::StatusCode::OK);
        let id = log.start(q.clone(), "127.0.0.1:5".into());
        log.finish(id, axum::http::StatusCode::BAD_REQUEST);
        let v = log.to_json();
        assert_eq!(v["running"], json!([]));
        assert_eq!(v["completed"].as_array().unwrap().len(), 1);
        assert_eq!(v["completed"][0]["executed"], 2);
        assert_eq!(v["completed"][0]["httpResponse"]["code"], 400);
    }
}
