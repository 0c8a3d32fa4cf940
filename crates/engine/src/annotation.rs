//! Annotations: notes on a series (stored in its data row) or global (in the row whose metric
//! UID is all zeros, never salted), one cell each with an odd-length qualifier (see
//! [`hourglass_core::annotation`]) and the annotation's JSON as value.
//!
//! Updates follow OpenTSDB: a field counts as given when it differs from its default; an
//! update giving nothing is [`Error::NotModified`]; POST merges with the stored note, PUT
//! replaces it. Writes are compare-and-set against the stored bytes.

use std::collections::{BTreeMap, HashSet};

use hourglass_core::annotation::{decode_qualifier, encode_qualifier, is_annotation_qualifier};
use hourglass_core::rowkey::apply_salt;
use hourglass_core::schema::{DATA_FAMILY, Schema};
use hourglass_core::time::{MAX_TIMESPAN, base_time_of_ms, to_millis};
use hourglass_core::uid::parse_hex;
use hourglass_storage::{Check, Mutation, ReadOptions, RowMutation, ScanRequest};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::meta::{check_tsuid, json_custom, json_string};
use crate::{Error, Result, Tsdb};

/// One annotation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Annotation {
    /// Upper-case hex TSUID; empty for a global annotation.
    pub tsuid: String,
    /// Seconds or milliseconds, as given.
    pub start_time: i64,
    pub end_time: i64,
    pub description: String,
    pub notes: String,
    pub custom: Option<BTreeMap<String, String>>,
}

#[derive(Serialize)]
struct ApiJson<'a> {
    tsuid: &'a str,
    description: &'a str,
    notes: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    custom: &'a Option<BTreeMap<String, String>>,
    #[serde(rename = "startTime")]
    start_time: i64,
    #[serde(rename = "endTime")]
    end_time: i64,
}

#[derive(Serialize)]
struct StoredJson<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    tsuid: &'a str,
    #[serde(rename = "startTime")]
    start_time: i64,
    #[serde(rename = "endTime")]
    end_time: i64,
    description: &'a str,
    notes: &'a str,
    custom: &'a Option<BTreeMap<String, String>>,
}

fn field_time(obj: &Map<String, Value>, key: &str) -> Result<Option<i64>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n.as_i64().map(Some).ok_or_else(|| {
            Error::invalid(format!(
                "Unable to parse the given JSON: field '{key}' must be an integer"
            ))
        }),
        Some(Value::String(s)) => s.trim().parse::<i64>().map(Some).map_err(|_| {
            Error::invalid(format!(
                "Unable to parse the given JSON: field '{key}' must be an integer"
            ))
        }),
        Some(_) => Err(Error::invalid(format!(
            "Unable to parse the given JSON: field '{key}' must be an integer"
        ))),
    }
}

impl Annotation {
    /// OpenTSDB's API JSON: tsuid, description, notes, custom (when set), startTime, endTime.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(ApiJson {
            tsuid: &self.tsuid,
            description: &self.description,
            notes: &self.notes,
            custom: &self.custom,
            start_time: self.start_time,
            end_time: self.end_time,
        })
        .unwrap_or(Value::Null)
    }

    /// The stored JSON: tsuid (series notes only), startTime, endTime, description, notes,
    /// custom (`null` or keys sorted).
    pub fn storage_json(&self) -> Vec<u8> {
        serde_json::to_vec(&StoredJson {
            tsuid: &self.tsuid,
            start_time: self.start_time,
            end_time: self.end_time,
            description: &self.description,
            notes: &self.notes,
            custom: &self.custom,
        })
        .unwrap_or_default()
    }

    /// Reads stored JSON (unknown fields ignored, missing ones default).
    pub fn from_stored(bytes: &[u8]) -> Result<Annotation> {
        match serde_json::from_slice::<Value>(bytes) {
            Ok(Value::Object(obj)) => Ok(AnnotationUpdate::from_json(&obj)?.note),
            _ => Err(Error::Corrupt("annotation JSON could not be parsed".into())),
        }
    }

    /// Start time in milliseconds.
    pub fn start_ms(&self) -> i64 {
        to_millis(self.start_time)
    }
}

/// An annotation from a request, with the fields that count as changes.
#[derive(Debug, Clone, Default)]
pub struct AnnotationUpdate {
    pub note: Annotation,
    /// JSON names of the fields given with a non-default value.
    pub changed: HashSet<&'static str>,
}

impl AnnotationUpdate {
    /// Reads an annotation object (unknown fields ignored, as OpenTSDB).
    pub fn from_json(obj: &Map<String, Value>) -> Result<AnnotationUpdate> {
        let mut u = AnnotationUpdate::default();
        if let Some(t) = json_string(obj, "tsuid")? {
            u.note.tsuid = t;
        }
        if let Some(t) = field_time(obj, "startTime")? {
            u.note.start_time = t;
        }
        if let Some(t) = field_time(obj, "endTime")? {
            u.note.end_time = t;
            if t != 0 {
                u.changed.insert("endTime");
            }
        }
        if let Some(d) = json_string(obj, "description")? {
            if !d.is_empty() {
                u.changed.insert("description");
            }
            u.note.description = d;
        }
        if let Some(n) = json_string(obj, "notes")? {
            if !n.is_empty() {
                u.changed.insert("notes");
            }
            u.note.notes = n;
        }
        if let Some(custom) = json_custom(obj)? {
            u.note.custom = Some(custom);
            u.changed.insert("custom");
        }
        Ok(u)
    }
}

/// The TSUID bytes of a note (None for a global one), checked.
fn tsuid_bytes(schema: &Schema, tsuid: &str) -> Result<Option<Vec<u8>>> {
    if tsuid.is_empty() {
        return Ok(None);
    }
    let bytes = parse_hex(tsuid)?;
    check_tsuid(schema, &bytes)?;
    Ok(Some(bytes))
}

/// Row key holding annotations of `tsuid` (None: global) for the hour `base`.
pub fn row_key(schema: &Schema, tsuid: Option<&[u8]>, base: u32) -> Vec<u8> {
    let salt = usize::from(schema.salt_width);
    let metric = usize::from(schema.metric_width);
    let mut key = vec![0u8; salt];
    match tsuid {
        Some(t) => {
            key.extend_from_slice(&t[..metric.min(t.len())]);
            key.extend_from_slice(&base.to_be_bytes());
            key.extend_from_slice(&t[metric.min(t.len())..]);
            apply_salt(schema, &mut key);
        }
        None => {
            // Global notes: all-zero metric, never salted.
            key.resize(salt + metric, 0);
            key.extend_from_slice(&base.to_be_bytes());
        }
    }
    key
}

/// The base hour (seconds) of the row holding time `ms`, clamped to the 4-byte range.
pub(crate) fn base_hour(ms: i64) -> u32 {
    base_time_of_ms(ms).clamp(0, i64::from(u32::MAX)) as u32
}

/// Where a note lives: row key and qualifier.
fn location(schema: &Schema, tsuid: &str, start_time: i64) -> Result<(Vec<u8>, Vec<u8>)> {
    if start_time < 1 {
        return Err(Error::invalid("The start timestamp has not been set"));
    }
    let tsuid = tsuid_bytes(schema, tsuid)?;
    let (base, qualifier) = encode_qualifier(start_time)?;
    Ok((row_key(schema, tsuid.as_deref(), base), qualifier))
}

/// The tag index's `0x30` key of a note of `tsuid` (None: global) starting at `start_ms`.
fn place_key(schema: &Schema, tsuid: Option<&[u8]>, start_ms: i64) -> Vec<u8> {
    let metric = usize::from(schema.metric_width);
    match tsuid {
        Some(t) => {
            let at = metric.min(t.len());
            crate::index::note_key(&t[..at], start_ms, &t[at..])
        }
        None => crate::index::note_key(&vec![0u8; metric], start_ms, &[]),
    }
}

/// Writes (`Some(true)`) or removes the index places of notes, when this TSD maintains the
/// tag index (RFC 0007: a note's place is written before the note, removed after it).
fn set_places(tsdb: &Tsdb, keys: &[Vec<u8>], present: bool) -> Result<()> {
    let settings = tsdb.settings();
    if !settings.index || keys.is_empty() {
        return Ok(());
    }
    let rows: Vec<RowMutation> = keys
        .iter()
        .map(|key| RowMutation {
            key: key.clone(),
            mutations: if present {
                vec![Mutation::set_at(
                    crate::index::GLOBAL_FAMILY,
                    crate::index::NOTE_QUALIFIER,
                    0,
                    Vec::new(),
                )]
            } else {
                vec![Mutation::DeleteRow]
            },
        })
        .collect();
    tsdb.store()
        .mutate_rows(&settings.schema.index_table, &rows)?;
    Ok(())
}

fn read_cell(tsdb: &Tsdb, key: &[u8], qualifier: &[u8]) -> Result<Option<Vec<u8>>> {
    let schema = &tsdb.settings().schema;
    let row = tsdb
        .store()
        .get(&schema.data_table, key, &ReadOptions::family(DATA_FAMILY))?;
    Ok(row.and_then(|r| r.value(DATA_FAMILY, qualifier).map(<[u8]>::to_vec)))
}

/// The annotation of `tsuid` (empty: global) starting at `start_time`, if stored.
pub fn get(tsdb: &Tsdb, tsuid: &str, start_time: i64) -> Result<Option<Annotation>> {
    let (key, qualifier) = location(&tsdb.settings().schema, tsuid, start_time)?;
    match read_cell(tsdb, &key, &qualifier)? {
        Some(bytes) => Annotation::from_stored(&bytes).map(Some),
        None => Ok(None),
    }
}

/// Applies a POST (`overwrite` false: merge) or PUT (`overwrite` true: replace) and returns
/// the stored annotation.
pub fn sync(tsdb: &Tsdb, update: &AnnotationUpdate, overwrite: bool) -> Result<Annotation> {
    let schema = &tsdb.settings().schema;
    let (key, qualifier) = location(schema, &update.note.tsuid, update.note.start_time)?;
    if update.changed.is_empty() {
        return Err(Error::NotModified(
            "No changes detected in Annotation data".into(),
        ));
    }
    let stored_bytes = read_cell(tsdb, &key, &qualifier)?;
    let mut note = update.note.clone();
    note.tsuid = note.tsuid.to_ascii_uppercase();
    if let Some(bytes) = &stored_bytes
        && let Ok(stored) = Annotation::from_stored(bytes)
    {
        if stored.start_time > 0 && (stored.start_time < note.start_time || note.start_time == 0) {
            note.start_time = stored.start_time;
        }
        if !overwrite {
            let keep = |f: &str| !update.changed.contains(f);
            if keep("endTime") {
                note.end_time = stored.end_time;
            }
            if keep("description") {
                note.description = stored.description;
            }
            if keep("notes") {
                note.notes = stored.notes;
            }
            if keep("custom") {
                note.custom = stored.custom;
            }
        }
    }
    // The note's index place before the note (a place without its note is skipped by
    // searches; a note without its place would be missed).
    let tsuid = tsuid_bytes(schema, &note.tsuid)?;
    set_places(
        tsdb,
        &[place_key(schema, tsuid.as_deref(), note.start_ms())],
        true,
    )?;
    let check = Check {
        family: DATA_FAMILY.into(),
        qualifier: qualifier.clone(),
        expected: stored_bytes,
    };
    let set = [Mutation::set(
        DATA_FAMILY,
        qualifier.clone(),
        note.storage_json(),
    )];
    if !tsdb
        .store()
        .check_and_mutate(&schema.data_table, &key, &check, &set)?
    {
        return Err(Error::Internal(
            "Failed to save the Annotation to storage: another writer changed it; retry".into(),
        ));
    }
    match read_cell(tsdb, &key, &qualifier)? {
        Some(bytes) => Annotation::from_stored(&bytes),
        None => Err(Error::Internal(
            "annotation vanished after it was written".into(),
        )),
    }
}

/// Deletes one annotation (no error when there is none).
pub fn delete(tsdb: &Tsdb, tsuid: &str, start_time: i64) -> Result<()> {
    let schema = &tsdb.settings().schema;
    let (key, qualifier) = location(schema, tsuid, start_time)?;
    let stored = read_cell(tsdb, &key, &qualifier)?;
    tsdb.store().mutate_row(
        &schema.data_table,
        &key,
        &[Mutation::delete(DATA_FAMILY, qualifier.clone())],
    )?;
    // No note stored: no index place to remove (removing one could undo a note being
    // written at once, whose place is written first; a place left without its note is
    // skipped by searches).
    if stored.is_none() {
        return Ok(());
    }
    // Its index place after the note: the stored note's time, and the one asked for.
    let series = tsuid_bytes(schema, tsuid)?;
    let base = base_hour(to_millis(start_time));
    let mut places = vec![place_key(schema, series.as_deref(), to_millis(start_time))];
    if let Some(t) = stored
        .as_deref()
        .and_then(|json| stored_time_ms(base, &qualifier, json))
        && t != to_millis(start_time)
    {
        places.push(place_key(schema, series.as_deref(), t));
    }
    set_places(tsdb, &places, false)
}

/// The time (ms) of a stored note: its JSON `startTime`, else its qualifier's offset.
pub fn stored_time_ms(base_time: u32, qualifier: &[u8], json: &[u8]) -> Option<i64> {
    Annotation::from_stored(json)
        .ok()
        .filter(|n| n.start_time > 0)
        .map(|n| n.start_ms())
        .or_else(|| decode_qualifier(base_time, qualifier).ok())
}

/// Deletes the annotations of `tsuid` (None: global ones) whose start lies in
/// `[start_ms, end_ms]`, in every salt bucket; returns how many were deleted.
pub fn delete_range(tsdb: &Tsdb, tsuid: Option<&[u8]>, start_ms: i64, end_ms: i64) -> Result<u64> {
    if end_ms < 1 {
        return Err(Error::invalid("The end timestamp has not been set"));
    }
    if end_ms < start_ms {
        return Err(Error::invalid(
            "The end timestamp cannot be less than the start timestamp",
        ));
    }
    let schema = &tsdb.settings().schema;
    if let Some(t) = tsuid {
        check_tsuid(schema, t)?;
    }
    let first = base_hour(start_ms);
    let last = base_hour(end_ms);
    let mut deleted = 0u64;
    // A series' rows of consecutive hours are not contiguous (other series sit between them
    // in key order), so each hour's row is read by key.
    let mut base = first;
    loop {
        let key = row_key(schema, tsuid, base);
        if let Some(row) =
            tsdb.store()
                .get(&schema.data_table, &key, &ReadOptions::family(DATA_FAMILY))?
        {
            let doomed: Vec<Mutation> = row
                .cells
                .iter()
                .filter(|c| is_annotation_qualifier(&c.qualifier))
                .filter(|c| {
                    stored_time_ms(base, &c.qualifier, &c.value)
                        .is_some_and(|t| t >= start_ms && t <= end_ms)
                })
                .map(|c| Mutation::delete(DATA_FAMILY, c.qualifier.clone()))
                .collect();
            let places: Vec<Vec<u8>> = row
                .cells
                .iter()
                .filter(|c| is_annotation_qualifier(&c.qualifier))
                .filter_map(|c| stored_time_ms(base, &c.qualifier, &c.value))
                .filter(|t| *t >= start_ms && *t <= end_ms)
                .map(|t| place_key(schema, tsuid, t))
                .collect();
            if !doomed.is_empty() {
                deleted += doomed.len() as u64;
                tsdb.store().mutate_row(&schema.data_table, &key, &doomed)?;
                set_places(tsdb, &places, false)?;
            }
        }
        match base.checked_add(MAX_TIMESPAN) {
            Some(next) if next <= last => base = next,
            _ => break,
        }
    }
    Ok(deleted)
}

/// Global annotations starting within `[start_ms, end_ms]` and not ending after it, by time.
pub fn global_between(tsdb: &Tsdb, start_ms: i64, end_ms: i64) -> Result<Vec<Annotation>> {
    let schema = &tsdb.settings().schema;
    let start = row_key(schema, None, base_hour(start_ms));
    let end = match base_hour(end_ms).checked_add(MAX_TIMESPAN) {
        Some(stop) => Some(row_key(schema, None, stop)),
        None => hourglass_storage::prefix_end(&start[..start.len() - 4]),
    };
    let request = ScanRequest {
        start: start.clone(),
        end,
        read: ReadOptions::family(DATA_FAMILY),
        ..Default::default()
    };
    let mut out = Vec::new();
    for row in tsdb.store().scan(&schema.data_table, &request)? {
        let row = row?;
        if row.key.len() != start.len() {
            continue;
        }
        let at = start.len() - 4;
        let base = u32::from_be_bytes([
            row.key[at],
            row.key[at + 1],
            row.key[at + 2],
            row.key[at + 3],
        ]);
        for c in &row.cells {
            if !is_annotation_qualifier(&c.qualifier) {
                continue;
            }
            let Ok(note) = Annotation::from_stored(&c.value) else {
                continue;
            };
            let t = stored_time_ms(base, &c.qualifier, &c.value).unwrap_or(0);
            // A note ending after the range is left out, as OpenTSDB leaves it out.
            let ends_after = note.end_time > 0 && to_millis(note.end_time) > end_ms;
            if t >= start_ms && t <= end_ms && !ends_after {
                out.push((t, note));
            }
        }
    }
    out.sort_by_key(|(t, _)| *t);
    Ok(out.into_iter().map(|(_, n)| n).collect())
}
