//! Deterministic simulation of computed rollups (RFC 0008 phase 4). For each seed a TSD
//! runs over a simulated log directory and a fault-injecting memory store
//! ([`hourglass_engine::sim`]): batches of points (late ones too, values of every width),
//! flushes, upkeep rounds, the clock moving on, store faults and process crashes, in an
//! order and with faults chosen by the seed. At the end (faults off, every unit due) each
//! tier's cells must be exactly the fold of the raw points stored: sum in time order, count,
//! min and max per series and interval, nothing more — whatever failed or crashed on the way,
//! no point missing from a unit and none counted twice.
//!
//! `HOURGLASS_SIM_SEEDS=N` runs N seeds (default 40); `HOURGLASS_SIM_SEED=S` runs one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use hourglass_core::config::Config;
use hourglass_core::rowkey::decode_row_key;
use hourglass_core::uid::UidKind;
use hourglass_core::value::Value;
use hourglass_engine::scan::RowQuery;
use hourglass_engine::sim::{FaultStore, Faults, Rng, SimFiles};
use hourglass_engine::wal::files::LogFiles;
use hourglass_engine::{Clock, IncomingPoint, Settings, Tsdb};
use hourglass_storage::{ScanRequest, Store};

const HOSTS: [&str; 3] = ["a", "b", "c"];
/// 2013-01-01 00:00:00 UTC.
const T0: i64 = 1_356_998_400;
const STEPS: usize = 160;

const ROLLUPS: &str = r#"{"aggregationIds":{"sum":0,"count":1,"max":2,"min":3},"intervals":[
{"table":"tsdb","preAggregationTable":"tsdb-agg","interval":"1m","rowSpan":"1h","defaultInterval":true},
{"table":"tsdb-rollup-10m","preAggregationTable":"tsdb-rollup-agg-10m","interval":"10m","rowSpan":"6h"},
{"table":"tsdb-rollup-1h","preAggregationTable":"tsdb-rollup-agg-1h","interval":"1h","rowSpan":"1d"}]}"#;

fn open(
    store: &Arc<dyn Store>,
    files: &SimFiles,
    settings: &Settings,
    faults: &Faults,
) -> Arc<Tsdb> {
    for _ in 0..50 {
        if let Ok(db) = Tsdb::open_with_log(
            Arc::clone(store),
            settings.clone(),
            Some(Arc::new(files.clone()) as Arc<dyn LogFiles>),
        ) {
            return db;
        }
    }
    faults.set_rate(0);
    Tsdb::open_with_log(
        Arc::clone(store),
        settings.clone(),
        Some(Arc::new(files.clone()) as Arc<dyn LogFiles>),
    )
    .expect("open with faults off")
}

/// (host, interval start s) → (sum, count, min, max) as doubles.
type Folds = BTreeMap<(String, i64), (f64, u64, f64, f64)>;

/// The folds of the raw points stored, per interval of `step` seconds.
fn expected(db: &Tsdb, step: i64, until: i64) -> Folds {
    let metric = db.uids().get_id(UidKind::Metric, "m").unwrap();
    let series = db
        .read_series(&RowQuery {
            metric,
            start_secs: 0,
            end_secs: until,
            tags: vec![],
        })
        .unwrap();
    let mut out = Folds::new();
    for s in series {
        let host = db
            .uids()
            .get_name(UidKind::TagValue, s.series.tags[0].1)
            .unwrap();
        for (ms, v) in s.points {
            let t = ms / 1000;
            let e = out
                .entry((host.clone(), t - t.rem_euclid(step)))
                .or_insert((-0.0, 0, f64::INFINITY, f64::NEG_INFINITY));
            let v = v.as_f64();
            e.0 += v;
            e.1 += 1;
            e.2 = e.2.min(v);
            e.3 = e.3.max(v);
        }
    }
    out
}

/// The cells of a tier's table, as folds.
fn stored(db: &Tsdb, table: &str, step: i64) -> Result<Folds, String> {
    let schema = &db.settings().schema;
    let mut out = Folds::new();
    for row in db.store().scan(table, &ScanRequest::default()).unwrap() {
        let row = row.unwrap();
        let key = decode_row_key(schema, &row.key).unwrap();
        let host = db
            .uids()
            .get_name(UidKind::TagValue, key.series.tags[0].1)
            .unwrap();
        for c in &row.cells {
            let q = &c.qualifier;
            let offset = i64::from(u16::from_be_bytes([q[1], q[2]]) >> 4);
            let v = Value::decode(q[2] & 0x0F, &c.value).unwrap().as_f64();
            let t = i64::from(key.base_time) + offset * step;
            let e =
                out.entry((host.clone(), t))
                    .or_insert((f64::NAN, u64::MAX, f64::NAN, f64::NAN));
            match q[0] {
                0 if e.0.is_nan() => e.0 = v,
                1 if e.1 == u64::MAX => e.1 = v as u64,
                2 if e.3.is_nan() => e.3 = v,
                3 if e.2.is_nan() => e.2 = v,
                id => {
                    return Err(format!(
                        "{table}: a second cell of aggregator {id} at {t} for {host}"
                    ));
                }
            }
        }
    }
    Ok(out)
}

fn run_seed(seed: u64) -> Result<(), String> {
    let mut rng = Rng::new(seed ^ 0x0FF5E7);
    let rate = [0, 10, 40][rng.below(3) as usize];
    let faults = Arc::new(Faults::new(seed, rate));
    let store: Arc<dyn Store> = Arc::new(FaultStore::new(Arc::clone(&faults)));
    let mut files = SimFiles::new(Arc::clone(&faults));
    let now = Arc::new(AtomicI64::new(T0 + 600));
    let clock_now = Arc::clone(&now);
    let mut c = Config::default();
    c.set("tsd.rollups.enable", "true");
    c.set("tsd.rollups.compute", "true");
    c.set("tsd.rollups.compute.delay", "1m");
    c.set("tsd.rollups.config", &ROLLUPS.replace('\n', ""));
    let settings = Settings {
        auto_create_metrics: true,
        fix_duplicates: true,
        max_buffered_points: usize::MAX,
        flush_interval: std::time::Duration::from_secs(3600),
        clock: Clock::from_fn(move || clock_now.load(Ordering::SeqCst) * 1000),
        ..Settings::from_config(&c).unwrap()
    };
    let mut db = open(&store, &files, &settings, &faults);
    let mut latest = [T0; HOSTS.len()];
    for _ in 0..STEPS {
        match rng.below(100) {
            0..=44 => {
                let n = 1 + rng.below(30) as usize;
                let points: Vec<(usize, i64, i64)> = (0..n)
                    .map(|_| {
                        let h = rng.below(HOSTS.len() as u64) as usize;
                        let t = if rng.chance(150) {
                            // Late: an hour or more back.
                            (latest[h] - 3600 - rng.below(4 * 3600) as i64).max(T0)
                        } else {
                            latest[h] = (latest[h] + 1 + rng.below(120) as i64)
                                .min(now.load(Ordering::SeqCst));
                            latest[h]
                        };
                        // Every width: 1, 2, 4 and 8 bytes.
                        let v = match rng.below(4) {
                            0 => rng.below(100) as i64,
                            1 => rng.below(30_000) as i64 - 15_000,
                            2 => rng.below(2_000_000_000) as i64,
                            _ => rng.below(1 << 40) as i64 - (1 << 39),
                        };
                        (h, t, v)
                    })
                    .collect();
                let tags: Vec<[(&str, &str); 1]> = points
                    .iter()
                    .map(|(h, _, _)| [("host", HOSTS[*h])])
                    .collect();
                let batch: Vec<IncomingPoint<'_>> = points
                    .iter()
                    .zip(&tags)
                    .map(|((_, t, v), tags)| IncomingPoint {
                        metric: "m",
                        timestamp: *t,
                        value: Value::Int(*v),
                        tags,
                        line_tags: None,
                    })
                    .collect();
                let _ = db.add_points(&batch);
            }
            45..=64 => {
                now.fetch_add(1 + rng.below(1800) as i64, Ordering::SeqCst);
            }
            65..=74 => {
                let _ = db.flush();
            }
            75..=94 => {
                let _ = db.upkeep_round(rng.chance(100));
            }
            _ => {
                // A process crash: what reached the OS survives, the process does not.
                files = files.crash();
                drop(db);
                db = open(&store, &files, &settings, &faults);
            }
        }
    }
    // Faults off; every unit due.
    faults.set_rate(0);
    faults.set_disk_full(false);
    faults.set_store_down(false);
    db.flush().map_err(|e| format!("final flush: {e}"))?;
    now.fetch_add(2 * 3600, Ordering::SeqCst);
    db.upkeep_round(true)
        .map_err(|e| format!("final round: {e}"))?;
    let until = now.load(Ordering::SeqCst);
    if db.upkeep_round(true).map_err(|e| e.to_string())? != 0 {
        return Err("a round after everything was computed still computed".into());
    }
    for (table, step) in [("tsdb-rollup-10m", 600), ("tsdb-rollup-1h", 3600)] {
        let want = expected(&db, step, until);
        let got = stored(&db, table, step)?;
        for (k, w) in &want {
            let g = got.get(k);
            let same = g.is_some_and(|g| g.0 == w.0 && g.1 == w.1 && g.2 == w.2 && g.3 == w.3);
            if !same {
                return Err(format!(
                    "{table} {k:?}: stored {g:?}, raw points fold to {w:?}"
                ));
            }
        }
        if let Some(extra) = got.keys().find(|k| !want.contains_key(k)) {
            return Err(format!("{table}: a cell at {extra:?} without raw points"));
        }
    }
    Ok(())
}

#[test]
fn computed_rollups_are_the_fold_of_the_stored_points_whatever_fails() {
    let seeds: Vec<u64> = match std::env::var("HOURGLASS_SIM_SEED") {
        Ok(s) => vec![s.parse().unwrap()],
        Err(_) => (0..std::env::var("HOURGLASS_SIM_SEEDS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(40))
            .collect(),
    };
    for seed in seeds {
        if let Err(e) = run_seed(seed) {
            panic!("seed {seed}: {e} (HOURGLASS_SIM_SEED={seed})");
        }
    }
}
