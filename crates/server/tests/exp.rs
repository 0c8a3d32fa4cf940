#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `/api/query/exp` end to end over real sockets, on the memory, embedded and Bigtable (emulator) backends:
//! requests against tables worked out by hand from the points below, joins, fill policies,
//! nested expressions, outputs, every documented error, and `a + b` against `/api/query`.
#[macro_use]
mod common;

use common::{Response, TestServer, http, start};
use serde_json::{Value, json};

/// 2013-01-01T00:00:00Z.
const T0: i64 = 1356998400;
const MS: i64 = T0 * 1000;

/// The points every test reads (offsets in seconds from [`T0`]).
///
/// ```text
/// e.a{host=h1}:  0:1   60:2   120:3
/// e.a{host=h2}:  0:4   60:5
/// e.b{host=h1}:  0:10  60:20  120:30
/// e.b{host=h2}:  0:40         120:60
/// e.b{host=h3}:  0:7
/// e.c{host=h1}:  30:1
/// e.d{host=h1,dc=x}:  0:100
/// e.d{host=h2,dc=x}:  0:200
/// e.f{dc=x}:          0:5
/// ```
async fn load(srv: &TestServer) {
    /// (offset in seconds, value as written).
    type Points<'a> = &'a [(i64, &'a str)];
    let points: &[(&str, &str, Points)] = &[
        ("e.a", "h1", &[(0, "1"), (60, "2"), (120, "3")]),
        ("e.a", "h2", &[(0, "4"), (60, "5")]),
        ("e.b", "h1", &[(0, "10"), (60, "20"), (120, "30")]),
        ("e.b", "h2", &[(0, "40"), (120, "60")]),
        ("e.b", "h3", &[(0, "7")]),
        ("e.c", "h1", &[(30, "1")]),
    ];
    let mut lines = String::new();
    for (metric, host, dps) in points {
        for (off, v) in *dps {
            lines.push_str(&format!("put {metric} {} {v} host={host}\n", T0 + off));
        }
    }
    lines.push_str(&format!(
        "put e.d {T0} 100 host=h1 dc=x\nput e.d {T0} 200 host=h2 dc=x\nput e.f {T0} 5 dc=x\n"
    ));
    assert_eq!(common::telnet(srv.addr, &lines).await, Vec::<String>::new());
}

async fn post(srv: &TestServer, body: &Value) -> Response {
    http(srv.addr, "POST", "/api/query/exp", &body.to_string()).await
}

/// A request over `[T0, T0 + 600]` grouping every metric by host (filter `f`), with the
/// given metrics and expressions.
fn request(metrics: Value, expressions: Value) -> Value {
    json!({
        "time": {"start": T0.to_string(), "end": (T0 + 600).to_string(), "aggregator": "sum"},
        "filters": [{"id": "f", "tags": [{"type": "wildcard", "tagk": "host", "filter": "*", "groupBy": true}]}],
        "metrics": metrics,
        "expressions": expressions,
    })
}

fn ab() -> Value {
    json!([
        {"id": "a", "metric": "e.a", "filter": "f"},
        {"id": "b", "metric": "e.b", "filter": "f"}
    ])
}

async fn ok(srv: &TestServer, body: &Value) -> Value {
    let r = post(srv, body).await;
    assert_eq!(r.status, 200, "{body}: {}", r.text());
    r.json()
}

/// The `dps` of each output.
async fn dps(srv: &TestServer, body: &Value) -> Vec<Value> {
    ok(srv, body).await["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["dps"].clone())
        .collect()
}

fn expr(id: &str, e: &str, op: &str) -> Value {
    json!({"id": id, "expr": e, "join": {"operator": op}})
}

async fn arithmetic_and_joins(backend: &str) {
    let srv = start(backend).await;
    load(&srv).await;
    let (t0, t1, t2) = (MS, MS + 60_000, MS + 120_000);
    let table: &[(Value, Value)] = &[
        // Union: h3 has no e.a, filled with 0.
        (
            json!([expr("e", "a + b", "union")]),
            json!([[
                [t0, 11.0, 44.0, 7.0],
                [t1, 22.0, 5.0, 0.0],
                [t2, 33.0, 60.0, 0.0]
            ]]),
        ),
        // Intersection drops h3.
        (
            json!([expr("e", "a + b", "intersection")]),
            json!([[[t0, 11.0, 44.0], [t1, 22.0, 5.0], [t2, 33.0, 60.0]]]),
        ),
        // Precedence, parentheses and x/0 (IEEE: Infinity, never 0).
        (
            json!([expr("e", "a / b * 100", "intersection")]),
            json!([[[t0, 10.0, 10.0], [t1, 10.0, "Infinity"], [t2, 10.0, 0.0]]]),
        ),
        (
            json!([expr("e", "(a - 1) * -2 + b % 7", "intersection")]),
            json!([[[t0, 3.0, -1.0], [t1, 4.0, -8.0], [t2, -2.0, 6.0]]]),
        ),
        // Comparisons and the conditional operator.
        (
            json!([expr("e", "a > 2 ? b : a == 1 && b != 0", "intersection")]),
            json!([[[t0, 1.0, 40.0], [t1, 0.0, 0.0], [t2, 30.0, 0.0]]]),
        ),
    ];
    for (exprs, want) in table {
        assert_eq!(
            &Value::from(dps(&srv, &request(ab(), exprs.clone())).await),
            want,
            "{exprs}"
        );
    }
    // No filter: each metric summed into one series (`sum` interpolates e.b{host=h2} at
    // T0+60 to 50, so 2 + 5 + 20 + 50 + 7).
    let body = request(
        json!([{"id": "a", "metric": "e.a"}, {"id": "b", "metric": "e.b"}]),
        json!([{"id": "e", "expr": "a + b"}]),
    );
    let got = ok(&srv, &body).await;
    assert_eq!(
        got["outputs"][0]["dps"],
        json!([[t0, 62.0], [t1, 77.0], [t2, 93.0]])
    );
    assert_eq!(
        got["outputs"][0]["meta"][1],
        json!({"index": 1, "metrics": ["e.a", "e.b"], "commonTags": {}, "aggregatedTags": ["host"]})
    );
}

async fn join_options(backend: &str) {
    let srv = start(backend).await;
    load(&srv).await;
    let (t0, t1, t2) = (MS, MS + 60_000, MS + 120_000);
    // e.d's series also carry dc=x: they join e.a's on host only with useQueryTags.
    let metrics = json!([
        {"id": "a", "metric": "e.a", "filter": "f"},
        {"id": "d", "metric": "e.d", "filter": "f"}
    ]);
    let join = |extra: Value| {
        let mut j = json!({"operator": "intersection"});
        for (k, v) in extra.as_object().unwrap() {
            j[k] = v.clone();
        }
        json!([{"id": "e", "expr": "a + d", "join": j}])
    };
    let r = post(&srv, &request(metrics.clone(), join(json!({})))).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(
        r.json()["error"]["message"],
        "No intersections found: a + d"
    );
    let got = ok(&srv, &request(metrics, join(json!({"useQueryTags": true})))).await;
    assert_eq!(
        got["outputs"][0]["dps"],
        json!([[t0, 101.0, 204.0], [t1, 2.0, 5.0], [t2, 3.0, 0.0]])
    );
    assert_eq!(
        got["outputs"][0]["meta"][1]["commonTags"],
        json!({"host": "h1"})
    );
    assert_eq!(
        got["outputs"][0]["meta"][1]["aggregatedTags"],
        json!(["dc"])
    );
    // e.d grouped by dc aggregates host away; e.f has no host at all: they join only
    // without the aggregated tag keys.
    let mut body = request(
        json!([
            {"id": "d", "metric": "e.d", "filter": "dc"},
            {"id": "g", "metric": "e.f", "filter": "dc"}
        ]),
        json!([{"id": "e", "expr": "d + g", "join": {"operator": "intersection"}}]),
    );
    body["filters"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "dc", "tags": [{"type": "wildcard", "tagk": "dc", "filter": "*", "groupBy": true}]}));
    let r = post(&srv, &body).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(
        r.json()["error"]["message"],
        "No intersections found: d + g"
    );
    body["expressions"][0]["join"]["includeAggTags"] = json!(false);
    assert_eq!(dps(&srv, &body).await[0], json!([[t0, 305.0]]));
}

async fn fill_policies(backend: &str) {
    let srv = start(backend).await;
    load(&srv).await;
    let (t0, t1, t2) = (MS, MS + 60_000, MS + 120_000);
    let table: &[(Value, Value)] = &[
        (
            json!({"policy": "zero"}),
            json!([
                [t0, 11.0, 44.0, 7.0],
                [t1, 22.0, 5.0, 0.0],
                [t2, 33.0, 60.0, 0.0]
            ]),
        ),
        (
            json!({"policy": "nan"}),
            json!([
                [t0, 11.0, 44.0, "NaN"],
                [t1, 22.0, 5.0, "NaN"],
                [t2, 33.0, "NaN", "NaN"]
            ]),
        ),
        (
            json!({"policy": "null"}),
            json!([
                [t0, 11.0, 44.0, "NaN"],
                [t1, 22.0, 5.0, "NaN"],
                [t2, 33.0, "NaN", "NaN"]
            ]),
        ),
        (
            json!({"policy": "scalar", "value": 1}),
            json!([
                [t0, 11.0, 44.0, 8.0],
                [t1, 22.0, 5.0, 1.0],
                [t2, 33.0, 61.0, 1.0]
            ]),
        ),
    ];
    for (fill, want) in table {
        let metrics = json!([
            {"id": "a", "metric": "e.a", "filter": "f", "fillPolicy": fill},
            {"id": "b", "metric": "e.b", "filter": "f"}
        ]);
        let got = dps(
            &srv,
            &request(metrics, json!([expr("e", "a + b", "union")])),
        )
        .await;
        assert_eq!(&got[0], want, "{fill}");
    }
}

async fn nested_and_outputs(backend: &str) {
    let srv = start(backend).await;
    load(&srv).await;
    let (t0, t1, t2) = (MS, MS + 60_000, MS + 120_000);
    // Declared out of order; upper-case ids work.
    let metrics = json!([
        {"id": "A", "metric": "e.a", "filter": "f"},
        {"id": "b", "metric": "e.b", "filter": "f"}
    ]);
    let exprs = json!([
        expr("e3", "e2 - A", "union"),
        expr("e2", "e * 2", "union"),
        expr("e", "A + b", "intersection"),
    ]);
    let got = dps(&srv, &request(metrics.clone(), exprs.clone())).await;
    assert_eq!(
        Value::from(got),
        json!([
            [[t0, 21.0, 84.0], [t1, 42.0, 5.0], [t2, 63.0, 120.0]],
            [[t0, 22.0, 88.0], [t1, 44.0, 10.0], [t2, 66.0, 120.0]],
            [[t0, 11.0, 44.0], [t1, 22.0, 5.0], [t2, 33.0, 60.0]],
        ])
    );
    // A child is aligned on the parent's timestamps and fills its gaps with its own policy.
    let c = json!([
        {"id": "a", "metric": "e.a", "filter": "f"},
        {"id": "b", "metric": "e.b", "filter": "f"},
        {"id": "c", "metric": "e.c", "filter": "f"}
    ]);
    let child = |fill: Value| {
        json!([
            {"id": "x", "expr": "a + b", "join": {"operator": "intersection"}, "fillPolicy": fill},
            expr("y", "x + c", "intersection"),
        ])
    };
    let mut body = request(c.clone(), child(json!({"policy": "scalar", "value": 100})));
    body["outputs"] = json!([{"id": "y"}]);
    assert_eq!(
        dps(&srv, &body).await[0],
        json!([[t0, 11.0], [MS + 30_000, 101.0], [t1, 22.0], [t2, 33.0]])
    );
    let mut body = request(c, child(Value::Null));
    body["outputs"] = json!([{"id": "y"}]);
    assert_eq!(
        dps(&srv, &body).await[0],
        json!([[t0, 11.0], [MS + 30_000, "NaN"], [t1, 22.0], [t2, 33.0]])
    );

    // Outputs: aliases, raw metrics (gaps 0), order as listed.
    let mut body = request(ab(), json!([expr("e", "a + b", "intersection")]));
    body["name"] = json!("q1");
    body["outputs"] = json!([{"id": "e", "alias": "A plus B"}, {"id": "a"}]);
    let got = ok(&srv, &body).await;
    assert_eq!(
        got["outputs"],
        json!([
            {"id": "e", "alias": "A plus B",
             "dps": [[t0, 11.0, 44.0], [t1, 22.0, 5.0], [t2, 33.0, 60.0]],
             "dpsMeta": {"firstTimestamp": t0, "lastTimestamp": t2, "setCount": 3, "series": 2},
             "meta": [{"index": 0, "metrics": ["timestamp"]},
                      {"index": 1, "metrics": ["e.a", "e.b"], "commonTags": {"host": "h1"}, "aggregatedTags": []},
                      {"index": 2, "metrics": ["e.a", "e.b"], "commonTags": {"host": "h2"}, "aggregatedTags": []}]},
            {"id": "a",
             "dps": [[t0, 1.0, 4.0], [t1, 2.0, 5.0], [t2, 3.0, 0.0]],
             "dpsMeta": {"firstTimestamp": t0, "lastTimestamp": t2, "setCount": 3, "series": 2},
             "meta": [{"index": 0, "metrics": ["timestamp"]},
                      {"index": 1, "metrics": ["e.a"], "commonTags": {"host": "h1"}, "aggregatedTags": []},
                      {"index": 2, "metrics": ["e.a"], "commonTags": {"host": "h2"}, "aggregatedTags": []}]}
        ])
    );
    assert_eq!(
        got["query"],
        json!({"name": "q1",
            "time": {"start": T0.to_string(), "end": (T0 + 600).to_string(), "timezone": null,
                     "downsampler": null, "aggregator": "sum", "rate": false},
            "filters": [{"id": "f", "tags": [{"tagk": "host", "filter": "*", "group_by": true, "type": "wildcard"}], "explicitTags": false}],
            "metrics": [{"metric": "e.a", "id": "a", "filter": "f", "aggregator": null, "timeOffset": null, "fillPolicy": null},
                        {"metric": "e.b", "id": "b", "filter": "f", "aggregator": null, "timeOffset": null, "fillPolicy": null}],
            "expressions": [{"id": "e", "expr": "a + b", "join": {"operator": "intersection", "useQueryTags": false, "includeAggTags": true}, "fillPolicy": null}],
            "outputs": [{"id": "e", "alias": "A plus B"}, {"id": "a", "alias": null}]})
    );
    // Without outputs: every expression; without expressions: every metric.
    let got = ok(&srv, &request(metrics, exprs)).await;
    let ids: Vec<&Value> = got["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| &o["id"])
        .collect();
    assert_eq!(ids, [&json!("e3"), &json!("e2"), &json!("e")]);
    let mut body = request(ab(), Value::Null);
    body.as_object_mut().unwrap().remove("expressions");
    let got = ok(&srv, &body).await;
    let ids: Vec<&Value> = got["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| &o["id"])
        .collect();
    assert_eq!(ids, [&json!("a"), &json!("b")]);
    // No data: no rows, no meta.
    let metrics = json!([{"id": "d", "metric": "e.a", "filter": "f"}]);
    let mut body = request(metrics, json!([{"id": "x", "expr": "d * 2"}]));
    body["time"]["start"] = json!((T0 - 6000).to_string());
    body["time"]["end"] = json!((T0 - 3000).to_string());
    assert_eq!(
        ok(&srv, &body).await["outputs"],
        json!([{"id": "x", "dps": [], "dpsMeta": {"firstTimestamp": 0, "lastTimestamp": 0, "setCount": 0, "series": 0}}])
    );
    // `rate` turns every metric into its rate (per second) before the expression.
    let mut body = request(ab(), json!([expr("e", "a + b", "intersection")]));
    body["time"]["rate"] = json!(true);
    assert_eq!(
        dps(&srv, &body).await[0],
        json!([
            [t1, 1.0 / 60.0 + 10.0 / 60.0, 1.0 / 60.0],
            [t2, 1.0 / 60.0 + 10.0 / 60.0, 20.0 / 120.0]
        ])
    );
    // Downsampling with its fill policy: empty buckets are NaN, which the metrics' default
    // fill (0) replaces inside the expression.
    let mut body = request(ab(), json!([expr("e", "a + b", "intersection")]));
    body["time"]["downsampler"] =
        json!({"interval": "2m", "aggregator": "max", "fillPolicy": {"policy": "nan"}});
    assert_eq!(
        dps(&srv, &body).await[0],
        json!([
            [t0, 22.0, 45.0],
            [t2, 33.0, 60.0],
            [MS + 240_000, 0.0, 0.0],
            [MS + 360_000, 0.0, 0.0],
            [MS + 480_000, 0.0, 0.0],
            [MS + 600_000, 0.0, 0.0]
        ])
    );
}

/// `timeOffset`: a metric read a duration earlier, its points moved forward by it.
///
/// ```text
/// o.m{host=h1}:  -1d-60:99  -1d:1  -1d+60:2  -1d+700:77   0:10  60:20  120:30
/// o.m{host=h2}:  -1d:3                                     0:40
/// ```
async fn time_offsets(backend: &str) {
    const DAY: i64 = 86_400;
    let srv = start(backend).await;
    let mut lines = String::new();
    for (off, v, host) in [
        (-DAY - 60, 99, "h1"),
        (-DAY, 1, "h1"),
        (-DAY + 60, 2, "h1"),
        (-DAY + 700, 77, "h1"),
        (0, 10, "h1"),
        (60, 20, "h1"),
        (120, 30, "h1"),
        (-DAY, 3, "h2"),
        (0, 40, "h2"),
    ] {
        lines.push_str(&format!("put o.m {} {v} host={host}\n", T0 + off));
    }
    assert_eq!(common::telnet(srv.addr, &lines).await, Vec::<String>::new());
    let (t0, t1, t2) = (MS, MS + 60_000, MS + 120_000);
    let body = |offset: &str| {
        let mut b = request(
            json!([
                {"id": "a", "metric": "o.m", "filter": "f"},
                {"id": "b", "metric": "o.m", "filter": "f", "timeOffset": offset}
            ]),
            json!([expr("e", "a - b", "union")]),
        );
        b["outputs"] = json!([{"id": "e"}, {"id": "b"}]);
        b
    };
    // Today less yesterday; b reads [T0 - 1d, T0 + 600 - 1d] only (not 99 or 77), its gaps
    // count 0.
    let today_less_yesterday = json!([
        [[t0, 9.0, 37.0], [t1, 18.0, 0.0], [t2, 30.0, 0.0]],
        [[t0, 1.0, 3.0], [t1, 2.0, 0.0]]
    ]);
    for offset in ["1d", "24h", "1440m", "1d-ago", " 1d-AGO "] {
        assert_eq!(
            Value::from(dps(&srv, &body(offset)).await),
            today_less_yesterday,
            "{offset}"
        );
    }
    // The offset is echoed as given.
    let got = ok(&srv, &body("24h")).await;
    assert_eq!(got["query"]["metrics"][0]["timeOffset"], Value::Null);
    assert_eq!(got["query"]["metrics"][1]["timeOffset"], json!("24h"));
    // One minute: b's T0 - 60 (none), T0 (10, 40) and T0 + 60 (20) land a minute later.
    assert_eq!(
        Value::from(dps(&srv, &body("1m")).await),
        json!([
            [
                [t0, 10.0, 40.0],
                [t1, 10.0, -40.0],
                [t2, 10.0, 0.0],
                [MS + 180_000, -30.0, 0.0]
            ],
            [[t1, 10.0, 40.0], [t2, 20.0, 0.0], [MS + 180_000, 30.0, 0.0]]
        ])
    );
    // Before 1970: b reads nothing, a - b is a.
    assert_eq!(
        Value::from(dps(&srv, &body("100y")).await),
        json!([[[t0, 10.0, 40.0], [t1, 20.0, 0.0], [t2, 30.0, 0.0]], []])
    );
    // Downsampled into 2-minute maxima, then offset by a day: buckets stay aligned.
    let mut b = body("1d");
    b["time"]["downsampler"] = json!({"interval": "2m", "aggregator": "max"});
    b["time"]["end"] = json!((T0 + 180).to_string());
    assert_eq!(
        Value::from(dps(&srv, &b).await),
        json!([[[t0, 18.0, 37.0], [t2, 30.0, 0.0]], [[t0, 2.0, 3.0]]])
    );
    // Bad durations: 400 with the cause.
    for (offset, cause) in [
        ("5min", "Invalid duration (suffix): 5min"),
        ("0d", "Zero or negative duration: 0d"),
        ("d", "Invalid duration (number): d"),
        ("12", "Invalid duration, must have an integer and unit: 12"),
        ("2013/01/01", "Invalid duration (suffix): 2013/01/01"),
        ("-ago", "Cannot parse null or empty duration"),
    ] {
        let r = post(&srv, &body(offset)).await;
        assert_eq!(r.status, 400, "{offset}: {}", r.text());
        let e = &r.json()["error"];
        assert_eq!(e["message"], "Invalid metric at index 1", "{offset}");
        assert_eq!(
            e["details"],
            format!(
                "Invalid timeOffset (\"{offset}\"): {cause}; expected a duration such as 1h, 1d or 1w"
            ),
            "{offset}"
        );
    }
}

async fn errors(backend: &str) {
    let srv = start(backend).await;
    load(&srv).await;
    let base = request(ab(), json!([expr("e", "a + b", "union")]));
    let with = |path: &[&str], v: Value| {
        let mut b = base.clone();
        let mut at = &mut b;
        for p in &path[..path.len() - 1] {
            at = match p.parse::<usize>() {
                Ok(i) => &mut at[i],
                Err(_) => &mut at[*p],
            };
        }
        let last = path[path.len() - 1];
        match last.parse::<usize>() {
            Ok(i) => at[i] = v,
            Err(_) if v.is_null() => {
                at.as_object_mut().unwrap().remove(last);
            }
            Err(_) => at[last] = v,
        }
        b
    };
    let end_message = format!(
        "End time [{}] must be greater than the start time [{MS}]",
        (T0 - 60) * 1000
    );
    let cases: Vec<(Value, &str, Option<&str>)> = vec![
        (with(&["time"], Value::Null), "missing time", None),
        (
            with(&["time", "start"], Value::Null),
            "Invalid time",
            Some("missing or empty start"),
        ),
        (
            with(&["time", "start"], json!("yesterday")),
            "Invalid time",
            None,
        ),
        (
            with(&["time", "aggregator"], Value::Null),
            "Invalid time",
            Some("Missing or empty aggregator"),
        ),
        (
            with(&["time", "aggregator"], json!("foo")),
            "Invalid time",
            Some("Invalid aggregator"),
        ),
        (
            with(&["time", "downsampler"], json!({"aggregator": "sum"})),
            "Invalid time",
            Some("Missing or empty interval"),
        ),
        (
            with(&["metrics"], json!([])),
            "missing or empty metrics",
            None,
        ),
        (
            with(&["metrics"], Value::Null),
            "missing or empty metrics",
            None,
        ),
        (
            with(&["metrics", "1", "id"], json!("a")),
            "duplicated metric id: a",
            None,
        ),
        (
            with(
                &["filters"],
                json!([base["filters"][0], {"id": "f", "tags": []}]),
            ),
            "duplicated filter id: f",
            None,
        ),
        (
            with(&["expressions", "0", "id"], json!("b")),
            "Duplicated variable or expression id: b",
            None,
        ),
        (
            with(&["metrics", "0", "metric"], Value::Null),
            "Invalid metric at index 0",
            Some("missing or empty metric"),
        ),
        (
            with(&["metrics", "1", "id"], json!("bad.Id")),
            "Invalid metric at index 1",
            Some("Invalid id (\"bad.Id\"): illegal character: ."),
        ),
        (
            with(&["metrics", "1", "id"], json!("1")),
            "Invalid metric at index 1",
            Some("The ID cannot be an integer"),
        ),
        (
            with(&["metrics", "0", "aggregator"], json!("nope")),
            "Invalid metric at index 0",
            Some("Invalid aggregator"),
        ),
        (
            with(&["metrics", "0", "fillPolicy"], json!({"policy": "foo"})),
            "Invalid metric at index 0",
            Some("Unrecognized fill policy: foo"),
        ),
        (
            with(
                &["metrics", "0", "fillPolicy"],
                json!({"policy": "zero", "value": 2}),
            ),
            "Invalid metric at index 0",
            Some("The value for ZERO must be 0"),
        ),
        (
            with(&["metrics", "0", "timeOffset"], json!("1hour")),
            "Invalid metric at index 0",
            Some(
                "Invalid timeOffset (\"1hour\"): Invalid duration (suffix): 1hour; \
                 expected a duration such as 1h, 1d or 1w",
            ),
        ),
        (
            with(&["filters", "0", "id"], Value::Null),
            "Invalid filter at index 0",
            Some("Missing or empty id"),
        ),
        (
            with(&["filters", "0", "tags", "0", "type"], json!("nope")),
            "Invalid filter at index 0",
            None,
        ),
        (
            with(&["expressions", "0", "expr"], Value::Null),
            "Invalid expression at index 0",
            Some("missing or empty expr"),
        ),
        (
            with(&["expressions", "0", "id"], json!("e-1")),
            "Invalid expression at index 0",
            Some("Invalid id (\"e-1\"): illegal character: -"),
        ),
        (
            with(&["metrics", "0", "filter"], json!("g")),
            "unrecognized filter id g in metric a",
            None,
        ),
        (
            with(&["expressions", "0", "expr"], json!("a + z")),
            "Expression [a + z] was missing input z",
            None,
        ),
        (
            with(&["expressions", "0", "expr"], json!("1 + 2")),
            "The expression didn't appear to have any variables",
            None,
        ),
        (
            with(&["expressions", "0", "expr"], json!("a +")),
            "parsing error in 'a +'",
            None,
        ),
        (
            with(&["expressions", "0", "expr"], json!("a div b")),
            "parsing error in 'a div b'",
            None,
        ),
        (
            with(&["expressions", "0", "expr"], json!("a + e")),
            "Self referencing expression found: e",
            None,
        ),
        (
            with(&["expressions", "0", "join", "operator"], json!("outer")),
            "Unrecognized set operator: outer",
            None,
        ),
        (
            with(&["outputs"], json!([{"id": "zz"}])),
            "Output id zz is neither a metric nor an expression id",
            None,
        ),
        (
            with(&["time", "end"], json!((T0 - 60).to_string())),
            &end_message,
            None,
        ),
    ];
    for (body, message, details) in &cases {
        let r = post(&srv, body).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        let e = &r.json()["error"];
        assert_eq!(e["code"], 400);
        assert_eq!(e["message"], *message, "{body}");
        if let Some(d) = details {
            assert_eq!(e["details"], *d, "{body}");
        }
    }
    // Nesting depth.
    let chain: Vec<Value> = (0..70)
        .map(|i| {
            let input = if i == 0 {
                "a".to_string()
            } else {
                format!("x{}", i - 1)
            };
            expr(&format!("x{i}"), &format!("{input} + 1"), "union")
        })
        .collect();
    // 70 deep is refused, declared in either order; 64 deep is answered.
    for reversed in [false, true] {
        let order = |mut c: Vec<Value>| {
            if reversed {
                c.reverse();
            }
            Value::from(c)
        };
        let r = post(&srv, &request(ab(), order(chain.clone()))).await;
        assert_eq!(r.status, 400);
        assert!(
            r.json()["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("Expressions nest more than 64 deep")
        );
        let r = post(&srv, &request(ab(), order(chain[..64].to_vec()))).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    // Cycles.
    let body = request(
        ab(),
        json!([expr("x", "y + a", "union"), expr("y", "x * 2", "union")]),
    );
    let r = post(&srv, &body).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["message"], "Circular reference found: x");
    // No intersection: e.c has h1 only, e.a filtered on h2.
    let mut body = request(
        json!([{"id": "a", "metric": "e.a", "filter": "g"}, {"id": "c", "metric": "e.c", "filter": "f"}]),
        json!([expr("e", "a + c", "intersection")]),
    );
    body["filters"].as_array_mut().unwrap().push(json!({"id": "g", "tags": [{"type": "literal_or", "tagk": "host", "filter": "h2", "groupBy": true}]}));
    let r = post(&srv, &body).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(
        r.json()["error"]["message"],
        "No intersections found: a + c"
    );
    // Unknown metric name.
    let r = post(&srv, &with(&["metrics", "0", "metric"], json!("nope"))).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("No such name")
    );
    // Bodies and methods.
    let r = http(srv.addr, "POST", "/api/query/exp", "").await;
    assert_eq!(
        (r.status, r.json()["error"]["message"].clone()),
        (400, json!("Incoming data was null or empty"))
    );
    let r = http(srv.addr, "POST", "/api/query/exp", "{nope").await;
    assert_eq!(
        (r.status, r.json()["error"]["message"].clone()),
        (400, json!("Unable to parse the given JSON"))
    );
    let r = http(srv.addr, "PUT", "/api/query/exp", &base.to_string()).await;
    assert_eq!(r.status, 405);
}

/// `a + b` equals the point-wise sum of `/api/query`'s answers for the two metrics, gaps
/// counting 0, over pseudo-random data sets, under each join: an intersection keeps the
/// hosts both metrics have, a union every host (a host one metric lacks counts 0 there).
async fn sum_matches_query_api(backend: &str) {
    let srv = start(backend).await;
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    for round in 0..4 {
        let mut lines = String::new();
        for m in ["p", "q"] {
            for host in ["h1", "h2", "h3"] {
                // In odd rounds `q` has no series for one host.
                if m == "q" && round % 2 == 1 && host == ["h1", "h2", "h3"][round / 2] {
                    continue;
                }
                for k in 0..10 {
                    if next(3) > 0 {
                        let v = next(1000) as i64 - 500;
                        lines.push_str(&format!(
                            "put r{round}.{m} {} {v} host={host}\n",
                            T0 + k * 30
                        ));
                    }
                }
            }
        }
        assert_eq!(common::telnet(srv.addr, &lines).await, Vec::<String>::new());
        let query = |m: &str| {
            let srv = &srv;
            let path = format!(
                "/api/query?start={T0}&end={}&m=sum:r{round}.{m}%7Bhost=*%7D",
                T0 + 600
            );
            async move {
                let r = http(srv.addr, "GET", &path, "").await;
                assert_eq!(r.status, 200, "{}", r.text());
                let mut by_host = std::collections::BTreeMap::new();
                for g in r.json().as_array().unwrap() {
                    let dps: std::collections::BTreeMap<i64, f64> = g["dps"]
                        .as_object()
                        .unwrap()
                        .iter()
                        .map(|(t, v)| (t.parse::<i64>().unwrap() * 1000, v.as_f64().unwrap()))
                        .collect();
                    by_host.insert(g["tags"]["host"].as_str().unwrap().to_string(), dps);
                }
                by_host
            }
        };
        let (p, q) = (query("p").await, query("q").await);
        for join in ["intersection", "union"] {
            let body = request(
                json!([
                    {"id": "p", "metric": format!("r{round}.p"), "filter": "f"},
                    {"id": "q", "metric": format!("r{round}.q"), "filter": "f"}
                ]),
                json!([expr("s", "p + q", join)]),
            );
            let got = ok(&srv, &body).await;
            let out = &got["outputs"][0];
            let hosts: Vec<&String> = if join == "union" {
                p.keys()
                    .chain(q.keys())
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect()
            } else {
                p.keys().filter(|h| q.contains_key(*h)).collect()
            };
            let empty = std::collections::BTreeMap::new();
            let (p_of, q_of) = (
                |h: &String| p.get(h).unwrap_or(&empty),
                |h: &String| q.get(h).unwrap_or(&empty),
            );
            let times: std::collections::BTreeSet<i64> = hosts
                .iter()
                .flat_map(|h| p_of(h).keys().chain(q_of(h).keys()).copied())
                .collect();
            let want: Vec<Value> = times
                .iter()
                .map(|t| {
                    let mut row = vec![json!(t)];
                    for h in &hosts {
                        let v = p_of(h).get(t).unwrap_or(&0.0) + q_of(h).get(t).unwrap_or(&0.0);
                        row.push(json!(v));
                    }
                    Value::from(row)
                })
                .collect();
            assert_eq!(out["dps"], Value::from(want), "round {round} {join}");
            for (i, h) in hosts.iter().enumerate() {
                assert_eq!(
                    out["meta"][i + 1]["commonTags"]["host"],
                    json!(h),
                    "round {round} {join}"
                );
            }
            if round % 2 == 1 {
                let all = p
                    .keys()
                    .chain(q.keys())
                    .collect::<std::collections::BTreeSet<_>>()
                    .len();
                assert_eq!(
                    hosts.len() + usize::from(join == "intersection"),
                    all,
                    "round {round} {join}"
                );
            }
        }
    }
}

/// Comparisons read a NaN (let in by a `nan` fill policy) as JEXL 2.1 orders it: below every
/// number and equal to NaN. e.a{host=h2} has no point at 120 s, so `a` is NaN there. (The
/// booleans are multiplied by `b`, a double, so that OpenTSDB's result is a double too.)
#[tokio::test]
async fn comparisons_order_nan_as_jexl_does() {
    let srv = start("memory").await;
    load(&srv).await;
    let metrics = json!([
        {"id": "a", "metric": "e.a", "filter": "f", "fillPolicy": {"policy": "nan"}},
        {"id": "b", "metric": "e.b", "filter": "f"}
    ]);
    let body = request(
        metrics,
        json!([expr(
            "e",
            "(a < 100) * b + (a == a) * b * 10 + (a >= 0) * b * 100",
            "intersection"
        )]),
    );
    let (t0, t1, t2) = (MS, MS + 60_000, MS + 120_000);
    assert_eq!(
        dps(&srv, &body).await[0],
        json!([[t0, 1110.0, 4440.0], [t1, 2220.0, 0.0], [t2, 3330.0, 660.0]])
    );
}

/// The body's booleans (`rate`, `explicitTags`, `groupBy`, `useQueryTags`,
/// `includeAggTags`) read as Jackson fills Java `boolean`s: a number is true unless 0, `null`
/// is false (not the default), and only `true`/`True`/`false`/`False` as text.
#[tokio::test]
async fn booleans_read_as_java_booleans() {
    let srv = start("memory").await;
    load(&srv).await;
    // e.d's series carry dc=x beside host: `a + d` joins only on the query's tag keys.
    let body = request(
        json!([
            {"id": "a", "metric": "e.a", "filter": "f"},
            {"id": "d", "metric": "e.d", "filter": "f"}
        ]),
        json!([{"id": "e", "expr": "a + d",
            "join": {"operator": "intersection", "useQueryTags": 1}}]),
    );
    let (t0, t1, t2) = (MS, MS + 60_000, MS + 120_000);
    assert_eq!(
        dps(&srv, &body).await[0],
        json!([[t0, 101.0, 204.0], [t1, 2.0, 5.0], [t2, 3.0, 0.0]])
    );
    // `includeAggTags: null` is false: e.d by dc (host aggregated) joins e.f (no host).
    let mut body = request(
        json!([
            {"id": "d", "metric": "e.d", "filter": "dc"},
            {"id": "g", "metric": "e.f", "filter": "dc"}
        ]),
        json!([{"id": "e", "expr": "d + g",
            "join": {"operator": "intersection", "includeAggTags": null}}]),
    );
    body["filters"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "dc",
        "tags": [{"type": "wildcard", "tagk": "dc", "filter": "*", "groupBy": "True"}]}));
    assert_eq!(dps(&srv, &body).await[0], json!([[t0, 305.0]]));
    // Text other than true/True/false/False is no boolean.
    let mut body = request(ab(), json!([expr("e", "a + b", "union")]));
    body["time"]["rate"] = json!("TRUE");
    let r = post(&srv, &body).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(
        r.json()["error"]["message"],
        "Unable to parse the given JSON"
    );
}

/// Ids OpenTSDB reads as Java `null`s when missing (two missing ids are duplicates), and
/// filter types looked up as written (`Wildcard` is none).
#[tokio::test]
async fn missing_ids_and_filter_types_as_opentsdb_reads_them() {
    let srv = start("memory").await;
    load(&srv).await;
    let cases = [
        (
            request(json!([{"metric": "e.a"}, {"metric": "e.b"}]), Value::Null),
            "duplicated metric id: null",
        ),
        (
            request(json!([{"metric": "e.a"}]), json!([{"expr": "a + 1"}])),
            "Duplicated variable or expression id: null",
        ),
        (
            {
                let mut b = request(ab(), Value::Null);
                b["filters"] = json!([{"tags": []}, {"tags": []}]);
                b
            },
            "duplicated filter id: null",
        ),
    ];
    for (body, message) in &cases {
        let r = post(&srv, body).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert_eq!(r.json()["error"]["message"], *message, "{body}");
    }
    let mut body = request(ab(), Value::Null);
    body["filters"][0]["tags"][0]["type"] = json!("Wildcard");
    let r = post(&srv, &body).await;
    assert_eq!(r.status, 400, "{}", r.text());
    let e = &r.json()["error"];
    assert_eq!(e["message"], "Invalid filter at index 0");
    assert_eq!(
        e["details"],
        "Could not find a tag value filter of the type: Wildcard"
    );
}

/// The `query` echo writes a metric's empty `filter` and `timeOffset` as sent (OpenTSDB
/// serializes its `Metric` as read: `""`, not `null`); they mean no filter and no offset.
#[tokio::test]
async fn empty_metric_fields_are_echoed_as_sent() {
    let srv = start("memory").await;
    load(&srv).await;
    let body = request(
        json!([{"id": "a", "metric": "e.a", "filter": "", "timeOffset": ""}]),
        Value::Null,
    );
    let got = ok(&srv, &body).await;
    assert_eq!(
        got["query"]["metrics"][0],
        json!({"metric": "e.a", "id": "a", "filter": "", "aggregator": null,
            "timeOffset": "", "fillPolicy": null})
    );
    // No filter: e.a summed into one series.
    assert_eq!(
        got["outputs"][0]["dps"],
        json!([[MS, 5.0], [MS + 60_000, 7.0], [MS + 120_000, 3.0]])
    );
}

/// Output series come in OpenTSDB's join key order: tag UIDs (the order names were first
/// written), not names; aggregated tags likewise.
#[tokio::test]
async fn series_and_aggregated_tags_in_uid_order() {
    let srv = start("memory").await;
    // `zz` and `zk` are written (and so numbered) before `aa` and `ak`.
    let lines = format!(
        "put u.a {T0} 1 host=zz\nput u.a {T0} 2 host=aa\nput u.b {T0} 10 host=zz\n\
         put u.b {T0} 20 host=aa\nput u.c {T0} 5 zk=1 ak=1\nput u.c {T0} 6 zk=2 ak=2\n"
    );
    assert_eq!(common::telnet(srv.addr, &lines).await, Vec::<String>::new());
    let body = request(
        json!([
            {"id": "a", "metric": "u.a", "filter": "f"},
            {"id": "b", "metric": "u.b", "filter": "f"},
            {"id": "c", "metric": "u.c"}
        ]),
        json!([expr("e", "a + b", "union"), expr("g", "c * 2", "union")]),
    );
    let got = ok(&srv, &body).await;
    let e = &got["outputs"][0];
    assert_eq!(e["dps"], json!([[MS, 11.0, 22.0]]));
    assert_eq!(e["meta"][1]["commonTags"], json!({"host": "zz"}));
    assert_eq!(e["meta"][2]["commonTags"], json!({"host": "aa"}));
    let g = &got["outputs"][1];
    assert_eq!(g["dps"], json!([[MS, 22.0]]));
    assert_eq!(g["meta"][1]["aggregatedTags"], json!(["zk", "ak"]));
}

/// The time zone is read only where OpenTSDB reads it: an absolute date, or downsampling. A
/// relative start with an unknown zone and no downsampler is answered.
#[tokio::test]
async fn time_zones_are_read_only_where_used() {
    let srv = start("memory").await;
    load(&srv).await;
    let mut body = request(ab(), json!([expr("e", "a + b", "union")]));
    body["time"]["timezone"] = json!("Mars/Base");
    assert_eq!(
        ok(&srv, &body).await["query"]["time"]["timezone"],
        "Mars/Base"
    );
    let mut absolute = body.clone();
    absolute["time"]["start"] = json!("2013/01/01-00:00:00");
    let r = post(&srv, &absolute).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["message"], "Invalid time");
    assert_eq!(
        r.json()["error"]["details"],
        "Invalid timezone name: Mars/Base"
    );
    body["time"]["downsampler"] = json!({"interval": "1m", "aggregator": "sum"});
    let r = post(&srv, &body).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(
        r.json()["error"]["message"],
        "The timezone specification could not be found"
    );
}

/// A tag filter with both `groupBy` and `group_by` groups as the later key says (Jackson
/// fills one field from both).
#[tokio::test]
async fn the_later_group_by_key_wins() {
    let srv = start("memory").await;
    load(&srv).await;
    let (t0, t1, t2) = (MS, MS + 60_000, MS + 120_000);
    let mut body = request(
        json!([{"id": "a", "metric": "e.a", "filter": "f"}]),
        Value::Null,
    );
    body["filters"] = serde_json::from_str(
        r#"[{"id": "f", "tags": [{"type": "wildcard", "tagk": "host", "filter": "*",
            "groupBy": true, "group_by": false}]}]"#,
    )
    .unwrap();
    assert_eq!(
        dps(&srv, &body).await[0],
        json!([[t0, 5.0], [t1, 7.0], [t2, 3.0]])
    );
    body["filters"] = serde_json::from_str(
        r#"[{"id": "f", "tags": [{"type": "wildcard", "tagk": "host", "filter": "*",
            "group_by": false, "groupBy": true}]}]"#,
    )
    .unwrap();
    assert_eq!(
        dps(&srv, &body).await[0],
        json!([[t0, 1.0, 4.0], [t1, 2.0, 5.0], [t2, 3.0, 0.0]])
    );
}

/// Number literals as JEXL 2.1 reads them: exponents (`1.5e1`), octal (`010` is 8),
/// hexadecimal (`0x10`), type suffixes (`2l`); `.5` is no literal.
#[tokio::test]
async fn number_literals_read_as_jexl_reads_them() {
    let srv = start("memory").await;
    load(&srv).await;
    let metrics = json!([{"id": "a", "metric": "e.a", "filter": "f"}]);
    let body = request(
        metrics.clone(),
        json!([expr("e", "a * 1.5e1 + 010 + 0x10 - 2l", "union")]),
    );
    let (t0, t1, t2) = (MS, MS + 60_000, MS + 120_000);
    assert_eq!(
        dps(&srv, &body).await[0],
        json!([[t0, 37.0, 82.0], [t1, 52.0, 97.0], [t2, 67.0, 22.0]])
    );
    let r = post(
        &srv,
        &request(metrics, json!([expr("e", ".5 * a", "union")])),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["message"], "parsing error in '.5 * a'");
}

/// JEXL's `c ?: b` (the condition's value where it is true, else `b`; `a + 100` keeps the
/// result a double, as OpenTSDB requires).
#[tokio::test]
async fn elvis_reads_as_jexl_reads_it() {
    let srv = start("memory").await;
    load(&srv).await;
    let body = request(
        json!([{"id": "a", "metric": "e.a", "filter": "f"}]),
        json!([expr("e", "a ?: a + 100", "union")]),
    );
    let (t0, t1, t2) = (MS, MS + 60_000, MS + 120_000);
    assert_eq!(
        dps(&srv, &body).await[0],
        json!([[t0, 1.0, 4.0], [t1, 2.0, 5.0], [t2, 3.0, 100.0]])
    );
}

on_backends!(
    arithmetic_and_joins,
    join_options,
    fill_policies,
    nested_and_outputs,
    time_offsets,
    errors,
    sum_matches_query_api,
);
