//! Histogram points (RFC 0008, phase 3): `tsd.core.histograms.config` and the write path
//! of OpenTSDB 2.4.1's `TSDB.addHistogramPoint`.
//!
//! A histogram point is one cell of the data table (qualifier `06 | offset`, value the codec
//! id and the codec's bytes, `hourglass_core::histogram`), in the row of its series and
//! hour, beside the row's data cells. A request's cells are written as one batched mutation,
//! straight to the store: 2.4.1 writes them with a plain put, and compaction leaves them
//! alone (it rewrites data cells only). The batch is acknowledged once the store applied it
//! (and synced it, with `?sync` or `tsd.storage.wal.sync`).

use hourglass_core::config::Config;
use hourglass_core::histogram::{self, HistogramConfig};
use hourglass_core::schema::DATA_FAMILY;
use hourglass_storage::{Mutation, RowMutation};

use crate::{Error, Result, Tsdb};

/// `tsd.core.histograms.config`, when set: a path when it ends in `.json` (the file is
/// read), else the JSON itself; unset or empty leaves histograms off.
pub fn settings_from_config(c: &Config) -> Result<Option<HistogramConfig>> {
    let conf = c.get_str("tsd.core.histograms.config", "");
    if conf.is_empty() {
        return Ok(None);
    }
    let text = if conf.ends_with(".json") {
        std::fs::read_to_string(conf).map_err(|e| {
            Error::invalid(format!("Unable to open plugin config file: {conf} ({e})"))
        })?
    } else {
        conf.to_string()
    };
    let config = HistogramConfig::parse(&text).map_err(|e| Error::invalid(e.to_string()))?;
    // Histogram cells are written outside the write path that maintains the tag index: a
    // series holding only histograms would have no entry, and queries reading the index
    // would miss it (RFC 0008, phase 3).
    if c.get_bool("tsd.index.enable", false) {
        return Err(Error::invalid(
            "tsd.core.histograms.config cannot be used with tsd.index.enable = true: histogram series are not entered in the tag index (RFC 0008); turn one of them off",
        ));
    }
    Ok(Some(config))
}

/// A histogram point, its value already encoded with its codec id first.
#[derive(Debug, Clone)]
pub struct HistogramPoint<'a> {
    pub metric: &'a str,
    /// Seconds or milliseconds.
    pub timestamp: i64,
    pub value: Vec<u8>,
    pub tags: &'a [(&'a str, &'a str)],
}

/// What became of a batch of histogram points.
#[derive(Debug, Default)]
pub struct HistogramOutcome {
    pub stored: usize,
    /// Refused points by index in the batch.
    pub errors: Vec<(usize, Error)>,
    /// The write's ticket, for [`Tsdb::sync_cells`] (0 when nothing was written).
    pub ticket: u64,
}

/// OpenTSDB's text of a tag map in messages (`{k=v, k2=v2}`).
fn tags_text(tags: &[(&str, &str)]) -> String {
    hourglass_core::put::tag_map_text(tags)
}

/// Java's `Arrays.toString(byte[])`: signed decimal bytes.
fn bytes_text(bytes: &[u8]) -> String {
    let inner: Vec<String> = bytes.iter().map(|b| (*b as i8).to_string()).collect();
    format!("[{}]", inner.join(", "))
}

impl Tsdb {
    /// The histogram codecs, when `tsd.core.histograms.config` is set.
    pub fn histograms(&self) -> Option<&HistogramConfig> {
        self.settings().histograms.as_deref()
    }

    /// Writes histogram points to the data table, one batched mutation kept in memory until
    /// a store sync covers it (RFC 0001); with `sync` or `tsd.storage.wal.sync`, such a sync
    /// has succeeded before this returns (shared with concurrent writers). Points refused by
    /// the checks are listed; a storage failure fails the whole batch, and nothing of it is
    /// acknowledged; over the memory budget the batch is refused whole (`Throttled`).
    pub fn add_histogram_points(
        &self,
        points: &[HistogramPoint<'_>],
        sync: bool,
    ) -> Result<HistogramOutcome> {
        let mut outcome = HistogramOutcome::default();
        let mut rows = Vec::with_capacity(points.len());
        let now = self.settings().clock.now_ms();
        for (i, p) in points.iter().enumerate() {
            match self.histogram_cell(p) {
                Ok((key, qualifier)) => rows.push(RowMutation {
                    key,
                    mutations: vec![Mutation::SetCell {
                        family: DATA_FAMILY.to_string(),
                        qualifier,
                        timestamp: Some(now),
                        value: p.value.clone(),
                    }],
                }),
                Err(e) => outcome.errors.push((i, e)),
            }
        }
        outcome.stored = rows.len();
        if !rows.is_empty() {
            let written: Vec<(Vec<u8>, u64)> = rows.iter().map(|r| (r.key.clone(), 1)).collect();
            outcome.ticket = self.write_cells(
                vec![(self.settings().schema.data_table.clone(), rows)],
                sync || self.settings().wal_sync,
            )?;
            // Series meta data as for raw points (2.4.1's `storeIntoDB` tracks both kinds):
            // `ts_ctr`, `ts_meta` and its counter with `tsd.core.meta.*`.
            self.writer().track_written(&written);
        }
        Ok(outcome)
    }

    /// One point checked and keyed as `TSDB.addHistogramPoint` does, in its order and with
    /// its words: the row key and the qualifier.
    fn histogram_cell(&self, p: &HistogramPoint<'_>) -> Result<(Vec<u8>, Vec<u8>)> {
        if self.histograms().is_none() {
            return Err(Error::invalid(
                "Histogram storage has not been enabled. Check the 'tsd.core.histograms.config' configuration.",
            ));
        }
        if p.value.is_empty() {
            return Err(Error::invalid(format!(
                "The histogram raw data is invalid: {}",
                histogram::pretty(&p.value)
            )));
        }
        // A row's base hour is 4 bytes of seconds, as for data points.
        if hourglass_core::time::check_timestamp(p.timestamp).is_err() {
            return Err(Error::invalid(format!(
                "{} timestamp={} when trying to add value={}/0 to metric={}, tags={}",
                if p.timestamp < 0 { "negative " } else { "bad" },
                p.timestamp,
                bytes_text(&p.value),
                p.metric,
                tags_text(p.tags)
            )));
        }
        let (base_time, qualifier) =
            histogram::qualifier(p.timestamp).map_err(|e| Error::invalid(e.to_string()))?;
        let mut key = self.writer().series_template(p.metric, p.tags)?;
        let at = self.settings().schema.timestamp_offset();
        if let Some(slot) = key.get_mut(at..at + 4) {
            slot.copy_from_slice(&base_time.to_be_bytes());
        }
        Ok((key, qualifier))
    }
}
