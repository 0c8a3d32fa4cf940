//! Real-time tracking of written series (`tsd.core.meta.*`).

use super::*;
use crate::bounded::BoundedMap;
use parking_lot::Mutex;

/// Series remembered as having their `ts_meta`.
const KNOWN_SERIES_MAX: usize = 1 << 20;

type Set<K> = HashSet<K, foldhash::fast::RandomState>;

/// OpenTSDB's `tsd.core.meta.*` switches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MetaTracking {
    /// `enable_tsuid_tracking`: note every series written in the meta table.
    pub tsuid_tracking: bool,
    /// `enable_realtime_ts`: create a series' `ts_meta` when it is first seen.
    pub realtime_ts: bool,
    /// `enable_tsuid_incrementing`: count data points in `ts_ctr`.
    pub tsuid_incrementing: bool,
    /// `enable_realtime_uid`: write UIDMeta when a UID is assigned.
    pub realtime_uid: bool,
    /// `tsd.core.tree.enable_processing`: run each series whose TSMeta is created through
    /// the enabled trees (RFC 0010).
    pub tree_processing: bool,
}

impl MetaTracking {
    pub fn from_config(c: &hourglass_core::config::Config) -> MetaTracking {
        MetaTracking {
            tsuid_tracking: c.get_bool("tsd.core.meta.enable_tsuid_tracking", false),
            realtime_ts: c.get_bool("tsd.core.meta.enable_realtime_ts", false),
            tsuid_incrementing: c.get_bool("tsd.core.meta.enable_tsuid_incrementing", false),
            realtime_uid: c.get_bool("tsd.core.meta.enable_realtime_uid", false),
            tree_processing: c.get_bool("tsd.core.tree.enable_processing", false),
        }
    }

    /// Whether writes touch the meta table at all.
    pub fn tracks_series(&self) -> bool {
        self.tsuid_tracking
    }
}

/// Real-time series tracking for the write path. It runs once per flush with each written
/// series and its point count, so its cost follows series per flush, not points:
/// - tracking only: `ts_ctr` set to 1 (its cell time is the series' last write), except
///   for a series whose `ts_ctr` its first point wrote ([`Tracker::first_seen`], a series
///   new to the store) when that point is all the flush holds of it: the cell already has
///   that point's time;
/// - with `realtime_ts`: `ts_meta` created for series not seen before (one read per series
///   per process, remembered after);
/// - with `realtime_ts` and incrementing: `ts_ctr` incremented by the flushed point count,
///   `ts_meta` created when the counter was new.
#[derive(Debug)]
pub(crate) struct Tracker {
    store: Arc<dyn Store>,
    schema: Schema,
    flags: MetaTracking,
    /// Series known to have `ts_meta` (bounded: one that left is read again once).
    known: BoundedMap<Vec<u8>, ()>,
    /// New series for tree processing, when on.
    trees: Option<Arc<crate::tree::TreeQueue>>,
    /// Series whose `ts_ctr` [`Tracker::first_seen`] wrote whole at their first point's
    /// arrival, not yet met by a flush (bounded: past the bound, flushes write them again).
    fresh: Mutex<Set<Vec<u8>>>,
}

impl Tracker {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        schema: Schema,
        flags: MetaTracking,
        trees: Option<Arc<crate::tree::TreeQueue>>,
    ) -> Option<Tracker> {
        flags.tracks_series().then(|| Tracker {
            store,
            schema,
            flags,
            known: BoundedMap::new(KNOWN_SERIES_MAX),
            trees,
            fresh: Mutex::new(Set::default()),
        })
    }

    /// Records a flush: `(tsuid, points)` per written series.
    pub(crate) fn record(&self, series: &[(Vec<u8>, u64)], now_ms: i64) -> Result<()> {
        let table = self.schema.meta_table.as_str();
        let created = now_ms / 1000;
        if self.flags.realtime_ts && self.flags.tsuid_incrementing {
            for (tsuid, n) in series {
                let total = self
                    .store
                    .increment(table, tsuid, META_FAMILY, TS_CTR, *n as i64)?;
                if total <= *n as i64 && self.known.get(tsuid.as_slice()).is_none() {
                    self.store_new(tsuid, created)?;
                }
            }
            return Ok(());
        }
        if self.flags.realtime_ts {
            for (tsuid, _) in series {
                self.ensure_ts_meta(tsuid, created)?;
            }
            return Ok(());
        }
        // A series new to the store whose one flushed point is the one `first_seen` wrote
        // `ts_ctr` for: the cell holds that point's arrival, its last write already.
        let mut fresh = self.fresh.lock();
        let batch: Vec<hourglass_storage::RowMutation> = series
            .iter()
            .filter(|(tsuid, n)| !(fresh.remove(tsuid.as_slice()) && *n == 1))
            .map(|(tsuid, _)| hourglass_storage::RowMutation {
                key: tsuid.clone(),
                mutations: vec![Mutation::set_at(
                    META_FAMILY,
                    TS_CTR,
                    now_ms,
                    1i64.to_be_bytes().to_vec(),
                )],
            })
            .collect();
        drop(fresh);
        if !batch.is_empty() {
            self.store.mutate_rows(table, &batch)?;
        }
        Ok(())
    }

    /// Records a series the writer sees for the first time since it started, before any of
    /// its points are flushed: its `ts_meta` (with `realtime_ts`) or its `ts_ctr` cell.
    /// `new`: one of the series' UIDs was just assigned by this process, so no process
    /// wrote its meta row before; the counter's row is then written whole, without reading
    /// the row to merge into, and the flush that finds this point alone of the series
    /// leaves the cell as it is ([`Tracker::record`]). Call it before the point is
    /// buffered.
    pub(crate) fn first_seen(&self, tsuid: &[u8], now_ms: i64, new: bool) -> Result<()> {
        if self.flags.realtime_ts {
            return self.ensure_ts_meta(tsuid, now_ms / 1000);
        }
        if new {
            let one = 1i64.to_be_bytes();
            self.store.put_cells(
                &self.schema.meta_table,
                &[hourglass_storage::CellRow {
                    key: tsuid,
                    family: META_FAMILY,
                    qualifier: TS_CTR,
                    timestamp: now_ms,
                    value: &one,
                }],
            )?;
            let mut fresh = self.fresh.lock();
            if fresh.len() < KNOWN_SERIES_MAX {
                fresh.insert(tsuid.to_vec());
            }
            return Ok(());
        }
        self.store.mutate_row(
            &self.schema.meta_table,
            tsuid,
            &[Mutation::set_at(
                META_FAMILY,
                TS_CTR,
                now_ms,
                1i64.to_be_bytes().to_vec(),
            )],
        )?;
        Ok(())
    }

    /// Forgets the series [`Tracker::first_seen`] wrote `ts_ctr` for (a batch holding their
    /// first points was refused): flushes write their cells again.
    pub(crate) fn forget_fresh(&self) {
        self.fresh.lock().clear();
    }

    /// Creates the series' `ts_meta` unless it has one (one read per series per process).
    fn ensure_ts_meta(&self, tsuid: &[u8], created_secs: i64) -> Result<()> {
        if self.known.get(tsuid).is_some() {
            return Ok(());
        }
        let row = self.store.get(
            &self.schema.meta_table,
            tsuid,
            &ReadOptions::family(META_FAMILY),
        )?;
        if row
            .as_ref()
            .and_then(|r| r.value(META_FAMILY, TS_META))
            .is_none()
        {
            self.store_new(tsuid, created_secs)?;
        }
        self.known.insert(tsuid.to_vec(), ());
        Ok(())
    }

    fn store_new(&self, tsuid: &[u8], created_secs: i64) -> Result<()> {
        let fields = MetaFields {
            created: created_secs,
            ..MetaFields::default()
        };
        self.store.mutate_row(
            &self.schema.meta_table,
            tsuid,
            &[Mutation::set(
                META_FAMILY,
                TS_META,
                ts_meta_storage_json(&hex_upper(tsuid), &fields),
            )],
        )?;
        tracing::debug!(tsuid = %hex_upper(tsuid), "created new TSUID meta entry");
        if let Some(q) = &self.trees {
            q.push(tsuid);
        }
        Ok(())
    }
}
