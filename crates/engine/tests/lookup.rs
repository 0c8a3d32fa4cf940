//! `/api/search/lookup` answered from the tag index (RFC 0007 phase 2) equals the table
//! scan's answer, on every backend; a metric whose coverage has a gap is scanned.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use hourglass_core::value::Value;
use hourglass_engine::search::suggest::{MetricSuggest, suggest_by_scan, suggest_in_metric};
use hourglass_engine::search::{LookupQuery, LookupResult, lookup, lookup_by_scan, lookup_is_kept};
use hourglass_engine::{Clock, IncomingPoint, Settings, Tsdb};
use hourglass_storage::Store;

/// 2013-06-12 00:00:00 UTC, a period's start.
const DAY: i64 = 1_370_995_200;

fn settings(now_secs: &Arc<AtomicI64>, index: bool) -> Settings {
    let now = Arc::clone(now_secs);
    Settings {
        auto_create_metrics: true,
        index,
        // Series noted in the meta table too, for lookups reading it.
        meta: hourglass_engine::meta::MetaTracking {
            tsuid_tracking: true,
            ..Default::default()
        },
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

const METRICS: [&str; 3] = ["sys.cpu", "sys.cpu.user", "net.é"];
const KEYS: [&str; 4] = ["host", "Host", "dc", "é"];
const VALUES: [&str; 7] = ["web01", "web010", "Web01", "w", "lon", "é1", "web02"];

fn put(db: &Tsdb, metric: &str, ts: i64, tags: &[(&str, &str)]) {
    let out = db.add_points(&[IncomingPoint {
        metric,
        timestamp: ts,
        value: Value::Int(1),
        tags,
        line_tags: None,
    }]);
    assert_eq!(out.stored, 1, "{:?}", out.errors);
}

/// Points of random series over three periods, later periods first (backfill), some
/// flushed between.
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
        let hour = rng.below(24) as i64;
        put(db, metric, DAY + day * 86_400 + hour * 3600 + 7, &tags);
        if rng.below(3) == 0 {
            // The same series again, an earlier hour of the same period.
            put(db, metric, DAY + day * 86_400 + 5, &tags);
        }
        if rng.below(10) == 0 {
            db.flush().unwrap();
        }
    }
}

fn random_query(rng: &mut Rng) -> LookupQuery {
    let metric = match rng.below(4) {
        0 => None,
        _ => Some(rng.pick(&METRICS).to_string()),
    };
    let mut tags = Vec::new();
    for _ in 0..rng.below(3) {
        let k = match rng.below(4) {
            0 => None,
            1 => Some("*".to_string()),
            _ => Some(rng.pick(&KEYS).to_string()),
        };
        let v = match rng.below(3) {
            0 => None,
            _ => Some(rng.pick(&VALUES).to_string()),
        };
        tags.push((k, v));
    }
    LookupQuery {
        metric,
        tags,
        use_meta: rng.below(3) == 0,
        limit: [0, 1, 3, 25][rng.below(4)],
    }
}

/// Backends whose data-table scans come in period order (RFC 0006): the scan meets series
/// by period, not by first hour, so only the set of series is comparable without a limit.
fn period_ordered(name: &str) -> bool {
    matches!(name, "memory-period" | "embedded-day")
}

fn same(name: &str, q: &LookupQuery, by_index: &[LookupResult], by_scan: &[LookupResult]) {
    if period_ordered(name) && !q.use_meta {
        let sorted = |r: &[LookupResult]| {
            let mut v: Vec<Vec<u8>> = r.iter().map(|r| r.tsuid.clone()).collect();
            v.sort();
            v
        };
        if q.limit == 0 {
            assert_eq!(sorted(by_index), sorted(by_scan), "{name} {q:?}");
        } else {
            assert_eq!(by_index.len(), by_scan.len(), "{name} {q:?}");
        }
    } else {
        assert_eq!(by_index, by_scan, "{name} {q:?}");
    }
}

#[test]
fn lookup_from_the_index_equals_the_scan() {
    for (name, store) in common::backends() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ name.len() as u64);
        let now = Arc::new(AtomicI64::new(DAY + 3 * 86_400));
        let db = common::open(Arc::clone(&store), settings(&now, true));
        write_random(&db, &mut rng, 120);
        let mut answered = 0;
        for _ in 0..150 {
            let q = random_query(&mut rng);
            if q.metric.is_none() && q.tags.is_empty() {
                continue;
            }
            let by_scan = lookup_by_scan(&db, &q);
            let by_index = lookup(&db, &q);
            match (by_index, by_scan) {
                (Ok(a), Ok(b)) => {
                    same(name, &q, &a, &b);
                    answered += usize::from(!a.is_empty());
                }
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{name} {q:?}"),
                (a, b) => panic!("{name} {q:?}: index {a:?}, scan {b:?}"),
            }
        }
        assert!(
            answered > 30,
            "{name}: only {answered} queries found series"
        );
        db.close().unwrap();
    }
}

#[test]
fn lookup_with_the_index_off_equals_the_scan() {
    for (name, store) in common::backends() {
        let mut rng = Rng(0x5DEE_CE66_D1CE_5EED ^ name.len() as u64);
        let now = Arc::new(AtomicI64::new(DAY + 3 * 86_400));
        let db = common::open(Arc::clone(&store), settings(&now, false));
        write_random(&db, &mut rng, 60);
        for _ in 0..60 {
            let q = random_query(&mut rng);
            if q.metric.is_none() && q.tags.is_empty() {
                continue;
            }
            let a = lookup(&db, &q).map_err(|e| e.to_string());
            let b = lookup_by_scan(&db, &q).map_err(|e| e.to_string());
            assert_eq!(a, b, "{name} {q:?}");
        }
        db.close().unwrap();
    }
}

/// Series written while a TSD ran with the index off are not in it: the metric's coverage
/// has a gap, so the lookup scans and still finds them.
#[test]
fn a_metric_with_a_coverage_gap_is_looked_up_by_scan() {
    for (name, store) in common::backends() {
        let now = Arc::new(AtomicI64::new(DAY + 12 * 3600));
        let db = common::open(Arc::clone(&store), settings(&now, true));
        put(&db, "sys.cpu", DAY + 3600, &[("host", "web01")]);
        db.close().unwrap();
        drop(db);
        let db = common::open(Arc::clone(&store), settings(&now, false));
        put(&db, "sys.cpu", DAY + 2 * 3600, &[("host", "web02")]);
        db.close().unwrap();
        drop(db);
        let db = common::open(Arc::clone(&store), settings(&now, true));
        put(&db, "sys.cpu", DAY + 3 * 3600, &[("host", "web03")]);
        let q = LookupQuery {
            metric: Some("sys.cpu".into()),
            ..LookupQuery::default()
        };
        let hosts: Vec<String> = lookup(&db, &q)
            .unwrap()
            .into_iter()
            .map(|r| r.tags[0].1.clone())
            .collect();
        assert_eq!(hosts, ["web01", "web02", "web03"], "{name}");
        let q = LookupQuery {
            metric: None,
            tags: vec![(Some("host".into()), Some("web02".into()))],
            ..LookupQuery::default()
        };
        assert_eq!(lookup(&db, &q).unwrap().len(), 1, "{name}");
        db.close().unwrap();
    }
}

/// A covered metric is answered from the index alone: with its catalog rows deleted, the
/// lookup finds nothing while the scan still finds the series.
#[test]
fn a_covered_metric_is_answered_from_the_index() {
    for (name, store) in common::backends() {
        let now = Arc::new(AtomicI64::new(DAY + 12 * 3600));
        let db = common::open(Arc::clone(&store), settings(&now, true));
        put(&db, "sys.cpu", DAY + 3600, &[("host", "web01")]);
        db.flush().unwrap();
        let q = LookupQuery {
            metric: Some("sys.cpu".into()),
            ..LookupQuery::default()
        };
        assert_eq!(lookup(&db, &q).unwrap().len(), 1, "{name}");
        // Deleted behind the TSD's back: reopened, as a TSD alone on its store keeps the
        // candidates it read while it writes nothing to the index.
        assert_eq!(delete_index_rows(&store, 0x01), 1, "{name}");
        db.close().unwrap();
        drop(db);
        let db = common::open(Arc::clone(&store), settings(&now, true));
        assert!(lookup(&db, &q).unwrap().is_empty(), "{name}");
        assert_eq!(lookup_by_scan(&db, &q).unwrap().len(), 1, "{name}");
        db.close().unwrap();
    }
}

/// Deletes every row of the tag index whose key starts with `kind` (its key kind byte);
/// returns how many there were.
fn delete_index_rows(store: &Arc<dyn Store>, kind: u8) -> usize {
    use hourglass_storage::{Mutation, RowMutation, ScanRequest};
    let rows: Vec<RowMutation> = store
        .scan(
            "tsdb-index",
            &ScanRequest {
                start: vec![kind],
                end: Some(vec![kind + 1]),
                ..ScanRequest::default()
            },
        )
        .unwrap()
        .map(|r| RowMutation {
            key: r.unwrap().key,
            mutations: vec![Mutation::DeleteRow],
        })
        .collect();
    store.mutate_rows("tsdb-index", &rows).unwrap();
    rows.len()
}

fn random_suggest(rng: &mut Rng) -> MetricSuggest {
    let tags = (0..rng.below(3))
        .map(|_| (rng.pick(&KEYS).to_string(), rng.pick(&VALUES).to_string()))
        .collect();
    MetricSuggest {
        metric: rng.pick(&METRICS).to_string(),
        tagk: (rng.below(3) > 0).then(|| rng.pick(&KEYS).to_string()),
        tags,
        prefix: ["", "w", "web01", "é", "l", "W"][rng.below(6)].to_string(),
        max: [1, 3, 25][rng.below(3)],
    }
}

#[test]
fn suggest_within_a_metric_from_the_index_equals_the_scan() {
    for (name, store) in common::backends() {
        let mut rng = Rng(0x0123_4567_89AB_CDEF ^ name.len() as u64);
        let now = Arc::new(AtomicI64::new(DAY + 3 * 86_400));
        let db = common::open(Arc::clone(&store), settings(&now, true));
        write_random(&db, &mut rng, 120);
        let mut answered = 0;
        for _ in 0..150 {
            let s = random_suggest(&mut rng);
            let by_index = suggest_in_metric(&db, &s).unwrap();
            let by_scan = suggest_by_scan(&db, &s).unwrap();
            assert_eq!(by_index, by_scan, "{name} {s:?}");
            answered += usize::from(!by_index.is_empty());
        }
        assert!(
            answered > 30,
            "{name}: only {answered} suggestions found names"
        );
        db.close().unwrap();
    }
}

/// The index answers suggestions of a covered metric: with its value rows deleted, no
/// values are suggested while the scan still finds them.
#[test]
fn suggest_within_a_covered_metric_reads_the_index() {
    for (name, store) in common::backends() {
        let now = Arc::new(AtomicI64::new(DAY + 12 * 3600));
        let db = common::open(Arc::clone(&store), settings(&now, true));
        put(&db, "sys.cpu", DAY + 3600, &[("host", "web01")]);
        put(&db, "sys.cpu", DAY + 3600, &[("host", "web02")]);
        put(&db, "sys.mem", DAY + 3600, &[("host", "web03")]);
        let s = MetricSuggest {
            metric: "sys.cpu".into(),
            tagk: Some("host".into()),
            prefix: "web".into(),
            max: 25,
            ..MetricSuggest::default()
        };
        assert_eq!(
            suggest_in_metric(&db, &s).unwrap(),
            ["web01", "web02"],
            "{name}"
        );
        let keys = MetricSuggest {
            tagk: None,
            prefix: String::new(),
            ..s.clone()
        };
        assert_eq!(suggest_in_metric(&db, &keys).unwrap(), ["host"], "{name}");
        delete_index_rows(&store, 0x04);
        assert!(suggest_in_metric(&db, &s).unwrap().is_empty(), "{name}");
        assert_eq!(
            suggest_by_scan(&db, &s).unwrap(),
            ["web01", "web02"],
            "{name}"
        );
        db.close().unwrap();
    }
}

/// A lookup in the meta table with a limit reads only as many meta rows as it needs: one
/// read of `limit` rows when every candidate has one, where reading them all takes a read
/// per 1,000.
#[test]
fn a_limited_meta_lookup_stops_reading_at_its_limit() {
    use hourglass_storage::metered::Call;
    let store: Arc<dyn Store> = Arc::new(hourglass_storage::memory::MemoryStore::new());
    let now = Arc::new(AtomicI64::new(DAY + 12 * 3600));
    let db = common::open(store, settings(&now, true));
    let hosts: Vec<String> = (0..2_500).map(|i| format!("h{i:05}")).collect();
    for host in &hosts {
        put(&db, "sys.cpu", DAY + 3600, &[("host", host)]);
    }
    db.flush().unwrap();
    let reads = |limit: usize| {
        let before = db.store_stats().calls(Call::Get);
        let q = LookupQuery {
            metric: Some("sys.cpu".into()),
            use_meta: true,
            limit,
            ..LookupQuery::default()
        };
        let found = lookup(&db, &q).unwrap().len();
        (found, db.store_stats().calls(Call::Get) - before)
    };
    let (all, reads_all) = reads(0);
    let (some, reads_some) = reads(5);
    assert_eq!((all, some), (2_500, 5));
    assert!(
        reads_some + 2 <= reads_all,
        "a lookup limited to 5 made {reads_some} reads, an unlimited one {reads_all}"
    );
    db.close().unwrap();
}

/// A store counting the rows scans of the index table, and of the data table, hand out, and
/// the reads (`get`, `get_rows`: one round trip each on Bigtable) made of each.
#[derive(Debug)]
struct CountingScans {
    inner: Arc<dyn Store>,
    index_rows: Arc<std::sync::atomic::AtomicUsize>,
    data_rows: Arc<std::sync::atomic::AtomicUsize>,
    index_gets: Arc<std::sync::atomic::AtomicUsize>,
    data_gets: Arc<std::sync::atomic::AtomicUsize>,
}

impl CountingScans {
    fn over(inner: Arc<dyn Store>) -> CountingScans {
        CountingScans {
            inner,
            index_rows: Arc::default(),
            data_rows: Arc::default(),
            index_gets: Arc::default(),
            data_gets: Arc::default(),
        }
    }
}

impl Store for CountingScans {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    fn create_table(&self, spec: &hourglass_storage::TableSpec) -> hourglass_storage::Result<()> {
        self.inner.create_table(spec)
    }
    fn table_exists(&self, table: &str) -> hourglass_storage::Result<bool> {
        self.inner.table_exists(table)
    }
    fn get(
        &self,
        table: &str,
        key: &[u8],
        read: &hourglass_storage::ReadOptions,
    ) -> hourglass_storage::Result<Option<hourglass_storage::Row>> {
        match table {
            "tsdb-index" => self.index_gets.fetch_add(1, Ordering::SeqCst),
            "tsdb" => self.data_gets.fetch_add(1, Ordering::SeqCst),
            _ => 0,
        };
        self.inner.get(table, key, read)
    }
    fn get_rows(
        &self,
        table: &str,
        keys: &[Vec<u8>],
        read: &hourglass_storage::ReadOptions,
    ) -> hourglass_storage::Result<Vec<Option<hourglass_storage::Row>>> {
        match table {
            "tsdb-index" => self.index_gets.fetch_add(1, Ordering::SeqCst),
            "tsdb" => self.data_gets.fetch_add(1, Ordering::SeqCst),
            _ => 0,
        };
        self.inner.get_rows(table, keys, read)
    }
    fn mutate_row(
        &self,
        table: &str,
        key: &[u8],
        mutations: &[hourglass_storage::Mutation],
    ) -> hourglass_storage::Result<()> {
        self.inner.mutate_row(table, key, mutations)
    }
    fn mutate_rows(
        &self,
        table: &str,
        rows: &[hourglass_storage::RowMutation],
    ) -> hourglass_storage::Result<()> {
        self.inner.mutate_rows(table, rows)
    }
    fn scan(
        &self,
        table: &str,
        request: &hourglass_storage::ScanRequest,
    ) -> hourglass_storage::Result<hourglass_storage::RowIter> {
        let rows = self.inner.scan(table, request)?;
        let count = match table {
            "tsdb-index" => Arc::clone(&self.index_rows),
            "tsdb" => Arc::clone(&self.data_rows),
            _ => return Ok(rows),
        };
        Ok(Box::new(rows.inspect(move |_| {
            count.fetch_add(1, Ordering::SeqCst);
        })))
    }
    fn increment(
        &self,
        table: &str,
        key: &[u8],
        family: &str,
        qualifier: &[u8],
        delta: i64,
    ) -> hourglass_storage::Result<i64> {
        self.inner.increment(table, key, family, qualifier, delta)
    }
    fn check_and_mutate(
        &self,
        table: &str,
        key: &[u8],
        check: &hourglass_storage::Check,
        mutations: &[hourglass_storage::Mutation],
    ) -> hourglass_storage::Result<bool> {
        self.inner.check_and_mutate(table, key, check, mutations)
    }
    fn check_and_mutate_rows(
        &self,
        table: &str,
        checks: &[hourglass_storage::RowCheck],
        rows: &[hourglass_storage::RowMutation],
    ) -> hourglass_storage::Result<Option<bool>> {
        self.inner.check_and_mutate_rows(table, checks, rows)
    }
    fn sync(&self) -> hourglass_storage::Result<()> {
        self.inner.sync()
    }

    fn is_shared(&self) -> bool {
        self.inner.is_shared()
    }

    fn put_cells(
        &self,
        table: &str,
        rows: &[hourglass_storage::CellRow<'_>],
    ) -> hourglass_storage::Result<()> {
        self.inner.put_cells(table, rows)
    }

    fn scan_cells(
        &self,
        table: &str,
        request: &hourglass_storage::ScanRequest,
        visit: hourglass_storage::CellVisitor<'_>,
    ) -> hourglass_storage::Result<()> {
        // Through `scan`, so the rows lent are counted too.
        hourglass_storage::fallback::scan_cells(self, table, request, visit)
    }

    fn scan_joint(
        &self,
        table: &str,
        request: &hourglass_storage::ScanRequest,
        visit: hourglass_storage::JointVisitor<'_>,
    ) -> hourglass_storage::Result<()> {
        // Through `scan`, so the rows lent are counted too.
        hourglass_storage::fallback::scan_joint(self, table, request, visit)
    }

    fn increment_many(
        &self,
        table: &str,
        key: &[u8],
        increments: &[hourglass_storage::Increment],
    ) -> hourglass_storage::Result<Vec<i64>> {
        self.inner.increment_many(table, key, increments)
    }

    fn append(
        &self,
        table: &str,
        key: &[u8],
        family: &str,
        qualifier: &[u8],
        suffix: &[u8],
    ) -> hourglass_storage::Result<()> {
        self.inner.append(table, key, family, qualifier, suffix)
    }

    fn checkpoint(&self) -> hourglass_storage::Result<()> {
        self.inner.checkpoint()
    }

    fn make_table_durable(&self, table: &str) -> hourglass_storage::Result<()> {
        self.inner.make_table_durable(table)
    }

    fn maintain(&self, now_ms: i64) -> hourglass_storage::Result<()> {
        self.inner.maintain(now_ms)
    }
}

/// A meta-table lookup of a whole metric with a limit reads the catalog only until the limit
/// is met (RFC 0007 phase 2), not every series of the metric, and answers as the scan; a
/// `*=value` lookup too, and one whose first candidates lack meta rows reads on past them.
#[test]
fn a_limited_whole_metric_meta_lookup_stops_reading_the_catalog() {
    let index_rows = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let store: Arc<dyn Store> = Arc::new(CountingScans {
        index_rows: Arc::clone(&index_rows),
        ..CountingScans::over(Arc::new(hourglass_storage::memory::MemoryStore::new()))
    });
    let now = Arc::new(AtomicI64::new(DAY + 12 * 3600));
    let db = common::open(Arc::clone(&store), settings(&now, true));
    for i in 0..3_000 {
        let host = format!("h{i:05}");
        let dc = if i % 2 == 0 { "lon" } else { "par" };
        put(&db, "sys.cpu", DAY + 3600, &[("host", &host), ("dc", dc)]);
    }
    db.flush().unwrap();
    // The first 100 series (TSUID order) lose their meta rows: read past.
    let first: Vec<Vec<u8>> = store
        .scan("tsdb-meta", &hourglass_storage::ScanRequest::default())
        .unwrap()
        .take(100)
        .map(|r| r.unwrap().key)
        .collect();
    for key in &first {
        store
            .mutate_row("tsdb-meta", key, &[hourglass_storage::Mutation::DeleteRow])
            .unwrap();
    }
    for tags in [vec![], vec![(None, Some("lon".to_string()))]] {
        for limit in [1, 25, 0] {
            let q = LookupQuery {
                metric: Some("sys.cpu".into()),
                tags: tags.clone(),
                use_meta: true,
                limit,
            };
            let before = index_rows.load(Ordering::SeqCst);
            let by_index = lookup(&db, &q).unwrap();
            let read = index_rows.load(Ordering::SeqCst) - before;
            assert_eq!(by_index, lookup_by_scan(&db, &q).unwrap(), "{q:?}");
            assert!(by_index.iter().all(|r| !first.contains(&r.tsuid)), "{q:?}");
            if limit == 0 {
                assert!(read >= 3_000, "{q:?}: {read} index rows read");
            } else {
                assert_eq!(by_index.len(), limit, "{q:?}");
                assert!(read < 400, "{q:?}: {read} index rows read for {limit}");
            }
        }
    }
    db.close().unwrap();
}

/// A data-table lookup of a whole metric with a limit stops reading where the limit is met
/// (RFC 0007 phase 2): series over three days, some in several, the answer the scan's for
/// limits met in the first day, across days, and never met, while the rows read stay near
/// the limit where listing every series read them all.
#[test]
fn a_limited_whole_metric_data_lookup_stops_at_its_limit() {
    let index_rows = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let data_rows = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let store: Arc<dyn Store> = Arc::new(CountingScans {
        inner: Arc::new(hourglass_storage::memory::MemoryStore::new()),
        index_rows: Arc::clone(&index_rows),
        data_rows: Arc::clone(&data_rows),
        ..CountingScans::over(Arc::new(hourglass_storage::memory::MemoryStore::new()))
    });
    let now = Arc::new(AtomicI64::new(DAY + 3 * 86_400));
    let db = common::open(Arc::clone(&store), settings(&now, true));
    // Day 0: h0000..h0999 at hours 5 then 2 (first rows at hour 2); day 1: h0500..h1999
    // (the first third met on day 0), half of them in its first hour; day 2: h2000..h2999
    // and h0000 again.
    for i in 0..3_000 {
        let host = format!("h{i:04}");
        let dc = if i % 2 == 0 { "lon" } else { "par" };
        let tags = [("host", host.as_str()), ("dc", dc)];
        match i {
            0..1_000 => {
                put(&db, "sys.cpu", DAY + 5 * 3600 + i, &tags);
                put(&db, "sys.cpu", DAY + 2 * 3600 + i, &tags);
            }
            1_000..2_000 => {}
            _ => put(&db, "sys.cpu", DAY + 2 * 86_400 + 3600, &tags),
        }
        if (500..2_000).contains(&i) {
            // Half in the day's first hour: the first of those in tag order come first.
            put(&db, "sys.cpu", DAY + 86_400 + (i % 2) * 3600, &tags);
        }
    }
    put(
        &db,
        "sys.cpu",
        DAY + 2 * 86_400,
        &[("host", "h0000"), ("dc", "lon")],
    );
    db.flush().unwrap();
    for tags in [vec![], vec![(None, Some("lon".to_string()))]] {
        for limit in [1, 25, 700, 1_500, 5_000, 0] {
            let q = LookupQuery {
                metric: Some("sys.cpu".into()),
                tags: tags.clone(),
                use_meta: false,
                limit,
            };
            let (index_before, data_before) = (
                index_rows.load(Ordering::SeqCst),
                data_rows.load(Ordering::SeqCst),
            );
            let by_index = lookup(&db, &q).unwrap();
            let read = index_rows.load(Ordering::SeqCst) - index_before
                + data_rows.load(Ordering::SeqCst)
                - data_before;
            let by_scan = lookup_by_scan(&db, &q).unwrap();
            assert_eq!(by_index, by_scan, "{q:?}");
            let all = if tags.is_empty() { 3_000 } else { 1_500 };
            assert_eq!(
                by_index.len(),
                if limit == 0 { all } else { limit.min(all) }
            );
            if limit == 1 || limit == 25 {
                assert!(read < 400, "{q:?}: {read} rows read for {limit}");
            }
        }
    }
    db.close().unwrap();
}

/// A lookup's candidates (and its metric's periods, which order a data-table lookup) are
/// kept between lookups while no index row they are read from is written: a repeated
/// lookup scans no index row, and a series of known values flushed since (only its
/// postings and catalog row are new) is found by the next one.
#[test]
fn kept_lookup_candidates_follow_new_series() {
    use hourglass_storage::metered::Call;
    for (name, store) in common::backends() {
        let now = Arc::new(AtomicI64::new(DAY + 12 * 3600));
        let db = common::open(Arc::clone(&store), settings(&now, true));
        put(
            &db,
            "sys.cpu",
            DAY + 3600,
            &[("host", "web01"), ("dc", "lon")],
        );
        put(
            &db,
            "sys.cpu",
            DAY + 3600,
            &[("host", "web02"), ("dc", "par")],
        );
        db.flush().unwrap();
        let q = LookupQuery {
            metric: Some("sys.cpu".into()),
            tags: vec![(Some("host".into()), Some("web01".into()))],
            ..LookupQuery::default()
        };
        let ask = || {
            let scans = db.store_stats().calls(Call::Scan);
            let found = lookup(&db, &q).unwrap().len();
            (db.store_stats().calls(Call::Scan) - scans, found)
        };
        // The store shared: read every time.
        let kept = |scans: u64| if store.is_shared() { scans } else { 0 };
        assert!(!lookup_is_kept(&db, &q, 10), "{name}: nothing kept yet");
        let (first, found) = ask();
        assert_eq!(lookup_is_kept(&db, &q, 10), !store.is_shared(), "{name}");
        assert!(!lookup_is_kept(&db, &q, 0), "{name}: more than none");
        assert_eq!(found, 1, "{name}");
        assert!(first > 0, "{name}");
        assert_eq!(
            ask(),
            (kept(first), 1),
            "{name}: kept, neither the postings nor the metric's periods scanned"
        );
        put(
            &db,
            "sys.cpu",
            DAY + 3600,
            &[("host", "web01"), ("dc", "par")],
        );
        assert!(
            !lookup_is_kept(&db, &q, 10),
            "{name}: points to flush first"
        );
        db.flush().unwrap();
        assert!(
            !lookup_is_kept(&db, &q, 10),
            "{name}: postings written since"
        );
        let (_, found) = ask();
        assert_eq!(found, 2, "{name}: the new series is found");
        db.close().unwrap();
    }
}

/// Whether the index covers a metric's hours is kept between lookups as their candidates
/// are, and read again after a write of a status row: once the index's status is cleared
/// (what `tsdb index rebuild --replace` starts with), the next lookup scans the data table
/// and finds a series the index never listed.
#[test]
fn kept_lookup_coverage_follows_status_writes() {
    use hourglass_storage::metered::Call;
    use hourglass_storage::{Mutation, ScanRequest};
    for (name, store) in common::backends() {
        let now = Arc::new(AtomicI64::new(DAY + 12 * 3600));
        let db = common::open(Arc::clone(&store), settings(&now, true));
        let schema = db.settings().schema.clone();
        put(&db, "sys.cpu", DAY + 3600, &[("host", "web01")]);
        put(&db, "sys.mem", DAY + 3600, &[("host", "web02")]);
        db.flush().unwrap();
        let q = LookupQuery {
            metric: Some("sys.cpu".into()),
            tags: vec![(Some("host".into()), None)],
            ..LookupQuery::default()
        };
        let ask = || {
            let gets = db.store_stats().calls(Call::Get);
            let found = lookup(&db, &q).unwrap().len();
            (db.store_stats().calls(Call::Get) - gets, found)
        };
        let (first, found) = ask();
        assert_eq!(found, 1, "{name}");
        let (again, found) = ask();
        assert_eq!(found, 1, "{name}");
        if !store.is_shared() {
            assert!(
                again < first,
                "{name}: status rows read again ({again} of {first})"
            );
        }
        // sys.cpu{host=web02} written to the data table alone, as a writer without the
        // index would: sys.cpu's row with sys.mem's tag value (UIDs in order of creation).
        let rows: Vec<_> = store
            .scan(&schema.data_table, &ScanRequest::default())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!((rows.len(), schema.salt_width), (2, 0), "{name}");
        let (cpu, mem) = (&rows[0], &rows[1]);
        let at = cpu.key.len() - usize::from(schema.tagv_width);
        let key = [&cpu.key[..at], &mem.key[at..]].concat();
        let cells: Vec<Mutation> = cpu
            .cells
            .iter()
            .map(|c| Mutation::set(&c.family, c.qualifier.clone(), c.value.clone()))
            .collect();
        db.store()
            .mutate_row(&schema.data_table, &key, &cells)
            .unwrap();
        assert_eq!(
            ask().1,
            1,
            "{name}: the index answers, without the new series"
        );
        hourglass_engine::index::status::clear(db.store().as_ref(), &schema.index_table).unwrap();
        assert_eq!(
            ask().1,
            2,
            "{name}: the status cleared, the data table is scanned"
        );
        db.close().unwrap();
    }
}

/// A data-table lookup finds each series' first row with few reads (`get_rows` calls, one
/// round trip each on Bigtable): in the metric's first period of several, the first hour
/// read before the postings (a series there from the start costs one read); in its last
/// period, or its only one, no postings read at all (no row of the metric lies outside its
/// periods). The answers are the scan's, on every backend.
#[test]
fn a_data_lookup_finds_first_rows_in_few_reads() {
    for (name, inner) in common::backends() {
        let counting = Arc::new(CountingScans::over(inner));
        let (index_gets, data_gets) = (
            Arc::clone(&counting.index_gets),
            Arc::clone(&counting.data_gets),
        );
        let now = Arc::new(AtomicI64::new(DAY + 3 * 86_400));
        let db = common::open(counting, settings(&now, true));
        let one = |host: &str, at: i64| put(&db, "sys.one", DAY + at, &[("host", host)]);
        one("top", 0);
        one("late", 23 * 3600 + 5);
        let days = |host: &str, at: i64| put(&db, "sys.days", DAY + at, &[("host", host)]);
        for day in 0..3 {
            days("always", day * 86_400);
        }
        days("second", 86_400 + 5 * 3600);
        days("second", 2 * 86_400);
        days("third", 2 * 86_400);
        db.flush().unwrap();
        // Rounds of the hours after the first: 1, 2, 4, 8, the rest; on a shared store
        // (Bigtable, a round trip a read) one.
        let shared = db.store().is_shared();
        let rounds = |n: usize| if shared { 1 } else { n };
        // The index's status rows, read at each lookup where the coverage is not kept (a
        // shared store): one read for both.
        let status = usize::from(shared);
        // (metric, host, reads of the index's postings, reads of data rows)
        let cases = [
            ("sys.one", "top", 0, 1),
            ("sys.one", "late", 0, 1 + rounds(5)),
            ("sys.days", "always", 0, 1),
            // Day 0: its first hour, then its posting; day 1: its posting, hours 0 to 7 in
            // four rounds.
            ("sys.days", "second", 2, 2 + rounds(3)),
            // Days 0 and 1 as above (no posting on day 1); day 2 (the last): its first hour.
            ("sys.days", "third", 2, 2),
        ];
        for (metric, host, postings, data_reads) in cases {
            let index_reads = status + postings;
            let q = LookupQuery {
                metric: Some(metric.into()),
                tags: vec![(Some("host".into()), Some(host.into()))],
                use_meta: false,
                limit: 0,
            };
            let by_scan = lookup_by_scan(&db, &q).unwrap();
            assert_eq!(by_scan.len(), 1, "{name} {q:?}");
            // The first lookup may read what later ones keep (candidates, coverage).
            assert_eq!(lookup(&db, &q).unwrap(), by_scan, "{name} {q:?}");
            let before = (
                index_gets.load(Ordering::SeqCst),
                data_gets.load(Ordering::SeqCst),
            );
            assert_eq!(lookup(&db, &q).unwrap(), by_scan, "{name} {q:?}");
            let reads = (
                index_gets.load(Ordering::SeqCst) - before.0,
                data_gets.load(Ordering::SeqCst) - before.1,
            );
            assert_eq!(reads, (index_reads, data_reads), "{name} {metric} {host}");
        }
        db.close().unwrap();
    }
}
