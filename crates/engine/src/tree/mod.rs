//! Trees: OpenTSDB's browsable hierarchies of series, stored in the tree table exactly as
//! 2.4.1 stores them (RFC 0010).
//!
//! - [`model`]: trees, rules, branches, leaves and their JSON;
//! - [`store`]: their rows and columns in the tree table;
//! - [`builder`]: a series' walk through a tree's rules;
//! - here: `tsdb uid treesync` / `treepurge` and real-time processing of new series.

pub mod builder;
pub mod model;
pub mod store;

use std::collections::VecDeque;

use hourglass_core::schema::META_FAMILY;
use hourglass_core::uid::hex_upper;
use hourglass_storage::{ReadOptions, ScanRequest};
use parking_lot::Mutex;

pub use builder::{Outcome, TreeBuilder, load_or_init_root, root_for_test};
pub use model::*;
pub use store::*;

use crate::meta::{TS_META, get_ts_meta};
use crate::{Result, Tsdb};

/// What [`tree_sync`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeSyncReport {
    /// Enabled trees the series went through.
    pub trees: usize,
    /// Series with a TSMeta processed.
    pub series: u64,
    /// Series skipped: a UID no longer resolves, or the walk refused the series.
    pub skipped: u64,
}

/// Runs every stored TSMeta through every enabled tree (`tsdb uid treesync`).
pub fn tree_sync(tsdb: &Tsdb) -> Result<TreeSyncReport> {
    let trees: Vec<Tree> = fetch_all_trees(tsdb)?
        .into_iter()
        .filter(|t| t.enabled)
        .collect();
    let mut report = TreeSyncReport {
        trees: trees.len(),
        ..TreeSyncReport::default()
    };
    if trees.is_empty() {
        return Ok(report);
    }
    let mut builders: Vec<TreeBuilder> = trees.into_iter().map(TreeBuilder::new).collect();
    let schema = &tsdb.settings().schema;
    let request = ScanRequest {
        read: ReadOptions::family(META_FAMILY),
        ..Default::default()
    };
    for row in tsdb.store().scan(&schema.meta_table, &request)? {
        let row = row?;
        if row.value(META_FAMILY, TS_META).is_none() {
            continue;
        }
        match process_series(tsdb, &mut builders, &row.key) {
            Ok(true) => report.series += 1,
            Ok(false) => report.skipped += 1,
            Err(e) if e.kind() == crate::ErrorKind::Unavailable => return Err(e),
            Err(e) => {
                tracing::warn!(tsuid = %hex_upper(&row.key), error = %e, "series not processed through trees");
                report.skipped += 1;
            }
        }
    }
    Ok(report)
}

/// Runs one series through each builder's tree; false when it has no TSMeta or a UID of
/// it no longer resolves.
fn process_series(tsdb: &Tsdb, builders: &mut [TreeBuilder], tsuid: &[u8]) -> Result<bool> {
    let meta = match get_ts_meta(tsdb, tsuid) {
        Ok(Some(m)) => m,
        Ok(None) => return Ok(false),
        Err(e) if e.kind() == crate::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    for b in builders.iter_mut() {
        if let Err(e) = b.process_and_store(tsdb, &meta) {
            if e.kind() == crate::ErrorKind::Unavailable {
                return Err(e);
            }
            tracing::warn!(tree = b.tree().tree_id, tsuid = %meta.tsuid, error = %e, "series not added to tree");
        }
    }
    Ok(true)
}

/// Runs the series `tsuids` through every enabled tree (trees read once); returns how many
/// had a TSMeta to process.
pub fn process_new_series(tsdb: &Tsdb, tsuids: &[Vec<u8>]) -> Result<usize> {
    let trees: Vec<Tree> = fetch_all_trees(tsdb)?
        .into_iter()
        .filter(|t| t.enabled)
        .collect();
    if trees.is_empty() {
        return Ok(0);
    }
    let mut builders: Vec<TreeBuilder> = trees.into_iter().map(TreeBuilder::new).collect();
    let mut done = 0;
    for tsuid in tsuids {
        if process_series(tsdb, &mut builders, tsuid)? {
            done += 1;
        }
    }
    Ok(done)
}

/// Runs one series' TSMeta through every enabled tree now.
pub fn process_meta(tsdb: &Tsdb, meta: &crate::meta::TsMeta) -> Result<()> {
    for tree in fetch_all_trees(tsdb)?.into_iter().filter(|t| t.enabled) {
        TreeBuilder::new(tree).process_and_store(tsdb, meta)?;
    }
    Ok(())
}

/// Deletes a tree's branches, leaves, collisions and not-matched entries, and with
/// `definition` the tree itself (`tsdb uid treepurge`). Returns the cells deleted.
pub fn tree_purge(tsdb: &Tsdb, tree_id: u16, definition: bool) -> Result<usize> {
    delete_tree(tsdb, tree_id, definition)
}

/// Most series waiting for tree processing; past it new series are dropped with a warning
/// (`tsdb uid treesync` adds them later).
const QUEUE_MAX: usize = 1 << 20;

/// Series whose TSMeta the writer just created, waiting to be run through the trees
/// (`tsd.core.tree.enable_processing`).
#[derive(Debug, Default)]
pub struct TreeQueue {
    pending: Mutex<VecDeque<Vec<u8>>>,
}

impl TreeQueue {
    pub fn push(&self, tsuid: &[u8]) {
        let mut q = self.pending.lock();
        if q.len() >= QUEUE_MAX {
            tracing::warn!(tsuid = %hex_upper(tsuid), "tree processing queue full; series left for tsdb uid treesync");
            return;
        }
        q.push_back(tsuid.to_vec());
    }

    pub fn len(&self) -> usize {
        self.pending.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn take(&self) -> Vec<Vec<u8>> {
        self.pending.lock().drain(..).collect()
    }
}

/// Runs the queued new series through every enabled tree (trees read once per call).
/// Returns how many series were processed.
pub fn process_queued(tsdb: &Tsdb, queue: &TreeQueue) -> Result<usize> {
    if queue.is_empty() {
        return Ok(0);
    }
    let trees: Vec<Tree> = fetch_all_trees(tsdb)?
        .into_iter()
        .filter(|t| t.enabled)
        .collect();
    let series = queue.take();
    if trees.is_empty() {
        return Ok(0);
    }
    let mut builders: Vec<TreeBuilder> = trees.into_iter().map(TreeBuilder::new).collect();
    let mut done = 0;
    for (i, tsuid) in series.iter().enumerate() {
        match process_series(tsdb, &mut builders, tsuid) {
            Ok(true) => done += 1,
            Ok(false) => {}
            Err(e) => {
                // Storage went away: the rest waits for the next call.
                for t in &series[i..] {
                    queue.push(t);
                }
                return Err(e);
            }
        }
    }
    Ok(done)
}
