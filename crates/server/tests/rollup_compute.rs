#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Rollups Hourglass computes itself and retention (RFC 0008 phase 4), through a real TSD on
//! port 0, on every backend, with a clock moved by hand: computed tiers answer as the raw
//! downsample; late points recompute their units; a computation cut short by a failing store
//! and restarted never double counts; retention removes raw rows and tiers on schedule and
//! queries never answer what is before a cutoff; the keys' errors.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use common::{TestServer, http, start_adjusted, store_for};
use hourglass_core::config::Config;
use hourglass_engine::Settings;
use hourglass_engine::settings::Clock;
use hourglass_engine::sim::{FaultStore, Faults, Op};
use hourglass_storage::{ReadOptions, ScanRequest, Store};
use serde_json::{Value, json};

/// Tiers `10m` (6-hour rows), `1h` (days) and `1d` (months) over the raw default `1m`.
const CONFIG: &str = r#"{"aggregationIds":{"sum":0,"count":1,"max":2,"min":3},
"intervals":[
{"table":"tsdb","preAggregationTable":"tsdb-agg","interval":"1m","rowSpan":"1h","defaultInterval":true},
{"table":"tsdb-rollup-10m","preAggregationTable":"tsdb-rollup-agg-10m","interval":"10m","rowSpan":"6h"RET10M},
{"table":"tsdb-rollup-1h","preAggregationTable":"tsdb-rollup-agg-1h","interval":"1h","rowSpan":"1d"RET1H},
{"table":"tsdb-rollup-1d","preAggregationTable":"tsdb-rollup-agg-1d","interval":"1d","rowSpan":"1n"}]}"#;

/// 2013-01-01 00:00:00 UTC.
const T0: i64 = 1_356_998_400;
const DAY: i64 = 86_400;

fn rollup_json(ret_10m: Option<&str>, ret_1h: Option<&str>) -> String {
    let field = |r: Option<&str>| r.map_or(String::new(), |r| format!(r#","retention":"{r}""#));
    CONFIG
        .replace('\n', "")
        .replace("RET10M", &field(ret_10m))
        .replace("RET1H", &field(ret_1h))
}

fn config() -> Config {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    c.set("tsd.rollups.enable", "true");
    c.set("tsd.rollups.compute", "true");
    c.set("tsd.rollups.compute.delay", "1m");
    c.set("tsd.rollups.config", &rollup_json(None, None));
    c
}

/// A clock the test moves (seconds).
fn clock(at: &Arc<AtomicI64>) -> Clock {
    let at = Arc::clone(at);
    Clock::from_fn(move || at.load(Ordering::Relaxed) * 1000)
}

async fn start(store: Arc<dyn Store>, c: Config, now: &Arc<AtomicI64>) -> TestServer {
    let clock = clock(now);
    start_adjusted(store, c, move |s: &mut Settings| s.clock = clock).await
}

/// A small, stable generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

async fn post(srv: &TestServer, path: &str, body: &Value) -> common::Response {
    http(srv.addr, "POST", path, &body.to_string()).await
}

async fn send(srv: &TestServer, points: &[Value]) {
    for batch in points.chunks(500) {
        let r = post(srv, "/api/put", &Value::Array(batch.to_vec())).await;
        assert_eq!(r.status, 204, "{}", r.text());
    }
}

async fn query(srv: &TestServer, body: Value) -> Value {
    let r = post(srv, "/api/query", &body).await;
    assert_eq!(r.status, 200, "{body}: {}", r.text());
    r.json()
}

/// One upkeep round (compute and sweep) on the blocking pool; the units computed.
async fn round(srv: &TestServer) -> u64 {
    let db = Arc::clone(&srv.state.tsdb);
    tokio::task::spawn_blocking(move || db.upkeep_round(true))
        .await
        .unwrap()
        .unwrap()
}

/// Random integer points of `hosts` over `[from, to)`, at most ten minutes apart.
fn raw_points(rng: &mut Rng, metric: &str, hosts: &[&str], from: i64, to: i64) -> Vec<Value> {
    let mut out = Vec::new();
    for host in hosts {
        let mut t = from + rng.below(300) as i64;
        while t < to {
            out.push(json!({"metric": metric, "timestamp": t,
                "value": rng.below(1001) as i64 - 500, "tags": {"host": host}}));
            t += 1 + rng.below(600) as i64;
        }
    }
    out
}

/// The downsample `ds` of `metric` over `[start, end]` from the rollups and from raw points
/// (`ROLLUP_RAW`); also says which table answered the first.
async fn both(
    srv: &TestServer,
    metric: &str,
    ds: &str,
    aggregator: &str,
    (start, end): (i64, i64),
) -> (Value, Value) {
    let body = |usage: &str| {
        json!({"start": start, "end": end, "showQuery": true, "queries": [{
            "aggregator": aggregator, "metric": metric, "downsample": ds, "rollupUsage": usage,
            "filters": [{"type": "wildcard", "tagk": "host", "filter": "*", "groupBy": false}]}]})
    };
    let from_rollups = query(srv, body("ROLLUP_NOFALLBACK")).await;
    let from_raw = query(srv, body("ROLLUP_RAW")).await;
    (from_rollups, from_raw)
}

/// The answers without `query` (which differs: usage and the table that answered).
fn data(answer: &Value) -> Vec<(Value, Value)> {
    answer
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["tags"].clone(), s["dps"].clone()))
        .collect()
}

/// The answers' data equal, the first differing bucket named when not.
fn assert_same(rolled: &Value, raw: &Value, what: &str) {
    let (a, b) = (data(rolled), data(raw));
    assert_eq!(a.len(), b.len(), "{what}: series");
    for ((ta, da), (tb, db)) in a.iter().zip(&b) {
        assert_eq!(ta, tb, "{what}");
        let (da, db) = (da.as_object().unwrap(), db.as_object().unwrap());
        for (k, v) in db {
            assert_eq!(da.get(k), Some(v), "{what}: bucket {k}");
        }
        assert_eq!(da.len(), db.len(), "{what}: buckets");
    }
}

fn table_of(answer: &Value) -> String {
    answer[0]["query"]["rollupTable"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// Property: rollups computed by the TSD from random raw points answer every downsample a
/// tier divides, by every function rollups serve, exactly as the raw points do, over random
/// ranges, grouped and per series.
async fn computed_rollups_equal_the_raw_downsample(backend: &str) {
    let now = Arc::new(AtomicI64::new(T0 + 3 * DAY + 60));
    let srv = start(store_for(backend), config(), &now).await;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    send(
        &srv,
        &raw_points(&mut rng, "m.prop", &["a", "b", "c"], T0, T0 + 2 * DAY),
    )
    .await;
    // Three days (the third empty) of 10m and 1h units (an hour each) and of 1d units,
    // closed a minute ago: 72 + 72 + 3.
    assert_eq!(round(&srv).await, 72 + 72 + 3);
    // Nothing more is due.
    assert_eq!(round(&srv).await, 0);
    let mut compared = 0;
    for r in 0..3 {
        let range = if r == 0 {
            (T0, T0 + 2 * DAY - 1)
        } else {
            let start = T0 + 60 * rng.below(12 * 60) as i64;
            (start, T0 + 2 * DAY - 60 * rng.below(12 * 60) as i64)
        };
        for ds in ["10m", "30m", "1h", "2h", "6h", "1d"] {
            for function in ["sum", "count", "min", "max", "avg", "zimsum", "mimmax"] {
                for aggregator in ["sum", "none", "max"] {
                    let downsample = format!("{ds}-{function}");
                    let (rolled, raw) = both(&srv, "m.prop", &downsample, aggregator, range).await;
                    assert!(!data(&raw).is_empty(), "{backend} {downsample}");
                    assert_eq!(
                        data(&rolled),
                        data(&raw),
                        "{backend}: {aggregator}:{downsample} over {range:?}"
                    );
                    let want = match ds {
                        "1d" => "1d",
                        "10m" | "30m" => "10m",
                        _ => "1h",
                    };
                    assert_eq!(table_of(&rolled), want, "{downsample}");
                    compared += 1;
                }
            }
        }
    }
    assert_eq!(compared, 3 * 6 * 7 * 3);
    let page = http(srv.addr, "GET", "/status", "").await.text();
    assert!(page.contains("tsd.rollups.compute.lag"), "{page}");
    // The tiers' own table: up to 2013-01-04 00:00 UTC, no lag.
    assert!(
        page.contains("<tr><td>1h</td><td>tsdb-rollup-1h</td><td>2013-01-04 00:00</td><td class=\"n\">0s</td><td class=\"n\">72</td></tr>"),
        "{page}"
    );
    // The tiers report their progress: up to date, no lag.
    let stats = http(srv.addr, "GET", "/api/stats", "").await.json();
    let find = |metric: &str, interval: &str| {
        stats
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["metric"] == metric && s["tags"]["interval"] == interval)
            .map(|s| s["value"].as_str().unwrap().parse::<i64>().unwrap())
    };
    for interval in ["10m", "1h", "1d"] {
        assert_eq!(
            find("tsd.rollups.compute.lag", interval),
            Some(0),
            "{interval}"
        );
        assert_eq!(
            find("tsd.rollups.compute.units", interval),
            Some(if interval == "1d" { 3 } else { 72 })
        );
        assert_eq!(
            find("tsd.rollups.compute.progress", interval),
            Some(T0 + 3 * DAY),
            "{interval}"
        );
    }
    srv.stop().await;
}

/// A late point (flushed after its hour was computed) marks its hour dirty; the next round
/// recomputes exactly the units holding it, and the answers count it once.
async fn late_points_are_recomputed(backend: &str) {
    let now = Arc::new(AtomicI64::new(T0 + 2 * DAY + 600));
    let srv = start(store_for(backend), config(), &now).await;
    let mut rng = Rng(7);
    send(
        &srv,
        &raw_points(&mut rng, "m.late", &["a", "b"], T0, T0 + 2 * DAY),
    )
    .await;
    assert!(round(&srv).await > 0);
    let upkeep_units = |srv: &TestServer| -> Vec<u64> {
        srv.state
            .tsdb
            .upkeep()
            .unwrap()
            .tiers
            .iter()
            .map(|t| t.units.load(Ordering::Relaxed))
            .collect()
    };
    let before = upkeep_units(&srv);
    let range = (T0, T0 + 2 * DAY - 1);
    let (_, raw_before) = both(&srv, "m.late", "1h-sum", "sum", range).await;
    // Late: 10:05 of the first day, a value no random point has.
    send(
        &srv,
        &[
            json!({"metric": "m.late", "timestamp": T0 + 10 * 3600 + 300, "value": 100_000,
        "tags": {"host": "a"}}),
        ],
    )
    .await;
    srv.state.tsdb.flush().unwrap();
    now.fetch_add(30, Ordering::Relaxed);
    // The 10m and 1h units of 10:00 and the first day's 1d unit, once each.
    assert_eq!(round(&srv).await, 3);
    let after = upkeep_units(&srv);
    assert_eq!(
        after
            .iter()
            .zip(&before)
            .map(|(a, b)| a - b)
            .collect::<Vec<_>>(),
        vec![1, 1, 1]
    );
    for ds in [
        "10m-sum", "1h-sum", "1h-count", "1h-max", "1d-sum", "1d-count",
    ] {
        let (rolled, raw) = both(&srv, "m.late", ds, "sum", range).await;
        assert_same(&rolled, &raw, &format!("{backend} {ds}"));
    }
    let (rolled, _) = both(&srv, "m.late", "1h-sum", "sum", range).await;
    let at = (T0 + 10 * 3600).to_string();
    assert_eq!(
        rolled[0]["dps"][&at].as_f64().unwrap(),
        raw_before[0]["dps"][&at].as_f64().unwrap() + 100_000.0,
        "counted once"
    );
    // Nothing is dirty any more.
    assert_eq!(round(&srv).await, 0);
    srv.stop().await;
}

/// A round cut short by the store failing in the middle of writing rollup cells (a crash as
/// the next start sees it), then a new TSD over the same store: every unit ends computed
/// once, equal to the raw downsample (cells are replaced, never added to).
async fn a_computation_cut_short_and_restarted_does_not_double_count(backend: &str) {
    let inner = store_for(backend);
    let now = Arc::new(AtomicI64::new(T0 + 2 * DAY + 600));
    let faults = Arc::new(Faults::new(1, 0));
    let fault_store = Arc::new(FaultStore::over(Arc::clone(&inner), Arc::clone(&faults)));
    let writes = Arc::new(AtomicU64::new(0));
    {
        let (faults, writes) = (Arc::clone(&faults), Arc::clone(&writes));
        fault_store.set_hook(Some(Arc::new(move |op| {
            // The 10th batch write after the raw points: the middle of the 10m tier.
            if op == Op::AfterWrite && writes.fetch_add(1, Ordering::Relaxed) == 10 {
                faults.set_store_down(true);
            }
        })));
    }
    let srv = start(Arc::clone(&fault_store) as Arc<dyn Store>, config(), &now).await;
    let mut rng = Rng(99);
    send(
        &srv,
        &raw_points(&mut rng, "m.crash", &["a", "b", "c"], T0, T0 + 2 * DAY),
    )
    .await;
    srv.state.tsdb.flush().unwrap();
    writes.store(0, Ordering::Relaxed);
    let db = Arc::clone(&srv.state.tsdb);
    let cut = tokio::task::spawn_blocking(move || db.upkeep_round(true))
        .await
        .unwrap();
    assert!(cut.is_err(), "the store went away in the middle");
    srv.stop().await;
    // The "crash": the TSD is gone without closing; the store comes back.
    faults.set_store_down(false);
    fault_store.set_hook(None);
    let srv = start(Arc::clone(&inner), config(), &now).await;
    assert!(round(&srv).await > 0);
    let range = (T0, T0 + 2 * DAY - 1);
    for ds in [
        "10m-sum",
        "10m-count",
        "1h-sum",
        "1h-avg",
        "1d-sum",
        "1d-count",
    ] {
        let (rolled, raw) = both(&srv, "m.crash", ds, "sum", range).await;
        assert!(!data(&raw).is_empty());
        assert_eq!(data(&rolled), data(&raw), "{backend} {ds}");
    }
    srv.stop().await;
}

/// Keys in rows of `table` whose base time is before `before`.
fn rows_before(store: &dyn Store, table: &str, before: i64) -> usize {
    let schema = hourglass_core::schema::Schema::default();
    let request = ScanRequest {
        read: ReadOptions::keys_only(),
        ..ScanRequest::default()
    };
    store
        .scan(table, &request)
        .unwrap()
        .map(|r| r.unwrap())
        .filter(|r| {
            hourglass_core::rowkey::base_time_of(&schema, &r.key)
                .is_some_and(|b| i64::from(b) < before)
        })
        .count()
}

/// Raw points kept 2 days, the 10m tier 2 days, the 1h tier a year: after the sweep the
/// expired raw rows and 10m rows are gone, the 1h tier still answers the first day, and
/// queries never answer what is before a cutoff, sweep or no sweep.
async fn retention_removes_raw_rows_and_tiers_on_schedule(backend: &str) {
    let mut c = config();
    c.set("tsd.storage.retention", "2d");
    c.set("tsd.rollups.config", &rollup_json(Some("2d"), Some("365d")));
    let now = Arc::new(AtomicI64::new(T0 + 2 * DAY + 600));
    let store = store_for(backend);
    let srv = start(Arc::clone(&store), c, &now).await;
    let mut rng = Rng(3);
    send(
        &srv,
        &raw_points(&mut rng, "m.ret", &["a", "b"], T0, T0 + 2 * DAY),
    )
    .await;
    assert!(round(&srv).await > 0);
    let first_day = (T0, T0 + DAY - 1);
    let (_, raw) = both(&srv, "m.ret", "1h-sum", "sum", first_day).await;
    assert_eq!(data(&raw).len(), 1, "nothing expired yet");
    // A day later: raw and 10m cutoffs at T0 + 1d + 600 s.
    now.fetch_add(DAY, Ordering::Relaxed);
    let cut = T0 + DAY + 600;
    // Before the sweep, queries already leave out what is before the cutoff.
    for ds in ["1m-sum", "10m-sum"] {
        let (rolled, raw) = both(&srv, "m.ret", ds, "sum", (T0, T0 + 2 * DAY - 1)).await;
        for answer in [&rolled, &raw] {
            for s in answer.as_array().unwrap() {
                let first: i64 = s["dps"]
                    .as_object()
                    .unwrap()
                    .keys()
                    .map(|k| k.parse::<i64>().unwrap())
                    .min()
                    .unwrap();
                assert!(first >= cut, "{ds}: {first} before the cutoff {cut}");
            }
        }
    }
    assert!(rows_before(store.as_ref(), "tsdb", T0 + DAY) > 0);
    round(&srv).await;
    // Raw rows whose hour ended by the cutoff are gone, the hour holding it stays.
    assert_eq!(rows_before(store.as_ref(), "tsdb", T0 + DAY), 0);
    assert!(rows_before(store.as_ref(), "tsdb", T0 + DAY + 3600) > 0);
    // 10m rows (6-hour spans) ended by the cutoff are gone; the 1h tier keeps everything.
    assert_eq!(rows_before(store.as_ref(), "tsdb-rollup-10m", T0 + DAY), 0);
    assert!(rows_before(store.as_ref(), "tsdb-rollup-10m", T0 + DAY + 6 * 3600) > 0);
    assert!(rows_before(store.as_ref(), "tsdb-rollup-1h", T0 + DAY) > 0);
    // The first day: gone from raw points, still in the 1h tier.
    let (rolled, raw) = both(&srv, "m.ret", "1h-sum", "sum", first_day).await;
    assert!(data(&raw).is_empty(), "{raw}");
    assert_eq!(data(&rolled).len(), 1, "{rolled}");
    let stats = http(srv.addr, "GET", "/api/stats", "").await.json();
    let deleted = |table: &str| {
        stats
            .as_array()
            .unwrap()
            .iter()
            .find(|s| {
                s["metric"] == "tsd.storage.retention.rows_deleted" && s["tags"]["table"] == table
            })
            .map(|s| s["value"].as_str().unwrap().parse::<u64>().unwrap())
    };
    assert_eq!(deleted("tsdb"), Some(2 * 24), "two series, 24 hours each");
    assert_eq!(deleted("tsdb-rollup-10m"), Some(2 * 4));
    assert_eq!(deleted("tsdb-rollup-1h"), None);
    srv.stop().await;
}

/// A `delete: true` query of raw points in computed hours marks them dirty: the next round
/// computes their units again and every tier answers as the raw points left (the seen bug:
/// the tiers kept the rollups of the deleted points). Parts of two hours of one series, and
/// a whole hour of another (whose cells of that unit go).
async fn deleted_raw_points_are_recomputed(backend: &str) {
    let mut c = config();
    c.set("tsd.http.query.allow_delete", "true");
    let now = Arc::new(AtomicI64::new(T0 + 2 * DAY + 600));
    let srv = start(store_for(backend), c, &now).await;
    let mut rng = Rng(11);
    send(
        &srv,
        &raw_points(&mut rng, "m.del", &["a", "b"], T0, T0 + 2 * DAY),
    )
    .await;
    assert!(round(&srv).await > 0);
    assert_eq!(round(&srv).await, 0);
    let range = (T0, T0 + 2 * DAY - 1);
    let (_, raw_before) = both(&srv, "m.del", "1h-count", "sum", range).await;
    let delete = |start: i64, end: i64, host: &str| {
        json!({"start": start, "end": end, "delete": true, "queries": [{
            "aggregator": "sum", "metric": "m.del",
            "filters": [{"type": "literal_or", "tagk": "host", "filter": host, "groupBy": false}]}]})
    };
    for body in [
        delete(T0 + 10 * 3600 + 600, T0 + 12 * 3600 - 1200, "a"),
        delete(T0 + DAY + 20 * 3600, T0 + DAY + 21 * 3600 - 1, "b"),
    ] {
        let r = post(&srv, "/api/query", &body).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    now.fetch_add(30, Ordering::Relaxed);
    // The 10m and 1h units of 10:00 and 11:00 of the first day and of 20:00 of the second,
    // and both days' 1d units.
    assert_eq!(round(&srv).await, 3 + 3 + 2);
    let (_, raw_after) = both(&srv, "m.del", "1h-count", "sum", range).await;
    assert_ne!(data(&raw_before), data(&raw_after), "points were deleted");
    for ds in [
        "10m-sum",
        "10m-count",
        "1h-sum",
        "1h-count",
        "1h-min",
        "1h-max",
        "1d-sum",
        "1d-count",
    ] {
        for aggregator in ["sum", "none"] {
            let (rolled, raw) = both(&srv, "m.del", ds, aggregator, range).await;
            assert_same(&rolled, &raw, &format!("{backend} {ds} {aggregator}"));
        }
    }
    assert_eq!(round(&srv).await, 0, "nothing is dirty any more");
    srv.stop().await;
}

/// With `tsd.rollups.tag_raw` (tier rows carry `_aggregate=RAW`), a series that lost every
/// point of a recomputed unit has the unit's cells removed from the tiers (the seen bug: they
/// stayed, and the tiers answered the deleted points); its other units keep theirs.
async fn tag_raw_tiers_drop_the_cells_of_a_series_without_points(backend: &str) {
    let mut c = config();
    c.set("tsd.http.query.allow_delete", "true");
    c.set("tsd.rollups.tag_raw", "true");
    let now = Arc::new(AtomicI64::new(T0 + DAY + 600));
    let srv = start(store_for(backend), c, &now).await;
    let mut rng = Rng(13);
    send(
        &srv,
        &raw_points(&mut rng, "m.tr", &["a", "b"], T0, T0 + DAY),
    )
    .await;
    assert!(round(&srv).await > 0);
    // Every point of host b in 05:00.
    let body = json!({"start": T0 + 5 * 3600, "end": T0 + 6 * 3600 - 1, "delete": true,
        "queries": [{"aggregator": "sum", "metric": "m.tr",
        "filters": [{"type": "literal_or", "tagk": "host", "filter": "b", "groupBy": false}]}]});
    let r = post(&srv, "/api/query", &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    now.fetch_add(30, Ordering::Relaxed);
    // 05:00's 10m and 1h units, the day's 1d unit.
    assert_eq!(round(&srv).await, 3);
    let range = (T0, T0 + DAY - 1);
    // Per host: the tiers' rows carry `_aggregate=RAW`, raw series do not.
    let by_host = |answer: &Value| -> Vec<(Value, Value)> {
        let mut out: Vec<(Value, Value)> = answer
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["tags"]["host"].clone(), s["dps"].clone()))
            .collect();
        out.sort_by_key(|(h, _)| h.to_string());
        out
    };
    for ds in [
        "10m-count",
        "10m-sum",
        "1h-count",
        "1h-max",
        "1d-count",
        "1d-sum",
    ] {
        let (rolled, raw) = both(&srv, "m.tr", ds, "none", range).await;
        assert_eq!(by_host(&rolled), by_host(&raw), "{backend} {ds}");
        let hours = by_host(&rolled);
        if ds.starts_with("1h") {
            let b = hours[1].1.as_object().unwrap();
            assert!(!b.contains_key(&(T0 + 5 * 3600).to_string()), "{ds}: {b:?}");
            assert!(b.contains_key(&(T0 + 4 * 3600).to_string()), "{ds}: {b:?}");
        }
    }
    srv.stop().await;
}

/// `/api/query/last` leaves out points before the raw cutoff (`tsd.storage.retention`)
/// before the sweep removes them, buffered or stored, by the point's time, not its hour's:
/// a series whose newest point is older has no last point (the seen bug: it answered it).
async fn query_last_leaves_out_points_before_the_retention_cutoff(backend: &str) {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    c.set("tsd.storage.retention", "2h");
    let now = Arc::new(AtomicI64::new(T0 + 10 * 3600 + 1800));
    let srv = start(store_for(backend), c, &now).await;
    // The cutoff: T0 + 8h 30m, in the middle of an hour.
    let cut = T0 + 8 * 3600 + 1800;
    let points = [
        ("a", cut - 3600),
        ("b", cut - 3600),
        ("b", T0 + 9 * 3600),
        ("c", cut - 100),
        ("d", cut - 100),
        ("d", cut + 100),
        ("e", cut),
    ];
    let body: Vec<Value> = points
        .iter()
        .enumerate()
        .map(|(i, (host, t))| json!({"metric": "m.last", "timestamp": t, "value": i, "tags": {"host": host}}))
        .collect();
    send(&srv, &body).await;
    let expected = json!([
        {"metric": "m.last", "timestamp": (T0 + 9 * 3600) * 1000, "value": "2", "tags": {"host": "b"}},
        {"metric": "m.last", "timestamp": (cut + 100) * 1000, "value": "5", "tags": {"host": "d"}},
        {"metric": "m.last", "timestamp": cut * 1000, "value": "6", "tags": {"host": "e"}},
    ]);
    let last = |answer: Value| -> Value {
        let mut list: Vec<Value> = answer
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                let mut o = o.clone();
                o.as_object_mut().unwrap().remove("tsuid");
                o
            })
            .collect();
        list.sort_by_key(|o| o["tags"]["host"].as_str().unwrap().to_string());
        Value::Array(list)
    };
    for stage in ["buffered", "stored"] {
        if stage == "stored" {
            srv.state.tsdb.flush().unwrap();
        }
        let r = http(
            srv.addr,
            "GET",
            // No back scan: every series of the metric over the last day (a back scan
            // names one series by its tags).
            "/api/query/last?timeseries=m.last&resolve",
            "",
        )
        .await;
        assert_eq!(r.status, 200, "{stage}: {}", r.text());
        assert_eq!(last(r.json()), expected, "{stage}");
        // By TSUID: the expired series answers nothing.
        let tsuid = |host: &str| {
            let uids = srv.state.tsdb.uids();
            let id = |k, n| {
                uids.get_id(k, n)
                    .unwrap()
                    .to_bytes(3)
                    .iter()
                    .map(|b| format!("{b:02X}"))
                    .collect::<String>()
            };
            use hourglass_core::uid::UidKind;
            format!(
                "{}{}{}",
                id(UidKind::Metric, "m.last"),
                id(UidKind::TagKey, "host"),
                id(UidKind::TagValue, host)
            )
        };
        let r = post(
            &srv,
            "/api/query/last",
            &json!({"queries": [{"tsuids": [tsuid("a"), tsuid("c"), tsuid("d")]}], "backScan": 24}),
        )
        .await;
        assert_eq!(r.status, 200, "{stage}: {}", r.text());
        let answer = r.json();
        let answer = answer.as_array().unwrap();
        assert_eq!(answer.len(), 1, "{stage}: {answer:?}");
        assert_eq!(answer[0]["tsuid"], tsuid("d"), "{stage}");
        assert_eq!(answer[0]["timestamp"], (cut + 100) * 1000, "{stage}");
    }
    srv.stop().await;
}

/// The background thread computes on its own (no round called by hand).
async fn the_background_task_computes_on_its_own(backend: &str) {
    let mut c = config();
    c.set("tsd.rollups.compute.interval_ms", "20");
    let now = Arc::new(AtomicI64::new(T0 + DAY + 600));
    let srv = start(store_for(backend), c, &now).await;
    srv.state.tsdb.start_background();
    let mut rng = Rng(5);
    send(&srv, &raw_points(&mut rng, "m.bg", &["a"], T0, T0 + DAY)).await;
    srv.state.tsdb.flush().unwrap();
    // Dirty hours make the thread recompute what it may have computed before the points.
    let range = (T0, T0 + DAY - 1);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (rolled, raw) = both(&srv, "m.bg", "1h-sum", "sum", range).await;
        if !data(&rolled).is_empty() && data(&rolled) == data(&raw) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{rolled} vs {raw}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    srv.state.tsdb.close().unwrap();
    srv.stop().await;
}

on_every_backend!(
    computed_rollups_equal_the_raw_downsample,
    late_points_are_recomputed,
    a_computation_cut_short_and_restarted_does_not_double_count,
    retention_removes_raw_rows_and_tiers_on_schedule,
    the_background_task_computes_on_its_own,
    query_last_leaves_out_points_before_the_retention_cutoff,
    deleted_raw_points_are_recomputed,
    tag_raw_tiers_drop_the_cells_of_a_series_without_points,
);

/// Each key's errors refuse the start with a clear message.
#[test]
fn bad_keys_refuse_the_start() {
    let with = |pairs: &[(&str, &str)]| {
        let mut c = config();
        for (k, v) in pairs {
            c.set(k, v);
        }
        Settings::from_config(&c).unwrap_err().to_string()
    };
    assert_eq!(
        with(&[("tsd.storage.retention", "15x")]),
        "tsd.storage.retention: Invalid duration (suffix): 15x"
    );
    assert_eq!(
        with(&[("tsd.rollups.compute.delay", "soon")]),
        "tsd.rollups.compute.delay: Invalid duration (number): soon"
    );
    assert_eq!(
        with(&[("tsd.rollups.compute.interval_ms", "0")]),
        "tsd.rollups.compute.interval_ms must be at least 1, got 0"
    );
    assert_eq!(
        with(&[("tsd.rollups.enable", "false")]),
        "tsd.rollups.compute = true needs tsd.rollups.enable = true and a rollup configuration (tsd.rollups.config)"
    );
    assert_eq!(
        with(&[("tsd.rollups.config", &rollup_json(Some("2q"), None))]),
        "rollup interval 10m: retention: Invalid duration (suffix): 2q"
    );
    let odd = rollup_json(None, None).replace(r#""interval":"10m""#, r#""interval":"7m""#);
    assert_eq!(
        with(&[("tsd.rollups.config", &odd)]),
        "tsd.rollups.compute: interval 7m does not divide a day; computed intervals must"
    );
    let into_data =
        rollup_json(None, None).replace(r#""table":"tsdb-rollup-1h""#, r#""table":"tsdb""#);
    assert_eq!(
        with(&[("tsd.rollups.config", &into_data)]),
        "tsd.rollups.compute: interval 1h would be computed into the data table tsdb, which holds raw points; give it a table of its own"
    );
    let raw_ret = rollup_json(None, None).replace(
        r#""rowSpan":"1h","defaultInterval":true"#,
        r#""rowSpan":"1h","defaultInterval":true,"retention":"1d""#,
    );
    assert!(with(&[("tsd.rollups.config", &raw_ret)]).starts_with(
        "rollup interval 1m: its table tsdb is the data table; set tsd.storage.retention"
    ));
    let only_p99 =
        rollup_json(None, None).replace(r#"{"sum":0,"count":1,"max":2,"min":3}"#, r#"{"p99":0}"#);
    assert!(
        with(&[("tsd.rollups.config", &only_p99)])
            .starts_with("tsd.rollups.compute: the rollup configuration maps none of sum")
    );
    // Off by default: the same configuration without the key computes nothing.
    let mut c = config();
    c.set("tsd.rollups.compute", "false");
    let s = Settings::from_config(&c).unwrap();
    assert!(s.rollups.unwrap().compute.is_none());
}
