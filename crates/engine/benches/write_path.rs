#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Write-path and decode benchmarks.
//!
//! `ingest`: 1,000,000 points in batches of 1,000 over 10,000 series (UIDs cached), then a
//! flush, on the embedded store as `tsdb tsd` runs it (log segments, compact cell form):
//! points per second through validation, the write-ahead log, row buffers and compacted-cell
//! writes.
//! `decode`: points per second decoding compacted one-hour rows of 360 points.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use hourglass_core::compact::{self, Point};
use hourglass_core::qualifier::Qualifier;
use hourglass_core::value::Value;
use hourglass_engine::cell_codec::DataCellCodec;
use hourglass_engine::{IncomingPoint, Settings, Tsdb};
use hourglass_storage::CellCodec;
use hourglass_storage::Store;
use hourglass_store_fjall::FjallStore;

const SERIES: usize = 10_000;
const BATCH: usize = 1_000;
const POINTS: usize = 1_000_000;

fn ingest(c: &mut Criterion) {
    let hosts: Vec<String> = (0..SERIES / 10).map(|i| format!("host{i:04}")).collect();
    let cpus: Vec<String> = (0..10).map(|i| format!("{i}")).collect();
    let tag_sets: Vec<[(&str, &str); 2]> = (0..SERIES)
        .map(|s| {
            [
                ("host", hosts[s / 10].as_str()),
                ("cpu", cpus[s % 10].as_str()),
            ]
        })
        .collect();
    let mut group = c.benchmark_group("write_path");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20))
        .throughput(Throughput::Elements(POINTS as u64));
    group.bench_function("ingest_1M_points_10k_series_embedded", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let dir = tempfile::tempdir().expect("temp dir");
                let store: Arc<dyn Store> = Arc::new(
                    FjallStore::open(dir.path())
                        .expect("open")
                        .with_cell_codec("tsdb", Arc::new(DataCellCodec)),
                );
                let settings = Settings {
                    auto_create_metrics: true,
                    max_buffered_points: 2 * POINTS,
                    wal_dir: Some(dir.path().join("wal")),
                    ..Settings::default()
                };
                let db = Tsdb::open(store, settings).expect("open tsdb");
                // Warm the UID and series caches, as a running TSD has them.
                let warm: Vec<IncomingPoint<'_>> = tag_sets
                    .iter()
                    .map(|t| IncomingPoint {
                        metric: "sys.cpu.user",
                        timestamp: 1356990000,
                        value: Value::Int(0),
                        tags: t,
                        line_tags: None,
                    })
                    .collect();
                db.add_points(&warm);
                db.flush().expect("flush");
                let start = Instant::now();
                let mut batch = Vec::with_capacity(BATCH);
                for n in 0..POINTS {
                    let s = n % SERIES;
                    let ts = 1356998400 + (n / SERIES) as i64 * 10;
                    batch.push(IncomingPoint {
                        metric: "sys.cpu.user",
                        timestamp: ts,
                        value: Value::Int((n % 977) as i64),
                        tags: &tag_sets[s],
                        line_tags: None,
                    });
                    if batch.len() == BATCH {
                        let out = db.add_points(&batch);
                        assert_eq!(out.stored, BATCH);
                        batch.clear();
                    }
                }
                db.flush().expect("flush");
                total += start.elapsed();
            }
            total
        })
    });
    group.finish();
}

fn decode(c: &mut Criterion) {
    let points: Vec<Point> = (0..360u32)
        .map(|i| {
            let v = Value::Int(i64::from(i * 37 % 5000));
            Point::new(
                Qualifier::seconds(i * 10, v.flags()).expect("offset"),
                v.to_bits(),
            )
        })
        .collect();
    let (q, v) = compact::encode_cell(&points);
    let rows = 100;
    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Elements((points.len() * rows) as u64));
    group.bench_function("compacted_rows_360_points", |b| {
        let mut out = Vec::with_capacity(points.len());
        b.iter(|| {
            let mut n = 0;
            for _ in 0..rows {
                out.clear();
                compact::decode_cell(std::hint::black_box(&q), std::hint::black_box(&v), &mut out)
                    .expect("decode");
                n += out.len();
            }
            n
        })
    });
    // The embedded store's compact form, back to OpenTSDB's bytes, then to points.
    let blob = DataCellCodec
        .encode("t", &q, &v)
        .expect("codec takes a regular row");
    group.bench_function("stored_form_rows_360_points", |b| {
        let mut out = Vec::with_capacity(points.len());
        b.iter(|| {
            let mut n = 0;
            for _ in 0..rows {
                out.clear();
                let (q, v) = DataCellCodec
                    .decode("t", std::hint::black_box(&blob))
                    .expect("decode");
                compact::decode_cell(&q, &v, &mut out).expect("decode");
                n += out.len();
            }
            n
        })
    });
    group.finish();
}

criterion_group!(benches, ingest, decode);
criterion_main!(benches);
