//! Retention (RFC 0008 phase 4): `tsd.storage.retention` for raw points and a `retention`
//! per rollup interval. Rows wholly before their cutoff (`now - retention`) are removed by
//! the upkeep's sweep; queries drop what is before the cutoff whether or not the sweep
//! passed, so answers never depend on it.

use hourglass_core::config::Config;
use hourglass_core::rowkey::{base_time_of, salt_prefixes};
use hourglass_storage::{Mutation, ReadOptions, RowMutation, ScanRequest};

use super::compute::{STATE_FAMILY, Upkeep, state_table};
use crate::{Error, Result, Settings, Tsdb};

/// Rows deleted per batched mutation.
const BATCH_ROWS: usize = 1_000;
const HOUR: i64 = 3_600;

/// `tsd.storage.retention` in ms, refused with a clear error when it is no duration.
pub fn raw_retention(c: &Config) -> Result<Option<i64>> {
    match c.get("tsd.storage.retention").map(str::trim) {
        None | Some("") => Ok(None),
        Some(text) => hourglass_core::time::parse_duration_ms(text)
            .map(Some)
            .map_err(|e| Error::invalid(format!("tsd.storage.retention: {e}"))),
    }
}

/// Refuses a `retention` on an interval whose table is the data table (raw points' retention
/// is `tsd.storage.retention`).
pub fn check(settings: &Settings) -> Result<()> {
    let Some(rollups) = settings.rollups.as_deref() else {
        return Ok(());
    };
    for i in rollups.config.intervals() {
        if i.retention_ms.is_some() && i.table == settings.schema.data_table {
            return Err(Error::invalid(format!(
                "rollup interval {}: its table {} is the data table; set tsd.storage.retention for raw points instead of a retention on the interval",
                i.interval, i.table
            )));
        }
    }
    Ok(())
}

impl Tsdb {
    /// The cutoff (s) of a rollup table: cells before it are expired (its interval's
    /// `retention`).
    pub fn rollup_cutoff(&self, table: &str, now_ms: i64) -> Option<i64> {
        let rollups = self.rollups()?;
        rollups
            .config
            .intervals()
            .iter()
            .find(|i| i.table == table || i.pre_aggregation_table == table)
            .and_then(|i| i.retention_ms)
            .map(|r| (now_ms - r).div_euclid(1000))
    }

    /// Removes the rows wholly before their cutoff: data rows whose hour ended, rollup rows
    /// whose row span ended, dirty hours of expired raw hours.
    pub(crate) fn sweep_retention(&self, upkeep: &Upkeep, now_ms: i64) -> Result<()> {
        let schema = &self.settings().schema;
        let metrics = crate::index::rebuild::all_metrics(self)?;
        if let Some(cut) = self.raw_cutoff(now_ms) {
            self.delete_before(upkeep, &schema.data_table, &metrics, cut, &|base| {
                base + HOUR
            })?;
            if upkeep.compute.is_some() {
                let table = state_table(schema);
                let mut stale = Vec::new();
                for row in self.store().scan(&table, &ScanRequest::prefix(b"d"))? {
                    let row = row?;
                    let hour = row
                        .key
                        .get(1..5)
                        .and_then(|b| <[u8; 4]>::try_from(b).ok())
                        .map(u32::from_be_bytes);
                    if hour.is_some_and(|h| i64::from(h) + HOUR <= cut) {
                        stale.push(RowMutation {
                            key: row.key,
                            mutations: vec![Mutation::DeleteFamily {
                                family: STATE_FAMILY.to_string(),
                            }],
                        });
                    }
                }
                if !stale.is_empty() {
                    self.store().mutate_rows(&table, &stale)?;
                }
            }
        }
        if let Some(rollups) = self.rollups() {
            for i in rollups.config.intervals() {
                let Some(r) = i.retention_ms else { continue };
                let cut = (now_ms - r).div_euclid(1000);
                for table in [&i.table, &i.pre_aggregation_table] {
                    if *table == schema.data_table {
                        continue;
                    }
                    self.delete_before(upkeep, table, &metrics, cut, &|base| {
                        i.span_end(base as u32)
                    })?;
                }
            }
        }
        Ok(())
    }

    /// Deletes the rows of `table` whose span (`end_of(base)`) ends at or before `cut`,
    /// metric by metric and salt bucket by salt bucket, reading keys only.
    fn delete_before(
        &self,
        upkeep: &Upkeep,
        table: &str,
        metrics: &[Vec<u8>],
        cut: i64,
        end_of: &dyn Fn(i64) -> i64,
    ) -> Result<()> {
        if cut <= 0 {
            return Ok(());
        }
        let schema = &self.settings().schema;
        let stop = u32::try_from(cut).unwrap_or(u32::MAX);
        let mut deleted = 0u64;
        for metric in metrics {
            for salt in salt_prefixes(schema) {
                let prefix = [salt.as_slice(), metric.as_slice()].concat();
                let request = ScanRequest {
                    read: ReadOptions::keys_only(),
                    ..ScanRequest::range(
                        [prefix.as_slice(), &0u32.to_be_bytes()].concat(),
                        Some([prefix.as_slice(), &stop.to_be_bytes()].concat()),
                    )
                };
                let mut batch = Vec::new();
                for row in self.store().scan(table, &request)? {
                    let row = row?;
                    let Some(base) = base_time_of(schema, &row.key) else {
                        continue;
                    };
                    if end_of(i64::from(base)) > cut {
                        continue;
                    }
                    batch.push(RowMutation {
                        key: row.key,
                        mutations: vec![Mutation::DeleteRow],
                    });
                    if batch.len() >= BATCH_ROWS {
                        deleted += batch.len() as u64;
                        self.store().mutate_rows(table, &batch)?;
                        batch.clear();
                    }
                }
                if !batch.is_empty() {
                    deleted += batch.len() as u64;
                    self.store().mutate_rows(table, &batch)?;
                }
            }
        }
        if deleted > 0 {
            *upkeep
                .stats
                .rows_deleted
                .lock()
                .entry(table.to_string())
                .or_default() += deleted;
            tracing::info!(table, rows = deleted, "retention removed expired rows");
        }
        Ok(())
    }
}
