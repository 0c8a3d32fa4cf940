#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `tsdb query` end to end: OpenTSDB's command-line syntax and output lines, reading the data
//! dir directly and asking a running TSD (`--url`).

use std::path::Path;
use std::process::{Command, Output};

mod common;

fn tsdb(args: &[&str], data: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(&args[..1])
        .arg("--data-dir")
        .arg(data)
        .args(&args[1..])
        .output()
        .unwrap()
}

/// OpenTSDB's fixture: 1..300 (web01) and 300..1 (web02) every 30 s from 1356998430.
fn import_fixture(dir: &Path, data: &Path) {
    let mut lines = String::new();
    for i in 0..300 {
        let t = 1356998430 + i * 30;
        lines.push_str(&format!("sys.cpu.user {t} {} host=web01\n", i + 1));
        lines.push_str(&format!("sys.cpu.user {t} {} host=web02\n", 300 - i));
    }
    let file = dir.join("fixture.txt");
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
fn cli_query_prints_opentsdb_lines_locally_and_through_a_tsd() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    import_fixture(dir.path(), &data);
    let args = [
        "query",
        "1356998400",
        "1357041600",
        "sum",
        "sys.cpu.user",
        "max",
        "downsample",
        "60000",
        "avg",
        "sys.cpu.user",
        "host=web01",
    ];
    let o = tsdb(&args, &data);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The command closed its database: the next start need not write the UID table again.
    assert_eq!(
        std::fs::read(data.join("wal").join("uids-at-risk")).unwrap(),
        Vec::<u8>::new()
    );
    let local = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = local.lines().collect();
    assert_eq!(lines.len(), 300 + 151, "{local}");
    assert_eq!(lines[0], "sys.cpu.user 1356998430000 301 {}");
    assert_eq!(
        lines[300],
        "sys.cpu.user 1356998400000 1.000000 {host=web01}"
    );
    assert_eq!(
        lines[301],
        "sys.cpu.user 1356998460000 2.500000 {host=web01}"
    );

    // The same through a running TSD.
    let (mut tsd, addr) = common::spawn_tsd(&data);
    let o = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(["query", "--url", &format!("http://{addr}")])
        .args(&args[1..])
        .output()
        .unwrap();
    tsd.kill().unwrap();
    let _ = tsd.wait();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8(o.stdout).unwrap(), local);

    let usage = tsdb(&["query", "1h-ago", "sum"], &data);
    assert_eq!(usage.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&usage.stderr).contains("Not enough arguments."));
    let unknown = tsdb(&["query", "1356998400", "sum", "nope"], &data);
    assert!(!unknown.status.success());
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("No such name for 'metrics': 'nope'"),
        "{}",
        String::from_utf8_lossy(&unknown.stderr)
    );
}
