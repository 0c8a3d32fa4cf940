//! `/api/query/exp`: OpenTSDB 2.4's expression queries. A JSON body names sub-queries
//! (`metrics`, each over a set of `filters`), arithmetic `expressions` over their ids
//! joined on tags (union or intersection), and the `outputs` to write; the answer is one
//! table per output, `dps` rows `[ts, v1, v2…]`, plus the validated query.
//!
//! Validation follows OpenTSDB's `Query.validate()` order and messages (answered 400);
//! where OpenTSDB 2.4.1 has bugs (nested expressions stepped without time alignment and
//! losing their fill policy, upper-case ids unusable, union gaps always 0, `x/0 == 0`),
//! this endpoint does what the API documents; a metric's `timeOffset`, which 2.4.1 checks
//! and ignores, reads that much earlier and moves the points forward. The README lists each
//! difference.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{RawQuery, State as Extract};
use axum::http::{Method, StatusCode};
use axum::response::Response;
use hourglass_core::time::{Tz, parse_duration_ms, parse_time_in, parse_timezone};
use hourglass_core::uid::UidKind;
use hourglass_engine::num::Num;
use hourglass_engine::query::aggregator::Aggregator;
use hourglass_engine::query::downsample::{DownsampleSpec, parse_duration};
use hourglass_engine::query::filter::TagFilter;
use hourglass_engine::query::plan::{GroupResult, SubQuery, run};
use serde_json::{Map, Value, json};

use super::ApiError;
use super::error::{CountedText, json_text_response};
use super::gexp::Uids;
use super::json::java_flag;
use super::query::{Flags, push_num, push_str_json, run_options};
use super::request::{blocking, url_params};
use crate::State;

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::bad_request(msg)
}

/// OpenTSDB's wrapped validation failure: the outer message, the cause as details.
fn wrapped(msg: impl Into<String>, cause: impl Into<String>) -> ApiError {
    bad(msg).with_details(cause)
}

fn refused(what: &str) -> ApiError {
    bad(format!("{what} is not implemented by this TSD"))
        .with_details(format!("remove {what} from the request"))
}

// ---------------------------------------------------------------------------------------
// The request

/// A string field: JSON strings as they are, numbers and booleans as their text (Jackson
/// coerces scalars), null or absent as `None`.
fn text(obj: &Value, key: &str) -> Option<String> {
    match obj.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A Java `boolean` field as Jackson fills it ([`java_flag`]: `"True"` and non-zero numbers
/// are true, `null` is false, `"TRUE"` refuses the body); `default` when absent.
fn flag(obj: &Value, key: &str, default: bool) -> Result<bool, ApiError> {
    match obj.get(key) {
        None => Ok(default),
        Some(v) => java_flag(v).ok_or_else(|| {
            bad("Unable to parse the given JSON").with_details(format!(
                "{key}: Cannot deserialize value of type `boolean` from {v}: \
                 only \"true\" or \"false\" recognized"
            ))
        }),
    }
}

fn list<'a>(obj: &'a Value, key: &str) -> Result<Option<&'a Vec<Value>>, ApiError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a)),
        Some(_) => {
            Err(bad("Unable to parse the given JSON")
                .with_details(format!("{key}: expected an array")))
        }
    }
}

/// OpenTSDB's `NumericFillPolicy`: the policy name (lower case) and its value.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Fill {
    policy: &'static str,
    value: f64,
}

impl Fill {
    const ZERO: Fill = Fill {
        policy: "zero",
        value: 0.0,
    };
    const NAN: Fill = Fill {
        policy: "nan",
        value: f64::NAN,
    };

    fn parse(v: &Value) -> Result<Fill, String> {
        let value = match v.get("value") {
            None | Some(Value::Null) => 0.0,
            Some(Value::Number(n)) => n.as_f64().unwrap_or(0.0),
            Some(Value::String(s)) => s
                .trim()
                .parse::<f64>()
                .map_err(|_| format!("Invalid fill policy value: {s}"))?,
            Some(other) => return Err(format!("Invalid fill policy value: {other}")),
        };
        let name = text(v, "policy");
        let nan_or_zero = value == 0.0 || value.is_nan();
        Ok(
            match name.as_deref().map(str::to_ascii_lowercase).as_deref() {
                None if value == 0.0 => Fill::ZERO,
                None if value.is_nan() => Fill::NAN,
                None => Fill {
                    policy: "scalar",
                    value,
                },
                Some(p @ ("none" | "nan")) if nan_or_zero => Fill {
                    policy: if p == "none" { "none" } else { "nan" },
                    value: f64::NAN,
                },
                Some("none" | "nan") => return Err("The value for NONE and NAN must be NaN".into()),
                Some("zero") if value == 0.0 => Fill::ZERO,
                Some("zero") => return Err("The value for ZERO must be 0".into()),
                Some("null") if nan_or_zero => Fill {
                    policy: "null",
                    value: f64::NAN,
                },
                Some("null") => return Err("The value for NULL must be 0".into()),
                Some("scalar") => Fill {
                    policy: "scalar",
                    value,
                },
                Some(_) => {
                    return Err(format!(
                        "Unrecognized fill policy: {}",
                        name.unwrap_or_default()
                    ));
                }
            },
        )
    }

    fn json(&self) -> Value {
        json!({"policy": self.policy, "value": num_json(self.value)})
    }
}

fn num_json(v: f64) -> Value {
    serde_json::Number::from_f64(v)
        .map(Value::Number)
        .unwrap_or_else(|| Value::String(hourglass_core::value::java_double_text(v)))
}

fn opt_fill(obj: &Value, key: &str) -> Result<Option<Fill>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => Fill::parse(v).map(Some),
    }
}

/// `Query.validateId`.
fn validate_id(id: Option<&str>, missing: &str) -> Result<(), String> {
    let id = id
        .filter(|i| !i.is_empty())
        .ok_or_else(|| missing.to_string())?;
    if let Some(c) = id.chars().find(|c| !c.is_alphanumeric()) {
        return Err(format!("Invalid id (\"{id}\"): illegal character: {c}"));
    }
    if id.chars().count() == 1 && id.chars().all(|c| c.is_ascii_digit()) {
        return Err("The ID cannot be an integer".into());
    }
    Ok(())
}

fn aggregator(name: &str) -> Result<Aggregator, String> {
    Aggregator::parse(&name.to_lowercase()).map_err(|_| "Invalid aggregator".to_string())
}

struct TagSpec {
    kind: String,
    tagk: String,
    filter: String,
    group_by: bool,
}

struct FilterSet {
    id: String,
    tags: Vec<TagSpec>,
    explicit: bool,
}

struct Metric {
    id: String,
    metric: String,
    filter: Option<String>,
    aggregator: Option<String>,
    fill: Option<Fill>,
    /// `timeOffset` as given, and in ms: the sub-query reads the range this much earlier
    /// and its points move forward by it.
    offset: Option<(String, i64)>,
}

/// A metric's `timeOffset`: a duration (`1h`, `1d`, `2w`), or the same followed by `-ago`
/// as OpenTSDB's date syntax writes it.
fn time_offset(text: &str) -> Result<i64, String> {
    let trimmed = text.trim();
    let duration = match trimmed.len().checked_sub(4) {
        Some(at) if trimmed.is_char_boundary(at) && trimmed[at..].eq_ignore_ascii_case("-ago") => {
            &trimmed[..at]
        }
        _ => trimmed,
    };
    parse_duration_ms(duration).map_err(|e| {
        format!("Invalid timeOffset (\"{text}\"): {e}; expected a duration such as 1h, 1d or 1w")
    })
}

struct Join {
    union: bool,
    use_query_tags: bool,
    include_agg_tags: bool,
}

struct Expr {
    id: String,
    text: String,
    join: Join,
    fill: Option<Fill>,
    ast: Node,
}

struct Output {
    id: String,
    alias: Option<String>,
}

struct Request {
    start: i64,
    end: i64,
    tz: Tz,
    aggregator: String,
    downsample: Option<(String, Option<Fill>)>,
    rate: bool,
    filters: Vec<FilterSet>,
    metrics: Vec<Metric>,
    exprs: Vec<Expr>,
    outputs: Vec<Output>,
    echo: Value,
}

fn parse_request(body: &Value, now_ms: i64, default_zone: Tz) -> Result<Request, ApiError> {
    if !body.is_object() {
        return Err(bad("Unable to parse the given JSON").with_details("expected an object"));
    }
    // 1-2. time
    let time = body
        .get("time")
        .filter(|t| !t.is_null())
        .ok_or_else(|| bad("missing time"))?;
    let invalid_time = |cause: String| wrapped("Invalid time", cause);
    let start_text = text(time, "start")
        .filter(|s| !s.is_empty())
        .ok_or_else(|| invalid_time("missing or empty start".into()))?;
    let tz_text = text(time, "timezone");
    // The zone given reads the dates and places calendar buckets; without one, dates are
    // read in the TSD's zone and buckets placed in UTC, as OpenTSDB does. OpenTSDB reads
    // the zone only where it needs it: for an absolute date (`Invalid timezone name: …`)
    // and for downsampling (checked below); a relative start with an unknown zone and no
    // downsampler is answered.
    let zone = tz_text
        .as_deref()
        .filter(|t| !t.is_empty())
        .map(|name| parse_timezone(name).map_err(|_| format!("Invalid timezone name: {name}")));
    let given = zone.as_ref().and_then(|z| z.as_ref().ok().copied());
    let (tz, dates) = (given.unwrap_or(Tz::UTC), given.unwrap_or(default_zone));
    let read_time = |t: &str| -> Result<i64, ApiError> {
        let at = parse_time_in(t, now_ms, dates).map_err(|e| invalid_time(e.to_string()))?;
        let lower = t.to_ascii_lowercase();
        let absolute =
            lower != "now" && !lower.ends_with("-ago") && (t.contains('/') || t.contains(':'));
        match &zone {
            Some(Err(e)) if absolute => Err(invalid_time(e.clone())),
            _ => Ok(at),
        }
    };
    let start = read_time(&start_text)?;
    let end_text = text(time, "end");
    let end = match end_text.as_deref().filter(|e| !e.is_empty()) {
        Some(e) => read_time(e)?,
        None => now_ms,
    };
    let mut echo_ds = Value::Null;
    let downsample = match time.get("downsampler").filter(|d| !d.is_null()) {
        None => None,
        Some(d) => {
            let interval = text(d, "interval")
                .filter(|i| !i.is_empty())
                .ok_or_else(|| invalid_time("Missing or empty interval".into()))?;
            parse_duration(&interval).map_err(|e| invalid_time(e.to_string()))?;
            let agg = text(d, "aggregator")
                .filter(|a| !a.is_empty())
                .ok_or_else(|| invalid_time("Missing or empty aggregator".into()))?;
            aggregator(&agg).map_err(invalid_time)?;
            let fill = opt_fill(d, "fillPolicy").map_err(invalid_time)?;
            echo_ds = json!({"interval": interval, "aggregator": agg,
                "fillPolicy": fill.map_or(Value::Null, |f| f.json())});
            Some((format!("{interval}-{}", agg.to_lowercase()), fill))
        }
    };
    let agg = text(time, "aggregator")
        .filter(|a| !a.is_empty())
        .ok_or_else(|| invalid_time("Missing or empty aggregator".into()))?;
    aggregator(&agg).map_err(invalid_time)?;
    let rate = flag(time, "rate", false)?;

    // 3. metrics
    let raw_metrics = list(body, "metrics")?
        .filter(|m| !m.is_empty())
        .ok_or_else(|| bad("missing or empty metrics"))?;
    let raw_filters = list(body, "filters")?;
    let raw_exprs = list(body, "expressions")?;
    let raw_outputs = list(body, "outputs")?;
    // 4-6. duplicates; a missing id is Java's `null`, so two of them are duplicates too
    let id_text = |id: &Option<String>| id.clone().unwrap_or_else(|| "null".into());
    let mut seen = BTreeSet::new();
    for m in raw_metrics {
        let id = text(m, "id");
        if !seen.insert(id.clone()) {
            return Err(bad(format!("duplicated metric id: {}", id_text(&id))));
        }
    }
    let mut filter_ids = BTreeSet::new();
    for f in raw_filters.into_iter().flatten() {
        let id = text(f, "id");
        if !filter_ids.insert(id.clone()) {
            return Err(bad(format!("duplicated filter id: {}", id_text(&id))));
        }
    }
    for e in raw_exprs.into_iter().flatten() {
        let id = text(e, "id");
        if !seen.insert(id.clone()) {
            return Err(bad(format!(
                "Duplicated variable or expression id: {}",
                id_text(&id)
            )));
        }
    }
    // 7. metrics
    let mut metrics = Vec::new();
    for (i, m) in raw_metrics.iter().enumerate() {
        let metric = (|| -> Result<Metric, String> {
            let name = text(m, "metric")
                .filter(|n| !n.is_empty())
                .ok_or("missing or empty metric")?;
            let id = text(m, "id");
            validate_id(id.as_deref(), "missing or empty id")?;
            let offset = match text(m, "timeOffset").filter(|o| !o.is_empty()) {
                Some(o) => {
                    let ms = time_offset(&o)?;
                    Some((o, ms))
                }
                None => None,
            };
            let agg = text(m, "aggregator");
            if let Some(a) = agg.as_deref().filter(|a| !a.is_empty()) {
                aggregator(a)?;
            }
            Ok(Metric {
                id: id.unwrap_or_default(),
                metric: name,
                filter: text(m, "filter").filter(|f| !f.is_empty()),
                aggregator: agg,
                fill: opt_fill(m, "fillPolicy")?,
                offset,
            })
        })()
        .map_err(|cause| wrapped(format!("Invalid metric at index {i}"), cause))?;
        metrics.push(metric);
    }
    // 8. filters
    let mut filters = Vec::new();
    for (i, f) in raw_filters.into_iter().flatten().enumerate() {
        let set = (|| -> Result<FilterSet, String> {
            let id = text(f, "id");
            validate_id(id.as_deref(), "Missing or empty id")?;
            let mut tags = Vec::new();
            for t in f
                .get("tags")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let kind = text(t, "type")
                    .filter(|k| !k.is_empty())
                    .ok_or("The filter type cannot be null or empty")?;
                let tagk = text(t, "tagk")
                    .filter(|k| !k.is_empty())
                    .ok_or("The tagk cannot be null or empty")?;
                // OpenTSDB looks the type up as written: `Wildcard` is no type.
                if kind != kind.to_ascii_lowercase() {
                    return Err(format!(
                        "Could not find a tag value filter of the type: {kind}"
                    ));
                }
                let filter = text(t, "filter").unwrap_or_default();
                // `groupBy` (the setter) and `group_by` (the field) fill one field: the later
                // key in the body wins, as Jackson reads them.
                let group_by_key = t
                    .as_object()
                    .and_then(|o| o.keys().rfind(|k| *k == "groupBy" || *k == "group_by"));
                let group_by = match group_by_key {
                    Some(key) => flag(t, key, false).map_err(|e| e.message)?,
                    None => false,
                };
                TagFilter::new(&kind, &tagk, &filter, group_by).map_err(|e| e.to_string())?;
                tags.push(TagSpec {
                    kind,
                    tagk,
                    filter,
                    group_by,
                });
            }
            Ok(FilterSet {
                id: id.unwrap_or_default(),
                tags,
                explicit: flag(f, "explicitTags", false).map_err(|e| e.message)?,
            })
        })()
        .map_err(|cause| wrapped(format!("Invalid filter at index {i}"), cause))?;
        filters.push(set);
    }
    // 9. expressions
    let mut exprs = Vec::new();
    for (i, e) in raw_exprs.into_iter().flatten().enumerate() {
        let at = |cause: String| wrapped(format!("Invalid expression at index {i}"), cause);
        let id = text(e, "id");
        validate_id(id.as_deref(), "missing or empty id").map_err(at)?;
        let expr_text = text(e, "expr")
            .filter(|x| !x.is_empty())
            .ok_or_else(|| at("missing or empty expr".into()))?;
        let ast = Parser::parse(&expr_text)?;
        let join = match e.get("join").filter(|j| !j.is_null()) {
            None => Join {
                union: true,
                use_query_tags: false,
                include_agg_tags: true,
            },
            Some(j) => Join {
                union: match text(j, "operator").map(|o| o.to_lowercase()).as_deref() {
                    Some("union") => true,
                    Some("intersection") => false,
                    Some(_) => {
                        return Err(bad(format!(
                            "Unrecognized set operator: {}",
                            text(j, "operator").unwrap_or_default()
                        )));
                    }
                    None => return Err(bad("The set operator cannot be null")),
                },
                use_query_tags: flag(j, "useQueryTags", false)?,
                include_agg_tags: flag(j, "includeAggTags", true)?,
            },
        };
        exprs.push(Expr {
            id: id.unwrap_or_default(),
            text: expr_text,
            join,
            fill: opt_fill(e, "fillPolicy").map_err(at)?,
            ast,
        });
    }
    // 10. filter references
    for m in &metrics {
        if let Some(f) = &m.filter
            && !filters.iter().any(|s| &s.id == f)
        {
            return Err(if raw_filters.is_some() {
                bad(format!("unrecognized filter id {f} in metric {}", m.id))
            } else {
                bad(format!("No filter defined: {f}"))
            });
        }
    }
    // 11. variables
    for e in &exprs {
        let mut vars = Vec::new();
        e.ast.variables(&mut vars);
        for v in &vars {
            if !metrics.iter().any(|m| &m.id == v) && !exprs.iter().any(|x| &x.id == v) {
                return Err(bad(format!(
                    "Expression [{}] was missing input {v}",
                    e.text
                )));
            }
        }
        if vars.is_empty() {
            return Err(bad("The expression didn't appear to have any variables")
                .with_details(format!("expression {}: {}", e.id, e.text)));
        }
    }
    // Cycles, checked before any data is read.
    let mut checked = BTreeMap::new();
    for e in &exprs {
        check_cycles(&e.id, &exprs, &mut Vec::new(), &mut checked)?;
    }
    if end <= start {
        return Err(bad(format!(
            "End time [{end}] must be greater than the start time [{start}]"
        )));
    }
    if downsample.is_some() && matches!(zone, Some(Err(_))) {
        return Err(bad("The timezone specification could not be found"));
    }
    let mut outputs = Vec::new();
    for o in raw_outputs.into_iter().flatten() {
        let id = text(o, "id").unwrap_or_default();
        if !metrics.iter().any(|m| m.id == id) && !exprs.iter().any(|x| x.id == id) {
            return Err(bad(format!(
                "Output id {id} is neither a metric nor an expression id"
            )));
        }
        outputs.push(Output {
            id,
            alias: text(o, "alias"),
        });
    }

    let echo = json!({
        "name": text(body, "name"),
        "time": {"start": start_text, "end": end_text, "timezone": tz_text,
            "downsampler": echo_ds, "aggregator": agg, "rate": rate},
        "filters": raw_filters.map(|_| filters.iter().map(|f| json!({
            "id": f.id,
            "tags": f.tags.iter().map(|t| json!({"tagk": t.tagk, "filter": t.filter,
                "group_by": t.group_by, "type": t.kind})).collect::<Vec<_>>(),
            "explicitTags": f.explicit})).collect::<Vec<_>>()),
        // `filter` and `timeOffset` as sent: an empty one is echoed empty, not null.
        "metrics": metrics.iter().zip(raw_metrics).map(|(m, raw)| json!({"metric": m.metric,
            "id": m.id, "filter": text(raw, "filter"), "aggregator": m.aggregator,
            "timeOffset": text(raw, "timeOffset"),
            "fillPolicy": m.fill.map_or(Value::Null, |f| f.json())})).collect::<Vec<_>>(),
        "expressions": raw_exprs.map(|_| exprs.iter().map(|e| json!({"id": e.id,
            "expr": e.text, "join": {"operator": if e.join.union { "union" } else { "intersection" },
            "useQueryTags": e.join.use_query_tags, "includeAggTags": e.join.include_agg_tags},
            "fillPolicy": e.fill.map_or(Value::Null, |f| f.json())})).collect::<Vec<_>>()),
        "outputs": raw_outputs.map(|_| outputs.iter().map(|o| json!({"id": o.id,
            "alias": o.alias})).collect::<Vec<_>>()),
    });
    Ok(Request {
        start,
        end,
        tz,
        aggregator: agg,
        downsample,
        rate,
        filters,
        metrics,
        exprs,
        outputs,
        echo,
    })
}

/// Refuses a cycle through `id`, and expressions nested deeper than [`MAX_NESTING`];
/// `checked` holds the depth of the ids already known to reach no cycle (metrics: 0).
fn check_cycles(
    id: &str,
    exprs: &[Expr],
    path: &mut Vec<String>,
    checked: &mut BTreeMap<String, usize>,
) -> Result<usize, ApiError> {
    if let Some(&depth) = checked.get(id) {
        return Ok(depth);
    }
    let Some(e) = exprs.iter().find(|e| e.id == id) else {
        return Ok(0);
    };
    let mut vars = Vec::new();
    e.ast.variables(&mut vars);
    if vars.iter().any(|v| v == id) {
        return Err(bad(format!("Self referencing expression found: {id}")));
    }
    if path.iter().any(|p| p == id) {
        return Err(bad(format!("Circular reference found: {id}")));
    }
    if path.len() >= MAX_NESTING {
        return Err(bad(format!(
            "Expressions nest more than {MAX_NESTING} deep at: {id}"
        )));
    }
    path.push(id.to_string());
    let mut depth = 1;
    for v in &vars {
        depth = depth.max(1 + check_cycles(v, exprs, path, checked)?);
    }
    path.pop();
    if depth > MAX_NESTING {
        return Err(bad(format!(
            "Expressions nest more than {MAX_NESTING} deep at: {id}"
        )));
    }
    checked.insert(id.to_string(), depth);
    Ok(depth)
}

// ---------------------------------------------------------------------------------------
// Expressions: JEXL's arithmetic, comparisons, logic and conditional over doubles

#[derive(Debug, Clone)]
enum Node {
    Num(f64),
    Var(String),
    Neg(Box<Node>),
    Not(Box<Node>),
    Bin(Op, Box<Node>, Box<Node>),
    Cond(Box<Node>, Box<Node>, Box<Node>),
    /// JEXL's `c ?: b`: `c` where it is true, else `b`.
    Elvis(Box<Node>, Box<Node>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    And,
    Or,
}

impl Node {
    fn variables(&self, out: &mut Vec<String>) {
        match self {
            Node::Num(_) => {}
            Node::Var(v) => {
                if !out.contains(v) {
                    out.push(v.clone());
                }
            }
            Node::Neg(a) | Node::Not(a) => a.variables(out),
            Node::Bin(_, a, b) | Node::Elvis(a, b) => {
                a.variables(out);
                b.variables(out);
            }
            Node::Cond(a, b, c) => {
                a.variables(out);
                b.variables(out);
                c.variables(out);
            }
        }
    }

    /// The value over one row, `vars` giving each variable's.
    #[cfg(test)]
    fn eval(&self, vars: &dyn Fn(&str) -> f64) -> f64 {
        match self {
            Node::Num(n) => *n,
            Node::Var(v) => vars(v),
            Node::Neg(a) => -a.eval(vars),
            Node::Not(a) => bool_num(!truth(a.eval(vars))),
            Node::Cond(c, a, b) => {
                if truth(c.eval(vars)) {
                    a.eval(vars)
                } else {
                    b.eval(vars)
                }
            }
            Node::Bin(op, a, b) => op.apply(a.eval(vars), b.eval(vars)),
            Node::Elvis(c, b) => {
                let c = c.eval(vars);
                if truth(c) { c } else { b.eval(vars) }
            }
        }
    }

    /// The values over `rows` rows at once, `column` giving each variable's (one value per
    /// row). Each row's value is exactly what `Node::eval` (the tests' reference) gives for
    /// it: the operations are the same, and computing both sides of `&&`, `||` and `?:`
    /// changes nothing but time.
    fn eval_rows<'a>(&self, rows: usize, column: &dyn Fn(&str) -> &'a [f64]) -> Vec<f64> {
        match self {
            Node::Num(n) => vec![*n; rows],
            Node::Var(v) => {
                let mut values = column(v).to_vec();
                values.resize(rows, f64::NAN);
                values
            }
            Node::Neg(a) => {
                let mut x = a.eval_rows(rows, column);
                x.iter_mut().for_each(|v| *v = -*v);
                x
            }
            Node::Not(a) => {
                let mut x = a.eval_rows(rows, column);
                x.iter_mut().for_each(|v| *v = bool_num(!truth(*v)));
                x
            }
            Node::Cond(c, a, b) => {
                let mut c = c.eval_rows(rows, column);
                let a = a.eval_rows(rows, column);
                let b = b.eval_rows(rows, column);
                for ((v, a), b) in c.iter_mut().zip(a).zip(b) {
                    *v = if truth(*v) { a } else { b };
                }
                c
            }
            Node::Elvis(c, b) => {
                let mut c = c.eval_rows(rows, column);
                let b = b.eval_rows(rows, column);
                for (v, b) in c.iter_mut().zip(b) {
                    if !truth(*v) {
                        *v = b;
                    }
                }
                c
            }
            Node::Bin(op, a, b) => {
                let mut x = a.eval_rows(rows, column);
                let y = b.eval_rows(rows, column);
                // One loop per operator, so each compiles to a tight (vectorisable) loop.
                macro_rules! each {
                    ($f:expr) => {
                        x.iter_mut().zip(y).for_each(|(x, y)| *x = $f(*x, y))
                    };
                }
                match op {
                    Op::Add => each!(|x, y| x + y),
                    Op::Sub => each!(|x, y| x - y),
                    Op::Mul => each!(|x, y| x * y),
                    Op::Div => each!(|x, y| x / y),
                    other => each!(|x, y| other.apply(x, y)),
                }
                x
            }
        }
    }
}

/// JEXL 2.1's order of two doubles (`JexlArithmetic.compare`, which `== != < <= > >=` all
/// use): NaN below every number and equal to NaN, `-0.0` equal to `0.0`. So where a fill
/// policy lets a NaN into an expression, `a < 5` is 1 and `a == b` is 1 when both are NaN,
/// as in OpenTSDB.
fn jexl_compare(x: f64, y: f64) -> std::cmp::Ordering {
    use std::cmp::Ordering::{Equal, Greater, Less};
    match (x.is_nan(), y.is_nan()) {
        (true, true) => Equal,
        (true, false) => Less,
        (false, true) => Greater,
        _ if x < y => Less,
        _ if x > y => Greater,
        _ => Equal,
    }
}

/// JEXL's truth of a double: neither 0 nor NaN.
fn truth(v: f64) -> bool {
    v != 0.0 && !v.is_nan()
}

fn bool_num(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

impl Op {
    /// The operator over two doubles.
    fn apply(self, x: f64, y: f64) -> f64 {
        match self {
            Op::Add => x + y,
            Op::Sub => x - y,
            Op::Mul => x * y,
            Op::Div => x / y,
            Op::Rem => x % y,
            Op::Lt => bool_num(jexl_compare(x, y).is_lt()),
            Op::Le => bool_num(jexl_compare(x, y).is_le()),
            Op::Gt => bool_num(jexl_compare(x, y).is_gt()),
            Op::Ge => bool_num(jexl_compare(x, y).is_ge()),
            Op::Eq => bool_num(jexl_compare(x, y).is_eq()),
            Op::Ne => bool_num(jexl_compare(x, y).is_ne()),
            Op::And => bool_num(truth(x) && truth(y)),
            Op::Or => bool_num(truth(x) || truth(y)),
        }
    }
}

/// A number literal as JEXL 2.1 reads one at the start of `text` (which starts with a
/// digit), and its length: a decimal (`12`), octal (`010` is 8) or hexadecimal (`0x1F`)
/// integer with an optional `l`/`h` suffix, or `<digits>.<digits>` with an optional exponent
/// (`1.5e3`) and `d`/`f`/`b` suffix. `None` where JEXL reads two literals in a row (`08`).
/// Values are doubles (JEXL's `1/2` is integer division; see the README).
fn number_literal(text: &[u8]) -> Option<(f64, usize)> {
    let run = |from: usize, ok: fn(&u8) -> bool| {
        from + text
            .get(from..)
            .map_or(0, |t| t.iter().take_while(|c| ok(c)).count())
    };
    let suffix = |at: usize, suffixes: &[u8]| {
        at + usize::from(text.get(at).is_some_and(|c| suffixes.contains(c)))
    };
    let digits = run(0, u8::is_ascii_digit);
    if text.get(digits) == Some(&b'.') && text.get(digits + 1).is_some_and(u8::is_ascii_digit) {
        let mut end = run(digits + 1, u8::is_ascii_digit);
        if matches!(text.get(end), Some(b'e' | b'E')) {
            let sign = end + 1 + usize::from(matches!(text.get(end + 1), Some(b'+' | b'-')));
            let exponent = run(sign, u8::is_ascii_digit);
            if exponent > sign {
                end = exponent;
            }
        }
        let value = std::str::from_utf8(text.get(..end)?).ok()?.parse().ok()?;
        return Some((value, suffix(end, b"dDfFbB")));
    }
    let (value, end) = if text.first() == Some(&b'0')
        && matches!(text.get(1), Some(b'x' | b'X'))
        && text.get(2).is_some_and(u8::is_ascii_hexdigit)
    {
        let end = run(2, u8::is_ascii_hexdigit);
        let value = text.get(2..end)?.iter().fold(0.0, |v, c| {
            v * 16.0 + f64::from(char::from(*c).to_digit(16).unwrap_or(0))
        });
        (value, end)
    } else if text.first() == Some(&b'0') {
        let end = run(1, |c| (b'0'..=b'7').contains(c));
        if text.get(end).is_some_and(u8::is_ascii_digit) {
            return None;
        }
        let value = text
            .get(1..end)?
            .iter()
            .fold(0.0, |v, c| v * 8.0 + f64::from(c - b'0'));
        (value, end)
    } else {
        let value = std::str::from_utf8(text.get(..digits)?)
            .ok()?
            .parse()
            .ok()?;
        (value, digits)
    };
    Some((value, suffix(end, b"lLhH")))
}

/// The most operations and values an expression may hold, and the deepest nesting of
/// parentheses, signs and conditionals: evaluation recurses over the tree.
const MAX_NODES: usize = 1000;
const MAX_NESTING: usize = 64;

struct Parser<'a> {
    text: &'a str,
    pos: usize,
    nodes: usize,
    nesting: usize,
}

impl Parser<'_> {
    fn parse(text: &str) -> Result<Node, ApiError> {
        let mut p = Parser {
            text,
            pos: 0,
            nodes: 0,
            nesting: 0,
        };
        let node = p.cond()?;
        p.skip();
        if p.pos < text.len() {
            return Err(p.error());
        }
        Ok(node)
    }

    fn error(&self) -> ApiError {
        let what = self.text[self.pos..]
            .chars()
            .next()
            .map_or_else(|| "the end".to_string(), |c| format!("'{c}'"));
        bad(format!("parsing error in '{}'", self.text)).with_details(format!(
            "unexpected {what} at position {}; expressions take numbers, ids, \
             + - * / %, comparisons, && || !, ?: and parentheses",
            self.pos
        ))
    }

    fn skip(&mut self) {
        while self.text[self.pos..].starts_with(char::is_whitespace) {
            self.pos += self.text[self.pos..]
                .chars()
                .next()
                .map_or(1, char::len_utf8);
        }
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip();
        if self.text[self.pos..].starts_with(token) {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    /// Counts one more node, refusing expressions too large to evaluate safely.
    fn grow(&mut self) -> Result<(), ApiError> {
        self.nodes += 1;
        if self.nodes > MAX_NODES || self.nesting > MAX_NESTING {
            return Err(
                bad(format!("parsing error in '{}'", self.text)).with_details(format!(
                    "expressions hold at most {MAX_NODES} values and operators, \
                     nested at most {MAX_NESTING} deep"
                )),
            );
        }
        Ok(())
    }

    /// Parses what `f` reads one nesting level deeper.
    fn nested(&mut self, f: fn(&mut Self) -> Result<Node, ApiError>) -> Result<Node, ApiError> {
        self.nesting += 1;
        self.grow()?;
        let n = f(self);
        self.nesting -= 1;
        n
    }

    fn cond(&mut self) -> Result<Node, ApiError> {
        let c = self.or()?;
        if self.eat("?:") {
            let b = self.nested(Self::cond)?;
            return Ok(Node::Elvis(Box::new(c), Box::new(b)));
        }
        if self.eat("?") {
            let a = self.nested(Self::cond)?;
            if !self.eat(":") {
                return Err(self.error());
            }
            let b = self.nested(Self::cond)?;
            return Ok(Node::Cond(Box::new(c), Box::new(a), Box::new(b)));
        }
        Ok(c)
    }

    fn binary(
        &mut self,
        ops: &[(&str, Op)],
        next: fn(&mut Self) -> Result<Node, ApiError>,
    ) -> Result<Node, ApiError> {
        let mut left = next(self)?;
        'outer: loop {
            for (token, op) in ops {
                if self.eat(token) {
                    self.grow()?;
                    let right = next(self)?;
                    left = Node::Bin(*op, Box::new(left), Box::new(right));
                    continue 'outer;
                }
            }
            return Ok(left);
        }
    }

    fn or(&mut self) -> Result<Node, ApiError> {
        self.binary(&[("||", Op::Or)], Self::and)
    }

    fn and(&mut self) -> Result<Node, ApiError> {
        self.binary(&[("&&", Op::And)], Self::equality)
    }

    fn equality(&mut self) -> Result<Node, ApiError> {
        self.binary(&[("==", Op::Eq), ("!=", Op::Ne)], Self::relation)
    }

    fn relation(&mut self) -> Result<Node, ApiError> {
        self.binary(
            &[("<=", Op::Le), (">=", Op::Ge), ("<", Op::Lt), (">", Op::Gt)],
            Self::sum,
        )
    }

    fn sum(&mut self) -> Result<Node, ApiError> {
        self.binary(&[("+", Op::Add), ("-", Op::Sub)], Self::product)
    }

    fn product(&mut self) -> Result<Node, ApiError> {
        self.binary(
            &[("*", Op::Mul), ("/", Op::Div), ("%", Op::Rem)],
            Self::unary,
        )
    }

    fn unary(&mut self) -> Result<Node, ApiError> {
        if self.eat("-") {
            return Ok(Node::Neg(Box::new(self.nested(Self::unary)?)));
        }
        if self.eat("!") {
            return Ok(Node::Not(Box::new(self.nested(Self::unary)?)));
        }
        if self.eat("(") {
            let n = self.nested(Self::cond)?;
            if !self.eat(")") {
                return Err(self.error());
            }
            return Ok(n);
        }
        self.grow()?;
        self.skip();
        let rest = &self.text[self.pos..];
        let first = rest.chars().next().ok_or_else(|| self.error())?;
        if first.is_ascii_digit() {
            let (n, len) = number_literal(rest.as_bytes()).ok_or_else(|| self.error())?;
            self.pos += len;
            return Ok(Node::Num(n));
        }
        if first.is_alphabetic() || first == '_' || first == '$' {
            let len = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
                .unwrap_or(rest.len());
            let word = &rest[..len];
            if matches!(
                word,
                "or" | "and"
                    | "eq"
                    | "ne"
                    | "lt"
                    | "gt"
                    | "le"
                    | "ge"
                    | "div"
                    | "mod"
                    | "not"
                    | "null"
                    | "true"
                    | "false"
                    | "new"
                    | "empty"
                    | "size"
            ) {
                return Err(
                    bad(format!("parsing error in '{}'", self.text)).with_details(format!(
                        "the JEXL word '{word}' is not implemented by this TSD; use its operator"
                    )),
                );
            }
            self.pos += len;
            return Ok(Node::Var(word.to_string()));
        }
        Err(self.error())
    }
}

// ---------------------------------------------------------------------------------------
// Evaluation

/// One series of a variable or result: its points as two columns, `times` (ms, strictly
/// increasing; the series of one expression share one vector) and `values`.
#[derive(Debug)]
struct Series {
    tags: BTreeMap<String, String>,
    agg_tags: Vec<String>,
    metrics: BTreeSet<String>,
    times: Arc<Vec<i64>>,
    values: Vec<f64>,
}

/// Reads a series' values at increasing times, one pass over its points.
struct Cursor<'a> {
    series: &'a Series,
    at: usize,
}

impl<'a> Cursor<'a> {
    fn new(series: &'a Series) -> Self {
        Cursor { series, at: 0 }
    }

    /// The value at `t`, if the series has a point there; `t` may not go back.
    fn value(&mut self, t: i64) -> Option<f64> {
        let times = &self.series.times;
        while self.at < times.len() && times[self.at] < t {
            self.at += 1;
        }
        match times.get(self.at) {
            Some(&u) if u == t => self.series.values.get(self.at).copied(),
            _ => None,
        }
    }
}

/// The sorted union of sorted time columns: one of them when they are all equal (the usual
/// case: series downsampled alike), else merged.
fn union_times(columns: &[&Arc<Vec<i64>>]) -> Arc<Vec<i64>> {
    let Some(&first) = columns.first() else {
        return Arc::new(Vec::new());
    };
    let mut distinct: Vec<&Arc<Vec<i64>>> = vec![first];
    for &c in &columns[1..] {
        // Comparing with the last distinct few finds repeats cheaply; the rest is merged.
        let seen = distinct
            .iter()
            .rev()
            .take(4)
            .any(|d| Arc::ptr_eq(d, c) || d[..] == c[..]);
        if !seen {
            distinct.push(c);
        }
    }
    match distinct[..] {
        [only] => Arc::clone(only),
        [a, b] => {
            let mut out = Vec::with_capacity(a.len().max(b.len()));
            let (mut i, mut j) = (0, 0);
            while i < a.len() && j < b.len() {
                let t = a[i].min(b[j]);
                out.push(t);
                i += usize::from(a[i] == t);
                j += usize::from(b[j] == t);
            }
            out.extend_from_slice(&a[i..]);
            out.extend_from_slice(&b[j..]);
            Arc::new(out)
        }
        _ => {
            let mut all: Vec<i64> = distinct.iter().flat_map(|c| c.iter().copied()).collect();
            all.sort_unstable();
            all.dedup();
            Arc::new(all)
        }
    }
}

/// A variable's or an expression's series, and what fills its gaps.
#[derive(Debug)]
struct Set {
    series: Vec<Series>,
    fill: f64,
    /// The tag keys named by the metric's filters (`None` for expressions and unfiltered
    /// metrics), what `useQueryTags` joins on.
    query_tagks: Option<BTreeSet<String>>,
}

/// A join key: OpenTSDB's flattened key as UIDs (tag key and value UIDs in tag key UID
/// order, then the aggregated tag keys' UIDs in order), which orders the output series as
/// OpenTSDB's byte-ordered map does; then the same by names, which is what tells keys apart.
type Key = (Vec<u64>, (Vec<(String, String)>, Vec<String>));

fn join_key(s: &Series, set: &Set, join: &Join, uids: &mut Uids<'_>) -> Key {
    if s.tags.is_empty() {
        return (Vec::new(), (Vec::new(), Vec::new()));
    }
    let tags: Vec<(String, String)> = s
        .tags
        .iter()
        .filter(|(k, _)| {
            !join.use_query_tags || set.query_tagks.as_ref().is_some_and(|q| q.contains(*k))
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut agg = if join.include_agg_tags {
        s.agg_tags.clone()
    } else {
        Vec::new()
    };
    agg.sort();
    let uid =
        |uids: &mut Uids<'_>, kind, name: &str| uids.get(kind, name).map_or(u64::MAX, |u| u.0);
    let mut pairs: Vec<(u64, u64)> = tags
        .iter()
        .map(|(k, v)| {
            (
                uid(uids, UidKind::TagKey, k),
                uid(uids, UidKind::TagValue, v),
            )
        })
        .collect();
    pairs.sort_unstable();
    let mut agg_uids: Vec<u64> = agg.iter().map(|k| uid(uids, UidKind::TagKey, k)).collect();
    agg_uids.sort_unstable();
    let mut flat: Vec<u64> = pairs.into_iter().flat_map(|(k, v)| [k, v]).collect();
    flat.extend(agg_uids);
    (flat, (tags, agg))
}

/// Tag keys in UID order (OpenTSDB's order of aggregated tags).
fn in_uid_order(keys: impl IntoIterator<Item = String>, uids: &mut Uids<'_>) -> Vec<String> {
    let mut keyed: Vec<(u64, String)> = keys
        .into_iter()
        .map(|k| (uids.get(UidKind::TagKey, &k).map_or(u64::MAX, |u| u.0), k))
        .collect();
    keyed.sort();
    keyed.into_iter().map(|(_, k)| k).collect()
}

fn evaluate(
    e: &Expr,
    exprs: &[Expr],
    metric_sets: &HashMap<String, Arc<Set>>,
    done: &mut HashMap<String, Arc<Set>>,
    uids: &mut Uids<'_>,
) -> Result<Arc<Set>, ApiError> {
    if let Some(s) = done.get(&e.id) {
        return Ok(Arc::clone(s));
    }
    let mut names = Vec::new();
    e.ast.variables(&mut names);
    let mut inputs: Vec<Arc<Set>> = Vec::new();
    for v in &names {
        let set = match metric_sets.get(v) {
            Some(s) => Arc::clone(s),
            None => {
                let child = exprs
                    .iter()
                    .find(|x| &x.id == v)
                    .ok_or_else(|| bad(format!("Missing results for variable {v}")))?;
                evaluate(child, exprs, metric_sets, done, uids)?
            }
        };
        inputs.push(set);
    }
    // The join: each key, the series of each variable under it.
    let mut keyed: BTreeMap<Key, Vec<Option<usize>>> = BTreeMap::new();
    for (i, set) in inputs.iter().enumerate() {
        for (j, s) in set.series.iter().enumerate() {
            keyed
                .entry(join_key(s, set, &e.join, uids))
                .or_insert_with(|| vec![None; inputs.len()])[i] = Some(j);
        }
    }
    if !e.join.union {
        let any = inputs.iter().any(|s| !s.series.is_empty());
        keyed.retain(|_, slots| slots.iter().all(Option::is_some));
        if any && keyed.is_empty() {
            return Err(
                bad(format!("No intersections found: {}", e.text)).with_details(format!(
                    "expression {}: no tag set is common to all of {names:?}",
                    e.id
                )),
            );
        }
    }
    let joined = |slots: &[Option<usize>]| -> Vec<(usize, &Series)> {
        slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.and_then(|j| inputs[i].series.get(j)).map(|s| (i, s)))
            .collect()
    };
    let columns: Vec<&Arc<Vec<i64>>> = keyed
        .values()
        .flat_map(|slots| joined(slots))
        .map(|(_, s)| &s.times)
        .collect();
    let times = union_times(&columns);
    let fill = e.fill.map_or(f64::NAN, |f| f.value);
    let mut series = Vec::with_capacity(keyed.len());
    // Each variable's values at every row of one joined series: its points, a NaN or a
    // missing point counting as the variable's fill value.
    let mut values: Vec<Vec<f64>> = vec![Vec::new(); inputs.len()];
    for slots in keyed.values() {
        let present = joined(slots);
        for (i, column) in values.iter_mut().enumerate() {
            let set_fill = inputs[i].fill;
            column.clear();
            match present.iter().find(|(k, _)| *k == i) {
                Some((_, s)) => {
                    let mut cursor = Cursor::new(s);
                    column.extend(times.iter().map(|&t| match cursor.value(t) {
                        Some(v) if !v.is_nan() => v,
                        _ => set_fill,
                    }));
                }
                None => column.resize(times.len(), set_fill),
            }
        }
        let Some(&(_, first)) = present.first() else {
            continue;
        };
        let mut tags = first.tags.clone();
        let mut agg: BTreeSet<String> = BTreeSet::new();
        for (_, s) in &present {
            agg.extend(s.agg_tags.iter().cloned());
            for (k, v) in &s.tags {
                if tags.get(k) != Some(v) {
                    agg.insert(k.clone());
                }
            }
            tags.retain(|k, v| s.tags.get(k) == Some(v));
        }
        agg.retain(|k| !tags.contains_key(k));
        let column = |name: &str| variable_column(&names, &values, name);
        series.push(Series {
            tags,
            agg_tags: in_uid_order(agg, uids),
            metrics: present
                .iter()
                .flat_map(|(_, s)| s.metrics.iter().cloned())
                .collect(),
            values: e.ast.eval_rows(times.len(), &column),
            times: Arc::clone(&times),
        });
    }
    let set = Arc::new(Set {
        series,
        fill,
        query_tagks: None,
    });
    done.insert(e.id.clone(), Arc::clone(&set));
    Ok(set)
}

/// The values of the variable `name` among `names`, whose values are `values` in that order.
fn variable_column<'a>(names: &[String], values: &'a [Vec<f64>], name: &str) -> &'a [f64] {
    names
        .iter()
        .position(|n| n == name)
        .and_then(|i| values.get(i))
        .map_or(&[], Vec::as_slice)
}

fn sub_query(req: &Request, m: &Metric) -> Result<SubQuery, ApiError> {
    let agg_name = match m.aggregator.as_deref() {
        Some("") => return Err(bad("Missing the aggregation function")),
        Some(a) => a.to_lowercase(),
        None => req.aggregator.to_lowercase(),
    };
    let agg = Aggregator::parse(&agg_name)
        .map_err(|_| bad(format!("No such aggregation function: {agg_name}")))?;
    let mut q = SubQuery::new(agg, &m.metric);
    if let Some(f) = &m.filter
        && let Some(set) = req.filters.iter().find(|s| &s.id == f)
    {
        for t in &set.tags {
            q.filters.push(
                TagFilter::new(&t.kind, &t.tagk, &t.filter, t.group_by)
                    .map_err(|e| bad(e.to_string()))?,
            );
        }
        q.explicit_tags = set.explicit;
    }
    if let Some((spec, fill)) = &req.downsample {
        let text = match fill {
            None => spec.clone(),
            Some(f) if f.policy == "scalar" => {
                return Err(refused("the downsampler's scalar fillPolicy"));
            }
            Some(f) => format!("{spec}-{}", f.policy),
        };
        let ds = DownsampleSpec::parse(&text)
            .and_then(|d| d.in_zone(req.tz, false))
            .map_err(|e| bad(e.to_string()))?;
        q.downsample = Some(ds);
        q.downsample_text = Some(text);
    }
    q.rate = req.rate;
    Ok(q)
}

/// A metric's series, their points moved forward by its `timeOffset` (`offset` ms).
fn metric_set(m: &Metric, q: &SubQuery, groups: Vec<GroupResult>, offset: i64) -> Set {
    let tagks: BTreeSet<String> = q.filters.iter().map(|f| f.tagk.clone()).collect();
    Set {
        series: groups
            .into_iter()
            .map(|g| {
                let mut dps: Vec<(i64, f64)> = g
                    .dps
                    .iter()
                    .map(|&(t, v)| (t.saturating_add(offset), v.as_f64()))
                    .collect();
                if !dps.windows(2).all(|w| w[0].0 < w[1].0) {
                    // Time order, one point per time (the last), as the cursors read them.
                    dps.sort_by_key(|&(t, _)| t);
                    dps.reverse();
                    dps.dedup_by_key(|&mut (t, _)| t);
                    dps.reverse();
                }
                Series {
                    tags: g.tags,
                    agg_tags: g.aggregate_tags,
                    metrics: BTreeSet::from([g.metric]),
                    times: Arc::new(dps.iter().map(|&(t, _)| t).collect()),
                    values: dps.iter().map(|&(_, v)| v).collect(),
                }
            })
            .collect(),
        fill: m.fill.map_or(0.0, |f| f.value),
        query_tagks: (!tagks.is_empty()).then_some(tagks),
    }
}

/// One output object, keys in OpenTSDB's order; a series without a point at a row writes
/// `fill`.
fn write_output(out: &mut String, o: &Output, set: &Set, fill: f64, start: i64, end: i64) {
    let columns: Vec<&Arc<Vec<i64>>> = set.series.iter().map(|s| &s.times).collect();
    let all = union_times(&columns);
    let times = all
        .get(all.partition_point(|&t| t < start)..all.partition_point(|&t| t <= end))
        .unwrap_or(&[]);
    out.push_str("{\"id\":");
    push_str_json(out, &o.id);
    if let Some(alias) = &o.alias {
        out.push_str(",\"alias\":");
        push_str_json(out, alias);
    }
    out.push_str(",\"dps\":[");
    let mut cursors: Vec<Cursor> = set.series.iter().map(Cursor::new).collect();
    for (n, &t) in times.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        out.push('[');
        out.push_str(itoa::Buffer::new().format(t));
        for c in &mut cursors {
            out.push(',');
            push_num(out, Num::Float(c.value(t).unwrap_or(fill)), false);
        }
        out.push(']');
    }
    out.push(']');
    let meta = json!({
        "firstTimestamp": times.first().copied().unwrap_or(0),
        "lastTimestamp": times.last().copied().unwrap_or(0),
        "setCount": times.len(),
        "series": set.series.len(),
    });
    out.push_str(",\"dpsMeta\":");
    out.push_str(&meta.to_string());
    if !set.series.is_empty() {
        let mut rows = vec![json!({"index": 0, "metrics": ["timestamp"]})];
        for (i, s) in set.series.iter().enumerate() {
            let mut row = Map::new();
            row.insert("index".into(), json!(i + 1));
            row.insert("metrics".into(), json!(s.metrics));
            row.insert("commonTags".into(), json!(s.tags));
            row.insert("aggregatedTags".into(), json!(s.agg_tags));
            rows.push(Value::Object(row));
        }
        out.push_str(",\"meta\":");
        out.push_str(&Value::Array(rows).to_string());
    }
    out.push('}');
}

// ---------------------------------------------------------------------------------------
// The endpoint

pub(crate) async fn handle(
    method: Method,
    RawQuery(raw): RawQuery,
    Extract(state): Extract<Arc<State>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    match method {
        Method::GET | Method::POST => {}
        Method::DELETE if !state.settings.allow_delete => {
            return Err(bad("Bad request")
                .with_details("Deleting data is not enabled (tsd.http.query.allow_delete=false)"));
        }
        Method::DELETE => {}
        other => return Err(ApiError::method_not_allowed(&other)),
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(bad("Incoming data was null or empty"));
    }
    let value: Value = super::json::from_slice(&body)
        .map_err(|e| bad("Unable to parse the given JSON").with_details(e.to_string()))?;
    let now_ms = hourglass_storage::now_ms();
    let req = parse_request(&value, now_ms, state.settings.timezone)?;
    let params = url_params(raw.as_deref());
    let flags = Flags::from_url(&params);
    let queries = req
        .metrics
        .iter()
        .map(|m| sub_query(&req, m))
        .collect::<Result<Vec<_>, _>>()?;
    let started = std::time::Instant::now();
    let options: Vec<_> = queries
        .iter()
        .map(|q| run_options(&state, q, &flags, started))
        .collect();
    let body = blocking(&state.tsdb, move |tsdb| {
        let mut sets = HashMap::new();
        for (i, m) in req.metrics.iter().enumerate() {
            let offset = m.offset.as_ref().map_or(0, |&(_, ms)| ms);
            let outcome = run(
                tsdb,
                req.start.saturating_sub(offset),
                req.end.saturating_sub(offset),
                &queries[i],
                &options[i],
            )
            .map_err(ApiError::from)?;
            sets.insert(
                m.id.clone(),
                Arc::new(metric_set(m, &queries[i], outcome.groups, offset)),
            );
        }
        let mut done = HashMap::new();
        let mut uids = Uids::new(tsdb);
        for e in &req.exprs {
            evaluate(e, &req.exprs, &sets, &mut done, &mut uids)?;
        }
        let outputs: Vec<Output> = if !req.outputs.is_empty() {
            req.outputs
        } else if !req.exprs.is_empty() {
            req.exprs
                .iter()
                .map(|e| Output {
                    id: e.id.clone(),
                    alias: None,
                })
                .collect()
        } else {
            req.metrics
                .iter()
                .map(|m| Output {
                    id: m.id.clone(),
                    alias: None,
                })
                .collect()
        };
        let mut out = String::with_capacity(4096);
        out.push_str("{\"outputs\":[");
        // The answer's text counts against the query memory budget until it is sent.
        let mut counted = CountedText::new(tsdb);
        for (n, o) in outputs.iter().enumerate() {
            if n > 0 {
                out.push(',');
            }
            // Raw metric outputs show their points, gaps filled with 0 as OpenTSDB does.
            match (done.get(&o.id), sets.get(&o.id)) {
                (Some(set), _) => write_output(&mut out, o, set, set.fill, req.start, req.end),
                (None, Some(set)) => write_output(&mut out, o, set, 0.0, req.start, req.end),
                (None, None) => {
                    return Err(bad(format!(
                        "Output id {} is neither a metric nor an expression id",
                        o.id
                    )));
                }
            }
            counted.grew(&out);
        }
        out.push_str("],\"query\":");
        out.push_str(&req.echo.to_string());
        out.push('}');
        Ok((out, counted))
    })
    .await?;
    let (body, counted) = body;
    Ok(json_text_response(
        StatusCode::OK,
        counted.into_body(body.into()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn eval(text: &str) -> f64 {
        Parser::parse(text).unwrap().eval(&|v| match v {
            "a" => 6.0,
            "b" => 4.0,
            _ => f64::NAN,
        })
    }

    #[test]
    fn expressions_read_as_jexl_reads_them() {
        assert_eq!(eval("a + b * 2 - -1"), 15.0);
        assert_eq!(eval("(a + b) * 2 % 7"), 6.0);
        assert_eq!(eval("a / b"), 1.5);
        assert_eq!(eval("1 / 2"), 0.5);
        assert_eq!(eval("a > b && !(b >= a) || 0"), 1.0);
        assert_eq!(eval("a < b ? 1 : b == 4 ? 2 : 3"), 2.0);
        assert_eq!(eval("a / 0"), f64::INFINITY);
        assert!(eval("0 / 0").is_nan() && eval("a % 0").is_nan());
        // NaN (the variable `z` here) below every number and equal to itself, as JEXL 2.1.
        assert_eq!(eval("z < 0"), 1.0);
        assert_eq!(eval("z <= a"), 1.0);
        assert_eq!(eval("a > z"), 1.0);
        assert_eq!(eval("z >= 0"), 0.0);
        assert_eq!(eval("z == z"), 1.0);
        assert_eq!(eval("z != z"), 0.0);
        assert_eq!(eval("z == 0"), 0.0);
        assert_eq!(eval("-0 == 0"), 1.0);
        assert_eq!(eval("a ?: 1"), 6.0);
        assert_eq!(eval("0 ?: z ?: 3"), 3.0);
        assert!(Parser::parse("a ? : 1").is_err());
        // JEXL's number literals.
        assert_eq!(
            eval("1.5e1 + 010 + 0x1f + 2l + 2.5d + 1.0E-1"),
            15.0 + 8.0 + 31.0 + 2.0 + 2.5 + 0.1
        );
        assert_eq!(eval("0 + 00 + 7"), 7.0);
        for refused in [".5", "5.", "08", "1e3", "0x"] {
            assert!(Parser::parse(refused).is_err(), "{refused}");
        }
        let mut vars = Vec::new();
        Parser::parse("x + y * x - Z1")
            .unwrap()
            .variables(&mut vars);
        assert_eq!(vars, ["x", "y", "Z1"]);
    }

    #[test]
    fn deep_or_long_expressions_are_refused() {
        let deep = format!("{}a{}", "(".repeat(100_000), ")".repeat(100_000));
        assert_eq!(
            Parser::parse(&deep).unwrap_err().message,
            format!("parsing error in '{deep}'")
        );
        let long = vec!["a"; 5000].join("+");
        assert!(Parser::parse(&long).is_err());
        let signs = format!("{}a", "-".repeat(100_000));
        assert!(Parser::parse(&signs).is_err());
        let conds = "a?b:".repeat(10_000) + "a";
        assert!(Parser::parse(&conds).is_err());
        assert!(Parser::parse(&vec!["a"; 400].join("+")).is_ok());
    }

    #[test]
    fn time_columns_unite() {
        let col = |t: &[i64]| Arc::new(t.to_vec());
        let (a, b, c) = (col(&[1, 3, 5]), col(&[2, 3, 6, 7]), col(&[0, 5]));
        let same = union_times(&[&a, &col(&[1, 3, 5]), &a]);
        assert!(Arc::ptr_eq(&same, &a));
        assert_eq!(*union_times(&[&a, &b, &a, &b]), [1, 2, 3, 5, 6, 7]);
        assert_eq!(*union_times(&[&b, &a]), [1, 2, 3, 5, 6, 7]);
        assert_eq!(*union_times(&[&a, &b, &c]), [0, 1, 2, 3, 5, 6, 7]);
        assert_eq!(*union_times(&[&col(&[]), &a]), [1, 3, 5]);
        assert!(union_times(&[]).is_empty());
    }

    /// A value of a test column: ordinary numbers, zeros of both signs, NaN and infinities.
    fn special(k: u8) -> f64 {
        [
            0.0,
            -0.0,
            1.0,
            -2.5,
            3.0,
            7.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e300,
        ][usize::from(k % 10)]
    }

    /// Expressions over `a` and `b` using every operator.
    fn expression() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("a".to_string()),
            Just("b".to_string()),
            (0u8..4).prop_map(|n| n.to_string())
        ];
        leaf.prop_recursive(4, 24, 3, |inner| {
            let ops = prop::sample::select(vec![
                "+", "-", "*", "/", "%", "<", "<=", ">", ">=", "==", "!=", "&&", "||",
            ]);
            prop_oneof![
                (inner.clone(), ops, inner.clone())
                    .prop_map(|(x, op, y)| format!("({x} {op} {y})")),
                inner.clone().prop_map(|x| format!("-{x}")),
                inner.clone().prop_map(|x| format!("!{x}")),
                (inner.clone(), inner.clone(), inner.clone())
                    .prop_map(|(c, x, y)| format!("({c} ? {x} : {y})")),
                (inner.clone(), inner).prop_map(|(c, y)| format!("({c} ?: {y})")),
            ]
        })
    }

    proptest! {
        /// Evaluating whole columns gives every row what evaluating the row alone gives.
        #[test]
        fn columns_evaluate_as_rows(
            e in expression(),
            a in proptest::collection::vec(any::<u8>(), 0..20),
            b in proptest::collection::vec(any::<u8>(), 0..20),
        ) {
            let node = Parser::parse(&e).unwrap();
            let rows = a.len().min(b.len());
            let a: Vec<f64> = a.into_iter().take(rows).map(special).collect();
            let b: Vec<f64> = b.into_iter().take(rows).map(special).collect();
            let column = |name: &str| -> &[f64] { if name == "a" { &a } else { &b } };
            let got = node.eval_rows(rows, &|name| column(name));
            prop_assert_eq!(got.len(), rows);
            for (r, g) in got.iter().enumerate() {
                let want = node.eval(&|name| if name == "a" { a[r] } else { b[r] });
                prop_assert!(
                    g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                    "{} at row {}: {} against {}", e, r, g, want
                );
            }
        }

        /// Whatever a client puts in `expr`, reading and evaluating it answers.
        #[test]
        fn expressions_never_panic(e in "[a-z0-9.()+*/%<>=!&|?: \\-]{0,40}") {
            if let Ok(node) = Parser::parse(&e) {
                let _ = node.eval(&|_| 1.0);
                let _ = node.eval_rows(3, &|_| &[1.0, 0.0, f64::NAN]);
            }
        }
    }
}
