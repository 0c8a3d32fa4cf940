#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `/api/query/gexp` end to end over real sockets, on the memory, embedded and Bigtable (emulator) backends:
//! each function against outputs worked out by hand from the points below, nesting, the
//! `/api/query` options that apply, and every documented error.
#[macro_use]
mod common;

use common::{Response, TestServer, http, start};
use serde_json::{Value, json};

/// 2013-01-01T00:00:00Z.
const T0: i64 = 1356998400;

/// The points every test reads (offsets in seconds from [`T0`]). Series are created in this
/// order, so UIDs go g.cpu < g.mem < g.load, web01 < web02 < web03.
///
/// ```text
/// g.cpu{host=web01}:  0:1    60:2    120:3    180:4   240:5
/// g.cpu{host=web02}:  0:-10  60:20   120:-30  180:40
/// g.mem{host=web01}:  0:0.5  60:1.5
/// g.mem{host=web02}:         60:2             180:4
/// g.mem{host=web03}:                 120:7
/// g.load{host=web01}: 0:2    60:0    120:8
/// ```
async fn load(srv: &TestServer) {
    /// (offset in seconds, value as written).
    type Points<'a> = &'a [(i64, &'a str)];
    let points: &[(&str, &str, Points)] = &[
        (
            "g.cpu",
            "web01",
            &[(0, "1"), (60, "2"), (120, "3"), (180, "4"), (240, "5")],
        ),
        (
            "g.cpu",
            "web02",
            &[(0, "-10"), (60, "20"), (120, "-30"), (180, "40")],
        ),
        ("g.mem", "web01", &[(0, "0.5"), (60, "1.5")]),
        ("g.mem", "web02", &[(60, "2"), (180, "4")]),
        ("g.mem", "web03", &[(120, "7")]),
        ("g.load", "web01", &[(0, "2"), (60, "0"), (120, "8")]),
    ];
    let mut lines = String::new();
    for (metric, host, dps) in points {
        for (off, v) in *dps {
            lines.push_str(&format!("put {metric} {} {v} host={host}\n", T0 + off));
        }
    }
    assert_eq!(common::telnet(srv.addr, &lines).await, Vec::<String>::new());
}

/// Percent-encodes a URL parameter value.
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~:(),*".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

async fn get(srv: &TestServer, query: &str) -> Response {
    http(srv.addr, "GET", &format!("/api/query/gexp?{query}"), "").await
}

/// The answer to one expression over `[T0, T0 + 600]`.
async fn answer(srv: &TestServer, exp: &str) -> Value {
    let r = get(
        srv,
        &format!("start={T0}&end={}&exp={}", T0 + 600, enc(exp)),
    )
    .await;
    assert_eq!(r.status, 200, "{exp}: {}", r.text());
    r.json()
}

/// One output series as `/api/query` writes it (no aggregated tags).
fn series(metric: &str, tags: Value, dps: &[(i64, Value)]) -> Value {
    let dps: serde_json::Map<String, Value> = dps
        .iter()
        .map(|(off, v)| ((T0 + off).to_string(), v.clone()))
        .collect();
    json!({"metric": metric, "tags": tags, "aggregateTags": [], "dps": dps})
}

fn host(h: &str) -> Value {
    json!({ "host": h })
}

/// Runs each `(expression, expected answer)` row.
async fn check_table(srv: &TestServer, rows: &[(&str, Value)]) {
    for (exp, want) in rows {
        let got = answer(srv, exp).await;
        assert_eq!(&got, want, "exp={exp}");
    }
}

async fn absolute_and_scale(backend: &str) {
    let srv = start(backend).await;
    load(&srv).await;
    check_table(
        &srv,
        &[
            // Integers stay integers.
            (
                "absolute(sum:g.cpu{host=*})",
                json!([
                    series(
                        "g.cpu",
                        host("web01"),
                        &[
                            (0, json!(1)),
                            (60, json!(2)),
                            (120, json!(3)),
                            (180, json!(4)),
                            (240, json!(5))
                        ]
                    ),
                    series(
                        "g.cpu",
                        host("web02"),
                        &[
                            (0, json!(10)),
                            (60, json!(20)),
                            (120, json!(30)),
                            (180, json!(40))
                        ]
                    ),
                ]),
            ),
            (
                "absolute(sum:g.mem{host=web01})",
                json!([series(
                    "g.mem",
                    host("web01"),
                    &[(0, json!(0.5)), (60, json!(1.5))]
                )]),
            ),
            // An integral factor keeps integers; series of every parameter are pooled.
            (
                "scale(sum:g.cpu{host=web02},sum:g.load{host=web01},2)",
                json!([
                    series(
                        "g.cpu",
                        host("web02"),
                        &[
                            (0, json!(-20)),
                            (60, json!(40)),
                            (120, json!(-60)),
                            (180, json!(80))
                        ]
                    ),
                    series(
                        "g.load",
                        host("web01"),
                        &[(0, json!(4)), (60, json!(0)), (120, json!(16))]
                    ),
                ]),
            ),
            (
                "scale(sum:g.cpu{host=web01},0.5)",
                json!([series(
                    "g.cpu",
                    host("web01"),
                    &[
                        (0, json!(0.5)),
                        (60, json!(1.0)),
                        (120, json!(1.5)),
                        (180, json!(2.0)),
                        (240, json!(2.5))
                    ]
                )]),
            ),
            (
                "scale(sum:g.mem{host=web01},-2)",
                json!([series(
                    "g.mem",
                    host("web01"),
                    &[(0, json!(-1.0)), (60, json!(-3.0))]
                )]),
            ),
        ],
    )
    .await;
    srv.stop().await;
}

async fn alias(backend: &str) {
    let srv = start(backend).await;
    load(&srv).await;
    check_table(
        &srv,
        &[
            // The name replaces the metric, `@tagk` takes the series' tag value, tags are
            // dropped, and values are kept as they are (negative ones too).
            (
                "alias(sum:g.cpu{host=*},cpu-@host)",
                json!([
                    series(
                        "cpu-web01",
                        json!({}),
                        &[
                            (0, json!(1)),
                            (60, json!(2)),
                            (120, json!(3)),
                            (180, json!(4)),
                            (240, json!(5))
                        ]
                    ),
                    series(
                        "cpu-web02",
                        json!({}),
                        &[
                            (0, json!(-10)),
                            (60, json!(20)),
                            (120, json!(-30)),
                            (180, json!(40))
                        ]
                    ),
                ]),
            ),
            // Every parameter after the series, joined with commas; quotes kept.
            (
                "alias(sum:g.mem{host=web01},'a',b@nope)",
                json!([series(
                    "'a',b@nope",
                    json!({}),
                    &[(0, json!(0.5)), (60, json!(1.5))]
                )]),
            ),
        ],
    )
    .await;
    srv.stop().await;
}

async fn moving_average(backend: &str) {
    let srv = start(backend).await;
    load(&srv).await;
    let web01 = |vals: [f64; 5]| {
        json!([series(
            "g.cpu",
            host("web01"),
            &[0, 60, 120, 180, 240]
                .iter()
                .zip(vals)
                .map(|(t, v)| (*t, json!(v)))
                .collect::<Vec<_>>()
        )])
    };
    check_table(
        &srv,
        &[
            (
                "movingAverage(sum:g.cpu{host=web01},1)",
                web01([1.0, 2.0, 3.0, 4.0, 5.0]),
            ),
            (
                "movingAverage(sum:g.cpu{host=web01},2)",
                web01([0.0, 1.5, 2.5, 3.5, 4.5]),
            ),
            (
                "movingAverage(sum:g.cpu{host=web01},5)",
                web01([0.0, 0.0, 0.0, 0.0, 3.0]),
            ),
            ("movingAverage(sum:g.cpu{host=web01},6)", web01([0.0; 5])),
            // Time windows: the points less than the window before each point, 0 while no
            // point is that old.
            (
                "movingAverage(sum:g.cpu{host=web01},'1min')",
                web01([0.0, 2.0, 3.0, 4.0, 5.0]),
            ),
            (
                "movingAverage(sum:g.cpu{host=web01},'2min')",
                web01([0.0, 0.0, 2.5, 3.5, 4.5]),
            ),
            (
                "movingAverage(sum:g.cpu{host=web01},'3m')",
                web01([0.0, 0.0, 0.0, 3.0, 4.0]),
            ),
            ("movingAverage(sum:g.cpu{host=web01},'1h')", web01([0.0; 5])),
            (
                "movingAverage(sum:g.cpu{host=web02},3)",
                json!([series(
                    "g.cpu",
                    host("web02"),
                    &[
                        (0, json!(0.0)),
                        (60, json!(0.0)),
                        (120, json!((-30.0 + 20.0 - 10.0) / 3.0)),
                        (180, json!(10.0))
                    ]
                )]),
            ),
        ],
    )
    .await;
    srv.stop().await;
}

async fn highest(backend: &str) {
    let srv = start(backend).await;
    load(&srv).await;
    let cpu01 = series(
        "g.cpu",
        host("web01"),
        &[
            (0, json!(1)),
            (60, json!(2)),
            (120, json!(3)),
            (180, json!(4)),
            (240, json!(5)),
        ],
    );
    let cpu02 = series(
        "g.cpu",
        host("web02"),
        &[
            (0, json!(-10)),
            (60, json!(20)),
            (120, json!(-30)),
            (180, json!(40)),
        ],
    );
    let neg01 = series(
        "g.cpu",
        host("web01"),
        &[
            (0, json!(-1)),
            (60, json!(-2)),
            (120, json!(-3)),
            (180, json!(-4)),
            (240, json!(-5)),
        ],
    );
    let neg02 = series(
        "g.cpu",
        host("web02"),
        &[
            (0, json!(10)),
            (60, json!(-20)),
            (120, json!(30)),
            (180, json!(-40)),
        ],
    );
    check_table(
        &srv,
        &[
            // Maxima 5 and 40: web02 first.
            ("highestMax(sum:g.cpu{host=*},1)", json!([cpu02.clone()])),
            (
                "highestMax(sum:g.cpu{host=*},2)",
                json!([cpu02.clone(), cpu01.clone()]),
            ),
            (
                "highestMax(sum:g.cpu{host=*},10)",
                json!([cpu02.clone(), cpu01.clone()]),
            ),
            // Negated: maxima -1 and 30 (web02 first), latest values -5 and -40 (web01 first):
            // all-negative series rank by their values.
            (
                "highestMax(scale(sum:g.cpu{host=*},-1),1)",
                json!([neg02.clone()]),
            ),
            (
                "highestCurrent(scale(sum:g.cpu{host=*},-1),1)",
                json!([neg01.clone()]),
            ),
            (
                "highestCurrent(scale(sum:g.cpu{host=*},-1),2)",
                json!([neg01, neg02]),
            ),
            // Latest values 5 (at 240) and 40 (at 180).
            (
                "highestCurrent(sum:g.cpu{host=*},1)",
                json!([cpu02.clone()]),
            ),
            // Series of every parameter compete: maxima 5, 40, 1.5, 4, 7.
            (
                "highestMax(sum:g.cpu{host=*},sum:g.mem{host=*},2)",
                json!([cpu02, series("g.mem", host("web03"), &[(120, json!(7))])]),
            ),
        ],
    )
    .await;
    srv.stop().await;
}

async fn time_shift(backend: &str) {
    let srv = start(backend).await;
    load(&srv).await;
    // From T0+60: the shifted sub-query reads from T0, so the point at T0 shows at T0+60.
    let shifted = |exp: &str, extra: &str| {
        format!("start={}&end={}&exp={}{extra}", T0 + 60, T0 + 600, enc(exp))
    };
    let r = get(
        &srv,
        &shifted("timeShift(sum:g.cpu{host=web01},'1min')", ""),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json(),
        json!([series(
            "g.cpu",
            host("web01"),
            &[
                (60, json!(1)),
                (120, json!(2)),
                (180, json!(3)),
                (240, json!(4)),
                (300, json!(5))
            ]
        )])
    );
    // Doubles shift too; `shift` is the same function; OpenTSDB's unit words.
    for exp in [
        "shift(sum:g.mem{host=web01},'1min')",
        "timeShift(sum:g.mem{host=web01},'60sec')",
    ] {
        let r = get(&srv, &shifted(exp, "")).await;
        assert_eq!(
            r.json(),
            json!([series(
                "g.mem",
                host("web01"),
                &[(60, json!(0.5)), (120, json!(1.5))]
            )]),
            "{exp}"
        );
    }
    // Nested shifts add up; only the first series parameter is shifted.
    let r = get(
        &srv,
        &shifted(
            "timeShift(timeShift(sum:g.load{host=web01},'1min'),sum:g.cpu{host=web01},'2min')",
            "",
        ),
    )
    .await;
    assert_eq!(
        r.json(),
        json!([series(
            "g.load",
            host("web01"),
            &[(180, json!(2)), (240, json!(0)), (300, json!(8))]
        )])
    );
    // A shifted and an unshifted copy of one sub-query, combined.
    let r = get(
        &srv,
        &shifted(
            "diffSeries(sum:g.cpu{host=web01},timeShift(sum:g.cpu{host=web01},'1min'))",
            "",
        ),
    )
    .await;
    assert_eq!(
        r.json(),
        json!([series(
            "g.cpu",
            host("web01"),
            &[
                (60, json!(1.0)),
                (120, json!(1.0)),
                (180, json!(1.0)),
                (240, json!(1.0)),
                (300, json!(-5.0))
            ]
        )])
    );
    // Shifted by days: nothing a day before the data.
    let r = get(
        &srv,
        &shifted("timeShift(sum:g.cpu{host=web01},'1day')", ""),
    )
    .await;
    assert_eq!(r.json(), json!([]));
    srv.stop().await;
}

async fn series_functions(backend: &str) {
    let srv = start(backend).await;
    load(&srv).await;
    let by_host = |f: &str| format!("{f}(sum:g.cpu{{host=*}},sum:g.mem{{host=*}})");
    let three = |name: &str, a: &[(i64, f64)], b: &[(i64, f64)], c: f64| {
        let pts = |p: &[(i64, f64)]| p.iter().map(|(t, v)| (*t, json!(v))).collect::<Vec<_>>();
        json!([
            series(name, host("web01"), &pts(a)),
            series(name, host("web02"), &pts(b)),
            // Only g.mem has web03: the series is named after it.
            series("g.mem", host("web03"), &[(120, json!(c))]),
        ])
    };
    let sum = three(
        "g.cpu",
        &[(0, 1.5), (60, 3.5), (120, 3.0), (180, 4.0), (240, 5.0)],
        &[(0, -10.0), (60, 22.0), (120, -30.0), (180, 44.0)],
        7.0,
    );
    check_table(
        &srv,
        &[
            // Series with the same tags are combined at every time either has a point; a
            // missing point counts as 0.
            (&by_host("sumSeries"), sum.clone()),
            (&by_host("sum"), sum),
            (
                &by_host("diffSeries"),
                three(
                    "g.cpu",
                    &[(0, 0.5), (60, 0.5), (120, 3.0), (180, 4.0), (240, 5.0)],
                    &[(0, -10.0), (60, 18.0), (120, -30.0), (180, 36.0)],
                    -7.0,
                ),
            ),
            (
                &by_host("multiplySeries"),
                three(
                    "g.cpu",
                    &[(0, 0.5), (60, 3.0), (120, 0.0), (180, 0.0), (240, 0.0)],
                    &[(0, -0.0), (60, 40.0), (120, -0.0), (180, 160.0)],
                    0.0,
                ),
            ),
            (
                &by_host("difference"),
                three(
                    "g.cpu",
                    &[(0, 0.5), (60, 0.5), (120, 3.0), (180, 4.0), (240, 5.0)],
                    &[(0, -10.0), (60, 18.0), (120, -30.0), (180, 36.0)],
                    -7.0,
                ),
            ),
            (
                &by_host("multiply"),
                three(
                    "g.cpu",
                    &[(0, 0.5), (60, 3.0), (120, 0.0), (180, 0.0), (240, 0.0)],
                    &[(0, -0.0), (60, 40.0), (120, -0.0), (180, 160.0)],
                    0.0,
                ),
            ),
            // Division by 0 (a zero, or no point) is NaN.
            (
                "divideSeries(sum:g.cpu{host=web01},sum:g.load{host=web01})",
                json!([series(
                    "g.cpu",
                    host("web01"),
                    &[(0, json!(0.5)), (60, json!("NaN")), (120, json!(0.375)), (180, json!("NaN")), (240, json!("NaN"))]
                )]),
            ),
            (
                "divide(sum:g.mem{host=*},sum:g.cpu{host=*})",
                json!([
                    series(
                        "g.cpu",
                        host("web01"),
                        &[(0, json!(0.5)), (60, json!(0.75)), (120, json!(0.0)), (180, json!(0.0)), (240, json!(0.0))]
                    ),
                    series(
                        "g.cpu",
                        host("web02"),
                        &[(0, json!(-0.0)), (60, json!(0.1)), (120, json!(-0.0)), (180, json!(0.1))]
                    ),
                    series("g.mem", host("web03"), &[(120, json!("NaN"))]),
                ]),
            ),
            // Three parameters, left to right: (cpu - load) - mem.
            (
                "diffSeries(sum:g.cpu{host=web01},sum:g.load{host=web01},sum:g.mem{host=web01})",
                json!([series(
                    "g.cpu",
                    host("web01"),
                    &[(0, json!(-1.5)), (60, json!(0.5)), (120, json!(-5.0)), (180, json!(4.0)), (240, json!(5.0))]
                )]),
            ),
            // Tags must match exactly: g.cpu over all hosts ({} and aggregated `host`) does
            // not meet g.load{host=web01}.
            (
                "sumSeries(sum:g.cpu,sum:g.load{host=web01})",
                json!([
                    {"metric": "g.cpu", "tags": {}, "aggregateTags": ["host"], "dps": {
                        (T0).to_string(): -9.0, (T0 + 60).to_string(): 22.0,
                        (T0 + 120).to_string(): -27.0, (T0 + 180).to_string(): 44.0,
                        (T0 + 240).to_string(): 5.0}},
                    series("g.load", host("web01"), &[(0, json!(2.0)), (60, json!(0.0)), (120, json!(8.0))]),
                ]),
            ),
            // One sub-query twice: each parameter reads its own copy.
            (
                "divideSeries(sum:g.cpu{host=web02},sum:g.cpu{host=web02})",
                json!([series(
                    "g.cpu",
                    host("web02"),
                    &[(0, json!(1.0)), (60, json!(1.0)), (120, json!(1.0)), (180, json!(1.0))]
                )]),
            ),
        ],
    )
    .await;
    srv.stop().await;
}

async fn nesting_and_several_expressions(backend: &str) {
    let srv = start(backend).await;
    load(&srv).await;
    // scale: 2,4,6,8,10 / -20,40,-60,80; absolute: 1..5 / 10,20,30,40.
    check_table(
        &srv,
        &[(
            "alias(sumSeries(scale(sum:g.cpu{host=*},2),absolute(sum:g.cpu{host=*})),total-@host)",
            json!([
                series(
                    "total-web01",
                    json!({}),
                    &[(0, json!(3.0)), (60, json!(6.0)), (120, json!(9.0)), (180, json!(12.0)), (240, json!(15.0))]
                ),
                series(
                    "total-web02",
                    json!({}),
                    &[(0, json!(-10.0)), (60, json!(60.0)), (120, json!(-30.0)), (180, json!(120.0))]
                ),
            ]),
        ),
        // Aliased series still match on their tags.
        (
            "sumSeries(alias(sum:g.cpu{host=web01},a),sum:g.load{host=web01})",
            json!([series(
                "g.load",
                host("web01"),
                &[(0, json!(3.0)), (60, json!(2.0)), (120, json!(11.0)), (180, json!(4.0)), (240, json!(5.0))]
            )]),
        ),
        (
            "movingAverage(absolute(sum:g.cpu{host=web02}),2)",
            json!([series(
                "g.cpu",
                host("web02"),
                &[(0, json!(0.0)), (60, json!(15.0)), (120, json!(25.0)), (180, json!(35.0))]
            )]),
        )],
    )
    .await;
    // Several expressions answer in order; an `m=` neither shows nor changes them.
    let r = get(
        &srv,
        &format!(
            "start={T0}&end={}&m=sum:g.load&exp={}&exp={}",
            T0 + 600,
            enc("scale(sum:g.mem{host=web02},3)"),
            enc("absolute(sum:g.cpu{host=web02})")
        ),
    )
    .await;
    assert_eq!(
        r.json(),
        json!([
            series("g.mem", host("web02"), &[(60, json!(6)), (180, json!(12))]),
            series(
                "g.cpu",
                host("web02"),
                &[
                    (0, json!(10)),
                    (60, json!(20)),
                    (120, json!(30)),
                    (180, json!(40))
                ]
            ),
        ])
    );
    // Without an expression, an `m=` alone answers nothing.
    let r = get(&srv, &format!("start={T0}&m=sum:g.load")).await;
    assert_eq!((r.status, r.json()), (200, json!([])));
    // An expression whose series match nothing answers nothing.
    assert_eq!(
        answer(&srv, "scale(sum:g.cpu{host=web9*},2)").await,
        json!([])
    );
    // Downsampling and rates in sub-queries: the values /api/query gives, scaled.
    for m in [
        "sum:1m-avg:rate:g.cpu{host=web02}",
        "max:2m-sum:g.mem{host=*}",
    ] {
        let plain = http(
            srv.addr,
            "GET",
            &format!("/api/query?start={T0}&end={}&m={}", T0 + 600, enc(m)),
            "",
        )
        .await
        .json();
        let mut want = plain.clone();
        for (i, g) in plain.as_array().unwrap().iter().enumerate() {
            for (t, v) in g["dps"].as_object().unwrap() {
                want[i]["dps"][t] = match v.as_i64() {
                    Some(n) => json!(3 * n),
                    None => json!(3.0 * v.as_f64().unwrap()),
                };
            }
        }
        assert!(!want.as_array().unwrap().is_empty());
        assert_eq!(answer(&srv, &format!("scale({m},3)")).await, want, "{m}");
    }
    srv.stop().await;
}

async fn options(backend: &str) {
    let srv = start(backend).await;
    load(&srv).await;
    let exp = enc("scale(sum:g.mem{host=web01},2)");
    let range = format!("start={T0}&end={}", T0 + 600);
    // arrays: [[t, v], ...].
    let r = get(&srv, &format!("{range}&exp={exp}&arrays")).await;
    assert_eq!(r.json()[0]["dps"], json!([[T0, 1.0], [T0 + 60, 3.0]]));
    // ms: times in milliseconds, with arrays too.
    let r = get(&srv, &format!("{range}&exp={exp}&ms")).await;
    assert_eq!(
        r.json()[0]["dps"],
        json!({(T0 * 1000).to_string(): 1.0, ((T0 + 60) * 1000).to_string(): 3.0})
    );
    let r = get(&srv, &format!("{range}&exp={exp}&ms&arrays")).await;
    assert_eq!(
        r.json()[0]["dps"],
        json!([[T0 * 1000, 1.0], [(T0 + 60) * 1000, 3.0]])
    );
    // Millisecond times in the range, and points outside it left out.
    let r = get(
        &srv,
        &format!("start={}&end={}&exp={exp}", T0 * 1000 + 1, (T0 + 60) * 1000),
    )
    .await;
    assert_eq!(r.json()[0]["dps"], json!({(T0 + 60).to_string(): 3.0}));
    // show_query: the sub-query each series came from.
    let r = get(&srv, &format!("{range}&exp={exp}&show_query")).await;
    let q = &r.json()[0]["query"];
    assert_eq!(q["metric"], "g.mem");
    assert_eq!(q["aggregator"], "sum");
    assert_eq!(q["index"], 0);
    assert_eq!(q["filters"][0]["filter"], "web01");
    // tz: dates read in the zone (01:00 in Paris is T0).
    let paris = format!(
        "start={}&end={}&tz=Europe/Paris&exp={exp}",
        enc("2013/01/01-01:00:00"),
        enc("2013/01/01-01:10:00")
    );
    let r = get(&srv, &paris).await;
    assert_eq!(
        r.json()[0]["dps"],
        json!({T0.to_string(): 1.0, (T0 + 60).to_string(): 3.0})
    );
    let utc = format!(
        "start={}&end={}&exp={exp}",
        enc("2013/01/01-01:00:00"),
        enc("2013/01/01-01:10:00")
    );
    assert_eq!(get(&srv, &utc).await.json(), json!([]));
    // tz: calendar days start at local midnight (Asia/Kolkata: 18:30Z the day before).
    let days = |tz: &str| {
        format!(
            "start={}&end={}{tz}&exp={}",
            T0 - 86400,
            T0 + 600,
            enc("scale(sum:1dc-sum:g.cpu{host=web01},1)")
        )
    };
    let r = get(&srv, &days("&tz=Asia/Kolkata")).await;
    assert_eq!(r.json()[0]["dps"], json!({(T0 - 19800).to_string(): 15.0}));
    let r = get(&srv, &days("")).await;
    assert_eq!(r.json()[0]["dps"], json!({T0.to_string(): 15.0}));
    // show_tsuids, show_stats and show_summary.
    let r = get(
        &srv,
        &format!("{range}&exp={exp}&show_tsuids&show_stats&show_summary"),
    )
    .await;
    let v = r.json();
    assert_eq!(v[0]["tsuids"].as_array().unwrap().len(), 1);
    assert_eq!(v[0]["stats"]["emittedDPs"], 2);
    assert_eq!(v[1]["statsSummary"]["datapoints"], 2);
    // jsonp wraps the answer.
    let r = get(&srv, &format!("{range}&exp={exp}&jsonp=cb")).await;
    assert!(
        r.text().starts_with("cb([{") && r.text().ends_with("}])"),
        "{}",
        r.text()
    );
    // The versioned path is the same endpoint.
    let r = http(
        srv.addr,
        "GET",
        &format!("/api/v1/query/gexp?{range}&exp={exp}"),
        "",
    )
    .await;
    assert_eq!(r.json()[0]["dps"][T0.to_string()], json!(1.0));
    srv.stop().await;
}

/// Asserts a `{"error":{...}}` answer.
/// A repeated `start` or `end` is its last value, even empty, as OpenTSDB's
/// `getQueryStringParam` reads it: `start=…&start=` has no start, `end=…&end=` ends now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_start_and_end_read_their_last_value() {
    let srv = start("memory").await;
    load(&srv).await;
    let exp = enc("absolute(sum:g.load)");
    let r = get(&srv, &format!("start={T0}&start=&exp={exp}")).await;
    assert_error(&r, 400, "Missing parameter <code>start</code>");
    let r = get(&srv, &format!("start={T0}&end={}&end=&exp={exp}", T0 + 60)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json(),
        json!([series(
            "g.load",
            host("web01"),
            &[(0, json!(2)), (60, json!(0)), (120, json!(8))]
        )])
    );
}

fn assert_error(r: &Response, status: u16, message: &str) {
    assert_eq!(r.status, status, "{}", r.text());
    let v = r.json();
    assert_eq!(v["error"]["code"], status, "{v}");
    assert_eq!(v["error"]["message"], message, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors() {
    let srv = start("memory").await;
    load(&srv).await;
    let range = format!("start={T0}&end={}", T0 + 600);
    let exp_error = |exp: &str| format!("{range}&exp={}", enc(exp));
    let cases: &[(&str, &str)] = &[
        // Reading the expression.
        ("scale(sum:g.cpu,,2)", "Failed to parse scale(sum:g.cpu,,2)"),
        ("scale(sum:g.cpu+2)", "Failed to parse scale(sum:g.cpu+2)"),
        ("scale(sum:g.cpu,2", "Failed to parse scale(sum:g.cpu,2"),
        ("scale(sum:g.cpu,2))", "Failed to parse scale(sum:g.cpu,2))"),
        ("sum:g.cpu", "Failed to parse sum:g.cpu"),
        (
            "scale(rate{counter}:g.cpu,2)",
            "Failed to parse scale(rate{counter}:g.cpu,2)",
        ),
        ("foo(sum:g.cpu)", "Function foo has not been implemented"),
        (
            "Scale(sum:g.cpu,2)",
            "Function Scale has not been implemented",
        ),
        ("scale(foo:g.cpu,2)", "No such aggregation function: foo"),
        (
            "scale(2,sum:g.cpu)",
            "Unknown parameter type: null in tree: scale(g.cpu)",
        ),
        // Each function's parameters.
        ("scale(sum:g.cpu)", "Missing scaling factor"),
        (
            "scale(sum:g.cpu,abc)",
            "Unparseable scale factor value: abc",
        ),
        (
            "scale(sum:g.cpu,1.2.3)",
            "Invalid parameter, must be an integer or floating point",
        ),
        ("alias(sum:g.cpu)", "Missing the alias"),
        (
            "movingAverage(sum:g.cpu)",
            "Missing moving average window size",
        ),
        (
            "movingAverage(sum:g.cpu,abc)",
            "Unparseable window size: abc",
        ),
        (
            "movingAverage(sum:g.cpu,0)",
            "Moving average window must be an integer greater than zero",
        ),
        (
            "movingAverage(sum:g.cpu,'0min')",
            "Moving average window must be an integer greater than zero",
        ),
        (
            "movingAverage(sum:g.cpu,99999999999)",
            "Invalid parameter, must be an integer",
        ),
        (
            "movingAverage(sum:g.cpu,'5w')",
            "Unknown time unit=w in window='5w'",
        ),
        (
            "movingAverage(sum:g.cpu,'min')",
            "Invalid moving window parameter: 'min'",
        ),
        (
            "highestMax(sum:g.cpu)",
            "Missing top n value (number of series to return)",
        ),
        ("highestCurrent(sum:g.cpu,x)", "Unparseable top n value: x"),
        (
            "highestCurrent(sum:g.cpu,0)",
            "Top n value must be greater than zero: 0",
        ),
        (
            "timeShift(sum:g.cpu)",
            "Need amount of timeshift to perform timeshift",
        ),
        (
            "timeShift(sum:g.cpu,1day)",
            "Invalid timeshift parameter: eg '10min'",
        ),
        (
            "timeShift(sum:g.cpu,'1fortnight')",
            "unknown time unit=fortnight",
        ),
        ("timeShift(sum:g.cpu,'0min')", "timeshift <= 0"),
        ("shift(sum:g.cpu,'x')", "Invalid Parameter: 'x'"),
        (
            "sumSeries(sum:g.cpu)",
            "Must have 2 to 26 series, got 1 instead",
        ),
        (
            "divideSeries(sum:g.cpu,2)",
            "Must have 2 to 26 series, got 1 instead",
        ),
        // Inner functions are checked first.
        ("scale(alias(sum:g.cpu),x)", "Missing the alias"),
        // Data.
        ("scale(sum:nope,2)", "No such name for 'metrics': 'nope'"),
        (
            "scale(sum:g.cpu{host=web99},2)",
            "No such name for 'tagv': 'web99'",
        ),
    ];
    for (exp, message) in cases {
        let r = get(&srv, &exp_error(exp)).await;
        assert_error(&r, 400, message);
    }
    // A function's error carries its message as details too, as OpenTSDB's do.
    let r = get(&srv, &exp_error("scale(sum:g.cpu,abc)")).await;
    assert_eq!(
        r.json()["error"]["details"],
        "Unparseable scale factor value: abc"
    );
    // 27 series.
    let many = vec!["sum:g.cpu"; 27].join(",");
    let r = get(&srv, &exp_error(&format!("sumSeries({many})"))).await;
    assert_error(&r, 400, "Must have 2 to 26 series, got 27 instead");
    // The request.
    let r = get(&srv, &format!("exp={}", enc("scale(sum:g.cpu,2)"))).await;
    assert_error(&r, 400, "Missing parameter <code>start</code>");
    assert_error(&get(&srv, &range).await, 400, "Missing sub queries");
    let r = get(&srv, &exp_error("scale(10)")).await;
    assert_error(&r, 400, "Missing sub queries");
    let r = get(
        &srv,
        &format!(
            "start={}&end={T0}&exp={}",
            T0 + 600,
            enc("scale(sum:g.cpu,2)")
        ),
    )
    .await;
    assert_error(
        &r,
        400,
        &format!(
            "End time [{}] must be greater than the start time [{}]",
            T0 * 1000,
            (T0 + 600) * 1000
        ),
    );
    let r = get(
        &srv,
        &format!("{}&tz=Nowhere/Atlantis", exp_error("scale(sum:g.cpu,2)")),
    )
    .await;
    assert_error(&r, 400, "The timezone specification could not be found");
    let r = get(
        &srv,
        &format!("start=yesterday&exp={}", enc("scale(sum:g.cpu,2)")),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    // Methods: OpenTSDB never answers a POST; here every method but GET is refused at once.
    for method in ["POST", "PUT"] {
        let r = http(
            srv.addr,
            method,
            &format!("/api/query/gexp?{}", exp_error("scale(sum:g.cpu,2)")),
            "{}",
        )
        .await;
        assert_error(&r, 405, "Method not allowed");
        assert_eq!(
            r.json()["error"]["details"],
            format!("The HTTP method [{method}] is not permitted for this endpoint")
        );
    }
    let r = http(
        srv.addr,
        "DELETE",
        &format!("/api/query/gexp?{}", exp_error("scale(sum:g.cpu,2)")),
        "",
    )
    .await;
    assert_error(&r, 400, "Bad request");
    assert_eq!(
        r.json()["error"]["details"],
        "Deleting data is not enabled (tsd.http.query.allow_delete=false)"
    );
    srv.stop().await;
}

on_backends!(
    absolute_and_scale,
    alias,
    moving_average,
    highest,
    time_shift,
    series_functions,
    nesting_and_several_expressions,
    options,
);
