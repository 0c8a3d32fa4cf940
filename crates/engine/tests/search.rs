//! Search without a plugin (RFC 0007 phase 5) on every backend: over random series and
//! random queries of every structural form (exact, glob, regex, any-key, TSUID, bare terms,
//! AND/OR/NOT, `+`/`-`), the series a search finds, its `totalResults` and its page equal a
//! brute-force filter of the series written; the index off: the same series are not found
//! (the endpoints refuse, see the server tests), and notes are found by their fields.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use hourglass_core::uid::hex_upper;
use hourglass_core::value::Value;
use hourglass_engine::meta::tsuid_for;
use hourglass_engine::search::{Search, SearchType, query_string, search};
use hourglass_engine::{Clock, IncomingPoint, Settings, Tsdb};

/// 2013-06-12 00:00:00 UTC.
const DAY: i64 = 1_370_995_200;

fn settings(now_secs: &Arc<AtomicI64>) -> Settings {
    settings_with(now_secs, true)
}

fn settings_with(now_secs: &Arc<AtomicI64>, index: bool) -> Settings {
    let now = Arc::clone(now_secs);
    Settings {
        auto_create_metrics: true,
        index,
        clock: Clock::from_fn(move || now.load(Ordering::SeqCst) * 1000),
        ..Settings::default()
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len())]
    }
}

const METRICS: [&str; 3] = ["sys.cpu", "sys.cpu.user", "net.bytes"];
const KEYS: [&str; 3] = ["host", "dc", "rack"];
const VALUES: [&str; 8] = [
    "web01", "web010", "Web01", "web02", "db01", "lon", "nyc", "r1",
];

/// A series as written: metric and tags.
#[derive(Debug, Clone)]
struct Written {
    tsuid: String,
    metric: String,
    tags: BTreeMap<String, String>,
}

/// A query and its meaning, evaluated independently of the engine.
#[derive(Debug, Clone)]
enum Expr {
    Metric(String),
    MetricGlob(String),
    Tag(String, String),
    TagGlob(String, String),
    TagRegex(String, String),
    AnyTag(String),
    Bare(String),
    Tsuid(String),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    AndNot(Box<Expr>, Box<Expr>),
    MustNot(Box<Expr>, Box<Expr>),
}

/// `*`-only globs, as the generator makes them.
fn glob(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, tail)) => {
            text.len() >= head.len() + tail.len() && text.starts_with(head) && text.ends_with(tail)
        }
    }
}

impl Expr {
    fn text(&self) -> String {
        match self {
            Expr::Metric(m) => format!("metric:{m}"),
            Expr::MetricGlob(g) => format!("metric:{g}"),
            Expr::Tag(k, v) => format!("tags.{k}:{v}"),
            Expr::TagGlob(k, g) => format!("tags.{k}:{g}"),
            Expr::TagRegex(k, r) => format!("tags.{k}:/{r}/"),
            Expr::AnyTag(v) => format!("tags.name:{v}"),
            Expr::Bare(v) => v.clone(),
            Expr::Tsuid(t) => format!("tsuid:{t}"),
            Expr::And(a, b) => format!("({} AND {})", a.text(), b.text()),
            Expr::Or(a, b) => format!("({} OR {})", a.text(), b.text()),
            Expr::AndNot(a, b) => format!("({} AND NOT {})", a.text(), b.text()),
            Expr::MustNot(a, b) => format!("(+{} -{})", a.text(), b.text()),
        }
    }

    fn eval(&self, s: &Written) -> bool {
        match self {
            Expr::Metric(m) => s.metric == *m,
            Expr::MetricGlob(g) => glob(g, &s.metric),
            Expr::Tag(k, v) => s.tags.get(k) == Some(v),
            Expr::TagGlob(k, g) => s.tags.get(k).is_some_and(|v| glob(g, v)),
            Expr::TagRegex(k, r) => {
                let re = regex::Regex::new(&format!("^(?:{r})$")).unwrap();
                s.tags.get(k).is_some_and(|v| re.is_match(v))
            }
            Expr::AnyTag(v) => s.tags.iter().any(|(k, x)| k == v || x == v),
            Expr::Bare(v) => {
                s.metric == *v || s.tsuid == *v || s.tags.iter().any(|(k, x)| k == v || x == v)
            }
            Expr::Tsuid(t) => s.tsuid == *t,
            Expr::And(a, b) => a.eval(s) && b.eval(s),
            Expr::Or(a, b) => a.eval(s) || b.eval(s),
            Expr::AndNot(a, b) | Expr::MustNot(a, b) => a.eval(s) && !b.eval(s),
        }
    }
}

fn random_expr(rng: &mut Rng, written: &[Written], depth: usize) -> Expr {
    let leaf = depth == 0 || rng.below(3) == 0;
    if leaf {
        let k = rng.pick(&KEYS).to_string();
        let v = rng.pick(&VALUES).to_string();
        if rng.below(4) == 0 {
            // A metric and a tag pattern: the index's value names and postings answer.
            let m = Expr::Metric(rng.pick(&METRICS).to_string());
            let p = if rng.below(2) == 0 {
                Expr::TagGlob(k, format!("{}*", &v[..2]))
            } else {
                Expr::TagRegex(k, format!("{}.*", &v[..1]))
            };
            return Expr::And(Box::new(m), Box::new(p));
        }
        return match rng.below(8) {
            0 => Expr::Metric(rng.pick(&METRICS).to_string()),
            1 => Expr::MetricGlob(format!("{}*", &rng.pick(&METRICS)[..5])),
            2 => Expr::Tag(k, v),
            3 => Expr::TagGlob(k, format!("{}*", &v[..2])),
            4 => Expr::TagRegex(k, format!("{}.*[0-9]", &v[..1])),
            5 => Expr::AnyTag(if rng.below(4) == 0 { k } else { v }),
            6 => Expr::Bare(v),
            _ => Expr::Tsuid(written[rng.below(written.len())].tsuid.clone()),
        };
    }
    let a = Box::new(random_expr(rng, written, depth - 1));
    let b = Box::new(random_expr(rng, written, depth - 1));
    match rng.below(4) {
        0 => Expr::And(a, b),
        1 => Expr::Or(a, b),
        2 => Expr::AndNot(a, b),
        _ => Expr::MustNot(a, b),
    }
}

fn write_random(db: &Tsdb, rng: &mut Rng, n: usize) -> Vec<Written> {
    let mut out: BTreeMap<String, Written> = BTreeMap::new();
    for i in 0..n {
        let metric = rng.pick(&METRICS);
        let mut tags: BTreeMap<String, String> = BTreeMap::new();
        for _ in 0..1 + rng.below(3) {
            tags.insert(rng.pick(&KEYS).into(), rng.pick(&VALUES).into());
        }
        let pairs: Vec<(&str, &str)> = tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let ts = DAY + (i as i64 % 48) * 1800;
        let put = db.add_points(&[IncomingPoint {
            metric,
            timestamp: ts,
            value: Value::Int(i as i64),
            tags: &pairs,
            line_tags: None,
        }]);
        assert_eq!(put.stored, 1, "{:?}", put.errors);
        if i % 17 == 0 {
            db.flush().unwrap();
        }
        let owned: Vec<(String, String)> = tags.clone().into_iter().collect();
        let tsuid = hex_upper(&tsuid_for(db, metric, &owned).unwrap());
        out.insert(
            tsuid.clone(),
            Written {
                tsuid,
                metric: metric.to_string(),
                tags,
            },
        );
    }
    out.into_values().collect()
}

#[test]
fn search_answers_equal_a_brute_force_filter() {
    for (name, store) in common::backends() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ name.len() as u64);
        let now = Arc::new(AtomicI64::new(DAY + 2 * 86_400));
        let db = common::open(Arc::clone(&store), settings(&now));
        // Some points stay buffered: a search sees them.
        let written = write_random(&db, &mut rng, 60);
        let mut nonempty = 0;
        for round in 0..150 {
            let expr = random_expr(&mut rng, &written, 1 + round % 3);
            let text = expr.text();
            let want: Vec<&str> = written
                .iter()
                .filter(|s| expr.eval(s))
                .map(|s| s.tsuid.as_str())
                .collect();
            nonempty += usize::from(!want.is_empty());
            let limit = [0, 1, 3, 25, 1000][rng.below(5)];
            let start = rng.below(want.len() + 2);
            let query = query_string::parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            let answer = search(
                &db,
                &Search {
                    kind: SearchType::Tsuids,
                    query,
                    limit,
                    start_index: start,
                    timeout: None,
                },
            )
            .unwrap();
            let page: Vec<&str> = want.iter().skip(start).take(limit).copied().collect();
            let got: Vec<&str> = answer.results.iter().map(|v| v.as_str().unwrap()).collect();
            assert_eq!(answer.total as usize, want.len(), "{name}: {text}");
            assert_eq!(got, page, "{name}: {text} limit={limit} start={start}");
        }
        assert!(
            nonempty > 50,
            "{name}: only {nonempty} queries matched anything"
        );
        db.close().unwrap();
    }
}

/// Notes written through the annotation API are found by their fields and gone once
/// deleted; a summary search answers the series' names.
#[test]
fn notes_and_summaries_are_found() {
    use hourglass_engine::annotation::{self, AnnotationUpdate};
    for (name, store) in common::backends() {
        let now = Arc::new(AtomicI64::new(DAY + 2 * 86_400));
        let db = common::open(Arc::clone(&store), settings(&now));
        let tags = [("host", "web01")];
        db.add_points(&[IncomingPoint {
            metric: "sys.cpu",
            timestamp: DAY,
            value: Value::Int(1),
            tags: &tags,
            line_tags: None,
        }]);
        let tsuid =
            hex_upper(&tsuid_for(&db, "sys.cpu", &[("host".into(), "web01".into())]).unwrap());
        for (t, start, text) in [
            (&tsuid, DAY + 10, "deploy"),
            (&String::new(), DAY + 20, "outage"),
        ] {
            let mut n = AnnotationUpdate::default();
            n.note.tsuid = t.clone();
            n.note.start_time = start;
            n.note.description = text.into();
            n.changed.insert("description");
            annotation::sync(&db, &n, false).unwrap();
        }
        let run = |kind: SearchType, q: &str| {
            search(
                &db,
                &Search {
                    kind,
                    query: query_string::parse(q).unwrap(),
                    limit: 25,
                    start_index: 0,
                    timeout: None,
                },
            )
            .unwrap()
        };
        let found = run(SearchType::Annotation, "description:deploy");
        assert_eq!(found.total, 1, "{name}");
        assert_eq!(found.results[0]["tsuid"], tsuid.as_str(), "{name}");
        assert_eq!(found.results[0]["startTime"], DAY + 10, "{name}");
        assert_eq!(run(SearchType::Annotation, "*").total, 2, "{name}");
        annotation::delete(&db, "", DAY + 20).unwrap();
        assert_eq!(run(SearchType::Annotation, "*").total, 1, "{name}");
        // `tsd.query.timeout` bounds a search as it bounds a query.
        let late = search(
            &db,
            &Search {
                kind: SearchType::Tsuids,
                query: query_string::parse("*").unwrap(),
                limit: 25,
                start_index: 0,
                timeout: Some(std::time::Duration::ZERO),
            },
        )
        .unwrap_err();
        assert_eq!(
            late.to_string(),
            "Sorry, the search ran longer than the limit of 0 ms. Please try a narrower query.",
            "{name}"
        );
        let summary = run(SearchType::TsMetaSummary, "tags.host:web01");
        assert_eq!(
            summary.results,
            vec![
                serde_json::json!({"tsuid": tsuid, "metric": "sys.cpu", "tags": {"host": "web01"}})
            ],
            "{name}"
        );
        db.close().unwrap();
    }
}

fn put(db: &Tsdb, ts: i64, host: &str) {
    let tags = [("host", host)];
    let out = db.add_points(&[IncomingPoint {
        metric: "sys.cpu",
        timestamp: ts,
        value: Value::Int(1),
        tags: &tags,
        line_tags: None,
    }]);
    assert_eq!(out.stored, 1, "{:?}", out.errors);
}

/// Series written while the index was off are not in it: a series or note search that
/// would need them is refused (not answered short) until `tsdb index rebuild` covers them;
/// UID searches do not need the index. Global notes are read from their rows, so one
/// written with the index off is found.
#[test]
fn searches_the_index_cannot_answer_whole_are_refused_until_a_rebuild() {
    use hourglass_engine::annotation::{self, AnnotationUpdate};
    use hourglass_engine::index::rebuild::{RebuildOptions, rebuild};
    for (name, store) in common::backends() {
        let now = Arc::new(AtomicI64::new(DAY + 3600));
        let db = common::open(Arc::clone(&store), settings_with(&now, false));
        put(&db, DAY, "a");
        let mut n = AnnotationUpdate::default();
        n.note.start_time = DAY + 5;
        n.note.description = "outage".into();
        n.changed.insert("description");
        annotation::sync(&db, &n, false).unwrap();
        db.close().unwrap();
        drop(db);
        let db = common::open(Arc::clone(&store), settings(&now));
        put(&db, DAY + 1800, "b");
        let run = |kind: SearchType, q: &str| {
            search(
                &db,
                &Search {
                    kind,
                    query: query_string::parse(q).unwrap(),
                    limit: 25,
                    start_index: 0,
                    timeout: None,
                },
            )
        };
        for (kind, q) in [
            (SearchType::Tsuids, "*"),
            (SearchType::TsMeta, "metric:sys.cpu"),
            (SearchType::Annotation, "*"),
        ] {
            let e = run(kind, q).unwrap_err();
            assert_eq!(
                e.to_string(),
                "The tag index does not list every series of sys.cpu yet (data written \
                 before it or while it was off): run tsdb index rebuild",
                "{name}: {kind:?} {q}"
            );
        }
        assert_eq!(
            run(SearchType::UidMeta, "name:a").unwrap().total,
            1,
            "{name}"
        );
        // A rebuild once the index's first day is over covers the past.
        now.store(DAY + 2 * 86_400 + 7200, Ordering::SeqCst);
        rebuild(
            &db,
            &RebuildOptions {
                now_secs: now.load(Ordering::SeqCst) as u32,
                ..RebuildOptions::default()
            },
            |_, _| {},
        )
        .unwrap();
        assert_eq!(run(SearchType::Tsuids, "*").unwrap().total, 2, "{name}");
        assert_eq!(
            run(SearchType::Tsuids, "tags.host:a").unwrap().total,
            1,
            "{name}"
        );
        let notes = run(SearchType::Annotation, "outage").unwrap();
        assert_eq!(notes.total, 1, "{name}");
        assert_eq!(notes.results[0]["startTime"], DAY + 5, "{name}");
        db.close().unwrap();
    }
}

/// An index whose notes are not all placed (made before annotation writes kept `0x30`
/// places: its status row has no notes marker) refuses note searches, rather than
/// answering without those notes, until a rebuild of every metric over all time places them
/// and sets the marker; series searches are not concerned. A fresh index has the marker; a
/// TSD opening the database with the index off removes it.
#[test]
fn note_searches_need_every_note_placed() {
    use hourglass_engine::annotation::{self, AnnotationUpdate};
    use hourglass_engine::index::rebuild::{RebuildOptions, rebuild};
    use hourglass_engine::index::{kind, status};
    use hourglass_storage::{Mutation, ScanRequest};
    for (name, store) in common::backends() {
        let now = Arc::new(AtomicI64::new(DAY + 3600));
        let db = common::open(Arc::clone(&store), settings(&now));
        let marker = || {
            status::read(store.as_ref(), "tsdb-index")
                .unwrap()
                .unwrap()
                .notes_from
        };
        assert_eq!(marker(), Some((DAY + 3600) * 1000), "{name}: a fresh index");
        put(&db, DAY, "a");
        let tsuid = hex_upper(&tsuid_for(&db, "sys.cpu", &[("host".into(), "a".into())]).unwrap());
        let mut n = AnnotationUpdate::default();
        n.note.tsuid = tsuid.clone();
        n.note.start_time = DAY + 5;
        n.note.description = "deploy".into();
        n.changed.insert("description");
        annotation::sync(&db, &n, false).unwrap();
        // As an index made before notes had places: none, and no marker.
        let places: Vec<Vec<u8>> = store
            .scan("tsdb-index", &ScanRequest::prefix(&[kind::NOTE]))
            .unwrap()
            .map(|r| r.unwrap().key)
            .collect();
        assert_eq!(places.len(), 1, "{name}");
        store
            .mutate_row("tsdb-index", &places[0], &[Mutation::DeleteRow])
            .unwrap();
        store
            .mutate_row(
                "tsdb-index",
                &hourglass_engine::index::status_key(),
                &[Mutation::delete("g", status::NOTES_FROM_QUALIFIER.to_vec())],
            )
            .unwrap();
        let run = |kind: SearchType, q: &str| {
            search(
                &db,
                &Search {
                    kind,
                    query: query_string::parse(q).unwrap(),
                    limit: 25,
                    start_index: 0,
                    timeout: None,
                },
            )
        };
        let refused = "The tag index does not list every series note yet (notes written \
                       before it kept their places, or while it was off): run tsdb index \
                       rebuild";
        for q in ["*", "description:deploy", "metric:sys.cpu"] {
            let e = run(SearchType::Annotation, q).unwrap_err();
            assert_eq!(e.to_string(), refused, "{name}: {q}");
        }
        assert_eq!(run(SearchType::Tsuids, "*").unwrap().total, 1, "{name}");
        // A rebuild of some metrics only does not prove every note placed.
        now.store(DAY + 86_400, Ordering::SeqCst);
        let options = RebuildOptions {
            now_secs: now.load(Ordering::SeqCst) as u32,
            ..RebuildOptions::default()
        };
        let metric = db
            .uids()
            .get_id(hourglass_core::uid::UidKind::Metric, "sys.cpu")
            .unwrap();
        rebuild(
            &db,
            &RebuildOptions {
                metrics: vec![metric],
                ..options.clone()
            },
            |_, _| {},
        )
        .unwrap();
        assert_eq!(
            run(SearchType::Annotation, "*").unwrap_err().to_string(),
            refused,
            "{name}"
        );
        rebuild(&db, &options, |_, _| {}).unwrap();
        assert_eq!(marker(), Some((DAY + 86_400) * 1000), "{name}");
        let found = run(SearchType::Annotation, "description:deploy").unwrap();
        assert_eq!(found.total, 1, "{name}");
        assert_eq!(found.results[0]["tsuid"], tsuid.as_str(), "{name}");
        db.close().unwrap();
        drop(db);
        // With the index off, notes get no places: the marker goes.
        let off = common::open(Arc::clone(&store), settings_with(&now, false));
        assert_eq!(marker(), None, "{name}");
        off.close().unwrap();
    }
}
