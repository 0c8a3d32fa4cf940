//! Server counters and the `stats` report shared by telnet `stats` and `/api/stats`.

use std::sync::atomic::{AtomicU64, Ordering};

use hourglass_core::uid::UidKind;
use hourglass_engine::{Error, ErrorKind};

use crate::State;

#[derive(Debug, Default)]
pub(crate) struct ServerStats {
    connections_open: AtomicU64,
    connections_total: AtomicU64,
    /// Connections closed at once: over `tsd.core.connections.limit`.
    pub(crate) connections_rejected: AtomicU64,
    /// Connections closed for being idle past `tsd.core.socket.timeout`.
    pub(crate) idle_timeouts: AtomicU64,
    /// Put batches refused (HTTP) or held back (telnet) while buffers were over budget.
    pub(crate) throttled: AtomicU64,
    pub(crate) telnet_rpcs: AtomicU64,
    pub(crate) http_rpcs: AtomicU64,
    pub(crate) put_requests: AtomicU64,
    pub(crate) points_received: AtomicU64,
    pub(crate) illegal_arguments: AtomicU64,
    pub(crate) invalid_values: AtomicU64,
    pub(crate) unknown_metrics: AtomicU64,
    pub(crate) storage_errors: AtomicU64,
}

impl ServerStats {
    pub(crate) fn connections_open(&self) -> u64 {
        self.connections_open.load(Ordering::Relaxed)
    }

    pub(crate) fn connection_opened(&self) {
        self.connections_open.fetch_add(1, Ordering::Relaxed);
        self.connections_total.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn connection_closed(&self) {
        self.connections_open.fetch_sub(1, Ordering::Relaxed);
    }

    /// Counts a rejected point by the kind of its error.
    pub(crate) fn count_error(&self, e: &Error) {
        let counter = match e.kind() {
            ErrorKind::NotFound => &self.unknown_metrics,
            ErrorKind::InvalidInput => &self.illegal_arguments,
            _ => &self.storage_errors,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// One statistic: metric, value and tags (the host tag is added by the report).
#[derive(Debug)]
pub(crate) struct Stat {
    pub(crate) metric: &'static str,
    pub(crate) value: u64,
    pub(crate) tag: Option<(&'static str, String)>,
}

fn stat(metric: &'static str, value: u64, tag: Option<(&'static str, &str)>) -> Stat {
    Stat {
        metric,
        value,
        tag: tag.map(|(k, v)| (k, v.to_string())),
    }
}

pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// Every statistic of the server and the database.
pub(crate) fn collect(state: &State) -> Vec<Stat> {
    let s = &state.stats;
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let w = state.tsdb.write_stats();
    let uids = state.tsdb.uids();
    let sizes = uids.cache_sizes();
    let mut out = vec![
        stat(
            "tsd.connectionmgr.connections",
            get(&s.connections_open),
            Some(("type", "open")),
        ),
        stat(
            "tsd.connectionmgr.connections",
            get(&s.connections_total),
            Some(("type", "total")),
        ),
        stat(
            "tsd.connectionmgr.connections",
            get(&s.connections_rejected),
            Some(("type", "rejected")),
        ),
        stat(
            "tsd.connectionmgr.exceptions",
            get(&s.idle_timeouts),
            Some(("type", "timeout")),
        ),
        stat(
            "tsd.rpc.received",
            get(&s.telnet_rpcs),
            Some(("type", "telnet")),
        ),
        stat(
            "tsd.rpc.received",
            get(&s.http_rpcs),
            Some(("type", "http")),
        ),
        stat(
            "tsd.rpc.received",
            get(&s.put_requests),
            Some(("type", "put")),
        ),
        stat(
            "tsd.rpc.errors",
            get(&s.illegal_arguments),
            Some(("type", "illegal_arguments")),
        ),
        stat(
            "tsd.rpc.errors",
            get(&s.invalid_values),
            Some(("type", "invalid_values")),
        ),
        stat(
            "tsd.rpc.errors",
            get(&s.unknown_metrics),
            Some(("type", "unknown_metrics")),
        ),
        stat(
            "tsd.rpc.errors",
            get(&s.storage_errors),
            Some(("type", "storage")),
        ),
        stat("tsd.datapoints.received", get(&s.points_received), None),
        stat("tsd.datapoints.added", get(&w.points_stored), None),
        stat(
            "tsd.datapoints.buffered",
            state.tsdb.buffered_points() as u64,
            None,
        ),
        stat(
            "tsd.datapoints.buffered_bytes",
            state.tsdb.buffered_bytes() as u64,
            None,
        ),
        stat(
            "tsd.rpc.errors",
            get(&s.throttled),
            Some(("type", "throttled")),
        ),
        stat("tsd.storage.flush_errors", get(&w.flush_errors), None),
        stat("tsd.storage.log_syncs", get(&w.log_syncs), None),
        stat(
            "tsd.storage.log_poisoned",
            u64::from(state.tsdb.log_poisoned().is_some()),
            None,
        ),
        stat("tsd.datapoints.duplicates", get(&w.duplicates), None),
        stat("tsd.storage.flushes", get(&w.flushes), None),
        stat("tsd.storage.rows_written", get(&w.rows_written), None),
        stat(
            "tsd.compaction.count",
            get(&w.rows_compacted),
            Some(("type", "compacted")),
        ),
        stat("tsd.compaction.errors", get(&w.compaction_errors), None),
        stat(
            "tsd.storage.flush_latency_us",
            get(&w.last_flush_micros),
            Some(("type", "last")),
        ),
        stat(
            "tsd.storage.flush_latency_us",
            get(&w.max_flush_micros),
            Some(("type", "max")),
        ),
        stat(
            "tsd.uid.cache-hit",
            get(&uids.stats.hits),
            Some(("kind", "all")),
        ),
        stat(
            "tsd.uid.cache-miss",
            get(&uids.stats.misses),
            Some(("kind", "all")),
        ),
        stat("tsd.uptime", state.started.elapsed().as_secs(), None),
    ];
    for kind in UidKind::ALL {
        out.push(stat(
            "tsd.uid.cache-size",
            sizes[kind.index()] as u64,
            Some(("kind", kind.qualifier())),
        ));
    }
    out
}
