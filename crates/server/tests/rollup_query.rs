#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Rollup and pre-aggregate queries (RFC 0008, phase 2) through a real TSD on port 0, on
//! every backend: a downsample matching a configured interval reads the rollup table and
//! answers as the raw downsample of the same points; each `rollupUsage` and its fallbacks;
//! `avg` from sums and counts with OpenTSDB 2.4.1's expectations
//! (`test/core/TestTsdbQueryRollup.java`); pre-aggregates through the aggregate tag; `/q`.

mod common;

use common::{TestServer, http, start_with};
use hourglass_core::config::Config;
use serde_json::{Value, json};

/// 2.4.1's TestTsdbQueryRollup intervals (`10m` in 6-hour rows, `1h` in days, `1d` in
/// months) with the default `1m` interval in the data table, as its example configuration.
const CONFIG: &str = r#"{"aggregationIds":{"sum":0,"count":1,"max":2,"min":3},
"intervals":[
{"table":"tsdb","preAggregationTable":"tsdb-agg","interval":"1m","rowSpan":"1h","defaultInterval":true},
{"table":"tsdb-rollup-10m","preAggregationTable":"tsdb-rollup-agg-10m","interval":"10m","rowSpan":"6h"},
{"table":"tsdb-rollup-1h","preAggregationTable":"tsdb-rollup-agg-1h","interval":"1h","rowSpan":"1d"},
{"table":"tsdb-rollup-1d","preAggregationTable":"tsdb-rollup-agg-1d","interval":"1d","rowSpan":"1n"}]}"#;

/// 2013-01-01 00:00:00 UTC.
const T0: i64 = 1_356_998_400;
const DAY: i64 = 86_400;

fn config() -> Config {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    c.set("tsd.rollups.enable", "true");
    c.set("tsd.rollups.config", &CONFIG.replace('\n', ""));
    c
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

/// Writes points in batches, each answered 204.
async fn send(srv: &TestServer, path: &str, points: &[Value]) {
    for batch in points.chunks(500) {
        let r = post(srv, path, &Value::Array(batch.to_vec())).await;
        assert_eq!(r.status, 204, "{path}: {}", r.text());
    }
}

async fn query(srv: &TestServer, body: Value) -> Value {
    let r = post(srv, "/api/query", &body).await;
    assert_eq!(r.status, 200, "{body}: {}", r.text());
    r.json()
}

async fn get(srv: &TestServer, path: &str) -> common::Response {
    http(srv.addr, "GET", path, "").await
}

/// The rollups of raw points per series and interval: sum, count, min and max.
fn rollups_of(
    metric: &str,
    host: &str,
    raw: &[(i64, i64)],
    interval: i64,
    name: &str,
) -> Vec<Value> {
    let mut buckets: std::collections::BTreeMap<i64, Vec<i64>> = Default::default();
    for (t, v) in raw {
        buckets
            .entry(t - t.rem_euclid(interval))
            .or_default()
            .push(*v);
    }
    let mut out = Vec::new();
    for (t, vs) in buckets {
        for (agg, value) in [
            ("sum", vs.iter().sum::<i64>()),
            ("count", vs.len() as i64),
            ("min", *vs.iter().min().unwrap()),
            ("max", *vs.iter().max().unwrap()),
        ] {
            out.push(json!({"metric": metric, "timestamp": t, "value": value,
                "tags": {"host": host}, "interval": name, "aggregator": agg}));
        }
    }
    out
}

/// Property: raw points and the rollups computed from them (written through
/// `/api/rollup`); every downsample a rollup interval divides, by every function the
/// rollups serve, answers from the rollup tables exactly as `ROLLUP_RAW` answers from the
/// raw points, over random ranges, for grouped and per-series results and fill policies.
/// The two scans differ (a rollup read covers whole rows, `rollup_rows_are_read_whole`),
/// but not their answers here: no point is more than ten minutes after the one before, so
/// no series is interpolated across the edges, and no range with a rate starts on an hour
/// after the first (the raw scan begins at that hour and leaves its bucket's rate out; the
/// rollup read rates it against the bucket before: such starts are moved a minute on).
async fn rollup_queries_equal_the_raw_downsample(backend: &str) {
    let srv = start_with(backend, config()).await;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut raw_points = Vec::new();
    let mut rollup_points = Vec::new();
    for host in ["a", "b"] {
        let mut raw = Vec::new();
        let mut t = T0 + rng.below(300) as i64;
        while t < T0 + 2 * DAY {
            raw.push((t, rng.below(1001) as i64 - 500));
            t += 1 + rng.below(600) as i64;
        }
        for (t, v) in &raw {
            raw_points.push(json!({"metric": "m.prop", "timestamp": t, "value": v,
                "tags": {"host": host}}));
        }
        for (interval, name) in [(600, "10m"), (3600, "1h"), (DAY, "1d")] {
            rollup_points.extend(rollups_of("m.prop", host, &raw, interval, name));
        }
    }
    send(&srv, "/api/put", &raw_points).await;
    send(&srv, "/api/rollup", &rollup_points).await;

    let mut compared = 0;
    for round in 0..3 {
        // Ranges on a day's start and anywhere inside the two days.
        let (start, end) = if round == 0 {
            (T0, T0 + 2 * DAY - 1)
        } else {
            let start = T0 + 60 * rng.below(12 * 60) as i64;
            // Not on an hour after the first, where the two reads rightly rate differently.
            let start = if start % 3600 == 0 { start + 60 } else { start };
            (start, T0 + 2 * DAY - 60 * rng.below(12 * 60) as i64)
        };
        for ds in ["10m", "30m", "1h", "2h", "6h", "1d"] {
            for function in ["sum", "count", "min", "max", "avg", "zimsum", "mimmax"] {
                for (aggregator, fill) in
                    [("sum", ""), ("none", ""), ("sum", "-zero"), ("max", "-nan")]
                {
                    let downsample = format!("{ds}-{function}{fill}");
                    let body = |usage: Option<&str>| {
                        let mut sub = json!({"aggregator": aggregator, "metric": "m.prop",
                            "downsample": downsample,
                            "filters": [{"type": "wildcard", "tagk": "host", "filter": "*", "groupBy": false}]});
                        if let Some(u) = usage {
                            sub["rollupUsage"] = json!(u);
                        }
                        json!({"start": start, "end": end, "queries": [sub]})
                    };
                    let from_rollups = query(&srv, body(None)).await;
                    let from_raw = query(&srv, body(Some("ROLLUP_RAW"))).await;
                    assert!(
                        !from_raw.as_array().unwrap().is_empty(),
                        "{backend} {downsample}"
                    );
                    assert_eq!(
                        from_rollups, from_raw,
                        "{backend}: {aggregator}:{downsample} over [{start}, {end}]"
                    );
                    compared += 1;
                }
            }
        }
        // Rates of the buckets, counters too.
        for (ds, rate_options) in [
            ("10m-sum", json!(null)),
            ("1h-avg", json!(null)),
            ("2h-max", json!({"counter": true, "counterMax": 1000})),
        ] {
            let body = |usage: Option<&str>| {
                let mut sub = json!({"aggregator": "sum", "metric": "m.prop",
                    "downsample": ds, "rate": true});
                if !rate_options.is_null() {
                    sub["rateOptions"] = rate_options.clone();
                }
                if let Some(u) = usage {
                    sub["rollupUsage"] = json!(u);
                }
                json!({"start": start, "end": end, "queries": [sub]})
            };
            let from_rollups = query(&srv, body(None)).await;
            let from_raw = query(&srv, body(Some("ROLLUP_RAW"))).await;
            assert!(
                !from_raw.as_array().unwrap().is_empty(),
                "{backend} rate {ds}"
            );
            assert_eq!(
                from_rollups, from_raw,
                "{backend}: rate {ds} over [{start}, {end}]"
            );
            compared += 1;
        }
    }
    assert_eq!(compared, 3 * (6 * 7 * 4 + 3));
    srv.stop().await;
}

/// Raw points (1 every ten minutes) and `1h-sum` rollups (100 an hour) that deliberately
/// differ, so each answer shows where it came from; no `1d` rollups.
async fn usage_fixture(srv: &TestServer) {
    let mut raw = Vec::new();
    for i in 0..144 {
        for metric in ["m.usage", "m.rawonly"] {
            raw.push(
                json!({"metric": metric, "timestamp": T0 + 600 * i, "value": 1,
                "tags": {"host": "web01"}}),
            );
        }
    }
    send(srv, "/api/put", &raw).await;
    let rollups: Vec<Value> = (0..24)
        .map(|h| {
            json!({"metric": "m.usage", "timestamp": T0 + 3600 * h, "value": 100,
            "tags": {"host": "web01"}, "interval": "1h", "aggregator": "sum"})
        })
        .collect();
    send(srv, "/api/rollup", &rollups).await;
}

fn one_day(metric: &str, downsample: &str, usage: Option<&str>) -> Value {
    let mut sub = json!({"aggregator": "sum", "metric": metric, "downsample": downsample});
    if let Some(u) = usage {
        sub["rollupUsage"] = json!(u);
    }
    json!({"start": T0, "end": T0 + DAY - 1, "queries": [sub]})
}

/// The values of a one-group answer, by time.
fn values(answer: &Value) -> Vec<(i64, f64)> {
    let groups = answer.as_array().unwrap();
    assert_eq!(groups.len(), 1, "{answer}");
    groups[0]["dps"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(t, v)| (t.parse().unwrap(), v.as_f64().unwrap()))
        .collect()
}

/// Each `rollupUsage` as 2.4.1's `TsdbQuery` runs it: no usage and `ROLLUP_NOFALLBACK` read
/// the best interval only (no `1d` rollups: no answer); `ROLLUP_FALLBACK` goes on to the
/// next interval dividing the downsample (`1h`), and to raw data when the next is the
/// default interval; `ROLLUP_FALLBACK_RAW` goes to raw data; `ROLLUP_RAW` reads raw data.
/// The GET `m=` tokens do the same.
async fn rollup_usages_choose_and_fall_back_as_opentsdb(backend: &str) {
    let srv = start_with(backend, config()).await;
    usage_fixture(&srv).await;
    let empty: Vec<Value> = Vec::new();

    for usage in [None, Some("ROLLUP_NOFALLBACK")] {
        let a = query(&srv, one_day("m.usage", "1d-sum", usage)).await;
        assert_eq!(a.as_array().unwrap(), &empty, "{usage:?}");
    }
    let fallback = query(&srv, one_day("m.usage", "1d-sum", Some("ROLLUP_FALLBACK"))).await;
    assert_eq!(values(&fallback), [(T0, 2400.0)]);
    for usage in ["ROLLUP_FALLBACK_RAW", "ROLLUP_RAW"] {
        let a = query(&srv, one_day("m.usage", "1d-sum", Some(usage))).await;
        assert_eq!(values(&a), [(T0, 144.0)], "{usage}");
    }
    // A matching interval: the rollups, whatever the fallback; raw data only when asked.
    for usage in [
        None,
        Some("ROLLUP_NOFALLBACK"),
        Some("ROLLUP_FALLBACK"),
        Some("ROLLUP_FALLBACK_RAW"),
    ] {
        let a = values(&query(&srv, one_day("m.usage", "1h-sum", usage)).await);
        assert_eq!(a.len(), 24, "{usage:?}");
        assert!(a.iter().all(|(_, v)| *v == 100.0), "{usage:?}: {a:?}");
    }
    // showQuery says which table answered (2.4's `rollupTable`) and echoes the usage.
    for (ds, usage, table) in [
        ("1d-sum", Some("ROLLUP_FALLBACK"), "1h"),
        ("1d-sum", Some("ROLLUP_FALLBACK_RAW"), "raw"),
        ("1h-sum", None, "1h"),
        ("15m-sum", None, "raw"),
    ] {
        let mut body = one_day("m.usage", ds, usage);
        body["showQuery"] = json!(true);
        let a = query(&srv, body).await;
        let echoed = &a[0]["query"];
        assert_eq!(echoed["rollupTable"], table, "{ds} {usage:?}");
        assert_eq!(echoed["rollupUsage"], json!(usage), "{ds}");
        assert_eq!(echoed["preAggregate"], false);
    }
    let raw = values(&query(&srv, one_day("m.usage", "1h-sum", Some("ROLLUP_RAW"))).await);
    assert!(raw.iter().all(|(_, v)| *v == 6.0), "{raw:?}");
    // zimsum reads the sums; a function whose cells are missing finds nothing.
    let zimsum = values(&query(&srv, one_day("m.usage", "1h-zimsum", None)).await);
    assert_eq!(zimsum.len(), 24);
    for ds in ["1h-max", "1h-count", "1h-avg"] {
        let a = query(&srv, one_day("m.usage", ds, None)).await;
        assert_eq!(a.as_array().unwrap(), &empty, "{ds}");
        // ... and falls back to raw data when asked.
        let a = values(&query(&srv, one_day("m.usage", ds, Some("ROLLUP_FALLBACK_RAW"))).await);
        assert_eq!(a.len(), 24, "{ds}");
    }
    // No rollup at any interval: ROLLUP_FALLBACK walks 1d, 1h, 10m, then the default
    // interval, which is raw data.
    let a = query(
        &srv,
        one_day("m.rawonly", "1d-sum", Some("ROLLUP_FALLBACK")),
    )
    .await;
    assert_eq!(values(&a), [(T0, 144.0)]);
    let a = query(&srv, one_day("m.rawonly", "1d-sum", None)).await;
    assert_eq!(a.as_array().unwrap(), &empty);
    // No interval divides 15m but the default one: raw data; no downsample: raw data.
    let a = values(&query(&srv, one_day("m.usage", "15m-sum", None)).await);
    assert_eq!(a.len(), 96);
    assert!(a.iter().all(|(_, v)| *v == 1.0 || *v == 2.0), "{a:?}");
    let body = json!({"start": T0, "end": T0 + 599, "queries": [{"aggregator": "sum", "metric": "m.usage"}]});
    assert_eq!(values(&query(&srv, body).await), [(T0, 1.0)]);

    // The GET forms.
    let range = format!("start={T0}&end={}", T0 + DAY - 1);
    for (m, expected) in [
        ("sum:1d-sum:rollup_fallback:m.usage", 2400.0),
        ("sum:1d-sum:rollup_fallback_raw:m.usage", 144.0),
        ("sum:1d-sum:ROLLUP_RAW:m.usage", 144.0),
        ("sum:rollup_fallback:1d-sum:m.usage", 2400.0),
    ] {
        let r = get(&srv, &format!("/api/query?{range}&m={m}")).await;
        assert_eq!(r.status, 200, "{m}: {}", r.text());
        assert_eq!(values(&r.json()), [(T0, expected)], "{m}");
    }
    let r = get(
        &srv,
        &format!("/api/query?{range}&m=sum:1d-sum:rollup_nofallback:m.usage"),
    )
    .await;
    assert_eq!(r.json().as_array().unwrap(), &empty);

    // Functions without an id, and dev, are OpenTSDB's errors; raw data still serves them.
    for (ds, message) in [
        ("1h-dev", "No ID found mapping to aggregator: dev"),
        ("1h-p99", "No ID found mapping to aggregator: p99"),
        ("1h-first", "No ID found mapping to aggregator: first"),
    ] {
        let r = post(&srv, "/api/query", &one_day("m.usage", ds, None)).await;
        assert_eq!(r.status, 400, "{ds}: {}", r.text());
        assert_eq!(r.json()["error"]["message"], message, "{ds}");
        let a = query(&srv, one_day("m.usage", ds, Some("ROLLUP_RAW"))).await;
        assert_eq!(values(&a).len(), 24, "{ds}");
    }
    srv.stop().await;
}

/// `avg` from sums and counts, with 2.4.1's `TestTsdbQueryRollup` expectations: a sum or a
/// count without its partner is left out (`run10mAvgLongSingleTSMissingACount`,
/// `run10mAvgLongSingleTSMissingToZeroOneSpan`); a coarser downsample divides the summed
/// sums by the summed counts; sums of `10m` rollups at `30m` (`run30mSumLongSingleTS`).
async fn averages_come_from_sums_and_counts(backend: &str) {
    let srv = start_with(backend, config()).await;
    let point = |t: i64, v: i64, agg: &str| {
        json!({"metric": "sys.cpu.user", "timestamp": t, "value": v,
            "tags": {"host": "web01"}, "interval": "10m", "aggregator": agg})
    };
    // run10mAvgLongSingleTSMissingToZeroOneSpan's cells.
    let cells = vec![
        point(1356998400, 20, "sum"),
        point(1356998400, 2, "count"),
        point(1356999000, 40, "sum"),
        point(1356999000, 5, "count"),
        point(1357084800, 60, "sum"),
        point(1357085400, 4, "count"),
        point(1357171200, 90, "sum"),
        point(1357171200, 3, "count"),
        point(1357171800, 100, "sum"),
        point(1357171800, 5, "count"),
    ];
    send(&srv, "/api/rollup", &cells).await;
    let body = |ds: &str| {
        json!({"start": 1356998400, "end": 1359590400, "queries": [
            {"aggregator": "sum", "metric": "sys.cpu.user", "downsample": ds,
             "tags": {"host": "web01"}, "rollupUsage": "ROLLUP_FALLBACK"}]})
    };
    assert_eq!(
        values(&query(&srv, body("10m-avg")).await),
        [
            (1356998400000 / 1000, 10.0),
            (1356999000, 8.0),
            (1357171200, 30.0),
            (1357171800, 20.0)
        ]
    );
    // One day, falling back from the empty 1d and 1h tables to the 10m one: (20 + 40) /
    // (2 + 5) on the first, (90 + 100) / (3 + 5) on the third.
    assert_eq!(
        values(&query(&srv, body("1d-avg")).await),
        [(1356998400, 60.0 / 7.0), (1357171200, 190.0 / 8.0)]
    );
    assert_eq!(
        values(&query(&srv, body("1d-count")).await),
        [(1356998400, 7.0), (1357084800, 4.0), (1357171200, 8.0)]
    );
    // A fill policy fills the buckets without a pair.
    let filled = values(&query(&srv, json!({"start": 1356998400, "end": 1356999600 + 599,
        "queries": [{"aggregator": "sum", "metric": "sys.cpu.user", "downsample": "10m-avg-zero"}]})).await);
    assert_eq!(
        filled,
        [(1356998400, 10.0), (1356999000, 8.0), (1356999600, 0.0)]
    );

    // 2.4.1 still reads the older string qualifiers (`sum:` and `count:`, then the offset
    // and flags), written by older rollup jobs; here beside an id-form sum and count.
    send(
        &srv,
        "/api/rollup",
        &[
            json!({"metric": "m.old", "timestamp": T0, "value": 30, "tags": {"host": "web01"},
            "interval": "10m", "aggregator": "sum"}),
            json!({"metric": "m.old", "timestamp": T0, "value": 3, "tags": {"host": "web01"},
            "interval": "10m", "aggregator": "count"}),
        ],
    )
    .await;
    let store = srv.state.tsdb.store();
    let metric = srv
        .state
        .tsdb
        .uids()
        .get_id(hourglass_core::uid::UidKind::Metric, "m.old")
        .unwrap()
        .to_bytes(3);
    let key = store
        .scan(
            "tsdb-rollup-10m",
            &hourglass_storage::ScanRequest::range(Vec::new(), None),
        )
        .unwrap()
        .map(|r| r.unwrap().key)
        .find(|k| k[..3] == metric[..])
        .unwrap();
    // At T0 + 600 (offset 1): a sum of 8 and a count of 2, flags 0 (one-byte integers).
    store
        .mutate_row(
            "tsdb-rollup-10m",
            &key,
            &[
                hourglass_storage::Mutation::set("t", b"sum:\x00\x10".to_vec(), vec![8]),
                hourglass_storage::Mutation::set("t", b"count:\x00\x10".to_vec(), vec![2]),
            ],
        )
        .unwrap();
    let old = |ds: &str| {
        json!({"start": T0, "end": T0 + 1199, "queries": [
            {"aggregator": "sum", "metric": "m.old", "downsample": ds}]})
    };
    assert_eq!(
        values(&query(&srv, old("10m-sum")).await),
        [(T0, 30.0), (T0 + 600, 8.0)]
    );
    assert_eq!(
        values(&query(&srv, old("10m-avg")).await),
        [(T0, 10.0), (T0 + 600, 4.0)]
    );
    assert_eq!(values(&query(&srv, old("30m-count")).await), [(T0, 5.0)]);

    // run30mSumLongSingleTS: 10m sums 600, 1200, ... summed three at a time.
    let sums: Vec<Value> = (0..72)
        .map(|i| {
            json!({"metric": "m.long", "timestamp": T0 + 600 * i, "value": 600 * (i + 1),
            "tags": {"host": "web01"}, "interval": "10m", "aggregator": "sum"})
        })
        .collect();
    send(&srv, "/api/rollup", &sums).await;
    let a = values(
        &query(
            &srv,
            json!({"start": T0, "end": 1357041599,
        "queries": [{"aggregator": "sum", "metric": "m.long", "downsample": "30m-sum"}]}),
        )
        .await,
    );
    assert_eq!(a.len(), 24);
    for (i, (t, v)) in a.iter().enumerate() {
        assert_eq!(*t, T0 + 1800 * i as i64);
        assert_eq!(*v, 3600.0 + 5400.0 * i as f64);
    }
    srv.stop().await;
}

/// Pre-aggregates: a sub-query reads the pre-aggregate table when it asks for them
/// (`preAggregate`, `pre-agg`) or filters the aggregate tag on a value other than `RAW`, as
/// 2.4.1 decides it; at a rollup interval from that interval's pre-aggregate table, without
/// one from the default interval's (raw resolution).
async fn pre_aggregates_are_read_through_the_aggregate_tag(backend: &str) {
    let srv = start_with(backend, config()).await;
    let mut points = Vec::new();
    for h in 0..4 {
        for (agg, value) in [("sum", 10), ("max", 7)] {
            points.push(
                json!({"metric": "m.pre", "timestamp": T0 + 3600 * h, "value": value,
                "tags": {"dc": "lga"}, "interval": "1h", "aggregator": agg,
                "groupByAggregator": agg}),
            );
        }
    }
    points.push(json!({"metric": "m.pre", "timestamp": T0 + 60, "value": 5,
        "tags": {"dc": "lga"}, "groupByAggregator": "sum"}));
    send(&srv, "/api/rollup", &points).await;
    let range = json!({"start": T0, "end": T0 + 4 * 3600 - 1});
    let sub = |extra: Value| {
        let mut body = range.clone();
        let mut q = json!({"aggregator": "sum", "metric": "m.pre"});
        for (k, v) in extra.as_object().unwrap() {
            q[k] = v.clone();
        }
        body["queries"] = json!([q]);
        body
    };
    let hours = |v: f64| (0..4).map(|h| (T0 + 3600 * h, v)).collect::<Vec<_>>();
    for extra in [
        json!({"downsample": "1h-sum", "preAggregate": true, "tags": {"_aggregate": "SUM"}}),
        json!({"downsample": "1h-sum", "tags": {"_aggregate": "SUM"}}),
        json!({"downsample": "1h-sum", "filters": [{"type": "literal_or", "tagk": "_aggregate", "filter": "SUM", "groupBy": false}]}),
    ] {
        let a = query(&srv, sub(extra.clone())).await;
        assert_eq!(values(&a), hours(10.0), "{extra}");
        assert_eq!(a[0]["tags"]["_aggregate"], "SUM");
    }
    let a = query(
        &srv,
        sub(json!({"downsample": "1h-max", "tags": {"_aggregate": "MAX"}})),
    )
    .await;
    assert_eq!(values(&a), hours(7.0));
    let r = get(
        &srv,
        &format!(
            "/api/query?start={T0}&end={}&m=sum:1h-sum:pre-agg:m.pre%7B_aggregate=SUM%7D",
            T0 + 4 * 3600 - 1
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(values(&r.json()), hours(10.0));
    // At raw resolution: the default interval's pre-aggregate table.
    let a = query(&srv, sub(json!({"preAggregate": true}))).await;
    assert_eq!(values(&a), [(T0 + 60, 5.0)]);
    assert_eq!(
        a[0]["dps"][(T0 + 60).to_string()],
        5,
        "integers stay integers"
    );
    // Not asked for: the rollup table of raw series, which holds none of them.
    let a = query(&srv, sub(json!({"downsample": "1h-sum"}))).await;
    assert_eq!(a.as_array().unwrap(), &Vec::<Value>::new());
    srv.stop().await;
}

/// `tsd.rollups.tag_raw`: rollups of raw series carry `_aggregate=RAW`; a filter on the raw
/// value reads the rollup table (not the pre-aggregate one), as 2.4.1 decides it.
async fn raw_tagged_rollups_are_read_with_their_tag(backend: &str) {
    let mut c = config();
    c.set("tsd.rollups.tag_raw", "true");
    let srv = start_with(backend, c).await;
    let points: Vec<Value> = (0..3)
        .map(|h| {
            json!({"metric": "m.tagged", "timestamp": T0 + 3600 * h, "value": 4,
            "tags": {"host": "web01"}, "interval": "1h", "aggregator": "sum"})
        })
        .collect();
    send(&srv, "/api/rollup", &points).await;
    let body = |tags: Value| {
        json!({"start": T0, "end": T0 + 3 * 3600 - 1, "queries": [{"aggregator": "sum",
            "metric": "m.tagged", "downsample": "1h-sum", "tags": tags}]})
    };
    let expected: Vec<(i64, f64)> = (0..3).map(|h| (T0 + 3600 * h, 4.0)).collect();
    for tags in [json!({"_aggregate": "RAW"}), json!({})] {
        let a = query(&srv, body(tags.clone())).await;
        assert_eq!(values(&a), expected, "{tags}");
        assert_eq!(a[0]["tags"]["_aggregate"], "RAW");
    }
    srv.stop().await;
}

/// `/q` plans its sub-queries as `/api/query` does: the `1h-sum` rollups, or raw data with
/// `rollup_raw`.
async fn graphs_read_rollups_too(backend: &str) {
    let srv = start_with(backend, config()).await;
    usage_fixture(&srv).await;
    let range = format!("start={T0}&end={}", T0 + 3 * 3600 - 1);
    for (m, value) in [
        ("sum:1h-sum:m.usage", "100.0"),
        ("sum:1h-sum:rollup_raw:m.usage", "6.0"),
    ] {
        let r = get(&srv, &format!("/q?{range}&m={m}&ascii")).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let lines: Vec<String> = r.text().lines().map(str::to_string).collect();
        assert_eq!(
            lines,
            (0..3)
                .map(|h| format!("m.usage {} {value} host=web01", T0 + 3600 * h))
                .collect::<Vec<_>>(),
            "{m}"
        );
    }
    srv.stop().await;
}

/// A rollup table is read by whole rows, as 2.4.1's `TsdbQuery` scans it
/// (`getScanStartTimeSeconds`, `getScanEndTimeSeconds` with a rollup query): from the row
/// holding the start, the row before it too for a rate, to the row holding the end. Points
/// of those rows outside the range take part in the answer as 2.4.1 takes them: a rate's
/// first bucket is rated against the row before (raw data, whose scan starts at the start's
/// hour, leaves that first rate out), and a series is interpolated from points of the row
/// before the start and after the end.
async fn rollup_rows_are_read_whole(backend: &str) {
    let srv = start_with(backend, config()).await;
    // host=a: a `1h` sum every hour of two days, 10 per hour since T0; host=b: Jan 2 10:00
    // (100) and 15:00 (600) only.
    let mut rollups: Vec<Value> = (0..48)
        .map(|h| {
            json!({"metric": "m.rows", "timestamp": T0 + 3600 * h, "value": 10 * h,
            "tags": {"host": "a"}, "interval": "1h", "aggregator": "sum"})
        })
        .collect();
    for (h, v) in [(34, 100), (39, 600)] {
        rollups.push(
            json!({"metric": "m.rows", "timestamp": T0 + 3600 * h, "value": v,
            "tags": {"host": "b"}, "interval": "1h", "aggregator": "sum"}),
        );
    }
    send(&srv, "/api/rollup", &rollups).await;
    let body = |start: i64, end: i64, rate: bool, host: &str| {
        json!({"start": start, "end": end, "queries": [{"aggregator": "sum",
            "metric": "m.rows", "downsample": "1h-sum", "rate": rate,
            "filters": [{"type": if host == "*" { "wildcard" } else { "literal_or" },
                "tagk": "host", "filter": host, "groupBy": false}]}]})
    };
    // A rate from Jan 2 00:00, a row boundary: 2.4.1 reads Jan 1's row too, so 00:00 is
    // rated against Jan 1 23:00 (10 an hour).
    let day2 = T0 + DAY;
    let rate = 10.0 / 3600.0;
    let a = values(&query(&srv, body(day2, day2 + 3 * 3600 - 1, true, "a")).await);
    assert_eq!(a, [(day2, rate), (day2 + 3600, rate), (day2 + 7200, rate)]);
    // From 12:00 inside the row: its 11:00 bucket rates 12:00.
    let noon = day2 + 12 * 3600;
    let a = values(&query(&srv, body(noon, noon + 3600, true, "a")).await);
    assert_eq!(a, [(noon, rate), (noon + 3600, rate)]);
    // The sum of a and b over Jan 2 12:00 to 14:00: b is interpolated between its 10:00
    // and 15:00 sums (300, 400, 500), both outside the range but in the row read.
    let a = values(&query(&srv, body(noon, noon + 2 * 3600, false, "*")).await);
    assert_eq!(
        a,
        [
            (noon, 360.0 + 300.0),
            (noon + 3600, 370.0 + 400.0),
            (noon + 7200, 380.0 + 500.0)
        ]
    );
    // b over 16:00 to 17:00: its row is read, so it is answered, with no point in the
    // range (and a fallback would not be taken: the read found a series).
    let a = query(&srv, body(noon + 4 * 3600, noon + 5 * 3600, false, "b")).await;
    assert_eq!(values(&a), []);
    srv.stop().await;
}

/// `avg` over rollups takes each stored count as a `long`, as 2.4.1's `RollupSeq.valueCount`
/// does (`(long) doubleValue()` for a float count), before adding a bucket's counts: a
/// count of 2.5 is 2, one of 0.5 is 0 (and a bucket whose counts add to 0 is 0, `avoid #
/// / 0`). `count` itself adds the stored counts as doubles (`nextDoubleValue`).
async fn float_counts_are_read_as_longs(backend: &str) {
    let srv = start_with(backend, config()).await;
    let cell = |h: i64, agg: &str, v: f64| {
        json!({"metric": "m.fcount", "timestamp": T0 + 3600 * h, "value": v,
            "tags": {"host": "a"}, "interval": "1h", "aggregator": agg})
    };
    send(
        &srv,
        "/api/rollup",
        &[
            cell(0, "sum", 10.0),
            cell(0, "count", 2.5),
            cell(1, "sum", 9.0),
            cell(1, "count", 0.5),
        ],
    )
    .await;
    let body = |ds: &str| {
        json!({"start": T0, "end": T0 + 2 * 3600 - 1, "queries": [{"aggregator": "sum",
            "metric": "m.fcount", "downsample": ds}]})
    };
    assert_eq!(
        values(&query(&srv, body("1h-avg")).await),
        [(T0, 5.0), (T0 + 3600, 0.0)]
    );
    assert_eq!(values(&query(&srv, body("2h-avg")).await), [(T0, 9.5)]);
    assert_eq!(values(&query(&srv, body("2h-count")).await), [(T0, 3.0)]);
    srv.stop().await;
}

/// `dev` over rollups, with a `dev` id configured, as 2.4.1 runs it: the read takes the
/// `dev` cells and fails once it finds one (`RollupSeq` refuses them; Hourglass answers
/// the `Downsampler`'s words, a 400); finding none it answers nothing, or falls back to raw
/// data with `ROLLUP_FALLBACK_RAW`.
async fn dev_over_rollups_fails_only_on_dev_cells(backend: &str) {
    let mut c = config();
    c.set(
        "tsd.rollups.config",
        &CONFIG
            .replace('\n', "")
            .replace(r#""min":3}"#, r#""min":3,"dev":4}"#),
    );
    c.set("tsd.rollups.block_derived", "false");
    let srv = start_with(backend, c).await;
    // Raw points 1 and 3 in the first hour (population deviation 1), and a `1h` sum rollup.
    let raw: Vec<Value> = [(0, 1), (600, 3)]
        .iter()
        .map(|(t, v)| json!({"metric": "m.dev", "timestamp": T0 + t, "value": v, "tags": {"host": "a"}}))
        .collect();
    send(&srv, "/api/put", &raw).await;
    let sum = json!({"metric": "m.dev", "timestamp": T0, "value": 4, "tags": {"host": "a"},
        "interval": "1h", "aggregator": "sum"});
    send(&srv, "/api/rollup", &[sum]).await;
    let body = |usage: Option<&str>| {
        let mut sub = json!({"aggregator": "sum", "metric": "m.dev", "downsample": "1h-dev"});
        if let Some(u) = usage {
            sub["rollupUsage"] = json!(u);
        }
        json!({"start": T0, "end": T0 + 3599, "queries": [sub]})
    };
    assert_eq!(query(&srv, body(None)).await, json!([]));
    assert_eq!(
        values(&query(&srv, body(Some("ROLLUP_FALLBACK_RAW"))).await),
        [(T0, 1.0)]
    );
    let dev = json!({"metric": "m.dev", "timestamp": T0, "value": 1, "tags": {"host": "a"},
        "interval": "1h", "aggregator": "dev"});
    send(&srv, "/api/rollup", &[dev]).await;
    for usage in [None, Some("ROLLUP_FALLBACK_RAW")] {
        let r = post(&srv, "/api/query", &body(usage)).await;
        assert_eq!(r.status, 400, "{usage:?}: {}", r.text());
        assert_eq!(
            r.json()["error"]["message"],
            "Standard deviation over rolled up data is not supported at this time"
        );
    }
    srv.stop().await;
}

/// A rollup cell whose first byte has the compacted bit (0x80) over the read's id is not
/// read: 2.4.1's scan keeps the cells whose first byte is the id itself (its qualifier
/// filters), so such a cell never reaches `RollupSeq` (which would mask the bit off).
async fn compacted_rollup_cells_are_not_read(backend: &str) {
    use hourglass_storage::{Mutation, RowMutation};
    let srv = start_with(backend, config()).await;
    for agg in ["sum", "count"] {
        let p = json!({"metric": "m.compacted", "timestamp": T0, "value": 5,
            "tags": {"host": "a"}, "interval": "1h", "aggregator": agg});
        send(&srv, "/api/rollup", &[p]).await;
    }
    let store = srv.state.tsdb.store();
    let table = "tsdb-rollup-1h";
    let request = hourglass_storage::ScanRequest::range(Vec::new(), None);
    let key = store
        .scan(table, &request)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .key;
    // 01:00 (offset 1, a one-byte integer) under the compacted `sum` and `count` ids.
    let cell = |id: u8, v: u8| Mutation::SetCell {
        family: "t".into(),
        qualifier: vec![id, 0x00, 0x10],
        timestamp: None,
        value: vec![v],
    };
    store
        .mutate_rows(
            table,
            &[RowMutation {
                key,
                mutations: vec![cell(0x80, 7), cell(0x81, 1)],
            }],
        )
        .unwrap();
    for ds in ["1h-sum", "1h-avg", "2h-sum"] {
        let body = json!({"start": T0, "end": T0 + 2 * 3600 - 1, "queries": [{
            "aggregator": "sum", "metric": "m.compacted", "downsample": ds}]});
        let want = if ds == "1h-avg" { 1.0 } else { 5.0 };
        assert_eq!(values(&query(&srv, body).await), [(T0, want)], "{ds}");
    }
    srv.stop().await;
}

/// 2.4.1's `TestTsdbQueryRollup` `10m` sums over its fixture (`storeLongRollup`,
/// `storeFloatRollup`: `web01` rising by 600 a cell from 600, or from 600.5, over
/// 2013-01-01 00:00 to 12:00, `web02` the same values falling): the sum of both is 43,800
/// at each of the 73 times (`run10mSumLongDoubleTS`), and the rate of `web01` is 1.0 from
/// 00:10 on, 72 of them, long or float cells (`run10mSumLongSingleTSRate`,
/// `run10mSumFloatSingleTSRate`): the row before 00:00, read for the rate, is empty.
async fn test_tsdb_query_rollup_sums_and_rates(backend: &str) {
    let srv = start_with(backend, config()).await;
    for (metric, start) in [("m.long", 600.0), ("m.float", 600.5)] {
        let mut points = Vec::new();
        for k in 0..73 {
            let t = T0 + 600 * k;
            let up = start + 600.0 * k as f64;
            let down = 600.0 * 73.0 + start - 600.0 - up;
            for (host, v) in [("web01", up), ("web02", down)] {
                let v = if metric == "m.long" {
                    json!(v as i64)
                } else {
                    json!(v)
                };
                points.push(json!({"metric": metric, "timestamp": t, "value": v,
                    "tags": {"host": host}, "interval": "10m", "aggregator": "sum"}));
            }
        }
        send(&srv, "/api/rollup", &points).await;
    }
    let body = |metric: &str, host: &str, rate: bool| {
        json!({"start": T0, "end": T0 + 43_200, "queries": [{"aggregator": "sum",
            "metric": metric, "downsample": "10m-sum", "rate": rate,
            "filters": [{"type": if host == "*" { "wildcard" } else { "literal_or" },
                "tagk": "host", "filter": host, "groupBy": false}]}]})
    };
    let sums = values(&query(&srv, body("m.long", "*", false)).await);
    assert_eq!(
        sums,
        (0..73)
            .map(|k| (T0 + 600 * k, 43_800.0))
            .collect::<Vec<_>>()
    );
    for metric in ["m.long", "m.float"] {
        let rates = values(&query(&srv, body(metric, "web01", true)).await);
        assert_eq!(
            rates,
            (1..73).map(|k| (T0 + 600 * k, 1.0)).collect::<Vec<_>>(),
            "{metric}"
        );
    }
    srv.stop().await;
}

/// Past a tier's retention cutoff nothing takes part, not even a rate's bucket before the
/// range: the `1h` tier kept 2 days, a rate from the first hour after the cutoff leaves that
/// hour's rate out (its bucket before is before the cutoff), whether or not the sweep
/// removed that bucket's row yet.
async fn rollup_rates_leave_out_buckets_before_the_retention_cutoff(backend: &str) {
    let mut c = config();
    c.set(
        "tsd.rollups.config",
        &CONFIG.replace('\n', "").replace(
            r#""interval":"1h","rowSpan":"1d"}"#,
            r#""interval":"1h","rowSpan":"1d","retention":"2d"}"#,
        ),
    );
    let srv = start_with(backend, c).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let first = now / 3600 - 72;
    let cells: Vec<Value> = (first..=now / 3600)
        .map(|h| {
            json!({"metric": "m.ret", "timestamp": h * 3600, "value": 10 * (h - first),
            "tags": {"host": "a"}, "interval": "1h", "aggregator": "sum"})
        })
        .collect();
    send(&srv, "/api/rollup", &cells).await;
    // The first hour at least two minutes after the cutoff (now - 2 days).
    let hour = ((now - 2 * DAY + 120) / 3600 + 1) * 3600;
    let body = json!({"start": hour, "end": hour + 2 * 3600 - 1, "queries": [{
        "aggregator": "sum", "metric": "m.ret", "downsample": "1h-sum", "rate": true}]});
    assert_eq!(
        values(&query(&srv, body).await),
        [(hour + 3600, 10.0 / 3600.0)]
    );
    srv.stop().await;
}

/// Pre-aggregates at raw resolution (the default interval's pre-aggregate table, with
/// `ROLLUP_RAW`) are read as raw data is, as 2.4.1 reads them without a rollup query: a
/// point every half hour valued by its index, `90m-sum-zero` rates from T0+4h30m (the scan
/// starts at T0+4h, in the bucket from T0+3h): that bucket, filled with 0 and before the
/// scan start, is not rated against, so T0+4h30m's rate is the series' unanswered first
/// one, as for raw data (`query_semantics.rs`,
/// `downsampling_starts_at_the_first_bucket_boundary_of_the_scan`).
async fn raw_resolution_pre_aggregates_rate_as_raw_data(backend: &str) {
    let srv = start_with(backend, config()).await;
    let points: Vec<Value> = (0..20)
        .map(|k| {
            json!({"metric": "m.half", "timestamp": T0 + k * 1800, "value": k,
            "tags": {"host": "a"}, "groupByAggregator": "sum"})
        })
        .collect();
    send(&srv, "/api/rollup", &points).await;
    let body = json!({"start": T0 + 4 * 3600 + 1800, "end": T0 + 8 * 3600, "queries": [{
        "aggregator": "sum", "metric": "m.half", "downsample": "90m-sum-zero", "rate": true,
        "preAggregate": true, "rollupUsage": "ROLLUP_RAW"}]});
    assert_eq!(
        values(&query(&srv, body).await),
        [
            (T0 + 6 * 3600, 9.0 / 5400.0),
            (T0 + 7 * 3600 + 1800, 9.0 / 5400.0)
        ]
    );
    srv.stop().await;
}

on_every_backend!(
    rollup_queries_equal_the_raw_downsample,
    rollup_usages_choose_and_fall_back_as_opentsdb,
    averages_come_from_sums_and_counts,
    pre_aggregates_are_read_through_the_aggregate_tag,
    raw_tagged_rollups_are_read_with_their_tag,
    graphs_read_rollups_too,
    rollup_rows_are_read_whole,
    float_counts_are_read_as_longs,
    dev_over_rollups_fails_only_on_dev_cells,
    compacted_rollup_cells_are_not_read,
    test_tsdb_query_rollup_sums_and_rates,
    rollup_rates_leave_out_buckets_before_the_retention_cutoff,
    raw_resolution_pre_aggregates_rate_as_raw_data,
);
