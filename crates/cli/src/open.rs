//! Options every subcommand shares, and opening the store and database from them.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use anyhow::Context;
use hourglass_core::config::{Config, SEARCH_PATHS};
use hourglass_engine::cell_codec::DataCellCodec;
use hourglass_engine::{Settings, Tsdb};
use hourglass_storage::Store;
use hourglass_store_bigtable::{BigtableConfig, BigtableStore};
use hourglass_store_fjall::{FjallStore, Grouping};

/// Files of the tag index's first level merged at once (the embedded store's default is 4;
/// its most, 16, stays under the runs at which fjall stalls writes).
const INDEX_L0_FILES: u8 = 16;

/// Duplicate points resolved by value in OpenTSDB when true; Hourglass keeps the newest.
pub(crate) const OTSDB_TIMESTAMP: &str = "tsd.storage.use_otsdb_timestamp";
/// A search plugin, which OpenTSDB's `uid metasync` sends the meta data it writes.
pub(crate) const SEARCH_PLUGIN: &str = "tsd.search.enable";

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct StoreArgs {
    /// Directory of the embedded store.
    #[arg(long, default_value = "./data")]
    pub(crate) data_dir: PathBuf,
    /// OpenTSDB's config file (Java properties: `key = value`). Without it, the first
    /// readable of ./opentsdb.conf, /etc/opentsdb.conf, /etc/opentsdb/opentsdb.conf and
    /// /opt/opentsdb/opentsdb.conf is loaded.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// Data table name (`tsd.storage.hbase.data_table`).
    #[arg(long)]
    pub(crate) table: Option<String>,
    /// UID table name (`tsd.storage.hbase.uid_table`).
    #[arg(long)]
    pub(crate) uidtable: Option<String>,
    /// Storage backend: `embedded` (default) or `bigtable` (`tsd.storage.backend`).
    #[arg(long)]
    pub(crate) backend: Option<String>,
    /// Log what happens.
    #[arg(short, long)]
    pub(crate) verbose: bool,
    /// Accepted for OpenTSDB's command lines (`tsd.storage.hbase.zk_quorum`); no effect:
    /// there is no ZooKeeper.
    #[arg(long, value_name = "SPEC")]
    pub(crate) zkquorum: Option<String>,
    /// Accepted for OpenTSDB's command lines (`tsd.storage.hbase.zk_basedir`); no effect:
    /// there is no ZooKeeper.
    #[arg(long, value_name = "PATH")]
    pub(crate) zkbasedir: Option<String>,
    /// The config file's keys, read once.
    #[arg(skip)]
    file_config: OnceLock<Config>,
}

impl StoreArgs {
    /// The config file's keys with the flags above on top.
    pub(crate) fn config(&self) -> anyhow::Result<Config> {
        let mut config = match self.file_config.get() {
            Some(c) => c.clone(),
            None => {
                let c = self.read_config_file()?;
                self.file_config.get_or_init(|| c).clone()
            }
        };
        if let Some(t) = &self.table {
            config.set("tsd.storage.hbase.data_table", t);
        }
        if let Some(t) = &self.uidtable {
            config.set("tsd.storage.hbase.uid_table", t);
        }
        if let Some(b) = &self.backend {
            config.set("tsd.storage.backend", b);
        }
        if let Some(q) = &self.zkquorum {
            config.set("tsd.storage.hbase.zk_quorum", q);
        }
        if let Some(d) = &self.zkbasedir {
            config.set("tsd.storage.hbase.zk_basedir", d);
        }
        Ok(config)
    }

    /// [`StoreArgs::config`], refused (as the TSD refuses to start) when it sets one of
    /// `keys` (plugin switches of `UNAVAILABLE_SWITCHES`, keys of `REFUSED_VALUES`) away
    /// from what Hourglass does: each command names the keys that would change what it does.
    pub(crate) fn config_refusing(&self, keys: &[&str]) -> anyhow::Result<Config> {
        let config = self.config()?;
        for key in keys {
            // The key alone, so the TSD's own check words the refusal.
            let mut one = Config::default();
            if let Some(value) = config.get(key) {
                one.set(key, value);
            }
            if let Some(refusal) = one.refusal() {
                anyhow::bail!(refusal);
            }
        }
        Ok(config)
    }

    /// `--config`, which must be readable; without it the first readable file of OpenTSDB's
    /// search path ([`SEARCH_PATHS`]), if any. Java reads these files as ISO-8859-1: text
    /// that is not UTF-8 is read that way.
    fn read_config_file(&self) -> anyhow::Result<Config> {
        let found = match &self.config {
            Some(path) => {
                let bytes = std::fs::read(path)
                    .with_context(|| format!("cannot read config {}", path.display()))?;
                (path.clone(), bytes)
            }
            None => {
                let found = SEARCH_PATHS
                    .iter()
                    .find_map(|p| std::fs::read(p).ok().map(|b| (PathBuf::from(p), b)));
                let Some(found) = found else {
                    tracing::info!(
                        searched = %SEARCH_PATHS.join(", "),
                        "no configuration file found, using defaults"
                    );
                    return Ok(Config::default());
                };
                found
            }
        };
        let (path, bytes) = found;
        let text = match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => e.into_bytes().into_iter().map(char::from).collect(),
        };
        let config =
            Config::parse(&text).with_context(|| format!("bad config {}", path.display()))?;
        tracing::info!(path = %path.display(), "loaded configuration file {}", path.display());
        Ok(config)
    }

    /// Engine settings (defaults decided by `Settings::from_config`, the Bigtable flush
    /// interval included); the write-ahead log lives in `<data dir>/wal` unless configured.
    pub(crate) fn settings(&self) -> anyhow::Result<Settings> {
        self.settings_from(&self.config()?)
    }

    /// [`StoreArgs::settings`] from an already layered config (flags applied on top).
    pub(crate) fn settings_from(&self, config: &Config) -> anyhow::Result<Settings> {
        let mut settings = Settings::from_config(config)?;
        if settings.wal_dir.is_none() {
            settings.wal_dir = Some(self.data_dir.join("wal"));
        }
        Ok(settings)
    }

    /// Opens the configured store. The embedded one keeps compacted data cells in their
    /// compact form; Bigtable gets OpenTSDB's bytes as they are (its tables stay readable by
    /// OpenTSDB's own TSDs).
    pub(crate) fn open_store(&self) -> anyhow::Result<Arc<dyn Store>> {
        let config = self.config()?;
        let settings = self.settings()?;
        let schema = settings.schema;
        match config.get_str("tsd.storage.backend", "embedded") {
            "embedded" => {
                let mut store = FjallStore::open(&self.data_dir)?
                    .with_cell_codec(&schema.data_table, Arc::new(DataCellCodec));
                // A series' rows of each closed period kept under one key (RFC 0006).
                let period = config.get_int("tsd.storage.embedded.group_period", 86_400)?;
                if period != 0 {
                    if period < 3600 || period % 3600 != 0 || period > i64::from(u32::MAX) {
                        anyhow::bail!(
                            "tsd.storage.embedded.group_period must be 0 (no grouping) or a whole number of hours in seconds, not {period}"
                        );
                    }
                    store = store.with_grouping(
                        &schema.data_table,
                        Grouping {
                            timestamp_offset: schema.timestamp_offset(),
                            period_secs: period as u32,
                            grace_secs: 3600,
                        },
                    );
                }
                // A computed tier's rows of a series grouped over a month or so (RFC 0012).
                for (table, period_secs, grace_secs) in settings
                    .rollups
                    .as_ref()
                    .map(|r| r.grouped_tables(&schema.data_table))
                    .unwrap_or_default()
                {
                    store = store.with_grouping(
                        &table,
                        Grouping {
                            timestamp_offset: schema.timestamp_offset(),
                            period_secs,
                            grace_secs,
                        },
                    );
                }
                // Binaries without the tag index refuse the data dir from now on, so none
                // writes points without their entries (RFC 0007).
                if settings.index {
                    store = store.with_indexed(&schema.data_table);
                }
                // The tag index's large writes are one file per kind of entry (RFC 0007):
                // merged only once several writes' files are there.
                store = store.with_l0_threshold(&schema.index_table, INDEX_L0_FILES);
                Ok(Arc::new(store))
            }
            "bigtable" => {
                let mut bt = BigtableConfig::new(
                    config.get_str("google.bigtable.project.id", "hourglass"),
                    config.get_str("google.bigtable.instance.id", "hourglass"),
                );
                bt.emulator_host = config
                    .get("google.bigtable.emulator.host")
                    .map(str::to_string);
                let timeout = config.get_int("google.bigtable.timeout_ms", 30_000)?;
                bt.timeout = std::time::Duration::from_millis(timeout.max(1) as u64);
                Ok(Arc::new(BigtableStore::connect(bt)?))
            }
            other => anyhow::bail!("unknown storage backend {other:?}: use embedded or bigtable"),
        }
    }

    /// Opens the database; buffered points of a previous run are replayed and flushed. It
    /// is closed when the command is done with it ([`Db`]).
    pub(crate) fn open_tsdb(&self, settings: Settings) -> anyhow::Result<Db> {
        Ok(Db(Tsdb::open(self.open_store()?, settings)?))
    }
}

/// A command's database, closed when dropped (whatever the command's outcome): a process
/// that stops without closing has the next start write the UID table again (RFC 0001, "UIDs
/// after a failed sync"), and closing flushes what the command buffered.
#[derive(Debug)]
pub(crate) struct Db(pub(crate) Arc<Tsdb>);

impl std::ops::Deref for Db {
    type Target = Arc<Tsdb>;

    fn deref(&self) -> &Arc<Tsdb> {
        &self.0
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Err(e) = self.0.close() {
            eprintln!("closing the database failed: {e}");
        }
    }
}
