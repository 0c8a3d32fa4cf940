#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `tsdb index rebuild` and `tsdb fsck --index` on a data dir, and the data dir's
//! `@indexed` mark.

use std::path::Path;
use std::process::{Command, Output};

use hourglass_engine::index;
use hourglass_storage::{Mutation, ReadOptions, ScanRequest, Store};
use hourglass_store_fjall::FjallStore;

fn tsdb(args: &[&str], data: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(&args[..args.len().min(2)])
        .arg("--data-dir")
        .arg(data)
        .args(&args[args.len().min(2)..])
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Two series of `sys.cpu.user` over two days of 2013, imported with `config` (by default
/// one turning the index on).
fn import(dir: &Path, data: &Path, config: Option<&Path>) {
    let on = dir.join("index-on.conf");
    std::fs::write(&on, "tsd.index.enable = true\n").unwrap();
    let config = config.or(Some(&on));
    let mut lines = String::new();
    for (i, host) in ["web01", "web02"].iter().enumerate() {
        for day in 0..2 {
            let t = 1_356_998_400 + day * 86_400 + i as i64 * 60;
            lines.push_str(&format!("sys.cpu.user {t} {i} host={host} dc=lon\n"));
        }
    }
    let file = dir.join("points.txt");
    std::fs::write(&file, lines).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tsdb"));
    cmd.args(["import", "--auto-metric", "--data-dir"])
        .arg(data);
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    let o = cmd.arg(&file).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
}

/// The data dir's store. Tests of this binary spawn `tsdb` processes from other threads: a
/// child between fork and exec holds a copy of every descriptor, the data dir's lock file
/// of a store just dropped here included, so the lock can stay taken for a moment.
fn open_store(data: &Path) -> FjallStore {
    for _ in 0..200 {
        match FjallStore::open(data) {
            Err(hourglass_storage::Error::Unavailable(_)) => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other.unwrap(),
        }
    }
    FjallStore::open(data).unwrap()
}

fn index_keys(data: &Path, table: &str) -> Vec<Vec<u8>> {
    let store = open_store(data);
    store
        .scan(table, &ScanRequest::default())
        .unwrap()
        .map(|r| r.unwrap().key)
        .filter(|k| k[0] != index::kind::STATUS)
        .collect()
}

#[test]
fn fsck_index_finds_a_missing_marker_and_fixes_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    import(dir.path(), &data, None);
    assert!(open_store(&data).is_indexed("tsdb"));

    let o = tsdb(&["fsck", "--index"], &data);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let out = text(&o.stdout);
    assert!(out.contains("Index metrics checked: 1\n"), "{out}");
    assert!(out.contains("Index entries missing: 0\n"), "{out}");

    // Damage: one (series, day) marker gone.
    let marker = index_keys(&data, "tsdb-index")
        .into_iter()
        .find(|k| k[0] == index::kind::PERIOD_SERIES)
        .unwrap();
    {
        let store = open_store(&data);
        store
            .mutate_row("tsdb-index", &marker, &[Mutation::DeleteRow])
            .unwrap();
        store.sync().unwrap();
    }
    let o = tsdb(&["fsck", "--index"], &data);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let hex = hourglass_core::uid::hex_upper(&marker);
    assert!(
        out.contains(&format!("index entry missing: kind=0x10 key={hex}\n")),
        "{out}"
    );
    assert!(out.contains("Index entries missing: 1\n"), "{out}");

    let o = tsdb(&["fsck", "--index", "--fix"], &data);
    assert_eq!(
        o.status.code(),
        Some(1),
        "found before fixed: {}",
        text(&o.stderr)
    );
    assert!(text(&o.stdout).contains("Index rows fixed: 1\n"));
    let o = tsdb(&["fsck", "--index"], &data);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stdout));
}

#[test]
fn rebuild_into_another_table_matches_the_flushed_index() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    import(dir.path(), &data, None);
    let o = tsdb(
        &["index", "rebuild", "--index-table", "tsdb-index-2"],
        &data,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(
        out.starts_with("metric sys.cpu.user: 2 series, 4 series-days\n"),
        "{out}"
    );
    assert!(
        out.contains("Rebuilt the index of 1 metrics: 2 series, 4 series-days"),
        "{out}"
    );
    let flushed = index_keys(&data, "tsdb-index");
    assert!(flushed.len() > 20);
    assert_eq!(index_keys(&data, "tsdb-index-2"), flushed);
    // A metric by name, a time range.
    let o = tsdb(
        &[
            "index",
            "rebuild",
            "--metric",
            "sys.cpu.user",
            "--since",
            "2013/01/02",
            "--until",
            "2013/01/03",
        ],
        &data,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).starts_with("metric sys.cpu.user: 2 series, 2 series-days\n"),
        "{}",
        text(&o.stdout)
    );
    let o = tsdb(&["index", "rebuild", "--metric", "nope"], &data);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("nope"), "{}", text(&o.stderr));
}

#[test]
fn with_the_index_off_nothing_is_written_until_a_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = dir.path().join("opentsdb.conf");
    std::fs::write(&config, "tsd.index.enable = false\n").unwrap();
    import(dir.path(), &data, Some(&config));
    assert!(index_keys(&data, "tsdb-index").is_empty());
    assert!(!open_store(&data).is_indexed("tsdb"));
    let o = tsdb(
        &["fsck", "--index", "--config", config.to_str().unwrap()],
        &data,
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let o = tsdb(
        &["index", "rebuild", "--config", config.to_str().unwrap()],
        &data,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = tsdb(
        &["fsck", "--index", "--config", config.to_str().unwrap()],
        &data,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stdout));
    let store = open_store(&data);
    let status = store
        .get("tsdb-index", &index::status_key(), &ReadOptions::default())
        .unwrap();
    assert!(status.is_some(), "the rebuild wrote a status row");
}

/// An index of format 1 (RFC 0007, "Format 2") is refused by `tsdb fsck --index` and a
/// plain rebuild, and replaced whole by `tsdb index rebuild --replace`: its old rows are
/// gone and the index passes fsck.
#[test]
fn an_index_of_format_1_is_refused_and_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    import(dir.path(), &data, None);
    let on = dir.path().join("index-on.conf");
    // Format 1 recorded, and a row of its layout (a per-series any-metric posting).
    let old_row = [
        &[index::kind::VALUE_METRIC][..],
        &[0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1],
    ]
    .concat();
    {
        let store = open_store(&data);
        store
            .mutate_row(
                "tsdb-index",
                &index::status_key(),
                &[Mutation::set_at("g", b"format".to_vec(), 0, vec![1])],
            )
            .unwrap();
        store
            .mutate_row(
                "tsdb-index",
                &old_row,
                &[Mutation::set_at("g", b"s".to_vec(), 0, Vec::new())],
            )
            .unwrap();
        store.sync().unwrap();
    }
    let refusal = "the tag index table tsdb-index is in format 1, written by an older Hourglass; this binary reads and writes format 2: rebuild it with tsdb index rebuild --replace";
    for args in [
        vec!["fsck", "--index"],
        vec!["index", "rebuild"],
        vec!["index", "rebuild", "--config", on.to_str().unwrap()],
    ] {
        let o = tsdb(&args, &data);
        assert!(!o.status.success(), "{args:?}: {}", text(&o.stdout));
        assert!(
            text(&o.stderr).contains(refusal),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }
    let o = tsdb(
        &["index", "rebuild", "--replace", "--metric", "sys.cpu.user"],
        &data,
    );
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("--replace rebuilds every metric over all time"),
        "{}",
        text(&o.stderr)
    );

    let o = tsdb(
        &[
            "index",
            "rebuild",
            "--replace",
            "--config",
            on.to_str().unwrap(),
        ],
        &data,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(
        out.starts_with("Emptied the index table tsdb-index: "),
        "{out}"
    );
    assert!(
        out.contains("metric sys.cpu.user: 2 series, 4 series-days\n"),
        "{out}"
    );
    let keys = index_keys(&data, "tsdb-index");
    assert!(!keys.contains(&old_row), "the old layout's row is gone");
    assert!(
        keys.iter().any(|k| k[0] == index::kind::VALUE_METRIC),
        "format 2 rows written"
    );
    let status = index::status::read(&open_store(&data), "tsdb-index")
        .unwrap()
        .unwrap();
    assert_eq!(status.format, 2);
    let o = tsdb(
        &["fsck", "--index", "--config", on.to_str().unwrap()],
        &data,
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    assert!(text(&o.stdout).contains("Index entries missing: 0\n"));
}
