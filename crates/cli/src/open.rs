//! Options every subcommand shares, and opening the store and database from them.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use hourglass_core::config::Config;
use hourglass_engine::cell_codec::DataCellCodec;
use hourglass_engine::{Settings, Tsdb};
use hourglass_storage::Store;
use hourglass_store_fjall::FjallStore;

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct StoreArgs {
    /// Directory of the embedded store.
    #[arg(long, default_value = "./data")]
    pub(crate) data_dir: PathBuf,
    /// OpenTSDB-style config file (`key = value`).
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// Data table name (`tsd.storage.hbase.data_table`).
    #[arg(long)]
    pub(crate) table: Option<String>,
    /// UID table name (`tsd.storage.hbase.uid_table`).
    #[arg(long)]
    pub(crate) uidtable: Option<String>,
    /// Log what happens.
    #[arg(short, long)]
    pub(crate) verbose: bool,
}

impl StoreArgs {
    pub(crate) fn config(&self) -> anyhow::Result<Config> {
        let mut config = Config::default();
        if let Some(path) = &self.config {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read config {}", path.display()))?;
            config
                .merge_text(&text)
                .with_context(|| format!("bad config {}", path.display()))?;
        }
        if let Some(t) = &self.table {
            config.set("tsd.storage.hbase.data_table", t);
        }
        if let Some(t) = &self.uidtable {
            config.set("tsd.storage.hbase.uid_table", t);
        }
        Ok(config)
    }

    /// Engine settings; the write-ahead log lives in `<data dir>/wal` unless configured.
    pub(crate) fn settings(&self) -> anyhow::Result<Settings> {
        let mut settings = Settings::from_config(&self.config()?)?;
        if settings.wal_dir.is_none() {
            settings.wal_dir = Some(self.data_dir.join("wal"));
        }
        Ok(settings)
    }

    /// Opens the embedded store; compacted data cells are kept in their compact form.
    pub(crate) fn open_store(&self) -> anyhow::Result<Arc<dyn Store>> {
        let schema = self.settings()?.schema;
        let store = FjallStore::open(&self.data_dir)?
            .with_cell_codec(&schema.data_table, Arc::new(DataCellCodec));
        Ok(Arc::new(store))
    }

    /// Opens the database; buffered points of a previous run are replayed and flushed.
    pub(crate) fn open_tsdb(&self, settings: Settings) -> anyhow::Result<Arc<Tsdb>> {
        Ok(Tsdb::open(self.open_store()?, settings)?)
    }
}
