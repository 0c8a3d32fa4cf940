#![allow(clippy::unwrap_used, clippy::expect_used)]
mod common;

use hourglass_core::schema::DATA_FAMILY;
use hourglass_core::uid::{UidKind, parse_hex};
use hourglass_core::value::Value;
use hourglass_engine::{ErrorKind, IncomingPoint, Settings};
use hourglass_storage::{ReadOptions, ScanRequest};

fn point<'a>(
    metric: &'a str,
    ts: i64,
    v: Value,
    tags: &'a [(&'a str, &'a str)],
) -> IncomingPoint<'a> {
    IncomingPoint {
        metric,
        timestamp: ts,
        value: v,
        tags,
        line_tags: None,
    }
}

#[test]
fn seed_example_lands_byte_exact() {
    for (name, store) in common::backends() {
        let db = common::open(store.clone(), common::auto_create());
        // UIDs in the order of the seed: mysql.bytes_sent=1, host=... tag key 1, ubuntu tag value 1.
        let out = db.add_points(&[point(
            "mysql.bytes_sent",
            1292148123,
            Value::Int(476),
            &[("host", "ubuntu")],
        )]);
        assert_eq!(out.stored, 1, "{name}");
        db.flush().unwrap();
        let key = parse_hex("0000014D049D20000001000001").unwrap();
        let row = store
            .get("tsdb", &key, &ReadOptions::default())
            .unwrap()
            .expect(name);
        assert_eq!(row.cells.len(), 1, "{name}");
        assert_eq!(row.cells[0].family, DATA_FAMILY);
        assert_eq!(
            row.cells[0].qualifier,
            [0x07, 0xB1],
            "{name}: 476 needs 2 bytes"
        );
        assert_eq!(row.cells[0].value, [0x01, 0xDC]);
        // The UID table holds both directions and the MAXID counters.
        let fwd = store
            .get("tsdb-uid", b"mysql.bytes_sent", &ReadOptions::default())
            .unwrap()
            .unwrap();
        assert_eq!(fwd.value("id", b"metrics"), Some(&[0, 0, 1][..]));
        let rev = store
            .get("tsdb-uid", &[0, 0, 1], &ReadOptions::default())
            .unwrap()
            .unwrap();
        assert_eq!(
            rev.value("name", b"metrics"),
            Some(&b"mysql.bytes_sent"[..])
        );
        assert_eq!(rev.value("name", b"tagk"), Some(&b"host"[..]));
        assert_eq!(rev.value("name", b"tagv"), Some(&b"ubuntu"[..]));
        let maxid = store
            .get("tsdb-uid", &[0], &ReadOptions::default())
            .unwrap()
            .unwrap();
        assert_eq!(maxid.value("id", b"metrics"), Some(&1i64.to_be_bytes()[..]));
    }
}

#[test]
fn closed_hours_get_one_compacted_cell() {
    for (name, store) in common::backends() {
        let db = common::open(store.clone(), common::auto_create());
        let tags = [("host", "web01")];
        let pts = [
            point("sys.cpu", 1356998430, Value::Int(1), &tags),
            point("sys.cpu", 1356998400, Value::Int(42), &tags),
            point("sys.cpu", 1356998400500, Value::Float(1.5), &tags),
        ];
        assert_eq!(db.add_points(&pts).stored, 3);
        db.flush().unwrap();
        let rows: Vec<_> = store
            .scan("tsdb", &ScanRequest::default())
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(rows.len(), 1, "{name}");
        let cell = &rows[0].cells[0];
        assert_eq!(rows[0].cells.len(), 1);
        // 0s int 42, 500ms float, 30s int 1: time order, mixed resolution meta byte.
        assert_eq!(
            cell.qualifier,
            [0x00, 0x00, 0xF0, 0x00, 0x7D, 0x0B, 0x01, 0xE0]
        );
        let mut value = vec![42];
        value.extend_from_slice(&1.5f32.to_be_bytes());
        value.extend_from_slice(&[1, 0x01]);
        assert_eq!(cell.value, value);
        // A later batch for the same closed hour is merged into one cell again.
        db.add_points(&[point("sys.cpu", 1356998460, Value::Int(2), &tags)]);
        db.flush().unwrap();
        let row = store
            .get("tsdb", &rows[0].key, &ReadOptions::default())
            .unwrap()
            .unwrap();
        assert_eq!(row.cells.len(), 1, "{name}");
        assert_eq!(row.cells[0].qualifier.len(), 10);
        assert_eq!(*row.cells[0].value.last().unwrap(), 0x01);
    }
}

#[test]
fn open_hours_get_partial_cells_readers_can_merge() {
    for (name, store) in common::backends() {
        let db = common::open(store.clone(), common::auto_create());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let base = now - now % 3600;
        let tags = [("host", "a")];
        db.add_points(&[
            point("m", base, Value::Int(1), &tags),
            point("m", base + 1, Value::Int(2), &tags),
        ]);
        db.flush().unwrap();
        db.add_points(&[point("m", base + 2, Value::Int(3), &tags)]);
        db.flush().unwrap();
        let rows: Vec<_> = store
            .scan("tsdb", &ScanRequest::default())
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(rows.len(), 1, "{name}");
        assert_eq!(
            rows[0].cells.len(),
            2,
            "{name}: one cell per flush while the hour is open"
        );
        let decoded = hourglass_engine::rows::decode_row(Some(&rows[0]), &[]).unwrap();
        let values: Vec<Value> = decoded.points.iter().map(|p| p.value()).collect();
        assert_eq!(values, vec![Value::Int(1), Value::Int(2), Value::Int(3)]);
    }
}

#[test]
fn validation_errors_use_opentsdb_words_and_spare_good_points() {
    for (_backend, store) in common::backends() {
        let db = common::open(store.clone(), Settings::default());
        db.uids()
            .get_or_create_id(UidKind::Metric, "known")
            .unwrap();
        let nine: Vec<(String, String)> =
            (0..9).map(|i| (format!("k{i}"), "v".to_string())).collect();
        let nine: Vec<(&str, &str)> = nine.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let host = [("host", "a")];
        let pts = [
            point("known", 1356998400, Value::Int(1), &host),
            point("known", 1356998400, Value::Int(1), &[]),
            point("known", 1356998400, Value::Int(1), &nine),
            point("unknown", 1356998400, Value::Int(1), &host),
            point("bad name", 1356998400, Value::Int(1), &host),
            point("known", 1356998400, Value::Int(1), &[("ho$t", "a")]),
            point("known", -1, Value::Int(42), &host),
            point("known", 1356998401, Value::Double(f64::NAN), &host),
            point("known", 1356998402, Value::Int(2), &host),
        ];
        let out = db.add_points(&pts);
        assert_eq!(out.stored, 2);
        let msgs: Vec<(usize, String)> = out
            .errors
            .iter()
            .map(|(i, e)| (*i, e.to_string()))
            .collect();
        assert_eq!(
            msgs,
            vec![
                (1, "Need at least one tag (metric=known, tags={})".to_string()),
                (2, "Too many tags: 9 maximum allowed: 8, tags: {k0=v, k1=v, k2=v, k3=v, k4=v, k5=v, k6=v, k7=v, k8=v}".to_string()),
                (3, "No such name for 'metrics': 'unknown'".to_string()),
                (4, "Invalid metric name (\"bad name\"): illegal character:  ".to_string()),
                (5, "Invalid tag name with value [a] (\"ho$t\"): illegal character: $".to_string()),
                (6, "negative  timestamp=-1 when trying to add value=[42]/0 to metric=known, tags={host=a}".to_string()),
                (7, "value is NaN or Infinite: NaN for metric=known timestamp=1356998401".to_string()),
            ]
        );
        assert_eq!(out.errors[2].1.kind(), ErrorKind::NotFound);
        assert_eq!(out.errors[0].1.kind(), ErrorKind::InvalidInput);
        db.flush().unwrap();
        let rows: Vec<_> = store
            .scan("tsdb", &ScanRequest::default())
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(rows.len(), 1);
        let decoded = hourglass_engine::rows::decode_row(Some(&rows[0]), &[]).unwrap();
        assert_eq!(decoded.points.len(), 2, "both good points stored");
    }
}

#[test]
fn duplicates_follow_fix_duplicates() {
    for fix in [false, true] {
        for (_backend, store) in common::backends() {
            let settings = Settings {
                fix_duplicates: fix,
                ..common::auto_create()
            };
            let db = common::open(store.clone(), settings);
            let tags = [("host", "a")];
            db.add_points(&[
                point("m", 1356998400, Value::Int(1), &tags),
                point("m", 1356998410, Value::Int(5), &tags),
            ]);
            db.flush().unwrap();
            db.add_points(&[point("m", 1356998400, Value::Float(2.5), &tags)]);
            db.flush().unwrap();
            let rows: Vec<_> = store
                .scan("tsdb", &ScanRequest::default())
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let decoded = hourglass_engine::rows::decode_row(Some(&rows[0]), &[]).unwrap();
            assert_eq!(
                decoded.points[0].value(),
                Value::Float(2.5),
                "readers keep the newest write"
            );
            if fix {
                assert_eq!(rows[0].cells.len(), 1, "fixed into one compacted cell");
                assert!(decoded.duplicate.is_none());
            } else {
                assert_eq!(
                    rows[0].cells.len(),
                    2,
                    "compaction refuses; stored cells untouched"
                );
                assert!(decoded.duplicate.is_some());
                assert_eq!(
                    db.write_stats()
                        .compaction_errors
                        .load(std::sync::atomic::Ordering::Relaxed),
                    1
                );
            }
        }
    }
}

#[test]
fn auto_create_switches_are_honoured() {
    for (_backend, store) in common::backends() {
        let settings = Settings {
            auto_create_metrics: true,
            auto_create_tagvs: false,
            ..Settings::default()
        };
        let db = common::open(store, settings);
        let out = db.add_points(&[point("m", 1356998400, Value::Int(1), &[("host", "new")])]);
        assert_eq!(
            out.errors[0].1.to_string(),
            "No such name for 'tagv': 'new'"
        );
        db.uids()
            .get_or_create_id(UidKind::TagValue, "new")
            .unwrap();
        assert_eq!(
            db.add_points(&[point("m", 1356998400, Value::Int(1), &[("host", "new")])])
                .stored,
            1
        );
    }
}

/// Points of telnet lines are looked up by the tag text the line wrote: every spelling of
/// one series (tag order, doubled tags, empty words) lands in that series' one row, and a
/// point without line text finds the same series.
#[test]
fn every_spelling_of_a_line_finds_its_one_series() {
    for (name, store) in common::backends() {
        let db = common::open(store.clone(), common::auto_create());
        let both = [("host", "a"), ("cpu", "0")];
        let reversed = [("cpu", "0"), ("host", "a")];
        let other = [("host", "b"), ("cpu", "0")];
        type Tags<'a> = &'a [(&'a str, &'a str)];
        let spellings: [(Tags<'_>, Option<&str>); 6] = [
            (&both, Some("host=a cpu=0")),
            (&reversed, Some("cpu=0 host=a")),
            (&both, Some("host=a  cpu=0 host=a")),
            (&both, None),
            (&other, Some("host=b cpu=0")),
            (&both, Some("host=a cpu=0")),
        ];
        for (i, (tags, written)) in spellings.iter().enumerate() {
            let p = IncomingPoint {
                line_tags: *written,
                ..point("m", 1356998400 + i as i64, Value::Int(i as i64), tags)
            };
            assert_eq!(db.add_points(&[p]).stored, 1, "{name} spelling {i}");
        }
        // The same tag text under another metric is another series.
        let p = IncomingPoint {
            line_tags: Some("host=a cpu=0"),
            ..point("m2", 1356998400, Value::Int(9), &both)
        };
        assert_eq!(db.add_points(&[p]).stored, 1, "{name}");
        db.flush().unwrap();
        let rows: Vec<_> = store
            .scan("tsdb", &ScanRequest::default())
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let counts: Vec<usize> = rows
            .iter()
            .map(|r| {
                hourglass_engine::rows::decode_row(Some(r), &[])
                    .unwrap()
                    .points
                    .len()
            })
            .collect();
        let mut counts = counts;
        counts.sort_unstable();
        assert_eq!(counts, [1, 1, 5], "{name}: m host=a, m host=b, m2 host=a");
    }
}

/// A telnet point may come with its tags unread (`tags` empty, `line_tags` given): the writer
/// reads them only for a tag text it does not know, with `put`'s tag errors, before the
/// point's own checks, and names them in the errors of known series too.
#[test]
fn tags_left_as_written_are_read_only_when_the_series_is_new() {
    for (name, store) in common::backends() {
        let db = common::open(store.clone(), common::auto_create());
        let line = |ts: i64, v: Value, written: &'static str| IncomingPoint {
            line_tags: Some(written),
            ..point("m", ts, v, &[])
        };
        // A new series (its tags read) ...
        let out = db.add_points(&[line(1356998400, Value::Int(1), "host=a  cpu=0")]);
        assert_eq!(out.stored, 1, "{name}");
        // ... then known by its text.
        let out = db.add_points(&[
            line(1356998410, Value::Int(2), "host=a  cpu=0"),
            line(1356998420, Value::Int(3), "host=a bad"),
            // The tag error wins over the value's.
            line(1356998430, Value::Double(f64::NAN), "host=a host=b"),
            line(1356998440, Value::Double(f64::NAN), "host=a  cpu=0"),
            // A known text's tags are read again to name them in the error.
            line(-5, Value::Int(4), "host=a  cpu=0"),
            line(1356998450, Value::Int(5), ""),
        ]);
        assert_eq!(out.stored, 1, "{name}");
        let errors: Vec<(usize, String)> = out
            .errors
            .iter()
            .map(|(i, e)| {
                assert_eq!(e.kind(), ErrorKind::InvalidInput, "{name}: {e}");
                (*i, e.to_string())
            })
            .collect();
        assert_eq!(errors.len(), 5, "{name}: {errors:?}");
        assert_eq!(errors[0], (1, "invalid tag: bad".to_string()), "{name}");
        assert_eq!(
            errors[1],
            (2, "duplicate tag: host=b, tags={host=a}".to_string()),
            "{name}"
        );
        assert!(
            errors[2].1.starts_with("value is NaN"),
            "{name}: {errors:?}"
        );
        assert_eq!(errors[3].0, 4, "{name}");
        assert!(
            errors[3].1.ends_with("tags={host=a, cpu=0}"),
            "{name}: {}",
            errors[3].1
        );
        assert_eq!(
            errors[4],
            (5, "Need at least one tag (metric=m, tags={})".to_string()),
            "{name}"
        );
        // The two stored points share one series, with both tags.
        let both = [("host", "a"), ("cpu", "0")];
        assert_eq!(
            db.add_points(&[point("m", 1356998460, Value::Int(6), &both)])
                .stored,
            1,
            "{name}"
        );
        db.flush().unwrap();
        let rows: Vec<_> = store
            .scan("tsdb", &ScanRequest::default())
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(rows.len(), 1, "{name}");
        let points = hourglass_engine::rows::decode_row(Some(&rows[0]), &[])
            .unwrap()
            .points;
        assert_eq!(points.len(), 3, "{name}");
    }
}

/// The `ts_ctr` cell (tracking only) of a series new to the store is written at its first
/// point's arrival; a flush holding that point alone leaves it (its time is that point's),
/// and a flush holding more of the series' points sets it again at the flush.
#[test]
fn a_new_series_counter_keeps_its_first_point_time_until_more_points_come() {
    for (name, store) in common::backends() {
        let settings = Settings {
            meta: hourglass_engine::meta::MetaTracking {
                tsuid_tracking: true,
                ..Default::default()
            },
            ..common::auto_create()
        };
        let db = common::open(store.clone(), settings);
        let ts = 1_356_998_400;
        let one = [("host", "one")];
        let two = [("host", "two")];
        let before = hourglass_storage::now_ms();
        assert_eq!(
            db.add_points(&[point("m", ts, Value::Int(1), &one)]).stored,
            1
        );
        assert_eq!(
            db.add_points(&[point("m", ts, Value::Int(1), &two)]).stored,
            1
        );
        assert_eq!(
            db.add_points(&[point("m", ts + 1, Value::Int(2), &two)])
                .stored,
            1
        );
        let arrived = hourglass_storage::now_ms();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let flushed_from = hourglass_storage::now_ms();
        db.flush().unwrap();
        let counter_time = |tag: &str| {
            let tsuid = [
                db.uids().get_id(UidKind::Metric, "m").unwrap().to_bytes(3),
                db.uids()
                    .get_id(UidKind::TagKey, "host")
                    .unwrap()
                    .to_bytes(3),
                db.uids()
                    .get_id(UidKind::TagValue, tag)
                    .unwrap()
                    .to_bytes(3),
            ]
            .concat();
            let row = store
                .get("tsdb-meta", &tsuid, &ReadOptions::default())
                .unwrap()
                .expect(name);
            let cell = row
                .cells
                .iter()
                .find(|c| c.family == "name" && c.qualifier == b"ts_ctr")
                .expect(name);
            assert_eq!(cell.value, 1i64.to_be_bytes(), "{name}");
            cell.timestamp
        };
        let t = counter_time("one");
        assert!(
            (before..=arrived).contains(&t),
            "{name}: {t} not in {before}..={arrived}"
        );
        let t = counter_time("two");
        assert!(
            t >= flushed_from,
            "{name}: {t} before the flush at {flushed_from}"
        );
        // A later flush of another point of the first series sets it again.
        assert_eq!(
            db.add_points(&[point("m", ts + 2, Value::Int(3), &one)])
                .stored,
            1
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
        let flushed_from = hourglass_storage::now_ms();
        db.flush().unwrap();
        let t = counter_time("one");
        assert!(
            t >= flushed_from,
            "{name}: {t} before the flush at {flushed_from}"
        );
    }
}

/// A closed hour's row of a series this process has just given a UID is written without
/// reading it (nothing is stored there) on a store no other process writes; once a flush stored it, the next flush of the same
/// hour reads it and compacts both flushes' points into one cell.
#[test]
fn a_new_series_row_is_read_only_once_stored() {
    use hourglass_storage::metered::Call;
    for (name, store) in common::backends() {
        let db = common::open(store.clone(), common::auto_create());
        let tags = [("host", "fresh")];
        let ts = 1_356_998_400;
        assert_eq!(
            db.add_points(&[point("m", ts, Value::Int(1), &tags)])
                .stored,
            1
        );
        let gets = db.store_stats().calls(Call::Get);
        db.flush().unwrap();
        // Not where other processes write the store too: they may have stored the row.
        let read = db.store_stats().calls(Call::Get) > gets;
        assert_eq!(read, store.is_shared(), "{name}: a row read or not");
        assert_eq!(
            db.add_points(&[point("m", ts + 1, Value::Int(2), &tags)])
                .stored,
            1
        );
        let gets = db.store_stats().calls(Call::Get);
        db.flush().unwrap();
        assert!(
            db.store_stats().calls(Call::Get) > gets,
            "{name}: no row read"
        );
        let key = [
            db.uids().get_id(UidKind::Metric, "m").unwrap().to_bytes(3),
            (ts as u32).to_be_bytes().to_vec(),
            db.uids()
                .get_id(UidKind::TagKey, "host")
                .unwrap()
                .to_bytes(3),
            db.uids()
                .get_id(UidKind::TagValue, "fresh")
                .unwrap()
                .to_bytes(3),
        ]
        .concat();
        let row = store
            .get("tsdb", &key, &ReadOptions::default())
            .unwrap()
            .expect(name);
        assert_eq!(row.cells.len(), 1, "{name}: {:?}", row.cells);
        assert_eq!(row.cells[0].qualifier, [0x00, 0x00, 0x00, 0x10], "{name}");
        assert_eq!(row.cells[0].value, [0x01, 0x02, 0x00], "{name}");
    }
}
