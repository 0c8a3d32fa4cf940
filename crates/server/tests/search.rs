#![allow(clippy::unwrap_used, clippy::expect_used)]
//! OpenTSDB's search endpoints answered without a plugin (RFC 0007 phase 5), through the
//! real server on the embedded store and on Bigtable: `tsmeta`, `tsmeta_summary`, `tsuids`,
//! `uidmeta` and `annotation`, GET and POST, paging, each field, wildcards, regexes and
//! boolean operators, refused queries in OpenTSDB's words, and the index turned off.
mod common;

use common::{http, start_with, telnet};
use hourglass_core::config::Config;
use hourglass_core::uid::UidKind;
use hourglass_engine::meta::{MetaUpdate, create_ts_meta, sync_uid_meta, tsuid_for};
use serde_json::{Value, json};

fn config(index: bool) -> Config {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    c.set("tsd.index.enable", if index { "true" } else { "false" });
    c
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn update(v: Value) -> MetaUpdate {
    MetaUpdate::from_json(v.as_object().unwrap()).unwrap()
}

fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// GET `/api/search/<kind>?query=<q>` (and extra parameters): status and JSON.
async fn get(addr: std::net::SocketAddr, kind: &str, q: &str, extra: &str) -> (u16, Value) {
    let r = http(
        addr,
        "GET",
        &format!("/api/search/{kind}?query={}{extra}", encode(q)),
        "",
    )
    .await;
    (r.status, r.json())
}

/// The TSUIDs a `tsuids` search finds (every one: a limit above the total).
async fn tsuids(addr: std::net::SocketAddr, q: &str) -> Vec<String> {
    let (status, body) = get(addr, "tsuids", q, "&limit=1000").await;
    assert_eq!(status, 200, "{q}: {body}");
    assert_eq!(
        body["totalResults"].as_u64().unwrap() as usize,
        body["results"].as_array().unwrap().len(),
        "{q}"
    );
    body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

async fn search_endpoints(backend: &str) {
    let srv = start_with(backend, config(true)).await;
    let addr = srv.addr;
    let t = now() - 120;
    let replies = telnet(
        addr,
        &format!(
            "put sys.cpu.user {t} 1 host=web01 dc=lon\n\
             put sys.cpu.user {t} 2 host=web02 dc=lon\n\
             put sys.cpu.user {t} 3 host=db01 dc=nyc\n\
             put sys.mem {t} 4 host=web01 dc=lon\n"
        ),
    )
    .await;
    assert!(replies.is_empty(), "{backend}: {replies:?}");
    let db = &srv.state.tsdb;
    db.flush().unwrap();
    let tags = |host: &str, dc: &str| {
        vec![
            ("host".to_string(), host.to_string()),
            ("dc".into(), dc.into()),
        ]
    };
    let tsuid = |metric: &str, host: &str, dc: &str| {
        hourglass_core::uid::hex_upper(&tsuid_for(db, metric, &tags(host, dc)).unwrap())
    };
    let cpu_web01 = tsuid("sys.cpu.user", "web01", "lon");
    let cpu_web02 = tsuid("sys.cpu.user", "web02", "lon");
    let cpu_db01 = tsuid("sys.cpu.user", "db01", "nyc");
    let mem_web01 = tsuid("sys.mem", "web01", "lon");
    let mut all = vec![
        cpu_web01.clone(),
        cpu_web02.clone(),
        cpu_db01.clone(),
        mem_web01.clone(),
    ];
    all.sort();
    // Meta data on one series and one UID.
    create_ts_meta(
        db,
        &hourglass_core::uid::parse_hex(&cpu_web02).unwrap(),
        &update(json!({"description": "Web server CPU", "units": "percent",
                       "displayName": "web two", "custom": {"owner": "ops team"}})),
    )
    .unwrap();
    let metric_uid = db
        .uids()
        .get_id(UidKind::Metric, "sys.cpu.user")
        .unwrap()
        .to_bytes(3);
    sync_uid_meta(
        db,
        UidKind::Metric,
        &metric_uid,
        &update(json!({"description": "User CPU time"})),
        false,
    )
    .unwrap();

    // The answer's shape, as Jackson serializes OpenTSDB's SearchQuery: its fields in
    // declaration order, then `startIndex` and `totalResults`, named by getters only.
    let (status, body) = get(addr, "tsmeta", "*", "").await;
    assert_eq!(status, 200, "{backend}: {body}");
    let keys: Vec<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "type",
            "query",
            "metric",
            "limit",
            "time",
            "results",
            "startIndex",
            "totalResults"
        ],
        "{backend}"
    );
    assert_eq!(body["type"], "TSMETA", "{backend}");
    assert_eq!(body["query"], "*", "{backend}");
    assert_eq!(body["limit"], 25, "{backend}");
    assert_eq!(body["startIndex"], 0, "{backend}");
    assert_eq!(body["totalResults"], 4, "{backend}");
    assert!(body["time"].is_number(), "{backend}");
    let results = body["results"].as_array().unwrap();
    let got: Vec<&str> = results
        .iter()
        .map(|r| r["tsuid"].as_str().unwrap())
        .collect();
    assert_eq!(
        got,
        all.iter().map(String::as_str).collect::<Vec<_>>(),
        "{backend}"
    );
    // A series without a ts_meta row answers with defaults; one with it, with its fields.
    let web02 = results
        .iter()
        .find(|r| r["tsuid"] == cpu_web02.as_str())
        .unwrap();
    assert_eq!(web02["description"], "Web server CPU", "{backend}");
    assert_eq!(web02["metric"]["name"], "sys.cpu.user", "{backend}");
    assert_eq!(web02["metric"]["description"], "User CPU time", "{backend}");
    assert_eq!(web02["tags"].as_array().unwrap().len(), 4, "{backend}");
    let web01 = results
        .iter()
        .find(|r| r["tsuid"] == cpu_web01.as_str())
        .unwrap();
    assert_eq!(web01["description"], "", "{backend}");
    assert_eq!(web01["lastReceived"], 0, "{backend}");

    // tsmeta_summary and tsuids shapes.
    let (status, body) = get(addr, "tsmeta_summary", "tags.host:web01", "").await;
    assert_eq!(status, 200, "{backend}");
    assert_eq!(body["type"], "TSMETA_SUMMARY", "{backend}");
    let mut want = [cpu_web01.clone(), mem_web01.clone()];
    want.sort();
    assert_eq!(
        body["results"][0],
        if want[0] == cpu_web01 {
            json!({"tsuid": cpu_web01, "metric": "sys.cpu.user", "tags": {"host": "web01", "dc": "lon"}})
        } else {
            json!({"tsuid": mem_web01, "metric": "sys.mem", "tags": {"host": "web01", "dc": "lon"}})
        },
        "{backend}"
    );
    assert_eq!(body["totalResults"], 2, "{backend}");
    let (_, body) = get(addr, "tsuids", "metric:sys.mem", "").await;
    assert_eq!(body["type"], "TSUIDS", "{backend}");
    assert_eq!(body["results"], json!([mem_web01]), "{backend}");

    // Paging: limit and start_index over GET, limit and startIndex over POST.
    let (_, body) = get(addr, "tsuids", "*", "&limit=2&start_index=1").await;
    assert_eq!(body["results"], json!(all[1..3]), "{backend}");
    assert_eq!(body["totalResults"], 4, "{backend}");
    assert_eq!(
        (body["limit"].clone(), body["startIndex"].clone()),
        (json!(2), json!(1))
    );
    let r = http(
        addr,
        "POST",
        "/api/search/tsuids",
        r#"{"query":"*","limit":2,"startIndex":3}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{backend}");
    let body = r.json();
    assert_eq!(body["results"], json!(all[3..]), "{backend}");
    assert_eq!(body["totalResults"], 4, "{backend}");
    assert_eq!(body["startIndex"], 3, "{backend}");
    let (_, body) = get(addr, "tsuids", "*", "&limit=0").await;
    assert_eq!(body["results"], json!([]), "{backend}");
    assert_eq!(body["totalResults"], 4, "{backend}");
    let (_, body) = get(addr, "tsuids", "*", "&start_index=10").await;
    assert_eq!(body["results"], json!([]), "{backend}");
    // A body read as Jackson fills `SearchQuery`: a number as a `String`'s text, a float
    // truncated to an `int`.
    let r = http(
        addr,
        "POST",
        "/api/search/tsuids",
        r#"{"query":7,"limit":2.9}"#,
    )
    .await;
    assert_eq!(
        (
            r.status,
            r.json()["query"].clone(),
            r.json()["limit"].clone()
        ),
        (200, json!("7"), json!(2)),
        "{backend}: {}",
        r.text()
    );
    // A POST without a query: everything.
    let r = http(addr, "POST", "/api/search/tsuids", r#"{"limit":1}"#).await;
    assert_eq!(r.json()["totalResults"], 4, "{backend}");
    assert!(r.json().get("query").is_none(), "{backend}");
    let r = http(addr, "POST", "/api/search/tsuids", r#"{"query":"  "}"#).await;
    assert_eq!(r.json()["totalResults"], 4, "{backend}");

    // Fields, wildcards, regexes, boolean operators.
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let by_tsuid = format!("tsuid:{cpu_db01}");
    let cases: Vec<(&str, Vec<String>)> = vec![
        ("*:*", all.clone()),
        (
            "metric:sys.cpu.user",
            sorted(vec![cpu_web01.clone(), cpu_web02.clone(), cpu_db01.clone()]),
        ),
        ("metric.name:sys.mem", vec![mem_web01.clone()]),
        (
            "metric:sys.cpu*",
            sorted(vec![cpu_web01.clone(), cpu_web02.clone(), cpu_db01.clone()]),
        ),
        ("metric:SYS.MEM", vec![]),
        ("metric:nosuch", vec![]),
        (&by_tsuid, vec![cpu_db01.clone()]),
        (
            "tags.host:web0?",
            sorted(vec![
                cpu_web01.clone(),
                cpu_web02.clone(),
                mem_web01.clone(),
            ]),
        ),
        ("tags.host:/db[0-9]+/", vec![cpu_db01.clone()]),
        ("tags.host:/db/", vec![]),
        ("tags.name:nyc", vec![cpu_db01.clone()]),
        ("tags.dc:*", all.clone()),
        ("tags.rack:*", vec![]),
        (
            "metric:sys.cpu.user AND NOT tags.dc:nyc",
            sorted(vec![cpu_web01.clone(), cpu_web02.clone()]),
        ),
        (
            "metric:sys.mem OR tags.host:db01",
            sorted(vec![mem_web01.clone(), cpu_db01.clone()]),
        ),
        (
            "metric:sys.mem tags.host:db01",
            sorted(vec![mem_web01.clone(), cpu_db01.clone()]),
        ),
        (
            "+tags.dc:lon -tags.host:web02",
            sorted(vec![cpu_web01.clone(), mem_web01.clone()]),
        ),
        ("-tags.dc:lon", vec![cpu_db01.clone()]),
        (
            "metric:sys.cpu.user && (tags.host:db01 || tags.host:web02)",
            sorted(vec![cpu_web02.clone(), cpu_db01.clone()]),
        ),
        (
            "tags.host:(db01 OR web02)",
            sorted(vec![cpu_web02.clone(), cpu_db01.clone()]),
        ),
        ("web02", vec![cpu_web02.clone()]),
        ("description:\"web server\"", vec![cpu_web02.clone()]),
        ("description:cpu", vec![cpu_web02.clone()]),
        ("description:serv*", vec![cpu_web02.clone()]),
        ("units:percent", vec![cpu_web02.clone()]),
        ("displayName:\"web two\"", vec![cpu_web02.clone()]),
        ("custom.owner:ops", vec![cpu_web02.clone()]),
        ("custom.owner:\"ops team\"", vec![cpu_web02.clone()]),
        ("custom.other:ops", vec![]),
        ("notes:*", vec![]),
    ];
    for (q, want) in &cases {
        assert_eq!(&tsuids(addr, q).await, want, "{backend}: {q}");
    }

    // uidmeta: by type, then name.
    let (status, body) = get(addr, "uidmeta", "name:sys.cpu.user", "").await;
    assert_eq!(status, 200, "{backend}");
    assert_eq!(body["type"], "UIDMETA", "{backend}");
    assert_eq!(body["totalResults"], 1, "{backend}");
    assert_eq!(body["results"][0]["type"], "METRIC", "{backend}");
    assert_eq!(body["results"][0]["uid"], "000001", "{backend}");
    assert_eq!(
        body["results"][0]["description"], "User CPU time",
        "{backend}"
    );
    let names = |body: &Value| -> Vec<String> {
        body["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                format!(
                    "{}:{}",
                    r["type"].as_str().unwrap(),
                    r["name"].as_str().unwrap()
                )
            })
            .collect()
    };
    let (_, body) = get(addr, "uidmeta", "*", "").await;
    assert_eq!(
        names(&body),
        [
            "METRIC:sys.cpu.user",
            "METRIC:sys.mem",
            "TAGK:dc",
            "TAGK:host",
            "TAGV:db01",
            "TAGV:lon",
            "TAGV:nyc",
            "TAGV:web01",
            "TAGV:web02"
        ],
        "{backend}"
    );
    let (_, body) = get(addr, "uidmeta", "type:TAGV AND name:web*", "").await;
    assert_eq!(names(&body), ["TAGV:web01", "TAGV:web02"], "{backend}");
    let (_, body) = get(addr, "uidmeta", "description:\"cpu time\"", "").await;
    assert_eq!(names(&body), ["METRIC:sys.cpu.user"], "{backend}");
    let (_, body) = get(
        addr,
        "uidmeta",
        "uid:000002 AND -type:TAGK AND NOT type:TAGV",
        "",
    )
    .await;
    assert_eq!(names(&body), ["METRIC:sys.mem"], "{backend}");

    // annotation: written over HTTP, found by its fields, gone once deleted.
    let r = http(
        addr,
        "POST",
        "/api/annotation",
        &json!({"tsuid": cpu_web01, "startTime": t, "description": "deploy v2",
                "notes": "rolled back later", "custom": {"ticket": "OPS-7"}})
        .to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{backend}: {}", r.text());
    let r = http(
        addr,
        "POST",
        "/api/annotation",
        &json!({"startTime": t + 60, "description": "network outage"}).to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{backend}: {}", r.text());
    let (status, body) = get(addr, "annotation", "*", "").await;
    assert_eq!(status, 200, "{backend}");
    assert_eq!(body["type"], "ANNOTATION", "{backend}");
    assert_eq!(body["totalResults"], 2, "{backend}");
    // The global note first, then series notes.
    assert_eq!(
        body["results"][0]["description"], "network outage",
        "{backend}"
    );
    assert_eq!(body["results"][1]["tsuid"], cpu_web01.as_str(), "{backend}");
    assert_eq!(body["results"][1]["custom"]["ticket"], "OPS-7", "{backend}");
    let descriptions = |body: &Value| -> Vec<String> {
        body["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["description"].as_str().unwrap().to_string())
            .collect()
    };
    for (q, want) in [
        ("description:deploy", vec!["deploy v2"]),
        ("notes:\"rolled back\"", vec!["deploy v2"]),
        ("custom.ticket:ops-7", vec!["deploy v2"]),
        ("metric:sys.cpu.user", vec!["deploy v2"]),
        (&format!("tsuid:{cpu_web01}") as &str, vec!["deploy v2"]),
        (
            &format!("startTime:[{} TO *]", t + 1),
            vec!["network outage"],
        ),
        (&format!("startTime:{{* TO {}}}", t + 60), vec!["deploy v2"]),
        ("outage OR deploy", vec!["network outage", "deploy v2"]),
        ("metric:sys.mem", vec![]),
    ] {
        let (status, body) = get(addr, "annotation", q, "").await;
        assert_eq!(status, 200, "{backend}: {q}: {body}");
        assert_eq!(descriptions(&body), want, "{backend}: {q}");
    }
    let r = http(
        addr,
        "DELETE",
        &format!("/api/annotation?tsuid={cpu_web01}&start_time={t}"),
        "",
    )
    .await;
    assert_eq!(r.status, 204, "{backend}: {}", r.text());
    let (_, body) = get(addr, "annotation", "description:deploy", "").await;
    assert_eq!(body["totalResults"], 0, "{backend}");

    // Refused requests, in OpenTSDB's words.
    let error = |body: &Value| {
        (
            body["error"]["message"].as_str().unwrap_or("").to_string(),
            body["error"]["details"].as_str().unwrap_or("").to_string(),
        )
    };
    for q in [
        "metric:(",
        "tags.host:\"web",
        "a AND",
        "OR b",
        "metric:x^2",
        "web~",
        "(a",
        "a)",
        "tags.host:/[/",
        ":x",
        "metric:",
    ] {
        let (status, body) = get(addr, "tsuids", q, "").await;
        assert_eq!(status, 400, "{backend}: {q}");
        let (message, details) = error(&body);
        assert_eq!(message, "Unable to parse query", "{backend}: {q}");
        assert!(
            details.contains("at position "),
            "{backend}: {q}: {details}"
        );
    }
    let (status, body) = get(addr, "tsuids", "metric:x^2", "").await;
    assert_eq!(
        (status, error(&body).1),
        (
            400,
            "Boosts (^) are not supported at position 9".to_string()
        )
    );
    let (status, body) = get(addr, "tsuids", "foo:bar", "").await;
    assert_eq!(status, 400, "{backend}");
    assert_eq!(
        error(&body),
        (
            "Unable to parse query".to_string(),
            "Unknown field 'foo' for search type TSUIDS".to_string()
        ),
        "{backend}"
    );
    let (status, body) = get(addr, "uidmeta", "tags.host:web01", "").await;
    assert_eq!(status, 400, "{backend}: {body}");
    let (status, body) = get(addr, "tsuids", "*", "&limit=abc").await;
    assert_eq!(status, 400, "{backend}");
    assert_eq!(
        error(&body).0,
        "Unable to convert 'limit' to a valid number"
    );
    // `Integer.parseInt`: no spaces around the number.
    let (status, body) = get(addr, "tsuids", "*", "&limit=%202").await;
    assert_eq!(status, 400, "{backend}");
    assert_eq!(
        error(&body).0,
        "Unable to convert 'limit' to a valid number"
    );
    let (status, body) = get(addr, "tsuids", "*", "&start_index=x").await;
    assert_eq!(status, 400, "{backend}");
    assert_eq!(
        error(&body).0,
        "Unable to convert 'start_index' to a valid number"
    );
    let (status, body) = get(addr, "tsuids", "*", "&limit=-1").await;
    assert_eq!(status, 400, "{backend}");
    assert_eq!(
        error(&body).0,
        "Unable to convert 'limit' to a valid number"
    );
    let r = http(addr, "GET", "/api/search/tsuids", "").await;
    assert_eq!(r.status, 400, "{backend}");
    assert_eq!(error(&r.json()).0, "Missing parameter <code>query</code>");
    let r = http(addr, "GET", "/api/search/nosuch?query=*", "").await;
    assert_eq!(r.status, 400, "{backend}");
    assert_eq!(
        error(&r.json()),
        (
            "Invalid search query type supplied".to_string(),
            "Unknown type: nosuch".to_string()
        )
    );
    let r = http(
        addr,
        "POST",
        "/api/search/tsuids",
        r#"{"query":"*","limit":"x"}"#,
    )
    .await;
    assert_eq!(r.status, 400, "{backend}");
    assert_eq!(error(&r.json()).0, "Unable to parse the given JSON");
    let r = http(addr, "PUT", "/api/search/tsuids?query=*", "").await;
    assert_eq!(r.status, 400, "{backend}");
    assert_eq!(error(&r.json()).0, "Unsupported method: PUT");
    srv.stop().await;

    // The index off: today's answer.
    let srv = start_with(backend, config(false)).await;
    for kind in [
        "tsmeta",
        "tsmeta_summary",
        "tsuids",
        "uidmeta",
        "annotation",
    ] {
        let (status, body) = get(srv.addr, kind, "*", "").await;
        assert_eq!(status, 400, "{backend}: {kind}");
        assert_eq!(
            error(&body),
            (
                "Searching is not enabled".to_string(),
                "Searching has not been enabled on this TSD".to_string()
            ),
            "{backend}: {kind}"
        );
    }
    srv.stop().await;
}

#[tokio::test]
async fn search_endpoints_on_the_embedded_store() {
    search_endpoints("embedded").await;
}

#[tokio::test]
async fn search_endpoints_on_bigtable() {
    search_endpoints("bigtable").await;
}

/// Notes written before annotation writes kept their index places (an index without the
/// status row's notes marker) make `/api/search/annotation` a 400 naming `tsdb index
/// rebuild` rather than an answer without them; the rebuild places them and the search
/// answers with them.
async fn note_search_waits_for_every_note_placed(backend: &str) {
    use hourglass_engine::index::{self, kind, status};
    use hourglass_storage::{Mutation, ScanRequest};
    let store = common::store_for(backend);
    let srv = common::start_on(std::sync::Arc::clone(&store), config(true)).await;
    let addr = srv.addr;
    let t = now() - 3600;
    telnet(addr, &format!("put sys.cpu.user {t} 1 host=web01\n")).await;
    let r = http(addr, "POST", "/api/annotation", &json!({
        "tsuid": hourglass_core::uid::hex_upper(&tsuid_for(&srv.state.tsdb, "sys.cpu.user", &[("host".into(), "web01".into())]).unwrap()),
        "startTime": t, "description": "deploy"}).to_string()).await;
    assert_eq!(r.status, 200, "{backend}: {}", r.text());
    let (status, body) = get(addr, "annotation", "deploy", "").await;
    assert_eq!(
        (status, body["totalResults"].as_u64()),
        (200, Some(1)),
        "{backend}: {body}"
    );
    // As an index from before notes had places: none, and no marker.
    for row in store
        .scan("tsdb-index", &ScanRequest::prefix(&[kind::NOTE]))
        .unwrap()
    {
        store
            .mutate_row("tsdb-index", &row.unwrap().key, &[Mutation::DeleteRow])
            .unwrap();
    }
    store
        .mutate_row(
            "tsdb-index",
            &index::status_key(),
            &[Mutation::delete("g", status::NOTES_FROM_QUALIFIER.to_vec())],
        )
        .unwrap();
    let (status, body) = get(addr, "annotation", "deploy", "").await;
    assert_eq!(status, 400, "{backend}: {body}");
    assert_eq!(body["error"]["code"], 400, "{backend}");
    assert_eq!(
        body["error"]["message"],
        "The tag index does not list every series note yet (notes written before it kept \
         their places, or while it was off): run tsdb index rebuild",
        "{backend}"
    );
    let (status, _) = get(addr, "tsuids", "*", "").await;
    assert_eq!(status, 200, "{backend}: series searches are not concerned");
    let tsdb = std::sync::Arc::clone(&srv.state.tsdb);
    tokio::task::spawn_blocking(move || {
        let options = index::rebuild::RebuildOptions {
            now_secs: now() as u32,
            ..Default::default()
        };
        index::rebuild::rebuild(&tsdb, &options, |_, _| {}).unwrap();
    })
    .await
    .unwrap();
    let (status, body) = get(addr, "annotation", "deploy", "").await;
    assert_eq!(status, 200, "{backend}: {body}");
    assert_eq!(body["totalResults"], 1, "{backend}");
    assert_eq!(body["results"][0]["startTime"], t, "{backend}");
    srv.stop().await;
}

#[tokio::test]
async fn note_search_waits_for_every_note_placed_on_the_embedded_store() {
    note_search_waits_for_every_note_placed("embedded").await;
}

#[tokio::test]
async fn note_search_waits_for_every_note_placed_on_bigtable() {
    note_search_waits_for_every_note_placed("bigtable").await;
}
