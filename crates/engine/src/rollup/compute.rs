//! Rollups Hourglass computes itself (RFC 0008 phase 4): every configured interval but the
//! default one is a *tier*, computed from raw points unit by unit (`max(interval, 1 h)`,
//! aligned to the epoch) once a unit has been closed for `tsd.rollups.compute.delay`, and
//! again when a flush stored raw rows of an hour that had already closed, or raw points of
//! one were deleted or repaired (a dirty hour).
//!
//! Cells are written with plain sets: computing a unit again replaces its cells, so a crash,
//! two TSDs computing, or a recompute never double counts. Progress and dirty hours live in
//! the state table (`<data table>-rollup-state`, family `s`):
//!
//! ```text
//! progress: | 'p' | interval name |   cell `w`: next unit start (8, BE i64 seconds)
//! dirty:    | 'd' | raw hour (4, BE u32 seconds) |   cell `d`: empty, cell time = write time
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use hourglass_core::config::Config;
use hourglass_core::rollup::{RollupConfig, RollupInterval, SpanUnit};
use hourglass_core::rowkey::{SeriesKey, decode_row_key, encode_row_key};
use hourglass_core::schema::{DATA_FAMILY, Schema};
use hourglass_core::uid::{Uid, UidKind};
use hourglass_core::value::{Value, float_value};
use hourglass_storage::{
    FamilySpec, Mutation, ReadOptions, RowMutation, ScanRequest, TableSpec, TimeRange,
};
use parking_lot::Mutex;

use crate::num::Num;
use crate::scan::RowQuery;
use crate::{Error, Result, Tsdb};

/// The state table's family.
pub const STATE_FAMILY: &str = "s";
const PROGRESS: u8 = b'p';
const DIRTY: u8 = b'd';
const HOUR: i64 = 3_600;
const DAY: i64 = 86_400;
/// Rows written to a rollup table per batched mutation.
const BATCH_ROWS: usize = 1_000;

/// The state table of a schema: `<data table>-rollup-state`.
pub fn state_table(schema: &Schema) -> String {
    format!("{}-rollup-state", schema.data_table)
}

/// The state table's spec (one version per cell).
pub fn state_table_spec(schema: &Schema) -> TableSpec {
    TableSpec {
        name: state_table(schema),
        families: vec![FamilySpec::new(STATE_FAMILY, Some(1))],
    }
}

/// `tsd.rollups.compute` and its keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComputeSettings {
    /// `tsd.rollups.compute.delay` in ms (default a minute).
    pub delay_ms: i64,
    /// `tsd.rollups.compute.interval_ms` (default 1,000): how often the task looks for work.
    pub interval_ms: i64,
}

impl ComputeSettings {
    /// The settings when `tsd.rollups.compute` is true, each tier checked: its interval must
    /// divide a day and its row span, and the configuration must map one of `sum`, `count`,
    /// `min`, `max` to an id.
    pub fn from_config(c: &Config, config: &RollupConfig) -> Result<Option<ComputeSettings>> {
        if !c.get_bool("tsd.rollups.compute", false) {
            return Ok(None);
        }
        let delay_ms = match c.get("tsd.rollups.compute.delay") {
            None => 60_000,
            Some(text) => hourglass_core::time::parse_duration_ms(text.trim())
                .map_err(|e| Error::invalid(format!("tsd.rollups.compute.delay: {e}")))?,
        };
        let interval_ms = c.get_int("tsd.rollups.compute.interval_ms", 1_000)?;
        if interval_ms < 1 {
            return Err(Error::invalid(format!(
                "tsd.rollups.compute.interval_ms must be at least 1, got {interval_ms}"
            )));
        }
        let data_table = c.get_str("tsd.storage.hbase.data_table", "tsdb");
        for tier in config.intervals().iter().filter(|i| !i.default_interval) {
            if tier.table == data_table {
                return Err(Error::invalid(format!(
                    "tsd.rollups.compute: interval {} would be computed into the data table {data_table}, which holds raw points; give it a table of its own",
                    tier.interval
                )));
            }
            let secs = i64::from(tier.interval_seconds);
            if DAY % secs != 0 {
                return Err(Error::invalid(format!(
                    "tsd.rollups.compute: interval {} does not divide a day; computed intervals must",
                    tier.interval
                )));
            }
            let align = match tier.unit {
                SpanUnit::Hour => HOUR * i64::from(tier.multiplier),
                _ => DAY,
            };
            if align % secs != 0 {
                return Err(Error::invalid(format!(
                    "tsd.rollups.compute: interval {} does not divide its row span {}",
                    tier.interval, tier.row_span
                )));
            }
        }
        if kinds(config).is_empty() {
            return Err(Error::invalid(
                "tsd.rollups.compute: the rollup configuration maps none of sum, count, min, max to an id; nothing to compute",
            ));
        }
        Ok(Some(ComputeSettings {
            delay_ms,
            interval_ms,
        }))
    }
}

/// What a tier stores per interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sum,
    Count,
    Min,
    Max,
}

/// The computed aggregators with their ids, in id order.
fn kinds(config: &RollupConfig) -> Vec<(Kind, u8)> {
    let mut out: Vec<(Kind, u8)> = config
        .aggregation_ids()
        .iter()
        .filter_map(|(name, id)| {
            let kind = match name.as_str() {
                "sum" => Kind::Sum,
                "count" => Kind::Count,
                "min" => Kind::Min,
                "max" => Kind::Max,
                _ => return None,
            };
            Some((kind, *id))
        })
        .collect();
    out.sort_by_key(|k| k.1);
    out
}

/// One tier: an interval computed, and its progress.
#[derive(Debug)]
pub struct Tier {
    pub interval: RollupInterval,
    /// Seconds of one unit: `max(interval, 1 h)`.
    pub unit_secs: i64,
    /// The start of the first unit not computed (s; `i64::MIN` before the first round).
    pub progress: AtomicI64,
    /// Units computed since start (dirty recomputes included).
    pub units: AtomicU64,
    /// The progress this process stored last, its rounds since then all successful
    /// (`i64::MIN`: none). A unit at exactly this progress was never written by anyone (no
    /// other TSD moved the progress, no failed attempt of this one), so its computation
    /// needs not look for cells to replace.
    clean: AtomicI64,
}

/// Counters of the background upkeep (computing and retention), for `/api/stats`.
#[derive(Debug, Default)]
pub struct UpkeepStats {
    /// Raw points read to compute rollups.
    pub points: AtomicU64,
    /// Rollup cells written.
    pub cells: AtomicU64,
    /// Dirty hours seen.
    pub dirty: AtomicU64,
    /// Thread CPU spent computing (ns).
    pub cpu_ns: AtomicU64,
    /// Rounds that failed (retried at the next round).
    pub errors: AtomicU64,
    /// Rows removed by retention, per table.
    pub rows_deleted: Mutex<BTreeMap<String, u64>>,
}

/// The background upkeep of a Tsdb: tiers computed and retention applied.
#[derive(Debug)]
pub struct Upkeep {
    pub compute: Option<ComputeSettings>,
    pub tiers: Vec<Tier>,
    kinds: Vec<(Kind, u8)>,
    pub stats: UpkeepStats,
    /// When the last retention sweep ran (ms).
    last_sweep: AtomicI64,
    /// One round at a time.
    round: Mutex<()>,
}

impl Upkeep {
    /// The upkeep of `settings`, when computing or retention is on.
    pub fn new(settings: &crate::Settings) -> Option<Upkeep> {
        let rollups = settings.rollups.as_deref();
        let compute = rollups.and_then(|r| r.compute.clone());
        let tier_retention = rollups.is_some_and(|r| {
            r.config
                .intervals()
                .iter()
                .any(|i| i.retention_ms.is_some())
        });
        if compute.is_none() && settings.retention_ms.is_none() && !tier_retention {
            return None;
        }
        let tiers = match (&compute, rollups) {
            (Some(_), Some(r)) => r
                .config
                .intervals()
                .iter()
                .filter(|i| !i.default_interval)
                .map(|i| Tier {
                    interval: i.clone(),
                    unit_secs: i64::from(i.interval_seconds).max(HOUR),
                    progress: AtomicI64::new(i64::MIN),
                    units: AtomicU64::new(0),
                    clean: AtomicI64::new(i64::MIN),
                })
                .collect(),
            _ => Vec::new(),
        };
        Some(Upkeep {
            compute,
            tiers,
            kinds: rollups.map(|r| kinds(&r.config)).unwrap_or_default(),
            stats: UpkeepStats::default(),
            last_sweep: AtomicI64::new(i64::MIN),
            round: Mutex::new(()),
        })
    }

    /// How often the background thread runs a round.
    pub fn period_ms(&self) -> i64 {
        self.compute.as_ref().map_or(1_000, |c| c.interval_ms)
    }
}

/// The dirty-hour rows of closed hours among `rows` (data row keys with their buffered row
/// ids, whose low 32 bits are the base hour): written by a flush after the rows are stored.
pub(crate) fn dirty_rows(rows: &[(Vec<u8>, u64)], now_ms: i64) -> Vec<RowMutation> {
    let now = now_ms.div_euclid(1000);
    let hours: BTreeSet<u32> = rows
        .iter()
        .map(|(_, row)| *row as u32)
        .filter(|h| i64::from(*h) + HOUR <= now)
        .collect();
    hours
        .into_iter()
        .map(|h| RowMutation {
            key: dirty_key(h),
            mutations: vec![Mutation::set_at(
                STATE_FAMILY,
                b"d".to_vec(),
                now_ms,
                Vec::new(),
            )],
        })
        .collect()
}

impl Tsdb {
    /// Marks the closed hours of data rows dirty when rollups are computed
    /// (`tsd.rollups.compute`): their raw points changed other than through a flush (a
    /// `delete: true` query, `tsdb scan --delete`, an fsck repair), so the next round
    /// computes their units again. Callers mark before the change (a crash right after it
    /// still leaves the mark) and again after it (a round that took the first mark while
    /// the change was under way recomputes once more). Keys that name no hour are skipped.
    pub fn mark_raw_rows_changed<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> Result<()> {
        if self.rollups().is_none_or(|r| r.compute.is_none()) {
            return Ok(());
        }
        let schema = &self.settings().schema;
        let rows: Vec<(Vec<u8>, u64)> = keys
            .into_iter()
            .filter_map(|k| hourglass_core::rowkey::base_time_of(schema, k))
            .collect::<BTreeSet<u32>>()
            .into_iter()
            .map(|h| (Vec::new(), u64::from(h)))
            .collect();
        let dirty = dirty_rows(&rows, self.settings().clock.now_ms());
        if !dirty.is_empty() {
            self.store().mutate_rows(&state_table(schema), &dirty)?;
        }
        Ok(())
    }
}

fn dirty_key(hour: u32) -> Vec<u8> {
    let mut k = vec![DIRTY];
    k.extend_from_slice(&hour.to_be_bytes());
    k
}

fn progress_key(interval: &str) -> Vec<u8> {
    let mut k = vec![PROGRESS];
    k.extend_from_slice(interval.as_bytes());
    k
}

/// One interval's fold of a series: the raw downsample's (sum in time order from 0.0).
#[derive(Debug, Clone, Copy)]
struct Acc {
    sum: f64,
    count: u64,
    min: Num,
    max: Num,
}

impl Acc {
    const EMPTY: Acc = Acc {
        sum: 0.0,
        count: 0,
        min: Num::Int(0),
        max: Num::Int(0),
    };

    #[inline]
    fn add(&mut self, v: Num) {
        let f = v.as_f64();
        if f.is_nan() {
            return;
        }
        if self.count == 0 {
            self.min = v;
            self.max = v;
        } else {
            if f < self.min.as_f64() {
                self.min = v;
            }
            if f > self.max.as_f64() {
                self.max = v;
            }
        }
        self.sum += f;
        self.count += 1;
    }
}

fn num_value(n: Num) -> Value {
    match n {
        Num::Int(i) => Value::Int(i),
        Num::Float(f) => float_value(f),
    }
}

/// A sum as stored: an integer when it is one (below 2^53), else the double, losslessly.
fn sum_value(s: f64) -> Value {
    if s.fract() == 0.0 && s.abs() < 9_007_199_254_740_992.0 && !(s == 0.0 && s.is_sign_negative())
    {
        Value::Int(s as i64)
    } else {
        float_value(s)
    }
}

/// CPU time of the calling thread, in ns (Linux's `/proc/thread-self/schedstat`; 0
/// elsewhere).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

impl Tsdb {
    /// The background upkeep's state (tiers, counters), when computing or retention is on.
    pub fn upkeep(&self) -> Option<&Upkeep> {
        self.upkeep_state()
    }

    /// One round of the upkeep: computes the units due and the dirty ones (with
    /// `tsd.rollups.compute`), then removes expired rows when `sweep` or a minute passed
    /// since the last sweep. Returns the units computed.
    pub fn upkeep_round(&self, sweep: bool) -> Result<u64> {
        let Some(upkeep) = self.upkeep_state() else {
            return Ok(0);
        };
        let _one = upkeep.round.lock();
        let start_cpu = thread_cpu_ns();
        let computed = if upkeep.compute.is_some() {
            self.compute_round(upkeep)
        } else {
            Ok(0)
        };
        upkeep
            .stats
            .cpu_ns
            .fetch_add(thread_cpu_ns().saturating_sub(start_cpu), Ordering::Relaxed);
        let now = self.settings().clock.now_ms();
        let swept =
            if sweep || now.saturating_sub(upkeep.last_sweep.load(Ordering::Relaxed)) >= 60_000 {
                upkeep.last_sweep.store(now, Ordering::Relaxed);
                self.sweep_retention(upkeep, now)
            } else {
                Ok(())
            };
        if computed.is_err() {
            // A unit may have been written in part: the next computation of each tier's
            // next unit replaces what it finds.
            for tier in &upkeep.tiers {
                tier.clean.store(i64::MIN, Ordering::Relaxed);
            }
        }
        if computed.is_err() || swept.is_err() {
            upkeep.stats.errors.fetch_add(1, Ordering::Relaxed);
        }
        swept?;
        computed
    }

    /// The raw cutoff (s): points before it are expired (`tsd.storage.retention`).
    pub fn raw_cutoff(&self, now_ms: i64) -> Option<i64> {
        self.settings()
            .retention_ms
            .map(|r| (now_ms - r).div_euclid(1000))
    }

    fn compute_round(&self, upkeep: &Upkeep) -> Result<u64> {
        let Some(compute) = &upkeep.compute else {
            return Ok(0);
        };
        let store = self.store();
        let table = state_table(&self.settings().schema);
        // Points acknowledged so far reach the store before anything is read: their closed
        // hours are marked dirty now, and read just below.
        if self.buffered_points() > 0 {
            self.flush()?;
        }
        let read_ms = self.settings().clock.now_ms();
        let now = read_ms.div_euclid(1000);
        let raw_cutoff = self.raw_cutoff(read_ms);
        // 1. Dirty hours first: a cell seen here was written after its rows were stored.
        let mut dirty: Vec<(u32, i64)> = Vec::new();
        for row in store.scan(&table, &ScanRequest::prefix(&[DIRTY]))? {
            let row = row?;
            let Some(hour) = row
                .key
                .get(1..5)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .map(u32::from_be_bytes)
            else {
                continue;
            };
            for c in row.cells.iter().filter(|c| c.family == STATE_FAMILY) {
                if c.timestamp <= read_ms {
                    dirty.push((hour, c.timestamp));
                }
            }
        }
        upkeep
            .stats
            .dirty
            .fetch_add(dirty.len() as u64, Ordering::Relaxed);
        // 2. Each tier's progress (stored: another TSD may have moved it).
        for tier in &upkeep.tiers {
            let stored = store
                .get(
                    &table,
                    &progress_key(&tier.interval.interval),
                    &ReadOptions::latest(),
                )?
                .and_then(|r| {
                    r.value(STATE_FAMILY, b"w")
                        .and_then(|v| <[u8; 8]>::try_from(v).ok())
                })
                .map(i64::from_be_bytes);
            let w = match stored {
                Some(w) => w,
                None => {
                    // The first key of a scan is of the oldest period when the store returns
                    // closed periods series by series (RFC 0006: a UTC day by default), not
                    // necessarily the oldest hour: from the start of its day.
                    let first = match self.oldest_raw_hour()? {
                        Some(first) => first - first.rem_euclid(DAY),
                        None => now,
                    };
                    first - first.rem_euclid(tier.unit_secs)
                }
            };
            let w = match raw_cutoff {
                Some(cut) if w < cut => cut - cut.rem_euclid(tier.unit_secs),
                _ => w,
            };
            tier.progress.store(w, Ordering::Relaxed);
        }
        let mut work: Vec<(usize, i64)> = Vec::new();
        for (t, tier) in upkeep.tiers.iter().enumerate() {
            let w = tier.progress.load(Ordering::Relaxed);
            let units: BTreeSet<i64> = dirty
                .iter()
                .map(|(h, _)| {
                    let h = i64::from(*h);
                    h - h.rem_euclid(tier.unit_secs)
                })
                .filter(|u| *u < w && raw_cutoff.is_none_or(|c| *u + tier.unit_secs > c))
                .collect();
            work.extend(units.into_iter().map(|u| (t, u)));
        }
        let due = upkeep.tiers.iter().any(|t| {
            t.progress.load(Ordering::Relaxed) + t.unit_secs + compute.delay_ms / 1000 <= now
        });
        if work.is_empty() && dirty.is_empty() && !due {
            return Ok(0);
        }
        let metrics = crate::index::rebuild::all_metrics(self)?;
        let mut computed = 0;
        // 3. Dirty units of tiers that passed them.
        for (t, unit) in work {
            self.compute_unit(upkeep, &upkeep.tiers[t], (unit, 1), &metrics, true)?;
            computed += 1;
        }
        // 4. The dirty cells read, exactly (a newer write of the hour survives).
        let deletes: Vec<RowMutation> = dirty
            .iter()
            .map(|(h, ts)| RowMutation {
                key: dirty_key(*h),
                mutations: vec![Mutation::DeleteCells {
                    family: STATE_FAMILY.to_string(),
                    qualifier: b"d".to_vec(),
                    range: TimeRange::new(*ts, Some(ts + 1)),
                }],
            })
            .collect();
        if !deletes.is_empty() {
            store.mutate_rows(&table, &deletes)?;
        }
        // 5. Units due, in time order, each tier's progress stored after its unit.
        for tier in &upkeep.tiers {
            loop {
                if self.stopping() {
                    return Ok(computed);
                }
                let w = tier.progress.load(Ordering::Relaxed);
                let now = self.settings().clock.now_ms().div_euclid(1000);
                if w + tier.unit_secs + compute.delay_ms / 1000 > now {
                    break;
                }
                // A unit someone may have written before (a failed or crashed attempt,
                // another TSD) has its cells replaced, stale widths included.
                let replace = tier.clean.load(Ordering::Relaxed) != w;
                // Units known clean go several in one read (a day's group is read once for
                // the 1h tier, not 24 times): those due, in one row span of the tier and one
                // UTC day, at most 48 intervals a series.
                let count = if replace {
                    1
                } else {
                    let delay = compute.delay_ms / 1000;
                    let base = tier.interval.base_time(w)?;
                    let limit = (tier.interval.span_end(base))
                        .min(w - w.rem_euclid(DAY) + DAY.max(tier.unit_secs))
                        .min(now - delay);
                    let by_slots =
                        (48 * i64::from(tier.interval.interval_seconds) / tier.unit_secs).max(1);
                    ((limit - w) / tier.unit_secs).clamp(1, by_slots)
                };
                self.compute_unit(upkeep, tier, (w, count), &metrics, replace)?;
                computed += count as u64;
                let next = w + count * tier.unit_secs;
                store.mutate_row(
                    &table,
                    &progress_key(&tier.interval.interval),
                    &[Mutation::set(
                        STATE_FAMILY,
                        b"w".to_vec(),
                        next.to_be_bytes(),
                    )],
                )?;
                tier.progress.store(next, Ordering::Relaxed);
                tier.clean.store(next, Ordering::Relaxed);
            }
        }
        Ok(computed)
    }

    /// The computed cells (aggregators computed, offsets of the unit) already stored in the
    /// tier's rows of `metric` at `base`, by row key.
    fn unit_cells(
        &self,
        upkeep: &Upkeep,
        interval: &RollupInterval,
        metric: &[u8],
        base: u32,
        start: i64,
        slots: usize,
    ) -> Result<HashMap<Vec<u8>, Vec<Vec<u8>>>> {
        let schema = &self.settings().schema;
        let first = (start - i64::from(base)) / i64::from(interval.interval_seconds);
        let offsets = first..first + slots as i64;
        let mut out: HashMap<Vec<u8>, Vec<Vec<u8>>> = HashMap::new();
        for salt in hourglass_core::rowkey::salt_prefixes(schema) {
            let prefix = [salt.as_slice(), metric].concat();
            let from = [prefix.as_slice(), &base.to_be_bytes()].concat();
            let to = [prefix.as_slice(), &(base + 1).to_be_bytes()].concat();
            let request = ScanRequest {
                read: ReadOptions::keys_only(),
                ..ScanRequest::range(from, Some(to))
            };
            for row in self.store().scan(&interval.table, &request)? {
                let row = row?;
                let cells: Vec<Vec<u8>> = row
                    .cells
                    .iter()
                    .filter(|c| c.family == DATA_FAMILY && c.qualifier.len() == 3)
                    .filter(|c| {
                        let id = c.qualifier[0] & hourglass_core::rollup::AGGREGATOR_MASK;
                        let offset =
                            i64::from(u16::from_be_bytes([c.qualifier[1], c.qualifier[2]]) >> 4);
                        upkeep.kinds.iter().any(|(_, k)| *k == id) && offsets.contains(&offset)
                    })
                    .map(|c| c.qualifier.clone())
                    .collect();
                if !cells.is_empty() {
                    out.insert(row.key, cells);
                }
            }
        }
        Ok(out)
    }

    /// The base hour of the oldest raw row (s), from the first key of each metric and salt
    /// bucket.
    fn oldest_raw_hour(&self) -> Result<Option<i64>> {
        let schema = &self.settings().schema;
        let mut oldest: Option<i64> = None;
        for metric in crate::index::rebuild::all_metrics(self)? {
            for salt in hourglass_core::rowkey::salt_prefixes(schema) {
                let prefix = [salt.as_slice(), metric.as_slice()].concat();
                let request = ScanRequest {
                    read: ReadOptions::keys_only(),
                    limit: Some(1),
                    ..ScanRequest::prefix(&prefix)
                };
                for row in self.store().scan(&schema.data_table, &request)? {
                    let row = row?;
                    if let Some(base) = hourglass_core::rowkey::base_time_of(schema, &row.key) {
                        let base = i64::from(base);
                        oldest = Some(oldest.map_or(base, |o| o.min(base)));
                    }
                }
            }
        }
        Ok(oldest)
    }

    /// Computes `count` consecutive units of a tier from raw points, in one read (they lie
    /// in one row span of the tier): every metric, series by series, its cells written over
    /// whatever the units held.
    fn compute_unit(
        &self,
        upkeep: &Upkeep,
        tier: &Tier,
        (start, count): (i64, i64),
        metrics: &[Vec<u8>],
        replace: bool,
    ) -> Result<()> {
        let schema = &self.settings().schema;
        let Some(rollups) = self.rollups() else {
            return Ok(());
        };
        let interval = &tier.interval;
        let step = i64::from(interval.interval_seconds);
        let span = tier.unit_secs * count.max(1);
        let slots = (span / step) as usize;
        let end = start + span;
        let (start_ms, end_ms) = (start * 1000, end * 1000);
        let raw_tag = if rollups.tag_raw {
            Some((
                self.uids()
                    .get_or_create_id(UidKind::TagKey, &rollups.agg_tag_key)?,
                self.uids()
                    .get_or_create_id(UidKind::TagValue, &rollups.raw_agg_tag_value)?,
            ))
        } else {
            None
        };
        let agg_key = self
            .uids()
            .get_id(UidKind::TagKey, &rollups.agg_tag_key)
            .ok();
        let now_ms = self.settings().clock.now_ms();
        let at = schema.timestamp_offset();
        for metric in metrics {
            let query = RowQuery {
                metric: Uid::from_bytes(metric)?,
                start_secs: start,
                end_secs: end - 1,
                tags: Vec::new(),
            };
            // Row key with a zero base time → the unit's folds.
            let mut series: HashMap<Vec<u8>, Vec<Acc>> = HashMap::new();
            let mut points = 0u64;
            // A group's members in one call when they can (one series' hours of a period).
            self.visit_columns_within::<Num>(&query, None, true, |row| {
                let mut key = row.key.to_vec();
                if let Some(slot) = key.get_mut(at..at + 4) {
                    slot.fill(0);
                }
                let accs = series.entry(key).or_insert_with(|| vec![Acc::EMPTY; slots]);
                for (t, v) in row.times.iter().zip(row.values) {
                    if *t < start_ms || *t >= end_ms {
                        continue;
                    }
                    let slot = ((*t - start_ms) / 1000 / step) as usize;
                    if let Some(acc) = accs.get_mut(slot) {
                        acc.add(*v);
                        points += 1;
                    }
                }
                Ok(())
            })?;
            upkeep.stats.points.fetch_add(points, Ordering::Relaxed);
            let base = interval.base_time(start)?;
            // A recompute first lists the unit's cells already stored: a value of another
            // width has another qualifier (its flags), and a series may have lost points.
            let mut stale: HashMap<Vec<u8>, Vec<Vec<u8>>> = if replace {
                self.unit_cells(upkeep, interval, metric, base, start, slots)?
            } else {
                HashMap::new()
            };
            let empty = vec![Acc::EMPTY; slots];
            for key in stale.keys() {
                // Rows of series without points in the unit any more: their cells go. With
                // `tag_raw` the tier's row names the raw series with the aggregate tag added:
                // the series is that row's less the tag (rows without it are not ours).
                let raw = match raw_tag {
                    None => {
                        let mut raw = key.clone();
                        raw[at..at + 4].fill(0);
                        raw
                    }
                    Some(pair) => {
                        let decoded = decode_row_key(schema, key)?;
                        if !decoded.series.tags.contains(&pair) {
                            continue;
                        }
                        let tags = decoded
                            .series
                            .tags
                            .into_iter()
                            .filter(|t| *t != pair)
                            .collect();
                        let s = SeriesKey::new(decoded.series.metric, tags);
                        encode_row_key(schema, &s, 0)
                    }
                };
                series.entry(raw).or_insert_with(|| empty.clone());
            }
            let mut keys: Vec<&Vec<u8>> = series.keys().collect();
            keys.sort();
            let mut batch: Vec<RowMutation> = Vec::new();
            let mut cells = 0u64;
            for key in keys {
                let accs = &series[key];
                // Pre-aggregated series (their aggregate tag) are users' data.
                let mut decoded = decode_row_key(schema, key)?;
                if let Some(k) = agg_key
                    && decoded.series.tags.iter().any(|(tk, _)| *tk == k)
                {
                    continue;
                }
                // The tier's row holding the unit (a unit lies in one row span).
                let row_key = match raw_tag {
                    Some(pair) => {
                        decoded.series.tags.push(pair);
                        let s = SeriesKey::new(decoded.series.metric, decoded.series.tags);
                        encode_row_key(schema, &s, base)
                    }
                    None => {
                        let mut k = key.clone();
                        k[at..at + 4].copy_from_slice(&base.to_be_bytes());
                        k
                    }
                };
                let mut mutations = Vec::new();
                let mut written: Vec<Vec<u8>> = Vec::new();
                for (i, acc) in accs.iter().enumerate() {
                    if acc.count == 0 {
                        continue;
                    }
                    let t = start + i as i64 * step;
                    for (kind, id) in &upkeep.kinds {
                        let value = match kind {
                            Kind::Sum => sum_value(acc.sum),
                            Kind::Count => Value::Int(acc.count as i64),
                            Kind::Min => num_value(acc.min),
                            Kind::Max => num_value(acc.max),
                        };
                        let qualifier = interval.qualifier(t, base, value.flags(), *id)?;
                        if replace {
                            written.push(qualifier.to_vec());
                        }
                        let mut bytes = Vec::with_capacity(8);
                        value.write(&mut bytes);
                        mutations.push(Mutation::set_at(
                            DATA_FAMILY,
                            qualifier.to_vec(),
                            now_ms,
                            bytes,
                        ));
                    }
                }
                cells += mutations.len() as u64;
                for q in stale.remove(&row_key).unwrap_or_default() {
                    if !written.contains(&q) {
                        mutations.push(Mutation::delete(DATA_FAMILY, q));
                    }
                }
                if mutations.is_empty() {
                    continue;
                }
                batch.push(RowMutation {
                    key: row_key,
                    mutations,
                });
                if batch.len() >= BATCH_ROWS {
                    self.store().mutate_rows(&interval.table, &batch)?;
                    batch.clear();
                }
            }
            if !batch.is_empty() {
                self.store().mutate_rows(&interval.table, &batch)?;
            }
            upkeep.stats.cells.fetch_add(cells, Ordering::Relaxed);
        }
        tier.units.fetch_add(count.max(1) as u64, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_are_stored_as_integers_only_when_exact() {
        assert_eq!(sum_value(42.0), Value::Int(42));
        assert_eq!(sum_value(-3.0), Value::Int(-3));
        assert_eq!(sum_value(0.5), Value::Float(0.5));
        assert_eq!(sum_value(0.1 + 0.2), Value::Double(0.1 + 0.2));
        assert_eq!(sum_value(1e300), Value::Double(1e300));
        assert_eq!(sum_value(-0.0), Value::Float(-0.0));
    }

    #[test]
    fn dirty_hours_are_the_closed_hours_of_a_flush() {
        let rows = vec![
            (vec![], 3_600u64),
            (vec![], 7_200u64 | (5 << 32)),
            (vec![], 10_800u64),
        ];
        // At 3:00:00, hours 1:00 and 2:00 are closed, 3:00 is open.
        let marks = dirty_rows(&rows, 10_800_000);
        let keys: Vec<Vec<u8>> = marks.iter().map(|m| m.key.clone()).collect();
        assert_eq!(keys, vec![dirty_key(3_600), dirty_key(7_200)]);
        assert!(dirty_rows(&rows, 7_199_999).is_empty());
    }

    #[test]
    fn accumulators_fold_as_the_raw_downsample() {
        let mut a = Acc::EMPTY;
        for v in [
            Num::Int(3),
            Num::Float(f64::NAN),
            Num::Int(-2),
            Num::Float(2.5),
        ] {
            a.add(v);
        }
        assert_eq!(a.count, 3);
        assert_eq!(a.sum, 3.5);
        assert_eq!(a.min, Num::Int(-2));
        assert_eq!(a.max, Num::Int(3));
    }
}
