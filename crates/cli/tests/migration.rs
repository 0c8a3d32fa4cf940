#![allow(clippy::unwrap_used, clippy::expect_used)]
//! What an OpenTSDB 2.4 installation brings along, on the real binary: `tsdb tsd`'s flags,
//! config files found and read as OpenTSDB finds and reads them, `tsdb version`, and
//! `tsdb scan --delete`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// A running `tsdb tsd`, its address and what it logged until it was ready.
struct Tsd {
    child: Child,
    addr: String,
    log: Vec<String>,
}

impl Drop for Tsd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tsdb tsd ARGS` run in `cwd` (where `./opentsdb.conf` is looked for).
fn tsd_in(cwd: &Path, args: &[&str]) -> Tsd {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .arg("tsd")
        .args(args)
        .current_dir(cwd)
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut log = Vec::new();
    let addr = loop {
        let Some(line) = lines.next() else {
            panic!("tsd exited before it was ready: {log:#?}");
        };
        let line = line.unwrap();
        if let Some(rest) = line.split("Ready to serve on ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
        log.push(line);
    };
    std::thread::spawn(move || for _ in lines {});
    Tsd { child, addr, log }
}

/// `tsdb tsd --port 0 --bind 127.0.0.1 --data-dir DIR/data ARGS` in `dir`.
fn tsd(dir: &Path, args: &[&str]) -> Tsd {
    let data = dir.join("data");
    let mut all = vec![
        "--port",
        "0",
        "--bind",
        "127.0.0.1",
        "--data-dir",
        data.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    tsd_in(dir, &all)
}

/// An HTTP/1.0 request (the answer ends with the connection): status and body.
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap();
    (status, body.to_string())
}

fn get(addr: &str, path: &str) -> (u16, String) {
    http(addr, "GET", path, "")
}

/// The TSD's `/api/config`.
fn config_of(addr: &str) -> serde_json::Value {
    let (status, body) = get(addr, "/api/config");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn tsdb_in(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout.clone()).unwrap()
}

/// Threads of `pid` named as the TSD names its runtime's threads, once there are
/// `expected` (a thread takes its name a moment after it starts) or after 5 s.
fn runtime_threads(pid: u32, expected: usize) -> usize {
    let count = || {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.unwrap().path().join("comm")).ok())
            .filter(|c| c.trim() == "tsd-worker")
            .count()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while count() != expected && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    count()
}

/// The listen backlog of the socket listening on `port`, as `ss` shows it (Send-Q).
fn listen_backlog(port: &str) -> u32 {
    let o = Command::new("ss")
        .args(["-Hltn", &format!("sport = :{port}")])
        .output()
        .expect("ss is needed (apt-get install iproute2; scripts/test installs it)");
    let text = String::from_utf8(o.stdout).unwrap();
    let fields: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(fields.first(), Some(&"LISTEN"), "{text}");
    fields[2].parse().unwrap()
}

#[test]
fn opentsdb_tsd_flags_set_their_keys_and_take_effect() {
    let dir = tempfile::tempdir().unwrap();
    let srv = tsd(
        dir.path(),
        &[
            "--worker-threads",
            "3",
            "--async-io",
            "false",
            "--backlog",
            "7",
            "--max-connections",
            "50",
            "--flush-interval",
            "1234",
            "--zkquorum",
            "zk1:2181,zk2:2181",
            "--zkbasedir",
            "/hbase-test",
            "--staticroot",
            "/usr/share/opentsdb/static",
            "--cachedir",
            "/tmp/opentsdb",
            "--statswport",
        ],
    );
    // Counted before any request: the blocking pool (named alike) has no thread yet.
    assert_eq!(runtime_threads(srv.child.id(), 3), 3, "--worker-threads");
    let port = srv.addr.rsplit(':').next().unwrap();
    assert_eq!(listen_backlog(port), 7, "--backlog");
    let c = config_of(&srv.addr);
    for (key, value) in [
        ("tsd.network.worker_threads", "3"),
        ("tsd.network.async_io", "false"),
        ("tsd.network.backlog", "7"),
        ("tsd.core.connections.limit", "50"),
        ("tsd.storage.flush_interval", "1234"),
        ("tsd.storage.hbase.zk_quorum", "zk1:2181,zk2:2181"),
        ("tsd.storage.hbase.zk_basedir", "/hbase-test"),
    ] {
        assert_eq!(c[key], value, "{key} in {c}");
    }
    // --staticroot and --cachedir are unused: no key, and the built-in UI at `/`.
    assert!(c.get("tsd.http.staticroot").is_none(), "{c}");
    assert!(c.get("tsd.http.cachedir").is_none(), "{c}");
    let (status, page) = get(&srv.addr, "/");
    assert_eq!(status, 200);
    assert_eq!(page, include_str!("../../../web/dist/index.html"));
    // The engine flushes on the flag's interval.
    let (status, page) = get(&srv.addr, "/status");
    assert_eq!(status, 200);
    assert!(page.contains("1234 ms"), "{page}");
}

#[test]
fn worker_threads_and_backlog_come_from_the_config_file_too() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("tsd.conf");
    std::fs::write(
        &conf,
        "tsd.network.worker_threads = 5\ntsd.network.backlog = 11\n",
    )
    .unwrap();
    let srv = tsd(dir.path(), &["--config", conf.to_str().unwrap()]);
    assert_eq!(runtime_threads(srv.child.id(), 5), 5);
    assert_eq!(listen_backlog(srv.addr.rsplit(':').next().unwrap()), 11);
    // Flags win over the file.
    let other = tempfile::tempdir().unwrap();
    let srv = tsd(
        other.path(),
        &["--config", conf.to_str().unwrap(), "--worker-threads", "4"],
    );
    assert_eq!(runtime_threads(srv.child.id(), 4), 4);
}

#[test]
fn max_connections_closes_the_connection_past_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let srv = tsd(dir.path(), &["--max-connections", "1"]);
    let mut first = TcpStream::connect(&srv.addr).unwrap();
    first
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    first.write_all(b"version\n").unwrap();
    let mut reply = [0u8; 10];
    first.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"hourglass ");
    // One past the limit: closed at once, nothing answered.
    let mut second = TcpStream::connect(&srv.addr).unwrap();
    second
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let _ = second.write_all(b"version\n");
    let mut got = Vec::new();
    let _ = second.read_to_end(&mut got);
    assert!(got.is_empty(), "{}", String::from_utf8_lossy(&got));
}

#[test]
fn read_only_disable_ui_and_disable_api_take_a_value_or_none() {
    let dir = tempfile::tempdir().unwrap();
    let put = r#"{"metric":"m","timestamp":1356998400,"value":1,"tags":{"h":"a"}}"#;
    // Any value sets the mode, even `false`, as in OpenTSDB; the bare switch too.
    for flag in [
        &["--read-only", "false"][..],
        &["--read-only=true"],
        &["--read-only"],
    ] {
        let srv = tsd(dir.path(), flag);
        assert_eq!(config_of(&srv.addr)["tsd.mode"], "ro", "{flag:?}");
        assert_eq!(http(&srv.addr, "POST", "/api/put", put).0, 404, "{flag:?}");
    }
    let srv = tsd(dir.path(), &["--auto-metric"]);
    assert_eq!(http(&srv.addr, "POST", "/api/put", put).0, 204);
    drop(srv);

    let srv = tsd(dir.path(), &["--disable-ui"]);
    assert_eq!(config_of(&srv.addr)["tsd.core.enable_ui"], "false");
    assert_eq!(get(&srv.addr, "/").0, 404);
    assert_eq!(get(&srv.addr, "/api/version").0, 200);
    drop(srv);

    let srv = tsd(dir.path(), &["--disable-api", "false"]);
    assert_eq!(get(&srv.addr, "/api/version").0, 404);
    assert_eq!(get(&srv.addr, "/api/config").0, 404);
    assert_eq!(get(&srv.addr, "/").0, 200);
}

#[test]
fn opentsdb_static_root_does_not_replace_the_built_in_ui() {
    let dir = tempfile::tempdir().unwrap();
    // What OpenTSDB's packages install as tsd.http.staticroot.
    let static_dir = dir.path().join("opentsdb-static");
    std::fs::create_dir(&static_dir).unwrap();
    std::fs::write(static_dir.join("favicon.ico"), "ico").unwrap();
    std::fs::write(static_dir.join("queryui.nocache.js"), "gwt").unwrap();
    let conf = dir.path().join("migrated.conf");
    std::fs::write(
        &conf,
        format!(
            "tsd.http.staticroot = {}\ntsd.http.cachedir = /tmp/opentsdb\n",
            static_dir.display()
        ),
    )
    .unwrap();
    let srv = tsd(dir.path(), &["--config", conf.to_str().unwrap()]);
    assert_eq!(
        get(&srv.addr, "/"),
        (
            200,
            include_str!("../../../web/dist/index.html").to_string()
        )
    );
    assert_eq!(get(&srv.addr, "/app.js").0, 200);
    assert!(
        srv.log
            .iter()
            .any(|l| l.contains("tsd.http.staticroot holds no Hourglass web UI")),
        "{:#?}",
        srv.log
    );
    drop(srv);
    // A directory holding the UI (web/dist while working on it) is still served from disk.
    let dev = dir.path().join("dist");
    std::fs::create_dir(&dev).unwrap();
    std::fs::write(dev.join("index.html"), "<p>dev build</p>").unwrap();
    std::fs::write(dev.join("app.js"), "// dev").unwrap();
    std::fs::write(&conf, format!("tsd.http.staticroot = {}\n", dev.display())).unwrap();
    let srv = tsd(dir.path(), &["--config", conf.to_str().unwrap()]);
    assert_eq!(get(&srv.addr, "/"), (200, "<p>dev build</p>".to_string()));
}

#[test]
fn config_is_searched_read_as_java_properties_and_unknown_keys_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Java properties as OpenTSDB reads them: `key value`, `key: value`, `!` comments,
    // continuations; an OpenTSDB key meaning nothing here, HBase client keys, and a typo.
    std::fs::write(
        d.join("opentsdb.conf"),
        "! found by the search\n\
         tsd.network.port 0\n\
         tsd.network.bind: 127.0.0.1\n\
         tsd.core.auto_create_metrics = true\n\
         tsd.http.request.cors_headers = Authorization, \\\n    Content-Type\n\
         tsd.storage.hbase.zk_quorum = zk1\n\
         hbase.rpc.timeout = 5000\n\
         tsd.storage.flush_intervall = 10\n",
    )
    .unwrap();
    let srv = tsd_in(d, &["--data-dir", "data"]);
    let log = srv.log.join("\n");
    assert!(
        log.contains("loaded configuration file ./opentsdb.conf"),
        "{log}"
    );
    let warned: Vec<&String> = srv
        .log
        .iter()
        .filter(|l| l.contains("unknown config key"))
        .collect();
    assert_eq!(warned.len(), 1, "{log}");
    assert!(warned[0].contains("tsd.storage.flush_intervall"), "{log}");
    let c = config_of(&srv.addr);
    assert_eq!(
        c["tsd.http.request.cors_headers"],
        "Authorization, Content-Type"
    );
    assert_eq!(c["tsd.core.auto_create_metrics"], "true");
    // Auto-created metrics: the file's key applies.
    let put = r#"{"metric":"searched","timestamp":1356998400,"value":1,"tags":{"h":"a"}}"#;
    assert_eq!(http(&srv.addr, "POST", "/api/put", put).0, 204);
    drop(srv);

    // `--config` replaces the search.
    let other = d.join("other.conf");
    std::fs::write(
        &other,
        "tsd.network.bind = 127.0.0.1\ntsd.network.port = 0\n",
    )
    .unwrap();
    let srv = tsd_in(
        d,
        &["--data-dir", "data", "--config", other.to_str().unwrap()],
    );
    // The searched file's zk1 is not read: the default stands.
    assert_eq!(
        config_of(&srv.addr)["tsd.storage.hbase.zk_quorum"],
        "localhost"
    );
    assert!(!srv.log.iter().any(|l| l.contains("unknown config key")));
    drop(srv);

    // Every tool searches: the uid width comes from ./opentsdb.conf.
    let tools = d.join("tools");
    std::fs::create_dir(&tools).unwrap();
    std::fs::write(
        tools.join("opentsdb.conf"),
        "tsd.storage.uid.width.metric 4\n",
    )
    .unwrap();
    assert_eq!(
        stdout(&tsdb_in(&tools, &["mkmetric", "--data-dir", "data", "a.b"])),
        "metrics a.b: [0, 0, 0, 1]\n"
    );
    // A missing --config is an error, not a fallback to the search.
    let o = tsdb_in(
        &tools,
        &[
            "mkmetric",
            "--data-dir",
            "data",
            "--config",
            "nope.conf",
            "c",
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot read config nope.conf"));
}

#[test]
fn version_prints_two_lines_about_the_build() {
    let dir = tempfile::tempdir().unwrap();
    let text = stdout(&tsdb_in(dir.path(), &["version"]));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    let rev = lines[0]
        .strip_prefix(concat!(
            "hourglass ",
            env!("CARGO_PKG_VERSION"),
            " built at revision "
        ))
        .and_then(|r| r.strip_suffix(" (OpenTSDB 2.4 API)"))
        .unwrap_or_else(|| panic!("{text}"));
    if rev != "unknown" {
        assert!(
            rev.len() >= 7 && rev.chars().all(|c| c.is_ascii_hexdigit()),
            "{text}"
        );
        // The revision is a commit of this repository.
        let known = Command::new("git")
            .args(["cat-file", "-e", &format!("{rev}^{{commit}}")])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap();
        assert!(known.success(), "{rev}");
    }
    let (date, target) = lines[1]
        .strip_prefix("Built on ")
        .and_then(|r| r.split_once(" +0000 for "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        chrono::NaiveDateTime::parse_from_str(date, "%Y/%m/%d %H:%M:%S").is_ok(),
        "{text}"
    );
    assert_eq!(
        target,
        format!("{} {}", std::env::consts::OS, std::env::consts::ARCH)
    );
}

#[test]
fn scan_delete_prints_import_lines_and_deletes_whole_rows() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let data = d.join("data");
    let data = data.to_str().unwrap();
    // Two hours of host=a and host=b, and another metric; 1356998400 is an hour's start.
    let mut lines = String::new();
    for (t, v) in [
        (1356998400, 1),
        (1356998460, 2),
        (1357002000, 3),
        (1357002060, 4),
    ] {
        lines.push_str(&format!("del.me {t} {v} host=a\n"));
        lines.push_str(&format!("del.me {t} {} host=b\n", v * 10));
        lines.push_str(&format!("keep.me {t} {v} host=a\n"));
    }
    std::fs::write(d.join("points.txt"), lines).unwrap();
    stdout(&tsdb_in(
        d,
        &["import", "--auto-metric", "--data-dir", data, "points.txt"],
    ));
    // The range covers one minute of the first hour; the whole hour row goes, as OpenTSDB
    // deletes whole rows.
    let deleted = stdout(&tsdb_in(
        d,
        &[
            "scan",
            "--delete",
            "--data-dir",
            data,
            "1356998400",
            "1356998420",
            "sum",
            "del.me",
            "host=a",
        ],
    ));
    assert_eq!(
        deleted,
        "del.me 1356998400 1 host=a\ndel.me 1356998460 2 host=a\n"
    );
    let scan = |metric: &str| {
        stdout(&tsdb_in(
            d,
            &[
                "scan",
                "--import",
                "--data-dir",
                data,
                "1356998400",
                "1357005600",
                "sum",
                metric,
            ],
        ))
    };
    assert_eq!(
        scan("del.me"),
        "del.me 1356998400 10 host=b\ndel.me 1356998460 20 host=b\n\
         del.me 1357002000 3 host=a\ndel.me 1357002060 4 host=a\n\
         del.me 1357002000 30 host=b\ndel.me 1357002060 40 host=b\n"
    );
    assert_eq!(scan("keep.me").lines().count(), 4);
    // Scanned again: nothing left in that hour for host=a; a query finds nothing either.
    let again = stdout(&tsdb_in(
        d,
        &[
            "scan",
            "--delete",
            "--data-dir",
            data,
            "1356998400",
            "1356998420",
            "sum",
            "del.me",
            "host=a",
        ],
    ));
    assert_eq!(again, "");
    let query = stdout(&tsdb_in(
        d,
        &[
            "query",
            "--data-dir",
            data,
            "1356998400",
            "1357001999",
            "sum",
            "del.me",
            "host=a",
        ],
    ));
    assert_eq!(query, "");
}
