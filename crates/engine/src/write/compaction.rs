//! Compaction: rows written while their hour was open get one compacted cell once it
//! closes (tracked as (prefix, hour) pairs that survive restarts), and rows named by a tool
//! are compacted on demand.

use hourglass_core::compact::{self, Point};
use hourglass_core::schema::DATA_FAMILY;
use hourglass_core::time::MAX_TIMESPAN;
use hourglass_storage::{Mutation, ReadOptions, RowMutation, ScanRequest};
use std::sync::atomic::Ordering;

use super::open_hours::{self, OpenHours};
use super::{COMPACTION_GRACE_SECS, FLUSH_BATCH_ROWS, FLUSH_CHUNK_ROWS, Writer};

/// Stored cell bytes of the rows in one compaction batch.
const COMPACT_BATCH_BYTES: usize = 8 << 20;
use crate::uid::format_signed_bytes;
use crate::{Error, Result, rows};

impl Writer {
    /// Saves the compaction bookkeeping when it changed (in the log's directory).
    pub(super) fn save_open_hours(&self, open: &mut OpenHours) -> Result<()> {
        if !open.dirty {
            return Ok(());
        }
        if let Some(files) = &self.files {
            files
                .write_named(open_hours::FILE_NAME, &open.encode())
                .map_err(|e| {
                    Error::Unavailable(format!(
                        "cannot save the compaction bookkeeping ({}): {e}",
                        open_hours::FILE_NAME
                    ))
                })?;
        }
        open.dirty = false;
        Ok(())
    }

    /// Compacts the rows of every (metric, hour) written while the hour was open, once it
    /// has closed. A pair is forgotten only once its rows are compacted; failures are
    /// logged and retried at the next flush.
    pub(super) fn compact_closed_hours(&self, now_secs: i64) {
        if !self.settings.enable_compaction {
            return;
        }
        let due = self.open.lock().due(|h| hour_closed(h, now_secs));
        for pair in due {
            match self.compact_hour(&pair.0, pair.1) {
                Ok(_) => self.open.lock().remove(&pair),
                Err(e) => {
                    self.stats.compaction_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(error = %e, hour = pair.1, "compaction failed; retried at the next flush");
                    break;
                }
            }
        }
        let mut open = self.open.lock();
        if let Err(e) = self.save_open_hours(&mut open) {
            tracing::error!(error = %e, "compaction bookkeeping not saved; retried at the next flush");
        }
    }

    /// Rewrites each row of one metric and hour (under one row prefix) as one compacted cell.
    fn compact_hour(&self, prefix: &[u8], hour: u32) -> Result<usize> {
        let table = &self.settings.schema.data_table;
        let key_at = |h: u64| {
            let mut k = prefix.to_vec();
            k.extend_from_slice(&(h as u32).to_be_bytes());
            k
        };
        let end = if u64::from(hour) + u64::from(MAX_TIMESPAN) > u64::from(u32::MAX) {
            let mut k = prefix.to_vec();
            k.extend_from_slice(&[0xFF; 5]);
            k
        } else {
            key_at(u64::from(hour) + u64::from(MAX_TIMESPAN))
        };
        let request = ScanRequest {
            start: key_at(u64::from(hour)),
            end: Some(end),
            read: ReadOptions::family(DATA_FAMILY),
            ..ScanRequest::default()
        };
        let mut rewritten = 0;
        let mut batch = Vec::new();
        let mut batch_bytes = 0;
        for row in self.store.scan(table, &request)? {
            let row = row?;
            if let Some(mutations) = self.compaction_mutations(&row.key, Some(&row), &[])? {
                batch_bytes += row.cells.iter().map(|c| c.value.len()).sum::<usize>();
                batch.push(RowMutation {
                    key: row.key.clone(),
                    mutations,
                });
            }
            // Few large batches: each is one storage write (see `FLUSH_CHUNK_POINTS`).
            if batch.len() >= FLUSH_CHUNK_ROWS || batch_bytes >= COMPACT_BATCH_BYTES {
                self.store.mutate_rows(table, &batch)?;
                rewritten += batch.len();
                batch.clear();
                batch_bytes = 0;
            }
        }
        if !batch.is_empty() {
            self.store.mutate_rows(table, &batch)?;
            rewritten += batch.len();
        }
        Ok(rewritten)
    }

    /// Rewrites each row of `keys` as one compacted cell (reading rows a batch at a time).
    /// Returns how many rows were rewritten. The caller holds off flushes.
    pub(crate) fn compact_keys(&self, keys: &[Vec<u8>]) -> Result<usize> {
        let table = &self.settings.schema.data_table;
        let mut rewritten = 0;
        for chunk in keys.chunks(FLUSH_BATCH_ROWS) {
            let stored = self
                .store
                .get_rows(table, chunk, &ReadOptions::family(DATA_FAMILY))?;
            let mut batch = Vec::with_capacity(chunk.len());
            for (key, row) in chunk.iter().zip(stored) {
                if let Some(mutations) = self.compaction_mutations(key, row.as_ref(), &[])? {
                    batch.push(RowMutation {
                        key: key.clone(),
                        mutations,
                    });
                }
            }
            if !batch.is_empty() {
                self.store.mutate_rows(table, &batch)?;
                rewritten += batch.len();
            }
        }
        Ok(rewritten)
    }

    /// The mutations that leave `key` with one compacted cell holding its stored points and
    /// `new_points`. `None` when nothing needs writing. On conflicting duplicates without
    /// `fix_duplicates`, the stored cells stay as they are (as OpenTSDB's compaction aborts)
    /// and only the new points are written, in a cell of their own.
    pub(crate) fn compaction_mutations(
        &self,
        key: &[u8],
        row: Option<&hourglass_storage::Row>,
        new_points: &[Point],
    ) -> Result<Option<Vec<Mutation>>> {
        // No stored row and new points in time order with no repeated time (as a flush
        // passes them): they are the row's one cell, with nothing to decode or sort.
        if row.is_none()
            && new_points
                .windows(2)
                .all(|w| w[0].offset_ms() < w[1].offset_ms())
        {
            if new_points.is_empty() {
                return Ok(None);
            }
            let (q, v) = compact::encode_cell(new_points);
            self.stats.rows_compacted.fetch_add(1, Ordering::Relaxed);
            return Ok(Some(vec![Mutation::set_at(
                DATA_FAMILY,
                q,
                self.cell_timestamp(),
                v,
            )]));
        }
        let decoded = rows::decode_row(row, new_points)?;
        if let Some(d) = &decoded.duplicate {
            if !self.settings.fix_duplicates {
                self.stats.compaction_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    "Duplicate timestamp for key={}, ms_offset={}, older={}, newer={}; set tsd.storage.fix_duplicates=true to fix automatically or run Fsck",
                    format_signed_bytes(key),
                    d.offset_ms,
                    d.older.bits,
                    d.newer.bits
                );
                if new_points.is_empty() {
                    return Ok(None);
                }
                let (q, v) = compact::encode_cell(new_points);
                return Ok(Some(vec![Mutation::set_at(
                    DATA_FAMILY,
                    q,
                    self.cell_timestamp(),
                    v,
                )]));
            }
            self.note_duplicate(key, d);
        }
        if decoded.points.is_empty() {
            return Ok(None);
        }
        let (q, v) = compact::encode_cell(&decoded.points);
        if decoded.data_qualifiers.len() == 1
            && decoded.data_qualifiers[0] == q
            && new_points.is_empty()
        {
            return Ok(None); // already one cell holding exactly these points
        }
        let mut mutations = vec![Mutation::set_at(
            DATA_FAMILY,
            q.clone(),
            self.cell_timestamp(),
            v,
        )];
        for old in decoded.data_qualifiers {
            // The append column stays: another TSD may be appending to it right now (its
            // points, repeated in the compacted cell, read back once).
            if old != q && old != compact::APPEND_QUALIFIER {
                mutations.push(Mutation::delete(DATA_FAMILY, old));
            }
        }
        self.stats.rows_compacted.fetch_add(1, Ordering::Relaxed);
        Ok(Some(mutations))
    }
}

/// Whether the hour starting at `base_time` is over (plus a grace for late points).
pub(super) fn hour_closed(base_time: u32, now_secs: i64) -> bool {
    i64::from(base_time) + i64::from(MAX_TIMESPAN) + COMPACTION_GRACE_SECS <= now_secs
}
