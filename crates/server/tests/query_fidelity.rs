#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `/api/query` and `/api/query/last` read and answered as OpenTSDB 2.4.1 reads and answers
//! them (its `QueryRpc`, `TSQuery`, `TSSubQuery`, `Tags`, `TagVFilter`, `RateOptions` and
//! its JSON reader), over real sockets: request forms, the order of its checks and their
//! words, and the shape of what `showQuery` and `showStats` add.
mod common;

use common::{TestServer, http, load_fixture, start};
use serde_json::{Value, json};

async fn post(srv: &TestServer, body: Value) -> common::Response {
    http(srv.addr, "POST", "/api/query", &body.to_string()).await
}

async fn get(srv: &TestServer, query: &str) -> common::Response {
    http(srv.addr, "GET", &format!("/api/query?{query}"), "").await
}

/// The status and error message of an answer.
fn error(r: &common::Response) -> (u16, String) {
    let v = r.json();
    (
        r.status,
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

fn keys(v: &Value) -> Vec<&str> {
    v.as_object().unwrap().keys().map(String::as_str).collect()
}

/// Boolean fields are Java `boolean`s filled by Jackson: the strings `"true"`/`"True"` and
/// non-zero numbers are true (clients send `"showQuery": "true"`); other text refuses the
/// body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn booleans_of_a_body_read_as_java_booleans() {
    let srv = start("memory").await;
    load_fixture(&srv).await;
    let r = post(
        &srv,
        json!({"start": 1356998400, "end": 1356998460, "showQuery": "true",
               "showTSUIDs": "True", "msResolution": 1, "noAnnotations": "false",
               "queries": [{"aggregator": "sum", "metric": "sys.cpu.user", "rate": "false",
                            "filters": [{"type": "literal_or", "tagk": "host",
                                         "filter": "web01", "groupBy": "true"}]}]}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(
        keys(&v[0]),
        ["metric", "tags", "aggregateTags", "query", "tsuids", "dps"]
    );
    assert_eq!(v[0]["dps"]["1356998430000"], 1, "ms keys: {v}");
    assert_eq!(v[0]["query"]["filters"][0]["group_by"], true);
    let r = post(
        &srv,
        json!({"start": 1356998400, "showQuery": "yes",
               "queries": [{"aggregator": "sum", "metric": "sys.cpu.user"}]}),
    )
    .await;
    assert_eq!(
        error(&r),
        (400, "Unable to parse the given JSON".to_string())
    );
    srv.stop().await;
}

/// `TSQuery.validateAndSetQuery`'s order: the start (empty is missing), the end (empty is
/// now), end after start, then the sub-queries; a time zone is read only where a date or a
/// downsampling needs it; what the JSON reader refuses (a filter) comes before all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn times_and_checks_in_opentsdbs_order() {
    let srv = start("memory").await;
    load_fixture(&srv).await;
    let sub = json!({"aggregator": "sum", "metric": "sys.cpu.user"});
    // GET: an empty start is missing; an empty end is now; the last of a repeated one counts.
    assert_eq!(
        error(&get(&srv, "start=&m=sum:sys.cpu.user").await),
        (400, "Missing parameter <code>start</code>".to_string())
    );
    let r = get(&srv, "start=1356998400&end=&m=sum:sys.cpu.user").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()[0]["dps"].as_object().unwrap().len(), 300);
    let r = get(
        &srv,
        "start=1356998500&start=1356998400&end=1356998450&m=sum:sys.cpu.user",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()[0]["dps"], json!({"1356998430": 301}));
    // POST: an empty end is now, an empty start is missing.
    let r = post(
        &srv,
        json!({"start": 1356998400, "end": "", "queries": [sub]}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        error(&post(&srv, json!({"start": "", "queries": [sub]})).await),
        (400, "Missing start time".to_string())
    );
    // End before start is told before the sub-queries are looked at.
    let backwards =
        |queries: Value| json!({"start": 1356998500, "end": 1356998400, "queries": queries});
    let told = (
        400,
        "End time [1356998400000] must be greater than the start time [1356998500000]".to_string(),
    );
    assert_eq!(error(&post(&srv, backwards(json!([]))).await), told);
    assert_eq!(
        error(
            &post(
                &srv,
                backwards(json!([{"aggregator": "nope", "metric": "m"}]))
            )
            .await
        ),
        told
    );
    assert_eq!(
        error(&get(&srv, "start=1356998500&end=1356998400&m=nope:sys.cpu.user").await),
        told
    );
    assert_eq!(
        error(&post(&srv, json!({"start": 1356998400, "queries": []})).await),
        (400, "Missing queries".to_string())
    );
    // A filter the reader refuses: before the missing start.
    let r = post(
        &srv,
        json!({"queries": [{"aggregator": "sum", "metric": "m",
                            "filters": [{"type": "Wildcard", "tagk": "host", "filter": "*"}]}]}),
    )
    .await;
    assert_eq!(
        error(&r),
        (400, "Unable to parse the given JSON".to_string())
    );
    assert!(
        r.json()["error"]["details"]
            .as_str()
            .unwrap()
            .contains("Could not find a tag value filter of the type: Wildcard"),
        "{}",
        r.text()
    );
    // An unknown zone: unread by relative times, refused by a date, and by a downsampling.
    let zoned = |start: Value, ds: Option<&str>| {
        json!({"start": start, "end": "2013/01/02", "timezone": "Nowhere/Atlantis",
               "queries": [{"aggregator": "sum", "metric": "sys.cpu.user", "downsample": ds}]})
    };
    let r = post(
        &srv,
        json!({"start": 1356998400, "end": 1357041600, "timezone": "Nowhere/Atlantis",
               "queries": [sub]}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        error(&post(&srv, zoned(json!("2013/01/01"), None)).await),
        (400, "Invalid timezone name: Nowhere/Atlantis".to_string())
    );
    let r = post(
        &srv,
        json!({"start": 1356998400, "end": 1357041600, "timezone": "Nowhere/Atlantis",
               "queries": [{"aggregator": "sum", "metric": "sys.cpu.user", "downsample": "1h-avg"}]}),
    )
    .await;
    assert_eq!(
        error(&r),
        (
            400,
            "The timezone specification could not be found".to_string()
        )
    );
    srv.stop().await;
}

/// `m=` as `QueryRpc.parseMTypeSubQuery` and `Tags.parseWithMetricAndFilters` read it, and
/// `tsuid=` sub-queries read before the `m=` ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m_and_tsuid_parameters_read_as_opentsdb_reads_them() {
    let srv = start("memory").await;
    load_fixture(&srv).await;
    let range = "start=1356998400&end=1356998460";
    let refused = |m: &str, message: &str| {
        let m = m.to_string();
        let message = message.to_string();
        let srv = &srv;
        async move {
            let r = get(srv, &format!("{range}&m={m}")).await;
            assert_eq!(error(&r), (400, message), "m={m}");
        }
    };
    refused(
        "sum:sys.cpu.user%7Bhost%7D",
        "When parsing tag 'host': invalid tag: host",
    )
    .await;
    refused(
        "sum:sys.cpu.user%7Bhost=web01,%7D",
        "When parsing tag '': invalid tag: ",
    )
    .await;
    refused(
        "sum:sys.cpu.user%7Bhost=web01%7Dx",
        "Missing '}' at the end of: sys.cpu.user{host=web01}x",
    )
    .await;
    refused(
        "sum:sys.cpu.user%7B%7D%7Bhost=a=b%7D",
        "When parsing filter 'host=a=b': invalid tag: host=a=b",
    )
    .await;
    refused(
        "sum:sys.cpu.user%7Bhost=regexp(web%7D",
        "When parsing tag 'host=regexp(web': Filter must end with a ')': regexp(web",
    )
    .await;
    refused("sum:", "Metric cannot be null or empty").await;
    refused("sum::sys.cpu.user", "String index out of range: 0").await;

    // The same filter as a tag and as a filter is one filter, grouping; filters come first.
    let v = get(
        &srv,
        &format!(
            "{range}&show_query&m=sum:sys.cpu.user%7Bhost=web01%7D%7Bhost=web01,host=web0*%7D"
        ),
    )
    .await
    .json();
    assert_eq!(
        v[0]["query"]["filters"],
        json!([
            {"tagk": "host", "filter": "web01", "group_by": true, "type": "literal_or"},
            {"tagk": "host", "filter": "web0*", "group_by": false, "type": "wildcard"}
        ])
    );

    // tsuid= first, whatever the URL's order; its tokens are rate, downsampling and the
    // histogram ones only.
    let tsuids = get(
        &srv,
        &format!("{range}&show_tsuids&m=sum:sys.cpu.user%7Bhost=web02%7D"),
    )
    .await
    .json();
    let web02 = tsuids[0]["tsuids"][0].as_str().unwrap().to_string();
    let v = get(
        &srv,
        &format!(
            "{range}&show_query&m=sum:sys.cpu.user%7Bhost=web01%7D&tsuid=sum:explicit_tags:{web02}"
        ),
    )
    .await
    .json();
    assert_eq!(v[0]["tags"]["host"], "web02", "{v}");
    assert_eq!(v[0]["query"]["index"], 0);
    assert_eq!(v[0]["query"]["explicitTags"], false);
    assert_eq!(v[1]["tags"]["host"], "web01");
    assert_eq!(v[1]["query"]["index"], 1);

    // Rate options as `parseRateOptions` reads them: echoed only when given.
    let v = get(
        &srv,
        &format!("{range}&show_query&m=sum:RATE%7Bcounter,100%7D:sys.cpu.user"),
    )
    .await
    .json();
    assert_eq!(
        v[0]["query"]["rateOptions"],
        json!({"counter": true, "counterMax": 100, "resetValue": 0, "dropResets": false})
    );
    let v = get(&srv, &format!("{range}&show_query&m=sum:rate:sys.cpu.user"))
        .await
        .json();
    assert_eq!(v[0]["query"]["rate"], true);
    assert_eq!(v[0]["query"]["rateOptions"], Value::Null);
    srv.stop().await;
}

/// What `showQuery` and `showStats` add, in OpenTSDB 2.4's shape and key order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_query_and_stats_in_opentsdbs_shape() {
    let srv = start("memory").await;
    load_fixture(&srv).await;
    let r = post(
        &srv,
        json!({"start": 1356998400, "end": 1356998460, "showQuery": true, "showStats": true,
               "queries": [{"aggregator": "sum", "metric": "sys.cpu.user",
                            "rateOptions": {"isCounter": true},
                            "filters": [{"type": "wildcard", "tagk": "host", "filter": "*",
                                         "group_by": true}]}]}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let q = &v[0]["query"];
    assert_eq!(
        keys(q),
        [
            "aggregator",
            "metric",
            "tsuids",
            "downsample",
            "rate",
            "filters",
            "percentiles",
            "index",
            "rateOptions",
            "filterTagKs",
            "explicitTags",
            "useFuzzyFilter",
            "preAggregate",
            "rollupUsage",
            "rollupTable",
            "showHistogramBuckets",
            "useMultiGets",
            "tags",
            "histogramQuery"
        ]
    );
    assert_eq!(q["filterTagKs"], json!(["AAAB"]), "host is tag key 1");
    assert_eq!(q["filters"][0]["group_by"], true, "group_by read");
    assert_eq!(q["rate"], false);
    assert_eq!(q["rateOptions"]["counter"], true, "given, so echoed");
    assert_eq!(q["useFuzzyFilter"], true);
    assert_eq!(q["histogramQuery"], false);
    assert_eq!(q["tags"], json!({"host": "wildcard(*)"}));
    let stats = keys(&v[0]["stats"]);
    let mut sorted = stats.clone();
    sorted.sort_unstable();
    assert_eq!(stats, sorted, "a sorted map");
    let v = post(
        &srv,
        json!({"start": 1356998400, "end": 1356998460, "showQuery": true,
               "queries": [{"aggregator": "sum", "metric": "sys.cpu.user"}]}),
    )
    .await
    .json();
    assert_eq!(v[0]["query"]["filterTagKs"], Value::Null);
    // An unknown field of rateOptions refuses the body (RateOptions takes no others).
    let r = post(
        &srv,
        json!({"start": 1356998400, "queries": [{"aggregator": "sum", "metric": "sys.cpu.user",
               "rate": true, "rateOptions": {"counter": true, "bogus": 1}}]}),
    )
    .await;
    assert_eq!(
        error(&r),
        (400, "Unable to parse the given JSON".to_string())
    );
    srv.stop().await;
}

/// `tags` and `filters` of one sub-query each replace what the other set (OpenTSDB's
/// setters): the later of the two in the body is the one used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_later_of_tags_and_filters_wins() {
    let srv = start("memory").await;
    load_fixture(&srv).await;
    let body = |first: &str| {
        let tags = r#""tags": {"host": "web01"}"#;
        let filters = r#""filters": [{"type": "literal_or", "tagk": "host", "filter": "web02", "groupBy": true}]"#;
        let (a, b) = if first == "tags" {
            (tags, filters)
        } else {
            (filters, tags)
        };
        format!(
            r#"{{"start": 1356998400, "end": 1356998460, "queries": [{{"aggregator": "sum", "metric": "sys.cpu.user", {a}, {b}}}]}}"#
        )
    };
    let v = http(srv.addr, "POST", "/api/query", &body("tags"))
        .await
        .json();
    assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v[0]["tags"]["host"], "web02", "filters came last: {v}");
    let v = http(srv.addr, "POST", "/api/query", &body("filters"))
        .await
        .json();
    assert_eq!(v[0]["tags"]["host"], "web01", "tags came last: {v}");
    srv.stop().await;
}

/// `/api/query/last` as `QueryRpc` and `TSUIDQuery` read it: `timeseries=` through
/// `Tags.parseWithMetric`, the last `back_scan` as a Java int, and a scan back naming the
/// one series of exactly the given tags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_points_read_as_opentsdb_reads_them() {
    let srv = start("memory").await;
    let now = hourglass_storage::now_ms() / 1000;
    let lines = format!(
        "put last.f {} 1 host=a dc=x\nput last.f {} 2 host=b dc=x\nput last.f {} 3 dc=x\n",
        now - 60,
        now - 50,
        now - 40
    );
    assert!(common::telnet(srv.addr, &lines).await.is_empty());
    let last = |query: &str| {
        let query = query.to_string();
        let srv = &srv;
        async move { http(srv.addr, "GET", &format!("/api/query/last?{query}"), "").await }
    };
    let refused = [
        (
            "timeseries=last.f%7Bdc%7D",
            "When parsing tag 'dc': invalid tag: dc",
        ),
        (
            "timeseries=last.f%7Bdc=x,%7D",
            "When parsing tag '': invalid tag: ",
        ),
        (
            "timeseries=last.f%7Bdc=x,dc=y%7D",
            "When parsing tag 'dc=y': duplicate tag: dc=y, tags={dc=x}",
        ),
        (
            "timeseries=last.f%7Bdc=x%7Dz",
            "Missing '}' at the end of: last.f{dc=x}z",
        ),
        ("timeseries=%7Bdc=x%7D", "Metric cannot be null or empty"),
        (
            "timeseries=last.f&back_scan=1",
            "Tags cannot be null or empty when getting a TSUID",
        ),
        (
            "timeseries=last.f&back_scan=3000000000",
            "Unable to parse back_scan parameter",
        ),
        (
            "tsuids=000001&back_scan=1",
            "TSUID must not be null and must have a metric and at least one tag pair",
        ),
        (
            "tsuids=000001000001000001&back_scan=-1",
            "Backscan must be zero or a positive number",
        ),
    ];
    for (query, message) in refused {
        assert_eq!(
            error(&last(query).await),
            (400, message.to_string()),
            "{query}"
        );
    }
    // A repeated pair with one value counts once.
    let r = last("timeseries=last.f%7Bdc=x,dc=x%7D").await;
    assert_eq!(r.status, 200, "{}", r.text());
    // No back scan: every series having the tags; a scan back: the one series of exactly
    // them (the last `back_scan` given counts).
    let r = last("timeseries=last.f%7Bdc=x%7D&resolve").await;
    assert_eq!(r.json().as_array().unwrap().len(), 3, "{}", r.text());
    let r = last("timeseries=last.f%7Bdc=x%7D&back_scan=x&back_scan=2&resolve").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
    assert_eq!(
        keys(&v[0]),
        ["metric", "timestamp", "value", "tags", "tsuid"]
    );
    assert_eq!(v[0]["tags"], json!({"dc": "x"}));
    assert_eq!(v[0]["value"], "3");
    let v = http(
        srv.addr,
        "POST",
        "/api/query/last",
        &json!({"queries": [{"metric": "last.f", "tags": {"host": "b", "dc": "x"}}],
                "backScan": 1, "resolveNames": true})
        .to_string(),
    )
    .await
    .json();
    assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v[0]["value"], "2");
    srv.stop().await;
}

/// What each method reads: GET the URL whatever its body; a body all of a POST's request
/// (of the URL's flags only `arrays`, read as the answer is written); DELETE, when deleting
/// is off, refused before anything is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_method_reads_what_opentsdb_reads() {
    let srv = start("memory").await;
    load_fixture(&srv).await;
    let r = http(
        srv.addr,
        "GET",
        "/api/query?start=1356998400&end=1356998440&m=sum:sys.cpu.user",
        r#"{"ignored": true}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()[0]["dps"], json!({"1356998430": 301}));
    let body = json!({"start": 1356998400, "end": 1356998440,
                      "queries": [{"aggregator": "sum", "metric": "sys.cpu.user"}]})
    .to_string();
    let v = http(
        srv.addr,
        "POST",
        "/api/query?ms&show_tsuids&show_query&arrays",
        &body,
    )
    .await
    .json();
    assert_eq!(
        keys(&v[0]),
        ["metric", "tags", "aggregateTags", "dps"],
        "{v}"
    );
    assert_eq!(v[0]["dps"], json!([[1356998430, 301]]));
    let r = http(srv.addr, "DELETE", "/api/query?m=sum:nothing", "").await;
    assert_eq!(error(&r), (400, "Bad request".to_string()));
    assert_eq!(
        r.json()["error"]["details"],
        "Deleting data is not enabled (tsd.http.query.allow_delete=false)"
    );
    srv.stop().await;
}

/// A `/api/query/last` body's fields as Jackson fills them: `resolveNames` a Java boolean,
/// `backScan` a Java int (from a number or its text).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_point_bodies_read_as_jackson_reads_them() {
    let srv = start("memory").await;
    let now = hourglass_storage::now_ms() / 1000;
    let lines = format!("put last.j {} 4 host=a\n", now - 30);
    assert!(common::telnet(srv.addr, &lines).await.is_empty());
    let last = |body: Value| {
        let srv = &srv;
        async move { http(srv.addr, "POST", "/api/query/last", &body.to_string()).await }
    };
    let r = last(
        json!({"queries": [{"metric": "last.j", "tags": {"host": "a"}}],
                        "resolveNames": "true", "backScan": "2"}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()[0]["metric"], "last.j");
    assert_eq!(r.json()[0]["value"], "4");
    let r = last(
        json!({"queries": [{"metric": "last.j", "tags": {"host": "a"}}],
                        "backScan": 3_000_000_000i64}),
    )
    .await;
    assert_eq!(
        error(&r),
        (400, "Unable to parse the given JSON".to_string())
    );
    srv.stop().await;
}

/// A GET of `/api/query/last` read in `parseLastPointQuery`'s order: `back_scan` first,
/// then the `timeseries=` and `tsuids=` lists (an empty TSUID inside a list is one, and
/// refused); a TSUID is read before the scan back is checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_point_urls_read_in_opentsdbs_order() {
    let srv = start("memory").await;
    let last = |query: &str| {
        let query = query.to_string();
        let srv = &srv;
        async move { http(srv.addr, "GET", &format!("/api/query/last?{query}"), "").await }
    };
    assert_eq!(
        error(&last("timeseries=m%7Bx%7D&back_scan=x").await),
        (400, "Unable to parse back_scan parameter".to_string())
    );
    assert_eq!(
        error(&last("tsuids=000001000001000001,,000001000001000002").await),
        (400, "UID was empty".to_string())
    );
    assert_eq!(
        error(&last("tsuids=0001&back_scan=-1").await),
        (
            400,
            "TSUID must not be null and must have a metric and at least one tag pair".to_string()
        )
    );
    let r = last("tsuids=000001000001000001,").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), json!([]));
    srv.stop().await;
}

/// DELETE on `/api/query/last` passes OpenTSDB's query gate: refused while deleting is off,
/// else read as a GET.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_points_by_delete_as_opentsdb_answers_it() {
    let srv = start("memory").await;
    let r = http(srv.addr, "DELETE", "/api/query/last?timeseries=m", "").await;
    assert_eq!(error(&r), (400, "Bad request".to_string()));
    assert_eq!(
        r.json()["error"]["details"],
        "Deleting data is not enabled (tsd.http.query.allow_delete=false)"
    );
    srv.stop().await;
    let mut c = hourglass_core::config::Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    c.set("tsd.http.query.allow_delete", "true");
    let srv = common::start_with("memory", c).await;
    let now = hourglass_storage::now_ms() / 1000;
    let lines = format!("put last.d {} 4 host=a\n", now - 30);
    assert!(common::telnet(srv.addr, &lines).await.is_empty());
    let r = http(srv.addr, "DELETE", "/api/query/last?timeseries=last.d", "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()[0]["value"], "4");
    srv.stop().await;
}
