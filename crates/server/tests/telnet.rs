#![allow(clippy::unwrap_used, clippy::expect_used)]
mod common;

use std::time::Duration;

use common::{http, start, start_with, telnet};
use hourglass_core::config::Config;
use hourglass_core::uid::UidKind;
use hourglass_core::value::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn tags(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn put_stores_points_with_opentsdbs_spacing(backend: &str) {
    let srv = start(backend).await;
    let replies = telnet(
        srv.addr,
        "put sys.cpu.user 1356998400 42 host=web01 cpu=0\r\n\
         put sys.cpu.user 1356998401 42.5 host=web01  cpu=0 \n\
         put sys.cpu.user 1356998402.250 -7 host=web01 cpu=0\n\
         put sys.cpu.user 1356998403123 0.1 host=web01 cpu=0\n",
    )
    .await;
    assert_eq!(replies, Vec::<String>::new());
    let t = tags(&[("cpu", "0"), ("host", "web01")]);
    assert_eq!(
        srv.points("sys.cpu.user"),
        vec![
            (1356998400000, Value::Int(42), t.clone()),
            (1356998401000, Value::Float(42.5), t.clone()),
            (1356998402250, Value::Int(-7), t.clone()),
            (1356998403123, Value::Double(0.1), t),
        ]
    );
    srv.stop().await;
}

async fn every_put_error_in_opentsdb_words_good_points_kept(backend: &str) {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "false");
    let srv = start_with(backend, c).await;
    srv.state
        .tsdb
        .uids()
        .get_or_create_id(hourglass_core::uid::UidKind::Metric, "known")
        .unwrap();
    let nine: String = (0..9).map(|i| format!(" k{i}=v")).collect();
    let long_line = format!("put known 1356998400 1 host={}\n", "x".repeat(2000));
    let input = format!(
        "put known 1356998400 1 host=a\n\
         put known 1356998401 abc host=a\n\
         put unknown 1356998402 1 host=a\n\
         put known 1356998403 1{nine}\n\
         put known 1356998404 1\n\
         put known 0 1 host=a\n\
         put known 12ab 1 host=a\n\
         put bad$name 1356998405 1 host=a\n\
         put known 1356998406 1 ho$t=a\n\
         put known 1356998407 1 host\n\
         put known 1356998408 1 host=a host=b\n\
         put known 1356998409 NaN host=a\n\
         put known 1356998410 1e999 host=a\n\
         {long_line}\
         put known 99999999999999 1 host=a\n\
         put\n\
         put \n\
         put  known 1356998412 1 host=a\n\
         put known  1 host=a\n\
         put known 1356998412  host=a\n\
         put known 1356998412 1 \n\
         \x20put known 1356998412 1 host=a\n\
         put known\t1356998412 1 host=a\n\
         put known 1356998411 2 host=a\n"
    );
    let replies = telnet(srv.addr, &input).await;
    assert_eq!(
        replies,
        vec![
            "put: invalid value: Invalid character 'a' in abc".to_string(),
            "put: unknown metric: No such name for 'metrics': 'unknown'".into(),
            "put: illegal argument: Too many tags: 9 maximum allowed: 8, tags: {k0=v, k1=v, k2=v, k3=v, k4=v, k5=v, k6=v, k7=v, k8=v}".into(),
            "put: illegal argument: not enough arguments (need least 4, got 3)".into(),
            "put: illegal argument: invalid timestamp: 0".into(),
            "put: invalid value: Invalid character 'a' in 12ab".into(),
            "put: illegal argument: Invalid metric name (\"bad$name\"): illegal character: $".into(),
            "put: illegal argument: Invalid tag name with value [a] (\"ho$t\"): illegal character: $".into(),
            "put: illegal argument: invalid tag: host".into(),
            "put: illegal argument: duplicate tag: host=b, tags={host=a}".into(),
            "put: invalid value: Invalid character 'N' in NaN".into(),
            "put: illegal argument: value is NaN or Infinite: Infinity for metric=known timestamp=1356998410".into(),
            format!("put: illegal argument: line too long: {} bytes, the limit is 1024 (tsd.network.max_line_length)", long_line.len() - 1),
            "put: illegal argument: bad timestamp=99999999999999 when trying to add value=[1]/0 to metric=known, tags={host=a}".into(),
            // Words are split on single spaces, empty ones kept, as OpenTSDB splits them.
            "put: illegal argument: not enough arguments (need least 4, got 0)".into(),
            "put: illegal argument: not enough arguments (need least 4, got 1)".into(),
            "put: illegal argument: empty metric name".into(),
            "put: invalid value: Empty string".into(),
            "put: illegal argument: empty value".into(),
            "put: illegal argument: Need at least one tag (metric=known, tags={})".into(),
            "unknown command: .  Try `help'.".into(),
            "put: illegal argument: not enough arguments (need least 4, got 3)".into(),
        ]
    );
    let stored: Vec<i64> = srv.points("known").iter().map(|p| p.0).collect();
    assert_eq!(
        stored,
        vec![1356998400000, 1356998411000],
        "good points beside bad ones are stored"
    );
    srv.stop().await;
}

async fn commands_answer_like_opentsdb(backend: &str) {
    let srv = start(backend).await;
    let replies = telnet(
        srv.addr,
        "help\ndropcaches\nfoo bar\ndiediedie\n\n   \nPUT m 1 1 h=a\nrollup 1h-sum m 1 1\n\
         rollup 1h-sum m 1356998400 1 h=a\nhistogram m 1356998400 AAAA h=a\n",
    )
    .await;
    assert_eq!(
        replies,
        vec![
            "available commands: stats dropcaches version exit help put rollup histogram "
                .to_string(),
            "Caches dropped.".into(),
            "unknown command: foo.  Try `help'.".into(),
            "unknown command: diediedie.  Try `help'.".into(),
            // An empty line, or one starting with a space, is the empty command.
            "unknown command: .  Try `help'.".into(),
            "unknown command: .  Try `help'.".into(),
            "unknown command: PUT.  Try `help'.".into(),
            // Rollups and histograms are refused as an unconfigured OpenTSDB refuses them.
            "rollup: illegal argument: not enough arguments (need least 7, got 4)".into(),
            "rollup: illegal argument: No rollup or aggregations were configured".into(),
            "histogram: illegal argument: Histogram storage has not been enabled. Check the 'tsd.core.histograms.config' configuration.".into(),
        ]
    );
    let stats = telnet(srv.addr, "stats\n").await;
    assert!(
        stats
            .iter()
            .any(|l| l.starts_with("tsd.connectionmgr.connections ")
                && l.contains("type=open")
                && l.contains(" host=")),
        "{stats:?}"
    );
    assert!(
        stats
            .iter()
            .any(|l| l.starts_with("tsd.uid.cache-size ") && l.contains("kind=metrics"))
    );
    for l in &stats {
        let words: Vec<&str> = l.split(' ').collect();
        assert!(words.len() >= 4, "{l}");
        assert!(
            words[1].parse::<u64>().is_ok() && words[2].parse::<u64>().is_ok(),
            "{l}"
        );
    }
    // exit closes the connection.
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(b"exit\nversion\n").await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(
        buf.is_empty(),
        "nothing after exit: {:?}",
        String::from_utf8_lossy(&buf)
    );
    srv.stop().await;
}

async fn diediedie_only_when_enabled(backend: &str) {
    let mut c = Config::default();
    c.set("tsd.no_diediedie", "false");
    let srv = start_with(backend, c).await;
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(b"help\ndiediedie\n").await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8(buf).unwrap();
    assert!(text.contains("diediedie "), "{text}");
    assert!(text.ends_with("Cleaning up and exiting now.\n"), "{text}");
    // The server stops accepting by itself.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(TcpStream::connect(srv.addr).await.is_err());
    srv.stop().await;
}

async fn read_only_refuses_put(backend: &str) {
    let mut c = Config::default();
    c.set("tsd.mode", "ro");
    let srv = start_with(backend, c).await;
    let replies = telnet(srv.addr, "put m 1356998400 1 h=a\nhelp\n").await;
    assert_eq!(
        replies,
        vec![
            "unknown command: put.  Try `help'.".to_string(),
            "available commands: stats dropcaches version exit help ".into()
        ]
    );
    srv.stop().await;
}

async fn concurrent_connections_all_land_and_a_stalled_client_blocks_nobody(backend: &str) {
    let srv = start(backend).await;
    // A client that sends half a line and stalls.
    let mut stalled = TcpStream::connect(srv.addr).await.unwrap();
    stalled
        .write_all(b"put stall.metric 13569984")
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for c in 0..8 {
        let addr = srv.addr;
        tasks.push(tokio::spawn(async move {
            let mut text = String::new();
            for i in 0..2000 {
                text.push_str(&format!(
                    "put conc.metric {} {i} conn={c}\n",
                    1356998400 + i
                ));
            }
            telnet(addr, &text).await
        }));
    }
    for t in tasks {
        assert_eq!(
            tokio::time::timeout(Duration::from_secs(30), t)
                .await
                .unwrap()
                .unwrap(),
            Vec::<String>::new()
        );
    }
    let points = srv.points("conc.metric");
    assert_eq!(points.len(), 16000);
    // The stalled client's line completes later and is stored too.
    stalled.write_all(b"00 5 host=a\n").await.unwrap();
    drop(stalled);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(srv.points("stall.metric").len(), 1);
    srv.stop().await;
}

async fn latin1_lines_are_read_as_opentsdb_reads_them(backend: &str) {
    let srv = start(backend).await;
    let mut s = TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(b"put temp 1356998400 1 city=M\xfcnchen\nversion\n")
        .await
        .unwrap();
    let mut buf = vec![0; 200];
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let pts = srv.points("temp");
    assert_eq!(pts[0].2, tags(&[("city", "München")]));
    srv.stop().await;
}

async fn rollup_and_histogram_words_are_counted_as_opentsdb_counts_them(backend: &str) {
    let mut c = Config::default();
    c.set(
        "tsd.core.histograms.config",
        r#"{"net.opentsdb.core.SimpleHistogramDecoder": 42}"#,
    );
    let srv = start_with(backend, c).await;
    // A space after the command makes one empty word, as for `put `.
    let replies = telnet(srv.addr, "rollup\nrollup \nhistogram\nhistogram \n").await;
    assert_eq!(
        replies,
        vec![
            "rollup: illegal argument: not enough arguments (need least 7, got 0)".to_string(),
            "rollup: illegal argument: not enough arguments (need least 7, got 1)".into(),
            "histogram: illegal argument: not enough arguments (need least 5, got 0)".into(),
            "histogram: illegal argument: not enough arguments (need least 5, got 1)".into(),
        ]
    );
    srv.stop().await;
}

async fn unknown_tag_names_are_unknown_metric_errors_as_in_opentsdb(backend: &str) {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "false");
    c.set("tsd.core.auto_create_tagks", "false");
    c.set("tsd.core.auto_create_tagvs", "false");
    let srv = start_with(backend, c).await;
    let uids = srv.state.tsdb.uids();
    uids.get_or_create_id(UidKind::Metric, "known").unwrap();
    uids.get_or_create_id(UidKind::TagKey, "host").unwrap();
    uids.get_or_create_id(UidKind::TagValue, "a").unwrap();
    // OpenTSDB answers any name it may not create with the `unknown metric` prefix.
    let replies = telnet(
        srv.addr,
        "put known 1356998400 1 newk=a\n\
         put known 1356998400 1 host=b\n\
         put known 1356998400 1 host=a\n",
    )
    .await;
    assert_eq!(
        replies,
        vec![
            "put: unknown metric: No such name for 'tagk': 'newk'".to_string(),
            "put: unknown metric: No such name for 'tagv': 'b'".into(),
        ]
    );
    assert_eq!(srv.points("known").len(), 1);
    srv.stop().await;
}

async fn tag_maps_in_errors_print_in_javas_hash_map_order(backend: &str) {
    let srv = start(backend).await;
    // OpenTSDB prints its `HashMap` of the line's tags: bucket order, not line order.
    let replies = telnet(
        srv.addr,
        "put hm 1356998400 1 host=v cpu=v dc=v env=v role=v rack=v az=v svc=v pod=v\n\
         put hm 1356998400 1 cpu=0 host=b zone=a cpu=1\n\
         put hm 99999999999999 1 cpu=0 host=b zone=a\n",
    )
    .await;
    assert_eq!(
        replies,
        vec![
            "put: illegal argument: Too many tags: 9 maximum allowed: 8, tags: {svc=v, rack=v, role=v, pod=v, host=v, cpu=v, az=v, env=v, dc=v}".to_string(),
            "put: illegal argument: duplicate tag: cpu=1, tags={zone=a, host=b, cpu=0}".into(),
            "put: illegal argument: bad timestamp=99999999999999 when trying to add value=[1]/0 to metric=hm, tags={zone=a, host=b, cpu=0}".into(),
        ]
    );
    srv.stop().await;
}

async fn values_read_as_javas_parse_double_reads_them(backend: &str) {
    let srv = start(backend).await;
    // OpenTSDB reads a value with `.`, `e` or `E` with `Double.parseDouble`: a type suffix
    // is allowed, a second point has its own message.
    let replies = telnet(
        srv.addr,
        "put jd 1356998400 1.5f host=a\n\
         put jd 1356998401 0.1D host=a\n\
         put jd 1356998402 1.2.3 host=a\n\
         put jd 1356998403 1.5ff host=a\n",
    )
    .await;
    assert_eq!(
        replies,
        vec![
            "put: invalid value: multiple points".to_string(),
            "put: invalid value: For input string: \"1.5ff\"".into(),
        ]
    );
    // `/api/put` reads a value given as text the same way.
    let r = http(
        srv.addr,
        "POST",
        "/api/put",
        r#"{"metric":"jd","timestamp":1356998404,"value":"2.5F","tags":{"host":"a"}}"#,
    )
    .await;
    assert_eq!(r.status, 204);
    let t = tags(&[("host", "a")]);
    assert_eq!(
        srv.points("jd"),
        vec![
            (1356998400000, Value::Float(1.5), t.clone()),
            (1356998401000, Value::Double(0.1), t.clone()),
            (1356998404000, Value::Float(2.5), t),
        ]
    );
    srv.stop().await;
}

/// A store nothing answers for: every write fails as a storage error.
fn unreachable_store() -> std::sync::Arc<dyn hourglass_storage::Store> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut config = hourglass_store_bigtable::BigtableConfig::new("hourglass-test", "down");
    config.emulator_host = Some(format!("127.0.0.1:{port}"));
    config.timeout = Duration::from_millis(300);
    std::sync::Arc::new(hourglass_store_bigtable::BigtableStore::connect(config).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_failures_are_hbase_errors_as_opentsdb_words_them() {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    let srv = common::start_on(unreachable_store(), c).await;
    let replies = telnet(srv.addr, "put down.m 1356998400 1 host=a\n").await;
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert!(
        replies[0].starts_with("put: HBase error: storage unavailable"),
        "{replies:?}"
    );
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_failures_are_silent_without_return_errors() {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    c.set("tsd.rpc.telnet.return_errors", "false");
    c.set(
        "tsd.core.histograms.config",
        r#"{"net.opentsdb.core.SimpleHistogramDecoder": 42}"#,
    );
    let srv = common::start_on(unreachable_store(), c).await;
    // As OpenTSDB: what its storage error path reports is not sent; errors in the line are.
    let replies = telnet(
        srv.addr,
        "put down.m 1356998400 1 host=a\n\
         put down.m 1356998400 x host=a\n\
         histogram h.e 1356998400 0-1=1 host=a\n\
         histogram h.e 0 u=1 host=a\n",
    )
    .await;
    assert_eq!(
        replies,
        vec![
            "put: invalid value: Invalid character 'x' in x".to_string(),
            "histogram: illegal argument: invalid timestamp: 0".into(),
        ]
    );
    srv.stop().await;
}

on_every_backend!(
    put_stores_points_with_opentsdbs_spacing,
    every_put_error_in_opentsdb_words_good_points_kept,
    commands_answer_like_opentsdb,
    diediedie_only_when_enabled,
    read_only_refuses_put,
    concurrent_connections_all_land_and_a_stalled_client_blocks_nobody,
    latin1_lines_are_read_as_opentsdb_reads_them,
    values_read_as_javas_parse_double_reads_them,
    rollup_and_histogram_words_are_counted_as_opentsdb_counts_them,
    unknown_tag_names_are_unknown_metric_errors_as_in_opentsdb,
    tag_maps_in_errors_print_in_javas_hash_map_order,
);
