//! UIDMeta: a UID's name, description, notes and custom fields, in the UID table.

use super::*;

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
pub(super) struct UidMetaJson<'a> {
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
    pub(super) fn json(&self) -> UidMetaJson<'_> {
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
pub(super) fn parse_stored(bytes: &[u8]) -> MetaFields {
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
pub(super) fn compare_and_set(
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
