#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `tsdb uid treesync` and `tsdb uid treepurge` on a data dir (RFC 0010): trees defined over
//! a running TSD's `/api/tree`, filled by `treesync` from the stored TSMeta, browsed over
//! HTTP again, then purged.
mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::{Value, json};

/// An HTTP/1.0 request: status and body.
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

/// Runs `f` against a TSD over `data`, then stops it over `/diediedie`.
fn with_tsd(conf: &Path, data: &Path, f: impl FnOnce(&str)) {
    let (mut child, addr) = common::spawn_tsd_with(Some(conf), data);
    f(&addr);
    let _ = http(&addr, "GET", "/diediedie", "");
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

fn tsdb(args: &[&str], data: &Path, conf: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(&args[..1])
        .arg("--data-dir")
        .arg(data)
        .arg("--config")
        .arg(conf)
        .args(&args[1..])
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn treesync_fills_trees_from_stored_meta_and_treepurge_empties_them() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let meta_only = dir.path().join("meta.conf");
    std::fs::write(
        &meta_only,
        "tsd.core.meta.enable_tsuid_tracking = true\ntsd.core.meta.enable_realtime_ts = true\n\
         tsd.no_diediedie = false\n",
    )
    .unwrap();
    let with_trees = dir.path().join("trees.conf");
    std::fs::write(
        &with_trees,
        "tsd.core.meta.enable_tsuid_tracking = true\ntsd.core.meta.enable_realtime_ts = true\n\
         tsd.core.tree.enable_processing = true\n",
    )
    .unwrap();
    // Series written with TSMeta, and a tree defined, while tree processing is off.
    with_tsd(&meta_only, &data, |addr| {
        let (s, b) = http(
            addr,
            "POST",
            "/api/tree",
            r#"{"name":"hosts","enabled":true}"#,
        );
        assert_eq!(s, 200, "{b}");
        let rules = r#"[{"treeId":1,"level":0,"order":0,"type":"TAGK","field":"host"},{"treeId":1,"level":1,"order":0,"type":"METRIC"}]"#;
        assert_eq!(http(addr, "POST", "/api/tree/rules", rules).0, 204);
        let points = r#"[{"metric":"sys.cpu.user","timestamp":1356998400,"value":1,"tags":{"host":"web01"}},
            {"metric":"sys.cpu.user","timestamp":1356998400,"value":1,"tags":{"host":"web02"}},
            {"metric":"sys.mem.free","timestamp":1356998400,"value":1,"tags":{"host":"web01"}}]"#;
        assert_eq!(http(addr, "POST", "/api/put", points).0, 204);
        assert_eq!(http(addr, "GET", "/api/tree/branch?treeid=1", "").0, 404);
    });
    // Processing off: treesync does nothing, as OpenTSDB's.
    let o = tsdb(&["uid", "treesync"], &data, &meta_only);
    assert!(o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Tree processing is disabled"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = stdout(&tsdb(&["uid", "treesync"], &data, &with_trees));
    assert!(
        out.contains("Processed 3 time series through 1 enabled trees, 0 skipped"),
        "{out}"
    );
    with_tsd(&meta_only, &data, |addr| {
        let (s, b) = http(addr, "GET", "/api/tree/branch?treeid=1", "");
        assert_eq!(s, 200, "{b}");
        let root: Value = serde_json::from_str(&b).unwrap();
        let hosts: Vec<&str> = root["branches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["displayName"].as_str().unwrap())
            .collect();
        assert_eq!(hosts, vec!["web01", "web02"]);
        let web01 = root["branches"][0]["branchId"].as_str().unwrap();
        let (_, b) = http(addr, "GET", &format!("/api/tree/branch?branch={web01}"), "");
        let branch: Value = serde_json::from_str(&b).unwrap();
        let leaves: Vec<&str> = branch["leaves"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["displayName"].as_str().unwrap())
            .collect();
        assert_eq!(leaves, vec!["sys.cpu.user", "sys.mem.free"]);
        assert_eq!(branch["leaves"][0]["tags"], json!({"host": "web01"}));
    });
    // Purged: the branches go, the definition stays; then the definition too.
    let out = stdout(&tsdb(&["uid", "treepurge", "1"], &data, &meta_only));
    assert!(out.contains("Deleted tree branches for: 1"), "{out}");
    let out = stdout(&tsdb(&["uid", "treepurge", "1", "true"], &data, &meta_only));
    assert!(
        out.contains("Deleted tree branches and definition for: 1"),
        "{out}"
    );
    let o = tsdb(&["uid", "treepurge", "0"], &data, &meta_only);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Invalid Tree ID"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    with_tsd(&meta_only, &data, |addr| {
        assert_eq!(http(addr, "GET", "/api/tree", ""), (200, "[]".to_string()));
        assert_eq!(http(addr, "GET", "/api/tree/branch?treeid=1", "").0, 404);
    });
}
