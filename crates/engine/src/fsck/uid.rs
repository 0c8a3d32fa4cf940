//! `tsdb uid fsck [fix] [delete_unknown]`: checks the UID table as OpenTSDB 2.4's
//! `UidManager fsck` does, with its messages, and optionally repairs it.
//!
//! One full scan collects, per kind (`metrics`, `tagk`, `tagv`), the forward mappings
//! (family `id`: name → UID), the reverse mappings (family `name`: UID → name) and the MAXID
//! counter (row `\x00`), reporting values of the wrong width and unknown qualifiers on the
//! way. Then each kind is cross-checked: forward mappings without a reverse, reverse mappings
//! without a forward (a warning), the two disagreeing, several names sharing one UID, and
//! UIDs above MAXID (future assignments would collide).
//!
//! Differences from OpenTSDB, on purpose:
//! - A UID above MAXID is reported even when MAXID also exceeds the number of mappings
//!   (OpenTSDB then only warns about deleted IDs); reverse mappings count for the highest
//!   UID found too.
//! - Reverse mappings are removed only if they still name what was checked (a
//!   check-and-mutate), so a reverse mapping restored earlier in the same run survives.
//! - Values with the wrong width are left out of the cross-checks (they cannot be compared).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use hourglass_core::schema::{MAXID_ROW, UID_ID_FAMILY, UID_NAME_FAMILY};
use hourglass_core::uid::{Uid, UidKind, hex_upper};
use hourglass_storage::{Cell, Check, Mutation, ReadOptions, ScanRequest};

use crate::uid::format_signed_bytes;
use crate::{Result, Tsdb};

/// Qualifiers of meta data cells in the UID table, not mappings.
const SKIPPED: [&[u8]; 5] = [
    b"ts_meta",
    b"ts_ctr",
    b"metric_meta",
    b"tagk_meta",
    b"tagv_meta",
];

/// The separator lines of OpenTSDB's banners.
const RULE: &str = "----------------------------------";

/// What `uid fsck` may change.
#[derive(Debug, Clone, Copy, Default)]
pub struct UidFsckOptions {
    /// `fix`: repair mappings and MAXID counters.
    pub fix: bool,
    /// `delete_unknown` (with `fix`): delete cells whose qualifier is not a kind.
    pub delete_unknown: bool,
}

/// The outcome: OpenTSDB's log lines in order (without their log prefixes) and the counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UidFsckReport {
    /// Every line: banner, maximum IDs, errors, warnings, fixes and per-kind totals.
    pub lines: Vec<String>,
    /// Errors per kind: metrics, tagk, tagv.
    pub errors_by_kind: [u64; 3],
    /// Warnings (not errors): unknown qualifiers, reverse mappings without a forward one,
    /// MAXID above the number of mappings.
    pub warnings: u64,
    /// Repairs written.
    pub fixes: u64,
    /// Cells read.
    pub kvs: u64,
}

impl UidFsckReport {
    /// Every error of every kind.
    pub fn errors(&self) -> u64 {
        self.errors_by_kind.iter().sum()
    }
}

/// The mappings of one kind, as stored.
#[derive(Debug, Default)]
struct KindMaps {
    /// Name → UID bytes.
    forward: BTreeMap<Vec<u8>, Vec<u8>>,
    /// UID bytes → name.
    reverse: BTreeMap<Vec<u8>, Vec<u8>>,
    max_id: Option<u64>,
    max_found: u64,
}

/// Checks the UID table (and with `options.fix`, repairs it).
pub fn uid_fsck(tsdb: &Tsdb, options: &UidFsckOptions) -> Result<UidFsckReport> {
    let schema = &tsdb.settings().schema;
    let store = tsdb.store();
    let table = &schema.uid_table;
    let mut report = UidFsckReport::default();
    let fix = options.fix;
    if fix {
        report.lines.extend([
            RULE.to_string(),
            "-    Running fsck in FIX mode    -".to_string(),
            format!("-      Remove Unknowns: {}     -", options.delete_unknown),
            RULE.to_string(),
        ]);
    } else {
        report.lines.push("Running in log only mode".to_string());
    }
    let mut maps: [KindMaps; 3] = Default::default();
    let request = ScanRequest {
        read: ReadOptions::latest(),
        ..Default::default()
    };
    for row in store.scan(table, &request)? {
        let row = row?;
        for cell in &row.cells {
            report.kvs += 1;
            let q = cell.qualifier.as_slice();
            if SKIPPED.contains(&q) {
                continue;
            }
            let Some(kind) = UidKind::ALL
                .into_iter()
                .find(|k| k.qualifier().as_bytes() == q)
            else {
                report.warnings += 1;
                report.lines.push(format!(
                    "Unknown qualifier {} in row {}",
                    hex_upper(q),
                    hex_upper(&row.key)
                ));
                if fix && options.delete_unknown {
                    store.mutate_row(
                        table,
                        &row.key,
                        &[Mutation::delete(&cell.family, q.to_vec())],
                    )?;
                    report.fixes += 1;
                    report.lines.push(format!(
                        "FIX: Removed unknown qualifier {} in row {}",
                        hex_upper(q),
                        hex_upper(&row.key)
                    ));
                }
                continue;
            };
            let m = &mut maps[kind.index()];
            let width = usize::from(schema.uid_width(kind));
            if row.key == MAXID_ROW {
                match <[u8; 8]>::try_from(cell.value.as_slice()) {
                    Ok(bytes) => {
                        let max = u64::from_be_bytes(bytes);
                        m.max_id = Some(max);
                        report.lines.push(format!("Maximum ID for {kind}: {max}"));
                    }
                    Err(_) => error(
                        &mut report,
                        kind,
                        format!(
                            "Invalid maximum ID for {kind}: should be on 8 bytes: .  kv={}",
                            kv_text(&row.key, cell)
                        ),
                    ),
                }
                continue;
            }
            if cell.family == UID_ID_FAMILY {
                if cell.value.len() != width {
                    error(
                        &mut report,
                        kind,
                        format!(
                            "Invalid {kind} ID of length {} (expected: {width}).  kv={}",
                            cell.value.len(),
                            kv_text(&row.key, cell)
                        ),
                    );
                    continue;
                }
                if let Some(old) = m.forward.get(&row.key) {
                    if *old != cell.value {
                        let name = text(&row.key);
                        error(
                            &mut report,
                            kind,
                            format!(
                                "Duplicate forward {kind} mapping: {name} -> {} and {name} -> {}.  kv={}",
                                hex_upper(old),
                                hex_upper(&cell.value),
                                kv_text(&row.key, cell)
                            ),
                        );
                    }
                    continue;
                }
                m.max_found = m.max_found.max(uid_value(&cell.value));
                m.forward.insert(row.key.clone(), cell.value.clone());
            } else if cell.family == UID_NAME_FAMILY {
                if row.key.len() != width {
                    error(
                        &mut report,
                        kind,
                        format!(
                            "Invalid {kind} ID of length {} (expected: {width}).  kv={}",
                            row.key.len(),
                            kv_text(&row.key, cell)
                        ),
                    );
                    continue;
                }
                if let Some(old) = m.reverse.get(&row.key) {
                    if *old != cell.value {
                        error(
                            &mut report,
                            kind,
                            format!(
                                "Duplicate reverse {kind}  mapping: {} -> {} and {} -> {}.  kv={}",
                                text(&cell.value),
                                text(old),
                                text(&cell.value),
                                hex_upper(&row.key),
                                kv_text(&row.key, cell)
                            ),
                        );
                    }
                    continue;
                }
                m.max_found = m.max_found.max(uid_value(&row.key));
                m.reverse.insert(row.key.clone(), cell.value.clone());
            }
        }
    }

    for kind in UidKind::ALL {
        let m = &maps[kind.index()];
        let q = kind.qualifier().as_bytes();
        let mut by_id: BTreeMap<&[u8], BTreeSet<&[u8]>> = BTreeMap::new();
        for (name, id) in &m.forward {
            by_id.entry(id).or_default().insert(name);
        }
        let mut collisions_fixed: HashSet<&[u8]> = HashSet::new();
        let restore = |report: &mut UidFsckReport, id: &[u8], name: &[u8]| -> Result<()> {
            store.mutate_row(
                table,
                id,
                &[Mutation::set(UID_NAME_FAMILY, q.to_vec(), name.to_vec())],
            )?;
            report.fixes += 1;
            report.lines.push(format!(
                "FIX: Restoring {kind} reverse mapping: {} -> {}",
                hex_upper(id),
                text(name)
            ));
            Ok(())
        };
        // Several names on one UID: each forward mapping goes, one `fsck.<names>` takes it.
        let fix_collision = |report: &mut UidFsckReport, id: &[u8]| -> Result<()> {
            let names = by_id.get(id).cloned().unwrap_or_default();
            for name in &names {
                store.mutate_row(table, name, &[Mutation::delete(UID_ID_FAMILY, q.to_vec())])?;
                report.fixes += 1;
                report.lines.push(format!(
                    "FIX: Removed forward {kind} mapping for {} -> {}",
                    text(name),
                    hex_upper(id)
                ));
            }
            let joined: Vec<String> = names.iter().map(|n| text(n)).collect();
            let fsck_name = format!("fsck.{}", joined.join("."));
            store.mutate_row(
                table,
                &hourglass_core::uid::name_bytes(&fsck_name),
                &[Mutation::set(UID_ID_FAMILY, q.to_vec(), id.to_vec())],
            )?;
            report.fixes += 1;
            report.lines.push(format!(
                "FIX: Created forward {kind} mapping for fsck'd UID {fsck_name} -> {}",
                hex_upper(id)
            ));
            restore(report, id, &hourglass_core::uid::name_bytes(&fsck_name))?;
            report.lines.extend([
                RULE.to_string(),
                "-     UID COLLISION DETECTED     -".to_string(),
                format!("Corrupted UID [{}] renamed to [{fsck_name}]", hex_upper(id)),
                RULE.to_string(),
            ]);
            Ok(())
        };

        for (name, id) in &m.forward {
            let collision = by_id.get(id.as_slice()).is_some_and(|n| n.len() > 1);
            match m.reverse.get(id) {
                None => {
                    error(
                        &mut report,
                        kind,
                        format!(
                            "Forward {kind} mapping is missing reverse mapping: {} -> {}",
                            text(name),
                            hex_upper(id)
                        ),
                    );
                    if fix {
                        if collision {
                            if collisions_fixed.insert(id.as_slice()) {
                                fix_collision(&mut report, id)?;
                            }
                        } else {
                            restore(&mut report, id, name)?;
                        }
                    }
                }
                Some(found) if found == name => {}
                Some(found) => {
                    error(
                        &mut report,
                        kind,
                        format!(
                            "Forward {kind} mapping {} -> {} is different than reverse mapping: {} -> {}",
                            text(name),
                            hex_upper(id),
                            hex_upper(id),
                            text(found)
                        ),
                    );
                    match m.forward.get(found) {
                        Some(id2) => error(
                            &mut report,
                            kind,
                            format!(
                                "Inconsistent forward {kind} mapping {} -> {} vs {} -> {} / {} -> {}",
                                text(name),
                                hex_upper(id),
                                text(name),
                                text(found),
                                text(found),
                                hex_upper(id2)
                            ),
                        ),
                        None => error(
                            &mut report,
                            kind,
                            format!(
                                "Duplicate forward {kind} mapping {} -> {} and null -> {}",
                                text(name),
                                hex_upper(id),
                                text(found)
                            ),
                        ),
                    }
                    if fix {
                        if collision {
                            if collisions_fixed.insert(id.as_slice()) {
                                fix_collision(&mut report, id)?;
                            }
                        } else {
                            restore(&mut report, id, name)?;
                        }
                    }
                }
            }
        }

        for (id, name) in &m.reverse {
            let remove = |report: &mut UidFsckReport, with_meta: bool| -> Result<bool> {
                let mut mutations = vec![Mutation::delete(UID_NAME_FAMILY, q.to_vec())];
                if with_meta {
                    mutations.push(Mutation::delete(
                        UID_NAME_FAMILY,
                        meta_qualifier(kind).as_bytes().to_vec(),
                    ));
                }
                let still = Check {
                    family: UID_NAME_FAMILY.into(),
                    qualifier: q.to_vec(),
                    expected: Some(name.clone()),
                };
                let done = store.check_and_mutate(table, id, &still, &mutations)?;
                if done {
                    report.fixes += 1;
                }
                Ok(done)
            };
            match m.forward.get(name) {
                None => {
                    report.warnings += 1;
                    report.lines.push(format!(
                        "Reverse {kind} mapping is missing forward mapping: {} -> {}",
                        text(name),
                        hex_upper(id)
                    ));
                    if fix && remove(&mut report, true)? {
                        report.lines.push(format!(
                            "FIX: Removed {kind} reverse mapping: {} -> {}",
                            hex_upper(id),
                            text(name)
                        ));
                    }
                }
                Some(found) if found == id => {}
                Some(found) => {
                    let msg = match m.reverse.get(found) {
                        Some(name2) => format!(
                            "Inconsistent reverse {kind} mapping {} -> {} vs {} -> {} / {} -> {}",
                            hex_upper(id),
                            text(name),
                            hex_upper(found),
                            text(name),
                            text(name2),
                            hex_upper(found)
                        ),
                        None => format!(
                            "Duplicate reverse {kind} mapping {} -> {} and {} -> null",
                            hex_upper(id),
                            text(name),
                            hex_upper(found)
                        ),
                    };
                    error(&mut report, kind, msg);
                    // A UID whose forward mappings were just renamed keeps its new reverse.
                    if fix
                        && !collisions_fixed.contains(id.as_slice())
                        && remove(&mut report, false)?
                    {
                        report.lines.push(format!(
                            "FIX: Removed {kind} reverse mapping: {} -> {}",
                            hex_upper(id),
                            text(name)
                        ));
                    }
                }
            }
        }

        let max_id = m.max_id.unwrap_or(0);
        let entries = m.forward.len().max(m.reverse.len()) as u64;
        if max_id < m.max_found {
            error(
                &mut report,
                kind,
                format!(
                    "We found an ID of {} for {kind} but the max ID is only {max_id}!  Future IDs may be double-assigned!",
                    m.max_found
                ),
            );
            if fix {
                match i64::try_from(m.max_found - max_id) {
                    Ok(delta) if m.max_found <= i64::MAX as u64 => {
                        store.increment(table, MAXID_ROW, UID_ID_FAMILY, q, delta)?;
                        report.fixes += 1;
                        report
                            .lines
                            .push(format!("FIX: Updated max ID for {kind} to {}", m.max_found));
                    }
                    _ => report
                        .lines
                        .push(format!("Ran out of UIDs for {kind}. Unable to fix max ID")),
                }
            }
        } else if max_id > entries {
            report.warnings += 1;
            report.lines.push(format!(
                "Max ID for {kind} is {max_id} but only {entries} entries were found.  Maybe {} IDs were deleted?",
                max_id - entries
            ));
        }
    }
    for kind in UidKind::ALL {
        let n = report.errors_by_kind[kind.index()];
        if n > 0 {
            report.lines.push(format!("{kind}: Found {n} errors."));
        }
    }
    if report.fixes > 0 {
        tsdb.uids().drop_caches();
    }
    Ok(report)
}

/// Counts an error of `kind` and keeps its line.
fn error(report: &mut UidFsckReport, kind: UidKind, msg: String) {
    report.errors_by_kind[kind.index()] += 1;
    report.lines.push(msg);
}

/// The UID meta qualifier of a kind (`metric_meta` for metrics).
fn meta_qualifier(kind: UidKind) -> &'static str {
    match kind {
        UidKind::Metric => "metric_meta",
        UidKind::TagKey => "tagk_meta",
        UidKind::TagValue => "tagv_meta",
    }
}

fn uid_value(bytes: &[u8]) -> u64 {
    Uid::from_bytes(bytes).map_or(0, |u| u.0)
}

fn text(bytes: &[u8]) -> String {
    hourglass_core::uid::name_from_bytes(bytes)
}

/// A cell as asynchbase prints a `KeyValue`.
fn kv_text(key: &[u8], cell: &Cell) -> String {
    format!(
        "KeyValue(key={}, family={}, qualifier={}, value={}, timestamp={})",
        pretty(key),
        pretty(cell.family.as_bytes()),
        pretty(&cell.qualifier),
        pretty(&cell.value),
        cell.timestamp
    )
}

/// Bytes as asynchbase's `Bytes.pretty`: a quoted string with escapes when at least half
/// the bytes are printable ASCII, else Java's `Arrays.toString` of signed bytes.
pub fn pretty(bytes: &[u8]) -> String {
    let printable = bytes.iter().filter(|b| (32..127).contains(*b)).count();
    if printable * 2 < bytes.len() {
        return format_signed_bytes(bytes);
    }
    let mut s = String::with_capacity(bytes.len() + 2);
    s.push('"');
    for b in bytes {
        match b {
            b'\n' => s.push_str("\\n"),
            b'\t' => s.push_str("\\t"),
            32..=126 => s.push(char::from(*b)),
            _ => s.push_str(&format!("\\x{b:02X}")),
        }
    }
    s.push('"');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pretty_bytes() {
        assert_eq!(pretty(b"sys.cpu"), "\"sys.cpu\"");
        assert_eq!(pretty(&[0, 0, 1]), "[0, 0, 1]");
        assert_eq!(pretty(&[b'a', 0xFF]), "\"a\\xFF\"");
        assert_eq!(pretty(b""), "\"\"");
    }
}
