//! `/q`: OpenTSDB's graph endpoint. The same `start`, `end`, `m=` (and `tsuid=`) parameters as
//! GET `/api/query`, answered as
//! - `ascii`: one `metric seconds value tagk=tagv...` line per point (NaN skipped),
//! - `json`: `{"plotted":…,"timing":…,"etags":[[…]],"points":…}` (OpenTSDB's key order),
//! - `png`: a graph drawn in process ([`crate::plot`]), with OpenTSDB's plot parameters
//!   (`wxh`, `yrange`, `y2range`, `ylabel`, `y2label`, `ylog`, `y2log`, `key`, `nokey`,
//!   `title`, `bgcolor`, `fgcolor`, `style`, `o=axis x1y2` for the right axis, …), each
//!   validated with OpenTSDB's rules and messages.
//!
//! Without any of the three the request is redirected to the UI, `/#<parameters>`, which reads
//! OpenTSDB's query-string format. Errors are answered as OpenTSDB's graph handler answers
//! them: `{"err":"…"}` with `json`, an empty body with `png`, else a small HTML page.

use std::fmt::Write;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{RawQuery, State as Extract};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hourglass_core::time::{Tz, parse_time_in, parse_timezone};
use hourglass_core::value::java_double_text;
use hourglass_engine::annotation::Annotation;
use hourglass_engine::num::Num;
use hourglass_engine::query::plan::{Outcome, RunOptions, global_annotations, run};
use plotters::style::RGBColor;

use super::ApiError;
use super::query::url_sub_queries;
use super::request::blocking;
use super::request::url_params;
use super::ui::escape_html;
use crate::State;
use crate::plot::{AxisRange, Chart, KeyPlace, Line, render_png};

/// What the request asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Output {
    Ascii,
    Json,
    Png,
}

/// Largest image drawn, in pixels (OpenTSDB left this to gnuplot; 16M pixels is 48 MiB of
/// RGB while drawing).
const MAX_PIXELS: u64 = 1 << 24;

/// The request's parameters; a repeated one reads as its last value, trimmed, as OpenTSDB's
/// `popParam` does.
struct GraphParams(Vec<(String, String)>);

impl GraphParams {
    fn has(&self, key: &str) -> bool {
        self.0.iter().any(|(k, _)| k == key)
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.trim())
    }

    /// A plot parameter, refused when it carries a back-tick (OpenTSDB's gnuplot guard, kept
    /// so that requests refused there are refused here too).
    fn plot(&self, key: &str) -> Result<Option<&str>, String> {
        match self.get(key) {
            Some(v) if v.contains('`') || v.contains("%60") || v.contains("&#96;") => Err(format!(
                "Parameter {key} contained a back-tick. That's a no-no."
            )),
            other => Ok(other),
        }
    }
}

/// OpenTSDB's `validateString`: letters, digits, `-_./` and the given extra characters.
fn validate(what: &str, s: &str, specials: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err(format!("Invalid {what}: empty string"));
    }
    match s.chars().find(|&c| {
        !(c.is_ascii_alphanumeric()
            || "-_./".contains(c)
            || c.is_alphabetic()
            || specials.contains(c))
    }) {
        Some(c) => Err(format!("Invalid {what} (\"{s}\"): illegal character: {c}")),
        None => Ok(()),
    }
}

/// `[min:max]`, either end optional, numbers optionally quoted (OpenTSDB's RANGE_VALIDATOR).
fn parse_range(what: &str, s: &str) -> Result<AxisRange, String> {
    let invalid = || format!("'{what}' was invalid. Must be in the format [min:max].");
    let inner = s
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .ok_or_else(invalid)?;
    let (lo, hi) = inner.split_once(':').ok_or_else(invalid)?;
    let end = |t: &str| -> Result<Option<f64>, String> {
        let t = t.trim_matches('"');
        if t.is_empty() {
            return Ok(None);
        }
        let numeric = t
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'.' | b'e' | b'E'));
        match t.parse::<f64>() {
            Ok(v) if numeric && v.is_finite() => Ok(Some(v)),
            _ => Err(invalid()),
        }
    };
    Ok(AxisRange {
        min: end(lo)?,
        max: end(hi)?,
    })
}

/// `xRRGGBB` (OpenTSDB's COLOR_VALIDATOR).
fn parse_color(what: &str, s: &str) -> Result<RGBColor, String> {
    let hex = s
        .strip_prefix(['x', 'X'])
        .filter(|h| h.len() == 6 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| format!("'{what}' was invalid. Must be a hex value e.g. 'xFFFFFF'"))?;
    let byte = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(0);
    Ok(RGBColor(byte(0), byte(2), byte(4)))
}

/// `wxh`, as OpenTSDB checks it.
fn parse_size(wxh: &str) -> Result<(u32, u32), String> {
    validate("wxh", wxh, "")?;
    let (w, h) = wxh
        .split_once('x')
        .filter(|(w, h)| {
            !w.is_empty()
                && !h.is_empty()
                && w.bytes().all(|b| b.is_ascii_digit())
                && h.bytes().all(|b| b.is_ascii_digit())
        })
        .ok_or_else(|| "'wxh' was invalid. Must satisfy the pattern ^\\d+x\\d+$".to_string())?;
    if wxh.len() < 7 {
        return Err(format!("Parameter wxh too short: {wxh}"));
    }
    // Java's Short.parseShort.
    let short = |t: &str| -> Result<u32, String> {
        match t.parse::<i64>() {
            Ok(v) if v <= i64::from(i16::MAX) => Ok(v as u32),
            Ok(_) => Err(format!(
                "Can't parse wxh '{wxh}': Value out of range. Value:\"{t}\" Radix:10"
            )),
            Err(_) => Err(format!(
                "Can't parse wxh '{wxh}': For input string: \"{t}\""
            )),
        }
    };
    let (width, height) = (short(w)?, short(h)?);
    for (what, v) in [("width", width), ("height", height)] {
        if v < 100 {
            return Err(format!(
                "Invalid wxh parameter: {wxh}, {what} smaller than 100 in {width}x{height}"
            ));
        }
    }
    if u64::from(width) * u64::from(height) > MAX_PIXELS {
        return Err(format!(
            "Invalid wxh parameter: {wxh}, larger than {MAX_PIXELS} pixels"
        ));
    }
    Ok((width, height))
}

/// A label (`title`, `ylabel`, `y2label`): OpenTSDB's LABEL_VALIDATOR after validateString.
fn parse_label(what: &str, s: &str) -> Result<String, String> {
    validate(what, s, " ")?;
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || " -_[\\]^`".contains(c))
    {
        Ok(s.to_string())
    } else {
        Err(format!(
            "'{what}' was invalid. Must satisfy the pattern ^[a-zA-z0-9 \\-_]+$"
        ))
    }
}

/// A gnuplot time or number format (`yformat`, `y2format`, `xformat`): checked, not applied.
fn check_format(what: &str, s: &str) -> Result<(), String> {
    validate(what, s, "% ")?;
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "%.- ".contains(c))
    {
        Ok(())
    } else {
        Err(format!(
            "'{what}' was invalid. Must satisfy the pattern ^[%0-9.a-zA-Z \\-]+$"
        ))
    }
}

/// The plot options of a request, in OpenTSDB's order of checks.
#[derive(Debug, Default)]
struct PlotOptions {
    yrange: AxisRange,
    y2range: AxisRange,
    ylabel: Option<String>,
    y2label: Option<String>,
    ylog: bool,
    y2log: bool,
    key: Option<KeyPlace>,
    title: Option<String>,
    background: Option<RGBColor>,
    foreground: Option<RGBColor>,
    points_only: bool,
}

fn plot_options(p: &GraphParams) -> Result<PlotOptions, String> {
    let mut o = PlotOptions {
        key: Some(KeyPlace::TopRight),
        ..PlotOptions::default()
    };
    if let Some(v) = p.plot("yrange")? {
        validate("yrange", v, "[:]")?;
        o.yrange = parse_range("yrange", v)?;
    }
    if let Some(v) = p.plot("y2range")? {
        validate("y2range", v, "[:]")?;
        o.y2range = parse_range("y2range", v)?;
    }
    if let Some(v) = p.plot("ylabel")? {
        o.ylabel = Some(parse_label("ylabel", v)?);
    }
    if let Some(v) = p.plot("y2label")? {
        o.y2label = Some(parse_label("y2label", v)?);
    }
    for what in ["yformat", "y2format", "xformat"] {
        if let Some(v) = p.plot(what)? {
            check_format(what, v)?;
        }
    }
    o.ylog = p.plot("ylog")?.is_some();
    o.y2log = p.plot("y2log")?.is_some();
    if let Some(v) = p.plot("key")? {
        // OpenTSDB's KEY_VALIDATOR, `(out|left|top|center|right|horiz|box|bottom)?\s?`, is
        // all optional and read with find(): every value passes (gnuplot's own words, such as
        // `out right top box`). Placement is read from `left` and `bottom`.
        let left = v.contains("left");
        o.key = Some(match (v.contains("bottom"), left) {
            (true, true) => KeyPlace::BottomLeft,
            (true, false) => KeyPlace::BottomRight,
            (false, true) => KeyPlace::TopLeft,
            (false, false) => KeyPlace::TopRight,
        });
    }
    if let Some(v) = p.plot("title")? {
        o.title = Some(parse_label("title", v)?);
    }
    if let Some(v) = p.plot("bgcolor")? {
        validate("bgcolor", v, "")?;
        o.background = Some(parse_color("bgcolor", v)?);
    }
    if let Some(v) = p.plot("fgcolor")? {
        validate("fgcolor", v, "")?;
        o.foreground = Some(parse_color("fgcolor", v)?);
    }
    if let Some(v) = p.plot("smooth")? {
        validate("smooth", v, "")?;
        const SMOOTH: [&str; 13] = [
            "unique",
            "frequency",
            "fnormal",
            "cumulative",
            "cnormal",
            "bins",
            "csplines",
            "acsplines",
            "mcsplines",
            "bezier",
            "sbezier",
            "unwrap",
            "zsort",
        ];
        if !(SMOOTH.iter().any(|s| v.starts_with(s)) || v.ends_with("zsort")) {
            return Err("'smooth' was invalid. Must satisfy the pattern ^unique|frequency|fnormal|cumulative|cnormal|bins|csplines|acsplines|mcsplines|bezier|sbezier|unwrap|zsort$".into());
        }
    }
    if let Some(v) = p.plot("style")? {
        validate("style", v, "")?;
        let ok = v.starts_with("linespoint")
            || v.ends_with("dots")
            || v.contains("points")
            || v.contains("circles");
        if !ok {
            return Err(
                "'style' was invalid. Must satisfy the pattern ^linespoint|points|circles|dots$"
                    .into(),
            );
        }
        o.points_only = !v.starts_with("linespoint");
    }
    if p.plot("nokey")?.is_some() {
        o.key = None;
    }
    Ok(o)
}

/// An error as OpenTSDB's graph handler answers it.
fn error_response(output: Option<Output>, status: StatusCode, message: &str) -> Response {
    let (content_type, body) = match output {
        Some(Output::Json) => (
            "application/json; charset=UTF-8",
            serde_json::json!({ "err": message }).to_string(),
        ),
        Some(Output::Png) => ("text/plain; charset=UTF-8", String::new()),
        _ => {
            let (title, subtitle) = if status.is_client_error() {
                ("Bad Request", "Looks like it's your fault this time")
            } else {
                ("Internal Server Error", "Something went wrong on our side")
            };
            (
                "text/html; charset=UTF-8",
                format!(
                    "<!doctype html><html><head><meta charset=\"utf-8\"><title>{title}</title>\
                     </head><body><h1>{title}</h1><p>{subtitle}</p><blockquote>Sorry but your \
                     request was rejected as being invalid.<br/><br/>The reason provided was:\
                     <blockquote>{}</blockquote></blockquote></body></html>",
                    escape_html(message)
                ),
            )
        }
    };
    let mut r = (status, body).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// How long a client may keep the answer (OpenTSDB's rule): nothing when the range reaches
/// into the future; a day for absolute ranges that ended over an hour ago; else ~0.1% of the
/// span.
fn max_age(p: &GraphParams, start_s: i64, end_s: i64, now_s: i64) -> i64 {
    let relative = |k: &str| p.get(k).is_some_and(|v| v.ends_with("-ago"));
    if end_s > now_s {
        0
    } else if end_s < now_s - 3600 && !relative("start") && !relative("end") {
        86_400
    } else {
        (end_s - start_s) >> 10
    }
}

/// `metric{tagk=tagv, ...}`: how OpenTSDB titles a series (Java's map text).
fn series_title(metric: &str, tags: &std::collections::BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(metric.len() + 2 + tags.len() * 16);
    out.push_str(metric);
    out.push('{');
    for (i, (k, v)) in tags.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{k}={v}");
    }
    out.push('}');
    out
}

/// What the sub-queries returned, with the `o=` option of each.
struct Ran {
    outcomes: Vec<Outcome>,
    options: Vec<String>,
    notes: Vec<(i64, String)>,
}

fn ascii_body(ran: &Ran) -> String {
    let mut out = String::new();
    for g in ran.outcomes.iter().flat_map(|o| &o.groups) {
        let mut tags = String::new();
        for (k, v) in &g.tags {
            let _ = write!(tags, " {k}={v}");
        }
        for (t, v) in &g.dps {
            let value = match *v {
                Num::Int(i) => i.to_string(),
                Num::Float(f) if f.is_finite() => java_double_text(f),
                Num::Float(_) => continue,
            };
            let _ = writeln!(out, "{} {} {value}{tags}", g.metric, t.div_euclid(1000));
        }
    }
    out
}

fn plottable(v: Num) -> Option<f64> {
    match v {
        Num::Int(i) => Some(i as f64),
        Num::Float(f) => f.is_finite().then_some(f),
    }
}

fn json_body(ran: &Ran, started: Instant) -> String {
    let plotted: usize = ran
        .outcomes
        .iter()
        .flat_map(|o| &o.groups)
        .map(|g| {
            g.dps
                .iter()
                .filter(|(_, v)| plottable(*v).is_some())
                .count()
        })
        .sum();
    let points: u64 = ran.outcomes.iter().map(|o| o.stats.points).sum();
    // Per sub-query, the aggregated tags of its last group (what OpenTSDB reports); a
    // sub-query without results gives null, except the first, which gives [].
    let etags: Vec<serde_json::Value> = ran
        .outcomes
        .iter()
        .enumerate()
        .map(|(i, o)| match o.groups.last() {
            Some(g) => serde_json::json!(g.aggregate_tags),
            None if i == 0 => serde_json::json!([]),
            None => serde_json::Value::Null,
        })
        .collect();
    // Java's HashMap order of these four keys.
    format!(
        "{{\"plotted\":{plotted},\"timing\":{},\"etags\":{},\"points\":{points}}}",
        started.elapsed().as_millis(),
        serde_json::Value::Array(etags)
    )
}

fn chart_of(ran: &Ran, opts: PlotOptions, size: (u32, u32), start: i64, end: i64, tz: Tz) -> Chart {
    let mut lines = Vec::new();
    for (o, option) in ran.outcomes.iter().zip(&ran.options) {
        for g in &o.groups {
            lines.push(Line {
                label: series_title(&g.metric, &g.tags),
                right: option.contains("x1y2"),
                points: g
                    .dps
                    .iter()
                    .filter_map(|(t, v)| plottable(*v).map(|v| (*t, v)))
                    .collect(),
            });
        }
    }
    Chart {
        width: size.0,
        height: size.1,
        start_ms: start,
        end_ms: end,
        tz,
        title: opts.title,
        ylabel: opts.ylabel,
        y2label: opts.y2label,
        yrange: opts.yrange,
        y2range: opts.y2range,
        ylog: opts.ylog,
        y2log: opts.y2log,
        key: opts.key,
        points_only: opts.points_only,
        background: opts.background.unwrap_or(RGBColor(255, 255, 255)),
        foreground: opts.foreground.unwrap_or(RGBColor(0, 0, 0)),
        lines,
        notes: ran.notes.clone(),
    }
}

fn with_type(body: impl IntoResponse, content_type: &'static str, max_age: i64) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    let cache = if max_age > 0 {
        HeaderValue::from_str(&format!("max-age={max_age}")).ok()
    } else {
        Some(HeaderValue::from_static("no-cache"))
    };
    if let Some(cache) = cache {
        h.insert(header::CACHE_CONTROL, cache);
    }
    r
}

pub(crate) async fn handle(
    method: Method,
    RawQuery(raw): RawQuery,
    Extract(state): Extract<Arc<State>>,
) -> Response {
    let p = GraphParams(url_params(raw.as_deref()));
    // OpenTSDB: ascii is answered before the image or its JSON summary is made.
    let output = if p.has("ascii") {
        Some(Output::Ascii)
    } else if p.has("json") {
        Some(Output::Json)
    } else if p.has("png") {
        Some(Output::Png)
    } else {
        None
    };
    if method != Method::GET && method != Method::POST {
        return error_response(
            output,
            StatusCode::METHOD_NOT_ALLOWED,
            &format!(
                "Method not allowed: the HTTP method [{method}] is not permitted for this endpoint"
            ),
        );
    }
    let Some(output) = output else {
        // The UI reads OpenTSDB's query-string format from the fragment.
        let target = format!("/#{}", raw.unwrap_or_default());
        let mut r = StatusCode::FOUND.into_response();
        if let Ok(v) = HeaderValue::from_str(&target) {
            r.headers_mut().insert(header::LOCATION, v);
        }
        return r;
    };
    match graph(&state, &p, output).await {
        Ok(r) => r,
        Err(e) => error_response(Some(output), e.status, &e.message),
    }
}

async fn graph(state: &Arc<State>, p: &GraphParams, output: Output) -> Result<Response, ApiError> {
    let started = Instant::now();
    let bad = |m: String| ApiError::bad_request(m);
    let now_ms = hourglass_storage::now_ms();
    let tz = match p.get("tz").filter(|z| !z.is_empty()) {
        Some(name) => parse_timezone(name).map_err(|e| bad(e.to_string()))?,
        None => state.settings.timezone,
    };
    let start = p
        .get("start")
        .filter(|s| !s.is_empty())
        .ok_or_else(|| bad("Missing parameter <code>start</code>".into()))?;
    let start = parse_time_in(start, now_ms, tz).map_err(|e| bad(e.to_string()))?;
    let end = match p.get("end").filter(|e| !e.is_empty()) {
        Some(e) => parse_time_in(e, now_ms, tz).map_err(|e| bad(e.to_string()))?,
        None => now_ms,
    };
    let mut subs = url_sub_queries(&p.0)?;
    let options: Vec<String> =
        p.0.iter()
            .filter(|(k, _)| k == "o")
            .map(|(_, v)| v.clone())
            .collect();
    if let Some(allowed) = &state.settings.graph_options_allowlist
        && let Some(i) = options.iter().position(|o| !allowed.contains(o))
    {
        return Err(bad(format!(
            "Query option at index {i} was not in the allow list."
        )));
    }
    if !options.is_empty() && options.len() != subs.len() {
        return Err(bad(format!(
            "{} `o' parameters, but {} `m' parameters.",
            options.len(),
            subs.len()
        )));
    }
    let options = if options.is_empty() {
        vec![String::new(); subs.len()]
    } else {
        options
    };
    // Seconds, as OpenTSDB's graphs work in.
    let (start_s, end_s) = (start.div_euclid(1000), end.div_euclid(1000));
    if start_s >= end_s {
        return Err(bad(format!(
            "start time ({start_s}) is greater than or equal to end time: {end_s}"
        )));
    }
    let size = match p.get("wxh").filter(|v| !v.is_empty()) {
        Some(wxh) => parse_size(wxh).map_err(bad)?,
        None => (1024, 768),
    };
    let opts = plot_options(p).map_err(bad)?;
    for q in &mut subs {
        if let Some(ds) = q.downsample {
            q.downsample = Some(ds.in_zone(Tz::UTC, false).map_err(ApiError::from)?);
        }
    }
    let notes_wanted = !p.has("no_annotations");
    let global_wanted = notes_wanted && p.has("global_annotations");
    let run_options = RunOptions {
        limits: state.settings.query_limits,
        started,
        delete: false,
        parallel: true,
        use_index: true,
    };
    let (range_start, range_end) = (start_s * 1000, end_s * 1000);
    let ran = blocking(&state.tsdb, move |tsdb| {
        let mut outcomes = Vec::with_capacity(subs.len());
        let mut notes = Vec::new();
        for q in &subs {
            let outcome =
                run(tsdb, range_start, range_end, q, &run_options).map_err(ApiError::from)?;
            if notes_wanted {
                for g in &outcome.groups {
                    notes.extend(g.annotations.iter().filter_map(note_of));
                }
            }
            outcomes.push(outcome);
        }
        if global_wanted {
            let global =
                global_annotations(tsdb, range_start, range_end).map_err(ApiError::from)?;
            notes.extend(global.iter().filter_map(note_of));
        }
        notes.sort();
        Ok(Ran {
            outcomes,
            options,
            notes,
        })
    })
    .await?;

    let age = max_age(p, start_s, end_s, now_ms / 1000);
    Ok(match output {
        Output::Ascii => with_type(ascii_body(&ran), "text/plain; charset=UTF-8", age),
        Output::Json => with_type(
            json_body(&ran, started),
            "application/json; charset=UTF-8",
            age,
        ),
        Output::Png => {
            let chart = chart_of(&ran, opts, size, range_start, range_end, tz);
            let png = tokio::task::spawn_blocking(move || render_png(&chart))
                .await
                .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
                .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e))?;
            with_type(png, "image/png", age)
        }
    })
}

fn note_of(a: &hourglass_engine::query::plan::StoredAnnotation) -> Option<(i64, String)> {
    let note = Annotation::from_stored(&a.json).ok()?;
    Some((a.time_ms, note.description))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(q: &str) -> GraphParams {
        GraphParams(url_params(Some(q)))
    }

    #[test]
    fn sizes_are_checked_as_opentsdb_checks_them() {
        assert_eq!(parse_size("640x480"), Ok((640, 480)));
        assert_eq!(
            parse_size("50x5000").unwrap_err(),
            "Invalid wxh parameter: 50x5000, width smaller than 100 in 50x5000"
        );
        assert_eq!(
            parse_size("1x1").unwrap_err(),
            "Parameter wxh too short: 1x1"
        );
        assert_eq!(
            parse_size("640by480").unwrap_err(),
            "'wxh' was invalid. Must satisfy the pattern ^\\d+x\\d+$"
        );
        assert_eq!(
            parse_size("640;480").unwrap_err(),
            "Invalid wxh (\"640;480\"): illegal character: ;"
        );
        assert!(
            parse_size("40000x100")
                .unwrap_err()
                .contains("Value out of range")
        );
        assert!(parse_size("30000x30000").unwrap_err().contains("pixels"));
    }

    #[test]
    fn plot_parameters_are_validated_with_opentsdb_messages() {
        let err = |q: &str| plot_options(&params(q)).unwrap_err();
        assert_eq!(
            err("yrange=[0:"),
            "'yrange' was invalid. Must be in the format [min:max]."
        );
        assert_eq!(
            // `;` separates parameters, as `&` does: escaped, it reaches the check.
            err("ylabel=a%3Bb"),
            "Invalid ylabel (\"a;b\"): illegal character: ;"
        );
        assert_eq!(
            err("title=`reboot`"),
            "Parameter title contained a back-tick. That's a no-no."
        );
        assert_eq!(
            err("bgcolor=red"),
            "'bgcolor' was invalid. Must be a hex value e.g. 'xFFFFFF'"
        );
        assert!(err("style=bars").starts_with("'style' was invalid."));
        assert_eq!(err("ylabel="), "Invalid ylabel: empty string");

        let o = plot_options(&params(
            "yrange=[0:100]&y2range=[:5e3]&ylog&title=CPU use&key=left&bgcolor=x102030&style=points",
        ))
        .expect("valid");
        assert_eq!(
            o.yrange,
            AxisRange {
                min: Some(0.0),
                max: Some(100.0)
            }
        );
        assert_eq!(
            o.y2range,
            AxisRange {
                min: None,
                max: Some(5000.0)
            }
        );
        assert!(o.ylog && !o.y2log && o.points_only);
        assert_eq!(o.title.as_deref(), Some("CPU use"));
        assert_eq!(o.key, Some(KeyPlace::TopLeft));
        assert_eq!(
            plot_options(&params("key=out right top box"))
                .expect("valid")
                .key,
            Some(KeyPlace::TopRight)
        );
        assert_eq!(
            plot_options(&params("key=bottom left")).expect("valid").key,
            Some(KeyPlace::BottomLeft)
        );
        assert_eq!(o.background, Some(RGBColor(0x10, 0x20, 0x30)));
        assert_eq!(
            plot_options(&params("key=top&nokey")).expect("valid").key,
            None
        );
    }

    #[test]
    fn series_titles_read_as_java_maps() {
        let mut tags = std::collections::BTreeMap::new();
        assert_eq!(series_title("m", &tags), "m{}");
        tags.insert("host".to_string(), "web01".to_string());
        tags.insert("dc".to_string(), "lga".to_string());
        assert_eq!(series_title("m", &tags), "m{dc=lga, host=web01}");
    }

    #[test]
    fn cache_ages_follow_opentsdb() {
        let p = params("start=2013/01/01");
        let now = 1_700_000_000;
        assert_eq!(max_age(&p, now - 100, now + 10, now), 0);
        assert_eq!(max_age(&p, 1_356_998_400, 1_357_084_800, now), 86_400);
        let rel = params("start=1d-ago");
        assert_eq!(max_age(&rel, now - 86_400, now, now), 86_400 >> 10);
    }
}
