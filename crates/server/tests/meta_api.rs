#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Metadata endpoints over real sockets on every backend: `/api/suggest`,
//! `/api/search/lookup`, `/api/uid/{assign,rename,uidmeta,tsmeta}` and `/api/annotation(s)`,
//! each with good and bad input and OpenTSDB's status codes and messages.
mod common;

use common::{TestServer, http, start, start_with};
use hourglass_core::config::Config;
use serde_json::{Value, json};

async fn load(srv: &TestServer) {
    let mut lines = String::new();
    for i in 0..10 {
        let t = 1356998430 + i * 30;
        lines.push_str(&format!("put sys.cpu.user {t} {i} host=web01 dc=lga\n"));
        lines.push_str(&format!("put sys.cpu.user {t} {i} host=web02 dc=lga\n"));
        lines.push_str(&format!("put sys.cpu.system {t} {i} host=web01\n"));
        lines.push_str(&format!("put sys.mem.free {t} {i} host=db01\n"));
    }
    assert_eq!(common::telnet(srv.addr, &lines).await, Vec::<String>::new());
}

async fn get(srv: &TestServer, path: &str) -> common::Response {
    http(srv.addr, "GET", path, "").await
}

fn error_message(r: &common::Response) -> String {
    r.json()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

async fn suggest(backend: &str) {
    let srv = start(backend).await;
    load(&srv).await;
    // Grafana's health check.
    let r = get(&srv, "/api/suggest?q=cpu&type=metrics").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), json!([]), "prefix match, not infix");
    let r = get(&srv, "/api/suggest?type=metrics&q=sys.").await;
    assert_eq!(
        r.json(),
        json!(["sys.cpu.system", "sys.cpu.user", "sys.mem.free"])
    );
    assert_eq!(
        get(&srv, "/api/suggest?type=metrics&q=sys.&max=2")
            .await
            .json(),
        json!(["sys.cpu.system", "sys.cpu.user"])
    );
    assert_eq!(
        get(&srv, "/api/suggest?type=metrics").await.json(),
        json!(["sys.cpu.system", "sys.cpu.user", "sys.mem.free"]),
        "an empty prefix lists names"
    );
    assert_eq!(
        get(&srv, "/api/suggest?type=tagk&q=").await.json(),
        json!(["dc", "host"])
    );
    assert_eq!(
        get(&srv, "/api/suggest?type=tagv&q=web").await.json(),
        json!(["web01", "web02"])
    );
    let r = http(
        srv.addr,
        "POST",
        "/api/suggest",
        r#"{"type":"tagv","q":"d","max":10}"#,
    )
    .await;
    assert_eq!(r.json(), json!(["db01"]));
    for (req, status, msg) in [
        (
            "/api/suggest?q=sys",
            400,
            "Missing parameter <code>type</code>",
        ),
        (
            "/api/suggest?type=metric",
            400,
            "Invalid 'type' parameter:metric",
        ),
        (
            "/api/suggest?type=metrics&max=x",
            400,
            "Unable to parse 'max' as a number",
        ),
    ] {
        let r = get(&srv, req).await;
        assert_eq!(
            (r.status, error_message(&r).as_str()),
            (status, msg),
            "{req}"
        );
    }
    let r = http(srv.addr, "POST", "/api/suggest", r#"{"q":"s"}"#).await;
    assert_eq!(
        (r.status, error_message(&r)),
        (400, "Missing 'type' parameter".into())
    );
    let r = http(srv.addr, "POST", "/api/suggest", "{nope").await;
    assert_eq!(
        (r.status, error_message(&r)),
        (400, "Unable to parse the given JSON".into())
    );
    let r = http(srv.addr, "DELETE", "/api/suggest?type=metrics", "").await;
    assert_eq!(r.status, 405);
    srv.stop().await;
}

async fn lookup(backend: &str) {
    let srv = start(backend).await;
    load(&srv).await;
    srv.state.tsdb.flush().unwrap();
    let r = get(&srv, "/api/search/lookup?m=sys.cpu.user").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "type",
            "metric",
            "tags",
            "limit",
            "time",
            "results",
            "startIndex",
            "totalResults"
        ]
    );
    assert_eq!(v["type"], "LOOKUP");
    assert_eq!(v["limit"], 25);
    assert_eq!(v["totalResults"], 2, "each series once, not once per row");
    let first = &v["results"][0];
    assert_eq!(first["metric"], "sys.cpu.user");
    assert_eq!(first["tags"], json!({"host": "web01", "dc": "lga"}));
    assert_eq!(first["tsuid"].as_str().unwrap().len(), 30);

    let n = |v: Value| v["totalResults"].as_u64().unwrap();
    assert_eq!(
        n(get(&srv, "/api/search/lookup?m=sys.cpu.user{host=web02}")
            .await
            .json()),
        1
    );
    assert_eq!(
        n(get(&srv, "/api/search/lookup?m=sys.cpu.user{host=*}")
            .await
            .json()),
        2
    );
    assert_eq!(
        n(get(&srv, "/api/search/lookup?m={host=web01}").await.json()),
        2
    );
    assert_eq!(
        n(get(&srv, "/api/search/lookup?m={=web01}").await.json()),
        2
    );
    assert_eq!(n(get(&srv, "/api/search/lookup?m=*{dc=*}").await.json()), 2);
    assert_eq!(
        n(get(&srv, "/api/search/lookup?m=sys.cpu.user&limit=1")
            .await
            .json()),
        1
    );
    let r = http(
        srv.addr,
        "POST",
        "/api/search/lookup",
        r#"{"metric":"sys.cpu.user","tags":[{"key":"host","value":"web01"}],"useMeta":false}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["results"][0]["tags"]["host"], "web01");
    assert_eq!(r.json()["totalResults"], 1);

    let r = get(&srv, "/api/search/lookup?m=nope").await;
    assert_eq!(r.status, 404);
    assert_eq!(error_message(&r), "Unable to resolve one or more UIDs");
    assert_eq!(
        r.json()["error"]["details"],
        "No such name for 'metrics': 'nope'"
    );
    let r = get(&srv, "/api/search/lookup").await;
    assert_eq!(
        (r.status, error_message(&r)),
        (400, "Missing parameter <code>m</code>".into())
    );
    let r = get(&srv, "/api/search/lookup?m=a{b").await;
    assert_eq!(
        (r.status, error_message(&r)),
        (400, "Unable to parse query".into())
    );
    let r = get(&srv, "/api/search/lookup?m=a&limit=x").await;
    assert_eq!(
        error_message(&r),
        "Unable to convert 'limit' to a valid number"
    );
    let r = http(srv.addr, "POST", "/api/search/lookup", r#"{"metric":null}"#).await;
    assert_eq!(
        error_message(&r),
        "Missing metric and tags. Please supply at least one value."
    );
    let r = get(&srv, "/api/search/tsmeta?query=name:*").await;
    assert_eq!(
        (r.status, error_message(&r)),
        (400, "Searching is not enabled".into())
    );
    let r = get(&srv, "/api/search/bogus").await;
    assert_eq!(error_message(&r), "Invalid search query type supplied");
    let r = http(srv.addr, "PUT", "/api/search/lookup?m=a", "").await;
    assert_eq!(
        (r.status, error_message(&r)),
        (400, "Unsupported method: PUT".into())
    );
    srv.stop().await;
}

fn tracking_config() -> Config {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    c.set("tsd.core.meta.enable_tsuid_tracking", "true");
    c.set("tsd.core.meta.enable_realtime_ts", "true");
    c.set("tsd.core.meta.enable_tsuid_incrementing", "true");
    c.set("tsd.core.meta.enable_realtime_uid", "true");
    c
}

async fn meta_tracking_and_tsmeta(backend: &str) {
    let srv = start_with(backend, tracking_config()).await;
    load(&srv).await;
    // Lookups read the meta table when tracking is on, and find series as they arrive,
    // before their points are flushed.
    let v = get(&srv, "/api/search/lookup?m=sys.cpu.user").await.json();
    assert_eq!(v["totalResults"], 2, "{v}");
    srv.state.tsdb.flush().unwrap();
    let v = get(&srv, "/api/search/lookup?m=sys.cpu.user").await.json();
    assert_eq!(v["totalResults"], 2, "{v}");
    let tsuid = v["results"][0]["tsuid"].as_str().unwrap().to_string();

    let r = get(&srv, &format!("/api/uid/tsmeta?tsuid={tsuid}")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let m = r.json();
    let keys: Vec<&str> = m.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "tsuid",
            "metric",
            "tags",
            "description",
            "notes",
            "created",
            "units",
            "retention",
            "max",
            "min",
            "displayName",
            "dataType",
            "lastReceived",
            "totalDatapoints"
        ]
    );
    assert_eq!(m["tsuid"], tsuid.as_str());
    assert_eq!(m["totalDatapoints"], 10);
    assert_eq!(m["max"], "NaN");
    assert!(m["created"].as_i64().unwrap() > 1_600_000_000);
    assert_eq!(m["metric"]["name"], "sys.cpu.user");
    assert_eq!(m["metric"]["type"], "METRIC");
    assert!(
        m["metric"]["created"].as_i64().unwrap() > 1_600_000_000,
        "real-time UID meta"
    );
    assert_eq!(m["tags"].as_array().unwrap().len(), 4);

    // More points count up.
    let lines = "put sys.cpu.user 1356999000 1 host=web01 dc=lga\n";
    common::telnet(srv.addr, lines).await;
    srv.state.tsdb.flush().unwrap();
    let m = get(&srv, &format!("/api/uid/tsmeta?tsuid={tsuid}"))
        .await
        .json();
    assert_eq!(m["totalDatapoints"], 11);

    let list = get(&srv, "/api/uid/tsmeta?m=sys.cpu.user{host=web02}")
        .await
        .json();
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["tags"][1]["name"], "web02");

    // POST merges, PUT replaces, no change is 304.
    let body = json!({"tsuid": tsuid, "description": "CPU", "units": "%"});
    let r = http(srv.addr, "POST", "/api/uid/tsmeta", &body.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["description"], "CPU");
    let body = json!({"tsuid": tsuid, "notes": "n"});
    let r = http(srv.addr, "POST", "/api/uid/tsmeta", &body.to_string()).await;
    assert_eq!(
        (r.json()["description"].clone(), r.json()["notes"].clone()),
        (json!("CPU"), json!("n"))
    );
    let r = http(srv.addr, "PUT", "/api/uid/tsmeta", &body.to_string()).await;
    assert_eq!(
        r.json()["description"],
        "",
        "PUT resets fields it does not give"
    );
    assert_eq!(r.json()["totalDatapoints"], 11);
    let body = json!({"tsuid": tsuid});
    let r = http(srv.addr, "POST", "/api/uid/tsmeta", &body.to_string()).await;
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());
    let r = http(
        srv.addr,
        "POST",
        "/api/uid/tsmeta",
        r#"{"description":"x"}"#,
    )
    .await;
    // Without a TSUID the series is named by `m`, which is then required.
    assert_eq!(
        (r.status, error_message(&r)),
        (400, "Missing parameter <code>m</code>".into())
    );

    // Errors.
    let r = get(&srv, "/api/uid/tsmeta?tsuid=000009000009000009").await;
    assert_eq!(
        (r.status, error_message(&r)),
        (404, "Could not find Timeseries meta data".into())
    );
    let r = get(&srv, "/api/uid/tsmeta?tsuid=zz").await;
    assert_eq!(r.status, 400);
    let r = get(&srv, "/api/uid/tsmeta?m=nope").await;
    assert_eq!(
        (r.status, error_message(&r)),
        (404, "Unable to find one of the UIDs".into())
    );

    // Delete removes the meta data (the counter stays).
    let r = http(
        srv.addr,
        "DELETE",
        &format!("/api/uid/tsmeta?tsuid={tsuid}"),
        "",
    )
    .await;
    assert_eq!(r.status, 204);
    let r = get(&srv, &format!("/api/uid/tsmeta?tsuid={tsuid}")).await;
    assert_eq!(r.status, 404);
    let r = http(srv.addr, "DELETE", "/api/uid/tsmeta", "").await;
    assert_eq!(error_message(&r), "Unable to delete TSMeta information");
    srv.stop().await;
}

async fn tsmeta_create(backend: &str) {
    let srv = start(backend).await;
    load(&srv).await;
    let path = "/api/uid/tsmeta?m=sys.mem.free{host=db01}";
    let r = http(srv.addr, "POST", path, r#"{"description":"free"}"#).await;
    assert_eq!(
        (r.status, error_message(&r)),
        (
            400,
            "Could not find TSMeta, specify \"create=true\" to create a new one.".into()
        )
    );
    let r = http(
        srv.addr,
        "POST",
        &format!("{path}&create=true"),
        r#"{"description":"free"}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["description"], "free");
    assert_eq!(r.json()["totalDatapoints"], 0);
    let list = http(srv.addr, "GET", "/api/uid/tsmeta?m=sys.mem.free", "")
        .await
        .json();
    assert_eq!(list[0]["description"], "free");
    srv.stop().await;
}

async fn assign_and_rename(backend: &str) {
    let srv = start(backend).await;
    load(&srv).await;
    let r = http(
        srv.addr,
        "GET",
        "/api/uid/assign?metric=new.metric,sys.cpu.user&tagv=v1",
        "",
    )
    .await;
    assert_eq!(r.status, 400, "one name already existed");
    let v = r.json();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["metric", "metric_errors", "tagv"]);
    assert_eq!(v["metric"]["new.metric"], "000004");
    assert_eq!(
        v["metric_errors"]["sys.cpu.user"],
        "Name already exists with UID: 000001"
    );
    assert!(v["tagv"]["v1"].as_str().unwrap().len() == 6);
    let r = http(
        srv.addr,
        "POST",
        "/api/uid/assign",
        r#"{"tagk":["rack"],"metric":["bad name"],"bogus":["x"]}"#,
    )
    .await;
    assert_eq!(r.status, 400);
    let v = r.json();
    assert_eq!(v["tagk"]["rack"], "000003");
    assert_eq!(
        v["metric_errors"]["bad name"],
        "Invalid metric (\"bad name\"): illegal character:  "
    );
    assert_eq!(v["bogus_errors"]["x"], "Unknown type name");
    let r = http(srv.addr, "POST", "/api/uid/assign", r#"{"tagk":["zone"]}"#).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), json!({"tagk": {"zone": "000004"}}));
    let r = http(srv.addr, "GET", "/api/uid/assign", "").await;
    assert_eq!(
        (r.status, error_message(&r)),
        (400, "Missing values to assign UIDs".into())
    );
    let r = http(srv.addr, "POST", "/api/uid/assign", "").await;
    assert_eq!(error_message(&r), "Missing message content");
    let r = http(srv.addr, "PUT", "/api/uid/assign", "").await;
    assert_eq!(r.status, 405);

    // Rename.
    let r = http(
        srv.addr,
        "GET",
        "/api/uid/rename?metric=sys.mem.free&name=mem.free",
        "",
    )
    .await;
    assert_eq!((r.status, r.json()), (200, json!({"result": "true"})));
    let r = http(srv.addr, "GET", "/api/suggest?type=metrics&q=mem", "").await;
    assert_eq!(r.json(), json!(["mem.free"]));
    let r = http(
        srv.addr,
        "POST",
        "/api/uid/rename",
        r#"{"metric":"nope","name":"x"}"#,
    )
    .await;
    assert_eq!(
        (r.status, r.json()),
        (
            400,
            json!({"result": "false", "error": "Name(\"nope\") does not exist"})
        )
    );
    let r = http(
        srv.addr,
        "POST",
        "/api/uid/rename",
        r#"{"tagv":"web01","name":"web02"}"#,
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(
        r.json()["error"]
            .as_str()
            .unwrap()
            .contains("new name already assigned ID=[0, 0, 3]"),
        "{}",
        r.text()
    );
    let r = http(srv.addr, "GET", "/api/uid/rename?metric=a", "").await;
    assert_eq!(
        (r.status, error_message(&r)),
        (400, "Missing necessary values to rename UID".into())
    );
    let r = http(srv.addr, "GET", "/api/uid/other", "").await;
    assert_eq!(r.status, 501);
    srv.stop().await;
}

async fn uidmeta(backend: &str) {
    let srv = start(backend).await;
    load(&srv).await;
    let r = get(&srv, "/api/uid/uidmeta?uid=000001&type=metric").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "uid",
            "type",
            "name",
            "description",
            "notes",
            "created",
            "custom",
            "displayName"
        ]
    );
    assert_eq!(
        v,
        json!({"uid":"000001","type":"METRIC","name":"sys.cpu.user","description":"",
               "notes":"","created":0,"custom":null,"displayName":""})
    );
    let body =
        json!({"uid":"000001","type":"metric","description":"User CPU","custom":{"owner":"ops"}});
    let r = http(srv.addr, "POST", "/api/uid/uidmeta", &body.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["description"], "User CPU");
    assert_eq!(r.json()["custom"], json!({"owner": "ops"}));
    let r = http(
        srv.addr,
        "POST",
        "/api/uid/uidmeta?uid=000001&type=metric&notes=hello",
        "",
    )
    .await;
    assert_eq!(r.json()["notes"], "hello");
    assert_eq!(r.json()["description"], "User CPU", "POST merges");
    let body = json!({"uid":"000001","type":"metric","displayName":"CPU"});
    let r = http(srv.addr, "PUT", "/api/uid/uidmeta", &body.to_string()).await;
    assert_eq!(r.json()["description"], "", "PUT replaces");
    assert_eq!(r.json()["displayName"], "CPU");
    let body = json!({"uid":"000001","type":"metric","description":""});
    let r = http(srv.addr, "POST", "/api/uid/uidmeta", &body.to_string()).await;
    assert_eq!(r.status, 304);

    let r = get(&srv, "/api/uid/uidmeta?uid=0000FF&type=metric").await;
    assert_eq!(
        (r.status, error_message(&r)),
        (404, "Could not find the requested UID".into())
    );
    assert_eq!(
        r.json()["error"]["details"],
        "No such unique ID for 'metrics': [0, 0, -1]"
    );
    let r = get(&srv, "/api/uid/uidmeta?uid=00000G&type=metric").await;
    assert_eq!(r.status, 400);
    let r = get(&srv, "/api/uid/uidmeta?uid=000001").await;
    assert_eq!(error_message(&r), "Missing parameter <code>type</code>");
    let r = get(&srv, "/api/uid/uidmeta?uid=nothex").await;
    assert_eq!(error_message(&r), "Missing parameter <code>type</code>");
    let r = get(&srv, "/api/uid/uidmeta?uid=nothex&type=foo").await;
    assert_eq!(error_message(&r), "Invalid type requested: foo");
    let r = get(&srv, "/api/uid/uidmeta?uid=000001&type=foo").await;
    assert_eq!(error_message(&r), "Invalid type requested: foo");
    let r = http(srv.addr, "POST", "/api/uid/uidmeta", r#"{"type":"metric"}"#).await;
    assert_eq!((r.status, error_message(&r)), (400, "Missing UID".into()));
    // A type the JSON reader cannot read refuses the body first.
    let r = http(srv.addr, "POST", "/api/uid/uidmeta", r#"{"type":"foo"}"#).await;
    assert_eq!(
        (r.status, error_message(&r)),
        (400, "Unable to parse the given JSON".into())
    );
    assert_eq!(r.json()["error"]["details"], "Invalid type requested: foo");

    let r = http(
        srv.addr,
        "DELETE",
        "/api/uid/uidmeta?uid=000001&type=metric",
        "",
    )
    .await;
    assert_eq!(r.status, 204);
    let v = get(&srv, "/api/uid/uidmeta?uid=000001&type=metric")
        .await
        .json();
    assert_eq!(v["displayName"], "", "back to defaults");
    assert_eq!(v["name"], "sys.cpu.user", "the UID itself stays");
    let r = get(
        &srv,
        "/api/uid/uidmeta?uid=000001&type=metric&method_override=delete",
    )
    .await;
    assert_eq!(r.status, 204);
    srv.stop().await;
}

async fn annotations(backend: &str) {
    let srv = start(backend).await;
    load(&srv).await;
    let post = |path: &'static str, body: Value| {
        let addr = srv.addr;
        async move { http(addr, "POST", path, &body.to_string()).await }
    };
    // A global note.
    let r = post(
        "/api/annotation",
        json!({"startTime": 1356998460, "description": "deploy", "custom": {"by": "ci"}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "tsuid",
            "description",
            "notes",
            "custom",
            "startTime",
            "endTime"
        ]
    );
    assert_eq!(v["tsuid"], "");
    let r = http(srv.addr, "GET", "/api/annotation?start_time=1356998460", "").await;
    assert_eq!(r.json()["description"], "deploy");
    // POST merges, PUT replaces, nothing given is 304.
    let r = post(
        "/api/annotation",
        json!({"startTime": 1356998460, "notes": "v2"}),
    )
    .await;
    assert_eq!(
        (r.json()["description"].clone(), r.json()["notes"].clone()),
        (json!("deploy"), json!("v2"))
    );
    let r = post("/api/annotation", json!({"startTime": 1356998460})).await;
    assert_eq!(r.status, 304);
    let r = http(
        srv.addr,
        "PUT",
        "/api/annotation",
        &json!({"startTime": 1356998460, "description": "redeploy"}).to_string(),
    )
    .await;
    assert_eq!(r.json()["notes"], "");
    assert!(r.json().get("custom").is_none(), "PUT dropped custom");

    // A series note shows in /api/query; global ones on request.
    let lookup = http(
        srv.addr,
        "GET",
        "/api/search/lookup?m=sys.cpu.user{host=web01}",
        "",
    )
    .await
    .json();
    let tsuid = lookup["results"][0]["tsuid"].as_str().unwrap().to_string();
    let r = http(
        srv.addr,
        "POST",
        "/api/annotation",
        &json!({"tsuid": tsuid, "startTime": 1356998490, "description": "spike"}).to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let q = http(
        srv.addr,
        "GET",
        "/api/query?start=1356998400&end=1356999000&m=sum:sys.cpu.user{host=web01}&global_annotations",
        "",
    )
    .await
    .json();
    assert_eq!(q[0]["annotations"][0]["description"], "spike");
    assert_eq!(q[0]["annotations"][0]["tsuid"], tsuid.as_str());
    assert_eq!(q[0]["globalAnnotations"][0]["description"], "redeploy");
    let q = http(
        srv.addr,
        "GET",
        "/api/query?start=1356998400&end=1356999000&m=sum:sys.cpu.user{host=web01}&no_annotations",
        "",
    )
    .await
    .json();
    assert!(q[0].get("annotations").is_none());
    // The points next to the note are intact.
    assert_eq!(q[0]["dps"].as_object().unwrap().len(), 10);
    let g = http(
        srv.addr,
        "GET",
        "/api/annotations?start_time=1356998400&end_time=1356999000",
        "",
    )
    .await
    .json();
    assert_eq!(g.as_array().unwrap().len(), 1);
    // /api/annotations writes and deletes one note as /api/annotation does.
    let note = json!({"startTime": 1356998700, "description": "global note"}).to_string();
    let r = http(srv.addr, "POST", "/api/annotations", &note).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["description"], "global note");
    let g = |end: &'static str| {
        let path = format!("/api/annotations?start_time=1356998400&end_time={end}");
        async move { http(srv.addr, "GET", &path, "").await.json() }
    };
    assert_eq!(g("1356999000").await.as_array().unwrap().len(), 2);
    let r = http(srv.addr, "DELETE", "/api/annotations", &note).await;
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(g("1356999000").await.as_array().unwrap().len(), 1);

    // Bulk: write two, delete a range.
    let r = post(
        "/api/annotation/bulk",
        json!([
            {"tsuid": tsuid, "startTime": 1356998520, "description": "a"},
            {"tsuid": tsuid, "startTime": 1356998550, "description": "b"},
            {"tsuid": tsuid, "startTime": 1356998580}
        ]),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json().as_array().unwrap().len(),
        2,
        "the no-change note is skipped"
    );
    let body = json!({"tsuids": [tsuid], "startTime": "1356998500", "endTime": "1356998560"});
    let r = http(
        srv.addr,
        "DELETE",
        "/api/annotation/bulk",
        &body.to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["totalDeleted"], 2);
    assert_eq!(r.json()["startTime"], 1356998500000i64);
    let r = http(
        srv.addr,
        "DELETE",
        "/api/annotation/bulk?start_time=1356998400&end_time=1356999000&global",
        "",
    )
    .await;
    assert_eq!(r.json()["totalDeleted"], 1);

    // Single delete, then 404.
    let path = format!("/api/annotation?start_time=1356998490&tsuid={tsuid}");
    assert_eq!(http(srv.addr, "DELETE", &path, "").await.status, 204);
    let r = http(srv.addr, "GET", &path, "").await;
    assert_eq!(
        (r.status, error_message(&r)),
        (404, "Unable to locate annotation in storage".into())
    );
    // Errors.
    let r = http(srv.addr, "GET", "/api/annotation", "").await;
    assert_eq!(
        (r.status, error_message(&r)),
        (400, "Missing start time".into())
    );
    let r = post("/api/annotation", json!({"description": "x"})).await;
    assert_eq!(
        (r.status, error_message(&r)),
        (400, "The start timestamp has not been set".into())
    );
    let r = post(
        "/api/annotation",
        json!({"tsuid": "00000X", "startTime": 1356998460, "description": "x"}),
    )
    .await;
    assert_eq!(r.status, 400);
    let r = post("/api/annotation/bulk", json!({"startTime": 1})).await;
    assert_eq!(r.status, 400);
    let r = http(
        srv.addr,
        "DELETE",
        "/api/annotation/bulk?start_time=1h-ago",
        "",
    )
    .await;
    assert_eq!(
        error_message(&r),
        "Missing the TSUIDs or global annotations flag"
    );
    let r = http(
        srv.addr,
        "PATCH",
        "/api/annotation?start_time=1356998460",
        "",
    )
    .await;
    assert_eq!(r.status, 405);
    // Nothing above lost a point.
    assert_eq!(srv.points("sys.cpu.user").len(), 20);
    srv.stop().await;
}

/// `metric`, `tagk` and `tags` restrict suggestions to a metric's series, the same with
/// the tag index on (answered from it) and off (a scan); combinations meaning nothing are
/// refused.
async fn suggest_within_a_metric(backend: &str) {
    for index in ["false", "true"] {
        let mut c = Config::default();
        c.set("tsd.core.auto_create_metrics", "true");
        c.set("tsd.index.enable", index);
        let srv = start_with(backend, c).await;
        load(&srv).await;
        for (req, want) in [
            (
                "/api/suggest?type=tagk&metric=sys.cpu.user",
                json!(["dc", "host"]),
            ),
            (
                "/api/suggest?type=tagk&metric=sys.mem.free",
                json!(["host"]),
            ),
            (
                "/api/suggest?type=tagv&metric=sys.cpu.user&tagk=host&q=web",
                json!(["web01", "web02"]),
            ),
            (
                "/api/suggest?type=tagv&metric=sys.cpu.user&tagk=host&max=1",
                json!(["web01"]),
            ),
            (
                "/api/suggest?type=tagv&metric=sys.cpu.system&tagk=host",
                json!(["web01"]),
            ),
            (
                "/api/suggest?type=tagv&metric=sys.cpu.user&tagk=dc&tags=host=web02",
                json!(["lga"]),
            ),
            (
                "/api/suggest?type=tagk&metric=sys.cpu.system&tags=host=web02",
                json!([]),
            ),
            ("/api/suggest?type=tagk&metric=nope", json!([])),
        ] {
            let r = get(&srv, req).await;
            assert_eq!((r.status, r.json()), (200, want), "index={index} {req}");
        }
        let r = http(
            srv.addr,
            "POST",
            "/api/suggest",
            r#"{"type":"tagv","q":"d","metric":"sys.mem.free","tagk":"host"}"#,
        )
        .await;
        assert_eq!(r.json(), json!(["db01"]), "index={index}");
        for (req, msg) in [
            (
                "/api/suggest?type=metrics&metric=sys.cpu.user",
                "'metric', 'tagk' and 'tags' apply to type=tagk and type=tagv only",
            ),
            (
                "/api/suggest?type=tagv&tagk=host",
                "Missing parameter 'metric': 'tagk' and 'tags' need it",
            ),
            (
                "/api/suggest?type=tagv&metric=sys.cpu.user",
                "Missing parameter 'tagk': type=tagv with 'metric' needs it",
            ),
            (
                "/api/suggest?type=tagk&metric=sys.cpu.user&tagk=host",
                "'tagk' applies to type=tagv only",
            ),
            (
                "/api/suggest?type=tagk&metric=sys.cpu.user&tags=host",
                "Invalid 'tags' parameter: expected k=v,...: host",
            ),
        ] {
            let r = get(&srv, req).await;
            assert_eq!(
                (r.status, error_message(&r).as_str()),
                (400, msg),
                "index={index} {req}"
            );
        }
        srv.stop().await;
    }
}

on_every_backend!(
    suggest,
    suggest_within_a_metric,
    lookup,
    meta_tracking_and_tsmeta,
    tsmeta_create,
    assign_and_rename,
    uidmeta,
    annotations,
);

/// `/api/search/lookup` and `/api/suggest` read and answer as OpenTSDB 2.4.1: each series'
/// tags in the order of the `HashMap` `Tags.resolveIdsAsync` sizes for them, an empty tag
/// word refused, `limit` and `max` read by `Integer.parseInt`, a body's `tags` echoed only when
/// given, a suggest body's lists refused, and the deprecated `/suggest` reading a POST's URL.
#[tokio::test]
async fn lookup_and_suggest_read_as_opentsdb_reads_them() {
    let srv = start("memory").await;
    let uids = srv.state.tsdb.uids();
    for k in ["zone", "host", "dc"] {
        uids.get_or_create_id(hourglass_core::uid::UidKind::TagKey, k)
            .unwrap();
    }
    let r = http(
        srv.addr,
        "POST",
        "/api/put",
        r#"{"metric":"m.order","timestamp":1356998400,"value":1,"tags":{"dc":"d","host":"h","zone":"z"}}"#,
    )
    .await;
    assert_eq!(r.status, 204, "{}", r.text());
    srv.state.tsdb.flush().unwrap();
    // Tag keys in UID order zone, host, dc; a HashMap of 4 slots iterates host, zone, dc.
    let r = get(&srv, "/api/search/lookup?m=m.order").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.text()
            .contains(r#""tags":{"host":"h","zone":"z","dc":"d"}"#),
        "{}",
        r.text()
    );
    let r = get(&srv, "/api/search/lookup?m=m.order{host=h,}").await;
    assert_eq!(
        (
            r.status,
            error_message(&r),
            r.json()["error"]["details"].clone()
        ),
        (
            400,
            "Unable to parse query".to_string(),
            json!("When parsing tag '': Missing tag pair")
        )
    );
    for limit in ["", "%201", "99999999999"] {
        let r = get(&srv, &format!("/api/search/lookup?m=m.order&limit={limit}")).await;
        assert_eq!(
            (r.status, error_message(&r)),
            (
                400,
                "Unable to convert 'limit' to a valid number".to_string()
            ),
            "limit={limit}"
        );
    }
    let r = http(
        srv.addr,
        "POST",
        "/api/search/lookup",
        r#"{"metric":"m.order"}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "type",
            "metric",
            "limit",
            "time",
            "results",
            "startIndex",
            "totalResults"
        ]
    );
    assert_eq!(v["totalResults"], 1);
    // Names in a body as Jackson reads a `String`: a number is its text.
    let r = http(
        srv.addr,
        "POST",
        "/api/search/lookup",
        r#"{"metric":"m.order","tags":[{"key":"host","value":7}]}"#,
    )
    .await;
    assert_eq!(
        (
            r.status,
            error_message(&r),
            r.json()["error"]["details"].clone()
        ),
        (
            404,
            "Unable to resolve one or more UIDs".to_string(),
            json!("No such name for 'tagv': '7'")
        )
    );
    // `*` (a body's default metric) is a metric: every series is looked up.
    for (method, path, body) in [
        ("GET", "/api/search/lookup?m=*", ""),
        ("POST", "/api/search/lookup", "{}"),
        // A Java int as Jackson reads it: a float truncated.
        ("POST", "/api/search/lookup", r#"{"limit":5.7}"#),
    ] {
        let r = http(srv.addr, method, path, body).await;
        assert_eq!(
            (
                r.status,
                r.json()["metric"].clone(),
                r.json()["totalResults"].clone()
            ),
            (200, json!("*"), json!(1)),
            "{method} {path}: {}",
            r.text()
        );
    }

    for max in ["%205", "99999999999"] {
        let r = get(&srv, &format!("/api/suggest?type=metrics&max={max}")).await;
        assert_eq!(
            (r.status, error_message(&r)),
            (400, "Unable to parse 'max' as a number".to_string()),
            "max={max}"
        );
    }
    let r = http(
        srv.addr,
        "POST",
        "/api/suggest",
        r#"{"type":"metrics","q":["m"]}"#,
    )
    .await;
    assert_eq!(
        (r.status, error_message(&r)),
        (400, "Unable to parse the given JSON".to_string())
    );
    let r = http(
        srv.addr,
        "POST",
        "/suggest?type=metrics&q=m.",
        r#"{"type":"tagk"}"#,
    )
    .await;
    assert_eq!((r.status, r.json()), (200, json!(["m.order"])));
    srv.stop().await;
}

/// `/api/uid/assign` reads a type in any case and answers under the key as sent; a name is
/// checked before its type, so a bad name under an unknown type says what is wrong with it.
#[tokio::test]
async fn assign_reads_types_in_any_case_and_names_first() {
    let srv = start("memory").await;
    let r = http(
        srv.addr,
        "POST",
        "/api/uid/assign",
        r#"{"METRIC":["sys.new"],"TagK":["dc"],"bogus":["x y"]}"#,
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    let v = r.json();
    assert_eq!(v["METRIC"], json!({"sys.new": "000001"}));
    assert_eq!(v["TagK"], json!({"dc": "000001"}));
    assert_eq!(v["bogus"], json!({}));
    assert_eq!(
        v["bogus_errors"]["x y"],
        "Invalid bogus (\"x y\"): illegal character:  "
    );
    // Numbers are names as their text; a lone name, null or a nested list is not a list of
    // names.
    let r = http(srv.addr, "POST", "/api/uid/assign", r#"{"tagv":[7]}"#).await;
    assert_eq!(
        (r.status, r.json()),
        (200, json!({"tagv": {"7": "000001"}}))
    );
    for body in [
        r#"{"metric":"sys.one"}"#,
        r#"{"metric":["sys.two",null]}"#,
        r#"{"metric":[["sys.three"]]}"#,
    ] {
        let r = http(srv.addr, "POST", "/api/uid/assign", body).await;
        assert_eq!(
            (r.status, error_message(&r)),
            (400, "Unable to parse the given JSON".into()),
            "{body}"
        );
    }
    let r = http(
        srv.addr,
        "POST",
        "/api/uid/rename",
        r#"{"metric":["sys.new"],"name":"sys.old"}"#,
    )
    .await;
    assert_eq!(
        (r.status, error_message(&r)),
        (400, "Unable to parse the given JSON".into())
    );
    let r = get(&srv, "/api/suggest?type=metrics&q=sys").await;
    assert_eq!(
        r.json(),
        json!(["sys.new"]),
        "nothing of the refused bodies assigned"
    );
    let r = http(srv.addr, "POST", "/api/uid/assign", r#"{"Tagv":["web01"]}"#).await;
    assert_eq!(
        (r.status, r.json()),
        (200, json!({"Tagv": {"web01": "000002"}}))
    );
    // Assigned for real: a second time the name exists.
    let r = get(&srv, "/api/uid/assign?metric=sys.new").await;
    assert_eq!(
        r.json()["metric_errors"]["sys.new"],
        "Name already exists with UID: 000001"
    );
    srv.stop().await;
}

/// `/api/annotation` reads the note before the method, as OpenTSDB does; `/api/annotations`
/// reads whole seconds, has no upper bound without `end_time`, and leaves out notes ending
/// after the range.
#[tokio::test]
async fn annotation_ranges_and_methods_as_opentsdb_reads_them() {
    let srv = start("memory").await;
    let r = http(srv.addr, "PATCH", "/api/annotation", "").await;
    assert_eq!(
        (r.status, error_message(&r)),
        (400, "Missing start time".into())
    );
    let future = 4_000_000_000i64;
    for note in [
        json!({"startTime": 1356998460, "description": "short"}),
        json!({"startTime": 1356998470, "endTime": 1356999999, "description": "long"}),
        json!({"startTime": future, "description": "planned"}),
    ] {
        let r = http(srv.addr, "POST", "/api/annotation", &note.to_string()).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let described = |path: String| {
        let addr = srv.addr;
        async move {
            let r = http(addr, "GET", &path, "").await;
            assert_eq!(r.status, 200, "{path}: {}", r.text());
            r.json()
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n["description"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        described("/api/annotations?start_time=1356998400".into()).await,
        ["short", "long", "planned"]
    );
    assert_eq!(
        described("/api/annotations?start_time=1356998400&end_time=1356999000".into()).await,
        ["short"]
    );
    assert_eq!(
        described("/api/annotations?start_time=1356998460500&end_time=1356999000".into()).await,
        ["short"]
    );
    srv.stop().await;
}

/// A bulk delete's `global` flag is read as OpenTSDB's JSON reader reads a boolean: the
/// strings "true" and "True" and non-zero numbers are true; other words are refused.
#[tokio::test]
async fn bulk_delete_reads_global_as_a_java_boolean() {
    let srv = start("memory").await;
    let mut deleted = Vec::new();
    for (i, global) in [json!("true"), json!(1), json!("False"), json!(true)]
        .into_iter()
        .enumerate()
    {
        // The note the refused delete leaves is deleted by the next one.
        let note = json!({"startTime": 1356998460 + i, "description": "g"}).to_string();
        assert_eq!(
            http(srv.addr, "POST", "/api/annotation", &note)
                .await
                .status,
            200
        );
        let body = json!({"startTime": "1356998400", "endTime": "1356999000", "global": global});
        let r = http(
            srv.addr,
            "DELETE",
            "/api/annotation/bulk",
            &body.to_string(),
        )
        .await;
        if global == json!("False") {
            assert_eq!(
                error_message(&r),
                "Missing the TSUIDs or global annotations flag"
            );
            continue;
        }
        assert_eq!(r.status, 200, "{global}: {}", r.text());
        deleted.push((r.json()["global"].clone(), r.json()["totalDeleted"].clone()));
    }
    assert_eq!(
        deleted,
        [
            (json!(true), json!(1)),
            (json!(true), json!(1)),
            (json!(true), json!(2))
        ]
    );
    let body = json!({"startTime": "1356998400", "global": "yes"});
    let r = http(
        srv.addr,
        "DELETE",
        "/api/annotation/bulk",
        &body.to_string(),
    )
    .await;
    assert_eq!(
        (r.status, error_message(&r)),
        (400, "Unable to parse the given JSON".into())
    );
    srv.stop().await;
}

/// `/api/uid/tsmeta?m=` is read as OpenTSDB reads it there: `metric{}` has no tags, a pair
/// given twice with one value counts once, and malformed pairs are refused in its words.
#[tokio::test]
async fn tsmeta_series_names_are_read_as_opentsdb_reads_them() {
    let srv = start_with("memory", tracking_config()).await;
    load(&srv).await;
    let found = |m: &'static str| {
        let addr = srv.addr;
        async move {
            let r = http(addr, "GET", &format!("/api/uid/tsmeta?m={m}"), "").await;
            assert_eq!(r.status, 200, "{m}: {}", r.text());
            r.json().as_array().unwrap().len()
        }
    };
    assert_eq!(found("sys.cpu.user%7B%7D").await, 2);
    assert_eq!(found("sys.cpu.user%7Bhost=web01,host=web01%7D").await, 1);
    for (m, msg) in [
        (
            "sys.cpu.user%7Bhost",
            "Missing '}' at the end of: sys.cpu.user{host",
        ),
        (
            "sys.cpu.user%7Bhost%7D",
            "When parsing tag 'host': invalid tag: host",
        ),
        (
            "sys.cpu.user%7Bhost=web01,%7D",
            "When parsing tag '': invalid tag: ",
        ),
        (
            "sys.cpu.user%7Bhost=a=b%7D",
            "When parsing tag 'host=a=b': invalid tag: host=a=b",
        ),
        (
            "sys.cpu.user%7Bhost=web01,host=web02%7D",
            "When parsing tag 'host=web02': duplicate tag: host=web02, tags={host=web01}",
        ),
    ] {
        let r = get(&srv, &format!("/api/uid/tsmeta?m={m}")).await;
        assert_eq!((r.status, error_message(&r)), (400, msg.to_string()), "{m}");
        assert_eq!(r.json()["error"]["details"], msg, "{m}");
    }
    srv.stop().await;
}

/// TSMeta numbers in the URL are read as OpenTSDB reads them: an empty one is not given, the
/// retention is a Java int (no spaces, at most 2^31-1).
#[tokio::test]
async fn tsmeta_url_numbers_are_read_as_opentsdb_reads_them() {
    let srv = start_with("memory", tracking_config()).await;
    load(&srv).await;
    let v = get(&srv, "/api/search/lookup?m=sys.mem.free").await.json();
    let tsuid = v["results"][0]["tsuid"].as_str().unwrap().to_string();
    let post = |query: String| {
        let (addr, path) = (srv.addr, format!("/api/uid/tsmeta?tsuid={tsuid}&{query}"));
        async move { http(addr, "POST", &path, "").await }
    };
    let r = post("description=d&retention=&max=&min=".into()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        (
            r.json()["description"].clone(),
            r.json()["retention"].clone()
        ),
        (json!("d"), json!(0))
    );
    let r = post("retention=7".into()).await;
    assert_eq!(r.json()["retention"], 7);
    for retention in ["+8", "2147483648", "x"] {
        let r = post(format!("retention={retention}")).await;
        assert_eq!(
            (r.status, error_message(&r)),
            (400, "Unable to parse 'retention' value".into()),
            "{retention}"
        );
    }
    srv.stop().await;
}
