//! `tsdb uid metasync` and `metapurge`: meta data built from, or removed from, the tables.

use super::*;

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
    // Series whose TSMeta this sync creates, run through the trees at the end (2.4.1's
    // metasync does the same with `tsd.core.tree.enable_processing`).
    let mut created_series: Vec<Vec<u8>> = Vec::new();
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
                created_series.push(tsuid.clone());
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
    if tsdb.settings().meta.tree_processing && !created_series.is_empty() {
        let n = crate::tree::process_new_series(tsdb, &created_series)?;
        report
            .lines
            .push(format!("Processed [{n}] new time series through the trees"));
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
