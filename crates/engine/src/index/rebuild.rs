//! `tsdb index rebuild`: the index entries built from the data table's keys (RFC 0007,
//! "Rebuild, fsck, compatibility").
//!
//! Metric by metric (every metric of the UID table, or the ones asked for) and salt bucket
//! by salt bucket, a keys-only scan lists each series' periods; the same entries a flush
//! writes ([`super::period_entries`], [`super::series_entries`]) are written in batches of
//! 1,000 rows, postings and value rows before markers and catalog rows; rows holding notes
//! get `0x30` rows; the counters are set to what was counted; and the metric's `verified`
//! hour rises to the hour the scan started less an hour of grace, when the scan reached
//! back to the metric's first row or to its old `verified` hour. A rebuild can run beside
//! live TSDs (every entry is an idempotent set) and be run again for the metrics an
//! interrupted one had not finished.

use std::collections::{BTreeMap, BTreeSet};

use hourglass_core::annotation::is_annotation_qualifier;
use hourglass_core::rowkey;
use hourglass_core::schema::{DATA_FAMILY, Schema};
use hourglass_core::uid::{Uid, UidKind};
use hourglass_storage::{Mutation, ReadOptions, RowMutation, ScanRequest, Store, prefix_end};

use super::{COUNTER_FAMILY, ENTRY_QUALIFIER, PERIOD_SECS, Series, status};
use crate::{Result, Tsdb};

/// Rows per index write.
const BATCH_ROWS: usize = 1000;
/// Hours before the scan's start that are not yet called complete (points still arriving).
const GRACE_SECS: u32 = 3600;

/// What to rebuild.
#[derive(Debug, Clone, Default)]
pub struct RebuildOptions {
    /// Metric UIDs; empty: every metric of the UID table.
    pub metrics: Vec<Uid>,
    /// Rows from this time (seconds; widened to its period's start).
    pub since: Option<u32>,
    /// Rows before this time (seconds; widened to its period's end).
    pub until: Option<u32>,
    /// The index table to write (default: the configured one).
    pub table: Option<String>,
    /// The clock (seconds) the `verified` hours are computed from.
    pub now_secs: u32,
}

/// What a rebuild did, per metric and in total.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RebuildReport {
    pub metrics: usize,
    pub series: usize,
    /// (series, period) pairs.
    pub pairs: usize,
    pub rows_written: usize,
    pub notes: usize,
    /// Metrics whose `verified` hour was raised, with the new hour.
    pub verified: Vec<(Vec<u8>, u32)>,
}

/// The series of one metric found in the data table, each with its periods, and the
/// notes' places (`0x30` keys).
#[derive(Debug, Default)]
pub struct MetricData {
    /// Tags (as in the row key) → periods with rows.
    pub series: BTreeMap<Vec<u8>, BTreeSet<u32>>,
    pub notes: BTreeSet<Vec<u8>>,
}

/// The scanned range of periods, `[from, to)` in seconds, whole periods.
pub(crate) fn period_range(since: Option<u32>, until: Option<u32>) -> (u32, Option<u32>) {
    let from = since.map_or(0, super::period_of);
    let to = until.map(|u| {
        let p = super::period_of(u);
        if p == u {
            p
        } else {
            p.saturating_add(PERIOD_SECS)
        }
    });
    (from, to)
}

/// Every metric UID of the UID table, as bytes of the metric width, sorted.
pub fn all_metrics(db: &Tsdb) -> Result<Vec<Vec<u8>>> {
    let width = db.settings().schema.metric_width;
    let mut out: Vec<Vec<u8>> = db
        .uids()
        .grep(Some(UidKind::Metric), "", false)?
        .into_iter()
        .map(|m| m.uid)
        .filter(|uid| uid.len() == usize::from(width))
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}

/// Scans the data table's keys of one metric over `[from, to)` (seconds), salt bucket by
/// salt bucket.
pub fn scan_metric(db: &Tsdb, metric: &[u8], from: u32, to: Option<u32>) -> Result<MetricData> {
    let schema = &db.settings().schema;
    let store = db.store();
    let mut data = MetricData::default();
    for salt in rowkey::salt_prefixes(schema) {
        let prefix = [salt.as_slice(), metric].concat();
        let start = [prefix.as_slice(), &from.to_be_bytes()].concat();
        let end = match to {
            Some(to) => Some([prefix.as_slice(), &to.to_be_bytes()].concat()),
            None => prefix_end(&prefix),
        };
        let request = ScanRequest {
            read: ReadOptions {
                keys_only: true,
                families: Some(vec![DATA_FAMILY.to_string()]),
                ..ReadOptions::default()
            },
            ..ScanRequest::range(start, end)
        };
        for row in store.scan(&schema.data_table, &request)? {
            let row = row?;
            let (Some(series), Some(base)) = (
                Series::from_row_key(schema, &row.key),
                rowkey::base_time_of(schema, &row.key),
            ) else {
                continue; // not a series' row (fsck of the data table reports those)
            };
            // A row holding only notes is no point of the series: the flush gives entries
            // to points only, and notes have places of their own (`0x30`).
            if row.cells.is_empty()
                || row
                    .cells
                    .iter()
                    .any(|c| !is_annotation_qualifier(&c.qualifier))
            {
                data.series
                    .entry(series.tags.to_vec())
                    .or_default()
                    .insert(super::period_of(base));
            }
            if row
                .cells
                .iter()
                .any(|c| is_annotation_qualifier(&c.qualifier))
            {
                note_places(store.as_ref(), schema, &row.key, series, &mut data.notes)?;
            }
        }
    }
    Ok(data)
}

/// The `0x30` keys of the notes a data row holds (read whole: a note's time is in its JSON).
fn note_places(
    store: &dyn Store,
    schema: &Schema,
    key: &[u8],
    series: Series<'_>,
    out: &mut BTreeSet<Vec<u8>>,
) -> Result<()> {
    let Some(row) = store.get(&schema.data_table, key, &ReadOptions::family(DATA_FAMILY))? else {
        return Ok(());
    };
    for cell in row
        .cells
        .iter()
        .filter(|c| is_annotation_qualifier(&c.qualifier))
    {
        match crate::annotation::Annotation::from_stored(&cell.value) {
            Ok(note) => {
                out.insert(super::note_key(series.metric, note.start_ms(), series.tags));
            }
            Err(e) => tracing::warn!(error = %e, "a note that does not parse has no index place"),
        }
    }
    Ok(())
}

/// The rows a metric's data calls for: entries (postings, value and trigram rows, notes)
/// and markers (`0x10`, `0x01`), and the counters (key → qualifier → count). Counters of
/// all time (`0x21`) only when `all_time`.
pub(crate) struct Expected {
    pub entries: Vec<RowMutation>,
    pub markers: Vec<RowMutation>,
    pub counters: BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, i64>>,
}

pub(crate) fn expected(
    db: &Tsdb,
    metric: &[u8],
    data: &MetricData,
    all_time: bool,
) -> Result<Expected> {
    let schema = &db.settings().schema;
    let mut out = Expected {
        entries: Vec::new(),
        markers: Vec::new(),
        counters: BTreeMap::new(),
    };
    let mut values: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut count = |key: Vec<u8>, q: Vec<u8>| {
        *out.counters.entry(key).or_default().entry(q).or_default() += 1;
    };
    let mut counts: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for (tags, periods) in &data.series {
        let series = Series { metric, tags };
        let names = super::value_names(db.uids(), schema, series)?;
        let all = super::series_entries(schema, series);
        out.entries
            .extend(all.postings.into_iter().map(RowMutation::from));
        let counters = super::series_counters_key(metric);
        counts.push((counters.clone(), ENTRY_QUALIFIER.to_vec()));
        for (tagk, _) in series.pairs(schema) {
            counts.push((counters.clone(), super::key_series_qualifier(tagk)));
        }
        // Each value's rows once: its metric row, value row and trigrams (format 2: the
        // trigrams are the tag key's, written again by every metric having the value).
        for ((tagk, tagv), name) in series.pairs(schema).zip(&names) {
            if !values.insert([&[0u8][..], tagk, tagv].concat()) {
                continue;
            }
            let rows = super::value_entries(metric, tagk, tagv, name.as_deref());
            out.entries.extend(rows.into_iter().map(RowMutation::from));
            if let Some(name) = name {
                counts.push((counters.clone(), super::key_values_qualifier(tagk)));
                let rows = super::trigram_entries(tagk, tagv, name);
                out.entries.extend(rows.into_iter().map(RowMutation::from));
            }
        }
        out.markers.push(all.catalog.into());
        for &period in periods {
            let entries = super::period_entries(schema, series, period, &names);
            out.entries
                .extend(entries.postings.into_iter().map(RowMutation::from));
            let counters = super::period_counters_key(metric, period);
            counts.push((counters.clone(), ENTRY_QUALIFIER.to_vec()));
            for (tagk, _) in series.pairs(schema) {
                counts.push((counters.clone(), super::key_series_qualifier(tagk)));
            }
            for v in entries.values {
                let id = [&[1u8][..], &period.to_be_bytes(), &v.tagk, &v.tagv].concat();
                if values.insert(id) {
                    counts.push((counters.clone(), super::key_values_qualifier(&v.tagk)));
                    out.entries
                        .extend(v.rows.into_iter().map(RowMutation::from));
                }
            }
            out.markers.push(entries.marker.into());
        }
    }
    for (key, q) in counts {
        if all_time || key.first() != Some(&super::kind::SERIES_COUNTERS) {
            count(key, q);
        }
    }
    for note in &data.notes {
        out.entries.push(RowMutation {
            key: note.clone(),
            mutations: vec![Mutation::set_at(
                super::GLOBAL_FAMILY,
                super::NOTE_QUALIFIER,
                0,
                Vec::new(),
            )],
        });
    }
    Ok(out)
}

/// The counter cells of `counters`, set (each counter row's cells replaced whole).
pub(crate) fn counter_rows(
    counters: &BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, i64>>,
) -> Vec<RowMutation> {
    counters
        .iter()
        .map(|(key, cells)| {
            let mut mutations = vec![Mutation::DeleteFamily {
                family: COUNTER_FAMILY.to_string(),
            }];
            mutations.extend(cells.iter().map(|(q, n)| {
                Mutation::set_at(COUNTER_FAMILY, q.clone(), 0, n.to_be_bytes().to_vec())
            }));
            RowMutation {
                key: key.clone(),
                mutations,
            }
        })
        .collect()
}

/// Makes sure the target index table exists with a status row. A table no TSD maintains
/// (not the configured one) says so: `live_from` [`status::NOT_MAINTAINED`].
fn prepare_table(db: &Tsdb, table: &str) -> Result<()> {
    let store = db.store();
    let schema = Schema {
        index_table: table.to_string(),
        ..db.settings().schema.clone()
    };
    store.create_table(&super::table_spec(&schema))?;
    if status::read(store.as_ref(), table)?.is_some() {
        return Ok(());
    }
    if table == db.settings().schema.index_table && db.settings().index {
        status::open(store.as_ref(), &schema, true, db.settings().clock.now_ms())?;
    } else {
        status::create(store.as_ref(), table, status::NOT_MAINTAINED, None)?;
    }
    Ok(())
}

/// Rebuilds the index of the metrics asked for; `progress` is told of each metric done.
pub fn rebuild(
    db: &Tsdb,
    options: &RebuildOptions,
    mut progress: impl FnMut(&[u8], &RebuildReport),
) -> Result<RebuildReport> {
    let schema = &db.settings().schema;
    let table = options
        .table
        .clone()
        .unwrap_or_else(|| schema.index_table.clone());
    prepare_table(db, &table)?;
    let store = db.store();
    let metrics = if options.metrics.is_empty() {
        all_metrics(db)?
    } else {
        options
            .metrics
            .iter()
            .map(|m| m.to_bytes(schema.metric_width))
            .collect()
    };
    let (from, to) = period_range(options.since, options.until);
    let all_time = options.since.is_none() && options.until.is_none();
    let mut report = RebuildReport::default();
    for metric in &metrics {
        let scan_started = options.now_secs;
        let data = scan_metric(db, metric, from, to)?;
        let expected = expected(db, metric, &data, all_time)?;
        for batch in expected.entries.chunks(BATCH_ROWS) {
            store.mutate_rows(&table, batch)?;
        }
        for batch in expected.markers.chunks(BATCH_ROWS) {
            store.mutate_rows(&table, batch)?;
        }
        let counters = counter_rows(&expected.counters);
        for batch in counters.chunks(BATCH_ROWS) {
            store.mutate_rows(&table, batch)?;
        }
        report.metrics += 1;
        report.series += data.series.len();
        report.pairs += data.series.values().map(BTreeSet::len).sum::<usize>();
        report.notes += data.notes.len();
        report.rows_written += expected.entries.len() + expected.markers.len() + counters.len();
        // Coverage: the hours scanned are complete when the scan reached back far enough.
        let old = status::verified(store.as_ref(), &table, metric)?;
        let hour = |t: u32| t - t % 3600;
        let mut reach = hour(scan_started).saturating_sub(GRACE_SECS);
        if let Some(to) = to {
            reach = reach.min(to);
        }
        if from <= old && reach > old {
            status::set_verified(store.as_ref(), &table, metric, reach)?;
            report.verified.push((metric.clone(), reach));
        }
        progress(metric, &report);
    }
    // Every note of the data table has its place now (notes written meanwhile got theirs at
    // their write): notes are indexed from the scan's start.
    if options.metrics.is_empty() && all_time {
        status::set_notes_from(store.as_ref(), &table, i64::from(options.now_secs) * 1000)?;
    }
    Ok(report)
}
