//! `/api/search/{tsmeta,tsmeta_summary,tsuids,uidmeta,annotation}` answered without a search
//! plugin (RFC 0007, "Search endpoints without a plugin"): a [`query_string`] query evaluated
//! on documents streamed in answer order, counted whole, kept only within the page.
//!
//! - Series (`tsmeta`, `tsmeta_summary`, `tsuids`) come from the tag index in TSUID order:
//!   the catalog (`0x01`), or, when every match must have an exact metric or tag pair, that
//!   metric's catalog range, its `0x02` posting range, or the `0x03` one; an exact `tsuid`
//!   reads its one catalog row. Other fields are read from the series' `tsdb-meta` row only
//!   when the query asks for them (and for the page's `tsmeta` results).
//! - UIDs (`uidmeta`) come from `tsdb-uid`'s forward rows, type by type (metric, tag key, tag
//!   value), each by name; an exact `name` reads its one row, an exact `type` one type.
//! - Annotations come from the index's `0x30` rows (global notes first, then by metric,
//!   start time and tags), each read back from its data row (a place whose note is gone is
//!   skipped).
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

use super::query_string::{Document, FieldKind, Node, matches};
use crate::annotation::{self, Annotation};
use crate::index::{GLOBAL_FAMILY, kind};
use crate::meta::{TsMeta, UidMeta, get_uid_meta, ts_meta_or_default};
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

/// Where the series come from: index key ranges and where each key's TSUID is.
enum SeriesSource {
    /// No series can match (an exact name with no UID).
    Nothing,
    /// One series, if its catalog row exists.
    One(Vec<u8>),
    /// Keys starting with `prefix`; the TSUID is `head` then the key from `tail_at`.
    Range {
        prefix: Vec<u8>,
        head: Vec<u8>,
        tail_at: usize,
    },
}

fn series_source(tsdb: &Tsdb, query: &Node) -> Result<SeriesSource> {
    let schema = &tsdb.settings().schema;
    let mut required = Vec::new();
    query.required_words(&["tsuid", "metric", "metric.name"], &mut required);
    let tag_fields: Vec<&str> = query
        .fields()
        .into_iter()
        .filter(|f| f.starts_with("tags.") && *f != "tags.name")
        .collect();
    let mut tag_pairs: Vec<(&str, &str)> = Vec::new();
    query.required_words(&tag_fields, &mut tag_pairs);
    let tag_pairs: Vec<(&str, &str)> = tag_pairs
        .into_iter()
        .filter_map(|(f, v)| Some((f.strip_prefix("tags.")?, v)))
        .collect();
    if let Some((_, tsuid)) = required.iter().find(|(f, _)| *f == "tsuid") {
        return Ok(match hourglass_core::uid::parse_hex(tsuid) {
            Ok(bytes) if crate::meta::check_tsuid(schema, &bytes).is_ok() => {
                SeriesSource::One(bytes)
            }
            _ => SeriesSource::Nothing,
        });
    }
    let metric = match required.iter().find(|(f, _)| *f != "tsuid") {
        Some((_, name)) => match id_of(tsdb, UidKind::Metric, name)? {
            Some(m) => Some(m.to_bytes(schema.metric_width)),
            None => return Ok(SeriesSource::Nothing),
        },
        None => None,
    };
    let pair = match tag_pairs.first() {
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
    Ok(match (metric, pair) {
        (Some(m), Some((k, v))) => {
            let prefix = [&[kind::POSTING][..], &m, &k, &v].concat();
            SeriesSource::Range {
                tail_at: prefix.len(),
                prefix,
                head: m,
            }
        }
        (None, Some((k, v))) => {
            let prefix = [&[kind::ANY_METRIC_POSTING][..], &k, &v].concat();
            SeriesSource::Range {
                tail_at: prefix.len(),
                prefix,
                head: Vec::new(),
            }
        }
        (Some(m), None) => SeriesSource::Range {
            prefix: [&[kind::CATALOG][..], &m].concat(),
            head: Vec::new(),
            tail_at: 1,
        },
        (None, None) => SeriesSource::Range {
            prefix: vec![kind::CATALOG],
            head: Vec::new(),
            tail_at: 1,
        },
    })
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
    match series_source(tsdb, &s.query)? {
        SeriesSource::Nothing => {}
        SeriesSource::One(tsuid) => {
            let key = [&[kind::CATALOG][..], &tsuid].concat();
            if store.get(table, &key, &ReadOptions::keys_only())?.is_some() {
                visit(tsuid, &mut page)?;
            }
        }
        SeriesSource::Range {
            prefix,
            head,
            tail_at,
        } => {
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
                            ..ScanRequest::default()
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
    let request = ScanRequest {
        read: ReadOptions {
            keys_only: true,
            ..ReadOptions::family(GLOBAL_FAMILY)
        },
        ..ScanRequest::prefix(&prefix)
    };
    let mut page = Page::new(s);
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
