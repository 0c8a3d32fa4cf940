#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Authentication end to end: a real server on port 0 with a credentials file, every
//! endpoint called over a real socket with no credentials, wrong ones and each permission.

mod common;

use base64::Engine;
use common::{HttpConn, Response, start_with};
use hourglass_core::config::Config;
use hourglass_core::permission::Permission;
use hourglass_server::auth::{hash_password, token_hash};

const TOKEN: &str = "hg_test_token_for_grafana";

/// A credentials file with one user per permission (`u-read`, password `pw-read`, …) and a
/// read token, and a config using it.
fn secured_config(dir: &std::path::Path) -> Config {
    let mut text = String::new();
    for permission in Permission::ALL {
        let name = permission.name();
        text.push_str(&format!(
            "user u-{name} {name} {}\n",
            hash_password(&format!("pw-{name}")).unwrap()
        ));
    }
    text.push_str(&format!("token grafana read {}\n", token_hash(TOKEN)));
    let users = dir.join("users");
    std::fs::write(&users, text).unwrap();
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    c.set("tsd.http.query.allow_delete", "true");
    c.set("tsd.core.authentication.enable", "true");
    c.set("tsd.core.authentication.users", users.to_str().unwrap());
    // The tests fail on purpose more than a client address may (one test sets it).
    c.set("tsd.core.authentication.max_failures", "0");
    c.set(
        "tsd.core.authentication.allow_unauthenticated",
        "/api/version, /api/health",
    );
    c
}

fn basic(user: &str, password: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Authorization: Basic {encoded}\r\n")
}

async fn call(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    auth: &str,
    body: &str,
) -> Response {
    HttpConn::open(addr)
        .await
        .request(method, path, auth, body.as_bytes())
        .await
}

const PUT: &str = r#"[{"metric":"sys.cpu","timestamp":1700000000,"value":1,"tags":{"host":"a"}}]"#;
const NOTE: &str = r#"{"startTime":1700000000,"description":"deploy"}"#;

/// Every endpoint, the method it is called with, and the permissions it needs (all of them).
fn endpoints() -> Vec<(&'static str, &'static str, &'static str, Vec<Permission>)> {
    use Permission::{Admin, Annotate, Delete, Read, Uid, Write};
    vec![
        ("POST", "/api/put", PUT, vec![Write]),
        ("POST", "/api/v1/put?details", PUT, vec![Write]),
        ("POST", "/api/rollup", "[]", vec![Write]),
        ("POST", "/api/histogram", "[]", vec![Write]),
        ("POST", "/api/metadata/put", "[]", vec![Write]),
        (
            "GET",
            "/api/query?start=1h-ago&m=sum:sys.cpu",
            "",
            vec![Read],
        ),
        (
            "POST",
            "/api/query",
            r#"{"start":1699990000,"queries":[{"aggregator":"sum","metric":"sys.cpu"}]}"#,
            vec![Read],
        ),
        (
            "POST",
            "/api/query",
            r#"{"start":1699990000,"delete":true,"queries":[{"aggregator":"sum","metric":"sys.cpu"}]}"#,
            vec![Read, Delete],
        ),
        (
            "DELETE",
            "/api/query?start=1699990000&m=sum:sys.cpu",
            "",
            vec![Delete, Read],
        ),
        ("GET", "/api/query/last?timeseries=sys.cpu", "", vec![Read]),
        (
            "GET",
            "/api/query/gexp?start=1h-ago&exp=sum:sys.cpu",
            "",
            vec![Read],
        ),
        ("POST", "/api/query/exp", "{}", vec![Read]),
        ("GET", "/api/suggest?type=metrics", "", vec![Read]),
        ("GET", "/api/search/lookup?m=sys.cpu", "", vec![Read]),
        ("GET", "/api/aggregators", "", vec![Read]),
        ("GET", "/api/config/filters", "", vec![Read]),
        ("GET", "/api/uid/assign?metric=new.metric", "", vec![Uid]),
        (
            "POST",
            "/api/uid/rename",
            r#"{"metric":"a","name":"b"}"#,
            vec![Uid],
        ),
        (
            "GET",
            "/api/uid/uidmeta?uid=000001&type=metric",
            "",
            vec![Read],
        ),
        (
            "POST",
            "/api/uid/uidmeta",
            r#"{"uid":"000001","type":"metric","displayName":"x"}"#,
            vec![Uid],
        ),
        (
            "DELETE",
            "/api/uid/uidmeta?uid=000001&type=metric",
            "",
            vec![Delete],
        ),
        (
            "GET",
            "/api/uid/tsmeta?tsuid=000001000001000001",
            "",
            vec![Read],
        ),
        ("POST", "/api/annotation", NOTE, vec![Annotate]),
        (
            "GET",
            "/api/annotation?start_time=1700000000",
            "",
            vec![Read],
        ),
        (
            "DELETE",
            "/api/annotation?start_time=1700000000",
            "",
            vec![Delete],
        ),
        (
            "GET",
            "/api/annotation?start_time=1700000000&method_override=delete",
            "",
            vec![Delete],
        ),
        ("POST", "/api/annotation/bulk", "[]", vec![Annotate]),
        (
            "GET",
            "/api/annotations?start_time=1699990000",
            "",
            vec![Read],
        ),
        ("GET", "/api/dropcaches", "", vec![Admin]),
        ("GET", "/api/config", "", vec![Admin]),
        ("GET", "/api/stats", "", vec![Admin]),
        ("GET", "/api/stats/jvm", "", vec![Admin]),
        ("GET", "/api/stats/query", "", vec![Admin]),
        ("GET", "/", "", vec![Read]),
        ("GET", "/app.js", "", vec![Read]),
        ("GET", "/q?start=1h-ago&m=sum:sys.cpu&ascii", "", vec![Read]),
        ("GET", "/aggregators", "", vec![Read]),
        ("GET", "/logs", "", vec![Admin]),
        ("GET", "/stats", "", vec![Admin]),
        ("GET", "/api/no_such_endpoint", "", vec![Read]),
    ]
}

fn assert_unauthorized(resp: &Response, what: &str) {
    assert_eq!(resp.status, 401, "{what}: {}", resp.text());
    let challenges: Vec<&str> = resp
        .headers
        .iter()
        .filter(|(k, _)| k == "www-authenticate")
        .map(|(_, v)| v.as_str())
        .collect();
    assert!(
        challenges
            .iter()
            .any(|c| c.starts_with("Basic realm=\"hourglass\"")),
        "{what}: {challenges:?}"
    );
    assert!(
        challenges.iter().any(|c| c.starts_with("Bearer")),
        "{what}: {challenges:?}"
    );
    assert_eq!(resp.json()["error"]["code"], 401, "{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_by_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start_with("memory", secured_config(dir.path())).await;
    let addr = srv.addr;
    let wrong: [(&str, String); 5] = [
        ("none", String::new()),
        ("wrong password", basic("u-admin", "pw-read")),
        ("unknown user", basic("mallory", "pw-admin")),
        (
            "wrong token",
            "Authorization: Bearer hg_guess\r\n".to_string(),
        ),
        ("malformed", "Authorization: Basic !!!\r\n".to_string()),
    ];
    let mut checked = 0;
    for (method, path, body, needs) in endpoints() {
        for (label, header) in &wrong {
            let resp = call(addr, method, path, header, body).await;
            assert_unauthorized(&resp, &format!("{method} {path} with {label}"));
            assert!(!resp.text().contains("pw-"), "no secret echoed");
            checked += 1;
        }
        for permission in Permission::ALL {
            let name = permission.name();
            let resp = call(
                addr,
                method,
                path,
                &basic(&format!("u-{name}"), &format!("pw-{name}")),
                body,
            )
            .await;
            let allowed = needs
                .iter()
                .all(|n| permission == Permission::Admin || *n == permission);
            let what = format!("{method} {path} as {name}: {}", resp.text());
            if allowed {
                assert!(![401, 403].contains(&resp.status), "{what}");
            } else {
                assert_eq!(resp.status, 403, "{what}");
                let error = resp.json();
                assert_eq!(error["error"]["code"], 403, "{what}");
                assert_eq!(error["error"]["message"], "Permission denied", "{what}");
            }
            checked += 1;
        }
        // The read token: as the read user.
        let resp = call(
            addr,
            method,
            path,
            &format!("Authorization: Bearer {TOKEN}\r\n"),
            body,
        )
        .await;
        let allowed = needs.iter().all(|n| *n == Permission::Read);
        let what = format!("{method} {path} with the read token: {}", resp.text());
        if allowed {
            assert!(![401, 403].contains(&resp.status), "{what}");
        } else {
            assert_eq!(resp.status, 403, "{what}");
        }
        checked += 1;
    }
    assert!(checked > 400, "{checked}");

    // Failures are counted in the statistics.
    let stats = call(addr, "GET", "/api/stats", &basic("u-admin", "pw-admin"), "").await;
    let stats = stats.json();
    let failures = stats
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["metric"] == "tsd.auth.failures" && s["tags"]["type"] == "http")
        .unwrap_or_else(|| panic!("{stats}"));
    let counted: u64 = failures["value"].as_str().map_or_else(
        || failures["value"].as_u64().unwrap(),
        |v| v.parse().unwrap(),
    );
    // Every wrong credential but the missing ones.
    assert_eq!(counted, 4 * endpoints().len() as u64, "{failures}");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_paths_answer_without_credentials_and_the_rest_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = secured_config(dir.path());
    config.set(
        "tsd.core.authentication.allow_unauthenticated",
        "/api/version, /api/health,/api/query",
    );
    let srv = start_with("memory", config).await;
    // An open query reads; deleting by its body still needs the permission.
    let read = r#"{"start":1699990000,"queries":[{"aggregator":"sum","metric":"sys.cpu"}]}"#;
    let resp = call(srv.addr, "POST", "/api/query", "", read).await;
    assert!(![401, 403].contains(&resp.status), "{}", resp.text());
    let delete = read.replace("\"queries\"", "\"delete\":true,\"queries\"");
    let resp = call(srv.addr, "POST", "/api/query", "", &delete).await;
    assert_eq!(resp.status, 403, "{}", resp.text());
    for path in ["/api/version", "/api/v1/version/", "/api/health"] {
        let resp = call(srv.addr, "GET", path, "", "").await;
        assert_eq!(resp.status, 200, "{path}: {}", resp.text());
    }
    assert_eq!(
        call(srv.addr, "GET", "/api/health", "", "").await.json()["status"],
        "ok"
    );
    // Not listed: closed.
    assert_unauthorized(&call(srv.addr, "GET", "/version", "", "").await, "/version");
    srv.stop().await;
}

/// A password verified once is remembered: the same pair again is accepted at once, a wrong
/// one is still refused, on one keep-alive connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_checked_on_every_request_of_a_connection() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start_with("memory", secured_config(dir.path())).await;
    let mut conn = HttpConn::open(srv.addr).await;
    let good = basic("u-read", "pw-read");
    for _ in 0..3 {
        let resp = conn.request("GET", "/api/aggregators", &good, b"").await;
        assert_eq!(resp.status, 200, "{}", resp.text());
    }
    let resp = conn.request("GET", "/api/aggregators", "", b"").await;
    assert_unauthorized(&resp, "no credentials after good ones");
    let resp = conn
        .request("GET", "/api/aggregators", &basic("u-read", "pw-reaD"), b"")
        .await;
    assert_unauthorized(&resp, "a wrong password after the right one");
    srv.stop().await;
}

/// Without `tsd.core.authentication.enable`, nothing asks for credentials (OpenTSDB's
/// default), even with a users file named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authentication_off_lets_everything_through() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = secured_config(dir.path());
    config.set("tsd.core.authentication.enable", "false");
    let srv = start_with("memory", config).await;
    for (method, path, body) in [
        ("POST", "/api/put", PUT),
        ("GET", "/api/stats", ""),
        ("GET", "/api/uid/assign?metric=x.y", ""),
    ] {
        let resp = call(srv.addr, method, path, "", body).await;
        assert!(
            ![401, 403].contains(&resp.status),
            "{path}: {}",
            resp.text()
        );
    }
    assert_eq!(srv.points("sys.cpu").len(), 1);
    srv.stop().await;
}

/// A telnet connection: lines sent, reply lines read one at a time.
struct Telnet {
    reader: tokio::io::BufReader<tokio::net::TcpStream>,
}

impl Telnet {
    async fn open(addr: std::net::SocketAddr) -> Telnet {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        Telnet {
            reader: tokio::io::BufReader::new(stream),
        }
    }

    async fn send(&mut self, text: &str) {
        use tokio::io::AsyncWriteExt;
        self.reader
            .get_mut()
            .write_all(text.as_bytes())
            .await
            .unwrap();
    }

    /// The next reply line, without its line end; `None` once the server closed.
    async fn line(&mut self) -> Option<String> {
        use tokio::io::AsyncBufReadExt;
        let mut line = String::new();
        let n = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            self.reader.read_line(&mut line),
        )
        .await
        .expect("a reply within 10 s")
        .unwrap();
        (n > 0).then(|| line.trim_end_matches(['\r', '\n']).to_string())
    }
}

const TELNET_PUT: &str = "put sys.cpu 1700000000 1 host=a\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telnet_runs_nothing_before_auth() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start_with("memory", secured_config(dir.path())).await;
    let mut t = Telnet::open(srv.addr).await;
    t.send(&format!("{TELNET_PUT}dropcaches\nversion\n")).await;
    for cmd in ["put", "dropcaches", "version"] {
        let line = t.line().await.unwrap();
        assert!(
            line.starts_with(&format!("{cmd}: authentication required")),
            "{line}"
        );
    }
    t.send("auth basic u-write pw-write\n").await;
    assert_eq!(t.line().await.unwrap(), "AUTH_SUCCESS.");
    t.send(&format!("{TELNET_PUT}version\n")).await;
    let line = t.line().await.unwrap();
    assert!(
        line.starts_with("hourglass "),
        "the put was answered: {line}"
    );
    drop(t);
    // Only the put after `auth` was stored.
    let points = srv.points("sys.cpu");
    assert_eq!(points.len(), 1, "{points:?}");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telnet_wrong_auth_fails_and_the_third_failure_closes() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start_with("memory", secured_config(dir.path())).await;
    let mut t = Telnet::open(srv.addr).await;
    t.send("auth basic u-admin pw-read\n").await;
    assert_eq!(t.line().await.unwrap(), "AUTH_FAIL.");
    t.send("auth token hg_guess\n").await;
    assert_eq!(t.line().await.unwrap(), "AUTH_FAIL.");
    // Still not in: a command is refused.
    t.send("stats\n").await;
    assert!(
        t.line()
            .await
            .unwrap()
            .starts_with("stats: authentication required")
    );
    t.send("auth basic u-admin\n").await;
    assert_eq!(t.line().await.unwrap(), "AUTH_FAIL.");
    assert_eq!(t.line().await, None, "closed after the third failure");

    let mut admin = Telnet::open(srv.addr).await;
    admin.send("auth basic u-admin pw-admin\nstats\n").await;
    assert_eq!(admin.line().await.unwrap(), "AUTH_SUCCESS.");
    let mut failures = None;
    while let Some(line) = admin.line().await {
        if line.starts_with("tsd.auth.failures ") && line.contains("type=telnet") {
            failures = line.split(' ').nth(2).map(String::from);
            break;
        }
    }
    assert_eq!(failures.as_deref(), Some("3"));
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telnet_commands_need_their_permission() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start_with("memory", secured_config(dir.path())).await;
    // (auth line, expected reply to the put, expected reply to dropcaches)
    let cases = [
        (
            "auth basic u-read pw-read".to_string(),
            Some("put: permission denied: u-read lacks the write permission"),
            "dropcaches: permission denied: u-read lacks the admin permission",
        ),
        (
            format!("auth token {TOKEN}"),
            Some("put: permission denied: grafana lacks the write permission"),
            "dropcaches: permission denied: grafana lacks the admin permission",
        ),
        (
            "auth basic u-write pw-write".to_string(),
            None,
            "dropcaches: permission denied: u-write lacks the admin permission",
        ),
        (
            "auth basic u-admin pw-admin".to_string(),
            None,
            "Caches dropped.",
        ),
    ];
    let mut stored = 0;
    for (auth, put_reply, drop_reply) in cases {
        let mut t = Telnet::open(srv.addr).await;
        t.send(&format!("{auth}\n{TELNET_PUT}dropcaches\n")).await;
        assert_eq!(t.line().await.unwrap(), "AUTH_SUCCESS.", "{auth}");
        if let Some(expected) = put_reply {
            assert_eq!(t.line().await.unwrap(), expected, "{auth}");
        } else {
            stored += 1;
        }
        assert_eq!(t.line().await.unwrap(), drop_reply, "{auth}");
        // `version` needs no permission.
        t.send("version\n").await;
        assert!(t.line().await.unwrap().starts_with("hourglass "), "{auth}");
        assert!(t.line().await.unwrap().starts_with("Built on "), "{auth}");
        // A later `auth` is no command: a connection is one principal.
        t.send("auth basic u-admin pw-admin\n").await;
        assert_eq!(
            t.line().await.unwrap(),
            "unknown command: auth.  Try `help'."
        );
    }
    // Same point twice (write and admin): one stored point.
    assert_eq!(stored, 2);
    assert_eq!(srv.points("sys.cpu").len(), 1);
    srv.stop().await;
}

/// Past `tsd.core.authentication.max_failures` failures from one address, even right
/// credentials are refused unchecked (HTTP 429, telnet closed) for the rest of the minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_failures_from_one_address_are_throttled() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = secured_config(dir.path());
    config.set("tsd.core.authentication.max_failures", "3");
    let srv = start_with("memory", config).await;
    let good = basic("u-read", "pw-read");
    assert_eq!(
        call(srv.addr, "GET", "/api/aggregators", &good, "")
            .await
            .status,
        200
    );
    for _ in 0..3 {
        let resp = call(
            srv.addr,
            "GET",
            "/api/aggregators",
            &basic("u-read", "guess"),
            "",
        )
        .await;
        assert_unauthorized(&resp, "a guess");
    }
    let resp = call(srv.addr, "GET", "/api/aggregators", &good, "").await;
    assert_eq!(resp.status, 429, "{}", resp.text());
    assert_eq!(resp.header("retry-after"), Some("60"));
    assert_eq!(resp.json()["error"]["code"], 429);
    // No credentials: still asked for them, nothing checked.
    assert_unauthorized(
        &call(srv.addr, "GET", "/api/aggregators", "", "").await,
        "no credentials",
    );
    // Telnet from the same address: refused and closed.
    let mut t = Telnet::open(srv.addr).await;
    t.send("auth basic u-read pw-read\n").await;
    assert_eq!(t.line().await.unwrap(), "AUTH_FAIL.");
    assert_eq!(t.line().await, None);
    srv.stop().await;
}

/// Every telnet command, as each permission, before and after `auth`: the first reply line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_telnet_command_by_permission() {
    let dir = tempfile::tempdir().unwrap();
    let srv = start_with("memory", secured_config(dir.path())).await;
    // (line, permission it needs, what it answers when allowed: a reply's start, or `None`
    // for no reply (a good put))
    let commands: [(&str, Option<Permission>, Option<&str>); 8] = [
        (
            "put sys.cpu 1700000000 1 host=a",
            Some(Permission::Write),
            None,
        ),
        (
            "rollup",
            Some(Permission::Write),
            Some("rollup: illegal argument"),
        ),
        (
            "histogram",
            Some(Permission::Write),
            Some("histogram: illegal argument"),
        ),
        ("stats", Some(Permission::Admin), Some("tsd.")),
        (
            "dropcaches",
            Some(Permission::Admin),
            Some("Caches dropped."),
        ),
        ("help", None, Some("available commands:")),
        (
            "diediedie",
            Some(Permission::Admin),
            Some("unknown command: diediedie"),
        ),
        ("nonsense", None, Some("unknown command: nonsense")),
    ];
    // Before `auth`: every one refused, nothing run.
    let mut t = Telnet::open(srv.addr).await;
    for (line, ..) in &commands {
        t.send(&format!("{line}\n")).await;
        let reply = t.line().await.unwrap();
        let cmd = line.split(' ').next().unwrap();
        assert_eq!(
            reply,
            format!(
                "{cmd}: authentication required: send `auth basic USER PASSWORD` or `auth token TOKEN` first"
            ),
        );
    }
    drop(t);
    assert!(srv.points("sys.cpu").is_empty(), "nothing ran before auth");
    for permission in Permission::ALL {
        let name = permission.name();
        for (line, needs, allowed_reply) in &commands {
            let mut t = Telnet::open(srv.addr).await;
            t.send(&format!("auth basic u-{name} pw-{name}\n{line}\nversion\n"))
                .await;
            assert_eq!(t.line().await.unwrap(), "AUTH_SUCCESS.");
            let allowed = needs.is_none_or(|n| permission == Permission::Admin || n == permission);
            let reply = t.line().await.unwrap();
            let cmd = line.split(' ').next().unwrap();
            match (allowed, allowed_reply) {
                (true, None) => assert!(reply.starts_with("hourglass "), "{name} {line}: {reply}"),
                (true, Some(start)) => assert!(reply.starts_with(start), "{name} {line}: {reply}"),
                (false, _) => assert_eq!(
                    reply,
                    format!(
                        "{cmd}: permission denied: u-{name} lacks the {} permission",
                        needs.unwrap()
                    )
                ),
            }
        }
    }
    assert_eq!(
        srv.points("sys.cpu").len(),
        1,
        "stored by write and admin, once"
    );
    srv.stop().await;
}
