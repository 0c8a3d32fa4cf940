#![allow(clippy::unwrap_used, clippy::expect_used)]
//! OpenTSDB's standard query fixture: series 1..300 (host=web01) and 300..1 (host=web02), a
//! point every 30 s from 1356998430, run through the query pipeline on every backend.
mod common;

use hourglass_core::value::Value;
use hourglass_engine::IncomingPoint;
use hourglass_engine::query::aggregator::Aggregator;
use hourglass_engine::query::downsample::DownsampleSpec;
use hourglass_engine::query::filter::TagFilter;
use hourglass_engine::query::plan::{SubQuery, run};
use hourglass_engine::query::rate::{Num, RateOptions};

const START: i64 = 1356998400000;
const END: i64 = 1357041600000;

fn load(db: &hourglass_engine::Tsdb) {
    let w1 = [("host", "web01")];
    let w2 = [("host", "web02")];
    let mut pts = Vec::new();
    for i in 0..300i64 {
        pts.push(IncomingPoint {
            metric: "sys.cpu.user",
            timestamp: 1356998430 + i * 30,
            value: Value::Int(i + 1),
            tags: &w1,
        });
        pts.push(IncomingPoint {
            metric: "sys.cpu.user",
            timestamp: 1356998430 + i * 30,
            value: Value::Int(300 - i),
            tags: &w2,
        });
    }
    assert_eq!(db.add_points(&pts).stored, 600);
}

fn sub(agg: &str) -> SubQuery {
    SubQuery {
        aggregator: Aggregator::parse(agg).unwrap(),
        metric: "sys.cpu.user".into(),
        downsample: None,
        rate: false,
        rate_options: RateOptions::default(),
        filters: vec![],
        explicit_tags: false,
    }
}

#[test]
fn standard_fixture_through_the_pipeline() {
    for (backend, store) in common::backends() {
        let db = common::open(store, common::auto_create());
        load(&db);
        // Half of it flushed, half still buffered: queries see both.
        let sum = run(&db, START, END, &sub("sum")).unwrap();
        assert_eq!(sum.len(), 1, "{backend}");
        assert_eq!(sum[0].dps.len(), 300, "{backend}");
        assert!(
            sum[0].dps.iter().all(|(_, v)| *v == Num::Int(301)),
            "{backend}"
        );
        assert_eq!(sum[0].aggregate_tags, vec!["host".to_string()]);
        assert!(sum[0].tags.is_empty());
        db.flush().unwrap();

        let mut by_host = sub("sum");
        by_host.filters = vec![TagFilter::from_legacy("host", "*", true).unwrap()];
        let groups = run(&db, START, END, &by_host).unwrap();
        assert_eq!(groups.len(), 2, "{backend}");
        assert_eq!(
            groups[0].tags.get("host").map(String::as_str),
            Some("web01")
        );
        assert_eq!(groups[0].dps[0], (1356998430000, Num::Int(1)));

        let mut rate = sub("sum");
        rate.rate = true;
        let r = run(&db, START, END, &rate).unwrap();
        assert_eq!(r[0].dps.len(), 299, "{backend}");
        assert!(
            r[0].dps.iter().all(|(_, v)| *v == Num::Float(0.0)),
            "{backend}: +1/30s and -1/30s cancel"
        );

        let mut ds = sub("sum");
        ds.downsample = Some(DownsampleSpec::parse("1m-avg").unwrap());
        let d = run(&db, START, END, &ds).unwrap();
        assert_eq!(d[0].dps.len(), 151, "{backend}");

        let mut only = sub("sum");
        only.filters = vec![TagFilter::new("literal_or", "host", "web02", false).unwrap()];
        let o = run(&db, START, END, &only).unwrap();
        assert_eq!(o[0].dps[0], (1356998430000, Num::Int(300)));
        assert_eq!(o[0].tags.get("host").map(String::as_str), Some("web02"));

        let err = run(
            &db,
            START,
            END,
            &SubQuery {
                metric: "nope".into(),
                ..sub("sum")
            },
        )
        .unwrap_err();
        assert_eq!(err.to_string(), "No such name for 'metrics': 'nope'");
    }
}
