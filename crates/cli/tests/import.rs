#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `tsdb import`: plain, gzipped and stdin input, bad lines reported and skipped, and the
//! same through a running TSD with `--url`.

use std::io::Write;

mod common;
use common::spawn_tsd;
use std::path::Path;
use std::process::{Command, Stdio};

const GOOD_AND_BAD: &str = "sys.cpu.user 1356998400 42 host=web01 cpu=0
sys.cpu.user 1356998410 43.5 host=web01 cpu=0

sys.cpu.user 1356998420 oops host=web01 cpu=0
sys.cpu.user 1356998430 44 host=web01
sys.cpu.user 1356998440 45
sys.cpu.user 1356998450000 46 host=web02
";

fn tsdb(dir: &Path, args: &[&str], stdin: Option<&[u8]>) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .arg(args[0])
        .arg("--data-dir")
        .arg(dir)
        .args(&args[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(bytes) = stdin {
        input.write_all(bytes).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

fn scan(dir: &Path) -> Vec<String> {
    let o = tsdb(
        dir,
        &[
            "scan",
            "--import",
            "2013/01/01",
            "2014/01/01",
            "sum",
            "sys.cpu.user",
        ],
        None,
    );
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn imports_files_reports_bad_lines_and_keeps_good_ones() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("points.txt");
    std::fs::write(&plain, GOOD_AND_BAD).unwrap();
    let gz = dir.path().join("more.txt.gz");
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(b"sys.cpu.user 1356998460 47 host=web01 cpu=0\n")
        .unwrap();
    std::fs::write(&gz, enc.finish().unwrap()).unwrap();
    let data = dir.path().join("data");
    let o = tsdb(
        &data,
        &[
            "import",
            "--auto-metric",
            plain.to_str().unwrap(),
            gz.to_str().unwrap(),
            "-",
        ],
        Some(b"sys.cpu.user 1356998470 48 host=web01 cpu=0\nsys.cpu.user 1356998480 0.1 host=web01 cpu=0\n"),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(1),
        "bad lines make the exit code 1: {err}"
    );
    let file = plain.to_str().unwrap();
    assert!(
        err.contains(&format!("{file}:4: Invalid character 'o' in oops")),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{file}:6: not enough arguments (need least 4, got 3)"
        )),
        "{err}"
    );
    // OpenTSDB's lines: one per file, then the total.
    assert!(
        err.contains(&format!("Processed {file} in ")) && err.contains(" ms, 4 data points ("),
        "{err}"
    );
    assert!(
        err.contains("Processed - in ") && err.contains(" ms, 2 data points ("),
        "{err}"
    );
    let total = err
        .lines()
        .find(|l| l.starts_with("Total: imported 7 data points in "))
        .unwrap_or_else(|| panic!("no total line: {err}"));
    assert!(total.ends_with(" points/s)"), "{total}");
    assert!(err.contains("2 bad line(s) skipped"), "{err}");
    assert_eq!(
        scan(&data),
        vec![
            // Rows in key order: tag pairs sorted by tag key UID (host=1, cpu=2).
            "sys.cpu.user 1356998430 44 host=web01",
            "sys.cpu.user 1356998400 42 host=web01 cpu=0",
            "sys.cpu.user 1356998410 43.5 host=web01 cpu=0",
            "sys.cpu.user 1356998460 47 host=web01 cpu=0",
            "sys.cpu.user 1356998470 48 host=web01 cpu=0",
            // Stored on 4 bytes, as OpenTSDB's importer stores every non-integer.
            "sys.cpu.user 1356998480 0.10000000149011612 host=web01 cpu=0",
            "sys.cpu.user 1356998450000 46 host=web02",
        ]
    );
}

#[test]
fn imports_through_a_running_tsd() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("points.txt");
    std::fs::write(&plain, GOOD_AND_BAD).unwrap();
    let data = dir.path().join("data");
    let (mut server, addr) = spawn_tsd(&data);
    let url = format!("http://{addr}");
    let o = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(["import", "--url", &url, plain.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains(":4: Invalid character 'o' in oops"), "{err}");
    assert!(err.contains("Total: imported 4 data points in "), "{err}");
    Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(server.wait().unwrap().success());
    assert_eq!(scan(&data).len(), 4);
}

/// `rollup` lines (RFC 0008) go to the rollup tables, `put`-style lines beside them to the
/// data table; a rollup line for an interval not configured is reported and skipped.
#[test]
fn imports_rollup_lines_into_the_rollup_tables() {
    let dir = tempfile::tempdir().unwrap();
    let config = common::rollup_config(dir.path());
    let data = dir.path().join("data");
    let o = tsdb(
        &data,
        &[
            "import",
            "--auto-metric",
            "--config",
            config.to_str().unwrap(),
            "-",
        ],
        Some(
            b"rollup 1h-sum sys.cpu.user 1357002000 42 host=web01\n\
              rollup 13m-sum sys.cpu.user 1356998400 1 host=web01\n\
              sys.cpu.user 1356998400 7 host=web01\n",
        ),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("-:2: No rollups configured for the interval: 13m"),
        "{err}"
    );
    assert!(err.contains("Total: imported 2 data points in "), "{err}");
    assert_eq!(scan(&data), ["sys.cpu.user 1356998400 7 host=web01"]);
    // The rollup cell, as OpenTSDB writes it: day row (rowSpan 1d), hour 1, sum (id 0).
    let store = hourglass_store_fjall::FjallStore::open(&data).unwrap();
    let key = [0, 0, 1, 0x50, 0xE2, 0x27, 0x00, 0, 0, 1, 0, 0, 1];
    let row = hourglass_storage::Store::get(
        &store,
        "tsdb-rollup-1h",
        &key,
        &hourglass_storage::ReadOptions::default(),
    )
    .unwrap()
    .expect("the rollup row");
    let cells: Vec<(Vec<u8>, Vec<u8>)> = row
        .cells
        .into_iter()
        .map(|c| (c.qualifier, c.value))
        .collect();
    assert_eq!(cells, [(vec![0, 0x00, 0x10], vec![0x2A])]);
}

/// OpenTSDB's `--skip-errors`: bad lines are skipped without failing the import (exit 0);
/// without it the exit status is 1 (OpenTSDB stops at the first bad line).
#[test]
fn skip_errors_exits_zero_past_bad_lines() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("points.txt");
    std::fs::write(&plain, GOOD_AND_BAD).unwrap();
    let data = dir.path().join("data");
    let file = plain.to_str().unwrap();
    let o = tsdb(
        &data,
        &["import", "--auto-metric", "--skip-errors", file],
        None,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains(&format!("{file}:4: ")), "{err}");
    assert!(err.contains("Total: imported 4 data points in "), "{err}");
    assert_eq!(scan(&data).len(), 4);
    // OpenTSDB reads flags anywhere on the line.
    let o = tsdb(&data, &["import", file, "--skip-errors"], None);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = tsdb(&data, &["import", file], None);
    assert_eq!(o.status.code(), Some(1));
}
