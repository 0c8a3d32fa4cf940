#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The `tsdb` binary end to end: real processes on a real data dir.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn tsdb(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tsdb"));
    cmd.args(&args[..1])
        .arg("--data-dir")
        .arg(dir)
        .args(&args[1..]);
    cmd.output().expect("run tsdb")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn mkmetric_and_uid_speak_opentsdb() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = tsdb(d, &["mkmetric", "mysql.bytes_received", "mysql.bytes_sent"]);
    assert!(o.status.success());
    assert_eq!(
        stdout(&o),
        "metrics mysql.bytes_received: [0, 0, 1]\nmetrics mysql.bytes_sent: [0, 0, 2]\n"
    );
    // Assigning again prints the existing mapping.
    assert_eq!(
        stdout(&tsdb(d, &["uid", "assign", "metrics", "mysql.bytes_sent"])),
        "metrics mysql.bytes_sent: [0, 0, 2]\n"
    );
    assert_eq!(
        stdout(&tsdb(d, &["uid", "assign", "tagv", "web01", "web02"])),
        "tagv web01: [0, 0, 1]\ntagv web02: [0, 0, 2]\n"
    );
    assert_eq!(
        stdout(&tsdb(d, &["uid", "metrics", "2"])),
        "metrics mysql.bytes_sent: [0, 0, 2]\n"
    );
    assert_eq!(
        stdout(&tsdb(d, &["uid", "mysql.bytes_received"])),
        "metrics mysql.bytes_received: [0, 0, 1]\n"
    );
    assert_eq!(
        stdout(&tsdb(d, &["uid", "grep", "tagv", "web"])),
        "tagv web01: [0, 0, 1]\ntagv web02: [0, 0, 2]\n"
    );
    // Options after the subcommand are options too, as OpenTSDB's tools read them; a word
    // the subcommand takes (`fsck --fix`) stays the subcommand's.
    let late = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(["uid", "metrics", "2", "--data-dir"])
        .arg(d)
        .output()
        .expect("run tsdb");
    assert_eq!(
        stdout(&late),
        "metrics mysql.bytes_sent: [0, 0, 2]\n",
        "{late:?}"
    );
    let mut inline = std::ffi::OsString::from("--data-dir=");
    inline.push(d);
    let late = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(["uid", "grep", "tagv"])
        .arg(&inline)
        .args(["WEB", "-i"])
        .output()
        .expect("run tsdb");
    assert_eq!(
        stdout(&late),
        "tagv web01: [0, 0, 1]\ntagv web02: [0, 0, 2]\n",
        "{late:?}"
    );
    let missing = tsdb(d, &["uid", "metrics", "nope"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("No such name for 'metrics': 'nope'")
    );
    assert_eq!(tsdb(d, &["uid", "grep", "zzz"]).status.code(), Some(1));
    assert_eq!(
        stdout(&tsdb(
            d,
            &["uid", "rename", "metrics", "mysql.bytes_sent", "mysql.sent"]
        )),
        "metrics mysql.bytes_sent -> mysql.sent\n"
    );
    assert_eq!(
        stdout(&tsdb(d, &["uid", "metrics", "2"])),
        "metrics mysql.sent: [0, 0, 2]\n"
    );
    assert!(
        tsdb(d, &["uid", "delete", "metrics", "mysql.sent"])
            .status
            .success()
    );
    assert_eq!(
        tsdb(d, &["uid", "metrics", "mysql.sent"]).status.code(),
        Some(1)
    );
    let bad = tsdb(d, &["uid", "assign", "metrics", "bad name"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("illegal character"));
    assert_eq!(
        tsdb(d, &["uid", "rename", "metrics"]).status.code(),
        Some(2)
    );
}

fn acked_points(dir: &Path) -> HashSet<i64> {
    let o = tsdb(
        dir,
        &[
            "scan",
            "--import",
            "2013/01/01",
            "2014/01/01",
            "sum",
            "crash.test",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    stdout(&o)
        .lines()
        .map(|l| {
            l.split(' ')
                .nth(2)
                .and_then(|v| v.parse().ok())
                .expect("value")
        })
        .collect()
}

#[test]
fn sigkill_mid_ingest_keeps_every_acknowledged_batch() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(["debug-ingest", "--data-dir"])
        .arg(dir.path())
        .args(["--batch", "500"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn ingest");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut acked = 0u64;
    while acked < 40_000 {
        let line = lines.next().expect("ingest output").unwrap();
        acked = line.strip_prefix("acked ").unwrap().parse().unwrap();
    }
    // A second process cannot open the data dir while the first holds it.
    let busy = tsdb(dir.path(), &["uid", "metrics", "crash.test"]);
    assert_eq!(busy.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&busy.stderr).contains("data dir in use"),
        "{}",
        String::from_utf8_lossy(&busy.stderr)
    );
    child.kill().expect("SIGKILL");
    child.wait().unwrap();
    let stored = acked_points(dir.path());
    for k in 0..acked as i64 {
        assert!(
            stored.contains(&k),
            "acknowledged point {k} of {acked} lost"
        );
    }
}

#[test]
fn scan_compact_rewrites_open_rows_on_demand() {
    let dir = tempfile::tempdir().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let base = now - now % 3600;
    let file = dir.path().join("pts.txt");
    // Points of the current hour: written as a partial cell per import, not yet compacted.
    std::fs::write(
        &file,
        format!("m.open {base} 1 host=a\nm.open {} 2 host=a\n", base + 1),
    )
    .unwrap();
    let data = dir.path().join("data");
    let import = |f: &Path| {
        Command::new(env!("CARGO_BIN_EXE_tsdb"))
            .args(["import", "--auto-metric", "--data-dir"])
            .arg(&data)
            .arg(f)
            .output()
            .unwrap()
    };
    assert!(import(&file).status.success());
    std::fs::write(&file, format!("m.open {} 3 host=a\n", base + 2)).unwrap();
    assert!(import(&file).status.success());
    let cells = |d: &Path| {
        let o = tsdb(d, &["scan", "1h-ago", "sum", "m.open"]);
        stdout(&o).lines().filter(|l| l.starts_with("  [")).count()
    };
    assert_eq!(cells(&data), 2, "two partial cells before");
    let o = tsdb(&data, &["scan", "--compact", "1h-ago", "sum", "m.open"]);
    assert_eq!(stdout(&o), "m.open: 1 of 1 row(s) rewritten\n");
    assert_eq!(cells(&data), 1, "one compacted cell after");
    let o = tsdb(&data, &["scan", "--import", "1h-ago", "sum", "m.open"]);
    assert_eq!(stdout(&o).lines().count(), 3);
}
