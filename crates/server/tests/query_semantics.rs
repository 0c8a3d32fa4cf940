#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The numbers and times `/api/query` answers, against OpenTSDB 2.4.1's arithmetic
//! (`Aggregators`, `AggregationIterator`, `Downsampler`, `FillingDownsampler`, `RateSpan`,
//! `TsdbQuery`'s scan bounds and `SpanGroup`), over a real server: each expected answer is
//! worked out by hand from that code for small series (see
//! `docs/research/opentsdb-query-semantics.md`).
mod common;

use common::{TestServer, http, start, telnet};
use serde_json::{Value, json};

/// 2013-01-01 00:00:00 UTC, on an hour (and a day).
const T: i64 = 1356998400;

/// Stores telnet `put` lines, each line's UIDs assigned in the order given.
async fn put(srv: &TestServer, lines: &[String]) {
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    assert_eq!(telnet(srv.addr, &text).await, Vec::<String>::new());
}

/// The `dps` of the only group `body` answers.
async fn dps(srv: &TestServer, body: Value) -> Value {
    let r = http(srv.addr, "POST", "/api/query", &body.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v.as_array().map(Vec::len), Some(1), "one group: {v}");
    v[0]["dps"].clone()
}

fn sub(agg: &str, metric: &str, extra: Value) -> Value {
    let mut q = json!({"aggregator": agg, "metric": metric});
    if let (Some(q), Some(extra)) = (q.as_object_mut(), extra.as_object()) {
        q.extend(extra.clone());
    }
    q
}

fn body(start: i64, end: i64, q: Value) -> Value {
    json!({"start": start, "end": end, "queries": [q]})
}

/// A group's series are taken in row-key order (metric, then tag UIDs: OpenTSDB's span
/// map), whatever order they first appear in: `first`, `last` and `diff` pick by it. Here
/// `host=a` has the smaller UID but its first point is an hour after `host=b`'s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_series_are_in_row_key_order() {
    for backend in ["memory", "embedded"] {
        let srv = start(backend).await;
        put(&srv, &[format!("put m.ord {} 1 host=a", T + 3610)]).await;
        put(
            &srv,
            &[
                format!("put m.ord {} 2 host=b", T + 10),
                format!("put m.ord {} 3 host=b", T + 3610),
            ],
        )
        .await;
        let at = |agg: &str| sub(agg, "m.ord", json!({}));
        let range = |q| body(T, T + 7200, q);
        // At T+10 only b has started; at T+3610 both have a point: a's first.
        assert_eq!(
            dps(&srv, range(at("first"))).await,
            json!({"1356998410": 2, "1357002010": 1}),
            "{backend}"
        );
        assert_eq!(
            dps(&srv, range(at("last"))).await,
            json!({"1356998410": 2, "1357002010": 3}),
            "{backend}"
        );
        assert_eq!(
            dps(&srv, range(at("diff"))).await,
            json!({"1356998410": 0, "1357002010": 2}),
            "{backend}"
        );
        srv.stop().await;
    }
}

/// Downsampling reads the whole bucket holding the start (OpenTSDB's scan starts at the
/// start taken back to its interval, then to its hour): the bucket is left out of the
/// answer, but the rate of the next one is against all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downsampled_rate_reads_the_whole_bucket_before_the_start() {
    let srv = start("memory").await;
    // One point an hour for three days, valued by its hour: the days sum to 276, 852, 1428.
    let lines: Vec<String> = (0..72)
        .map(|h| format!("put m.day {} {h} host=a", T + h * 3600))
        .collect();
    put(&srv, &lines).await;
    let mid_day = T + 12 * 3600;
    let ds = |extra: Value| body(mid_day, T + 72 * 3600, sub("sum", "m.day", extra));
    assert_eq!(
        dps(&srv, ds(json!({"downsample": "1d-sum"}))).await,
        json!({"1357084800": 852.0, "1357171200": 1428.0}),
        "the first day's bucket is before the start"
    );
    assert_eq!(
        dps(&srv, ds(json!({"downsample": "1d-sum", "rate": true}))).await,
        json!({"1357084800": 576.0 / 86400.0, "1357171200": 576.0 / 86400.0}),
        "rates against whole days"
    );
    // The same with a 90-minute interval, which does not divide an hour: the bucket of the
    // start (T+4h30m..T+6h) begins an hour before the start's hour. A point every half hour,
    // valued by its index: the buckets from T+4h30m sum to 9+10+11, 12+13+14, 15+16+17.
    let lines: Vec<String> = (0..20)
        .map(|k| format!("put m.half {} {k} host=a", T + k * 1800))
        .collect();
    put(&srv, &lines).await;
    let r = dps(
        &srv,
        body(
            T + 5 * 3600 + 15 * 60,
            T + 8 * 3600,
            sub(
                "sum",
                "m.half",
                json!({"downsample": "90m-sum", "rate": true}),
            ),
        ),
    )
    .await;
    assert_eq!(
        r,
        json!({"1357020000": 9.0 / 5400.0, "1357025400": 9.0 / 5400.0}),
        "rates against whole buckets"
    );
    srv.stop().await;
}

/// A bucket the scan reads only the end of is not reduced from part of its points:
/// OpenTSDB's downsampler, sought to the scan's first hour, starts at the first bucket
/// boundary there, so a rate's first bucket is the one after it (or a filled one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downsampling_starts_at_the_first_bucket_boundary_of_the_scan() {
    let srv = start("memory").await;
    // A point every half hour, valued by its index.
    let lines: Vec<String> = (0..20)
        .map(|k| format!("put m.half {} {k} host=a", T + k * 1800))
        .collect();
    put(&srv, &lines).await;
    // 90-minute buckets from T+4h30m, where the range starts; the scan starts at T+4h, in
    // the bucket from T+3h. Buckets: {9, 10, 11} = 30, {12, 13, 14} = 39, {15, 16, 17} = 48.
    let range = |ds: &str| {
        body(
            T + 4 * 3600 + 1800,
            T + 8 * 3600,
            sub("sum", "m.half", json!({"downsample": ds, "rate": true})),
        )
    };
    assert_eq!(
        dps(&srv, range("90m-sum")).await,
        json!({"1357020000": 9.0 / 5400.0, "1357025400": 9.0 / 5400.0}),
        "the first bucket's rate is the hidden one"
    );
    // Filled, the bucket from T+3h is empty (0), not 8 (the point at T+4h).
    assert_eq!(
        dps(&srv, range("90m-sum-zero")).await,
        json!({"1357014600": 30.0 / 5400.0, "1357020000": 9.0 / 5400.0,
               "1357025400": 9.0 / 5400.0}),
    );
    // Calendar days in New York (UTC-5): the scan starts at the UTC day (T), the first New
    // York day at T+5h. One point an hour valued by its hour: the New York days from
    // T+5h sum to 5+...+28 = 396, 29+...+52 = 972, 53+...+71 = 1178.
    let lines: Vec<String> = (0..72)
        .map(|h| format!("put m.day {} {h} host=a", T + h * 3600))
        .collect();
    put(&srv, &lines).await;
    let ny = |rate: bool| {
        json!({"start": T + 5 * 3600, "end": T + 72 * 3600, "timezone": "America/New_York",
               "useCalendar": true,
               "queries": [sub("sum", "m.day", json!({"downsample": "1d-sum", "rate": rate}))]})
    };
    assert_eq!(
        dps(&srv, ny(false)).await,
        json!({"1357016400": 396.0, "1357102800": 972.0, "1357189200": 1178.0})
    );
    assert_eq!(
        dps(&srv, ny(true)).await,
        json!({"1357102800": 576.0 / 86400.0, "1357189200": 206.0 / 86400.0}),
        "no rate against the part of New York's December 31st the scan read"
    );
    srv.stop().await;
}

/// The answer's text (signed zeros compare equal as JSON values).
async fn text(srv: &TestServer, body: Value) -> String {
    let r = http(srv.addr, "POST", "/api/query", &body.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.text()
}

/// OpenTSDB's sums start from `0.` (`Sum.runDouble`, `SquareSum`): values that are all
/// -0.0 sum to 0.0, whether several series meet, one series is alone, or a bucket is
/// downsampled. `min` and `max` keep the first of equal values (0.0 and -0.0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sums_of_negative_zeros_are_zero() {
    let srv = start("memory").await;
    put(
        &srv,
        &[
            format!("put m.z {T} -0.0 host=a"),
            format!("put m.z {T} -0.0 host=b"),
            format!("put m.z {} -0.0 host=a", T + 30),
        ],
    )
    .await;
    let range = |q: Value| body(T, T + 100, q);
    for agg in ["sum", "zimsum", "pfsum"] {
        assert!(
            text(&srv, range(sub(agg, "m.z", json!({}))))
                .await
                .contains(r#""dps":{"1356998400":0.0,"1356998430":0.0}"#),
            "{agg} of two series"
        );
        assert!(
            text(&srv, range(sub(agg, "m.z", json!({"tags": {"host": "a"}}))))
                .await
                .contains(r#""dps":{"1356998400":0.0,"1356998430":0.0}"#),
            "{agg} of one series"
        );
        let ds = text(
            &srv,
            range(sub(agg, "m.z", json!({"downsample": "1m-sum"}))),
        )
        .await;
        assert!(ds.contains(r#""dps":{"1356998400":0.0}"#), "{agg}: {ds}");
    }
    let ds = text(
        &srv,
        range(sub("none", "m.z", json!({"downsample": "1m-squareSum"}))),
    )
    .await;
    assert!(!ds.contains("-0.0"), "{ds}");
    for agg in ["min", "max"] {
        assert!(
            text(&srv, range(sub(agg, "m.z", json!({}))))
                .await
                .contains(r#""dps":{"1356998400":-0.0,"1356998430":-0.0}"#),
            "{agg}"
        );
    }
    // Of 0.0 (host=a, first in row-key order) and -0.0 at one time, `min` and `max` keep
    // the first: `val < min` and `val > max` are false for equal values.
    put(
        &srv,
        &[
            format!("put m.tie {T} 0.0 host=a"),
            format!("put m.tie {T} -0.0 host=b"),
        ],
    )
    .await;
    for agg in ["min", "max", "mimmin", "mimmax"] {
        let t = text(&srv, range(sub(agg, "m.tie", json!({})))).await;
        assert!(t.contains(r#""dps":{"1356998400":0.0}"#), "{agg}: {t}");
    }
    srv.stop().await;
}
