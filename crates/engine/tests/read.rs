#![allow(clippy::unwrap_used, clippy::expect_used)]
mod common;

use hourglass_core::uid::UidKind;
use hourglass_core::value::Value;
use hourglass_engine::IncomingPoint;
use hourglass_engine::scan::RowQuery;

fn p<'a>(ts: i64, v: i64, tags: &'a [(&'a str, &'a str)]) -> IncomingPoint<'a> {
    IncomingPoint {
        metric: "m",
        timestamp: ts,
        value: Value::Int(v),
        tags,
        line_tags: None,
    }
}

#[test]
fn reads_merge_stored_and_buffered_points() {
    for (backend, store) in common::backends() {
        let db = common::open(store, common::auto_create());
        let a = [("host", "a")];
        let b = [("host", "b")];
        // Two hours of host=a, flushed; then more points, one replacing a stored one, buffered.
        db.add_points(&[
            p(1356998400, 1, &a),
            p(1357002000, 2, &a),
            p(1356998400, 10, &b),
        ]);
        db.flush().unwrap();
        db.add_points(&[
            p(1357002000, 20, &a),
            p(1357002010, 3, &a),
            p(1356998401000, 4, &a),
        ]);
        assert!(
            db.buffered_points() > 0,
            "{backend}: some points are only in memory"
        );
        let metric = db.uids().get_id(UidKind::Metric, "m").unwrap();
        let all = db
            .read_series(&RowQuery {
                metric,
                start_secs: 1356998400,
                end_secs: 1357002010,
                tags: vec![],
            })
            .unwrap();
        assert_eq!(all.len(), 2, "{backend}");
        let host_a = db.uids().get_id(UidKind::TagValue, "a").unwrap();
        let series_a = all.iter().find(|s| s.series.tags[0].1 == host_a).unwrap();
        assert_eq!(
            series_a.points,
            vec![
                (1356998400000, Value::Int(1)),
                (1356998401000, Value::Int(4)),
                (1357002000000, Value::Int(20)),
                (1357002010000, Value::Int(3))
            ],
            "{backend}: time order, newest write wins"
        );
        let host = db.uids().get_id(UidKind::TagKey, "host").unwrap();
        let only_a = db
            .read_series(&RowQuery {
                metric,
                start_secs: 1356998401,
                end_secs: 1357002000,
                tags: vec![(host, host_a)],
            })
            .unwrap();
        assert_eq!(only_a.len(), 1, "{backend}");
        assert_eq!(
            only_a[0].points.iter().map(|p| p.0).collect::<Vec<_>>(),
            vec![1356998401000, 1357002000000],
            "{backend}: range is inclusive"
        );
    }
}

/// `tsd.storage.enable_appends`: points go to the row's append column in OpenTSDB's layout,
/// and an append column another TSD wrote reads back as points, the newest write winning.
#[test]
fn append_columns_are_written_and_read() {
    use hourglass_core::compact::APPEND_QUALIFIER;
    use hourglass_core::schema::DATA_FAMILY;
    for (backend, store) in common::backends() {
        let settings = hourglass_engine::Settings {
            enable_appends: true,
            ..common::auto_create()
        };
        let db = common::open(std::sync::Arc::clone(&store), settings);
        let a = [("host", "a")];
        db.add_points(&[p(1356998400, 1, &a), p(1356998410, 300, &a)]);
        db.flush().unwrap();
        db.add_points(&[p(1356998405, 2, &a)]);
        db.flush().unwrap();
        let metric = db.uids().get_id(UidKind::Metric, "m").unwrap();
        let key = {
            let rows = db
                .read_series(&RowQuery {
                    metric,
                    start_secs: 1356998400,
                    end_secs: 1356998410,
                    tags: vec![],
                })
                .unwrap();
            assert_eq!(
                rows[0].points,
                vec![
                    (1356998400000, Value::Int(1)),
                    (1356998405000, Value::Int(2)),
                    (1356998410000, Value::Int(300)),
                ],
                "{backend}"
            );
            let mut k = vec![0, 0, 1];
            k.extend_from_slice(&1356998400u32.to_be_bytes());
            k.extend_from_slice(&[0, 0, 1, 0, 0, 1]);
            k
        };
        let row = store
            .get("tsdb", &key, &hourglass_storage::ReadOptions::default())
            .unwrap()
            .unwrap();
        assert_eq!(row.cells.len(), 1, "{backend}: only the append column");
        assert_eq!(row.cells[0].family, DATA_FAMILY);
        assert_eq!(row.cells[0].qualifier, APPEND_QUALIFIER);
        // 0s:1, 10s:300 (2 bytes), then 5s:2, each qualifier then value.
        assert_eq!(
            row.cells[0].value,
            [0x00, 0x00, 1, 0x00, 0xA1, 0x01, 0x2C, 0x00, 0x50, 2],
            "{backend}"
        );
        // Another TSD appends a newer value for 5 s: it wins.
        store
            .append(
                "tsdb",
                &key,
                DATA_FAMILY,
                &APPEND_QUALIFIER,
                &[0x00, 0x50, 7],
            )
            .unwrap();
        let rows = db
            .read_series(&RowQuery {
                metric,
                start_secs: 1356998405,
                end_secs: 1356998405,
                tags: vec![],
            })
            .unwrap();
        assert_eq!(
            rows[0].points,
            vec![(1356998405000, Value::Int(7))],
            "{backend}"
        );
    }
}

#[test]
fn buffered_rows_join_their_series_in_time_order_whatever_the_scan_order() {
    // Stored hours 0 and 2 of two series, hour 1 of both still buffered. A store returning
    // rows series by series (period order) must not pull one series' buffered hour ahead of
    // its stored earlier hour.
    for (backend, store) in common::backends() {
        let db = common::open(store, common::auto_create());
        let (a, b) = ([("host", "a")], [("host", "b")]);
        let (h0, h1, h2) = (1356998400, 1357002000, 1357005600);
        db.add_points(&[p(h0, 1, &a), p(h2, 3, &a), p(h0, 10, &b), p(h2, 30, &b)]);
        db.flush().unwrap();
        db.add_points(&[p(h1, 2, &a), p(h1, 20, &b)]);
        let metric = db.uids().get_id(UidKind::Metric, "m").unwrap();
        let mut seen: Vec<(Vec<u8>, u32)> = Vec::new();
        db.visit_rows(
            &RowQuery {
                metric,
                start_secs: h0,
                end_secs: h2,
                tags: vec![],
            },
            |row| {
                let key = hourglass_core::rowkey::decode_row_key(&db.settings().schema, row.key)?;
                seen.push((
                    row.key[db.settings().schema.tags_offset()..].to_vec(),
                    key.base_time,
                ));
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(seen.len(), 6, "{backend}: every row once: {seen:?}");
        for tags in [&seen[0].0, &seen[5].0] {
            let hours: Vec<u32> = seen
                .iter()
                .filter(|(t, _)| t == tags)
                .map(|(_, h)| *h)
                .collect();
            assert_eq!(
                hours,
                vec![h0 as u32, h1 as u32, h2 as u32],
                "{backend}: one series' rows in time order: {seen:?}"
            );
        }
    }
}
