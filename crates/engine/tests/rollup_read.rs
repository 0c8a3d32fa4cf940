//! Reading rollup tables (RFC 0008) on every backend: a rollup read's rows in two halves on
//! two threads answer exactly as one thread reading them all (same groups, same bits), for
//! every function the tiers serve (`avg` from sums and counts, `count` from counts), fill
//! policies, rates, `none`, over ranges cutting rows and buckets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use hourglass_core::config::Config;
use hourglass_core::value::Value;
use hourglass_engine::query::aggregator::Aggregator;
use hourglass_engine::query::downsample::DownsampleSpec;
use hourglass_engine::query::plan::{GroupResult, RunOptions, SubQuery, run};
use hourglass_engine::rollup::RollupPoint;
use hourglass_engine::{Settings, Tsdb};

/// `10m` in 6-hour rows, `1h` in days, `1d` in months, over the raw `1m`.
const ROLLUPS: &str = r#"{"aggregationIds":{"sum":0,"count":1,"max":2,"min":3},"intervals":[
{"table":"tsdb","preAggregationTable":"tsdb-agg","interval":"1m","rowSpan":"1h","defaultInterval":true},
{"table":"tsdb-rollup-10m","preAggregationTable":"tsdb-rollup-agg-10m","interval":"10m","rowSpan":"6h"},
{"table":"tsdb-rollup-1h","preAggregationTable":"tsdb-rollup-agg-1h","interval":"1h","rowSpan":"1d"},
{"table":"tsdb-rollup-1d","preAggregationTable":"tsdb-rollup-agg-1d","interval":"1d","rowSpan":"1n"}]}"#;

/// 2013-01-01 00:00:00 UTC.
const T0: i64 = 1_356_998_400;
const DAY: i64 = 86_400;
const DAYS: i64 = 75;
const HOSTS: [&str; 4] = ["a", "b", "c", "d"];

fn settings() -> Settings {
    let mut c = Config::default();
    c.set("tsd.rollups.enable", "true");
    c.set("tsd.rollups.config", &ROLLUPS.replace('\n', ""));
    Settings {
        auto_create_metrics: true,
        ..Settings::from_config(&c).unwrap()
    }
}

/// A small, stable generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// Each host's cells of every tier: sum, count, max and min per interval, integers and
/// doubles, some intervals missing (and some with a sum but no count).
fn write(db: &Tsdb) {
    let mut rng = Rng(0x5EED);
    for (interval, step, days) in [("1h", 3_600, DAYS), ("1d", DAY, DAYS), ("10m", 600, 3)] {
        let mut points = Vec::new();
        let tags: Vec<[(&str, &str); 1]> = HOSTS.iter().map(|h| [("host", *h)]).collect();
        for (h, tags) in tags.iter().enumerate() {
            let mut t = T0;
            while t < T0 + days * DAY {
                if rng.below(20) > 0 {
                    let count = 1 + rng.below(60) as i64;
                    let value = |v: i64, rng: &mut Rng| {
                        if rng.below(3) == 0 {
                            Value::Double(v as f64 / 7.0)
                        } else {
                            Value::Int(v)
                        }
                    };
                    let sum = value(rng.below(10_000) as i64 - 5_000 + h as i64, &mut rng);
                    let max = value(rng.below(500) as i64, &mut rng);
                    let min = value(-(rng.below(500) as i64), &mut rng);
                    let mut cells = vec![("sum", sum), ("max", max), ("min", min)];
                    if rng.below(30) > 0 {
                        cells.push(("count", Value::Int(count)));
                    }
                    for (aggregator, value) in cells {
                        points.push((t, value, tags, aggregator));
                    }
                }
                t += step;
            }
        }
        let points: Vec<RollupPoint<'_>> = points
            .iter()
            .map(|(t, value, tags, aggregator)| RollupPoint {
                metric: "m",
                timestamp: *t,
                value: *value,
                tags: &tags[..],
                interval: Some(interval),
                aggregator: Some(aggregator),
                group_by: None,
            })
            .collect();
        for batch in points.chunks(5_000) {
            let outcome = db.add_rollup_points(batch, false).unwrap();
            assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
        }
    }
}

/// A group's TSUIDs and its points with their values as bits.
type GroupBits = (Vec<String>, Vec<(i64, u64)>);

/// Each group's points with their values as bits (NaN and signed zeros compared exactly).
fn bits(groups: &[GroupResult]) -> Vec<GroupBits> {
    groups
        .iter()
        .map(|g| {
            (
                g.tsuids.clone(),
                g.dps
                    .iter()
                    .map(|(t, v)| (*t, v.as_f64().to_bits()))
                    .collect(),
            )
        })
        .collect()
}

/// The answers of the first backend (the memory store, rows one at a time), each read's,
/// against which the others' are compared: the embedded store's grouped tiers lend a
/// series' rows of a group together (RFC 0012) and answer the same.
type Answers = Vec<(Vec<GroupBits>, u64, u64, u64)>;

#[test]
fn rollup_reads_on_two_threads_answer_as_one() {
    let mut first: Option<(&str, Answers)> = None;
    for (backend, store) in common::backends() {
        let db = common::open(store.clone(), settings());
        write(&db);
        // Closed periods of the grouped tiers into their groups, as the write path's
        // upkeep moves them.
        store.maintain(hourglass_storage::now_ms()).unwrap();
        let mut answers: Answers = Vec::new();
        let mut checked = 0;
        let downsamples = [
            "1h-avg",
            "1h-sum",
            "2h-max",
            "5h-avg",
            "1d-min",
            "1d-count",
            "1d-avg",
            "6h-sum-zero",
            "1h-avg-nan",
            "3d-max",
            "7d-avg",
            "10m-avg",
            "30m-count",
        ];
        let ranges = [
            (T0, T0 + DAYS * DAY - 1),
            (T0 + 5 * 3_600 + 17, T0 + 40 * DAY + 7 * 3_600),
            (T0 + 31 * DAY, T0 + 60 * DAY),
            (T0 + 3_600, T0 + 2 * DAY + 600),
        ];
        for (i, ds) in downsamples.iter().enumerate() {
            for (j, (start, end)) in ranges.iter().enumerate() {
                let mut q = SubQuery::new(
                    [
                        Aggregator::Sum,
                        Aggregator::Avg,
                        Aggregator::None,
                        Aggregator::Max,
                    ][(i + j) % 4],
                    "m",
                );
                q.downsample = Some(DownsampleSpec::parse(ds).unwrap());
                q.rate = (i + j) % 5 == 0;
                let (start, end) = (start * 1000, end * 1000);
                let one = RunOptions {
                    parallel: false,
                    ..RunOptions::default()
                };
                let single = run(&db, start, end, &q, &one).unwrap();
                let split = run(&db, start, end, &q, &RunOptions::default()).unwrap();
                let what = format!("{backend}: {ds} rate={} over [{start}, {end}]", q.rate);
                assert!(
                    single.rollup_table.is_some(),
                    "{what}: read from a rollup table"
                );
                // The `10m` tier holds the first 3 days only.
                let ten_minutes = ds.starts_with("10m") || ds.starts_with("30m");
                if !ten_minutes || start < (T0 + 3 * DAY) * 1000 {
                    assert!(
                        single.groups.iter().any(|g| !g.dps.is_empty()),
                        "{what}: points"
                    );
                }
                let (split_bits, single_bits) = (bits(&split.groups), bits(&single.groups));
                if split_bits != single_bits {
                    let first = split_bits.iter().zip(&single_bits).find_map(|(a, b)| {
                        let at = a.1.iter().zip(&b.1).position(|(x, y)| x != y);
                        (a != b).then(|| (a.0.clone(), a.1.len(), b.1.len(), at))
                    });
                    panic!(
                        "{what}: two threads answer otherwise than one ({} and {} groups; first differing group, its points on two threads and one, first differing point: {first:?})",
                        split_bits.len(),
                        single_bits.len()
                    );
                }
                let meta = |gs: &[GroupResult]| {
                    gs.iter()
                        .map(|g| (g.tags.clone(), g.aggregate_tags.clone()))
                        .collect::<Vec<_>>()
                };
                assert_eq!(meta(&split.groups), meta(&single.groups), "{what}");
                assert_eq!(split.stats.rows, single.stats.rows, "{what}");
                assert_eq!(split.stats.points, single.stats.points, "{what}");
                assert_eq!(split.stats.series, single.stats.series, "{what}");
                answers.push((
                    single_bits,
                    single.stats.rows,
                    single.stats.points,
                    single.stats.series,
                ));
                checked += 1;
            }
        }
        assert_eq!(checked, downsamples.len() * ranges.len());
        match &first {
            None => first = Some((backend, answers)),
            Some((name, want)) => {
                for (i, (got, want)) in answers.iter().zip(want).enumerate() {
                    assert_eq!(
                        got, want,
                        "read {i}: {backend} answers otherwise than {name}"
                    );
                }
            }
        }
    }
}

/// Rows of the `1h` tier of metric `n` as a computed tier writes them: every hour but an
/// occasional one, integer sums of one width (one host's sums wider on one day), counts of
/// 60, so that most rows of a series have the layout of the row before.
fn write_computed(db: &Tsdb) {
    let mut rng = Rng(0xC0FFEE);
    let mut points = Vec::new();
    let tags: Vec<[(&str, &str); 1]> = HOSTS.iter().map(|h| [("host", *h)]).collect();
    for (h, tags) in tags.iter().enumerate() {
        let mut t = T0;
        while t < T0 + DAYS * DAY {
            let hour = (t - T0) / 3_600;
            if hour % 97 != 5 {
                let wide = h == 2 && (t - T0) / DAY == 30;
                let sum = 300 + rng.below(3_000) as i64 + if wide { 100_000 } else { 0 };
                for (aggregator, v) in [
                    ("sum", sum),
                    ("count", 60),
                    ("max", 90 + rng.below(30) as i64),
                    ("min", rng.below(30) as i64),
                ] {
                    points.push((t, Value::Int(v), tags, aggregator));
                }
            }
            t += 3_600;
        }
    }
    let points: Vec<RollupPoint<'_>> = points
        .iter()
        .map(|(t, value, tags, aggregator)| RollupPoint {
            metric: "n",
            timestamp: *t,
            value: *value,
            tags: &tags[..],
            interval: Some("1h"),
            aggregator: Some(aggregator),
            group_by: None,
        })
        .collect();
    for batch in points.chunks(5_000) {
        let outcome = db.add_rollup_points(batch, false).unwrap();
        assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
    }
}

/// Rows as a computed tier writes them, most read through the shape of the row before
/// (on the embedded store, a series' rows lent together: straight into the series' pairs,
/// RFC 0012), answer on every backend as the memory store's rows read one by one, with the
/// same counts, on one thread and on two.
#[test]
fn computed_rows_read_alike_answer_alike_on_every_backend() {
    let mut first: Option<(&str, Answers)> = None;
    for (backend, store) in common::backends() {
        let db = common::open(store.clone(), settings());
        write_computed(&db);
        store.maintain(hourglass_storage::now_ms()).unwrap();
        let mut answers: Answers = Vec::new();
        for ds in ["1h-avg", "1h-sum", "3h-avg", "1h-avg-zero"] {
            for (start, end) in [
                (T0, T0 + DAYS * DAY - 1),
                (T0 + 5 * 3_600 + 17, T0 + 40 * DAY + 7 * 3_600),
                (T0 + 29 * DAY, T0 + 31 * DAY - 1),
            ] {
                for aggregator in [Aggregator::Sum, Aggregator::Avg, Aggregator::None] {
                    let mut q = SubQuery::new(aggregator, "n");
                    q.downsample = Some(DownsampleSpec::parse(ds).unwrap());
                    let (start, end) = (start * 1000, end * 1000);
                    let one = RunOptions {
                        parallel: false,
                        ..RunOptions::default()
                    };
                    let single = run(&db, start, end, &q, &one).unwrap();
                    let split = run(&db, start, end, &q, &RunOptions::default()).unwrap();
                    let what = format!("{backend}: {ds} {aggregator:?} over [{start}, {end}]");
                    assert!(single.rollup_table.is_some(), "{what}");
                    assert!(single.groups.iter().any(|g| !g.dps.is_empty()), "{what}");
                    assert_eq!(bits(&split.groups), bits(&single.groups), "{what}");
                    assert_eq!(split.stats.points, single.stats.points, "{what}");
                    answers.push((
                        bits(&single.groups),
                        single.stats.rows,
                        single.stats.points,
                        single.stats.series,
                    ));
                }
            }
        }
        match &first {
            None => first = Some((backend, answers)),
            Some((name, want)) => {
                for (i, (got, want)) in answers.iter().zip(want).enumerate() {
                    assert_eq!(
                        got, want,
                        "read {i}: {backend} answers otherwise than {name}"
                    );
                }
            }
        }
    }
}
