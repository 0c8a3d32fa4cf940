#![allow(clippy::unwrap_used, clippy::expect_used)]
//! What every HTTP request goes through, as OpenTSDB 2.4 handles it: routes read from the
//! path (API versions, case, trailing slashes, deeper segments), JSONP on every JSON answer,
//! compressed answers, CORS, and the modes and switches that take endpoints away.

mod common;

use std::io::Read;

use common::{HttpConn, http, start_with};
use hourglass_core::config::Config;
use serde_json::json;

const POINT: &str =
    r#"{"metric":"sys.cpu.user","timestamp":1356998400,"value":1,"tags":{"host":"a"}}"#;

fn config(pairs: &[(&str, &str)]) -> Config {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    for (k, v) in pairs {
        c.set(k, v);
    }
    c
}

#[tokio::test]
async fn routes_are_read_as_opentsdb_reads_them() {
    let srv = start_with("memory", config(&[])).await;
    for path in [
        "/api/put",
        "/api/v1/put",
        "/API/PUT",
        "/api/put/",
        "/api/put/x/y",
    ] {
        let r = http(srv.addr, "POST", path, POINT).await;
        assert_eq!(r.status, 204, "{path}: {}", r.text());
    }
    let r = http(srv.addr, "GET", "/api/v1/version", "").await;
    assert_eq!(r.status, 200);
    assert!(r.json()["version"].is_string());
    // A deeper segment an endpoint does not know is ignored.
    let r = http(
        srv.addr,
        "GET",
        "/api/query/whatever?start=1356998400&m=sum:sys.cpu.user",
        "",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()[0]["metric"], "sys.cpu.user");
    for path in ["/api/v2/put", "/api/v3/nothing"] {
        let r = http(srv.addr, "POST", path, POINT).await;
        assert_eq!(r.status, 501, "{path}");
        assert_eq!(
            r.json()["error"]["message"],
            "Requested API version is greater than the max implemented"
        );
    }
    let r = http(srv.addr, "GET", "/api/v1x/put", "").await;
    assert_eq!(
        (r.status, r.json()["error"]["message"].clone()),
        (400, json!("Invalid API version format supplied"))
    );
    let r = http(srv.addr, "GET", "/api/nothing", "").await;
    assert_eq!(
        r.json(),
        json!({"error":{"code":404,"message":"Endpoint not found"}})
    );
    srv.stop().await;
}

#[tokio::test]
async fn jsonp_wraps_every_json_answer_errors_too() {
    let srv = start_with("memory", config(&[])).await;
    let r = http(srv.addr, "POST", "/api/put", POINT).await;
    assert_eq!(r.status, 204);
    for (path, starts) in [
        ("/api/version?jsonp=cb", "cb({"),
        ("/api/aggregators?jsonp=cb", "cb([\""),
        (
            "/api/suggest?type=metrics&jsonp=cb",
            "cb([\"sys.cpu.user\"])",
        ),
        (
            "/api/query?start=1356998400&m=sum:sys.cpu.user&jsonp=cb",
            "cb([{\"metric\":\"sys.cpu.user\"",
        ),
        ("/api/search/lookup?m=sys.cpu.user&jsonp=cb", "cb({"),
        ("/api/nothing?jsonp=cb", "cb({\"error\":{\"code\":404"),
        ("/api/query?jsonp=cb", "cb({\"error\":{\"code\":400"),
    ] {
        let r = http(srv.addr, "GET", path, "").await;
        let text = r.text();
        assert!(
            text.starts_with(starts) && text.ends_with(')'),
            "{path}: {text}"
        );
        let inner: serde_json::Value = serde_json::from_str(&text[3..text.len() - 1]).unwrap();
        assert!(inner.is_object() || inner.is_array(), "{path}");
    }
    // A put answered with an empty body stays empty.
    let r = http(srv.addr, "POST", "/api/put?jsonp=cb", POINT).await;
    assert_eq!((r.status, r.text()), (204, String::new()));
    srv.stop().await;
}

#[tokio::test]
async fn answers_are_compressed_when_the_client_accepts_it() {
    let srv = start_with("memory", config(&[])).await;
    let mut conn = HttpConn::open(srv.addr).await;
    let r = conn
        .request("GET", "/api/aggregators", "Accept-Encoding: gzip\r\n", b"")
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    let mut text = String::new();
    flate2::read::GzDecoder::new(&r.body[..])
        .read_to_string(&mut text)
        .unwrap();
    let list: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(list.as_array().unwrap().contains(&json!("sum")));
    assert_eq!(r.header("vary"), Some("accept-encoding"));
    // Compressed whole, sent with its length.
    assert_eq!(
        r.header("content-length"),
        Some(r.body.len().to_string().as_str())
    );
    let plain = conn.request("GET", "/api/aggregators", "", b"").await;
    assert_eq!(plain.header("content-encoding"), None);
    // Marked as varying by the client's encoding even when it accepts none.
    assert_eq!(plain.header("vary"), Some("accept-encoding"));
    assert_eq!(plain.json(), list);
    // Deflate (zlib) when that is what the client takes.
    let r = conn
        .request(
            "GET",
            "/api/aggregators",
            "Accept-Encoding: deflate\r\n",
            b"",
        )
        .await;
    assert_eq!(r.header("content-encoding"), Some("deflate"));
    let mut text = String::new();
    flate2::read::ZlibDecoder::new(&r.body[..])
        .read_to_string(&mut text)
        .unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&text).unwrap(),
        list
    );
    // An answer under 32 bytes is sent as it is, unmarked.
    let r = conn
        .request("GET", "/api/health", "Accept-Encoding: gzip\r\n", b"")
        .await;
    assert_eq!(r.text(), r#"{"status":"ok"}"#);
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.header("vary"), None);
    srv.stop().await;
}

/// A large answer (compressed off the connection's thread) reads back as the plain one,
/// in the coding Netty's rule picks from the client's qualities.
#[tokio::test]
async fn large_answers_are_compressed_whole_in_the_coding_chosen() {
    let srv = start_with("memory", config(&[])).await;
    let points: Vec<serde_json::Value> = (0..6000)
        .map(|i| {
            json!({"metric": "sys.big", "timestamp": 1_700_000_000 + i * 7,
                   "value": i * 31 % 1000, "tags": {"host": "a"}})
        })
        .collect();
    let body = serde_json::to_string(&points).unwrap();
    let r = http(srv.addr, "POST", "/api/put", &body).await;
    assert_eq!(r.status, 204, "{}", r.text());
    let path = "/api/query?start=1699999999&m=sum:sys.big%7Bhost=a%7D";
    let mut conn = HttpConn::open(srv.addr).await;
    let plain = conn.request("GET", path, "", b"").await;
    assert_eq!(plain.status, 200);
    assert!(plain.body.len() > 64 * 1024, "{}", plain.body.len());
    let r = conn
        .request(
            "GET",
            path,
            "Accept-Encoding: gzip;q=0.5, deflate;q=0.9\r\n",
            b"",
        )
        .await;
    assert_eq!(r.header("content-encoding"), Some("deflate"));
    assert_eq!(
        r.header("content-length"),
        Some(r.body.len().to_string().as_str())
    );
    assert!(r.body.len() < plain.body.len() / 2);
    let mut text = Vec::new();
    flate2::read::ZlibDecoder::new(&r.body[..])
        .read_to_end(&mut text)
        .unwrap();
    assert_eq!(text, plain.body);
    let r = conn
        .request("GET", path, "Accept-Encoding: *\r\n", b"")
        .await;
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(&r.body[..])
        .read_to_end(&mut text)
        .unwrap();
    assert_eq!(text, plain.body);
    // Refused codings leave the answer as it is.
    let r = conn
        .request("GET", path, "Accept-Encoding: gzip;q=0, br\r\n", b"")
        .await;
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.body, plain.body);
    srv.stop().await;
}

/// `/api/version`'s answer is written once and sent as it is after: the same bytes and
/// headers each time, on one connection and on another.
#[tokio::test]
async fn the_version_answer_is_the_same_every_time() {
    let srv = start_with("memory", config(&[])).await;
    let mut conn = HttpConn::open(srv.addr).await;
    let first = conn.request("GET", "/api/version", "", b"").await;
    assert_eq!(first.status, 200);
    let names: Vec<&str> = first.headers.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["content-type", "content-length", "vary", "date"]);
    assert_eq!(
        first.header("content-type"),
        Some("application/json; charset=UTF-8")
    );
    assert_eq!(
        first.header("content-length"),
        Some(first.body.len().to_string().as_str())
    );
    assert_eq!(first.json()["version"], "2.4.1");
    let again = conn.request("POST", "/api/v1/version", "", b"").await;
    let elsewhere = http(srv.addr, "GET", "/api/version", "").await;
    for r in [&again, &elsewhere] {
        assert_eq!(r.status, 200);
        assert_eq!(r.body, first.body);
        assert_eq!(r.header("content-length"), first.header("content-length"));
    }
    srv.stop().await;
}

#[tokio::test]
async fn cors_as_opentsdb_applies_it() {
    // Off: a preflight is not allowed, and no CORS headers are sent.
    let srv = start_with("memory", config(&[])).await;
    let mut conn = HttpConn::open(srv.addr).await;
    let r = conn
        .request("OPTIONS", "/api/query", "Origin: http://grafana\r\n", b"")
        .await;
    assert_eq!(r.status, 405);
    assert_eq!(
        r.json()["error"]["details"],
        "The HTTP method [OPTIONS] is not permitted"
    );
    let r = conn
        .request("GET", "/api/version", "Origin: http://grafana\r\n", b"")
        .await;
    assert_eq!(r.header("access-control-allow-origin"), None);
    srv.stop().await;

    let srv = start_with(
        "memory",
        config(&[(
            "tsd.http.request.cors_domains",
            "http://grafana:3000, https://other",
        )]),
    )
    .await;
    let mut conn = HttpConn::open(srv.addr).await;
    let r = conn
        .request(
            "OPTIONS",
            "/api/query",
            "Origin: http://GRAFANA:3000\r\n",
            b"",
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("http://GRAFANA:3000")
    );
    assert_eq!(
        r.header("access-control-allow-methods"),
        Some("GET, POST, PUT, DELETE")
    );
    assert!(
        r.header("access-control-allow-headers")
            .unwrap()
            .contains("Content-Type")
    );
    let r = conn
        .request("GET", "/api/version", "Origin: https://other\r\n", b"")
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://other")
    );
    assert!(r.json()["version"].is_string());
    // An origin not listed is answered with an error (status 200, as OpenTSDB does).
    let r = conn
        .request("GET", "/api/version", "Origin: http://evil\r\n", b"")
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json(),
        json!({"error":{"code":200,"message":"CORS domain not allowed","details":"The domain [http://evil] is not permitted access"}})
    );
    srv.stop().await;
}

#[tokio::test]
async fn modes_and_switches_take_endpoints_away() {
    let srv = start_with("memory", config(&[("tsd.mode", "wo")])).await;
    assert_eq!(http(srv.addr, "POST", "/api/put", POINT).await.status, 204);
    for path in [
        "/api/query?start=1h-ago&m=sum:x",
        "/api/suggest?type=metrics",
        "/",
        "/suggest?type=metrics",
    ] {
        assert_eq!(http(srv.addr, "GET", path, "").await.status, 404, "{path}");
    }
    assert_eq!(http(srv.addr, "GET", "/api/version", "").await.status, 200);
    srv.stop().await;

    let srv = start_with("memory", config(&[("tsd.mode", "ro")])).await;
    for path in ["/api/put", "/api/annotation", "/api/uid/assign?metric=x"] {
        let r = http(srv.addr, "POST", path, POINT).await;
        assert_eq!(r.status, 404, "{path}");
    }
    assert_eq!(
        http(srv.addr, "GET", "/api/suggest?type=metrics", "")
            .await
            .status,
        200
    );
    srv.stop().await;

    let srv = start_with("memory", config(&[("tsd.core.enable_api", "false")])).await;
    assert_eq!(http(srv.addr, "GET", "/api/version", "").await.status, 404);
    assert_eq!(http(srv.addr, "GET", "/", "").await.status, 200);
    srv.stop().await;

    let srv = start_with("memory", config(&[("tsd.core.enable_ui", "false")])).await;
    assert_eq!(http(srv.addr, "GET", "/api/version", "").await.status, 200);
    assert_eq!(http(srv.addr, "GET", "/", "").await.status, 404);
    srv.stop().await;
}

#[tokio::test]
async fn a_bad_cors_setting_refuses_to_start() {
    let c = config(&[("tsd.http.request.cors_domains", "*, http://x")]);
    assert_eq!(
        hourglass_server::ServerSettings::from_config(&c)
            .unwrap_err()
            .to_string(),
        "tsd.http.request.cors_domains must be a public resource (*) or a list of specific domains, you cannot mix both."
    );
}

#[tokio::test]
async fn histogram_and_rollup_requests_are_refused_not_answered_from_raw_data() {
    let srv = start_with("memory", config(&[])).await;
    assert_eq!(http(srv.addr, "POST", "/api/put", POINT).await.status, 204);
    let histograms = "Histogram storage has not been enabled. Check the 'tsd.core.histograms.config' configuration.";
    let rollups = "No rollup or aggregations were configured";
    for (path, want) in [
        (
            "/api/query?start=1356998400&m=sum:percentiles[50,99]:sys.cpu.user",
            histograms,
        ),
        (
            "/api/query?start=1356998400&m=sum:show-histogram-buckets:sys.cpu.user",
            histograms,
        ),
        (
            "/api/query?start=1356998400&m=sum:pre-agg:sys.cpu.user",
            rollups,
        ),
        (
            "/api/query?start=1356998400&m=sum:rollup_nofallback:sys.cpu.user",
            rollups,
        ),
    ] {
        let r = http(srv.addr, "GET", path, "").await;
        assert_eq!(
            (r.status, r.json()["error"]["message"].clone()),
            (400, json!(want)),
            "{path}"
        );
    }
    // Rollup usages that fall back to raw data are answered from it, as OpenTSDB answers
    // them when no rollup is configured.
    let r = http(
        srv.addr,
        "GET",
        "/api/query?start=1356998400&m=sum:rollup_fallback_raw:sys.cpu.user",
        "",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    for (sub, want) in [
        (json!({"percentiles": [50, 99]}), histograms),
        (json!({"showHistogramBuckets": true}), histograms),
        (json!({"preAggregate": true}), rollups),
        (json!({"rollupUsage": "ROLLUP_NOFALLBACK"}), rollups),
        (
            json!({"rollupUsage": "SOMETIMES"}),
            "Unknown rollup usage: SOMETIMES",
        ),
    ] {
        let mut q = json!({"aggregator": "sum", "metric": "sys.cpu.user"});
        for (k, v) in sub.as_object().unwrap() {
            q[k] = v.clone();
        }
        let body = json!({"start": 1356998400, "queries": [q]}).to_string();
        let r = http(srv.addr, "POST", "/api/query", &body).await;
        assert_eq!(
            (r.status, r.json()["error"]["message"].clone()),
            (400, json!(want)),
            "{sub}"
        );
    }
    let ok = json!({"start": 1356998400, "queries": [
        {"aggregator": "sum", "metric": "sys.cpu.user", "percentiles": [], "rollupUsage": "ROLLUP_RAW"}]});
    let r = http(srv.addr, "POST", "/api/query", &ok.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());

    // Rollup points: checked, then refused point by point.
    let body = json!([
        {"metric":"m","timestamp":1356998400,"value":1,"tags":{"h":"a"},"interval":"1h","aggregator":"sum"},
        {"metric":"m","timestamp":1356998400,"value":1,"tags":{"h":"a"},"aggregator":"sum"},
        {"metric":"m","timestamp":1356998400,"value":1,"tags":{"h":"a"},"groupByAggregator":"sum"}
    ])
    .to_string();
    let r = http(srv.addr, "POST", "/api/rollup?details", &body).await;
    assert_eq!(r.status, 400);
    let errors: Vec<String> = r.json()["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["error"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(errors, [rollups, "Missing interval", rollups]);
    // Sent to /api/put, a rollup point is refused too, not stored as raw data.
    let r = http(
        srv.addr,
        "POST",
        "/api/put?details",
        r#"{"metric":"m","timestamp":1356998400,"value":1,"tags":{"h":"a"},"interval":"1h","aggregator":"sum"}"#,
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["errors"][0]["error"],
        "a point with interval, aggregator or groupByAggregator is a rollup point: send it to /api/rollup"
    );
    assert!(srv.points("m").is_empty());
    let r = http(srv.addr, "POST", "/api/histogram", "[]").await;
    assert_eq!(
        (r.status, r.json()["error"]["message"].clone()),
        (503, json!(histograms))
    );
    srv.stop().await;
}

/// The value of one statistic from `/api/stats`, by metric and its own tags.
fn stat(list: &serde_json::Value, metric: &str, tags: &[(&str, &str)]) -> u64 {
    list.as_array()
        .unwrap()
        .iter()
        .find(|s| s["metric"] == metric && tags.iter().all(|(k, v)| s["tags"][*k] == *v))
        .unwrap_or_else(|| panic!("no {metric} {tags:?}"))["value"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn stats_in_opentsdb_names_with_the_sub_endpoints() {
    let srv = start_with("memory", config(&[])).await;
    assert_eq!(http(srv.addr, "POST", "/api/put", POINT).await.status, 204);
    assert!(
        common::telnet(
            srv.addr,
            "put sys.cpu.user 1356998401 2 host=a\nput sys.cpu.user 1356998402 3 host=a\n"
        )
        .await
        .is_empty()
    );
    let q = "/api/query?start=1356998400&m=sum:sys.cpu.user";
    for _ in 0..2 {
        assert_eq!(http(srv.addr, "GET", q, "").await.status, 200);
    }
    assert_eq!(
        http(srv.addr, "GET", "/api/query?start=1356998400", "")
            .await
            .status,
        400
    );
    let list = http(srv.addr, "GET", "/api/stats", "").await.json();
    // Every request so far: the put, three queries, this one.
    assert_eq!(stat(&list, "tsd.rpc.received", &[("type", "http")]), 5);
    // HTTP puts only, as OpenTSDB counts them; telnet lines are type=telnet.
    assert_eq!(stat(&list, "tsd.rpc.received", &[("type", "put")]), 1);
    // The two puts and the test client's `version` fence.
    assert_eq!(stat(&list, "tsd.rpc.received", &[("type", "telnet")]), 3);
    assert_eq!(stat(&list, "tsd.http.query.success", &[]), 2);
    assert_eq!(stat(&list, "tsd.http.query.invalid_requests", &[]), 1);
    assert_eq!(stat(&list, "tsd.uid.ids-used", &[("kind", "metrics")]), 1);
    assert_eq!(
        stat(&list, "tsd.uid.ids-available", &[("kind", "metrics")]),
        (1 << 24) - 2
    );
    assert_eq!(stat(&list, "tsd.uid.ids-used", &[("kind", "tagk")]), 1);
    assert!(stat(&list, "tsd.uid.cache-hit", &[("kind", "metrics")]) > 0);
    assert!(stat(&list, "tsd.http.latency_95pct", &[("type", "all")]) >= 2);
    assert!(stat(&list, "tsd.jvm.ramused", &[]) > 0);
    // UID assignments: one write a new name (MAXID and both mappings, RFC 0001), where
    // the store takes them in one write as this one does; no increment.
    assert_eq!(
        stat(&list, "tsd.hbase.rpcs", &[("type", "checkAndMutate")]),
        3
    );
    assert_eq!(stat(&list, "tsd.hbase.rpcs", &[("type", "increment")]), 0);
    assert_eq!(
        stat(
            &list,
            "tsd.datapoints.added",
            &[("type", "all"), ("class", "TSDB")]
        ),
        3
    );
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .all(|s| s["tags"]["host"].is_string())
    );

    let queries = http(srv.addr, "GET", "/api/stats/query", "").await.json();
    let completed = queries["completed"].as_array().unwrap();
    let ours = completed
        .iter()
        .find(|c| c["query"] == "start=1356998400&m=sum:sys.cpu.user")
        .unwrap();
    assert_eq!(ours["executed"], 2);
    assert_eq!(ours["httpResponse"]["code"], 200);
    assert_eq!(queries["running"], json!([]));

    let jvm = http(srv.addr, "GET", "/api/stats/jvm", "").await.json();
    assert!(jvm["memory"]["heapMemoryUsage"]["used"].as_u64().unwrap() > 0);
    assert!(jvm["runtime"]["uptime"].is_u64());
    let threads = http(srv.addr, "GET", "/api/stats/threads", "").await.json();
    assert!(threads.as_array().unwrap().len() > 1);
    assert!(threads[0]["name"].is_string() && threads[0]["state"].is_string());
    let clients = http(srv.addr, "GET", "/api/stats/region_clients", "")
        .await
        .json();
    assert_eq!(clients[0]["endpoint"], "memory");
    assert!(clients[0]["rpcsSent"].as_u64().unwrap() > 0);
    srv.stop().await;
}

/// A name OpenTSDB wrote in ISO-8859-1 (`café` is `63 61 66 E9`) is the same name here: no
/// second UID, and it reads back as written.
async fn latin1_names_are_shared_with_opentsdb(backend: &str) {
    use hourglass_storage::Mutation;
    let store = common::store_for(backend);
    let srv = common::start_on(std::sync::Arc::clone(&store), config(&[])).await;
    // As a Java TSD assigns metric UID 7 to `café`: forward, reverse and MAXID.
    let uid = [0u8, 0, 7];
    store
        .mutate_row(
            "tsdb-uid",
            b"caf\xE9",
            &[Mutation::set("id", b"metrics".to_vec(), uid.to_vec())],
        )
        .unwrap();
    store
        .mutate_row(
            "tsdb-uid",
            &uid,
            &[Mutation::set(
                "name",
                b"metrics".to_vec(),
                b"caf\xE9".to_vec(),
            )],
        )
        .unwrap();
    store
        .increment("tsdb-uid", &[0], "id", b"metrics", 7)
        .unwrap();
    let point = r#"{"metric":"café","timestamp":1356998400,"value":1,"tags":{"host":"a"}}"#;
    let r = http(srv.addr, "POST", "/api/put", point).await;
    assert_eq!(r.status, 204, "{}", r.text());
    let r = http(srv.addr, "GET", "/api/uid/assign?metric=caf%C3%A9", "").await;
    assert_eq!(
        r.json()["metric_errors"]["café"],
        "Name already exists with UID: 000007",
        "{}",
        r.text()
    );
    let r = http(srv.addr, "GET", "/api/suggest?type=metrics&q=caf", "").await;
    assert_eq!(r.json(), json!(["café"]));
    let r = http(
        srv.addr,
        "GET",
        "/api/query?start=1356998400&m=sum:caf%C3%A9",
        "",
    )
    .await;
    assert_eq!(r.json()[0]["metric"], "café", "{}", r.text());
    // A name beyond ISO-8859-1 gets its own UID, stored as UTF-8.
    let point = r#"{"metric":"温度","timestamp":1356998400,"value":1,"tags":{"host":"a"}}"#;
    assert_eq!(http(srv.addr, "POST", "/api/put", point).await.status, 204);
    let r = http(srv.addr, "GET", "/api/suggest?type=metrics&q=%E6%B8%A9", "").await;
    assert_eq!(r.json(), json!(["温度"]));
    let r = http(
        srv.addr,
        "GET",
        "/api/query?start=1356998400&m=sum:%E6%B8%A9%E5%BA%A6",
        "",
    )
    .await;
    assert_eq!(r.json()[0]["metric"], "温度", "{}", r.text());
    srv.stop().await;
}

#[tokio::test]
async fn config_lists_defaults_and_masks_passwords() {
    let srv = start_with(
        "memory",
        config(&[("tsd.auth.db.password", "hunter2"), ("tsd.mode", "ro")]),
    )
    .await;
    let cfg = http(srv.addr, "GET", "/api/config", "").await.json();
    assert_eq!(cfg["tsd.auth.db.password"], "********");
    assert_eq!(cfg["tsd.mode"], "ro", "set over the default");
    assert_eq!(cfg["tsd.core.auto_create_tagks"], "true", "a default");
    let keys: Vec<&String> = cfg.as_object().unwrap().keys().collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "in key order");
    srv.stop().await;
}

fn content_type(r: &common::Response) -> &str {
    r.headers
        .iter()
        .find(|(k, _)| k == "content-type")
        .map_or("", |(_, v)| v.as_str())
}

#[tokio::test]
async fn opentsdbs_older_paths_answer_as_it_does() {
    let srv = start_with("memory", config(&[("tsd.no_diediedie", "false")])).await;
    assert_eq!(http(srv.addr, "POST", "/api/put", POINT).await.status, 204);
    let aggs = http(srv.addr, "GET", "/aggregators", "").await;
    // Typed as OpenTSDB types the answers of these paths: by their first byte.
    assert_eq!(content_type(&aggs), "application/json");
    assert!(aggs.json().as_array().unwrap().contains(&json!("sum")));
    let v = http(srv.addr, "GET", "/version", "").await;
    assert_eq!(content_type(&v), "text/plain");
    assert!(
        v.text().starts_with("hourglass ") && v.text().contains("\nBuilt on "),
        "{}",
        v.text()
    );
    let v = http(srv.addr, "GET", "/version?json", "").await;
    assert_eq!(content_type(&v), "application/json");
    assert_eq!(v.json()["version"], "2.4.1");
    let stats = http(srv.addr, "GET", "/stats", "").await;
    assert_eq!(content_type(&stats), "text/plain");
    let stats = stats.text();
    assert!(
        stats
            .lines()
            .any(|l| l.starts_with("tsd.rpc.received ") && l.contains("type=http"))
    );
    let stats = http(srv.addr, "GET", "/stats?json", "").await.json();
    assert!(stats[0].as_str().unwrap().starts_with("tsd."));
    let s = http(srv.addr, "GET", "/suggest?type=metrics&q=sys", "").await;
    assert_eq!(content_type(&s), "application/json");
    assert_eq!(s.json(), json!(["sys.cpu.user"]));
    // Errors on these paths are OpenTSDB's HTML pages, or {"err": ...} with json.
    let bad = http(srv.addr, "GET", "/suggest?type=nope", "").await;
    assert_eq!(bad.status, 400);
    assert!(
        bad.text()
            .contains("Sorry but your request was rejected as being invalid.")
    );
    assert_eq!(content_type(&bad), "text/html; charset=UTF-8");
    // OpenTSDB's page (`HttpQuery.makePage`), the reason as OpenTSDB writes it.
    assert!(
        bad.text().starts_with(
            "<!DOCTYPE html><html><head><meta http-equiv=content-type content=\"text/html;charset=utf-8\">\
             <title>Bad Request</title>\n<style><!--\nbody{font-family:arial,sans-serif;margin-left:2em}"
        ),
        "{}",
        bad.text()
    );
    assert!(
        bad.text()
            .contains("<font color=#507e9b><b>Looks like it's your fault this time</b></td></tr>"),
        "{}",
        bad.text()
    );
    assert!(
        bad.text().contains(
            "The reason provided was:<blockquote>Invalid 'type' parameter:nope</blockquote></blockquote>\
             <table width=100% cellpadding=0 cellspacing=0>"
        ),
        "{}",
        bad.text()
    );
    let bad = http(srv.addr, "GET", "/suggest?type=nope&json", "").await;
    assert_eq!(content_type(&bad), "application/json");
    assert_eq!(bad.json(), json!({"err": "Invalid 'type' parameter:nope"}));
    // A method these paths do not take: `Method not allowed`, a 400 as all their errors.
    for path in [
        "/aggregators",
        "/version",
        "/stats",
        "/suggest?type=metrics",
    ] {
        let r = http(
            srv.addr,
            "PUT",
            &format!("{path}{}json", if path.contains('?') { "&" } else { "?" }),
            "",
        )
        .await;
        assert_eq!(r.status, 400, "{path}");
        assert_eq!(r.json(), json!({"err": "Method not allowed"}), "{path}");
    }
    let missing = http(srv.addr, "GET", "/no/such/page", "").await;
    assert_eq!(missing.status, 404);
    assert!(missing.text().contains("<title>Page Not Found</title>"));
    // Routed by the first segment, as OpenTSDB routes them: deeper segments reach them too.
    for path in [
        "/aggregators/x",
        "/stats/x/y",
        "/logs/x",
        "/suggest/x?type=metrics",
        "/q/x?start=1356998400&m=sum:sys.cpu.user&json",
    ] {
        let r = http(srv.addr, "GET", path, "").await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
    }
    // `/dropcaches` is an API path only in 2.4.1.
    assert_eq!(http(srv.addr, "GET", "/dropcaches", "").await.status, 404);
    assert_eq!(
        http(srv.addr, "GET", "/no/such/page?json", "").await.json(),
        json!({"err": "Page Not Found"})
    );
    let logs = http(srv.addr, "GET", "/logs?level=debug", "").await;
    assert_eq!(logs.status, 400);
    // `json` is read first (a `level` beside it changes nothing), for any method.
    let logs = http(srv.addr, "DELETE", "/logs?json&level=debug", "").await;
    assert_eq!(logs.status, 200);
    assert_eq!(content_type(&logs), "application/json");
    assert!(logs.json().is_array());
    assert_eq!(
        http(srv.addr, "GET", "/logs?logger=x", "").await.status,
        200
    );
    let bye = http(srv.addr, "GET", "/diediedie", "").await;
    assert_eq!(bye.status, 200);
    assert!(bye.text().contains("Cleaning up and exiting now."));
    srv.stop().await;

    // Without tsd.no_diediedie = false there is no such page.
    let srv = start_with("memory", config(&[])).await;
    assert_eq!(http(srv.addr, "GET", "/diediedie", "").await.status, 404);
    srv.stop().await;
}

/// `tsd.storage.enable_appends`: points written over HTTP and telnet land in the append
/// column and are answered by queries.
async fn appends_end_to_end(backend: &str) {
    let store = common::store_for(backend);
    let srv = common::start_on(
        std::sync::Arc::clone(&store),
        config(&[("tsd.storage.enable_appends", "true")]),
    )
    .await;
    assert_eq!(http(srv.addr, "POST", "/api/put", POINT).await.status, 204);
    assert!(
        common::telnet(srv.addr, "put sys.cpu.user 1356998410 2 host=a\n")
            .await
            .is_empty()
    );
    srv.state.tsdb.flush().unwrap();
    let rows: Vec<_> = store
        .scan("tsdb", &hourglass_storage::ScanRequest::default())
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows.len(), 1, "{backend}");
    assert_eq!(rows[0].cells.len(), 1, "{backend}");
    assert_eq!(rows[0].cells[0].qualifier, [0x05, 0x00, 0x00], "{backend}");
    let r = http(
        srv.addr,
        "GET",
        "/api/query?start=1356998400&m=sum:sys.cpu.user",
        "",
    )
    .await;
    assert_eq!(
        r.json()[0]["dps"],
        json!({"1356998400": 1, "1356998410": 2}),
        "{backend}"
    );
    srv.stop().await;
}

on_every_backend!(latin1_names_are_shared_with_opentsdb, appends_end_to_end);

fn keys(v: &serde_json::Value) -> Vec<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

/// `/api/version` (and `/version?json`) is OpenTSDB's map: the build time as Unix seconds in
/// a string (its `BuildData.timestamp`), keys in the order its hash map gives them;
/// `/api/dropcaches` likewise.
#[tokio::test]
async fn version_and_dropcaches_answer_in_opentsdbs_shape() {
    let srv = start_with("memory", config(&[])).await;
    for path in ["/api/version", "/version?json"] {
        let v = http(srv.addr, "GET", path, "").await.json();
        assert_eq!(
            keys(&v),
            [
                "short_revision",
                "repo",
                "host",
                "version",
                "full_revision",
                "repo_status",
                "user",
                "branch",
                "timestamp",
                "hourglass"
            ],
            "{path}"
        );
        let stamp = v["timestamp"].as_str().unwrap();
        assert!(stamp.parse::<i64>().is_ok(), "{path}: {stamp}");
        assert_eq!(v["version"], "2.4.1");
    }
    let r = http(srv.addr, "DELETE", "/api/dropcaches", "").await;
    assert_eq!(r.text(), r#"{"message":"Caches dropped","status":"200"}"#);
    srv.stop().await;
}

/// Query strings are decoded as OpenTSDB's HTTP layer decodes them: `;` separates parameters
/// as `&` does, `%%` is `%`, and a bad escape is refused in its words before anything else.
#[tokio::test]
async fn query_strings_are_decoded_as_opentsdb_decodes_them() {
    let srv = start_with("memory", config(&[])).await;
    let r = http(
        srv.addr,
        "GET",
        "/api/uid/assign?metric=sys.a;tagk=host",
        "",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json(),
        json!({"metric": {"sys.a": "000001"}, "tagk": {"host": "000001"}})
    );
    let r = http(
        srv.addr,
        "GET",
        "/api/uid/uidmeta?uid=000001;type=metric",
        "",
    )
    .await;
    assert_eq!((r.status, r.json()["name"].clone()), (200, json!("sys.a")));
    let r = http(srv.addr, "GET", "/api/uid/assign?metric=a%%b+c", "").await;
    assert_eq!(
        r.json()["metric_errors"]["a%b c"],
        "Invalid metric (\"a%b c\"): illegal character: %"
    );
    for (query, why) in [
        ("x=%zz", "invalid escape sequence `%zz' at index 0 of: %zz"),
        (
            "x=1&y=ab%g1",
            "invalid escape sequence `%g1' at index 2 of: ab%g1",
        ),
        ("x=%", "unterminated escape sequence at end of string: %"),
        ("x=%4", "partial escape sequence at end of string: %4"),
    ] {
        let r = http(srv.addr, "GET", &format!("/api/version?{query}"), "").await;
        assert_eq!(
            (r.status, r.json()),
            (
                400,
                json!({"error": {"code": 400, "message": format!("Bad query string: {why}")}})
            ),
            "{query}"
        );
    }
    // The older paths refuse it with their page.
    let r = http(srv.addr, "GET", "/aggregators?x=%zz", "").await;
    assert_eq!(r.status, 400);
    assert!(
        r.text().contains("Bad query string: invalid escape"),
        "{}",
        r.text()
    );
    srv.stop().await;
}

/// `serializer` picks how a request is read and answered; `json` is the only one, any other
/// is refused before the endpoint (even one that does not exist) as OpenTSDB refuses it.
#[tokio::test]
async fn serializers_other_than_json_are_refused() {
    let srv = start_with("memory", config(&[])).await;
    let r = http(srv.addr, "GET", "/api/version?serializer=json", "").await;
    assert_eq!(r.status, 200);
    for (path, name) in [
        ("/api/version?serializer=xml", "xml"),
        ("/api/nothing?serializer=", ""),
    ] {
        let r = http(srv.addr, "GET", path, "").await;
        assert_eq!(
            (r.status, r.json()),
            (
                400,
                json!({"error": {"code": 400, "message": "Requested serializer was not found",
                    "details": format!("Could not find a serializer with the name: {name}")}})
            ),
            "{path}"
        );
    }
    // OpenTSDB 2.4.1 has a class for listing serializers but does not route to it.
    let r = http(srv.addr, "GET", "/api/serializers", "").await;
    assert_eq!(
        (r.status, r.json()),
        (
            404,
            json!({"error": {"code": 404, "message": "Endpoint not found"}})
        )
    );
    let r = http(srv.addr, "GET", "/api/version?serializer=xml&jsonp=cb", "").await;
    assert!(r.text().starts_with("cb({\"error\""), "{}", r.text());
    let r = http(srv.addr, "GET", "/aggregators?serializer=xml&json", "").await;
    assert_eq!(
        (r.status, r.json()),
        (400, json!({"err": "Requested serializer was not found"}))
    );
    srv.stop().await;
}

/// `/api/stats/jvm`, `/threads` and `/region_clients` keep OpenTSDB's keys in the order its
/// hash maps give them (Hourglass's own figures last).
#[tokio::test]
async fn stats_sub_endpoints_keep_opentsdbs_key_order() {
    let srv = start_with("memory", config(&[])).await;
    let jvm = http(srv.addr, "GET", "/api/stats/jvm", "").await.json();
    assert_eq!(keys(&jvm), ["memory", "os", "runtime", "pools", "gc"]);
    assert_eq!(
        keys(&jvm["runtime"]),
        ["vmName", "vmVersion", "startTime", "vmVendor", "uptime"]
    );
    assert_eq!(
        keys(&jvm["memory"])[..3],
        [
            "nonHeapMemoryUsage",
            "objectsPendingFinalization",
            "heapMemoryUsage"
        ]
    );
    assert_eq!(
        keys(&jvm["memory"]["heapMemoryUsage"]),
        ["init", "used", "committed", "max"]
    );
    let threads = http(srv.addr, "GET", "/api/stats/threads", "").await.json();
    assert_eq!(
        keys(&threads[0]),
        [
            "threadID",
            "stack",
            "name",
            "state",
            "interrupted",
            "priority"
        ]
    );
    let regions = http(srv.addr, "GET", "/api/stats/region_clients", "")
        .await
        .json();
    assert_eq!(
        keys(&regions[0]),
        [
            "pendingBreached",
            "writesBlocked",
            "inflightBreached",
            "dead",
            "rpcsInFlight",
            "rpcsSent",
            "rpcResponsesUnknown",
            "pendingBatchedRPCs",
            "endpoint",
            "rpcResponsesTimedout",
            "rpcid",
            "rpcsTimedout",
            "pendingRPCs"
        ]
    );
    srv.stop().await;
}
