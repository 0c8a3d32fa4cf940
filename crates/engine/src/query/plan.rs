//! Running one sub-query: resolve names, stream the metric's rows (stored and buffered)
//! through per-series state (raw points, or downsampling as they arrive), filter and group,
//! then per series rate, then aggregate each group. Limits on points, bytes, series, memory
//! and time are checked as rows arrive, so a runaway query stops early.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::annotation::stored_time_ms;
use hourglass_core::annotation::is_annotation_qualifier;
use hourglass_core::compact::{self, Point};
use hourglass_core::rowkey::decode_row_key;
use hourglass_core::schema::DATA_FAMILY;
use hourglass_core::uid::{Uid, UidKind, hex_upper, parse_hex};
use hourglass_storage::{Mutation, ReadOptions, RowMutation};

use super::aggregate::{aggregate_float_pieces, aggregate_owned, aggregate_rates};
use super::aggregator::Aggregator;
use super::downsample::{DownsampleSpec, Downsampler, FillPolicy};
use super::filter::TagFilter;
use super::memory::Reservation;
use super::rate::{RateOptions, rate_between, rates_in};
use crate::index::select::SeriesSelector;
use crate::num::{Num, Sample};
use crate::scan::RowQuery;
use crate::{Error, Result, Tsdb};

mod histogram;
mod rollup;

pub use histogram::{HISTOGRAMS_OFF, check_histogram_request};

/// One sub-query of a request.
#[derive(Debug, Clone)]
pub struct SubQuery {
    pub aggregator: Aggregator,
    /// The metric's name; empty when `tsuids` names the series.
    pub metric: String,
    /// Series by TSUID (hex); all must share one metric.
    pub tsuids: Vec<String>,
    pub downsample: Option<DownsampleSpec>,
    /// The downsampling specification as written.
    pub downsample_text: Option<String>,
    pub rate: bool,
    pub rate_options: RateOptions,
    pub filters: Vec<TagFilter>,
    /// Only series with exactly the filtered tag keys.
    pub explicit_tags: bool,
    /// `rollupUsage` (or an `m=` `rollup_*` token), upper-cased: `ROLLUP_RAW`,
    /// `ROLLUP_NOFALLBACK`, `ROLLUP_FALLBACK`, `ROLLUP_FALLBACK_RAW` (RFC 0008).
    pub rollup_usage: Option<String>,
    /// Pre-aggregated series asked for (`preAggregate`, `pre-agg`).
    pub pre_aggregate: bool,
    /// `percentiles` (`percentiles[...]` in `m=`): a histogram query (RFC 0008, phase 3).
    pub percentiles: Vec<f32>,
    /// `showHistogramBuckets` (`show-histogram-buckets`): a histogram query.
    pub show_histogram_buckets: bool,
}

impl SubQuery {
    /// A sub-query of `metric` with the aggregator and nothing else.
    pub fn new(aggregator: Aggregator, metric: &str) -> SubQuery {
        SubQuery {
            aggregator,
            metric: metric.to_string(),
            tsuids: Vec::new(),
            downsample: None,
            downsample_text: None,
            rate: false,
            rate_options: RateOptions::default(),
            filters: Vec::new(),
            explicit_tags: false,
            rollup_usage: None,
            pre_aggregate: false,
            percentiles: Vec::new(),
            show_histogram_buckets: false,
        }
    }
}

/// Refuses what asks for rollup or pre-aggregated data that this TSD cannot answer
/// (RFC 0008): without a rollup configuration, OpenTSDB's refusal of `ROLLUP_NOFALLBACK` and
/// pre-aggregates (the fallbacks are answered from raw data, as OpenTSDB answers them).
pub fn check_rollup_request(tsdb: &Tsdb, q: &SubQuery) -> Result<()> {
    let usage = q.rollup_usage.as_deref().unwrap_or("ROLLUP_RAW");
    match tsdb.rollups() {
        None if q.pre_aggregate || usage == "ROLLUP_NOFALLBACK" => {
            Err(Error::invalid("No rollup or aggregations were configured"))
        }
        _ => Ok(()),
    }
}

/// What one query may consume; 0 means no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Data points read from storage (`tsd.query.limits.data_points.default`).
    pub max_points: u64,
    /// Bytes read from storage (`tsd.query.limits.bytes.default`).
    pub max_bytes: u64,
    /// Series matched (`tsd.query.limits.series.default`).
    pub max_series: u64,
    /// Points held in memory at once: raw points kept for aggregation plus downsampled
    /// buckets (`tsd.query.limits.memory_points`); this is what bounds a query's heap.
    pub max_held_points: u64,
    /// Wall time (`tsd.query.timeout`, ms).
    pub timeout: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_points: 0,
            max_bytes: 0,
            max_series: 0,
            max_held_points: 50_000_000,
            timeout: None,
        }
    }
}

const TRY_LESS: &str = "Please try filtering using more tags or decrease your time range.";

impl Limits {
    /// The same limits measured from a query's start.
    pub fn deadline(&self, started: Instant) -> Option<Instant> {
        self.timeout.map(|t| started + t)
    }

    fn check(&self, stats: &QueryStats, held: u64, deadline: Option<Instant>) -> Result<()> {
        let exceeded = |m: String| Err(Error::LimitExceeded(m));
        if self.max_points > 0 && stats.points > self.max_points {
            return exceeded(format!(
                "Sorry, you have attempted to fetch more than our limit of {} data points. {TRY_LESS}",
                self.max_points
            ));
        }
        if self.max_bytes > 0 && stats.bytes > self.max_bytes {
            let mb = self.max_bytes / 1024 / 1024;
            let mb = if mb > 0 {
                mb.to_string()
            } else {
                format!("{:?}", self.max_bytes as f64 / 1024.0 / 1024.0)
            };
            return exceeded(format!(
                "Sorry, you have attempted to fetch more than our maximum amount of {mb}MB from storage. {TRY_LESS}"
            ));
        }
        if self.max_series > 0 && stats.series > self.max_series {
            return exceeded(format!(
                "Sorry, you have attempted to fetch more than our limit of {} time series. {TRY_LESS}",
                self.max_series
            ));
        }
        if self.max_held_points > 0 && held > self.max_held_points {
            return exceeded(format!(
                "Sorry, this query would hold more than {} data points in memory. \
                 Please downsample, filter using more tags or decrease your time range.",
                self.max_held_points
            ));
        }
        if let (Some(deadline), Some(timeout)) = (deadline, self.timeout)
            && Instant::now() > deadline
        {
            return exceeded(format!(
                "Sorry, the query ran longer than the limit of {} ms. {TRY_LESS}",
                timeout.as_millis()
            ));
        }
        Ok(())
    }
}

/// What a sub-query read.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct QueryStats {
    /// Rows visited (stored or buffered).
    pub rows: u64,
    /// Data points decoded from those rows.
    pub points: u64,
    /// Bytes read from storage.
    pub bytes: u64,
    /// Series that passed the filters.
    pub series: u64,
    /// Rows read by their summaries (RFC 0009), their points counted, not decoded.
    pub summarized: u64,
    /// The tag index chose the series whose rows were read (RFC 0007), instead of a scan
    /// of every series of the metric.
    pub indexed: bool,
    /// Time spent reading rows (decode and per-series work included).
    pub scan_time: Duration,
    /// Time spent on rate and cross-series aggregation.
    pub aggregation_time: Duration,
}

/// An annotation as stored: its time and its JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredAnnotation {
    pub time_ms: i64,
    pub json: Vec<u8>,
}

/// One output series (a group).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupResult {
    pub metric: String,
    pub tags: BTreeMap<String, String>,
    pub aggregate_tags: Vec<String>,
    pub tsuids: Vec<String>,
    /// The annotations of the group's series within the query range, by time.
    pub annotations: Vec<StoredAnnotation>,
    /// Points within the query range (ms).
    pub dps: Vec<(i64, Num)>,
}

/// A sub-query's groups and what it read.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub groups: Vec<GroupResult>,
    pub stats: QueryStats,
    /// The rollup interval whose table answered (`1h`); `None` for raw data (OpenTSDB's
    /// `rollupTable`, `raw`).
    pub rollup_table: Option<String>,
    /// The points this sub-query held, reserved against the TSD's budget for every running
    /// sub-query (`tsd.query.limits.memory_points.total`) until the outcome is dropped.
    pub memory: Option<Arc<Reservation>>,
}

/// One series' points (ms, value), time-ordered.
type Series = Vec<(i64, Num)>;

enum Points {
    Raw(Vec<(i64, Num)>),
    Downsampled(Downsampler),
    /// An `avg` read from rollups.
    RollupAvg(Box<RollupAvg>),
}

/// An `avg` read from rollups (see `rollup.rs`). Held boxed (`Points::RollupAvg`): the
/// variants' sizes do not weigh on the series' states.
#[allow(clippy::large_enum_variant)]
enum RollupAvg {
    /// A downsample of the tier's own interval: each (sum, count) pair is its own bucket,
    /// kept as read.
    Pairs(rollup::AvgPairs),
    /// The buckets of the stored sums and of the stored counts, pushed in pairs.
    Buckets {
        sums: Downsampler,
        counts: Downsampler,
    },
}

/// One tag of a series: its key and value, as UIDs and as names.
struct Tag {
    key: Uid,
    value: Uid,
    key_name: String,
    value_name: String,
}

struct SeriesState {
    tags: Vec<Tag>,
    tsuid: String,
    /// Salt and TSUID bytes: the order of `none` results (OpenTSDB's row-key order less the
    /// timestamp), whatever order the rows were read in.
    order: Vec<u8>,
    points: Points,
    annotations: Vec<StoredAnnotation>,
}

/// How a sub-query runs.
#[derive(Debug, Clone, Copy)]
pub struct RunOptions {
    pub limits: Limits,
    /// When the request began: the timeout counts from here.
    pub started: Instant,
    /// Delete the points the query matched, once read (OpenTSDB's `delete`). Rows wholly
    /// inside `[start, end]` are removed; a row reaching outside keeps its other points.
    pub delete: bool,
    /// Read the hours in two halves on two threads when the machine has the cores (the
    /// answer is the same either way).
    pub parallel: bool,
    /// Read only the series the tag index lists when it covers the range (RFC 0007; the
    /// answer is the same either way).
    pub use_index: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            limits: Limits::default(),
            started: Instant::now(),
            delete: false,
            parallel: true,
            use_index: true,
        }
    }
}

/// What the answer of `q` over `[start_ms, end_ms]` depends on: its metric's points from
/// two downsampling intervals and an hour before the start to as much and a second after
/// the end (more than any row it reads may hold: the hours of the scan, a downsampling
/// bucket that begins before the start or ends after the end). Rows of rollup tables are noted whole (their
/// span), so any row a rollup read takes overlaps this range too. An unknown metric or bad
/// TSUID is the error the query itself gives.
pub fn dependency(
    tsdb: &Tsdb,
    q: &SubQuery,
    start_ms: i64,
    end_ms: i64,
) -> Result<crate::changes::Dependency> {
    let metric = match q.tsuids.first() {
        None => tsdb
            .uids()
            .get_id(UidKind::Metric, &q.metric)?
            .to_bytes(tsdb.settings().schema.metric_width),
        Some(t) => {
            let mw = usize::from(tsdb.settings().schema.metric_width);
            parse_hex(t)
                .ok()
                .and_then(|b| b.get(..mw).map(<[u8]>::to_vec))
                .ok_or_else(|| Error::invalid(format!("Invalid TSUID: {t}")))?
        }
    };
    let interval = q.downsample.map_or(0, |d| d.interval_ms.max(0));
    let pad = interval
        .saturating_mul(2)
        .saturating_add(crate::cell_codec::HOUR_MS);
    Ok(crate::changes::Dependency {
        metric,
        lo_ms: start_ms.saturating_sub(pad),
        // The scan's end is taken from the end's second plus one (see `ScanHours`).
        hi_ms: end_ms.saturating_add(pad).saturating_add(1_001),
    })
}

/// Runs `q` over `[start_ms, end_ms]`: resolves its names, reads its series (from the data
/// table, or the rollup and pre-aggregate tables its downsample and `rollupUsage` choose,
/// falling back as that says), then groups, finishes and aggregates them.
pub fn run(
    tsdb: &Tsdb,
    start_ms: i64,
    end_ms: i64,
    q: &SubQuery,
    options: &RunOptions,
) -> Result<Outcome> {
    let memory = Arc::new(Reservation::new(
        tsdb.query_memory().clone(),
        options.limits.deadline(options.started),
    ));
    let mut outcome = run_held(tsdb, start_ms, end_ms, q, options, &memory)?;
    outcome.memory = Some(memory);
    Ok(outcome)
}

/// [`run`], the points it holds counted in `memory`.
fn run_held(
    tsdb: &Tsdb,
    start_ms: i64,
    end_ms: i64,
    q: &SubQuery,
    options: &RunOptions,
    memory: &Reservation,
) -> Result<Outcome> {
    if q.is_histogram() {
        return histogram::run_histogram(tsdb, start_ms, end_ms, q, options, memory);
    }
    check_rollup_request(tsdb, q)?;
    let Some(settings) = tsdb.rollups() else {
        return run_on(
            tsdb,
            (start_ms, end_ms),
            q,
            options,
            &rollup::Source::Data,
            memory,
        );
    };
    let mut plan = rollup::Plan::new(settings, q);
    loop {
        let source = plan.source(tsdb)?;
        let mut outcome = run_on(tsdb, (start_ms, end_ms), q, options, &source, memory)?;
        if let rollup::Source::Rollup { interval, .. } = source {
            outcome.rollup_table = Some(interval.interval.clone());
        }
        if !outcome.groups.is_empty() || !plan.fall_back() {
            return Ok(outcome);
        }
    }
}

/// [`run`] over one source.
fn run_on(
    tsdb: &Tsdb,
    (start_ms, end_ms): (i64, i64),
    q: &SubQuery,
    options: &RunOptions,
    source: &rollup::Source<'_>,
    memory: &Reservation,
) -> Result<Outcome> {
    // Retention (RFC 0008 phase 4): what is before the source's cutoff is not answered,
    // whether or not the sweep removed it yet (a deletion still reaches it).
    let cutoff = match source {
        rollup::Source::Data => tsdb.raw_cutoff(tsdb.settings().clock.now_ms()),
        rollup::Source::Points(table) | rollup::Source::Rollup { table, .. } => {
            tsdb.rollup_cutoff(table, tsdb.settings().clock.now_ms())
        }
    };
    let start_ms = match cutoff {
        Some(cut) if !options.delete && start_ms < cut.saturating_mul(1000) => {
            let cut_ms = cut.saturating_mul(1000);
            if cut_ms > end_ms {
                return Ok(Outcome::default());
            }
            cut_ms
        }
        _ => start_ms,
    };
    if !matches!(source, rollup::Source::Data) {
        // Nothing before the cutoff takes part, not even in rates or interpolation.
        let floor_ms = cutoff.map_or(i64::MIN, |cut| cut.saturating_mul(1000));
        return run_rollup(
            tsdb,
            (start_ms, end_ms),
            floor_ms,
            q,
            options,
            source,
            memory,
        );
    }
    // A deletion holds off flushes from before its scan until its rewrites are applied, so
    // no point reaches a row between the row's read and its rewrite. Points still in memory
    // reach the store first, so they are deleted too.
    let mut flushes = options.delete.then(|| tsdb.writer().lock_flushes());
    if let Some(flush) = flushes.as_mut() {
        tsdb.writer().flush_with(flush)?;
    }
    let scan_started = Instant::now();
    let resolved = resolve(tsdb, q)?;
    let hours = ScanHours::of(q, start_ms, end_ms);
    let Part {
        series,
        mut stats,
        held,
        deletions,
        ..
    } = read_series(
        tsdb,
        q,
        &resolved,
        (start_ms, end_ms),
        hours,
        options,
        memory,
    )?;
    stats.scan_time = scan_started.elapsed();
    if !deletions.is_empty() {
        // Computed rollups of these hours are computed again (RFC 0008 phase 4).
        let keys = || deletions.iter().map(|d| d.key.as_slice());
        tsdb.mark_raw_rows_changed(keys())?;
        tsdb.store()
            .mutate_rows(&tsdb.settings().schema.data_table, &deletions)?;
        tsdb.mark_raw_rows_changed(keys())?;
    }
    drop(flushes);
    // A series' rates start at the scan's first hour, as OpenTSDB's aggregation starts it.
    let rates_from = hours.window().0;
    outcome(
        q,
        &resolved,
        series,
        held,
        stats,
        hours.window(),
        (start_ms, end_ms),
        rates_from,
        options,
    )
}

/// Groups, finishes and aggregates the series a sub-query read, its stats timed.
#[allow(clippy::too_many_arguments)]
fn outcome(
    q: &SubQuery,
    resolved: &Resolved<'_>,
    series: Vec<SeriesState>,
    held: u64,
    mut stats: QueryStats,
    window: (i64, i64),
    range: (i64, i64),
    rates_from: i64,
    options: &RunOptions,
) -> Result<Outcome> {
    let aggregation_started = Instant::now();
    let groups = finish_groups(
        q,
        resolved,
        series,
        held,
        (window, rates_from),
        range,
        &options.limits,
    )?;
    stats.aggregation_time = aggregation_started.elapsed();
    Ok(Outcome {
        groups,
        stats,
        rollup_table: None,
        memory: None,
    })
}

/// [`run`] over a rollup or pre-aggregate table (its rows in two halves on two threads when
/// worth it, see [`rollup::split_row`]).
fn run_rollup(
    tsdb: &Tsdb,
    (start_ms, end_ms): (i64, i64),
    floor_ms: i64,
    q: &SubQuery,
    options: &RunOptions,
    source: &rollup::Source<'_>,
    memory: &Reservation,
) -> Result<Outcome> {
    if options.delete {
        return Err(Error::invalid(
            "Deleting points of rollup or pre-aggregate tables is not supported; delete from raw data with rollupUsage ROLLUP_RAW",
        ));
    }
    let scan_started = Instant::now();
    let resolved = resolve(tsdb, q)?;
    // A rollup table is read by whole rows, as 2.4.1's `TsdbQuery` scans it: from the row
    // holding the start (the row before it too for a rate) to the row holding the end; its
    // aggregation starts there. A pre-aggregate table at raw resolution is read as raw data.
    let (rows, window) = match source {
        rollup::Source::Rollup { interval, .. } => {
            let rows = rollup::rollup_scan_window(interval, (start_ms, end_ms), q.rate)?;
            // Past a retention cutoff, its rows are read from their start, their points
            // taken from the cutoff on.
            (rows, (rows.0.max(floor_ms), rows.1))
        }
        _ => {
            let hours = ScanHours::of(q, start_ms, end_ms).window();
            (hours, hours)
        }
    };
    let (first, last) = (rows.0.div_euclid(1000), rows.1.div_euclid(1000) - 1);
    let mut read_q = q.clone();
    read_q.downsample = rollup::rollup_downsample(source, q.downsample);
    let mut by_tagk: BTreeMap<&str, Vec<&TagFilter>> = BTreeMap::new();
    for f in &q.filters {
        by_tagk.entry(f.tagk.as_str()).or_default().push(f);
    }
    let scan = Scan {
        tsdb,
        // The index lists the data table's series, not the rollup tables'.
        select: None,
        q: &read_q,
        metric: resolved.metric,
        wanted_tsuids: resolved.wanted_tsuids.as_ref(),
        by_tagk,
        pushed: resolved.pushed.clone(),
        query: (start_ms, end_ms),
        window,
        options,
        deadline: options.limits.deadline(options.started),
        shared: SharedCounts::default(),
        memory,
    };
    let part = match rollup::split_row(source, &read_q, first, last, options) {
        // Two halves of the rows on two threads, as `read_series` splits the hours.
        Some(mid) => {
            let (earlier, later) = super::threads::both(
                || scan.part_from(source, first, mid - 1),
                || scan.part_from(source, mid, last),
            );
            let later = later.map_err(|_| Error::Internal("a query thread failed".into()))?;
            let part = earlier?.join(later?);
            options.limits.check(&part.stats, part.held, None)?;
            part
        }
        None => scan.part_from(source, first, last)?,
    };
    let Part {
        series,
        mut stats,
        held,
        ..
    } = part;
    stats.scan_time = scan_started.elapsed();
    // A series' rates start at the scan's start, as 2.4.1's aggregation starts it: for a
    // rate over rollups, the row before the start's gives the rate of the first bucket.
    outcome(
        q,
        &resolved,
        series,
        held,
        stats,
        window,
        (start_ms, end_ms),
        window.0,
        options,
    )
}

/// What a sub-query names, resolved to UIDs.
struct Resolved<'q> {
    metric: Uid,
    metric_name: String,
    /// Series named by TSUID (their tag bytes), when the sub-query names them so.
    wanted_tsuids: Option<std::collections::HashSet<Vec<u8>>>,
    /// The UID of every filtered tag key.
    tagk_uids: HashMap<&'q str, Uid>,
    /// Literal tag pairs pushed into the row-key regex.
    pushed: Vec<(Uid, Uid)>,
}

/// Resolves the metric (or the TSUIDs' one metric), every filtered tag key, and literal
/// values (unknown ones are errors, as in OpenTSDB, unless `tsd.query.skip_unresolved_tagvs`).
fn resolve<'q>(tsdb: &Tsdb, q: &'q SubQuery) -> Result<Resolved<'q>> {
    let uids = tsdb.uids();
    let schema = &tsdb.settings().schema;
    let mut wanted_tsuids: Option<std::collections::HashSet<Vec<u8>>> = None;
    let (metric, metric_name) = if q.tsuids.is_empty() {
        (uids.get_id(UidKind::Metric, &q.metric)?, q.metric.clone())
    } else {
        let mw = usize::from(schema.metric_width);
        let mut set = std::collections::HashSet::new();
        let mut first_metric: Option<Vec<u8>> = None;
        for t in &q.tsuids {
            let bytes = parse_hex(t)
                .ok()
                .filter(|b| b.len() >= mw && (b.len() - mw) % schema.tag_pair_width() == 0);
            let bytes = bytes.ok_or_else(|| Error::invalid(format!("Invalid TSUID: {t}")))?;
            match &first_metric {
                None => first_metric = Some(bytes[..mw].to_vec()),
                Some(m) if m.as_slice() != &bytes[..mw] => {
                    return Err(Error::invalid(format!(
                        "One or more TSUIDs did not share the same metric [{}] [{}]",
                        hex_upper(m),
                        hex_upper(&bytes[..mw])
                    )));
                }
                Some(_) => {}
            }
            set.insert(bytes[mw..].to_vec());
        }
        let metric = Uid::from_bytes(first_metric.as_deref().unwrap_or_default())?;
        wanted_tsuids = Some(set);
        (metric, uids.get_name(UidKind::Metric, metric)?)
    };
    let mut tagk_uids: HashMap<&str, Uid> = HashMap::new();
    let mut literals: BTreeMap<Uid, Vec<Uid>> = BTreeMap::new();
    let skip_unresolved = tsdb.settings().skip_unresolved_tagvs;
    for f in &q.filters {
        let k = uids.get_id(UidKind::TagKey, &f.tagk)?;
        tagk_uids.insert(&f.tagk, k);
        // Past `tsd.query.filter.expansion_limit` values OpenTSDB resolves none of them (an
        // unknown one is no error); the filter still applies to each series' names.
        let resolved_literals = f
            .exact_literals()
            .filter(|values| values.len() <= tsdb.settings().filter_expansion_limit);
        if let Some(values) = resolved_literals {
            for v in values {
                match uids.get_id(UidKind::TagValue, v) {
                    Ok(uid) => literals.entry(k).or_default().push(uid),
                    // `tsd.query.skip_unresolved_tagvs`: the value is left out of the
                    // row-key regex; the filter itself still applies to each series' names,
                    // so it matches nothing (as OpenTSDB 2.4.1's `TagVFilter.resolveTags`).
                    // A key none of whose values resolve is then not narrowed by the scan,
                    // and its filter leaves every series out: an empty answer.
                    Err(Error::NoSuchName { .. }) if skip_unresolved => {
                        tracing::debug!("Query tag value not found: {v}");
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }
    // Every literal value of a key goes into the row-key regex (as alternatives).
    let pushed = literals
        .iter()
        .flat_map(|(k, vs)| vs.iter().map(move |v| (*k, *v)))
        .collect();
    Ok(Resolved {
        metric,
        metric_name,
        wanted_tsuids,
        tagk_uids,
        pushed,
    })
}

/// The hours a sub-query reads (seconds, whole hours), as OpenTSDB's scan bounds
/// (`TsdbQuery.getScanStartTimeSeconds`, `getScanEndTimeSeconds`): from the start's hour,
/// the start first taken back to its downsampling interval (epoch-aligned, even for
/// calendar buckets), so the whole first bucket is read even though its time is before the
/// start (a rate, or a series filled in by interpolation, after the start reads it); to
/// the hour after the end's second plus one (its end is in ms there, always put a second
/// on), or when downsampling after that second's next interval boundary (a whole interval
/// on when it is one), unless that boundary starts an hour. Points after the end in those
/// hours are interpolated to; later ones are not read.
#[derive(Debug, Clone, Copy)]
struct ScanHours {
    start: i64,
    end: i64,
}

impl ScanHours {
    fn of(q: &SubQuery, start_ms: i64, end_ms: i64) -> ScanHours {
        let interval_ms = q.downsample.map_or(0, |d| d.interval_ms);
        let mut start = start_ms.div_euclid(1000);
        if interval_ms > 0 {
            start -= start.saturating_mul(1000).rem_euclid(interval_ms) / 1000;
        }
        let mut end = end_ms.div_euclid(1000).saturating_add(1);
        let until = if interval_ms > 0 {
            let offset = end.saturating_mul(1000).rem_euclid(interval_ms);
            end = end.saturating_add((interval_ms - offset) / 1000);
            if end.rem_euclid(3600) == 0 {
                end
            } else {
                end - end.rem_euclid(3600) + 3600
            }
        } else {
            end - end.rem_euclid(3600) + 3600
        };
        ScanHours {
            start: start - start.rem_euclid(3600),
            end: until - 1,
        }
    }

    /// The same hours in ms, end exclusive.
    fn window(self) -> (i64, i64) {
        (self.start * 1000, (self.end + 1) * 1000)
    }
}

/// Reads the series' rows (the hours in two halves on two threads when worth it), each
/// series filtered and fed as its rows arrive.
fn read_series(
    tsdb: &Tsdb,
    q: &SubQuery,
    resolved: &Resolved<'_>,
    query: (i64, i64),
    hours: ScanHours,
    options: &RunOptions,
    memory: &Reservation,
) -> Result<Part> {
    // Filters on one tag key: literal_or ones are ORed together, the others ANDed.
    let mut by_tagk: BTreeMap<&str, Vec<&TagFilter>> = BTreeMap::new();
    for f in &q.filters {
        by_tagk.entry(f.tagk.as_str()).or_default().push(f);
    }
    let select = if options.use_index && q.tsuids.is_empty() {
        // Keys a series must not have (`not_key`) are left to the scan: the index finds
        // series by the values they have.
        let keys = by_tagk
            .iter()
            .filter(|(_, fs)| !fs.iter().any(|f| f.is_not_key()))
            .filter_map(|(k, fs)| {
                Some(crate::index::select::KeyFilters {
                    tagk: *resolved.tagk_uids.get(k)?,
                    filters: fs.iter().map(|f| (*f).clone()).collect(),
                })
            })
            .collect();
        SeriesSelector::new(resolved.metric, keys, q.explicit_tags)
    } else {
        None
    };
    let scan = Scan {
        tsdb,
        select: select.as_ref(),
        q,
        metric: resolved.metric,
        wanted_tsuids: resolved.wanted_tsuids.as_ref(),
        by_tagk,
        pushed: resolved.pushed.clone(),
        query,
        window: hours.window(),
        options,
        deadline: options.limits.deadline(options.started),
        shared: SharedCounts::default(),
        memory,
    };
    let starts = split_hours(q, hours.start, hours.end, options, PIECES);
    if starts.is_empty() {
        return scan.part(hours.start, hours.end);
    }
    // Pieces of the hours read by two threads, each taking the next piece not yet taken (a
    // metric's series may crowd into part of the range: fixed halves leave one thread
    // most of the work). Each series' later points follow its earlier ones, so the pieces
    // join in order without sorting.
    let bounds: Vec<(i64, i64)> = std::iter::once(hours.start)
        .chain(starts.iter().copied())
        .zip(
            starts
                .iter()
                .map(|s| s - 1)
                .chain(std::iter::once(hours.end)),
        )
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failed = std::sync::atomic::AtomicBool::new(false);
    let read = || {
        let mut done = Vec::new();
        while !failed.load(Ordering::Acquire) {
            let i = next.fetch_add(1, Ordering::AcqRel);
            let Some(&(from, to)) = bounds.get(i) else {
                break;
            };
            let part = scan.part(from, to);
            if part.is_err() {
                failed.store(true, Ordering::Release);
            }
            done.push((i, part));
        }
        done
    };
    let (mut pieces, other) = super::threads::both(read, read);
    pieces.extend(other.map_err(|_| Error::Internal("a query thread failed".into()))?);
    pieces.sort_by_key(|(i, _)| *i);
    // The first piece's error in time order, as one thread reading them all would meet it.
    let mut joined: Option<Part> = None;
    for (_, piece) in pieces {
        let piece = piece?;
        joined = Some(match joined {
            Some(earlier) => earlier.join(piece),
            None => piece,
        });
    }
    let part = joined.unwrap_or_else(Part::empty);
    // Each piece checked its own series; the whole query's count is known now.
    options.limits.check(&part.stats, part.held, None)?;
    Ok(part)
}

/// Pieces a sub-query's hours are cut into when two threads read them.
const PIECES: usize = 8;

/// The end (ms) the buckets of a part reading hours up to `end_secs` (its last second) are
/// sized to: the part's own end, or the scan window's (`window_end_ms`) when that is
/// sooner. A later part joins an earlier one as a piece of its own, the pieces put together
/// once when the series is finished; sized to the window's end, every piece reserved the
/// buckets of every later one too (eight pieces of a week of one-minute buckets: 4.5 times
/// the answer's buckets, a TSD's peak memory 900 MB for 1,000 series, 270-380 MB since).
fn buckets_until(window_end_ms: i64, end_secs: i64) -> i64 {
    window_end_ms.min(end_secs.saturating_add(1).saturating_mul(1000))
}

/// Groups the series by the values of the group-by tag keys (ordered by UID), or one per
/// series for `none` (TSUID sub-queries form one group), then finishes and aggregates each
/// group into its result.
fn finish_groups(
    q: &SubQuery,
    resolved: &Resolved<'_>,
    series: Vec<SeriesState>,
    held: u64,
    (window, rates_from): ((i64, i64), i64),
    (start_ms, end_ms): (i64, i64),
    limits: &Limits,
) -> Result<Vec<GroupResult>> {
    let group_keys: Vec<Uid> = {
        let mut ks: Vec<Uid> = q
            .filters
            .iter()
            .filter(|f| f.group_by)
            .filter_map(|f| resolved.tagk_uids.get(f.tagk.as_str()).copied())
            .collect();
        ks.sort();
        ks.dedup();
        ks
    };
    let budget = if limits.max_held_points == 0 {
        u64::MAX
    } else {
        limits.max_held_points.saturating_sub(held).max(1)
    };
    // Series in row-key order (as OpenTSDB's span map orders them), not in the order the
    // store returned rows: the order of `none` results, and of a group's members, which
    // `first`, `last`, `diff` and the order of floating-point additions depend on.
    let mut series = series;
    series.sort_by(|a, b| a.order.cmp(&b.order));
    let mut groups: BTreeMap<Vec<Uid>, Vec<SeriesState>> = BTreeMap::new();
    for (i, s) in series.into_iter().enumerate() {
        let key = if q.aggregator == Aggregator::None {
            vec![Uid(i as u64)]
        } else {
            group_keys
                .iter()
                .filter_map(|k| s.tags.iter().find(|t| t.key == *k).map(|t| t.value))
                .collect()
        };
        groups.entry(key).or_default().push(s);
    }
    let mut out = Vec::with_capacity(groups.len());
    for mut members in groups.into_values() {
        // Members keeping `avg` pairs at the same times: aggregated from their columns.
        let dps = match rollup::aggregate_pairs(&members, q) {
            Some(aggregated) => aggregated?
                .into_iter()
                .map(|(t, v)| (t, Num::Float(v)))
                .collect(),
            None => match finish_series(&mut members, q, (window, rates_from), budget)? {
                Finished::Rates(rates) => aggregate_rates(&rates, q.aggregator)?
                    .into_iter()
                    .map(|(t, v)| (t, Num::Float(v)))
                    .collect(),
                Finished::Downsampled(series) => aggregate_float_pieces(series, q.aggregator)?
                    .into_iter()
                    .map(|(t, v)| (t, Num::Float(v)))
                    .collect(),
                Finished::Raw(series) => aggregate_owned(series, q.aggregator)?,
            },
        };
        let dps: Vec<(i64, Num)> = dps
            .into_iter()
            .filter(|(t, _)| *t >= start_ms && *t <= end_ms)
            .collect();
        // A tag key with one value across the group goes to `tags`, else to `aggregateTags`.
        let mut seen: BTreeMap<Uid, (String, Option<String>)> = BTreeMap::new();
        for s in &members {
            for t in &s.tags {
                let entry = seen
                    .entry(t.key)
                    .or_insert_with(|| (t.key_name.clone(), Some(t.value_name.clone())));
                if entry
                    .1
                    .as_ref()
                    .is_some_and(|existing| *existing != t.value_name)
                {
                    entry.1 = None;
                }
            }
        }
        let mut tags = BTreeMap::new();
        let mut aggregate_tags = Vec::new();
        for (_, (k, v)) in seen {
            match v {
                Some(v) => {
                    tags.insert(k, v);
                }
                None => aggregate_tags.push(k),
            }
        }
        let mut tsuids: Vec<String> = members.iter().map(|s| s.tsuid.clone()).collect();
        tsuids.sort();
        let mut annotations: Vec<StoredAnnotation> = members
            .into_iter()
            .flat_map(|s| s.annotations)
            .filter(|a| a.time_ms >= start_ms && a.time_ms <= end_ms)
            .collect();
        annotations.sort_by_key(|a| a.time_ms);
        out.push(GroupResult {
            metric: resolved.metric_name.clone(),
            tags,
            aggregate_tags,
            tsuids,
            annotations,
            dps,
        });
    }
    Ok(out)
}

/// A group's series in their final form: one sub-query makes one kind.
enum Finished {
    /// Neither downsampled nor rates: the stored values.
    Raw(Vec<Series>),
    /// Each series' buckets in the pieces they were read in.
    Downsampled(Vec<Vec<Vec<(i64, f64)>>>),
    /// Each series' rates with its hidden first rate.
    Rates(Vec<(f64, Vec<(i64, f64)>)>),
}

impl Finished {
    /// An empty result of the kind `q` makes.
    fn of(q: &SubQuery) -> Finished {
        if q.rate {
            Finished::Rates(Vec::new())
        } else if q.downsample.is_some() {
            Finished::Downsampled(Vec::new())
        } else {
            Finished::Raw(Vec::new())
        }
    }

    fn extend(&mut self, later: Finished) {
        match (self, later) {
            (Finished::Raw(a), Finished::Raw(b)) => a.extend(b),
            (Finished::Downsampled(a), Finished::Downsampled(b)) => a.extend(b),
            (Finished::Rates(a), Finished::Rates(b)) => a.extend(b),
            // One sub-query makes one kind: both halves are of it.
            _ => {}
        }
    }
}

/// Series below this many points finish on one thread.
const FINISH_ON_TWO_THREADS: usize = 1 << 18;

/// Finishes each series (its buckets, filled; then its rates), taking its points out of
/// its state; the members' halves on two threads when there is enough to do. Each series
/// is done one at a time, so a rate drops the points it came from before the next. `window`
/// is the scan window; rates start at `rates_from` (see [`rate_of`]).
fn finish_series(
    members: &mut [SeriesState],
    q: &SubQuery,
    window: ((i64, i64), i64),
    budget: u64,
) -> Result<Finished> {
    let held: usize = members.iter().map(SeriesState::held).sum();
    if super::two_cores() && members.len() > 1 && held >= FINISH_ON_TWO_THREADS {
        let (first, second) = members.split_at_mut(members.len() / 2);
        let (a, b) = super::threads::both(
            || finish_series_here(first, q, window, budget),
            || finish_series_here(second, q, window, budget),
        );
        let mut out = a?;
        out.extend(b.map_err(|_| Error::Internal("a query thread failed".into()))??);
        return Ok(out);
    }
    finish_series_here(members, q, window, budget)
}

fn finish_series_here(
    members: &mut [SeriesState],
    q: &SubQuery,
    (window, rates_from): ((i64, i64), i64),
    budget: u64,
) -> Result<Finished> {
    let mut out = Finished::of(q);
    for s in members {
        let points = std::mem::replace(&mut s.points, Points::Raw(Vec::new()));
        match (&mut out, points) {
            (Finished::Rates(r), Points::Raw(p)) => {
                r.extend(rate_of(&p, &q.rate_options, rates_from));
            }
            (Finished::Rates(r), Points::Downsampled(d)) => {
                let pieces = d.finish_pieces(window, budget)?;
                let pieces: Vec<&[(i64, f64)]> = pieces.iter().map(Vec::as_slice).collect();
                r.extend(rate_in(&pieces, &q.rate_options, rates_from));
            }
            (Finished::Raw(r), Points::Raw(p)) => r.push(p),
            (Finished::Downsampled(r), Points::Downsampled(d)) => {
                r.push(d.finish_pieces(window, budget)?);
            }
            (Finished::Downsampled(r), Points::RollupAvg(avg)) => {
                r.push(vec![finish_avg(*avg, q, window, budget)?]);
            }
            (Finished::Rates(r), Points::RollupAvg(avg)) => {
                let avg = finish_avg(*avg, q, window, budget)?;
                r.extend(rate_of(&avg, &q.rate_options, rates_from));
            }
            // A sub-query's series are all downsampled or none is.
            (Finished::Raw(_), Points::Downsampled(_) | Points::RollupAvg(_))
            | (Finished::Downsampled(_), Points::Raw(_)) => {
                return Err(Error::Internal(
                    "a series finished unlike its sub-query".into(),
                ));
            }
        }
    }
    Ok(out)
}

/// A series' `avg` buckets read from rollups (see [`rollup::finish_avg`]).
fn finish_avg(
    avg: RollupAvg,
    q: &SubQuery,
    window: (i64, i64),
    budget: u64,
) -> Result<Vec<(i64, f64)>> {
    let spec = q
        .downsample
        .ok_or_else(|| Error::Internal("a rollup avg without a downsample".into()))?;
    rollup::finish_avg(avg, spec, window, window, budget)
}

/// A series' rates and its hidden first rate: OpenTSDB rates the first point against
/// (0, 0) as any other (a counter's options too), and its aggregation starts each series at
/// its first rate at or after the scan start `from` (ms; earlier ones, of filled buckets
/// before it, skipped), never answers that one, and lets it stand for the series until the
/// next. So a reset dropped there, or a first bucket before `from`, makes the next rate the
/// unanswered first one. None when no rate would be answered.
fn rate_of<V: Sample>(
    points: &[(i64, V)],
    options: &RateOptions,
    from: i64,
) -> Option<(f64, Vec<(i64, f64)>)> {
    rate_in(&[points], options, from)
}

/// [`rate_of`] of a series read in pieces (see `Downsampler::finish_pieces`), as if put
/// together.
fn rate_in<V: Sample>(
    pieces: &[&[(i64, V)]],
    options: &RateOptions,
    from: i64,
) -> Option<(f64, Vec<(i64, f64)>)> {
    let mut points = pieces.iter().copied().flatten();
    let (Some(&(t0, v0)), Some(_)) = (points.next(), points.next()) else {
        return None;
    };
    let mut all = rates_in(pieces, options);
    let hidden = if t0 > 0 {
        rate_between((0, V::from_int(0)), (t0, v0), options)
    } else {
        Some(0.0)
    };
    let hidden = match hidden {
        Some(h) if t0 >= from => h,
        _ => {
            let first = all.partition_point(|r| r.0 < from);
            if first + 1 >= all.len() {
                return None;
            }
            let h = all[first].1;
            all.drain(..=first);
            h
        }
    };
    Some((hidden, all))
}

/// Counts shared by the threads of one sub-query, so limits apply to the whole query.
#[derive(Debug, Default)]
struct SharedCounts {
    points: AtomicU64,
    bytes: AtomicU64,
    held: AtomicU64,
}

/// What every part of a sub-query's scan shares.
struct Scan<'a> {
    tsdb: &'a Tsdb,
    /// The series the tag index may narrow the rows to (raw data only).
    select: Option<&'a SeriesSelector>,
    q: &'a SubQuery,
    metric: Uid,
    wanted_tsuids: Option<&'a std::collections::HashSet<Vec<u8>>>,
    /// Filters by tag key: literal_or ones are ORed together, the others ANDed.
    by_tagk: BTreeMap<&'a str, Vec<&'a TagFilter>>,
    /// Literal tag pairs pushed into the row-key regex.
    pushed: Vec<(Uid, Uid)>,
    /// The query's range, ms.
    query: (i64, i64),
    /// The scanned hours' range `[start, end)`, ms.
    window: (i64, i64),
    options: &'a RunOptions,
    deadline: Option<Instant>,
    shared: SharedCounts,
    /// The sub-query's share of the TSD's budget of held points.
    memory: &'a Reservation,
}

/// The series one part of a scan found, in order of first appearance.
struct Part {
    /// Tag bytes of the row key → series slot (`None`: filtered out).
    index: HashMap<Vec<u8>, Option<usize>, foldhash::fast::RandomState>,
    /// The tag bytes of each series, by slot.
    keys: Vec<Vec<u8>>,
    series: Vec<SeriesState>,
    stats: QueryStats,
    held: u64,
    deletions: Vec<RowMutation>,
    /// The slot of the series of the row before: a rollup read's rows (time after time,
    /// each time's series in one order) find their series among the next ones before
    /// hashing their tag bytes.
    last: Option<usize>,
}

impl Scan<'_> {
    /// The rows of the sub-query's metric and pushed tags over hours `[start_secs, end_secs]`.
    fn row_query(&self, start_secs: i64, end_secs: i64) -> RowQuery {
        RowQuery {
            metric: self.metric,
            start_secs,
            end_secs,
            tags: self.pushed.clone(),
        }
    }

    fn passes(&self, tags: &[Tag]) -> bool {
        let value_of = |k: &str| {
            tags.iter()
                .find(|t| t.key_name == k)
                .map(|t| t.value_name.as_str())
        };
        let pass = self.by_tagk.iter().all(|(k, fs)| {
            let Some(v) = value_of(k) else {
                // Every filtered tag key must be present, but for `not_key` ones.
                return fs.iter().all(|f| f.is_not_key());
            };
            super::filter::key_passes(fs, v)
        });
        // `explicitTags`: exactly the filtered keys the series must have.
        let present = || {
            self.by_tagk
                .values()
                .filter(|fs| !fs.iter().any(|f| f.is_not_key()))
                .count()
        };
        pass && !(self.q.explicit_tags && tags.len() != present())
    }

    /// A new series' state, or `None` when the filters leave it out.
    /// `until_ms`: where the part being read ends.
    fn new_series(
        &self,
        key: &[u8],
        tag_bytes: &[u8],
        until_ms: i64,
    ) -> Result<Option<SeriesState>> {
        let schema = &self.tsdb.settings().schema;
        let uids = self.tsdb.uids();
        if self
            .wanted_tsuids
            .is_some_and(|set| !set.contains(tag_bytes))
        {
            return Ok(None);
        }
        let row_key = key;
        let key = decode_row_key(schema, key)?;
        let mut tags = Vec::with_capacity(key.series.tags.len());
        for (k, v) in &key.series.tags {
            tags.push(Tag {
                key: *k,
                value: *v,
                key_name: uids.get_name(UidKind::TagKey, *k)?,
                value_name: uids.get_name(UidKind::TagValue, *v)?,
            });
        }
        if !self.passes(&tags) {
            return Ok(None);
        }
        let mut tsuid = self.metric.to_bytes(schema.metric_width);
        tsuid.extend_from_slice(tag_bytes);
        let mut order = row_key
            .get(..usize::from(schema.salt_width))
            .unwrap_or_default()
            .to_vec();
        order.extend_from_slice(&tsuid);
        Ok(Some(SeriesState {
            tags,
            tsuid: hex_upper(&tsuid),
            order,
            points: match self.q.downsample {
                Some(ds) => Points::Downsampled(
                    Downsampler::new(ds, self.query)
                        .starting_at(self.window.0)
                        .expect_until(until_ms),
                ),
                None => Points::Raw(Vec::new()),
            },
            annotations: Vec::new(),
        }))
    }

    /// Reads the rows of hours `[start_secs, end_secs]` into per-series state.
    fn part(&self, start_secs: i64, end_secs: i64) -> Result<Part> {
        // Downsampling needs only doubles; raw points keep integers.
        match self.q.downsample {
            Some(_) => self.part_as::<f64>(start_secs, end_secs),
            None => self.part_as::<Num>(start_secs, end_secs),
        }
    }

    fn part_as<V: Sample>(&self, start_secs: i64, end_secs: i64) -> Result<Part> {
        let schema = &self.tsdb.settings().schema;
        let tags_at = schema.tags_offset();
        let limits = &self.options.limits;
        let (lo, hi) = (self.window.0, self.window.1 - 1);
        let until_ms = buckets_until(self.window.1, end_secs);
        let mut part = Part::empty();
        let query = self.row_query(start_secs, end_secs);
        // A one-hour downsample by a fold reads summarized rows of the scan window by their
        // summaries (RFC 0009); a deletion reads every row.
        let within = match self.q.downsample {
            Some(ds) if Downsampler::takes_summaries(&ds) && !self.options.delete => {
                Some(crate::read::SummaryUse {
                    lo,
                    hi,
                    extremes: Downsampler::summaries_need_extremes(&ds),
                })
            }
            _ => None,
        };
        // A group's members in one call where they can (a deletion rewrites row by row).
        let whole = !self.options.delete;
        let indexed =
            self.tsdb
                .visit_columns_selected::<V>(&query, within, whole, self.select, |row| {
                    let stats = &mut part.stats;
                    let count = if row.summaries.is_empty() {
                        row.times.len() as u64
                    } else {
                        stats.summarized += row.summaries.len() as u64;
                        row.summaries.iter().map(|(_, s)| u64::from(s.count)).sum()
                    };
                    stats.rows += row.rows as u64;
                    stats.points += count;
                    stats.bytes += row.stored_bytes as u64;
                    let tag_bytes = row.key.get(tags_at..).unwrap_or_default();
                    let slot = match part.index.get(tag_bytes) {
                        Some(slot) => *slot,
                        None => {
                            let slot = match self.new_series(row.key, tag_bytes, until_ms)? {
                                Some(state) => {
                                    part.series.push(state);
                                    part.keys.push(tag_bytes.to_vec());
                                    Some(part.series.len() - 1)
                                }
                                None => None,
                            };
                            stats.series += u64::from(slot.is_some());
                            part.index.insert(tag_bytes.to_vec(), slot);
                            slot
                        }
                    };
                    let mut held = 0u64;
                    if let Some(i) = slot {
                        // The points inside the scan window (times are strictly increasing).
                        let from = row.times.partition_point(|t| *t < lo);
                        let to = row.times.partition_point(|t| *t <= hi);
                        let (times, values) = (&row.times[from..to], &row.values[from..to]);
                        let s = &mut part.series[i];
                        match (&mut s.points, row.summaries.is_empty()) {
                            (Points::Downsampled(d), false) => {
                                held += d.push_summaries(row.summaries)? as u64;
                            }
                            (Points::Raw(_), false) => {
                                return Err(Error::Internal(
                                    "a summary read for raw points".into(),
                                ));
                            }
                            (Points::Raw(out), true) => {
                                out.extend(
                                    times.iter().copied().zip(values.iter().map(|v| v.to_num())),
                                );
                                held += times.len() as u64;
                            }
                            (Points::Downsampled(d), true) => {
                                held += d.push_all(times, values) as u64
                            }
                            (Points::RollupAvg(_), _) => {
                                return Err(Error::Internal(
                                    "rollup sums read from raw data".into(),
                                ));
                            }
                        }
                        let base_time = (row.base_ms / 1000) as u32;
                        for (qualifier, json) in &row.annotations {
                            if let Some(time_ms) = stored_time_ms(base_time, qualifier, json) {
                                s.annotations.push(StoredAnnotation {
                                    time_ms,
                                    json: json.to_vec(),
                                });
                            }
                        }
                        if self.options.delete
                            && let Some(deletion) =
                                deletion(self.tsdb, row.key, base_time, self.query.0, self.query.1)?
                        {
                            part.deletions.push(deletion);
                        }
                    }
                    part.held += held;
                    // The whole query's counts, this part's series.
                    let shared = &self.shared;
                    let total = QueryStats {
                        points: shared.points.fetch_add(count, Ordering::Relaxed) + count,
                        bytes: shared
                            .bytes
                            .fetch_add(row.stored_bytes as u64, Ordering::Relaxed)
                            + row.stored_bytes as u64,
                        ..part.stats
                    };
                    let held = shared.held.fetch_add(held, Ordering::Relaxed) + held;
                    limits.check(&total, held, self.deadline)?;
                    self.memory.track(held)
                })?;
        part.stats.indexed = indexed;
        Ok(part)
    }
}

impl Part {
    /// A part that has read nothing yet.
    fn empty() -> Part {
        Part {
            index: HashMap::default(),
            keys: Vec::new(),
            series: Vec::new(),
            stats: QueryStats::default(),
            held: 0,
            deletions: Vec::new(),
            last: None,
        }
    }

    /// Appends a part covering later hours.
    fn join(mut self, later: Part) -> Part {
        let mut later_series = later.series.into_iter();
        for (key, state) in later.keys.into_iter().zip(later_series.by_ref()) {
            match self.index.get(&key) {
                Some(Some(i)) => self.series[*i].append(state),
                Some(None) => {}
                None => {
                    self.series.push(state);
                    self.index.insert(key.clone(), Some(self.series.len() - 1));
                    self.keys.push(key);
                }
            }
        }
        self.stats.rows += later.stats.rows;
        self.stats.points += later.stats.points;
        self.stats.bytes += later.stats.bytes;
        self.stats.summarized += later.stats.summarized;
        self.stats.indexed &= later.stats.indexed;
        self.stats.series = self.series.len() as u64;
        self.held += later.held;
        self.deletions.extend(later.deletions);
        self
    }
}

impl SeriesState {
    /// Points held: raw ones, or finished buckets.
    fn held(&self) -> usize {
        match &self.points {
            Points::Raw(p) => p.len(),
            Points::Downsampled(d) => d.buckets(),
            Points::RollupAvg(avg) => avg.held(),
        }
    }

    /// Appends the same series' state from later hours.
    fn append(&mut self, later: SeriesState) {
        match (&mut self.points, later.points) {
            (Points::Raw(a), Points::Raw(b)) => a.extend(b),
            (Points::Downsampled(a), Points::Downsampled(b)) => a.append(b),
            (Points::RollupAvg(a), Points::RollupAvg(b)) => a.append(*b),
            // One sub-query makes one kind of state.
            _ => {}
        }
        self.annotations.extend(later.annotations);
    }
}

/// The first hour (seconds) of the later half when a sub-query's hours can be read by two
/// threads (see [`split_hours`]).
#[cfg(test)]
fn split_hour(q: &SubQuery, first_hour: i64, last_hour: i64, options: &RunOptions) -> Option<i64> {
    split_hours(q, first_hour, last_hour, options, 2)
        .first()
        .copied()
}

/// The first hours (seconds, ascending) of the pieces after the first when a sub-query's
/// hours can be read by two threads; none when they cannot: fewer than two hours, one
/// core, a deletion, a query naming its series (see [`names_its_series`]) unless it reads
/// raw points over [`RAW_SPLIT_HOURS`] or more. Every cut falls
/// on a downsampling bucket boundary (so no bucket is cut in two). Over two days or more,
/// the cuts are UTC days' starts (the embedded store keeps a series' day as one group, which
/// a cut inside it makes both pieces decode), at most `pieces - 1`, each the nearest to an
/// even share of the hours within a quarter of a share. A shorter range (or one with no
/// such day) is cut once: at the day's start nearest the middle when one lies in the
/// middle half, else at the hour nearest the middle that starts a bucket.
fn split_hours(
    q: &SubQuery,
    first_hour: i64,
    last_hour: i64,
    options: &RunOptions,
    pieces: usize,
) -> Vec<i64> {
    let hours = (last_hour - first_hour) / 3600 + 1;
    if hours < 2
        || !super::two_cores()
        || options.delete
        || !options.parallel
        || (names_its_series(q) && !(q.downsample.is_none() && hours >= RAW_SPLIT_HOURS))
    {
        return Vec::new();
    }
    let aligned = |hour: i64| match q.downsample {
        None => true,
        Some(ds) if ds.interval_ms == 0 => false,
        Some(ds) => ds.is_boundary(hour * 1000),
    };
    let nearest = |target: i64, ok: &dyn Fn(i64) -> bool, within: i64| {
        (0..=within)
            .flat_map(|d| [target + d * 3600, target - d * 3600])
            .find(|&h| h > first_hour && h <= last_hour && aligned(h) && ok(h))
    };
    let day_start = |h: i64| h % DAY_SECS == 0;
    if hours >= 48 && pieces > 2 {
        let pieces = pieces as i64;
        let mut cuts: Vec<i64> = (1..pieces)
            .filter_map(|k| {
                let target = first_hour + (hours * k / pieces) * 3600;
                nearest(target, &day_start, hours / pieces / 2)
            })
            .collect();
        cuts.dedup();
        if !cuts.is_empty() {
            return cuts;
        }
    }
    let middle = first_hour + (hours / 2) * 3600;
    nearest(middle, &day_start, hours / 4)
        .or_else(|| nearest(middle, &|_| true, hours))
        .into_iter()
        .collect()
}

/// Whether a sub-query names its series: by TSUIDs, or with one literal value for each
/// tag key it filters on. Such a query reads one or a few series, a few thousand points a
/// day each, which one thread decodes in well under a millisecond; a second thread costs
/// more (its start, both halves' scans set up, the hand-over): on the generated stream a
/// series' 2-day `1h-avg` took 0.71 ms of CPU split, 0.40 ms whole.
pub fn names_its_series(q: &SubQuery) -> bool {
    if !q.tsuids.is_empty() {
        return q.tsuids.len() <= FEW_SERIES;
    }
    !q.filters.is_empty()
        && q.filters.iter().all(|f| {
            matches!(&f.kind, super::filter::FilterKind::Literals { values, negate: false, .. } if values.len() == 1)
        })
}

/// Hours from which a query naming its series without downsampling is still read by two
/// threads: every point of two days or more is decoded and written out (16,682 points of a
/// 10-second series, about 0.3 ms of reading), where a downsampled one reads hour summaries.
const RAW_SPLIT_HOURS: i64 = 48;

/// TSUIDs a query may name and still be read by one thread.
const FEW_SERIES: usize = 4;

/// A UTC day.
const DAY_SECS: i64 = 86_400;

/// The mutation deleting a stored row's points and annotations within `[start_ms, end_ms]`
/// (read again as stored: kept points are written back byte for byte).
fn deletion(
    tsdb: &Tsdb,
    key: &[u8],
    base_time: u32,
    start_ms: i64,
    end_ms: i64,
) -> Result<Option<RowMutation>> {
    let table = &tsdb.settings().schema.data_table;
    let Some(row) = tsdb.store().get(table, key, &ReadOptions::default())? else {
        return Ok(None);
    };
    let inside = |t: i64| t >= start_ms && t <= end_ms;
    let points = crate::rows::decode_row(Some(&row), &[])?.points;
    let stored = points.len();
    let kept: Vec<Point> = points
        .into_iter()
        .filter(|p| !inside(p.qualifier.timestamp_ms(base_time)))
        .collect();
    let notes_inside = row.cells.iter().any(|c| {
        c.family == DATA_FAMILY
            && is_annotation_qualifier(&c.qualifier)
            && stored_time_ms(base_time, &c.qualifier, &c.value).is_none_or(inside)
    });
    if kept.len() == stored && !notes_inside {
        return Ok(None);
    }
    // Only the cells read are touched: a cell written since (by another TSD sharing the
    // store) stays. Notes go when their time is inside the range (or unreadable).
    let kept_cell = (!kept.is_empty()).then(|| compact::encode_cell(&kept));
    let mut mutations: Vec<Mutation> = row
        .cells
        .iter()
        .filter(|c| c.family == DATA_FAMILY)
        .filter(|c| {
            if is_annotation_qualifier(&c.qualifier) {
                stored_time_ms(base_time, &c.qualifier, &c.value).is_none_or(inside)
            } else {
                compact::is_data_qualifier(&c.qualifier)
                    && kept_cell.as_ref().is_none_or(|(q, _)| *q != c.qualifier)
            }
        })
        .map(|c| Mutation::delete(DATA_FAMILY, c.qualifier.clone()))
        .collect();
    if let Some((qualifier, value)) = kept_cell {
        mutations.push(Mutation::set(DATA_FAMILY, qualifier, value));
    }
    Ok(Some(RowMutation {
        key: key.to_vec(),
        mutations,
    }))
}

/// Whether a sub-query writes missing values as JSON `null` (fill policy `null`).
pub fn writes_null(q: &SubQuery) -> bool {
    q.downsample.is_some_and(|d| d.fill == FillPolicy::Null)
}

/// The global annotations (not tied to a series) between `start_ms` and `end_ms`, by time.
pub fn global_annotations(
    tsdb: &Tsdb,
    start_ms: i64,
    end_ms: i64,
) -> Result<Vec<StoredAnnotation>> {
    Ok(crate::annotation::global_between(tsdb, start_ms, end_ms)?
        .into_iter()
        .map(|n| StoredAnnotation {
            time_ms: n.start_ms(),
            json: n.storage_json(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::aggregator::Aggregator;
    use crate::query::downsample::DownsampleSpec;

    /// Two threads split a query at a UTC day's start when one lies in the middle half of
    /// its hours (a grouped day is then decoded once), else at the hour nearest the middle
    /// that starts a bucket.
    /// A series' rate read in pieces is its rate read whole: its hidden first rate, the
    /// rates skipped before the scan start, none when too few are left.
    #[test]
    fn a_rate_in_pieces_is_the_rate_of_the_pieces_joined() {
        let points: Vec<(i64, f64)> = (0..12)
            .map(|i| (1_000 + i * 60_000, (i * i) as f64))
            .collect();
        let options = RateOptions::default();
        for from in [0, 1_000, 61_000, 200_000, 601_000, 661_000, 700_000] {
            for cut in 0..=points.len() {
                let (a, b) = points.split_at(cut);
                let got = rate_in(&[a, b, &[]], &options, from);
                let want = rate_of(&points, &options, from);
                let bits = |r: Option<(f64, Vec<(i64, f64)>)>| {
                    r.map(|(h, all)| {
                        (
                            h.to_bits(),
                            all.iter()
                                .map(|(t, v)| (*t, v.to_bits()))
                                .collect::<Vec<_>>(),
                        )
                    })
                };
                assert_eq!(bits(got), bits(want), "from {from} cut {cut}");
            }
        }
        assert!(rate_in::<f64>(&[&[], &[(5, 1.0)]], &options, 0).is_none());
    }

    #[test]
    fn splits_fall_on_days_where_they_can() {
        if !super::super::two_cores() {
            return;
        }
        let mut q = SubQuery::new(Aggregator::parse("sum").unwrap(), "m");
        let options = RunOptions::default();
        let day = 1_735_689_600; // 2025-01-01, a UTC day's start
        // Three days from 05:00: the middle is 17:00 of day 2, a day's start is 7 h away.
        let (first, last) = (day + 5 * 3600, day + 3 * 86_400 + 4 * 3600);
        assert_eq!(
            split_hour(&q, first, last, &options),
            Some(day + 2 * 86_400)
        );
        // Ten hours from 01:00: no day in the middle half, the middle hour (06:00).
        assert_eq!(
            split_hour(&q, day + 3600, day + 10 * 3600, &options),
            Some(day + 6 * 3600)
        );
        // Buckets of 6 h: a day's start is one too.
        q.downsample = Some(DownsampleSpec::parse("6h-avg").unwrap());
        assert_eq!(
            split_hour(&q, first, last, &options),
            Some(day + 2 * 86_400)
        );
        // 30 hours from 01:00: the middle is 16:00, the next day 8 h away (more than a quarter
        // of the range): the bucket start nearest the middle.
        assert_eq!(
            split_hour(&q, day + 3600, day + 30 * 3600, &options),
            Some(day + 18 * 3600)
        );
    }

    /// A long range is cut into pieces at days' starts near even shares of it; a short one
    /// once; a downsample whose buckets span days only at their boundaries.
    #[test]
    fn a_pieces_buckets_stop_at_its_own_end() {
        let day = 1_356_998_400i64;
        let window_end_ms = (day + 7 * 86_400) * 1000;
        // A piece of the first day: its buckets end with the day, not the week.
        assert_eq!(
            buckets_until(window_end_ms, day + 86_400 - 1),
            (day + 86_400) * 1000
        );
        // The last piece, and a part reading past the window (its end rounded to an hour).
        assert_eq!(
            buckets_until(window_end_ms, day + 7 * 86_400 - 1),
            window_end_ms
        );
        assert_eq!(
            buckets_until(window_end_ms, day + 8 * 86_400 - 1),
            window_end_ms
        );
        assert_eq!(buckets_until(window_end_ms, i64::MAX), window_end_ms);
    }

    #[test]
    fn pieces_fall_on_days_near_even_shares() {
        if !super::super::two_cores() {
            return;
        }
        let mut q = SubQuery::new(Aggregator::parse("sum").unwrap(), "m");
        q.downsample = Some(DownsampleSpec::parse("1h-avg").unwrap());
        let options = RunOptions::default();
        let day = 1_381_276_800; // 2013-10-09, a UTC day's start
        // 196 days from 16:00: seven cuts, each a day's start within 12 hours of its share.
        let (first, last) = (day + 16 * 3600, day + 196 * 86_400 + 3 * 3600);
        let cuts = split_hours(&q, first, last, &options, 8);
        assert_eq!(cuts.len(), 7, "{cuts:?}");
        let hours = (last - first) / 3600 + 1;
        for (k, cut) in cuts.iter().enumerate() {
            assert_eq!(cut % 86_400, 0, "{cuts:?}");
            let share = first + hours * (k as i64 + 1) / 8 * 3600;
            assert!((cut - share).abs() <= hours / 16 * 3600, "{k}: {cuts:?}");
        }
        // Two days from midnight: the one day's start between them (a cut inside a day makes
        // both pieces decode it). Ten hours: one cut, at the middle hour.
        assert_eq!(
            split_hours(&q, day, day + 2 * 86_400 - 3600, &options, 8),
            vec![day + 86_400]
        );
        assert_eq!(
            split_hours(&q, day + 3600, day + 10 * 3600, &options, 8),
            vec![day + 6 * 3600]
        );
        // Two hours: one cut; weekly buckets over 30 days: only at week boundaries.
        assert_eq!(
            split_hours(&q, day, day + 3600, &options, 8),
            vec![day + 3600]
        );
        q.downsample = Some(DownsampleSpec::parse("7d-sum").unwrap());
        let cuts = split_hours(&q, day, day + 30 * 86_400, &options, 8);
        let ds = q.downsample.unwrap();
        assert!(
            !cuts.is_empty() && cuts.iter().all(|c| ds.is_boundary(c * 1000)),
            "{cuts:?}"
        );
        assert!(cuts.len() <= 5, "five week boundaries: {cuts:?}");
    }

    /// A query naming its series by literal tag values or TSUIDs is read by one thread;
    /// one with a wildcard, an alternative or a negation may be split.
    #[test]
    fn queries_naming_their_series_are_not_split() {
        let query = |filters: &[(&str, &str, &str)]| {
            let mut q = SubQuery::new(Aggregator::parse("sum").unwrap(), "m");
            for (kind, tagk, expr) in filters {
                q.filters
                    .push(crate::query::filter::TagFilter::new(kind, tagk, expr, false).unwrap());
            }
            q
        };
        let named = query(&[("literal_or", "host", "web01"), ("literal_or", "dc", "lga")]);
        assert!(names_its_series(&query(&[("literal_or", "host", "web01")])));
        assert!(names_its_series(&named));
        for open in [
            query(&[]),
            query(&[("literal_or", "host", "web01|web02")]),
            query(&[("literal_or", "host", "web01"), ("wildcard", "dc", "l*")]),
            query(&[("not_literal_or", "host", "web01")]),
        ] {
            assert!(!names_its_series(&open), "{:?}", open.filters);
        }
        let mut by_tsuid = query(&[]);
        by_tsuid.tsuids = vec!["000001000001000001".into()];
        assert!(names_its_series(&by_tsuid));
        by_tsuid.tsuids = vec!["000001000001000001".into(); FEW_SERIES + 1];
        assert!(!names_its_series(&by_tsuid));
        // And the split follows it, where there are two cores to split for: a named series
        // is read by two threads only for its raw points over two days or more.
        if super::super::two_cores() {
            let options = RunOptions::default();
            let first = 1_735_689_600;
            let two_days = first + (RAW_SPLIT_HOURS - 1) * 3600;
            assert_eq!(split_hour(&named, first, two_days - 3600, &options), None);
            assert!(split_hour(&query(&[]), first, two_days - 3600, &options).is_some());
            assert_eq!(
                split_hour(&named, first, two_days, &options),
                Some(first + 86_400)
            );
            let mut downsampled = named.clone();
            downsampled.downsample =
                Some(crate::query::downsample::DownsampleSpec::parse("1h-avg").unwrap());
            assert_eq!(split_hour(&downsampled, first, two_days, &options), None);
        }
    }
}
