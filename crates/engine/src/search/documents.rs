//! `/api/search/{tsmeta,tsmeta_summary,tsuids,uidmeta,annotation}` answered without a search
//! plugin (RFC 0007, "Search endpoints without a plugin"): a [`query_string`] query evaluated
//! on documents streamed in answer order, counted whole, kept only within the page.
//!
//! - Series (`tsmeta`, `tsmeta_summary`, `tsuids`) come from the tag index in TSUID order:
//!   the catalog (`0x01`), or, when every match must have an exact metric or tag pair, that
//!   metric's catalog range, its `0x02` posting range, or the `0x03` one; an exact `tsuid`
//!   reads its one catalog row; an exact metric with a tag glob or regex, the query path's
//!   selector; a metric glob or regex, the catalog ranges of the metrics it names. Other fields are read from the series' `tsdb-meta` row only
//!   when the query asks for them (and for the page's `tsmeta` results).
//! - UIDs (`uidmeta`) come from `tsdb-uid`'s forward rows, type by type (metric, tag key, tag
//!   value), each by name; an exact `name` reads its one row, a name glob the rows starting
//!   with its literal head, an exact `type` one type.
//! - Annotations: global notes from their data rows (time order), then series notes from
//!   the index's `0x30` places (by metric, start time and tags), each read back from its
//!   data row (a place whose note is gone is skipped).
//!
//! Series and series-note searches answer only when the index covers every metric they
//! may touch (else an error naming the metric and `tsdb index rebuild`); note searches also
//! need the status row's notes marker (every series note has its place).
//!
//! Memory is bounded by the page: matches past it are counted, not kept.
//!
//! [`query_string`]: super::query_string

use hourglass_core::annotation::is_annotation_qualifier;
use std::time::{Duration, Instant};

use hourglass_core::schema::{DATA_FAMILY, MAXID_ROW, UID_ID_FAMILY};
use hourglass_core::uid::{Uid, UidKind, hex_upper, name_bytes, name_from_bytes};
use hourglass_storage::{ReadOptions, ScanRequest};
use serde_json::{Map, Value, json};

use super::query_string::{Document, FieldKind, Node, Pattern, matches, value_matches};
use crate::annotation::{self, Annotation};
use crate::index::select::{KeyFilters, SeriesSelector};
use crate::index::{GLOBAL_FAMILY, kind, status};
use crate::meta::{TsMeta, UidMeta, get_uid_meta, ts_meta_or_default};
use crate::query::filter::TagFilter;
use crate::{Error, Result, Tsdb};

/// What a search returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchType {
    TsMeta,
    TsMetaSummary,
    Tsuids,
    UidMeta,
    Annotation,
}

impl SearchType {
    /// The endpoint's name (`tsmeta`, ...), case-insensitive.
    pub fn parse(word: &str) -> Option<SearchType> {
        Some(match word.to_ascii_lowercase().as_str() {
            "tsmeta" => SearchType::TsMeta,
            "tsmeta_summary" => SearchType::TsMetaSummary,
            "tsuids" => SearchType::Tsuids,
            "uidmeta" => SearchType::UidMeta,
            "annotation" => SearchType::Annotation,
            _ => return None,
        })
    }

    /// OpenTSDB's enum name (`TSMETA`, ...), the answer's `type`.
    pub fn name(self) -> &'static str {
        match self {
            SearchType::TsMeta => "TSMETA",
            SearchType::TsMetaSummary => "TSMETA_SUMMARY",
            SearchType::Tsuids => "TSUIDS",
            SearchType::UidMeta => "UIDMETA",
            SearchType::Annotation => "ANNOTATION",
        }
    }

    /// Whether `field` is one this type's documents have.
    pub fn knows_field(self, field: &str) -> bool {
        let dotted = |prefix: &str| field.strip_prefix(prefix).is_some_and(|k| !k.is_empty());
        match self {
            SearchType::TsMeta | SearchType::TsMetaSummary | SearchType::Tsuids => {
                matches!(
                    field,
                    "tsuid"
                        | "metric"
                        | "metric.name"
                        | "tags.name"
                        | "displayName"
                        | "description"
                        | "notes"
                        | "units"
                        | "dataType"
                ) || dotted("tags.")
                    || dotted("custom.")
            }
            SearchType::UidMeta => {
                matches!(
                    field,
                    "name" | "type" | "uid" | "displayName" | "description" | "notes"
                ) || dotted("custom.")
            }
            SearchType::Annotation => {
                matches!(
                    field,
                    "tsuid" | "metric" | "description" | "notes" | "startTime" | "endTime"
                ) || dotted("custom.")
            }
        }
    }
}

/// A search: the parsed query and the page.
#[derive(Debug, Clone)]
pub struct Search {
    pub kind: SearchType,
    pub query: Node,
    /// Results kept (0: none, only the count).
    pub limit: usize,
    /// Matches skipped before the first result kept.
    pub start_index: usize,
    /// Wall time the search may take (`tsd.query.timeout`); None: no limit.
    pub timeout: Option<Duration>,
}

/// A search's answer: every match counted, the page's results in OpenTSDB's JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchAnswer {
    pub total: u64,
    pub results: Vec<Value>,
}

/// The page: counts matches, keeps those in `[start, start + limit)`.
struct Page {
    start: u64,
    end: u64,
    total: u64,
    results: Vec<Value>,
    /// Documents looked at, and when to stop.
    seen: u64,
    deadline: Option<(Instant, Duration)>,
}

impl Page {
    fn new(s: &Search) -> Page {
        let start = s.start_index as u64;
        Page {
            start,
            end: start.saturating_add(s.limit as u64),
            total: 0,
            results: Vec::new(),
            seen: 0,
            deadline: s.timeout.map(|t| (Instant::now() + t, t)),
        }
    }

    /// Counts a document looked at; past the deadline, the search fails as a query would.
    fn tick(&mut self) -> Result<()> {
        self.seen += 1;
        if let Some((deadline, timeout)) = self.deadline
            && (self.seen == 1 || self.seen.is_multiple_of(64))
            && Instant::now() > deadline
        {
            return Err(Error::LimitExceeded(format!(
                "Sorry, the search ran longer than the limit of {} ms. Please try a \
                 narrower query.",
                timeout.as_millis()
            )));
        }
        Ok(())
    }

    /// Counts a match; true when it falls in the page (its result is then to be pushed).
    fn take(&mut self) -> bool {
        let at = self.total;
        self.total += 1;
        at >= self.start && at < self.end
    }

    fn answer(self) -> SearchAnswer {
        SearchAnswer {
            total: self.total,
            results: self.results,
        }
    }
}

/// Runs a search. The caller checks that this TSD maintains the tag index.
pub fn search(tsdb: &Tsdb, s: &Search) -> Result<SearchAnswer> {
    for field in s.query.fields() {
        if !s.kind.knows_field(field) {
            return Err(Error::invalid(format!(
                "Unknown field '{field}' for search type {}",
                s.kind.name()
            )));
        }
    }
    match s.kind {
        SearchType::TsMeta | SearchType::TsMetaSummary | SearchType::Tsuids => series(tsdb, s),
        SearchType::UidMeta => uids(tsdb, s),
        SearchType::Annotation => notes(tsdb, s),
    }
}

/// A name of a UID, or None when the UID table lacks it (a damaged table: the document is
/// skipped rather than failing the search).
fn name_of(tsdb: &Tsdb, kind: UidKind, bytes: &[u8]) -> Result<Option<String>> {
    match tsdb.uids().get_name(kind, Uid::from_bytes(bytes)?) {
        Ok(n) => Ok(Some(n)),
        Err(Error::NoSuchId { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A UID of a name, or None when there is none (nothing can match it then).
fn id_of(tsdb: &Tsdb, kind: UidKind, name: &str) -> Result<Option<Uid>> {
    match tsdb.uids().get_id(kind, name) {
        Ok(u) => Ok(Some(u)),
        Err(Error::NoSuchName { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Fails unless the index lists every series of `metrics` (None: of every metric): each
/// metric's coverage has no gap (RFC 0007, "Status"), as lookups ask. Series written before
/// the index existed, or while it was off, are listed only after `tsdb index rebuild`; a
/// search must not answer without them.
fn check_covered(tsdb: &Tsdb, metrics: Option<Vec<Vec<u8>>>) -> Result<()> {
    let schema = &tsdb.settings().schema;
    let store = tsdb.store();
    let metrics = match metrics {
        Some(m) => m,
        None => crate::index::rebuild::all_metrics(tsdb)?,
    };
    for m in metrics {
        if !status::covers_all_hours(store.as_ref(), &schema.index_table, Some(&m))? {
            let name = name_of(tsdb, UidKind::Metric, &m)?.unwrap_or_else(|| hex_upper(&m));
            return Err(Error::invalid(format!(
                "The tag index does not list every series of {name} yet (data written before \
                 it or while it was off): run tsdb index rebuild"
            )));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Series

struct SeriesDoc<'a> {
    tsdb: &'a Tsdb,
    tsuid: Vec<u8>,
    metric: String,
    tags: Vec<(String, String)>,
    meta: Option<TsMeta>,
}

impl SeriesDoc<'_> {
    fn meta(&mut self) -> Result<&TsMeta> {
        if self.meta.is_none() {
            self.meta = Some(ts_meta_or_default(self.tsdb, &self.tsuid)?);
        }
        self.meta
            .as_ref()
            .ok_or_else(|| Error::Internal("series meta data not loaded".into()))
    }

    fn text_field(&mut self, field: &str) -> Result<Vec<String>> {
        let f = &self.meta()?.fields;
        let one = |s: &str| {
            if s.is_empty() {
                vec![]
            } else {
                vec![s.to_string()]
            }
        };
        Ok(match field {
            "displayName" => one(&f.display_name),
            "description" => one(&f.description),
            "notes" => one(&f.notes),
            "units" => one(&f.units),
            "dataType" => one(&f.data_type),
            _ => match field.strip_prefix("custom.") {
                Some(k) => f
                    .custom
                    .as_ref()
                    .and_then(|c| c.get(k))
                    .map(|v| vec![v.clone()])
                    .unwrap_or_default(),
                None => Vec::new(),
            },
        })
    }
}

impl Document for SeriesDoc<'_> {
    fn field(&mut self, field: &str) -> Result<(FieldKind, Vec<String>)> {
        let keyword = |v: Vec<String>| Ok((FieldKind::Keyword, v));
        match field {
            "tsuid" => keyword(vec![hex_upper(&self.tsuid)]),
            "metric" | "metric.name" => keyword(vec![self.metric.clone()]),
            "tags.name" => keyword(
                self.tags
                    .iter()
                    .flat_map(|(k, v)| [k.clone(), v.clone()])
                    .collect(),
            ),
            _ => match field.strip_prefix("tags.") {
                Some(key) => keyword(
                    self.tags
                        .iter()
                        .filter(|(k, _)| k == key)
                        .map(|(_, v)| v.clone())
                        .collect(),
                ),
                None => Ok((FieldKind::Text, self.text_field(field)?)),
            },
        }
    }

    fn all_fields(&mut self) -> Result<Vec<(FieldKind, String)>> {
        let mut out = vec![
            (FieldKind::Keyword, hex_upper(&self.tsuid)),
            (FieldKind::Keyword, self.metric.clone()),
        ];
        for (k, v) in &self.tags {
            out.push((FieldKind::Keyword, k.clone()));
            out.push((FieldKind::Keyword, v.clone()));
        }
        let f = &self.meta()?.fields;
        for s in [
            &f.display_name,
            &f.description,
            &f.notes,
            &f.units,
            &f.data_type,
        ] {
            if !s.is_empty() {
                out.push((FieldKind::Text, s.clone()));
            }
        }
        if let Some(custom) = &f.custom {
            out.extend(custom.values().map(|v| (FieldKind::Text, v.clone())));
        }
        Ok(out)
    }
}

/// One index key range of series: keys starting with `prefix`, the TSUID `head` then the
/// key from `tail_at`.
struct SeriesRange {
    prefix: Vec<u8>,
    head: Vec<u8>,
    tail_at: usize,
}

/// Where the series come from, each source in TSUID order.
enum SeriesSource {
    /// No series can match (an exact name with no UID).
    Nothing,
    /// These series, sorted, if their catalog rows exist.
    Listed(Vec<Vec<u8>>),
    /// These ranges, one after the other.
    Ranges(Vec<SeriesRange>),
}

fn catalog_range(metric: &[u8]) -> SeriesRange {
    SeriesRange {
        prefix: [&[kind::CATALOG][..], metric].concat(),
        head: Vec::new(),
        tail_at: 1,
    }
}

/// An anchored regex equal to a glob of `*` and `?` (`\` escaping either).
fn glob_regex(glob: &str) -> String {
    let mut out = String::from("^");
    let mut chars = glob.chars();
    while let Some(c) = chars.next() {
        match c {
            '*' => out.push_str(".*"),
            '?' => out.push('.'),
            '\\' => {
                if let Some(n) = chars.next() {
                    out.push_str(&regex::escape(&n.to_string()));
                }
            }
            c => out.push_str(&regex::escape(&c.to_string())),
        }
    }
    out.push('$');
    out
}

/// The ASCII characters a glob's matches all start with.
fn glob_prefix(glob: &str) -> &str {
    let end = glob
        .find(|c: char| matches!(c, '*' | '?' | '\\') || !c.is_ascii())
        .unwrap_or(glob.len());
    &glob[..end]
}

/// Metric UIDs (sorted) whose names match a glob or regex, from `tsdb-uid`'s forward rows
/// (a glob's literal head is a prefix scan).
fn metrics_matching(tsdb: &Tsdb, pattern: &Pattern) -> Result<Vec<Uid>> {
    let schema = &tsdb.settings().schema;
    let prefix = match pattern {
        Pattern::Wildcard(g) => glob_prefix(g),
        _ => "",
    };
    let request = ScanRequest {
        read: ReadOptions::family(UID_ID_FAMILY),
        ..ScanRequest::prefix(prefix.as_bytes())
    };
    let mut out = Vec::new();
    for row in tsdb.store().scan(&schema.uid_table, &request)? {
        let row = row?;
        if row.key == MAXID_ROW {
            continue;
        }
        let Some(uid) = row.value(UID_ID_FAMILY, UidKind::Metric.qualifier().as_bytes()) else {
            continue;
        };
        if uid.len() == usize::from(schema.metric_width)
            && value_matches(pattern, FieldKind::Keyword, &name_from_bytes(&row.key))
        {
            out.push(Uid::from_bytes(uid)?);
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

fn series_source(tsdb: &Tsdb, query: &Node) -> Result<SeriesSource> {
    let schema = &tsdb.settings().schema;
    let mut required = Vec::new();
    query.required_terms(&["tsuid", "metric", "metric.name"], &mut required);
    let exact = |field: &str| {
        required.iter().find_map(|(f, p)| match p {
            Pattern::Word(w) | Pattern::Phrase(w) if *f == field => Some(w.as_str()),
            _ => None,
        })
    };
    let tag_fields: Vec<&str> = query
        .fields()
        .into_iter()
        .filter(|f| f.starts_with("tags.") && *f != "tags.name")
        .collect();
    let mut tag_terms = Vec::new();
    query.required_terms(&tag_fields, &mut tag_terms);
    let tag_terms: Vec<(&str, &Pattern)> = tag_terms
        .into_iter()
        .filter_map(|(f, p)| Some((f.strip_prefix("tags.")?, p)))
        .collect();
    if let Some(tsuid) = exact("tsuid") {
        return Ok(match hourglass_core::uid::parse_hex(tsuid) {
            Ok(bytes) if crate::meta::check_tsuid(schema, &bytes).is_ok() => {
                SeriesSource::Listed(vec![bytes])
            }
            _ => SeriesSource::Nothing,
        });
    }
    let metric_name = exact("metric").or_else(|| exact("metric.name"));
    let metric = match metric_name {
        Some(name) => match id_of(tsdb, UidKind::Metric, name)? {
            Some(m) => Some(m),
            None => return Ok(SeriesSource::Nothing),
        },
        None => None,
    };
    let pair = tag_terms.iter().find_map(|(k, p)| match p {
        Pattern::Word(v) | Pattern::Phrase(v) => Some((*k, v.as_str())),
        _ => None,
    });
    let pair = match pair {
        Some((k, v)) => {
            match (
                id_of(tsdb, UidKind::TagKey, k)?,
                id_of(tsdb, UidKind::TagValue, v)?,
            ) {
                (Some(k), Some(v)) => {
                    Some((k.to_bytes(schema.tagk_width), v.to_bytes(schema.tagv_width)))
                }
                _ => return Ok(SeriesSource::Nothing),
            }
        }
        None => None,
    };
    let range = match (metric, pair) {
        (Some(m), Some((k, v))) => {
            let m = m.to_bytes(schema.metric_width);
            let prefix = [&[kind::POSTING][..], &m, &k, &v].concat();
            SeriesRange {
                tail_at: prefix.len(),
                prefix,
                head: m,
            }
        }
        (None, Some((k, v))) => {
            // The metrics having the value (`0x03`, in UID order), then each one's
            // postings of it: TSUID order over all.
            let start = [&[kind::VALUE_METRIC][..], &k, &v].concat();
            let at = start.len();
            let request = ScanRequest {
                read: ReadOptions {
                    keys_only: true,
                    ..ReadOptions::family(GLOBAL_FAMILY)
                },
                ..ScanRequest::prefix(&start)
            };
            let mut ranges = Vec::new();
            for row in tsdb.store().scan(&schema.index_table, &request)? {
                let row = row?;
                let Some(m) = row
                    .key
                    .get(at..)
                    .filter(|m| m.len() == usize::from(schema.metric_width))
                else {
                    continue;
                };
                let prefix = [&[kind::POSTING][..], m, &k, &v].concat();
                ranges.push(SeriesRange {
                    tail_at: prefix.len(),
                    prefix,
                    head: m.to_vec(),
                });
            }
            return Ok(SeriesSource::Ranges(ranges));
        }
        (Some(m), None) => {
            // A tag glob or regex within the metric: the selector the query path uses
            // (value names, then postings), while its candidates stay few.
            if let Some(listed) = tag_pattern_candidates(tsdb, m, &tag_terms)? {
                return Ok(listed);
            }
            catalog_range(&m.to_bytes(schema.metric_width))
        }
        (None, None) => {
            let pattern = required.iter().find_map(|(f, p)| {
                (*f != "tsuid" && matches!(p, Pattern::Wildcard(_) | Pattern::Regex(_)))
                    .then_some(*p)
            });
            if let Some(p) = pattern {
                let ranges = metrics_matching(tsdb, p)?
                    .into_iter()
                    .map(|m| catalog_range(&m.to_bytes(schema.metric_width)))
                    .collect();
                return Ok(SeriesSource::Ranges(ranges));
            }
            catalog_range(&[])
        }
    };
    Ok(SeriesSource::Ranges(vec![range]))
}

/// The series of `metric` a required tag glob or regex may match, from the query path's
/// selector over all time; None when it cannot say (no such term, coverage, too many).
fn tag_pattern_candidates(
    tsdb: &Tsdb,
    metric: Uid,
    terms: &[(&str, &Pattern)],
) -> Result<Option<SeriesSource>> {
    let Some((tagk, regex)) = terms.iter().find_map(|(k, p)| match p {
        Pattern::Wildcard(g) => Some((*k, glob_regex(g))),
        Pattern::Regex(r) => Some((*k, r.as_str().to_string())),
        _ => None,
    }) else {
        return Ok(None);
    };
    let Some(tagk_uid) = id_of(tsdb, UidKind::TagKey, tagk)? else {
        return Ok(Some(SeriesSource::Nothing));
    };
    let filter = TagFilter::new("regexp", tagk, &regex, false)?;
    let Some(selector) = SeriesSelector::new(
        metric,
        vec![KeyFilters {
            tagk: tagk_uid,
            filters: vec![filter],
        }],
        false,
    ) else {
        return Ok(None);
    };
    let Some(tags) = selector.candidates(tsdb, 0, i64::from(u32::MAX))? else {
        return Ok(None);
    };
    let schema = &tsdb.settings().schema;
    let m = metric.to_bytes(schema.metric_width);
    Ok(Some(SeriesSource::Listed(
        tags.into_iter()
            .map(|t| [m.as_slice(), &t].concat())
            .collect(),
    )))
}

fn series(tsdb: &Tsdb, s: &Search) -> Result<SearchAnswer> {
    let schema = &tsdb.settings().schema;
    if tsdb.buffered_points() > 0 {
        // Buffered series have no index entries until the flush writes them.
        tsdb.flush()?;
    }
    let mut page = Page::new(s);
    let metric_width = usize::from(schema.metric_width);
    let visit = |tsuid: Vec<u8>, page: &mut Page| -> Result<()> {
        page.tick()?;
        let Some(series) = crate::index::Series::from_tsuid(schema, &tsuid) else {
            return Ok(());
        };
        let Some(metric) = name_of(tsdb, UidKind::Metric, &tsuid[..metric_width])? else {
            return Ok(());
        };
        let mut tags = Vec::new();
        for (k, v) in series.pairs(schema) {
            let (Some(k), Some(v)) = (
                name_of(tsdb, UidKind::TagKey, k)?,
                name_of(tsdb, UidKind::TagValue, v)?,
            ) else {
                return Ok(());
            };
            tags.push((k, v));
        }
        let mut doc = SeriesDoc {
            tsdb,
            tsuid,
            metric,
            tags,
            meta: None,
        };
        if !matches(&s.query, &mut doc)? || !page.take() {
            return Ok(());
        }
        let result = match s.kind {
            SearchType::Tsuids => json!(hex_upper(&doc.tsuid)),
            SearchType::TsMetaSummary => {
                let tags: Map<String, Value> = doc
                    .tags
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect();
                json!({ "tsuid": hex_upper(&doc.tsuid), "metric": doc.metric, "tags": tags })
            }
            _ => doc.meta()?.to_json(),
        };
        page.results.push(result);
        Ok(())
    };
    let store = tsdb.store();
    let table = &schema.index_table;
    let source = series_source(tsdb, &s.query)?;
    let scope = match &source {
        SeriesSource::Nothing => Some(Vec::new()),
        SeriesSource::Listed(list) => Some(
            list.iter()
                .filter_map(|t| t.get(..metric_width).map(<[u8]>::to_vec))
                .collect(),
        ),
        SeriesSource::Ranges(ranges) => ranges
            .iter()
            .map(|r| match r.prefix.first() {
                Some(&kind::CATALOG) if r.prefix.len() == 1 + metric_width => {
                    Some(r.prefix[1..].to_vec())
                }
                Some(&kind::POSTING) => r.prefix.get(1..1 + metric_width).map(<[u8]>::to_vec),
                _ => None,
            })
            .collect::<Option<Vec<_>>>(),
    };
    check_covered(tsdb, scope)?;
    match source {
        SeriesSource::Nothing => {}
        SeriesSource::Listed(list) => {
            let keys: Vec<Vec<u8>> = list
                .iter()
                .map(|t| [&[kind::CATALOG][..], t].concat())
                .collect();
            for chunk in keys.chunks(1_000) {
                let rows = store.get_rows(table, chunk, &ReadOptions::keys_only())?;
                for (key, row) in chunk.iter().zip(rows) {
                    if row.is_some() {
                        visit(key[1..].to_vec(), &mut page)?;
                    }
                }
            }
        }
        SeriesSource::Ranges(ranges) => {
            for SeriesRange {
                prefix,
                head,
                tail_at,
            } in ranges
            {
                let request = ScanRequest {
                    read: ReadOptions {
                        keys_only: true,
                        ..ReadOptions::family(GLOBAL_FAMILY)
                    },
                    ..ScanRequest::prefix(&prefix)
                };
                for row in store.scan(table, &request)? {
                    let row = row?;
                    let Some(tail) = row.key.get(tail_at..) else {
                        continue;
                    };
                    visit([head.as_slice(), tail].concat(), &mut page)?;
                }
            }
        }
    }
    Ok(page.answer())
}

// ---------------------------------------------------------------------------------------
// UIDs

struct UidDoc<'a> {
    tsdb: &'a Tsdb,
    kind: UidKind,
    uid: Vec<u8>,
    name: String,
    meta: Option<UidMeta>,
}

impl UidDoc<'_> {
    fn meta(&mut self) -> Result<&UidMeta> {
        if self.meta.is_none() {
            self.meta = Some(get_uid_meta(self.tsdb, self.kind, &self.uid)?);
        }
        self.meta
            .as_ref()
            .ok_or_else(|| Error::Internal("UID meta data not loaded".into()))
    }
}

impl Document for UidDoc<'_> {
    fn field(&mut self, field: &str) -> Result<(FieldKind, Vec<String>)> {
        let keyword = |v: String| Ok((FieldKind::Keyword, vec![v]));
        match field {
            "name" => keyword(self.name.clone()),
            "type" => keyword(crate::meta::type_name(self.kind).to_string()),
            "uid" => keyword(hex_upper(&self.uid)),
            _ => {
                let f = &self.meta()?.fields;
                let one = |s: &str| {
                    if s.is_empty() {
                        vec![]
                    } else {
                        vec![s.to_string()]
                    }
                };
                let values = match field {
                    "displayName" => one(&f.display_name),
                    "description" => one(&f.description),
                    "notes" => one(&f.notes),
                    _ => field
                        .strip_prefix("custom.")
                        .and_then(|k| f.custom.as_ref().and_then(|c| c.get(k)))
                        .map(|v| vec![v.clone()])
                        .unwrap_or_default(),
                };
                Ok((FieldKind::Text, values))
            }
        }
    }

    fn all_fields(&mut self) -> Result<Vec<(FieldKind, String)>> {
        let mut out = vec![
            (FieldKind::Keyword, self.name.clone()),
            (
                FieldKind::Keyword,
                crate::meta::type_name(self.kind).to_string(),
            ),
            (FieldKind::Keyword, hex_upper(&self.uid)),
        ];
        let f = &self.meta()?.fields;
        for s in [&f.display_name, &f.description, &f.notes] {
            if !s.is_empty() {
                out.push((FieldKind::Text, s.clone()));
            }
        }
        if let Some(custom) = &f.custom {
            out.extend(custom.values().map(|v| (FieldKind::Text, v.clone())));
        }
        Ok(out)
    }
}

fn uids(tsdb: &Tsdb, s: &Search) -> Result<SearchAnswer> {
    let schema = &tsdb.settings().schema;
    let store = tsdb.store();
    let mut required = Vec::new();
    s.query.required_words(&["name", "type"], &mut required);
    let name = required.iter().find(|(f, _)| *f == "name").map(|(_, n)| *n);
    // A required name glob's literal head bounds the forward rows read.
    let mut name_terms = Vec::new();
    s.query.required_terms(&["name"], &mut name_terms);
    let head = name_terms
        .iter()
        .filter_map(|(_, p)| match p {
            Pattern::Wildcard(g) => Some(glob_prefix(g)),
            _ => None,
        })
        .max_by_key(|h| h.len())
        .unwrap_or("");
    let kinds: Vec<UidKind> = [UidKind::Metric, UidKind::TagKey, UidKind::TagValue]
        .into_iter()
        .filter(|k| {
            required
                .iter()
                .filter(|(f, _)| *f == "type")
                .all(|(_, t)| *t == crate::meta::type_name(*k))
        })
        .collect();
    let mut page = Page::new(s);
    let read = ReadOptions::family(UID_ID_FAMILY);
    for kind in kinds {
        let rows: Box<dyn Iterator<Item = Result<hourglass_storage::Row>>> = match name {
            Some(n) => Box::new(
                store
                    .get(&schema.uid_table, &name_bytes(n), &read)?
                    .map(Ok)
                    .into_iter(),
            ),
            None => Box::new(
                store
                    .scan(
                        &schema.uid_table,
                        &ScanRequest {
                            read: read.clone(),
                            ..ScanRequest::prefix(head.as_bytes())
                        },
                    )?
                    .map(|r| r.map_err(Error::from)),
            ),
        };
        for row in rows {
            let row = row?;
            page.tick()?;
            if row.key == MAXID_ROW {
                continue;
            }
            let Some(uid) = row.value(UID_ID_FAMILY, kind.qualifier().as_bytes()) else {
                continue;
            };
            if uid.len() != usize::from(schema.uid_width(kind)) {
                continue;
            }
            let mut doc = UidDoc {
                tsdb,
                kind,
                uid: uid.to_vec(),
                name: name_from_bytes(&row.key),
                meta: None,
            };
            if matches(&s.query, &mut doc)? && page.take() {
                let json = doc.meta()?.to_json();
                page.results.push(json);
            }
        }
    }
    Ok(page.answer())
}

// ---------------------------------------------------------------------------------------
// Annotations

struct NoteDoc {
    note: Annotation,
    metric: Option<String>,
}

impl Document for NoteDoc {
    fn field(&mut self, field: &str) -> Result<(FieldKind, Vec<String>)> {
        let some = |s: &str| {
            if s.is_empty() {
                vec![]
            } else {
                vec![s.to_string()]
            }
        };
        let n = &self.note;
        Ok(match field {
            "tsuid" => (FieldKind::Keyword, some(&n.tsuid)),
            "metric" => (FieldKind::Keyword, self.metric.iter().cloned().collect()),
            "startTime" => (FieldKind::Keyword, vec![n.start_time.to_string()]),
            "endTime" => (FieldKind::Keyword, vec![n.end_time.to_string()]),
            "description" => (FieldKind::Text, some(&n.description)),
            "notes" => (FieldKind::Text, some(&n.notes)),
            _ => (
                FieldKind::Text,
                field
                    .strip_prefix("custom.")
                    .and_then(|k| n.custom.as_ref().and_then(|c| c.get(k)))
                    .map(|v| vec![v.clone()])
                    .unwrap_or_default(),
            ),
        })
    }

    fn all_fields(&mut self) -> Result<Vec<(FieldKind, String)>> {
        let n = &self.note;
        let mut out = Vec::new();
        if !n.tsuid.is_empty() {
            out.push((FieldKind::Keyword, n.tsuid.clone()));
        }
        if let Some(m) = &self.metric {
            out.push((FieldKind::Keyword, m.clone()));
        }
        out.push((FieldKind::Keyword, n.start_time.to_string()));
        out.push((FieldKind::Keyword, n.end_time.to_string()));
        for s in [&n.description, &n.notes] {
            if !s.is_empty() {
                out.push((FieldKind::Text, s.clone()));
            }
        }
        if let Some(custom) = &n.custom {
            out.extend(custom.values().map(|v| (FieldKind::Text, v.clone())));
        }
        Ok(out)
    }
}

/// The note a `0x30` place points at, if its data row still holds it.
fn note_at(tsdb: &Tsdb, metric: &[u8], start_ms: i64, tags: &[u8]) -> Result<Option<Annotation>> {
    let schema = &tsdb.settings().schema;
    let tsuid = (!tags.is_empty()).then(|| [metric, tags].concat());
    let base = annotation::base_hour(start_ms);
    let key = annotation::row_key(schema, tsuid.as_deref(), base);
    let Some(row) =
        tsdb.store()
            .get(&schema.data_table, &key, &ReadOptions::family(DATA_FAMILY))?
    else {
        return Ok(None);
    };
    for cell in row
        .cells
        .iter()
        .filter(|c| is_annotation_qualifier(&c.qualifier))
    {
        if annotation::stored_time_ms(base, &cell.qualifier, &cell.value) == Some(start_ms)
            && let Ok(note) = Annotation::from_stored(&cell.value)
        {
            return Ok(Some(note));
        }
    }
    Ok(None)
}

fn notes(tsdb: &Tsdb, s: &Search) -> Result<SearchAnswer> {
    let schema = &tsdb.settings().schema;
    let m = usize::from(schema.metric_width);
    let mut required = Vec::new();
    s.query.required_words(&["metric", "tsuid"], &mut required);
    let mut prefix = vec![kind::NOTE];
    let mut want_tags: Option<Vec<u8>> = None;
    if let Some((_, t)) = required.iter().find(|(f, _)| *f == "tsuid") {
        match hourglass_core::uid::parse_hex(t) {
            Ok(bytes) if bytes.len() > m => {
                prefix.extend_from_slice(&bytes[..m]);
                want_tags = Some(bytes[m..].to_vec());
            }
            _ => return Ok(Page::new(s).answer()),
        }
    } else if let Some((_, name)) = required.iter().find(|(f, _)| *f == "metric") {
        match id_of(tsdb, UidKind::Metric, name)? {
            Some(id) => prefix.extend(id.to_bytes(schema.metric_width)),
            None => return Ok(Page::new(s).answer()),
        }
    }
    let global = prefix.len() == 1;
    check_covered(tsdb, (!global).then(|| vec![prefix[1..].to_vec()]))?;
    if !status::notes_indexed(tsdb.store().as_ref(), &schema.index_table)? {
        return Err(Error::invalid(
            "The tag index does not list every series note yet (notes written before it kept \
             their places, or while it was off): run tsdb index rebuild",
        ));
    }
    let mut page = Page::new(s);
    if global {
        global_notes(tsdb, s, &mut page)?;
    }
    // Series notes: their places, skipping the all-zero metric (global notes, read above).
    let start = if global {
        let zeros = [&[kind::NOTE][..], &vec![0u8; m]].concat();
        hourglass_storage::prefix_end(&zeros).unwrap_or(zeros)
    } else {
        prefix.clone()
    };
    let request = ScanRequest {
        read: ReadOptions {
            keys_only: true,
            ..ReadOptions::family(GLOBAL_FAMILY)
        },
        ..ScanRequest::range(start, hourglass_storage::prefix_end(&prefix))
    };
    for row in tsdb.store().scan(&schema.index_table, &request)? {
        let row = row?;
        page.tick()?;
        let Some(rest) = row.key.get(1..) else {
            continue;
        };
        if rest.len() < m + 8 {
            continue;
        }
        let (metric, rest) = rest.split_at(m);
        let (start, tags) = rest.split_at(8);
        if want_tags.as_deref().is_some_and(|w| w != tags) {
            continue;
        }
        let start_ms = i64::from_be_bytes(<[u8; 8]>::try_from(start).unwrap_or_default());
        let Some(note) = note_at(tsdb, metric, start_ms, tags)? else {
            continue;
        };
        let metric_name = if tags.is_empty() {
            None
        } else {
            name_of(tsdb, UidKind::Metric, metric)?
        };
        let mut doc = NoteDoc {
            note,
            metric: metric_name,
        };
        if matches(&s.query, &mut doc)? && page.take() {
            page.results.push(doc.note.to_json());
        }
    }
    Ok(page.answer())
}

/// Global notes, straight from their data rows (all-zero metric, never salted, in time
/// order; a row's notes sorted by time): complete whatever the index holds.
fn global_notes(tsdb: &Tsdb, s: &Search, page: &mut Page) -> Result<()> {
    let schema = &tsdb.settings().schema;
    let start = annotation::row_key(schema, None, 0);
    let head = start.len() - 4;
    let request = ScanRequest {
        read: ReadOptions::family(DATA_FAMILY),
        ..ScanRequest::range(start.clone(), hourglass_storage::prefix_end(&start[..head]))
    };
    for row in tsdb.store().scan(&schema.data_table, &request)? {
        let row = row?;
        page.tick()?;
        let Some(base) = row
            .key
            .get(head..)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_be_bytes)
        else {
            continue;
        };
        let mut found: Vec<(i64, Annotation)> = row
            .cells
            .iter()
            .filter(|c| is_annotation_qualifier(&c.qualifier))
            .filter_map(|c| {
                let t = annotation::stored_time_ms(base, &c.qualifier, &c.value)?;
                Some((t, Annotation::from_stored(&c.value).ok()?))
            })
            .collect();
        found.sort_by_key(|(t, _)| *t);
        for (_, note) in found {
            let mut doc = NoteDoc { note, metric: None };
            if matches(&s.query, &mut doc)? && page.take() {
                page.results.push(doc.note.to_json());
            }
        }
    }
    Ok(())
}
