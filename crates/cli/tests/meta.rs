#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `tsdb search lookup` and `tsdb uid metasync|metapurge` on a data dir.

use std::path::Path;
use std::process::{Command, Output};

fn tsdb(args: &[&str], data: &Path, config: Option<&Path>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tsdb"));
    c.args(&args[..1]).arg("--data-dir").arg(data);
    if let Some(conf) = config {
        c.arg("--config").arg(conf);
    }
    c.args(&args[1..]).output().unwrap()
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

fn import(dir: &Path, data: &Path) {
    let mut lines = String::new();
    for i in 0..5 {
        let t = 1356998430 + i * 3600;
        lines.push_str(&format!("sys.cpu.user {t} {i} host=web01 dc=lga\n"));
        lines.push_str(&format!("sys.cpu.user {t} {i} host=web02 dc=lga\n"));
        lines.push_str(&format!("sys.mem.free {t} {i} host=db01\n"));
    }
    let file = dir.join("points.txt");
    std::fs::write(&file, lines).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(["import", "--auto-metric", "--data-dir"])
        .arg(data)
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn search_lookup_lists_series_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    import(dir.path(), &data);
    let out = stdout(&tsdb(&["search", "lookup", "sys.cpu.user"], &data, None));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines.len(),
        2,
        "one line per series, not per hour row: {out}"
    );
    // Tag key UIDs: host (1) before dc (2).
    assert_eq!(
        lines[0],
        "000001000001000001000002000002 sys.cpu.user host=web01 dc=lga"
    );
    let out = stdout(&tsdb(
        &["search", "lookup", "sys.cpu.user", "host=web02"],
        &data,
        None,
    ));
    assert_eq!(out.lines().count(), 1);
    assert!(out.contains("host=web02"));
    let out = stdout(&tsdb(&["search", "lookup", "*", "host="], &data, None));
    assert_eq!(out.lines().count(), 3);
    let o = tsdb(&["search", "lookup", "nope"], &data, None);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("No such name for 'metrics': 'nope'"));
    let o = tsdb(&["search", "find"], &data, None);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn metasync_builds_meta_data_and_metapurge_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    import(dir.path(), &data);
    let conf = dir.path().join("opentsdb.conf");
    std::fs::write(&conf, "tsd.core.meta.enable_tsuid_tracking = true\n").unwrap();
    // Nothing is tracked yet: the meta table is empty.
    let out = stdout(&tsdb(
        &["search", "lookup", "sys.cpu.user"],
        &data,
        Some(&conf),
    ));
    assert_eq!(out, "");
    let out = stdout(&tsdb(&["uid", "metasync"], &data, Some(&conf)));
    assert!(
        out.contains("Processed 3 time series: 3 TSMeta created, 3 counters created"),
        "{out}"
    );
    assert!(
        out.contains("Updating UID [000001] of type [METRIC]"),
        "{out}"
    );
    let out = stdout(&tsdb(
        &["search", "lookup", "sys.cpu.user"],
        &data,
        Some(&conf),
    ));
    assert_eq!(out.lines().count(), 2, "{out}");
    // A second run has nothing left to do.
    let out = stdout(&tsdb(&["uid", "metasync"], &data, Some(&conf)));
    assert!(
        out.contains("0 TSMeta created, 0 counters created, 0 UIDMeta updated"),
        "{out}"
    );
    let out = stdout(&tsdb(&["uid", "metapurge"], &data, Some(&conf)));
    assert!(
        out.contains("Purged [8] UIDMeta columns from storage"),
        "{out}"
    );
    assert!(
        out.contains("Purged [6] TSMeta columns from storage"),
        "{out}"
    );
    let out = stdout(&tsdb(
        &["search", "lookup", "sys.cpu.user"],
        &data,
        Some(&conf),
    ));
    assert_eq!(out, "");
    // Data untouched.
    let out = stdout(&tsdb(
        &["search", "--use-data-table", "lookup", "sys.cpu.user"],
        &data,
        Some(&conf),
    ));
    assert_eq!(out.lines().count(), 2);
}
