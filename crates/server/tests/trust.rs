//! The TSD's write-path promises over real sockets: queries count every point acknowledged
//! before they began while flushes run; past the memory budget HTTP puts get 503 and
//! telnet is held back, both recovering once the store returns; histogram and rollup
//! points (written straight to the store) are acknowledged only once stored, and synced
//! with `?sync` or `tsd.storage.wal.sync`; the connection limit and the idle timeout close
//! what they should.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{HttpConn, TestServer, start_on, store_for, telnet};
use hourglass_core::config::Config;
use hourglass_engine::sim::{FaultStore, Faults};
use hourglass_storage::Store;
use hourglass_storage::metered::Call;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const T0: i64 = 1_356_998_400;

fn config(pairs: &[(&str, &str)]) -> Config {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    for (k, v) in pairs {
        c.set(k, v);
    }
    c
}

/// A JSON array of `n` points of metric `m`, one a second from `start`, host `h<host>`.
fn body(start: i64, n: i64, host: u32) -> String {
    let points: Vec<String> = (0..n)
        .map(|i| {
            format!(
                r#"{{"metric":"m","timestamp":{},"value":{},"tags":{{"host":"h{host}"}}}}"#,
                start + i,
                start + i
            )
        })
        .collect();
    format!("[{}]", points.join(","))
}

/// The number of points of `m` in `[T0, T0 + 10 days]` as `/api/query` counts them.
async fn count(conn: &mut HttpConn) -> u64 {
    let r = conn
        .request(
            "GET",
            &format!(
                "/api/query?start={T0}&end={}&m=sum:0all-count:m",
                T0 + 864_000
            ),
            "",
            b"",
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let json = r.json();
    json.as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["dps"].as_object().unwrap().values())
        .map(|v| v.as_f64().unwrap() as u64)
        .sum()
}

/// The seen bug: with frequent flushes, 36 of 1,189 queries counted fewer points than had
/// been acknowledged before they began (a flush took the buffer out of the readers' reach
/// before its rows were stored).
async fn queries_count_every_acknowledged_point_while_flushes_run(backend: &str) {
    let srv = start_on(
        store_for(backend),
        config(&[
            ("tsd.storage.flush_interval", "150"),
            ("tsd.storage.max_buffered_points", "4000"),
        ]),
    )
    .await;
    srv.state.tsdb.start_background();
    // The metric exists before the first query.
    let mut conn = HttpConn::open(srv.addr).await;
    let r = conn
        .request("POST", "/api/put", "", body(T0, 2000, 1).as_bytes())
        .await;
    assert_eq!(r.status, 204);
    let acked = Arc::new(AtomicU64::new(2000));
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (acked, done, addr) = (Arc::clone(&acked), Arc::clone(&done), srv.addr);
        tokio::spawn(async move {
            let mut conn = HttpConn::open(addr).await;
            for batch in 1..60 {
                let r = conn
                    .request(
                        "POST",
                        "/api/put",
                        "",
                        body(T0 + batch * 2000, 2000, 1).as_bytes(),
                    )
                    .await;
                assert_eq!(r.status, 204, "{}", r.text());
                acked.fetch_add(2000, Ordering::SeqCst);
            }
            done.store(true, Ordering::SeqCst);
        })
    };
    let mut queries = 0;
    while !done.load(Ordering::SeqCst) {
        let before = acked.load(Ordering::SeqCst);
        let seen = count(&mut conn).await;
        assert!(
            seen >= before,
            "{backend}: query {queries} counted {seen} of {before} acknowledged points"
        );
        queries += 1;
    }
    writer.await.unwrap();
    assert!(
        queries >= 10,
        "{backend}: only {queries} queries raced the writer"
    );
    assert_eq!(count(&mut conn).await, 120_000, "{backend}");
    assert!(
        srv.state.tsdb.write_stats().flushes.load(Ordering::Relaxed) >= 10,
        "{backend}: flushes ran meanwhile"
    );
    srv.stop().await;
}

on_every_backend!(
    queries_count_every_acknowledged_point_while_flushes_run,
    histogram_and_rollup_syncs_keep_to_sync_timeout,
    concurrent_synced_histogram_and_rollup_requests_share_store_syncs,
);

const HISTOGRAMS: &str = r#"{"net.opentsdb.core.SimpleHistogramDecoder": 42}"#;

/// A histogram point of `h` at `ts`, host `host`.
fn histogram_point(ts: i64, host: &str) -> String {
    format!(
        r#"{{"metric":"h","timestamp":{ts},"tags":{{"host":"{host}"}},"buckets":{{"0,1":42}},"underflow":0,"overflow":1}}"#
    )
}

/// A 1h-sum rollup point of `r` at `ts`, host `host`.
fn rollup_point(ts: i64, host: &str) -> String {
    format!(
        r#"{{"metric":"r","timestamp":{ts},"value":5,"tags":{{"host":"{host}"}},"interval":"1h","aggregator":"sum"}}"#
    )
}

/// A server over `backend` whose store syncs take `delay` each while `slow` is set.
async fn slow_sync_server(backend: &str, slow: Arc<AtomicBool>, delay: Duration) -> TestServer {
    let faults = Arc::new(Faults::new(1, 0));
    let store = Arc::new(FaultStore::over(store_for(backend), faults));
    store.set_hook(Some(Arc::new(move |op| {
        if op == hourglass_engine::sim::Op::Sync && slow.load(Ordering::SeqCst) {
            std::thread::sleep(delay);
        }
    })));
    start_on(
        store,
        config(&[
            ("tsd.core.histograms.config", HISTOGRAMS),
            ("tsd.rollups.enable", "true"),
            ("tsd.rollups.config", ROLLUPS),
        ]),
    )
    .await
}

/// `/api/histogram` and `/api/rollup` serve `?sync` as `/api/put` does (2.4.1's
/// `PutDataPointRpc` for all three): a store sync that does not finish within
/// `sync_timeout` counts the request's points as timed out, with OpenTSDB's words, instead
/// of holding the answer until it finishes (the seen bug: their sync ran inside the write,
/// so `sync_timeout` and the `timeouts` count were ignored).
async fn histogram_and_rollup_syncs_keep_to_sync_timeout(backend: &str) {
    let slow = Arc::new(AtomicBool::new(false));
    let srv = slow_sync_server(backend, Arc::clone(&slow), Duration::from_secs(2)).await;
    let mut conn = HttpConn::open(srv.addr).await;
    // Histogram cells a minute apart, 1h rollup cells an hour apart.
    for (path, point, step) in [
        (
            "/api/histogram",
            histogram_point as fn(i64, &str) -> String,
            60,
        ),
        ("/api/rollup", rollup_point, 3600),
    ] {
        let ts = T0;
        // The series exist (UIDs synced) before syncs turn slow.
        let r = conn
            .request(
                "POST",
                &format!("{path}?sync"),
                "",
                point(ts, "a").as_bytes(),
            )
            .await;
        assert_eq!(r.status, 204, "{backend} {path}: {}", r.text());

        slow.store(true, Ordering::SeqCst);
        let started = Instant::now();
        let r = conn
            .request(
                "POST",
                &format!("{path}?sync&sync_timeout=200&summary"),
                "",
                format!("[{},{}]", point(ts + step, "a"), point(ts + 2 * step, "a")).as_bytes(),
            )
            .await;
        assert_eq!(r.status, 400, "{backend} {path}: {}", r.text());
        assert_eq!(
            r.text(),
            r#"{"success":0,"timeouts":2,"failed":0}"#,
            "{backend} {path}"
        );
        assert!(
            started.elapsed() < Duration::from_millis(1500),
            "{backend} {path}: answered after {:?}, past sync_timeout",
            started.elapsed()
        );
        // With details, each timed-out point is listed with 2.4.1's words.
        let r = conn
            .request(
                "POST",
                &format!("{path}?sync&sync_timeout=200&details"),
                "",
                format!("[{},{{\"metric\":\"h\"}}]", point(ts + 3 * step, "b")).as_bytes(),
            )
            .await;
        assert_eq!(r.status, 400, "{backend} {path}: {}", r.text());
        let json = r.json();
        assert_eq!(json["success"], 0, "{backend} {path}: {json}");
        assert_eq!(json["timeouts"], 1, "{backend} {path}: {json}");
        assert_eq!(json["failed"], 1, "{backend} {path}: {json}");
        let errors = json["errors"].as_array().unwrap();
        assert_eq!(errors.len(), 2, "{backend} {path}: {json}");
        assert_eq!(
            errors[1]["error"], "Write timedout",
            "{backend} {path}: {json}"
        );
        assert_eq!(
            errors[1]["datapoint"]["tags"]["host"], "b",
            "{backend} {path}: {json}"
        );
        let r = conn
            .request(
                "POST",
                &format!("{path}?sync&sync_timeout=200"),
                "",
                point(ts + 3 * step, "a").as_bytes(),
            )
            .await;
        assert_eq!(r.status, 400, "{backend} {path}: {}", r.text());
        let json = r.json();
        assert_eq!(
            json["error"]["message"],
            "The put call has timedout with 0 successful writes, 0 failed writes and 1 timed out writes.",
            "{backend} {path}: {json}"
        );
        slow.store(false, Ordering::SeqCst);
        // A sync within the timeout: the count says so.
        let r = conn
            .request(
                "POST",
                &format!("{path}?sync&sync_timeout=5000&summary"),
                "",
                point(ts + 4 * step, "a").as_bytes(),
            )
            .await;
        assert_eq!(r.status, 200, "{backend} {path}: {}", r.text());
        assert_eq!(
            r.text(),
            r#"{"success":1,"timeouts":0,"failed":0}"#,
            "{backend} {path}"
        );
    }
    // The timed-out writes were stored all the same: five cells each of host a, one of
    // host b (the data table holds histograms only).
    let data = srv.state.tsdb.settings().schema.data_table.clone();
    let cells = |table: &str| -> usize {
        srv.state
            .tsdb
            .store()
            .scan(table, &hourglass_storage::ScanRequest::default())
            .unwrap()
            .map(|r| r.unwrap().cells.len())
            .sum()
    };
    assert_eq!(cells(&data), 6, "{backend}");
    assert_eq!(cells("tsdb-rollup-1h"), 6, "{backend}");
    srv.stop().await;
}

/// Concurrent `?sync` histogram and rollup requests share store syncs (group commit): each
/// waits for a sync that started after its write returned, and one sync serves every
/// request waiting (the seen bug: each request synced the store on its own, one fsync per
/// request).
async fn concurrent_synced_histogram_and_rollup_requests_share_store_syncs(backend: &str) {
    const REQUESTS: usize = 16;
    let slow = Arc::new(AtomicBool::new(true));
    let srv = slow_sync_server(backend, Arc::clone(&slow), Duration::from_millis(150)).await;
    let addr = srv.addr;
    // Series and UIDs first, so the requests below create none.
    let mut conn = HttpConn::open(addr).await;
    for (path, body) in [
        ("/api/histogram", histogram_point(T0, "a")),
        ("/api/rollup", rollup_point(T0, "a")),
    ] {
        let r = conn
            .request("POST", &format!("{path}?sync"), "", body.as_bytes())
            .await;
        assert_eq!(r.status, 204, "{backend} {path}: {}", r.text());
    }
    let syncs = || srv.state.tsdb.store_stats().calls(Call::Sync);
    let before = syncs();
    let tasks: Vec<_> = (0..REQUESTS)
        .map(|i| {
            tokio::spawn(async move {
                let ts = T0 + 60 * (i as i64 + 1);
                let (path, body) = if i % 2 == 0 {
                    ("/api/histogram", histogram_point(ts, "a"))
                } else {
                    ("/api/rollup", rollup_point(T0 + 3600 * (i as i64 + 1), "a"))
                };
                let mut conn = HttpConn::open(addr).await;
                let r = conn
                    .request("POST", &format!("{path}?sync"), "", body.as_bytes())
                    .await;
                (path, r.status, r.text())
            })
        })
        .collect();
    for t in tasks {
        let (path, status, text) = t.await.unwrap();
        assert_eq!(status, 204, "{backend} {path}: {text}");
    }
    let shared = syncs() - before;
    assert!(
        (1..=REQUESTS as u64 / 2).contains(&shared),
        "{backend}: {REQUESTS} concurrent synced requests ran {shared} store syncs"
    );
    assert_eq!(
        srv.state.tsdb.kept_cells().0,
        0,
        "{backend}: every kept batch synced"
    );
    srv.stop().await;
}

async fn stat(conn: &mut HttpConn, metric: &str, tag: Option<&str>) -> u64 {
    let r = conn.request("GET", "/api/stats", "", b"").await;
    r.json()
        .as_array()
        .unwrap()
        .iter()
        .find(|s| {
            s["metric"] == metric
                && tag.is_none_or(|t| {
                    let (k, v) = t.split_once('=').unwrap();
                    s["tags"][k] == v
                })
        })
        .unwrap_or_else(|| panic!("no {metric} {tag:?}"))["value"]
        .as_str()
        .map_or_else(|| 0, |v| v.parse().unwrap())
}

/// Past `tsd.storage.max_buffer_bytes` while the store is down: HTTP puts answer 503 with
/// OpenTSDB's error shape and store nothing; a telnet client is not read (its lines are
/// neither answered with errors nor lost); once the store is back both go through and
/// every acknowledged point is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_memory_budget_puts_wait_or_are_refused_until_the_store_returns() {
    let faults = Arc::new(Faults::new(1, 0));
    let store: Arc<dyn Store> =
        Arc::new(FaultStore::over(store_for("memory"), Arc::clone(&faults)));
    let budget: u64 = 1 << 20;
    let srv: TestServer = start_on(
        store,
        config(&[
            ("tsd.storage.max_buffer_bytes", &budget.to_string()),
            ("tsd.storage.max_buffered_points", "10000"),
            ("tsd.storage.flush_interval", "100"),
        ]),
    )
    .await;
    srv.state.tsdb.start_background();
    let mut conn = HttpConn::open(srv.addr).await;
    let r = conn
        .request("POST", "/api/put", "", body(T0, 10, 1).as_bytes())
        .await;
    assert_eq!(r.status, 204);
    faults.set_store_down(true);
    let mut acked = 10u64;
    let mut refused = None;
    for batch in 1..200 {
        let r = conn
            .request(
                "POST",
                "/api/put",
                "",
                body(T0 + batch * 5000, 5000, 1).as_bytes(),
            )
            .await;
        match r.status {
            204 => acked += 5000,
            503 => {
                refused = Some(r);
                break;
            }
            other => panic!("unexpected {other}: {}", r.text()),
        }
    }
    let refused = refused.expect("puts were refused once the budget was reached");
    let error = &refused.json()["error"];
    assert_eq!(error["code"], 503);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .starts_with("Please throttle writes"),
        "{error}"
    );
    assert!(
        refused
            .headers
            .iter()
            .any(|(k, v)| k == "retry-after" && v == "1")
    );
    let buffered = stat(&mut conn, "tsd.datapoints.buffered_bytes", None).await;
    assert!(
        buffered >= budget && buffered <= budget + (5000 * 64),
        "{buffered}"
    );
    assert!(stat(&mut conn, "tsd.rpc.errors", Some("type=throttled")).await >= 1);

    // A telnet client meanwhile: not read while over budget, so no reply yet.
    let mut telnet = TcpStream::connect(srv.addr).await.unwrap();
    let mut lines = String::new();
    for i in 0..100 {
        lines.push_str(&format!("put m {} {} host=h2\n", T0 + i, i));
    }
    lines.push_str("version\n");
    telnet.write_all(lines.as_bytes()).await.unwrap();
    let mut reply = [0u8; 64];
    let early = tokio::time::timeout(Duration::from_millis(500), telnet.read(&mut reply)).await;
    assert!(
        early.is_err(),
        "telnet was answered while over budget: {early:?}"
    );

    faults.set_store_down(false);
    let started = Instant::now();
    loop {
        let r = conn
            .request("POST", "/api/put", "", body(T0 + 990_000, 10, 3).as_bytes())
            .await;
        if r.status == 204 {
            acked += 10;
            break;
        }
        assert_eq!(r.status, 503, "{}", r.text());
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "writes never resumed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let n = tokio::time::timeout(Duration::from_secs(20), telnet.read(&mut reply))
        .await
        .expect("telnet answered once there is room")
        .unwrap();
    assert!(
        String::from_utf8_lossy(&reply[..n]).starts_with("hourglass "),
        "only the version fence is answered: {}",
        String::from_utf8_lossy(&reply[..n])
    );
    acked += 100;
    srv.state.tsdb.flush().unwrap();
    let r = conn
        .request(
            "GET",
            &format!(
                "/api/query?start={T0}&end={}&m=sum:0all-count:m",
                T0 + 1_000_000
            ),
            "",
            b"",
        )
        .await;
    let total: f64 = r.json()[0]["dps"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_f64().unwrap())
        .sum();
    assert_eq!(total as u64, acked);
    srv.stop().await;
}

const ROLLUPS: &str = r#"{"aggregationIds":{"sum":0,"count":1},"intervals":[
{"table":"tsdb","preAggregationTable":"tsdb-agg","interval":"1m","rowSpan":"1h","defaultInterval":true},
{"table":"tsdb-rollup-1h","preAggregationTable":"tsdb-rollup-agg-1h","interval":"1h","rowSpan":"1d"}]}"#;

/// Histogram and rollup points skip the write-ahead log (RFC 0008): each request is
/// acknowledged only once the store applied it, and, with `?sync` or
/// `tsd.storage.wal.sync`, once the store synced it (the seen bug: `wal.sync` was not
/// honoured for them, so an acknowledged histogram or rollup was lost by a power loss the
/// same setting protects raw points from). While the store is down nothing is acknowledged:
/// `/api/histogram` and `/api/rollup` count every point failed, telnet says why; once it is
/// back the same points go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn histogram_and_rollup_points_are_acknowledged_once_stored_and_synced() {
    for wal_sync in [false, true] {
        let faults = Arc::new(Faults::new(1, 0));
        let store: Arc<dyn Store> =
            Arc::new(FaultStore::over(store_for("memory"), Arc::clone(&faults)));
        let srv: TestServer = start_on(
            store,
            config(&[
                (
                    "tsd.core.histograms.config",
                    r#"{"net.opentsdb.core.SimpleHistogramDecoder": 42}"#,
                ),
                ("tsd.rollups.enable", "true"),
                ("tsd.rollups.config", ROLLUPS),
                (
                    "tsd.storage.wal.sync",
                    if wal_sync { "true" } else { "false" },
                ),
            ]),
        )
        .await;
        let syncs = || srv.state.tsdb.store_stats().calls(Call::Sync);
        let histogram = |ts: i64| {
            format!(
                r#"{{"metric":"h","timestamp":{ts},"tags":{{"host":"a"}},"buckets":{{"0,1":42}},"underflow":0,"overflow":1}}"#
            )
        };
        let rollup = |ts: i64| {
            format!(
                r#"{{"metric":"r","timestamp":{ts},"value":5,"tags":{{"host":"a"}},"interval":"1h","aggregator":"sum"}}"#
            )
        };
        let mut conn = HttpConn::open(srv.addr).await;
        // The series and their UIDs exist before the store goes down.
        for (path, body) in [
            ("/api/histogram", histogram(T0)),
            ("/api/rollup", rollup(T0)),
        ] {
            let r = conn.request("POST", path, "", body.as_bytes()).await;
            assert_eq!(r.status, 204, "{path}: {}", r.text());
        }

        faults.set_store_down(true);
        for (path, body) in [
            ("/api/histogram", histogram(T0 + 60)),
            ("/api/rollup", rollup(T0 + 3600)),
        ] {
            let r = conn
                .request("POST", &format!("{path}?details"), "", body.as_bytes())
                .await;
            assert_eq!(r.status, 400, "{path}: {}", r.text());
            let json = r.json();
            assert_eq!(json["success"], 0, "{path}: {json}");
            assert_eq!(json["failed"], 1, "{path}: {json}");
            let r = conn
                .request("POST", &format!("{path}?sync"), "", body.as_bytes())
                .await;
            assert_eq!(r.status, 400, "{path}?sync: {}", r.text());
        }
        let replies = telnet(
            srv.addr,
            &format!(
                "histogram h {} u=0:o=1:0,1=42 host=a\nrollup 1h-sum r {} 5 host=a\n",
                T0 + 120,
                T0 + 7200
            ),
        )
        .await;
        assert_eq!(replies.len(), 2, "{replies:?}");
        assert!(
            replies[0].starts_with("histogram: HBase error: "),
            "{replies:?}"
        );
        assert!(replies[1].starts_with("rollup: "), "{replies:?}");

        faults.set_store_down(false);
        for (path, body) in [
            ("/api/histogram", histogram(T0 + 60)),
            ("/api/rollup", rollup(T0 + 3600)),
        ] {
            let before = syncs();
            let r = conn.request("POST", path, "", body.as_bytes()).await;
            assert_eq!(r.status, 204, "{path}: {}", r.text());
            assert_eq!(
                syncs() - before,
                u64::from(wal_sync),
                "{path}: the store is synced before the answer exactly when wal.sync is on"
            );
            let before = syncs();
            let r = conn
                .request("POST", &format!("{path}?sync"), "", body.as_bytes())
                .await;
            assert_eq!(r.status, 204, "{path}?sync: {}", r.text());
            assert_eq!(syncs() - before, 1, "{path}?sync syncs the store");
        }
        let before = syncs();
        let replies = telnet(
            srv.addr,
            &format!(
                "histogram h {} u=0:o=1:0,1=42 host=a\nrollup 1h-sum r {} 5 host=a\n",
                T0 + 120,
                T0 + 7200
            ),
        )
        .await;
        assert!(replies.is_empty(), "{replies:?}");
        assert_eq!(syncs() - before, 2 * u64::from(wal_sync), "telnet");

        // Every acknowledged cell is in the store: three histogram times, three rollup hours.
        let data = srv.state.tsdb.settings().schema.data_table.clone();
        let cells = |table: &str| -> usize {
            srv.state
                .tsdb
                .store()
                .scan(table, &hourglass_storage::ScanRequest::default())
                .unwrap()
                .map(|r| r.unwrap().cells.len())
                .sum()
        };
        assert_eq!(cells(&data), 3);
        assert_eq!(cells("tsdb-rollup-1h"), 3);
        srv.stop().await;
    }
}

/// `tsd.core.connections.limit`: a connection past the limit is closed at once (and
/// counted); `tsd.core.socket.timeout`: an idle connection is closed, a busy one is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_limit_and_idle_timeout() {
    let srv = start_on(
        store_for("memory"),
        config(&[
            ("tsd.core.connections.limit", "3"),
            ("tsd.core.socket.timeout", "1"),
        ]),
    )
    .await;
    let mut open = Vec::new();
    for _ in 0..3 {
        let mut c = TcpStream::connect(srv.addr).await.unwrap();
        c.write_all(b"version\n").await.unwrap();
        let mut buf = [0u8; 256];
        assert!(c.read(&mut buf).await.unwrap() > 0);
        open.push(c);
    }
    let mut fourth = TcpStream::connect(srv.addr).await.unwrap();
    let _ = fourth.write_all(b"version\n").await;
    let mut buf = [0u8; 256];
    let n = tokio::time::timeout(Duration::from_secs(5), fourth.read(&mut buf))
        .await
        .expect("the fourth connection is closed at once");
    assert!(
        matches!(n, Ok(0) | Err(_)),
        "the fourth connection was served: {n:?}"
    );
    // The busy connection keeps talking; the two idle ones are closed after a second.
    let mut busy = open.remove(0);
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(2500) {
        busy.write_all(b"version\n").await.unwrap();
        assert!(
            busy.read(&mut buf).await.unwrap() > 0,
            "the busy connection stays open"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for mut idle in open {
        let n = tokio::time::timeout(Duration::from_secs(1), idle.read(&mut buf))
            .await
            .expect("an idle connection is closed");
        assert!(matches!(n, Ok(0) | Err(_)));
    }
    let mut conn = HttpConn::open(srv.addr).await;
    let r = conn.request("GET", "/api/stats", "", b"").await;
    let json = r.json();
    let value = |metric: &str, ty: &str| -> u64 {
        json.as_array()
            .unwrap()
            .iter()
            .find(|s| s["metric"] == metric && s["tags"]["type"] == ty)
            .unwrap()["value"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert_eq!(value("tsd.connectionmgr.connections", "rejected"), 1);
    assert_eq!(value("tsd.connectionmgr.exceptions", "timeout"), 2);
    srv.stop().await;
}
