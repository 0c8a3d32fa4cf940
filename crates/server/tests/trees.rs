#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Trees over real sockets on every backend (RFC 0010): `/api/tree`, `/api/tree/rule(s)`,
//! `/api/tree/branch`, `/api/tree/test`, `/api/tree/collisions` and `/api/tree/notmatched`
//! with OpenTSDB 2.4.1's shapes, codes and words, and new series run through the enabled
//! trees as they arrive (`tsd.core.tree.enable_processing`).
#[macro_use]
mod common;

use std::time::{Duration, Instant};

use common::{TestServer, http, start_with};
use hourglass_core::config::Config;
use serde_json::{Value, json};

fn config() -> Config {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    c.set("tsd.core.meta.enable_tsuid_tracking", "true");
    c.set("tsd.core.meta.enable_realtime_ts", "true");
    c.set("tsd.core.tree.enable_processing", "true");
    c
}

async fn call(srv: &TestServer, method: &str, path: &str, body: &str) -> common::Response {
    http(srv.addr, method, path, body).await
}

fn message(r: &common::Response) -> String {
    r.json()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

async fn tsuid(srv: &TestServer, m: &str) -> String {
    let r = call(srv, "GET", &format!("/api/uid/tsmeta?m={m}"), "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()[0]["tsuid"].as_str().unwrap().to_string()
}

/// Waits until the root of `tree` has children (new series are processed in the
/// background).
async fn wait_for_root(srv: &TestServer, tree: u16, children: usize) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = call(srv, "GET", &format!("/api/tree/branch?treeid={tree}"), "").await;
        if r.status == 200
            && r.json()["branches"]
                .as_array()
                .is_some_and(|b| b.len() == children)
        {
            return r.json();
        }
        assert!(
            Instant::now() < deadline,
            "tree {tree} never filled: {}",
            r.text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `path` answers a non-empty JSON object.
async fn poll(srv: &TestServer, path: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = call(srv, "GET", path, "").await;
        if r.status == 200 && r.json().as_object().is_some_and(|o| !o.is_empty()) {
            return r.json();
        }
        assert!(
            Instant::now() < deadline,
            "{path} stayed empty: {}",
            r.text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn definitions_and_rules(backend: &str) {
    let srv = start_with(backend, config()).await;
    // No trees yet.
    let r = call(&srv, "GET", "/api/tree", "").await;
    assert_eq!((r.status, r.json()), (200, json!([])));
    // Created: disabled by default, the next id.
    let r = call(&srv, "POST", "/api/tree", r#"{"name":"Test Tree"}"#).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let t = r.json();
    assert_eq!(t["treeId"], 1);
    assert_eq!(t["name"], "Test Tree");
    assert_eq!(t["enabled"], false);
    assert_eq!(t["rules"], Value::Null);
    let r = call(&srv, "POST", "/api/tree?name=2nd%20Tree&enabled=true", "").await;
    assert_eq!((r.status, r.json()["treeId"].clone()), (200, json!(2)));
    let r = call(&srv, "GET", "/api/tree", "").await;
    let names: Vec<String> = r
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, vec!["Test Tree", "2nd Tree"]);
    let r = call(&srv, "GET", "/api/tree?treeid=2", "").await;
    assert_eq!(r.json()["name"], "2nd Tree");
    assert_eq!(r.json()["enabled"], true);
    // Edits: POST merges, PUT replaces, nothing given is 304.
    let r = call(
        &srv,
        "POST",
        "/api/tree",
        r#"{"treeId":1,"description":"Hello World"}"#,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["name"], "Test Tree");
    assert_eq!(r.json()["description"], "Hello World");
    let r = call(&srv, "POST", "/api/tree", r#"{"treeId":1}"#).await;
    assert_eq!(r.status, 304);
    let r = call(&srv, "PUT", "/api/tree?treeid=1&description=HelloWorld", "").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["name"], "");
    assert_eq!(r.json()["description"], "HelloWorld");
    for (method, path, body, status, msg) in [
        (
            "GET",
            "/api/tree?treeid=3",
            "",
            404,
            "Unable to locate tree: 3",
        ),
        (
            "POST",
            "/api/tree?treeid=3&name=x",
            "",
            404,
            "Unable to locate tree: 3",
        ),
        ("GET", "/api/tree?treeid=70000", "", 400, "Invalid Tree ID"),
        (
            "GET",
            "/api/tree?treeid=abc",
            "",
            400,
            "Unable to parse 'tree' value",
        ),
        (
            "POST",
            "/api/tree",
            r#"{"description":"no name"}"#,
            400,
            "Tree was missing the name",
        ),
        (
            "PATCH",
            "/api/tree?treeid=1",
            "",
            400,
            "Unsupported HTTP request method",
        ),
        (
            "GET",
            "/api/tree/nope",
            "",
            404,
            "This endpoint is not supported",
        ),
    ] {
        let r = call(&srv, method, path, body).await;
        assert_eq!(
            (r.status, message(&r)),
            (status, msg.to_string()),
            "{method} {path}"
        );
    }
    // Rules: one at a time, and a whole set.
    let r = call(
        &srv,
        "POST",
        "/api/tree/rule",
        r#"{"treeId":1,"level":1,"order":0,"type":"metric","description":"Testing","separator":"\\."}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.text(),
        r#"{"type":"METRIC","field":"","regex":"","separator":"\\.","description":"Testing","notes":"","level":1,"order":0,"customField":"","regexGroupIdx":0,"displayFormat":"","treeId":1}"#
    );
    let r = call(
        &srv,
        "POST",
        "/api/tree/rule?treeid=1&level=1&order=0&notes=Metric%20rule",
        "",
    )
    .await;
    assert_eq!(r.json()["description"], "Testing");
    assert_eq!(r.json()["notes"], "Metric rule");
    let r = call(
        &srv,
        "POST",
        "/api/tree/rule",
        r#"{"treeId":1,"level":1,"order":0}"#,
    )
    .await;
    assert_eq!(r.status, 304);
    let r = call(
        &srv,
        "PUT",
        "/api/tree/rule",
        r#"{"treeId":1,"level":1,"order":0,"description":"Testing","type":"metric"}"#,
    )
    .await;
    assert_eq!(r.json()["notes"], "", "PUT replaces");
    let r = call(&srv, "GET", "/api/tree/rule?treeid=1&level=1&order=0", "").await;
    assert_eq!((r.status, r.json()["type"].clone()), (200, json!("METRIC")));
    for (method, path, body, status, msg) in [
        (
            "GET",
            "/api/tree/rule?treeid=1&level=5&order=0",
            "",
            404,
            "Unable to locate rule: [1:5:0:null]",
        ),
        (
            "GET",
            "/api/tree/rule?treeid=9&level=0&order=0",
            "",
            404,
            "Unable to locate tree: 9",
        ),
        (
            "GET",
            "/api/tree/rule?level=0&order=0",
            "",
            400,
            "Missing parameter <code>treeid</code>",
        ),
        (
            "GET",
            "/api/tree/rule?treeid=1&order=0",
            "",
            400,
            "Missing parameter <code>level</code>",
        ),
        (
            "POST",
            "/api/tree/rule",
            r#"{"treeId":1,"level":2,"order":0,"description":"x"}"#,
            400,
            "Missing rule type",
        ),
        (
            "POST",
            "/api/tree/rule",
            r#"{"treeId":1,"level":2,"order":0,"type":"tagk"}"#,
            400,
            "Missing field name required for TAGK rule",
        ),
        (
            "POST",
            "/api/tree/rule?treeid=1&level=2&order=0&type=bogus",
            "",
            400,
            "Unable to parse the 'type' parameter: Unrecognized rule type",
        ),
        (
            "POST",
            "/api/tree/rules",
            r#"[{"treeId":1,"level":0,"order":0,"type":"METRIC"},{"treeId":2,"level":0,"order":1,"type":"METRIC"}]"#,
            400,
            "All rules must belong to the same tree",
        ),
        ("POST", "/api/tree/rules", "[]", 400, "Missing tree rules"),
        (
            "DELETE",
            "/api/tree/rule?treeid=1&level=4&order=0",
            "",
            404,
            "Unable to locate rule: [1:4:0:null]",
        ),
    ] {
        let r = call(&srv, method, path, body).await;
        assert_eq!(
            (r.status, message(&r)),
            (status, msg.to_string()),
            "{method} {path} {body}"
        );
    }
    // A whole set: PUT replaces the stored rules.
    let r = call(
        &srv,
        "PUT",
        "/api/tree/rules",
        r#"[{"treeId":1,"level":0,"order":0,"type":"tagk","field":"host"},{"treeId":1,"level":1,"order":0,"type":"METRIC","separator":"\\."}]"#,
    )
    .await;
    assert_eq!(r.status, 204, "{}", r.text());
    let rules = call(&srv, "GET", "/api/tree?treeid=1", "").await.json()["rules"].clone();
    assert_eq!(rules["0"]["0"]["field"], "host");
    assert_eq!(rules["1"]["0"]["separator"], "\\.");
    assert_eq!(rules["1"]["0"]["description"], "", "replaced, not merged");
    let r = call(
        &srv,
        "DELETE",
        "/api/tree/rule?treeid=1&level=1&order=0",
        "",
    )
    .await;
    assert_eq!(r.status, 204);
    let r = call(&srv, "DELETE", "/api/tree/rules?treeid=1", "").await;
    assert_eq!(r.status, 204);
    assert_eq!(
        call(&srv, "GET", "/api/tree?treeid=1", "").await.json()["rules"],
        Value::Null
    );
    // Deleting the definition.
    let r = call(
        &srv,
        "DELETE",
        "/api/tree",
        r#"{"treeId":2,"definition":true}"#,
    )
    .await;
    assert_eq!(r.status, 204);
    assert_eq!(
        call(&srv, "GET", "/api/tree?treeid=2", "").await.status,
        404
    );
    srv.stop().await;
}

async fn new_series_fill_the_enabled_trees(backend: &str) {
    let srv = start_with(backend, config()).await;
    srv.state.tsdb.start_background();
    // Tree 1: host, then the metric split on dots; failures stored.
    let r = call(
        &srv,
        "POST",
        "/api/tree",
        r#"{"name":"hosts","enabled":"true","storeFailures":true}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = call(
        &srv,
        "POST",
        "/api/tree/rules",
        r#"[{"treeId":1,"level":0,"order":0,"type":"TAGK","field":"host"},{"treeId":1,"level":1,"order":0,"type":"METRIC","separator":"\\."}]"#,
    )
    .await;
    assert_eq!(r.status, 204, "{}", r.text());
    // Tree 2: strict, by datacenter then metric.
    call(
        &srv,
        "POST",
        "/api/tree",
        r#"{"name":"dcs","enabled":true,"strictMatch":true,"storeFailures":true}"#,
    )
    .await;
    call(
        &srv,
        "POST",
        "/api/tree/rules",
        r#"[{"treeId":2,"level":0,"order":0,"type":"TAGK","field":"dc"},{"treeId":2,"level":1,"order":0,"type":"METRIC"}]"#,
    )
    .await;
    // Tree 3: disabled, never filled.
    call(&srv, "POST", "/api/tree", r#"{"name":"off"}"#).await;
    call(
        &srv,
        "POST",
        "/api/tree/rule",
        r#"{"treeId":3,"level":0,"order":0,"type":"METRIC"}"#,
    )
    .await;
    let lines = "put sys.cpu.user 1356998400 1 host=web01 dc=lga\n\
                 put sys.cpu.user 1356998400 1 host=web02 dc=lga\n\
                 put sys.mem.free 1356998400 1 host=db01\n";
    assert_eq!(common::telnet(srv.addr, lines).await, Vec::<String>::new());
    let root = wait_for_root(&srv, 1, 3).await;
    assert_eq!(root["displayName"], "ROOT");
    assert_eq!(root["branchId"], "0001");
    assert_eq!(root["depth"], 0);
    let hosts: Vec<&str> = root["branches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["displayName"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, vec!["db01", "web01", "web02"]);
    // Down web01 / sys / cpu: the leaf "user" is the series.
    let mut branch = root["branches"][1].clone();
    for name in ["sys", "cpu"] {
        let id = branch["branchId"].as_str().unwrap().to_string();
        let r = call(&srv, "GET", &format!("/api/tree/branch?branch={id}"), "").await;
        assert_eq!(r.status, 200, "{}", r.text());
        branch = r.json()["branches"][0].clone();
        assert_eq!(branch["displayName"], name);
    }
    // sys under web01 under the root: tree id, then the Java hashes of the names.
    assert_eq!(branch["branchId"], "000106BC4C550001BECD000181A8");
    let id = branch["branchId"].as_str().unwrap().to_string();
    let r = call(&srv, "GET", &format!("/api/tree/branch?branch={id}"), "").await;
    let user = tsuid(&srv, "sys.cpu.user{host=web01,dc=lga}").await;
    assert_eq!(
        r.json()["leaves"],
        json!([{"metric":"sys.cpu.user","tags":{"dc":"lga","host":"web01"},"tsuid":user,"displayName":"user"}])
    );
    assert_eq!(
        r.json()["path"],
        json!({"0":"ROOT","1":"web01","2":"sys","3":"cpu"})
    );
    assert_eq!(r.json()["depth"], 3);
    // The strict tree: the series without a datacenter is not matched, and recorded.
    let root2 = wait_for_root(&srv, 2, 1).await;
    assert_eq!(root2["branches"][0]["displayName"], "lga");
    let free = tsuid(&srv, "sys.mem.free{host=db01}").await;
    let r = poll(&srv, "/api/tree/notmatched?treeid=2").await;
    assert_eq!(r, json!({ free.clone(): "[2:0:0:TAGK]" }));
    let r = call(
        &srv,
        "POST",
        "/api/tree/notmatched",
        &format!(r#"{{"treeId":2,"tsuids":["{user}"]}}"#),
    )
    .await;
    assert_eq!(r.json(), json!({}));
    // The disabled tree has no root.
    let r = call(&srv, "GET", "/api/tree/branch?treeid=3", "").await;
    assert_eq!(
        (r.status, message(&r)),
        (
            404,
            "Unable to locate branch '0003' for tree '3'".to_string()
        )
    );
    // A second series on the same leaf of tree 1 collides.
    let lines = "put sys.cpu.user 1356998400 1 host=web01 dc=lon\n";
    assert_eq!(common::telnet(srv.addr, lines).await, Vec::<String>::new());
    let lon = tsuid(&srv, "sys.cpu.user{host=web01,dc=lon}").await;
    let r = poll(&srv, "/api/tree/collisions?treeid=1").await;
    assert_eq!(r, json!({ lon.clone(): user.clone() }));
    let r = call(
        &srv,
        "GET",
        &format!("/api/tree/collisions?treeid=1&tsuids={user}"),
        "",
    )
    .await;
    assert_eq!(r.json(), json!({}));
    // A test walk stores nothing and says what each rule did.
    let r = call(
        &srv,
        "GET",
        &format!("/api/tree/test?treeid=1&tsuids={lon},000001"),
        "",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let walk = &r.json()[&lon];
    assert_eq!(walk["meta"]["tsuid"], lon);
    assert_eq!(walk["branch"]["displayName"], "ROOT");
    assert_eq!(walk["branch"]["branches"][0]["displayName"], "web01");
    assert_eq!(walk["messages"][0], "Processing rule: [1:0:0:TAGK]");
    assert_eq!(
        walk["messages"][1],
        "Matched tagk [host] for rule: [1:0:0:TAGK]"
    );
    assert_eq!(
        r.json()["000001"],
        json!({"branch":null,"meta":null,"messages":["Unable to locate TSUID meta data"]})
    );
    // The answer is a `HashMap` made for the TSUIDs asked, each entry a `HashMap` of
    // `branch`, `meta` and `messages`: in Java's orders.
    let r = call(
        &srv,
        "GET",
        "/api/tree/test?treeid=1&tsuids=000001,000002,000003",
        "",
    )
    .await;
    let none = r#"{"meta":null,"messages":["Unable to locate TSUID meta data"],"branch":null}"#;
    assert_eq!(
        r.text(),
        format!(r#"{{"000003":{none},"000002":{none},"000001":{none}}}"#)
    );
    // `tsuids` split as Java's `split(",")`: a trailing comma adds nothing.
    let r = call(&srv, "GET", "/api/tree/test?treeid=1&tsuids=000001,", "").await;
    assert_eq!(
        (r.status, r.text()),
        (200, format!(r#"{{"000001":{none}}}"#))
    );
    // `treeid` and a rule's numbers read by `Integer.parseInt`: no spaces.
    for (path, msg) in [
        ("/api/tree?treeid=%201", "Unable to parse 'tree' value"),
        (
            "/api/tree/rule?treeid=%201&level=0&order=0",
            "Unable to parse 'tree' value",
        ),
        (
            "/api/tree/rule?treeid=1&level=%200&order=0",
            "Unable to parse the 'level' parameter",
        ),
        (
            "/api/tree/rule?treeid=1&level=0&order=0%20",
            "Unable to parse the 'order' parameter",
        ),
    ] {
        let r = call(&srv, "GET", path, "").await;
        assert_eq!((r.status, message(&r)), (400, msg.to_string()), "{path}");
    }
    for (path, status, msg) in [
        (
            "/api/tree/test?treeid=1",
            400,
            "Missing or empty TSUID list",
        ),
        (
            "/api/tree/test?tsuids=01",
            400,
            "Missing parameter <code>treeid</code>",
        ),
        (
            "/api/tree/test?treeid=7&tsuids=01",
            404,
            "Unable to locate tree: 7",
        ),
        (
            "/api/tree/collisions?treeid=7",
            404,
            "Unable to locate tree: 7",
        ),
        (
            "/api/tree/branch",
            400,
            "Missing or invalid branch and tree IDs",
        ),
        ("/api/tree/branch?branch=01", 400, "Branch ID was too short"),
        (
            "/api/tree/branch?branch=0001FFFFFFFF",
            404,
            "Unable to locate branch '0001FFFFFFFF' for tree '1'",
        ),
    ] {
        let r = call(&srv, "GET", path, "").await;
        assert_eq!((r.status, message(&r)), (status, msg.to_string()), "{path}");
    }
    let r = call(&srv, "POST", "/api/tree/branch?treeid=1", "").await;
    assert_eq!(
        (r.status, message(&r)),
        (400, "Unsupported HTTP request method".to_string())
    );
    // Deleting a tree's results keeps its definition; the root goes with them.
    let r = call(&srv, "DELETE", "/api/tree?treeid=1", "").await;
    assert_eq!(r.status, 204);
    assert_eq!(
        call(&srv, "GET", "/api/tree/branch?treeid=1", "")
            .await
            .status,
        404
    );
    assert_eq!(
        call(&srv, "GET", "/api/tree/collisions?treeid=1", "")
            .await
            .json(),
        json!({})
    );
    assert_eq!(
        call(&srv, "GET", "/api/tree?treeid=1", "").await.json()["name"],
        "hosts"
    );
    srv.stop().await;
}

/// A TSMeta created over `/api/uid/tsmeta` goes through the enabled trees at once, as in
/// 2.4.1 (here without real-time tracking, so nothing else creates it).
async fn created_ts_meta_goes_through_the_trees(backend: &str) {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    c.set("tsd.core.tree.enable_processing", "true");
    let srv = start_with(backend, c).await;
    call(&srv, "POST", "/api/tree", r#"{"name":"m","enabled":true}"#).await;
    let r = call(
        &srv,
        "POST",
        "/api/tree/rules",
        r#"[{"treeId":1,"level":0,"order":0,"type":"TAGK","field":"host"},{"treeId":1,"level":1,"order":0,"type":"METRIC"}]"#,
    )
    .await;
    assert_eq!(r.status, 204, "{}", r.text());
    let lines = "put sys.cpu.user 1356998400 1 host=web01\n";
    assert_eq!(common::telnet(srv.addr, lines).await, Vec::<String>::new());
    assert_eq!(
        call(&srv, "GET", "/api/tree/branch?treeid=1", "")
            .await
            .status,
        404
    );
    let r = call(
        &srv,
        "POST",
        "/api/uid/tsmeta?m=sys.cpu.user{host=web01}&create=true",
        "{}",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = call(&srv, "GET", "/api/tree/branch?treeid=1", "").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["branches"][0]["displayName"], "web01");
    srv.stop().await;
}

on_every_backend!(
    definitions_and_rules,
    new_series_fill_the_enabled_trees,
    created_ts_meta_goes_through_the_trees
);
