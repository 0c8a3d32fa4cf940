//! Engine settings, read from OpenTSDB's configuration keys (and a few of our own).

use std::time::Duration;

use hourglass_core::config::Config;
use hourglass_core::schema::Schema;

use crate::Result;

/// Where the write path reads wall-clock time (which hours are closed, cell timestamps).
/// Tests set it to move time by hand.
#[derive(Clone)]
pub struct Clock(std::sync::Arc<dyn Fn() -> i64 + Send + Sync>);

impl Clock {
    /// The system's clock.
    pub fn system() -> Clock {
        Clock(std::sync::Arc::new(hourglass_storage::now_ms))
    }

    /// A clock reading `f` (milliseconds since the epoch).
    pub fn from_fn(f: impl Fn() -> i64 + Send + Sync + 'static) -> Clock {
        Clock(std::sync::Arc::new(f))
    }

    pub fn now_ms(&self) -> i64 {
        (self.0)()
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clock")
    }
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub schema: Schema,
    /// `tsd.core.auto_create_metrics` (default false).
    pub auto_create_metrics: bool,
    /// `tsd.core.auto_create_tagks` (default true).
    pub auto_create_tagks: bool,
    /// `tsd.core.auto_create_tagvs` (default true).
    pub auto_create_tagvs: bool,
    /// `tsd.core.uid.random_metrics`: new metric UIDs drawn at random (default false).
    pub random_metrics: bool,
    /// `tsd.core.tag.allow_specialchars`: extra characters allowed in names.
    pub allow_special_chars: String,
    /// `tsd.storage.fix_duplicates` (default false).
    pub fix_duplicates: bool,
    /// `tsd.query.skip_unresolved_tagvs` (default false): a query's literal tag value with
    /// no UID matches nothing instead of failing the query (`No such name for 'tagv'`).
    pub skip_unresolved_tagvs: bool,
    /// `tsd.query.filter.expansion_limit` (default 4096): a case-sensitive `literal_or`
    /// with more values than this is not resolved to UIDs (so its unknown values are no
    /// error) and narrows the scan only through its names, as in OpenTSDB 2.4.1.
    pub filter_expansion_limit: usize,
    /// `tsd.storage.enable_appends` (default false): a row's points are appended to its
    /// append column (OpenTSDB's layout for it) instead of written as cells and compacted.
    pub enable_appends: bool,
    /// `tsd.storage.enable_compaction` (default true).
    pub enable_compaction: bool,
    /// `tsd.storage.flush_interval` in ms: buffered points reach the store within this time.
    pub flush_interval: Duration,
    /// `tsd.storage.max_buffered_points`: a flush starts when this many points are buffered.
    pub max_buffered_points: usize,
    /// `tsd.storage.max_buffer_bytes`: memory budget of points accepted but not yet in the
    /// store. Past it batches are refused (HTTP) or not read (telnet) until flushes catch up.
    pub max_buffer_bytes: usize,
    /// `tsd.storage.wal.enable`: log each batch before acknowledging it (default true).
    pub wal: bool,
    /// `tsd.storage.wal.dir`: where the log's segment files live (the embedded store puts
    /// them in `<data dir>/wal`). Without a directory there is no log.
    pub wal_dir: Option<std::path::PathBuf>,
    /// `tsd.storage.wal.sync`: fsync the log for each batch (power-loss safety; default false).
    pub wal_sync: bool,
    /// Size past which a log segment is closed and the next one started (64 MiB; tests make
    /// it small so that segments turn over).
    pub wal_segment_bytes: u64,
    /// `tsd.core.meta.*`: meta data tracking (all off by default, as in OpenTSDB).
    pub meta: crate::meta::MetaTracking,
    /// `tsd.index.enable` (default false until queries read the index, RFC 0007 phase 3):
    /// maintain the tag index at each flush.
    pub index: bool,
    /// `tsd.index.max_series_per_metric` (0: no cap): new series of a metric past this many
    /// in the current UTC day are refused (with the index on).
    pub max_series_per_metric: u64,
    /// `tsd.index.stats.top`: metrics and tag keys whose counts `/api/stats` lists (20).
    pub index_stats_top: usize,
    /// `tsd.storage.series_cache.idle_ms`: a series no point has named for this long (up
    /// to twice it) leaves the series cache once its points are stored (default an hour), so
    /// the cache holds the series written lately, not every series ever written.
    pub series_idle_ms: i64,
    /// `tsd.uid.lru.name.size` and `tsd.uid.lru.id.size`: the most names to UIDs and UIDs
    /// to names cached per kind (5,000,000 each), the least recently used leaving first.
    /// Always bounded: `tsd.uid.lru.enable` has no effect.
    pub uid_cache_names: usize,
    pub uid_cache_ids: usize,
    /// `tsd.rollups.*` when `tsd.rollups.enable` is on (RFC 0008).
    pub rollups: Option<std::sync::Arc<crate::rollup::RollupSettings>>,
    /// `tsd.core.histograms.config` when set: the histogram codecs (RFC 0008, phase 3).
    pub histograms: Option<std::sync::Arc<hourglass_core::histogram::HistogramConfig>>,
    /// `tsd.storage.retention` in ms: raw points older than this are removed and no longer
    /// answered (RFC 0008 phase 4).
    pub retention_ms: Option<i64>,
    pub clock: Clock,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            schema: Schema::default(),
            auto_create_metrics: false,
            auto_create_tagks: true,
            auto_create_tagvs: true,
            random_metrics: false,
            allow_special_chars: String::new(),
            fix_duplicates: false,
            skip_unresolved_tagvs: false,
            filter_expansion_limit: 4096,
            enable_appends: false,
            enable_compaction: true,
            flush_interval: Duration::from_secs(60),
            max_buffered_points: 4_000_000,
            max_buffer_bytes: 512 << 20,
            wal: true,
            wal_dir: None,
            wal_sync: false,
            wal_segment_bytes: crate::wal::SEGMENT_BYTES,
            meta: crate::meta::MetaTracking::default(),
            index: false,
            max_series_per_metric: 0,
            index_stats_top: 20,
            series_idle_ms: 3_600_000,
            uid_cache_names: crate::uid::DEFAULT_CACHE_ENTRIES,
            uid_cache_ids: crate::uid::DEFAULT_CACHE_ENTRIES,
            rollups: None,
            histograms: None,
            retention_ms: None,
            clock: Clock::system(),
        }
    }
}

/// The flush interval on a store other TSDs read (`tsd.storage.backend = bigtable`) when
/// `tsd.storage.flush_interval` is not set.
pub const SHARED_STORE_FLUSH_INTERVAL: Duration = Duration::from_secs(1);

impl Settings {
    pub fn from_config(c: &Config) -> Result<Settings> {
        let d = Settings::default();
        // On Bigtable other TSDs read the data: buffered points reach it within a second
        // unless the interval is configured.
        let default_flush = if c.get_str("tsd.storage.backend", "embedded") == "bigtable" {
            SHARED_STORE_FLUSH_INTERVAL
        } else {
            d.flush_interval
        };
        let flush_ms = c.get_int(
            "tsd.storage.flush_interval",
            default_flush.as_millis() as i64,
        )?;
        let max_points = c.get_int(
            "tsd.storage.max_buffered_points",
            d.max_buffered_points as i64,
        )?;
        Ok(Settings {
            schema: Schema::from_config(c)?,
            auto_create_metrics: c.get_bool("tsd.core.auto_create_metrics", d.auto_create_metrics),
            auto_create_tagks: c.get_bool("tsd.core.auto_create_tagks", d.auto_create_tagks),
            auto_create_tagvs: c.get_bool("tsd.core.auto_create_tagvs", d.auto_create_tagvs),
            random_metrics: c.get_bool("tsd.core.uid.random_metrics", d.random_metrics),
            allow_special_chars: c.get_str("tsd.core.tag.allow_specialchars", "").to_string(),
            fix_duplicates: c.get_bool("tsd.storage.fix_duplicates", d.fix_duplicates),
            skip_unresolved_tagvs: c
                .get_bool("tsd.query.skip_unresolved_tagvs", d.skip_unresolved_tagvs),
            filter_expansion_limit: c
                .get_int(
                    "tsd.query.filter.expansion_limit",
                    d.filter_expansion_limit as i64,
                )?
                .max(0) as usize,
            enable_appends: c.get_bool("tsd.storage.enable_appends", d.enable_appends),
            enable_compaction: c.get_bool("tsd.storage.enable_compaction", d.enable_compaction),
            flush_interval: Duration::from_millis(flush_ms.max(1) as u64),
            max_buffered_points: max_points.max(1) as usize,
            max_buffer_bytes: c
                .get_int("tsd.storage.max_buffer_bytes", d.max_buffer_bytes as i64)?
                .max(1 << 20) as usize,
            wal: c.get_bool("tsd.storage.wal.enable", d.wal),
            wal_dir: c.get("tsd.storage.wal.dir").map(std::path::PathBuf::from),
            wal_sync: c.get_bool("tsd.storage.wal.sync", d.wal_sync),
            wal_segment_bytes: d.wal_segment_bytes,
            meta: crate::meta::MetaTracking::from_config(c),
            index: c.get_bool("tsd.index.enable", d.index),
            max_series_per_metric: c
                .get_int(
                    "tsd.index.max_series_per_metric",
                    d.max_series_per_metric as i64,
                )?
                .max(0) as u64,
            index_stats_top: c
                .get_int("tsd.index.stats.top", d.index_stats_top as i64)?
                .max(0) as usize,
            series_idle_ms: c
                .get_int("tsd.storage.series_cache.idle_ms", d.series_idle_ms)?
                .max(1),
            uid_cache_names: c
                .get_int("tsd.uid.lru.name.size", d.uid_cache_names as i64)?
                .max(2) as usize,
            uid_cache_ids: c
                .get_int("tsd.uid.lru.id.size", d.uid_cache_ids as i64)?
                .max(2) as usize,
            rollups: crate::rollup::RollupSettings::from_config(c)?.map(std::sync::Arc::new),
            histograms: crate::histogram::settings_from_config(c)?.map(std::sync::Arc::new),
            retention_ms: crate::rollup::retention::raw_retention(c)?,
            clock: d.clock,
        })
        .and_then(|s| {
            crate::rollup::retention::check(&s)?;
            Ok(s)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bigtable_flushes_within_a_second_unless_configured() {
        let mut c = Config::default();
        assert_eq!(
            Settings::from_config(&c).unwrap().flush_interval,
            Duration::from_secs(60)
        );
        c.set("tsd.storage.backend", "bigtable");
        assert_eq!(
            Settings::from_config(&c).unwrap().flush_interval,
            SHARED_STORE_FLUSH_INTERVAL
        );
        c.set("tsd.storage.flush_interval", "5000");
        assert_eq!(
            Settings::from_config(&c).unwrap().flush_interval,
            Duration::from_secs(5)
        );
    }
}
