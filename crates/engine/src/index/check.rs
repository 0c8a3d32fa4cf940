//! `tsdb fsck --index`: the data table's keys against the index (RFC 0007, "Rebuild, fsck,
//! compatibility").
//!
//! Per metric, a keys-only scan of the data table (as the rebuild makes) gives the rows the
//! index must hold ([`super::rebuild`]'s expected entries); the metric's index ranges are
//! read and compared:
//!
//! - an expected row that is absent is **missing** (an error; `--fix` writes the series'
//!   entries, markers last);
//! - a `0x10`/`0x11` row of a series with no row in its period, in a period closed more than
//!   a period ago, is **stale** (not an error: deletes, retention and pre-announced periods
//!   leave them; `--fix` removes them); so are `0x01`/`0x02` rows of a series with no row at
//!   all, when the whole table was scanned;
//! - a key that does not parse, a posting whose tags lack its own pair, a value row whose
//!   name is not its UID's name in `tsdb-uid`, are **bad** (errors; `--fix` removes them and
//!   writes what is missing);
//! - counters are recounted; a counter that differs is reported and, with `--fix`, set.

use std::collections::{BTreeMap, BTreeSet};

use hourglass_core::uid::{Uid, UidKind, name_bytes};
use hourglass_storage::{Mutation, ReadOptions, Row, RowMutation, ScanRequest};

use super::rebuild::{self, MetricData};
use super::{COUNTER_FAMILY, PERIOD_SECS, kind};
use crate::{Result, Tsdb};

/// What to check.
#[derive(Debug, Clone, Default)]
pub struct CheckOptions {
    /// Metric UIDs; empty: every metric of the UID table.
    pub metrics: Vec<Uid>,
    /// Only rows and period entries from this time (seconds; widened to its period).
    pub since: Option<u32>,
    pub fix: bool,
    /// The clock (seconds): which periods are closed.
    pub now_secs: u32,
}

/// Findings: one line each, and the counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    pub findings: Vec<String>,
    pub metrics: usize,
    pub rows_checked: u64,
    pub missing: u64,
    pub stale: u64,
    pub bad: u64,
    pub counters_differing: u64,
    pub fixed: u64,
}

impl CheckReport {
    /// Missing and bad entries: what makes the index wrong (stale entries and counters
    /// above the truth are allowed by its invariants).
    pub fn errors(&self) -> u64 {
        self.missing + self.bad
    }

    pub fn summary_lines(&self) -> Vec<String> {
        vec![
            format!("Index metrics checked: {}", self.metrics),
            format!("Index rows checked: {}", self.rows_checked),
            format!("Index entries missing: {}", self.missing),
            format!("Index entries stale: {}", self.stale),
            format!("Index entries bad: {}", self.bad),
            format!(
                "Index counters recounted and differing: {}",
                self.counters_differing
            ),
            format!("Index rows fixed: {}", self.fixed),
        ]
    }
}

fn hex(bytes: &[u8]) -> String {
    hourglass_core::uid::hex_upper(bytes)
}

/// Every row of the index table starting with `prefix` (values kept: value rows and
/// counters are checked).
fn rows_with_prefix(db: &Tsdb, table: &str, prefix: &[u8]) -> Result<Vec<Row>> {
    let request = ScanRequest {
        read: ReadOptions::latest(),
        ..ScanRequest::prefix(prefix)
    };
    db.store()
        .scan(table, &request)?
        .map(|r| r.map_err(Into::into))
        .collect()
}

/// Checks the index of the metrics asked for against the data table.
pub fn check(db: &Tsdb, options: &CheckOptions) -> Result<CheckReport> {
    let schema = &db.settings().schema;
    let table = schema.index_table.clone();
    let store = db.store();
    // An index of another format is refused, not judged by this format's layout (a TSD
    // with the index off leaves one as it is).
    super::status::read(store.as_ref(), &table)?;
    let metrics = if options.metrics.is_empty() {
        rebuild::all_metrics(db)?
    } else {
        options
            .metrics
            .iter()
            .map(|m| m.to_bytes(schema.metric_width))
            .collect()
    };
    let (from, _) = rebuild::period_range(options.since, None);
    let all_time = options.since.is_none();
    let m = usize::from(schema.metric_width);
    let mut report = CheckReport::default();
    for metric in &metrics {
        report.metrics += 1;
        let data = rebuild::scan_metric(db, metric, from, None)?;
        let judge_by = Judge {
            db,
            data: &data,
            options,
            all_time,
        };
        let expected = rebuild::expected(db, metric, &data, all_time)?;
        let mut want: BTreeMap<Vec<u8>, &RowMutation> = BTreeMap::new();
        for row in expected.entries.iter().chain(&expected.markers) {
            want.insert(row.key.clone(), row);
        }
        // The metric's index rows, by kind (0x03 and 0x05 rows lead with a tag key, not the
        // metric: read by key below).
        let mut have: BTreeSet<Vec<u8>> = BTreeSet::new();
        let mut delete: Vec<Vec<u8>> = Vec::new();
        let mut rewrite: BTreeSet<Vec<u8>> = BTreeSet::new();
        for k_byte in [
            kind::CATALOG,
            kind::POSTING,
            kind::VALUE_NAME,
            kind::PERIOD_SERIES,
            kind::PERIOD_POSTING,
            kind::PERIOD_VALUE_NAME,
            kind::NOTE,
        ] {
            let mut prefix = vec![k_byte];
            prefix.extend_from_slice(metric);
            let periodic = matches!(
                k_byte,
                kind::PERIOD_SERIES | kind::PERIOD_POSTING | kind::PERIOD_VALUE_NAME
            );
            let start = if periodic {
                [prefix.as_slice(), &from.to_be_bytes()].concat()
            } else {
                prefix.clone()
            };
            let end = hourglass_storage::prefix_end(&prefix);
            let request = ScanRequest {
                read: ReadOptions::latest(),
                ..ScanRequest::range(start, end)
            };
            let rows: Vec<Row> = store
                .scan(&table, &request)?
                .collect::<std::result::Result<_, _>>()?;
            for row in rows {
                report.rows_checked += 1;
                let tail = &row.key[1 + m..];
                let verdict = judge(&judge_by, k_byte, tail, &row)?;
                match verdict {
                    Verdict::Good => {}
                    Verdict::Bad(why) => {
                        report.bad += 1;
                        report
                            .findings
                            .push(format!("index entry bad: {why}. key={}", hex(&row.key)));
                        delete.push(row.key.clone());
                        continue;
                    }
                    Verdict::Stale => {
                        report.stale += 1;
                        report.findings.push(format!(
                            "index entry stale: no data row of its series in its range. key={}",
                            hex(&row.key)
                        ));
                        delete.push(row.key.clone());
                        continue;
                    }
                }
                have.insert(row.key);
            }
        }
        // 0x03 and 0x05 rows: one read of every expected one.
        let any_metric: Vec<Vec<u8>> = want
            .keys()
            .filter(|key| matches!(key.first(), Some(&kind::VALUE_METRIC | &kind::TRIGRAM)))
            .cloned()
            .collect();
        for (key, row) in
            any_metric
                .iter()
                .zip(store.get_rows(&table, &any_metric, &ReadOptions::keys_only())?)
        {
            report.rows_checked += 1;
            if row.is_some() {
                have.insert(key.clone());
            }
        }
        for key in want.keys() {
            if !have.contains(key) {
                report.missing += 1;
                report.findings.push(format!(
                    "index entry missing: kind=0x{:02X} key={}",
                    key.first().copied().unwrap_or(0),
                    hex(key)
                ));
                rewrite.insert(key.clone());
            }
        }
        // Counters, recounted.
        let mut counter_fixes = Vec::new();
        let mut counter_prefixes = vec![[&[kind::PERIOD_COUNTERS][..], metric].concat()];
        if all_time {
            counter_prefixes.push(super::series_counters_key(metric));
        }
        let mut stored: BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, i64>> = BTreeMap::new();
        for prefix in &counter_prefixes {
            for row in rows_with_prefix(db, &table, prefix)? {
                if row.key.first() == Some(&kind::PERIOD_COUNTERS)
                    && row
                        .key
                        .get(1 + m..5 + m)
                        .is_some_and(|p| u32::from_be_bytes([p[0], p[1], p[2], p[3]]) < from)
                {
                    continue;
                }
                let cells = stored.entry(row.key.clone()).or_default();
                for c in &row.cells {
                    if c.family == COUNTER_FAMILY {
                        let n =
                            <[u8; 8]>::try_from(c.value.as_slice()).map_or(-1, i64::from_be_bytes);
                        cells.insert(c.qualifier.clone(), n);
                    }
                }
            }
        }
        let keys: BTreeSet<&Vec<u8>> = stored.keys().chain(expected.counters.keys()).collect();
        for key in keys {
            let empty = BTreeMap::new();
            let counted = expected.counters.get(key).unwrap_or(&empty);
            let have = stored.get(key).unwrap_or(&empty);
            if counted != have {
                report.counters_differing += 1;
                report.findings.push(format!(
                    "index counters differ: stored={} counted={}. key={}",
                    counters_text(have),
                    counters_text(counted),
                    hex(key)
                ));
                let one: BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, i64>> =
                    [(key.clone(), counted.clone())].into_iter().collect();
                counter_fixes.extend(rebuild::counter_rows(&one));
            }
        }
        if options.fix {
            let deletes: Vec<RowMutation> = delete
                .iter()
                .map(|key| RowMutation {
                    key: key.clone(),
                    mutations: vec![Mutation::DeleteRow],
                })
                .collect();
            // Entries first, markers last, as the flush writes them.
            let (markers, entries): (Vec<&RowMutation>, Vec<&RowMutation>) = rewrite
                .iter()
                .filter_map(|key| want.get(key).copied())
                .partition(|r| {
                    matches!(r.key.first(), Some(&kind::CATALOG | &kind::PERIOD_SERIES))
                });
            let entries: Vec<RowMutation> = entries.into_iter().cloned().collect();
            let markers: Vec<RowMutation> = markers.into_iter().cloned().collect();
            for batch in [deletes, entries, markers, counter_fixes] {
                for chunk in batch.chunks(1000) {
                    store.mutate_rows(&table, chunk)?;
                    report.fixed += chunk.len() as u64;
                }
            }
        }
    }
    Ok(report)
}

fn counters_text(cells: &BTreeMap<Vec<u8>, i64>) -> String {
    let parts: Vec<String> = cells
        .iter()
        .map(|(q, n)| format!("{}={n}", hex(q)))
        .collect();
    format!("[{}]", parts.join(","))
}

enum Verdict {
    Good,
    Stale,
    Bad(String),
}

/// What one metric's index rows are judged against.
struct Judge<'a> {
    db: &'a Tsdb,
    data: &'a MetricData,
    options: &'a CheckOptions,
    /// The check covers all time (no `--since`).
    all_time: bool,
}

/// One index row of a metric: `tail` is its key after the kind byte and the metric.
fn judge(j: &Judge<'_>, kind_byte: u8, tail: &[u8], row: &Row) -> Result<Verdict> {
    let Judge {
        db,
        data,
        options,
        all_time,
    } = *j;
    let schema = &db.settings().schema;
    let (k, v) = (
        usize::from(schema.tagk_width),
        usize::from(schema.tagv_width),
    );
    let pair = schema.tag_pair_width();
    let tags_ok = |tags: &[u8]| !tags.is_empty() && tags.len().is_multiple_of(pair);
    let has_pair = |tags: &[u8], pk: &[u8], pv: &[u8]| {
        tags.chunks_exact(pair)
            .any(|p| &p[..k] == pk && &p[k..] == pv)
    };
    let closed =
        |period: u32| u64::from(period) + 2 * u64::from(PERIOD_SECS) <= u64::from(options.now_secs);
    let in_data = |tags: &[u8], period: Option<u32>| {
        data.series
            .get(tags)
            .is_some_and(|periods| period.is_none_or(|p| periods.contains(&p)))
    };
    let value_name = |stored_name: &[u8], value: Option<&[u8]>| -> Result<Verdict> {
        let Some(uid) = value.filter(|u| u.len() == v) else {
            return Ok(Verdict::Bad("value row without a tag value UID".into()));
        };
        let uid = Uid::from_bytes(uid)?;
        match db.uids().get_name(UidKind::TagValue, uid) {
            Ok(name) if *name_bytes(&name) == *stored_name => Ok(Verdict::Good),
            Ok(name) => Ok(Verdict::Bad(format!(
                "value row's name is not its UID's name ({name})"
            ))),
            Err(e) if e.kind() == crate::ErrorKind::NotFound => {
                Ok(Verdict::Bad("value row's UID has no name".into()))
            }
            Err(e) => Err(e),
        }
    };
    Ok(match kind_byte {
        kind::CATALOG => match tags_ok(tail) {
            false => Verdict::Bad("catalog key does not parse".into()),
            true if all_time && !in_data(tail, None) => Verdict::Stale,
            true => Verdict::Good,
        },
        kind::POSTING => {
            if tail.len() < pair || !tags_ok(&tail[pair..]) {
                Verdict::Bad("posting key does not parse".into())
            } else if !has_pair(&tail[pair..], &tail[..k], &tail[k..pair]) {
                Verdict::Bad("posting's tags lack its own tag pair".into())
            } else if all_time && !in_data(&tail[pair..], None) {
                Verdict::Stale
            } else {
                Verdict::Good
            }
        }
        kind::VALUE_NAME => {
            if tail.len() <= k {
                Verdict::Bad("value name key does not parse".into())
            } else {
                value_name(
                    &tail[k..],
                    row.value(super::GLOBAL_FAMILY, super::VALUE_QUALIFIER),
                )?
            }
        }
        kind::NOTE => match tail.len() >= 8 && (tail.len() - 8).is_multiple_of(pair) {
            true => Verdict::Good,
            false => Verdict::Bad("note key does not parse".into()),
        },
        kind::PERIOD_SERIES | kind::PERIOD_POSTING | kind::PERIOD_VALUE_NAME => {
            let Some(period) = tail
                .get(..4)
                .map(|p| u32::from_be_bytes([p[0], p[1], p[2], p[3]]))
            else {
                return Ok(Verdict::Bad("period key does not parse".into()));
            };
            if period % PERIOD_SECS != 0 {
                return Ok(Verdict::Bad("period is not a day's start".into()));
            }
            let rest = &tail[4..];
            match kind_byte {
                kind::PERIOD_SERIES if !tags_ok(rest) => {
                    Verdict::Bad("marker key does not parse".into())
                }
                kind::PERIOD_SERIES => {
                    stale_or_good(closed(period) && !in_data(rest, Some(period)))
                }
                kind::PERIOD_POSTING => {
                    if rest.len() < pair || !tags_ok(&rest[pair..]) {
                        Verdict::Bad("posting key does not parse".into())
                    } else if !has_pair(&rest[pair..], &rest[..k], &rest[k..pair]) {
                        Verdict::Bad("posting's tags lack its own tag pair".into())
                    } else {
                        stale_or_good(closed(period) && !in_data(&rest[pair..], Some(period)))
                    }
                }
                _ => {
                    if rest.len() <= k {
                        Verdict::Bad("value name key does not parse".into())
                    } else {
                        value_name(
                            &rest[k..],
                            row.value(super::PERIOD_FAMILY, super::VALUE_QUALIFIER),
                        )?
                    }
                }
            }
        }
        _ => Verdict::Good,
    })
}

fn stale_or_good(stale: bool) -> Verdict {
    if stale { Verdict::Stale } else { Verdict::Good }
}
