#![allow(clippy::unwrap_used, clippy::expect_used)]
mod common;

use std::io::Write;

use common::{HttpConn, http, start, start_with};
use hourglass_core::config::Config;
use hourglass_core::value::Value;
use serde_json::json;

const GOOD: &str = r#"{"metric":"sys.cpu.nice","timestamp":1356998400,"value":18,"tags":{"host":"web01","dc":"lga"}}"#;

async fn put_single_and_array_answer_204_and_store(backend: &str) {
    let srv = start(backend).await;
    let r = http(srv.addr, "POST", "/api/put", GOOD).await;
    assert_eq!(r.status, 204, "{}", r.text());
    assert!(r.body.is_empty());
    let arr = r#"[{"metric":"sys.cpu.nice","timestamp":1356998401,"value":"19.5","tags":{"host":"web01","dc":"lga"}},
                  {"metric":"sys.cpu.nice","timestamp":1356998402000,"value":-3,"tags":{"host":"web01","dc":"lga"}}]"#;
    assert_eq!(http(srv.addr, "POST", "/api/put", arr).await.status, 204);
    let values: Vec<(i64, Value)> = srv
        .points("sys.cpu.nice")
        .into_iter()
        .map(|p| (p.0, p.1))
        .collect();
    assert_eq!(
        values,
        vec![
            (1356998400000, Value::Int(18)),
            (1356998401000, Value::Float(19.5)),
            (1356998402000, Value::Int(-3))
        ]
    );
    srv.stop().await;
}

async fn put_errors_summary_and_details(backend: &str) {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "false");
    let srv = start_with(backend, c).await;
    srv.state
        .tsdb
        .uids()
        .get_or_create_id(hourglass_core::uid::UidKind::Metric, "sys.cpu.nice")
        .unwrap();
    let body = r#"[
        {"metric":"sys.cpu.nice","timestamp":1356998400,"value":1,"tags":{"host":"a"}},
        {"metric":"nope","timestamp":1356998400,"value":1,"tags":{"host":"a"}},
        {"metric":"sys.cpu.nice","timestamp":1356998400,"value":"x1","tags":{"host":"a"}},
        {"metric":"sys.cpu.nice","timestamp":1356998400,"value":NaN,"tags":{"host":"a"}},
        {"metric":"","timestamp":1356998400,"value":1,"tags":{"host":"a"}},
        {"metric":"sys.cpu.nice","timestamp":0,"value":1,"tags":{"host":"a"}},
        {"metric":"sys.cpu.nice","timestamp":1356998400,"value":"","tags":{"host":"a"}},
        {"metric":"sys.cpu.nice","timestamp":1356998400,"value":1,"tags":{}},
        {"metric":"sys.cpu.nice","timestamp":1356998400,"value":1,"tags":{"h o":"a"}},
        {"metric":"sys.cpu.nice","timestamp":1356998401,"value":2,"tags":{"host":"a"}}
    ]"#;
    let plain = http(srv.addr, "POST", "/api/put", body).await;
    assert_eq!(plain.status, 400);
    assert_eq!(
        plain.json(),
        json!({"error":{"code":400,"message":"One or more data points had errors","details":"Please see the TSD logs or append \"details\" to the put request"}})
    );
    let summary = http(srv.addr, "POST", "/api/put?summary", body).await;
    assert_eq!(summary.status, 400);
    assert_eq!(summary.text(), r#"{"success":2,"failed":8}"#);
    let details = http(srv.addr, "POST", "/api/put?details", body).await;
    assert_eq!(details.status, 400);
    let d = details.json();
    assert_eq!(d["success"], 2);
    assert_eq!(d["failed"], 8);
    let errors: Vec<&str> = d["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["error"].as_str().unwrap())
        .collect();
    assert_eq!(
        errors,
        vec![
            "Unknown metric",
            "Unable to parse value to a number",
            // A bare NaN token is read (as Jackson reads it) and refused as a number.
            "Unable to parse value to a number",
            "Metric name was empty",
            "Invalid timestamp",
            "Empty value",
            "Missing tags",
            "Invalid tag name with value [a] (\"h o\"): illegal character:  ",
        ]
    );
    assert_eq!(
        d["errors"][0]["datapoint"],
        json!({"metric":"nope","timestamp":1356998400,"value":"1","tags":{"host":"a"}})
    );
    let ok_summary = http(
        srv.addr,
        "POST",
        "/api/put?summary",
        r#"{"metric":"sys.cpu.nice","timestamp":1356998402,"value":3,"tags":{"host":"a"}}"#,
    )
    .await;
    assert_eq!(
        (ok_summary.status, ok_summary.text()),
        (200, r#"{"success":1,"failed":0}"#.to_string())
    );
    assert_eq!(
        srv.points("sys.cpu.nice").len(),
        3,
        "good points beside bad ones are stored"
    );
    srv.stop().await;
}

/// The value of one statistic from `/api/stats`, by metric and its `type` tag.
async fn put_stat(addr: std::net::SocketAddr, metric: &str, kind: &str) -> u64 {
    let list = http(addr, "GET", "/api/stats", "").await.json();
    list.as_array()
        .unwrap()
        .iter()
        .find(|s| s["metric"] == metric && s["tags"]["type"] == kind)
        .unwrap_or_else(|| panic!("no {metric} type={kind}"))["value"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// `?details` echoes each refused point as Jackson serializes OpenTSDB's `IncomingDataPoint`
/// (fields in declaration order, the timestamp a `long` that is 0 when missing, the tags a
/// `HashMap` in Java's order, `tsuid` when sent); a `null` in the array and a `null` tag value
/// are refused alone; the request and error counters count as `PutDataPointRpc` does.
async fn put_details_echo_points_as_opentsdb_serializes_them(backend: &str) {
    let srv = start(backend).await;
    let body = r#"[
        null,
        {"metric":"m.echo","value":1,"tags":{"host":"a"}},
        {"metric":"m.echo","timestamp":1356998400,"value":"x","tags":{"zone":"z","host":"h","dc":"d","app":"p"},"tsuid":"0001"},
        {"metric":"m.echo","timestamp":1356998400,"value":2,"tags":{"host":null}},
        {"metric":"m.echo","timestamp":1356998400,"value":3,"tags":{"host":"a"}}
    ]"#;
    let r = http(srv.addr, "POST", "/api/put?details", body).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(
        r.text(),
        concat!(
            r#"{"success":1,"failed":4,"errors":["#,
            r#"{"datapoint":null,"error":"Unexpected null datapoint encountered in set."},"#,
            r#"{"datapoint":{"metric":"m.echo","timestamp":0,"value":"1","tags":{"host":"a"}},"error":"Invalid timestamp"},"#,
            r#"{"datapoint":{"metric":"m.echo","timestamp":1356998400,"value":"x","tags":{"app":"p","zone":"z","host":"h","dc":"d"},"tsuid":"0001"},"error":"Unable to parse value to a number"},"#,
            r#"{"datapoint":{"metric":"m.echo","timestamp":1356998400,"value":"2","tags":{"host":null}},"error":"Invalid tag value with key [host]: null"}"#,
            "]}"
        )
    );
    assert_eq!(srv.points("m.echo").len(), 1, "the good point is stored");
    // Tags are checked in Java's `HashMap` order (`host` before `dc`): the first bad one in
    // that order is reported.
    let r = http(
        srv.addr,
        "POST",
        "/api/put?details",
        r#"{"metric":"m.echo","timestamp":1356998400,"value":1,"tags":{"dc":"a b","host":"c d"}}"#,
    )
    .await;
    assert_eq!(
        r.json()["errors"][0]["error"],
        "Invalid tag value with key [host] (\"c d\"): illegal character:  "
    );
    // A request refused whole counts as a request, and an unreadable body as an illegal
    // argument, beside the four refused points (one value unreadable).
    assert_eq!(http(srv.addr, "GET", "/api/put", "").await.status, 405);
    assert_eq!(http(srv.addr, "POST", "/api/put", "[1,").await.status, 400);
    assert_eq!(put_stat(srv.addr, "tsd.rpc.received", "put").await, 4);
    assert_eq!(
        put_stat(srv.addr, "tsd.rpc.errors", "illegal_arguments").await,
        5
    );
    assert_eq!(
        put_stat(srv.addr, "tsd.rpc.errors", "invalid_values").await,
        1
    );
    // `sync_timeout` is a Java int: 0 or less is no timeout, anything else is
    // `Integer.parseInt`'s error (read after the body).
    let one = r#"{"metric":"m.echo","timestamp":1356998401,"value":4,"tags":{"host":"a"}}"#;
    let r = http(
        srv.addr,
        "POST",
        "/api/put?sync&summary&sync_timeout=-1",
        one,
    )
    .await;
    assert_eq!(
        (r.status, r.text()),
        (200, r#"{"success":1,"failed":0}"#.to_string())
    );
    let r = http(srv.addr, "POST", "/api/put?sync_timeout=x", one).await;
    assert_eq!(
        (r.status, r.json()["error"]["message"].clone()),
        (400, json!("For input string: \"x\""))
    );
    let r = http(srv.addr, "POST", "/api/put?sync_timeout=x", "[").await;
    assert_eq!(
        r.json()["error"]["message"],
        "Unable to parse the given JSON"
    );
    srv.stop().await;
}

async fn malformed_bodies_and_methods(backend: &str) {
    let srv = start(backend).await;
    let cases: &[(&str, &str)] = &[
        ("", "Missing request content"),
        ("   ", "Missing request content"),
        ("metric=x", "The JSON must start as an object or an array"),
        ("{\"metric\":", "Unable to parse the given JSON"),
        ("[1,2]", "Unable to parse the given JSON"),
        (
            r#"{"metric":"m","timestamp":1,"value":1,"tags":{"a":{"b":1}}}"#,
            "Unable to parse the given JSON",
        ),
        ("[]", "No datapoints found in content"),
    ];
    for (body, message) in cases {
        let r = http(srv.addr, "POST", "/api/put", body).await;
        assert_eq!(r.status, 400, "{body}");
        assert_eq!(r.json()["error"]["message"], *message, "{body}");
        assert_eq!(r.json()["error"]["code"], 400);
        assert!(
            r.headers
                .iter()
                .any(|(k, v)| k == "content-type" && v.starts_with("application/json"))
        );
    }
    let r = http(srv.addr, "GET", "/api/put", "").await;
    assert_eq!(r.status, 405);
    assert_eq!(
        r.json(),
        json!({"error":{"code":405,"message":"Method not allowed","details":"The HTTP method [GET] is not permitted for this endpoint"}})
    );
    let r = http(srv.addr, "GET", "/api/nothing", "").await;
    assert_eq!(
        (r.status, r.json()),
        (
            404,
            json!({"error":{"code":404,"message":"Endpoint not found"}})
        )
    );
    srv.stop().await;
}

async fn gzip_deflate_chunked_and_large_bodies(backend: &str) {
    let srv = start(backend).await;
    let mut points = Vec::new();
    for i in 0..50_000 {
        points.push(json!({"metric":"big.metric","timestamp":1356998400 + i,"value":i,"tags":{"host":"web01"}}));
    }
    let body = serde_json::to_vec(&points).unwrap();
    assert!(body.len() > 3_000_000);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&body).unwrap();
    let gz = gz.finish().unwrap();
    let mut conn = HttpConn::open(srv.addr).await;
    let r = conn
        .request("POST", "/api/put", "Content-Encoding: gzip\r\n", &gz)
        .await;
    assert_eq!(r.status, 204, "{}", r.text());
    // Deflate (zlib) on the same keep-alive connection.
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    z.write_all(
        br#"{"metric":"small.metric","timestamp":1356998400,"value":1,"tags":{"host":"a"}}"#,
    )
    .unwrap();
    let r = conn
        .request(
            "POST",
            "/api/put",
            "Content-Encoding: deflate\r\n",
            &z.finish().unwrap(),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.text());
    // `Content-Encoding` as Netty 3 reads it: any case, `x-gzip` for `gzip`, spaces around
    // it; an encoding it does not know leaves the body as sent.
    for (i, encoding) in ["x-gzip", " GZIP ", "X-Deflate", "br"]
        .into_iter()
        .enumerate()
    {
        let point = format!(
            r#"{{"metric":"enc.metric","timestamp":{},"value":1,"tags":{{"host":"a"}}}}"#,
            1356998400 + i
        );
        let body = match encoding {
            "X-Deflate" => {
                let mut z =
                    flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
                z.write_all(point.as_bytes()).unwrap();
                z.finish().unwrap()
            }
            "br" => point.into_bytes(),
            _ => {
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                gz.write_all(point.as_bytes()).unwrap();
                gz.finish().unwrap()
            }
        };
        let r = conn
            .request(
                "POST",
                "/api/put",
                &format!("Content-Encoding: {encoding}\r\n"),
                &body,
            )
            .await;
        assert_eq!(r.status, 204, "{encoding}: {}", r.text());
    }
    assert_eq!(srv.points("enc.metric").len(), 4);
    // Chunked transfer encoding in small chunks (OpenTSDB's chunk limit does not apply).
    let chunked_body =
        br#"[{"metric":"small.metric","timestamp":1356998401,"value":2,"tags":{"host":"a"}}]"#;
    let mut raw = Vec::new();
    for chunk in chunked_body.chunks(7) {
        raw.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        raw.extend_from_slice(chunk);
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    let r = conn
        .send_raw(
            "POST /api/put HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n",
            &raw,
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(srv.points("big.metric").len(), 50_000);
    assert_eq!(srv.points("small.metric").len(), 2);
    srv.stop().await;
}

async fn small_endpoints(backend: &str) {
    let srv = start(backend).await;
    let v = http(srv.addr, "GET", "/api/version", "").await;
    assert_eq!(v.status, 200);
    assert_eq!(v.json()["version"], "2.4.1");
    let aggs = http(srv.addr, "GET", "/api/aggregators", "").await.json();
    for name in [
        "sum", "zimsum", "avg", "mimmax", "p99", "ep999r7", "count", "none",
    ] {
        assert!(aggs.as_array().unwrap().iter().any(|a| a == name), "{name}");
    }
    let cfg = http(srv.addr, "GET", "/api/config", "").await.json();
    assert_eq!(cfg["tsd.core.auto_create_metrics"], "true");
    // Defaults are listed too, as OpenTSDB lists them.
    assert_eq!(cfg["tsd.storage.hbase.data_table"], "tsdb");
    assert_eq!(cfg["tsd.mode"], "rw");
    assert_eq!(cfg["tsd.query.limits.overrides.interval"], "60000");
    assert!(cfg.as_object().unwrap().len() > 90);
    let stats = http(srv.addr, "GET", "/api/stats", "").await.json();
    let list = stats.as_array().unwrap();
    assert!(list.iter().all(|s| s["metric"].is_string()
        && s["timestamp"].is_u64()
        && s["value"].is_string()
        && s["tags"]["host"].is_string()));
    assert!(list.iter().any(|s| s["metric"] == "tsd.uid.cache-hit"));
    for method in ["GET", "DELETE"] {
        let drop = http(srv.addr, method, "/api/dropcaches", "").await;
        assert_eq!(
            drop.json(),
            json!({"status":"200","message":"Caches dropped"})
        );
    }
    // OpenTSDB allows GET and DELETE only.
    assert_eq!(
        http(srv.addr, "POST", "/api/dropcaches", "").await.status,
        405
    );
    assert_eq!(
        http(srv.addr, "POST", "/api/metadata/put", "[]")
            .await
            .status,
        204
    );
    assert_eq!(
        http(srv.addr, "DELETE", "/api/version", "").await.status,
        405
    );
    srv.stop().await;
}

async fn sync_put_and_keep_alive(backend: &str) {
    let srv = start(backend).await;
    let mut conn = HttpConn::open(srv.addr).await;
    for i in 0..5 {
        let body = format!(
            r#"{{"metric":"ka","timestamp":{},"value":{i},"tags":{{"host":"a"}}}}"#,
            1356998400 + i
        );
        let r = conn
            .request(
                "POST",
                "/api/put?sync&sync_timeout=5000",
                "",
                body.as_bytes(),
            )
            .await;
        assert_eq!(r.status, 204, "{}", r.text());
    }
    let r = conn
        .request(
            "POST",
            "/api/put?sync&summary&sync_timeout=5000",
            "",
            GOOD.as_bytes(),
        )
        .await;
    assert_eq!(r.text(), r#"{"success":1,"timeouts":0,"failed":0}"#);
    assert_eq!(srv.points("ka").len(), 5);
    srv.stop().await;
}

async fn query_answers_opentsdb_fixture(backend: &str) {
    let srv = start(backend).await;
    let mut lines = String::new();
    for i in 0..300 {
        lines.push_str(&format!(
            "put sys.cpu.user {} {} host=web01\n",
            1356998430 + i * 30,
            i + 1
        ));
        lines.push_str(&format!(
            "put sys.cpu.user {} {} host=web02\n",
            1356998430 + i * 30,
            300 - i
        ));
    }
    assert_eq!(common::telnet(srv.addr, &lines).await, Vec::<String>::new());
    let r = http(
        srv.addr,
        "GET",
        "/api/query?start=1356998400&end=1357041600&m=sum:sys.cpu.user",
        "",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let body = r.json();
    assert_eq!(body.as_array().unwrap().len(), 1);
    assert_eq!(body[0]["metric"], "sys.cpu.user");
    assert_eq!(body[0]["aggregateTags"], json!(["host"]));
    let dps = body[0]["dps"].as_object().unwrap();
    assert_eq!(dps.len(), 300);
    assert_eq!(dps["1356998430"], json!(301));
    let grouped = http(
        srv.addr,
        "GET",
        "/api/query?start=1356998400&end=1357041600&m=sum:1m-avg:sys.cpu.user%7Bhost=*%7D",
        "",
    )
    .await
    .json();
    assert_eq!(grouped.as_array().unwrap().len(), 2);
    assert_eq!(grouped[0]["tags"], json!({"host": "web01"}));
    assert_eq!(grouped[0]["dps"].as_object().unwrap().len(), 151);
    let post = r#"{"start":1356998400,"end":1357041600,"queries":[{"aggregator":"sum","metric":"sys.cpu.user","rate":true,"filters":[{"type":"literal_or","tagk":"host","filter":"web01","groupBy":false}]}]}"#;
    let rate = http(srv.addr, "POST", "/api/query", post).await.json();
    let dps = rate[0]["dps"].as_object().unwrap();
    assert_eq!(dps.len(), 299);
    assert!(
        dps.values()
            .all(|v| (v.as_f64().unwrap() - 1.0 / 30.0).abs() < 1e-12)
    );
    let missing = http(
        srv.addr,
        "GET",
        "/api/query?start=1356998400&m=sum:nope",
        "",
    )
    .await;
    assert_eq!(missing.status, 400);
    assert_eq!(
        missing.json()["error"]["message"],
        "No such name for 'metrics': 'nope'"
    );
    let bad_agg = http(
        srv.addr,
        "GET",
        "/api/query?start=1356998400&m=foo:sys.cpu.user",
        "",
    )
    .await;
    assert_eq!(
        bad_agg.json()["error"]["message"],
        "No such aggregation function: foo"
    );
    let no_start = http(srv.addr, "GET", "/api/query?m=sum:sys.cpu.user", "").await;
    assert_eq!(
        no_start.json()["error"]["message"],
        "Missing parameter <code>start</code>"
    );
    let fill = http(
        srv.addr,
        "GET",
        "/api/query?start=1356998400&end=1357041600&m=sum:1m-avg-bogus:sys.cpu.user",
        "",
    )
    .await;
    assert_eq!(
        fill.json()["error"]["message"],
        "Unrecognized fill policy: bogus"
    );
    srv.stop().await;
}

/// A body over 4 MiB is read through once, then stored in batches as it is read again: the
/// answers are a small body's (every error at its index in the whole body, its point
/// echoed; the good points beside them stored), and a body that does not parse to its end
/// stores nothing.
async fn large_bodies_are_stored_in_batches_with_a_small_bodys_answers(backend: &str) {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "false");
    let srv = start_with(backend, c).await;
    for m in ["big.put", "big.broken"] {
        srv.state
            .tsdb
            .uids()
            .get_or_create_id(hourglass_core::uid::UidKind::Metric, m)
            .unwrap();
    }
    // Over 4 MiB with few points (white space between them, as JSON allows), so the test
    // stores two batches, not tens of thousands of points.
    const N: usize = 10_000;
    let pad = " ".repeat(440);
    let point = |metric: &str, i: usize, value: &str| {
        format!(
            r#"{{"metric":"{metric}","timestamp":{},"value":{value},"tags":{{"host":"web{:02}","dc":"lga"}}}}"#,
            1_356_998_400 + i / 20,
            i % 20
        )
    };
    // Bad points in the first batch, across a batch boundary, in the last batch; a bare
    // NaN token (read as Jackson reads it) makes the body go through its quoted form.
    let bad = [
        (3, point("nope", 3, "1"), "Unknown metric"),
        (
            8191,
            point("big.put", 8191, r#""x""#),
            "Unable to parse value to a number",
        ),
        (
            8192,
            point("big.put", 8192, "NaN"),
            "Unable to parse value to a number",
        ),
        (N - 1, point("big.put", N - 1, r#""""#), "Empty value"),
    ];
    let body = |metric: &str, close: &str| {
        let mut b = String::from("[");
        for i in 0..N {
            if i > 0 {
                b.push(',');
                b.push_str(&pad);
            }
            match bad.iter().find(|(at, _, _)| *at == i) {
                Some((_, p, _)) if metric == "big.put" => b.push_str(p),
                _ => b.push_str(&point(metric, i, &(i as f64 / 4.0).to_string())),
            }
        }
        b.push_str(close);
        b
    };
    let big = body("big.put", "]");
    assert!(big.len() > 4 << 20, "{} bytes: not a large body", big.len());
    let r = http(srv.addr, "POST", "/api/put?details", &big).await;
    assert_eq!(r.status, 400, "{}", r.text());
    let d = r.json();
    assert_eq!(
        (d["success"].clone(), d["failed"].clone()),
        (json!(N - 4), json!(4))
    );
    let errors = d["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 4);
    for (e, (at, p, why)) in errors.iter().zip(&bad) {
        assert_eq!(e["error"], *why, "point {at}");
        let sent: serde_json::Value = serde_json::from_str(&p.replace("NaN", r#""NaN""#)).unwrap();
        assert_eq!(e["datapoint"]["timestamp"], sent["timestamp"], "point {at}");
        assert_eq!(e["datapoint"]["metric"], sent["metric"], "point {at}");
        assert_eq!(e["datapoint"]["tags"], sent["tags"], "point {at}");
    }
    let stored = srv.points("big.put");
    assert_eq!(stored.len(), N - 4, "good points of every batch stored");
    assert_eq!(
        stored[0],
        (
            1_356_998_400_000,
            Value::Int(0),
            vec![("dc".into(), "lga".into()), ("host".into(), "web00".into())]
        )
    );
    let summary = http(srv.addr, "POST", "/api/put?summary", &big).await;
    assert_eq!(
        (summary.status, summary.text()),
        (400, format!(r#"{{"success":{},"failed":4}}"#, N - 4))
    );
    // Good to its last point, then no closing bracket.
    let broken = body("big.broken", "");
    let r = http(srv.addr, "POST", "/api/put?details", &broken).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(
        r.json()["error"]["message"],
        "Unable to parse the given JSON"
    );
    assert!(
        srv.points("big.broken").is_empty(),
        "a body that does not parse stores nothing"
    );
    srv.stop().await;
}

/// Request bodies are held under one budget, twice `tsd.http.request.max_body`: two bodies
/// of the largest size being sent take all of it, and a third request waits (unread, its
/// client held back by TCP) until one of them is answered; a body over the limit is refused
/// in OpenTSDB's error shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_held_at_once_stay_within_their_budget() {
    const MAX: usize = 64 << 10;
    let mut c = Config::default();
    c.set("tsd.http.request.max_body", &MAX.to_string());
    c.set("tsd.core.auto_create_metrics", "true");
    let srv = start_with("memory", c).await;
    assert_eq!(srv.state.body_bytes_free(), 2 * MAX);
    // A valid body of exactly MAX bytes: one point, then white space.
    let full = |ts: i64| {
        let mut b =
            format!(r#"[{{"metric":"held","timestamp":{ts},"value":1,"tags":{{"host":"a"}}}}"#);
        b.push_str(&" ".repeat(MAX - b.len() - 1));
        b.push(']');
        assert_eq!(b.len(), MAX);
        b
    };
    let head = format!("POST /api/put HTTP/1.1\r\nHost: t\r\nContent-Length: {MAX}\r\n\r\n");
    let mut started = Vec::new();
    for (i, ts) in [1_356_998_400, 1_356_998_401].into_iter().enumerate() {
        let body = full(ts);
        let mut conn = HttpConn::open(srv.addr).await;
        conn.write(head.as_bytes()).await;
        conn.write(&body.as_bytes()[..MAX - 10]).await;
        let waited = std::time::Instant::now();
        while srv.state.body_bytes_free() > (1 - i) * MAX {
            assert!(
                waited.elapsed() < std::time::Duration::from_secs(10),
                "a body being sent holds {} bytes of the budget",
                2 * MAX - srv.state.body_bytes_free()
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        started.push((conn, body));
    }
    assert_eq!(srv.state.body_bytes_free(), 0);
    let mut third = HttpConn::open(srv.addr).await;
    let small = r#"{"metric":"held","timestamp":1356998402,"value":1,"tags":{"host":"a"}}"#;
    third
        .write(
            format!(
                "POST /api/put HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n{small}",
                small.len()
            )
            .as_bytes(),
        )
        .await;
    assert!(
        third
            .response_within(std::time::Duration::from_millis(500))
            .await
            .is_none(),
        "a body was read with the budget spent"
    );
    // The first body ends: it is answered, and the third is read and answered.
    let (mut first, body) = started.remove(0);
    first.write(&body.as_bytes()[MAX - 10..]).await;
    let r = first
        .response_within(std::time::Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(r.status, 204, "{}", r.text());
    let r = third
        .response_within(std::time::Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(r.status, 204, "{}", r.text());
    let (mut second, body) = started.remove(0);
    second.write(&body.as_bytes()[MAX - 10..]).await;
    let r = second
        .response_within(std::time::Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(srv.points("held").len(), 3);
    assert_eq!(
        srv.state.body_bytes_free(),
        2 * MAX,
        "every body gave its share back"
    );
    // Over the limit: refused, in OpenTSDB's error shape.
    let over = " ".repeat(MAX + 1);
    let r = http(srv.addr, "POST", "/api/put", &over).await;
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(
        r.json()["error"]["message"],
        format!("The request body is larger than tsd.http.request.max_body ({MAX} bytes)")
    );
    // Its headers as every endpoint's answer has them: the length set before the mark of
    // compression.
    let names: Vec<&str> = r.headers.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["content-type", "content-length", "vary", "date"]);
    assert_eq!(
        r.header("content-length"),
        Some(r.body.len().to_string().as_str())
    );
    srv.stop().await;
}

on_every_backend!(
    put_single_and_array_answer_204_and_store,
    put_errors_summary_and_details,
    put_details_echo_points_as_opentsdb_serializes_them,
    malformed_bodies_and_methods,
    gzip_deflate_chunked_and_large_bodies,
    small_endpoints,
    sync_put_and_keep_alive,
    query_answers_opentsdb_fixture,
    large_bodies_are_stored_in_batches_with_a_small_bodys_answers,
);
