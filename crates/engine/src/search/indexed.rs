//! Lookup answered from the tag index (RFC 0007, "Lookup, suggest"): candidates from the
//! all-time postings (`0x02`; without a metric, those of each metric the value's `0x03`
//! rows list) or the catalog (`0x01`), checked
//! on their tag bytes, then placed as the table scan meets them. The data table's order is
//! each series' first row key, found by reading its hours period by period (its postings,
//! `0x11`, read only where they save reads: [`first_rows_in`]); the meta table's is the
//! TSUID's, the candidates read back from it.
//! Reading the rows back also drops series the index lists but whose rows are gone, so the
//! answer is the scan's exactly.

use hourglass_core::rowkey::apply_salt;
use hourglass_core::schema::{DATA_FAMILY, META_FAMILY, Schema};
use hourglass_storage::{ReadOptions, ScanRequest, prefix_end};

use super::{Conditions, LookupQuery, LookupResult, resolve};
use crate::index::{self, GLOBAL_FAMILY, PERIOD_FAMILY, PERIOD_SECS, Series, kind, status};
use crate::{Result, Tsdb};

/// Rows asked for in one `get_rows` call.
const BATCH: usize = 1_000;

/// The answer from the index, `None` when this TSD does not maintain it or it does not
/// cover every hour of the metric (every metric, without one).
pub(super) fn lookup(
    tsdb: &Tsdb,
    c: &Conditions,
    q: &LookupQuery,
) -> Result<Option<Vec<LookupResult>>> {
    let settings = tsdb.settings();
    if !settings.index {
        return Ok(None);
    }
    let schema = &settings.schema;
    let metric = c.metric.map(|m| m.to_bytes(schema.metric_width));
    if !covers_all_hours(tsdb, metric.as_deref())? {
        return Ok(None);
    }
    if tsdb.buffered_points() > 0 {
        // Buffered series have no index entries yet (the flush writes them), though series
        // tracking may have noted them in the meta table already.
        tsdb.flush()?;
    }
    if q.use_meta && q.limit > 0 && c.by_key.is_empty() {
        let tsuids = catalog_in_meta_table(tsdb, c, metric.as_deref(), q.limit)?;
        return tsuids
            .into_iter()
            .map(|t| resolve(tsdb, t))
            .collect::<Result<_>>()
            .map(Some);
    }
    if !q.use_meta
        && q.limit > 0
        && c.by_key.is_empty()
        && let Some(m) = metric.as_deref()
    {
        let tsuids = first_in_data_table(tsdb, c, m, q.limit)?;
        return tsuids
            .into_iter()
            .map(|t| resolve(tsdb, t))
            .collect::<Result<_>>()
            .map(Some);
    }
    let found = candidates(tsdb, c, metric.as_deref())?;
    let ordered = if q.use_meta {
        in_meta_table(tsdb, found, q.limit)?
    } else {
        by_first_row(tsdb, found)?
    };
    let mut out = Vec::new();
    for tsuid in ordered {
        if q.limit > 0 && out.len() >= q.limit {
            break;
        }
        out.push(resolve(tsdb, tsuid)?);
    }
    Ok(Some(out))
}

/// The TSUIDs the index lists for the conditions, sorted, each once; kept between lookups
/// on a TSD alone on its store while no index row they are read from is written (the entry
/// generation, taken before reading, as a query's candidates are kept).
pub(super) fn candidates(
    tsdb: &Tsdb,
    c: &Conditions,
    metric: Option<&[u8]>,
) -> Result<Vec<Vec<u8>>> {
    let kept = tsdb.kept_candidates();
    let key = kept.map(|_| kept_key(tsdb, c, metric));
    if let (Some((lists, generation)), Some(key)) = (kept, &key)
        && let Some(list) = lists.get(key, generation)
    {
        return Ok(list.to_vec());
    }
    let out = read_candidates(tsdb, c, metric)?;
    if let (Some((lists, generation)), Some(key)) = (kept, key) {
        lists.put(key, generation, out.clone().into());
    }
    Ok(out)
}

/// Whether the candidates of a lookup by tag pairs (the lookups that list them) are kept,
/// at most `most` of them.
pub(super) fn kept_within(tsdb: &Tsdb, c: &Conditions, most: usize) -> bool {
    if !tsdb.settings().index || c.by_key.is_empty() {
        return false;
    }
    let Some((lists, generation)) = tsdb.kept_candidates() else {
        return false;
    };
    let metric = c
        .metric
        .map(|m| m.to_bytes(tsdb.settings().schema.metric_width));
    let key = kept_key(tsdb, c, metric.as_deref());
    lists
        .get(&key, generation)
        .is_some_and(|list| list.len() <= most)
}

/// The key the candidates of a lookup are kept under: [`KEPT_LOOKUP`], then the metric
/// and each condition, every part after its length.
fn kept_key(tsdb: &Tsdb, c: &Conditions, metric: Option<&[u8]>) -> Vec<u8> {
    let schema = &tsdb.settings().schema;
    let mut key = vec![KEPT_LOOKUP];
    let mut part = |bytes: &[u8]| {
        key.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        key.extend_from_slice(bytes);
    };
    part(metric.unwrap_or_default());
    part(&(c.by_key.len() as u32).to_be_bytes());
    for (tagk, tagv) in &c.by_key {
        part(&tagk.to_bytes(schema.tagk_width));
        part(
            &tagv
                .map(|v| v.to_bytes(schema.tagv_width))
                .unwrap_or_default(),
        );
    }
    part(&(c.any_key_values.len() as u32).to_be_bytes());
    for v in &c.any_key_values {
        part(v);
    }
    key
}

/// The first byte of the key a lookup's candidates are kept under (not a row kind).
const KEPT_LOOKUP: u8 = 0xFD;

/// [`candidates`] read from the index.
fn read_candidates(tsdb: &Tsdb, c: &Conditions, metric: Option<&[u8]>) -> Result<Vec<Vec<u8>>> {
    let schema = &tsdb.settings().schema;
    let tagv_width = usize::from(schema.tagv_width);
    let (tagk_width, metric_width) = (
        usize::from(schema.tagk_width),
        usize::from(schema.metric_width),
    );
    // Each prefix scanned, with the metric its keys leave out (`0x02` ranges: the TSUID is
    // the metric then the key's tail after the tag pair) or none (the catalog: the key's
    // tail is the TSUID).
    let mut prefixes: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
    let tail_at;
    match c.by_key.first() {
        Some((tagk, _)) => {
            let mut k = Vec::new();
            tagk.write(schema.tagk_width, &mut k);
            tail_at = 1 + metric_width + tagk_width + tagv_width;
            let values: Vec<_> = c.by_key.iter().filter(|(k, _)| k == tagk).collect();
            // Each value asked for (none: every value of the key).
            let mut asked: Vec<Option<Vec<u8>>> = Vec::new();
            if values.iter().any(|(_, v)| v.is_none()) {
                asked.push(None);
            } else {
                for (_, v) in values {
                    if let Some(v) = v {
                        asked.push(Some(v.to_bytes(schema.tagv_width)));
                    }
                }
            }
            for value in asked {
                let posting = |m: &[u8], v: Option<&[u8]>| {
                    let p = [&[kind::POSTING][..], m, &k, v.unwrap_or_default()].concat();
                    (p, Some(m.to_vec()))
                };
                match metric {
                    Some(m) => prefixes.push(posting(m, value.as_deref())),
                    None => {
                        // Without a metric: the metrics each value has (`0x03`), then
                        // each one's postings of the value (of the key, one range a metric,
                        // when any value will do).
                        let mut metrics: std::collections::BTreeSet<Vec<u8>> =
                            std::collections::BTreeSet::new();
                        let start = [
                            &[kind::VALUE_METRIC][..],
                            &k,
                            value.as_deref().unwrap_or_default(),
                        ]
                        .concat();
                        let request = ScanRequest {
                            read: ReadOptions {
                                keys_only: true,
                                ..ReadOptions::family(GLOBAL_FAMILY)
                            },
                            ..ScanRequest::prefix(&start)
                        };
                        for row in tsdb.store().scan(&schema.index_table, &request)? {
                            let row = row?;
                            let Some((v, m)) = row
                                .key
                                .get(1 + tagk_width..)
                                .filter(|t| t.len() == tagv_width + metric_width)
                                .map(|t| t.split_at(tagv_width))
                            else {
                                continue;
                            };
                            if value.is_some() {
                                prefixes.push(posting(m, Some(v)));
                            } else if !metrics.contains(m) {
                                metrics.insert(m.to_vec());
                            }
                        }
                        prefixes.extend(metrics.iter().map(|m| posting(m, None)));
                    }
                }
            }
        }
        None => {
            let mut head = vec![kind::CATALOG];
            if let Some(m) = metric {
                head.extend_from_slice(m);
            }
            tail_at = 1;
            prefixes.push((head, None));
        }
    }
    let mut out = Vec::new();
    for (start, head) in prefixes {
        let request = ScanRequest {
            read: ReadOptions {
                keys_only: true,
                ..ReadOptions::family(GLOBAL_FAMILY)
            },
            ..ScanRequest::prefix(&start)
        };
        for row in tsdb.store().scan(&schema.index_table, &request)? {
            let row = row?;
            let Some(tail) = row.key.get(tail_at..) else {
                continue;
            };
            let tsuid = match &head {
                Some(m) => [m.as_slice(), tail].concat(),
                None => tail.to_vec(),
            };
            if matches(schema, c, &tsuid) {
                out.push(tsuid);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Whether a TSUID passes the conditions (what the scan's key regex and value check test).
fn matches(schema: &Schema, c: &Conditions, tsuid: &[u8]) -> bool {
    let Some(series) = Series::from_tsuid(schema, tsuid) else {
        return false;
    };
    if series.metric.iter().all(|b| *b == 0) {
        return false;
    }
    let pairs: Vec<(&[u8], &[u8])> = series.pairs(schema).collect();
    for group in c.by_key.chunk_by(|a, b| a.0 == b.0) {
        let tagk = group[0].0.to_bytes(schema.tagk_width);
        let ok = pairs.iter().any(|(k, v)| {
            *k == tagk.as_slice()
                && group.iter().any(|(_, want)| match want {
                    None => true,
                    Some(w) => w.to_bytes(schema.tagv_width).as_slice() == *v,
                })
        });
        if !ok {
            return false;
        }
    }
    c.any_key_values.is_empty()
        || pairs
            .iter()
            .any(|(_, v)| c.any_key_values.iter().any(|w| w.as_slice() == *v))
}

/// The candidates having a row in the meta table, in TSUID order: the first `limit` of them
/// (0: all), read back 1,000 at a time until that many are found.
fn in_meta_table(tsdb: &Tsdb, found: Vec<Vec<u8>>, limit: usize) -> Result<Vec<Vec<u8>>> {
    let schema = &tsdb.settings().schema;
    let read = ReadOptions {
        keys_only: true,
        ..ReadOptions::family(META_FAMILY)
    };
    let mut out = Vec::new();
    let mut rest = found.as_slice();
    while !rest.is_empty() && (limit == 0 || out.len() < limit) {
        let want = if limit == 0 {
            BATCH
        } else {
            (limit - out.len()).min(BATCH)
        };
        let (chunk, after) = rest.split_at(want.min(rest.len()));
        rest = after;
        let rows = tsdb.store().get_rows(&schema.meta_table, chunk, &read)?;
        for (tsuid, row) in chunk.iter().zip(rows) {
            if row.is_some() {
                out.push(tsuid.clone());
            }
        }
    }
    Ok(out)
}

/// A meta-table lookup without tag pairs (a whole metric, or `*=value` pairs) and with a
/// limit: the catalog (`0x01`, in TSUID order, as the meta table's scan meets series) is read
/// as a stream and its series checked against the meta table (`limit` at a time, twice as
/// many each time after, at most 1,000), until `limit` have a meta row (OpenTSDB's scan of the meta table stops there too). Listing the whole
/// catalog first took 1.2 s for a metric of 1,000,000 series.
fn catalog_in_meta_table(
    tsdb: &Tsdb,
    c: &Conditions,
    metric: Option<&[u8]>,
    limit: usize,
) -> Result<Vec<Vec<u8>>> {
    let schema = &tsdb.settings().schema;
    let mut start = vec![kind::CATALOG];
    if let Some(m) = metric {
        start.extend_from_slice(m);
    }
    let request = ScanRequest {
        read: ReadOptions {
            keys_only: true,
            ..ReadOptions::family(GLOBAL_FAMILY)
        },
        ..ScanRequest::prefix(&start)
    };
    let read = ReadOptions {
        keys_only: true,
        ..ReadOptions::family(META_FAMILY)
    };
    let mut out = Vec::new();
    let mut chunk: Vec<Vec<u8>> = Vec::new();
    let mut size = limit.min(BATCH);
    let mut rows = tsdb.store().scan(&schema.index_table, &request)?;
    loop {
        let row = rows.next().transpose()?;
        if let Some(row) = &row
            && let Some(tsuid) = row.key.get(1..)
            && matches(schema, c, tsuid)
        {
            chunk.push(tsuid.to_vec());
        }
        if chunk.len() >= size || (row.is_none() && !chunk.is_empty()) {
            let found = tsdb.store().get_rows(&schema.meta_table, &chunk, &read)?;
            for (tsuid, meta) in chunk.drain(..).zip(found) {
                if meta.is_some() && out.len() < limit {
                    out.push(tsuid);
                }
            }
            if out.len() >= limit {
                break;
            }
            size = (size * 2).min(BATCH);
        }
        if row.is_none() {
            break;
        }
    }
    Ok(out)
}

/// The candidates having data rows, in the order of their first row key (salt bucket,
/// metric, first hour, tags: where the table scan meets them first).
fn by_first_row(tsdb: &Tsdb, found: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>> {
    let schema = &tsdb.settings().schema;
    let metric_width = usize::from(schema.metric_width);
    let mut placed: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for group in found.chunk_by(|a, b| a.get(..metric_width) == b.get(..metric_width)) {
        let Some(metric) = group[0].get(..metric_width) else {
            continue;
        };
        let mut pending: Vec<&Vec<u8>> = group.iter().collect();
        let periods = periods(tsdb, metric)?;
        let last = periods.len().saturating_sub(1);
        for (i, &period) in periods.iter().enumerate() {
            if pending.is_empty() {
                break;
            }
            // No row of the metric lies outside its periods (the index never lacks the
            // entries of a stored row): a series still pending in the last one has its
            // first row there or none, whatever its postings say.
            let postings = match i {
                _ if i == last => Postings::Unread,
                0 => Postings::AfterFirstHour,
                _ => Postings::Probed,
            };
            let (first, left) = first_rows_in(tsdb, &pending, period, postings)?;
            placed.extend(first);
            pending = left;
        }
    }
    placed.sort_unstable();
    Ok(placed.into_iter().map(|(_, tsuid)| tsuid).collect())
}

/// A data-table lookup of a whole metric (or of `*=value` pairs within it) with a limit:
/// the first `limit` series as the table scan meets them (salt bucket, then first row key),
/// found period by period without listing the metric's series. In each bucket, the series
/// met first in a period are those posted in it (`0x11`, each series under its first tag
/// pair) and not met in an earlier one; while they fit in what is left of the limit, each
/// one's first row is read as [`by_first_row`] does. In the period where they do not, the
/// first of them in tag order having a row in the period's first hour come first
/// ([`at_period_start`]); failing enough of those, the period is read from the data table
/// itself, keys only, in order, until the limit is met (the series met in earlier periods
/// number fewer than the limit, so that read passes over fewer than `limit` series' rows
/// of the period before it stops). A backend returning period order (RFC 0006) meets a
/// period's series in tag order: there the answer has as many series as the scan's.
fn first_in_data_table(
    tsdb: &Tsdb,
    c: &Conditions,
    metric: &[u8],
    limit: usize,
) -> Result<Vec<Vec<u8>>> {
    let schema = &tsdb.settings().schema;
    let periods = periods(tsdb, metric)?;
    let mut out: Vec<Vec<u8>> = Vec::new();
    for salt in hourglass_core::rowkey::salt_prefixes(schema) {
        let want = limit - out.len();
        let mut met: std::collections::HashSet<Vec<u8>> = std::collections::HashSet::new();
        let mut placed: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for &period in &periods {
            let room = want - placed.len();
            let fresh = posted_in(tsdb, c, metric, period, &salt, &met, room + 1)?;
            if fresh.len() <= room {
                let pending: Vec<&Vec<u8>> = fresh.iter().collect();
                // Listed from the period's postings: posted there.
                let (first, _) = first_rows_in(tsdb, &pending, period, Postings::Unread)?;
                for (key, tsuid) in first {
                    met.insert(tsuid.clone());
                    placed.push((key, tsuid));
                }
            } else if !at_period_start(tsdb, c, metric, period, &salt, &mut met, &mut placed, want)?
            {
                met_in_rows(tsdb, c, metric, period, &salt, &mut met, &mut placed, want)?;
            }
            if placed.len() >= want {
                break;
            }
        }
        placed.sort_unstable();
        out.extend(placed.into_iter().take(want).map(|(_, tsuid)| tsuid));
        if out.len() >= limit {
            break;
        }
    }
    Ok(out)
}

/// Up to `most` series of the metric posted in `period` in the salt bucket `salt`, passing
/// the conditions and not in `met`, in the postings' order.
fn posted_in(
    tsdb: &Tsdb,
    c: &Conditions,
    metric: &[u8],
    period: u32,
    salt: &[u8],
    met: &std::collections::HashSet<Vec<u8>>,
    most: usize,
) -> Result<Vec<Vec<u8>>> {
    let schema = &tsdb.settings().schema;
    let pair = schema.tag_pair_width();
    let head = [&[kind::PERIOD_POSTING][..], metric, &period.to_be_bytes()].concat();
    let request = ScanRequest {
        read: ReadOptions {
            keys_only: true,
            ..ReadOptions::family(PERIOD_FAMILY)
        },
        ..ScanRequest::prefix(&head)
    };
    let mut out = Vec::new();
    for row in tsdb.store().scan(&schema.index_table, &request)? {
        let row = row?;
        let Some((posted, tags)) = row
            .key
            .get(head.len()..)
            .and_then(|t| t.split_at_checked(pair))
        else {
            continue;
        };
        // Each series once: under its first tag pair.
        if tags.get(..pair) != Some(posted) {
            continue;
        }
        let tsuid = [metric, tags].concat();
        if met.contains(&tsuid)
            || !matches(schema, c, &tsuid)
            || row_key(schema, &tsuid, period).get(..salt.len()) != Some(salt)
        {
            continue;
        }
        out.push(tsuid);
        if out.len() >= most {
            break;
        }
    }
    Ok(out)
}

/// Series posted in `period` (up to twice what is left of the limit, in tag order)
/// having a row in its first hour, read with `get_rows` until `placed` holds `want`: no
/// series first met in the period can precede those (their hour is the period's first, and
/// the ones not read have greater tags). Whether it got there; if not, nothing is placed.
/// On a store keeping closed periods in groups a scan of the period reads its groups whole,
/// where these reads take a few rows.
#[allow(clippy::too_many_arguments)]
fn at_period_start(
    tsdb: &Tsdb,
    c: &Conditions,
    metric: &[u8],
    period: u32,
    salt: &[u8],
    met: &mut std::collections::HashSet<Vec<u8>>,
    placed: &mut Vec<(Vec<u8>, Vec<u8>)>,
    want: usize,
) -> Result<bool> {
    let schema = &tsdb.settings().schema;
    let room = want - placed.len();
    let fresh = posted_in(
        tsdb,
        c,
        metric,
        period,
        salt,
        met,
        room.saturating_mul(2) + 16,
    )?;
    let read = ReadOptions {
        keys_only: true,
        ..ReadOptions::family(DATA_FAMILY)
    };
    let mut hits: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for chunk in fresh.chunks(BATCH.min(room.saturating_mul(2).max(16))) {
        let keys: Vec<Vec<u8>> = chunk.iter().map(|t| row_key(schema, t, period)).collect();
        let rows = tsdb.store().get_rows(&schema.data_table, &keys, &read)?;
        for ((key, tsuid), row) in keys.into_iter().zip(chunk).zip(rows) {
            if row.is_some() && hits.len() < room {
                hits.push((key, tsuid.clone()));
            }
        }
        if hits.len() >= room {
            for (key, tsuid) in hits {
                met.insert(tsuid.clone());
                placed.push((key, tsuid));
            }
            return Ok(true);
        }
    }
    Ok(false)
}

/// The series first met in the data rows of `period` in the salt bucket `salt` (keys only,
/// in the table's order), each with its first row key, until `placed` holds `want`.
#[allow(clippy::too_many_arguments)]
fn met_in_rows(
    tsdb: &Tsdb,
    c: &Conditions,
    metric: &[u8],
    period: u32,
    salt: &[u8],
    met: &mut std::collections::HashSet<Vec<u8>>,
    placed: &mut Vec<(Vec<u8>, Vec<u8>)>,
    want: usize,
) -> Result<()> {
    let schema = &tsdb.settings().schema;
    let start = [salt, metric, &period.to_be_bytes()].concat();
    let end = match period.checked_add(PERIOD_SECS) {
        Some(next) => Some([salt, metric, &next.to_be_bytes()].concat()),
        None => prefix_end(&[salt, metric].concat()),
    };
    let request = ScanRequest {
        start,
        end,
        read: ReadOptions {
            keys_only: true,
            ..ReadOptions::family(DATA_FAMILY)
        },
        ..ScanRequest::default()
    };
    let pair = schema.tag_pair_width();
    for row in tsdb.store().scan(&schema.data_table, &request)? {
        let row = row?;
        let Some(tags) = row.key.get(schema.tags_offset()..) else {
            continue;
        };
        if !tags.len().is_multiple_of(pair) {
            continue; // not a series row
        }
        let tsuid = [metric, tags].concat();
        if met.contains(&tsuid) || !matches(schema, c, &tsuid) {
            continue;
        }
        met.insert(tsuid.clone());
        placed.push((row.key, tsuid));
        if placed.len() >= want {
            break;
        }
    }
    Ok(())
}

/// The periods holding postings of a metric, ascending.
fn periods(tsdb: &Tsdb, metric: &[u8]) -> Result<Vec<u32>> {
    let head = [&[kind::PERIOD_POSTING][..], metric].concat();
    // Kept as the candidates are (the periods of a metric change only with its postings).
    let kept = tsdb.kept_candidates();
    let key = [&[KEPT_PERIODS][..], metric].concat();
    let found = match kept.and_then(|(lists, generation)| lists.get(&key, generation)) {
        Some(list) => list.to_vec(),
        None => {
            let found = distinct_after(tsdb, &head, PERIOD_FAMILY, 4)?;
            if let Some((lists, generation)) = kept {
                lists.put(key, generation, found.clone().into());
            }
            found
        }
    };
    Ok(found
        .into_iter()
        .filter_map(|b| b.try_into().ok().map(u32::from_be_bytes))
        .collect())
}

/// The first byte of the key a metric's periods are kept under (not a row kind).
const KEPT_PERIODS: u8 = 0xFC;

/// [`status::covers_all_hours`] of the index table, kept between lookups as the candidates
/// are: at the entry generation, which every write of a status row moves (the index's and
/// each metric's, both of kind `0x00`). Kept as a list of one entry when covered, of none
/// when not.
fn covers_all_hours(tsdb: &Tsdb, metric: Option<&[u8]>) -> Result<bool> {
    let kept = tsdb.kept_candidates();
    let key = match metric {
        Some(m) => [&[KEPT_COVERAGE, 1][..], m].concat(),
        None => vec![KEPT_COVERAGE, 0],
    };
    if let Some(list) = kept.and_then(|(lists, generation)| lists.get(&key, generation)) {
        return Ok(!list.is_empty());
    }
    let table = &tsdb.settings().schema.index_table;
    let covered = status::covers_all_hours(tsdb.store().as_ref(), table, metric)?;
    if let Some((lists, generation)) = kept {
        let list: Vec<Vec<u8>> = if covered {
            vec![Vec::new()]
        } else {
            Vec::new()
        };
        lists.put(key, generation, list.into());
    }
    Ok(covered)
}

/// The first byte of the key a lookup's coverage is kept under (not a row kind).
const KEPT_COVERAGE: u8 = 0xFB;

/// The distinct `width` bytes that follow `head` in the index's keys of `family`, ascending:
/// one short keys-only scan each, starting past every key of the last one found.
pub(super) fn distinct_after(
    tsdb: &Tsdb,
    head: &[u8],
    family: &str,
    width: usize,
) -> Result<Vec<Vec<u8>>> {
    let table = &tsdb.settings().schema.index_table;
    let end = prefix_end(head);
    let mut start = head.to_vec();
    let mut out = Vec::new();
    loop {
        let request = ScanRequest {
            start,
            end: end.clone(),
            read: ReadOptions {
                keys_only: true,
                ..ReadOptions::family(family)
            },
            limit: Some(1),
            ..ScanRequest::default()
        };
        let Some(row) = tsdb.store().scan(table, &request)?.next().transpose()? else {
            return Ok(out);
        };
        let Some(found) = row.key.get(head.len()..head.len() + width) else {
            return Ok(out);
        };
        out.push(found.to_vec());
        match prefix_end(&[head, found].concat()) {
            Some(next) => start = next,
            None => return Ok(out),
        }
    }
}

type FirstRows<'a> = (Vec<(Vec<u8>, Vec<u8>)>, Vec<&'a Vec<u8>>);

/// How [`first_rows_in`] uses the pending series' postings (`0x11`) of the period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Postings {
    /// Each series' posting read first; the hours read only of the series posted.
    Probed,
    /// The period's first hour read of every series first, then the postings of the series
    /// without a row there: the metric's first period of several, where a series present
    /// from the start has its first row in that hour (one read, not two).
    AfterFirstHour,
    /// Not read: the series are known posted in the period (listed from its postings), or
    /// it is the metric's last period (a series without rows there has none at all).
    Unread,
}

/// Of the pending series, those with rows in `period`: (first row key, TSUID); and the rest.
/// A series posted in a period it has no rows in (announced ahead, or its rows deleted)
/// stays pending.
fn first_rows_in<'a>(
    tsdb: &Tsdb,
    pending: &[&'a Vec<u8>],
    period: u32,
    postings: Postings,
) -> Result<FirstRows<'a>> {
    let mut first = Vec::new();
    let mut unseen = pending.to_vec();
    let mut from = 0;
    if postings == Postings::AfterFirstHour {
        unseen = first_row_in_hours(tsdb, unseen, period, 0..1, &mut first)?;
        from = 1;
    }
    let mut left = Vec::new();
    if postings != Postings::Unread {
        (unseen, left) = posted_of(tsdb, &unseen, period)?;
    }
    // The period's hours asked in rounds of doubling length (the first hour alone, the
    // second, the next two, four, eight, then the rest), each round only of the series
    // without a row in the hours before: a series whose first row is early in its first
    // period (most: a series starts at the top of a period, or was there before it) costs a
    // read or two, not one for each of the period's 24 hours. On a shared store (Bigtable)
    // each read is a round trip, which weighs more than the keys it asks: there the hours
    // after the first are asked in one round.
    let hours = PERIOD_SECS / 3600;
    let fold = tsdb.store().is_shared();
    let length = |from: u32| match from {
        0 => 1,
        _ if fold => hours - from,
        1 => 1,
        _ => from,
    };
    while from < hours && !unseen.is_empty() {
        let to = (from + length(from)).min(hours);
        unseen = first_row_in_hours(tsdb, unseen, period, from..to, &mut first)?;
        from = to;
    }
    left.extend(unseen);
    Ok((first, left))
}

/// Of `series`, those posted in `period` (`0x11`, under the first tag pair); and the rest.
fn posted_of<'a>(tsdb: &Tsdb, series: &[&'a Vec<u8>], period: u32) -> Result<Split<'a>> {
    let schema = &tsdb.settings().schema;
    let read = ReadOptions {
        keys_only: true,
        ..ReadOptions::family(PERIOD_FAMILY)
    };
    let mut posted = Vec::new();
    let mut left = Vec::new();
    for chunk in series.chunks(BATCH) {
        let keys: Vec<Vec<u8>> = chunk
            .iter()
            .filter_map(|tsuid| {
                let series = Series::from_tsuid(schema, tsuid)?;
                let (tagk, tagv) = series.pairs(schema).next()?;
                Some(index::period_posting_key(series, period, tagk, tagv))
            })
            .collect();
        if keys.len() != chunk.len() {
            left.extend(chunk.iter().copied());
            continue;
        }
        let rows = tsdb.store().get_rows(&schema.index_table, &keys, &read)?;
        for (tsuid, row) in chunk.iter().zip(rows) {
            if row.is_some() {
                posted.push(*tsuid);
            } else {
                left.push(*tsuid);
            }
        }
    }
    Ok((posted, left))
}

type Split<'a> = (Vec<&'a Vec<u8>>, Vec<&'a Vec<u8>>);

/// Reads the `hours` of `period` (offsets from its start) of each series, pushing onto
/// `first` each one's first row found, with one `get_rows` per 1,000 keys; the series
/// without a row in those hours are returned.
fn first_row_in_hours<'a>(
    tsdb: &Tsdb,
    series: Vec<&'a Vec<u8>>,
    period: u32,
    hours: std::ops::Range<u32>,
    first: &mut Vec<(Vec<u8>, Vec<u8>)>,
) -> Result<Vec<&'a Vec<u8>>> {
    let schema = &tsdb.settings().schema;
    let read = ReadOptions {
        keys_only: true,
        ..ReadOptions::family(DATA_FAMILY)
    };
    let per_series = hours.len();
    if per_series == 0 {
        return Ok(series);
    }
    let mut still = Vec::new();
    for chunk in series.chunks((BATCH / per_series).max(1)) {
        let keys: Vec<Vec<u8>> = chunk
            .iter()
            .flat_map(|tsuid| {
                hours
                    .clone()
                    .map(move |h| row_key(schema, tsuid, period + h * 3600))
            })
            .collect();
        let rows = tsdb.store().get_rows(&schema.data_table, &keys, &read)?;
        let mut found = keys.into_iter().zip(rows);
        for tsuid in chunk {
            let mut hit = None;
            for (key, row) in found.by_ref().take(per_series) {
                if hit.is_none() && row.is_some() {
                    hit = Some(key);
                }
            }
            match hit {
                Some(key) => first.push((key, (*tsuid).clone())),
                None => still.push(*tsuid),
            }
        }
    }
    Ok(still)
}
/// A series' data row key for an hour, salted as the table has it.
fn row_key(schema: &Schema, tsuid: &[u8], hour: u32) -> Vec<u8> {
    let metric_width = usize::from(schema.metric_width);
    let (metric, tags) = tsuid.split_at(metric_width.min(tsuid.len()));
    let mut key = vec![0u8; usize::from(schema.salt_width)];
    key.extend_from_slice(metric);
    key.extend_from_slice(&hour.to_be_bytes());
    key.extend_from_slice(tags);
    apply_salt(schema, &mut key);
    key
}
