#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `/api/query` beyond the basics, `/api/query/last` and `/api/config/filters`, over real
//! sockets on every backend: time zones and calendar buckets, show* options, TSUID
//! sub-queries, limits (413), delete, and the request shapes Grafana's data source sends.
mod common;

use common::{TestServer, http, load_fixture, start, start_with};
use hourglass_core::config::Config;
use serde_json::{Value, json};

async fn post(srv: &TestServer, path: &str, body: Value) -> common::Response {
    http(srv.addr, "POST", path, &body.to_string()).await
}

async fn show_options_and_output_forms(backend: &str) {
    let srv = start(backend).await;
    load_fixture(&srv).await;
    let body = json!({
        "start": 1356998400, "end": 1357041600,
        "showQuery": true, "showStats": true, "showSummary": true, "showTSUIDs": true,
        "queries": [{"aggregator": "sum", "metric": "sys.cpu.user", "downsample": "10m-max",
                     "filters": [{"type": "wildcard", "tagk": "host", "filter": "web*", "groupBy": true}]}]
    });
    let r = post(&srv, "/api/query", body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let arr = v.as_array().unwrap();
    assert_eq!(arr.len(), 3, "two groups and the summary");
    let keys: Vec<&str> = arr[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "metric",
            "tags",
            "aggregateTags",
            "query",
            "tsuids",
            "dps",
            "stats"
        ]
    );
    assert_eq!(arr[0]["query"]["index"], 0);
    assert_eq!(arr[0]["query"]["downsample"], "10m-max");
    assert_eq!(arr[0]["query"]["filters"][0]["type"], "wildcard");
    assert_eq!(arr[0]["tsuids"].as_array().unwrap().len(), 1);
    // 10-minute maxima of web01: 20 points per bucket, the first starting at 00:00:30.
    assert_eq!(arr[0]["dps"]["1356998400"], json!(19.0));
    assert_eq!(arr[0]["dps"]["1356999000"], json!(39.0));
    assert_eq!(arr[0]["stats"]["dpsPreFilter"], 600);
    assert_eq!(arr[2]["statsSummary"]["rawDatapoints"], 600);
    // Doubles are written as Java does (`19.0`), not `19`.
    assert!(r.text().contains("\"1356998400\":19.0"), "{}", r.text());

    // GET forms: arrays, ms, jsonp, tsuid=.
    let tsuid = arr[1]["tsuids"][0].as_str().unwrap().to_string();
    let r = http(
        srv.addr,
        "GET",
        &format!("/api/query?start=1356998400&end=1356998500&tsuid=sum:{tsuid}&arrays&ms"),
        "",
    )
    .await;
    let v = r.json();
    assert_eq!(
        v[0]["dps"],
        json!([
            [1356998430000i64, 300],
            [1356998460000i64, 299],
            [1356998490000i64, 298]
        ])
    );
    assert_eq!(v[0]["tags"], json!({"host": "web02"}));
    let r = http(
        srv.addr,
        "GET",
        "/api/query?start=1356998400&end=1356998440&m=sum:sys.cpu.user&jsonp=cb",
        "",
    )
    .await;
    assert!(
        r.text().starts_with("cb([{") && r.text().ends_with("])"),
        "{}",
        r.text()
    );
    srv.stop().await;
}

/// `tsd.core.timezone` (OpenTSDB's JVM default zone): absolute dates given without a zone
/// of their own are read in it by `/api/query`, `/api/query/exp`, `/api/query/gexp` and
/// `/api/annotations`; a zone given still wins, and calendar buckets without one stay UTC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tsds_zone_reads_dates_given_without_one() {
    let mut config = Config::default();
    config.set("tsd.core.auto_create_metrics", "true");
    config.set("tsd.core.timezone", "Asia/Kolkata");
    let srv = start_with("memory", config).await;
    let mut lines = String::new();
    // One point per hour for two days from 2013-01-01T00:00Z.
    for h in 0..48 {
        lines.push_str(&format!("put m {} 1 host=a\n", 1356998400 + h * 3600));
    }
    assert!(common::telnet(srv.addr, &lines).await.is_empty());
    let dps_keys =
        |v: &Value| -> Vec<String> { v[0]["dps"].as_object().unwrap().keys().cloned().collect() };
    // 05:30 and 06:30 in Kolkata (UTC+5:30) are 00:00Z and 01:00Z.
    let (start, end) = ("2013/01/01-05:30", "2013/01/01-06:30");
    let query = json!({"start": start, "end": end,
                       "queries": [{"aggregator": "sum", "metric": "m"}]});
    let v = post(&srv, "/api/query", query).await.json();
    assert_eq!(dps_keys(&v), ["1356998400", "1357002000"], "{v}");
    let r = http(
        srv.addr,
        "GET",
        &format!("/api/query?start={start}&end={end}&m=sum:m"),
        "",
    )
    .await;
    assert_eq!(dps_keys(&r.json()), ["1356998400", "1357002000"]);
    // A zone given reads the dates.
    let query = json!({"start": start, "end": end, "timezone": "UTC",
                       "queries": [{"aggregator": "sum", "metric": "m"}]});
    let v = post(&srv, "/api/query", query).await.json();
    assert_eq!(dps_keys(&v), ["1357020000"], "{v}");
    // Calendar buckets without a zone are UTC days, whatever the TSD's zone.
    let query = json!({"start": "2013/01/01-05:30", "end": "2013/01/02-05:29",
                       "queries": [{"aggregator": "sum", "metric": "m", "downsample": "1dc-sum"}]});
    let v = post(&srv, "/api/query", query).await.json();
    assert_eq!(v[0]["dps"], json!({"1356998400": 24.0}), "{v}");
    // Expressions.
    let exp = json!({"time": {"start": start, "end": end, "aggregator": "sum"},
                     "metrics": [{"id": "a", "metric": "m"}],
                     "expressions": [{"id": "e", "expr": "a * 2"}]});
    let v = post(&srv, "/api/query/exp", exp).await.json();
    let times: Vec<i64> = v["outputs"][0]["dps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[0].as_i64().unwrap())
        .collect();
    assert_eq!(times, [1356998400000, 1357002000000], "{v}");
    let r = http(
        srv.addr,
        "GET",
        &format!("/api/query/gexp?start={start}&end={end}&exp=scale(sum:m,2)"),
        "",
    )
    .await;
    assert_eq!(
        dps_keys(&r.json()),
        ["1356998400", "1357002000"],
        "{}",
        r.text()
    );
    // Annotations: a global note at 00:00Z, found from 05:30 Kolkata and not from 05:31.
    let note = json!({"startTime": 1356998400, "description": "midnight UTC"});
    assert_eq!(post(&srv, "/api/annotation", note).await.status, 200);
    let found = |from: &str| {
        let path = format!("/api/annotations?start_time={from}&end_time={end}");
        async move { http(srv.addr, "GET", &path, "").await.json() }
    };
    assert_eq!(
        found("2013/01/01-05:30").await[0]["description"],
        "midnight UTC"
    );
    assert_eq!(found("2013/01/01-05:31").await, json!([]));
    srv.stop().await;
}

/// A zone Java does not know refuses the start, in OpenTSDB's words.
#[test]
fn a_tsd_zone_java_does_not_know_is_refused() {
    let config = Config::parse("tsd.core.timezone = Asia/Kolkatta\n").unwrap();
    let err = hourglass_server::ServerSettings::from_config(&config).unwrap_err();
    assert_eq!(err.to_string(), "Invalid timezone name: Asia/Kolkatta");
}

async fn time_zones_and_calendar_buckets(backend: &str) {
    let srv = start(backend).await;
    let mut lines = String::new();
    // One point per hour for two days from 2013-01-01T00:00Z.
    for h in 0..48 {
        lines.push_str(&format!("put m {} 1 host=a\n", 1356998400 + h * 3600));
    }
    assert!(common::telnet(srv.addr, &lines).await.is_empty());
    let query = |tz: &str, ds: &str, cal: bool| {
        json!({"start": "2013/01/01", "end": "2013/01/02-23:59", "timezone": tz, "useCalendar": cal,
               "queries": [{"aggregator": "sum", "metric": "m", "downsample": ds}]})
    };
    // In Asia/Kolkata (UTC+5:30), 2013/01/01 is 2012-12-31T18:30Z; the day buckets start at
    // local midnight.
    let v = post(&srv, "/api/query", query("Asia/Kolkata", "1dc-sum", false))
        .await
        .json();
    let dps = v[0]["dps"].as_object().unwrap();
    assert_eq!(dps.keys().collect::<Vec<_>>(), ["1356978600", "1357065000"]);
    assert_eq!(dps["1356978600"], json!(19.0), "00:00Z..18:00Z of the 1st");
    // useCalendar turns a plain spec into calendar buckets too.
    let v = post(&srv, "/api/query", query("Asia/Kolkata", "1d-sum", true))
        .await
        .json();
    assert!(v[0]["dps"].get("1356978600").is_some(), "{v}");
    // Without the calendar, days are UTC-aligned.
    let v = post(&srv, "/api/query", query("Asia/Kolkata", "1d-sum", false))
        .await
        .json();
    assert!(v[0]["dps"].get("1357084800").is_some(), "{v}");
    let bad = post(
        &srv,
        "/api/query",
        query("Nowhere/Atlantis", "1dc-sum", false),
    )
    .await;
    assert_eq!(bad.status, 400);
    // The date reads the zone first (`DateTime.setTimeZone`).
    assert_eq!(
        bad.json()["error"]["message"],
        "Invalid timezone name: Nowhere/Atlantis"
    );
    srv.stop().await;
}

async fn limits_answer_413(backend: &str) {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    c.set("tsd.query.limits.data_points.default", "100");
    c.set("tsd.query.limits.data_points.allow_override", "true");
    c.set("tsd.query.limits.series.default", "5");
    let srv = start_with(backend, c).await;
    load_fixture(&srv).await;
    let r = http(
        srv.addr,
        "GET",
        "/api/query?start=1356998400&end=1357041600&m=sum:sys.cpu.user",
        "",
    )
    .await;
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(
        r.json()["error"]["message"],
        "Sorry, you have attempted to fetch more than our limit of 100 data points. \
         Please try filtering using more tags or decrease your time range."
    );
    let over = post(
        &srv,
        "/api/query",
        json!({"start": 1356998400, "end": 1357041600, "overrideDataPointLimit": true,
               "queries": [{"aggregator": "sum", "metric": "sys.cpu.user"}]}),
    )
    .await;
    assert_eq!(over.status, 200, "{}", over.text());
    // The server still answers everything else.
    assert_eq!(http(srv.addr, "GET", "/api/version", "").await.status, 200);
    srv.stop().await;

    // Per-metric overrides: the first regex found in the metric gives both limits.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("limits.json");
    std::fs::write(
        &file,
        r#"[{"regex": "cpu\\.user$", "dataPointsLimit": 50}, {"regex": ".*", "dataPointsLimit": 0}]"#,
    )
    .unwrap();
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    c.set("tsd.query.limits.data_points.default", "100000");
    c.set("tsd.query.limits.overrides.config", file.to_str().unwrap());
    let srv = start_with(backend, c).await;
    load_fixture(&srv).await;
    assert!(
        common::telnet(
            srv.addr,
            "put sys.cpu.user.total 1356998430 1 host=web01
"
        )
        .await
        .is_empty()
    );
    let r = http(
        srv.addr,
        "GET",
        "/api/query?start=1356998400&end=1357041600&m=sum:sys.cpu.user",
        "",
    )
    .await;
    assert_eq!(r.status, 413, "{}", r.text());
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("our limit of 50 data points")
    );
    let r = http(
        srv.addr,
        "GET",
        "/api/query?start=1356998400&end=1357041600&m=sum:sys.cpu.user.total",
        "",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    srv.stop().await;
}

/// Every running sub-query's held points count against one budget
/// (`tsd.query.limits.memory_points.total`; its waits and refusals are the engine's
/// `query::memory` tests): the budget and what running queries hold are in `/api/stats`,
/// a query alone is the oldest running and goes on past it, and what a query held is given
/// back once it is answered.
async fn queries_hold_points_under_one_budget(backend: &str) {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    c.set("tsd.query.limits.memory_points.total", "500");
    let srv = start_with(backend, c).await;
    load_fixture(&srv).await;
    let memory = |srv: &TestServer| {
        let addr = srv.addr;
        async move {
            let stats = http(addr, "GET", "/api/stats", "").await.json();
            let get = |name: &str| {
                stats
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|s| s["metric"] == name)
                    .and_then(|s| s["value"].as_str().map(str::to_string))
                    .unwrap_or_default()
            };
            [
                get("tsd.query.memory.points_held"),
                get("tsd.query.memory.points_limit"),
                get("tsd.query.memory.waited"),
                get("tsd.query.memory.refused"),
            ]
        }
    };
    assert_eq!(memory(&srv).await, ["0", "500", "0", "0"]);
    // Both series' 600 points are held for their sum, past the budget: alone, it goes on.
    let all = "/api/query?start=1356998400&end=1357007400&m=sum:sys.cpu.user";
    let r = http(srv.addr, "GET", all, "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()[0]["dps"].as_object().unwrap().len(), 300);
    assert_eq!(r.json()[0]["dps"]["1356998430"], json!(301));
    assert_eq!(memory(&srv).await, ["0", "500", "0", "0"]);
    // A request's sub-queries run one after another, each giving its points back once
    // written into the answer.
    let two = json!({"start": 1356998400, "end": 1357002900, "queries": [
        {"aggregator": "sum", "metric": "sys.cpu.user"},
        {"aggregator": "max", "metric": "sys.cpu.user"}]});
    let r = post(&srv, "/api/query", two).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json().as_array().unwrap().len(), 2);
    assert_eq!(memory(&srv).await, ["0", "500", "0", "0"]);
    srv.stop().await;
}

async fn delete_needs_permission(backend: &str) {
    let srv = start(backend).await;
    load_fixture(&srv).await;
    let q = json!({"start": 1356998400, "end": 1357041600, "delete": true,
                   "queries": [{"aggregator": "sum", "metric": "sys.cpu.user", "tags": {"host": "web01"}}]});
    let r = post(&srv, "/api/query", q.clone()).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["error"]["details"],
        "Deleting data is not enabled (tsd.http.query.allow_delete=false)"
    );
    srv.stop().await;

    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    c.set("tsd.http.query.allow_delete", "true");
    let srv = start_with(backend, c).await;
    load_fixture(&srv).await;
    let r = post(&srv, "/api/query", q).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()[0]["dps"].as_object().unwrap().len(), 300);
    let after = http(
        srv.addr,
        "GET",
        "/api/query?start=1356998400&end=1357041600&m=sum:sys.cpu.user%7Bhost=*%7D",
        "",
    )
    .await
    .json();
    assert_eq!(after.as_array().unwrap().len(), 1, "web01 is gone: {after}");
    assert_eq!(after[0]["tags"]["host"], "web02");
    srv.stop().await;
}

async fn last_points(backend: &str) {
    let srv = start(backend).await;
    let now = hourglass_storage::now_ms() / 1000;
    let lines = format!(
        "put last.m {} 1 host=a dc=x\nput last.m {} 2.5 host=a dc=x\nput last.m {} 7 host=b dc=x\n",
        now - 120,
        now - 60,
        now - 30
    );
    assert!(common::telnet(srv.addr, &lines).await.is_empty());
    let v = http(
        srv.addr,
        "GET",
        "/api/query/last?timeseries=last.m%7Bdc=x%7D&resolve",
        "",
    )
    .await
    .json();
    let arr = v.as_array().unwrap();
    assert_eq!(arr.len(), 2, "{v}");
    let a = arr.iter().find(|o| o["tags"]["host"] == "a").unwrap();
    assert_eq!(a["value"], "2.5");
    assert_eq!(a["timestamp"], json!((now - 60) * 1000));
    assert_eq!(a["metric"], "last.m");
    let tsuid = a["tsuid"].as_str().unwrap().to_string();
    let v = post(
        &srv,
        "/api/query/last",
        json!({"queries": [{"tsuids": [tsuid]}], "backScan": 2}),
    )
    .await
    .json();
    let keys: Vec<&str> = v[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["timestamp", "value", "tsuid"], "unresolved: {v}");
    let missing = http(srv.addr, "GET", "/api/query/last?timeseries=nope", "").await;
    assert_eq!(missing.status, 400);
    assert_eq!(
        missing.json()["error"]["message"],
        "No such name for 'metrics': 'nope'"
    );
    assert_eq!(
        http(srv.addr, "GET", "/api/query/last", "").await.json()["error"]["message"],
        "Missing sub queries"
    );
    srv.stop().await;
}

/// The bodies Grafana's OpenTSDB data source posts (2.1 style with `tags`, 2.2+ with
/// `filters`, 2.3 with `showQuery` and relative times), and its lookups.
async fn grafana_requests(backend: &str) {
    let srv = start(backend).await;
    load_fixture(&srv).await;
    let older = json!({
        "start": 1356998400000i64, "end": 1357041600000i64,
        "queries": [{"metric": "sys.cpu.user", "aggregator": "avg", "downsample": "1m-avg",
                     "tags": {"host": "*"}}],
        "msResolution": false, "globalAnnotations": true
    });
    let v = post(&srv, "/api/query", older).await.json();
    assert_eq!(v.as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v[0]["dps"].as_object().unwrap().len(), 151);
    let current = json!({
        "start": 1356998400000i64, "end": 1357041600000i64,
        "queries": [
            {"metric": "sys.cpu.user", "aggregator": "sum", "downsample": "5m-avg-nan",
             "filters": [{"type": "literal_or", "tagk": "host", "filter": "web01|web02", "groupBy": false}]},
            // counterMax as a float: read as Jackson reads a long field (1000).
            {"metric": "sys.cpu.user", "aggregator": "sum", "rate": true,
             "rateOptions": {"counter": true, "counterMax": 1000.0, "resetValue": "0", "dropResets": false},
             "filters": [{"type": "wildcard", "tagk": "host", "filter": "*", "groupBy": true}],
             "explicitTags": false}
        ],
        "msResolution": false, "globalAnnotations": true, "showQuery": true
    });
    let v = post(&srv, "/api/query", current).await.json();
    let arr = v.as_array().unwrap();
    assert_eq!(arr.len(), 3, "{v}");
    assert_eq!(arr[0]["query"]["index"], 0);
    assert_eq!(arr[1]["query"]["index"], 1);
    assert_eq!(arr[2]["query"]["index"], 1);
    // web02 falls by 1 every 30 s: a counter wrapping at 1000.
    let first = arr[2]["dps"]
        .as_object()
        .unwrap()
        .values()
        .next()
        .cloned()
        .unwrap();
    assert!(
        (first.as_f64().unwrap() - 999.0 / 30.0).abs() < 1e-9,
        "{first}"
    );
    let relative =
        json!({"start": "10y-ago", "queries": [{"metric": "sys.cpu.user", "aggregator": "sum"}]});
    assert_eq!(post(&srv, "/api/query", relative).await.status, 200);
    let filters = http(srv.addr, "GET", "/api/config/filters", "")
        .await
        .json();
    for t in [
        "literal_or",
        "iliteral_or",
        "not_literal_or",
        "not_iliteral_or",
        "wildcard",
        "iwildcard",
        "regexp",
        "not_key",
    ] {
        assert!(
            filters[t]["description"].as_str().unwrap().len() > 50,
            "{t}"
        );
        assert!(filters[t]["examples"].as_str().unwrap().contains(t), "{t}");
    }
    // In the order OpenTSDB's hash map gives them.
    let types: Vec<&str> = filters
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        types,
        [
            "regexp",
            "iwildcard",
            "not_key",
            "iliteral_or",
            "not_iliteral_or",
            "not_literal_or",
            "literal_or",
            "wildcard"
        ]
    );
    assert_eq!(
        filters["not_key"]["examples"],
        r#"host=not_key()  {"type":"not_key","tagk":"host","filter":"","groupBy":false}"#
    );
    let aggs = http(srv.addr, "GET", "/api/aggregators", "").await.json();
    assert!(aggs.as_array().unwrap().contains(&json!("sum")));
    srv.stop().await;
}

/// Times in every form OpenTSDB reads, and its words for the ones it refuses.
async fn times_in_opentsdb_forms(backend: &str) {
    let srv = start(backend).await;
    load_fixture(&srv).await;
    let count = |start: &str, end: &str| {
        let path = format!("/api/query?start={start}&end={end}&m=sum:sys.cpu.user");
        async move {
            let r = http(srv.addr, "GET", &path, "").await;
            assert_eq!(r.status, 200, "{path}: {}", r.text());
            r.json()[0]["dps"].as_object().map_or(0, |d| d.len())
        }
    };
    let all = count("1356998400", "1357041600").await;
    assert!(all > 0);
    assert_eq!(count("1356998400000ms", "1357041600000ms").await, all);
    assert_eq!(count("2013/01/01", "2013/01/01-12:00").await, all);
    assert_eq!(
        count("2013/01/01%2000:00", "2013/01/01%2012:00:00").await,
        all
    );
    assert_eq!(count("1356998400.000", "1357041600").await, all);
    for (start, want) in [
        ("1x-ago", "Invalid duration (suffix): 1x"),
        (
            "1-ago",
            "Invalid duration, must have an integer and unit: 1",
        ),
        ("2013/1/1", "Invalid absolute date: 2013/1/1"),
        ("abc", "Invalid time: abc. Invalid character 'a' in abc"),
    ] {
        let r = http(
            srv.addr,
            "GET",
            &format!("/api/query?start={start}&m=sum:sys.cpu.user"),
            "",
        )
        .await;
        assert_eq!(r.status, 400, "{start}");
        assert_eq!(r.json()["error"]["message"], want, "{start}");
    }
    srv.stop().await;
}

/// With the tag index on, `/api/query/last` and filtered `/api/query` read the series it
/// lists: stored and still buffered points alike.
async fn last_points_and_queries_from_the_index(backend: &str) {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    c.set("tsd.index.enable", "true");
    let srv = start_with(backend, c).await;
    let now = hourglass_storage::now_ms() / 1000;
    let lines = format!(
        "put last.i {} 1 host=a dc=x\nput last.i {} 7 host=b dc=x\nput last.i {} 9 host=c dc=y\n",
        now - 120,
        now - 90,
        now - 80
    );
    assert!(common::telnet(srv.addr, &lines).await.is_empty());
    srv.state.tsdb.flush().unwrap();
    // One more point of a, and a new series d, still buffered.
    let lines = format!(
        "put last.i {} 2.5 host=a dc=x\nput last.i {} 4 host=d dc=x\n",
        now - 60,
        now - 50
    );
    assert!(common::telnet(srv.addr, &lines).await.is_empty());
    let v = http(
        srv.addr,
        "GET",
        "/api/query/last?timeseries=last.i%7Bdc=x%7D&resolve",
        "",
    )
    .await
    .json();
    let mut got: Vec<(String, String)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["tags"]["host"].as_str().unwrap().to_string(),
                o["value"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("a".into(), "2.5".into()),
            ("b".into(), "7".into()),
            ("d".into(), "4".into())
        ],
        "{backend}: {v}"
    );
    let q = format!(
        "/api/query?start={}&end={now}&m=none:last.i%7Bhost=regexp(%5E%5Bab%5D)%7D",
        now - 3600
    );
    let v = http(srv.addr, "GET", &q, "").await.json();
    let mut hosts: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["tags"]["host"].as_str().unwrap())
        .collect();
    hosts.sort();
    assert_eq!(hosts, ["a", "b"], "{backend}: {v}");
    srv.stop().await;
}

/// Queries naming their series are answered on the connection's thread (`tsd.query.inline`,
/// on by default): their answers, errors and limits are byte for byte those of the same
/// requests handed to a worker thread.
async fn inline_answers_as_handed_off(backend: &str) {
    let config = |inline: &str| {
        let mut c = Config::default();
        c.set("tsd.core.auto_create_metrics", "true");
        c.set("tsd.query.limits.data_points.default", "250");
        c.set("tsd.query.inline", inline);
        c
    };
    let inline = start_with(backend, config("true")).await;
    let handed = start_with(backend, config("false")).await;
    for srv in [&inline, &handed] {
        load_fixture(srv).await;
    }
    // An hour: about 120 points a host.
    let range = "start=1356998400&end=1357002000";
    let tsuid = {
        let q = format!("/api/query?{range}&m=sum:sys.cpu.user%7Bhost=web01%7D&show_tsuids");
        let v = http(inline.addr, "GET", &q, "").await.json();
        v[0]["tsuids"][0].as_str().unwrap().to_string()
    };
    let requests = [
        format!("/api/query?{range}&m=sum:sys.cpu.user%7Bhost=web01%7D"),
        format!("/api/query?{range}&m=sum:10m-avg:sys.cpu.user%7Bhost=web02%7D&arrays"),
        format!("/api/query?{range}&m=sum:rate:sys.cpu.user%7Bhost=web01%7D&ms"),
        format!(
            "/api/query?{range}&m=sum:sys.cpu.user%7Bhost=web01%7D&m=max:5m-max:sys.cpu.user%7Bhost=web02%7D&nocache"
        ),
        // A TSUID sub-query counts the points of its metric's rows: a shorter range.
        format!("/api/query?start=1356998400&end=1356999600&tsuid=sum:1m-sum:{tsuid}"),
        // Errors: an unknown tag value, an unknown metric, a bad downsampler.
        format!("/api/query?{range}&m=sum:sys.cpu.user%7Bhost=web09%7D"),
        format!("/api/query?{range}&m=sum:nosuch.metric%7Bhost=web01%7D"),
        format!("/api/query?{range}&m=sum:1x-avg:sys.cpu.user%7Bhost=web01%7D"),
        // Over the point limit (300 points, 250 at most): 413 both ways.
        "/api/query?start=1356998400&end=1357041600&m=sum:sys.cpu.user%7Bhost=web01%7D".into(),
    ];
    let mut statuses = Vec::new();
    for path in &requests {
        let a = http(inline.addr, "GET", path, "").await;
        let b = http(handed.addr, "GET", path, "").await;
        assert_eq!(a.status, b.status, "{backend} {path}: {}", a.text());
        assert_eq!(a.text(), b.text(), "{backend} {path}");
        statuses.push(a.status);
    }
    assert_eq!(
        statuses,
        [200, 200, 200, 200, 200, 400, 400, 400, 413],
        "{backend}"
    );
    let post = json!({"start": 1356998400, "end": 1357041600, "queries": [
        {"aggregator": "sum", "metric": "sys.cpu.user", "downsample": "1h-avg",
         "tags": {"host": "web01"}}]});
    let a = post_to(&inline, &post).await;
    let b = post_to(&handed, &post).await;
    assert_eq!((a.status, a.text()), (b.status, b.text()), "{backend}");
    inline.stop().await;
    handed.stop().await;
}

/// `not_key` keeps the series without a tag key (its filter empty), in URL and JSON filters,
/// with `explicitTags` counting only the keys a series must have; the same with the tag index
/// answering and without it.
async fn not_key_filters(backend: &str) {
    for index in ["false", "true"] {
        let mut c = Config::default();
        c.set("tsd.core.auto_create_metrics", "true");
        c.set("tsd.index.enable", index);
        let srv = start_with(backend, c).await;
        let lines = "put m.nk 1356998400 1 host=a dc=x\n\
                     put m.nk 1356998400 2 host=b\n\
                     put m.nk 1356998400 3 host=c dc=y rack=r1\n";
        assert!(common::telnet(srv.addr, lines).await.is_empty());
        srv.state.tsdb.flush().unwrap();
        let hosts = |v: &Value| {
            let mut h: Vec<String> = v
                .as_array()
                .unwrap_or_else(|| panic!("{backend} index={index}: {v}"))
                .iter()
                .map(|s| s["tags"]["host"].as_str().unwrap().to_string())
                .collect();
            h.sort();
            h
        };
        let r = http(
            srv.addr,
            "GET",
            "/api/query?start=1356998000&end=1356999000&m=none:m.nk%7Bdc=not_key()%7D",
            "",
        )
        .await;
        assert_eq!(hosts(&r.json()), ["b"], "{backend} index={index}");
        let query = |filters: Value, explicit: bool| {
            json!({"start": 1356998000, "end": 1356999000, "queries": [{"aggregator": "none",
                "metric": "m.nk", "filters": filters, "explicitTags": explicit}]})
        };
        let r = post_to(
            &srv,
            &query(
                json!([{"type": "not_key", "tagk": "rack", "filter": ""},
                       {"type": "wildcard", "tagk": "dc", "filter": "*"}]),
                false,
            ),
        )
        .await;
        assert_eq!(hosts(&r.json()), ["a"], "{backend} index={index}");
        let r = post_to(
            &srv,
            &query(
                json!([{"type": "wildcard", "tagk": "host", "filter": "*"},
                       {"type": "not_key", "tagk": "dc", "filter": ""}]),
                true,
            ),
        )
        .await;
        assert_eq!(hosts(&r.json()), ["b"], "{backend} index={index}");
        let r = post_to(
            &srv,
            &query(
                json!([{"type": "not_key", "tagk": "dc", "filter": "x"}]),
                false,
            ),
        )
        .await;
        // A filter OpenTSDB's JSON reader fails to build refuses the body.
        assert_eq!(
            (
                r.status,
                r.json()["error"]["message"].clone(),
                r.json()["error"]["details"].clone()
            ),
            (
                400,
                json!("Unable to parse the given JSON"),
                json!("The filter must be empty for the not_key filter")
            ),
            "{backend} index={index}"
        );
        srv.stop().await;
    }
}

/// `tsd.query.skip_unresolved_tagvs`: a literal tag value with no UID fails the query
/// (OpenTSDB's default), or with the key on matches nothing while the other values answer;
/// when no value resolves the answer is empty. Unknown tag keys fail either way.
async fn unresolved_tag_values(backend: &str) {
    for (skip, index) in [("false", "false"), ("true", "false"), ("true", "true")] {
        let mut c = Config::default();
        c.set("tsd.core.auto_create_metrics", "true");
        c.set("tsd.query.skip_unresolved_tagvs", skip);
        c.set("tsd.index.enable", index);
        let srv = start_with(backend, c).await;
        load_fixture(&srv).await;
        srv.state.tsdb.flush().unwrap();
        let what = format!("{backend} skip={skip} index={index}");
        let query = |filter: &str| {
            json!({"start": 1356998400, "end": 1357041600, "queries": [{"aggregator": "sum",
                "metric": "sys.cpu.user", "downsample": "1h-count",
                "filters": [{"type": "literal_or", "tagk": "host", "filter": filter,
                             "groupBy": true}]}]})
        };
        let hosts = |r: &common::Response| {
            assert_eq!(r.status, 200, "{what}: {}", r.text());
            let mut h: Vec<String> = r
                .json()
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["tags"]["host"].as_str().unwrap().to_string())
                .collect();
            h.sort();
            h
        };
        let error = |r: &common::Response| (r.status, r.json()["error"]["message"].clone());
        let partly = post_to(&srv, &query("web01|nope")).await;
        let v1 = http(
            srv.addr,
            "GET",
            "/api/query?start=1356998400&end=1357041600&m=sum:sys.cpu.user%7Bhost=nope%7Cweb02%7D",
            "",
        )
        .await;
        let none = post_to(&srv, &query("nope|nada")).await;
        if skip == "true" {
            assert_eq!(hosts(&partly), ["web01"], "{what}");
            assert_eq!(hosts(&v1), ["web02"], "{what}");
            assert_eq!(none.json(), json!([]), "{what}");
        } else {
            let unknown = (400, json!("No such name for 'tagv': 'nope'"));
            assert_eq!(error(&partly), unknown, "{what}");
            assert_eq!(error(&v1), unknown, "{what}");
            assert_eq!(error(&none), unknown, "{what}");
        }
        // Values that resolve answer alike either way; an unknown tag key is an error.
        assert_eq!(
            hosts(&post_to(&srv, &query("web01|web02")).await),
            ["web01", "web02"],
            "{what}"
        );
        let mut bad_key = query("web01");
        bad_key["queries"][0]["filters"][0]["tagk"] = json!("nokey");
        assert_eq!(
            error(&post_to(&srv, &bad_key).await),
            (400, json!("No such name for 'tagk': 'nokey'")),
            "{what}"
        );
        srv.stop().await;
    }
}

/// `tsd.query.filter.expansion_limit`: a `literal_or` with more values than the limit is
/// not resolved to UIDs (OpenTSDB 2.4.1), so an unknown value among them is no error; one
/// within the limit still fails.
async fn filters_past_the_expansion_limit(backend: &str) {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    c.set("tsd.query.filter.expansion_limit", "2");
    let srv = start_with(backend, c).await;
    load_fixture(&srv).await;
    srv.state.tsdb.flush().unwrap();
    let query = |filter: &str| {
        json!({"start": 1356998400, "end": 1357041600, "queries": [{"aggregator": "sum",
            "metric": "sys.cpu.user", "filters": [{"type": "literal_or", "tagk": "host",
            "filter": filter, "groupBy": true}]}]})
    };
    let r = post_to(&srv, &query("web01|nope|nada")).await;
    assert_eq!(r.status, 200, "{backend}: {}", r.text());
    let hosts: Vec<Value> = r
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["tags"]["host"].clone())
        .collect();
    assert_eq!(hosts, [json!("web01")], "{backend}");
    let r = post_to(&srv, &query("web01|nope")).await;
    assert_eq!(
        (r.status, r.json()["error"]["message"].clone()),
        (400, json!("No such name for 'tagv': 'nope'")),
        "{backend}"
    );
    srv.stop().await;
}

/// The answer is built as bytes: names outside ASCII (metric, tag keys and values, in the
/// group and in what showQuery, showTSUIDs and showStats add) come out as UTF-8 JSON, beside
/// doubles in Java's scientific form.
async fn answers_keep_names_outside_ascii(backend: &str) {
    let srv = start(backend).await;
    let lines = "put net.\u{e9} 1356998400 32118819.683333334 h\u{f4}te=w\u{e9}b01 dc=z\u{fc}rich\n\
                 put net.\u{e9} 1356998460 1.5e-7 h\u{f4}te=w\u{e9}b01 dc=z\u{fc}rich\n";
    assert!(common::telnet(srv.addr, lines).await.is_empty());
    let want_tags = json!({"dc": "z\u{fc}rich", "h\u{f4}te": "w\u{e9}b01"});
    let r = http(
        srv.addr,
        "GET",
        "/api/query?start=1356998400&end=1356999000&m=sum:net.%C3%A9%7Bh%C3%B4te=w%C3%A9b01%7D",
        "",
    )
    .await;
    assert_eq!(r.status, 200, "{backend}: {}", r.text());
    let text = String::from_utf8(r.body.clone()).expect("UTF-8");
    assert_eq!(
        text,
        format!(
            "[{{\"metric\":\"net.\u{e9}\",\"tags\":{want_tags},\"aggregateTags\":[],\
             \"dps\":{{\"1356998400\":3.2118819683333334E7,\"1356998460\":1.5E-7}}}}]"
        ),
        "{backend}"
    );
    let body = json!({
        "start": 1356998400, "end": 1356999000,
        "showQuery": true, "showStats": true, "showSummary": true, "showTSUIDs": true,
        "queries": [{"aggregator": "sum", "metric": "net.\u{e9}",
                     "tags": {"h\u{f4}te": "w\u{e9}b01"}}]
    });
    let r = post(&srv, "/api/query", body).await;
    assert_eq!(r.status, 200, "{backend}: {}", r.text());
    assert!(std::str::from_utf8(&r.body).is_ok(), "{backend}");
    let v = r.json();
    assert_eq!(v[0]["metric"], json!("net.\u{e9}"), "{backend}");
    assert_eq!(v[0]["tags"], want_tags, "{backend}");
    assert_eq!(v[0]["query"]["metric"], json!("net.\u{e9}"), "{backend}");
    assert_eq!(
        v[0]["tsuids"].as_array().map(Vec::len),
        Some(1),
        "{backend}"
    );
    assert_eq!(v[0]["stats"]["emittedDPs"], 2, "{backend}");
    assert_eq!(v[1]["statsSummary"]["datapoints"], 2, "{backend}");
    srv.stop().await;
}

async fn post_to(srv: &TestServer, body: &Value) -> common::Response {
    post(srv, "/api/query", body.clone()).await
}

on_every_backend!(
    answers_keep_names_outside_ascii,
    unresolved_tag_values,
    filters_past_the_expansion_limit,
    not_key_filters,
    inline_answers_as_handed_off,
    last_points_and_queries_from_the_index,
    times_in_opentsdb_forms,
    show_options_and_output_forms,
    time_zones_and_calendar_buckets,
    limits_answer_413,
    queries_hold_points_under_one_budget,
    delete_needs_permission,
    last_points,
    grafana_requests,
);
