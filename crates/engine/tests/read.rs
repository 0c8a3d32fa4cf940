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
