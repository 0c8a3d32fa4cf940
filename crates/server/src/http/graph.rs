//! `/q`: OpenTSDB's graph endpoint (`GraphHandler`, 2.4.1). The same `start`, `end`, `m=`
//! (and `tsuid=`) parameters as GET `/api/query`, plus `tz` for absolute dates, answered as
//! - `ascii`: one `metric seconds value tagk=tagv...` line per point (NaN skipped), the tags
//!   in the order Java's `HashMap` gives them,
//! - `json`: `{"plotted":…,"timing":…,"etags":[[…]],"points":…}` (OpenTSDB's key order),
//! - `png`: a graph drawn in process ([`crate::plot`]), with OpenTSDB's plot parameters
//!   (`wxh`, `yrange`, `y2range`, `ylabel`, `y2label`, `ylog`, `y2log`, `key`, `nokey`,
//!   `title`, `bgcolor`, `fgcolor`, `style`, `o=axis x1y2` for the right axis, …), each
//!   checked with 2.4.1's rules and messages.
//!
//! Without any of the three the answer is OpenTSDB's redirect to the UI (`/#<parameters>`): a
//! 200 with `Location` and a page that refreshes to it. Every method is served, as there.
//! Errors are answered as OpenTSDB's non-API paths answer them ([`super::deprecated`]):
//! `{"err":"…"}` with `json`, else its HTML page; 400 for a refused request, 500 for anything
//! else (a query over its limits included, as 2.4.1's graph handler lets it through).
//! Checks run in 2.4.1's order: `start`, `end`, the sub-queries' text, the times in the TSD's
//! zone, each sub-query, their names, the `o=` options, the times in seconds, `wxh`, then the
//! plot parameters.

use std::fmt::Write;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{RawQuery, State as Extract};
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use hourglass_core::time::{MAX_MS_TIMESTAMP, Tz, parse_time_in};
use hourglass_core::uid::UidKind;
use hourglass_core::value::java_double_text;
use hourglass_engine::annotation::Annotation;
use hourglass_engine::num::Num;
use hourglass_engine::query::plan::{
    GroupResult, Outcome, RunOptions, SubQuery, dependency, global_annotations, run,
};
use plotters::style::RGBColor;

use super::ApiError;
use super::deprecated::{bad_request, internal_error, reply};
use super::json::java_sized_map_order;
use super::query::{query_time, read_url_sub_queries, same_query};
use super::request::blocking;
use super::request::url_params;
use crate::State;
use crate::plot::{Chart, Line, render_png};
use hourglass_core::put::java_hash_map_order;
use params::{GraphParams, PlotOptions, parse_size, plot_options};

mod params;

/// What the request asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Output {
    Ascii,
    Json,
    Png,
}

/// How long a client may keep the answer (OpenTSDB's rule): nothing when the range reaches
/// into the future; a day for absolute ranges that ended over an hour ago; else ~0.1% of the
/// span.
fn max_age(p: &GraphParams, start_s: i64, end_s: i64, now_s: i64) -> i64 {
    let relative = |k: &str| {
        p.last(k)
            .is_some_and(|v| v.to_lowercase().ends_with("-ago"))
    };
    if end_s > now_s {
        0
    } else if end_s < now_s - 3600 && !relative("start") && !relative("end") {
        86_400
    } else {
        i64::from((end_s - start_s) as i32 >> 10)
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
    /// The `ascii` answer, when asked for (it needs the tag keys' UIDs).
    ascii: Option<String>,
}

/// A group's tags in the order 2.4.1 prints them: a `HashMap` made for their count, filled in
/// the order of the tag keys' UIDs.
fn java_tag_order<'a>(
    tsdb: &hourglass_engine::Tsdb,
    g: &'a GroupResult,
) -> Vec<(&'a str, &'a str)> {
    let mut tags: Vec<(&str, &str)> = g
        .tags
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    tags.sort_by_cached_key(|(k, _)| tsdb.uids().get_id(UidKind::TagKey, k).ok());
    let keys: Vec<&str> = tags.iter().map(|(k, _)| *k).collect();
    java_sized_map_order(&keys, keys.len())
        .into_iter()
        .filter_map(|i| tags.get(i).copied())
        .collect()
}

fn ascii_body(tsdb: &hourglass_engine::Tsdb, outcomes: &[Outcome]) -> String {
    let mut out = String::new();
    for g in outcomes.iter().flat_map(|o| &o.groups) {
        let mut tags = String::new();
        for (k, v) in java_tag_order(tsdb, g) {
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
    // Per sub-query, the aggregated tags of its last group (what OpenTSDB reports), as the
    // Java `HashSet` they are put in iterates them; a sub-query without results gives null,
    // except the first, which gives [].
    let etags: Vec<serde_json::Value> = ran
        .outcomes
        .iter()
        .enumerate()
        .map(|(i, o)| match o.groups.last() {
            Some(g) => serde_json::Value::Array(
                java_hash_map_order(g.aggregate_tags.iter().map(String::as_str))
                    .into_iter()
                    .filter_map(|j| g.aggregate_tags.get(j))
                    .map(|t| serde_json::Value::String(t.clone()))
                    .collect(),
            ),
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

/// A file-like answer (`ascii`, `png`) as OpenTSDB sends its files: `Cache-Control:
/// max-age=N` (0 included) and an `Age`.
fn as_file(body: impl IntoResponse, content_type: &'static str, max_age: i64) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Ok(v) = HeaderValue::from_str(&format!("max-age={max_age}")) {
        h.insert(header::CACHE_CONTROL, v);
    }
    h.insert(header::AGE, HeaderValue::from_static("0"));
    r
}

/// OpenTSDB's redirect (`HttpQuery.redirect`): a 200 with `Location` and a page that
/// refreshes to it. The location is escaped for the page (OpenTSDB writes it as sent).
fn redirect(uri: &Uri) -> Response {
    let full = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
    let location = match full.get(3..) {
        Some(rest) if full.len() >= 4 => format!("/#{rest}"),
        _ => "/".to_string(),
    };
    let page = format!(
        "<html></head><meta http-equiv=\"refresh\" content=\"0; url={}\"></head></html>",
        location
            .replace('"', "&quot;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    );
    let mut r = reply(StatusCode::OK, page);
    if let Ok(v) = HeaderValue::from_str(&location) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

pub(crate) async fn handle(
    uri: Uri,
    RawQuery(raw): RawQuery,
    Extract(state): Extract<Arc<State>>,
) -> Response {
    let p = GraphParams(url_params(raw.as_deref()));
    // OpenTSDB: ascii is answered before the image or its JSON summary is made.
    let output = if p.has("ascii") {
        Output::Ascii
    } else if p.has("json") {
        Output::Json
    } else if p.has("png") {
        Output::Png
    } else {
        return redirect(&uri);
    };
    match graph(&state, p, output).await {
        Ok(r) => r,
        // Only refusals of the request are 400s there: whatever else fails (a query over
        // its limits, the store) reaches OpenTSDB's catch-all, a 500.
        Err((e, json)) if e.status == StatusCode::BAD_REQUEST => bad_request(&e.message, json),
        Err((e, json)) => internal_error(&e.message, json),
    }
}

/// What the checks after the queries' names give: the image's size and options, the `o=`
/// option of each sub-query.
struct Checked {
    size: (u32, u32),
    opts: PlotOptions,
    options: Vec<String>,
}

/// 2.4.1's checks between building the queries and running them, in its order: the `o=`
/// options (only read with `tsd.gnuplot.options.allowlist`), the times in seconds, `wxh`,
/// then the plot parameters.
fn checks(
    p: &GraphParams,
    allowlist: Option<&[String]>,
    queries: usize,
    start_s: i64,
    end_s: i64,
) -> Result<Checked, String> {
    let given: Vec<String> =
        p.0.iter()
            .filter(|(k, _)| k == "o")
            .map(|(_, v)| v.clone())
            .collect();
    let options = match allowlist {
        Some(allowed) => {
            if let Some(i) = given.iter().position(|o| !allowed.contains(o)) {
                return Err(format!(
                    "Query option at index {i} was not in the allow list."
                ));
            }
            if !given.is_empty() && given.len() != queries {
                return Err(format!(
                    "{} `o' parameters, but {queries} `m' parameters.",
                    given.len()
                ));
            }
            given
        }
        // 2.4.1 reads no `o=` without an allow list; here each still names its sub-query's
        // axis (nothing reaches a program), and none is refused.
        None => given,
    };
    let mut options = options;
    options.resize(queries, String::new());
    // `TsdbQuery.setEndTime`, then `Plot`'s checks.
    if end_s <= start_s {
        return Err(format!(
            "end time: new end time ({end_s}) is less than or equal to start time: {start_s}"
        ));
    }
    if start_s >> 32 != 0 {
        return Err(format!("Invalid start time: {start_s}"));
    }
    if end_s >> 32 != 0 {
        return Err(format!("Invalid end time: {end_s}"));
    }
    let size = match p.last("wxh").filter(|v| !v.is_empty()) {
        Some(wxh) => parse_size(wxh)?,
        None => (1024, 768),
    };
    let opts = plot_options(p)?;
    Ok(Checked {
        size,
        opts,
        options,
    })
}

async fn graph(
    state: &Arc<State>,
    p: GraphParams,
    output: Output,
) -> Result<Response, (ApiError, bool)> {
    let json = p.has("json");
    graph_inner(state, p, output).await.map_err(|e| (e, json))
}

async fn graph_inner(
    state: &Arc<State>,
    p: GraphParams,
    output: Output,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let bad = |m: String| ApiError::bad_request(m);
    let now_ms = hourglass_storage::now_ms();
    let default_zone = state.settings.timezone;
    // `tz` is read by absolute dates only (`Invalid timezone name: …`), and by the graph's
    // time axis (the TSD's zone when it is not a zone).
    let tz_name = p.last("tz").filter(|z| !z.is_empty());
    let start_text = p
        .last("start")
        .filter(|s| !s.is_empty())
        .ok_or_else(|| bad("Missing parameter <code>start</code>".into()))?
        .to_string();
    let end_text = p.last("end").filter(|e| !e.is_empty()).map(str::to_string);
    let start = query_time(&start_text, now_ms, tz_name, default_zone)?;
    let end = match &end_text {
        Some(e) => query_time(e, now_ms, tz_name, default_zone)?,
        None => now_ms,
    };
    // `QueryRpc.parseQuery`, then `TSQuery.validateAndSetQuery` (the times again, in the
    // TSD's zone: the request's `tz` is not the query's).
    let raws = read_url_sub_queries(&p.0)?;
    let check_start =
        parse_time_in(&start_text, now_ms, default_zone).map_err(|e| bad(e.to_string()))?;
    let check_end = match &end_text {
        Some(e) => parse_time_in(e, now_ms, default_zone).map_err(|e| bad(e.to_string()))?,
        None => now_ms,
    };
    if check_end <= check_start {
        return Err(bad(format!(
            "End time [{check_end}] must be greater than the start time [{check_start}]"
        )));
    }
    // Each sub-query checked; duplicates asked for once (2.4.1 keeps a set of them).
    let mut subs: Vec<SubQuery> = Vec::with_capacity(raws.len());
    for raw in raws {
        let (mut q, _) = raw.validate()?;
        if let Some(ds) = q.downsample {
            q.downsample = Some(ds.in_zone(Tz::UTC, false).map_err(ApiError::from)?);
        }
        if !subs.iter().any(|s| same_query(s, &q)) {
            subs.push(q);
        }
    }
    // `TsdbQuery.configureFromQuery` takes those times before it reads the names.
    for t in [check_start, check_end] {
        if t < 0 || (hourglass_core::time::is_millis(t) && t > MAX_MS_TIMESTAMP) {
            return Err(bad(format!("Invalid timestamp: {t}")));
        }
    }
    let tz = tz_name
        .and_then(|n| hourglass_core::time::parse_timezone(n).ok())
        .unwrap_or(default_zone);
    // Seconds, as OpenTSDB's graphs work in.
    let (start_s, end_s) = (start.div_euclid(1000), end.div_euclid(1000));
    let notes_wanted = !p.has("no_annotations");
    let global_wanted = notes_wanted && p.has("global_annotations");
    let run_options = RunOptions {
        limits: state.settings.query_limits,
        started,
        delete: false,
        parallel: true,
        use_index: true,
    };
    let (range_start, range_end) = (start_s.saturating_mul(1000), end_s.saturating_mul(1000));
    let allowlist = state.settings.graph_options_allowlist.clone();
    let p = Arc::new(p);
    let params = Arc::clone(&p);
    let (ran, checked) = blocking(&state.tsdb, move |tsdb| {
        // `TSQuery.buildQueries`: every sub-query's names before the checks that follow.
        for q in &subs {
            dependency(tsdb, q, range_start, range_end).map_err(ApiError::from)?;
        }
        let checked = checks(&params, allowlist.as_deref(), subs.len(), start_s, end_s)
            .map_err(ApiError::bad_request)?;
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
        let ascii = (output == Output::Ascii).then(|| ascii_body(tsdb, &outcomes));
        let options = checked.options.clone();
        Ok((
            Ran {
                outcomes,
                options,
                notes,
                ascii,
            },
            checked,
        ))
    })
    .await?;

    let age = max_age(&p, start_s, end_s, now_ms / 1000);
    Ok(match output {
        Output::Ascii => as_file(ran.ascii.unwrap_or_default(), "text/plain", age),
        // Sent as a reply, not a file: no cache header.
        Output::Json => reply(StatusCode::OK, json_body(&ran, started)),
        Output::Png => {
            let chart = chart_of(&ran, checked.opts, checked.size, range_start, range_end, tz);
            let png = tokio::task::spawn_blocking(move || render_png(&chart))
                .await
                .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
                .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e))?;
            as_file(png, "image/png", age)
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
    fn series_titles_read_as_java_maps() {
        let mut tags = std::collections::BTreeMap::new();
        assert_eq!(series_title("m", &tags), "m{}");
        tags.insert("host".to_string(), "web01".to_string());
        tags.insert("dc".to_string(), "lga".to_string());
        assert_eq!(series_title("m", &tags), "m{dc=lga, host=web01}");
    }

    #[test]
    fn the_json_summary_keys_are_in_javas_hash_map_order() {
        let keys = ["plotted", "points", "etags", "timing"];
        let order: Vec<&str> = java_hash_map_order(keys)
            .into_iter()
            .map(|i| keys[i])
            .collect();
        assert_eq!(order, ["plotted", "timing", "etags", "points"]);
    }

    proptest::proptest! {
        #[test]
        fn no_redirect_panics(w in "[!-~]{0,24}") {
            if let Ok(uri) = format!("/q{w}").parse::<Uri>() {
                let _ = redirect(&uri);
            }
        }
    }

    #[test]
    fn cache_ages_follow_opentsdb() {
        let p = params("start=2013/01/01");
        let now = 1_700_000_000;
        assert_eq!(max_age(&p, now - 100, now + 10, now), 0);
        assert_eq!(max_age(&p, 1_356_998_400, 1_357_084_800, now), 86_400);
        let rel = params("start=1D-AGO");
        assert_eq!(max_age(&rel, now - 86_400, now, now), 86_400 >> 10);
    }
}
