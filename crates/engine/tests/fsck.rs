#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `fsck` and `uid fsck` on every backend: each test damages a store on purpose, checks that
//! the finding is reported (count and line) and that nothing changes without the fix flags,
//! then repairs it with the right flag while a healthy series next to it keeps every point.
mod common;

use std::sync::Arc;

use hourglass_core::qualifier::Qualifier;
use hourglass_core::rowkey::{SeriesKey, encode_row_key};
use hourglass_core::schema::{DATA_FAMILY, MAXID_ROW, Schema, UID_ID_FAMILY, UID_NAME_FAMILY};
use hourglass_core::uid::{Uid, UidKind, hex_upper};
use hourglass_core::value::Value;
use hourglass_engine::fsck::uid::{UidFsckOptions, UidFsckReport, uid_fsck};
use hourglass_engine::fsck::{FsckOptions, FsckReport, FsckScope, fsck};
use hourglass_engine::scan::RowQuery;
use hourglass_engine::{IncomingPoint, Settings, Tsdb};
use hourglass_storage::{Mutation, ReadOptions, Row, ScanRequest, Store};

/// 2013-01-01T02:00:00Z: the hour each test damages (the healthy series covers 00:00-01:40).
const HOUR: u32 = 1357005600;
const HEALTHY_POINTS: i64 = 200;

struct Fixture {
    backend: &'static str,
    store: Arc<dyn Store>,
    db: Arc<Tsdb>,
}

/// A healthy series `sys.cpu.user` (host=web01: 1..200, host=web02: 200..1, every 30 s from
/// 1356998430, compacted) and the series `sys.damaged host=web01` with one point at
/// 1356998400, whose hour [`HOUR`] the tests write raw cells into.
fn fixtures_with(settings: Settings) -> Vec<Fixture> {
    common::backends()
        .into_iter()
        .map(|(backend, store)| {
            let db = common::open(store.clone(), settings.clone());
            let w1 = [("host", "web01")];
            let w2 = [("host", "web02")];
            let mut pts = Vec::new();
            for i in 0..HEALTHY_POINTS {
                pts.push(IncomingPoint {
                    metric: "sys.cpu.user",
                    timestamp: 1356998430 + i * 30,
                    value: Value::Int(i + 1),
                    tags: &w1,
                    line_tags: None,
                });
                pts.push(IncomingPoint {
                    metric: "sys.cpu.user",
                    timestamp: 1356998430 + i * 30,
                    value: Value::Int(HEALTHY_POINTS - i),
                    tags: &w2,
                    line_tags: None,
                });
            }
            pts.push(IncomingPoint {
                metric: "sys.damaged",
                timestamp: 1356998400,
                value: Value::Int(7),
                tags: &w1,
                line_tags: None,
            });
            assert_eq!(db.add_points(&pts).stored, pts.len(), "{backend}");
            db.flush().unwrap();
            Fixture { backend, store, db }
        })
        .collect()
}

fn fixtures() -> Vec<Fixture> {
    fixtures_with(common::auto_create())
}

impl Fixture {
    fn schema(&self) -> &Schema {
        &self.db.settings().schema
    }

    /// Row key of `sys.damaged host=web01` (metric 2, host 1, web01 1) at `base`.
    fn damaged_key(&self, base: u32) -> Vec<u8> {
        encode_row_key(
            self.schema(),
            &SeriesKey::new(Uid(2), vec![(Uid(1), Uid(1))]),
            base,
        )
    }

    /// Writes raw cells `(qualifier, value, cell timestamp)` into a data row.
    fn put(&self, key: &[u8], cells: &[(&[u8], &[u8], i64)]) {
        let mutations: Vec<Mutation> = cells
            .iter()
            .map(|(q, v, ts)| Mutation::set_at(DATA_FAMILY, q.to_vec(), *ts, v.to_vec()))
            .collect();
        self.store
            .mutate_row(&self.schema().data_table, key, &mutations)
            .unwrap();
    }

    fn row(&self, key: &[u8]) -> Option<Row> {
        self.store
            .get(&self.schema().data_table, key, &ReadOptions::default())
            .unwrap()
    }

    /// Every row of a table, as stored.
    fn snapshot(&self, table: &str) -> Vec<Row> {
        self.store
            .scan(table, &ScanRequest::default())
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    fn fsck(&self, options: &FsckOptions) -> FsckReport {
        fsck(&self.db, &FsckScope::FullScan, options).unwrap()
    }

    /// A full scan that must not write anything, returned for its findings.
    fn fsck_read_only(&self, options: &FsckOptions) -> FsckReport {
        let before = self.snapshot(&self.schema().data_table);
        let report = self.fsck(options);
        assert_eq!(
            self.snapshot(&self.schema().data_table),
            before,
            "{}: fsck without the fix flags changed the table",
            self.backend
        );
        report
    }

    fn query(&self, metric: &str) -> RowQuery {
        RowQuery {
            metric: self.db.uids().get_id(UidKind::Metric, metric).unwrap(),
            start_secs: 1356998400,
            end_secs: 1357012800,
            tags: Vec::new(),
        }
    }

    /// Points of `sys.damaged` (all series).
    fn damaged_points(&self) -> hourglass_engine::Result<Vec<(i64, Value)>> {
        Ok(self
            .db
            .read_series(&self.query("sys.damaged"))?
            .into_iter()
            .flat_map(|s| s.points)
            .collect())
    }

    /// The healthy series still has every point.
    fn assert_healthy(&self) {
        let series = self.db.read_series(&self.query("sys.cpu.user")).unwrap();
        assert_eq!(series.len(), 2, "{}", self.backend);
        for (n, s) in series.iter().enumerate() {
            assert_eq!(s.points.len(), HEALTHY_POINTS as usize, "{}", self.backend);
            for (i, (t, v)) in s.points.iter().enumerate() {
                let i = i as i64;
                assert_eq!(*t, (1356998430 + i * 30) * 1000, "{}", self.backend);
                let want = if n == 0 { i + 1 } else { HEALTHY_POINTS - i };
                assert_eq!(*v, Value::Int(want), "{}", self.backend);
            }
        }
    }

    fn uid_fsck(&self, fix: bool) -> UidFsckReport {
        uid_fsck(
            &self.db,
            &UidFsckOptions {
                fix,
                delete_unknown: false,
            },
        )
        .unwrap()
    }
}

fn fix(f: impl FnOnce(&mut FsckOptions)) -> FsckOptions {
    let mut o = FsckOptions {
        fix: true,
        ..FsckOptions::default()
    };
    f(&mut o);
    o
}

fn only_finding(report: &FsckReport) -> &str {
    assert_eq!(report.findings.len(), 1, "{:#?}", report.findings);
    &report.findings[0]
}

#[test]
fn healthy_store_reports_nothing_and_queries_scan_their_metric_only() {
    for f in fixtures() {
        let report = f.fsck_read_only(&FsckOptions::default());
        assert_eq!(report.total_errors(), 0, "{}: {:#?}", f.backend, report);
        assert!(report.findings.is_empty());
        assert_eq!(report.rows_processed, 5, "{}", f.backend);
        assert_eq!(report.kvs_processed, 5, "{}", f.backend);
        assert_eq!(report.valid_datapoints, 2 * HEALTHY_POINTS as u64 + 1);
        let summary = report.summary_lines();
        assert_eq!(summary[0], "Key Values Processed: 5");
        assert_eq!(
            summary[2],
            format!("Valid Datapoints: {}", 2 * HEALTHY_POINTS + 1)
        );
        // --fix-all on a healthy store writes nothing either.
        let fixed = f.fsck_read_only(&FsckOptions::fix_all());
        assert_eq!(fixed.total_errors(), 0, "{}", f.backend);

        // A query scans its metric's rows only.
        let key = f.damaged_key(HOUR);
        f.put(&key, &[(&[0x00, 0x01], &[5], 1000)]);
        let healthy = fsck(
            &f.db,
            &FsckScope::Queries(vec![f.query("sys.cpu.user")]),
            &FsckOptions::default(),
        )
        .unwrap();
        assert_eq!(healthy.total_errors(), 0, "{}", f.backend);
        assert_eq!(healthy.rows_processed, 4, "{}", f.backend);
        let damaged = fsck(
            &f.db,
            &FsckScope::Queries(vec![f.query("sys.damaged")]),
            &FsckOptions::default(),
        )
        .unwrap();
        assert_eq!(damaged.bad_values, 1, "{}", f.backend);
        assert_eq!(damaged.rows_processed, 2, "{}", f.backend);
        // The same findings with one worker or several.
        let one = f.fsck(&FsckOptions {
            threads: 1,
            ..FsckOptions::default()
        });
        let many = f.fsck(&FsckOptions {
            threads: 3,
            ..FsckOptions::default()
        });
        assert_eq!(one, many, "{}", f.backend);
        assert_eq!(one.bad_values, 1);
    }
}

#[test]
fn bad_row_key_is_deleted_with_delete_bad_rows() {
    for f in fixtures() {
        let mut key = f.damaged_key(HOUR);
        key.truncate(key.len() - 2);
        f.put(&key, &[(&[0x00, 0x00], &[1], 1000)]);
        let report = f.fsck_read_only(&FsckOptions::default());
        assert_eq!(report.bad_key, 1, "{}", f.backend);
        assert_eq!(report.total_errors(), 1);
        assert_eq!(
            only_finding(&report),
            format!(
                "Invalid row key. Key: {} (11 bytes; expected 7 plus a multiple of 6); --fix --delete-bad-rows deletes the row",
                hex_upper(&key)
            )
        );
        // --fix alone does not delete rows.
        let report = f.fsck_read_only(&fix(|_| {}));
        assert_eq!(report.bad_key_fixed, 0);

        let report = f.fsck(&fix(|o| o.delete_bad_rows = true));
        assert_eq!(
            (report.bad_key, report.bad_key_fixed),
            (1, 1),
            "{}",
            f.backend
        );
        assert!(only_finding(&report).ends_with("; fixed: deleted the row"));
        assert!(f.row(&key).is_none(), "{}", f.backend);
        assert_eq!(f.fsck(&FsckOptions::default()).total_errors(), 0);
        f.assert_healthy();
    }
}

#[test]
fn orphan_rows_are_deleted_with_delete_orphans() {
    for f in fixtures() {
        let schema = f.schema().clone();
        // Metric 0x99 has no name; tag value 0x77 has none either.
        let no_metric = encode_row_key(
            &schema,
            &SeriesKey::new(Uid(0x99), vec![(Uid(1), Uid(1))]),
            HOUR,
        );
        let no_tagv = encode_row_key(
            &schema,
            &SeriesKey::new(Uid(2), vec![(Uid(1), Uid(0x77))]),
            HOUR,
        );
        f.put(&no_metric, &[(&[0x00, 0x00], &[1], 1000)]);
        f.put(&no_tagv, &[(&[0x00, 0x00], &[1], 1000)]);
        let report = f.fsck_read_only(&fix(|o| o.delete_bad_rows = true));
        assert_eq!(report.orphans, 2, "{}", f.backend);
        assert_eq!(report.findings.len(), 2);
        assert!(report.findings.contains(&format!(
            "Unable to resolve the metric from the row key. Key: {}: No such unique ID for 'metrics': [0, 0, -103]; --fix --delete-orphans deletes the row",
            hex_upper(&no_metric)
        )), "{:#?}", report.findings);
        assert!(report.findings.contains(&format!(
            "Unable to resolve a tagk or tagv from the row key. Key: {}: No such unique ID for 'tagv': [0, 0, 119]; --fix --delete-orphans deletes the row",
            hex_upper(&no_tagv)
        )), "{:#?}", report.findings);

        let report = f.fsck(&fix(|o| o.delete_orphans = true));
        assert_eq!(
            (report.orphans, report.orphans_fixed),
            (2, 2),
            "{}",
            f.backend
        );
        assert!(f.row(&no_metric).is_none() && f.row(&no_tagv).is_none());
        assert_eq!(f.fsck(&FsckOptions::default()).total_errors(), 0);
        f.assert_healthy();
    }
}

#[test]
fn unknown_columns_are_deleted_with_delete_unknown_columns() {
    for f in fixtures() {
        let key = f.damaged_key(1356998400);
        f.put(
            &key,
            &[(&[0x07], b"x", 1000), (&[1, 2, 3, 4, 5, 6, 7], b"y", 1000)],
        );
        let report = f.fsck_read_only(&fix(|o| o.delete_bad_values = true));
        assert_eq!(report.unknown, 2, "{}", f.backend);
        assert_eq!(report.total_errors(), 2, "{:#?}", report.findings);
        let hex = hex_upper(&key);
        assert_eq!(
            report.findings,
            vec![
                format!(
                    "Unknown qualifier, must be 2, 3, 5 or an even number of bytes. Key: {hex}, qualifier [01 02 03 04 05 06 07], value [79]; --fix --delete-unknown-columns deletes the column"
                ),
                format!(
                    "Invalid qualifier, must be on 2 bytes or more. Key: {hex}, qualifier [07], value [78]; --fix --delete-unknown-columns deletes the column"
                ),
            ]
        );
        let report = f.fsck(&fix(|o| o.delete_unknown_columns = true));
        assert_eq!(
            (report.unknown, report.unknown_fixed),
            (2, 2),
            "{}",
            f.backend
        );
        let row = f.row(&key).unwrap();
        assert_eq!(row.cells.len(), 1, "{}: the data cell stays", f.backend);
        assert_eq!(
            f.damaged_points().unwrap(),
            vec![(1356998400000, Value::Int(7))]
        );
        f.assert_healthy();
    }
}

#[test]
fn bad_value_lengths_are_deleted_with_delete_bad_values() {
    for f in fixtures() {
        let key = f.damaged_key(HOUR);
        // A 2-byte integer flag with a 1-byte value: readers cannot decode the row.
        f.put(&key, &[(&[0x00, 0x01], &[5], 1000)]);
        assert!(f.damaged_points().is_err(), "{}", f.backend);
        let report = f.fsck_read_only(&fix(|o| o.delete_bad_rows = true));
        assert_eq!(report.bad_values, 1, "{}", f.backend);
        assert_eq!(
            only_finding(&report),
            format!(
                "The integer value is 1 bytes long but should be 2 bytes. Key: {}, qualifier [00 01], value [05]; --fix --delete-bad-values deletes the column",
                hex_upper(&key)
            )
        );
        let report = f.fsck(&fix(|o| o.delete_bad_values = true));
        assert_eq!((report.bad_values, report.bad_values_deleted), (1, 1));
        assert!(f.row(&key).is_none(), "{}", f.backend);
        assert_eq!(f.damaged_points().unwrap().len(), 1, "{}", f.backend);
        f.assert_healthy();
    }
}

#[test]
fn floats_on_eight_bytes_are_rewritten_with_fix() {
    for f in fixtures() {
        let key = f.damaged_key(HOUR);
        let q = Qualifier::seconds(1, 0x0B).unwrap().to_bytes();
        let mut padded = vec![0, 0, 0, 0];
        padded.extend_from_slice(&1.5f32.to_be_bytes());
        // An 8-byte integer that fits one byte: not an error, shortened by --fix.
        let long = Qualifier::seconds(2, 0x07).unwrap().to_bytes();
        f.put(
            &key,
            &[(&q, &padded, 1000), (&long, &9i64.to_be_bytes(), 1000)],
        );
        let report = f.fsck_read_only(&FsckOptions {
            now_ms: Some(i64::from(HOUR) * 1000),
            ..FsckOptions::default()
        });
        assert_eq!(report.value_encoding, 1, "{}", f.backend);
        assert_eq!((report.vle, report.vle_bytes), (1, 7));
        assert_eq!(
            only_finding(&report),
            format!(
                "Floating point value was marked as 4 bytes long but was actually 8 bytes long. Key: {}, qualifier [00 1B], value [00 00 00 00 3F C0 00 00]; --fix rewrites it on 4 bytes",
                hex_upper(&key)
            )
        );
        // In the open hour (per the clock given) --fix rewrites the columns in place.
        let report = f.fsck(&fix(|o| o.now_ms = Some(i64::from(HOUR) * 1000)));
        assert_eq!(report.value_encoding_fixed, 1, "{}", f.backend);
        assert_eq!(report.vle_fixed, 1);
        assert!(only_finding(&report).ends_with("; fixed: rewritten on 4 bytes"));
        let row = f.row(&key).unwrap();
        assert_eq!(row.value(DATA_FAMILY, &q), Some(&1.5f32.to_be_bytes()[..]));
        assert_eq!(row.value(DATA_FAMILY, &[0x00, 0x20]), Some(&[9u8][..]));
        assert_eq!(row.cells.len(), 2, "{}", f.backend);
        let points = f.damaged_points().unwrap();
        assert_eq!(
            points[1..],
            [
                (1357005601000, Value::Float(1.5)),
                (1357005602000, Value::Int(9))
            ]
        );
        f.assert_healthy();
    }
}

#[test]
fn unparseable_compacted_cells_are_deleted_with_delete_bad_compacts() {
    for f in fixtures() {
        let key = f.damaged_key(HOUR);
        // Two 1-byte points but a value of one byte: cannot be broken down.
        f.put(&key, &[(&[0x00, 0x00, 0x00, 0x10], &[1], 1000)]);
        assert!(f.damaged_points().is_err(), "{}", f.backend);
        let report = f.fsck_read_only(&fix(|o| o.delete_bad_values = true));
        assert_eq!(report.bad_compacted_columns, 1, "{}", f.backend);
        let line = only_finding(&report);
        assert!(
            line.starts_with("Corrupted value: couldn't break down into individual values ("),
            "{line}"
        );
        assert!(line.ends_with(&format!(
            "Key: {}, qualifier [00 00 00 10], value [01]; --fix --delete-bad-compacts deletes the column",
            hex_upper(&key)
        )), "{line}");
        let report = f.fsck(&fix(|o| o.delete_bad_compacts = true));
        assert_eq!(
            (
                report.bad_compacted_columns,
                report.bad_compacted_columns_deleted
            ),
            (1, 1)
        );
        assert_eq!(report.total_fixed(), 1);
        assert!(f.row(&key).is_none(), "{}", f.backend);
        assert_eq!(f.damaged_points().unwrap().len(), 1);
        f.assert_healthy();
    }
}

#[test]
fn out_of_order_compacted_cells_are_rewritten_with_fix() {
    for f in fixtures() {
        let key = f.damaged_key(HOUR);
        f.put(&key, &[(&[0x00, 0x20, 0x00, 0x10], &[2, 1, 0], 1000)]);
        let report = f.fsck_read_only(&FsckOptions::default());
        assert_eq!(report.out_of_order_compacted, 1, "{}", f.backend);
        assert_eq!(report.total_errors(), 1);
        assert!(only_finding(&report).starts_with(&format!(
            "Compacted column was out of order or requires a fixup. Key: {}, qualifier [00 20 00 10], value [02 01 00]; --fix",
            hex_upper(&key)
        )));
        let report = f.fsck(&fix(|_| {}));
        assert_eq!(report.out_of_order_compacted_fixed, 1, "{}", f.backend);
        let row = f.row(&key).unwrap();
        assert_eq!(row.cells.len(), 1);
        assert_eq!(row.cells[0].qualifier, [0x00, 0x10, 0x00, 0x20]);
        assert_eq!(row.cells[0].value, [1, 2, 0]);
        assert_eq!(f.fsck(&FsckOptions::default()).total_errors(), 0);
        f.assert_healthy();
    }
}

/// With computed rollups (RFC 0008 phase 4) a repair of raw points marks its hour dirty in
/// the rollup state table, so the next round computes the tiers again from the repaired
/// points.
#[test]
fn repairs_mark_their_hours_dirty_for_computed_rollups() {
    let mut c = hourglass_core::config::Config::default();
    c.set("tsd.rollups.enable", "true");
    c.set("tsd.rollups.compute", "true");
    c.set(
        "tsd.rollups.config",
        r#"{"aggregationIds":{"sum":0,"count":1},"intervals":[
        {"table":"tsdb","preAggregationTable":"tsdb-agg","interval":"1m","rowSpan":"1h","defaultInterval":true},
        {"table":"tsdb-rollup-1h","preAggregationTable":"tsdb-rollup-agg-1h","interval":"1h","rowSpan":"1d"}]}"#,
    );
    let mut settings = common::auto_create();
    settings.rollups = hourglass_engine::rollup::RollupSettings::from_config(&c)
        .unwrap()
        .map(Arc::new);
    for f in fixtures_with(settings) {
        let state = hourglass_engine::rollup::compute::state_table(f.schema());
        let marked = |f: &Fixture| -> bool {
            let key = [&[b'd'][..], &HOUR.to_be_bytes()].concat();
            f.store
                .get(&state, &key, &ReadOptions::default())
                .unwrap()
                .is_some()
        };
        let key = f.damaged_key(HOUR);
        f.put(&key, &[(&[0x00, 0x01], &[5], 1000)]);
        f.fsck_read_only(&fix(|o| o.delete_bad_rows = true));
        assert!(!marked(&f), "{}: nothing repaired yet", f.backend);
        let report = f.fsck(&fix(|o| o.delete_bad_values = true));
        assert_eq!(report.bad_values_deleted, 1, "{}", f.backend);
        assert!(marked(&f), "{}: the repaired hour is dirty", f.backend);
        f.assert_healthy();
    }
}

#[test]
fn duplicates_are_resolved_with_resolve_duplicates() {
    for f in fixtures() {
        let key = f.damaged_key(HOUR);
        let ms_1s = Qualifier::millis(1000, 0).unwrap().to_bytes();
        // Offset 0: `00 00` = 1 (older) and `00 01` = 2 (newer, two bytes).
        // Offset 1 s: `00 10` = 3 (seconds, older) and `F0 00 FA 00` = 4 (ms, newer).
        f.put(
            &key,
            &[
                (&[0x00, 0x00], &[1], 1000),
                (&[0x00, 0x01], &[0, 2], 2000),
                (&[0x00, 0x10], &[3], 1000),
                (&ms_1s, &[4], 2000),
            ],
        );
        let report = f.fsck_read_only(&fix(|o| o.delete_bad_values = true));
        assert_eq!(report.duplicates, 2, "{}", f.backend);
        assert_eq!(report.uncompacted_rows, 1);
        let hex = hex_upper(&key);
        let first = format!(
            "Duplicate data point at 1357005600000 (2013-01-01T02:00:00Z) in row {hex}: kept qualifier [00 00] (single column, written 1000, value 1), discarded qualifier [00 01] (single column, written 2000, value 2); --fix --resolve-duplicates keeps the oldest write"
        );
        let second = format!(
            "Duplicate data point at 1357005601000 (2013-01-01T02:00:01Z) in row {hex}: kept qualifier [00 10] (single column, written 1000, value 3), discarded qualifier [F0 00 FA 00] (single column, written 2000, value 4); --fix --resolve-duplicates keeps the oldest write"
        );
        assert_eq!(report.findings[0], first);
        assert_eq!(report.findings[1], second);
        assert!(
            report.findings[3].starts_with("One or more errors found in row"),
            "{:#?}",
            report.findings
        );

        let report = f.fsck(&fix(|o| o.resolve_duplicates = true));
        assert_eq!(report.duplicates_fixed, 2, "{}", f.backend);
        assert_eq!(report.uncompacted_rows_fixed, 1);
        assert_eq!(
            report.findings[0],
            format!(
                "{}; fixed: kept the oldest write",
                &first[..first.find("; --fix").unwrap()]
            )
        );
        let row = f.row(&key).unwrap();
        assert_eq!(row.cells.len(), 1, "{}", f.backend);
        assert_eq!(row.cells[0].qualifier, [0x00, 0x00, 0x00, 0x10]);
        assert_eq!(row.cells[0].value, [1, 3, 0]);
        assert_eq!(f.fsck(&FsckOptions::default()).total_errors(), 0);

        // With --last-write-wins the newest writes stay.
        let key = f.damaged_key(HOUR + 3600);
        f.put(
            &key,
            &[
                (&[0x00, 0x00], &[1], 1000),
                (&[0x00, 0x01], &[0, 2], 2000),
                (&[0x00, 0x10], &[3], 1000),
                (&ms_1s, &[4], 2000),
            ],
        );
        let report = f.fsck(&fix(|o| {
            o.resolve_duplicates = true;
            o.last_write_wins = true;
        }));
        assert_eq!(report.duplicates_fixed, 2, "{}", f.backend);
        let row = f.row(&key).unwrap();
        assert_eq!(row.cells.len(), 1, "{}", f.backend);
        assert_eq!(row.cells[0].qualifier, [0x00, 0x01, 0xF0, 0x00, 0xFA, 0x00]);
        assert_eq!(
            row.cells[0].value,
            [0, 2, 4, 1],
            "mixed resolutions: meta byte 1"
        );
        f.assert_healthy();
    }
}

#[test]
fn past_hours_left_uncompacted_are_compacted_with_fix() {
    for f in fixtures() {
        let key = f.damaged_key(HOUR);
        f.put(
            &key,
            &[
                (&[0x00, 0x00], &[1], 1000),
                (&[0x00, 0x10], &[2], 2000),
                (&[0x00, 0x20], &[3], 3000),
            ],
        );
        // Within the grace hour after the hour ends, the row is still the writer's.
        let report = f.fsck_read_only(&FsckOptions {
            now_ms: Some((i64::from(HOUR) + 3600 + 1800) * 1000),
            ..FsckOptions::default()
        });
        assert_eq!(report.uncompacted_rows, 0, "{}", f.backend);
        let report = f.fsck_read_only(&FsckOptions::default());
        assert_eq!(report.uncompacted_rows, 1, "{}", f.backend);
        assert_eq!(report.total_errors(), 1);
        assert_eq!(
            only_finding(&report),
            format!(
                "Past row left uncompacted: row {} of the hour 2013-01-01T02:00:00Z holds 3 data columns; --fix compacts it into one column",
                hex_upper(&key)
            )
        );
        assert_eq!(report.summary_lines()[27], "Past Rows Left Uncompacted: 1");

        let report = f.fsck(&fix(|_| {}));
        assert_eq!(report.uncompacted_rows_fixed, 1, "{}", f.backend);
        assert_eq!(report.total_fixed(), 1);
        let row = f.row(&key).unwrap();
        assert_eq!(row.cells.len(), 1, "{}", f.backend);
        assert_eq!(row.cells[0].qualifier, [0x00, 0x00, 0x00, 0x10, 0x00, 0x20]);
        assert_eq!(row.cells[0].value, [1, 2, 3, 0]);
        let points = f.damaged_points().unwrap();
        assert_eq!(
            points,
            vec![
                (1356998400000, Value::Int(7)),
                (1357005600000, Value::Int(1)),
                (1357005601000, Value::Int(2)),
                (1357005602000, Value::Int(3)),
            ]
        );
        assert_eq!(f.fsck(&FsckOptions::default()).total_errors(), 0);
        f.assert_healthy();
    }
}

fn check_global_annotations(settings: Settings) {
    for f in fixtures_with(settings) {
        let schema = f.schema().clone();
        let global = hourglass_engine::annotation::row_key(&schema, None, HOUR);
        assert!(global.iter().take(global.len() - 4).all(|b| *b == 0));
        let note = br#"{"startTime":1357005600,"endTime":0,"description":"deploy","notes":"","custom":null}"#;
        f.put(&global, &[(&[0x01, 0x00, 0x00], note, 1000)]);
        let before = f.row(&global).unwrap();
        // And one orphan row, so --fix-all has something to delete.
        let orphan = encode_row_key(
            &schema,
            &SeriesKey::new(Uid(0x99), vec![(Uid(1), Uid(1))]),
            HOUR,
        );
        f.put(&orphan, &[(&[0x00, 0x00], &[1], 1000)]);
        let report = f.fsck(&FsckOptions::fix_all());
        assert_eq!(report.annotations, 1, "{}", f.backend);
        assert_eq!(report.orphans, 1, "{}: {:#?}", f.backend, report.findings);
        assert_eq!((report.bad_key, report.unknown), (0, 0));
        assert_eq!(f.row(&global), Some(before), "{}", f.backend);
        assert!(f.row(&orphan).is_none());
        f.assert_healthy();
    }
}

#[test]
fn global_annotation_rows_survive_fix_all() {
    check_global_annotations(common::auto_create());
    let mut salted = common::auto_create();
    salted.schema.salt_width = 1;
    salted.schema.salt_buckets = 4;
    check_global_annotations(salted);
}

#[test]
fn uid_forward_mapping_without_reverse_is_restored() {
    for f in fixtures() {
        let uid_table = f.schema().uid_table.clone();
        let clean = f.uid_fsck(false);
        assert_eq!(clean.errors(), 0, "{}: {:#?}", f.backend, clean.lines);
        assert!(clean.lines.contains(&"Maximum ID for tagv: 2".to_string()));
        f.store
            .mutate_row(
                &uid_table,
                &[0, 0, 2],
                &[Mutation::delete(UID_NAME_FAMILY, b"tagv".to_vec())],
            )
            .unwrap();
        let before = f.snapshot(&uid_table);
        let report = f.uid_fsck(false);
        assert_eq!(f.snapshot(&uid_table), before, "{}", f.backend);
        assert_eq!(report.errors_by_kind, [0, 0, 1], "{:#?}", report.lines);
        assert!(report.lines.contains(
            &"Forward tagv mapping is missing reverse mapping: web02 -> 000002".to_string()
        ));
        assert!(report.lines.contains(&"tagv: Found 1 errors.".to_string()));

        let report = f.uid_fsck(true);
        assert_eq!(report.lines[1], "-    Running fsck in FIX mode    -");
        assert!(
            report
                .lines
                .contains(&"FIX: Restoring tagv reverse mapping: 000002 -> web02".to_string())
        );
        assert_eq!(f.uid_fsck(false).errors(), 0, "{}", f.backend);
        assert_eq!(
            f.db.uids().get_name(UidKind::TagValue, Uid(2)).unwrap(),
            "web02"
        );
        f.assert_healthy();
    }
}

#[test]
fn uid_reverse_mapping_without_forward_is_removed() {
    for f in fixtures() {
        let uid_table = f.schema().uid_table.clone();
        // A reverse mapping (with UID meta) whose name has no forward mapping.
        f.store
            .mutate_row(
                &uid_table,
                &[0, 0, 2],
                &[Mutation::set(
                    UID_NAME_FAMILY,
                    b"metric_meta".to_vec(),
                    b"{}".to_vec(),
                )],
            )
            .unwrap();
        f.store
            .mutate_row(
                &uid_table,
                b"sys.damaged",
                &[Mutation::delete(UID_ID_FAMILY, b"metrics".to_vec())],
            )
            .unwrap();
        let before = f.snapshot(&uid_table);
        let report = f.uid_fsck(false);
        assert_eq!(f.snapshot(&uid_table), before, "{}", f.backend);
        assert_eq!(report.errors(), 0, "a warning only: {:#?}", report.lines);
        assert_eq!(report.warnings, 1);
        assert!(
            report.lines.contains(
                &"Reverse metrics mapping is missing forward mapping: sys.damaged -> 000002"
                    .to_string()
            ),
            "{:#?}",
            report.lines
        );

        let report = f.uid_fsck(true);
        assert!(
            report.lines.contains(
                &"FIX: Removed metrics reverse mapping: 000002 -> sys.damaged".to_string()
            )
        );
        let row = f
            .store
            .get(&uid_table, &[0, 0, 2], &ReadOptions::default())
            .unwrap()
            .unwrap();
        assert_eq!(
            row.value(UID_NAME_FAMILY, b"metrics"),
            None,
            "{}",
            f.backend
        );
        assert_eq!(row.value(UID_NAME_FAMILY, b"metric_meta"), None);
        assert_eq!(row.value(UID_NAME_FAMILY, b"tagv"), Some(&b"web02"[..]));
        let after = f.uid_fsck(false);
        assert_eq!(after.errors(), 0, "{:#?}", after.lines);
        assert!(after.lines.contains(
            &"Max ID for metrics is 2 but only 1 entries were found.  Maybe 1 IDs were deleted?"
                .to_string()
        ), "{:#?}", after.lines);
        f.assert_healthy();
    }
}

#[test]
fn uid_above_maxid_raises_maxid() {
    for f in fixtures() {
        let uid_table = f.schema().uid_table.clone();
        f.store
            .mutate_row(
                &uid_table,
                &[0, 0, 0x10],
                &[Mutation::set(
                    UID_NAME_FAMILY,
                    b"metrics".to_vec(),
                    b"late".to_vec(),
                )],
            )
            .unwrap();
        f.store
            .mutate_row(
                &uid_table,
                b"late",
                &[Mutation::set(
                    UID_ID_FAMILY,
                    b"metrics".to_vec(),
                    vec![0, 0, 0x10],
                )],
            )
            .unwrap();
        let before = f.snapshot(&uid_table);
        let report = f.uid_fsck(false);
        assert_eq!(f.snapshot(&uid_table), before, "{}", f.backend);
        assert_eq!(report.errors_by_kind, [1, 0, 0], "{:#?}", report.lines);
        assert!(report.lines.contains(
            &"We found an ID of 16 for metrics but the max ID is only 2!  Future IDs may be double-assigned!".to_string()
        ));

        let report = f.uid_fsck(true);
        assert!(
            report
                .lines
                .contains(&"FIX: Updated max ID for metrics to 16".to_string())
        );
        assert_eq!(f.db.uids().max_id(UidKind::Metric).unwrap(), 16);
        let maxid = f
            .store
            .get(&uid_table, MAXID_ROW, &ReadOptions::default())
            .unwrap()
            .unwrap();
        assert_eq!(
            maxid.value(UID_ID_FAMILY, b"metrics"),
            Some(&16i64.to_be_bytes()[..])
        );
        assert_eq!(f.uid_fsck(false).errors(), 0, "{}", f.backend);
        assert_eq!(
            f.db.uids()
                .get_or_create_id(UidKind::Metric, "next")
                .unwrap(),
            Uid(17)
        );
        f.assert_healthy();
    }
}
