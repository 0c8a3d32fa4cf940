#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The `tsdb tsd` process: signals and crash safety, over real sockets.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

mod common;
use common::spawn_tsd;

/// POSTs `body` to `path` and returns the status line's first 12 bytes (`HTTP/1.1 204`),
/// read once the TSD answered.
fn post_status(addr: &str, path: &str, body: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut status = [0u8; 12];
    s.read_exact(&mut status).unwrap();
    String::from_utf8_lossy(&status).into_owned()
}

fn telnet_fenced(addr: &str, text: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(text.as_bytes()).unwrap();
    s.write_all(b"version\nexit\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn scan(dir: &Path, metric: &str) -> Vec<String> {
    let o = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(["scan", "--import", "--data-dir"])
        .arg(dir)
        .args(["2013/01/01", "2014/01/01", "sum", metric])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn sigterm_drains_flushes_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr) = spawn_tsd(dir.path());
    let mut text = String::new();
    for i in 0..5000 {
        text.push_str(&format!(
            "put graceful.metric {} {i} host=h{}\n",
            1356998400 + i / 10,
            i % 10
        ));
    }
    let replies = telnet_fenced(&addr, &text);
    assert!(replies.starts_with("hourglass "), "{replies}");
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(scan(dir.path(), "graceful.metric").len(), 5000);
}

#[test]
fn sigkill_right_after_sync_put_keeps_the_point() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr) = spawn_tsd(dir.path());
    let body =
        r#"{"metric":"synced.metric","timestamp":1356998400,"value":42,"tags":{"host":"a"}}"#;
    let mut s = TcpStream::connect(&addr).unwrap();
    write!(
        s,
        "POST /api/put?sync HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut status = [0u8; 12];
    s.read_exact(&mut status).unwrap();
    assert_eq!(&status, b"HTTP/1.1 204");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        scan(dir.path(), "synced.metric"),
        vec!["synced.metric 1356998400 42 host=a".to_string()]
    );
}

#[test]
fn sigkill_keeps_every_acknowledged_telnet_point() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr) = spawn_tsd(dir.path());
    let text: String = (0..3000)
        .map(|i| {
            format!(
                "put killed.metric {} {i} host=h{}\n",
                1356998400 + i / 10,
                i % 10
            )
        })
        .collect();
    // The `version` answer comes after every earlier put was acknowledged (logged).
    let replies = telnet_fenced(&addr, &text);
    assert!(replies.starts_with("hourglass "), "{replies}");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(scan(dir.path(), "killed.metric").len(), 3000);
}

/// `/logs`: the TSD's own recent log lines, newest first, as OpenTSDB's page gives them.
#[test]
fn logs_page_shows_the_tsds_own_log() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr) = spawn_tsd(&dir.path().join("data"));
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /logs?json HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let body = out.split("\r\n\r\n").nth(1).unwrap_or_default();
    let lines: Vec<String> = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {out}"));
    // OpenTSDB's form: seconds, level, thread, logger, message, between tabs.
    let ready = lines
        .iter()
        .find(|l| l.contains("Ready to serve on"))
        .unwrap_or_else(|| panic!("{lines:?}"));
    let parts: Vec<&str> = ready.splitn(5, '\t').collect();
    assert_eq!(parts.len(), 5, "{ready}");
    assert!(parts[0].parse::<u64>().unwrap() > 1_700_000_000, "{ready}");
    assert_eq!(parts[1], "INFO", "{ready}");
    assert!(!parts[2].is_empty(), "{ready}");
    assert_eq!(parts[3], "hourglass_server", "{ready}");
    assert!(parts[4].starts_with("Ready to serve on "), "{ready}");
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(child.wait().unwrap().success());
}

/// Runs a TSD with this config, which must refuse to start; returns what it logged.
fn refused_start(config_text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tsd.conf");
    std::fs::write(
        &config,
        config_text.replace("{dir}", &dir.path().display().to_string()),
    )
    .unwrap();
    let log = dir.path().join("tsd.log");
    let mut child = common::Tsd(
        common::tsd_command(Some(&config), &dir.path().join("data"))
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(
        status.is_some_and(|s| !s.success()),
        "the TSD started ({status:?}): {stderr}"
    );
    assert!(!stderr.contains("Ready to serve"), "{stderr}");
    stderr
}

/// A switch for what is not provided (a real-time publisher plugin) is refused at start,
/// not silently left off: a TSD that seems to do something it does not is worse than one
/// that does not start.
#[test]
fn a_switch_for_what_is_not_provided_refuses_the_start() {
    let stderr = refused_start("tsd.rtpublisher.enable = true\n");
    assert!(
        stderr.contains("tsd.rtpublisher.enable = true asks for a real-time publisher plugin"),
        "{stderr}"
    );
}

/// A value asking for what Hourglass does not do (duplicate points resolved by value) is
/// refused at start, naming the key, not silently ignored.
#[test]
fn a_value_asking_for_what_is_not_provided_refuses_the_start() {
    let stderr = refused_start("tsd.storage.use_otsdb_timestamp = true\n");
    assert!(
        stderr.contains("tsd.storage.use_otsdb_timestamp = true asks for duplicate points"),
        "{stderr}"
    );
}

/// A time zone Java does not know refuses the start, in OpenTSDB's words.
#[test]
fn an_unknown_time_zone_refuses_the_start() {
    let stderr = refused_start("tsd.core.timezone = America/New_Yrok\n");
    assert!(
        stderr.contains("Invalid timezone name: America/New_Yrok"),
        "{stderr}"
    );
}

/// Authentication on without a usable credentials file refuses the start, saying why: a
/// TSD that looks protected but lets everyone in would be worse.
#[test]
fn authentication_without_a_usable_credentials_file_refuses_the_start() {
    let stderr = refused_start("tsd.core.authentication.enable = true\n");
    assert!(
        stderr.contains("tsd.core.authentication.users is not set"),
        "{stderr}"
    );
    let stderr = refused_start(
        "tsd.core.authentication.enable = true\ntsd.core.authentication.users = {dir}/missing\n",
    );
    assert!(
        stderr.contains("cannot read the credentials file"),
        "{stderr}"
    );
    let stderr = refused_start(
        "tsd.core.authentication.enable = true\ntsd.core.authentication.users = {dir}/tsd.conf\n",
    );
    assert!(stderr.contains("invalid credentials file"), "{stderr}");
    assert!(stderr.contains("line 1"), "{stderr}");
}

/// TLS configured with files that cannot be used refuses the start, naming the key at fault.
#[test]
fn tls_without_usable_files_refuses_the_start() {
    let stderr = refused_start(
        "tsd.network.tls.cert = {dir}/missing.crt\ntsd.network.tls.key = {dir}/missing.key\n",
    );
    assert!(stderr.contains("tsd.network.tls.cert"), "{stderr}");
    let stderr = refused_start("tsd.network.tls.key = {dir}/tsd.conf\n");
    assert!(stderr.contains("set together"), "{stderr}");
    let stderr = refused_start(
        "tsd.network.tls.cert = {dir}/tsd.conf\ntsd.network.tls.key = {dir}/tsd.conf\n",
    );
    assert!(stderr.contains("no certificate"), "{stderr}");
}

/// Rollups (RFC 0008): a bad configuration refuses the start in OpenTSDB's words; a good
/// one (a `.json` file) creates the rollup tables and the TSD takes `rollup` lines and
/// `/api/rollup` points, kept through a kill -9.
#[test]
fn rollups_are_configured_as_opentsdb_configures_them() {
    let stderr = refused_start("tsd.rollups.enable = true\n");
    assert!(
        stderr.contains("Rollups were enabled but 'tsd.rollups.config' is null or empty."),
        "{stderr}"
    );
    let stderr = refused_start(
        "tsd.rollups.enable = true\ntsd.rollups.config = {\"aggregationIds\":{\"sum\":0},\"intervals\":[{\"table\":\"r\",\"preAggregationTable\":\"p\",\"interval\":\"1h\",\"rowSpan\":\"1h\",\"defaultInterval\":true}]}\n",
    );
    assert!(
        stderr.contains("Interval [3600] is too large for the span [h]"),
        "{stderr}"
    );
    // Split queries are not implemented: refused, not ignored.
    let stderr = refused_start(
        "tsd.rollups.enable = true\ntsd.rollups.split_query.enable = true\ntsd.rollups.config = {\"aggregationIds\":{\"sum\":0},\"intervals\":[{\"table\":\"r\",\"preAggregationTable\":\"p\",\"interval\":\"1h\",\"rowSpan\":\"1d\",\"defaultInterval\":true}]}\n",
    );
    assert!(
        stderr.contains("tsd.rollups.split_query.enable is not supported"),
        "{stderr}"
    );

    let dir = tempfile::tempdir().unwrap();
    let config = common::rollup_config(dir.path());
    let data = dir.path().join("data");
    let created = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(["create-tables", "--data-dir"])
        .arg(&data)
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&created.stdout).into_owned();
    assert!(created.status.success(), "{listed}");
    let tables: Vec<&str> = listed.lines().collect();
    for t in ["tsdb", "tsdb-agg", "tsdb-rollup-1h", "tsdb-rollup-agg-1h"] {
        assert_eq!(
            tables.iter().filter(|l| **l == t).count(),
            1,
            "{t}: {listed}"
        );
    }
    let (mut child, addr) = common::spawn_tsd_with(Some(&config), &data);
    let mut text: String = (0..1000)
        .map(|i| {
            format!(
                "rollup 1h-sum sys.cpu.user {} {i} host=h{i}\n",
                1356998400 + (i % 24) * 3600
            )
        })
        .collect();
    text.push_str("rollup 2h-sum sys.cpu.user 1356998400 42 host=web01\n");
    let out = telnet_fenced(&addr, &text);
    assert!(
        out.starts_with(
            "rollup: No such rollup: No rollups configured for the interval: 2h\nhourglass "
        ),
        "{out}"
    );
    // So does one acknowledged over HTTP, the answer read just before the kill.
    let body = r#"{"metric":"sys.cpu.user","timestamp":1356998400,"value":5,"tags":{"host":"http"},"interval":"1h","aggregator":"sum"}"#;
    assert_eq!(post_status(&addr, "/api/rollup", body), "HTTP/1.1 204");
    // Acknowledged rollup points survive a kill -9 (they are in the store's journal).
    child.kill().unwrap();
    child.wait().unwrap();
    let store = hourglass_store_fjall::FjallStore::open(&data).unwrap();
    let rows: Vec<hourglass_storage::Row> = hourglass_storage::Store::scan(
        &store,
        "tsdb-rollup-1h",
        &hourglass_storage::ScanRequest::range(Vec::new(), None),
    )
    .unwrap()
    .map(Result::unwrap)
    .collect();
    assert_eq!(rows.len(), 1001);
    assert!(rows.iter().all(|r| r.cells.len() == 1));
}

/// Histograms (RFC 0008 phase 3): a bad codec configuration refuses the start in
/// OpenTSDB's words; with a good one (a `.json` file) telnet `histogram` lines (and an
/// `/api/histogram` point) are stored as OpenTSDB 2.4.1 stores them, survive a kill -9
/// beside raw points, and `tsdb scan` shows the
/// cell as OpenTSDB's scan does (`[Not a data point]`), its import format leaving it out.
#[test]
fn histograms_are_stored_and_scanned_as_opentsdbs() {
    let stderr = refused_start(
        "tsd.core.histograms.config = {\"net.opentsdb.core.SimpleHistogramDecoder\": 256}\n",
    );
    assert!(
        stderr.contains(
            "ID for codec 'net.opentsdb.core.SimpleHistogramDecoder' must be from 0 to 255."
        ),
        "{stderr}"
    );
    let dir = tempfile::tempdir().unwrap();
    let codecs = dir.path().join("histograms.json");
    std::fs::write(
        &codecs,
        r#"{"net.opentsdb.core.SimpleHistogramDecoder": 42}"#,
    )
    .unwrap();
    let config = dir.path().join("tsd.conf");
    std::fs::write(
        &config,
        format!("tsd.core.histograms.config = {}\n", codecs.display()),
    )
    .unwrap();
    let data = dir.path().join("data");
    let (mut child, addr) = common::spawn_tsd_with(Some(&config), &data);
    let out = telnet_fenced(
        &addr,
        "histogram h.m 1356998400 u=0:o=1:0,1=42:1,5=24 host=a\nput h.m 1356998401 7 host=a\n",
    );
    assert!(out.starts_with("hourglass "), "{out}");
    // One over HTTP too, the answer read just before the kill.
    let body = r#"{"metric":"h.m","timestamp":1356998460,"tags":{"host":"a"},"buckets":{"0,1":3}}"#;
    assert_eq!(post_status(&addr, "/api/histogram", body), "HTTP/1.1 204");
    child.kill().unwrap();
    child.wait().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(["scan", "--data-dir"])
        .arg(&data)
        .args(["2013/01/01", "2014/01/01", "sum", "h.m"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        text.contains(
            "  [42, 0, 2, 0, 0, 0, 0, 63, -128, 0, 0, 42, 63, -128, 0, 0, 64, -96, 0, 0, 24, 0, 1]\t[Not a data point]"
        ),
        "{text}"
    );
    assert_eq!(text.matches("[Not a data point]").count(), 2, "{text}");
    assert_eq!(scan(&data, "h.m"), ["h.m 1356998401 7 host=a"]);
}

/// `openssl s_client` (the TLS client operators reach for) against a TSD that requires
/// TLS: telnet `put` and `version` inside TLS, then the point read back over HTTPS through
/// the same port; a plain connection gets nothing.
#[test]
fn telnet_over_tls_works_with_openssl_s_client() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("tsd.crt"), dir.path().join("tsd.key"));
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"])
        .args(["-subj", "/CN=localhost", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl is needed (scripts/test installs it)");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let config = dir.path().join("tsd.conf");
    std::fs::write(
        &config,
        format!(
            "tsd.network.tls.cert = {}\ntsd.network.tls.key = {}\ntsd.network.tls.mode = required\n",
            cert.display(),
            key.display()
        ),
    )
    .unwrap();
    let (mut child, addr) = common::spawn_tsd_with(Some(&config), &dir.path().join("data"));
    // Through TLS, as s_client relays standard input; `exit` makes the TSD close, which
    // ends s_client (`-ign_eof`: not before the answers).
    let s_client = |input: &str| -> String {
        let mut c = Command::new("openssl")
            .args(["s_client", "-quiet", "-ign_eof", "-connect", &addr])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        let out = c.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let telnet = s_client("put tls.metric 1356998400 42 host=a\nversion\nexit\n");
    assert!(telnet.contains("Built on"), "{telnet}");
    assert!(!telnet.contains("put:"), "the put was accepted: {telnet}");
    let http = s_client(
        "GET /api/query?start=1356998000&end=1356999000&m=sum:tls.metric HTTP/1.0\r\n\r\n",
    );
    assert!(
        http.starts_with("HTTP/1.0 200") || http.starts_with("HTTP/1.1 200"),
        "{http}"
    );
    assert!(http.contains(r#""1356998400":42"#), "{http}");
    // A plain client is closed without an answer.
    assert_eq!(telnet_fenced_plain(&addr), "");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// What a plain (not TLS) telnet client reads back.
fn telnet_fenced_plain(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(b"version\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}
