#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(dead_code)]

use std::sync::Arc;

use hourglass_engine::{Settings, Tsdb};
use hourglass_storage::Store;
use hourglass_storage::memory::MemoryStore;
use hourglass_store_fjall::FjallStore;

/// Every engine test runs on each backend.
pub(crate) fn backends() -> Vec<(&'static str, Arc<dyn Store>)> {
    let dir = tempfile::tempdir().expect("temp dir").keep();
    vec![
        ("memory", Arc::new(MemoryStore::new()) as Arc<dyn Store>),
        (
            "bigtable",
            Arc::new(hourglass_store_bigtable::emulator::fresh_store()) as Arc<dyn Store>,
        ),
        (
            "embedded",
            Arc::new(FjallStore::open(&dir).expect("open fjall")) as Arc<dyn Store>,
        ),
    ]
}

pub(crate) fn auto_create() -> Settings {
    Settings {
        auto_create_metrics: true,
        ..Settings::default()
    }
}

pub(crate) fn open(store: Arc<dyn Store>, settings: Settings) -> Arc<Tsdb> {
    Tsdb::open(store, settings).expect("open tsdb")
}
