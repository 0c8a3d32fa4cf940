//! Where an embedded data dir's bytes go. Per metric of the data table's groups (RFC 0006):
//! the joint streams' sections (timestamps, integer values, decimal mantissas and
//! corrections, raw floats, hour summaries of RFC 0009, runs and version bytes), the rest of
//! each group value (member fields, family) and its key; the same sections of the encoded
//! cells of rows not in groups (RFC 0005), with what their rows hold besides; then, per keyspace, what the store
//! holds against the bytes of its files (blocks and their compression, indexes, filters), and
//! the data dir's other files.
//!
//! ```sh
//! cargo run --release -p hourglass-engine --example stored_bytes -- DATA_DIR [POINTS]
//! ```
//!
//! DATA_DIR is the data dir of a stopped TSD on the embedded store (one `hourglass-bench
//! realdata` keeps with `HOURGLASS_BENCH_KEEP=1`); with POINTS (the points it was sent) the
//! figures are also given per point of the whole load. It opens the store as a TSD does
//! (stop the TSD first), writes nothing, and prints Markdown tables.

#![allow(clippy::print_stdout)] // a report tool: it prints its tables

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hourglass_engine::cell_codec::{DataCellCodec, JointSections, cell_sections, joint_sections};
use hourglass_storage::{CellForm, ReadOptions, ScanRequest, Store};
use hourglass_store_fjall::FjallStore;

const DATA_TABLE: &str = "tsdb";
const UID_TABLE: &str = "tsdb-uid";
const METRIC_WIDTH: usize = 3;

/// One metric's groups.
#[derive(Debug, Default)]
struct Tally {
    groups: usize,
    members: usize,
    key_bytes: usize,
    value_bytes: usize,
    stream_bytes: usize,
    sections: JointSections,
    /// Groups by their float section's decimal scale (`None`: raw or no floats).
    scales: BTreeMap<Option<u32>, usize>,
}

fn add(into: &mut JointSections, s: &JointSections) {
    into.version += s.version;
    into.summaries += s.summaries;
    into.runs += s.runs;
    into.flags += s.flags;
    into.offsets += s.offsets;
    into.integers += s.integers;
    into.float_head += s.float_head;
    into.mantissas += s.mantissas;
    into.corrections += s.corrections;
    into.raw_floats += s.raw_floats;
    into.integer_points += s.integer_points;
    into.float_points += s.float_points;
}

/// The name of a row or group key's metric ("?" when its UID has none).
fn metric_of(key: &[u8], names: &BTreeMap<Vec<u8>, String>) -> String {
    key.get(..METRIC_WIDTH)
        .and_then(|uid| names.get(uid))
        .cloned()
        .unwrap_or_else(|| "?".to_string())
}

/// Metric UIDs to names, from the UID table's `name:metrics` cells.
fn metric_names(
    store: &FjallStore,
) -> Result<BTreeMap<Vec<u8>, String>, Box<dyn std::error::Error>> {
    let request = ScanRequest {
        start: Vec::new(),
        end: None,
        key_regex: None,
        read: ReadOptions::default(),
        limit: None,
        skip: None,
        series_filter: false,
    };
    let mut names = BTreeMap::new();
    for row in store.scan(UID_TABLE, &request)? {
        let row = row?;
        if let Some(name) = row.value("name", b"metrics") {
            names.insert(row.key.clone(), String::from_utf8_lossy(name).into_owned());
        }
    }
    Ok(names)
}

/// Bytes of the files under `dir`, by their path's first component below it (`store/` by its
/// second): each file's length or allocation, whichever is less, as `hourglass-bench` counts
/// data bytes (fjall sizes a new journal to 64 MiB without writing it).
fn files_by_dir(dir: &Path, out: &mut BTreeMap<String, u64>, top: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let meta = entry.metadata()?;
        if meta.is_dir() {
            files_by_dir(&path, out, top)?;
        } else {
            let rel = path.strip_prefix(top).unwrap_or(&path);
            let mut parts = rel.iter().map(|p| p.to_string_lossy().into_owned());
            let first = parts.next().unwrap_or_default();
            let key = match (first.as_str(), parts.next()) {
                ("store", Some(second)) => format!("store/{second}"),
                _ => first,
            };
            *out.entry(key).or_default() += meta.len().min(meta.blocks() * 512);
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next().map(PathBuf::from) else {
        eprintln!("usage: stored_bytes DATA_DIR [POINTS]");
        std::process::exit(2);
    };
    let sent: Option<f64> = args.next().and_then(|p| p.parse().ok());
    let mut files = BTreeMap::new();
    files_by_dir(&dir, &mut files, &dir)?;
    let store = FjallStore::open(&dir)?.with_cell_codec(DATA_TABLE, Arc::new(DataCellCodec));
    let names = metric_names(&store)?;
    let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
    let mut failure = None;
    store.visit_groups(DATA_TABLE, &mut |g| {
        let metric = metric_of(g.key, &names);
        let t = tallies.entry(metric).or_default();
        t.groups += 1;
        t.key_bytes += g.key.len();
        t.value_bytes += g.value_len;
        if let Some((members, stream)) = g.joint {
            t.members += members.len();
            t.stream_bytes += stream.len();
            match joint_sections(stream, &members) {
                Ok(s) => {
                    add(&mut t.sections, &s);
                    *t.scales.entry(s.scale).or_default() += 1;
                }
                Err(e) => failure = Some(e),
            }
        }
    })?;
    if let Some(e) = failure {
        return Err(e.into());
    }
    let points_of = |s: &JointSections| s.integer_points + s.float_points;
    let all_points: usize = tallies.values().map(|t| points_of(&t.sections)).sum();
    let per = sent.unwrap_or(all_points as f64).max(1.0);
    println!("{} points in joint streams", all_points);
    println!(
        "\nBytes a point of each metric (last column: bytes a point of the whole load, {per:.0} points)\n"
    );
    table_head(&[
        "metric",
        "points",
        "groups",
        "members",
        "times",
        "integers",
        "mantissas",
        "corrections",
        "raw floats",
        "summaries",
        "runs, heads",
        "group fields",
        "keys",
        "all",
        "of the load",
    ]);
    let mut total = Tally::default();
    for (metric, t) in &tallies {
        let s = &t.sections;
        let n = points_of(s).max(1) as f64;
        group_line(metric, t, n, per);
        println!("|   scales (groups) | {:?} |", t.scales);
        total.groups += t.groups;
        total.members += t.members;
        total.key_bytes += t.key_bytes;
        total.value_bytes += t.value_bytes;
        total.stream_bytes += t.stream_bytes;
        add(&mut total.sections, s);
    }
    group_line("all", &total, per, per);
    rows_report(&store, &names, per)?;
    println!("\nKeyspaces: what they hold against their files (bytes a point of the load)\n");
    println!("| keyspace | entries | keys | values | files | files / (keys + values) |");
    println!("|---|---|---|---|---|---|");
    let mut held = 0u64;
    let mut on_disk = 0u64;
    for k in store.keyspace_bytes()? {
        let logical = k.key_bytes + k.value_bytes;
        held += logical;
        on_disk += k.disk_bytes;
        println!(
            "| {} | {} | {:.3} | {:.3} | {:.3} | {:.3} |",
            k.name,
            k.entries,
            k.key_bytes as f64 / per,
            k.value_bytes as f64 / per,
            k.disk_bytes as f64 / per,
            k.disk_bytes as f64 / logical.max(1) as f64
        );
    }
    println!(
        "| all keyspaces | | | {:.3} | {:.3} | {:.3} |",
        held as f64 / per,
        on_disk as f64 / per,
        on_disk as f64 / held.max(1) as f64
    );
    println!("\nFiles of the data dir by folder (bytes a point of the load)\n");
    println!("| folder | bytes | a point |");
    println!("|---|---|---|");
    let mut all_files = 0;
    for (folder, bytes) in &files {
        all_files += bytes;
        println!("| {folder} | {bytes} | {:.3} |", *bytes as f64 / per);
    }
    println!("| all | {all_files} | {:.3} |", all_files as f64 / per);
    Ok(())
}

/// One metric's rows outside groups: their encoded cells' sections.
#[derive(Debug, Default)]
struct RowTally {
    rows: usize,
    cells: usize,
    key_bytes: usize,
    blob_bytes: usize,
    /// The bytes of the cells the rows hold besides the blobs: family, timestamp, lengths.
    cell_bytes: usize,
    sections: JointSections,
}

/// Per metric, the encoded cells of the data table's rows a scan returns in their stored form
/// (rows not in groups; a group's members come back plain and are left out), by section.
fn rows_report(
    store: &FjallStore,
    names: &BTreeMap<Vec<u8>, String>,
    per: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    let request = ScanRequest {
        start: Vec::new(),
        end: None,
        key_regex: None,
        read: ReadOptions {
            encoded_cells: true,
            ..ReadOptions::default()
        },
        limit: None,
        skip: None,
        series_filter: false,
    };
    let mut tallies: BTreeMap<String, RowTally> = BTreeMap::new();
    for row in store.scan(DATA_TABLE, &request)? {
        let row = row?;
        let blobs: Vec<_> = row
            .cells
            .iter()
            .filter(|c| c.form == CellForm::Encoded)
            .collect();
        if blobs.is_empty() {
            continue;
        }
        let metric = metric_of(&row.key, names);
        let t = tallies.entry(metric).or_default();
        t.rows += 1;
        t.key_bytes += row.key.len();
        // A row of one coded cell is RFC 0015's format 0x04: format, family, timestamp.
        let one = blobs.len() == 1 && row.cells.len() == 1;
        for c in blobs {
            t.cells += 1;
            t.blob_bytes += c.value.len();
            // As RFC 0002 writes a coded cell: coded byte, family, timestamp, blob length.
            t.cell_bytes += 1
                + varint_len(c.family.len() as u64)
                + c.family.len()
                + varint_len(((c.timestamp << 1) ^ (c.timestamp >> 63)) as u64)
                + if one {
                    0
                } else {
                    varint_len(c.value.len() as u64)
                };
            add(&mut t.sections, &cell_sections(&c.value)?);
        }
    }
    println!(
        "\nRows not in groups: their encoded cells by section, bytes a point of each metric\n"
    );
    table_head(&[
        "metric",
        "points",
        "rows",
        "cells",
        "times",
        "integers",
        "mantissas",
        "corrections",
        "raw floats",
        "flag runs",
        "other heads",
        "cell fields",
        "keys",
        "all",
        "of the load",
    ]);
    let mut total = RowTally::default();
    for (metric, t) in &tallies {
        row_line(metric, t, per);
        total.rows += t.rows;
        total.cells += t.cells;
        total.key_bytes += t.key_bytes;
        total.blob_bytes += t.blob_bytes;
        total.cell_bytes += t.cell_bytes;
        add(&mut total.sections, &t.sections);
    }
    row_line("all", &total, per);
    Ok(())
}

/// A line of the groups' table: `t`'s bytes a point of `n` points.
fn group_line(metric: &str, t: &Tally, n: f64, per: f64) {
    let s = &t.sections;
    table_line(
        &[
            metric.to_string(),
            (s.integer_points + s.float_points).to_string(),
            t.groups.to_string(),
            t.members.to_string(),
        ],
        s,
        &[
            s.summaries,
            s.version + s.runs + s.flags + s.float_head,
            t.value_bytes - t.stream_bytes,
            t.key_bytes,
            t.value_bytes + t.key_bytes,
        ],
        n,
        per,
    );
}

/// A Markdown table's header row and the line under it.
fn table_head(columns: &[&str]) {
    println!("| {} |", columns.join(" | "));
    println!("|{}", "---|".repeat(columns.len()));
}

fn row_line(metric: &str, t: &RowTally, per: f64) {
    let s = &t.sections;
    let points = s.integer_points + s.float_points;
    let n = points.max(1) as f64;
    // The row's own header (format, cell count) is not in the scan; two bytes a row.
    let fields = t.cell_bytes + 2 * t.rows;
    let all = t.key_bytes + t.blob_bytes + fields;
    table_line(
        &[
            metric.to_string(),
            points.to_string(),
            t.rows.to_string(),
            t.cells.to_string(),
        ],
        s,
        &[
            s.flags,
            s.version + s.runs + s.float_head,
            fields,
            t.key_bytes,
            all,
        ],
        n,
        per,
    );
}

/// A table line: its first columns as they are, then the bytes of the values' sections of
/// `s` and each of `bytes` a point (of `n` points), then the last of `bytes` a point of the
/// whole load (`per`).
fn table_line(first: &[String], s: &JointSections, bytes: &[usize], n: f64, per: f64) {
    let mut line = format!("| {} |", first.join(" | "));
    let sections = [
        s.offsets,
        s.integers,
        s.mantissas,
        s.corrections,
        s.raw_floats,
    ];
    for b in sections.iter().chain(bytes) {
        line.push_str(&format!(" {:.3} |", *b as f64 / n));
    }
    let load = bytes.last().copied().unwrap_or(0);
    println!("{line} {:.3} |", load as f64 / per);
}

fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}
