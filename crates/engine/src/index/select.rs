//! The series a query can match, from the tag index (RFC 0007, "Queries").
//!
//! Filters are grouped by tag key as the query scan groups them (case-sensitive literals
//! ORed, every other filter ANDed, the key required). One key drives: the one with
//! case-sensitive literals (their UIDs name its values), else one whose filters bound a
//! name prefix (the longest), else any; its matching values are found in the value rows
//! (`0x12` of each period, `0x04` for ranges of more than [`MAX_PERIODS`] periods) by
//! prefix, and their postings (`0x11`, or `0x02`) list the candidates. The other keys'
//! filters and `explicitTags` are checked on each candidate's tag pairs (names from the UID
//! cache). Candidates over-approximate (the index may list series whose rows are gone):
//! the query still checks every row it reads, so the index chooses rows, never answers.
//!
//! The index is used only when it covers every hour of the range
//! ([`status::Coverage`]) and the candidates stay under [`MAX_CANDIDATES`]; otherwise
//! the caller scans as without it.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};

use hourglass_core::uid::{Uid, UidKind, name_from_bytes};
use hourglass_storage::{ReadOptions, ScanRequest};

use super::{GLOBAL_FAMILY, PERIOD_FAMILY, PERIOD_SECS, VALUE_QUALIFIER, kind, period_of, status};
use crate::query::filter::{TagFilter, key_passes};
use crate::{Error, Result, Tsdb};

/// Most candidate series (and most matching values of the driving key) a query takes from
/// the index; past it the metric is scanned as without the index.
pub const MAX_CANDIDATES: usize = 4_096;

/// Most values a trigram may list before its filter is left to a full scan.
pub const MAX_TRIGRAM_VALUES: usize = 65_536;

/// Values left by a trigram list at or under which their names are checked instead of
/// reading the next trigram's list.
pub const NAME_CHECKS: usize = 4_096;

/// Ranges over more periods than this read the all-time rows instead of each period's.
pub const MAX_PERIODS: u32 = 31;

/// One tag key's filters.
#[derive(Debug, Clone)]
pub struct KeyFilters {
    pub tagk: Uid,
    pub filters: Vec<TagFilter>,
}

/// How the driving key's values are found.
#[derive(Debug, Clone)]
enum Values {
    /// Case-sensitive literals: the names themselves.
    Named(Vec<String>),
    /// Names starting with one of these (ASCII) prefixes.
    Prefixed(Vec<String>),
    /// Values having every one of these trigrams (`0x05` rows, all time).
    Trigrams(Vec<[u8; 3]>),
    /// Every value of the key.
    All,
}

/// What a query asks of the index: its metric, its filters by tag key and `explicitTags`.
#[derive(Debug)]
pub struct SeriesSelector {
    metric: Uid,
    keys: Vec<KeyFilters>,
    explicit_tags: bool,
    /// Which key drives, and how its values are found.
    driving: usize,
    values: Values,
    /// Candidate sets handed out (how often the index answered instead of a full scan).
    used: AtomicU64,
    /// The driving key's values found by trigrams, once per query: they do not depend on
    /// the range, and a query read on two threads asks for them from both.
    trigram_found: parking_lot::Mutex<Option<Option<Vec<Vec<u8>>>>>,
    /// The metric's coverage, read once per query (both halves ask).
    coverage: parking_lot::Mutex<Option<Option<status::Coverage>>>,
    /// Each period's candidates, found once per query: the halves of a query read on two
    /// threads mostly share their periods (both are in one day for a range of hours).
    /// The slot of a period is locked while it is found, so the other half waits for it
    /// instead of reading the same rows; other periods are found meanwhile.
    periods: parking_lot::Mutex<Vec<(Option<u32>, std::sync::Arc<PeriodSlot>)>>,
}

/// One period's candidates once found: `None` when the index cannot say (too many).
type PeriodSlot = parking_lot::Mutex<Option<Option<List>>>;

impl SeriesSelector {
    /// A selector for `metric` with the filters of each tag key (`None` without filters:
    /// every series of the metric is a candidate, which the index does not narrow).
    pub fn new(metric: Uid, keys: Vec<KeyFilters>, explicit_tags: bool) -> Option<Self> {
        let keys: Vec<KeyFilters> = keys.into_iter().filter(|k| !k.filters.is_empty()).collect();
        let mut best: Option<(usize, (u8, usize), Values)> = None;
        for (i, k) in keys.iter().enumerate() {
            let named: Vec<String> = k
                .filters
                .iter()
                .filter_map(|f| f.exact_literals())
                .flatten()
                .cloned()
                .collect();
            let (rank, values) = if !named.is_empty() {
                ((0, 0), Values::Named(named))
            } else {
                // Every filter of the key must pass: the one with the longest prefix drives.
                let prefixes = k
                    .filters
                    .iter()
                    .filter_map(|f| f.value_prefixes())
                    .max_by_key(|p| p.iter().map(String::len).min().unwrap_or(0));
                let trigrams = k
                    .filters
                    .iter()
                    .filter_map(|f| f.value_trigrams())
                    .max_by_key(Vec::len);
                match (prefixes, trigrams) {
                    (Some(p), _) => {
                        let shortest = p.iter().map(String::len).min().unwrap_or(0);
                        ((1, usize::MAX - shortest), Values::Prefixed(p))
                    }
                    (None, Some(t)) => ((2, usize::MAX - t.len()), Values::Trigrams(t)),
                    (None, None) => ((3, 0), Values::All),
                }
            };
            if best.as_ref().is_none_or(|(_, r, _)| rank < *r) {
                best = Some((i, rank, values));
            }
        }
        let (driving, _, values) = best?;
        Some(SeriesSelector {
            metric,
            keys,
            explicit_tags,
            driving,
            values,
            used: AtomicU64::new(0),
            trigram_found: parking_lot::Mutex::new(None),
            coverage: parking_lot::Mutex::new(None),
            periods: parking_lot::Mutex::new(Vec::new()),
        })
    }

    /// How many times [`SeriesSelector::candidates`] answered (did not leave the query to
    /// a full scan).
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The tag bytes (as in a data row key) of every series of the metric that may match
    /// in the hours of `[start_secs, end_secs]`, sorted, each once; `None` when the index
    /// cannot say (this TSD does not maintain it, it does not cover every one of those
    /// hours, or too many series match).
    pub fn candidates(
        &self,
        tsdb: &Tsdb,
        start_secs: i64,
        end_secs: i64,
    ) -> Result<Option<Vec<Vec<u8>>>> {
        let settings = tsdb.settings();
        if !settings.index {
            return Ok(None);
        }
        let schema = &settings.schema;
        let hour = |s: i64| u32::try_from(s - s.rem_euclid(3600)).ok();
        let (Some(first), Some(last)) = (hour(start_secs.max(0)), hour(end_secs)) else {
            return Ok(None);
        };
        if last < first {
            return Ok(None);
        }
        let metric = self.metric.to_bytes(schema.metric_width);
        let coverage = {
            let mut read = self.coverage.lock();
            match *read {
                Some(c) => c,
                None => *read.insert(status::coverage(
                    tsdb.store().as_ref(),
                    &schema.index_table,
                    &metric,
                )?),
            }
        };
        if !coverage.is_some_and(|c| c.covers(first, last)) {
            return Ok(None);
        }
        let (p0, p1) = (period_of(first), period_of(last));
        let periods: Vec<Option<u32>> = if (p1 - p0) / PERIOD_SECS + 1 > MAX_PERIODS {
            vec![None]
        } else {
            (p0..=p1).step_by(PERIOD_SECS as usize).map(Some).collect()
        };
        let mut out: Option<BTreeSet<Vec<u8>>> = None;
        let mut only: Option<List> = None;
        for period in periods {
            let Some(found) = self.period_candidates(tsdb, &metric, period)? else {
                return Ok(None);
            };
            // One period (most queries): its sorted candidates as they are.
            if out.is_none() && only.is_none() {
                only = Some(found);
                continue;
            }
            let out = out.get_or_insert_with(|| {
                only.take()
                    .map(|o| o.iter().cloned().collect())
                    .unwrap_or_default()
            });
            out.extend(found.iter().cloned());
            if out.len() > MAX_CANDIDATES {
                return Ok(None);
            }
        }
        self.used.fetch_add(1, Ordering::Relaxed);
        Ok(Some(match (out, only) {
            (Some(out), _) => out.into_iter().collect(),
            (None, Some(only)) => only.to_vec(),
            (None, None) => Vec::new(),
        }))
    }

    /// The candidates of one period (`None`: over all time), found once per query, and
    /// kept between queries while no index row they are found from is written; `None`
    /// when the index cannot say (more than [`MAX_CANDIDATES`]).
    fn period_candidates(
        &self,
        tsdb: &Tsdb,
        metric: &[u8],
        period: Option<u32>,
    ) -> Result<Option<List>> {
        let slot = {
            let mut periods = self.periods.lock();
            match periods.iter().find(|(p, _)| *p == period) {
                Some((_, slot)) => std::sync::Arc::clone(slot),
                None => {
                    let slot = std::sync::Arc::new(PeriodSlot::new(None));
                    periods.push((period, std::sync::Arc::clone(&slot)));
                    slot
                }
            }
        };
        let mut found = slot.lock();
        if let Some(found) = &*found {
            return Ok(found.clone());
        }
        // The generation is taken before anything is read: a row written meanwhile moves
        // it, and what is read here is then not kept past this query.
        let kept = tsdb.kept_candidates();
        let kept_key = kept.map(|_| self.kept_key(tsdb, metric, period));
        if let (Some((lists, generation)), Some(key)) = (kept, &kept_key)
            && let Some(list) = lists.get(key, generation)
        {
            return Ok(found.insert(Some(list)).clone());
        }
        // Trigram rows are kept over all time: their values are found once a query (the
        // other thread of a split query waits for them rather than reading them again).
        let values = match &self.values {
            Values::Trigrams(t) => {
                let mut by_trigrams = self.trigram_found.lock();
                match &*by_trigrams {
                    Some(values) => values.clone(),
                    None => by_trigrams.insert(self.trigram_values(tsdb, t)?).clone(),
                }
            }
            _ => self.driving_values(tsdb, metric, period)?,
        };
        let Some(values) = values else {
            return Ok(found.insert(None).clone());
        };
        let mut out: BTreeSet<Vec<u8>> = BTreeSet::new();
        for value in values {
            for tags in self.postings(tsdb, metric, period, &value)? {
                if out.contains(&tags) || !self.keeps(tsdb, &tags)? {
                    continue;
                }
                out.insert(tags);
                if out.len() > MAX_CANDIDATES {
                    return Ok(found.insert(None).clone());
                }
            }
        }
        let out: List = out.into_iter().collect::<Vec<_>>().into();
        if let (Some((lists, generation)), Some(key)) = (kept, kept_key) {
            lists.put(key, generation, std::sync::Arc::clone(&out));
        }
        Ok(found.insert(Some(out)).clone())
    }

    /// The key a period's candidates are kept under: the metric, the period and every
    /// key's filters (each filter's identity with its length, so no two sets of filters
    /// give the same bytes), and whether tags are explicit.
    fn kept_key(&self, tsdb: &Tsdb, metric: &[u8], period: Option<u32>) -> Vec<u8> {
        let width = tsdb.settings().schema.tagk_width;
        let mut key = vec![KEPT_CANDIDATES];
        key.extend_from_slice(metric);
        match period {
            Some(p) => {
                key.push(1);
                key.extend_from_slice(&p.to_be_bytes());
            }
            None => key.push(0),
        }
        key.push(u8::from(self.explicit_tags));
        key.extend_from_slice(&(self.keys.len() as u32).to_be_bytes());
        for k in &self.keys {
            key.extend_from_slice(&k.tagk.to_bytes(width));
            push_identities(&mut key, k.filters.iter());
        }
        key
    }

    fn driving_filters(&self) -> Vec<&TagFilter> {
        self.keys
            .get(self.driving)
            .map(|k| k.filters.iter().collect())
            .unwrap_or_default()
    }

    /// The driving key's UID bytes.
    fn driving_tagk(&self, tsdb: &Tsdb) -> Vec<u8> {
        let width = tsdb.settings().schema.tagk_width;
        self.keys
            .get(self.driving)
            .map(|k| k.tagk.to_bytes(width))
            .unwrap_or_default()
    }

    /// The driving key's values (UID bytes) passing its filters, in a period (`None`: over
    /// all time); `None` when there are more than [`MAX_CANDIDATES`].
    fn driving_values(
        &self,
        tsdb: &Tsdb,
        metric: &[u8],
        period: Option<u32>,
    ) -> Result<Option<Vec<Vec<u8>>>> {
        let schema = &tsdb.settings().schema;
        let filters = self.driving_filters();
        let prefixes: Vec<&str> = match &self.values {
            Values::Named(names) => {
                let mut out = Vec::new();
                for name in names {
                    if !key_passes(&filters, name) {
                        continue;
                    }
                    match tsdb.uids().get_id(UidKind::TagValue, name) {
                        Ok(uid) => out.push(uid.to_bytes(schema.tagv_width)),
                        // No such value: no series has it.
                        Err(Error::NoSuchName { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
                out.sort();
                out.dedup();
                return Ok(Some(out));
            }
            Values::Prefixed(p) => p.iter().map(String::as_str).collect(),
            Values::All | Values::Trigrams(_) => vec![""],
        };
        let (head, family) = match period {
            Some(p) => (
                [
                    &[kind::PERIOD_VALUE_NAME][..],
                    metric,
                    &p.to_be_bytes(),
                    &self.driving_tagk(tsdb),
                ]
                .concat(),
                PERIOD_FAMILY,
            ),
            None => (
                [&[kind::VALUE_NAME][..], metric, &self.driving_tagk(tsdb)].concat(),
                GLOBAL_FAMILY,
            ),
        };
        let mut out = Vec::new();
        for prefix in prefixes {
            let start = [head.as_slice(), prefix.as_bytes()].concat();
            let request = ScanRequest {
                read: ReadOptions {
                    latest_only: true,
                    ..ReadOptions::family(family)
                },
                ..ScanRequest::prefix(&start)
            };
            for row in tsdb.store().scan(&schema.index_table, &request)? {
                let row = row?;
                let Some(name) = row.key.get(head.len()..) else {
                    continue;
                };
                if !key_passes(&filters, &name_from_bytes(name)) {
                    continue;
                }
                if let Some(v) = row.value(family, VALUE_QUALIFIER)
                    && v.len() == usize::from(schema.tagv_width)
                {
                    out.push(v.to_vec());
                    if out.len() > MAX_CANDIDATES {
                        return Ok(None);
                    }
                }
            }
        }
        out.sort();
        out.dedup();
        Ok(Some(out))
    }

    /// The driving key's values (UID bytes) having every trigram and passing its filters
    /// (names from the UID cache); `None` when more than [`MAX_TRIGRAM_VALUES`] have the
    /// trigrams or more than [`MAX_CANDIDATES`] pass.
    ///
    /// A trigram's list is in value UID order, so lists are intersected by merging; once
    /// the values left are at most [`NAME_CHECKS`], their names are checked against the
    /// filters instead of reading further lists (a cached name and a match cost less than
    /// a listed row, and every value left is checked by name in the end anyway).
    fn trigram_values(&self, tsdb: &Tsdb, trigrams: &[[u8; 3]]) -> Result<Option<Vec<Vec<u8>>>> {
        let schema = &tsdb.settings().schema;
        let tagk = self.driving_tagk(tsdb);
        let width = usize::from(schema.tagv_width);
        let filters = self.driving_filters();
        // Values having every trigram read so far (shared with the kept list, not copied).
        let mut have: Option<List> = None;
        let kept = tsdb.trigram_lists();
        // What these filters passed at an earlier query, while no trigram row has been
        // written (no value added) and no name renamed or deleted since.
        let passed_key = kept.map(|_| {
            let mut key = vec![PASSED_VALUES];
            key.extend_from_slice(&tagk);
            push_identities(&mut key, filters.iter().copied());
            key
        });
        if let (Some((lists, generation)), Some(key)) = (kept, &passed_key)
            && let Some(passed) = lists.get(key, generation)
        {
            return Ok(Some(passed.to_vec()));
        }
        for t in trigrams {
            if have.as_ref().is_some_and(|h| h.len() <= NAME_CHECKS) {
                break;
            }
            // The tag key's list (format 2: shared by every metric); values of other
            // metrics pass or fail by name like the rest, and have no postings here.
            let start = [&[kind::TRIGRAM][..], &tagk, t].concat();
            if let Some(list) = kept.and_then(|(lists, generation)| lists.get(&start, generation)) {
                let these: List = match &have {
                    None => list,
                    Some(h) => intersect(h, &list).into(),
                };
                let empty = these.is_empty();
                have = Some(these);
                if empty {
                    break;
                }
                continue;
            }
            let at = start.len();
            let request = ScanRequest {
                read: ReadOptions {
                    keys_only: true,
                    ..ReadOptions::family(GLOBAL_FAMILY)
                },
                ..ScanRequest::prefix(&start)
            };
            let mut these: Vec<Vec<u8>> = Vec::new();
            let mut next = 0;
            for row in tsdb.store().scan(&schema.index_table, &request)? {
                let row = row?;
                let Some(v) = row.key.get(at..).filter(|v| v.len() == width) else {
                    continue;
                };
                let kept = match &have {
                    None => true,
                    Some(h) => {
                        while next < h.len() && h[next].as_slice() < v {
                            next += 1;
                        }
                        next < h.len() && h[next].as_slice() == v
                    }
                };
                if kept && these.last().is_none_or(|last| last.as_slice() < v) {
                    these.push(v.to_vec());
                    if these.len() > MAX_TRIGRAM_VALUES {
                        return Ok(None);
                    }
                }
            }
            // A whole list, read from a generation no later than its rows': kept.
            let these: List = these.into();
            if have.is_none()
                && let Some((lists, generation)) = kept
            {
                lists.put(start, generation, std::sync::Arc::clone(&these));
            }
            let empty = these.is_empty();
            have = Some(these);
            if empty {
                break;
            }
        }
        let mut out = Vec::new();
        for v in have.iter().flat_map(|h| h.iter()) {
            let passes = tsdb
                .uids()
                .with_name(UidKind::TagValue, Uid::from_bytes(v)?, |name| {
                    key_passes(&filters, name)
                });
            let passes = match passes {
                Ok(passes) => passes,
                Err(Error::NoSuchId { .. }) => continue,
                Err(e) => return Err(e),
            };
            if passes {
                out.push(v.clone());
                if out.len() > MAX_CANDIDATES {
                    return Ok(None);
                }
            }
        }
        if let (Some((lists, generation)), Some(key)) = (kept, passed_key) {
            lists.put(key, generation, out.clone().into());
        }
        Ok(Some(out))
    }

    /// The tag bytes of the series posted under the driving key and `value`.
    fn postings(
        &self,
        tsdb: &Tsdb,
        metric: &[u8],
        period: Option<u32>,
        value: &[u8],
    ) -> Result<Vec<Vec<u8>>> {
        let schema = &tsdb.settings().schema;
        let tagk = self.driving_tagk(tsdb);
        let (start, family) = match period {
            Some(p) => (
                [
                    &[kind::PERIOD_POSTING][..],
                    metric,
                    &p.to_be_bytes(),
                    &tagk,
                    value,
                ]
                .concat(),
                PERIOD_FAMILY,
            ),
            None => (
                [&[kind::POSTING][..], metric, &tagk, value].concat(),
                GLOBAL_FAMILY,
            ),
        };
        let at = start.len();
        let request = ScanRequest {
            read: ReadOptions {
                keys_only: true,
                ..ReadOptions::family(family)
            },
            ..ScanRequest::prefix(&start)
        };
        let pair = schema.tag_pair_width();
        let mut out = Vec::new();
        for row in tsdb.store().scan(&schema.index_table, &request)? {
            let row = row?;
            if let Some(tags) = row.key.get(at..)
                && !tags.is_empty()
                && tags.len().is_multiple_of(pair)
            {
                out.push(tags.to_vec());
            }
        }
        Ok(out)
    }

    /// Whether a series posted under a driving value passes the other keys' filters and
    /// `explicitTags`. A value without a name keeps the series: the scan then reports it
    /// as it would without the index.
    fn keeps(&self, tsdb: &Tsdb, tags: &[u8]) -> Result<bool> {
        let schema = &tsdb.settings().schema;
        let pair = schema.tag_pair_width();
        let kw = usize::from(schema.tagk_width);
        let pairs: Vec<(&[u8], &[u8])> = tags.chunks_exact(pair).map(|p| p.split_at(kw)).collect();
        if self.explicit_tags && pairs.len() != self.keys.len() {
            return Ok(false);
        }
        for (i, key) in self.keys.iter().enumerate() {
            if i == self.driving {
                continue;
            }
            let tagk = key.tagk.to_bytes(schema.tagk_width);
            let Some((_, v)) = pairs.iter().find(|(k, _)| *k == tagk.as_slice()) else {
                return Ok(false);
            };
            let name = match tsdb.uids().get_name(UidKind::TagValue, Uid::from_bytes(v)?) {
                Ok(name) => name,
                Err(Error::NoSuchId { .. }) => continue,
                Err(e) => return Err(e),
            };
            let filters: Vec<&TagFilter> = key.filters.iter().collect();
            if !key_passes(&filters, &name) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// The values of `have` also in `list` (both sorted).
fn intersect(have: &[Vec<u8>], list: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut next = 0;
    for v in have {
        while next < list.len() && list[next] < *v {
            next += 1;
        }
        if next < list.len() && list[next] == *v {
            out.push(v.clone());
        }
    }
    out
}

/// The first byte of a kept list of the values a driving key's filters passed (not a row
/// kind: trigram lists are kept by their rows' first key, `0x05`...).
const PASSED_VALUES: u8 = 0xFF;

/// The first byte of the key of a period's candidates kept between queries.
const KEPT_CANDIDATES: u8 = 0xFE;

/// Appends the filters' count, then each one's identity after its length: no two lists
/// of filters give the same bytes.
fn push_identities<'f>(key: &mut Vec<u8>, filters: impl ExactSizeIterator<Item = &'f TagFilter>) {
    key.extend_from_slice(&(filters.len() as u32).to_be_bytes());
    let mut one = Vec::new();
    for f in filters {
        one.clear();
        f.identity(&mut one);
        key.extend_from_slice(&(one.len() as u32).to_be_bytes());
        key.extend_from_slice(&one);
    }
}

/// Most values (and candidates) kept over all lists; past it the lists kept are dropped.
const KEPT_VALUES: usize = 1 << 18;

/// Most lists kept; past it the lists kept are dropped.
const KEPT_LISTS: usize = 1 << 16;

/// Lists kept between queries, each with the generation taken before it was read
/// ([`crate::changes`]), used only while that generation has not moved (a row written
/// since it was read has moved it):
/// - whole trigram lists (`0x05` value UIDs of a tag key and trigram, sorted, by their
///   rows' first key) and the values a driving key's filters passed among them
///   ([`PASSED_VALUES`]), at the trigram generation (bumped after every write of a
///   trigram row by this TSD, before the flush writing it goes on to the data rows);
/// - a period's candidates of a set of filters ([`KEPT_CANDIDATES`]) and a lookup's
///   (`search/indexed.rs`, `0xFD`), at the entry generation (bumped after every write of a
///   catalog, posting, value, trigram or status row).
///
/// Kept only when this TSD alone writes its store; bounded by [`KEPT_VALUES`] and
/// [`KEPT_LISTS`].
#[derive(Debug, Default)]
pub(crate) struct KeptLists {
    lists: parking_lot::Mutex<KeptMap>,
}

/// A kept list: value UIDs or candidates' tag bytes, sorted.
pub(crate) type List = std::sync::Arc<[Vec<u8>]>;

#[derive(Debug, Default)]
struct KeptMap {
    /// By the list's first key: the generation it was read at, and the list.
    by_start: std::collections::HashMap<Vec<u8>, (u64, List)>,
    values: usize,
}

impl KeptLists {
    /// The list whose rows start with `start`, when it was read at `generation`.
    pub(crate) fn get(&self, start: &[u8], generation: u64) -> Option<List> {
        let lists = self.lists.lock();
        match lists.by_start.get(start) {
            Some((g, list)) if *g == generation => Some(std::sync::Arc::clone(list)),
            _ => None,
        }
    }

    /// Keeps a whole list read at `generation`.
    pub(crate) fn put(&self, start: Vec<u8>, generation: u64, list: List) {
        let mut lists = self.lists.lock();
        if list.len() > KEPT_VALUES {
            return;
        }
        if lists.values + list.len() > KEPT_VALUES || lists.by_start.len() >= KEPT_LISTS {
            lists.by_start.clear();
            lists.values = 0;
        }
        let len = list.len();
        if let Some((_, old)) = lists.by_start.insert(start, (generation, list)) {
            lists.values -= old.len();
        }
        lists.values += len;
    }
}
