#![allow(clippy::unwrap_used, clippy::expect_used)]
mod common;

use std::sync::Arc;

use hourglass_core::value::Value;
use hourglass_engine::IncomingPoint;
use hourglass_storage::{ScanRequest, Store};
use hourglass_store_fjall::FjallStore;

fn with_log(dir: &std::path::Path) -> hourglass_engine::Settings {
    hourglass_engine::Settings {
        wal_dir: Some(dir.join("wal")),
        ..common::auto_create()
    }
}

fn count_points(store: &Arc<dyn Store>) -> usize {
    store
        .scan("tsdb", &ScanRequest::default())
        .unwrap()
        .map(|r| {
            hourglass_engine::rows::decode_row(Some(&r.unwrap()), &[])
                .unwrap()
                .points
                .len()
        })
        .sum()
}

#[test]
fn unflushed_batches_are_replayed_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store: Arc<dyn Store> = Arc::new(FjallStore::open(dir.path()).unwrap());
        let db = common::open(Arc::clone(&store), with_log(dir.path()));
        let tags = [("host", "a")];
        for batch in 0..10i64 {
            let pts: Vec<IncomingPoint<'_>> = (0..100)
                .map(|i| IncomingPoint {
                    metric: "m",
                    timestamp: 1356998400 + batch * 100 + i,
                    value: Value::Int(i),
                    tags: &tags,
                    line_tags: None,
                })
                .collect();
            assert_eq!(db.add_points(&pts).stored, 100);
        }
        assert_eq!(db.buffered_points(), 1000);
        assert_eq!(count_points(&store), 0, "nothing flushed yet");
        // Dropped without close(): as if the process died.
    }
    let store: Arc<dyn Store> = Arc::new(FjallStore::open(dir.path()).unwrap());
    let db = common::open(Arc::clone(&store), with_log(dir.path()));
    assert_eq!(
        count_points(&store),
        1000,
        "every acknowledged point is back"
    );
    assert_eq!(db.buffered_points(), 0);
    let segments: Vec<_> = std::fs::read_dir(dir.path().join("wal"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "log")
        })
        .collect();
    assert_eq!(
        segments.len(),
        1,
        "replayed segments are deleted after the flush; one fresh segment remains"
    );
    // The replay compacted the closed hour into one cell.
    let rows: Vec<_> = store
        .scan("tsdb", &ScanRequest::default())
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].cells.len(), 1);
}

#[test]
fn unflushed_batches_are_replayed_into_bigtable() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(hourglass_store_bigtable::emulator::fresh_store());
    {
        let db = common::open(Arc::clone(&store), with_log(dir.path()));
        let tags = [("host", "a")];
        let pts: Vec<IncomingPoint<'_>> = (0..500)
            .map(|i| IncomingPoint {
                metric: "m",
                timestamp: 1356998400 + i,
                value: Value::Int(i),
                tags: &tags,
                line_tags: None,
            })
            .collect();
        assert_eq!(db.add_points(&pts).stored, 500);
        assert_eq!(count_points(&store), 0, "nothing flushed yet");
        // Dropped without close(): the TSD died; Bigtable lives on.
    }
    let _db = common::open(Arc::clone(&store), with_log(dir.path()));
    assert_eq!(
        count_points(&store),
        500,
        "the restarted TSD wrote the logged points"
    );
}

/// Log entries name a series by id once its segment has its key (RFC 0004): after the
/// segment that defined a series is released, entries in later segments must define it
/// again, or a crash leaves points the replay cannot place.
#[test]
fn series_are_defined_again_in_each_segment_the_log_turns_over_to() {
    let dir = tempfile::tempdir().unwrap();
    let settings = hourglass_engine::Settings {
        wal_segment_bytes: 256,
        ..with_log(dir.path())
    };
    let hosts = ["a", "b", "c", "d"];
    let tags: Vec<[(&str, &str); 1]> = hosts.iter().map(|h| [("host", *h)]).collect();
    let batch = |db: &hourglass_engine::Tsdb, from: i64| {
        let pts: Vec<IncomingPoint<'_>> = (0..20)
            .map(|i| IncomingPoint {
                metric: "m",
                timestamp: 1356998400 + from + i,
                value: Value::Int(from + i),
                tags: &tags[i as usize % hosts.len()],
                line_tags: None,
            })
            .collect();
        assert_eq!(db.add_points(&pts).stored, 20);
    };
    {
        let store: Arc<dyn Store> = Arc::new(FjallStore::open(dir.path()).unwrap());
        let db = common::open(Arc::clone(&store), settings.clone());
        batch(&db, 0);
        batch(&db, 20);
        // The segments defining the four series are released.
        db.flush().unwrap();
        assert_eq!(count_points(&store), 40);
        for from in (40..200).step_by(20) {
            batch(&db, from);
        }
        // Dropped without close(): as if the process died.
    }
    let store: Arc<dyn Store> = Arc::new(FjallStore::open(dir.path()).unwrap());
    let _db = common::open(Arc::clone(&store), settings);
    assert_eq!(
        count_points(&store),
        200,
        "every acknowledged point is back"
    );
}

/// A series idle for a whole epoch of `tsd.storage.series_cache.idle_ms` leaves the series
/// cache once its points are stored, and its id goes to the next new series: the log then
/// defines the id again for that series, so a replay after a crash, and every flush, keep
/// each point in its own series.
#[test]
fn evicted_series_ids_go_to_new_series_through_flushes_and_replay() {
    use std::sync::atomic::{AtomicI64, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let now = Arc::new(AtomicI64::new((1356998400 + 7200) * 1000));
    let clock_now = Arc::clone(&now);
    let settings = hourglass_engine::Settings {
        series_idle_ms: 1000,
        clock: hourglass_engine::Clock::from_fn(move || clock_now.load(Ordering::SeqCst)),
        ..with_log(dir.path())
    };
    let points = |host: &'static str, n: i64, from: i64| -> Vec<IncomingPoint<'static>> {
        let tags: &'static [(&'static str, &'static str)] = match host {
            "a" => &[("host", "a")],
            "b" => &[("host", "b")],
            _ => &[("host", "c")],
        };
        (0..n)
            .map(|i| IncomingPoint {
                metric: "m",
                timestamp: 1356998400 + from + i,
                value: Value::Int(i),
                tags,
                line_tags: None,
            })
            .collect()
    };
    {
        let store: Arc<dyn Store> = Arc::new(FjallStore::open(dir.path()).unwrap());
        let db = common::open(Arc::clone(&store), settings.clone());
        assert_eq!(db.add_points(&points("b", 3, 0)).stored, 3);
        assert_eq!(db.add_points(&points("a", 1, 0)).stored, 1);
        db.flush().unwrap();
        // Epoch 2 starts after a flush an idle period later; "a" is written in it.
        now.fetch_add(1500, Ordering::SeqCst);
        assert_eq!(db.add_points(&points("a", 1, 10)).stored, 1);
        db.flush().unwrap();
        assert_eq!(db.add_points(&points("a", 1, 20)).stored, 1);
        db.flush().unwrap();
        let stats = db.write_stats();
        assert_eq!(
            stats.series_evicted.load(Ordering::Relaxed),
            0,
            "b was used in epoch 1"
        );
        // Epoch 3: epoch 2 closes without "b"; the flush after evicts it.
        now.fetch_add(1500, Ordering::SeqCst);
        assert_eq!(db.add_points(&points("a", 2, 30)).stored, 2);
        db.flush().unwrap();
        assert_eq!(db.add_points(&points("a", 2, 40)).stored, 2);
        db.flush().unwrap();
        assert_eq!(stats.series_evicted.load(Ordering::Relaxed), 1);
        assert_eq!(db.cached_series(), 1, "only a is cached");
        // "c" takes b's id, then "b" comes back under another; neither is flushed.
        assert_eq!(db.add_points(&points("c", 1, 50)).stored, 1);
        assert_eq!(db.add_points(&points("b", 2, 60)).stored, 2);
        assert_eq!(db.cached_series(), 3);
        // Dropped without close(): as if the process died.
    }
    let store: Arc<dyn Store> = Arc::new(FjallStore::open(dir.path()).unwrap());
    let db = common::open(Arc::clone(&store), settings);
    db.flush().unwrap();
    let mut counts: Vec<(Vec<u8>, usize)> = store
        .scan("tsdb", &ScanRequest::default())
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            let n = hourglass_engine::rows::decode_row(Some(&r), &[])
                .unwrap()
                .points
                .len();
            (r.key.clone(), n)
        })
        .collect();
    counts.sort();
    let uid = |v: &str| {
        db.uids()
            .get_id(hourglass_core::uid::UidKind::TagValue, v)
            .unwrap()
            .to_bytes(3)
    };
    let of = |v: &str| {
        counts
            .iter()
            .filter(|(key, _)| key.ends_with(&uid(v)))
            .map(|(_, n)| n)
            .sum::<usize>()
    };
    assert_eq!((of("a"), of("b"), of("c")), (7, 5, 1), "{counts:?}");
}
