//! The write path's promises under faults, each on every backend: a query sees every point
//! acknowledged before it began while flushes write them; a full log disk refuses batches
//! without losing acknowledged ones; deletions leave points outside their range alone
//! whatever is flushed meanwhile; compaction resumes after a restart; memory stays under
//! its budget while the store is down; `?sync` means stored on a shared store.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};

use hourglass_core::uid::UidKind;
use hourglass_core::value::Value;
use hourglass_engine::query::aggregator::Aggregator;
use hourglass_engine::query::plan::{self, Limits, RunOptions, SubQuery};
use hourglass_engine::scan::RowQuery;
use hourglass_engine::sim::{FaultStore, Faults, Op, SimFiles};
use hourglass_engine::wal::files::LogFiles;
use hourglass_engine::{Clock, IncomingPoint, Settings, Tsdb};
use hourglass_storage::{ReadOptions, Store};

/// 2013-01-01 00:00:00 UTC: hours long closed.
const T0: i64 = 1_356_998_400;

fn settings() -> Settings {
    Settings {
        auto_create_metrics: true,
        wal: true,
        ..Settings::default()
    }
}

fn open(store: &Arc<dyn Store>, files: &SimFiles, settings: &Settings) -> Arc<Tsdb> {
    Tsdb::open_with_log(
        Arc::clone(store),
        settings.clone(),
        Some(Arc::new(files.clone()) as Arc<dyn LogFiles>),
    )
    .expect("open")
}

/// `n` points of metric `m`, host `h`, one a second from `start` (values = times).
fn batch(
    host: &'static [(&'static str, &'static str)],
    start: i64,
    n: i64,
) -> Vec<IncomingPoint<'static>> {
    (0..n)
        .map(|i| IncomingPoint {
            metric: "m",
            timestamp: start + i,
            value: Value::Int(start + i),
            tags: host,
            line_tags: None,
        })
        .collect()
}

const WEB01: &[(&str, &str)] = &[("host", "web01")];
const WEB02: &[(&str, &str)] = &[("host", "web02")];

/// Every visible point of metric `m` as (host uid bytes, ms, value bits).
fn visible(db: &Tsdb, start: i64, end: i64) -> BTreeSet<(Vec<u8>, i64, u64)> {
    let Ok(metric) = db.uids().get_id(UidKind::Metric, "m") else {
        return BTreeSet::new();
    };
    let query = RowQuery {
        metric,
        start_secs: start,
        end_secs: end,
        tags: Vec::new(),
    };
    let mut out = BTreeSet::new();
    for s in db.read_series(&query).expect("read") {
        let host = s.series.tags[0].1.to_bytes(3);
        for (t, v) in s.points {
            assert!(
                out.insert((host.clone(), t, v.to_bits())),
                "a point seen twice"
            );
        }
    }
    out
}

/// The seen bug: a flush took the buffer out of the readers' reach before its rows were in
/// the store, so queries between the two missed acknowledged points.
#[test]
fn queries_see_every_acknowledged_point_while_flushes_write_them() {
    for (name, backend) in common::backends() {
        let faults = Arc::new(Faults::new(1, 0));
        let store = Arc::new(FaultStore::over(backend, Arc::clone(&faults)));
        let dyn_store: Arc<dyn Store> = store.clone();
        let db = open(&dyn_store, &SimFiles::new(faults), &settings());
        let acked = Arc::new(AtomicUsize::new(0));
        let checks = Arc::new(AtomicUsize::new(0));
        let weak = Arc::downgrade(&db);
        let (a, c) = (Arc::clone(&acked), Arc::clone(&checks));
        store.set_hook(Some(Arc::new(move |op| {
            if matches!(op, Op::Get | Op::GetRows(_)) {
                return;
            }
            let Some(db) = weak.upgrade() else { return };
            let seen = visible(&db, T0, T0 + 7200).len();
            assert_eq!(seen, a.load(Ordering::SeqCst), "{name}: {op:?}");
            c.fetch_add(1, Ordering::SeqCst);
        })));
        for round in 0..4 {
            let host = if round % 2 == 0 { WEB01 } else { WEB02 };
            let out = db.add_points(&batch(host, T0 + round * 500, 500));
            assert_eq!(out.stored, 500);
            acked.fetch_add(500, Ordering::SeqCst);
            db.flush().unwrap();
        }
        store.set_hook(None);
        assert!(
            checks.load(Ordering::SeqCst) >= 8,
            "{name}: the hook ran in every flush"
        );
        assert_eq!(visible(&db, T0, T0 + 7200).len(), 2000, "{name}");
    }
}

/// The seen bug: after a full disk, batches acknowledged once space was back were lost,
/// because replay stopped at the torn frame the failed append had left.
#[test]
fn a_full_log_disk_refuses_batches_then_recovers_without_losing_acknowledged_ones() {
    for (name, backend) in common::backends() {
        let faults = Arc::new(Faults::new(2, 0));
        let files = SimFiles::new(Arc::clone(&faults));
        let db = open(&backend, &files, &settings());
        let mut acked = 0;
        for i in 0..5 {
            let out = db.add_points(&batch(WEB01, T0 + i * 100, 100));
            db.sync_writes().unwrap();
            acked += out.stored;
        }
        faults.set_disk_full(true);
        for i in 5..10 {
            let out = db.add_points(&batch(WEB01, T0 + i * 100, 100));
            assert_eq!(
                out.stored, 0,
                "{name}: a batch that cannot be logged is refused"
            );
            assert_eq!(out.errors.len(), 100);
        }
        faults.set_disk_full(false);
        for i in 10..40 {
            let out = db.add_points(&batch(WEB01, T0 + i * 100, 100));
            assert_eq!(out.stored, 100, "{name}: space is back");
            db.sync_writes().unwrap();
            acked += out.stored;
        }
        assert_eq!(acked, 3500);
        // A crash: the log alone brings the points back.
        drop(db);
        let db = open(&backend, &files.crash(), &settings());
        let seen = visible(&db, T0, T0 + 7200);
        assert_eq!(seen.len(), 3500, "{name}");
        assert!(
            !seen
                .iter()
                .any(|(_, t, _)| (T0 + 500..T0 + 1000).contains(&(t / 1000))),
            "{name}: refused points stay out"
        );
    }
}

/// Batches acknowledged under `tsd.storage.wal.sync` survive a power loss, and so do the
/// UIDs they use (synced in the store before the acknowledgement).
#[test]
fn synced_batches_and_their_uids_survive_power_loss() {
    let faults = Arc::new(Faults::new(3, 0));
    let store = Arc::new(FaultStore::new(Arc::clone(&faults)));
    let dyn_store: Arc<dyn Store> = store.clone();
    let files = SimFiles::new(Arc::clone(&faults));
    let synced = Settings {
        wal_sync: true,
        ..settings()
    };
    let db = open(&dyn_store, &files, &synced);
    assert_eq!(db.add_points(&batch(WEB01, T0, 300)).stored, 300);
    assert_eq!(db.add_points(&batch(WEB02, T0 + 300, 300)).stored, 300);
    drop(db);
    assert!(store.power_loss());
    let db = open(&dyn_store, &files.power_loss(), &synced);
    assert_eq!(visible(&db, T0, T0 + 3600).len(), 600);
    // The names resolve to the UIDs the logged rows carry.
    let host = db.uids().get_id(UidKind::TagValue, "web02").unwrap();
    assert!(
        visible(&db, T0, T0 + 3600)
            .iter()
            .any(|(h, _, _)| *h == host.to_bytes(3))
    );
}

/// A store whose failed syncs lose what was written since the last good one for good, for
/// the UID table (fsyncgate), over a memory store (power losses can be simulated).
fn uid_fsyncgate_store(faults: &Arc<Faults>) -> Arc<FaultStore> {
    let store = Arc::new(FaultStore::new(Arc::clone(faults)));
    store.set_fsyncgate(Some(Arc::new(|table: &str, _: &[u8]| table == "tsdb-uid")));
    store
}

/// Every host of the visible points of `m` resolves both ways: its UID names a host, and
/// that host's name maps back to the UID (a query by name finds its points).
fn hosts_resolve(db: &Tsdb) -> BTreeSet<String> {
    let mut hosts = BTreeSet::new();
    for (uid, _, _) in visible(db, T0, T0 + 3600) {
        let uid = hourglass_core::uid::Uid::from_bytes(&uid).unwrap();
        let name = db
            .uids()
            .get_name(UidKind::TagValue, uid)
            .expect("the UID names a host");
        assert_eq!(db.uids().get_id(UidKind::TagValue, &name).unwrap(), uid);
        hosts.insert(name);
    }
    hosts
}

/// The seen bug: a batch's new UIDs were written, the store sync before logging it failed
/// (the kernel may drop the pages: "fsyncgate"), and the retried batch's sync succeeded
/// without the mappings being written again: after a power loss its synced points named a
/// UID that named nothing. Mappings are now kept until a sync covers them, and written
/// again after a failed one.
#[test]
fn uids_written_before_a_failed_sync_survive_power_loss() {
    let faults = Arc::new(Faults::new(3, 0));
    let store = uid_fsyncgate_store(&faults);
    let dyn_store: Arc<dyn Store> = store.clone();
    let files = SimFiles::new(Arc::clone(&faults));
    let synced = Settings {
        wal_sync: true,
        ..settings()
    };
    let db = open(&dyn_store, &files, &synced);
    // A first sync lets the UID table kept at open go: from here on only the mappings
    // this test assigns are kept.
    db.sync_writes().unwrap();
    store.set_syncs_fail(true);
    let out = db.add_points(&batch(WEB01, T0, 10));
    assert_eq!(
        out.stored,
        0,
        "the UIDs' sync failed: {:?}",
        out.errors.first()
    );
    store.set_syncs_fail(false);
    assert_eq!(db.add_points(&batch(WEB01, T0, 10)).stored, 10);
    drop(db);
    assert!(store.power_loss());
    let db = open(&dyn_store, &files.power_loss(), &synced);
    assert_eq!(visible(&db, T0, T0 + 3600).len(), 10);
    assert_eq!(hosts_resolve(&db), BTreeSet::from(["web01".to_string()]));
    // The counter was not rolled back: the next host gets a UID of its own.
    assert_eq!(db.add_points(&batch(WEB02, T0 + 10, 10)).stored, 10);
    assert_eq!(hosts_resolve(&db).len(), 2);
}

/// The same after a crash between the failed sync and the mappings' rewrite: the process
/// that starts next finds `uids-at-risk` saying its predecessor did not close, and writes
/// the UID table again at open. A process that closed clears the file.
#[test]
fn uids_left_at_risk_by_a_crash_are_written_again_at_the_next_start() {
    uids_left_at_risk_by_a_crash(false);
}

/// The same when the store is away while the next process opens: the UID table is written
/// again before its first sync instead.
#[test]
fn uids_left_at_risk_are_written_again_at_the_first_sync_when_the_store_was_away_at_open() {
    uids_left_at_risk_by_a_crash(true);
}

fn uids_left_at_risk_by_a_crash(store_away_at_open: bool) {
    let faults = Arc::new(Faults::new(3, 0));
    let store = uid_fsyncgate_store(&faults);
    let dyn_store: Arc<dyn Store> = store.clone();
    let files = SimFiles::new(Arc::clone(&faults));
    let synced = Settings {
        wal_sync: true,
        ..settings()
    };
    let db = open(&dyn_store, &files, &synced);
    store.set_syncs_fail(true);
    assert_eq!(db.add_points(&batch(WEB01, T0, 10)).stored, 0);
    // The store is down as well: the mappings cannot be written again before the crash.
    faults.set_store_down(true);
    assert!(db.sync_writes().is_err());
    drop(db);
    let files = files.crash();
    assert_eq!(
        files.read_named("uids-at-risk").unwrap(),
        Some(vec![2]),
        "a process ran and did not close"
    );
    store.set_syncs_fail(false);
    faults.set_store_down(store_away_at_open);
    let db = open(&dyn_store, &files, &synced);
    faults.set_store_down(false);
    assert_eq!(db.add_points(&batch(WEB01, T0, 10)).stored, 10);
    drop(db);
    assert!(store.power_loss());
    let files = files.power_loss();
    let db = open(&dyn_store, &files, &synced);
    assert_eq!(visible(&db, T0, T0 + 3600).len(), 10);
    assert_eq!(hosts_resolve(&db), BTreeSet::from(["web01".to_string()]));
    db.close().unwrap();
    assert_eq!(files.read_named("uids-at-risk").unwrap(), Some(Vec::new()));
}

/// The seen bug: a deletion read rows during its scan and rewrote them afterwards, so points
/// flushed into those rows in between were deleted although outside its range.
#[test]
fn a_delete_never_touches_points_outside_its_range_while_flushes_run() {
    for (name, backend) in common::backends() {
        let faults = Arc::new(Faults::new(4, 0));
        let store = Arc::new(FaultStore::over(backend, Arc::clone(&faults)));
        let dyn_store: Arc<dyn Store> = store.clone();
        let db = open(&dyn_store, &SimFiles::new(faults), &settings());
        db.add_points(&batch(WEB01, T0, 600));
        db.flush().unwrap();
        // While the deletion reads its row, another thread buffers later points of the same
        // hour and flushes them.
        let racer_done = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicBool::new(false));
        let weak = Arc::downgrade(&db);
        let (done, go) = (Arc::clone(&racer_done), Arc::clone(&started));
        store.set_hook(Some(Arc::new(move |op| {
            if op != Op::Get || go.swap(true, Ordering::SeqCst) {
                return;
            }
            let Some(db) = weak.upgrade() else { return };
            let finished = Arc::clone(&done);
            std::thread::spawn(move || {
                db.add_points(&batch(WEB01, T0 + 2000, 100));
                db.flush().unwrap();
                finished.store(true, Ordering::SeqCst);
            });
            // Give the racing flush every chance to land between this read and the rewrite.
            for _ in 0..50 {
                if done.load(Ordering::SeqCst) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        })));
        let q = SubQuery::new(Aggregator::Sum, "m");
        let options = RunOptions {
            delete: true,
            limits: Limits::default(),
            ..RunOptions::default()
        };
        plan::run(&db, T0 * 1000, (T0 + 299) * 1000, &q, &options).unwrap();
        while !racer_done.load(Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        store.set_hook(None);
        let seen = visible(&db, T0, T0 + 3599);
        let times: BTreeSet<i64> = seen.iter().map(|(_, t, _)| t / 1000).collect();
        let expected: BTreeSet<i64> = (T0 + 300..T0 + 600).chain(T0 + 2000..T0 + 2100).collect();
        assert_eq!(times, expected, "{name}");
    }
}

/// Rows written while their hour was open are compacted once it closes, even across a
/// restart, and a failed compaction is tried again.
#[test]
fn open_hours_are_compacted_after_a_restart_and_after_failures() {
    for (name, backend) in common::backends() {
        let now = Arc::new(AtomicI64::new((T0 + 600) * 1000));
        let clock_now = Arc::clone(&now);
        let settings = Settings {
            clock: Clock::from_fn(move || clock_now.load(Ordering::SeqCst)),
            ..settings()
        };
        let faults = Arc::new(Faults::new(5, 0));
        let files = SimFiles::new(Arc::clone(&faults));
        let store = Arc::new(FaultStore::over(backend, Arc::clone(&faults)));
        let dyn_store: Arc<dyn Store> = store.clone();
        let db = open(&dyn_store, &files, &settings);
        for i in 0..3 {
            db.add_points(&batch(WEB01, T0 + i * 100, 100));
            db.flush().unwrap();
        }
        let key = {
            let m = db.uids().get_id(UidKind::Metric, "m").unwrap().to_bytes(3);
            let k = db
                .uids()
                .get_id(UidKind::TagKey, "host")
                .unwrap()
                .to_bytes(3);
            let v = db
                .uids()
                .get_id(UidKind::TagValue, "web01")
                .unwrap()
                .to_bytes(3);
            [m, (T0 as u32).to_be_bytes().to_vec(), k, v].concat()
        };
        let data_cells = |store: &FaultStore| {
            store
                .get("tsdb", &key, &ReadOptions::family("t"))
                .unwrap()
                .map_or(0, |r| r.cells.len())
        };
        assert_eq!(
            data_cells(&store),
            3,
            "{name}: partial cells while the hour is open"
        );
        drop(db); // a crash
        now.store((T0 + 3700) * 1000, Ordering::SeqCst);
        // The first compaction fails: it is kept and tried again.
        store.set_hook(Some(Arc::new({
            let faults = Arc::clone(&faults);
            move |op| {
                if op == Op::BeforeWrite {
                    faults.set_store_down(true);
                }
            }
        })));
        let db = open(&dyn_store, &files.crash(), &settings);
        store.set_hook(None);
        faults.set_store_down(false);
        assert_eq!(
            data_cells(&store),
            3,
            "{name}: the failed compaction changed nothing"
        );
        db.flush().unwrap();
        assert_eq!(data_cells(&store), 1, "{name}: compacted after the restart");
        assert_eq!(visible(&db, T0, T0 + 3599).len(), 300, "{name}");
    }
}

/// While the store is down, buffered points stay under their budget (plus one batch):
/// further batches are refused as throttled, and accepted again once flushes catch up.
#[test]
fn memory_stays_under_budget_while_the_store_is_down() {
    for (name, backend) in common::backends() {
        let faults = Arc::new(Faults::new(6, 0));
        let store: Arc<dyn Store> = Arc::new(FaultStore::over(backend, Arc::clone(&faults)));
        let budget = 256 << 10;
        let settings = Settings {
            max_buffer_bytes: budget,
            max_buffered_points: 1000,
            ..settings()
        };
        let db = open(&store, &SimFiles::new(Arc::clone(&faults)), &settings);
        // The series is known (its UIDs resolved) before the store goes away.
        assert_eq!(db.add_points(&batch(WEB01, T0 - 100, 100)).stored, 100);
        faults.set_store_down(true);
        let (mut acked, mut throttled) = (100usize, 0usize);
        for i in 0..200 {
            let out = db.add_points(&batch(WEB01, T0 + i * 100, 100));
            acked += out.stored;
            if out.throttled {
                throttled += 1;
                assert_eq!(out.stored, 0);
            }
            assert!(db.flush().is_err(), "{name}: the store is down");
            assert!(
                db.buffered_bytes() <= budget + 100 * 64,
                "{name}: {}",
                db.buffered_bytes()
            );
        }
        assert!(throttled > 0, "{name}: the budget was reached");
        assert!(acked > 0 && acked < 20_000, "{name}");
        faults.set_store_down(false);
        std::thread::sleep(std::time::Duration::from_millis(150)); // the retry backoff
        db.flush().unwrap();
        assert!(db.has_room(), "{name}");
        assert_eq!(db.buffered_bytes(), 0, "{name}");
        assert_eq!(visible(&db, T0 - 100, T0 + 20_000).len(), acked, "{name}");
    }
}

/// `?sync` on a store other TSDs share means written to it: the rows are there, not only in
/// this TSD's log.
#[test]
fn sync_on_a_shared_store_writes_the_store() {
    for (name, backend) in common::backends() {
        let shared = backend.is_shared();
        let db = open(
            &backend,
            &SimFiles::new(Arc::new(Faults::new(8, 0))),
            &settings(),
        );
        db.add_points(&batch(WEB01, T0, 10));
        db.sync_writes().unwrap();
        let rows = backend
            .scan("tsdb", &hourglass_storage::ScanRequest::default())
            .unwrap()
            .count();
        assert_eq!(rows > 0, shared, "{name}: shared={shared}");
        assert_eq!(db.buffered_points() == 0, shared, "{name}");
    }
}

/// A seen deadlock: a query held the series lock and waited for the state lock, a batch held
/// the state lock and waited for the series lock (to build its log entry), and a batch
/// adding a series waited to write the series lock, which holds new readers back. Batches
/// that add series, batches of known series and queries run together; all must finish.
#[test]
fn queries_and_batches_adding_series_never_deadlock() {
    let store: Arc<dyn Store> = Arc::new(hourglass_storage::memory::MemoryStore::new());
    let db = open(
        &store,
        &SimFiles::new(Arc::new(Faults::new(1, 0))),
        &settings(),
    );
    db.add_points(&batch(WEB01, 1_356_998_400, 10));
    let done = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for t in 0..2u64 {
        let (db, done) = (Arc::clone(&db), Arc::clone(&done));
        threads.push(std::thread::spawn(move || {
            for i in 0..3_000u64 {
                // A new series each time.
                let host = format!("h{t}-{i}");
                let tags = [("host", host.as_str())];
                let p = IncomingPoint {
                    metric: "m",
                    timestamp: 1_356_998_400 + i as i64,
                    value: Value::Int(1),
                    tags: &tags,
                    line_tags: None,
                };
                db.add_points(&[p]);
                // And a known one, whose entry reads the series templates.
                db.add_points(&batch(WEB01, 1_356_998_500 + i as i64, 1));
            }
            done.fetch_add(1, Ordering::SeqCst);
        }));
    }
    for _ in 0..2 {
        let (db, stop) = (Arc::clone(&db), Arc::clone(&stop));
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let _ = visible(&db, 1_356_998_400, 1_357_002_000);
            }
        }));
    }
    let started = std::time::Instant::now();
    while done.load(Ordering::SeqCst) < 2 {
        // A thread that died is reported as itself, not as a deadlock.
        if let Some(i) = threads.iter().position(|t| t.is_finished())
            && let Err(panic) = threads.swap_remove(i).join()
        {
            stop.store(true, Ordering::SeqCst);
            std::panic::resume_unwind(panic);
        }
        if started.elapsed() > std::time::Duration::from_secs(60) {
            panic!(
                "batches and queries deadlocked: {} of 2 writers done\n{}",
                done.load(Ordering::SeqCst),
                thread_stacks()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
}

/// Every thread's stack of this process, from gdb when the machine has it (a hang's
/// diagnosis); otherwise a note saying so. gdb writes to a file: this process is stopped
/// while gdb runs, so it could not drain a pipe.
fn thread_stacks() -> String {
    let pid = std::process::id().to_string();
    let path = std::env::temp_dir().join(format!("hourglass-stacks-{pid}.txt"));
    let file = match std::fs::File::create(&path) {
        Ok(f) => f,
        Err(e) => return format!("(no thread stacks: {e})"),
    };
    let ran = std::process::Command::new("gdb")
        .args(["-p", &pid, "-batch", "-ex", "thread apply all bt"])
        .stdout(file)
        .stderr(std::process::Stdio::null())
        .status();
    let stacks = match ran {
        Ok(_) => std::fs::read_to_string(&path).unwrap_or_default(),
        Err(e) => format!("(no thread stacks: gdb could not run: {e})"),
    };
    let _ = std::fs::remove_file(&path);
    stacks
}

/// Series leave the series cache while batches run: with an eviction epoch at every flush
/// (`series_idle_ms` of 1 and a clock moving between flushes), writer threads that keep
/// naming new series and old ones again (each freed id given to the next new series) find
/// every acknowledged point afterwards in its own series, on every backend.
#[test]
fn series_evicted_while_batches_run_keep_every_point_in_its_series() {
    const HOSTS: usize = 40;
    let hosts: &'static [[(&'static str, &'static str); 1]] = Box::leak(
        (0..HOSTS)
            .map(|h| [("host", &*Box::leak(format!("h{h:02}").into_boxed_str()))])
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    for (name, store) in common::backends() {
        let now = Arc::new(AtomicI64::new((T0 + 40 * 3600) * 1000));
        let clock_now = Arc::clone(&now);
        let db = common::open(
            store,
            Settings {
                series_idle_ms: 1,
                clock: Clock::from_fn(move || clock_now.load(Ordering::SeqCst)),
                ..settings()
            },
        );
        let done = Arc::new(AtomicBool::new(false));
        let flushes = Arc::new(AtomicUsize::new(0));
        let flusher = {
            let (db, done, now, flushes) = (
                Arc::clone(&db),
                Arc::clone(&done),
                Arc::clone(&now),
                Arc::clone(&flushes),
            );
            std::thread::spawn(move || {
                while !done.load(Ordering::SeqCst) {
                    now.fetch_add(5, Ordering::SeqCst);
                    db.flush().unwrap();
                    flushes.fetch_add(1, Ordering::SeqCst);
                }
            })
        };
        let writers: Vec<_> = (0..3i64)
            .map(|t| {
                let (db, flushes) = (Arc::clone(&db), Arc::clone(&flushes));
                std::thread::spawn(move || {
                    let mut sent = Vec::new();
                    // At least 300 batches, and on until series have been evicted (flushes
                    // may be slow on a loaded machine), within a deadline.
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
                    for i in 0.. {
                        // (Each writer has 10,000 timestamps of its own.)
                        if i >= 9_000
                            || i >= 300
                                && (db.write_stats().series_evicted.load(Ordering::SeqCst) > 0
                                    || std::time::Instant::now() > deadline)
                        {
                            break;
                        }
                        // Each writer names one host for 40 batches, then the next: a
                        // host is idle for a while, then named again (by a writer or another).
                        let host = ((t * 13 + i / 40) as usize) % HOSTS;
                        // Two flushes (an epoch) pass at each change of host, however the
                        // threads are scheduled.
                        if i % 40 == 0 {
                            let seen = flushes.load(Ordering::SeqCst);
                            while flushes.load(Ordering::SeqCst) < seen + 2
                                && std::time::Instant::now() < deadline
                            {
                                std::thread::yield_now();
                            }
                        }
                        let ts = T0 + t * 40_000 + i * 4;
                        let points: Vec<IncomingPoint<'static>> = (0..1 + i % 3)
                            .map(|j| IncomingPoint {
                                metric: "m",
                                timestamp: ts + j,
                                value: Value::Int(ts + j),
                                tags: &hosts[host],
                                line_tags: None,
                            })
                            .collect();
                        assert_eq!(db.add_points(&points).stored, points.len());
                        sent.extend(points.iter().map(|p| (host, p.timestamp * 1000)));
                    }
                    sent
                })
            })
            .collect();
        let sent: Vec<(usize, i64)> = writers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect();
        done.store(true, Ordering::SeqCst);
        flusher.join().unwrap();
        db.flush().unwrap();
        let evicted = db.write_stats().series_evicted.load(Ordering::SeqCst);
        assert!(evicted > 0, "{name}: series were evicted");
        let uid = |h: usize| {
            db.uids()
                .get_id(UidKind::TagValue, hosts[h][0].1)
                .unwrap()
                .to_bytes(3)
        };
        let expected: BTreeSet<(Vec<u8>, i64)> =
            sent.iter().map(|(h, ms)| (uid(*h), *ms)).collect();
        let seen: BTreeSet<(Vec<u8>, i64)> = visible(&db, T0, T0 + 40 * 3600)
            .into_iter()
            .map(|(host, ms, _)| (host, ms))
            .collect();
        assert_eq!(seen.len(), sent.len(), "{name}: {evicted} evicted");
        assert!(seen == expected, "{name}: points under other series");
    }
}

/// Histogram points of `h` at `times`, host web01.
fn histogram_cells(times: &[i64]) -> Vec<hourglass_engine::histogram::HistogramPoint<'static>> {
    times
        .iter()
        .map(|t| {
            let mut h = hourglass_core::histogram::SimpleHistogram::default();
            h.set_bucket(0.0, 1.0, *t);
            hourglass_engine::histogram::HistogramPoint {
                metric: "h",
                timestamp: *t,
                value: h.encode(Some(42)),
                tags: WEB01,
            }
        })
        .collect()
}

/// Assigns the UIDs of [`histogram_cells`] and syncs them, so the batches kept from then on
/// are the cells' alone (UID mappings are kept until synced too).
fn histogram_uids_synced(db: &Tsdb) {
    db.uids().get_or_create_id(UidKind::Metric, "h").unwrap();
    for (k, v) in WEB01 {
        db.uids().get_or_create_id(UidKind::TagKey, k).unwrap();
        db.uids().get_or_create_id(UidKind::TagValue, v).unwrap();
    }
    db.sync_writes().unwrap();
    assert_eq!(db.kept_cells().0, 0, "UID mappings synced");
}

/// The histogram cells of `h` in the store.
fn stored_histograms(db: &Tsdb) -> usize {
    let data = &db.settings().schema.data_table;
    db.store()
        .scan(data, &hourglass_storage::ScanRequest::default())
        .unwrap()
        .map(|r| {
            r.unwrap()
                .cells
                .iter()
                .filter(|c| hourglass_core::histogram::is_histogram_qualifier(&c.qualifier))
                .count()
        })
        .sum()
}

fn histogram_settings(budget: usize) -> Settings {
    Settings {
        max_buffer_bytes: budget,
        histograms: Some(Arc::new(
            hourglass_core::histogram::HistogramConfig::parse(
                r#"{"net.opentsdb.core.SimpleHistogramDecoder": 42}"#,
            )
            .unwrap(),
        )),
        ..settings()
    }
}

/// A histogram (or rollup) cell acknowledged without `sync` lives in the store's journal
/// only: after a failed store sync the kernel may have dropped it ("fsyncgate") and a
/// later sync that succeeds says nothing about it. So acknowledged cells are kept in
/// memory until a sync covers them, and a failed sync has them written again at once, and
/// again before the next sync if that fails too; a sync that succeeds lets them go.
#[test]
fn unsynced_cells_are_kept_until_a_store_sync_covers_them_and_written_again_after_a_failed_one() {
    for (name, backend) in common::backends() {
        let store = Arc::new(FaultStore::over(backend, Arc::new(Faults::new(1, 0))));
        let dyn_store: Arc<dyn Store> = store.clone();
        let files = SimFiles::new(Arc::new(Faults::new(1, 0)));
        let db = open(&dyn_store, &files, &histogram_settings(64 << 20));
        histogram_uids_synced(&db);
        let out = db
            .add_histogram_points(&histogram_cells(&[T0, T0 + 1]), false)
            .unwrap();
        assert_eq!(out.stored, 2, "{name}");
        assert_eq!(db.kept_cells().0, 1, "{name}: one batch kept");

        // A disk that fails fsyncs: the sync fails, the kept batch is written again.
        store.set_syncs_fail(true);
        assert!(db.sync_writes().is_err(), "{name}");
        let (batches, _, rewrites) = db.kept_cells();
        assert_eq!((batches, rewrites), (1, 1), "{name}: kept, written again");
        // A flush's sync fails the same way: the batch stays, written again once more.
        assert!(db.flush().is_err(), "{name}");
        assert_eq!(db.kept_cells().2, 2, "{name}");
        // A synced write fails (its cells are written, not acknowledged, and kept).
        assert!(
            db.add_histogram_points(&histogram_cells(&[T0 + 2]), true)
                .is_err(),
            "{name}"
        );
        assert_eq!(db.kept_cells().0, 2, "{name}");
        assert_eq!(stored_histograms(&db), 3, "{name}: readable meanwhile");

        // The disk is back: the first sync that succeeds lets every kept batch go.
        store.set_syncs_fail(false);
        db.sync_writes().unwrap();
        assert_eq!(db.kept_cells().0, 0, "{name}");
        assert_eq!(db.kept_cells().1, 0, "{name}: no bytes held");
        let rewrites = db.kept_cells().2;
        db.sync_writes().unwrap();
        assert_eq!(db.kept_cells().2, rewrites, "{name}: nothing written again");
        assert_eq!(stored_histograms(&db), 3, "{name}");
        db.close().unwrap();
    }
}

/// Kept cells count in the memory budget with the buffered points: while store syncs fail
/// they pile up, and past the budget histogram and rollup writes are refused whole
/// (`Please throttle writes`, as `/api/put`'s); once a store sync succeeds they are
/// accepted again. Without a flush thread (`tsdb import`) a write at the budget flushes
/// first, so syncs that work never refuse one.
#[test]
fn kept_cells_count_in_the_memory_budget() {
    for (name, backend) in common::backends() {
        let store = Arc::new(FaultStore::over(backend, Arc::new(Faults::new(1, 0))));
        let dyn_store: Arc<dyn Store> = store.clone();
        let files = SimFiles::new(Arc::new(Faults::new(1, 0)));
        let budget = 4096;
        let db = open(&dyn_store, &files, &histogram_settings(budget));
        let mut next = T0;
        let mut write = |db: &Tsdb| {
            let times: Vec<i64> = (0..4).map(|j| next + j).collect();
            next += 4;
            db.add_histogram_points(&histogram_cells(&times), false)
        };
        // Syncs work: far past the budget's worth, nothing is refused.
        for _ in 0..100 {
            assert_eq!(write(&db).unwrap().stored, 4, "{name}");
            assert!(
                db.kept_cells().1 < budget + 2048,
                "{name}: the budget and a batch"
            );
        }
        // From nothing kept: the refusal below comes after several accepted batches.
        db.sync_writes().unwrap();
        store.set_syncs_fail(true);
        let mut refused = None;
        for i in 0..200 {
            match write(&db) {
                Ok(out) => assert_eq!(out.stored, 4, "{name}"),
                Err(e) => {
                    refused = Some((i, e));
                    break;
                }
            }
            assert!(
                db.kept_cells().1 < budget + 2048,
                "{name}: {} bytes kept",
                db.kept_cells().1
            );
        }
        let (i, e) = refused.unwrap_or_else(|| panic!("{name}: never refused"));
        assert!(i > 1, "{name}: refused at the {i}th batch");
        assert_eq!(e.kind(), hourglass_engine::ErrorKind::Unavailable, "{name}");
        assert!(
            e.to_string().contains("Please throttle writes"),
            "{name}: {e}"
        );
        assert_eq!(stored_histograms(&db), 4 * (100 + i), "{name}");
        store.set_syncs_fail(false);
        assert_eq!(write(&db).unwrap().stored, 4, "{name}: accepted again");
        assert!(db.kept_cells().1 < budget + 2048, "{name}");
        db.close().unwrap();
        assert_eq!(db.kept_cells().0, 0, "{name}");
    }
}

/// Kept cells leave memory without a request asking: the flush thread syncs the store once
/// they are older than the flush interval, with no point buffered.
#[test]
fn the_flush_thread_syncs_kept_cells_after_the_flush_interval() {
    for (name, backend) in common::backends() {
        let files = SimFiles::new(Arc::new(Faults::new(1, 0)));
        let settings = Settings {
            flush_interval: std::time::Duration::from_millis(50),
            ..histogram_settings(64 << 20)
        };
        let db = open(&backend, &files, &settings);
        db.start_background();
        db.add_histogram_points(&histogram_cells(&[T0]), false)
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while db.kept_cells().0 > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(db.kept_cells().0, 0, "{name}: synced by the flush thread");
        assert_eq!(db.buffered_points(), 0, "{name}");
        db.close().unwrap();
    }
}
