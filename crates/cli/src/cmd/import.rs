//! `tsdb import [--auto-metric] [--url URL] FILE...`: OpenTSDB's import format, one point per
//! line (`metric timestamp value tagk=tagv ...`), plain or gzipped, `-` for stdin; a line
//! starting with `rollup ` is a rollup point as the telnet command writes it (RFC 0008). Bad
//! lines are reported with file and line number and skipped; the good ones are stored.
//! Without `--url` the data dir is written directly; with it, points go to a running TSD's
//! `/api/put` and `/api/rollup`.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use hourglass_core::put::{PutError, PutLine, parse_put};
use hourglass_core::rollup::parse_rollup_line;
use hourglass_engine::IncomingPoint;
use hourglass_engine::rollup::RollupPoint;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use crate::open::StoreArgs;

const BATCH_LINES: usize = 10_000;

#[derive(Debug, clap::Args)]
pub(crate) struct ImportArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Create metrics that do not exist yet.
    #[arg(long)]
    auto_metric: bool,
    /// Send to a running TSD (e.g. http://localhost:4242) instead of opening the data dir.
    #[arg(long)]
    url: Option<String>,
    /// Exit 0 even when bad lines were skipped (OpenTSDB's flag; bad lines are reported and
    /// skipped either way).
    #[arg(long)]
    skip_errors: bool,
    /// Files to import (`.gz` is decompressed; `-` reads standard input).
    #[arg(required = true)]
    files: Vec<String>,
}

/// Where batches go.
enum Sink {
    Local(crate::open::Db),
    /// A TSD's base URL.
    Remote {
        agent: ureq::Agent,
        base: String,
        /// The `Authorization` header from the environment ([`crate::remote`]).
        authorization: Option<String>,
    },
}

#[derive(Default)]
struct Totals {
    points: u64,
    bad: u64,
    /// Millions of points reported so far, and when the last report was.
    millions: u64,
    last_ping: Option<Instant>,
}

pub(crate) fn run(args: &ImportArgs) -> anyhow::Result<ExitCode> {
    let sink = match &args.url {
        Some(url) => Sink::Remote {
            agent: ureq::Agent::new_with_defaults(),
            base: url.trim_end_matches('/').to_string(),
            authorization: crate::remote::authorization()?,
        },
        None => {
            // Points written here resolve duplicates as Hourglass does.
            args.store
                .config_refusing(&[crate::open::OTSDB_TIMESTAMP])?;
            let mut settings = args.store.settings()?;
            settings.auto_create_metrics |= args.auto_metric;
            Sink::Local(args.store.open_tsdb(settings)?)
        }
    };
    let total_bytes: u64 = args
        .files
        .iter()
        .filter(|f| *f != "-")
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum();
    let bar = ProgressBar::new(total_bytes);
    bar.set_style(
        ProgressStyle::with_template("{bytes}/{total_bytes} [{wide_bar}] {msg} ETA {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let started = Instant::now();
    let mut totals = Totals {
        last_ping: Some(started),
        ..Totals::default()
    };
    for file in &args.files {
        let file_started = Instant::now();
        let before = totals.points;
        import_file(file, &sink, &bar, started, &mut totals)?;
        // OpenTSDB's line for each file.
        let ms = file_started.elapsed().as_millis();
        let points = totals.points - before;
        bar.suspend(|| {
            eprintln!(
                "Processed {file} in {ms} ms, {points} data points ({:.1} points/s)",
                points as f64 * 1000.0 / (ms as f64).max(1.0)
            );
        });
    }
    if let Sink::Local(db) = &sink {
        db.close()?;
    }
    bar.finish_and_clear();
    // OpenTSDB's closing line, then the bad lines.
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "Total: imported {} data points in {secs:.3}s ({:.1} points/s)",
        totals.points,
        totals.points as f64 / secs.max(1e-9),
    );
    if totals.bad > 0 {
        eprintln!("{} bad line(s) skipped", totals.bad);
    }
    Ok(if totals.bad > 0 && !args.skip_errors {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// OpenTSDB's line at each millionth point: the points so far and the last million's rate.
fn ping(totals: &mut Totals, bar: &ProgressBar) {
    let millions = totals.points / 1_000_000;
    if millions <= totals.millions {
        return;
    }
    totals.millions = millions;
    let now = Instant::now();
    let ms = totals
        .last_ping
        .map_or(0, |t| now.duration_since(t).as_millis())
        .max(1);
    totals.last_ping = Some(now);
    bar.suspend(|| {
        eprintln!(
            "... {} data points in {ms}ms ({:.1} points/s)",
            millions * 1_000_000,
            1_000_000.0 * 1000.0 / ms as f64
        );
    });
}

fn open_input(file: &str, bar: &ProgressBar) -> anyhow::Result<Box<dyn BufRead>> {
    let raw: Box<dyn Read> = if file == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(bar.wrap_read(File::open(file).with_context(|| format!("cannot open {file}"))?))
    };
    let gz = Path::new(file).extension().is_some_and(|e| e == "gz");
    Ok(if gz {
        Box::new(BufReader::new(flate2::read::MultiGzDecoder::new(raw)))
    } else {
        Box::new(BufReader::new(raw))
    })
}

fn import_file(
    file: &str,
    sink: &Sink,
    bar: &ProgressBar,
    started: Instant,
    totals: &mut Totals,
) -> anyhow::Result<()> {
    let mut input = open_input(file, bar)?;
    let mut lines: Vec<(usize, String)> = Vec::with_capacity(BATCH_LINES);
    let mut line_no = 0usize;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = input
            .read_until(b'\n', &mut buf)
            .with_context(|| format!("cannot read {file}"))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let text = String::from_utf8_lossy(&buf)
            .trim_end_matches(['\n', '\r'])
            .to_string();
        if text.trim().is_empty() {
            continue;
        }
        lines.push((line_no, text));
        if lines.len() >= BATCH_LINES {
            send_batch(file, &lines, sink, totals)?;
            ping(totals, bar);
            lines.clear();
            let rate = totals.points as f64 / started.elapsed().as_secs_f64().max(1e-9);
            bar.set_message(format!("{} points, {rate:.0} points/s", totals.points));
        }
    }
    send_batch(file, &lines, sink, totals)?;
    ping(totals, bar);
    Ok(())
}

fn report(file: &str, line: usize, msg: &str, totals: &mut Totals) {
    totals.bad += 1;
    eprintln!("{file}:{line}: {msg}");
}

/// A line of input and its number.
type Line = (usize, String);

/// Sends a batch's `put` lines, then its `rollup` lines.
fn send_batch(
    file: &str,
    lines: &[(usize, String)],
    sink: &Sink,
    totals: &mut Totals,
) -> anyhow::Result<()> {
    let (rollups, puts): (Vec<Line>, Vec<Line>) = lines
        .iter()
        .cloned()
        .partition(|(_, l)| l.starts_with("rollup "));
    send_puts(file, &puts, sink, totals)?;
    send_rollups(file, &rollups, sink, totals)
}

fn send_rollups(
    file: &str,
    lines: &[(usize, String)],
    sink: &Sink,
    totals: &mut Totals,
) -> anyhow::Result<()> {
    let mut tags = Vec::new();
    let mut good = Vec::with_capacity(lines.len());
    for (n, l) in lines {
        match parse_rollup_line(&l["rollup ".len()..], &mut tags) {
            Ok(p) => good.push((*n, p)),
            Err(e) => report(file, *n, &e.to_string(), totals),
        }
    }
    match sink {
        Sink::Local(db) => {
            let points: Vec<RollupPoint<'_>> = good
                .iter()
                .map(|(_, (which, p))| RollupPoint {
                    metric: p.metric,
                    timestamp: p.timestamp,
                    value: p.value,
                    tags: &tags[p.tags.clone()],
                    interval: which.interval,
                    aggregator: which.aggregator,
                    group_by: which.group_by,
                })
                .collect();
            let outcome = db.add_rollup_points(&points, false)?;
            tally(file, &good, &outcome.errors, outcome.stored, totals);
        }
        Sink::Remote {
            agent,
            base,
            authorization,
        } => {
            let body: Vec<serde_json::Value> = good
                .iter()
                .map(|(_, (which, p))| {
                    let mut point = point_json(p, &tags);
                    for (name, field) in [
                        ("interval", which.interval),
                        ("aggregator", which.aggregator),
                        ("groupByAggregator", which.group_by),
                    ] {
                        if let Some(v) = field {
                            point[name] = json!(v);
                        }
                    }
                    point
                })
                .collect();
            let lines: Vec<usize> = good.iter().map(|(n, _)| *n).collect();
            let url = format!("{base}/api/rollup?details");
            post(agent, authorization, &url, &body, &lines, file, totals)?;
        }
    }
    Ok(())
}

/// Counts a batch's stored points and reports its refused ones against their lines
/// (`good[i].0` is the line of the batch's point `i`).
fn tally<T, E: std::fmt::Display>(
    file: &str,
    good: &[(usize, T)],
    errors: &[(usize, E)],
    stored: usize,
    totals: &mut Totals,
) {
    for (i, e) in errors {
        report(file, good[*i].0, &e.to_string(), totals);
    }
    totals.points += stored as u64;
}

fn point_json(p: &PutLine<'_>, tags: &[(&str, &str)]) -> serde_json::Value {
    let t: serde_json::Map<String, serde_json::Value> = tags[p.tags.clone()]
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    json!({"metric": p.metric, "timestamp": p.timestamp, "value": value_text(p.value), "tags": t})
}

/// Posts points to a TSD with `?details` and reports its errors against the lines they came
/// from (`lines[i]` is the line of `body[i]`).
fn post(
    agent: &ureq::Agent,
    authorization: &Option<String>,
    url: &str,
    body: &[serde_json::Value],
    lines: &[usize],
    file: &str,
    totals: &mut Totals,
) -> anyhow::Result<()> {
    if body.is_empty() {
        return Ok(());
    }
    let mut request = agent.post(url).config().http_status_as_error(false).build();
    if let Some(authorization) = authorization {
        request = request.header("Authorization", authorization);
    }
    let mut resp = request
        .send_json(body)
        .with_context(|| format!("cannot reach {url}"))?;
    crate::remote::check_status(resp.status().as_u16(), url)?;
    let answer: serde_json::Value = resp
        .body_mut()
        .read_json()
        .context("the TSD's answer is not JSON")?;
    let success = answer["success"].as_u64().unwrap_or(0);
    // Errors come in input order, each echoing its point: match them to lines.
    let mut next = 0usize;
    for err in answer["errors"].as_array().into_iter().flatten() {
        let dp = &err["datapoint"];
        while next < body.len()
            && (body[next]["metric"] != dp["metric"] || body[next]["timestamp"] != dp["timestamp"])
        {
            next += 1;
        }
        let line = lines.get(next).copied().unwrap_or(0);
        report(file, line, err["error"].as_str().unwrap_or("error"), totals);
        next += 1;
    }
    totals.points += success;
    Ok(())
}

fn send_puts(
    file: &str,
    lines: &[(usize, String)],
    sink: &Sink,
    totals: &mut Totals,
) -> anyhow::Result<()> {
    let mut tags = Vec::new();
    let parsed: Vec<(usize, Result<PutLine<'_>, PutError>)> = lines
        .iter()
        .map(|(n, l)| (*n, parse_put(l, &mut tags).map(as_imported)))
        .collect();
    let mut good: Vec<(usize, &PutLine<'_>)> = Vec::with_capacity(parsed.len());
    for (n, p) in &parsed {
        match p {
            Ok(p) => good.push((*n, p)),
            Err(e) => report(file, *n, &e.to_string(), totals),
        }
    }
    match sink {
        Sink::Local(db) => {
            let points: Vec<IncomingPoint<'_>> = good
                .iter()
                .map(|(_, p)| IncomingPoint {
                    metric: p.metric,
                    timestamp: p.timestamp,
                    value: p.value,
                    tags: &tags[p.tags.clone()],
                    line_tags: Some(p.tags_text),
                })
                .collect();
            let outcome = db.add_points(&points);
            tally(file, &good, &outcome.errors, outcome.stored, totals);
        }
        Sink::Remote {
            agent,
            base,
            authorization,
        } => {
            let body: Vec<serde_json::Value> =
                good.iter().map(|(_, p)| point_json(p, &tags)).collect();
            let lines: Vec<usize> = good.iter().map(|(n, _)| *n).collect();
            let url = format!("{base}/api/put?details");
            post(agent, authorization, &url, &body, &lines, file, totals)?;
        }
    }
    Ok(())
}

/// OpenTSDB's importer stores every non-integer as a 4-byte float (the put path keeps 8 bytes
/// when 4 would lose precision).
fn as_imported(mut p: PutLine<'_>) -> PutLine<'_> {
    if let hourglass_core::value::Value::Double(d) = p.value {
        p.value = hourglass_core::value::Value::Float(d as f32);
    }
    p
}

fn value_text(v: hourglass_core::value::Value) -> String {
    match v {
        hourglass_core::value::Value::Int(i) => i.to_string(),
        other => hourglass_core::value::java_double_text(other.as_f64()),
    }
}
