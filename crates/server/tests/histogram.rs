#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Histograms (RFC 0008, phase 3) through a real TSD on port 0, on every backend:
//! `/api/histogram` and the telnet `histogram` command store OpenTSDB 2.4.1's bytes in the
//! data table (its `TestHistogramDataPointRpc` histogram), which survive compaction, the
//! embedded store's groups and a restart; `percentiles` and `showHistogramBuckets` answer
//! as 2.4.1's `SimpleHistogram.percentile`, `HistogramDownsampler` and
//! `HistogramAggregationIterator` compute them (values worked out by hand below); errors
//! in 2.4.1's words; with `tsd.core.meta.*` histogram series are tracked in `tsdb-meta` as
//! raw ones are.

mod common;

use std::sync::Arc;

use common::{TestServer, http, start_on, store_for, telnet};
use hourglass_core::config::Config;
use hourglass_core::uid::UidKind;
use hourglass_storage::{ReadOptions, Store};
use serde_json::{Value, json};

/// 2013-01-01 00:00:00 UTC.
const T0: i64 = 1_356_998_400;

/// 2.4.1's `TestHistogramDataPointRpc` histogram as stored: codec id 42, buckets
/// `[0,1)=42`, `[1,5)=24`, overflow 1.
const FIXTURE: [u8; 23] = [
    0x2A, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x3F, 0x80, 0x00, 0x00, 0x2A, 0x3F, 0x80, 0x00, 0x00,
    0x40, 0xA0, 0x00, 0x00, 0x18, 0x00, 0x01,
];
/// The same without its id, base64 (what clients send with `"id": 42`).
const FIXTURE_B64: &str = "AAIAAAAAP4AAACo/gAAAQKAAABgAAQ==";

fn config() -> Config {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    c.set(
        "tsd.core.histograms.config",
        r#"{"net.opentsdb.core.SimpleHistogramDecoder": 42}"#,
    );
    c
}

async fn post(srv: &TestServer, path: &str, body: &Value) -> common::Response {
    http(srv.addr, "POST", path, &body.to_string()).await
}

/// The data table row of `metric{host=HOST}` at `base`.
fn row_key(srv: &TestServer, metric: &str, host: &str, base: u32) -> Vec<u8> {
    let db = &srv.state.tsdb;
    let schema = &db.settings().schema;
    let id = |kind, name| db.uids().get_id(kind, name).unwrap();
    let mut key = id(UidKind::Metric, metric).to_bytes(schema.metric_width);
    key.extend_from_slice(&base.to_be_bytes());
    key.extend_from_slice(&id(UidKind::TagKey, "host").to_bytes(schema.tagk_width));
    key.extend_from_slice(&id(UidKind::TagValue, host).to_bytes(schema.tagv_width));
    key
}

/// The row's cells of family `t`: qualifier → value.
fn cells(store: &dyn Store, srv: &TestServer, key: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let table = &srv.state.tsdb.settings().schema.data_table;
    let row = store
        .get(table, key, &ReadOptions::default())
        .unwrap()
        .expect("the row");
    let mut out: Vec<(Vec<u8>, Vec<u8>)> = row
        .cells
        .iter()
        .filter(|c| c.family == "t")
        .map(|c| (c.qualifier.clone(), c.value.clone()))
        .collect();
    out.sort();
    out
}

/// Stored bytes: JSON buckets, JSON base64 with its id, both telnet forms and a millisecond
/// timestamp all store 2.4.1's bytes under 2.4.1's qualifiers; a compaction of the row's
/// raw points, the embedded store's grouping and a restart keep them byte for byte.
async fn histograms_are_stored_as_2_4_1_stores_them(backend: &str) {
    let store = store_for(backend);
    let srv = start_on(Arc::clone(&store), config()).await;
    let tags = json!({"host": "a"});
    let points = json!([
        {"metric": "h.lat", "timestamp": T0, "tags": tags,
         "buckets": {"0,1": 42, "1,5": 24}, "overflow": 1},
        {"metric": "h.lat", "timestamp": T0 + 60, "tags": tags, "id": 42, "value": FIXTURE_B64},
        {"metric": "h.lat", "timestamp": (T0 + 61) * 1000 + 250, "tags": tags,
         "buckets": {"1.0,5.0": "24", "0,1": 42}, "underflow": 0, "overflow": "1"}
    ]);
    let r = post(&srv, "/api/histogram?sync", &points).await;
    assert_eq!(r.status, 204, "{}", r.text());
    let replies = telnet(
        srv.addr,
        &format!(
            "histogram h.lat {} u=0:o=1:0,1=42:1,5=24 host=a\nhistogram h.lat {} 42 {FIXTURE_B64} host=a\n",
            T0 + 120,
            T0 + 180
        ),
    )
    .await;
    assert!(replies.is_empty(), "{replies:?}");
    // Raw points in the same row, flushed and compacted into one cell beside them.
    for (i, v) in [1, 2, 3].iter().enumerate() {
        let p =
            json!({"metric": "h.lat", "timestamp": T0 + 10 + i as i64, "value": v, "tags": tags});
        assert_eq!(post(&srv, "/api/put", &p).await.status, 204);
    }
    srv.state.tsdb.flush().unwrap();
    let key = row_key(&srv, "h.lat", "a", T0 as u32);
    let want = |raw: Vec<u8>| {
        let mut w = vec![
            (vec![0x06, 0x00, 0x00], FIXTURE.to_vec()),
            (vec![0x06, 0x00, 0x3C], FIXTURE.to_vec()),
            (vec![0x06, 0x00, 0x78], FIXTURE.to_vec()),
            (vec![0x06, 0x00, 0xB4], FIXTURE.to_vec()),
            // 61.25 s after the hour, in ms: 61250 = 0xEF42.
            (vec![0x06, 0x00, 0x00, 0xEF, 0x42], FIXTURE.to_vec()),
        ];
        w.push((raw, vec![1, 2, 3, 0]));
        w.sort();
        w
    };
    // The compacted raw cell: offsets 10, 11, 12 s with 1-byte integers.
    let compacted = vec![0x00, 0xA0, 0x00, 0xB0, 0x00, 0xC0];
    assert_eq!(
        cells(store.as_ref(), &srv, &key),
        want(compacted.clone()),
        "{backend}"
    );
    let before = query_pct(&srv, "sum", None, &[50.0]).await;
    srv.stop().await;

    // A restart over the same store.
    let srv = start_on(Arc::clone(&store), config()).await;
    srv.state.tsdb.flush().unwrap();
    assert_eq!(
        cells(store.as_ref(), &srv, &key),
        want(compacted),
        "{backend}"
    );
    assert_eq!(query_pct(&srv, "sum", None, &[50.0]).await, before);
    assert_eq!(
        before[0]["dps"],
        json!({
            T0.to_string(): 0.5, (T0 + 60).to_string(): 0.5, (T0 + 61).to_string(): 0.5,
            (T0 + 120).to_string(): 0.5, (T0 + 180).to_string(): 0.5
        })
    );
    // The raw points read as before.
    let r = http(
        srv.addr,
        "GET",
        &format!("/api/query?start={T0}&end={}&m=sum:h.lat", T0 + 3599),
        "",
    )
    .await;
    assert_eq!(
        r.json()[0]["dps"],
        json!({(T0 + 10).to_string(): 1, (T0 + 11).to_string(): 2, (T0 + 12).to_string(): 3})
    );
    srv.stop().await;
}

async fn query_pct(srv: &TestServer, agg: &str, ds: Option<&str>, pcts: &[f32]) -> Value {
    let mut sub = json!({"aggregator": agg, "metric": "h.lat", "percentiles": pcts});
    if let Some(ds) = ds {
        sub["downsample"] = json!(ds);
    }
    let body = json!({"start": T0, "end": T0 + 3599, "queries": [sub]});
    let r = post(srv, "/api/query", &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

/// Two series: `a` at T0 (the fixture) and T0+30 (`[1,5)=10`, `[0,1)=0`), `b` at T0
/// (`[0,1)=10`, `[1,5)=30`, `[5,10)=60`, underflow 2) and T0+90 (`[5,10)=1`).
async fn two_series(srv: &TestServer) {
    let points = json!([
        {"metric": "h.q", "timestamp": T0, "tags": {"host": "a"},
         "buckets": {"0,1": 42, "1,5": 24}, "overflow": 1},
        {"metric": "h.q", "timestamp": T0 + 30, "tags": {"host": "a"},
         "buckets": {"0,1": 0, "1,5": 10}},
        {"metric": "h.q", "timestamp": T0, "tags": {"host": "b"},
         "buckets": {"0,1": 10, "1,5": 30, "5,10": 60}, "underflow": 2},
        {"metric": "h.q", "timestamp": T0 + 90, "tags": {"host": "b"},
         "buckets": {"5,10": 1}}
    ]);
    let r = post(srv, "/api/histogram", &points).await;
    assert_eq!(r.status, 204, "{}", r.text());
}

/// `(metric, tags, aggregateTags, dps)` of each answer, in order.
fn shape(answer: &Value) -> Vec<(String, Value, Value, Value)> {
    answer
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["metric"].as_str().unwrap().to_string(),
                g["tags"].clone(),
                g["aggregateTags"].clone(),
                g["dps"].clone(),
            )
        })
        .collect()
}

fn dps(pairs: &[(i64, Value)]) -> Value {
    Value::Object(
        pairs
            .iter()
            .map(|(t, v)| (t.to_string(), v.clone()))
            .collect(),
    )
}

/// Percentiles and buckets, summed across series time by time, per series (`none`), by
/// group, downsampled by `1m-sum` and `0all-sum`, as 2.4.1 computes them:
///
/// - at T0 the sum is `[0,1)=52`, `[1,5)=54`, `[5,10)=60` (166), underflow 2, overflow 1:
///   the 50th percentile's bucket is `[1,5)` (106/166 = 63.9 %), 3.0; the 99th `[5,10)`, 7.5;
/// - at T0+30 only `a`: `[1,5)` holds all, 3.0 for both; at T0+90 only `b`: 7.5;
/// - `a` alone at T0: 42/66 = 63.6 % ≥ 50 in `[0,1)`: 0.5;
/// - `1m-sum`: the first minute sums `a`'s two and `b`'s first (`[1,5)` reaches 116/176 =
///   65.9 %: 3.0; 99th 7.5), the second `b`'s last (7.5).
async fn percentiles_and_buckets_answer_as_2_4_1(backend: &str) {
    let srv = start_on(store_for(backend), config()).await;
    two_series(&srv).await;
    let f = |v: f64| json!(v);
    let i = |v: i64| json!(v);
    let run = |body: Value| {
        let srv = &srv;
        async move {
            let r = post(srv, "/api/query", &body).await;
            assert_eq!(r.status, 200, "{body}: {}", r.text());
            shape(&r.json())
        }
    };
    let q = |sub: Value| json!({"start": T0, "end": T0 + 3599, "queries": [sub]});
    // Percentiles are sorted as 2.4.1's setPercentiles sorts them: the echoed query too.
    let echo = post(
        &srv,
        "/api/query",
        &json!({"start": T0, "end": T0 + 3599, "showQuery": true,
                "queries": [{"aggregator": "sum", "metric": "h.q", "percentiles": [99, 50]}]}),
    )
    .await
    .json();
    assert_eq!(echo[0]["metric"], "h.q_pct_50.0", "{echo}");
    assert_eq!(
        echo[0]["query"]["percentiles"],
        json!([50.0, 99.0]),
        "{echo}"
    );

    // Summed across series; percentiles sorted, each named after it.
    let got = run(q(
        json!({"aggregator": "sum", "metric": "h.q", "percentiles": [99, 50.0]}),
    ))
    .await;
    assert_eq!(
        got,
        vec![
            (
                "h.q_pct_50.0".into(),
                json!({}),
                json!(["host"]),
                dps(&[(T0, f(3.0)), (T0 + 30, f(3.0)), (T0 + 90, f(7.5))])
            ),
            (
                "h.q_pct_99.0".into(),
                json!({}),
                json!(["host"]),
                dps(&[(T0, f(7.5)), (T0 + 30, f(3.0)), (T0 + 90, f(7.5))])
            ),
        ],
        "{backend}"
    );

    // One series each with `none`, in row-key order.
    let got = run(q(
        json!({"aggregator": "none", "metric": "h.q", "percentiles": [50]}),
    ))
    .await;
    assert_eq!(
        got,
        vec![
            (
                "h.q_pct_50.0".into(),
                json!({"host": "a"}),
                json!([]),
                dps(&[(T0, f(0.5)), (T0 + 30, f(3.0))])
            ),
            (
                "h.q_pct_50.0".into(),
                json!({"host": "b"}),
                json!([]),
                dps(&[(T0, f(7.5)), (T0 + 90, f(7.5))])
            ),
        ]
    );

    // Buckets of the group's first histogram, underflow first and overflow last, each time
    // its count (0 where a histogram lacks the bucket).
    let got = run(q(
        json!({"aggregator": "sum", "metric": "h.q", "showHistogramBuckets": true}),
    ))
    .await;
    let times = [T0, T0 + 30, T0 + 90];
    let counts = |c: [i64; 3]| {
        dps(&times
            .iter()
            .zip(c)
            .map(|(t, c)| (*t, i(c)))
            .collect::<Vec<_>>())
    };
    let names: Vec<(String, Value)> = got.iter().map(|g| (g.0.clone(), g.3.clone())).collect();
    assert_eq!(
        names,
        vec![
            ("h.q_UNDERFLOW".into(), counts([2, 0, 0])),
            ("h.q_0.0_1.0".into(), counts([52, 0, 0])),
            ("h.q_1.0_5.0".into(), counts([54, 10, 0])),
            ("h.q_5.0_10.0".into(), counts([60, 0, 1])),
            ("h.q_OVERFLOW".into(), counts([1, 0, 0])),
        ]
    );

    // Downsampled by 1m-sum, then `0all-sum`, through the GET form with both options; a
    // group per host with `{host=*}`.
    let get = |path: String| {
        let srv = &srv;
        async move {
            let r = http(srv.addr, "GET", &path, "").await;
            assert_eq!(r.status, 200, "{path}: {}", r.text());
            shape(&r.json())
        }
    };
    let got = get(format!(
        "/api/query?start={T0}&end={}&m=sum:1m-sum:percentiles%5B50,99%5D:h.q",
        T0 + 3599
    ))
    .await;
    let pct: Vec<(String, Value)> = got.iter().map(|g| (g.0.clone(), g.3.clone())).collect();
    assert_eq!(
        pct,
        vec![
            (
                "h.q_pct_50.0".into(),
                dps(&[(T0, f(3.0)), (T0 + 60, f(7.5))])
            ),
            (
                "h.q_pct_99.0".into(),
                dps(&[(T0, f(7.5)), (T0 + 60, f(7.5))])
            ),
        ]
    );
    let got = get(format!(
        "/api/query?start={T0}&end={}&m=sum:0all-sum:percentiles%5B50%5D:h.q",
        T0 + 3599
    ))
    .await;
    assert_eq!(got[0].3, dps(&[(T0, f(3.0))]));
    let got = get(format!(
        "/api/query?start={T0}&end={}&m=sum:percentiles%5B99.9%5D:show-histogram-buckets:h.q%7Bhost=*%7D",
        T0 + 3599
    ))
    .await;
    let names: Vec<(String, Value)> = got.iter().map(|g| (g.0.clone(), g.1.clone())).collect();
    assert_eq!(
        names,
        vec![
            ("h.q_pct_99.9".into(), json!({"host": "a"})),
            ("h.q_UNDERFLOW".into(), json!({"host": "a"})),
            ("h.q_0.0_1.0".into(), json!({"host": "a"})),
            ("h.q_1.0_5.0".into(), json!({"host": "a"})),
            ("h.q_OVERFLOW".into(), json!({"host": "a"})),
            ("h.q_pct_99.9".into(), json!({"host": "b"})),
            ("h.q_UNDERFLOW".into(), json!({"host": "b"})),
            ("h.q_0.0_1.0".into(), json!({"host": "b"})),
            ("h.q_1.0_5.0".into(), json!({"host": "b"})),
            ("h.q_5.0_10.0".into(), json!({"host": "b"})),
            ("h.q_OVERFLOW".into(), json!({"host": "b"})),
        ]
    );

    // Calendar buckets: the whole hour in one, all four histograms summed (`[1,5)` reaches
    // 116/177 = 65.5 %: 3.0).
    let got = run(q(
        json!({"aggregator": "sum", "metric": "h.q", "downsample": "1hc-sum",
        "percentiles": [50]}),
    ))
    .await;
    assert_eq!(got[0].3, dps(&[(T0, f(3.0))]));

    // A percentile below 1 is -1 (2.4.1's `percentile` answers so for p outside [1, 100]).
    let got = run(q(
        json!({"aggregator": "sum", "metric": "h.q", "percentiles": [0.5]}),
    ))
    .await;
    assert_eq!(
        (got[0].0.as_str(), &got[0].3),
        (
            "h.q_pct_0.5",
            &dps(&[(T0, f(-1.0)), (T0 + 30, f(-1.0)), (T0 + 90, f(-1.0))])
        )
    );

    // The query's range cuts points, not the scanned hour.
    let got = run(json!({"start": T0 + 1, "end": T0 + 60, "queries": [
        {"aggregator": "sum", "metric": "h.q", "percentiles": [50]}]}))
    .await;
    assert_eq!(got[0].3, dps(&[(T0 + 30, f(3.0))]));

    // showQuery echoes the histogram fields.
    let r = post(
        &srv,
        "/api/query",
        &json!({"start": T0, "end": T0 + 3599, "showQuery": true, "queries": [
            {"aggregator": "sum", "metric": "h.q", "percentiles": [99.9]}]}),
    )
    .await;
    let echo = &r.json()[0]["query"];
    assert_eq!(
        (&echo["percentiles"], &echo["showHistogramBuckets"]),
        (&json!([99.9]), &json!(false))
    );
    srv.stop().await;
}

/// Refusals in 2.4.1's words, for writes (per point with `?details`, telnet replies) and
/// queries.
async fn errors_are_2_4_1s(backend: &str) {
    let srv = start_on(store_for(backend), config()).await;
    let tags = json!({"host": "a"});
    let many_buckets: serde_json::Map<String, Value> = (0..32_768)
        .map(|i| (format!("{i},{}", i + 1), json!(1)))
        .collect();
    let body = json!([
        {"metric": "", "timestamp": T0, "tags": tags, "buckets": {"0,1": 1}},
        {"metric": "h.e", "timestamp": 0, "tags": tags, "buckets": {"0,1": 1}},
        {"metric": "h.e", "timestamp": T0, "buckets": {"0,1": 1}},
        {"metric": "h.e", "timestamp": T0, "tags": tags},
        {"metric": "h.e", "timestamp": T0, "tags": tags, "id": 300, "value": FIXTURE_B64},
        {"metric": "h.e", "timestamp": T0, "tags": tags, "id": 7, "value": FIXTURE_B64},
        {"metric": "h.e", "timestamp": T0, "tags": tags, "buckets": {"0-1": 1}},
        {"metric": "h.e", "timestamp": T0, "tags": tags, "buckets": {"x,1": 1}},
        {"metric": "h.e", "timestamp": T0, "tags": tags, "id": 42, "value": "AAIA"},
        {"metric": "h.e", "timestamp": T0, "tags": tags, "id": 42, "value": "AAIAAAAAP4AA"},
        {"metric": "h.e", "timestamp": T0, "tags": {"host": "a b"}, "buckets": {"0,1": 1}},
        // More buckets than 2.4.1's signed short count reads back.
        {"metric": "h.e", "timestamp": T0, "tags": tags, "buckets": many_buckets},
        // A millisecond time past the 4-byte base hour.
        {"metric": "h.e", "timestamp": 5_000_000_000_000i64, "tags": tags, "buckets": {"0,1": 1}},
        {"metric": "h.e", "timestamp": T0, "tags": tags, "buckets": {"0,1": 1}}
    ]);
    let r = post(&srv, "/api/histogram?details", &body).await;
    assert_eq!(r.status, 400);
    let answer = r.json();
    assert_eq!(
        (&answer["success"], &answer["failed"]),
        (&json!(1), &json!(13))
    );
    let errors: Vec<&str> = answer["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["error"].as_str().unwrap())
        .collect();
    assert_eq!(
        errors,
        [
            "Metric name was empty",
            "Invalid timestamp",
            "Missing tags",
            "Histogram buckets cannot be null or empty if 'value' is empty.",
            "Invalid type. Must be from 0 to 255.",
            "No codec found mapped to ID 7",
            "Unable to parse bucket bounds: 0-1",
            "Unable to parse value to a number",
            "Byte array shorter than 6 bytes detected: [0, 2, 0]",
            "Unexpected exception",
            "Invalid tag value with key [host] (\"a b\"): illegal character:  ",
            "Too many buckets: 32768, at most 32767",
            "bad timestamp=5000000000000 when trying to add value=[42, 0, 1, 0, 0, 0, 0, 63, -128, 0, 0, 1, 0, 0]/0 to metric=h.e, tags={host=a}",
        ],
        "{backend}"
    );
    assert_eq!(
        (
            r.status,
            post(&srv, "/api/histogram", &json!([])).await.status
        ),
        (400, 400)
    );
    let r = http(srv.addr, "GET", "/api/histogram", "").await;
    assert_eq!(r.status, 405);

    let replies = telnet(
        srv.addr,
        &format!(
            "histogram h.e {T0} host=a\nhistogram h.e 0 u=1 host=a\nhistogram h.e x u=1 host=a\nhistogram h.e {T0} 0,1=x host=a\nhistogram h.e {T0} 0-1=1 host=a\nhistogram h.e {T0} 7 {FIXTURE_B64} host=a\nhistogram h.e {T0} u=1 host=a@b\nhistogram h.e {T0} u=1 host=a\nhistogram h.e {T0} u=1 host\n"
        ),
    )
    .await;
    assert_eq!(
        replies,
        [
            "histogram: illegal argument: not enough arguments (need least 5, got 3)",
            "histogram: illegal argument: invalid timestamp: 0",
            "histogram: invalid value: Invalid character 'x' in x",
            "histogram: HBase error: For input string: \"x\"",
            "histogram: HBase error: Improperly formatted bounds: 0-1=1",
            "histogram: HBase error: No codec found mapped to ID 7",
            "histogram: HBase error: Invalid tag value with key [host] (\"a@b\"): illegal character: @",
            "histogram: illegal argument: invalid tag: host",
        ]
    );

    // Queries.
    for (sub, want) in [
        (
            json!({"aggregator": "avg", "percentiles": [50]}),
            "Only NONE or SUM aggregation function supported for histogram query",
        ),
        (
            json!({"aggregator": "sum", "downsample": "1m-avg", "percentiles": [50]}),
            "Only SUM downsampling aggregation supported for histogram query",
        ),
        (
            json!({"aggregator": "sum", "percentiles": [100.5]}),
            "Invalid percentile parameters: 100.5",
        ),
        (
            json!({"aggregator": "sum", "rate": true, "showHistogramBuckets": true}),
            "rate is not supported for histogram queries (RFC 0008)",
        ),
        (
            json!({"aggregator": "sum", "downsample": "1m-sum-zero", "percentiles": [50]}),
            "a downsampling fill policy other than none is not supported for histogram queries (RFC 0008)",
        ),
    ] {
        let mut sub = sub;
        sub["metric"] = json!("h.e");
        let r = post(&srv, "/api/query", &json!({"start": T0, "queries": [sub]})).await;
        assert_eq!(
            (r.status, r.json()["error"]["message"].clone()),
            (400, json!(want)),
            "{sub}"
        );
    }
    let r = http(
        srv.addr,
        "GET",
        &format!("/api/query?start={T0}&m=sum:percentiles50:h.e"),
        "",
    )
    .await;
    assert_eq!(
        (r.status, r.json()["error"]["message"].clone()),
        (
            400,
            json!("Malformated percentile query paramater: percentiles50")
        )
    );
    srv.stop().await;
}

/// With `tsd.core.meta.*` a histogram series is tracked as a raw one (2.4.1's
/// `storeIntoDB` tracks both): its TSMeta exists as soon as its points are acknowledged,
/// found by lookups, and `totalDatapoints` counts its points, histogram and raw alike.
async fn histogram_series_are_tracked_in_meta(backend: &str) {
    let mut c = config();
    c.set("tsd.core.meta.enable_tsuid_tracking", "true");
    c.set("tsd.core.meta.enable_realtime_ts", "true");
    c.set("tsd.core.meta.enable_tsuid_incrementing", "true");
    let srv = start_on(store_for(backend), c).await;
    let tags = json!({"host": "a"});
    let points = json!([
        {"metric": "h.meta", "timestamp": T0, "tags": tags, "buckets": {"0,1": 4}},
        {"metric": "h.meta", "timestamp": T0 + 60, "tags": tags, "buckets": {"0,1": 5}},
    ]);
    let r = post(&srv, "/api/histogram", &points).await;
    assert_eq!(r.status, 204, "{}", r.text());
    let replies = telnet(
        srv.addr,
        &format!("histogram h.meta {} u=0:o=1:0,1=42 host=a\n", T0 + 120),
    )
    .await;
    assert!(replies.is_empty(), "{replies:?}");
    let key = row_key(&srv, "h.meta", "a", T0 as u32);
    let schema = &srv.state.tsdb.settings().schema;
    let tsuid: String = hourglass_core::rowkey::tsuid_of(schema, &key)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect();
    let r = http(
        srv.addr,
        "GET",
        &format!("/api/uid/tsmeta?tsuid={tsuid}"),
        "",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let m = r.json();
    assert_eq!(m["metric"]["name"], "h.meta", "{m}");
    assert_eq!(m["totalDatapoints"], 3, "{m}");
    let v = http(srv.addr, "GET", "/api/search/lookup?m=h.meta", "")
        .await
        .json();
    assert_eq!(v["totalResults"], 1, "{v}");
    // A raw point of the same series counts with them.
    telnet(srv.addr, &format!("put h.meta {} 7 host=a\n", T0 + 180)).await;
    srv.state.tsdb.flush().unwrap();
    let m = http(
        srv.addr,
        "GET",
        &format!("/api/uid/tsmeta?tsuid={tsuid}"),
        "",
    )
    .await
    .json();
    assert_eq!(m["totalDatapoints"], 4, "{m}");
    srv.stop().await;
}

/// With rollups configured, a histogram query whose downsample a rollup interval matches
/// (`1h-sum` with a `1h` interval) still reads the data table, where histograms live. 2.4.1
/// scans the `1h` rollup table there (its `tableToBeScanned`) and, taking no histogram from
/// a rollup table (`SaltScanner.processRow`), answers nothing: a difference kept on purpose
/// (README, "Differences from OpenTSDB 2.4").
async fn histograms_are_read_from_the_data_table_under_rollups(backend: &str) {
    let mut c = config();
    c.set("tsd.rollups.enable", "true");
    c.set(
        "tsd.rollups.config",
        r#"{"aggregationIds":{"sum":0,"count":1},"intervals":[{"table":"tsdb","preAggregationTable":"tsdb-agg","interval":"1m","rowSpan":"1h","defaultInterval":true},{"table":"tsdb-rollup-1h","preAggregationTable":"tsdb-rollup-agg-1h","interval":"1h","rowSpan":"1d"}]}"#,
    );
    let srv = start_on(store_for(backend), c).await;
    two_series(&srv).await;
    // The hour's four histograms summed: `[0,1)=52`, `[1,5)=64`, `[5,10)=61`; the 50th
    // percentile reaches 116/177 in `[1,5)`: 3.0.
    let body = json!({"start": T0, "end": T0 + 3599, "queries": [{"aggregator": "sum",
        "metric": "h.q", "downsample": "1h-sum", "percentiles": [50]}]});
    let r = post(&srv, "/api/query", &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let answer = r.json();
    let got = shape(&answer);
    assert_eq!(got.len(), 1, "{answer}");
    assert_eq!(got[0].0, "h.q_pct_50.0");
    assert_eq!(got[0].3, dps(&[(T0, json!(3.0))]));
    srv.stop().await;
}

/// The annotations of a series' rows that hold no histogram are its answer's, as 2.4.1's
/// `SaltScanner.mergeHistogramDataPoints` attaches them (its `runWithOnlyAnnotation`): `a`
/// has histograms at T0 and T0+2h and a note at T0+1h, in a row of its own.
async fn annotations_of_rows_without_histograms_are_answered(backend: &str) {
    let srv = start_on(store_for(backend), config()).await;
    let points = json!([
        {"metric": "h.n", "timestamp": T0, "tags": {"host": "a"}, "buckets": {"0,1": 1}},
        {"metric": "h.n", "timestamp": T0 + 7200, "tags": {"host": "a"}, "buckets": {"0,1": 2}}
    ]);
    let r = post(&srv, "/api/histogram", &points).await;
    assert_eq!(r.status, 204, "{}", r.text());
    let body = |show: bool| {
        json!({"start": T0, "end": T0 + 3 * 3600, "showTSUIDs": show, "queries": [{
            "aggregator": "sum", "metric": "h.n", "percentiles": [50]}]})
    };
    let r = post(&srv, "/api/query", &body(true)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let tsuid = r.json()[0]["tsuids"][0].as_str().unwrap().to_string();
    let note = json!({"tsuid": tsuid, "startTime": T0 + 3600 + 90, "description": "deploy"});
    let r = post(&srv, "/api/annotation", &note).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = post(&srv, "/api/query", &body(false)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let answer = r.json();
    assert_eq!(answer.as_array().unwrap().len(), 1, "{answer}");
    let notes = answer[0]["annotations"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "{answer}");
    assert_eq!(notes[0]["description"], "deploy");
    assert_eq!(notes[0]["startTime"], T0 + 3600 + 90);
    assert_eq!(
        answer[0]["dps"],
        json!({T0.to_string(): 0.5, (T0 + 7200).to_string(): 0.5})
    );
    srv.stop().await;
}

on_every_backend!(
    histogram_series_are_tracked_in_meta,
    histograms_are_stored_as_2_4_1_stores_them,
    percentiles_and_buckets_answer_as_2_4_1,
    errors_are_2_4_1s,
    histograms_are_read_from_the_data_table_under_rollups,
    annotations_of_rows_without_histograms_are_answered,
);

#[test]
fn bad_configurations_refuse_the_start() {
    let settings = |value: &str, index: bool| {
        let mut c = Config::default();
        c.set("tsd.core.histograms.config", value);
        if index {
            c.set("tsd.index.enable", "true");
        }
        hourglass_engine::Settings::from_config(&c).map(|s| s.histograms.is_some())
    };
    assert!(!settings("", false).unwrap());
    let err = |value: &str, index: bool| settings(value, index).unwrap_err().to_string();
    assert_eq!(
        err(r#"{"net.opentsdb.core.SimpleHistogramDecoder": -1}"#, false),
        "ID for codec 'net.opentsdb.core.SimpleHistogramDecoder' must be from 0 to 255."
    );
    assert!(err(r#"{"a.B": 1}"#, false).starts_with("Unable to find a decoder named 'a.B'"));
    assert!(
        err("/nonexistent/histograms.json", false)
            .starts_with("Unable to open plugin config file: /nonexistent/histograms.json")
    );
    assert!(
        err("not json", false).starts_with("Unable to parse the 'tsd.core.histograms.config' JSON")
    );
    assert!(
        err(r#"{"net.opentsdb.core.SimpleHistogramDecoder": 1}"#, true)
            .starts_with("tsd.core.histograms.config cannot be used with tsd.index.enable = true")
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("histograms.json");
    std::fs::write(&path, r#"{"net.opentsdb.core.SimpleHistogramDecoder": 3}"#).unwrap();
    assert!(settings(path.to_str().unwrap(), false).unwrap());
}
