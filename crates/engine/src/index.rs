//! The tag index (RFC 0007): a table of Hourglass's own (`tsdb-index`,
//! `tsd.storage.hbase.index_table`) listing, per metric, tag pair and period (a UTC day),
//! the series that have rows there. The write path maintains it at flush time
//! (`write/index.rs`), `tsdb index rebuild` builds it from the data table ([`rebuild`]) and
//! `tsdb fsck --index` checks one against the other ([`check`]). OpenTSDB's tables are not
//! changed by a byte.
//!
//! Row keys (`M`, `K`, `V`: metric, tag key, tag value UID widths; `P`: a period's start, 4
//! bytes BE seconds; `tags`: the series' tag pairs exactly as in its data row key; no salt):
//!
//! ```text
//! | 0x00 |                                              g:format, g:period, g:live_from, g:writers  status
//! | 0x00 | metric (M) |                                 g:verified, g:live_from     a metric's status
//! | 0x01 | metric (M) | tags |                          g:s = empty      series catalog
//! | 0x02 | metric (M) | tagk (K) | tagv (V) | tags |    g:s = empty      all-time posting
//! | 0x03 | tagk (K) | tagv (V) | metric (M) |           g:s = empty      a value's metric
//! | 0x04 | metric (M) | tagk (K) | tagv name |          g:v = tagv (V)   value name
//! | 0x05 | tagk (K) | trigram (3) | tagv (V) |          g:s = empty      value trigram
//! | 0x10 | metric (M) | P (4) | tags |                  p:s = empty      series of a period
//! | 0x11 | metric (M) | P (4) | tagk (K) | tagv (V) | tags |  p:s = empty  period posting
//! | 0x12 | metric (M) | P (4) | tagk (K) | tagv name |  p:v = tagv (V)   period value name
//! | 0x20 | metric (M) | P (4) |                         c:s, c:k<tagk>, c:v<tagk>  period counters
//! | 0x21 | metric (M) |                                 c:s, c:k<tagk>, c:v<tagk>  all-time counters
//! | 0x30 | metric (M) | start ms (8, BE) | tags |       g:n = empty      a note's place
//! ```
//!
//! Format 2 (RFC 0007, "Format 2"): `0x03` lists the metrics of a tag value (the series of
//! a value without a metric are each listed metric's `0x02` range) and `0x05` trigrams are
//! a tag key's, shared by every metric; format 1 wrote both per series or per metric.
//!
//! Cell timestamps are fixed (a `p` cell its period's start in ms, a `g` cell 0), so writing
//! an entry again writes the same cell: every entry is an idempotent set.

pub mod cardinality;
pub mod check;
pub mod rebuild;
pub mod select;
pub mod status;

use hourglass_core::schema::Schema;
use hourglass_core::uid::name_bytes;
use hourglass_storage::{FamilySpec, Mutation, RowMutation, TableSpec};

/// Global rows: status, catalog, all-time postings, value names, trigrams, notes.
pub const GLOBAL_FAMILY: &str = "g";
/// Rows of one period: its series, postings and value names.
pub const PERIOD_FAMILY: &str = "p";
/// Cardinality counters (8-byte big-endian).
pub const COUNTER_FAMILY: &str = "c";
/// The qualifier of an entry whose presence is its meaning (and of the series counter).
pub const ENTRY_QUALIFIER: &[u8] = b"s";
/// The qualifier of a value row's cell (the tag value's UID).
pub const VALUE_QUALIFIER: &[u8] = b"v";
/// The qualifier of a note's place.
pub const NOTE_QUALIFIER: &[u8] = b"n";
/// A period: one UTC day.
pub const PERIOD_SECS: u32 = 86_400;

/// The kind byte every index key starts with.
pub mod kind {
    pub const STATUS: u8 = 0x00;
    pub const CATALOG: u8 = 0x01;
    pub const POSTING: u8 = 0x02;
    pub const VALUE_METRIC: u8 = 0x03;
    pub const VALUE_NAME: u8 = 0x04;
    pub const TRIGRAM: u8 = 0x05;
    pub const PERIOD_SERIES: u8 = 0x10;
    pub const PERIOD_POSTING: u8 = 0x11;
    pub const PERIOD_VALUE_NAME: u8 = 0x12;
    pub const PERIOD_COUNTERS: u8 = 0x20;
    pub const SERIES_COUNTERS: u8 = 0x21;
    pub const NOTE: u8 = 0x30;
}

/// The index table and its families (one version each). The `p` family is not aged out:
/// Hourglass has no data retention setting yet (RFC 0007: its max age follows the data's
/// retention when one is configured).
pub fn table_spec(schema: &Schema) -> TableSpec {
    TableSpec {
        name: schema.index_table.clone(),
        families: vec![
            FamilySpec::new(GLOBAL_FAMILY, Some(1)),
            FamilySpec::new(PERIOD_FAMILY, Some(1)),
            FamilySpec::new(COUNTER_FAMILY, Some(1)),
        ],
    }
}

/// The period holding a time (seconds): its start.
pub fn period_of(secs: u32) -> u32 {
    secs - secs % PERIOD_SECS
}

/// The timestamp of a period's `p` cells (ms).
pub fn period_cell_ms(period: u32) -> i64 {
    i64::from(period) * 1000
}

/// A series as the index names it: its metric UID and its tag pairs as in its row key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Series<'a> {
    pub metric: &'a [u8],
    pub tags: &'a [u8],
}

impl<'a> Series<'a> {
    /// The series of a data row key (salt and base hour left out); `None` when the key is
    /// not a series' key (too short, a partial tag pair, no tags).
    pub fn from_row_key(schema: &Schema, key: &'a [u8]) -> Option<Series<'a>> {
        let metric = key.get(usize::from(schema.salt_width)..schema.timestamp_offset())?;
        let tags = key.get(schema.tags_offset()..)?;
        Series::checked(schema, metric, tags)
    }

    /// The series of a TSUID (metric then tag pairs).
    pub fn from_tsuid(schema: &Schema, tsuid: &'a [u8]) -> Option<Series<'a>> {
        let metric = tsuid.get(..usize::from(schema.metric_width))?;
        let tags = tsuid.get(usize::from(schema.metric_width)..)?;
        Series::checked(schema, metric, tags)
    }

    fn checked(schema: &Schema, metric: &'a [u8], tags: &'a [u8]) -> Option<Series<'a>> {
        let pair = schema.tag_pair_width();
        (!tags.is_empty() && tags.len().is_multiple_of(pair)).then_some(Series { metric, tags })
    }

    /// Its tag pairs as (tag key UID, tag value UID) bytes.
    pub fn pairs(&self, schema: &Schema) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
        let k = usize::from(schema.tagk_width);
        self.tags
            .chunks_exact(schema.tag_pair_width())
            .map(move |p| p.split_at(k))
    }

    /// Metric and tags in one buffer: the series' TSUID.
    pub fn tsuid(&self) -> Vec<u8> {
        [self.metric, self.tags].concat()
    }
}

fn key(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// `| 0x00 |`: the index's status.
pub fn status_key() -> Vec<u8> {
    vec![kind::STATUS]
}

/// `| 0x00 | metric |`: a metric's status.
pub fn metric_status_key(metric: &[u8]) -> Vec<u8> {
    key(&[&[kind::STATUS], metric])
}

/// `| 0x01 | metric | tags |`
pub fn catalog_key(series: Series<'_>) -> Vec<u8> {
    key(&[&[kind::CATALOG], series.metric, series.tags])
}

/// `| 0x02 | metric | tagk | tagv | tags |`
pub fn posting_key(series: Series<'_>, tagk: &[u8], tagv: &[u8]) -> Vec<u8> {
    key(&[&[kind::POSTING], series.metric, tagk, tagv, series.tags])
}

/// `| 0x03 | tagk | tagv | metric |`: the metric has series with the tag value.
pub fn value_metric_key(tagk: &[u8], tagv: &[u8], metric: &[u8]) -> Vec<u8> {
    key(&[&[kind::VALUE_METRIC], tagk, tagv, metric])
}

/// `| 0x04 | metric | tagk | tagv name |`, the name as `tsdb-uid` stores it.
pub fn value_name_key(metric: &[u8], tagk: &[u8], name: &str) -> Vec<u8> {
    key(&[&[kind::VALUE_NAME], metric, tagk, &name_bytes(name)])
}

/// `| 0x05 | tagk | trigram | tagv |`
pub fn trigram_key(tagk: &[u8], trigram: [u8; 3], tagv: &[u8]) -> Vec<u8> {
    key(&[&[kind::TRIGRAM], tagk, &trigram, tagv])
}

/// `| 0x10 | metric | period | tags |`: the series has rows in the period.
pub fn period_series_key(series: Series<'_>, period: u32) -> Vec<u8> {
    key(&[
        &[kind::PERIOD_SERIES],
        series.metric,
        &period.to_be_bytes(),
        series.tags,
    ])
}

/// `| 0x11 | metric | period | tagk | tagv | tags |`
pub fn period_posting_key(series: Series<'_>, period: u32, tagk: &[u8], tagv: &[u8]) -> Vec<u8> {
    key(&[
        &[kind::PERIOD_POSTING],
        series.metric,
        &period.to_be_bytes(),
        tagk,
        tagv,
        series.tags,
    ])
}

/// `| 0x12 | metric | period | tagk | tagv name |`
pub fn period_value_name_key(metric: &[u8], period: u32, tagk: &[u8], name: &str) -> Vec<u8> {
    key(&[
        &[kind::PERIOD_VALUE_NAME],
        metric,
        &period.to_be_bytes(),
        tagk,
        &name_bytes(name),
    ])
}

/// `| 0x20 | metric | period |`
pub fn period_counters_key(metric: &[u8], period: u32) -> Vec<u8> {
    key(&[&[kind::PERIOD_COUNTERS], metric, &period.to_be_bytes()])
}

/// `| 0x21 | metric |`
pub fn series_counters_key(metric: &[u8]) -> Vec<u8> {
    key(&[&[kind::SERIES_COUNTERS], metric])
}

/// `| 0x30 | metric | start ms (8, BE) | tags |`: a note's place (a global note: metric all
/// zeros, no tags).
pub fn note_key(metric: &[u8], start_ms: i64, tags: &[u8]) -> Vec<u8> {
    key(&[&[kind::NOTE], metric, &start_ms.to_be_bytes(), tags])
}

/// Counter qualifier of the series having a tag key: `k` + tag key UID.
pub fn key_series_qualifier(tagk: &[u8]) -> Vec<u8> {
    key(&[b"k", tagk])
}

/// Counter qualifier of a tag key's distinct values: `v` + tag key UID.
pub fn key_values_qualifier(tagk: &[u8]) -> Vec<u8> {
    key(&[b"v", tagk])
}

/// Every distinct 3-byte window of the UTF-8 bytes of the lower-cased name, in byte order
/// (none for names shorter than 3 bytes).
pub fn trigrams(name: &str) -> Vec<[u8; 3]> {
    let lower = name.to_lowercase();
    let mut out: Vec<[u8; 3]> = lower
        .as_bytes()
        .windows(3)
        .map(|w| [w[0], w[1], w[2]])
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// An entry row: one cell, written whole. Kept in this form (two allocations) until it is
/// written: a flush of many new series holds and sorts a few hundred thousand of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: Vec<u8>,
    pub family: &'static str,
    pub qualifier: &'static [u8],
    /// The cell's timestamp (ms): fixed, so a repeated write is the same cell.
    pub timestamp: i64,
    pub value: Vec<u8>,
}

/// Deleting the row first makes the write a blind put (the embedded store then need not
/// read the row), and changes nothing: an entry row never holds another cell.
impl From<Entry> for RowMutation {
    fn from(e: Entry) -> RowMutation {
        RowMutation {
            key: e.key,
            mutations: vec![
                Mutation::DeleteRow,
                Mutation::set_at(e.family, e.qualifier, e.timestamp, e.value),
            ],
        }
    }
}

fn global(key: Vec<u8>, qualifier: &'static [u8], value: Vec<u8>) -> Entry {
    Entry {
        key,
        family: GLOBAL_FAMILY,
        qualifier,
        timestamp: 0,
        value,
    }
}

fn periodic(key: Vec<u8>, period: u32, qualifier: &'static [u8], value: Vec<u8>) -> Entry {
    Entry {
        key,
        family: PERIOD_FAMILY,
        qualifier,
        timestamp: period_cell_ms(period),
        value,
    }
}

/// A tag value's rows: the (tagk, tagv) UID bytes they are about, and the rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueRows {
    pub tagk: Vec<u8>,
    pub tagv: Vec<u8>,
    pub rows: Vec<Entry>,
}

/// The entries of a series in one period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeriodEntries {
    /// `0x11`, one per tag pair.
    pub postings: Vec<Entry>,
    /// `0x12`, one per tag pair whose value's name is known.
    pub values: Vec<ValueRows>,
    /// `0x10`, written only once the postings are stored.
    pub marker: Entry,
}

/// The entries of a series over all time (its values' rows are [`value_entries`] and
/// [`trigram_entries`], written once per value, not per series).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesEntries {
    /// `0x02`, one per tag pair.
    pub postings: Vec<Entry>,
    /// `0x01`, written only once the rest is stored.
    pub catalog: Entry,
}

/// The entries of `series` in `period`. `names` gives each tag pair's value name, in pair
/// order (`None`: unknown, its value row is left out).
pub fn period_entries(
    schema: &Schema,
    series: Series<'_>,
    period: u32,
    names: &[Option<String>],
) -> PeriodEntries {
    let mut postings = Vec::new();
    let mut values = Vec::new();
    for (i, (tagk, tagv)) in series.pairs(schema).enumerate() {
        let key = period_posting_key(series, period, tagk, tagv);
        postings.push(periodic(key, period, ENTRY_QUALIFIER, Vec::new()));
        if let Some(Some(name)) = names.get(i) {
            let key = period_value_name_key(series.metric, period, tagk, name);
            values.push(ValueRows {
                tagk: tagk.to_vec(),
                tagv: tagv.to_vec(),
                rows: vec![periodic(key, period, VALUE_QUALIFIER, tagv.to_vec())],
            });
        }
    }
    PeriodEntries {
        postings,
        values,
        marker: periodic(
            period_series_key(series, period),
            period,
            ENTRY_QUALIFIER,
            Vec::new(),
        ),
    }
}

/// The all-time entries of `series`.
pub fn series_entries(schema: &Schema, series: Series<'_>) -> SeriesEntries {
    let postings = series
        .pairs(schema)
        .map(|(tagk, tagv)| global(posting_key(series, tagk, tagv), ENTRY_QUALIFIER, Vec::new()))
        .collect();
    SeriesEntries {
        postings,
        catalog: global(catalog_key(series), ENTRY_QUALIFIER, Vec::new()),
    }
}

/// The rows of a tag value new to a metric: its `0x03` metric row and, when its name is
/// known, its `0x04` value name.
pub fn value_entries(metric: &[u8], tagk: &[u8], tagv: &[u8], name: Option<&str>) -> Vec<Entry> {
    let mut rows = vec![global(
        value_metric_key(tagk, tagv, metric),
        ENTRY_QUALIFIER,
        Vec::new(),
    )];
    if let Some(name) = name {
        rows.push(global(
            value_name_key(metric, tagk, name),
            VALUE_QUALIFIER,
            tagv.to_vec(),
        ));
    }
    rows
}

/// The `0x05` rows of a tag value new to its tag key (any metric).
pub fn trigram_entries(tagk: &[u8], tagv: &[u8], name: &str) -> Vec<Entry> {
    trigrams(name)
        .into_iter()
        .map(|t| global(trigram_key(tagk, t, tagv), ENTRY_QUALIFIER, Vec::new()))
        .collect()
}

#[cfg(test)]
mod tests;

/// The tag value names of a series' pairs, in pair order, through the UID cache. A value
/// whose UID has no name (a damaged UID table) is `None`: its value rows are left out (and
/// logged), its postings are not.
pub fn value_names(
    uids: &crate::uid::UidRegistry,
    schema: &Schema,
    series: Series<'_>,
) -> crate::Result<Vec<Option<String>>> {
    series
        .pairs(schema)
        .map(|(_, tagv)| value_name(uids, tagv))
        .collect()
}

/// The name of one tag value UID through the UID cache (see [`value_names`]).
pub fn value_name(uids: &crate::uid::UidRegistry, tagv: &[u8]) -> crate::Result<Option<String>> {
    let uid = hourglass_core::uid::Uid::from_bytes(tagv)?;
    match uids.get_name(hourglass_core::uid::UidKind::TagValue, uid) {
        Ok(name) => Ok(Some(name)),
        Err(e @ crate::Error::NoSuchId { .. }) => {
            tracing::error!(error = %e, "tag index: a tag value has no name; its value rows are left out");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Rewrites the value rows of a renamed tag value (`tsdb uid rename`, `/api/uid/rename`):
/// every `0x04` and `0x12` row naming `uid` by `old` is written again under `new` (and its
/// `0x05` trigrams), then the old rows are removed. A scan of those two kinds, so its cost
/// grows with every value of every metric. Returns the value rows rewritten; nothing when
/// the index table does not exist.
pub fn rename_value(
    store: &dyn hourglass_storage::Store,
    schema: &Schema,
    uid: &[u8],
    old: &str,
    new: &str,
) -> crate::Result<usize> {
    use hourglass_storage::{ReadOptions, ScanRequest};
    let table = &schema.index_table;
    if !store.table_exists(table)? {
        return Ok(0);
    }
    if status::stored_format(store, table)?.is_some_and(|f| f != [status::FORMAT]) {
        // An index of another format is never written (it is replaced whole).
        return Ok(0);
    }
    let (m, k) = (
        usize::from(schema.metric_width),
        usize::from(schema.tagk_width),
    );
    let old_bytes = name_bytes(old).into_owned();
    let (old_trigrams, new_trigrams) = (trigrams(old), trigrams(new));
    let mut writes: Vec<RowMutation> = Vec::new();
    let mut deletes: Vec<RowMutation> = Vec::new();
    // Trigram rows are the tag key's (format 2): rewritten once per key, whatever metrics
    // have the value under it.
    let mut keys_done: std::collections::BTreeSet<Vec<u8>> = std::collections::BTreeSet::new();
    let gone = |key: Vec<u8>| RowMutation {
        key,
        mutations: vec![Mutation::DeleteRow],
    };
    for (kind_byte, family, head) in [
        (kind::VALUE_NAME, GLOBAL_FAMILY, 1 + m + k),
        (kind::PERIOD_VALUE_NAME, PERIOD_FAMILY, 1 + m + 4 + k),
    ] {
        let request = ScanRequest {
            read: ReadOptions::latest(),
            ..ScanRequest::prefix(&[kind_byte])
        };
        for row in store.scan(table, &request)? {
            let row = row?;
            let Some((fixed, name)) = row.key.split_at_checked(head) else {
                continue;
            };
            if name != old_bytes.as_slice() || row.value(family, VALUE_QUALIFIER) != Some(uid) {
                continue;
            }
            let metric = &fixed[1..1 + m];
            let tagk = &fixed[head - k..];
            if kind_byte == kind::VALUE_NAME {
                writes.push(
                    global(
                        value_name_key(metric, tagk, new),
                        VALUE_QUALIFIER,
                        uid.to_vec(),
                    )
                    .into(),
                );
                if keys_done.insert(tagk.to_vec()) {
                    for t in &new_trigrams {
                        writes.push(
                            global(trigram_key(tagk, *t, uid), ENTRY_QUALIFIER, Vec::new()).into(),
                        );
                    }
                    for t in old_trigrams.iter().filter(|t| !new_trigrams.contains(t)) {
                        deletes.push(gone(trigram_key(tagk, *t, uid)));
                    }
                }
            } else {
                let p = &fixed[1 + m..1 + m + 4];
                let period = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
                let key = period_value_name_key(metric, period, tagk, new);
                writes.push(periodic(key, period, VALUE_QUALIFIER, uid.to_vec()).into());
            }
            deletes.push(gone(row.key));
        }
    }
    let rewritten = deletes
        .iter()
        .filter(|r| {
            matches!(
                r.key.first(),
                Some(&kind::VALUE_NAME | &kind::PERIOD_VALUE_NAME)
            )
        })
        .count();
    // The new names first: a reader meets the value under one name or both, never neither.
    for batch in writes.chunks(1000).chain(deletes.chunks(1000)) {
        store.mutate_rows(table, batch)?;
    }
    Ok(rewritten)
}
