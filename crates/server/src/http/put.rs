//! `POST /api/put`: one point object or an array of them. `?summary` and `?details` answer
//! with counts (and each failed point with its error); `?sync` answers once the batch is
//! durable against power loss, `sync_timeout` (ms) bounding the wait. `POST /api/rollup`
//! is the same request with rollup points (RFC 0008), written to the rollup tables.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{RawQuery, State as Extract};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use hourglass_core::value::{self, Value};
use hourglass_engine::IncomingPoint;
use hourglass_engine::histogram::HistogramPoint;
use hourglass_engine::rollup::{RollupPoint, RollupRefusal};
use serde::Deserialize;
use serde_json::json;

use super::ApiError;
use super::error::json_response;
use crate::State;

/// A JSON scalar where OpenTSDB (Jackson) accepts either a string or a number.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Scalar {
    Str(String),
    Num(serde_json::Number),
    Bool(bool),
}

impl Scalar {
    fn text(&self) -> String {
        match self {
            Scalar::Str(s) => s.clone(),
            Scalar::Num(n) => n.to_string(),
            Scalar::Bool(b) => b.to_string(),
        }
    }
}

/// A point's tags as Jackson fills OpenTSDB's `HashMap<String, String>`: in the body's order
/// (for Java's iteration order when echoed), a repeated key keeping its first place and its
/// last value, a `null` value kept as null.
#[derive(Debug, Default)]
struct TagMap(Vec<(String, Option<Scalar>)>);

impl<'de> Deserialize<'de> for TagMap {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = TagMap;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of tag names to values")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<TagMap, A::Error> {
                let mut tags: Vec<(String, Option<Scalar>)> = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Option<Scalar>>()? {
                    match tags.iter_mut().find(|(have, _)| *have == k) {
                        Some(slot) => slot.1 = v,
                        None => tags.push((k, v)),
                    }
                }
                Ok(TagMap(tags))
            }
        }
        d.deserialize_map(Visit)
    }
}

impl TagMap {
    /// The tags in Java's `HashMap` iteration order, as OpenTSDB echoes them.
    fn echo(&self) -> serde_json::Value {
        let order =
            hourglass_core::put::java_hash_map_order(self.0.iter().map(|(k, _)| k.as_str()));
        let map: serde_json::Map<String, serde_json::Value> = order
            .into_iter()
            .map(|i| {
                let (k, v) = &self.0[i];
                (
                    k.clone(),
                    v.as_ref()
                        .map_or(serde_json::Value::Null, |v| json!(v.text())),
                )
            })
            .collect();
        serde_json::Value::Object(map)
    }
}

#[derive(Debug, Deserialize)]
struct RawPoint {
    metric: Option<Scalar>,
    timestamp: Option<Scalar>,
    value: Option<Scalar>,
    tags: Option<TagMap>,
    tsuid: Option<Scalar>,
    /// A rollup point's fields (`/api/rollup`).
    interval: Option<Scalar>,
    aggregator: Option<Scalar>,
    #[serde(rename = "groupByAggregator")]
    group_by_aggregator: Option<Scalar>,
    /// A histogram point's fields (`/api/histogram`): the codec id of a base64 `value`, or
    /// buckets (`"lower,upper": count`) with underflow and overflow counts.
    id: Option<Scalar>,
    buckets: Option<BTreeMap<String, Scalar>>,
    underflow: Option<Scalar>,
    overflow: Option<Scalar>,
}

/// What a body's points are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Raw points (`/api/put`).
    Raw,
    /// Rollups and pre-aggregates (`/api/rollup`), written to the rollup tables.
    Rollup,
    /// Histograms (`/api/histogram`), written to the data table.
    Histogram,
}

impl RawPoint {
    fn echo(&self) -> serde_json::Value {
        let mut dp = serde_json::Map::new();
        if let Some(m) = &self.metric {
            dp.insert("metric".into(), json!(m.text()));
        }
        // A Java `long`: 0 when not given.
        let ts = match &self.timestamp {
            None => json!(0),
            Some(t) => self::timestamp(t).map_or_else(|| json!(t.text()), |t| json!(t)),
        };
        dp.insert("timestamp".into(), ts);
        if let Some(v) = &self.value {
            dp.insert("value".into(), json!(v.text()));
        }
        if let Some(tags) = &self.tags {
            dp.insert("tags".into(), tags.echo());
        }
        if let Some(tsuid) = &self.tsuid {
            dp.insert("tsuid".into(), json!(tsuid.text()));
        }
        for (name, field) in [
            ("interval", &self.interval),
            ("aggregator", &self.aggregator),
            ("groupByAggregator", &self.group_by_aggregator),
        ] {
            if let Some(v) = field {
                dp.insert(name.into(), json!(v.text()));
            }
        }
        if let Some(id) = &self.id {
            dp.insert("id".into(), json!(id.text()));
        }
        if let Some(buckets) = &self.buckets {
            let buckets: serde_json::Map<String, serde_json::Value> = buckets
                .iter()
                .map(|(k, v)| (k.clone(), json!(v.text())))
                .collect();
            dp.insert("buckets".into(), serde_json::Value::Object(buckets));
        }
        for (name, field) in [("underflow", &self.underflow), ("overflow", &self.overflow)] {
            if let Some(v) = field {
                dp.insert(name.into(), json!(v.text()));
            }
        }
        serde_json::Value::Object(dp)
    }
}

fn timestamp(t: &Scalar) -> Option<i64> {
    match t {
        Scalar::Num(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.is_finite() && f.abs() < 9.2e18)
                .map(|f| f as i64)
        }),
        Scalar::Str(s) => value::parse_long(s).ok(),
        Scalar::Bool(_) => None,
    }
}

/// A point checked as OpenTSDB's `IncomingDataPoint.validate` does, before the write path.
struct Checked {
    metric: String,
    timestamp: i64,
    value: Value,
    tags: Vec<(String, String)>,
    /// A rollup point's fields (`/api/rollup`); `group_by` given (even empty) makes it a
    /// pre-aggregate, as OpenTSDB reads it.
    interval: Option<String>,
    aggregator: Option<String>,
    group_by: Option<String>,
}

/// A point's tags as text, in Java's `HashMap` order (the order OpenTSDB checks them in, so
/// the first bad one is the one it reports); a `null` value is refused in
/// `Tags.validateString`'s words.
fn tag_texts(p: &RawPoint) -> Result<Vec<(String, String)>, String> {
    let Some(tags) = &p.tags else {
        return Ok(Vec::new());
    };
    hourglass_core::put::java_hash_map_order(tags.0.iter().map(|(k, _)| k.as_str()))
        .into_iter()
        .map(|i| match &tags.0[i] {
            (k, Some(v)) => Ok((k.clone(), v.text())),
            (k, None) => Err(format!("Invalid tag value with key [{k}]: null")),
        })
        .collect()
}

fn check(p: &RawPoint, kind: Kind) -> Result<Checked, String> {
    let metric = p.metric.as_ref().map(Scalar::text).unwrap_or_default();
    if metric.is_empty() {
        return Err("Metric name was empty".into());
    }
    let ts = p
        .timestamp
        .as_ref()
        .and_then(timestamp)
        .filter(|t| *t > 0)
        .ok_or("Invalid timestamp")?;
    let text = p.value.as_ref().map(Scalar::text).unwrap_or_default();
    if text.is_empty() {
        return Err("Empty value".into());
    }
    if p.tags.as_ref().is_none_or(|t| t.0.is_empty()) {
        return Err("Missing tags".into());
    }
    let value =
        value::parse_value(&text).map_err(|_| "Unable to parse value to a number".to_string())?;
    let tags = tag_texts(p)?;
    let given = |f: &Option<Scalar>| f.as_ref().is_some_and(|s| !s.text().is_empty());
    let grouped = given(&p.group_by_aggregator);
    match kind {
        Kind::Rollup if !given(&p.interval) && !grouped => return Err("Missing interval".into()),
        Kind::Rollup if !given(&p.aggregator) && !grouped => {
            return Err("Missing aggregator".into());
        }
        Kind::Rollup => {}
        // A rollup point sent as a raw one is refused, not stored as raw data.
        Kind::Raw if given(&p.interval) || given(&p.aggregator) || grouped => {
            return Err(
                "a point with interval, aggregator or groupByAggregator is a rollup point: send it to /api/rollup"
                    .into(),
            );
        }
        Kind::Raw => {}
        Kind::Histogram => return Err("a histogram point is checked by check_histogram".into()),
    }
    let text_of = |f: &Option<Scalar>| f.as_ref().map(Scalar::text);
    Ok(Checked {
        metric,
        timestamp: ts,
        value,
        tags,
        interval: text_of(&p.interval),
        aggregator: text_of(&p.aggregator),
        group_by: text_of(&p.group_by_aggregator),
    })
}

/// OpenTSDB's words for a `null` in a body's array of points.
const NULL_POINT: &str = "Unexpected null datapoint encountered in set.";

/// A point of a body as echoed in `details`: `null` for a null one.
fn echo_point(p: &Option<RawPoint>) -> serde_json::Value {
    p.as_ref().map_or(serde_json::Value::Null, RawPoint::echo)
}

/// A body's points; a `null` in an array is a point refused alone, as in OpenTSDB.
fn parse_body(body: &[u8]) -> Result<Vec<Option<RawPoint>>, ApiError> {
    let start = body.iter().position(|b| !b.is_ascii_whitespace());
    let Some(start) = start else {
        return Err(ApiError::bad_request("Missing request content"));
    };
    let parsed = match body[start] {
        b'{' => super::json::from_slice::<RawPoint>(body).map(|p| vec![Some(p)]),
        b'[' => super::json::from_slice::<Vec<Option<RawPoint>>>(body),
        _ => {
            return Err(ApiError::bad_request(
                "The JSON must start as an object or an array",
            ));
        }
    };
    let points = parsed.map_err(|e| {
        ApiError::bad_request("Unable to parse the given JSON").with_details(e.to_string())
    })?;
    if points.is_empty() {
        return Err(ApiError::bad_request("No datapoints found in content"));
    }
    Ok(points)
}

/// Parses and checks an `/api/put` body without storing it: the number of points that
/// pass OpenTSDB's per-point checks, or the request's error message. For fuzzing and tests.
pub fn check_put_body(body: &[u8]) -> Result<usize, String> {
    let raw = parse_body(body).map_err(|e| e.message)?;
    Ok(raw
        .iter()
        .flatten()
        .filter(|p| check(p, Kind::Raw).is_ok())
        .count())
}

/// Bodies larger than this are read twice, and stored in batches as they are read the
/// second time: held whole as parsed points, a body takes about twenty times its size.
const STREAMED_BODY_BYTES: usize = 4 << 20;

/// Points a batch of a streamed body.
const STREAMED_BATCH: usize = 8192;

/// The longest a streamed body's next batch waits for buffered points to be back under
/// their budget before the rest of the body is refused.
const STREAMED_ROOM_WAIT: Duration = Duration::from_secs(30);

/// Which points a request's answer echoes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Echo {
    None,
    /// Those with an error (`?details`).
    Failed,
    /// Every point (`?details` with a `sync_timeout`: a point whose sync did not finish in
    /// time is listed too).
    All,
}

/// What a request's points came to.
struct Received {
    /// Error indexes are of the whole body.
    result: PutResult,
    /// Points in the body.
    count: usize,
    /// Echoes of points by index, as [`Echo`] asked.
    echoes: HashMap<usize, serde_json::Value>,
}

fn echo_batch(
    raw: &[Option<RawPoint>],
    offset: usize,
    errors: &[(usize, String)],
    echo: Echo,
    echoes: &mut HashMap<usize, serde_json::Value>,
) {
    match echo {
        Echo::None => {}
        Echo::Failed => {
            for (i, _) in errors {
                if let Some(p) = i.checked_sub(offset).and_then(|j| raw.get(j)) {
                    echoes.insert(*i, echo_point(p));
                }
            }
        }
        Echo::All => {
            for (i, p) in raw.iter().enumerate() {
                echoes.insert(offset + i, echo_point(p));
            }
        }
    }
}

/// Whether a body is read in batches: an array over [`STREAMED_BODY_BYTES`].
fn streamed(body: &[u8]) -> bool {
    body.len() > STREAMED_BODY_BYTES
        && body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[')
}

/// A streamed body read through without keeping its points: the bytes to read it from
/// again (with Jackson's non-numeric tokens quoted when it needs that), or its error.
fn read_through(body: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, ApiError> {
    match read_batches(body, None) {
        Ok(_) => Ok(body.into()),
        Err(e) => match super::json::quote_non_numeric(body) {
            Some(q) if read_batches(&q, None).is_ok() => Ok(q.into()),
            _ => Err(e),
        },
    }
}

/// Reads a body through without storing anything: its error, if it has one (a large array is
/// read as [`receive`] reads it, without keeping its points).
fn parse_only(body: &[u8]) -> Result<(), ApiError> {
    if streamed(body) {
        read_through(body).map(|_| ())
    } else {
        parse_body(body).map(|_| ())
    }
}

/// Parses a body and stores its points. A body of at most [`STREAMED_BODY_BYTES`] is parsed
/// whole; a larger array is first read through without keeping anything (a body that does
/// not parse stores nothing, as when it is parsed whole), then stored [`STREAMED_BATCH`]
/// points at a time as it is read again, so memory does not grow with the body.
fn receive(state: &State, body: &[u8], kind: Kind, echo: Echo) -> Result<Received, ApiError> {
    if !streamed(body) {
        let raw = parse_body(body)?;
        let result = store(state, &raw, kind);
        let mut echoes = HashMap::new();
        echo_batch(&raw, 0, &result.errors, echo, &mut echoes);
        return Ok(Received {
            count: raw.len(),
            result,
            echoes,
        });
    }
    let bytes = read_through(body)?;
    let mut total = PutResult {
        success: 0,
        errors: Vec::new(),
        throttled: None,
        ticket: 0,
    };
    let mut echoes = HashMap::new();
    // Set when buffered points stayed over their budget after some were stored: the rest
    // of the body is refused point by point, so the answer says what was stored.
    let mut refused: Option<String> = None;
    let mut each = |offset: usize, raw: Vec<Option<RawPoint>>| -> bool {
        if offset > 0 && refused.is_none() {
            let waited = std::time::Instant::now();
            while !state.tsdb.has_room() && waited.elapsed() < STREAMED_ROOM_WAIT {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let mut result = match &refused {
            Some(why) => PutResult {
                success: 0,
                errors: (0..raw.len()).map(|i| (i, why.clone())).collect(),
                throttled: None,
                ticket: 0,
            },
            None => store(state, &raw, kind),
        };
        if let Some(why) = result.throttled.take() {
            if offset == 0 {
                // Nothing stored yet: the request is refused whole, to be sent again.
                total.throttled = Some(why);
                return false;
            }
            let why = format!(
                "Please throttle writes: buffered points are over their memory budget ({why}); points before this one were stored"
            );
            result.errors = (0..raw.len()).map(|i| (i, why.clone())).collect();
            refused = Some(why);
        }
        for e in &mut result.errors {
            e.0 += offset;
        }
        echo_batch(&raw, offset, &result.errors, echo, &mut echoes);
        total.success += result.success;
        total.errors.append(&mut result.errors);
        total.ticket = total.ticket.max(result.ticket);
        true
    };
    let count = read_batches(&bytes, Some(&mut each))?;
    Ok(Received {
        result: total,
        count,
        echoes,
    })
}

/// Reads a JSON array of points, handing them to `each` [`STREAMED_BATCH`] at a time (none
/// kept when there is no `each`): the number of points read. An empty array is refused as
/// [`parse_body`] refuses it. Stopped by `each`, it returns 0.
fn read_batches(
    body: &[u8],
    each: Option<&mut dyn FnMut(usize, Vec<Option<RawPoint>>) -> bool>,
) -> Result<usize, ApiError> {
    /// `each` takes a batch and the index of its first point; false stops the reading,
    /// noted in `stopped`.
    struct Batches<'a, 'f> {
        each: Option<&'a mut (dyn FnMut(usize, Vec<Option<RawPoint>>) -> bool + 'f)>,
        stopped: &'a Cell<bool>,
    }
    impl<'de> serde::de::Visitor<'de> for Batches<'_, '_> {
        type Value = usize;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a sequence")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            mut self,
            mut seq: A,
        ) -> Result<usize, A::Error> {
            let mut read = 0;
            let mut batch = Vec::new();
            while let Some(point) = seq.next_element::<Option<RawPoint>>()? {
                read += 1;
                if let Some(each) = self.each.as_mut() {
                    batch.push(point);
                    if batch.len() == STREAMED_BATCH
                        && !each(read - batch.len(), std::mem::take(&mut batch))
                    {
                        self.stopped.set(true);
                        return Ok(read);
                    }
                }
            }
            if let Some(each) = self.each.as_mut()
                && !batch.is_empty()
                && !each(read - batch.len(), batch)
            {
                self.stopped.set(true);
            }
            Ok(read)
        }
    }
    let stopped = Cell::new(false);
    let mut de = serde_json::Deserializer::from_slice(body);
    let read = serde::Deserializer::deserialize_seq(
        &mut de,
        Batches {
            each,
            stopped: &stopped,
        },
    );
    if stopped.get() {
        // Left in the middle of the array (serde_json then finds no end to it): the rest
        // is not read, and what was read is the caller's.
        return Ok(0);
    }
    let read = read.and_then(|n| de.end().map(|()| n)).map_err(|e| {
        ApiError::bad_request("Unable to parse the given JSON").with_details(e.to_string())
    })?;
    if read == 0 {
        return Err(ApiError::bad_request("No datapoints found in content"));
    }
    Ok(read)
}

struct PutResult {
    success: usize,
    errors: Vec<(usize, String)>,
    /// Refused whole: buffered points are over their memory budget.
    throttled: Option<String>,
    /// The ticket of a histogram or rollup write ([`hourglass_engine::Tsdb::sync_cells`]).
    ticket: u64,
}

/// Counts a point refused before the write path as OpenTSDB's `processDataPoint` does: an
/// unreadable value under `invalid_values`, an unexpected failure nowhere, the rest under
/// `illegal_arguments`.
fn count_refusal(state: &State, error: &str) {
    let counter = match error {
        "Unable to parse value to a number" => &state.stats.invalid_values,
        "Unexpected exception" => return,
        _ => &state.stats.illegal_arguments,
    };
    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

fn store(state: &State, raw: &[Option<RawPoint>], kind: Kind) -> PutResult {
    if kind == Kind::Histogram {
        return store_histograms(state, raw);
    }
    let mut errors = Vec::new();
    let mut checked = Vec::with_capacity(raw.len());
    for (i, p) in raw.iter().enumerate() {
        let Some(p) = p else {
            count_refusal(state, NULL_POINT);
            errors.push((i, NULL_POINT.to_string()));
            continue;
        };
        match check(p, kind) {
            Ok(c) => checked.push((i, c)),
            Err(e) => {
                count_refusal(state, &e);
                errors.push((i, e));
            }
        }
    }
    let tag_refs: Vec<Vec<(&str, &str)>> = checked
        .iter()
        .map(|(_, c)| {
            c.tags
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect()
        })
        .collect();
    if kind == Kind::Rollup {
        return store_rollups(state, &checked, &tag_refs, errors);
    }
    let points: Vec<IncomingPoint<'_>> = checked
        .iter()
        .zip(&tag_refs)
        .map(|((_, c), tags)| IncomingPoint {
            metric: &c.metric,
            timestamp: c.timestamp,
            value: c.value,
            tags,
            line_tags: None,
        })
        .collect();
    let outcome = state.tsdb.add_points(&points);
    if outcome.throttled {
        state
            .stats
            .throttled
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return PutResult {
            success: 0,
            throttled: outcome.errors.first().map(|(_, e)| e.to_string()),
            errors,
            ticket: 0,
        };
    }
    for (idx, e) in outcome.errors {
        state.stats.count_error(&e);
        errors.push((checked[idx].0, super::PointError::of(&e).http));
    }
    errors.sort_by_key(|(i, _)| *i);
    PutResult {
        success: outcome.stored,
        errors,
        throttled: None,
        ticket: 0,
    }
}

/// Rollup points go straight to their tables (RFC 0008), synced there when asked.
fn store_rollups(
    state: &State,
    checked: &[(usize, Checked)],
    tag_refs: &[Vec<(&str, &str)>],
    mut errors: Vec<(usize, String)>,
) -> PutResult {
    let points: Vec<RollupPoint<'_>> = checked
        .iter()
        .zip(tag_refs)
        .map(|((_, c), tags)| RollupPoint {
            metric: &c.metric,
            timestamp: c.timestamp,
            value: c.value,
            tags,
            interval: c.interval.as_deref(),
            aggregator: c.aggregator.as_deref(),
            group_by: c.group_by.as_deref(),
        })
        .collect();
    let mut success = 0;
    let mut ticket = 0;
    match state.tsdb.add_rollup_points(&points, false) {
        Ok(outcome) => {
            success = outcome.stored;
            ticket = outcome.ticket;
            for (idx, refusal) in outcome.errors {
                let e = rollup_error(refusal);
                state.stats.count_error(&e);
                errors.push((checked[idx].0, super::PointError::of(&e).http));
            }
        }
        // The batch's write failed: none of its checked points is stored.
        // Over the memory budget: refused whole, to be sent again.
        Err(hourglass_engine::Error::Throttled(why)) => {
            state
                .stats
                .throttled
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return PutResult {
                success: 0,
                errors,
                throttled: Some(why),
                ticket: 0,
            };
        }
        Err(e) => {
            for (i, _) in checked {
                state.stats.count_error(&e);
                errors.push((*i, super::PointError::of(&e).http));
            }
        }
    }
    errors.sort_by_key(|(i, _)| *i);
    PutResult {
        success,
        errors,
        throttled: None,
        ticket,
    }
}

/// A histogram point of `/api/histogram`, checked (`HistogramPojo.validate`), decoded and
/// encoded again as 2.4.1's `PutDataPointRpc` does: the stored value with its codec id first.
struct CheckedHistogram {
    metric: String,
    timestamp: i64,
    tags: Vec<(String, String)>,
    value: Vec<u8>,
}

fn check_histogram(
    p: &RawPoint,
    config: &hourglass_core::histogram::HistogramConfig,
) -> Result<CheckedHistogram, String> {
    use hourglass_core::histogram::{SimpleHistogram, decode_base64_lenient, parse_java_float};
    let metric = p.metric.as_ref().map(Scalar::text).unwrap_or_default();
    if metric.is_empty() {
        return Err("Metric name was empty".into());
    }
    let ts = p
        .timestamp
        .as_ref()
        .and_then(timestamp)
        .filter(|t| *t > 0)
        .ok_or("Invalid timestamp")?;
    if p.tags.as_ref().is_none_or(|t| t.0.is_empty()) {
        return Err("Missing tags".into());
    }
    let tags = tag_texts(p)?;
    let text = p.value.as_ref().map(Scalar::text).unwrap_or_default();
    let long = |f: &Option<Scalar>| -> Result<i64, String> {
        match f {
            None => Ok(0),
            Some(s) => timestamp(s).ok_or_else(|| "Unable to parse value to a number".to_string()),
        }
    };
    let value = if text.is_empty() {
        let buckets = p
            .buckets
            .as_ref()
            .filter(|b| !b.is_empty())
            .ok_or("Histogram buckets cannot be null or empty if 'value' is empty.")?;
        let id = config.simple().map_err(|e| e.to_string())?;
        let mut h = SimpleHistogram {
            underflow: long(&p.underflow)?,
            overflow: long(&p.overflow)?,
            ..SimpleHistogram::default()
        };
        for (bounds, count) in buckets {
            let parts: Vec<&str> = bounds.split(',').collect();
            if parts.len() != 2 {
                return Err(format!("Unable to parse bucket bounds: {bounds}"));
            }
            let bound = |s: &str| {
                parse_java_float(s).ok_or_else(|| "Unable to parse value to a number".to_string())
            };
            let count = long(&Some(count.clone()))?;
            h.set_bucket(bound(parts[0])?, bound(parts[1])?, count);
        }
        if h.buckets.len() > SimpleHistogram::MAX_BUCKETS {
            return Err(format!(
                "Too many buckets: {}, at most {}",
                h.buckets.len(),
                SimpleHistogram::MAX_BUCKETS
            ));
        }
        h.encode(Some(id))
    } else {
        let id = match &p.id {
            None => 0,
            Some(id) => timestamp(id).ok_or("Unable to parse value to a number")?,
        };
        if !(0..=255).contains(&id) {
            return Err("Invalid type. Must be from 0 to 255.".into());
        }
        let id = config.codec(id).map_err(|e| e.to_string())?;
        // A value cut short is Kryo's runtime exception in 2.4.1, answered so.
        let h =
            SimpleHistogram::decode(&decode_base64_lenient(&text), false).map_err(|e| {
                match e.kind() {
                    hourglass_core::ErrorKind::Corrupt => "Unexpected exception".to_string(),
                    hourglass_core::ErrorKind::InvalidInput => e.to_string(),
                }
            })?;
        h.encode(Some(id))
    };
    Ok(CheckedHistogram {
        metric,
        timestamp: ts,
        tags,
        value,
    })
}

/// Histogram points go straight to the data table (RFC 0008, phase 3), synced there when
/// asked.
fn store_histograms(state: &State, raw: &[Option<RawPoint>]) -> PutResult {
    let mut errors = Vec::new();
    let Some(config) = state.tsdb.histograms() else {
        for i in 0..raw.len() {
            errors.push((i, HISTOGRAMS_OFF.to_string()));
        }
        return PutResult {
            success: 0,
            errors,
            throttled: None,
            ticket: 0,
        };
    };
    let mut checked = Vec::with_capacity(raw.len());
    for (i, p) in raw.iter().enumerate() {
        let Some(p) = p else {
            count_refusal(state, NULL_POINT);
            errors.push((i, NULL_POINT.to_string()));
            continue;
        };
        match check_histogram(p, config) {
            Ok(c) => checked.push((i, c)),
            Err(e) => {
                count_refusal(state, &e);
                errors.push((i, e));
            }
        }
    }
    let tag_refs: Vec<Vec<(&str, &str)>> = checked
        .iter()
        .map(|(_, c)| {
            c.tags
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect()
        })
        .collect();
    let points: Vec<HistogramPoint<'_>> = checked
        .iter()
        .zip(&tag_refs)
        .map(|((_, c), tags)| HistogramPoint {
            metric: &c.metric,
            timestamp: c.timestamp,
            value: c.value.clone(),
            tags,
        })
        .collect();
    let mut success = 0;
    let mut ticket = 0;
    match state.tsdb.add_histogram_points(&points, false) {
        Ok(outcome) => {
            success = outcome.stored;
            ticket = outcome.ticket;
            for (idx, e) in outcome.errors {
                state.stats.count_error(&e);
                errors.push((checked[idx].0, super::PointError::of(&e).http));
            }
        }
        // Over the memory budget: refused whole, to be sent again.
        Err(hourglass_engine::Error::Throttled(why)) => {
            state
                .stats
                .throttled
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return PutResult {
                success: 0,
                errors,
                throttled: Some(why),
                ticket: 0,
            };
        }
        Err(e) => {
            for (i, _) in &checked {
                state.stats.count_error(&e);
                errors.push((*i, super::PointError::of(&e).http));
            }
        }
    }
    errors.sort_by_key(|(i, _)| *i);
    PutResult {
        success,
        errors,
        throttled: None,
        ticket,
    }
}

/// A rollup refusal as the engine error it is counted and worded as.
pub(crate) fn rollup_error(refusal: RollupRefusal) -> hourglass_engine::Error {
    match refusal {
        RollupRefusal::NoSuchRollup(m) => hourglass_engine::Error::InvalidInput(m),
        RollupRefusal::Error(e) => e,
    }
}

/// The answer to a put refused whole because buffered points are over their budget: 503,
/// not acknowledged, to be sent again.
fn throttled(state: &State, why: Option<String>) -> ApiError {
    if why.is_none() {
        state
            .stats
            .throttled
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "Please throttle writes: buffered points are over their memory budget",
    )
    .with_details(why.unwrap_or_else(|| {
        format!(
            "tsd.storage.max_buffer_bytes = {}; the store is not keeping up. Nothing of this request was stored: send it again",
            state.tsdb.settings().max_buffer_bytes
        )
    }))
}

/// URL parameters by name, a repeated one as its last value (as OpenTSDB reads them).
fn query_map(raw: Option<String>) -> HashMap<String, String> {
    super::request::url_params(raw.as_deref())
        .into_iter()
        .collect()
}

pub(crate) async fn handle(
    method: Method,
    RawQuery(raw): RawQuery,
    Extract(state): Extract<Arc<State>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    serve(Kind::Raw, method, query_map(raw), state, body).await
}

/// `/api/rollup`: read and checked as OpenTSDB reads it, each point written to its rollup or
/// pre-aggregate table (refused when no rollup is configured).
pub(crate) async fn rollup(
    method: Method,
    RawQuery(raw): RawQuery,
    Extract(state): Extract<Arc<State>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    serve(Kind::Rollup, method, query_map(raw), state, body).await
}

/// `/api/histogram`: histogram points as `/api/put` takes points (RFC 0008, phase 3); 503
/// when histogram storage is not enabled (answered before the method is looked at, as
/// OpenTSDB does).
pub(crate) async fn histogram(
    method: Method,
    RawQuery(raw): RawQuery,
    Extract(state): Extract<Arc<State>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    if state.tsdb.histograms().is_none() && !state.settings.read_only {
        state
            .stats
            .put_requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut resp =
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, HISTOGRAMS_OFF).into_response();
        // Not a passing condition: retrying will not help.
        resp.headers_mut().remove(axum::http::header::RETRY_AFTER);
        return Ok(resp);
    }
    serve(Kind::Histogram, method, query_map(raw), state, body).await
}

/// OpenTSDB's words when histogram storage is not enabled.
pub(crate) const HISTOGRAMS_OFF: &str = hourglass_engine::query::plan::HISTOGRAMS_OFF;

/// Makes a request's points durable against power loss: raw points through the log (or a
/// flush), histogram and rollup cells by a store sync covering their write's `ticket`.
fn sync_request(
    db: &hourglass_engine::Tsdb,
    kind: Kind,
    ticket: u64,
) -> hourglass_engine::Result<()> {
    match kind {
        Kind::Raw => db.sync_points(),
        Kind::Rollup | Kind::Histogram => db.sync_cells(ticket),
    }
}

async fn serve(
    kind: Kind,
    method: Method,
    params: HashMap<String, String>,
    state: Arc<State>,
    body: Bytes,
) -> Result<Response, ApiError> {
    if state.settings.read_only {
        return Err(ApiError::new(StatusCode::NOT_FOUND, "Endpoint not found"));
    }
    // Every request counts, refused ones too, as in OpenTSDB.
    state
        .stats
        .put_requests
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if method != Method::POST {
        return Err(ApiError::method_not_allowed(&method));
    }
    let show_details = params.contains_key("details");
    let show_summary = params.contains_key("summary");
    let sync = params.contains_key("sync");
    // A Java int (`Integer.parseInt`), read once the body is: 0 or less is no timeout.
    let (sync_timeout, bad_timeout) =
        match params.get("sync_timeout").map(|t| (t, t.parse::<i32>())) {
            None => (0, None),
            Some((_, Ok(t))) => (u64::try_from(t).unwrap_or(0), None),
            Some((t, Err(_))) => (
                0,
                Some(ApiError::bad_request(format!("For input string: \"{t}\""))),
            ),
        };
    // Past the memory budget nothing is parsed: the client is told to come back.
    if !state.tsdb.has_room() {
        return Err(throttled(&state, None));
    }
    // Without a timeout the sync runs in the same hand-off as the write. Raw points are
    // synced through the log; histogram and rollup cells skip it, and their request waits
    // for a store sync that started after its write (concurrent requests share one), with
    // the same `sync_timeout` (2.4.1's `PutDataPointRpc` serves all three).
    let sync_inline = sync && sync_timeout == 0;
    let echo = match (show_details, sync_timeout > 0) {
        (false, _) => Echo::None,
        (true, false) => Echo::Failed,
        (true, true) => Echo::All,
    };
    let turn = Arc::clone(&state.put_jobs)
        .acquire_owned()
        .await
        .map_err(|_| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting down"))?;
    let (received, synced_inline) =
        crate::ingest::run_blocking(&state, move |state| -> Result<_, ApiError> {
            // The body is read before `sync_timeout` is looked at: its error comes first.
            let received = match bad_timeout {
                Some(e) => parse_only(&body).and(Err(e)),
                None => receive(state, &body, kind, echo),
            };
            // The sync below holds no memory for the body: the next one may go.
            drop(turn);
            let received = received.inspect_err(|e| {
                // `/api/put` counts an unreadable body; `/api/rollup` and `/api/histogram`
                // do not.
                if kind == Kind::Raw
                    && e.message != "No datapoints found in content"
                    && !e.message.starts_with("For input string")
                {
                    state
                        .stats
                        .illegal_arguments
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            })?;
            let result = &received.result;
            let synced = (sync_inline && result.success > 0 && result.throttled.is_none())
                .then(|| sync_request(&state.tsdb, kind, result.ticket));
            Ok((received, synced))
        })
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("put failed: {e}"),
            )
        })??;
    let Received {
        result,
        count,
        mut echoes,
    } = received;
    if let Some(why) = result.throttled {
        return Err(throttled(&state, Some(why)));
    }
    state
        .stats
        .points_received
        .fetch_add(count as u64, std::sync::atomic::Ordering::Relaxed);

    let mut timeouts = 0usize;
    if sync && result.success > 0 {
        let synced = match synced_inline {
            Some(outcome) => Some(Ok(outcome)),
            None => {
                let db = Arc::clone(&state.tsdb);
                let ticket = result.ticket;
                let job = tokio::task::spawn_blocking(move || sync_request(&db, kind, ticket));
                tokio::time::timeout(Duration::from_millis(sync_timeout), job)
                    .await
                    .ok()
            }
        };
        match synced {
            None => timeouts = result.success,
            Some(Ok(Ok(()))) => {}
            Some(Ok(Err(e))) => {
                return Err(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("Storage exception: {e}"),
                ));
            }
            Some(Err(e)) => {
                return Err(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("sync failed: {e}"),
                ));
            }
        }
    }
    let failed = result.errors.len();
    let success = result.success - timeouts;
    if show_details || show_summary {
        let mut body = serde_json::Map::new();
        body.insert("success".into(), json!(success));
        if sync_timeout > 0 {
            body.insert("timeouts".into(), json!(timeouts));
        }
        body.insert("failed".into(), json!(failed));
        if show_details {
            let mut errors: Vec<serde_json::Value> = result
                .errors
                .iter()
                .map(|(i, e)| {
                    let point = echoes.remove(i).unwrap_or(serde_json::Value::Null);
                    json!({ "datapoint": point, "error": e })
                })
                .collect();
            // Each stored point whose sync did not finish in time, as 2.4.1's `PutTimeout`
            // lists it.
            if timeouts > 0 {
                let refused: std::collections::HashSet<usize> =
                    result.errors.iter().map(|(i, _)| *i).collect();
                errors.extend((0..count).filter(|i| !refused.contains(i)).map(|i| {
                    let point = echoes.remove(&i).unwrap_or(serde_json::Value::Null);
                    json!({ "datapoint": point, "error": "Write timedout" })
                }));
            }
            body.insert("errors".into(), serde_json::Value::Array(errors));
        }
        let status = if failed > 0 || timeouts > 0 {
            StatusCode::BAD_REQUEST
        } else {
            StatusCode::OK
        };
        return Ok(json_response(status, &serde_json::Value::Object(body)));
    }
    if timeouts > 0 {
        return Err(ApiError::bad_request(format!(
            "The put call has timedout with {success} successful writes, {failed} failed writes and {timeouts} timed out writes."
        ))
        .with_details("Please see the TSD logs or append \"details\" to the put request"));
    }
    if failed > 0 {
        return Err(ApiError::bad_request("One or more data points had errors")
            .with_details("Please see the TSD logs or append \"details\" to the put request"));
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::check_put_body;

    #[test]
    fn body_checks() {
        assert_eq!(
            check_put_body(br#"{"metric":"m","timestamp":1,"value":"1.5","tags":{"a":"b"}}"#),
            Ok(1)
        );
        assert_eq!(
            check_put_body(
                br#"[{"metric":"m","timestamp":"17","value":2,"tags":{"a":3}},{"metric":"m"}]"#
            ),
            Ok(1)
        );
        assert_eq!(check_put_body(b"  "), Err("Missing request content".into()));
        assert_eq!(
            check_put_body(b"[]"),
            Err("No datapoints found in content".into())
        );
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_bytes(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = check_put_body(&body);
        }

        #[test]
        fn never_panics_on_json_shapes(
            metric in "[a-z.]{0,4}",
            ts in proptest::prelude::prop_oneof!["-?[0-9]{1,20}", "\"[0-9a-z.]{0,6}\"", "1e9", "null", "true"],
            value in proptest::prelude::prop_oneof!["-?[0-9.eE+]{1,8}", "\"[0-9a-zA-Z.]{0,6}\"", "null", "\\[\\]"],
        ) {
            let body = format!(r#"{{"metric":"{metric}","timestamp":{ts},"value":{value},"tags":{{"h":"a"}}}}"#);
            let _ = check_put_body(body.as_bytes());
        }
    }
}
