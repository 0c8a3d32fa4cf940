//! The write path. A batch of points is validated and resolved to row keys, logged as one
//! write-ahead-log entry, and added to the active row buffer; then it is acknowledged.
//!
//! A flush moves points through four states, and a query sees every point acknowledged
//! before it began, exactly once, in whichever state it is:
//!
//! ```text
//! active buffer --seal--> sealed (immutable, read by queries) --write--> in the store
//!     --store synced, sealed dropped--> log entries released
//! ```
//!
//! Each buffered row becomes one cell: a compacted cell merged with what the row holds when
//! its hour is over, else a partial compacted cell (OpenTSDB readers merge several data
//! cells per row), compacted once the hour closes. So the store sees about one write per
//! row per flush, not one per point. A failed flush leaves its sealed buffer in place (still
//! read, retried with backoff); past `tsd.storage.max_buffer_bytes` new batches are refused
//! until flushes catch up.

mod buffer;
mod compaction;
mod index;
mod open_hours;
mod series_cap;
mod series_index;

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hourglass_core::compact::{self, Point};
use hourglass_core::names::validate_name;
use hourglass_core::qualifier::Qualifier;
use hourglass_core::rowkey::{self, SeriesKey};
use hourglass_core::schema::DATA_FAMILY;
use hourglass_core::uid::{Uid, UidKind};
use hourglass_core::value::Value;
use hourglass_storage::{Mutation, ReadOptions, RowMutation, Store, now_ms};
use parking_lot::{Mutex, MutexGuard, RwLock};

use self::buffer::{Buffer, Gathered};
use self::compaction::hour_closed;
use self::open_hours::OpenHours;
use crate::group_commit::GroupCommit;
use crate::kept::KeptStore;
use crate::uid::{UidRegistry, format_signed_bytes};
use crate::wal::files::LogFiles;
use crate::{Error, Result, Settings, wal};

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Rows per storage batch when compacting rows on demand.
const FLUSH_BATCH_ROWS: usize = 1000;
/// A flush writes its rows in batches of at most this many rows...
const FLUSH_CHUNK_ROWS: usize = 65_536;
/// ...and this many points. Each batch is one storage write (the embedded store makes a
/// large one a table file of its own, with a sync and a new version), so few large batches
/// cost much less than many small ones; the bound keeps a batch's copy of its cells (a few
/// bytes a point) small beside the buffers being flushed.
const FLUSH_CHUNK_POINTS: usize = 1 << 20;
/// Seconds after an hour ends before its rows are compacted (late points still arrive).
const COMPACTION_GRACE_SECS: i64 = 1;
/// Longest wait before a failed flush is tried again.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(5);

/// A point as a client sends it.
#[derive(Debug, Clone, Copy)]
pub struct IncomingPoint<'a> {
    pub metric: &'a str,
    /// Seconds, or milliseconds when it does not fit 32 bits.
    pub timestamp: i64,
    pub value: Value,
    /// The tags; empty when `line_tags` is given and the writer is to read them from it.
    pub tags: &'a [(&'a str, &'a str)],
    /// The tags as a telnet `put` line wrote them (`k=v k2=v2`), when the point came from
    /// one: the series is then looked up by this text and the metric, without building its
    /// canonical text. With `tags` empty they are read from this text only when the series
    /// is not known by it (a known text was read before, and the same text always reads to
    /// the same tags), with `put`'s tag errors.
    pub line_tags: Option<&'a str>,
}

/// What became of a batch: points stored and the errors of the others, by index.
#[derive(Debug, Default)]
pub struct BatchOutcome {
    pub stored: usize,
    pub errors: Vec<(usize, Error)>,
    /// The batch was refused whole because buffered points are over their memory budget:
    /// nothing was stored; the caller may wait and send it again.
    pub throttled: bool,
}

/// Counters of the write path, for `/api/stats`.
#[derive(Debug, Default)]
pub struct WriteStats {
    pub points_stored: AtomicU64,
    pub points_rejected: AtomicU64,
    pub flushes: AtomicU64,
    pub flush_errors: AtomicU64,
    pub rows_written: AtomicU64,
    pub rows_compacted: AtomicU64,
    pub duplicates: AtomicU64,
    pub compaction_errors: AtomicU64,
    /// Batches refused because buffered points were over their memory budget.
    pub batches_throttled: AtomicU64,
    /// Fsyncs of the log (several waiting batches share one).
    pub log_syncs: AtomicU64,
    /// Duration of the last flush, in microseconds.
    pub last_flush_micros: AtomicU64,
    /// Longest flush so far, in microseconds.
    pub max_flush_micros: AtomicU64,
    /// Tag index markers written: (series, period) pairs and series catalog rows.
    pub index_markers_written: AtomicU64,
    /// Series evicted from the series cache after an idle epoch.
    pub series_evicted: AtomicU64,
}

/// Interned series: row-key templates (salted, base hour zero) by id.
///
/// Bounded by eviction: a series no batch has looked up for a whole eviction epoch (see
/// [`Writer::evict_idle_series`]) is forgotten once its points are stored, and its id is
/// given to the next new series.
#[derive(Debug, Default)]
struct SeriesCache {
    by_text: series_index::TextIndex,
    /// The same for points of telnet lines, keyed by [`line_key`] (a separate index: its
    /// keys never meet the canonical texts).
    by_line: series_index::TextIndex,
    by_template: Map<Box<[u8]>, u32>,
    /// By series id; empty for a free id.
    templates: Vec<Box<[u8]>>,
    /// By series id: the log segment whose entries define its template (0: none yet). Set
    /// once an entry defining it is appended there; entries built for that segment refer to
    /// the series without repeating its key.
    logged_in: Vec<AtomicU64>,
    /// By series id: the eviction epoch in which a batch last looked it up.
    used: Vec<AtomicU64>,
    /// Ids of evicted series, for new ones.
    free: Vec<u32>,
}

impl SeriesCache {
    fn intern(&mut self, template: Vec<u8>, epoch: u64) -> u32 {
        if let Some(id) = self.by_template.get(template.as_slice()) {
            self.touch(*id, epoch);
            return *id;
        }
        let template: Box<[u8]> = template.into();
        let id = match self.free.pop() {
            Some(id) => {
                let i = id as usize;
                self.templates[i] = template.clone();
                self.logged_in[i].store(0, Ordering::Release);
                self.used[i].store(epoch, Ordering::Relaxed);
                id
            }
            None => {
                let id = self.templates.len() as u32;
                self.templates.push(template.clone());
                self.logged_in.push(AtomicU64::new(0));
                self.used.push(AtomicU64::new(epoch));
                id
            }
        };
        self.by_template.insert(template, id);
        id
    }

    /// Notes that a batch of `epoch` looked the series up.
    fn touch(&self, id: u32, epoch: u64) {
        // A plain read on the hot path: the mark changes once an epoch.
        if let Some(used) = self.used.get(id as usize)
            && used.load(Ordering::Relaxed) < epoch
        {
            used.fetch_max(epoch, Ordering::Relaxed);
        }
    }

    /// Forgets every series last looked up before `epoch`; returns their ids, now free.
    fn evict_before(&mut self, epoch: u64) -> Vec<u32> {
        let gone: Vec<bool> = (0..self.templates.len())
            .map(|i| !self.templates[i].is_empty() && self.used[i].load(Ordering::Relaxed) < epoch)
            .collect();
        let evicted: Vec<u32> = (0u32..)
            .zip(&gone)
            .filter(|(_, g)| **g)
            .map(|(id, _)| id)
            .collect();
        if evicted.is_empty() {
            return evicted;
        }
        let keep = |id: u32| !gone.get(id as usize).copied().unwrap_or(false);
        self.by_text.retain(keep);
        self.by_line.retain(keep);
        self.by_template.retain(|_, id| keep(*id));
        self.by_template.shrink_to_fit();
        for id in &evicted {
            self.templates[*id as usize] = Box::default();
            self.logged_in[*id as usize].store(0, Ordering::Release);
        }
        self.free.extend(evicted.iter().rev());
        evicted
    }

    /// Series held.
    fn len(&self) -> usize {
        self.templates.len() - self.free.len()
    }
}

/// The eviction epochs of the series cache: batches register in the epoch they start in,
/// and the series they look up are marked with it.
#[derive(Debug, Default)]
struct Epochs {
    /// The current epoch (starts at 1).
    current: AtomicU64,
    /// Batches in flight, by the parity of the epoch they registered in.
    in_flight: [AtomicUsize; 2],
    /// When the current epoch began (ms on the writer's clock).
    began_ms: AtomicI64,
    /// The epoch before the current one, while series it left idle wait to be evicted.
    closing: Mutex<Option<u64>>,
}

/// A batch registered in an epoch, until it is buffered (or refused).
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

/// What batches and flushes share, under one lock: appends to the log and to the active
/// buffer happen together, so the log's order is the buffer's order.
#[derive(Debug)]
struct LogState {
    active: Buffer,
    /// Oldest first.
    sealed: Vec<Arc<Buffer>>,
    log: Option<wal::Log>,
    /// Sequence number of the next batch (logged or not).
    next_seq: u64,
}

impl LogState {
    fn bytes(&self) -> usize {
        self.active.bytes + self.sealed.iter().map(|s| s.bytes).sum::<usize>()
    }

    fn points(&self) -> usize {
        self.active.points + self.sealed.iter().map(|s| s.points).sum::<usize>()
    }
}

/// Flushes run one at a time, holding this.
#[derive(Debug, Default)]
pub(crate) struct FlushState {
    /// Every batch at or below this sequence number is in the store.
    stored_seq: u64,
    failures: u32,
    /// When a failed flush may be tried again (ms on the writer's clock).
    retry_at_ms: Option<i64>,
    /// When the store's upkeep last ran (ms on the writer's clock).
    upkeep_at_ms: i64,
}

/// A TSD receiving nothing runs the store's upkeep this often (a flush runs it first).
const IDLE_UPKEEP_MS: i64 = 10_000;

#[derive(Debug)]
pub(crate) struct Writer {
    store: Arc<dyn Store>,
    settings: Settings,
    uids: Arc<UidRegistry>,
    series: RwLock<SeriesCache>,
    epochs: Epochs,
    state: Mutex<LogState>,
    /// The log segment appends went to last, read without the lock: entries are built for
    /// it (and rebuilt when the log has moved on by the time they are appended).
    log_segment: AtomicU64,
    /// Mirror of the buffers' bytes, read without the lock (admission checks).
    buffered_bytes: AtomicUsize,
    flush: Mutex<FlushState>,
    /// Group commit of log fsyncs: one fsync runs at a time and covers every batch
    /// appended before it started.
    log_commit: GroupCommit,
    /// Histogram and rollup cells acknowledged but not yet covered by a store sync (their
    /// bytes count in the memory budget).
    kept: Arc<KeptStore>,
    /// Where the compaction bookkeeping is kept (the log's directory), if anywhere.
    files: Option<Arc<dyn LogFiles>>,
    open: Mutex<OpenHours>,
    /// Set while a flush's store write is failing: the store is unreachable or refusing.
    store_failing: AtomicBool,
    /// Whether the tables are known to exist (checked at open; when the store was
    /// unreachable then, each flush tries again).
    tables_ready: AtomicBool,
    last_cell_ts: AtomicI64,
    /// Series tracking in the meta table (`tsd.core.meta.*`), when on.
    tracker: Option<crate::meta::Tracker>,
    /// New series waiting for tree processing (`tsd.core.tree.enable_processing`).
    trees: Option<Arc<crate::tree::TreeQueue>>,
    /// The tag index's maintenance (`tsd.index.enable`), when on.
    index: Option<index::IndexWriter>,
    /// The cap on new series per metric (`tsd.index.max_series_per_metric`), when set.
    series_cap: Option<series_cap::SeriesCap>,
    /// Where buffered points are noted as changes (when this TSD alone writes its store).
    changes: Option<Arc<crate::changes::Changes>>,
    /// Series with no stored row: one of their UIDs was assigned by this process, on a
    /// store no other process writes, and no flush has stored their rows yet. A flush
    /// writes their rows of closed hours without reading them first (nothing is there to
    /// merge with). Ids leave at the first flush writing their rows (before its write, so
    /// a retry reads what a failed one left), and when evicted.
    unstored: Mutex<HashSet<u32, foldhash::fast::RandomState>>,
    pub(crate) stats: WriteStats,
}

/// The series cache key of a point from a telnet line: its metric, a space (which no metric
/// word holds), and its tags as the line wrote them.
fn line_key(metric: &str, written_tags: &str, text: &mut String) {
    text.clear();
    text.push_str(metric);
    text.push(' ');
    text.push_str(written_tags);
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
    hourglass_core::put::tag_map_text(tags)
}

impl Writer {
    /// New series waiting for tree processing, when it is on.
    pub(crate) fn tree_queue(&self) -> Option<&Arc<crate::tree::TreeQueue>> {
        self.trees.as_ref()
    }

    pub(crate) fn new(
        store: Arc<dyn Store>,
        settings: Settings,
        uids: Arc<UidRegistry>,
        log: Option<wal::Log>,
        files: Option<Arc<dyn LogFiles>>,
        changes: Option<Arc<crate::changes::Changes>>,
        kept: Arc<KeptStore>,
    ) -> Result<Writer> {
        let trees = settings
            .meta
            .tree_processing
            .then(|| Arc::new(crate::tree::TreeQueue::default()));
        let tracker = crate::meta::Tracker::new(
            Arc::clone(&store),
            settings.schema.clone(),
            settings.meta,
            trees.clone(),
        );
        let open = match &files {
            Some(f) => match f.read_named(open_hours::FILE_NAME) {
                Ok(Some(bytes)) => OpenHours::decode(&bytes)?,
                Ok(None) => OpenHours::default(),
                Err(e) => {
                    return Err(Error::Internal(format!(
                        "cannot read the compaction bookkeeping ({}): {e}",
                        open_hours::FILE_NAME
                    )));
                }
            },
            None => OpenHours::default(),
        };
        let index = settings
            .index
            .then(|| index::IndexWriter::new(settings.schema.clone()));
        let series_cap = (settings.index && settings.max_series_per_metric > 0)
            .then(|| series_cap::SeriesCap::new(settings.max_series_per_metric));
        let began_ms = settings.clock.now_ms();
        Ok(Writer {
            store,
            settings,
            tracker,
            trees,
            index,
            series_cap,
            uids,
            series: RwLock::new(SeriesCache::default()),
            epochs: Epochs {
                current: AtomicU64::new(1),
                began_ms: AtomicI64::new(began_ms),
                ..Epochs::default()
            },
            log_segment: AtomicU64::new(0),
            state: Mutex::new(LogState {
                active: Buffer::default(),
                sealed: Vec::new(),
                log,
                next_seq: 1,
            }),
            buffered_bytes: AtomicUsize::new(0),
            flush: Mutex::new(FlushState::default()),
            log_commit: GroupCommit::default(),
            kept,
            files,
            open: Mutex::new(open),
            store_failing: AtomicBool::new(false),
            tables_ready: AtomicBool::new(false),
            last_cell_ts: AtomicI64::new(0),
            changes,
            unstored: Mutex::new(HashSet::default()),
            stats: WriteStats::default(),
        })
    }

    /// Replays log entries left by a previous process into the buffer.
    pub(crate) fn recover(&self, entries: &[wal::Entry]) -> Result<usize> {
        let mut state = self.state.lock();
        let mut series = self.series.write();
        let mut replayed = 0usize;
        let at = self.settings.schema.timestamp_offset();
        // Entries name series defined earlier in their own segment.
        let mut dictionary = wal::Dictionary::default();
        let mut segment = None;
        let mut points = Vec::new();
        let mut last: Option<(Vec<u8>, u32)> = None;
        for entry in entries {
            if segment != Some(entry.segment) {
                dictionary.clear();
                segment = Some(entry.segment);
            }
            points.clear();
            wal::decode_entry(&entry.payload, &mut dictionary, at, |key, p| {
                points.push((key.to_vec(), p));
            })?;
            for (key, p) in points.drain(..) {
                let Some(base) = rowkey::base_time_of(&self.settings.schema, &key) else {
                    return Err(Error::Corrupt(
                        "write-ahead log holds a short row key".into(),
                    ));
                };
                let mut template = key;
                template[at..at + 4].fill(0);
                let id = match &last {
                    Some((t, id)) if *t == template => *id,
                    _ => {
                        let id = series.intern(template.clone(), self.epoch());
                        last = Some((template, id));
                        id
                    }
                };
                state
                    .active
                    .push((u64::from(id) << 32) | u64::from(base), p);
                replayed += 1;
            }
            state.next_seq = state.next_seq.max(entry.seq + 1);
        }
        if !state.active.is_empty() {
            state.active.oldest_ms = Some(self.settings.clock.now_ms());
        }
        self.buffered_bytes.store(state.bytes(), Ordering::Relaxed);
        Ok(replayed)
    }

    /// Resolves a point's series to an interned id, creating UIDs as the settings allow.
    fn resolve_series(&self, p: &IncomingPoint<'_>, text: &str) -> Result<u32> {
        {
            let series = self.series.read();
            if let Some(id) = series.by_text.get(text) {
                series.touch(id, self.epoch());
                return Ok(id);
            }
        }
        let (template, assigned) = self.series_template_noting(p.metric, p.tags)?;
        let s = &self.settings;
        if let Some(cap) = &self.series_cap
            && let Some(count) = cap.admit(
                self.store.as_ref(),
                &s.schema,
                p.metric,
                &template,
                s.clock.now_ms(),
            )?
        {
            return Err(Error::invalid(format!(
                "Too many series for metric: {} has {count} series today, maximum allowed: {} \
                 (tsd.index.max_series_per_metric), tags: {}",
                p.metric,
                s.max_series_per_metric,
                tags_text(p.tags)
            )));
        }
        // Meta data as the series arrives (OpenTSDB's real-time tracking), so that a lookup
        // in the meta table finds it before its points are flushed.
        if let Some(tracker) = &self.tracker
            && let Err(e) =
                tracker.first_seen(&rowkey::tsuid_of(&s.schema, &template), now_ms(), assigned)
        {
            tracing::error!(error = %e, "meta data tracking failed for a new series");
        }
        let mut series = self.series.write();
        let held = series.len();
        let id = series.intern(template, self.epoch());
        series.by_text.insert(text, id);
        // Before any of its points is buffered, so before any flush of them; under the
        // series lock, so before another batch can find it.
        if assigned && series.len() > held && !self.store.is_shared() {
            self.unstored.lock().insert(id);
        }
        // Before any of its points is buffered, so before any flush of them.
        if assigned && let Some(index) = &self.index {
            index.unwritten(id);
        }
        Ok(id)
    }

    /// A series' row key with a zero base time: metric and tags checked as OpenTSDB checks
    /// them, UIDs created as the settings allow. Rollup points (RFC 0008) are keyed with it too.
    pub(crate) fn series_template(
        &self,
        metric_name: &str,
        tag_names: &[(&str, &str)],
    ) -> Result<Vec<u8>> {
        self.series_template_noting(metric_name, tag_names)
            .map(|(template, _)| template)
    }

    /// [`Writer::series_template`], and whether this call assigned one of its UIDs (then no
    /// row, and no index entry, of the series was written before, by any process).
    fn series_template_noting(
        &self,
        metric_name: &str,
        tag_names: &[(&str, &str)],
    ) -> Result<(Vec<u8>, bool)> {
        let s = &self.settings;
        if tag_names.is_empty() {
            return Err(Error::invalid(format!(
                "Need at least one tag (metric={}, tags={{}})",
                metric_name
            )));
        }
        if tag_names.len() > s.schema.max_tags {
            return Err(Error::invalid(format!(
                "Too many tags: {} maximum allowed: {}, tags: {}",
                tag_names.len(),
                s.schema.max_tags,
                tags_text(tag_names)
            )));
        }
        validate_name("metric name", metric_name, &s.allow_special_chars)?;
        for (k, v) in tag_names {
            // Checked first without the words of an error: they are formatted only for one.
            if validate_name("", k, &s.allow_special_chars).is_err() {
                validate_name(
                    &format!("tag name with value [{v}]"),
                    k,
                    &s.allow_special_chars,
                )?;
            }
            if validate_name("", v, &s.allow_special_chars).is_err() {
                validate_name(
                    &format!("tag value with key [{k}]"),
                    v,
                    &s.allow_special_chars,
                )?;
            }
        }
        for (i, (k, _)) in tag_names.iter().enumerate() {
            if tag_names[..i].iter().any(|(other, _)| other == k) {
                return Err(Error::invalid(format!(
                    "duplicate tag: {k}, tags={}",
                    tags_text(tag_names)
                )));
            }
        }
        let mut assigned = false;
        let mut uid = |kind: UidKind, name: &str, create: bool| -> Result<Uid> {
            if create {
                let (uid, ours) = self.uids.get_or_create_id_noting(kind, name)?;
                assigned |= ours;
                Ok(uid)
            } else {
                self.uids.get_id(kind, name)
            }
        };
        let metric = uid(UidKind::Metric, metric_name, s.auto_create_metrics)?;
        let mut tags = Vec::with_capacity(tag_names.len());
        for (k, v) in tag_names {
            let k = uid(UidKind::TagKey, k, s.auto_create_tagks)?;
            let v = uid(UidKind::TagValue, v, s.auto_create_tagvs)?;
            tags.push((k, v));
        }
        let template = rowkey::encode_row_key(&s.schema, &SeriesKey::new(metric, tags), 0);
        Ok((template, assigned))
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

    /// The point with its tags, read from its line's tag text into `scratch` (empty) when it
    /// came without them.
    fn with_tags<'p>(
        &self,
        p: &IncomingPoint<'p>,
        scratch: &'p mut Vec<(&'p str, &'p str)>,
    ) -> Result<IncomingPoint<'p>> {
        match p.line_tags {
            Some(written) if p.tags.is_empty() => {
                hourglass_core::put::parse_tags(written, scratch)
                    .map_err(|e| Error::invalid(e.to_string()))?;
                Ok(IncomingPoint {
                    tags: scratch,
                    ..*p
                })
            }
            _ => Ok(*p),
        }
    }

    fn epoch(&self) -> u64 {
        self.epochs.current.load(Ordering::Acquire)
    }

    /// Series refused by the series cap, per metric since start, most first.
    pub(crate) fn series_refusals(&self) -> Vec<(String, u64)> {
        self.series_cap
            .as_ref()
            .map(series_cap::SeriesCap::refusals)
            .unwrap_or_default()
    }

    /// Series in the series cache.
    pub(crate) fn cached_series(&self) -> usize {
        self.series.read().len()
    }

    /// Starts a new eviction epoch once the current one has lasted `tsd.storage.series_cache.idle_ms`
    /// (called after a flush). The epoch that ends becomes the closing one.
    fn maybe_start_epoch(&self) {
        let now = self.settings.clock.now_ms();
        if now - self.epochs.began_ms.load(Ordering::Relaxed) < self.settings.series_idle_ms {
            return;
        }
        let mut closing = self.epochs.closing.lock();
        if closing.is_some() {
            return;
        }
        // Under the series lock: a batch registers either before (in the old epoch) or after.
        let _series = self.series.write();
        let ended = self.epochs.current.fetch_add(1, Ordering::AcqRel);
        self.epochs.began_ms.store(now, Ordering::Relaxed);
        *closing = Some(ended);
    }

    /// The closing epoch, if every batch registered in it is buffered: checked before a
    /// flush seals, so that flush stores all of them.
    fn closed_epoch(&self) -> Option<u64> {
        let closing = (*self.epochs.closing.lock())?;
        (self.epochs.in_flight[(closing & 1) as usize].load(Ordering::Acquire) == 0)
            .then_some(closing)
    }

    /// Evicts the series no batch looked up during the epoch `closed` (nor since), once a
    /// flush that sealed after all of that epoch's batches has stored them: none of their
    /// points is buffered, and no batch in flight holds their ids (it would have marked
    /// them with a later epoch). Their ids go to new series.
    fn evict_idle_series(&self, closed: u64) {
        let evicted = self.series.write().evict_before(closed);
        *self.epochs.closing.lock() = None;
        if evicted.is_empty() {
            return;
        }
        {
            let mut unstored = self.unstored.lock();
            for id in &evicted {
                unstored.remove(id);
            }
        }
        if let Some(index) = &self.index {
            index.forget(&evicted);
        }
        self.stats
            .series_evicted
            .fetch_add(evicted.len() as u64, Ordering::Relaxed);
        tracing::debug!(
            series = evicted.len(),
            "idle series evicted from the series cache"
        );
    }

    /// Whether buffered points are under their memory budget (new batches are accepted).
    /// The budget holds the buffered points and the histogram and rollup cells kept until
    /// a store sync covers them.
    pub(crate) fn has_room(&self) -> bool {
        self.buffered_bytes.load(Ordering::Relaxed) + self.kept.bytes()
            < self.settings.max_buffer_bytes
    }

    /// Validates, logs and buffers a batch. Good points are stored even when others fail.
    /// Past the memory budget the whole batch is refused (`throttled`) before any work.
    pub(crate) fn add_points(&self, points: &[IncomingPoint<'_>]) -> BatchOutcome {
        let mut outcome = BatchOutcome::default();
        if !self.has_room() {
            self.stats.batches_throttled.fetch_add(1, Ordering::Relaxed);
            let e = Error::Throttled(format!(
                "Please throttle writes: buffered points are over their memory budget ({} bytes, tsd.storage.max_buffer_bytes) while the store catches up",
                self.settings.max_buffer_bytes
            ));
            outcome.errors = (0..points.len()).map(|i| (i, e.clone())).collect();
            outcome.throttled = true;
            return outcome;
        }
        let mut resolved: Vec<(u64, Point)> = Vec::with_capacity(points.len());
        let mut text = String::new();
        // Known series under one read lock for the whole batch: by the line's own tag text
        // when the point came from a telnet line, else by the canonical series text.
        // The batch registers in the current epoch, and marks the series it finds with it,
        // under the same lock as the lookups: no series it uses is evicted until it is done.
        let (known, _in_flight) = {
            let series = self.series.read();
            let epoch = self.epoch();
            let in_flight = &self.epochs.in_flight[(epoch & 1) as usize];
            in_flight.fetch_add(1, Ordering::AcqRel);
            let known: Vec<Option<u32>> = points
                .iter()
                .map(|p| {
                    let id = match p.line_tags {
                        Some(written) => {
                            line_key(p.metric, written, &mut text);
                            series.by_line.get(&text)
                        }
                        None => {
                            series_text(p, &mut text);
                            series.by_text.get(&text)
                        }
                    };
                    if let Some(id) = id {
                        series.touch(id, epoch);
                    }
                    id
                })
                .collect();
            (known, InFlight(in_flight))
        };
        for (i, p) in points.iter().enumerate() {
            let mut line_tags = Vec::new();
            let result = match known[i] {
                Some(id) => self
                    .check_point(p)
                    // Checked again with its tags read, for an error that names them.
                    .or_else(|_| self.check_point(&self.with_tags(p, &mut line_tags)?))
                    .map(|(base, q)| (id, base, q)),
                None => self.with_tags(p, &mut line_tags).and_then(|p| {
                    // Tag errors first, as a put line's tags are read before its point is
                    // checked.
                    let (base, q) = self.check_point(&p)?;
                    series_text(&p, &mut text);
                    let id = self.resolve_series(&p, &text)?;
                    if let Some(written) = p.line_tags {
                        line_key(p.metric, written, &mut text);
                        self.series.write().by_line.insert(&text, id);
                    }
                    Ok((id, base, q))
                }),
            };
            match result {
                Ok((id, base, q)) => resolved.push((
                    (u64::from(id) << 32) | u64::from(base),
                    Point::new(q, p.value.to_bits()),
                )),
                Err(e) => outcome.errors.push((i, e)),
            }
        }
        if let Err(e) = self.log_and_buffer(&resolved) {
            tracing::error!(error = %e, "batch refused: it could not be logged");
            // The first points of series new to the store may be among those refused.
            if let Some(tracker) = &self.tracker {
                tracker.forget_fresh();
            }
            outcome.errors = (0..points.len()).map(|i| (i, e.clone())).collect();
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

    /// Logs the points as one entry and buffers them, after syncing the store if the batch
    /// created UIDs. With `tsd.storage.wal.sync` it returns once the entry is fsynced (one
    /// fsync shared by concurrent batches).
    fn log_and_buffer(&self, resolved: &[(u64, Point)]) -> Result<()> {
        if resolved.is_empty() {
            return Ok(());
        }
        // UIDs first: the entry may reach the disk (OS writeback) before any fsync of ours.
        self.sync_new_uids()?;
        // The entry is built before the state lock is taken: building it reads the series
        // templates, and readers take the series lock before the state lock (one order
        // everywhere, or a reader, this batch and a batch adding a series deadlock). It is
        // built for the segment appends went to last; when the log has moved to another by
        // the time the lock is held, it is built again for that one.
        let mut segment = self.log_segment.load(Ordering::Acquire);
        let (seq, defined) = loop {
            let entry = self
                .files
                .is_some()
                .then(|| self.log_entry(resolved, segment));
            let mut state = self.state.lock();
            let seq = state.next_seq;
            let mut defined = Vec::new();
            if let (Some((entry, d)), Some(log)) = (entry, state.log.as_mut()) {
                let next = log.next_segment()?;
                if next != segment {
                    self.log_segment.store(next, Ordering::Release);
                    segment = next;
                    continue;
                }
                let frame = entry.finish_framed(seq);
                log.append_frame(seq, &frame, false)?;
                defined = d;
            }
            state.next_seq += 1;
            if state.active.oldest_ms.is_none() {
                state.active.oldest_ms = Some(self.settings.clock.now_ms());
            }
            for (row, p) in resolved {
                state.active.push(*row, *p);
            }
            self.buffered_bytes.store(state.bytes(), Ordering::Relaxed);
            break (seq, defined);
        };
        // The points are visible now: answers kept from reads before are stale. A reader
        // registers its watch before it takes the state lock to read the buffer, so when no
        // watch is registered here, none read before these points were in.
        if let Some(changes) = &self.changes
            && changes.watching() > 0
        {
            self.note_buffered(changes, resolved);
        }
        // Later entries for this segment may now leave these series' keys out: they are
        // appended after this one.
        if !defined.is_empty() {
            let series = self.series.read();
            for id in defined {
                if let Some(logged) = series.logged_in.get(id as usize) {
                    logged.store(segment, Ordering::Release);
                }
            }
        }
        if self.settings.wal_sync {
            self.sync_through(seq)?;
        }
        Ok(())
    }

    /// Notes each metric of `resolved` as changed over the hours its points are in.
    fn note_buffered(&self, changes: &crate::changes::Changes, resolved: &[(u64, Point)]) {
        let schema = &self.settings.schema;
        let (m0, t0) = (usize::from(schema.salt_width), schema.timestamp_offset());
        let mut ranges: HashMap<Vec<u8>, (i64, i64)> = HashMap::new();
        let mut unknown = false;
        {
            let series = self.series.read();
            let mut last: Option<(u32, &[u8])> = None;
            for (row, _) in resolved {
                let id = (row >> 32) as u32;
                let metric = match last {
                    Some((l, m)) if l == id => m,
                    _ => {
                        let Some(m) = series
                            .templates
                            .get(id as usize)
                            .and_then(|t| t.get(m0..t0))
                        else {
                            unknown = true;
                            continue;
                        };
                        last = Some((id, m));
                        m
                    }
                };
                let lo = i64::from(*row as u32) * 1000;
                let r = ranges.entry(metric.to_vec()).or_insert((lo, lo));
                r.0 = r.0.min(lo);
                r.1 = r.1.max(lo);
            }
        }
        if unknown {
            changes.note_all();
        }
        changes.note_with(|out| {
            out.extend(
                ranges
                    .into_iter()
                    .map(|(m, (lo, hi))| (m, lo, hi + crate::cell_codec::HOUR_MS)),
            );
        });
    }

    /// The log entry of resolved points for log segment `segment`: consecutive points of
    /// one row make a run, and series the segment has not defined yet are defined (their
    /// ids are returned, to be marked once the entry is appended).
    fn log_entry(&self, resolved: &[(u64, Point)], segment: u64) -> (wal::EntryBuilder, Vec<u32>) {
        let mut entry = wal::EntryBuilder::default();
        let mut defined = Vec::new();
        let mut in_entry: std::collections::HashSet<u32, foldhash::fast::RandomState> =
            Default::default();
        let series = self.series.read();
        let mut rest = resolved;
        while let Some(((row, _), _)) = rest.split_first() {
            let run = rest.iter().take_while(|(r, _)| r == row).count();
            let id = (row >> 32) as u32;
            let logged = series
                .logged_in
                .get(id as usize)
                .is_some_and(|l| l.load(Ordering::Acquire) == segment);
            if !logged && in_entry.insert(id) {
                entry.define(id, &series.templates[id as usize]);
                defined.push(id);
            }
            entry.add_run(id, *row as u32, rest[..run].iter().map(|(_, p)| *p));
            rest = &rest[run..];
        }
        (entry, defined)
    }

    /// Returns once the store is synced through the last UID mapping written (one sync
    /// shared by concurrent batches; at once when a sync already covered it). Mappings a
    /// failed sync may have dropped are written again before the sync (the registry keeps
    /// them in the [`KeptStore`]).
    fn sync_new_uids(&self) -> Result<()> {
        match self.uids.kept_ticket() {
            0 => Ok(()),
            ticket => Ok(self.kept.sync_through(ticket)?),
        }
    }

    /// The log directory, when there is a log.
    pub(crate) fn log_files(&self) -> Option<&dyn LogFiles> {
        self.files.as_deref()
    }

    /// The sequence number of the last batch accepted so far.
    pub(crate) fn last_seq(&self) -> u64 {
        self.state.lock().next_seq - 1
    }

    /// Makes every batch up to `seq` durable against power loss: its log entry fsynced
    /// (concurrent callers share one fsync) and the UIDs it uses synced in the store. Without
    /// a log, the batches are flushed and the store synced.
    pub(crate) fn sync_through(&self, seq: u64) -> Result<()> {
        self.sync_new_uids()?;
        if !self.has_log() {
            // A flush syncs the store before it counts its batches as stored.
            return self.flush_through(seq);
        }
        // The leader: one fsync for every batch appended so far.
        self.log_commit.sync_through(seq, || {
            let pending = {
                let state = self.state.lock();
                let through = state.next_seq - 1;
                match state.log.as_ref() {
                    Some(log) => log.pending_sync(through)?,
                    None => return Ok(through),
                }
            };
            let outcome = pending.run();
            self.stats.log_syncs.fetch_add(1, Ordering::Relaxed);
            if let Some(log) = self.state.lock().log.as_mut() {
                log.synced(&pending, outcome)?;
            }
            Ok(pending.through)
        })
    }

    /// Whether a flush is due: the flush interval or buffer size says so, a failed flush
    /// waits for its retry, or rows of a closed hour wait for compaction.
    pub(crate) fn flush_due(&self) -> bool {
        let now_ms = self.settings.clock.now_ms();
        {
            let flush = self.flush.lock();
            if flush.retry_at_ms.is_some_and(|t| now_ms < t) {
                return false;
            }
        }
        let (points, oldest, sealed, poisoned) = {
            let state = self.state.lock();
            (
                state.points(),
                state.active.oldest_ms,
                !state.sealed.is_empty(),
                state.log.as_ref().is_some_and(|l| l.poisoned().is_some()),
            )
        };
        if sealed || poisoned || points >= self.settings.max_buffered_points {
            return true;
        }
        // Kept histogram and rollup cells wait for a store sync (a flush's): as buffered
        // points wait for a flush, and sooner when they fill half the budget.
        if self
            .kept
            .needs_sync(now_ms, self.settings.flush_interval.as_millis() as i64)
            || self.kept.bytes() > self.settings.max_buffer_bytes / 2
        {
            return true;
        }
        let interval = self.settings.flush_interval.as_millis() as i64;
        if oldest.is_some_and(|t| now_ms - t >= interval) {
            return true;
        }
        let now_secs = now_ms / 1000;
        self.settings.enable_compaction
            && self
                .open
                .lock()
                .pairs
                .iter()
                .any(|(_, h)| hour_closed(*h, now_secs))
    }

    /// Whether acknowledged points are logged (else they live only in the buffers).
    pub(crate) fn has_log(&self) -> bool {
        self.state.lock().log.is_some()
    }

    pub(crate) fn buffered_points(&self) -> usize {
        self.state.lock().points()
    }

    pub(crate) fn buffered_bytes(&self) -> usize {
        self.buffered_bytes.load(Ordering::Relaxed)
    }

    /// Why the log refuses writes, when it does.
    pub(crate) fn log_poisoned(&self) -> Option<String> {
        self.state
            .lock()
            .log
            .as_ref()
            .and_then(|l| l.poisoned().map(str::to_string))
    }

    /// Whether the last flush could not write to the store.
    pub(crate) fn store_failing(&self) -> bool {
        self.store_failing.load(Ordering::Relaxed)
    }

    /// Copies of the buffered (not yet stored) rows whose key satisfies `wanted`, with their
    /// points in write order: sealed buffers (oldest first), then the active one. Taken under
    /// one lock, so together with a store read that starts afterwards a reader sees every
    /// point acknowledged before the call.
    pub(crate) fn buffered_rows(
        &self,
        wanted: impl Fn(&[u8]) -> bool,
    ) -> Vec<(Vec<u8>, Vec<Point>)> {
        let series = self.series.read();
        let at = self.settings.schema.timestamp_offset();
        let key_of = |row: u64| -> Option<Vec<u8>> {
            let template = series.templates.get((row >> 32) as usize)?;
            let mut key = template.to_vec();
            key[at..at + 4].copy_from_slice(&(row as u32).to_be_bytes());
            Some(key)
        };
        let mut verdicts: Map<u64, bool> = Map::default();
        let mut wanted_row = |row: u64| {
            *verdicts
                .entry(row)
                .or_insert_with(|| key_of(row).is_some_and(|k| wanted(&k)))
        };
        let mut gathered = Gathered::default();
        {
            let state = self.state.lock();
            for sealed in &state.sealed {
                gathered.add(sealed, &mut wanted_row);
            }
            gathered.add(&state.active, &mut wanted_row);
        }
        gathered
            .into_rows()
            .filter_map(|(row, points)| Some((key_of(row)?, points)))
            .collect()
    }

    fn cell_timestamp(&self) -> i64 {
        let now = self.settings.clock.now_ms();
        let prev = self.last_cell_ts.fetch_max(now, Ordering::AcqRel);
        if prev >= now {
            self.last_cell_ts.fetch_add(1, Ordering::AcqRel) + 1
        } else {
            now
        }
    }

    /// Holds off flushes (a deletion reads and rewrites rows under it).
    pub(crate) fn lock_flushes(&self) -> MutexGuard<'_, FlushState> {
        self.flush.lock()
    }

    /// Writes every buffered point to the data table, compacts rows whose hour is over,
    /// and releases the log entries covered. Returns the number of points flushed.
    /// The store's upkeep ([`Store::maintain`]) when no
    /// flush has run it for [`IDLE_UPKEEP_MS`]: a TSD receiving nothing still groups the
    /// periods that close and merges the runs its writes left (the embedded store's).
    pub(crate) fn idle_upkeep(&self) {
        if !self.tables_ready.load(Ordering::Relaxed) {
            return;
        }
        let now_ms = self.settings.clock.now_ms();
        let mut flush = self.flush.lock();
        if now_ms - flush.upkeep_at_ms < IDLE_UPKEEP_MS {
            return;
        }
        flush.upkeep_at_ms = now_ms;
        crate::tsdb::maintain(self.store.as_ref(), now_ms);
    }

    pub(crate) fn flush(&self) -> Result<usize> {
        let mut flush = self.flush.lock();
        self.flush_with(&mut flush)
    }

    /// Flushes unless every batch up to `seq` is already in the store (concurrent callers
    /// share one flush).
    pub(crate) fn flush_through(&self, seq: u64) -> Result<()> {
        let mut flush = self.flush.lock();
        if flush.stored_seq >= seq {
            return Ok(());
        }
        self.flush_with(&mut flush).map(|_| ())
    }

    /// [`Writer::flush`] under a held flush lock.
    pub(crate) fn flush_with(&self, flush: &mut FlushState) -> Result<usize> {
        let started = Instant::now();
        let result = self.flush_locked(flush);
        match &result {
            Ok(_) => {
                flush.failures = 0;
                flush.retry_at_ms = None;
                self.store_failing.store(false, Ordering::Relaxed);
            }
            Err(e) => {
                flush.failures = flush.failures.saturating_add(1);
                let delay =
                    Duration::from_millis(100 << flush.failures.min(6)).min(MAX_RETRY_DELAY);
                flush.retry_at_ms = Some(self.settings.clock.now_ms() + delay.as_millis() as i64);
                self.stats.flush_errors.fetch_add(1, Ordering::Relaxed);
                if e.kind() == crate::ErrorKind::Unavailable
                    || e.kind() == crate::ErrorKind::Internal
                {
                    self.store_failing.store(true, Ordering::Relaxed);
                }
            }
        }
        let micros = started.elapsed().as_micros() as u64;
        self.stats
            .last_flush_micros
            .store(micros, Ordering::Relaxed);
        self.stats
            .max_flush_micros
            .fetch_max(micros, Ordering::Relaxed);
        result
    }

    /// Notes that the tables exist (checked by the opener).
    pub(crate) fn set_tables_ready(&self) {
        self.tables_ready.store(true, Ordering::Relaxed);
    }

    fn flush_locked(&self, flush: &mut FlushState) -> Result<usize> {
        if !self.tables_ready.load(Ordering::Relaxed) {
            crate::tsdb::prepare_store(self.store.as_ref(), &self.settings)?;
            self.tables_ready.store(true, Ordering::Relaxed);
        }
        // Before the rows: a store that groups closed periods (RFC 0006) then writes rows
        // of newly closed ones straight into their groups.
        flush.upkeep_at_ms = self.settings.clock.now_ms();
        crate::tsdb::maintain(self.store.as_ref(), flush.upkeep_at_ms);
        // Before the seal: when every batch of the closing epoch is buffered, this flush
        // stores them all, and its idle series may be evicted after it.
        let closed = self.closed_epoch();
        // Seal: the active buffer becomes immutable and stays readable until stored.
        let (sealed, through) = {
            let mut state = self.state.lock();
            if !state.active.is_empty() {
                let buffer = std::mem::take(&mut state.active);
                state.sealed.push(Arc::new(buffer));
            }
            (state.sealed.clone(), state.next_seq - 1)
        };
        let flushed: usize = sealed.iter().map(|s| s.points).sum();
        let rows = self.sealed_rows(&sealed)?;
        // The index entries of the rows' series and periods before any of the rows.
        let index = match &self.index {
            Some(index) => Some(index.prepare(
                self.store.as_ref(),
                &self.uids,
                &rows,
                self.settings.clock.now_ms() / 1000,
            )?),
            None => None,
        };
        // Series no flush stored a row of: their rows are written without a read. They
        // leave the set before the write, so a retry after a failed (perhaps partly
        // applied) write reads what it left.
        let unstored: HashSet<u32, foldhash::fast::RandomState> = {
            let mut all = self.unstored.lock();
            if all.is_empty() {
                HashSet::default()
            } else {
                let taken: HashSet<u32, foldhash::fast::RandomState> = rows
                    .iter()
                    .map(|(_, row)| (row >> 32) as u32)
                    .filter(|id| all.contains(id))
                    .collect();
                for id in &taken {
                    all.remove(id);
                }
                taken
            }
        };
        let written = self.write_rows(&sealed, &rows, &unstored)?;
        // Rows of hours already closed mark their hours dirty for computed rollups (RFC 0008
        // phase 4): after the rows are in the store, before the log lets go of the points.
        if self
            .settings
            .rollups
            .as_deref()
            .is_some_and(|r| r.compute.is_some())
        {
            let dirty = crate::rollup::compute::dirty_rows(&rows, self.settings.clock.now_ms());
            if !dirty.is_empty() {
                let table = crate::rollup::compute::state_table(&self.settings.schema);
                self.store.mutate_rows(&table, &dirty)?;
            }
        }
        // Durable in the store before the log lets go of the points.
        self.store.sync()?;
        {
            let mut state = self.state.lock();
            // Flushes are serialized: the sealed buffers are exactly the ones written.
            state.sealed.drain(..sealed.len());
            let bytes = state.bytes();
            self.buffered_bytes.store(bytes, Ordering::Relaxed);
            // Everything up to `through` is in the store now, or was never accepted.
            if let Some(log) = state.log.as_mut() {
                log.heal(through)?;
            }
        }
        flush.stored_seq = flush.stored_seq.max(through);
        drop(sealed);
        // Postings and rows are synced: markers may say so now.
        if let (Some(index), Some(pending)) = (&self.index, index) {
            let markers = index.finish(self.store.as_ref(), pending);
            self.stats
                .index_markers_written
                .fetch_add(markers as u64, Ordering::Relaxed);
        }
        if let Some(tracker) = &self.tracker {
            self.track(tracker, &written);
        }
        if flushed > 0 {
            self.stats.flushes.fetch_add(1, Ordering::Relaxed);
        }
        self.compact_closed_hours(self.settings.clock.now_ms() / 1000);
        if let Some(closed) = closed {
            self.evict_idle_series(closed);
        }
        self.maybe_start_epoch();
        Ok(flushed)
    }

    /// Notes series whose points were written outside the flush (histogram points, RFC 0008
    /// phase 3) in the meta table, as a flush notes its rows: `(data row key, points)`, when
    /// `tsd.core.meta.enable_tsuid_tracking` is on. Best effort, as for a flush.
    pub(crate) fn track_written(&self, rows: &[(Vec<u8>, u64)]) {
        if let Some(tracker) = &self.tracker {
            self.track(tracker, rows);
        }
    }

    /// Notes the flushed series in the meta table. Meta data is best effort: a failure is
    /// logged and never fails the flush (the points are already stored).
    fn track(&self, tracker: &crate::meta::Tracker, rows: &[(Vec<u8>, u64)]) {
        let schema = &self.settings.schema;
        let mut series: Vec<(Vec<u8>, u64)> = Vec::new();
        let mut index: Map<Vec<u8>, usize> = Map::default();
        for (key, points) in rows {
            let tsuid = rowkey::tsuid_of(schema, key);
            match index.get(&tsuid) {
                Some(i) => series[*i].1 += points,
                None => {
                    index.insert(tsuid.clone(), series.len());
                    series.push((tsuid, *points));
                }
            }
        }
        if let Err(e) = tracker.record(&series, now_ms()) {
            tracing::error!(error = %e, "meta data tracking failed for this flush");
        }
    }

    /// Every row of the sealed buffers once, as (key, row id), sorted by key.
    /// A buffered row whose series has no template would be a broken invariant (an evicted
    /// id still buffered): the flush fails, loudly and again at each try, and the points stay
    /// buffered and logged, rather than the process going down.
    fn sealed_rows(&self, sealed: &[Arc<Buffer>]) -> Result<Vec<(Vec<u8>, u64)>> {
        let series = self.series.read();
        let at = self.settings.schema.timestamp_offset();
        let mut rows = Vec::new();
        for (i, buffer) in sealed.iter().enumerate() {
            for (row, _) in buffer.rows() {
                if sealed[..i].iter().any(|earlier| earlier.get(row).is_some()) {
                    continue; // listed with the first buffer holding it
                }
                let mut key = series
                    .templates
                    .get((row >> 32) as usize)
                    .filter(|t| t.len() >= at + 4)
                    .ok_or_else(|| {
                        Error::Internal(format!(
                            "buffered points of series id {} have no row key template",
                            row >> 32
                        ))
                    })?
                    .to_vec();
                key[at..at + 4].copy_from_slice(&(row as u32).to_be_bytes());
                rows.push((key, row));
            }
        }
        sort_by_key_bytes(&mut rows, at);
        Ok(rows)
    }

    /// One row's points from the sealed buffers (oldest first), in time order with
    /// duplicates resolved newest-first: borrowed when they already are (the usual case).
    fn row_points<'a>(&self, sealed: &'a [Arc<Buffer>], key: &[u8], row: u64) -> Cow<'a, [Point]> {
        let mut parts = sealed.iter().filter_map(|s| s.get(row));
        let first = parts.next().unwrap_or_default();
        let single = sealed.iter().filter(|s| s.get(row).is_some()).count() <= 1;
        if single
            && first
                .windows(2)
                .all(|w| w[0].offset_ms() < w[1].offset_ms())
        {
            return Cow::Borrowed(first);
        }
        let mut points = first.to_vec();
        for part in parts {
            points.extend_from_slice(part);
        }
        if let Err(d) = compact::sort_and_dedupe(&mut points, true) {
            self.note_duplicate(key, &d);
        }
        Cow::Owned(points)
    }

    fn note_duplicate(&self, key: &[u8], d: &compact::Duplicate) {
        self.stats.duplicates.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            key = %format_signed_bytes(key),
            ms_offset = d.offset_ms,
            "duplicate timestamp: kept the newest point"
        );
    }

    /// Writes the rows of the sealed buffers a chunk at a time (only one chunk's points are
    /// copied, and only where out of order). Returns each row's key and point count.
    /// Rows of series in `unstored` (none of their rows is stored) are not read: a row of
    /// a closed hour is compacted from its buffered points alone.
    fn write_rows(
        &self,
        sealed: &[Arc<Buffer>],
        rows: &[(Vec<u8>, u64)],
        unstored: &HashSet<u32, foldhash::fast::RandomState>,
    ) -> Result<Vec<(Vec<u8>, u64)>> {
        let schema = &self.settings.schema;
        let at = schema.timestamp_offset();
        let now_secs = self.settings.clock.now_ms() / 1000;
        let mut written = Vec::with_capacity(if self.tracker.is_some() {
            rows.len()
        } else {
            0
        });
        if self.settings.enable_appends {
            return self.append_rows(sealed, rows);
        }
        for chunk in flush_chunks(sealed, rows) {
            // Rows of closed hours are merged with what they hold: read them in one go
            // (those of series with no stored row are known empty).
            let is_closed = |key: &[u8]| {
                self.settings.enable_compaction
                    && hour_closed(rowkey::base_time_of(schema, key).unwrap_or(0), now_secs)
            };
            let closed: Vec<Vec<u8>> = chunk
                .iter()
                .filter(|(key, row)| is_closed(key) && !unstored.contains(&((row >> 32) as u32)))
                .map(|(key, _)| key.clone())
                .collect();
            let stored = if closed.is_empty() {
                Vec::new()
            } else {
                self.store.get_rows(
                    &schema.data_table,
                    &closed,
                    &ReadOptions::family(DATA_FAMILY),
                )?
            };
            let mut stored = closed.iter().zip(stored).peekable();
            let mut batch: Vec<RowMutation> = Vec::with_capacity(chunk.len());
            let mut newly_open = Vec::new();
            for (key, row) in chunk {
                let points = self.row_points(sealed, key, *row);
                if self.tracker.is_some() {
                    written.push((key.clone(), points.len() as u64));
                }
                let mutations = match stored.next_if(|(k, _)| *k == key) {
                    Some((_, row)) => self.compaction_mutations(key, row.as_ref(), &points)?,
                    None if unstored.contains(&((row >> 32) as u32)) && is_closed(key) => {
                        self.compaction_mutations(key, None, &points)?
                    }
                    None => {
                        if self.settings.enable_compaction
                            && let Some(hour) = rowkey::base_time_of(schema, key)
                        {
                            newly_open.push((&key[..at], hour));
                        }
                        let (q, v) = compact::encode_cell(&points);
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
            // Noted (and saved) before the rows are written, so a crash between the two
            // cannot leave partial cells nobody will compact.
            if !newly_open.is_empty() {
                let mut open = self.open.lock();
                for (prefix, hour) in newly_open {
                    open.insert(prefix, hour);
                }
                self.save_open_hours(&mut open)?;
            }
            if !batch.is_empty() {
                if let Err(e) = self.store.mutate_rows(&schema.data_table, &batch) {
                    self.store_failing.store(true, Ordering::Relaxed);
                    return Err(e.into());
                }
                self.stats
                    .rows_written
                    .fetch_add(batch.len() as u64, Ordering::Relaxed);
            }
        }
        Ok(written)
    }

    /// `tsd.storage.enable_appends`: each row's points are appended to its append column,
    /// as OpenTSDB writes them then; nothing is compacted. A replayed log appends its points
    /// again: identical repeats read back as one point.
    fn append_rows(
        &self,
        sealed: &[Arc<Buffer>],
        rows: &[(Vec<u8>, u64)],
    ) -> Result<Vec<(Vec<u8>, u64)>> {
        let table = &self.settings.schema.data_table;
        let mut written = Vec::with_capacity(rows.len());
        let mut bytes = Vec::new();
        for (key, row) in rows {
            let points = self.row_points(sealed, key, *row);
            bytes.clear();
            compact::append_bytes(&points, &mut bytes);
            if let Err(e) =
                self.store
                    .append(table, key, DATA_FAMILY, &compact::APPEND_QUALIFIER, &bytes)
            {
                self.store_failing.store(true, Ordering::Relaxed);
                return Err(e.into());
            }
            self.stats.rows_written.fetch_add(1, Ordering::Relaxed);
            if self.tracker.is_some() {
                written.push((key.clone(), points.len() as u64));
            }
        }
        Ok(written)
    }
}

/// `rows` cut into consecutive batches of at most [`FLUSH_CHUNK_ROWS`] rows and about
/// [`FLUSH_CHUNK_POINTS`] points (a batch ends at the row that reaches it).
fn flush_chunks<'a>(
    sealed: &[Arc<Buffer>],
    rows: &'a [(Vec<u8>, u64)],
) -> impl Iterator<Item = &'a [(Vec<u8>, u64)]> {
    let mut ends = Vec::new();
    let mut points = 0;
    let mut start = 0;
    for (i, (_, row)) in rows.iter().enumerate() {
        points += sealed
            .iter()
            .filter_map(|s| s.get(*row))
            .map(<[Point]>::len)
            .sum::<usize>();
        if points >= FLUSH_CHUNK_POINTS || i + 1 - start >= FLUSH_CHUNK_ROWS {
            ends.push(i + 1);
            start = i + 1;
            points = 0;
        }
    }
    if start < rows.len() {
        ends.push(rows.len());
    }
    let mut from = 0;
    ends.into_iter().map(move |end| {
        let chunk = &rows[from..end];
        from = end;
        chunk
    })
}

/// Sorts a flush's rows (key, row id: series id << 32 | base time) in the keys' byte order,
/// comparing fixed-width integers rather than byte strings. The rows of a series share their
/// key's bytes before the base time (at `at`, 4 bytes) and after it; ranking the series'
/// distinct heads and tails once makes each key's order that of (head rank, base time, tail
/// rank): heads are of one width, and tails compare as byte strings do, shorter first.
fn sort_by_key_bytes(rows: &mut Vec<(Vec<u8>, u64)>, at: usize) {
    let byte_order = |rows: &mut Vec<(Vec<u8>, u64)>| rows.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    if u32::try_from(rows.len()).is_err() || rows.iter().any(|(k, _)| k.len() < at + 4) {
        return byte_order(rows);
    }
    // Each series' first row, and each row's series (as an index into `firsts`).
    let mut seen: HashMap<u32, u32, foldhash::fast::RandomState> = HashMap::default();
    let mut firsts: Vec<usize> = Vec::new();
    let mut series_of: Vec<u32> = Vec::with_capacity(rows.len());
    for (i, (_, row)) in rows.iter().enumerate() {
        let next = firsts.len() as u32;
        let s = *seen.entry((row >> 32) as u32).or_insert_with(|| {
            firsts.push(i);
            next
        });
        series_of.push(s);
    }
    let rank = |part: &dyn Fn(&[u8]) -> &[u8]| -> Vec<u32> {
        let part_of = |s: u32| part(&rows[firsts[s as usize]].0);
        let mut order: Vec<u32> = (0..firsts.len() as u32).collect();
        order.sort_unstable_by(|a, b| part_of(*a).cmp(part_of(*b)));
        let mut ranks = vec![0u32; firsts.len()];
        let mut r = 0u32;
        for (j, s) in order.iter().enumerate() {
            if j > 0 && part_of(order[j - 1]) != part_of(*s) {
                r += 1;
            }
            ranks[*s as usize] = r;
        }
        ranks
    };
    let heads = rank(&|k: &[u8]| &k[..at]);
    let tails = rank(&|k: &[u8]| &k[at + 4..]);
    let mut order: Vec<u128> = rows
        .iter()
        .zip(&series_of)
        .enumerate()
        .map(|(i, ((key, _), s))| {
            let mut time = [0u8; 4];
            time.copy_from_slice(&key[at..at + 4]);
            (u128::from(heads[*s as usize]) << 96)
                | (u128::from(u32::from_be_bytes(time)) << 64)
                | (u128::from(tails[*s as usize]) << 32)
                | i as u128
        })
        .collect();
    order.sort_unstable();
    let mut taken = std::mem::take(rows);
    rows.extend(order.iter().map(|o| {
        let (key, row) = &mut taken[(*o as u32) as usize];
        (std::mem::take(key), *row)
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealed_with(rows: &[(u64, usize)]) -> Vec<Arc<Buffer>> {
        let mut buffer = Buffer::default();
        for &(row, points) in rows {
            for i in 0..points {
                let q = Qualifier::seconds(i as u32 % 3600, 0).unwrap();
                buffer.push(row, Point::new(q, 0));
            }
        }
        vec![Arc::new(buffer)]
    }

    /// A flush's rows sorted through fixed-width integers come in the keys' byte order, as a
    /// sort of the keys themselves puts them: keys under different salt bytes, sharing
    /// heads or tails, with tails of different lengths (one a prefix of another), base
    /// times differing in any byte.
    #[test]
    fn flush_rows_are_sorted_in_key_byte_order() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let at = 4; // one salt byte, a three-byte metric id
        for round in 0..20 {
            let templates: Vec<Vec<u8>> = (0..1 + next() % 60)
                .map(|_| {
                    let mut t = vec![
                        (next() % 3) as u8,
                        0,
                        (next() % 2) as u8,
                        (next() % 3) as u8,
                    ];
                    t.extend_from_slice(&[0; 4]);
                    let tail = (next() % 8) as usize;
                    t.extend((0..tail).map(|_| (next() % 3) as u8));
                    t
                })
                .collect::<std::collections::BTreeSet<_>>() // series' keys differ
                .into_iter()
                .collect();
            let mut ids = HashSet::new();
            let mut rows = Vec::new();
            for _ in 0..next() % 400 {
                let series = next() % templates.len() as u64;
                let time = match next() % 3 {
                    0 => (next() % 8) as u32 * 3600,
                    1 => 1_700_000_000 + (next() % 8) as u32 * 3600,
                    _ => next() as u32,
                };
                let row = series << 32 | u64::from(time);
                if !ids.insert(row) {
                    continue;
                }
                let mut key = templates[series as usize].clone();
                key[at..at + 4].copy_from_slice(&time.to_be_bytes());
                rows.push((key, row));
            }
            let mut expected = rows.clone();
            expected.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            sort_by_key_bytes(&mut rows, at);
            assert_eq!(rows, expected, "round {round}");
        }
    }

    /// A TSD receiving nothing runs the store's upkeep once no flush has for
    /// [`IDLE_UPKEEP_MS`], and not before; a flush counts as a run.
    #[test]
    fn an_idle_writer_runs_the_upkeep_every_ten_seconds() {
        use std::sync::atomic::AtomicI64;
        let now = Arc::new(AtomicI64::new(1_000_000));
        let clock = {
            let now = Arc::clone(&now);
            crate::Clock::from_fn(move || now.load(Ordering::SeqCst))
        };
        let settings = crate::Settings {
            clock,
            ..crate::Settings::default()
        };
        let store: Arc<dyn hourglass_storage::Store> =
            Arc::new(hourglass_storage::memory::MemoryStore::new());
        let db = crate::Tsdb::open(store, settings).unwrap();
        let writer = db.writer();
        let ran = || writer.flush.lock().upkeep_at_ms;
        writer.flush().unwrap();
        assert_eq!(ran(), 1_000_000, "a flush runs it");
        now.store(1_000_000 + IDLE_UPKEEP_MS - 1, Ordering::SeqCst);
        writer.idle_upkeep();
        assert_eq!(ran(), 1_000_000, "not before ten seconds");
        now.store(1_000_000 + IDLE_UPKEEP_MS, Ordering::SeqCst);
        writer.idle_upkeep();
        assert_eq!(ran(), 1_000_000 + IDLE_UPKEEP_MS);
    }

    /// Compacting a row nothing is stored under: points in time order become one cell as
    /// they are; points out of order are sorted first.
    #[test]
    fn a_row_with_nothing_stored_compacts_to_its_points_in_time_order() {
        let db = crate::Tsdb::open(
            Arc::new(hourglass_storage::memory::MemoryStore::new()),
            crate::Settings::default(),
        )
        .unwrap();
        let writer = db.writer();
        let point = |s: u32, v: u64| Point::new(Qualifier::seconds(s, 0).unwrap(), v);
        let cell = |m: &[Mutation]| match m {
            [
                Mutation::SetCell {
                    qualifier, value, ..
                },
            ] => (qualifier.clone(), value.clone()),
            other => panic!("{other:?}"),
        };
        let ordered = [point(0, 1), point(300, 2), point(600, 3)];
        let mutations = writer
            .compaction_mutations(b"k", None, &ordered)
            .unwrap()
            .unwrap();
        assert_eq!(cell(&mutations), compact::encode_cell(&ordered));
        let unordered = [point(600, 3), point(0, 1), point(300, 2)];
        let mutations = writer
            .compaction_mutations(b"k", None, &unordered)
            .unwrap()
            .unwrap();
        assert_eq!(cell(&mutations), compact::encode_cell(&ordered));
        assert_eq!(writer.compaction_mutations(b"k", None, &[]).unwrap(), None);
    }

    #[test]
    fn flush_chunks_cut_at_the_point_and_row_bounds() {
        // Three rows of half the point bound: a chunk ends at the row that reaches it.
        let half = FLUSH_CHUNK_POINTS / 2;
        let rows: Vec<(Vec<u8>, u64)> = (0..3u64).map(|r| (vec![r as u8], r << 32)).collect();
        let sealed = sealed_with(&[(0, half), (1 << 32, half), (2 << 32, half)]);
        let lens: Vec<usize> = flush_chunks(&sealed, &rows).map(<[_]>::len).collect();
        assert_eq!(lens, vec![2, 1]);

        // Rows of one point: the row bound cuts, every row is in exactly one chunk.
        let n = FLUSH_CHUNK_ROWS + 5;
        let rows: Vec<(Vec<u8>, u64)> = (0..n as u64).map(|r| (Vec::new(), r << 32)).collect();
        let sealed = sealed_with(&rows.iter().map(|(_, r)| (*r, 1)).collect::<Vec<_>>());
        let chunks: Vec<&[(Vec<u8>, u64)]> = flush_chunks(&sealed, &rows).collect();
        assert_eq!(
            chunks.iter().map(|c| c.len()).collect::<Vec<_>>(),
            vec![FLUSH_CHUNK_ROWS, 5]
        );
        assert_eq!(chunks[1][0].1, (FLUSH_CHUNK_ROWS as u64) << 32);
        assert_eq!(flush_chunks(&sealed, &[]).count(), 0);
    }
}
