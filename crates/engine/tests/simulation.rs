//! Deterministic simulation of the write path. For each seed the engine runs over a
//! simulated log directory and a fault-injecting memory store ([`hourglass_engine::sim`]):
//! batches, `?sync`s, flushes, queries (also from inside the store's writes, as a query
//! racing a flush), hours closing, full disks, storage outages, process crashes and power
//! losses, in an order and with faults chosen by the seed. After every step it checks:
//!
//! - every acknowledged point is readable (after crashes too), exactly once, with its value;
//! - nothing is read that was never sent (points of failed batches may or may not appear);
//! - after a power loss, every point acknowledged as synced (`wal.sync`, or a `?sync` that
//!   succeeded) is readable;
//! - every series read has a host whose UID names it both ways (a query by name finds it):
//!   new host names appear throughout a run, and the store models fsyncgate for the UID
//!   table's mappings and counters too;
//! - buffered points stay under their memory budget (plus one batch);
//! - histogram points (in the rows of the raw series, beside their data cells) and rollup
//!   and pre-aggregate points (RFC 0008), written straight to the store, keep the same
//!   promises: an acknowledged cell is readable with its bytes (after crashes too), after a
//!   power loss every cell acknowledged as synced (`wal.sync`, or the write's `sync`) is,
//!   and no cell is read that was never sent; a failed store sync loses the cells written
//!   since the last one for good (fsyncgate: the store here models it for these cells), yet
//!   every cell this process acknowledged before a store sync that succeeded (a flush's,
//!   `sync_writes`, a synced write's) survives a power loss after it;
//! - the tag index (RFC 0007): after a flush that succeeded, every acknowledged point's
//!   (series, period) has its postings and its series its all-time postings; at every check,
//!   each `0x10` marker's postings exist and each period's series counter is at least its
//!   marker count (counters over-count, never under-count).
//!
//! `HOURGLASS_SIM_SEEDS=N` runs N seeds (default 200; CI runs thousands in release); `HOURGLASS_SIM_SEED=S` runs one seed
//! (a failure prints its seed). Seeds that once failed are kept in `REGRESSIONS`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use hourglass_core::histogram::{HistogramConfig, SimpleHistogram};
use hourglass_core::rowkey::decode_row_key;
use hourglass_core::uid::UidKind;
use hourglass_core::value::Value;
use hourglass_engine::histogram::HistogramPoint;
use hourglass_engine::rollup::{RollupPoint, RollupSettings};
use hourglass_engine::scan::RowQuery;
use hourglass_engine::sim::{FaultStore, Faults, Op, Rng, SimFiles};
use hourglass_engine::wal::files::LogFiles;
use hourglass_engine::{Clock, IncomingPoint, Settings, Tsdb};
use hourglass_storage::Store;
use parking_lot::Mutex;

/// Seeds that found bugs when they were added, run first on every run (a later change to
/// what consumes the fault schedule may move a seed off its scenario; the focused tests in
/// `trust.rs` pin each one). 15: an unsynced histogram cell lost by a
/// failed store sync was promised durable by the next sync that succeeded (fsyncgate).
/// 12, 68 and 174: a UID mapping lost that way while points naming it were kept (12: the
/// mapping written before the failed sync, the next batch's sync succeeding; 68: the
/// mapping's write failed but was applied, and found by the next lookup; 174: the process
/// crashed after the failed sync, before writing the mapping again; 336: the process
/// crashed before any sync, and the next one's first sync failed; 240: the crash came
/// after a failed sync whose record in the log directory could not be written either).
const REGRESSIONS: &[u64] = &[15, 12, 68, 174, 336, 240];

const HOSTS: [&str; 5] = ["web01", "web02", "web03", "db01", "db02"];
/// Steps between generations of host names: each generation's hosts are new names, so new
/// UIDs are assigned throughout a run (among failed syncs and power losses), not only at
/// its start.
const GENERATION_STEPS: usize = 25;

/// The name of host `h`: `HOSTS[h % 5]` in the first generation, then with the
/// generation appended (`web01-3`).
fn host_name(h: usize) -> String {
    let generation = h / HOSTS.len();
    let base = HOSTS[h % HOSTS.len()];
    if generation == 0 {
        base.to_string()
    } else {
        format!("{base}-{generation}")
    }
}

/// A host of step `step`'s generation, drawn by `rng`.
fn draw_host(rng: &mut Rng, step: usize) -> usize {
    step / GENERATION_STEPS * HOSTS.len() + rng.below(HOSTS.len() as u64) as usize
}
/// 2013-01-01 00:00:00 UTC.
const T0: i64 = 1_356_998_400;
const STEPS: usize = 250;
const MAX_BATCH: usize = 40;

/// A rollup configuration with one computed-free tier: `1h` sums (and counts) in
/// `tsdb-rollup-1h`, pre-aggregates in `tsdb-rollup-agg-1h`.
const ROLLUPS: &str = r#"{"aggregationIds":{"sum":0,"count":1},"intervals":[
{"table":"tsdb","preAggregationTable":"tsdb-agg","interval":"1m","rowSpan":"1h","defaultInterval":true},
{"table":"tsdb-rollup-1h","preAggregationTable":"tsdb-rollup-agg-1h","interval":"1h","rowSpan":"1d"}]}"#;
const ROLLUP_TABLE: &str = "tsdb-rollup-1h";
/// The default UID table (its mappings and counters are modelled by fsyncgate too).
const UID_TABLE: &str = "tsdb-uid";
const PREAGG_TABLE: &str = "tsdb-rollup-agg-1h";
const HISTOGRAM_ID: u8 = 42;

/// Where a histogram or rollup cell lives: its table, its series' tags by name and its time
/// (ms). The model never sends two cells to one place, so a place names one value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct CellAt {
    table: String,
    tags: Vec<(String, String)>,
    ms: i64,
}

/// Histogram and rollup cells sent straight to the store, by place: their value bytes.
#[derive(Debug, Default, Clone)]
struct Cells {
    acked: BTreeMap<CellAt, Vec<u8>>,
    durable: BTreeMap<CellAt, Vec<u8>>,
    maybe: BTreeMap<CellAt, Vec<u8>>,
    /// Every place ever written to (acknowledged, failed or refused).
    used: std::collections::BTreeSet<CellAt>,
    /// Acknowledged by this process without a sync, not yet promised durable: the next
    /// store sync that succeeds (a flush's, `sync_writes`, a synced write's) promises them,
    /// even after failed syncs in between (the kernel may have dropped their pages then,
    /// `FaultStore::set_fsyncgate`).
    live: std::collections::BTreeSet<CellAt>,
}

impl Cells {
    /// A store sync succeeded: every cell acknowledged so far by this process is durable.
    fn synced(&mut self) {
        for at in std::mem::take(&mut self.live) {
            if let Some(value) = self.acked.get(&at) {
                self.durable.insert(at, value.clone());
            }
        }
    }
}

/// What the model knows of a point: its time (ms) and host; identified by its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sent {
    ms: i64,
    host: usize,
}

#[derive(Debug, Default)]
struct Model {
    /// Acknowledged points by value.
    acked: BTreeMap<i64, Sent>,
    /// Acknowledged and promised to survive power loss.
    durable: BTreeMap<i64, Sent>,
    /// Sent in batches that failed: they may or may not be stored.
    maybe: BTreeMap<i64, Sent>,
}

#[derive(Debug, Default)]
struct Totals {
    steps: u64,
    acked: u64,
    crashes: u64,
    power_losses: u64,
    racing_checks: u64,
    series_evicted: u64,
    cells_acked: u64,
}

/// The name of a UID in a stored row key: `None` when the read failed (a fault), an error
/// when the UID names nothing (its mapping was lost: the row's cells are hidden).
fn name_in_key(
    db: &Tsdb,
    kind: UidKind,
    uid: hourglass_core::uid::Uid,
) -> Option<Result<String, String>> {
    match db.uids().get_name(kind, uid) {
        Ok(name) => Some(Ok(name)),
        Err(e) if e.kind() == hourglass_engine::ErrorKind::NotFound => Some(Err(format!(
            "a stored row names {kind} UID {uid:?}, which names nothing: {e}"
        ))),
        Err(_) => None,
    }
}

/// The histogram and rollup cells in the store, by place. `None` when a read failed (a
/// fault), so nothing can be concluded; an error when a row's UIDs name nothing.
fn stored_cells(db: &Tsdb) -> Option<Result<BTreeMap<CellAt, Vec<u8>>, String>> {
    let trace = std::env::var("HOURGLASS_SIM_TRACE").is_ok();
    let schema = &db.settings().schema;
    let mut out = BTreeMap::new();
    for table in [schema.data_table.as_str(), ROLLUP_TABLE, PREAGG_TABLE] {
        let rows = match db
            .store()
            .scan(table, &hourglass_storage::ScanRequest::default())
        {
            Ok(rows) => rows,
            Err(e) => {
                if trace {
                    eprintln!("  cells: {table}: {e}");
                }
                return None;
            }
        };
        for row in rows {
            let row = row.ok()?;
            let key = decode_row_key(schema, &row.key).expect("row key");
            let mut tags = Vec::new();
            for (k, v) in &key.series.tags {
                let k = match name_in_key(db, UidKind::TagKey, *k)? {
                    Ok(k) => k,
                    Err(e) => return Some(Err(e)),
                };
                let v = match name_in_key(db, UidKind::TagValue, *v)? {
                    Ok(v) => v,
                    Err(e) => return Some(Err(e)),
                };
                tags.push((k, v));
            }
            tags.sort();
            for c in &row.cells {
                let q = &c.qualifier;
                let ms = if table == schema.data_table {
                    if !hourglass_core::histogram::is_histogram_qualifier(q) {
                        continue;
                    }
                    hourglass_core::histogram::time_ms(key.base_time, q).expect("time")
                } else {
                    assert_eq!(q.len(), 3, "rollup qualifier {q:02x?}");
                    assert_eq!(q[0], 0, "only sums are sent");
                    let offset = i64::from(u16::from_be_bytes([q[1], q[2]]) >> 4);
                    (i64::from(key.base_time) + offset * 3600) * 1000
                };
                let at = CellAt {
                    table: table.to_string(),
                    tags: tags.clone(),
                    ms,
                };
                assert!(
                    out.insert(at.clone(), c.value.clone()).is_none(),
                    "cell {at:?} read twice"
                );
            }
        }
    }
    Some(Ok(out))
}

/// Checks the histogram and rollup cells seen against the model.
fn check_cells(
    seen: &BTreeMap<CellAt, Vec<u8>>,
    cells: &Cells,
    after_power_loss: bool,
) -> Result<(), String> {
    let must = if after_power_loss {
        &cells.durable
    } else {
        &cells.acked
    };
    for (at, value) in must {
        match seen.get(at) {
            None => return Err(format!("acknowledged cell {at:?} is not readable")),
            Some(v) if v != value => {
                return Err(format!("cell {at:?} holds {v:02x?}, sent {value:02x?}"));
            }
            Some(_) => {}
        }
    }
    for (at, v) in seen {
        let sent = cells
            .acked
            .get(at)
            .or_else(|| cells.maybe.get(at))
            .ok_or_else(|| format!("cell {at:?} = {v:02x?} was never sent"))?;
        if sent != v {
            return Err(format!("cell {at:?} holds {v:02x?}, sent {sent:02x?}"));
        }
    }
    Ok(())
}

/// Points read, by value: (ms, host name).
type Seen = BTreeMap<i64, (i64, String)>;

/// Visible points of metric `m` by value: (ms, host name). `None` when the read failed (a
/// fault), so nothing can be concluded. A series whose host UID has no name, or whose
/// host's name maps to another UID (a query by that name would miss it), is a failure.
fn visible(db: &Tsdb, until: i64) -> Option<Result<Seen, String>> {
    let mut out = BTreeMap::new();
    match visible_into(db, until, &mut out) {
        Some(Ok(())) => Some(Ok(out)),
        other => other.map(|r| r.map(|()| BTreeMap::new())),
    }
}

/// [`visible`] into `out`.
fn visible_into(
    db: &Tsdb,
    until: i64,
    out: &mut BTreeMap<i64, (i64, String)>,
) -> Option<Result<(), String>> {
    let metric = match db.uids().get_id(UidKind::Metric, "m") {
        Ok(m) => m,
        Err(e) if e.kind() == hourglass_engine::ErrorKind::NotFound => {
            return Some(Ok(()));
        }
        Err(e) => {
            if std::env::var("HOURGLASS_SIM_TRACE").is_ok() {
                eprintln!("  read: metric: {e}");
            }
            return None;
        }
    };
    let query = RowQuery {
        metric,
        start_secs: T0 - 3 * 3600,
        end_secs: until,
        tags: Vec::new(),
    };
    let series = match db.read_series(&query) {
        Ok(s) => s,
        Err(e) => {
            if std::env::var("HOURGLASS_SIM_TRACE").is_ok() {
                eprintln!("  read: {e}");
            }
            return None;
        }
    };
    for s in series {
        let uid = s.series.tags[0].1;
        let host = match db.uids().get_name(UidKind::TagValue, uid) {
            Ok(h) => h,
            Err(e) if e.kind() == hourglass_engine::ErrorKind::NotFound => {
                return Some(Err(format!(
                    "{} points under host UID {uid:?}, which names nothing: {e}",
                    s.points.len()
                )));
            }
            Err(e) => {
                if std::env::var("HOURGLASS_SIM_TRACE").is_ok() {
                    eprintln!("  read: {e} for {:?} ({} points)", s.series, s.points.len());
                }
                return None;
            }
        };
        match db.uids().get_id(UidKind::TagValue, &host) {
            Ok(forward) if forward == uid => {}
            Ok(forward) => {
                return Some(Err(format!(
                    "{} points under host UID {uid:?} ({host}), but {host} maps to {forward:?}",
                    s.points.len()
                )));
            }
            Err(e) if e.kind() == hourglass_engine::ErrorKind::NotFound => {
                return Some(Err(format!(
                    "{} points under host UID {uid:?} ({host}), but {host} has no UID: {e}",
                    s.points.len()
                )));
            }
            Err(_) => return None,
        }
        for (ms, v) in s.points {
            let Value::Int(v) = v else {
                panic!("value {v:?} was never sent")
            };
            assert!(
                out.insert(v, (ms, host.clone())).is_none(),
                "point {v} read twice"
            );
        }
    }
    Some(Ok(()))
}

/// The tag index against the model (see the module docs); `None` when a read failed (a
/// fault), so nothing can be concluded. With `flushed`, every acknowledged point must be
/// indexed (a flush that stored them all just succeeded).
fn check_index(db: &Tsdb, model: &Model, flushed: bool) -> Option<Result<(), String>> {
    use hourglass_engine::index::{self, Series, kind};
    use std::collections::{BTreeSet, HashMap};
    let schema = &db.settings().schema;
    let store = db.store();
    let keys = |prefix: u8| -> Option<BTreeSet<Vec<u8>>> {
        let request = hourglass_storage::ScanRequest {
            read: hourglass_storage::ReadOptions::keys_only(),
            ..hourglass_storage::ScanRequest::prefix(&[prefix])
        };
        let rows = store.scan(&schema.index_table, &request).ok()?;
        rows.map(|r| r.map(|r| r.key))
            .collect::<Result<_, _>>()
            .ok()
    };
    let postings = keys(kind::PERIOD_POSTING)?;
    let markers = keys(kind::PERIOD_SERIES)?;
    let all_time = keys(kind::POSTING)?;
    let m = usize::from(schema.metric_width);
    let mut per_period: HashMap<(Vec<u8>, u32), i64> = HashMap::new();
    for marker in &markers {
        let metric = &marker[1..1 + m];
        let period = u32::from_be_bytes(marker[1 + m..5 + m].try_into().unwrap());
        let Some(series) = Series::from_tsuid(schema, &[metric, &marker[5 + m..]].concat())
            .map(|s| (s.metric.to_vec(), s.tags.to_vec()))
        else {
            return Some(Err(format!("marker {marker:02x?} does not parse")));
        };
        let series = Series {
            metric: &series.0,
            tags: &series.1,
        };
        for (k, v) in series.pairs(schema) {
            if !postings.contains(&index::period_posting_key(series, period, k, v)) {
                return Some(Err(format!(
                    "marker {marker:02x?} without its posting of tag pair {k:02x?}={v:02x?}"
                )));
            }
        }
        *per_period.entry((metric.to_vec(), period)).or_default() += 1;
    }
    for ((metric, period), count) in per_period {
        let row = store
            .get(
                &schema.index_table,
                &index::period_counters_key(&metric, period),
                &hourglass_storage::ReadOptions::default(),
            )
            .ok()?;
        let counted = row
            .as_ref()
            .and_then(|r| r.value(index::COUNTER_FAMILY, index::ENTRY_QUALIFIER))
            .map_or(0, |v| i64::from_be_bytes(v.try_into().unwrap()));
        if counted < count {
            return Some(Err(format!(
                "period {period}: {count} markers but the series counter says {counted}"
            )));
        }
    }
    if !flushed || model.acked.is_empty() {
        return Some(Ok(()));
    }
    let metric = db.uids().get_id(UidKind::Metric, "m").ok()?.to_bytes(3);
    let host = db.uids().get_id(UidKind::TagKey, "host").ok()?.to_bytes(3);
    for (v, sent) in &model.acked {
        let value = db
            .uids()
            .get_id(UidKind::TagValue, &host_name(sent.host))
            .ok()?
            .to_bytes(3);
        let tags = [host.as_slice(), &value].concat();
        let series = Series {
            metric: &metric,
            tags: &tags,
        };
        let period = index::period_of((sent.ms / 1000) as u32);
        if !postings.contains(&index::period_posting_key(series, period, &host, &value)) {
            return Some(Err(format!(
                "acknowledged point {v} at {} on {} has no posting for period {period}",
                sent.ms,
                host_name(sent.host)
            )));
        }
        if !all_time.contains(&index::posting_key(series, &host, &value)) {
            return Some(Err(format!(
                "acknowledged point {v} on {}: its series has no all-time posting",
                host_name(sent.host)
            )));
        }
    }
    Some(Ok(()))
}

/// Checks what a query sees against the model.
fn check(
    seen: &BTreeMap<i64, (i64, String)>,
    model: &Model,
    after_power_loss: bool,
) -> Result<(), String> {
    let must = if after_power_loss {
        &model.durable
    } else {
        &model.acked
    };
    for (v, sent) in must {
        match seen.get(v) {
            None => {
                return Err(format!(
                    "acknowledged point {v} at {} is not readable",
                    sent.ms
                ));
            }
            Some((ms, host)) if *ms != sent.ms || *host != host_name(sent.host) => {
                return Err(format!(
                    "point {v} read at {ms} on {host}, sent at {} on {}",
                    sent.ms,
                    host_name(sent.host)
                ));
            }
            Some(_) => {}
        }
    }
    for (v, (ms, host)) in seen {
        let sent = model
            .acked
            .get(v)
            .or_else(|| model.maybe.get(v))
            .ok_or_else(|| format!("point {v} at {ms} on {host} was never sent"))?;
        if sent.ms != *ms || host_name(sent.host) != *host {
            return Err(format!(
                "point {v} read at {ms} on {host}, sent at {} on {}",
                sent.ms,
                host_name(sent.host)
            ));
        }
    }
    Ok(())
}

fn open(
    store: &Arc<dyn Store>,
    files: &SimFiles,
    settings: &Settings,
    faults: &Faults,
) -> Arc<Tsdb> {
    // Opening may meet faults too (reading the log, creating a segment): a restart loop.
    for _ in 0..50 {
        if let Ok(db) = Tsdb::open_with_log(
            Arc::clone(store),
            settings.clone(),
            Some(Arc::new(files.clone()) as Arc<dyn LogFiles>),
        ) {
            return db;
        }
    }
    // An operator frees the disk.
    faults.set_rate(0);
    faults.set_disk_full(false);
    Tsdb::open_with_log(
        Arc::clone(store),
        settings.clone(),
        Some(Arc::new(files.clone()) as Arc<dyn LogFiles>),
    )
    .expect("open with faults off")
}

fn run_seed(seed: u64, totals: &mut Totals) -> Result<u64, String> {
    let mut rng = Rng::new(seed ^ 0x5EED);
    let rate = [0, 5, 20, 60][rng.below(4) as usize];
    let faults = Arc::new(Faults::new(seed, rate));
    let store = Arc::new(FaultStore::new(Arc::clone(&faults)));
    // A failed store sync loses the histogram and rollup cells written since the last one
    // (the kernel dropped their pages), and no later sync makes them durable unless they
    // are written again.
    store.set_fsyncgate(Some(Arc::new(|table: &str, qualifier: &[u8]| {
        table == UID_TABLE
            || table == "tsdb-index"
            || table == ROLLUP_TABLE
            || table == PREAGG_TABLE
            || hourglass_core::histogram::is_histogram_qualifier(qualifier)
    })));
    let dyn_store: Arc<dyn Store> = store.clone();
    let mut files = SimFiles::new(Arc::clone(&faults));
    let now = Arc::new(AtomicI64::new((T0 + 1800) * 1000));
    let clock_now = Arc::clone(&now);
    let budget = [32usize << 10, 128 << 10, 1 << 20][rng.below(3) as usize];
    let wal_sync = rng.chance(300);
    // Small segments turn over within a run: entries built for one segment must define
    // every series they name there, or replay after a crash cannot read them.
    let segment_bytes = [512u64, 8 << 10, 64 << 20][rng.below(3) as usize];
    // Series left idle for an epoch are evicted from the series cache and their ids given
    // to the next new series: often (every flush after the clock moves), now and then, or
    // as by default.
    let series_idle_ms = [1i64, 1_800_000, 3_600_000][rng.below(3) as usize];
    let settings = Settings {
        auto_create_metrics: true,
        wal: true,
        wal_sync,
        wal_segment_bytes: segment_bytes,
        fix_duplicates: true,
        max_buffer_bytes: budget,
        max_buffered_points: usize::MAX,
        flush_interval: std::time::Duration::from_secs(3600),
        clock: Clock::from_fn(move || clock_now.load(Ordering::SeqCst)),
        index: true,
        series_idle_ms,
        rollups: RollupSettings::from_config(&{
            let mut c = hourglass_core::config::Config::default();
            c.set("tsd.rollups.enable", "true");
            c.set("tsd.rollups.config", ROLLUPS);
            c
        })
        .expect("rollup settings")
        .map(Arc::new),
        histograms: Some(Arc::new(
            HistogramConfig::parse(&format!(
                r#"{{"{}": {HISTOGRAM_ID}}}"#,
                hourglass_core::histogram::SIMPLE_CODEC
            ))
            .expect("histogram codecs"),
        )),
        ..Settings::default()
    };
    let trace = std::env::var("HOURGLASS_SIM_TRACE").is_ok();
    if trace {
        eprintln!(
            "seed {seed}: fault rate {rate}/1000, budget {budget}, wal_sync {wal_sync}, segments of {segment_bytes} bytes, series idle after {series_idle_ms} ms"
        );
    }
    let mut model = Model::default();
    let mut cells = Cells::default();
    let model_shared: Arc<Mutex<Option<Model>>> = Arc::new(Mutex::new(None));
    let mut db = open(&dyn_store, &files, &settings, &faults);
    let mut next_value = 1i64;
    let mut next_ts = [T0; HOSTS.len()];
    let mut last_failed: Option<Vec<(usize, i64, i64)>> = None;

    // Queries from inside the store's batch writes: a reader racing a flush.
    let racing = Arc::new(AtomicBool::new(false));
    let racing_failure: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let racing_checks = Arc::new(AtomicU64::new(0));
    let install_hook = |db: &Arc<Tsdb>| {
        let weak = Arc::downgrade(db);
        let (on, failure, model, count, now) = (
            Arc::clone(&racing),
            Arc::clone(&racing_failure),
            Arc::clone(&model_shared),
            Arc::clone(&racing_checks),
            Arc::clone(&now),
        );
        store.set_hook(Some(Arc::new(move |op| {
            if matches!(op, Op::Get | Op::GetRows(_) | Op::Sync) || !on.load(Ordering::SeqCst) {
                return;
            }
            let (Some(db), Some(model)) = (weak.upgrade(), model.lock().take()) else {
                return;
            };
            if let Some(seen) = visible(&db, now.load(Ordering::SeqCst) / 1000 + 7200)
                && let Err(e) = seen.and_then(|seen| check(&seen, &model, false))
            {
                failure
                    .lock()
                    .get_or_insert(format!("during a flush ({op:?}): {e}"));
            }
            count.fetch_add(1, Ordering::SeqCst);
        })));
    };
    install_hook(&db);

    for step in 0..STEPS {
        totals.steps += 1;
        let until = now.load(Ordering::SeqCst) / 1000 + 7200;
        let roll = rng.below(112);
        if trace {
            eprintln!(
                "step {step}: roll {roll} acked {} buffered {} poisoned {:?} failing {}",
                model.acked.len(),
                db.buffered_points(),
                db.log_poisoned(),
                db.store_failing()
            );
        }
        match roll {
            // A batch: new points, or the last failed batch sent again (a client retry).
            0..=44 => {
                let points: Vec<(usize, i64, i64)> = match last_failed.take() {
                    Some(again) if rng.chance(300) => again,
                    _ => {
                        let n = 1 + rng.below(MAX_BATCH as u64) as usize;
                        (0..n)
                            .map(|_| {
                                let host = draw_host(&mut rng, step);
                                let next = &mut next_ts[host % HOSTS.len()];
                                // Mostly forward; sometimes an older hour (late data).
                                let ts = if rng.chance(100) {
                                    *next - 3600 - rng.below(600) as i64
                                } else {
                                    *next += 1 + rng.below(20) as i64;
                                    *next
                                };
                                let v = next_value;
                                next_value += 1;
                                (host, ts, v)
                            })
                            .collect()
                    }
                };
                // Late points may repeat a time of their series; the model keeps one per
                // (host, time), so such points are left out.
                let mut taken = std::collections::BTreeSet::new();
                let points: Vec<(usize, i64, i64)> = points
                    .into_iter()
                    .filter(|(h, ts, v)| {
                        let resent = model.acked.contains_key(v) || model.maybe.contains_key(v);
                        let fresh = !model
                            .acked
                            .values()
                            .chain(model.maybe.values())
                            .any(|s| s.host == *h && s.ms == ts * 1000);
                        (resent || fresh) && taken.insert((*h, *ts))
                    })
                    .collect();
                let names: Vec<String> = points.iter().map(|(h, _, _)| host_name(*h)).collect();
                let tags: Vec<[(&str, &str); 1]> =
                    names.iter().map(|n| [("host", n.as_str())]).collect();
                let incoming: Vec<IncomingPoint<'_>> = points
                    .iter()
                    .zip(&tags)
                    .map(|((_, ts, v), tags)| IncomingPoint {
                        metric: "m",
                        timestamp: *ts,
                        value: Value::Int(*v),
                        tags,
                        line_tags: None,
                    })
                    .collect();
                let out = db.add_points(&incoming);
                if trace {
                    eprintln!(
                        "  batch {:?} -> stored {} errors {:?}",
                        points,
                        out.stored,
                        out.errors.first()
                    );
                }
                let failed: Vec<usize> = out.errors.iter().map(|(i, _)| *i).collect();
                for (i, (h, ts, v)) in points.iter().enumerate() {
                    let sent = Sent {
                        ms: ts * 1000,
                        host: *h,
                    };
                    if failed.contains(&i) {
                        if !model.acked.contains_key(v) {
                            model.maybe.insert(*v, sent);
                        }
                    } else {
                        model.maybe.remove(v);
                        model.acked.insert(*v, sent);
                        if wal_sync {
                            model.durable.insert(*v, sent);
                        }
                        totals.acked += 1;
                    }
                }
                if !failed.is_empty() {
                    last_failed = Some(failed.iter().map(|i| points[*i]).collect());
                }
                let limit = budget + MAX_BATCH * 256;
                if db.buffered_bytes() > limit {
                    return Err(format!(
                        "step {step}: {} bytes buffered, budget {budget}",
                        db.buffered_bytes()
                    ));
                }
            }
            45..=54 => {
                let acked_before = model.acked.clone();
                let synced = db.sync_writes();
                if trace {
                    eprintln!("  sync {synced:?}");
                }
                if synced.is_ok() {
                    model.durable.extend(acked_before);
                    cells.synced();
                }
            }
            55..=69 => {
                racing.store(rng.chance(500), Ordering::SeqCst);
                *model_shared.lock() = Some(Model {
                    acked: model.acked.clone(),
                    durable: BTreeMap::new(),
                    maybe: model.maybe.clone(),
                });
                let flushed = db.flush();
                if trace {
                    eprintln!("  flush {flushed:?}");
                }
                // A flush that succeeded synced the store.
                if flushed.is_ok() {
                    cells.synced();
                }
                racing.store(false, Ordering::SeqCst);
                if let Some(e) = racing_failure.lock().take() {
                    return Err(format!("step {step}: {e}"));
                }
                if let Some(Err(e)) = check_index(&db, &model, flushed.is_ok()) {
                    return Err(format!("step {step}: index: {e}"));
                }
            }
            70..=81 => {
                if let Some(seen) = visible(&db, until) {
                    let seen = seen.map_err(|e| format!("step {step}: {e}"))?;
                    check(&seen, &model, false).map_err(|e| {
                        format!(
                            "step {step}: {e} (saw {} points, {} acknowledged, {} buffered)",
                            seen.len(),
                            model.acked.len(),
                            db.buffered_points()
                        )
                    })?;
                }
                if let Some(seen) = stored_cells(&db) {
                    let seen = seen.map_err(|e| format!("step {step}: {e}"))?;
                    check_cells(&seen, &cells, false).map_err(|e| format!("step {step}: {e}"))?;
                }
            }
            82..=87 => {
                now.fetch_add(rng.below(2 * 3600 * 1000) as i64, Ordering::SeqCst);
            }
            88..=91 => faults.set_disk_full(rng.chance(500)),
            92..=95 => faults.set_store_down(rng.chance(500)),
            96..=97 => {
                totals.crashes += 1;
                totals.series_evicted += evicted(&db);
                drop(db);
                files = files.crash();
                // The promise holds while the process that kept the unsynced cells lives: a
                // sync failing after the restart may lose them for good (the new process
                // cannot write them again), so no later sync promises them.
                cells.live.clear();
                db = open(&dyn_store, &files, &settings, &faults);
                install_hook(&db);
            }
            98..=99 => {
                totals.power_losses += 1;
                totals.series_evicted += evicted(&db);
                drop(db);
                store.power_loss();
                files = files.power_loss();
                // What was not promised durable may be gone.
                let lost: Vec<i64> = model
                    .acked
                    .keys()
                    .filter(|v| !model.durable.contains_key(v))
                    .copied()
                    .collect();
                for v in lost {
                    let sent = model.acked.remove(&v).expect("acked");
                    model.maybe.insert(v, sent);
                }
                let lost: Vec<CellAt> = cells
                    .acked
                    .keys()
                    .filter(|at| !cells.durable.contains_key(*at))
                    .cloned()
                    .collect();
                for at in lost {
                    let value = cells.acked.remove(&at).expect("acked");
                    cells.maybe.insert(at, value);
                }
                cells.live.clear();
                db = open(&dyn_store, &files, &settings, &faults);
                install_hook(&db);
                if let Some(seen) = visible(&db, until) {
                    let seen = seen.map_err(|e| format!("step {step} (power loss): {e}"))?;
                    check(&seen, &model, true)
                        .map_err(|e| format!("step {step} (power loss): {e}"))?;
                }
                if let Some(Err(e)) = check_index(&db, &model, false) {
                    return Err(format!("step {step} (power loss): index: {e}"));
                }
                if let Some(seen) = stored_cells(&db) {
                    let seen = seen.map_err(|e| format!("step {step} (power loss): {e}"))?;
                    check_cells(&seen, &cells, true)
                        .map_err(|e| format!("step {step} (power loss): {e}"))?;
                }
            }
            // Histogram points, in the rows of the raw series (RFC 0008 phase 3).
            100..=105 => {
                let sync = rng.chance(300);
                let n = 1 + rng.below(8) as usize;
                let mut sent = Vec::new();
                for _ in 0..n {
                    let host = draw_host(&mut rng, step);
                    let secs = T0 - 3600 + rng.below(8 * 3600) as i64;
                    let ts = if rng.chance(300) {
                        secs * 1000 + rng.below(1000) as i64
                    } else {
                        secs
                    };
                    let at = CellAt {
                        table: settings.schema.data_table.clone(),
                        tags: vec![("host".to_string(), host_name(host))],
                        ms: if ts == secs { secs * 1000 } else { ts },
                    };
                    if !cells.used.insert(at.clone()) {
                        continue;
                    }
                    let mut h = SimpleHistogram::default();
                    h.set_bucket(0.0, 1.0, next_value);
                    h.overflow = rng.below(3) as i64;
                    next_value += 1;
                    sent.push((host, ts, at, h.encode(Some(HISTOGRAM_ID))));
                }
                let names: Vec<String> = sent.iter().map(|(h, ..)| host_name(*h)).collect();
                let tags: Vec<[(&str, &str); 1]> =
                    names.iter().map(|n| [("host", n.as_str())]).collect();
                let points: Vec<HistogramPoint<'_>> = sent
                    .iter()
                    .zip(&tags)
                    .map(|((_, ts, _, value), tags)| HistogramPoint {
                        metric: "m",
                        timestamp: *ts,
                        value: value.clone(),
                        tags,
                    })
                    .collect();
                let out = db.add_histogram_points(&points, sync);
                if trace {
                    eprintln!("  histograms {} sync {sync} -> {out:?}", points.len());
                }
                let sent = sent.into_iter().map(|(_, _, at, value)| (at, value));
                record_cells(
                    &mut cells,
                    sent,
                    out.map(|o| o.errors.iter().map(|(i, _)| *i).collect()),
                    sync || wal_sync,
                    totals,
                );
            }
            // Rollup and pre-aggregate points, straight to their tables (RFC 0008).
            _ => {
                let sync = rng.chance(300);
                let n = 1 + rng.below(8) as usize;
                let mut sent = Vec::new();
                for _ in 0..n {
                    let host = draw_host(&mut rng, step);
                    let secs = T0 + 3600 * (rng.below(48) as i64 - 6);
                    let preagg = rng.chance(300);
                    let mut tags = vec![("host".to_string(), host_name(host))];
                    if preagg {
                        tags.push(("_aggregate".to_string(), "SUM".to_string()));
                        tags.sort();
                    }
                    let at = CellAt {
                        table: if preagg { PREAGG_TABLE } else { ROLLUP_TABLE }.to_string(),
                        tags,
                        ms: secs * 1000,
                    };
                    if !cells.used.insert(at.clone()) {
                        continue;
                    }
                    let v = next_value;
                    next_value += 1;
                    let mut value = Vec::new();
                    Value::Int(v).write(&mut value);
                    sent.push((host, secs, preagg, v, at, value));
                }
                let names: Vec<String> = sent.iter().map(|(h, ..)| host_name(*h)).collect();
                let tags: Vec<[(&str, &str); 1]> =
                    names.iter().map(|n| [("host", n.as_str())]).collect();
                let points: Vec<RollupPoint<'_>> = sent
                    .iter()
                    .zip(&tags)
                    .map(|((_, secs, preagg, v, _, _), tags)| RollupPoint {
                        metric: "m",
                        timestamp: *secs,
                        value: Value::Int(*v),
                        tags,
                        interval: Some("1h"),
                        aggregator: Some("sum"),
                        group_by: preagg.then_some("sum"),
                    })
                    .collect();
                let out = db.add_rollup_points(&points, sync);
                if trace {
                    eprintln!("  rollups {} sync {sync} -> {out:?}", points.len());
                }
                let sent = sent.into_iter().map(|(.., at, value)| (at, value));
                record_cells(
                    &mut cells,
                    sent,
                    out.map(|o| o.errors.iter().map(|(i, _)| *i).collect()),
                    sync || wal_sync,
                    totals,
                );
            }
        }
    }
    // The end: faults off, everything stored, a restart; all acknowledged points are there.
    faults.set_rate(0);
    faults.set_disk_full(false);
    faults.set_store_down(false);
    racing.store(false, Ordering::SeqCst);
    now.fetch_add(3 * 3600 * 1000, Ordering::SeqCst);
    let until = now.load(Ordering::SeqCst) / 1000 + 7200;
    db.flush().map_err(|e| format!("final flush: {e}"))?;
    if db.buffered_points() != 0 {
        return Err(format!(
            "{} points still buffered after a clean flush",
            db.buffered_points()
        ));
    }
    let seen = visible(&db, until).ok_or("final read failed")??;
    check(&seen, &model, false).map_err(|e| format!("end: {e}"))?;
    let seen = stored_cells(&db).ok_or("final read of cells failed")??;
    check_cells(&seen, &cells, false).map_err(|e| format!("end: {e}"))?;
    check_index(&db, &model, true)
        .ok_or("final index read failed")?
        .map_err(|e| format!("end: index: {e}"))?;
    db.close().map_err(|e| format!("close: {e}"))?;
    totals.series_evicted += evicted(&db);
    drop(db);
    files = files.crash();
    let db = open(&dyn_store, &files, &settings, &faults);
    let seen = visible(&db, until).ok_or("read after restart failed")??;
    check(&seen, &model, false).map_err(|e| format!("after restart: {e}"))?;
    let seen = stored_cells(&db).ok_or("read of cells after restart failed")??;
    check_cells(&seen, &cells, false).map_err(|e| format!("after restart: {e}"))?;
    store.set_hook(None);
    totals.racing_checks += racing_checks.load(Ordering::SeqCst);
    Ok(faults.injected())
}

/// Enters a batch of histogram or rollup cells in the model: acknowledged unless refused
/// (`Ok` lists the refused indexes: never written) or the batch failed (`Err`: any may be
/// stored).
fn record_cells(
    cells: &mut Cells,
    sent: impl Iterator<Item = (CellAt, Vec<u8>)>,
    outcome: hourglass_engine::Result<Vec<usize>>,
    durable: bool,
    totals: &mut Totals,
) {
    let mut stored = false;
    for (i, (at, value)) in sent.enumerate() {
        match &outcome {
            Ok(refused) if refused.contains(&i) => {}
            Ok(_) => {
                stored = true;
                if durable {
                    cells.durable.insert(at.clone(), value.clone());
                } else {
                    cells.live.insert(at.clone());
                }
                cells.acked.insert(at, value);
                totals.cells_acked += 1;
            }
            Err(_) => {
                cells.maybe.insert(at, value);
            }
        }
    }
    // The batch's sync started after every earlier write returned.
    if durable && stored {
        cells.synced();
    }
}

fn evicted(db: &Tsdb) -> u64 {
    db.write_stats().series_evicted.load(Ordering::SeqCst)
}

#[test]
fn write_path_keeps_its_promises_under_injected_faults() {
    let seeds: Vec<u64> = match std::env::var("HOURGLASS_SIM_SEED") {
        Ok(s) => vec![s.parse().expect("HOURGLASS_SIM_SEED is a number")],
        Err(_) => {
            let n: u64 = std::env::var("HOURGLASS_SIM_SEEDS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(200);
            REGRESSIONS.iter().copied().chain(1..=n).collect()
        }
    };
    let mut totals = Totals::default();
    let mut injected = 0;
    let started = std::time::Instant::now();
    for seed in &seeds {
        match run_seed(*seed, &mut totals) {
            Ok(n) => injected += n,
            Err(e) => panic!(
                "seed {seed} failed: {e}\nreplay: HOURGLASS_SIM_SEED={seed} cargo test -p hourglass-engine --test simulation"
            ),
        }
    }
    eprintln!(
        "simulation: {} seeds, {} steps, {} faults injected, {} crashes, {} power losses, {} points acknowledged, {} histogram and rollup cells acknowledged, {} checks from inside flushes, {} series evicted, {:.1} s",
        seeds.len(),
        totals.steps,
        injected,
        totals.crashes,
        totals.power_losses,
        totals.acked,
        totals.cells_acked,
        totals.racing_checks,
        totals.series_evicted,
        started.elapsed().as_secs_f64()
    );
}
