//! `/api/query` reading only the series the tag index lists (RFC 0007 phase 3) answers as
//! the full scan does, on every backend: random series, random filters of every type,
//! random ranges, with points buffered and flushed.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use hourglass_core::value::Value;
use hourglass_engine::query::aggregator::Aggregator;
use hourglass_engine::query::downsample::DownsampleSpec;
use hourglass_engine::query::filter::TagFilter;
use hourglass_engine::query::plan::{Outcome, RunOptions, SubQuery, run};
use hourglass_engine::{Clock, IncomingPoint, Settings, Tsdb};

/// 2013-06-12 00:00:00 UTC, a period's start.
const DAY: i64 = 1_370_995_200;

fn settings(now_secs: &Arc<AtomicI64>, index: bool) -> Settings {
    let now = Arc::clone(now_secs);
    Settings {
        auto_create_metrics: true,
        index,
        clock: Clock::from_fn(move || now.load(Ordering::SeqCst) * 1000),
        ..Settings::default()
    }
}

/// A small deterministic generator (xorshift64*), so a failing seed replays.
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

const METRICS: [&str; 2] = ["sys.cpu", "net.é"];
const KEYS: [&str; 4] = ["host", "Host", "dc", "é"];
/// Shared prefixes, case variants, non-ASCII names and names other characters case-fold
/// into (the Kelvin sign lower-cases to `k`, `İ` to `i` and a dot).
const VALUES: [&str; 12] = [
    "web01",
    "web010",
    "Web01",
    "WEB02",
    "web02",
    "w",
    "lon",
    "é1",
    "\u{212A}x",
    "kx",
    "İx",
    "ix",
];

fn put(db: &Tsdb, metric: &str, ts: i64, tags: &[(&str, &str)], value: i64) {
    let out = db.add_points(&[IncomingPoint {
        metric,
        timestamp: ts,
        value: Value::Int(value),
        tags,
        line_tags: None,
    }]);
    assert_eq!(out.stored, 1, "{:?}", out.errors);
}

/// Points of random series over three periods, later periods first (backfill), some
/// flushed between; the last ones stay buffered.
fn write_random(db: &Tsdb, rng: &mut Rng, series: usize) {
    for i in 0..series {
        let metric = rng.pick(&METRICS);
        let n = 1 + rng.below(3);
        let mut tags: Vec<(&str, &str)> = Vec::new();
        for _ in 0..n {
            let k = rng.pick(&KEYS);
            if tags.iter().all(|(t, _)| *t != k) {
                tags.push((k, rng.pick(&VALUES)));
            }
        }
        let day = 2 - (i % 3) as i64;
        for _ in 0..1 + rng.below(4) {
            let at = DAY + day * 86_400 + rng.below(86_400) as i64;
            put(db, metric, at, &tags, rng.below(100) as i64);
        }
        if rng.below(10) == 0 {
            db.flush().unwrap();
        }
    }
}

fn random_filter(rng: &mut Rng) -> TagFilter {
    let tagk = rng.pick(&KEYS);
    let (kind, expr) = match rng.below(7) {
        0 => (
            "literal_or",
            rng.pick(&["web01", "web01|lon", "Web01|w", "é1", "kx"]),
        ),
        1 => (
            "iliteral_or",
            rng.pick(&["web01", "WEB02|lon", "kx", "ix", "é1|W"]),
        ),
        2 => ("not_literal_or", rng.pick(&["web01", "web01|web02", "lon"])),
        3 => ("not_iliteral_or", rng.pick(&["WEB01", "w|lon", "kx"])),
        4 => (
            "wildcard",
            rng.pick(&["web*", "w*", "*01", "web*1", "*", "WEB*", "k*", "é*", "*0*"]),
        ),
        5 => (
            "iwildcard",
            rng.pick(&["web*", "WEB0*", "k*", "i*", "*x", "É*", "*"]),
        ),
        _ => (
            "regexp",
            rng.pick(&[
                "^web0",
                "^w",
                "eb0",
                "^web01$",
                "^Web|^web",
                "^k",
                "^i",
                "^(?i)web",
                "^web0?1",
                "^web0+",
                "x$",
                ".*",
                "eb0[12]",
                "web0.",
                "EB0",
                "(web)01",
                "eb01+",
            ]),
        ),
    };
    TagFilter::new(kind, tagk, expr, rng.below(2) == 0).unwrap()
}

fn random_query(rng: &mut Rng) -> (SubQuery, i64, i64) {
    let agg = rng.pick(&["sum", "none", "max", "count"]);
    let mut q = SubQuery::new(Aggregator::parse(agg).unwrap(), rng.pick(&METRICS));
    for _ in 0..1 + rng.below(3) {
        q.filters.push(random_filter(rng));
    }
    q.explicit_tags = rng.below(4) == 0;
    if rng.below(3) == 0 {
        q.downsample = Some(DownsampleSpec::parse(rng.pick(&["1h-sum", "10m-avg"])).unwrap());
    }
    let start = DAY - 7200 + rng.below(3 * 86_400 + 7200) as i64;
    let end = start + 1 + rng.below(80 * 3600) as i64;
    (q, start * 1000, end * 1000)
}

fn ask(db: &Tsdb, q: &SubQuery, start: i64, end: i64, use_index: bool) -> Result<Outcome, String> {
    let options = RunOptions {
        use_index,
        ..RunOptions::default()
    };
    run(db, start, end, q, &options).map_err(|e| e.to_string())
}

/// Asserts the indexed and the scanned answers of random queries are equal; returns how
/// many were answered from the index and how many of those found series.
fn compare(name: &str, db: &Tsdb, rng: &mut Rng, queries: usize) -> (usize, usize) {
    let (mut indexed, mut found) = (0, 0);
    for _ in 0..queries {
        let (q, start, end) = random_query(rng);
        let by_index = ask(db, &q, start, end, true);
        let by_scan = ask(db, &q, start, end, false);
        match (by_index, by_scan) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a.groups, b.groups, "{name} {start}..{end} {q:?}");
                assert!(!b.stats.indexed, "{name}: the scan read the index");
                if a.stats.indexed {
                    indexed += 1;
                    found += usize::from(!a.groups.is_empty());
                    assert!(a.stats.rows <= b.stats.rows, "{name} {q:?}");
                }
            }
            (Err(a), Err(b)) => assert_eq!(a, b, "{name} {q:?}"),
            (a, b) => panic!("{name} {q:?}: index {a:?}, scan {b:?}"),
        }
    }
    (indexed, found)
}

#[test]
fn queries_from_the_index_equal_the_scan() {
    for (name, store) in common::backends() {
        let mut rng = Rng(0x2545_F491_4F6C_DD1D ^ name.len() as u64);
        let now = Arc::new(AtomicI64::new(DAY + 3 * 86_400));
        let db = common::open(Arc::clone(&store), settings(&now, true));
        write_random(&db, &mut rng, 150);
        let (indexed, found) = compare(name, &db, &mut rng, 250);
        assert!(
            indexed > 100 && found > 40,
            "{name}: only {indexed} queries used the index, {found} of them found series"
        );
        // Everything flushed (and, on the embedded store, grouped): the same again.
        db.flush().unwrap();
        let (indexed, _) = compare(name, &db, &mut rng, 100);
        assert!(indexed > 40, "{name}: {indexed}");
        // Reopened (the series cache empty, as after a crash): the same again.
        db.close().unwrap();
        drop(db);
        let db = common::open(Arc::clone(&store), settings(&now, true));
        write_random(&db, &mut rng, 30);
        let (indexed, _) = compare(name, &db, &mut rng, 100);
        assert!(indexed > 40, "{name}: {indexed}");
        db.close().unwrap();
    }
}

/// A range reaching hours the index does not cover (written while a TSD ran with it off)
/// is scanned, and finds the series written then.
#[test]
fn hours_the_index_does_not_cover_are_scanned() {
    for (name, store) in common::backends() {
        let now = Arc::new(AtomicI64::new(DAY + 12 * 3600));
        let db = common::open(Arc::clone(&store), settings(&now, true));
        put(&db, "sys.cpu", DAY + 3600, &[("host", "web01")], 1);
        db.close().unwrap();
        drop(db);
        let db = common::open(Arc::clone(&store), settings(&now, false));
        put(&db, "sys.cpu", DAY + 2 * 3600, &[("host", "web02")], 2);
        db.close().unwrap();
        drop(db);
        // On again: covered from the next day on.
        let db = common::open(Arc::clone(&store), settings(&now, true));
        put(&db, "sys.cpu", DAY + 86_400 + 3600, &[("host", "web03")], 3);
        db.flush().unwrap();
        let mut q = SubQuery::new(Aggregator::parse("none").unwrap(), "sys.cpu");
        q.filters
            .push(TagFilter::new("wildcard", "host", "web*", false).unwrap());
        let all = ask(&db, &q, DAY * 1000, (DAY + 2 * 86_400) * 1000, true).unwrap();
        assert_eq!(all.groups.len(), 3, "{name}");
        assert!(!all.stats.indexed, "{name}: a range with a gap is scanned");
        let covered = ask(
            &db,
            &q,
            (DAY + 86_400) * 1000,
            (DAY + 2 * 86_400) * 1000,
            true,
        )
        .unwrap();
        assert_eq!(covered.groups.len(), 1, "{name}");
        assert!(
            covered.stats.indexed,
            "{name}: a covered range reads the index"
        );
        db.close().unwrap();
    }
}

/// A TSD with the index on, at noon of DAY, whose `sys.cpu` of hosts web01 and web02 is
/// flushed in DAY's second hour.
fn two_hosts_flushed(store: &Arc<dyn hourglass_storage::Store>) -> Arc<Tsdb> {
    let now = Arc::new(AtomicI64::new(DAY + 12 * 3600));
    let db = common::open(Arc::clone(store), settings(&now, true));
    put(&db, "sys.cpu", DAY + 3600, &[("host", "web01")], 1);
    put(&db, "sys.cpu", DAY + 3600, &[("host", "web02")], 2);
    db.flush().unwrap();
    db
}

/// In covered hours the index chooses the rows: with a series' postings deleted, an
/// indexed query no longer finds it while the scan does (the test would pass on a query
/// path ignoring the index otherwise).
#[test]
fn covered_hours_read_only_the_listed_series() {
    use hourglass_storage::{Mutation, RowMutation, ScanRequest};
    for (name, store) in common::backends() {
        let db = two_hosts_flushed(&store);
        let gone: Vec<RowMutation> = store
            .scan("tsdb-index", &ScanRequest::prefix(&[0x11]))
            .unwrap()
            .map(|r| r.unwrap().key)
            .filter(|k| {
                k.ends_with(
                    &db.uids()
                        .get_id(hourglass_core::uid::UidKind::TagValue, "web02")
                        .unwrap()
                        .to_bytes(3),
                )
            })
            .map(|key| RowMutation {
                key,
                mutations: vec![Mutation::DeleteRow],
            })
            .collect();
        assert_eq!(gone.len(), 1, "{name}");
        store.mutate_rows("tsdb-index", &gone).unwrap();
        let mut q = SubQuery::new(Aggregator::parse("none").unwrap(), "sys.cpu");
        q.filters
            .push(TagFilter::new("regexp", "host", "^web", false).unwrap());
        let (start, end) = (DAY * 1000, (DAY + 7200) * 1000);
        assert_eq!(
            ask(&db, &q, start, end, true).unwrap().groups.len(),
            1,
            "{name}"
        );
        assert_eq!(
            ask(&db, &q, start, end, false).unwrap().groups.len(),
            2,
            "{name}"
        );
        db.close().unwrap();
    }
}

/// Trigram lists kept between queries (a TSD alone on its store) are read again once a
/// trigram row is written: a value written after a query is found by the next one.
#[test]
fn kept_trigram_lists_follow_new_values() {
    use hourglass_storage::metered::Call;
    for (name, store) in common::backends() {
        let now = Arc::new(AtomicI64::new(DAY + 12 * 3600));
        let db = common::open(Arc::clone(&store), settings(&now, true));
        put(&db, "sys.cpu", DAY + 3600, &[("host", "web01")], 1);
        db.flush().unwrap();
        let mut q = SubQuery::new(Aggregator::parse("none").unwrap(), "sys.cpu");
        // Unanchored: driven by the trigrams of `eb0`.
        q.filters
            .push(TagFilter::new("regexp", "host", "eb0", false).unwrap());
        let (start, end) = (DAY * 1000, (DAY + 7200) * 1000);
        // Store scans of one query, its answer's series.
        let run = || {
            let before = db.store_stats().calls(Call::Scan);
            let out = ask(&db, &q, start, end, true).unwrap();
            assert!(out.stats.indexed, "{name}");
            (
                db.store_stats().calls(Call::Scan) - before,
                out.groups.len(),
            )
        };
        // The list and the candidates kept: the trigram list's scan and one posting scan a
        // matching value fewer (the store shared: read every time).
        let kept = |values: u64| u64::from(!store.is_shared()) * (1 + values);
        let (cold, found) = run();
        assert_eq!(found, 1, "{name}");
        assert_eq!(run(), (cold - kept(1), 1), "{name}");
        put(&db, "sys.cpu", DAY + 3600, &[("host", "web02")], 2);
        db.flush().unwrap();
        let (reread, found) = run();
        assert_eq!(found, 2, "{name}: the new value is found");
        assert_eq!(
            run(),
            (reread - kept(2), 2),
            "{name}: read again, then kept"
        );
        db.close().unwrap();
    }
}

/// What a filter passed is kept between queries only while no name changes: a value
/// renamed so that it no longer matches is no longer found, and found again once renamed
/// back.
#[test]
fn kept_filter_results_follow_renamed_values() {
    use std::sync::atomic::Ordering::Relaxed;

    use hourglass_core::uid::UidKind;
    for (name, store) in common::backends() {
        let db = two_hosts_flushed(&store);
        let mut q = SubQuery::new(Aggregator::parse("none").unwrap(), "sys.cpu");
        // Unanchored: driven by the trigrams of `eb0`, then each value's name checked.
        q.filters
            .push(TagFilter::new("regexp", "host", "eb0", false).unwrap());
        let (start, end) = (DAY * 1000, (DAY + 7200) * 1000);
        let found = || {
            let out = ask(&db, &q, start, end, true).unwrap();
            assert!(out.stats.indexed, "{name}");
            out.groups.len()
        };
        // Tag value names looked up by one query.
        let lookups = || {
            let s = &db.uids().stats;
            let at = UidKind::TagValue.index();
            let before = s.hits[at].load(Relaxed) + s.misses[at].load(Relaxed);
            assert_eq!(found(), 2, "{name}");
            s.hits[at].load(Relaxed) + s.misses[at].load(Relaxed) - before
        };
        let first = lookups();
        // Kept (a TSD alone on its store): the two candidates' names are not checked again.
        let kept = if store.is_shared() { 0 } else { 2 };
        assert_eq!(lookups(), first - kept, "{name}");
        db.uids()
            .rename(UidKind::TagValue, "web01", "db01")
            .unwrap();
        assert_eq!(found(), 1, "{name}: the renamed value no longer passes");
        db.uids()
            .rename(UidKind::TagValue, "db01", "web01")
            .unwrap();
        assert_eq!(found(), 2, "{name}: passes again");
        db.close().unwrap();
    }
}

/// A query read on two threads asks its selector for candidates from both: the values a
/// trigram list gives are read once a query, whether or not lists are kept between queries
/// (a shared store keeps none), and so are a period's postings and the status rows. Both
/// threads reading them made the scan count of a query depend on which thread came first,
/// and doubled the index's reads of a query of a few hours.
#[test]
fn a_selector_reads_its_trigram_lists_and_periods_once() {
    use hourglass_core::uid::UidKind;
    use hourglass_engine::index::select::{KeyFilters, SeriesSelector};
    use hourglass_storage::metered::Call;
    for (name, store) in common::backends() {
        let db = two_hosts_flushed(&store);
        let metric = db.uids().get_id(UidKind::Metric, "sys.cpu").unwrap();
        let tagk = db.uids().get_id(UidKind::TagKey, "host").unwrap();
        let select = SeriesSelector::new(
            metric,
            vec![KeyFilters {
                tagk,
                filters: vec![TagFilter::new("regexp", "host", "eb0", false).unwrap()],
            }],
            false,
        )
        .unwrap();
        let reads = |start: i64, end: i64| {
            let (scans, gets) = (
                db.store_stats().calls(Call::Scan),
                db.store_stats().calls(Call::Get),
            );
            let found = select.candidates(&db, start, end).unwrap().unwrap();
            (
                db.store_stats().calls(Call::Scan) - scans,
                db.store_stats().calls(Call::Get) - gets,
                found.len(),
            )
        };
        let (first, _, found) = reads(DAY, DAY + 7200);
        assert_eq!(found, 2, "{name}");
        // The other half of the same day: nothing read again.
        assert_eq!(
            reads(DAY + 3600, DAY + 7200),
            (0, 0, 2),
            "{name}: the day's candidates are not found again"
        );
        // The next day: its postings only (one a value), not the trigram list again.
        assert_eq!(
            reads(DAY + 86_400, DAY + 86_400 + 3600),
            (first - 1, 0, 0),
            "{name}: the list is not read again"
        );
        db.close().unwrap();
    }
}

/// A period's candidates are kept between queries while no index row they are found from
/// is written: a repeated query reads no index row, and a series flushed since (of values
/// already known, so only its postings are new) is found by the next query.
#[test]
fn kept_candidates_follow_new_series() {
    use hourglass_core::uid::UidKind;
    use hourglass_engine::index::select::{KeyFilters, SeriesSelector};
    use hourglass_storage::metered::Call;
    for (name, store) in common::backends() {
        let now = Arc::new(AtomicI64::new(DAY + 12 * 3600));
        let db = common::open(Arc::clone(&store), settings(&now, true));
        put(
            &db,
            "sys.cpu",
            DAY + 3600,
            &[("host", "web01"), ("dc", "lon")],
            1,
        );
        put(
            &db,
            "sys.cpu",
            DAY + 3600,
            &[("host", "web02"), ("dc", "par")],
            2,
        );
        db.flush().unwrap();
        let metric = db.uids().get_id(UidKind::Metric, "sys.cpu").unwrap();
        let tagk = db.uids().get_id(UidKind::TagKey, "host").unwrap();
        // A new selector a query, as queries make them.
        let ask = || {
            let select = SeriesSelector::new(
                metric,
                vec![KeyFilters {
                    tagk,
                    filters: vec![TagFilter::new("wildcard", "host", "web*", false).unwrap()],
                }],
                false,
            )
            .unwrap();
            let scans = db.store_stats().calls(Call::Scan);
            let found = select.candidates(&db, DAY, DAY + 7200).unwrap().unwrap();
            (db.store_stats().calls(Call::Scan) - scans, found.len())
        };
        // The store shared: read every time.
        let kept = |scans: u64| if store.is_shared() { scans } else { 0 };
        let (first, found) = ask();
        assert!(first > 0, "{name}");
        assert_eq!(found, 2, "{name}");
        assert_eq!(ask(), (kept(first), 2), "{name}: kept, nothing read");
        put(
            &db,
            "sys.cpu",
            DAY + 3600,
            &[("host", "web01"), ("dc", "par")],
            3,
        );
        db.flush().unwrap();
        assert_eq!(ask(), (first, 3), "{name}: the new series is found");
        assert_eq!(ask(), (kept(first), 3), "{name}: kept again");
        db.close().unwrap();
    }
}
