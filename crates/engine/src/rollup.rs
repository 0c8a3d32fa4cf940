//! Rollup and pre-aggregate points (RFC 0008): OpenTSDB 2.4's `tsd.rollups.*` settings and
//! the write path straight to the rollup tables (`TSDB.addAggregatePointInternal`).
//!
//! A request's points are checked and keyed one by one, then written as one batched
//! mutation per table: they skip the write-ahead log and buffers of raw points, as OpenTSDB
//! writes them with a plain put that nothing compacts. The batch is acknowledged once the
//! store applied it (and synced it, with `?sync` or `tsd.storage.wal.sync`).

use std::collections::BTreeMap;

use hourglass_core::config::Config;
use hourglass_core::qualifier::Qualifier;
use hourglass_core::rollup::{RollupConfig, RollupInterval, SpanUnit};
use hourglass_core::schema::DATA_FAMILY;
use hourglass_core::value::Value;
use hourglass_storage::{Mutation, RowMutation};

use crate::query::aggregator::Aggregator;
use crate::{Error, Result, Tsdb};

pub mod compute;
pub mod retention;

/// `tsd.rollups.*`, read when `tsd.rollups.enable` is true.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollupSettings {
    /// `tsd.rollups.config`: intervals and aggregation ids.
    pub config: RollupConfig,
    /// `tsd.rollups.agg_tag_key` (default `_aggregate`).
    pub agg_tag_key: String,
    /// `tsd.rollups.raw_agg_tag_value` (default `RAW`).
    pub raw_agg_tag_value: String,
    /// `tsd.rollups.tag_raw` (default false): tag rollups of raw series with the raw value.
    pub tag_raw: bool,
    /// `tsd.rollups.block_derived` (default true): refuse `avg` and `dev` rollups.
    pub block_derived: bool,
    /// `tsd.rollups.compute` and its keys: Hourglass computes the tiers itself (RFC 0008
    /// phase 4).
    pub compute: Option<compute::ComputeSettings>,
}

impl RollupSettings {
    /// The rollup settings when `tsd.rollups.enable` is on, with OpenTSDB's checks and words.
    /// `tsd.rollups.config` is a file path when it ends in `.json`, else the JSON itself.
    pub fn from_config(c: &Config) -> Result<Option<RollupSettings>> {
        if !c.get_bool("tsd.rollups.enable", false) {
            if c.get_bool("tsd.rollups.compute", false) {
                return Err(Error::invalid(
                    "tsd.rollups.compute = true needs tsd.rollups.enable = true and a rollup configuration (tsd.rollups.config)",
                ));
            }
            return Ok(None);
        }
        let conf = c.get_str("tsd.rollups.config", "");
        if conf.is_empty() {
            return Err(Error::invalid(
                "Rollups were enabled but 'tsd.rollups.config' is null or empty.",
            ));
        }
        let text = if conf.ends_with(".json") {
            std::fs::read_to_string(conf)
                .map_err(|e| Error::invalid(format!("Failed to open conf file: {conf} ({e})")))?
        } else {
            conf.to_string()
        };
        // Splitting a query between a lagging rollup table and raw data (2.4.1's
        // `SplitRollupQuery`) is not implemented: refused rather than ignored.
        if c.get_bool("tsd.rollups.split_query.enable", false) {
            return Err(Error::invalid(
                "tsd.rollups.split_query.enable is not supported: rollup queries read the rollup table over their whole range (RFC 0008); remove the setting or set it to false",
            ));
        }
        let config = RollupConfig::parse(&text, &|name| Aggregator::parse(name).is_ok())
            .map_err(|e| Error::invalid(e.to_string()))?;
        let compute = compute::ComputeSettings::from_config(c, &config)?;
        Ok(Some(RollupSettings {
            config,
            agg_tag_key: c
                .get_str("tsd.rollups.agg_tag_key", "_aggregate")
                .to_string(),
            raw_agg_tag_value: c
                .get_str("tsd.rollups.raw_agg_tag_value", "RAW")
                .to_string(),
            tag_raw: c.get_bool("tsd.rollups.tag_raw", false),
            block_derived: c.get_bool("tsd.rollups.block_derived", true),
            compute,
        }))
    }

    /// Every rollup and pre-aggregate table, each once.
    pub fn tables(&self) -> Vec<String> {
        self.config.tables()
    }

    /// The tables an embedded store keeps grouped (RFC 0012), each with its period and
    /// grace (seconds): the `table` of each tier Hourglass computes
    /// (`tsd.rollups.compute`) whose rows span hours or a day, grouped by
    /// [`TIER_GROUP_ROWS`] row spans, once one row span has passed after the period's end.
    /// Pre-aggregate tables, and tiers written by other jobs, stay as they are.
    pub fn grouped_tables(&self, data_table: &str) -> Vec<(String, u32, u32)> {
        if self.compute.is_none() {
            return Vec::new();
        }
        self.config
            .intervals()
            .iter()
            .filter(|i| !i.default_interval && i.table != data_table)
            .filter_map(|i| {
                let span = match i.unit {
                    SpanUnit::Hour => 3_600u32.checked_mul(i.multiplier)?,
                    SpanUnit::Day => 86_400,
                    SpanUnit::Month | SpanUnit::Year => return None,
                };
                Some((i.table.clone(), span.checked_mul(TIER_GROUP_ROWS)?, span))
            })
            .collect()
    }
}

/// Row spans of a computed tier grouped under one key of an embedded store (RFC 0012): a
/// month of the `1h` tier's day rows.
pub const TIER_GROUP_ROWS: u32 = 32;

/// A rollup or pre-aggregate point as `/api/rollup` and the telnet `rollup` command give it.
#[derive(Debug, Clone)]
pub struct RollupPoint<'a> {
    pub metric: &'a str,
    /// Seconds (milliseconds are refused, as OpenTSDB refuses them).
    pub timestamp: i64,
    pub value: Value,
    pub tags: &'a [(&'a str, &'a str)],
    /// `1h`: one of the configured intervals; none (or empty) for a pre-aggregate at raw
    /// resolution.
    pub interval: Option<&'a str>,
    /// The rollup's aggregator (`sum`), mapped to its id in the qualifier.
    pub aggregator: Option<&'a str>,
    /// The pre-aggregate's aggregator: the point is a pre-aggregate when given (even empty).
    pub group_by: Option<&'a str>,
}

/// Why a rollup point was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RollupRefusal {
    /// The interval is not configured (OpenTSDB's `NoSuchRollupForIntervalException`).
    NoSuchRollup(String),
    /// Anything else: the engine's error.
    Error(Error),
}

impl std::fmt::Display for RollupRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RollupRefusal::NoSuchRollup(m) => f.write_str(m),
            RollupRefusal::Error(e) => e.fmt(f),
        }
    }
}

impl From<Error> for RollupRefusal {
    fn from(e: Error) -> Self {
        RollupRefusal::Error(e)
    }
}

/// What became of a batch of rollup points.
#[derive(Debug, Default)]
pub struct RollupOutcome {
    pub stored: usize,
    /// Refused points by index in the batch.
    pub errors: Vec<(usize, RollupRefusal)>,
    /// The write's ticket, for [`Tsdb::sync_cells`] (0 when nothing was written).
    pub ticket: u64,
}

/// A checked point: the table, row key and cell it is written as.
struct Cell {
    table: String,
    key: Vec<u8>,
    qualifier: Vec<u8>,
    value: Vec<u8>,
}

/// OpenTSDB's text of a tag map in messages (`{k=v, k2=v2}`).
fn tags_text(tags: &[(String, String)]) -> String {
    hourglass_core::put::tag_map_text(tags)
}

/// Java's `Arrays.toString(byte[])`: signed decimal bytes.
fn bytes_text(bytes: &[u8]) -> String {
    let inner: Vec<String> = bytes.iter().map(|b| (*b as i8).to_string()).collect();
    format!("[{}]", inner.join(", "))
}

fn is_derived(aggregator: &str) -> bool {
    aggregator.eq_ignore_ascii_case("avg") || aggregator.eq_ignore_ascii_case("dev")
}

impl Tsdb {
    /// The rollup settings, when rollups are enabled.
    pub fn rollups(&self) -> Option<&RollupSettings> {
        self.settings().rollups.as_deref()
    }

    /// Writes rollup and pre-aggregate points to their tables (RFC 0008), one batched
    /// mutation per table, kept in memory until a store sync covers them (RFC 0001); with
    /// `sync` or `tsd.storage.wal.sync`, such a sync has succeeded before this returns
    /// (shared with concurrent writers). Points refused by the checks are listed; a storage
    /// failure fails the whole batch, and nothing of it is acknowledged; over the memory
    /// budget the batch is refused whole (`Throttled`).
    pub fn add_rollup_points(
        &self,
        points: &[RollupPoint<'_>],
        sync: bool,
    ) -> Result<RollupOutcome> {
        let mut outcome = RollupOutcome::default();
        let mut tables: BTreeMap<String, Vec<RowMutation>> = BTreeMap::new();
        let now = self.settings().clock.now_ms();
        let mut stored = 0;
        for (i, p) in points.iter().enumerate() {
            match self.rollup_cell(p) {
                Ok(cell) => {
                    stored += 1;
                    tables.entry(cell.table).or_default().push(RowMutation {
                        key: cell.key,
                        mutations: vec![Mutation::SetCell {
                            family: DATA_FAMILY.to_string(),
                            qualifier: cell.qualifier,
                            timestamp: Some(now),
                            value: cell.value,
                        }],
                    });
                }
                Err(e) => outcome.errors.push((i, e)),
            }
        }
        outcome.ticket = self.write_cells(
            tables.into_iter().collect(),
            sync || self.settings().wal_sync,
        )?;
        outcome.stored = stored;
        Ok(outcome)
    }

    /// One point checked and keyed as `TSDB.addAggregatePointInternal` does, in its order and
    /// with its words.
    fn rollup_cell(&self, p: &RollupPoint<'_>) -> std::result::Result<Cell, RollupRefusal> {
        let invalid = |m: String| RollupRefusal::Error(Error::invalid(m));
        let Some(rollups) = self.rollups() else {
            return Err(invalid("No rollup or aggregations were configured".into()));
        };
        let interval_name = p.interval.filter(|i| !i.is_empty());
        let group_by = p.group_by;
        let mut tags: Vec<(String, String)> = p
            .tags
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if group_by.is_some_and(str::is_empty) {
            return Err(invalid(format!(
                "Cannot write a group by data point without specifying the aggregation function. Metric={} tags={}",
                p.metric,
                tags_text(&tags)
            )));
        }
        if !p.value.as_f64().is_finite() {
            return Err(invalid(format!(
                "value is NaN or Infinite: {} for metric={} timestamp={}",
                hourglass_core::value::java_double_text(p.value.as_f64()),
                p.metric,
                p.timestamp
            )));
        }
        let flags = p.value.flags();
        let mut value = Vec::with_capacity(8);
        p.value.write(&mut value);
        if p.timestamp < 0 || hourglass_core::time::is_millis(p.timestamp) {
            return Err(invalid(format!(
                "{} timestamp={} when trying to add value={}/{flags} to metric={}, tags={}",
                if p.timestamp < 0 { "negative " } else { "bad" },
                p.timestamp,
                bytes_text(&value),
                p.metric,
                tags_text(&tags)
            )));
        }
        let key_name = rollups.agg_tag_key.as_str();
        let existing = tags.iter().position(|(k, _)| k == key_name);
        let agg_tag_value = match (existing, group_by) {
            (None, None) => {
                if rollups.tag_raw {
                    tags.push((key_name.to_string(), rollups.raw_agg_tag_value.clone()));
                }
                rollups.raw_agg_tag_value.clone()
            }
            (None, Some(g)) => {
                let upper = g.to_uppercase();
                tags.push((key_name.to_string(), upper.clone()));
                upper
            }
            (Some(at), g) => {
                let given = &tags[at].1;
                if !g.is_some_and(|g| given.eq_ignore_ascii_case(g)) {
                    return Err(invalid(format!(
                        "Given tag value for {key_name} of {given} did not match the group by aggregator of {} for {} {}",
                        g.unwrap_or("null"),
                        p.metric,
                        tags_text(&tags)
                    )));
                }
                let upper = g.unwrap_or_default().to_uppercase();
                tags[at].1 = upper.clone();
                upper
            }
        };
        if let Some(g) = group_by {
            if Aggregator::parse(&g.to_lowercase()).is_err() {
                return Err(invalid(format!(
                    "Invalid group by aggregator {g} with metric {} {}",
                    p.metric,
                    tags_text(&tags)
                )));
            }
            if rollups.block_derived && is_derived(&agg_tag_value) {
                return Err(invalid(format!(
                    "Derived group by aggregations are not allowed {g} with metric {} {}",
                    p.metric,
                    tags_text(&tags)
                )));
            }
        }
        let interval: Option<&RollupInterval> = match interval_name {
            None => None,
            Some(name) => Some(
                rollups
                    .config
                    .interval(name)
                    .map_err(|e| RollupRefusal::NoSuchRollup(e.to_string()))?,
            ),
        };
        let aggregator_id = match interval {
            Some(_) => Some(
                rollups
                    .config
                    .id_for(p.aggregator.unwrap_or_default())
                    .map_err(|e| invalid(e.to_string()))?,
            ),
            None => None,
        };
        if let Some(agg) = p.aggregator
            && rollups.block_derived
            && is_derived(agg)
        {
            return Err(invalid(format!(
                "Derived rollup aggregations are not allowed {} with metric {} {}",
                agg.to_uppercase(),
                p.metric,
                tags_text(&tags)
            )));
        }
        let table = match interval {
            None if group_by.is_none() => {
                return Err(invalid(
                    "Interval cannot be null for a non-group by point".into(),
                ));
            }
            None => &rollups.config.default_interval().pre_aggregation_table,
            Some(i) if group_by.is_some() => &i.pre_aggregation_table,
            Some(i) => &i.table,
        };
        let schema = &self.settings().schema;
        if *table == schema.data_table {
            return Err(invalid(format!(
                "rollup points for interval {} would go to the data table {table}, which holds raw points (RFC 0008)",
                interval_name.unwrap_or("(none)")
            )));
        }
        let (base_time, qualifier) = match (interval, aggregator_id) {
            (Some(i), Some(id)) => {
                let base = i
                    .base_time(p.timestamp)
                    .map_err(|e| invalid(e.to_string()))?;
                let q = i
                    .qualifier(p.timestamp, base, flags, id)
                    .map_err(|e| invalid(e.to_string()))?;
                (base, q.to_vec())
            }
            _ => {
                let (base, q) = Qualifier::for_timestamp(p.timestamp, flags)
                    .map_err(|e| invalid(e.to_string()))?;
                (base, q.to_bytes())
            }
        };
        let tag_refs: Vec<(&str, &str)> =
            tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut key = self.writer().series_template(p.metric, &tag_refs)?;
        let at = schema.timestamp_offset();
        if let Some(slot) = key.get_mut(at..at + 4) {
            slot.copy_from_slice(&base_time.to_be_bytes());
        }
        Ok(Cell {
            table: table.clone(),
            key,
            qualifier,
            value,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: &str = r#"{"aggregationIds":{"sum":0},"intervals":[{"table":"r","preAggregationTable":"p","interval":"1h","rowSpan":"1d","defaultInterval":true}]}"#;

    fn config(pairs: &[(&str, &str)]) -> Config {
        let mut c = Config::default();
        for (k, v) in pairs {
            c.set(k, v);
        }
        c
    }

    #[test]
    fn settings_read_inline_json_or_a_json_file_with_opentsdbs_defaults() {
        assert_eq!(RollupSettings::from_config(&config(&[])).unwrap(), None);
        let on = |conf: &str| {
            RollupSettings::from_config(&config(&[
                ("tsd.rollups.enable", "true"),
                ("tsd.rollups.config", conf),
            ]))
        };
        let inline = on(JSON).unwrap().unwrap();
        assert_eq!(inline.tables(), ["r", "p"]);
        assert_eq!(
            (
                inline.agg_tag_key.as_str(),
                inline.raw_agg_tag_value.as_str(),
                inline.tag_raw,
                inline.block_derived,
            ),
            ("_aggregate", "RAW", false, true)
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rollups.json");
        std::fs::write(&path, JSON).unwrap();
        let from_file = on(path.to_str().unwrap()).unwrap().unwrap();
        assert_eq!(from_file, inline);

        let split = RollupSettings::from_config(&config(&[
            ("tsd.rollups.enable", "true"),
            ("tsd.rollups.config", JSON),
            ("tsd.rollups.split_query.enable", "true"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(
            split.starts_with("tsd.rollups.split_query.enable is not supported"),
            "{split}"
        );
        assert_eq!(
            on("").unwrap_err().to_string(),
            "Rollups were enabled but 'tsd.rollups.config' is null or empty."
        );
        assert!(
            on("/nonexistent/rollups.json")
                .unwrap_err()
                .to_string()
                .starts_with("Failed to open conf file: /nonexistent/rollups.json")
        );
        assert_eq!(
            on(r#"{"aggregationIds":{"sum":0},"intervals":[{"table":"r","preAggregationTable":"p","interval":"1h","rowSpan":"1d"}]}"#)
                .unwrap_err()
                .to_string(),
            "None of the rollup intervals were marked as the \"default\"."
        );
    }
}
