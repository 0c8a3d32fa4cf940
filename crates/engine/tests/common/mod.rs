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
            // Scans in period order, the weakest order a store may return (RFC 0006).
            "memory-period",
            Arc::new(period_ordered_memory()) as Arc<dyn Store>,
        ),
        (
            "bigtable",
            Arc::new(hourglass_store_bigtable::emulator::fresh_store()) as Arc<dyn Store>,
        ),
        ("embedded", Arc::new(embedded(&dir)) as Arc<dyn Store>),
        (
            // Day periods as `tsdb` groups them: groups of many members, joint streams
            // spanning hours, read whole by the query path (RFC 0006 phase 3).
            "embedded-day",
            Arc::new(embedded_with_period(&dir.join("day"), 86_400)) as Arc<dyn Store>,
        ),
    ]
}

/// A memory store whose data-table scans come series by series within each UTC day.
pub(crate) fn period_ordered_memory() -> MemoryStore {
    let schema = hourglass_core::schema::Schema::default();
    MemoryStore::new().with_period_order(&schema.data_table, schema.timestamp_offset(), 86_400)
}

/// The embedded store as `tsdb` opens it (compacted cells in their compact form, closed
/// periods grouped), with one-hour periods grouped at once so the tests go through groups;
/// the `1h` and `10m` rollup tiers grouped by 4 and 1 days (RFC 0012).
pub(crate) fn embedded(dir: &std::path::Path) -> FjallStore {
    embedded_with_period(dir, 3600)
}

/// [`embedded`] with periods of `period_secs`.
pub(crate) fn embedded_with_period(dir: &std::path::Path, period_secs: u32) -> FjallStore {
    let schema = hourglass_core::schema::Schema::default();
    FjallStore::open(dir)
        .expect("open fjall")
        .with_cell_codec(
            &schema.data_table,
            Arc::new(hourglass_engine::cell_codec::DataCellCodec),
        )
        .with_grouping(
            &schema.data_table,
            hourglass_store_fjall::Grouping {
                timestamp_offset: schema.timestamp_offset(),
                period_secs,
                grace_secs: 0,
            },
        )
        .with_grouping(
            "tsdb-rollup-1h",
            hourglass_store_fjall::Grouping {
                timestamp_offset: schema.timestamp_offset(),
                period_secs: 4 * 86_400,
                grace_secs: 0,
            },
        )
        .with_grouping(
            "tsdb-rollup-10m",
            hourglass_store_fjall::Grouping {
                timestamp_offset: schema.timestamp_offset(),
                period_secs: 86_400,
                grace_secs: 0,
            },
        )
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
