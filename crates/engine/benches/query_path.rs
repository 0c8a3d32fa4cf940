#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Query-path benchmarks on the embedded store, in process (no HTTP): the four queries of
//! `hourglass-bench query` over compacted rows — one counter per series (`host`, `dc` with 4
//! values), a point every 10 s.
//!
//! The dataset is built once per size (then compacted, as a settled store is) and kept in `target/query-bench/<series>x<days>` (the
//! `HOURGLASS_QUERY_BENCH_DIR` directory instead when set). Size: `HOURGLASS_QUERY_BENCH_SERIES`
//! (default 1000) and `HOURGLASS_QUERY_BENCH_DAYS` (default 1). Throughput is in points
//! scanned.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group};
use hourglass_core::value::Value;
use hourglass_engine::cell_codec::DataCellCodec;
use hourglass_engine::query::aggregator::Aggregator;
use hourglass_engine::query::downsample::DownsampleSpec;
use hourglass_engine::query::filter::TagFilter;
use hourglass_engine::query::plan::{RunOptions, SubQuery, run};
use hourglass_engine::{IncomingPoint, Settings, Tsdb};
use hourglass_storage::Store;
use hourglass_store_fjall::FjallStore;

const METRIC: &str = "bench.requests";
const STEP: i64 = 10;
const END: i64 = 1_700_000_000 - 1_700_000_000 % 86_400;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn open(dir: &std::path::Path) -> Arc<Tsdb> {
    open_with_store(dir).0
}

fn open_with_store(dir: &std::path::Path) -> (Arc<Tsdb>, Arc<FjallStore>) {
    let fjall = Arc::new(
        FjallStore::open(dir)
            .expect("open")
            .with_cell_codec("tsdb", Arc::new(DataCellCodec)),
    );
    let store: Arc<dyn Store> = fjall.clone();
    let settings = Settings {
        auto_create_metrics: true,
        max_buffered_points: 4_000_000,
        wal: false,
        ..Settings::default()
    };
    (Tsdb::open(store, settings).expect("open tsdb"), fjall)
}

/// The dataset's directory, built on first use.
fn dataset(series: usize, days: usize) -> PathBuf {
    let dir = match std::env::var_os("HOURGLASS_QUERY_BENCH_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../target/query-bench")
            .join(format!("{series}x{days}")),
    };
    let done = dir.join("COMPLETE");
    if done.exists() {
        return dir;
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create dir");
    eprintln!(
        "building {series} series x {days} days in {}",
        dir.display()
    );
    let (db, fjall) = open_with_store(&dir);
    let tags: Vec<[(String, String); 2]> = (0..series)
        .map(|i| {
            [
                ("host".to_string(), format!("h{i}")),
                ("dc".to_string(), format!("dc{}", i % 4)),
            ]
        })
        .collect();
    let tag_refs: Vec<[(&str, &str); 2]> = tags
        .iter()
        .map(|[a, b]| [(a.0.as_str(), a.1.as_str()), (b.0.as_str(), b.1.as_str())])
        .collect();
    let mut values: Vec<i64> = (0..series as i64).map(|i| i * 1000).collect();
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let start = END - days as i64 * 86_400;
    let mut t = start;
    let mut batch = Vec::with_capacity(series);
    while t < END {
        batch.clear();
        for (i, v) in values.iter_mut().enumerate() {
            rng ^= rng >> 12;
            rng ^= rng << 25;
            rng ^= rng >> 27;
            *v += (rng.wrapping_mul(0x2545_F491_4F6C_DD1D) % 100) as i64;
            batch.push(IncomingPoint {
                metric: METRIC,
                timestamp: t,
                value: Value::Int(*v),
                tags: &tag_refs[i],
                line_tags: None,
            });
        }
        let out = db.add_points(&batch);
        assert_eq!(out.stored, series);
        t += STEP;
        if (t - start) % 3600 == 0 {
            db.flush().expect("flush");
        }
    }
    db.flush().expect("flush");
    // Settled, as a store is once background compaction has caught up.
    fjall.major_compact().expect("compact");
    drop(db);
    drop(fjall);
    std::fs::write(&done, b"").expect("marker");
    dir
}

fn sub(agg: &str, ds: Option<&str>, rate: bool, filters: Vec<TagFilter>) -> SubQuery {
    let mut q = SubQuery::new(Aggregator::parse(agg).unwrap(), METRIC);
    q.downsample = ds.map(|d| DownsampleSpec::parse(d).unwrap());
    q.rate = rate;
    q.filters = filters;
    q
}

/// The benchmark's queries: (name, sub-query, range, points scanned).
fn cases(series: usize, days: usize) -> Vec<(&'static str, SubQuery, (i64, i64), u64)> {
    let all = ((END - days as i64 * 86_400) * 1000, END * 1000 - 1);
    let day = ((END - 86_400) * 1000, END * 1000 - 1);
    let points = (series * days * 86_400 / STEP as usize) as u64;
    let host = || vec![TagFilter::from_legacy("host", "h1", true).unwrap()];
    let by_dc = || vec![TagFilter::from_legacy("dc", "*", true).unwrap()];
    let only = std::env::var("HOURGLASS_QUERY_BENCH_ONLY").ok();
    vec![
        (
            "sum_1m_avg",
            sub("sum", Some("1m-avg"), false, vec![]),
            all,
            points,
        ),
        (
            "max_by_dc_1h_max",
            sub("max", Some("1h-max"), false, by_dc()),
            all,
            points,
        ),
        (
            "one_series_raw_1d",
            sub("sum", None, false, host()),
            day,
            8640,
        ),
        (
            "sum_rate_1m_avg",
            sub("sum", Some("1m-avg"), true, vec![]),
            all,
            points,
        ),
    ]
    .into_iter()
    .filter(|c| only.as_deref().is_none_or(|o| c.0.contains(o)))
    .collect()
}

fn queries(c: &mut Criterion) {
    let series = env("HOURGLASS_QUERY_BENCH_SERIES", 1000);
    let days = env("HOURGLASS_QUERY_BENCH_DAYS", 1);
    let db = open(&dataset(series, days));
    let mut group = c.benchmark_group("query");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    for (name, q, (start, end), scanned) in cases(series, days) {
        group.throughput(Throughput::Elements(scanned));
        group.bench_function(name, |b| {
            b.iter(|| {
                let out = run(&db, start, end, &q, &RunOptions::default()).expect("query");
                assert!(out.stats.points >= scanned, "{name}: {:?}", out.stats);
                out.groups.len()
            })
        });
    }
    group.finish();
}

/// `HOURGLASS_QUERY_BENCH_ITERS=N`: each query N times without criterion, for `perf stat`
/// (CPU time is steadier than wall time on a shared machine); `HOURGLASS_QUERY_BENCH_SERIAL`
/// reads each sub-query on one thread.
fn plain(iterations: usize) {
    let series = env("HOURGLASS_QUERY_BENCH_SERIES", 1000);
    let days = env("HOURGLASS_QUERY_BENCH_DAYS", 1);
    let db = open(&dataset(series, days));
    for (name, q, (start, end), _) in cases(series, days) {
        let started = std::time::Instant::now();
        let (mut scan, mut aggregation) = (Duration::ZERO, Duration::ZERO);
        for _ in 0..iterations {
            let options = RunOptions {
                parallel: std::env::var_os("HOURGLASS_QUERY_BENCH_SERIAL").is_none(),
                ..RunOptions::default()
            };
            let out = run(&db, start, end, &q, &options).expect("query");
            scan += out.stats.scan_time;
            aggregation += out.stats.aggregation_time;
        }
        let ms = |d: Duration| d.as_secs_f64() * 1000.0 / iterations as f64;
        eprintln!(
            "{name}: {:.2} ms per query (scan {:.2} ms, aggregation {:.2} ms)",
            ms(started.elapsed()),
            ms(scan),
            ms(aggregation)
        );
    }
}

criterion_group!(benches, queries);

fn main() {
    if let Some(n) = std::env::var("HOURGLASS_QUERY_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        plain(n);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
