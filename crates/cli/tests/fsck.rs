#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `tsdb fsck` and `tsdb uid fsck` on a data dir: exit codes, finding lines, OpenTSDB's
//! summary labels, fixes, and usage errors.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use hourglass_core::schema::{DATA_FAMILY, Schema, UID_NAME_FAMILY};
use hourglass_core::uid::parse_hex;
use hourglass_engine::cell_codec::DataCellCodec;
use hourglass_storage::{Mutation, Store};
use hourglass_store_fjall::FjallStore;

/// OpenTSDB's summary labels, in order.
const LABELS: [&str; 25] = [
    "Key Values Processed",
    "Rows Processed",
    "Valid Datapoints",
    "Annotations",
    "Invalid Row Keys Found",
    "Invalid Rows Deleted",
    "Duplicate Datapoints",
    "Duplicate Datapoints Resolved",
    "Orphaned UID Rows",
    "Orphaned UID Rows Deleted",
    "Possible Future Objects",
    "Unknown Objects",
    "Unknown Objects Deleted",
    "Unparseable Datapoint Values",
    "Unparseable Datapoint Values Deleted",
    "Improperly Encoded Floating Point Values",
    "Improperly Encoded Floating Point Values Fixed",
    "Unparseable Compacted Columns",
    "Unparseable Compacted Columns Deleted",
    "Datapoints Qualified for VLE ",
    "Datapoints Compressed with VLE",
    "Bytes Saved with VLE",
    "Total Errors",
    "Total Correctable Errors",
    "Total Errors Fixed",
];

fn tsdb(args: &[&str], data: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(&args[..1])
        .arg("--data-dir")
        .arg(data)
        .args(&args[1..])
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `sys.cpu.user host=web01` (metric 1, host 1, web01 1) every 30 s in the first hour of 2013.
fn import(dir: &Path, data: &Path) {
    let lines: String = (0..100)
        .map(|i| format!("sys.cpu.user {} {i} host=web01\n", 1356998430 + i * 30))
        .collect();
    let file = dir.join("points.txt");
    std::fs::write(&file, lines).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(["import", "--auto-metric", "--data-dir"])
        .arg(data)
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
}

/// Opens the data dir as `tsdb` does, applies `mutations` to one row, and closes it again.
fn damage(data: &Path, table: &str, key: &[u8], mutations: &[Mutation]) {
    let store = FjallStore::open(data)
        .unwrap()
        .with_cell_codec(&Schema::default().data_table, Arc::new(DataCellCodec));
    store.mutate_row(table, key, mutations).unwrap();
    store.sync().unwrap();
    store.checkpoint().unwrap();
}

/// Checks the summary: OpenTSDB's labels in order, ours after them, then the timing line.
fn assert_summary(out: &str, errors: u64, fixed: u64) {
    let lines: Vec<&str> = out.lines().collect();
    let first = lines
        .iter()
        .position(|l| l.starts_with("Key Values Processed: "))
        .unwrap_or_else(|| panic!("no summary: {out}"));
    for (i, label) in LABELS.iter().enumerate() {
        assert!(
            lines[first + i].starts_with(&format!("{label}: ")),
            "line {i} should be {label:?}: {out}"
        );
    }
    assert!(
        lines.contains(&format!("Total Errors: {errors}").as_str()),
        "{out}"
    );
    assert!(
        lines.contains(&format!("Total Errors Fixed: {fixed}").as_str()),
        "{out}"
    );
    assert!(lines.contains(&"Past Rows Left Uncompacted: 0"), "{out}");
    let last = lines.last().unwrap();
    assert!(
        last.starts_with("Completed fsck in [") && last.ends_with("] seconds"),
        "{out}"
    );
}

#[test]
fn fsck_exit_codes_findings_and_fixes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    import(dir.path(), &data);

    let o = tsdb(&["fsck", "--full-scan"], &data);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert_summary(&out, 0, 0);
    assert!(out.starts_with("Key Values Processed: 1\nRows Processed: 1\nValid Datapoints: 100\n"));
    // The same through a query, flags after it.
    let o = tsdb(
        &[
            "fsck",
            "1356998400",
            "sum",
            "sys.cpu.user",
            "host=web01",
            "--threads",
            "2",
        ],
        &data,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_summary(&text(&o.stdout), 0, 0);

    // A 2-byte integer flag with a 1-byte value in the next hour of the same series.
    let key = parse_hex("00000150E23510000001000001").unwrap();
    damage(
        &data,
        "tsdb",
        &key,
        &[Mutation::set(DATA_FAMILY, vec![0x00, 0x01], vec![5])],
    );
    let finding = "The integer value is 1 bytes long but should be 2 bytes. Key: 00000150E23510000001000001, qualifier [00 01], value [05]";
    let o = tsdb(&["fsck", "--full-scan"], &data);
    assert_eq!(o.status.code(), Some(1));
    let out = text(&o.stdout);
    assert_eq!(
        out.lines().next(),
        Some(format!("{finding}; --fix --delete-bad-values deletes the column").as_str())
    );
    assert_summary(&out, 1, 0);
    assert!(out.contains("Unparseable Datapoint Values: 1\n"));
    // --fix alone does not delete values.
    let o = tsdb(&["fsck", "--full-scan", "--fix"], &data);
    assert_eq!(o.status.code(), Some(1));
    assert_summary(&text(&o.stdout), 1, 0);

    let o = tsdb(
        &["fsck", "--full-scan", "--fix", "--delete-bad-values"],
        &data,
    );
    assert_eq!(o.status.code(), Some(1), "errors were found, even if fixed");
    let out = text(&o.stdout);
    assert_eq!(
        out.lines().next(),
        Some(format!("{finding}; fixed: deleted the column").as_str())
    );
    assert_summary(&out, 1, 1);
    assert!(out.contains("Unparseable Datapoint Values Deleted: 1\n"));

    let o = tsdb(&["fsck", "--full-scan"], &data);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stdout));
    // The series kept every point.
    let o = tsdb(
        &["query", "1356998400", "1357009200", "sum", "sys.cpu.user"],
        &data,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).lines().count(), 100);
}

#[test]
fn fsck_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    import(dir.path(), &data);

    let o = tsdb(&["fsck"], &data);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(
        err.starts_with("Must supply a query or use the '--full-scan' flag\nUsage: fsck [flags] [START-DATE [END-DATE] query [queries...]] \n"),
        "{err}"
    );
    assert!(err.contains("--delete-bad-compacts"), "{err}");
    assert!(o.stdout.is_empty());

    let o = tsdb(&["fsck", "--full-scan", "--threads", "0"], &data);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(text(&o.stderr).trim(), "Must have at least one thread");
    let o = tsdb(&["fsck", "--full-scan", "--threads", "-3"], &data);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(text(&o.stderr).trim(), "Must have at least one thread");
    let o = tsdb(&["fsck", "--full-scan", "--threads", "100000"], &data);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        text(&o.stderr).trim(),
        "Not allowed to run more than 4 threads per core"
    );

    let o = tsdb(&["fsck", "1356998400", "sum"], &data);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).starts_with("Invalid usage.  Not enough arguments."));
    let o = tsdb(&["fsck", "1356998400", "bogus", "sys.cpu.user"], &data);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("No such aggregator: bogus"));
    let o = tsdb(&["fsck", "1356998400", "sum", "nope"], &data);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("No such name for 'metrics': 'nope'"),
        "{}",
        text(&o.stderr)
    );
    let o = tsdb(&["fsck", "--full-scan", "--no-such-flag"], &data);
    assert_eq!(o.status.code(), Some(2));
}

/// As OpenTSDB's: a query on the line decides what is scanned, even with `--full-scan`.
#[test]
fn fsck_query_wins_over_full_scan() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    import(dir.path(), &data);
    let other = dir.path().join("other.txt");
    std::fs::write(&other, "other.m 1356998430 1 host=web01\n").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(["import", "--auto-metric", "--data-dir"])
        .arg(&data)
        .arg(&other)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let rows = |args: &[&str]| {
        let o = tsdb(args, &data);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        let out = text(&o.stdout);
        out.lines()
            .find_map(|l| l.strip_prefix("Rows Processed: "))
            .unwrap_or_else(|| panic!("{out}"))
            .to_string()
    };
    assert_eq!(rows(&["fsck", "--full-scan"]), "2");
    assert_eq!(rows(&["fsck", "2013/01/01", "sum", "other.m"]), "1");
    assert_eq!(
        rows(&["fsck", "--full-scan", "2013/01/01", "sum", "other.m"]),
        "1"
    );
}

#[test]
fn uid_fsck_exit_codes_and_fix() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    import(dir.path(), &data);

    let o = tsdb(&["uid", "fsck"], &data);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(
        out.starts_with("Running in log only mode\nMaximum ID for metrics: 1\n"),
        "{out}"
    );
    assert!(out.ends_with("No errors found.\n"), "{out}");
    assert!(out.contains(" KVs analyzed in "), "{out}");

    // The tag value web01 loses its reverse mapping.
    damage(
        &data,
        "tsdb-uid",
        &[0, 0, 1],
        &[Mutation::delete(UID_NAME_FAMILY, b"tagv".to_vec())],
    );
    let o = tsdb(&["uid", "fsck"], &data);
    assert_eq!(o.status.code(), Some(1), "exit status = number of errors");
    let out = text(&o.stdout);
    assert!(
        out.contains("\nForward tagv mapping is missing reverse mapping: web01 -> 000001\n"),
        "{out}"
    );
    assert!(out.contains("\ntagv: Found 1 errors.\n"), "{out}");
    assert!(out.ends_with("1 errors found.\n"), "{out}");

    let o = tsdb(&["uid", "fsck", "--fix"], &data);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.starts_with("----------------------------------\n-    Running fsck in FIX mode    -\n-      Remove Unknowns: false     -\n"), "{out}");
    assert!(
        out.contains("\nFIX: Restoring tagv reverse mapping: 000001 -> web01\n"),
        "{out}"
    );

    let o = tsdb(&["uid", "fsck", "fix", "delete_unknown"], &data);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stdout));
    assert!(text(&o.stdout).contains("-      Remove Unknowns: true     -"));
    let o = tsdb(&["uid", "tagv", "web01"], &data);
    assert_eq!(text(&o.stdout), "tagv web01: [0, 0, 1]\n");

    let o = tsdb(&["uid", "fsck", "bogus"], &data);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("Usage: uid fsck [fix] [delete_unknown]"));
}
