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
    /// HTTP requests with wrong or malformed credentials (answered 401).
    pub(crate) auth_failures_http: AtomicU64,
    /// Telnet `auth` lines that failed.
    pub(crate) auth_failures_telnet: AtomicU64,
    /// TLS handshakes that failed or timed out.
    pub(crate) tls_failures: AtomicU64,
    /// Plain connections closed because `tsd.network.tls.mode = required`.
    pub(crate) plain_refused: AtomicU64,
    /// Attempts refused unchecked: their address failed too often (HTTP 429).
    pub(crate) auth_throttled: AtomicU64,
    /// Requests and commands refused for a permission their principal lacks (403).
    pub(crate) auth_forbidden: AtomicU64,
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
    /// HTTP requests answered with a server error.
    pub(crate) rpc_exceptions: AtomicU64,
    pub(crate) http_latency: Latencies,
    pub(crate) graph_latency: Latencies,
    pub(crate) graph_requests: AtomicU64,
    pub(crate) query_success: AtomicU64,
    pub(crate) query_invalid: AtomicU64,
    pub(crate) query_exceptions: AtomicU64,
    /// Queries running and the last ones completed, for `/api/stats/query`.
    pub(crate) queries: crate::query_log::QueryLog,
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

/// Request latencies in milliseconds, bucketed as OpenTSDB's histograms are: 2 ms buckets
/// up to 100 ms, then doubling up to 16 s, then one bucket for anything longer.
#[derive(Debug)]
pub(crate) struct Latencies {
    buckets: [AtomicU64; BUCKETS],
}

const LINEAR_BUCKETS: usize = 50;
const BUCKETS: usize = LINEAR_BUCKETS + 8;

impl Default for Latencies {
    fn default() -> Self {
        Latencies {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl Latencies {
    /// The upper bound (ms) of bucket `i`.
    fn bound(i: usize) -> u64 {
        if i < LINEAR_BUCKETS {
            2 * (i as u64 + 1)
        } else {
            100 << (i - LINEAR_BUCKETS + 1)
        }
    }

    pub(crate) fn record(&self, ms: u64) {
        let i = if ms < 100 {
            (ms / 2) as usize
        } else {
            (LINEAR_BUCKETS..BUCKETS - 1)
                .find(|i| ms < Self::bound(*i))
                .unwrap_or(BUCKETS - 1)
        };
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
    }

    /// The `pct` percentile: the upper bound of the bucket it falls in (0 with no samples).
    pub(crate) fn percentile(&self, pct: u64) -> u64 {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return 0;
        }
        let want = (total * pct).div_ceil(100);
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return Self::bound(i);
            }
        }
        Self::bound(BUCKETS - 1)
    }
}

/// One statistic: metric, value and tags (the host tag is added by the report).
#[derive(Debug)]
pub(crate) struct Stat {
    pub(crate) metric: String,
    pub(crate) value: u64,
    pub(crate) tags: Vec<(&'static str, String)>,
}

fn stat(metric: &str, value: u64, tags: &[(&'static str, &str)]) -> Stat {
    Stat {
        metric: metric.to_string(),
        value,
        tags: tags.iter().map(|(k, v)| (*k, v.to_string())).collect(),
    }
}

/// This machine's host name, read once (the TSD reads it as it starts): `/api/version`,
/// the statistics' `host` tag and the status page answer it without a file read each.
/// OpenTSDB's version answer holds a name fixed when it was built, so a name changed while
/// the TSD runs is not followed there either.
pub(crate) fn hostname() -> &'static str {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".to_string())
    })
}

/// The tags every statistic carries: `host` (or `fqdn` with `tsd.stats.canonical`), and
/// `port` with `tsd.core.stats_with_port`.
pub(crate) fn report_tags(state: &State) -> Vec<(String, String)> {
    let c = &state.config;
    let mut tags = vec![(
        if c.get_bool("tsd.stats.canonical", false) {
            "fqdn"
        } else {
            "host"
        }
        .to_string(),
        hostname().to_string(),
    )];
    if c.get_bool("tsd.core.stats_with_port", false) {
        tags.push((
            "port".into(),
            c.get_str("tsd.network.port", "4242").to_string(),
        ));
    }
    tags
}

/// `/proc/self/status` field in kB, as bytes.
pub(crate) fn proc_status_bytes(field: &str) -> u64 {
    kb_field_bytes("/proc/self/status", field)
}

/// The machine's memory, in bytes (0 when unknown).
pub(crate) fn mem_total_bytes() -> u64 {
    kb_field_bytes("/proc/meminfo", "MemTotal:")
}

/// The machine's available memory, in bytes.
pub(crate) fn mem_available_bytes() -> u64 {
    kb_field_bytes("/proc/meminfo", "MemAvailable:")
}

/// A field in kB of a `/proc` file (`Name:   123 kB`), as bytes (0 when unknown).
fn kb_field_bytes(path: &str, field: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Every statistic of the server and the database, in OpenTSDB's names and order, then
/// Hourglass's own (`tsd.storage.*`, buffers, the log).
pub(crate) fn collect(state: &State) -> Vec<Stat> {
    let s = &state.stats;
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let w = state.tsdb.write_stats();
    let uids = state.tsdb.uids();
    let sizes = uids.cache_sizes();
    let store = state.tsdb.store_stats();
    let kept = state.tsdb.kept_cells();
    let mut out = vec![
        stat(
            "tsd.connectionmgr.connections",
            get(&s.connections_open),
            &[("type", "open")],
        ),
        stat(
            "tsd.connectionmgr.connections",
            get(&s.connections_rejected),
            &[("type", "rejected")],
        ),
        stat(
            "tsd.connectionmgr.connections",
            get(&s.connections_total),
            &[("type", "total")],
        ),
        stat("tsd.connectionmgr.exceptions", 0, &[("type", "closed")]),
        stat("tsd.connectionmgr.exceptions", 0, &[("type", "reset")]),
        stat(
            "tsd.connectionmgr.exceptions",
            get(&s.idle_timeouts),
            &[("type", "timeout")],
        ),
        stat("tsd.connectionmgr.exceptions", 0, &[("type", "unknown")]),
        stat(
            "tsd.rpc.received",
            get(&s.telnet_rpcs),
            &[("type", "telnet")],
        ),
        stat("tsd.rpc.received", get(&s.http_rpcs), &[("type", "http")]),
        stat("tsd.rpc.received", 0, &[("type", "http_plugin")]),
        stat("tsd.rpc.exceptions", get(&s.rpc_exceptions), &[]),
        stat(
            "tsd.auth.failures",
            get(&s.auth_failures_http),
            &[("type", "http")],
        ),
        stat(
            "tsd.auth.failures",
            get(&s.auth_failures_telnet),
            &[("type", "telnet")],
        ),
        stat("tsd.auth.forbidden", get(&s.auth_forbidden), &[]),
        stat("tsd.auth.throttled", get(&s.auth_throttled), &[]),
        stat(
            "tsd.connectionmgr.tls",
            get(&s.tls_failures),
            &[("type", "handshake_failed")],
        ),
        stat(
            "tsd.connectionmgr.tls",
            get(&s.plain_refused),
            &[("type", "plain_refused")],
        ),
    ];
    for (latencies, kind) in [
        (&s.http_latency, "all"),
        (&s.graph_latency, "graph"),
        (&s.graph_latency, "gnuplot"),
    ] {
        for pct in [50, 75, 90, 95] {
            out.push(stat(
                &format!("tsd.http.latency_{pct}pct"),
                latencies.percentile(pct),
                &[("type", kind)],
            ));
        }
    }
    out.extend([
        stat("tsd.http.graph.requests", 0, &[("cache", "disk")]),
        stat(
            "tsd.http.graph.requests",
            get(&s.graph_requests),
            &[("cache", "miss")],
        ),
        stat("tsd.rpc.forbidden", 0, &[("type", "telnet")]),
        stat("tsd.rpc.unauthorized", 0, &[("type", "telnet")]),
        stat("tsd.rpc.forbidden", 0, &[("type", "http")]),
        stat("tsd.rpc.unauthorized", 0, &[("type", "http")]),
        stat("tsd.rpc.received", get(&s.put_requests), &[("type", "put")]),
        stat(
            "tsd.rpc.errors",
            get(&s.storage_errors),
            &[("type", "hbase_errors")],
        ),
        stat(
            "tsd.rpc.errors",
            get(&s.invalid_values),
            &[("type", "invalid_values")],
        ),
        stat(
            "tsd.rpc.errors",
            get(&s.illegal_arguments),
            &[("type", "illegal_arguments")],
        ),
        stat(
            "tsd.rpc.errors",
            get(&s.unknown_metrics),
            &[("type", "unknown_metrics")],
        ),
        stat("tsd.rpc.errors", 0, &[("type", "socket_writes_blocked")]),
        stat("tsd.http.query.unauthorized", 0, &[]),
        stat("tsd.http.query.forbidden", 0, &[]),
        stat(
            "tsd.http.query.invalid_requests",
            get(&s.query_invalid),
            &[],
        ),
        stat("tsd.http.query.exceptions", get(&s.query_exceptions), &[]),
        stat("tsd.http.query.success", get(&s.query_success), &[]),
    ]);
    for kind in UidKind::ALL {
        let k = kind.qualifier();
        let i = kind.index();
        let width = u32::from(state.tsdb.settings().schema.uid_width(kind));
        let possible = if width >= 8 {
            u64::MAX
        } else {
            (1u64 << (8 * width)) - 1
        };
        // Random metric UIDs have no count: OpenTSDB reports 0 used and 0 available.
        let random = kind == UidKind::Metric && uids.random_metrics();
        let used = if random {
            0
        } else {
            uids.max_id(kind).unwrap_or(0)
        };
        let possible = if random { 0 } else { possible };
        out.extend([
            stat(
                "tsd.uid.cache-hit",
                get(&uids.stats.hits[i]),
                &[("kind", k)],
            ),
            stat(
                "tsd.uid.cache-miss",
                get(&uids.stats.misses[i]),
                &[("kind", k)],
            ),
            stat("tsd.uid.cache-size", sizes[i] as u64, &[("kind", k)]),
            stat(
                "tsd.uid.random-collisions",
                if kind == UidKind::Metric {
                    get(&uids.stats.random_collisions)
                } else {
                    0
                },
                &[("kind", k)],
            ),
            stat("tsd.uid.rejected-assignments", 0, &[("kind", k)]),
            stat("tsd.uid.ids-used", used, &[("kind", k)]),
            stat(
                "tsd.uid.ids-available",
                possible.saturating_sub(used),
                &[("kind", k)],
            ),
        ]);
    }
    out.extend([
        stat("tsd.uid.filter.rejected", 0, &[("kind", "raw")]),
        stat("tsd.uid.filter.rejected", 0, &[("kind", "aggregate")]),
        // The process's memory: free is what the machine has available, used is resident.
        stat("tsd.jvm.ramfree", mem_available_bytes(), &[]),
        stat("tsd.jvm.ramused", proc_status_bytes("VmRSS:"), &[]),
        stat(
            "tsd.datapoints.added",
            get(&w.points_stored),
            &[("type", "all"), ("class", "TSDB")],
        ),
    ]);
    for call in hourglass_storage::metered::Call::ALL {
        out.push(stat(
            "tsd.hbase.rpcs",
            store.calls(call),
            &[("type", call.name())],
        ));
    }
    out.extend([
        stat("tsd.hbase.flushes", get(&w.flushes), &[]),
        stat("tsd.compaction.count", get(&w.rows_compacted), &[]),
        stat(
            "tsd.compaction.duplicates",
            get(&w.duplicates),
            &[("type", "variant")],
        ),
        stat("tsd.compaction.errors", get(&w.compaction_errors), &[]),
        // Hourglass's own.
        stat(
            "tsd.rpc.errors",
            get(&s.throttled),
            &[("type", "throttled")],
        ),
        stat("tsd.datapoints.received", get(&s.points_received), &[]),
        stat(
            "tsd.datapoints.buffered",
            state.tsdb.buffered_points() as u64,
            &[],
        ),
        stat(
            "tsd.datapoints.buffered_bytes",
            state.tsdb.buffered_bytes() as u64,
            &[],
        ),
        stat("tsd.storage.flush_errors", get(&w.flush_errors), &[]),
        stat("tsd.storage.log_syncs", get(&w.log_syncs), &[]),
        // Histogram and rollup cells kept until a store sync covers them (RFC 0001).
        stat("tsd.storage.kept_batches", kept.0 as u64, &[]),
        stat("tsd.storage.kept_bytes", kept.1 as u64, &[]),
        stat("tsd.storage.kept_rewrites", kept.2, &[]),
        stat(
            "tsd.storage.log_poisoned",
            u64::from(state.tsdb.log_poisoned().is_some()),
            &[],
        ),
        stat("tsd.storage.flushes", get(&w.flushes), &[]),
        stat("tsd.series.cached", state.tsdb.cached_series() as u64, &[]),
        stat("tsd.series.evicted", get(&w.series_evicted), &[]),
        stat("tsd.storage.rows_written", get(&w.rows_written), &[]),
        stat("tsd.storage.calls", store.total_calls(), &[]),
        stat("tsd.storage.calls_failed", store.failed(), &[]),
        stat("tsd.storage.calls_in_flight", store.in_flight(), &[]),
        stat(
            "tsd.storage.flush_latency_us",
            get(&w.last_flush_micros),
            &[("type", "last")],
        ),
        stat(
            "tsd.storage.flush_latency_us",
            get(&w.max_flush_micros),
            &[("type", "max")],
        ),
        stat("tsd.uptime", state.started.elapsed().as_secs(), &[]),
    ]);
    out.extend(index_stats(state));
    out.extend(query_cache_stats(state));
    out.extend(upkeep_stats(state));
    out
}

/// Computed rollups' progress and lag per tier, and retention's deletions (RFC 0008 phase
/// 4). Nothing unless `tsd.rollups.compute` or a retention is on.
fn upkeep_stats(state: &State) -> Vec<Stat> {
    let tsdb = &state.tsdb;
    let Some(upkeep) = tsdb.upkeep() else {
        return Vec::new();
    };
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let now = tsdb.settings().clock.now_ms().div_euclid(1000);
    let delay = upkeep.compute.as_ref().map_or(0, |c| c.delay_ms / 1000);
    let mut out = Vec::new();
    for tier in &upkeep.tiers {
        let interval = tier.interval.interval.as_str();
        let tags = [("interval", interval)];
        let progress = tier.progress.load(Ordering::Relaxed);
        // Before the first round nothing is known: no progress, no lag.
        if progress != i64::MIN {
            out.push(stat(
                "tsd.rollups.compute.progress",
                progress.max(0) as u64,
                &tags,
            ));
            // How far the first unit not computed is behind the one due now.
            let due = now - delay;
            let lag = due - due.rem_euclid(tier.unit_secs) - progress;
            out.push(stat("tsd.rollups.compute.lag", lag.max(0) as u64, &tags));
        }
        out.push(stat(
            "tsd.rollups.compute.units",
            tier.units.load(Ordering::Relaxed),
            &tags,
        ));
    }
    if upkeep.compute.is_some() {
        let st = &upkeep.stats;
        out.push(stat("tsd.rollups.compute.points", get(&st.points), &[]));
        out.push(stat("tsd.rollups.compute.cells", get(&st.cells), &[]));
        out.push(stat("tsd.rollups.compute.dirty", get(&st.dirty), &[]));
        out.push(stat("tsd.rollups.compute.cpu_ns", get(&st.cpu_ns), &[]));
    }
    out.push(stat(
        "tsd.rollups.upkeep.errors",
        get(&upkeep.stats.errors),
        &[],
    ));
    for (table, rows) in upkeep.stats.rows_deleted.lock().iter() {
        out.push(stat(
            "tsd.storage.retention.rows_deleted",
            *rows,
            &[("table", table.as_str())],
        ));
    }
    out
}

/// The query cache's counters (`tsd.query.cache.*`), when it is on, after the points held
/// by running sub-queries (`tsd.query.memory.*`).
fn query_cache_stats(state: &State) -> Vec<Stat> {
    let memory = state.tsdb.query_memory();
    let mut out = vec![
        stat("tsd.query.memory.points_held", memory.held(), &[]),
        stat("tsd.query.memory.points_limit", memory.limit(), &[]),
        stat("tsd.query.memory.waited", memory.waited(), &[]),
        stat("tsd.query.memory.refused", memory.refused(), &[]),
    ];
    let Some(cache) = &state.query_cache else {
        return out;
    };
    let get = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    let (entries, bytes) = cache.usage();
    out.extend([
        stat("tsd.query.cache.hits", get(&cache.stats.hits), &[]),
        stat("tsd.query.cache.misses", get(&cache.stats.misses), &[]),
        stat("tsd.query.cache.stale", get(&cache.stats.stale), &[]),
        stat("tsd.query.cache.stored", get(&cache.stats.stored), &[]),
        stat("tsd.query.cache.entries", entries as u64, &[]),
        stat("tsd.query.cache.bytes", bytes, &[]),
    ]);
    out
}

/// Series counts per metric and tag key from the tag index's counters (RFC 0007), for the
/// `tsd.index.stats.top` metrics with the most series, and the series the cap refused.
/// Nothing with the index off; a failed read is logged and leaves them out.
fn index_stats(state: &State) -> Vec<Stat> {
    let tsdb = &state.tsdb;
    let settings = tsdb.settings();
    if !settings.index {
        return Vec::new();
    }
    let mut out = Vec::new();
    let now_ms = settings.clock.now_ms();
    match hourglass_engine::index::cardinality::top_metrics(tsdb, settings.index_stats_top, now_ms)
    {
        Ok(metrics) => {
            for m in metrics {
                let metric = m.metric.as_str();
                out.push(stat(
                    "tsd.index.series",
                    m.series_all,
                    &[("metric", metric), ("period", "all")],
                ));
                out.push(stat(
                    "tsd.index.series",
                    m.series_current,
                    &[("metric", metric), ("period", "current")],
                ));
                for k in &m.tagks {
                    let tags = [("metric", metric), ("tagk", k.tagk.as_str())];
                    out.push(stat("tsd.index.tagk.series", k.series, &tags));
                    out.push(stat("tsd.index.tagk.values", k.values, &tags));
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "tag index counters not read for /api/stats"),
    }
    for (metric, n) in tsdb.series_refusals() {
        out.push(stat(
            "tsd.index.series.refused",
            n,
            &[("metric", metric.as_str())],
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_percentiles_come_from_buckets() {
        let l = Latencies::default();
        assert_eq!(l.percentile(50), 0);
        for ms in [1, 1, 3, 5, 7, 9, 11, 13, 150, 20_000] {
            l.record(ms);
        }
        assert_eq!(
            l.percentile(50),
            8,
            "the 5th of 10 is 7 ms, in the 6..8 bucket"
        );
        assert_eq!(l.percentile(90), 200, "150 ms falls in 100..200");
        assert_eq!(l.percentile(95), 100 << 8, "past 16 s: the last bucket");
    }
}
