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
async fn dps(srv: &TestServer, body: Value) -> Dps {
    let r = http(srv.addr, "POST", "/api/query", &body.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v.as_array().map(Vec::len), Some(1), "one group: {v}");
    Dps(v[0]["dps"].clone())
}

/// Answered `dps`, equal to an expected JSON value when that value, written and read back
/// as the answer was, is the same: the JSON reader may take a double's text to a
/// neighbouring double, the same way on both sides.
#[derive(Debug)]
struct Dps(Value);

impl PartialEq<Value> for Dps {
    fn eq(&self, want: &Value) -> bool {
        serde_json::from_str::<Value>(&want.to_string()).is_ok_and(|w| w == self.0)
    }
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
    // Filled, the bucket from T+3h is empty (0), not 8 (the point at T+4h); it is before
    // the scan start, so its rate is skipped and the next one (T+4h30m's, 30 / 5400) is
    // the series' unanswered first rate.
    assert_eq!(
        dps(&srv, range("90m-sum-zero")).await,
        json!({"1357020000": 9.0 / 5400.0, "1357025400": 9.0 / 5400.0}),
    );
    // Every filled series has the same buckets, so none answers a rate at T+4h30m: with b
    // (9 at T+4h30m, 21 at T+6h; its point at T+3h15m is before the first boundary of the
    // scan and not taken), the sums are a's and b's rates at T+6h and T+7h30m.
    put(
        &srv,
        &[
            format!("put m.half {} 5 host=b", T + 3 * 3600 + 900),
            format!("put m.half {} 9 host=b", T + 4 * 3600 + 1800),
            format!("put m.half {} 21 host=b", T + 6 * 3600),
        ],
    )
    .await;
    assert_eq!(
        dps(
            &srv,
            body(
                T + 4 * 3600 + 1800,
                T + 8 * 3600,
                sub(
                    "sum",
                    "m.half",
                    json!({"downsample": "90m-sum-zero", "rate": true})
                ),
            )
        )
        .await,
        json!({"1357020000": 9.0 / 5400.0 + 12.0 / 5400.0,
               "1357025400": 9.0 / 5400.0 + -21.0 / 5400.0}),
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

/// Checked against OpenTSDB's code and found the same (pinned here): points outside
/// `[start, end]` in the scanned hours take part in interpolation and rates, then are left
/// out; a bucket is in when its time is, with all its points (past the end too); `0all`
/// takes `[start, end)`; a float anywhere in a series not yet ended makes the time a double,
/// interpolated in doubles; integer interpolation truncates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn points_around_the_range_and_integer_or_double_times() {
    let srv = start("memory").await;
    let p = |m: &str, t: i64, v: &str, h: &str| format!("put {m} {} {v} host={h}", T + t);
    put(
        &srv,
        &[
            p("m.pre", 0, "0", "a"),
            p("m.pre", 30, "30", "a"),
            p("m.pre", 20, "100", "b"),
            p("m.post", 0, "0", "a"),
            p("m.post", 60, "60", "a"),
            p("m.post", 30, "100", "b"),
            p("m.ds", 300, "1", "a"),
            p("m.ds", 350, "2", "a"),
            p("m.ds", 360, "4", "a"),
            p("m.ds", 410, "8", "a"),
            p("m.rate", 100, "10", "a"),
            p("m.rate", 110, "20", "a"),
            p("m.rate", 120, "40", "a"),
            p("m.mix", 0, "1", "a"),
            p("m.mix", 30, "4", "a"),
            p("m.mix", 10, "2.5", "b"),
            p("m.mix", 40, "3", "b"),
            p("m.lerp", 0, "0", "a"),
            p("m.lerp", 30, "10", "a"),
            p("m.lerp", 10, "5", "b"),
        ],
    )
    .await;
    let q = |start: i64, end: i64, agg: &str, m: &str, extra: Value| {
        body(T + start, T + end, sub(agg, m, extra))
    };
    // a's point before the start is interpolated from at T+20 (0..30 -> 20).
    assert_eq!(
        dps(&srv, q(15, 40, "sum", "m.pre", json!({}))).await,
        json!({"1356998420": 120, "1356998430": 30})
    );
    // a's point after the end too (0..60 at T+30 -> 30).
    assert_eq!(
        dps(&srv, q(0, 40, "sum", "m.post", json!({}))).await,
        json!({"1356998400": 0, "1356998430": 130})
    );
    // The bucket of T+360 holds the point at T+410, after the end; the bucket of T+300 is
    // before the start T+330.
    assert_eq!(
        dps(
            &srv,
            q(330, 390, "sum", "m.ds", json!({"downsample": "1m-sum"}))
        )
        .await,
        json!({"1356998760": 12.0})
    );
    // `0all`: T+300 to T+410, the end left out.
    assert_eq!(
        dps(
            &srv,
            q(300, 410, "sum", "m.ds", json!({"downsample": "0all-sum"}))
        )
        .await,
        json!({"1356998700": 7.0})
    );
    // The first rate in range is against the point before the start.
    assert_eq!(
        dps(&srv, q(105, 200, "sum", "m.rate", json!({"rate": true}))).await,
        json!({"1356998510": 1.0, "1356998520": 2.0})
    );
    // b's float makes every time doubles until its last point; a is interpolated in
    // doubles (1..4 at T+10 -> 2.0); at T+40 b's last point alone is an integer.
    let mix = |agg: &str| q(0, 100, agg, "m.mix", json!({}));
    assert_eq!(
        dps(&srv, mix("sum")).await,
        json!({"1356998400": 1.0, "1356998410": 4.5,
               "1356998430": 4.0 + (2.5 + 20.0 * 0.5 / 30.0), "1356998440": 3})
    );
    assert_eq!(
        dps(&srv, mix("first")).await,
        json!({"1356998400": 1.0, "1356998410": 0.0, "1356998430": 4.0, "1356998440": 3}),
        "first's interpolation is zero"
    );
    assert_eq!(
        dps(&srv, mix("diff")).await,
        json!({"1356998400": 0.0, "1356998410": 0.5,
               "1356998430": (2.5 + 20.0 * 0.5 / 30.0) - 4.0, "1356998440": 0})
    );
    assert_eq!(
        dps(&srv, mix("p50")).await,
        json!({"1356998400": 1.0, "1356998410": 2.25,
               "1356998430": (4.0 + (2.5 + 20.0 * 0.5 / 30.0)) / 2.0, "1356998440": 3})
    );
    assert_eq!(
        dps(&srv, mix("pfsum")).await,
        json!({"1356998400": 1.0, "1356998410": 3.5, "1356998430": 6.5, "1356998440": 3})
    );
    // Integers: 0..10 over 30 s at T+10 is 3 (10 * 10 / 30 truncated); avg 8 / 2.
    assert_eq!(
        dps(&srv, q(0, 100, "sum", "m.lerp", json!({}))).await,
        json!({"1356998400": 0, "1356998410": 8, "1356998430": 10})
    );
    assert_eq!(
        dps(&srv, q(0, 100, "avg", "m.lerp", json!({}))).await,
        json!({"1356998400": 0, "1356998410": 4, "1356998430": 10})
    );
    srv.stop().await;
}

/// Checked and found the same (pinned here): fill policies fill every bucket of the
/// range, a series starting inside it too; rates of filled buckets; counters (wrap at
/// `counterMax`, `resetValue`, `dropResets`); rates of several series (a series' latest
/// rate, before its second point its rate against (0, 0)); downsampled series missing
/// buckets interpolated across.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fills_counters_and_rates_across_series() {
    let srv = start("memory").await;
    let p = |m: &str, t: i64, v: &str, h: &str| format!("put {m} {} {v} host={h}", T + t);
    put(
        &srv,
        &[
            p("m.fill", 120, "5", "a"),
            p("m.fill", 240, "7", "a"),
            p("m.ctr", 10, "100", "a"),
            p("m.ctr", 20, "150", "a"),
            p("m.ctr", 30, "20", "a"),
            p("m.ctr", 40, "40.5", "a"),
            p("m.r", 10, "0", "a"),
            p("m.r", 20, "10", "a"),
            p("m.r", 30, "30", "a"),
            p("m.r", 15, "100", "b"),
            p("m.r", 25, "50", "b"),
            p("m.g", 0, "10", "a"),
            p("m.g", 120, "30", "a"),
            p("m.g", 60, "5", "b"),
            p("m.g", 60, "1", "c"),
            p("m.g", 180, "2", "c"),
        ],
    )
    .await;
    let q = |agg: &str, m: &str, extra: Value| body(T, T + 300, sub(agg, m, extra));
    let r = http(
        srv.addr,
        "POST",
        "/api/query",
        &q("sum", "m.fill", json!({"downsample": "1m-avg-null"})).to_string(),
    )
    .await;
    assert!(
        r.text().contains(
            r#""dps":{"1356998400":null,"1356998460":null,"1356998520":5.0,"1356998580":null,"1356998640":7.0,"1356998700":null}"#
        ),
        "{}",
        r.text()
    );
    assert_eq!(
        dps(
            &srv,
            q(
                "sum",
                "m.fill",
                json!({"downsample": "1m-avg-zero", "rate": true})
            )
        )
        .await,
        json!({"1356998460": 0.0, "1356998520": 5.0 / 60.0, "1356998580": -5.0 / 60.0,
               "1356998640": 7.0 / 60.0, "1356998700": -7.0 / 60.0})
    );
    let ctr = |o: Value| q("sum", "m.ctr", json!({"rate": true, "rateOptions": o}));
    assert_eq!(
        dps(&srv, ctr(json!({"counter": true, "counterMax": 200}))).await,
        json!({"1356998420": 5.0, "1356998430": 7.0, "1356998440": 2.05})
    );
    assert_eq!(
        dps(
            &srv,
            ctr(json!({"counter": true, "counterMax": 200, "resetValue": 6}))
        )
        .await,
        json!({"1356998420": 5.0, "1356998430": 0.0, "1356998440": 2.05})
    );
    assert_eq!(
        dps(&srv, ctr(json!({"counter": true, "dropResets": true}))).await,
        json!({"1356998420": 5.0, "1356998440": 2.05})
    );
    // a: rates 1 (T+20), 2 (T+30); b: 100 / (T+15) before T+25, then -5.
    assert_eq!(
        dps(&srv, q("sum", "m.r", json!({"rate": true}))).await,
        json!({"1356998420": 1.0 + 100.0 / (T + 15) as f64, "1356998425": -4.0,
               "1356998430": 2.0})
    );
    assert_eq!(
        dps(
            &srv,
            q("sum", "m.r", json!({"rate": true, "downsample": "10s-sum"}))
        )
        .await,
        json!({"1356998420": -4.0, "1356998430": 2.0})
    );
    // At T+60 a is 20 (10..30), at T+120 c is 1.5 (1..2); b ended at T+60.
    assert_eq!(
        dps(&srv, q("sum", "m.g", json!({"downsample": "1m-avg"}))).await,
        json!({"1356998400": 10.0, "1356998460": 26.0, "1356998520": 31.5, "1356998580": 2.0})
    );
    assert_eq!(
        dps(&srv, q("ep90r7", "m.g", json!({}))).await,
        json!({"1356998400": 10, "1356998460": 16, "1356998520": 27, "1356998580": 2}),
        "R-7 on integers: 5 + 0.7999999999999998 * 15, truncated"
    );
    srv.stop().await;
}

/// OpenTSDB rates a series' first point against (0, 0) with the counter's options, as any
/// other: when that is a reset dropped (`dropResets`, a counter starting below zero), the
/// next rate takes the unanswered first place, so the series' first answered rate is its
/// third point's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_first_reset_moves_the_hidden_rate() {
    let srv = start("memory").await;
    put(
        &srv,
        &[
            format!("put m.neg {} -5 host=a", T + 10),
            format!("put m.neg {} 5 host=a", T + 20),
            format!("put m.neg {} 35 host=a", T + 30),
            format!("put m.neg {} 0 host=b", T + 15),
            format!("put m.neg {} 20 host=b", T + 25),
        ],
    )
    .await;
    let q = |tags: Value| {
        body(
            T,
            T + 100,
            sub(
                "sum",
                "m.neg",
                json!({"rate": true, "tags": tags,
                       "rateOptions": {"counter": true, "dropResets": true}}),
            ),
        )
    };
    // a: the rate at T+20 (1.0) stands first, unanswered; T+30 is 3.0.
    assert_eq!(
        dps(&srv, q(json!({"host": "a"}))).await,
        json!({"1356998430": 3.0})
    );
    // With b (0.0 first, 2.0 at T+25): at T+25 a's standing rate is 1.0.
    assert_eq!(
        dps(&srv, q(json!({}))).await,
        json!({"1356998425": 3.0, "1356998430": 3.0})
    );
    srv.stop().await;
}

/// The scan ends as OpenTSDB's: the hour after the end's second plus one, or when
/// downsampling after that second's next interval boundary unless that boundary starts an
/// hour. Points after the end in those hours are interpolated to; later ones are not read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scan_ends_where_opentsdbs_does() {
    let srv = start("memory").await;
    let p = |m: &str, t: i64, v: i64, h: &str| format!("put {m} {} {v} host={h}", T + t);
    put(
        &srv,
        &[
            p("m.end", 300, 10, "a"),
            p("m.end", 3900, 20, "a"),
            p("m.end", 7500, 30, "a"),
            p("m.end", 300, 100, "b"),
            p("m.end", 7500, 300, "b"),
            p("m.last", 0, 0, "a"),
            p("m.last", 3660, 60, "a"),
            p("m.last", 1800, 100, "b"),
        ],
    )
    .await;
    // `1h-avg` to T+1h30m: the scan ends at T+2h, so b has no bucket after T (it ends
    // there) and the sum at T+1h is a's alone.
    assert_eq!(
        dps(
            &srv,
            body(
                T,
                T + 5400,
                sub("sum", "m.end", json!({"downsample": "1h-avg"}))
            )
        )
        .await,
        json!({"1356998400": 110.0, "1357002000": 20.0})
    );
    // Ending in an hour's last second, the scan reads the next hour: a is interpolated
    // at T+30m toward its point at T+1h1m (0 + 1800 * 60 / 3660, truncated: 29).
    assert_eq!(
        dps(&srv, body(T, T + 3599, sub("sum", "m.last", json!({})))).await,
        json!({"1356998400": 0, "1357000200": 129})
    );
    // Left different on purpose: filled calendar days in New York (UTC-5) to 11:00 on
    // January 2nd. OpenTSDB's fill stops at the New York day holding its scan's end (UTC
    // midnight of January 3rd), January 2nd's start, so it drops that day; here it is
    // filled.
    put(&srv, &[p("m.ny", 36_000, 1, "a")]).await;
    assert_eq!(
        dps(
            &srv,
            json!({"start": T + 5 * 3600, "end": T + 40 * 3600,
                   "timezone": "America/New_York", "useCalendar": true,
                   "queries": [sub("sum", "m.ny", json!({"downsample": "1d-sum-zero"}))]})
        )
        .await,
        json!({"1357016400": 1.0, "1357102800": 0.0})
    );
    srv.stop().await;
}
