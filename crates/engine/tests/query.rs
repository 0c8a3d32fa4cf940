#![allow(clippy::unwrap_used, clippy::expect_used)]
//! OpenTSDB's standard query fixture: series 1..300 (host=web01) and 300..1 (host=web02), a
//! point every 30 s from 1356998430, run through the query pipeline on every backend.
mod common;

use hourglass_core::value::Value;
use hourglass_engine::IncomingPoint;
use hourglass_engine::Tsdb;
use hourglass_engine::num::Num;
use hourglass_engine::query::aggregator::Aggregator;
use hourglass_engine::query::downsample::DownsampleSpec;
use hourglass_engine::query::filter::TagFilter;
use hourglass_engine::query::plan::{GroupResult, Limits, RunOptions, SubQuery, run};

const START: i64 = 1356998400000;
const END: i64 = 1357041600000;

fn load(db: &hourglass_engine::Tsdb) {
    let w1 = [("host", "web01")];
    let w2 = [("host", "web02")];
    let mut pts = Vec::new();
    for i in 0..300i64 {
        pts.push(IncomingPoint {
            metric: "sys.cpu.user",
            timestamp: 1356998430 + i * 30,
            value: Value::Int(i + 1),
            tags: &w1,
            line_tags: None,
        });
        pts.push(IncomingPoint {
            metric: "sys.cpu.user",
            timestamp: 1356998430 + i * 30,
            value: Value::Int(300 - i),
            tags: &w2,
            line_tags: None,
        });
    }
    assert_eq!(db.add_points(&pts).stored, 600);
}

fn sub(agg: &str) -> SubQuery {
    SubQuery::new(Aggregator::parse(agg).unwrap(), "sys.cpu.user")
}

fn go(db: &Tsdb, q: &SubQuery) -> Vec<GroupResult> {
    run(db, START, END, q, &RunOptions::default())
        .unwrap()
        .groups
}

#[test]
fn standard_fixture_through_the_pipeline() {
    for (backend, store) in common::backends() {
        let db = common::open(store, common::auto_create());
        load(&db);
        // Half of it flushed, half still buffered: queries see both.
        let sum = go(&db, &sub("sum"));
        assert_eq!(sum.len(), 1, "{backend}");
        assert_eq!(sum[0].dps.len(), 300, "{backend}");
        assert!(
            sum[0].dps.iter().all(|(_, v)| *v == Num::Int(301)),
            "{backend}"
        );
        assert_eq!(sum[0].aggregate_tags, vec!["host".to_string()]);
        assert!(sum[0].tags.is_empty());
        db.flush().unwrap();

        let mut by_host = sub("sum");
        by_host.filters = vec![TagFilter::from_legacy("host", "*", true).unwrap()];
        let groups = go(&db, &by_host);
        assert_eq!(groups.len(), 2, "{backend}");
        assert_eq!(
            groups[0].tags.get("host").map(String::as_str),
            Some("web01")
        );
        assert_eq!(groups[0].dps[0], (1356998430000, Num::Int(1)));

        let mut rate = sub("sum");
        rate.rate = true;
        let r = go(&db, &rate);
        assert_eq!(r[0].dps.len(), 299, "{backend}");
        assert!(
            r[0].dps.iter().all(|(_, v)| *v == Num::Float(0.0)),
            "{backend}: +1/30s and -1/30s cancel"
        );

        let mut ds = sub("sum");
        ds.downsample = Some(DownsampleSpec::parse("1m-avg").unwrap());
        let d = go(&db, &ds);
        assert_eq!(d[0].dps.len(), 151, "{backend}");

        let mut only = sub("sum");
        only.filters = vec![TagFilter::new("literal_or", "host", "web02", false).unwrap()];
        let o = go(&db, &only);
        assert_eq!(o[0].dps[0], (1356998430000, Num::Int(300)));
        assert_eq!(o[0].tags.get("host").map(String::as_str), Some("web02"));

        // Literal values are pushed into the row scan: rows of other hosts are not read.
        let w3 = [("host", "web03")];
        let extra: Vec<IncomingPoint> = (0..300i64)
            .map(|i| IncomingPoint {
                metric: "sys.cpu.user",
                timestamp: 1356998430 + i * 30,
                value: Value::Int(7),
                tags: &w3,
                line_tags: None,
            })
            .collect();
        assert_eq!(db.add_points(&extra).stored, 300);
        db.flush().unwrap();
        let rows_read = |expr: &str| {
            let mut q = sub("sum");
            q.filters = vec![TagFilter::new("literal_or", "host", expr, false).unwrap()];
            run(&db, START, END, &q, &RunOptions::default())
                .unwrap()
                .stats
                .rows
        };
        // Unflushed rows are filtered the same way.
        let mut both = sub("sum");
        both.filters = vec![TagFilter::new("literal_or", "host", "web01|web02", false).unwrap()];
        let w1 = [("host", "web01")];
        let more: Vec<IncomingPoint> = (0..2i64)
            .map(|i| IncomingPoint {
                metric: "sys.cpu.user",
                timestamp: 1357000000 + i,
                value: Value::Int(1000),
                tags: &w1,
                line_tags: None,
            })
            .collect();
        assert_eq!(db.add_points(&more).stored, 2);
        let g = go(&db, &both);
        assert_eq!(g.len(), 1, "{backend}");
        assert!(
            g[0].dps.iter().any(|(t, _)| *t == 1357000000000),
            "{backend}: buffered points"
        );
        db.flush().unwrap();
        let one = rows_read("web02");
        assert!(one > 0, "{backend}");
        assert_eq!(rows_read("web01|web02"), 2 * one, "{backend}");
        assert_eq!(rows_read("web01|web02|web03"), 3 * one, "{backend}");

        let err = run(
            &db,
            START,
            END,
            &SubQuery {
                metric: "nope".into(),
                ..sub("sum")
            },
            &RunOptions::default(),
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "No such name for 'metrics': 'nope'");
    }
}

fn limited(limits: Limits) -> RunOptions {
    RunOptions {
        limits,
        ..RunOptions::default()
    }
}

#[test]
fn limits_stop_queries_with_the_limit_named() {
    for (backend, store) in common::backends() {
        let db = common::open(store, common::auto_create());
        load(&db);
        db.flush().unwrap();
        let err = |limits: Limits| {
            run(&db, START, END, &sub("sum"), &limited(limits))
                .unwrap_err()
                .to_string()
        };
        let points = err(Limits {
            max_points: 100,
            ..Limits::default()
        });
        assert_eq!(
            points,
            "Sorry, you have attempted to fetch more than our limit of 100 data points. \
             Please try filtering using more tags or decrease your time range.",
            "{backend}"
        );
        assert!(
            err(Limits {
                max_series: 1,
                ..Limits::default()
            })
            .contains("limit of 1 time series"),
            "{backend}"
        );
        assert!(
            err(Limits {
                max_bytes: 100,
                ..Limits::default()
            })
            .contains("MB from storage"),
            "{backend}"
        );
        assert!(
            err(Limits {
                max_held_points: 500,
                ..Limits::default()
            })
            .contains("hold more than 500 data points in memory"),
            "{backend}"
        );
        // Downsampling holds buckets, not points: the same cap lets a 1h-avg through.
        let mut hourly = sub("sum");
        hourly.downsample = Some(DownsampleSpec::parse("1h-avg").unwrap());
        let tight = limited(Limits {
            max_held_points: 500,
            ..Limits::default()
        });
        let groups = run(&db, START, END, &hourly, &tight).unwrap().groups;
        assert_eq!(groups[0].dps.len(), 3, "{backend}");
        let timeout = run(
            &db,
            START,
            END,
            &sub("sum"),
            &RunOptions {
                limits: Limits {
                    timeout: Some(std::time::Duration::ZERO),
                    ..Limits::default()
                },
                started: std::time::Instant::now() - std::time::Duration::from_millis(5),
                ..RunOptions::default()
            },
        )
        .unwrap_err();
        assert_eq!(
            timeout.kind(),
            hourglass_engine::ErrorKind::LimitExceeded,
            "{backend}"
        );
        // Within limits the same query answers in full.
        let ok = run(
            &db,
            START,
            END,
            &sub("sum"),
            &limited(Limits {
                max_points: 600,
                max_series: 2,
                ..Limits::default()
            }),
        )
        .unwrap();
        assert_eq!(ok.groups[0].dps.len(), 300, "{backend}");
        assert_eq!(ok.stats.points, 600, "{backend}");
        assert_eq!(ok.stats.series, 2, "{backend}");
    }
}

#[test]
fn tsuid_queries_and_deletes() {
    for (backend, store) in common::backends() {
        let db = common::open(store, common::auto_create());
        load(&db);
        let mut by_host = sub("sum");
        by_host.filters = vec![TagFilter::from_legacy("host", "*", true).unwrap()];
        let groups = go(&db, &by_host);
        let web02 = groups[1].tsuids[0].clone();
        let mut q = sub("sum");
        q.metric.clear();
        q.tsuids = vec![web02.clone()];
        let g = go(&db, &q);
        assert_eq!(g.len(), 1, "{backend}");
        assert_eq!(g[0].metric, "sys.cpu.user");
        assert_eq!(g[0].dps[0], (1356998430000, Num::Int(300)), "{backend}");
        assert_eq!(g[0].tsuids, vec![web02.clone()]);

        // Delete web02's points in the first hour but one minute: the row is rewritten.
        let mut del = sub("sum");
        del.filters = vec![TagFilter::new("literal_or", "host", "web02", false).unwrap()];
        let cut = 1356998430000 + 60_000;
        let deleted = run(
            &db,
            START,
            cut,
            &del,
            &RunOptions {
                delete: true,
                ..RunOptions::default()
            },
        )
        .unwrap();
        assert_eq!(
            deleted.groups[0].dps.len(),
            3,
            "{backend}: answers what it deletes"
        );
        let left = go(&db, &del);
        assert_eq!(left[0].dps.len(), 297, "{backend}");
        assert_eq!(left[0].dps[0].0, cut + 30_000, "{backend}");
        let web01 = go(&db, &by_host);
        assert_eq!(web01[0].dps.len(), 300, "{backend}: other series untouched");
    }
}

#[test]
fn calendar_days_in_a_time_zone() {
    for (backend, store) in common::backends() {
        let db = common::open(store, common::auto_create());
        let tags = [("host", "a")];
        // One point per hour for three days from 2013-01-01T00:00Z.
        let pts: Vec<IncomingPoint> = (0..72i64)
            .map(|h| IncomingPoint {
                metric: "m",
                timestamp: 1356998400 + h * 3600,
                value: Value::Int(1),
                tags: &tags,
                line_tags: None,
            })
            .collect();
        db.add_points(&pts);
        let denver: hourglass_core::time::Tz = "America/Denver".parse().unwrap();
        let mut q = SubQuery::new(Aggregator::Sum, "m");
        q.downsample = Some(
            DownsampleSpec::parse("1dc-sum")
                .unwrap()
                .in_zone(denver, false)
                .unwrap(),
        );
        let g = run(
            &db,
            1356998400000,
            1356998400000 + 72 * 3_600_000 - 1,
            &q,
            &RunOptions::default(),
        )
        .unwrap()
        .groups;
        // Denver is UTC-7: local midnights are at 07:00Z. The first bucket (Dec 31 local,
        // 7 points) starts before the query and is dropped.
        let want = vec![
            (1357023600000, Num::Float(24.0)),
            (1357110000000, Num::Float(24.0)),
            (1357196400000, Num::Float(17.0)),
        ];
        assert_eq!(g[0].dps, want, "{backend}");
    }
}

/// Reading a sub-query's hours in pieces on two threads gives exactly what one thread
/// gives: series that start late or stop early, buffered points, rates, every downsampling
/// kind (buckets that an hour boundary cuts, calendar days in a zone, `0all`) and fills.
#[test]
fn two_threads_answer_as_one() {
    let hosts: Vec<[(&str, &str); 1]> = ["a", "b", "c", "d"].map(|h| [("host", h)]).to_vec();
    let t0 = 1_356_998_400i64; // 2013-01-01T00:00Z
    for (backend, store) in common::backends() {
        let db = common::open(store, common::auto_create());
        let mut pts = Vec::new();
        for i in 0..(30 * 360) {
            let t = t0 + i * 10 + 3;
            for (n, tags) in hosts.iter().enumerate() {
                // a: all along; b: first hours only; c: late start; d: sparse, floats.
                let keep = match n {
                    0 => true,
                    1 => i < 5 * 360,
                    2 => i > 20 * 360,
                    _ => i % 97 == 0,
                };
                if keep {
                    let value = if n == 3 {
                        Value::Double(i as f64 * 0.25)
                    } else {
                        Value::Int(i * (n as i64 + 1))
                    };
                    pts.push(IncomingPoint {
                        metric: "sys.cpu.user",
                        timestamp: t,
                        value,
                        tags,
                        line_tags: None,
                    });
                }
            }
        }
        db.add_points(&pts);
        db.flush().unwrap();
        // Some points stay buffered, in the last hours.
        let late: Vec<IncomingPoint> = (0..50i64)
            .map(|i| IncomingPoint {
                metric: "sys.cpu.user",
                timestamp: t0 + 29 * 3600 + i * 7,
                value: Value::Int(5),
                tags: &hosts[0],
                line_tags: None,
            })
            .collect();
        db.add_points(&late);

        let tz = hourglass_core::time::parse_timezone("America/Denver").unwrap();
        let (start, end) = (t0 * 1000 + 1_234_567, (t0 + 30 * 3600) * 1000 - 5_000);
        for (agg, ds, rate, group) in [
            ("sum", None, false, false),
            ("none", None, false, false),
            ("avg", None, true, true),
            ("sum", Some("1m-avg"), false, false),
            ("max", Some("7m-sum"), false, true),
            ("zimsum", Some("1h-max-zero"), false, false),
            ("sum", Some("90m-count-nan"), true, false),
            ("sum", Some("1dc-avg"), false, true),
            ("dev", Some("0all-sum"), false, true),
            ("p95", Some("13m-p50-null"), false, false),
        ] {
            let mut q = sub(agg);
            q.rate = rate;
            if let Some(ds) = ds {
                q.downsample = Some(
                    DownsampleSpec::parse(ds)
                        .unwrap()
                        .in_zone(tz, false)
                        .unwrap(),
                );
            }
            if group {
                q.filters = vec![TagFilter::from_legacy("host", "*", true).unwrap()];
            }
            let answer = |parallel: bool| {
                let o = run(
                    &db,
                    start,
                    end,
                    &q,
                    &RunOptions {
                        parallel,
                        ..RunOptions::default()
                    },
                )
                .unwrap();
                (o.groups, o.stats.points, o.stats.rows, o.stats.series)
            };
            let one = answer(false);
            let points: usize = one.0.iter().map(|g| g.dps.len()).sum();
            assert!(points > 0, "{agg} {ds:?}");
            let two = answer(true);
            // NaN != NaN: compare the text of the answers.
            let (two, one) = (format!("{two:?}"), format!("{one:?}"));
            assert!(
                two == one,
                "{backend} {agg} {ds:?} rate={rate}: the answers differ"
            );
        }
    }
}

/// A range of many days is read in several pieces, each taken by whichever of two threads is
/// free: the answers, counts and limit errors are those of one thread reading it all, with
/// series that live in part of the range only (most of the points in its last days).
#[test]
fn pieces_of_many_days_answer_as_one() {
    let hosts: Vec<[(&str, &str); 1]> = ["a", "b", "c"].map(|h| [("host", h)]).to_vec();
    let t0 = 1_356_998_400i64; // 2013-01-01T00:00Z
    let days = 20i64;
    for (backend, store) in common::backends() {
        let db = common::open(store, common::auto_create());
        let mut pts = Vec::new();
        for i in 0..(days * 144) {
            let t = t0 + i * 600 + 7;
            for (n, tags) in hosts.iter().enumerate() {
                // a: all along, every 10 minutes; b: the last 4 days, every 2 minutes
                // (five points a slot); c: the first 3 days, floats.
                let times: Vec<i64> = match n {
                    0 => vec![t],
                    1 if i >= (days - 4) * 144 => (0..5).map(|k| t + k * 120).collect(),
                    2 if i < 3 * 144 => vec![t],
                    _ => Vec::new(),
                };
                for ts in times {
                    let value = if n == 2 {
                        Value::Double(i as f64 * 0.5)
                    } else {
                        Value::Int(i * (n as i64 + 1) + ts % 3)
                    };
                    pts.push(IncomingPoint {
                        metric: "sys.cpu.user",
                        timestamp: ts,
                        value,
                        tags,
                        line_tags: None,
                    });
                }
            }
        }
        db.add_points(&pts);
        db.flush().unwrap();
        let (start, end) = (t0 * 1000 + 61_000, (t0 + days * 86_400) * 1000 - 1);
        for (agg, ds, rate, group) in [
            ("sum", None, false, false),
            ("none", None, true, false),
            ("sum", Some("1h-avg"), false, false),
            ("max", Some("1h-max"), false, true),
            ("avg", Some("6h-sum-zero"), false, true),
            ("sum", Some("1d-count"), true, false),
            ("sum", Some("0all-avg"), false, false),
        ] {
            let mut q = sub(agg);
            q.rate = rate;
            q.downsample = ds.map(|d| DownsampleSpec::parse(d).unwrap());
            if group {
                q.filters = vec![TagFilter::from_legacy("host", "*", true).unwrap()];
            }
            let answer = |parallel: bool, limits: Limits| {
                run(
                    &db,
                    start,
                    end,
                    &q,
                    &RunOptions {
                        parallel,
                        limits,
                        ..RunOptions::default()
                    },
                )
                .map(|o| {
                    format!(
                        "{:?}",
                        (o.groups, o.stats.points, o.stats.rows, o.stats.series)
                    )
                })
                .map_err(|e| e.to_string())
            };
            let one = answer(false, Limits::default());
            assert!(
                one.as_ref().is_ok_and(|a| a.len() > 100),
                "{backend} {agg} {ds:?}"
            );
            assert!(
                answer(true, Limits::default()) == one,
                "{backend} {agg} {ds:?} rate={rate}: the answers differ"
            );
            // A point limit met in the last days only, and one never met.
            for max_points in [5_000, 1_000_000] {
                let limits = Limits {
                    max_points,
                    ..Limits::default()
                };
                let one = answer(false, limits);
                assert_eq!(one.is_err(), max_points < 6_000, "{backend} {agg} {ds:?}");
                assert_eq!(
                    answer(true, limits),
                    one,
                    "{backend} {agg} {ds:?}: limit {max_points}"
                );
            }
        }
    }
}

#[test]
fn none_answers_series_in_row_key_order_whatever_hour_they_start() {
    // web02 is created first (smallest tag value UID) but written only in the later hour:
    // OpenTSDB orders `none` results by the row key without the timestamp (salt, metric,
    // tags), not by the hour a series first appears in or the order a store returns rows.
    for (backend, store) in common::backends() {
        let db = common::open(store, common::auto_create());
        let (w1, w2, w3) = (
            [("host", "web01")],
            [("host", "web02")],
            [("host", "web03")],
        );
        let pt = |ts: i64, tags: &'static [(&'static str, &'static str)]| IncomingPoint {
            metric: "sys.cpu.user",
            timestamp: ts,
            value: Value::Int(1),
            tags,
            line_tags: None,
        };
        let (w1, w2, w3): (&'static _, &'static _, &'static _) = (
            Box::leak(Box::new(w1)),
            Box::leak(Box::new(w2)),
            Box::leak(Box::new(w3)),
        );
        db.add_points(&[pt(1357002000, w2)]); // hour 2 only, smallest tag value UID
        db.add_points(&[pt(1356998400, w3), pt(1356998400, w1)]); // hour 1
        db.flush().unwrap();
        let names: Vec<String> = go(&db, &sub("none"))
            .iter()
            .map(|g| g.tags["host"].clone())
            .collect();
        assert_eq!(names, vec!["web02", "web03", "web01"], "{backend}");
    }
}

/// One-hour downsamples by sum, avg, min, max and count read the embedded store's hour
/// summaries (RFC 0009) and answer exactly as decoding every point does: on each backend the
/// answers equal the memory store's (which keeps no summary), whatever the range cuts, with
/// buffered points, sparse series, fills, rates and groups.
#[test]
fn hour_summaries_answer_as_the_points_do() {
    let hosts: Vec<[(&str, &str); 1]> = ["a", "b", "c", "d", "e"].map(|h| [("host", h)]).to_vec();
    let t0 = 1_356_998_400i64; // 2013-01-01T00:00Z
    let mut answers: Vec<(String, Vec<String>)> = Vec::new();
    for (backend, store) in common::backends() {
        let db = common::open(store, common::auto_create());
        let mut pts = Vec::new();
        for i in 0..(30 * 360) {
            let t = t0 + i * 10;
            for (n, tags) in hosts.iter().enumerate() {
                // b and d have no stored point in one hour: buffered ones come later
                if (n == 1 && i / 360 == 12) || (n == 3 && i / 360 == 10) {
                    continue;
                }
                let value = match n {
                    // integers, negative too
                    0 => Value::Int((i * 7919) % 1000 - 500),
                    // floats with every decimal, signed zeros and a huge value now and then
                    1 => match i % 500 {
                        0 => Value::Double(-0.0),
                        1 => Value::Double(0.0),
                        2 => Value::Double(1e300),
                        _ => Value::Double((i as f64 * 0.37).sin() * 100.0 / 3.0),
                    },
                    // 4-byte floats
                    2 => Value::Float((i % 77) as f32 * 0.1),
                    // two hours of -0.0 only: their sums are 0.0, as OpenTSDB's from 0.0
                    4 if i / 360 < 2 => Value::Double(-0.0),
                    4 => continue,
                    // a minute apart: too few a row to be summarized
                    _ if i % 6 == 0 => Value::Double(i as f64 / 7.0),
                    _ => continue,
                };
                pts.push(IncomingPoint {
                    metric: "sys.cpu.user",
                    timestamp: t,
                    value,
                    tags,
                    line_tags: None,
                });
            }
        }
        db.add_points(&pts);
        db.flush().unwrap();
        // Points still buffered: in an hour that is stored too, and in hours of b and d
        // between stored ones.
        let late: Vec<IncomingPoint> = (0..60i64)
            .map(|i| IncomingPoint {
                metric: "sys.cpu.user",
                timestamp: t0 + [20, 12, 10][i as usize % 3] * 3600 + i * 10 + 5,
                value: Value::Int(1_000_000 + i),
                tags: &hosts[[0, 1, 3][i as usize % 3]],
                line_tags: None,
            })
            .collect();
        db.add_points(&late);
        let mut texts = Vec::new();
        let mut summarized = 0;
        for (start, end) in [
            (t0 * 1000, (t0 + 30 * 3600) * 1000 - 1),
            // cut mid-hour at both ends; the end at a point's time
            (t0 * 1000 + 1_234_567, (t0 + 25 * 3600 + 1230) * 1000),
        ] {
            for (agg, ds, rate, group) in [
                ("sum", "1h-sum", false, true),
                ("avg", "1h-avg", false, false),
                ("max", "1h-min", false, true),
                ("min", "1h-max", false, false),
                ("sum", "1h-count", false, true),
                ("zimsum", "60m-avg-zero", true, false),
                ("sum", "3600s-mimmax-nan", false, true),
                // not summarized: buckets of more than an hour
                ("sum", "2h-sum", false, true),
                ("max", "1d-max", false, false),
            ] {
                let mut q = sub(agg);
                q.rate = rate;
                q.downsample = Some(DownsampleSpec::parse(ds).unwrap());
                if group {
                    q.filters = vec![TagFilter::from_legacy("host", "*", true).unwrap()];
                }
                let o = run(&db, start, end, &q, &RunOptions::default()).unwrap();
                summarized += o.stats.summarized;
                // NaN != NaN: compare the text of the answers.
                texts.push(format!("{agg} {ds}: {:?} {}", o.groups, o.stats.points));
            }
        }
        if backend.starts_with("embedded") {
            // Three summarized series, 30 and 26 hours, 14 queries; less the hour with
            // buffered points.
            assert!(summarized > 1000, "{backend}: {summarized} rows summarized");
        } else {
            assert_eq!(summarized, 0, "{backend}");
        }
        answers.push((backend.to_string(), texts));
    }
    let (first, want) = &answers[0];
    for (backend, got) in &answers[1..] {
        for (w, g) in want.iter().zip(got) {
            assert_eq!(w, g, "{backend} against {first}");
        }
    }
}

/// A five-minute series (twelve points an hour, decimals) keeps its hours' sums alone
/// (RFC 0009): a one-hour avg, sum or count reads them instead of the points, a one-hour min
/// or max decodes the points; every answer equals the memory store's.
#[test]
fn sparse_series_keep_sums_alone() {
    let t0 = 1_356_998_400i64; // 2013-01-01T00:00Z
    let tags = [("host", "a")];
    let mut answers: Vec<(String, Vec<String>)> = Vec::new();
    for (backend, store) in common::backends() {
        let db = common::open(store, common::auto_create());
        let pts: Vec<IncomingPoint> = (0..(2 * 24 * 12))
            .map(|i| IncomingPoint {
                metric: "sys.cpu.user",
                timestamp: t0 + i * 300 + i % 3,
                value: Value::Double(((i as f64) * 0.61).sin() * 40.0 + 50.123_456),
                tags: &tags,
                line_tags: None,
            })
            .collect();
        db.add_points(&pts);
        db.flush().unwrap();
        let mut texts = Vec::new();
        for (ds, reads_sums) in [
            ("1h-avg", true),
            ("1h-sum", true),
            ("1h-count", true),
            ("1h-min", false),
            ("1h-max", false),
        ] {
            let mut q = sub("sum");
            q.downsample = Some(DownsampleSpec::parse(ds).unwrap());
            let (start, end) = (t0 * 1000, (t0 + 2 * 86_400) * 1000 - 1);
            let o = run(&db, start, end, &q, &RunOptions::default()).unwrap();
            let summarized = o.stats.summarized;
            if backend.starts_with("embedded") && reads_sums {
                // Both days' hours, each by its sum.
                assert_eq!(summarized, 48, "{backend} {ds}");
            } else {
                assert_eq!(summarized, 0, "{backend} {ds}");
            }
            texts.push(format!("{ds}: {:?} {}", o.groups, o.stats.points));
        }
        answers.push((backend.to_string(), texts));
    }
    let (first, want) = &answers[0];
    for (backend, got) in &answers[1..] {
        assert_eq!(want, got, "{backend} against {first}");
    }
}

/// A query over many series on Bigtable, by a TSD whose UID cache is cold: each new series'
/// names are looked up while the scans' streams are full of rows the query has not taken
/// yet. The store's runtime must never block on those streams, or the lookups wait forever.
#[test]
fn cold_uid_lookups_during_full_bigtable_scans_finish() {
    let store: std::sync::Arc<dyn hourglass_storage::Store> =
        std::sync::Arc::new(hourglass_store_bigtable::emulator::fresh_store());
    let t0 = 1_356_998_400i64;
    let hosts: Vec<String> = (0..3000).map(|i| format!("h{i:05}")).collect();
    {
        let db = common::open(store.clone(), common::auto_create());
        let tags: Vec<[(&str, &str); 1]> = hosts.iter().map(|h| [("host", h.as_str())]).collect();
        let pts: Vec<IncomingPoint> = tags
            .iter()
            .flat_map(|t| {
                (0..2i64).map(move |h| IncomingPoint {
                    metric: "sys.cpu.user",
                    timestamp: t0 + h * 3600,
                    value: Value::Int(h),
                    tags: t,
                    line_tags: None,
                })
            })
            .collect();
        db.add_points(&pts);
        db.flush().unwrap();
    }
    // A fresh database over the same tables: every name is looked up again.
    let db = common::open(store, common::auto_create());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut q = sub("sum");
        q.filters = vec![TagFilter::from_legacy("host", "*", true).unwrap()];
        let o = run(
            &db,
            t0 * 1000,
            (t0 + 2 * 3600) * 1000 - 1,
            &q,
            &RunOptions {
                parallel: true,
                ..RunOptions::default()
            },
        );
        let _ = tx.send(o.map(|o| o.groups.len()));
    });
    let groups = rx
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("the query finished")
        .unwrap();
    assert_eq!(groups, 3000);
}
