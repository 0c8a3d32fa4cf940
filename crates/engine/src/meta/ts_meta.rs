//! TSMeta: a series' meta data and its data point counter, in the meta table.

use super::*;

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

pub(super) fn read_ts_row(tsdb: &Tsdb, tsuid: &[u8]) -> Result<Option<Row>> {
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
    assemble(tsdb, tsuid, parse_stored(json), counter_of(row)).map(Some)
}

/// A TSMeta of `fields` and the counter (total, last received seconds), with the UID meta
/// data of every UID of the TSUID.
fn assemble(tsdb: &Tsdb, tsuid: &[u8], fields: MetaFields, counter: (i64, i64)) -> Result<TsMeta> {
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
    let (total, last) = counter;
    Ok(TsMeta {
        tsuid: hex_upper(tsuid),
        metric,
        tags,
        fields,
        last_received: last,
        total_datapoints: total,
    })
}

/// A series' meta data as search answers show it: the stored TSMeta, else one with default
/// fields (and the counter, when the series has one), as OpenTSDB's search plugins index
/// series without a `ts_meta` cell.
pub fn ts_meta_or_default(tsdb: &Tsdb, tsuid: &[u8]) -> Result<TsMeta> {
    check_tsuid(&tsdb.settings().schema, tsuid)?;
    let row = read_ts_row(tsdb, tsuid)?;
    if let Some(r) = &row
        && let Some(meta) = ts_meta_from_row(tsdb, tsuid, r)?
    {
        return Ok(meta);
    }
    let counter = row.as_ref().map_or((0, 0), counter_of);
    assemble(tsdb, tsuid, MetaFields::default(), counter)
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
    let meta = get_ts_meta(tsdb, tsuid)?
        .ok_or_else(|| Error::Internal("TSMeta vanished after it was written".into()))?;
    // A new TSMeta goes through the trees, as OpenTSDB's `/api/uid/tsmeta` creation does.
    if tsdb.settings().meta.tree_processing
        && let Err(e) = crate::tree::process_meta(tsdb, &meta)
    {
        tracing::warn!(tsuid = %meta.tsuid, error = %e, "new TSMeta not processed through trees");
    }
    Ok(meta)
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
