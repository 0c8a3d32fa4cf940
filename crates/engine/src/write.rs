//! The write path. A batch of points is validated and resolved to row keys, logged as one
//! write-ahead-log entry, and added to in-memory row buffers; then it is acknowledged. A
//! flush turns each buffered row into one cell: a compacted cell merged with what the row
//! already holds when its hour is over, else a partial compacted cell (OpenTSDB readers
//! handle several data cells per row). After the flush the log entries it covered are
//! deleted. So the store sees about one write per row per flush, not one per point.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Instant;

use hourglass_core::compact::{self, Point};
use hourglass_core::names::validate_name;
use hourglass_core::qualifier::Qualifier;
use hourglass_core::rowkey::{self, SeriesKey};
use hourglass_core::schema::DATA_FAMILY;
use hourglass_core::time::MAX_TIMESPAN;
use hourglass_core::uid::UidKind;
use hourglass_core::value::Value;
use hourglass_storage::{Mutation, ReadOptions, RowMutation, Store, now_ms};
use parking_lot::{Mutex, RwLock};

use crate::uid::{UidRegistry, format_signed_bytes};
use crate::{Error, Result, Settings, rows, wal};

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Rows per storage batch during a flush.
const FLUSH_BATCH_ROWS: usize = 1000;
/// Seconds after an hour ends before its rows are compacted (late points still arrive).
const COMPACTION_GRACE_SECS: i64 = 1;

/// A point as a client sends it.
#[derive(Debug, Clone, Copy)]
pub struct IncomingPoint<'a> {
    pub metric: &'a str,
    /// Seconds, or milliseconds when it does not fit 32 bits.
    pub timestamp: i64,
    pub value: Value,
    pub tags: &'a [(&'a str, &'a str)],
}

/// What became of a batch: points stored and the errors of the others, by index.
#[derive(Debug, Default)]
pub struct BatchOutcome {
    pub stored: usize,
    pub errors: Vec<(usize, Error)>,
}

/// Counters of the write path, for `/api/stats`.
#[derive(Debug, Default)]
pub struct WriteStats {
    pub points_stored: AtomicU64,
    pub points_rejected: AtomicU64,
    pub flushes: AtomicU64,
    pub rows_written: AtomicU64,
    pub rows_compacted: AtomicU64,
    pub duplicates: AtomicU64,
    pub compaction_errors: AtomicU64,
    /// Duration of the last flush, in microseconds.
    pub last_flush_micros: AtomicU64,
    /// Longest flush so far, in microseconds.
    pub max_flush_micros: AtomicU64,
}

/// Interned series: row-key templates (salted, base hour zero) by id.
#[derive(Debug, Default)]
struct SeriesCache {
    by_text: Map<Box<str>, u32>,
    by_template: Map<Box<[u8]>, u32>,
    templates: Vec<Box<[u8]>>,
}

impl SeriesCache {
    fn intern(&mut self, template: Vec<u8>) -> u32 {
        if let Some(id) = self.by_template.get(template.as_slice()) {
            return *id;
        }
        let id = self.templates.len() as u32;
        let template: Box<[u8]> = template.into();
        self.by_template.insert(template.clone(), id);
        self.templates.push(template);
        id
    }
}

/// Points waiting for a flush, by row, in arrival order. A row is `series id << 32 | base
/// hour`. Each series' current hour sits in a dense slot indexed by series id (no hashing on
/// the hot path); points for any other hour of the series go to a map.
#[derive(Debug, Default)]
struct Buffer {
    current: Vec<(u32, Vec<Point>)>,
    other: Map<u64, Vec<Point>>,
    points: usize,
    oldest: Option<Instant>,
}

impl Buffer {
    fn push(&mut self, row: u64, p: Point) {
        let (series, base) = ((row >> 32) as usize, row as u32);
        if series >= self.current.len() {
            self.current.resize_with(series + 1, Default::default);
        }
        let slot = &mut self.current[series];
        if slot.1.is_empty() {
            slot.0 = base;
        }
        if slot.0 == base {
            slot.1.push(p);
        } else {
            self.other.entry(row).or_default().push(p);
        }
        self.points += 1;
        self.oldest.get_or_insert_with(Instant::now);
    }

    /// Every buffered row with its points.
    fn into_rows(self) -> impl Iterator<Item = (u64, Vec<Point>)> {
        let current = self
            .current
            .into_iter()
            .enumerate()
            .filter(|(_, (_, points))| !points.is_empty())
            .map(|(series, (base, points))| (((series as u64) << 32) | u64::from(base), points));
        current.chain(self.other)
    }
}

#[derive(Debug)]
struct LogState {
    buffer: Buffer,
    log: Option<wal::Log>,
    next_seq: u64,
}

#[derive(Debug)]
pub(crate) struct Writer {
    store: Arc<dyn Store>,
    settings: Settings,
    uids: Arc<UidRegistry>,
    series: RwLock<SeriesCache>,
    state: Mutex<LogState>,
    flush_lock: Mutex<()>,
    /// Rows written while their hour was open: compacted once it closes.
    open_rows: Mutex<HashSet<Vec<u8>>>,
    last_cell_ts: AtomicI64,
    /// Series tracking in the meta table (`tsd.core.meta.*`), when on.
    tracker: Option<crate::meta::Tracker>,
    pub(crate) stats: WriteStats,
}

/// The series cache key of a point: metric and tags as sent, `\0`-separated.
fn series_text(p: &IncomingPoint<'_>, text: &mut String) {
    text.clear();
    text.push_str(p.metric);
    for (k, v) in p.tags {
        text.push('\0');
        text.push_str(k);
        text.push('\0');
        text.push_str(v);
    }
}

fn tags_text(tags: &[(&str, &str)]) -> String {
    let inner: Vec<String> = tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{{{}}}", inner.join(", "))
}

impl Writer {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        settings: Settings,
        uids: Arc<UidRegistry>,
        log: Option<wal::Log>,
    ) -> Result<Writer> {
        let tracker =
            crate::meta::Tracker::new(Arc::clone(&store), settings.schema.clone(), settings.meta);
        let writer = Writer {
            store,
            settings,
            tracker,
            uids,
            series: RwLock::new(SeriesCache::default()),
            state: Mutex::new(LogState {
                buffer: Buffer::default(),
                log,
                next_seq: 1,
            }),
            flush_lock: Mutex::new(()),
            open_rows: Mutex::new(HashSet::new()),
            last_cell_ts: AtomicI64::new(0),
            stats: WriteStats::default(),
        };
        Ok(writer)
    }

    /// Replays log entries left by a previous process into the buffer.
    pub(crate) fn recover(&self, entries: &[(u64, Vec<u8>)]) -> Result<usize> {
        let mut state = self.state.lock();
        let mut series = self.series.write();
        let mut replayed = 0usize;
        for (seq, entry) in entries {
            let mut points = Vec::new();
            wal::decode_entry(entry, |key, p| points.push((key.to_vec(), p)))?;
            for (key, p) in points {
                let Some(base) = rowkey::base_time_of(&self.settings.schema, &key) else {
                    return Err(Error::Corrupt(
                        "write-ahead log holds a short row key".into(),
                    ));
                };
                let mut template = key;
                let at = self.settings.schema.timestamp_offset();
                template[at..at + 4].fill(0);
                let id = series.intern(template);
                state
                    .buffer
                    .push((u64::from(id) << 32) | u64::from(base), p);
                replayed += 1;
            }
            state.next_seq = state.next_seq.max(seq + 1);
        }
        Ok(replayed)
    }

    /// Resolves a point's series to an interned id, creating UIDs as the settings allow.
    fn resolve_series(&self, p: &IncomingPoint<'_>, text: &str) -> Result<u32> {
        if let Some(id) = self.series.read().by_text.get(text) {
            return Ok(*id);
        }
        let s = &self.settings;
        if p.tags.is_empty() {
            return Err(Error::invalid(format!(
                "Need at least one tag (metric={}, tags={{}})",
                p.metric
            )));
        }
        if p.tags.len() > s.schema.max_tags {
            return Err(Error::invalid(format!(
                "Too many tags: {} maximum allowed: {}, tags: {}",
                p.tags.len(),
                s.schema.max_tags,
                tags_text(p.tags)
            )));
        }
        validate_name("metric name", p.metric, &s.allow_special_chars)?;
        for (k, v) in p.tags {
            validate_name(
                &format!("tag name with value [{v}]"),
                k,
                &s.allow_special_chars,
            )?;
            validate_name(
                &format!("tag value with key [{k}]"),
                v,
                &s.allow_special_chars,
            )?;
        }
        for (i, (k, _)) in p.tags.iter().enumerate() {
            if p.tags[..i].iter().any(|(other, _)| other == k) {
                return Err(Error::invalid(format!(
                    "duplicate tag: {k}, tags={}",
                    tags_text(p.tags)
                )));
            }
        }
        let metric = if s.auto_create_metrics {
            self.uids.get_or_create_id(UidKind::Metric, p.metric)?
        } else {
            self.uids.get_id(UidKind::Metric, p.metric)?
        };
        let mut tags = Vec::with_capacity(p.tags.len());
        for (k, v) in p.tags {
            let k = if s.auto_create_tagks {
                self.uids.get_or_create_id(UidKind::TagKey, k)?
            } else {
                self.uids.get_id(UidKind::TagKey, k)?
            };
            let v = if s.auto_create_tagvs {
                self.uids.get_or_create_id(UidKind::TagValue, v)?
            } else {
                self.uids.get_id(UidKind::TagValue, v)?
            };
            tags.push((k, v));
        }
        let template = rowkey::encode_row_key(&s.schema, &SeriesKey::new(metric, tags), 0);
        let mut series = self.series.write();
        let id = series.intern(template);
        series.by_text.insert(text.into(), id);
        Ok(id)
    }

    fn check_point(&self, p: &IncomingPoint<'_>) -> Result<(u32, Qualifier)> {
        if let Value::Float(_) | Value::Double(_) = p.value {
            let f = p.value.as_f64();
            if !f.is_finite() {
                return Err(Error::invalid(format!(
                    "value is NaN or Infinite: {} for metric={} timestamp={}",
                    hourglass_core::value::java_double_text(f),
                    p.metric,
                    p.timestamp
                )));
            }
        }
        Qualifier::for_timestamp(p.timestamp, p.value.flags()).map_err(|_| {
            let mut bytes = Vec::new();
            p.value.write(&mut bytes);
            Error::invalid(format!(
                "{} timestamp={} when trying to add value={}/{} to metric={}, tags={}",
                if p.timestamp < 0 { "negative " } else { "bad" },
                p.timestamp,
                format_signed_bytes(&bytes),
                p.value.flags(),
                p.metric,
                tags_text(p.tags)
            ))
        })
    }

    /// Validates, logs and buffers a batch. Good points are stored even when others fail.
    pub(crate) fn add_points(&self, points: &[IncomingPoint<'_>]) -> BatchOutcome {
        let mut outcome = BatchOutcome::default();
        let mut resolved: Vec<(u64, Point)> = Vec::with_capacity(points.len());
        let mut text = String::new();
        // Known series under one read lock for the whole batch.
        let known: Vec<Option<u32>> = {
            let series = self.series.read();
            points
                .iter()
                .map(|p| {
                    series_text(p, &mut text);
                    series.by_text.get(text.as_str()).copied()
                })
                .collect()
        };
        for (i, p) in points.iter().enumerate() {
            let result = self.check_point(p).and_then(|(base, q)| {
                let id = match known[i] {
                    Some(id) => id,
                    None => {
                        series_text(p, &mut text);
                        self.resolve_series(p, &text)?
                    }
                };
                Ok((id, base, q))
            });
            match result {
                Ok((id, base, q)) => resolved.push((
                    (u64::from(id) << 32) | u64::from(base),
                    Point::new(q, p.value.to_bits()),
                )),
                Err(e) => outcome.errors.push((i, e)),
            }
        }
        if let Err(e) = self.log_and_buffer(&resolved) {
            tracing::error!(error = %e, "write-ahead log append failed");
            let n = outcome.errors.len();
            outcome
                .errors
                .extend(points.iter().enumerate().map(|(i, _)| (i, e.clone())));
            outcome.errors.sort_by_key(|(i, _)| *i);
            outcome.errors.dedup_by_key(|(i, _)| *i);
            debug_assert!(outcome.errors.len() >= n);
            self.stats
                .points_rejected
                .fetch_add(points.len() as u64, Ordering::Relaxed);
            return outcome;
        }
        outcome.stored = resolved.len();
        self.stats
            .points_stored
            .fetch_add(resolved.len() as u64, Ordering::Relaxed);
        self.stats
            .points_rejected
            .fetch_add(outcome.errors.len() as u64, Ordering::Relaxed);
        outcome
    }

    fn log_and_buffer(&self, resolved: &[(u64, Point)]) -> Result<()> {
        if resolved.is_empty() {
            return Ok(());
        }
        let mut state = self.state.lock();
        if state.log.is_some() {
            let mut entry = wal::EntryBuilder::default();
            let series = self.series.read();
            let at = self.settings.schema.timestamp_offset();
            let mut key = Vec::new();
            // Consecutive points of one row share its entry; no hashing on this path.
            let mut last: Option<(u64, u64)> = None;
            for (row, p) in resolved {
                let idx = match last {
                    Some((r, i)) if r == *row => i,
                    _ => {
                        key.clear();
                        key.extend_from_slice(&series.templates[(row >> 32) as usize]);
                        key[at..at + 4].copy_from_slice(&(*row as u32).to_be_bytes());
                        let i = entry.add_row(&key);
                        last = Some((*row, i));
                        i
                    }
                };
                entry.add_point(idx, *p);
            }
            drop(series);
            if !entry.is_empty() {
                let seq = state.next_seq;
                let frame = entry.finish_framed(seq);
                if let Some(log) = state.log.as_mut() {
                    log.append_frame(seq, &frame, self.settings.wal_sync)?;
                }
                state.next_seq += 1;
            }
        }
        for (row, p) in resolved {
            state.buffer.push(*row, *p);
        }
        Ok(())
    }

    /// Whether the buffer should be flushed now.
    pub(crate) fn flush_due(&self) -> bool {
        let state = self.state.lock();
        state.buffer.points >= self.settings.max_buffered_points
            || state
                .buffer
                .oldest
                .is_some_and(|t| t.elapsed() >= self.settings.flush_interval)
            || (!self.open_rows.lock().is_empty() && state.buffer.points == 0)
    }

    /// Whether acknowledged points are logged (else they live only in the buffers).
    pub(crate) fn has_log(&self) -> bool {
        self.state.lock().log.is_some()
    }

    /// Fsyncs the log.
    pub(crate) fn sync_log(&self) -> Result<()> {
        match self.state.lock().log.as_ref() {
            Some(log) => log.sync(),
            None => Ok(()),
        }
    }

    pub(crate) fn buffered_points(&self) -> usize {
        self.state.lock().buffer.points
    }

    /// Copies of the buffered (not yet flushed) rows whose key satisfies `wanted`, with their
    /// points in arrival order. Queries merge these with the stored rows.
    pub(crate) fn buffered_rows(
        &self,
        wanted: impl Fn(&[u8]) -> bool,
    ) -> Vec<(Vec<u8>, Vec<Point>)> {
        let state = self.state.lock();
        let series = self.series.read();
        let at = self.settings.schema.timestamp_offset();
        let mut out = Vec::new();
        let mut key = Vec::new();
        let mut visit = |row: u64, points: &Vec<Point>| {
            let Some(template) = series.templates.get((row >> 32) as usize) else {
                return;
            };
            key.clear();
            key.extend_from_slice(template);
            key[at..at + 4].copy_from_slice(&(row as u32).to_be_bytes());
            if wanted(&key) {
                out.push((key.clone(), points.clone()));
            }
        };
        for (id, (base, points)) in state.buffer.current.iter().enumerate() {
            if !points.is_empty() {
                visit(((id as u64) << 32) | u64::from(*base), points);
            }
        }
        for (row, points) in &state.buffer.other {
            visit(*row, points);
        }
        out
    }

    fn cell_timestamp(&self) -> i64 {
        let now = now_ms();
        let prev = self.last_cell_ts.fetch_max(now, Ordering::AcqRel);
        if prev >= now {
            self.last_cell_ts.fetch_add(1, Ordering::AcqRel) + 1
        } else {
            now
        }
    }

    /// Writes every buffered row to the data table, compacts rows whose hour is over, and
    /// deletes the log entries covered. Returns the number of points flushed.
    pub(crate) fn flush(&self) -> Result<usize> {
        let _one = self.flush_lock.lock();
        let started = Instant::now();
        let result = self.flush_locked();
        let micros = started.elapsed().as_micros() as u64;
        self.stats
            .last_flush_micros
            .store(micros, Ordering::Relaxed);
        self.stats
            .max_flush_micros
            .fetch_max(micros, Ordering::Relaxed);
        result
    }

    fn flush_locked(&self) -> Result<usize> {
        let (buffer, last) = {
            let mut state = self.state.lock();
            (std::mem::take(&mut state.buffer), state.next_seq - 1)
        };
        let flushed = buffer.points;
        let rows = self.materialize(buffer);
        if let Err(e) = self.write_rows(&rows) {
            // Put the points back (older than anything buffered since) and keep the log.
            let mut state = self.state.lock();
            let mut restored = Buffer::default();
            for (row, _, points) in rows {
                for p in points {
                    restored.push(row, p);
                }
            }
            for (row, points) in std::mem::take(&mut state.buffer).into_rows() {
                for p in points {
                    restored.push(row, p);
                }
            }
            state.buffer = restored;
            return Err(e);
        }
        if let Some(log) = self.state.lock().log.as_mut() {
            log.release(last)?;
        }
        if let Some(tracker) = &self.tracker {
            self.track(tracker, &rows);
        }
        self.stats.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(flushed)
    }

    /// Notes the flushed series in the meta table. Meta data is best effort: a failure is
    /// logged and never fails the flush (the points are already stored).
    fn track(&self, tracker: &crate::meta::Tracker, rows: &[(u64, Vec<u8>, Vec<Point>)]) {
        let schema = &self.settings.schema;
        let mut series: Vec<(Vec<u8>, u64)> = Vec::new();
        let mut index: Map<Vec<u8>, usize> = Map::default();
        for (_, key, points) in rows {
            let tsuid = rowkey::tsuid_of(schema, key);
            match index.get(&tsuid) {
                Some(i) => series[*i].1 += points.len() as u64,
                None => {
                    index.insert(tsuid.clone(), series.len());
                    series.push((tsuid, points.len() as u64));
                }
            }
        }
        if let Err(e) = tracker.record(&series, now_ms()) {
            tracing::error!(error = %e, "meta data tracking failed for this flush");
        }
    }

    /// Buffered rows (id, key, points) sorted by key, duplicates within the buffer resolved
    /// newest-first.
    fn materialize(&self, buffer: Buffer) -> Vec<(u64, Vec<u8>, Vec<Point>)> {
        let series = self.series.read();
        let at = self.settings.schema.timestamp_offset();
        let mut rows: Vec<(u64, Vec<u8>, Vec<Point>)> = buffer
            .into_rows()
            .map(|(row, mut points)| {
                let mut key = series.templates[(row >> 32) as usize].to_vec();
                key[at..at + 4].copy_from_slice(&(row as u32).to_be_bytes());
                if let Err(d) = compact::sort_and_dedupe(&mut points, true) {
                    self.note_duplicate(&key, &d);
                }
                (row, key, points)
            })
            .collect();
        rows.sort_unstable_by(|a, b| a.1.cmp(&b.1));
        rows
    }

    fn note_duplicate(&self, key: &[u8], d: &compact::Duplicate) {
        self.stats.duplicates.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            key = %format_signed_bytes(key),
            ms_offset = d.offset_ms,
            "duplicate timestamp: kept the newest point"
        );
    }

    fn hour_closed(&self, base_time: u32, now_secs: i64) -> bool {
        i64::from(base_time) + i64::from(MAX_TIMESPAN) + COMPACTION_GRACE_SECS <= now_secs
    }

    fn write_rows(&self, rows: &[(u64, Vec<u8>, Vec<Point>)]) -> Result<()> {
        let schema = &self.settings.schema;
        let now_secs = now_ms() / 1000;
        let mut newly_open = Vec::new();
        for chunk in rows.chunks(FLUSH_BATCH_ROWS) {
            // Rows of closed hours are merged with what they hold: read them in one go.
            let closed: Vec<Vec<u8>> = chunk
                .iter()
                .filter(|(_, key, _)| {
                    self.settings.enable_compaction
                        && self
                            .hour_closed(rowkey::base_time_of(schema, key).unwrap_or(0), now_secs)
                })
                .map(|(_, key, _)| key.clone())
                .collect();
            let stored = self.store.get_rows(
                &schema.data_table,
                &closed,
                &ReadOptions::family(DATA_FAMILY),
            )?;
            let mut stored = closed.iter().zip(stored).peekable();
            let mut batch: Vec<RowMutation> = Vec::with_capacity(chunk.len());
            for (_, key, points) in chunk {
                let mutations = match stored.next_if(|(k, _)| *k == key) {
                    Some((_, row)) => self.compaction_mutations(key, row.as_ref(), points)?,
                    None => {
                        if self.settings.enable_compaction {
                            newly_open.push(key.clone());
                        }
                        let (q, v) = compact::encode_cell(points);
                        Some(vec![Mutation::set_at(
                            DATA_FAMILY,
                            q,
                            self.cell_timestamp(),
                            v,
                        )])
                    }
                };
                if let Some(mutations) = mutations {
                    batch.push(RowMutation {
                        key: key.clone(),
                        mutations,
                    });
                }
            }
            if !batch.is_empty() {
                self.store.mutate_rows(&schema.data_table, &batch)?;
                self.stats
                    .rows_written
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
            }
        }
        self.open_rows.lock().extend(newly_open);
        self.compact_closed_rows(now_secs)
    }

    /// Compacts rows written while their hour was open, once it has closed.
    fn compact_closed_rows(&self, now_secs: i64) -> Result<()> {
        if !self.settings.enable_compaction {
            return Ok(());
        }
        let schema = &self.settings.schema;
        let due: Vec<Vec<u8>> = {
            let mut open = self.open_rows.lock();
            let due: Vec<Vec<u8>> = open
                .iter()
                .filter(|k| {
                    rowkey::base_time_of(schema, k).is_some_and(|b| self.hour_closed(b, now_secs))
                })
                .cloned()
                .collect();
            for k in &due {
                open.remove(k);
            }
            due
        };
        self.compact_keys(&due).map(|_| ())
    }

    /// Rewrites each row of `keys` as one compacted cell (reading rows a batch at a time).
    /// Returns how many rows were rewritten.
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
            if old != q {
                mutations.push(Mutation::delete(DATA_FAMILY, old));
            }
        }
        self.stats.rows_compacted.fetch_add(1, Ordering::Relaxed);
        Ok(Some(mutations))
    }
}
