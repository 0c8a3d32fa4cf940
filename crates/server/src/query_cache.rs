//! Answers of `/api/query` kept and served again to the same query while nothing they hold
//! has changed (`tsd.query.cache.max_bytes`, `tsd.query.cache.max_age`).
//!
//! A dashboard asks the same queries again and again. An answer is kept under its query as
//! resolved (absolute times, sub-queries, output flags) with a [`Watch`] registered over
//! the metrics and time ranges it read before it read them; any write, deletion, annotation
//! or rename that touches them after the registration marks the watch stale
//! (`hourglass_engine::changes`), and a stale answer is never served. So an answer served
//! from the cache is the answer the query would compute now. Only a TSD that alone writes
//! its store keeps answers: over a store other TSDs write (Bigtable) the cache is off.
//!
//! Memory is bounded by `max_bytes` (keys and bodies), an answer above an eighth of it is
//! not kept, and an answer older than `max_age` is computed again (retention and limit
//! changes are not tracked as changes).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use hourglass_engine::changes::Watch;
use quick_cache::Weighter;
use quick_cache::sync::Cache;

/// Bytes counted for an entry besides its key and body.
const ENTRY_OVERHEAD: u64 = 256;

#[derive(Debug)]
struct Entry {
    body: Bytes,
    watch: Watch,
    at: Instant,
}

#[derive(Debug, Clone)]
struct ByBytes;

impl Weighter<String, Arc<Entry>> for ByBytes {
    fn weight(&self, key: &String, entry: &Arc<Entry>) -> u64 {
        key.len() as u64 + entry.body.len() as u64 + ENTRY_OVERHEAD
    }
}

/// Counters for `/api/stats` (`tsd.query.cache.*`).
#[derive(Debug, Default)]
pub(crate) struct CacheStats {
    pub(crate) hits: AtomicU64,
    pub(crate) misses: AtomicU64,
    /// Kept answers found stale (changed since, or too old) and dropped.
    pub(crate) stale: AtomicU64,
    pub(crate) stored: AtomicU64,
}

/// The kept answers.
#[derive(Debug)]
pub(crate) struct QueryCache {
    entries: Cache<String, Arc<Entry>, ByBytes>,
    max_bytes: u64,
    max_age: Duration,
    pub(crate) stats: CacheStats,
}

impl QueryCache {
    pub(crate) fn new(max_bytes: u64, max_age: Duration) -> QueryCache {
        // Expected entries: answers of about 16 KiB.
        let items = (max_bytes / 16_384).clamp(16, 1 << 20) as usize;
        QueryCache {
            entries: Cache::with_weighter(items, max_bytes, ByBytes),
            max_bytes,
            max_age,
            stats: CacheStats::default(),
        }
    }

    /// The kept answer of `key`, when it is still the answer.
    pub(crate) fn get(&self, key: &str) -> Option<Bytes> {
        let Some(entry) = self.entries.get(key) else {
            self.stats.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        if entry.at.elapsed() > self.max_age || !entry.watch.is_fresh() {
            self.entries.remove(key);
            self.stats.stale.fetch_add(1, Ordering::Relaxed);
            self.stats.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        self.stats.hits.fetch_add(1, Ordering::Relaxed);
        Some(entry.body.clone())
    }

    /// Keeps `body` as the answer of `key`, read under `watch`, unless something it read
    /// changed meanwhile or it is too large to keep.
    pub(crate) fn insert(&self, key: String, body: Bytes, watch: Watch) {
        let weight = key.len() as u64 + body.len() as u64 + ENTRY_OVERHEAD;
        if weight > self.max_bytes / 8 || !watch.is_fresh() {
            return;
        }
        self.stats.stored.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(Entry {
            body,
            watch,
            at: Instant::now(),
        });
        self.entries.insert(key, entry);
    }

    /// Answers kept now, and their bytes as counted against `max_bytes`.
    pub(crate) fn usage(&self) -> (usize, u64) {
        (self.entries.len(), self.entries.weight())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hourglass_engine::changes::{Changes, Dependency};

    fn dep() -> Vec<Dependency> {
        vec![Dependency {
            metric: vec![0, 0, 1],
            lo_ms: 0,
            hi_ms: 1000,
        }]
    }

    #[test]
    fn serves_an_answer_until_what_it_read_changes() {
        let changes = Arc::new(Changes::default());
        let cache = QueryCache::new(1 << 20, Duration::from_secs(60));
        cache.insert(
            "q".into(),
            Bytes::from_static(b"[1]"),
            changes.watch(&dep()),
        );
        assert_eq!(cache.get("q").as_deref(), Some(&b"[1]"[..]));
        changes.note(&[0, 0, 1], 2000, 3000);
        assert!(cache.get("q").is_some(), "a change elsewhere in time");
        changes.note(&[0, 0, 1], 999, 1000);
        assert_eq!(cache.get("q"), None);
        assert_eq!(changes.watching(), 0, "the stale answer's watch is gone");
        assert_eq!(cache.stats.hits.load(Ordering::Relaxed), 2);
        assert_eq!(cache.stats.stale.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn keeps_no_answer_read_while_it_changed_nor_too_large_or_too_old() {
        let changes = Arc::new(Changes::default());
        let cache = QueryCache::new(8 * 1024, Duration::from_secs(60));
        let watch = changes.watch(&dep());
        changes.note(&[0, 0, 1], 0, 1);
        cache.insert("q".into(), Bytes::from_static(b"[]"), watch);
        assert_eq!(cache.get("q"), None);
        cache.insert(
            "big".into(),
            Bytes::from(vec![b' '; 1024]),
            changes.watch(&dep()),
        );
        assert_eq!(cache.get("big"), None, "over an eighth of the budget");
        assert_eq!(changes.watching(), 0);
        let old = QueryCache::new(1 << 20, Duration::ZERO);
        old.insert("q".into(), Bytes::from_static(b"[]"), changes.watch(&dep()));
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(old.get("q"), None);
    }

    #[test]
    fn memory_stays_within_its_budget() {
        let changes = Arc::new(Changes::default());
        let cache = QueryCache::new(64 * 1024, Duration::from_secs(60));
        for i in 0..1000 {
            cache.insert(
                format!("q{i}"),
                Bytes::from(vec![b'x'; 4000]),
                changes.watch(&dep()),
            );
        }
        let (entries, bytes) = cache.usage();
        assert!(bytes <= 64 * 1024, "{bytes}");
        assert!(entries > 0 && entries < 20, "{entries}");
        assert_eq!(changes.watching(), entries, "evicted answers unregister");
    }
}
