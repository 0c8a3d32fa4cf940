//! Histogram queries (RFC 0008, phase 3), as OpenTSDB 2.4.1's `TsdbQuery.runHistogramAsync`
//! answers them: a sub-query with `percentiles` or `showHistogramBuckets` reads the
//! histogram cells of its series from the data table, sums each series' histograms per
//! downsampling bucket (`HistogramDownsampler`, `sum` only), sums the histograms of a group's
//! series that share a time (`HistogramAggregationIterator`, `sum` or `none`), and answers
//! per group one series per percentile (`<metric>_pct_<p>`, `SimpleHistogram.percentile`)
//! and, with `showHistogramBuckets`, one per bucket of the group's first histogram
//! (`<metric>_<lower>_<upper>`, `_UNDERFLOW`, `_OVERFLOW`), in that order.

use hourglass_core::histogram::{SimpleHistogram, is_histogram_qualifier, java_float_text};

use super::*;

/// OpenTSDB's words when histogram storage is not enabled.
pub const HISTOGRAMS_OFF: &str =
    "Histogram storage has not been enabled. Check the 'tsd.core.histograms.config' configuration.";

impl SubQuery {
    /// Whether the sub-query asks for histograms (`TSSubQuery.isHistogramQuery`).
    pub fn is_histogram(&self) -> bool {
        !self.percentiles.is_empty() || self.show_histogram_buckets
    }
}

/// 2.4.1's `TSSubQuery.checkHistogramQuery`, then what this TSD refuses rather than ignores.
pub fn check_histogram_request(tsdb: &Tsdb, q: &SubQuery, delete: bool) -> Result<()> {
    if tsdb.histograms().is_none() {
        return Err(Error::invalid(HISTOGRAMS_OFF));
    }
    if !matches!(q.aggregator, Aggregator::None | Aggregator::Sum) {
        return Err(Error::invalid(
            "Only NONE or SUM aggregation function supported for histogram query",
        ));
    }
    if let Some(ds) = q.downsample
        && ds.function != Aggregator::Sum
    {
        return Err(Error::invalid(
            "Only SUM downsampling aggregation supported for histogram query",
        ));
    }
    for p in &q.percentiles {
        if !(0.0..=100.0).contains(p) {
            return Err(Error::invalid(format!(
                "Invalid percentile parameters: {}",
                java_float_text(*p)
            )));
        }
    }
    let refuse = |what: &str| {
        Err(Error::invalid(format!(
            "{what} is not supported for histogram queries (RFC 0008)"
        )))
    };
    if q.rate {
        return refuse("rate");
    }
    if q.downsample.is_some_and(|d| d.fill != FillPolicy::None) {
        return refuse("a downsampling fill policy other than none");
    }
    if q.pre_aggregate {
        return refuse("preAggregate");
    }
    if q.rollup_usage.as_deref().is_some_and(|u| u != "ROLLUP_RAW") {
        return refuse("a rollupUsage other than ROLLUP_RAW (histograms live in the data table)");
    }
    if delete {
        return refuse("delete");
    }
    Ok(())
}

/// One series' histograms: (time ms, cell write time, histogram).
type Histos = Vec<(i64, i64, SimpleHistogram)>;

/// Runs a histogram sub-query over `[start_ms, end_ms]`.
pub(super) fn run_histogram(
    tsdb: &Tsdb,
    start_ms: i64,
    end_ms: i64,
    q: &SubQuery,
    options: &RunOptions,
    memory: &Reservation,
) -> Result<Outcome> {
    check_histogram_request(tsdb, q, options.delete)?;
    let config = tsdb
        .histograms()
        .ok_or_else(|| Error::invalid(HISTOGRAMS_OFF))?;
    let scan_started = Instant::now();
    let resolved = resolve(tsdb, q)?;
    let hours = ScanHours::of(q, start_ms, end_ms);
    let mut by_tagk: BTreeMap<&str, Vec<&TagFilter>> = BTreeMap::new();
    for f in &q.filters {
        by_tagk.entry(f.tagk.as_str()).or_default().push(f);
    }
    let scan = Scan {
        tsdb,
        select: None,
        q,
        metric: resolved.metric,
        wanted_tsuids: resolved.wanted_tsuids.as_ref(),
        by_tagk,
        pushed: resolved.pushed.clone(),
        query: (start_ms, end_ms),
        window: hours.window(),
        options,
        deadline: options.limits.deadline(options.started),
        shared: SharedCounts::default(),
        memory,
    };
    let schema = &tsdb.settings().schema;
    let tags_at = schema.tags_offset();
    let (lo, hi) = (scan.window.0, scan.window.1 - 1);
    let mut stats = QueryStats::default();
    let mut index: HashMap<Vec<u8>, Option<usize>> = HashMap::new();
    let mut series: Vec<(SeriesState, Histos)> = Vec::new();
    let mut held = 0u64;
    let mut notes_alone: HashMap<Vec<u8>, Vec<StoredAnnotation>> = HashMap::new();
    let query = scan.row_query(hours.start, hours.end);
    for request in crate::scan::scan_requests(schema, &query) {
        for row in tsdb.store().scan(&schema.data_table, &request)? {
            let row = row?;
            let Some(base) = row
                .key
                .get(schema.timestamp_offset()..schema.timestamp_offset() + 4)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .map(u32::from_be_bytes)
            else {
                continue;
            };
            stats.rows += 1;
            stats.bytes += rollup::row_bytes(&row) as u64;
            let mut histos: Histos = Vec::new();
            let mut notes = Vec::new();
            for c in row.cells.iter().filter(|c| c.family == DATA_FAMILY) {
                if is_histogram_qualifier(&c.qualifier) {
                    let Some(t) = hourglass_core::histogram::time_ms(base, &c.qualifier) else {
                        continue;
                    };
                    if t < lo || t > hi {
                        continue;
                    }
                    // 2.4.1 logs a cell it cannot decode and reads on.
                    match config.decode_stored(&c.value) {
                        Ok(h) => histos.push((t, c.timestamp, h)),
                        Err(e) => tracing::warn!(
                            "Failed to decode histogram data point in row {}: {e}",
                            hex_upper(&row.key)
                        ),
                    }
                } else if is_annotation_qualifier(&c.qualifier)
                    && let Some(time_ms) = stored_time_ms(base, &c.qualifier, &c.value)
                {
                    notes.push(StoredAnnotation {
                        time_ms,
                        json: c.value.clone(),
                    });
                }
            }
            let tag_bytes = row.key.get(tags_at..).unwrap_or_default();
            // A row without histograms makes no histogram span, but its annotations are its
            // series' when other rows hold histograms (2.4.1's `mergeHistogramDataPoints`;
            // a series of annotations alone fails there, `empty Span`, and is left out here).
            if histos.is_empty() {
                if !notes.is_empty() {
                    notes_alone
                        .entry(tag_bytes.to_vec())
                        .or_default()
                        .extend(notes);
                }
                continue;
            }
            stats.points += histos.len() as u64;
            let slot = match index.get(tag_bytes) {
                Some(slot) => *slot,
                None => {
                    let slot = match scan.new_series(&row.key, tag_bytes, scan.window.1)? {
                        Some(state) => {
                            series.push((state, Vec::new()));
                            Some(series.len() - 1)
                        }
                        None => None,
                    };
                    stats.series += u64::from(slot.is_some());
                    index.insert(tag_bytes.to_vec(), slot);
                    slot
                }
            };
            if let Some(i) = slot {
                // Each histogram holds its buckets (and its two counts), and may give as many
                // values to the answer, besides one per percentile asked for.
                let per_answer = q.percentiles.len() as u64;
                held += histos
                    .iter()
                    .map(|(_, _, h)| {
                        let buckets = h.buckets.len() as u64 + 2;
                        buckets + per_answer + if q.show_histogram_buckets { buckets } else { 0 }
                    })
                    .sum::<u64>();
                series[i].1.extend(histos);
                series[i].0.annotations.extend(notes);
            }
            options.limits.check(&stats, held, scan.deadline)?;
            memory.track(held)?;
        }
    }
    for (tag_bytes, notes) in notes_alone {
        if let Some(Some(i)) = index.get(&tag_bytes) {
            series[*i].0.annotations.extend(notes);
        }
    }
    stats.scan_time = scan_started.elapsed();
    let aggregation_started = Instant::now();
    let groups = groups(q, &resolved, series, (start_ms, end_ms));
    stats.aggregation_time = aggregation_started.elapsed();
    Ok(Outcome {
        groups,
        stats,
        rollup_table: None,
        memory: None,
    })
}

/// A series' histograms in time order, one per time (the last written), summed per
/// downsampling bucket when the sub-query downsamples.
fn series_points(
    q: &SubQuery,
    mut histos: Histos,
    (start_ms, end_ms): (i64, i64),
) -> BTreeMap<i64, SimpleHistogram> {
    histos.sort_by_key(|(t, written, _)| (*t, *written));
    let mut out: BTreeMap<i64, SimpleHistogram> = BTreeMap::new();
    let Some(ds) = q.downsample else {
        for (t, _, h) in histos {
            out.insert(t, h);
        }
        return out;
    };
    let mut last: Option<(i64, SimpleHistogram)> = None;
    let mut fold = |t: i64, h: SimpleHistogram| {
        let bucket = if ds.interval_ms == 0 {
            // `0all`: one point at the query's start, from the points in [start, end).
            if t < start_ms || t >= end_ms {
                return;
            }
            start_ms
        } else {
            match &ds.calendar {
                Some(cal) => cal.floor(t),
                None => t - t.rem_euclid(ds.interval_ms),
            }
        };
        match out.get_mut(&bucket) {
            Some(sum) => sum.add(&h),
            None => {
                out.insert(bucket, h);
            }
        }
    };
    // One per time: a later-written cell of the same time replaces the earlier one.
    for (t, _, h) in histos {
        if let Some((lt, lh)) = last.take()
            && lt != t
        {
            fold(lt, lh);
        }
        last = Some((t, h));
    }
    if let Some((t, h)) = last {
        fold(t, h);
    }
    out
}

/// Groups the series (each its own for `none`, else by the group-by tag values), sums each
/// group's histograms time by time, and writes its percentile and bucket series.
fn groups(
    q: &SubQuery,
    resolved: &Resolved<'_>,
    mut series: Vec<(SeriesState, Histos)>,
    (start_ms, end_ms): (i64, i64),
) -> Vec<GroupResult> {
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
    if q.aggregator == Aggregator::None {
        series.sort_by(|a, b| a.0.order.cmp(&b.0.order));
    }
    let mut grouped: BTreeMap<Vec<Uid>, Vec<(SeriesState, Histos)>> = BTreeMap::new();
    for (i, s) in series.into_iter().enumerate() {
        let key = if q.aggregator == Aggregator::None {
            vec![Uid(i as u64)]
        } else {
            group_keys
                .iter()
                .filter_map(|k| s.0.tags.iter().find(|t| t.key == *k).map(|t| t.value))
                .collect()
        };
        grouped.entry(key).or_default().push(s);
    }
    let mut percentiles = q.percentiles.clone();
    percentiles.sort_by(|a, b| hourglass_core::histogram::java_float_cmp(*a, *b));
    let mut out = Vec::new();
    for members in grouped.into_values() {
        let mut summed: BTreeMap<i64, SimpleHistogram> = BTreeMap::new();
        let mut seen: BTreeMap<Uid, (String, Option<String>)> = BTreeMap::new();
        let mut tsuids = Vec::new();
        let mut annotations: Vec<StoredAnnotation> = Vec::new();
        for (state, histos) in members {
            for (t, h) in series_points(q, histos, (start_ms, end_ms)) {
                match summed.get_mut(&t) {
                    Some(sum) => sum.add(&h),
                    None => {
                        summed.insert(t, h);
                    }
                }
            }
            for t in &state.tags {
                let entry = seen
                    .entry(t.key)
                    .or_insert_with(|| (t.key_name.clone(), Some(t.value_name.clone())));
                if entry.1.as_ref().is_some_and(|v| *v != t.value_name) {
                    entry.1 = None;
                }
            }
            tsuids.push(state.tsuid);
            annotations.extend(
                state
                    .annotations
                    .into_iter()
                    .filter(|a| a.time_ms >= start_ms && a.time_ms <= end_ms),
            );
        }
        tsuids.sort();
        annotations.sort_by_key(|a| a.time_ms);
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
        let result = |suffix: String, dps: Vec<(i64, Num)>| GroupResult {
            metric: format!("{}{suffix}", resolved.metric_name),
            tags: tags.clone(),
            aggregate_tags: aggregate_tags.clone(),
            tsuids: tsuids.clone(),
            annotations: annotations.clone(),
            dps,
        };
        let in_range = || summed.range(start_ms..=end_ms);
        for p in &percentiles {
            let dps = in_range()
                .map(|(t, h)| (*t, Num::Float(h.percentile(f64::from(*p)))))
                .collect();
            out.push(result(format!("_pct_{}", java_float_text(*p)), dps));
        }
        // The buckets of the group's first histogram, underflow first, overflow last.
        if q.show_histogram_buckets
            && let Some((_, first)) = summed.iter().next()
        {
            out.push(result(
                "_UNDERFLOW".into(),
                in_range()
                    .map(|(t, h)| (*t, Num::Int(h.underflow)))
                    .collect(),
            ));
            for b in first.buckets.keys() {
                let dps = in_range()
                    .map(|(t, h)| (*t, Num::Int(h.buckets.get(b).copied().unwrap_or(0))))
                    .collect();
                out.push(result(
                    format!("_{}_{}", java_float_text(b.lower), java_float_text(b.upper)),
                    dps,
                ));
            }
            out.push(result(
                "_OVERFLOW".into(),
                in_range()
                    .map(|(t, h)| (*t, Num::Int(h.overflow)))
                    .collect(),
            ));
        }
    }
    out
}
