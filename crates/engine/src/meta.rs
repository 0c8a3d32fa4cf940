//! Meta data as OpenTSDB stores it: UIDMeta in the UID table (row = UID, family `name`,
//! qualifier `metric_meta` / `tagk_meta` / `tagv_meta`, value JSON) and TSMeta in the meta
//! table (row = TSUID, family `name`: `ts_meta` JSON and the `ts_ctr` 8-byte counter, whose
//! cell time is the series' last write).
//!
//! Updates follow OpenTSDB's rules: a field counts as given only when it differs from its
//! default; an update giving nothing is [`Error::NotModified`]; POST merges with what is
//! stored, PUT replaces; `created` only ever moves earlier. Writes are compare-and-set
//! against the stored bytes, so concurrent editors do not lose each other's changes silently.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use hourglass_core::rowkey::decode_tsuid;
use hourglass_core::schema::{META_FAMILY, Schema, UID_NAME_FAMILY};
use hourglass_core::uid::{Uid, UidKind, hex_upper};
use hourglass_storage::{Check, Mutation, ReadOptions, Row, ScanRequest, Store, prefix_end};
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::scan::tag_regex_at;
use crate::{Error, Result, Tsdb};

/// Qualifier of a series' TSMeta JSON in the meta table.
pub const TS_META: &[u8] = b"ts_meta";
/// Qualifier of a series' data point counter in the meta table.
pub const TS_CTR: &[u8] = b"ts_ctr";

/// OpenTSDB's enum name of a kind in meta JSON.
pub fn type_name(kind: UidKind) -> &'static str {
    match kind {
        UidKind::Metric => "METRIC",
        UidKind::TagKey => "TAGK",
        UidKind::TagValue => "TAGV",
    }
}

/// Qualifier of a UID's meta cell: `metric_meta`, `tagk_meta` or `tagv_meta`.
pub fn uid_meta_qualifier(kind: UidKind) -> &'static [u8] {
    match kind {
        UidKind::Metric => b"metric_meta",
        UidKind::TagKey => b"tagk_meta",
        UidKind::TagValue => b"tagv_meta",
    }
}

/// OpenTSDB's `stringToUniqueIdType`: `metric`/`metrics`, `tagk`, `tagv`, any case.
pub fn parse_type(word: &str) -> Result<UidKind> {
    match word.to_ascii_lowercase().as_str() {
        "metric" | "metrics" => Ok(UidKind::Metric),
        "tagk" => Ok(UidKind::TagKey),
        "tagv" => Ok(UidKind::TagValue),
        _ => Err(Error::invalid(format!("Invalid type requested: {word}"))),
    }
}

/// The editable fields of UIDMeta and TSMeta (the TSMeta-only ones unused for UIDs).
#[derive(Debug, Clone, PartialEq)]
pub struct MetaFields {
    pub display_name: String,
    pub description: String,
    pub notes: String,
    /// Seconds since the epoch; 0 when unknown.
    pub created: i64,
    pub custom: Option<BTreeMap<String, String>>,
    pub units: String,
    pub data_type: String,
    pub retention: i64,
    pub max: f64,
    pub min: f64,
}

impl Default for MetaFields {
    fn default() -> Self {
        MetaFields {
            display_name: String::new(),
            description: String::new(),
            notes: String::new(),
            created: 0,
            custom: None,
            units: String::new(),
            data_type: String::new(),
            retention: 0,
            max: f64::NAN,
            min: f64::NAN,
        }
    }
}

/// The fields a request sets, and which of them count as changes.
#[derive(Debug, Clone, Default)]
pub struct MetaUpdate {
    pub fields: MetaFields,
    /// JSON names of the fields given with a non-default value.
    pub changed: HashSet<&'static str>,
}

/// A string field of a JSON object (numbers and booleans taken as text); null or absent: None.
pub(crate) fn json_string(obj: &Map<String, Value>, key: &str) -> Result<Option<String>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(Value::Bool(b)) => Ok(Some(b.to_string())),
        Some(_) => Err(Error::invalid(format!(
            "Unable to parse the given JSON: field '{key}' must be a string"
        ))),
    }
}

/// The `custom` object of a JSON object (values taken as text); null or absent: None.
pub(crate) fn json_custom(obj: &Map<String, Value>) -> Result<Option<BTreeMap<String, String>>> {
    match obj.get("custom") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(
            m.iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::String(s) => s.clone(),
                        Value::Null => String::new(),
                        other => other.to_string(),
                    };
                    (k.clone(), v)
                })
                .collect(),
        )),
        Some(_) => Err(Error::invalid(
            "Unable to parse the given JSON: field 'custom' must be an object",
        )),
    }
}

fn json_number(obj: &Map<String, Value>, key: &str) -> Result<Option<f64>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64()),
        Some(Value::String(s)) => s.trim().parse::<f64>().map(Some).map_err(|_| {
            Error::invalid(format!(
                "Unable to parse the given JSON: field '{key}' must be a number"
            ))
        }),
        Some(_) => Err(Error::invalid(format!(
            "Unable to parse the given JSON: field '{key}' must be a number"
        ))),
    }
}

impl MetaUpdate {
    /// Reads the editable fields of a JSON object (unknown fields ignored, as OpenTSDB).
    pub fn from_json(obj: &Map<String, Value>) -> Result<MetaUpdate> {
        let mut u = MetaUpdate::default();
        type Field = fn(&mut MetaFields) -> &mut String;
        let strings: [(&'static str, Field); 6] = [
            ("displayName", |f| &mut f.display_name),
            ("description", |f| &mut f.description),
            ("notes", |f| &mut f.notes),
            ("units", |f| &mut f.units),
            ("dataType", |f| &mut f.data_type),
            // Query-string spelling of displayName, accepted in bodies too.
            ("display_name", |f| &mut f.display_name),
        ];
        for (key, field) in strings {
            if let Some(v) = json_string(obj, key)? {
                if !v.is_empty() {
                    u.changed.insert(canonical(key));
                }
                *field(&mut u.fields) = v;
            }
        }
        if let Some(v) = json_number(obj, "created")? {
            u.fields.created = v as i64;
            if u.fields.created != 0 {
                u.changed.insert("created");
            }
        }
        if let Some(v) = json_number(obj, "retention")? {
            u.fields.retention = v as i64;
            if u.fields.retention != 0 {
                u.changed.insert("retention");
            }
        }
        for key in ["max", "min"] {
            if let Some(v) = json_number(obj, key)? {
                if !v.is_nan() {
                    u.changed.insert(if key == "max" { "max" } else { "min" });
                }
                if key == "max" {
                    u.fields.max = v;
                } else {
                    u.fields.min = v;
                }
            }
        }
        if let Some(custom) = json_custom(obj)? {
            u.fields.custom = Some(custom);
            u.changed.insert("custom");
        }
        Ok(u)
    }

    /// The fields to store: the request's, with unchanged ones taken from `stored` unless
    /// `overwrite` (PUT). `created` keeps the earliest known time.
    pub fn merge(&self, stored: &MetaFields, overwrite: bool) -> MetaFields {
        let mut out = self.fields.clone();
        let keep = |name: &str| !overwrite && !self.changed.contains(name);
        if keep("displayName") {
            out.display_name = stored.display_name.clone();
        }
        if keep("description") {
            out.description = stored.description.clone();
        }
        if keep("notes") {
            out.notes = stored.notes.clone();
        }
        if keep("custom") {
            out.custom = stored.custom.clone();
        }
        if keep("units") {
            out.units = stored.units.clone();
        }
        if keep("dataType") {
            out.data_type = stored.data_type.clone();
        }
        if keep("retention") {
            out.retention = stored.retention;
        }
        if keep("max") {
            out.max = stored.max;
        }
        if keep("min") {
            out.min = stored.min;
        }
        if stored.created > 0 && (stored.created < out.created || out.created == 0) {
            out.created = stored.created;
        }
        out
    }
}

fn canonical(key: &'static str) -> &'static str {
    if key == "display_name" {
        "displayName"
    } else {
        key
    }
}

fn serialize_double<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_finite() {
        s.serialize_f64(*v)
    } else {
        s.serialize_str(if v.is_nan() {
            "NaN"
        } else if *v > 0.0 {
            "Infinity"
        } else {
            "-Infinity"
        })
    }
}

/// A UID's meta data as the API shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct UidMeta {
    pub kind: UidKind,
    /// Upper-case hex.
    pub uid: String,
    pub name: String,
    pub fields: MetaFields,
}

#[derive(Serialize)]
struct UidMetaJson<'a> {
    uid: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    description: &'a str,
    notes: &'a str,
    created: i64,
    custom: &'a Option<BTreeMap<String, String>>,
    #[serde(rename = "displayName")]
    display_name: &'a str,
}

#[derive(Serialize)]
struct UidMetaStored<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(rename = "displayName")]
    display_name: &'a str,
    description: &'a str,
    notes: &'a str,
    created: i64,
    custom: &'a Option<BTreeMap<String, String>>,
}

impl UidMeta {
    fn json(&self) -> UidMetaJson<'_> {
        UidMetaJson {
            uid: &self.uid,
            kind: type_name(self.kind),
            name: &self.name,
            description: &self.fields.description,
            notes: &self.fields.notes,
            created: self.fields.created,
            custom: &self.fields.custom,
            display_name: &self.fields.display_name,
        }
    }

    /// OpenTSDB's JSON: uid, type, name, description, notes, created, custom, displayName.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self.json()).unwrap_or(Value::Null)
    }

    /// The stored form (no uid or name: those come from the UID table).
    pub fn storage_json(&self) -> Vec<u8> {
        let stored = UidMetaStored {
            kind: type_name(self.kind),
            display_name: &self.fields.display_name,
            description: &self.fields.description,
            notes: &self.fields.notes,
            created: self.fields.created,
            custom: &self.fields.custom,
        };
        serde_json::to_vec(&stored).unwrap_or_default()
    }
}

/// Reads the editable fields from stored meta JSON; damaged JSON reads as defaults.
fn parse_stored(bytes: &[u8]) -> MetaFields {
    let obj = match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(o)) => o,
        _ => return MetaFields::default(),
    };
    MetaUpdate::from_json(&obj)
        .map(|u| u.fields)
        .unwrap_or_default()
}

fn width_check(tsdb: &Tsdb, kind: UidKind, bytes: &[u8]) -> Result<Uid> {
    let width = tsdb.settings().schema.uid_width(kind);
    if bytes.len() != usize::from(width) {
        return Err(Error::invalid(format!(
            "Wrong id.length = {} which is != {width} required for '{kind}'",
            bytes.len()
        )));
    }
    Ok(Uid::from_bytes(bytes)?)
}

/// The meta data of a UID (defaults when none is stored). Unknown UID: [`Error::NoSuchId`].
pub fn get_uid_meta(tsdb: &Tsdb, kind: UidKind, uid_bytes: &[u8]) -> Result<UidMeta> {
    read_uid_meta(tsdb, kind, uid_bytes).map(|(meta, _)| meta)
}

/// A UID's meta data and the stored cell it was read from (None: none stored).
fn read_uid_meta(
    tsdb: &Tsdb,
    kind: UidKind,
    uid_bytes: &[u8],
) -> Result<(UidMeta, Option<Vec<u8>>)> {
    let uid = width_check(tsdb, kind, uid_bytes)?;
    let name = tsdb.uids().get_name(kind, uid)?;
    let schema = &tsdb.settings().schema;
    let stored = tsdb
        .store()
        .get(
            &schema.uid_table,
            uid_bytes,
            &ReadOptions::family(UID_NAME_FAMILY),
        )?
        .and_then(|r| {
            r.value(UID_NAME_FAMILY, uid_meta_qualifier(kind))
                .map(<[u8]>::to_vec)
        });
    let meta = UidMeta {
        kind,
        uid: hex_upper(uid_bytes),
        name,
        fields: stored.as_deref().map(parse_stored).unwrap_or_default(),
    };
    Ok((meta, stored))
}

/// Writes `cell` of `row` in `table` if it still holds `expected` (None: absent).
fn compare_and_set(
    store: &dyn Store,
    table: &str,
    row: &[u8],
    qualifier: &[u8],
    expected: Option<Vec<u8>>,
    value: Vec<u8>,
    what: &str,
) -> Result<()> {
    let check = Check {
        family: META_FAMILY.into(),
        qualifier: qualifier.to_vec(),
        expected,
    };
    let set = [Mutation::set(META_FAMILY, qualifier.to_vec(), value)];
    if store.check_and_mutate(table, row, &check, &set)? {
        Ok(())
    } else {
        Err(Error::Internal(format!(
            "Failed to save the {what} to storage: another writer changed it; retry"
        )))
    }
}

/// Applies a POST (`overwrite` false) or PUT (`overwrite` true) to a UID's meta data.
pub fn sync_uid_meta(
    tsdb: &Tsdb,
    kind: UidKind,
    uid_bytes: &[u8],
    update: &MetaUpdate,
    overwrite: bool,
) -> Result<UidMeta> {
    let mut update = update.clone();
    // TSMeta-only fields are not part of a UID's meta data.
    for f in ["units", "dataType", "retention", "max", "min"] {
        update.changed.remove(f);
    }
    if update.changed.is_empty() {
        return Err(Error::NotModified(
            "No changes detected in UID meta data".into(),
        ));
    }
    let (current, stored) = read_uid_meta(tsdb, kind, uid_bytes)?;
    let schema = &tsdb.settings().schema;
    let merged = UidMeta {
        fields: update.merge(&current.fields, overwrite),
        ..current
    };
    compare_and_set(
        tsdb.store().as_ref(),
        &schema.uid_table,
        uid_bytes,
        uid_meta_qualifier(kind),
        stored,
        merged.storage_json(),
        "UIDMeta",
    )?;
    get_uid_meta(tsdb, kind, uid_bytes)
}

/// Deletes a UID's meta cell (nothing else).
pub fn delete_uid_meta(tsdb: &Tsdb, kind: UidKind, uid_bytes: &[u8]) -> Result<()> {
    let schema = &tsdb.settings().schema;
    tsdb.store().mutate_row(
        &schema.uid_table,
        uid_bytes,
        &[Mutation::delete(UID_NAME_FAMILY, uid_meta_qualifier(kind))],
    )?;
    Ok(())
}

/// Writes a new UID's meta data (real-time UID meta): created now, nothing else set.
pub(crate) fn store_new_uid_meta(
    store: &dyn Store,
    schema: &Schema,
    kind: UidKind,
    uid: Uid,
    name: &str,
    created_secs: i64,
) -> Result<()> {
    let width = schema.uid_width(kind);
    let meta = UidMeta {
        kind,
        uid: uid.to_hex(width),
        name: name.to_string(),
        fields: MetaFields {
            created: created_secs,
            ..MetaFields::default()
        },
    };
    store.mutate_row(
        &schema.uid_table,
        &uid.to_bytes(width),
        &[Mutation::set(
            UID_NAME_FAMILY,
            uid_meta_qualifier(kind),
            meta.storage_json(),
        )],
    )?;
    Ok(())
}

/// A series' meta data as the API shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct TsMeta {
    /// Upper-case hex TSUID.
    pub tsuid: String,
    pub metric: UidMeta,
    /// tagk, tagv, tagk, tagv, ... in TSUID order.
    pub tags: Vec<UidMeta>,
    pub fields: MetaFields,
    /// Seconds: the time of the counter cell's last write (0 without a counter).
    pub last_received: i64,
    pub total_datapoints: i64,
}

#[derive(Serialize)]
struct TsMetaJson<'a> {
    tsuid: &'a str,
    metric: UidMetaJson<'a>,
    tags: Vec<UidMetaJson<'a>>,
    description: &'a str,
    notes: &'a str,
    created: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    custom: &'a Option<BTreeMap<String, String>>,
    units: &'a str,
    retention: i64,
    #[serde(serialize_with = "serialize_double")]
    max: f64,
    #[serde(serialize_with = "serialize_double")]
    min: f64,
    #[serde(rename = "displayName")]
    display_name: &'a str,
    #[serde(rename = "dataType")]
    data_type: &'a str,
    #[serde(rename = "lastReceived")]
    last_received: i64,
    #[serde(rename = "totalDatapoints")]
    total_datapoints: i64,
}

#[derive(Serialize)]
struct TsMetaStored<'a> {
    tsuid: &'a str,
    #[serde(rename = "displayName")]
    display_name: &'a str,
    description: &'a str,
    notes: &'a str,
    created: i64,
    custom: &'a Option<BTreeMap<String, String>>,
    units: &'a str,
    #[serde(rename = "dataType")]
    data_type: &'a str,
    retention: i64,
    #[serde(serialize_with = "serialize_double")]
    max: f64,
    #[serde(serialize_with = "serialize_double")]
    min: f64,
}

/// The stored TSMeta JSON of a series.
pub fn ts_meta_storage_json(tsuid_hex: &str, f: &MetaFields) -> Vec<u8> {
    serde_json::to_vec(&TsMetaStored {
        tsuid: tsuid_hex,
        display_name: &f.display_name,
        description: &f.description,
        notes: &f.notes,
        created: f.created,
        custom: &f.custom,
        units: &f.units,
        data_type: &f.data_type,
        retention: f.retention,
        max: f.max,
        min: f.min,
    })
    .unwrap_or_default()
}

impl TsMeta {
    /// OpenTSDB's JSON: tsuid, metric, tags, description, notes, created, custom (when
    /// set), units, retention, max, min, displayName, dataType, lastReceived, totalDatapoints.
    pub fn to_json(&self) -> Value {
        let f = &self.fields;
        serde_json::to_value(TsMetaJson {
            tsuid: &self.tsuid,
            metric: self.metric.json(),
            tags: self.tags.iter().map(UidMeta::json).collect(),
            description: &f.description,
            notes: &f.notes,
            created: f.created,
            custom: &f.custom,
            units: &f.units,
            retention: f.retention,
            max: f.max,
            min: f.min,
            display_name: &f.display_name,
            data_type: &f.data_type,
            last_received: self.last_received,
            total_datapoints: self.total_datapoints,
        })
        .unwrap_or(Value::Null)
    }
}

/// Checks a TSUID's shape: a metric and at least one whole tag pair.
pub fn check_tsuid(schema: &Schema, tsuid: &[u8]) -> Result<()> {
    let metric = usize::from(schema.metric_width);
    if tsuid.len() <= metric {
        return Err(Error::invalid("TSUID is too short, may be missing tags"));
    }
    if !(tsuid.len() - metric).is_multiple_of(schema.tag_pair_width()) {
        return Err(Error::invalid(
            "The TSUID appears to be malformed, improper tag width",
        ));
    }
    Ok(())
}

fn read_ts_row(tsdb: &Tsdb, tsuid: &[u8]) -> Result<Option<Row>> {
    let schema = &tsdb.settings().schema;
    Ok(tsdb
        .store()
        .get(&schema.meta_table, tsuid, &ReadOptions::family(META_FAMILY))?)
}

fn counter_of(row: &Row) -> (i64, i64) {
    row.cells
        .iter()
        .find(|c| c.family == META_FAMILY && c.qualifier == TS_CTR)
        .map_or((0, 0), |c| {
            let n = <[u8; 8]>::try_from(c.value.as_slice()).map_or(0, i64::from_be_bytes);
            (n, c.timestamp / 1000)
        })
}

/// Builds the API view of a meta row (UID meta data loaded for every UID).
fn ts_meta_from_row(tsdb: &Tsdb, tsuid: &[u8], row: &Row) -> Result<Option<TsMeta>> {
    let Some(json) = row.value(META_FAMILY, TS_META) else {
        return Ok(None);
    };
    let schema = &tsdb.settings().schema;
    let series = decode_tsuid(schema, tsuid)?;
    let metric = get_uid_meta(
        tsdb,
        UidKind::Metric,
        &series.metric.to_bytes(schema.metric_width),
    )?;
    let mut tags = Vec::with_capacity(series.tags.len() * 2);
    for (k, v) in &series.tags {
        tags.push(get_uid_meta(
            tsdb,
            UidKind::TagKey,
            &k.to_bytes(schema.tagk_width),
        )?);
        tags.push(get_uid_meta(
            tsdb,
            UidKind::TagValue,
            &v.to_bytes(schema.tagv_width),
        )?);
    }
    let (total, last) = counter_of(row);
    Ok(Some(TsMeta {
        tsuid: hex_upper(tsuid),
        metric,
        tags,
        fields: parse_stored(json),
        last_received: last,
        total_datapoints: total,
    }))
}

/// The meta data of one series, or None when it has no `ts_meta` cell.
pub fn get_ts_meta(tsdb: &Tsdb, tsuid: &[u8]) -> Result<Option<TsMeta>> {
    check_tsuid(&tsdb.settings().schema, tsuid)?;
    match read_ts_row(tsdb, tsuid)? {
        Some(row) => ts_meta_from_row(tsdb, tsuid, &row),
        None => Ok(None),
    }
}

/// The TSUID of a metric and tags (tags sorted by tag key UID, as in row keys).
pub fn tsuid_for(tsdb: &Tsdb, metric: &str, tags: &[(String, String)]) -> Result<Vec<u8>> {
    let schema = &tsdb.settings().schema;
    let uids = tsdb.uids();
    let m = uids.get_id(UidKind::Metric, metric)?;
    let mut pairs = Vec::with_capacity(tags.len());
    for (k, v) in tags {
        pairs.push((
            uids.get_id(UidKind::TagKey, k)?,
            uids.get_id(UidKind::TagValue, v)?,
        ));
    }
    pairs.sort();
    let mut out = m.to_bytes(schema.metric_width);
    for (k, v) in pairs {
        k.write(schema.tagk_width, &mut out);
        v.write(schema.tagv_width, &mut out);
    }
    Ok(out)
}

/// Every series of `metric` having all of `tags` (extra tags allowed) with a `ts_meta`
/// cell, in TSUID order.
pub fn find_ts_metas(tsdb: &Tsdb, metric: &str, tags: &[(String, String)]) -> Result<Vec<TsMeta>> {
    let schema = &tsdb.settings().schema;
    let uids = tsdb.uids();
    let m = uids.get_id(UidKind::Metric, metric)?;
    let mut pairs = Vec::with_capacity(tags.len());
    for (k, v) in tags {
        pairs.push((
            uids.get_id(UidKind::TagKey, k)?,
            uids.get_id(UidKind::TagValue, v)?,
        ));
    }
    let prefix = m.to_bytes(schema.metric_width);
    let request = ScanRequest {
        start: prefix.clone(),
        end: prefix_end(&prefix),
        key_regex: tag_regex_at(schema, usize::from(schema.metric_width), &pairs),
        read: ReadOptions::family(META_FAMILY),
        ..Default::default()
    };
    let mut out = Vec::new();
    for row in tsdb.store().scan(&schema.meta_table, &request)? {
        let row = row?;
        if let Some(meta) = ts_meta_from_row(tsdb, &row.key, &row)? {
            out.push(meta);
        }
    }
    Ok(out)
}

/// Applies a POST/PUT to an existing series' meta data. A series without `ts_meta` is an
/// error (OpenTSDB's `Requested TSMeta did not exist`).
pub fn sync_ts_meta(
    tsdb: &Tsdb,
    tsuid: &[u8],
    update: &MetaUpdate,
    overwrite: bool,
) -> Result<TsMeta> {
    if update.changed.is_empty() {
        return Err(Error::NotModified(
            "No changes detected in TSUID meta data".into(),
        ));
    }
    let schema = &tsdb.settings().schema;
    check_tsuid(schema, tsuid)?;
    let row = read_ts_row(tsdb, tsuid)?;
    let current = match &row {
        Some(r) => ts_meta_from_row(tsdb, tsuid, r)?,
        None => None,
    };
    let Some(current) = current else {
        return Err(Error::invalid("Requested TSMeta did not exist"));
    };
    let stored = row.and_then(|r| r.value(META_FAMILY, TS_META).map(<[u8]>::to_vec));
    let merged = update.merge(&current.fields, overwrite);
    compare_and_set(
        tsdb.store().as_ref(),
        &schema.meta_table,
        tsuid,
        TS_META,
        stored,
        ts_meta_storage_json(&current.tsuid, &merged),
        "TSMeta",
    )?;
    get_ts_meta(tsdb, tsuid)?
        .ok_or_else(|| Error::Internal("TSMeta vanished after it was written".into()))
}

/// Creates a series' meta data from `update` (OpenTSDB's `create=true`): a zero counter if
/// there is none, and the `ts_meta` cell.
pub fn create_ts_meta(tsdb: &Tsdb, tsuid: &[u8], update: &MetaUpdate) -> Result<TsMeta> {
    check_tsuid(&tsdb.settings().schema, tsuid)?;
    let schema = &tsdb.settings().schema;
    let row = read_ts_row(tsdb, tsuid)?;
    let mut mutations = Vec::with_capacity(2);
    if row
        .as_ref()
        .and_then(|r| r.value(META_FAMILY, TS_CTR))
        .is_none()
    {
        mutations.push(Mutation::set(
            META_FAMILY,
            TS_CTR,
            0i64.to_be_bytes().to_vec(),
        ));
    }
    mutations.push(Mutation::set(
        META_FAMILY,
        TS_META,
        ts_meta_storage_json(&hex_upper(tsuid), &update.fields),
    ));
    tsdb.store()
        .mutate_row(&schema.meta_table, tsuid, &mutations)?;
    get_ts_meta(tsdb, tsuid)?
        .ok_or_else(|| Error::Internal("TSMeta vanished after it was written".into()))
}

/// Deletes a series' `ts_meta` cell (its counter stays, as in OpenTSDB).
pub fn delete_ts_meta(tsdb: &Tsdb, tsuid: &[u8]) -> Result<()> {
    let schema = &tsdb.settings().schema;
    tsdb.store().mutate_row(
        &schema.meta_table,
        tsuid,
        &[Mutation::delete(META_FAMILY, TS_META)],
    )?;
    Ok(())
}

/// OpenTSDB's `tsd.core.meta.*` switches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MetaTracking {
    /// `enable_tsuid_tracking`: note every series written in the meta table.
    pub tsuid_tracking: bool,
    /// `enable_realtime_ts`: create a series' `ts_meta` when it is first seen.
    pub realtime_ts: bool,
    /// `enable_tsuid_incrementing`: count data points in `ts_ctr`.
    pub tsuid_incrementing: bool,
    /// `enable_realtime_uid`: write UIDMeta when a UID is assigned.
    pub realtime_uid: bool,
}

impl MetaTracking {
    pub fn from_config(c: &hourglass_core::config::Config) -> MetaTracking {
        MetaTracking {
            tsuid_tracking: c.get_bool("tsd.core.meta.enable_tsuid_tracking", false),
            realtime_ts: c.get_bool("tsd.core.meta.enable_realtime_ts", false),
            tsuid_incrementing: c.get_bool("tsd.core.meta.enable_tsuid_incrementing", false),
            realtime_uid: c.get_bool("tsd.core.meta.enable_realtime_uid", false),
        }
    }

    /// Whether writes touch the meta table at all.
    pub fn tracks_series(&self) -> bool {
        self.tsuid_tracking
    }
}

/// Real-time series tracking for the write path. It runs once per flush with each written
/// series and its point count, so its cost follows series per flush, not points:
/// - tracking only: `ts_ctr` set to 1 (its cell time is the series' last write);
/// - with `realtime_ts`: `ts_meta` created for series not seen before (one read per series
///   per process, remembered after);
/// - with `realtime_ts` and incrementing: `ts_ctr` incremented by the flushed point count,
///   `ts_meta` created when the counter was new.
#[derive(Debug)]
pub(crate) struct Tracker {
    store: Arc<dyn Store>,
    schema: Schema,
    flags: MetaTracking,
    /// Series known to have `ts_meta`.
    known: Mutex<HashSet<Vec<u8>>>,
}

impl Tracker {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        schema: Schema,
        flags: MetaTracking,
    ) -> Option<Tracker> {
        flags.tracks_series().then(|| Tracker {
            store,
            schema,
            flags,
            known: Mutex::new(HashSet::new()),
        })
    }

    /// Records a flush: `(tsuid, points)` per written series.
    pub(crate) fn record(&self, series: &[(Vec<u8>, u64)], now_ms: i64) -> Result<()> {
        let table = self.schema.meta_table.as_str();
        let created = now_ms / 1000;
        if self.flags.realtime_ts && self.flags.tsuid_incrementing {
            for (tsuid, n) in series {
                let total = self
                    .store
                    .increment(table, tsuid, META_FAMILY, TS_CTR, *n as i64)?;
                if total <= *n as i64 && !self.known.lock().contains(tsuid) {
                    self.store_new(tsuid, created)?;
                }
            }
            return Ok(());
        }
        if self.flags.realtime_ts {
            for (tsuid, _) in series {
                self.ensure_ts_meta(tsuid, created)?;
            }
            return Ok(());
        }
        let batch: Vec<hourglass_storage::RowMutation> = series
            .iter()
            .map(|(tsuid, _)| hourglass_storage::RowMutation {
                key: tsuid.clone(),
                mutations: vec![Mutation::set_at(
                    META_FAMILY,
                    TS_CTR,
                    now_ms,
                    1i64.to_be_bytes().to_vec(),
                )],
            })
            .collect();
        if !batch.is_empty() {
            self.store.mutate_rows(table, &batch)?;
        }
        Ok(())
    }

    /// Records a series the writer sees for the first time since it started, before any of
    /// its points are flushed: its `ts_meta` (with `realtime_ts`) or its `ts_ctr` cell.
    pub(crate) fn first_seen(&self, tsuid: &[u8], now_ms: i64) -> Result<()> {
        if self.flags.realtime_ts {
            return self.ensure_ts_meta(tsuid, now_ms / 1000);
        }
        self.store.mutate_row(
            &self.schema.meta_table,
            tsuid,
            &[Mutation::set_at(
                META_FAMILY,
                TS_CTR,
                now_ms,
                1i64.to_be_bytes().to_vec(),
            )],
        )?;
        Ok(())
    }

    /// Creates the series' `ts_meta` unless it has one (one read per series per process).
    fn ensure_ts_meta(&self, tsuid: &[u8], created_secs: i64) -> Result<()> {
        if self.known.lock().contains(tsuid) {
            return Ok(());
        }
        let row = self.store.get(
            &self.schema.meta_table,
            tsuid,
            &ReadOptions::family(META_FAMILY),
        )?;
        if row
            .as_ref()
            .and_then(|r| r.value(META_FAMILY, TS_META))
            .is_none()
        {
            self.store_new(tsuid, created_secs)?;
        }
        self.known.lock().insert(tsuid.to_vec());
        Ok(())
    }

    fn store_new(&self, tsuid: &[u8], created_secs: i64) -> Result<()> {
        let fields = MetaFields {
            created: created_secs,
            ..MetaFields::default()
        };
        self.store.mutate_row(
            &self.schema.meta_table,
            tsuid,
            &[Mutation::set(
                META_FAMILY,
                TS_META,
                ts_meta_storage_json(&hex_upper(tsuid), &fields),
            )],
        )?;
        tracing::debug!(tsuid = %hex_upper(tsuid), "created new TSUID meta entry");
        Ok(())
    }
}

/// What [`meta_sync`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncReport {
    pub series: u64,
    pub uid_meta_written: u64,
    pub ts_meta_created: u64,
    pub counters_created: u64,
    /// Series whose UIDs no longer resolve (left alone; `tsdb fsck` reports them).
    pub unresolved: u64,
    /// One line per action, for the operator.
    pub lines: Vec<String>,
}

/// Builds missing meta data from the data table (`tsdb uid metasync`): for every series, a
/// `ts_meta` created at its first stored hour, a `ts_ctr` holding its stored point count
/// when it has none, and UIDMeta for each of its UIDs whose `created` is unset or later than
/// the series' first hour. Existing descriptions and counters are kept.
pub fn meta_sync(tsdb: &Tsdb) -> Result<SyncReport> {
    use hourglass_core::rowkey::{base_time_of, tsuid_of};
    use hourglass_core::schema::DATA_FAMILY;
    tsdb.flush()?;
    let schema = tsdb.settings().schema.clone();
    let pair = schema.tag_pair_width();
    let metric_width = usize::from(schema.metric_width);
    // Series in key order are grouped by metric, then hour: gather first hour and points.
    let mut series: BTreeMap<Vec<u8>, (u32, u64)> = BTreeMap::new();
    let request = ScanRequest {
        read: ReadOptions::family(DATA_FAMILY),
        ..Default::default()
    };
    for row in tsdb.store().scan(&schema.data_table, &request)? {
        let row = row?;
        if row.key.len() < schema.tags_offset()
            || !(row.key.len() - schema.tags_offset()).is_multiple_of(pair)
        {
            continue;
        }
        let tsuid = tsuid_of(&schema, &row.key);
        if tsuid.len() == metric_width || tsuid[..metric_width].iter().all(|b| *b == 0) {
            continue; // global annotations, or a key without tags
        }
        let base = base_time_of(&schema, &row.key).unwrap_or(0);
        let points = crate::rows::decode_row(Some(&row), &[])
            .map(|r| r.points.len() as u64)
            .unwrap_or(0);
        let e = series.entry(tsuid).or_insert((base, 0));
        e.0 = e.0.min(base);
        e.1 += points;
    }
    let mut report = SyncReport::default();
    let mut uid_created: BTreeMap<(UidKind, Vec<u8>), i64> = BTreeMap::new();
    for (tsuid, (first, points)) in &series {
        report.series += 1;
        let first = i64::from(*first);
        let Ok(key) = decode_tsuid(&schema, tsuid) else {
            continue;
        };
        let mut resolvable = true;
        let uids = [(UidKind::Metric, key.metric)].into_iter().chain(
            key.tags
                .iter()
                .flat_map(|(k, v)| [(UidKind::TagKey, *k), (UidKind::TagValue, *v)]),
        );
        for (kind, uid) in uids {
            resolvable &= tsdb.uids().get_name(kind, uid).is_ok();
            let e = uid_created
                .entry((kind, uid.to_bytes(schema.uid_width(kind))))
                .or_insert(i64::MAX);
            *e = (*e).min(first);
        }
        if !resolvable {
            report.unresolved += 1;
            report.lines.push(format!(
                "Timeseries [{}] includes a non-existent UID; skipped (run tsdb fsck)",
                hex_upper(tsuid)
            ));
            continue;
        }
        let row = read_ts_row(tsdb, tsuid)?;
        let has_counter = row
            .as_ref()
            .and_then(|r| r.value(META_FAMILY, TS_CTR))
            .is_some();
        let stored_meta = row
            .as_ref()
            .and_then(|r| r.value(META_FAMILY, TS_META))
            .map(parse_stored);
        let mut mutations = Vec::new();
        if !has_counter {
            mutations.push(Mutation::set(
                META_FAMILY,
                TS_CTR,
                (*points as i64).to_be_bytes().to_vec(),
            ));
            report.counters_created += 1;
        }
        match stored_meta {
            None => {
                let fields = MetaFields {
                    created: first,
                    ..MetaFields::default()
                };
                mutations.push(Mutation::set(
                    META_FAMILY,
                    TS_META,
                    ts_meta_storage_json(&hex_upper(tsuid), &fields),
                ));
                report.ts_meta_created += 1;
                report.lines.push(format!(
                    "Created counter and meta for timeseries [{}]",
                    hex_upper(tsuid)
                ));
            }
            Some(mut fields) if fields.created == 0 || fields.created > first + 3600 => {
                fields.created = first;
                mutations.push(Mutation::set(
                    META_FAMILY,
                    TS_META,
                    ts_meta_storage_json(&hex_upper(tsuid), &fields),
                ));
                report.lines.push(format!(
                    "Updated created timestamp for timeseries [{}]",
                    hex_upper(tsuid)
                ));
            }
            Some(_) => {}
        }
        if !mutations.is_empty() {
            tsdb.store()
                .mutate_row(&schema.meta_table, tsuid, &mutations)?;
        }
    }
    for ((kind, uid), first) in uid_created {
        let Ok(meta) = get_uid_meta(tsdb, kind, &uid) else {
            continue;
        };
        if meta.fields.created != 0 && meta.fields.created <= first + 3600 {
            continue;
        }
        let updated = UidMeta {
            fields: MetaFields {
                created: first,
                ..meta.fields.clone()
            },
            ..meta
        };
        tsdb.store().mutate_row(
            &schema.uid_table,
            &uid,
            &[Mutation::set(
                UID_NAME_FAMILY,
                uid_meta_qualifier(kind),
                updated.storage_json(),
            )],
        )?;
        report.uid_meta_written += 1;
        report.lines.push(format!(
            "Updating UID [{}] of type [{}]",
            updated.uid,
            type_name(kind)
        ));
    }
    Ok(report)
}

/// Deletes every UIDMeta cell and every TSMeta row's `ts_meta` and `ts_ctr`
/// (`tsdb uid metapurge`); returns (UIDMeta cells, TSMeta cells) deleted.
pub fn meta_purge(tsdb: &Tsdb) -> Result<(u64, u64)> {
    let schema = &tsdb.settings().schema;
    let uid_cells = delete_cells(
        tsdb,
        &schema.uid_table,
        UID_NAME_FAMILY,
        &[b"metric_meta", b"tagk_meta", b"tagv_meta"],
    )?;
    let ts_cells = delete_cells(tsdb, &schema.meta_table, META_FAMILY, &[TS_META, TS_CTR])?;
    Ok((uid_cells, ts_cells))
}

/// Deletes every cell of `family` in `table` whose qualifier is one of `qualifiers`;
/// returns how many.
fn delete_cells(tsdb: &Tsdb, table: &str, family: &str, qualifiers: &[&[u8]]) -> Result<u64> {
    let store = tsdb.store();
    let request = ScanRequest {
        read: ReadOptions::family(family),
        ..Default::default()
    };
    let mut deleted = 0u64;
    let mut batch = Vec::new();
    for row in store.scan(table, &request)? {
        let row = row?;
        let doomed: Vec<Mutation> = row
            .cells
            .iter()
            .filter(|c| qualifiers.contains(&c.qualifier.as_slice()))
            .map(|c| Mutation::delete(family, c.qualifier.clone()))
            .collect();
        if !doomed.is_empty() {
            deleted += doomed.len() as u64;
            batch.push(hourglass_storage::RowMutation {
                key: row.key,
                mutations: doomed,
            });
        }
    }
    if !batch.is_empty() {
        store.mutate_rows(table, &batch)?;
    }
    Ok(deleted)
}
