#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Rollup and pre-aggregate points (RFC 0008) through a real TSD on port 0, on every
//! backend: `/api/rollup` and the telnet `rollup` command, the rollup tables' rows read back
//! byte for byte against what OpenTSDB 2.4.1 writes (its `test/tsd/TestRollupRpc.java`
//! configuration and expected cells), the errors in its words, and queries without a
//! downsample answered from raw data.

mod common;

use common::{TestServer, http, start_with, telnet};
use hourglass_core::config::Config;
use hourglass_storage::{ReadOptions, ScanRequest};
use serde_json::json;

/// 2.4.1's TestRollupRpc configuration: the default `1m` interval in `tsdb` (raw data),
/// `1h` and `1d` intervals in month rows; plus an id for `avg`, so that derived rollups
/// reach the `block_derived` check.
const ROLLUP_CONFIG: &str = r#"{"aggregationIds":{"sum":0,"count":1,"max":2,"min":3,"avg":4},
"intervals":[
{"table":"tsdb","preAggregationTable":"tsdb-agg","interval":"1m","rowSpan":"1h","defaultInterval":true},
{"table":"tsdb-rollup-1h","preAggregationTable":"tsdb-rollup-agg-1h","interval":"1h","rowSpan":"1n"},
{"table":"tsdb-rollup-1d","preAggregationTable":"tsdb-rollup-agg-1d","interval":"1d","rowSpan":"1n"}]}"#;

fn config() -> Config {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    c.set("tsd.rollups.enable", "true");
    c.set("tsd.rollups.config", &ROLLUP_CONFIG.replace('\n', ""));
    c
}

fn hex(text: &str) -> Vec<u8> {
    let t: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    (0..t.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&t[i..i + 2], 16).unwrap())
        .collect()
}

/// Every cell of a table as (row key, qualifier, value).
fn cells(srv: &TestServer, table: &str) -> Vec<(Vec<u8>, Vec<u8>, Vec<u8>)> {
    let store = srv.state.tsdb.store();
    let request = ScanRequest {
        read: ReadOptions::default(),
        ..ScanRequest::range(Vec::new(), None)
    };
    let mut out = Vec::new();
    for row in store.scan(table, &request).unwrap() {
        let row = row.unwrap();
        for c in row.cells {
            assert_eq!(c.family, "t");
            out.push((row.key.clone(), c.qualifier, c.value));
        }
    }
    out
}

// UIDs in a fresh store: sys.cpu.user, host and web01 get 000001; _aggregate and SUM 000002.
const ROW_JAN: &str = "000001 50E22700 000001 000001";
const ROW_JAN_SUM: &str = "000001 50E22700 000001 000001 000002 000002";

async fn rollups_are_stored_as_opentsdb_stores_them(backend: &str) {
    let srv = start_with(backend, config()).await;
    for table in [
        "tsdb-agg",
        "tsdb-rollup-1h",
        "tsdb-rollup-agg-1h",
        "tsdb-rollup-1d",
        "tsdb-rollup-agg-1d",
    ] {
        assert!(
            srv.state.tsdb.store().table_exists(table).unwrap(),
            "{backend}: {table}"
        );
    }

    // TestRollupRpc.httpAddSingleRollupPoint: `1h-sum` 42 at the month's first hour.
    let r = http(
        srv.addr,
        "POST",
        "/api/rollup",
        r#"{"metric":"sys.cpu.user","timestamp":1356998400,"value":42,"tags":{"host":"web01"},"interval":"1h","aggregator":"sum"}"#,
    )
    .await;
    assert_eq!(r.status, 204, "{backend}: {}", r.text());
    assert_eq!(
        cells(&srv, "tsdb-rollup-1h"),
        [(hex(ROW_JAN), hex("00 0000"), hex("2A"))],
        "{backend}"
    );

    // Telnet, 9 days later in April: row of 2013-04-01 (1364774400 = 0x5158CE00),
    // offset 192 hours → 0x0C00; a second month row beside the first.
    let replies = telnet(
        srv.addr,
        "rollup 1h-sum sys.cpu.user 1365465600 24 host=web01\n",
    )
    .await;
    assert!(replies.is_empty(), "{backend}: {replies:?}");
    assert_eq!(
        cells(&srv, "tsdb-rollup-1h"),
        [
            (hex(ROW_JAN), hex("00 0000"), hex("2A")),
            (
                hex("000001 5158CE00 000001 000001"),
                hex("00 0C00"),
                hex("18")
            ),
        ],
        "{backend}"
    );

    // TestRollupRpc.executeAggOnly: a pre-aggregate at raw resolution goes to the default
    // interval's pre-aggregate table with a data point qualifier and `_aggregate=SUM`.
    let replies = telnet(
        srv.addr,
        "rollup sum sys.cpu.user 1356998400 42 host=web01\n",
    )
    .await;
    assert!(replies.is_empty(), "{backend}: {replies:?}");
    assert_eq!(
        cells(&srv, "tsdb-agg"),
        [(hex(ROW_JAN_SUM), hex("0000"), hex("2A"))],
        "{backend}"
    );

    // TestRollupRpc.httpAddSingleRollupAndGroupByPoint, and a float in the 1d table:
    // max (id 2) of 1.5 on January 2nd → offset 1, flags 0x0B, 4-byte float.
    let body = json!([
        {"metric":"sys.cpu.user","timestamp":1356998400,"value":42,"tags":{"host":"web01"},
         "interval":"1h","aggregator":"sum","groupByAggregator":"sum"},
        {"metric":"sys.cpu.user","timestamp":1357084800,"value":1.5,"tags":{"host":"web01"},
         "interval":"1d","aggregator":"max"}
    ]);
    let r = http(srv.addr, "POST", "/api/rollup?sync", &body.to_string()).await;
    assert_eq!(r.status, 204, "{backend}: {}", r.text());
    assert_eq!(
        cells(&srv, "tsdb-rollup-agg-1h"),
        [(hex(ROW_JAN_SUM), hex("00 0000"), hex("2A"))],
        "{backend}"
    );
    assert_eq!(
        cells(&srv, "tsdb-rollup-1d"),
        [(hex(ROW_JAN), hex("02 001B"), hex("3FC00000"))],
        "{backend}"
    );
    // Nothing reached the raw data table.
    assert!(srv.points("sys.cpu.user").is_empty(), "{backend}");
    srv.stop().await;
}

#[tokio::test]
async fn rollups_are_stored_as_opentsdb_stores_them_memory() {
    rollups_are_stored_as_opentsdb_stores_them("memory").await;
}

#[tokio::test]
async fn rollups_are_stored_as_opentsdb_stores_them_embedded() {
    rollups_are_stored_as_opentsdb_stores_them("embedded").await;
}

#[tokio::test]
async fn rollups_are_stored_as_opentsdb_stores_them_bigtable() {
    rollups_are_stored_as_opentsdb_stores_them("bigtable").await;
}

#[tokio::test]
async fn rollup_points_are_refused_in_opentsdbs_words() {
    let srv = start_with("memory", config()).await;
    let point = |extra: serde_json::Value| {
        let mut p = json!({"metric":"sys.cpu.user","timestamp":1356998400,"value":42,
            "tags":{"host":"web01"},"interval":"1h","aggregator":"sum"});
        for (k, v) in extra.as_object().unwrap() {
            if v.is_null() {
                p.as_object_mut().unwrap().remove(k);
            } else {
                p[k] = v.clone();
            }
        }
        p
    };
    let cases = [
        (
            point(json!({"interval": "13m"})),
            "No rollups configured for the interval: 13m",
        ),
        (
            point(json!({"timestamp": 1356998400000_i64})),
            "bad timestamp=1356998400000 when trying to add value=[42]/0 to metric=sys.cpu.user, tags={host=web01}",
        ),
        (
            point(json!({"aggregator": "avg"})),
            "Derived rollup aggregations are not allowed AVG with metric sys.cpu.user {host=web01}",
        ),
        (
            point(json!({"aggregator": "p99"})),
            "No ID found mapping to aggregator: p99",
        ),
        (point(json!({"aggregator": null})), "Missing aggregator"),
        (point(json!({"interval": null})), "Missing interval"),
        (
            point(json!({"groupByAggregator": "avg"})),
            // Java's `HashMap` order (checked against a JVM).
            "Derived group by aggregations are not allowed avg with metric sys.cpu.user {_aggregate=AVG, host=web01}",
        ),
        (
            point(json!({"tags": {"host": "web01", "_aggregate": "MAX"}})),
            "Given tag value for _aggregate of MAX did not match the group by aggregator of null for sys.cpu.user {_aggregate=MAX, host=web01}",
        ),
        // The default interval's table is the data table: refused, not mixed into raw rows.
        (
            point(json!({"interval": "1m"})),
            "rollup points for interval 1m would go to the data table tsdb, which holds raw points (RFC 0008)",
        ),
    ];
    let body: Vec<serde_json::Value> = cases.iter().map(|(p, _)| p.clone()).collect();
    let mut body = body;
    body.push(point(json!({})));
    let r = http(
        srv.addr,
        "POST",
        "/api/rollup?details",
        &serde_json::Value::Array(body).to_string(),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    let answer = r.json();
    assert_eq!(answer["success"], 1);
    assert_eq!(answer["failed"], cases.len());
    let errors: Vec<&str> = answer["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["error"].as_str().unwrap())
        .collect();
    let want: Vec<&str> = cases.iter().map(|(_, w)| *w).collect();
    assert_eq!(errors, want);
    // The echoed point carries its rollup fields.
    assert_eq!(answer["errors"][0]["datapoint"]["interval"], "13m");
    assert_eq!(answer["errors"][0]["datapoint"]["aggregator"], "sum");

    let replies = telnet(
        srv.addr,
        "rollup 13m-sum sys.cpu.user 1356998400 1 host=web01\n\
         rollup  sys.cpu.user 1356998400 1 host=web01\n\
         rollup 1h-sum sys.cpu.user 1356998400 notanum host=web01\n\
         rollup 1h-sum sys.cpu.user 1356998400 1\n\
         rollup 1h-avg sys.cpu.user 1356998400 1 host=web01\n\
         rollup 1h-sum sys.cpu.user 1356998400 1 host=web01\n",
    )
    .await;
    assert_eq!(
        replies[..4],
        [
            "rollup: No such rollup: No rollups configured for the interval: 13m",
            "rollup: illegal argument: Missing interval or aggregator",
            "rollup: invalid value: Invalid character 'n' in notanum",
            "rollup: illegal argument: not enough arguments (need least 7, got 4)",
        ],
        "{replies:?}"
    );
    assert_eq!(
        replies[4],
        "rollup: illegal argument: Derived rollup aggregations are not allowed AVG with metric sys.cpu.user {host=web01}"
    );
    assert_eq!(replies.len(), 5, "{replies:?}");
    srv.stop().await;
}

/// Without a downsample no rollup interval applies: every `rollupUsage` reads raw data, and
/// `pre-agg` reads the default interval's pre-aggregate table (here empty), as 2.4.1 does.
/// Rollup reads themselves are in `tests/rollup_query.rs`.
#[tokio::test]
async fn queries_without_a_downsample_read_raw_data() {
    let srv = start_with("memory", config()).await;
    let r = http(
        srv.addr,
        "POST",
        "/api/put",
        r#"{"metric":"sys.cpu.user","timestamp":1356998400,"value":1,"tags":{"host":"a"}}"#,
    )
    .await;
    assert_eq!(r.status, 204);
    for path in [
        "/api/query?start=1356998400&m=sum:rollup_fallback:sys.cpu.user",
        "/api/query?start=1356998400&m=sum:rollup_nofallback:sys.cpu.user",
        "/api/query?start=1356998400&m=sum:sys.cpu.user",
    ] {
        let r = http(srv.addr, "GET", path, "").await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert_eq!(r.json()[0]["dps"]["1356998400"], 1, "{path}");
    }
    let r = http(
        srv.addr,
        "GET",
        "/api/query?start=1356998400&m=sum:pre-agg:sys.cpu.user",
        "",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), json!([]));
    for usage in [
        json!("ROLLUP_RAW"),
        json!("ROLLUP_FALLBACK_RAW"),
        serde_json::Value::Null,
    ] {
        let body = json!({"start": 1356998400, "queries": [
            {"aggregator": "sum", "metric": "sys.cpu.user", "rollupUsage": usage}]});
        let r = http(srv.addr, "POST", "/api/query", &body.to_string()).await;
        assert_eq!(r.status, 200, "{usage}: {}", r.text());
        assert_eq!(r.json()[0]["dps"]["1356998400"], 1);
    }
    srv.stop().await;
}

/// `rollup` lines between `put` lines are written in batches of their own; replies keep the
/// lines' order and a bad line does not keep its neighbours out.
#[tokio::test]
async fn telnet_rollup_lines_batch_beside_put_lines_in_order() {
    let srv = start_with("memory", config()).await;
    let replies = telnet(
        srv.addr,
        "put sys.cpu.user 1356998400 1 host=web01\n\
         rollup 1h-sum sys.cpu.user 1356998400 1 host=web01\n\
         rollup 13m-sum sys.cpu.user 1356998400 1 host=web01\n\
         rollup 1h-max sys.cpu.user 1357002000 2 host=web01\n\
         put sys.cpu.user 1356998401 oops host=web01\n\
         rollup 1h-sum sys.cpu.user 1356998400000 1 host=web01\n\
         put sys.cpu.user 1356998402 3 host=web01\n",
    )
    .await;
    assert_eq!(
        replies,
        [
            "rollup: No such rollup: No rollups configured for the interval: 13m",
            "put: invalid value: Invalid character 'o' in oops",
            "rollup: illegal argument: bad timestamp=1356998400000 when trying to add value=[1]/0 to metric=sys.cpu.user, tags={host=web01}",
        ]
    );
    // sum (id 0) at hour 0 and max (id 2) at hour 1 of the January month row.
    assert_eq!(
        cells(&srv, "tsdb-rollup-1h"),
        [
            (hex(ROW_JAN), hex("00 0000"), hex("01")),
            (hex(ROW_JAN), hex("02 0010"), hex("02")),
        ]
    );
    assert_eq!(srv.points("sys.cpu.user").len(), 2);
    srv.stop().await;
}

/// `tsd.rollups.tag_raw` tags rollups of raw series with `agg_tag_key=RAW` (both keys
/// configurable); `tsd.rollups.block_derived = false` lets `avg` through.
#[tokio::test]
async fn raw_rollups_are_tagged_and_derived_ones_allowed_when_configured() {
    let mut c = config();
    c.set("tsd.rollups.tag_raw", "true");
    c.set("tsd.rollups.agg_tag_key", "agg");
    c.set("tsd.rollups.raw_agg_tag_value", "NONE");
    c.set("tsd.rollups.block_derived", "false");
    let srv = start_with("memory", c).await;
    let replies = telnet(
        srv.addr,
        "rollup 1h-avg sys.cpu.user 1356998400 42 host=web01\n",
    )
    .await;
    assert!(replies.is_empty(), "{replies:?}");
    // host=1, agg=2 (tag keys); web01=1, NONE=2 (tag values); avg is id 4.
    assert_eq!(
        cells(&srv, "tsdb-rollup-1h"),
        [(hex(ROW_JAN_SUM), hex("04 0000"), hex("2A"))]
    );
    let tagv = srv
        .state
        .tsdb
        .uids()
        .get_id(hourglass_core::uid::UidKind::TagValue, "NONE")
        .unwrap();
    assert_eq!(tagv.to_hex(3), "000002");
    srv.stop().await;
}

/// With salting, a rollup row carries the salt of its series' data rows: OpenTSDB's salt
/// hashes the metric and tags, not the base time.
#[tokio::test]
async fn salted_rollup_rows_share_their_series_salt() {
    let mut c = config();
    c.set("tsd.storage.salt.width", "1");
    c.set("tsd.storage.salt.buckets", "20");
    let srv = start_with("memory", c).await;
    let put =
        r#"{"metric":"sys.cpu.user","timestamp":1356998400,"value":1,"tags":{"host":"web01"}}"#;
    assert_eq!(http(srv.addr, "POST", "/api/put", put).await.status, 204);
    let rollup = r#"{"metric":"sys.cpu.user","timestamp":1365465600,"value":1,"tags":{"host":"web01"},"interval":"1h","aggregator":"sum"}"#;
    assert_eq!(
        http(srv.addr, "POST", "/api/rollup", rollup).await.status,
        204
    );
    assert_eq!(srv.points("sys.cpu.user").len(), 1);
    let data: Vec<Vec<u8>> = cells(&srv, "tsdb").into_iter().map(|c| c.0).collect();
    let rollups = cells(&srv, "tsdb-rollup-1h");
    assert_eq!(rollups.len(), 1);
    let key = &rollups[0].0;
    assert_eq!(key.len(), 14);
    assert_eq!(key[0], data[0][0], "the series' salt");
    // OpenTSDB's RowKey.prefixKeyWithSalt: Java's Arrays.hashCode (32-bit) over metric and
    // tags `000001 000001 000001`, remainder of 20 made positive: 8.
    assert_eq!(key[0], 8);
    assert_eq!(key[1..], hex("000001 5158CE00 000001 000001")[..]);
    srv.stop().await;
}
