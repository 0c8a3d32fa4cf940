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

mod sync;
mod tracker;
mod ts_meta;
mod uid_meta;

pub use sync::*;
pub(crate) use tracker::Tracker;
pub use tracker::*;
pub use ts_meta::*;
pub(crate) use uid_meta::store_new_uid_meta;
pub use uid_meta::*;
