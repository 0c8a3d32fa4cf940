//! The tag index as the write path maintains it (RFC 0007 phase 1), on every backend.
#![allow(clippy::unwrap_used, clippy::expect_used)]
mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use hourglass_core::uid::UidKind;
use hourglass_core::value::Value;
use hourglass_engine::index::{self, Series, status};
use hourglass_engine::{Clock, IncomingPoint, Settings, Tsdb};
use hourglass_storage::{ScanRequest, Store};

/// 2013-06-12 00:00:00 UTC, a period's start.
const DAY: i64 = 1_370_995_200;

fn settings(now_secs: &Arc<AtomicI64>, index: bool) -> Settings {
    let now = Arc::clone(now_secs);
    Settings {
        auto_create_metrics: true,
        index,
        clock: Clock::from_fn(move || now.load(Ordering::SeqCst) * 1000),
        ..Settings::default()
    }
}

fn put(db: &Tsdb, ts: i64, host: &str) {
    let tags = [("host", host), ("dc", "lon")];
    let out = db.add_points(&[IncomingPoint {
        metric: "sys.cpu",
        timestamp: ts,
        value: Value::Int(1),
        tags: &tags,
        line_tags: None,
    }]);
    assert_eq!(out.stored, 1, "{:?}", out.errors);
}

/// Every row of the index table: key → (family, qualifier, timestamp, value) cells.
type Rows = BTreeMap<Vec<u8>, Vec<(String, Vec<u8>, i64, Vec<u8>)>>;

fn index_rows(store: &Arc<dyn Store>) -> Rows {
    store
        .scan("tsdb-index", &ScanRequest::default())
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            let cells = r
                .cells
                .into_iter()
                .map(|c| (c.family, c.qualifier, c.timestamp, c.value))
                .collect();
            (r.key, cells)
        })
        .collect()
}

fn counter(rows: &Rows, key: &[u8], qualifier: &[u8]) -> i64 {
    rows.get(key)
        .and_then(|cells| {
            cells
                .iter()
                .find(|(f, q, _, _)| f == "c" && q == qualifier)
                .map(|(_, _, _, v)| i64::from_be_bytes(v.as_slice().try_into().unwrap()))
        })
        .unwrap_or(0)
}

struct Uids {
    metric: Vec<u8>,
    host: Vec<u8>,
    dc: Vec<u8>,
}

impl Uids {
    fn of(db: &Tsdb) -> Uids {
        let id = |kind, name| db.uids().get_id(kind, name).unwrap().to_bytes(3);
        Uids {
            metric: id(UidKind::Metric, "sys.cpu"),
            host: id(UidKind::TagKey, "host"),
            dc: id(UidKind::TagKey, "dc"),
        }
    }

    fn value(db: &Tsdb, name: &str) -> Vec<u8> {
        db.uids()
            .get_id(UidKind::TagValue, name)
            .unwrap()
            .to_bytes(3)
    }

    /// The series' tags as in its row key (sorted by tag key UID: host was created first).
    fn tags(&self, db: &Tsdb, host: &str) -> Vec<u8> {
        [
            self.host.as_slice(),
            &Uids::value(db, host),
            &self.dc,
            &Uids::value(db, "lon"),
        ]
        .concat()
    }
}

#[test]
fn a_flush_writes_every_entry_of_its_series_and_periods() {
    for (name, store) in common::backends() {
        let now = Arc::new(AtomicI64::new(DAY + 86_400 + 12 * 3600));
        let db = common::open(Arc::clone(&store), settings(&now, true));
        put(&db, DAY + 10 * 3600, "web01");
        put(&db, DAY + 11 * 3600, "web02");
        put(&db, DAY + 86_400 + 10 * 3600, "web01");
        db.flush().unwrap();
        let u = Uids::of(&db);
        let (web01, web02, lon) = (
            Uids::value(&db, "web01"),
            Uids::value(&db, "web02"),
            Uids::value(&db, "lon"),
        );
        let (t1, t2) = (u.tags(&db, "web01"), u.tags(&db, "web02"));
        let s1 = Series {
            metric: &u.metric,
            tags: &t1,
        };
        let s2 = Series {
            metric: &u.metric,
            tags: &t2,
        };
        let (d1, d2) = (DAY as u32, (DAY + 86_400) as u32);
        let rows = index_rows(&store);
        let mut want: Vec<Vec<u8>> = vec![index::status_key()];
        for (s, host) in [(s1, &web01), (s2, &web02)] {
            want.push(index::catalog_key(s));
            for (k, v) in [(&u.host, host), (&u.dc, &lon)] {
                want.push(index::posting_key(s, k, v));
            }
        }
        for (s, host, period) in [(s1, &web01, d1), (s2, &web02, d1), (s1, &web01, d2)] {
            want.push(index::period_series_key(s, period));
            for (k, v) in [(&u.host, host), (&u.dc, &lon)] {
                want.push(index::period_posting_key(s, period, k, v));
            }
        }
        for (period, hosts) in [(d1, vec!["web01", "web02"]), (d2, vec!["web01"])] {
            for h in hosts {
                want.push(index::period_value_name_key(&u.metric, period, &u.host, h));
            }
            want.push(index::period_value_name_key(
                &u.metric, period, &u.dc, "lon",
            ));
            want.push(index::period_counters_key(&u.metric, period));
        }
        for (h, v) in [("web01", &web01), ("web02", &web02), ("lon", &lon)] {
            let k = if h == "lon" { &u.dc } else { &u.host };
            want.push(index::value_name_key(&u.metric, k, h));
            want.push(index::value_metric_key(k, v, &u.metric));
            for t in index::trigrams(h) {
                want.push(index::trigram_key(k, t, v));
            }
        }
        want.push(index::series_counters_key(&u.metric));
        want.sort();
        want.dedup();
        assert_eq!(rows.keys().cloned().collect::<Vec<_>>(), want, "{name}");

        // Cells: fixed timestamps, value rows holding the UID.
        let cell = |key: Vec<u8>| rows.get(&key).unwrap()[0].clone();
        assert_eq!(
            cell(index::period_posting_key(s1, d2, &u.host, &web01)),
            ("p".into(), b"s".to_vec(), i64::from(d2) * 1000, Vec::new()),
            "{name}"
        );
        assert_eq!(
            cell(index::period_value_name_key(
                &u.metric, d1, &u.host, "web02"
            )),
            (
                "p".into(),
                b"v".to_vec(),
                i64::from(d1) * 1000,
                web02.clone()
            ),
            "{name}"
        );
        assert_eq!(
            cell(index::value_name_key(&u.metric, &u.dc, "lon")),
            ("g".into(), b"v".to_vec(), 0, lon.clone()),
            "{name}"
        );
        assert_eq!(
            cell(index::catalog_key(s2)),
            ("g".into(), b"s".to_vec(), 0, Vec::new()),
            "{name}"
        );

        // Counters: series, series per tag key, distinct values per tag key.
        let c1 = index::period_counters_key(&u.metric, d1);
        let c2 = index::period_counters_key(&u.metric, d2);
        let all = index::series_counters_key(&u.metric);
        let k = index::key_series_qualifier;
        let v = index::key_values_qualifier;
        let got = [
            counter(&rows, &c1, b"s"),
            counter(&rows, &c1, &k(&u.host)),
            counter(&rows, &c1, &v(&u.host)),
            counter(&rows, &c1, &v(&u.dc)),
            counter(&rows, &c2, b"s"),
            counter(&rows, &c2, &v(&u.host)),
            counter(&rows, &all, b"s"),
            counter(&rows, &all, &k(&u.dc)),
            counter(&rows, &all, &v(&u.host)),
            counter(&rows, &all, &v(&u.dc)),
        ];
        assert_eq!(got, [2, 2, 2, 1, 1, 1, 2, 2, 2, 1], "{name}");

        // Status: format 2, days, covered from the start (the data table was empty).
        let s = status::read(store.as_ref(), "tsdb-index").unwrap().unwrap();
        assert_eq!(
            (s.format, s.period_secs, s.live_from),
            (2, 86_400, 0),
            "{name}"
        );
        assert_eq!(s.writers, b"hourglass", "{name}");
        db.close().unwrap();
    }
}

#[test]
fn a_restarted_writer_reads_markers_instead_of_counting_again() {
    for (name, store) in common::backends() {
        let now = Arc::new(AtomicI64::new(DAY + 12 * 3600));
        let db = common::open(Arc::clone(&store), settings(&now, true));
        put(&db, DAY + 10 * 3600, "web01");
        db.flush().unwrap();
        db.close().unwrap();
        drop(db);
        let writes_before = index_rows(&store);

        // A new process: its series cache is empty; the pair's marker is read, found, and
        // nothing is written or counted again.
        let db = common::open(Arc::clone(&store), settings(&now, true));
        put(&db, DAY + 10 * 3600 + 5, "web01");
        db.flush().unwrap();
        assert_eq!(index_rows(&store), writes_before, "{name}");
        assert_eq!(
            db.write_stats()
                .index_markers_written
                .load(Ordering::Relaxed),
            0
        );

        // A new series and a new period of the known one are written (and counted) once.
        put(&db, DAY + 11 * 3600, "web02");
        put(&db, DAY + 86_400 + 3600, "web01");
        db.flush().unwrap();
        put(&db, DAY + 11 * 3600 + 1, "web02");
        db.flush().unwrap();
        let u = Uids::of(&db);
        let rows = index_rows(&store);
        let c1 = index::period_counters_key(&u.metric, DAY as u32);
        let c2 = index::period_counters_key(&u.metric, (DAY + 86_400) as u32);
        let all = index::series_counters_key(&u.metric);
        assert_eq!(
            [
                counter(&rows, &c1, b"s"),
                counter(&rows, &c2, b"s"),
                counter(&rows, &all, b"s"),
                counter(&rows, &c1, &index::key_values_qualifier(&u.host)),
            ],
            [2, 1, 2, 2],
            "{name}"
        );
        // Markers: (web02, day 1), (web01, day 2) and web02's catalog row.
        assert_eq!(
            db.write_stats()
                .index_markers_written
                .load(Ordering::Relaxed),
            3,
            "{name}"
        );
        db.close().unwrap();
    }
}

#[test]
fn the_next_period_is_announced_during_the_last_hour() {
    for (name, store) in common::backends() {
        let last_hour = DAY + 86_400 - 3600;
        // At the start of the last hour no series is announced yet; at its end, all are
        // (each series' moment is its TSUID's hash modulo 3600).
        let now = Arc::new(AtomicI64::new(last_hour));
        let db = common::open(Arc::clone(&store), settings(&now, true));
        put(&db, last_hour, "web01");
        db.flush().unwrap();
        let u = Uids::of(&db);
        let t = u.tags(&db, "web01");
        let s = Series {
            metric: &u.metric,
            tags: &t,
        };
        let next = (DAY + 86_400) as u32;
        let rows = index_rows(&store);
        assert!(
            !rows.contains_key(&index::period_series_key(s, next)),
            "{name}"
        );
        now.store(last_hour + 3599, Ordering::SeqCst);
        put(&db, last_hour + 3599, "web01");
        db.flush().unwrap();
        let rows = index_rows(&store);
        let hash = crc32fast::hash(&s.tsuid()) % 3600;
        assert_eq!(
            rows.contains_key(&index::period_series_key(s, next)),
            hash < 3599,
            "{name}"
        );
        assert_eq!(
            rows.contains_key(&index::period_posting_key(
                s,
                next,
                &u.host,
                &Uids::value(&db, "web01")
            )),
            hash < 3599,
            "{name}"
        );
        db.close().unwrap();
    }
}

#[test]
fn coverage_follows_tsd_index_enable() {
    for (name, store) in common::backends() {
        let now = Arc::new(AtomicI64::new(DAY + 12 * 3600));
        // Off: nothing is written to the index.
        let db = common::open(Arc::clone(&store), settings(&now, false));
        put(&db, DAY + 10 * 3600, "web01");
        db.flush().unwrap();
        db.close().unwrap();
        drop(db);
        assert!(index_rows(&store).is_empty(), "{name}");
        // On over a data table holding rows: covered from the next day.
        let db = common::open(Arc::clone(&store), settings(&now, true));
        let s = status::read(store.as_ref(), "tsdb-index").unwrap().unwrap();
        assert_eq!(i64::from(s.live_from), DAY + 86_400, "{name}");
        db.close().unwrap();
        drop(db);
        // Off again: the status says nobody maintains it; on again: the next day again.
        now.store(DAY + 3 * 86_400 + 5, Ordering::SeqCst);
        let db = common::open(Arc::clone(&store), settings(&now, false));
        let s = status::read(store.as_ref(), "tsdb-index").unwrap().unwrap();
        assert_eq!(s.live_from, status::NOT_MAINTAINED, "{name}");
        db.close().unwrap();
        drop(db);
        let db = common::open(Arc::clone(&store), settings(&now, true));
        let s = status::read(store.as_ref(), "tsdb-index").unwrap().unwrap();
        assert_eq!(i64::from(s.live_from), DAY + 4 * 86_400, "{name}");
        db.close().unwrap();
    }
}

/// An index of format 1 (RFC 0007, "Format 2") or of a later format is refused at open
/// with the way out; with the index off it is left as it is; once emptied
/// (`status::clear`, what `tsdb index rebuild --replace` does) a TSD opens it in format 2.
#[test]
fn an_index_of_another_format_is_refused_until_replaced() {
    let store: Arc<dyn Store> = Arc::new(hourglass_storage::memory::MemoryStore::new());
    let now = Arc::new(AtomicI64::new(DAY));
    let db = common::open(Arc::clone(&store), settings(&now, true));
    put(&db, DAY + 3600, "web01");
    db.close().unwrap();
    let set_format = |f: u8| {
        store
            .mutate_row(
                "tsdb-index",
                &index::status_key(),
                &[hourglass_storage::Mutation::set_at(
                    "g",
                    b"format".to_vec(),
                    0,
                    vec![f],
                )],
            )
            .unwrap();
    };
    for (format, by) in [(1, "an older Hourglass"), (3, "a newer Hourglass")] {
        set_format(format);
        let err = Tsdb::open(Arc::clone(&store), settings(&now, true)).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "the tag index table tsdb-index is in format {format}, written by {by}; this binary reads and writes format 2: rebuild it with tsdb index rebuild --replace"
            )
        );
        // Off: opened, the table untouched (its format and live_from as they were).
        let before = index_rows(&store);
        Tsdb::open(Arc::clone(&store), settings(&now, false))
            .unwrap()
            .close()
            .unwrap();
        assert_eq!(index_rows(&store), before, "format {format}");
    }
    set_format(1);
    let deleted = status::clear(store.as_ref(), "tsdb-index").unwrap();
    assert!(deleted > 10, "{deleted}");
    assert!(
        store
            .scan("tsdb-index", &ScanRequest::default())
            .unwrap()
            .next()
            .is_none(),
        "emptied"
    );
    let db = common::open(Arc::clone(&store), settings(&now, true));
    let s = status::read(store.as_ref(), "tsdb-index").unwrap().unwrap();
    assert_eq!(s.format, 2);
    db.close().unwrap();
}

/// Rows of an index table as comparable cells (key, family, qualifier, value), status rows
/// left out; cell timestamps too (a counter's is its last increment's).
type Cells = Vec<(Vec<u8>, String, Vec<u8>, Vec<u8>)>;

fn entries_of(store: &Arc<dyn Store>, table: &str) -> Cells {
    store
        .scan(table, &ScanRequest::default())
        .unwrap()
        .map(Result::unwrap)
        .filter(|r| r.key[0] != index::kind::STATUS)
        .flat_map(|r| {
            r.cells
                .into_iter()
                .map(move |c| (r.key.clone(), c.family, c.qualifier, c.value))
        })
        .collect()
}

fn write_some(db: &Tsdb) {
    for (i, host) in ["web01", "web02", "Web03", "db"].iter().enumerate() {
        put(db, DAY + 3600 * i as i64, host);
        put(db, DAY + 86_400 + 60 * i as i64, host);
    }
    put(db, DAY - 3600, "web01"); // the day before
}

#[test]
fn a_rebuild_writes_what_the_flushes_wrote() {
    use hourglass_engine::index::rebuild::{RebuildOptions, rebuild};
    for (name, store) in common::backends() {
        let now = Arc::new(AtomicI64::new(DAY + 86_400 + 7 * 3600 + 1800));
        let db = common::open(Arc::clone(&store), settings(&now, true));
        write_some(&db);
        db.flush().unwrap();
        // A note on web01's series: the rebuild gives it a place (`0x30`).
        let u = Uids::of(&db);
        let t = u.tags(&db, "web01");
        let tsuid = [u.metric.as_slice(), &t].concat();
        let mut note = hourglass_engine::annotation::AnnotationUpdate::default();
        note.note.tsuid = hourglass_core::uid::hex_upper(&tsuid);
        note.note.start_time = DAY + 100;
        note.note.description = "deploy".into();
        note.changed.insert("description");
        hourglass_engine::annotation::sync(&db, &note, false).unwrap();
        let options = RebuildOptions {
            table: Some("tsdb-index-2".into()),
            now_secs: now.load(Ordering::SeqCst) as u32,
            ..RebuildOptions::default()
        };
        // From the second day only: the scan did not reach back to the metric's first row,
        // so no hour is verified.
        let partial = RebuildOptions {
            table: Some("tsdb-index-3".into()),
            since: Some((DAY + 86_400) as u32),
            ..options.clone()
        };
        let report = rebuild(&db, &partial, |_, _| {}).unwrap();
        assert_eq!((report.series, report.pairs), (4, 4), "{name}");
        assert!(report.verified.is_empty(), "{name}");
        let report = rebuild(&db, &options, |_, _| {}).unwrap();
        assert_eq!(
            (report.metrics, report.series, report.pairs),
            (1, 4, 9),
            "{name}"
        );
        assert_eq!(report.notes, 1, "{name}");
        let flushed = entries_of(&store, "tsdb-index");
        assert!(flushed.len() > 50, "{name}");
        let mut rebuilt = entries_of(&store, "tsdb-index-2");
        let place = index::note_key(&u.metric, (DAY + 100) * 1000, &t);
        assert!(
            rebuilt.iter().any(|(k, ..)| *k == place),
            "{name}: the note has its place"
        );
        // The annotation write gave the note the same place.
        assert_eq!(rebuilt, flushed, "{name}");
        rebuilt.clear();
        // The scan proved every hour before the last full one complete.
        let metric = u.metric.clone();
        assert_eq!(
            i64::from(status::verified(store.as_ref(), "tsdb-index-2", &metric).unwrap()),
            DAY + 86_400 + 6 * 3600,
            "{name}"
        );
        let s = status::read(store.as_ref(), "tsdb-index-2")
            .unwrap()
            .unwrap();
        assert_eq!(
            s.live_from,
            status::NOT_MAINTAINED,
            "{name}: no TSD maintains it"
        );
        db.close().unwrap();
    }
}

#[test]
fn fsck_finds_missing_stale_and_bad_entries_and_fixes_them() {
    use hourglass_engine::index::check::{CheckOptions, check};
    use hourglass_storage::{Mutation, RowMutation};
    for (name, store) in common::backends() {
        let now = Arc::new(AtomicI64::new(DAY + 5 * 86_400));
        let db = common::open(Arc::clone(&store), settings(&now, true));
        write_some(&db);
        db.flush().unwrap();
        let options = CheckOptions {
            now_secs: now.load(Ordering::SeqCst) as u32,
            ..CheckOptions::default()
        };
        let clean = check(&db, &options).unwrap();
        assert_eq!(clean.findings, Vec::<String>::new(), "{name}");
        assert!(clean.rows_checked > 50, "{name}");

        let u = Uids::of(&db);
        let t = u.tags(&db, "web02");
        let s = Series {
            metric: &u.metric,
            tags: &t,
        };
        let web02 = Uids::value(&db, "web02");
        let d1 = DAY as u32;
        let set = |key: Vec<u8>, family: &str, q: &[u8], ts: i64, v: Vec<u8>| RowMutation {
            key,
            mutations: vec![Mutation::set_at(family, q.to_vec(), ts, v)],
        };
        let gone = |key: Vec<u8>| RowMutation {
            key,
            mutations: vec![Mutation::DeleteRow],
        };
        let old = d1 - 86_400 * 3;
        store
            .mutate_rows(
                "tsdb-index",
                &[
                    // Missing: a marker and a posting.
                    gone(index::period_series_key(s, d1)),
                    gone(index::period_posting_key(s, d1, &u.host, &web02)),
                    // Stale: a series' period without rows, closed long ago.
                    set(index::period_series_key(s, old), "p", b"s", 0, vec![]),
                    // Bad: a posting whose tags lack its pair; a value row naming another UID.
                    set(
                        index::period_posting_key(s, d1, &u.dc, &web02),
                        "p",
                        b"s",
                        0,
                        vec![],
                    ),
                    set(
                        index::value_name_key(&u.metric, &u.host, "web01"),
                        "g",
                        b"v",
                        0,
                        web02.clone(),
                    ),
                    // A counter off.
                    set(
                        index::period_counters_key(&u.metric, d1),
                        "c",
                        b"s",
                        4_000_000_000_000, // newer than the increments' cells
                        99i64.to_be_bytes().to_vec(),
                    ),
                ],
            )
            .unwrap();
        let found = check(&db, &options).unwrap();
        assert_eq!(
            (
                found.missing,
                found.stale,
                found.bad,
                found.counters_differing
            ),
            (3, 1, 2, 1),
            "{name}: {:#?}",
            found.findings
        );
        assert_eq!(found.errors(), 5);
        // From the second day on: the first day's entries and counters are not looked at
        // (the all-time value rows are).
        let later = check(
            &db,
            &CheckOptions {
                since: Some(d1 + 86_400),
                ..options.clone()
            },
        )
        .unwrap();
        assert_eq!(
            (
                later.missing,
                later.stale,
                later.bad,
                later.counters_differing
            ),
            (1, 0, 1, 0),
            "{name}: {:#?}",
            later.findings
        );
        assert!(
            found
                .findings
                .iter()
                .any(|f| f.contains("lack its own tag pair")),
            "{name}"
        );
        let fixed = check(
            &db,
            &CheckOptions {
                fix: true,
                ..options.clone()
            },
        )
        .unwrap();
        assert!(fixed.fixed >= 7, "{name}: {}", fixed.fixed);
        let after = check(&db, &options).unwrap();
        assert_eq!(after.findings, Vec::<String>::new(), "{name}");
        db.close().unwrap();
    }
}

#[test]
fn a_catalog_row_whose_write_failed_is_written_by_a_later_flush() {
    use hourglass_engine::sim::{FaultStore, Faults, Op};
    use std::sync::atomic::AtomicUsize;
    let memory: Arc<dyn Store> = Arc::new(hourglass_storage::memory::MemoryStore::new());
    let faults = Arc::new(Faults::new(1, 0));
    let store = Arc::new(FaultStore::over(Arc::clone(&memory), Arc::clone(&faults)));
    let now = Arc::new(AtomicI64::new(DAY + 12 * 3600));
    let db = common::open(store.clone(), settings(&now, true));
    put(&db, DAY + 3600, "web01");
    db.flush().unwrap();
    let u = Uids::of(&db);
    let t = u.tags(&db, "web01");
    let catalog = index::catalog_key(Series {
        metric: &u.metric,
        tags: &t,
    });
    db.close().unwrap();
    drop(db);
    // The catalog row is lost; its day's marker is not.
    memory
        .mutate_row(
            "tsdb-index",
            &catalog,
            &[hourglass_storage::Mutation::DeleteRow],
        )
        .unwrap();
    let db = common::open(store.clone(), settings(&now, true));
    // The next flush's third batch write (index entries, data rows, then markers) fails.
    let writes = Arc::new(AtomicUsize::new(0));
    let (w, f) = (Arc::clone(&writes), Arc::clone(&faults));
    store.set_hook(Some(Arc::new(move |op| {
        if op == Op::BeforeWrite && w.fetch_add(1, Ordering::SeqCst) == 2 {
            f.set_store_down(true);
        }
    })));
    put(&db, DAY + 3600 + 1, "web01");
    db.flush().unwrap(); // the markers' failure is logged, the flush stands
    store.set_hook(None);
    faults.set_store_down(false);
    assert!(writes.load(Ordering::SeqCst) >= 3);
    assert!(!index_rows(&memory).contains_key(&catalog));
    // The day is known indexed, the catalog row is not: the next flush writes it.
    put(&db, DAY + 3600 + 2, "web01");
    db.flush().unwrap();
    assert!(index_rows(&memory).contains_key(&catalog));
    db.close().unwrap();
}

#[test]
fn renaming_a_tag_value_renames_its_index_rows() {
    use hourglass_engine::index::check::{CheckOptions, check};
    for (name, store) in common::backends() {
        let now = Arc::new(AtomicI64::new(DAY + 5 * 86_400));
        let db = common::open(Arc::clone(&store), settings(&now, true));
        write_some(&db);
        db.flush().unwrap();
        let u = Uids::of(&db);
        let web01 = Uids::value(&db, "web01");
        db.uids()
            .rename(UidKind::TagValue, "web01", "web99")
            .unwrap();
        let rows = index_rows(&store);
        let d1 = DAY as u32;
        assert!(
            rows.contains_key(&index::value_name_key(&u.metric, &u.host, "web99")),
            "{name}"
        );
        assert!(
            !rows.contains_key(&index::value_name_key(&u.metric, &u.host, "web01")),
            "{name}"
        );
        assert!(
            rows.contains_key(&index::period_value_name_key(
                &u.metric, d1, &u.host, "web99"
            )),
            "{name}"
        );
        assert!(
            !rows.contains_key(&index::period_value_name_key(
                &u.metric, d1, &u.host, "web01"
            )),
            "{name}"
        );
        let trigram = |t: &[u8; 3]| index::trigram_key(&u.host, *t, &web01);
        assert!(rows.contains_key(&trigram(b"b99")), "{name}");
        assert!(!rows.contains_key(&trigram(b"b01")), "{name}");
        assert!(
            rows.contains_key(&trigram(b"web")),
            "{name}: shared by both names"
        );
        let options = CheckOptions {
            now_secs: now.load(Ordering::SeqCst) as u32,
            ..CheckOptions::default()
        };
        assert_eq!(
            check(&db, &options).unwrap().findings,
            Vec::<String>::new(),
            "{name}"
        );
        db.close().unwrap();
    }
}

/// A note written, moved and deleted through the annotation API keeps its `0x30` place in
/// step (RFC 0007 phase 5), so `tsdb fsck --index` finds nothing missing or bad, whether
/// the note's hour holds points or not; a global note has its place too.
#[test]
fn annotation_writes_keep_their_index_places_and_fsck_finds_nothing_missing() {
    use hourglass_engine::annotation::{self, AnnotationUpdate};
    use hourglass_engine::index::check::{CheckOptions, check};
    for (name, store) in common::backends() {
        let now = Arc::new(AtomicI64::new(DAY + 5 * 86_400));
        let db = common::open(Arc::clone(&store), settings(&now, true));
        write_some(&db);
        db.flush().unwrap();
        let u = Uids::of(&db);
        let t = u.tags(&db, "web01");
        let tsuid = [u.metric.as_slice(), &t].concat();
        let hex = hourglass_core::uid::hex_upper(&tsuid);
        let note = |tsuid: &str, start: i64, text: &str| {
            let mut n = AnnotationUpdate::default();
            n.note.tsuid = tsuid.to_string();
            n.note.start_time = start;
            n.note.description = text.into();
            n.changed.insert("description");
            annotation::sync(&db, &n, false).unwrap();
        };
        // At an hour with points, at one (two days later) without any, and a global one.
        note(&hex, DAY + 100, "deploy");
        note(&hex, DAY + 3 * 86_400 + 5, "quiet day");
        note("", DAY + 200, "outage");
        let places: Vec<Vec<u8>> = index_rows(&store)
            .into_keys()
            .filter(|k| k.first() == Some(&index::kind::NOTE))
            .collect();
        assert_eq!(
            places,
            vec![
                index::note_key(&[0, 0, 0], (DAY + 200) * 1000, &[]),
                index::note_key(&u.metric, (DAY + 100) * 1000, &t),
                index::note_key(&u.metric, (DAY + 3 * 86_400 + 5) * 1000, &t),
            ],
            "{name}"
        );
        let options = CheckOptions {
            now_secs: now.load(Ordering::SeqCst) as u32,
            ..CheckOptions::default()
        };
        let report = check(&db, &options).unwrap();
        assert_eq!(report.findings, Vec::<String>::new(), "{name}");
        assert_eq!(report.errors(), 0, "{name}");

        // Deleting a note removes its place; a range delete removes those in the range.
        annotation::delete(&db, &hex, DAY + 100).unwrap();
        annotation::delete_range(&db, None, (DAY + 100) * 1000, (DAY + 300) * 1000).unwrap();
        let places: Vec<Vec<u8>> = index_rows(&store)
            .into_keys()
            .filter(|k| k.first() == Some(&index::kind::NOTE))
            .collect();
        assert_eq!(
            places,
            vec![index::note_key(
                &u.metric,
                (DAY + 3 * 86_400 + 5) * 1000,
                &t
            )],
            "{name}"
        );
        let report = check(&db, &options).unwrap();
        assert_eq!(report.findings, Vec::<String>::new(), "{name}");
        db.close().unwrap();
    }
}

/// A series holding a UID its writer has just assigned cannot have entries anywhere yet:
/// its catalog row and markers are not read, and what is written equals a rebuild's. A
/// series whose UIDs exist (another TSD, or a restart) is read first. A TSD that writes a
/// series with a UID another TSD has just assigned, before that one flushes, leaves the same
/// entries, counted twice at most.
#[test]
fn series_with_a_uid_just_assigned_are_indexed_without_reading_their_markers() {
    use hourglass_engine::index::rebuild::{RebuildOptions, rebuild};
    use hourglass_engine::sim::{FaultStore, Faults, Op};
    use std::sync::atomic::AtomicUsize;
    for (name, inner) in common::backends() {
        let store = Arc::new(FaultStore::over(inner, Arc::new(Faults::new(1, 0))));
        let read = Arc::new(AtomicUsize::new(0));
        let r = Arc::clone(&read);
        store.set_hook(Some(Arc::new(move |op| {
            if let Op::GetRows(n) = op {
                r.fetch_add(n, Ordering::SeqCst);
            }
        })));
        let dyn_store: Arc<dyn Store> = store.clone();
        // Points in the clock's hour: the flush reads no data row (closed hours' are read).
        let now = Arc::new(AtomicI64::new(DAY + 3600 + 60));
        let rebuilt = |db: &Tsdb, table: &str| {
            let options = RebuildOptions {
                table: Some(table.into()),
                now_secs: now.load(Ordering::SeqCst) as u32,
                ..RebuildOptions::default()
            };
            rebuild(db, &options, |_, _| {}).unwrap();
            entries_of(&dyn_store, table)
        };
        let a = common::open(Arc::clone(&dyn_store), settings(&now, true));
        put(&a, DAY + 3600, "web01");
        put(&a, DAY + 3600, "web02");
        a.flush().unwrap();
        assert_eq!(read.swap(0, Ordering::SeqCst), 0, "{name}: nothing read");
        assert_eq!(
            entries_of(&dyn_store, "tsdb-index"),
            rebuilt(&a, "tsdb-index-2"),
            "{name}: entries and counters as a rebuild's"
        );
        a.close().unwrap();
        drop(a);

        // Another process: web01's UIDs exist (its catalog row and day marker are read,
        // found, and nothing is written or counted again); web03's value is new.
        now.store(DAY + 2 * 3600 + 60, Ordering::SeqCst);
        let b = common::open(Arc::clone(&dyn_store), settings(&now, true));
        put(&b, DAY + 2 * 3600, "web01");
        put(&b, DAY + 2 * 3600, "web03");
        b.flush().unwrap();
        assert_eq!(
            read.swap(0, Ordering::SeqCst),
            2,
            "{name}: web01's two rows"
        );
        // The same rows; counters too but `dc`'s distinct values (`lon` counted again by a
        // process that does not know it counted it: an upper bound, as before).
        let dc_values = index::key_values_qualifier(&Uids::of(&b).dc);
        let but_dc =
            |cells: Cells| -> Cells { cells.into_iter().filter(|c| c.2 != dc_values).collect() };
        assert_eq!(
            but_dc(entries_of(&dyn_store, "tsdb-index")),
            but_dc(rebuilt(&b, "tsdb-index-3")),
            "{name}"
        );

        // Two TSDs: `c` assigns web04's UID, `b` writes web04 (finding the UID) and flushes
        // first; `c`'s flush then writes the same entries again without reading them.
        now.store(DAY + 3 * 3600 + 60, Ordering::SeqCst);
        let c = common::open(Arc::clone(&dyn_store), settings(&now, true));
        put(&c, DAY + 3 * 3600, "web04");
        put(&b, DAY + 3 * 3600 + 1, "web04");
        b.flush().unwrap();
        read.store(0, Ordering::SeqCst);
        c.flush().unwrap();
        assert_eq!(read.load(Ordering::SeqCst), 0, "{name}");
        let flushed = entries_of(&dyn_store, "tsdb-index");
        let exact = rebuilt(&b, "tsdb-index-4");
        let is_counter = |cell: &(Vec<u8>, String, Vec<u8>, Vec<u8>)| cell.1 == "c";
        let entries =
            |cells: &Cells| -> Cells { cells.iter().filter(|c| !is_counter(c)).cloned().collect() };
        assert_eq!(entries(&flushed), entries(&exact), "{name}: the same rows");
        let u = Uids::of(&b);
        let day = index::period_counters_key(&u.metric, DAY as u32);
        let (flushed, exact) = (index_rows(&dyn_store), {
            let mut rows = Rows::new();
            for (key, family, qualifier, value) in exact {
                rows.entry(key)
                    .or_default()
                    .push((family, qualifier, 0, value));
            }
            rows
        });
        assert_eq!(counter(&exact, &day, b"s"), 4, "{name}");
        assert_eq!(
            counter(&flushed, &day, b"s"),
            5,
            "{name}: web04 counted by both TSDs, an upper bound"
        );
        b.close().unwrap();
        c.close().unwrap();
    }
}
