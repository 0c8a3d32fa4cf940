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
        let metric = g
            .key
            .get(..METRIC_WIDTH)
            .and_then(|uid| names.get(uid))
            .cloned()
            .unwrap_or_else(|| "?".to_string());
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
    println!(
        "| metric | points | groups | members | times | integers | mantissas | corrections | raw floats | summaries | runs, heads | group fields | keys | all | of the load |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut total = Tally::default();
    for (metric, t) in &tallies {
        let s = &t.sections;
        let n = points_of(s).max(1) as f64;
        let fields = t.value_bytes - t.stream_bytes;
        let heads = s.version + s.runs + s.flags + s.float_head;
        let all = t.value_bytes + t.key_bytes;
        println!(
            "| {metric} | {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
            points_of(s),
            t.groups,
            t.members,
            s.offsets as f64 / n,
            s.integers as f64 / n,
            s.mantissas as f64 / n,
            s.corrections as f64 / n,
            s.raw_floats as f64 / n,
            s.summaries as f64 / n,
            heads as f64 / n,
            fields as f64 / n,
            t.key_bytes as f64 / n,
            all as f64 / n,
            all as f64 / per
        );
        println!("|   scales (groups) | {:?} |", t.scales);
        total.groups += t.groups;
        total.members += t.members;
        total.key_bytes += t.key_bytes;
        total.value_bytes += t.value_bytes;
        total.stream_bytes += t.stream_bytes;
        add(&mut total.sections, s);
    }
    let s = &total.sections;
    let heads = s.version + s.runs + s.flags + s.float_head;
    let fields = total.value_bytes - total.stream_bytes;
    println!(
        "| all | {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
        points_of(s),
        total.groups,
        total.members,
        s.offsets as f64 / per,
        s.integers as f64 / per,
        s.mantissas as f64 / per,
        s.corrections as f64 / per,
        s.raw_floats as f64 / per,
        s.summaries as f64 / per,
        heads as f64 / per,
        fields as f64 / per,
        total.key_bytes as f64 / per,
        (total.value_bytes + total.key_bytes) as f64 / per,
        (total.value_bytes + total.key_bytes) as f64 / per,
    );
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
        let metric = row
            .key
            .get(..METRIC_WIDTH)
            .and_then(|uid| names.get(uid))
            .cloned()
            .unwrap_or_else(|| "?".to_string());
        let t = tallies.entry(metric).or_default();
        t.rows += 1;
        t.key_bytes += row.key.len();
        for c in blobs {
            t.cells += 1;
            t.blob_bytes += c.value.len();
            // As RFC 0002 writes a coded cell: coded byte, family, timestamp, blob length.
            t.cell_bytes += 1
                + varint_len(c.family.len() as u64)
                + c.family.len()
                + varint_len(((c.timestamp << 1) ^ (c.timestamp >> 63)) as u64)
                + varint_len(c.value.len() as u64);
            add(&mut t.sections, &cell_sections(&c.value)?);
        }
    }
    println!(
        "\nRows not in groups: their encoded cells by section, bytes a point of each metric\n"
    );
    println!(
        "| metric | points | rows | cells | times | integers | mantissas | corrections | raw floats | flag runs | other heads | cell fields | keys | all | of the load |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut total = RowTally::default();
    for (metric, t) in &tallies {
        row_line(metric, t, Some(per));
        total.rows += t.rows;
        total.cells += t.cells;
        total.key_bytes += t.key_bytes;
        total.blob_bytes += t.blob_bytes;
        total.cell_bytes += t.cell_bytes;
        add(&mut total.sections, &t.sections);
    }
    row_line("all", &total, Some(per));
    Ok(())
}

fn row_line(metric: &str, t: &RowTally, per: Option<f64>) {
    let s = &t.sections;
    let points = s.integer_points + s.float_points;
    let n = points.max(1) as f64;
    // The row's own header (format, cell count) is not in the scan; two bytes a row.
    let fields = t.cell_bytes + 2 * t.rows;
    let all = t.key_bytes + t.blob_bytes + fields;
    let of_load = per.map_or(String::new(), |p| format!("{:.3}", all as f64 / p));
    println!(
        "| {metric} | {points} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {of_load} |",
        t.rows,
        t.cells,
        s.offsets as f64 / n,
        s.integers as f64 / n,
        s.mantissas as f64 / n,
        s.corrections as f64 / n,
        s.raw_floats as f64 / n,
        s.flags as f64 / n,
        (s.version + s.runs + s.float_head) as f64 / n,
        fields as f64 / n,
        t.key_bytes as f64 / n,
        all as f64 / n,
    );
}

fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}
