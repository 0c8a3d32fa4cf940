//! `tsdb migrate --from URL`: copies a running TSD (OpenTSDB 2.x, or another Hourglass)
//! through its HTTP API into the local store, or into a target TSD (`--url`), without loss:
//! raw points exactly (integers stay integers, milliseconds stay milliseconds), series and
//! global annotations, UID meta and TS meta; then compares every series' point count and sum
//! on both sides.
//!
//! 1. Metrics: `--metric`, `--metrics-file`, else `/api/suggest?type=metrics` for each
//!    `--prefix` (or all), paged by extending the prefix while an answer fills `max`.
//! 2. Survey: per metric, one query (`zimsum` of a `{chunk}h-count` downsample) tells which
//!    chunks of `--chunk-hours` (aligned to the epoch, so to OpenTSDB's hourly rows) hold
//!    points and how many; empty chunks are never asked for.
//! 3. Copy: per (metric, chunk), one query with aggregator `none` and `msResolution` gives
//!    each series' raw points and annotations; the points go to the target's
//!    `/api/put?details&sync` in batches, the annotations to `/api/annotation/bulk`. A chunk
//!    done is recorded in the checkpoint; `--concurrency` chunks run at once.
//! 4. Global annotations (`/api/annotations`), then per metric UID meta (`/api/uid/uidmeta`)
//!    and TS meta (`/api/uid/tsmeta`) of the series the source lists.
//! 5. Verification: per metric, aggregator `none` with `0all-count` and `0all-sum` on both
//!    sides; differences printed as a table. Exit status 0 only when there is none.

mod checkpoint;
mod client;
mod local;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use parking_lot::Mutex;
use serde_json::{Map, Value, json};

use self::checkpoint::{Checkpoint, GLOBAL_NOTES_UNIT, Header, meta_unit, points_unit};
use self::client::{Tsd, encode};
use crate::open::StoreArgs;

#[derive(Debug, clap::Args)]
pub(crate) struct MigrateArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// The TSD to copy from, e.g. http://opentsdb:4242 (OpenTSDB 2.x or Hourglass).
    #[arg(long, value_name = "URL")]
    from: String,
    /// Write to this TSD's HTTP API instead of the local store (credentials: as `tsdb
    /// import --url`, from HOURGLASS_TOKEN or HOURGLASS_USER/HOURGLASS_PASSWORD).
    #[arg(long, value_name = "TARGET")]
    url: Option<String>,
    /// Start of the range (OpenTSDB's time forms: `2024/01/01-00:00:00`, seconds, ms,
    /// `2w-ago`). Default: the epoch.
    #[arg(long, value_name = "TIME")]
    start: Option<String>,
    /// End of the range, inclusive (same forms). Default: now, when the migration began.
    #[arg(long, value_name = "TIME")]
    end: Option<String>,
    /// A metric to copy (repeatable); without --metric, --metrics-file or --prefix every
    /// metric the source suggests is copied.
    #[arg(long = "metric", value_name = "NAME")]
    metrics: Vec<String>,
    /// A file of metric names, one a line (`#` starts a comment).
    #[arg(long, value_name = "FILE")]
    metrics_file: Option<PathBuf>,
    /// Copy the metrics whose names start with P (repeatable), found with /api/suggest.
    #[arg(long = "prefix", value_name = "P")]
    prefixes: Vec<String>,
    /// Record the work done here, and skip it when run again with the same flags.
    #[arg(long, value_name = "FILE")]
    checkpoint: Option<PathBuf>,
    /// Queries run at once against the source.
    #[arg(long, value_name = "N", default_value_t = 4)]
    concurrency: usize,
    /// Print what would be copied (metrics, series, points) and stop.
    #[arg(long)]
    dry_run: bool,
    /// Hours of one metric asked for in one query (a whole number of OpenTSDB's hourly rows).
    #[arg(long, value_name = "N", default_value_t = 6)]
    chunk_hours: u32,
    /// Points per /api/put request to the target.
    #[arg(long, value_name = "N", default_value_t = 5000)]
    batch_points: usize,
    /// `max` of each /api/suggest request; a full answer is paged by longer prefixes.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    suggest_max: usize,
    /// `limit` of /api/search/lookup (series counts of --dry-run); a full answer falls back
    /// to counting with a query.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    lookup_limit: usize,
    /// Tries again after a 5xx answer or a failed connection, with backoff (200 ms
    /// doubling to 10 s).
    #[arg(long, value_name = "N", default_value_t = 8)]
    retries: u32,
    /// Do not copy UID meta and TS meta.
    #[arg(long)]
    no_meta: bool,
}

/// Everything the workers share.
struct Run {
    source: Tsd,
    target: Option<Tsd>,
    start_ms: i64,
    end_ms: i64,
    chunk_ms: i64,
    batch_points: usize,
    checkpoint: Option<Checkpoint>,
    /// Target UIDs by (kind, name), learnt from /api/uid/assign.
    target_uids: Mutex<HashMap<(&'static str, String), String>>,
    /// Source UIDs whose meta was looked at already (kind, uid).
    uid_meta_seen: Mutex<HashSet<(&'static str, String)>>,
    points: AtomicU64,
    series_notes: AtomicU64,
    global_notes: AtomicU64,
    uid_meta_copied: AtomicU64,
    uid_meta_absent: AtomicU64,
    ts_meta_copied: AtomicU64,
    ts_meta_absent: AtomicU64,
    meta_skipped: Mutex<Vec<String>>,
    failures: Mutex<Vec<String>>,
}

impl Run {
    fn target(&self) -> anyhow::Result<&Tsd> {
        self.target.as_ref().context("no target in a dry run")
    }

    fn record(&self, unit: &str) -> anyhow::Result<()> {
        match &self.checkpoint {
            Some(c) => c.record(unit),
            None => Ok(()),
        }
    }

    fn is_done(&self, unit: &str) -> bool {
        self.checkpoint.as_ref().is_some_and(|c| c.is_done(unit))
    }

    fn fail(&self, what: String) {
        tracing::error!("{what}");
        self.failures.lock().push(what);
    }
}

pub(crate) fn run(args: &MigrateArgs) -> anyhow::Result<ExitCode> {
    if args.concurrency == 0 || args.concurrency > 256 {
        anyhow::bail!("--concurrency must be between 1 and 256");
    }
    if args.chunk_hours == 0 || args.chunk_hours > 24 * 366 {
        anyhow::bail!("--chunk-hours must be between 1 and 8784");
    }
    if args.batch_points == 0 || args.suggest_max == 0 || args.lookup_limit == 0 {
        anyhow::bail!("--batch-points, --suggest-max and --lookup-limit must be positive");
    }
    // Writing here resolves duplicates as Hourglass does.
    let mut refused = Vec::new();
    if args.url.is_none() {
        refused.push(crate::open::OTSDB_TIMESTAMP);
    }
    let tz = args.store.config_refusing(&refused)?.timezone()?;
    let now_ms = chrono::Utc::now().timestamp_millis();
    let start_arg = args.start.clone().unwrap_or_default();
    let end_arg = args.end.clone().unwrap_or_default();
    let start_ms = match args.start.as_deref() {
        Some(t) => hourglass_core::time::parse_time_in(t, now_ms, tz)
            .with_context(|| format!("bad --start {t:?}"))?,
        None => 0,
    };
    let end_ms = match args.end.as_deref() {
        Some(t) => hourglass_core::time::parse_time_in(t, now_ms, tz)
            .with_context(|| format!("bad --end {t:?}"))?,
        None => now_ms,
    };
    if end_ms < start_ms {
        anyhow::bail!("The end timestamp cannot be less than the start timestamp");
    }
    let source = Tsd::source(&args.from, args.retries)?;
    let header = Header {
        from: source.base.clone(),
        start_arg,
        end_arg,
        chunk_hours: args.chunk_hours,
        start_ms,
        end_ms,
    };
    let (checkpoint, header) = match (&args.checkpoint, args.dry_run) {
        (Some(path), false) => {
            let (c, h) = Checkpoint::open(path, header)?;
            if c.done_count() > 0 {
                eprintln!(
                    "resuming from {}: {} unit(s) done before",
                    path.display(),
                    c.done_count()
                );
            }
            (Some(c), h)
        }
        _ => (None, header),
    };
    for t in [header.start_ms, header.end_ms] {
        time_arg(t)?;
    }
    let version = source
        .get("/api/version")
        .with_context(|| format!("cannot reach the source {}", source.base))?;
    if !version.ok() {
        anyhow::bail!(
            "{} is not a TSD: /api/version answered {}: {}",
            source.base,
            version.status,
            version.message()
        );
    }
    let version = version.json()?;
    eprintln!(
        "source {}: {} {}",
        source.base,
        version["version"].as_str().unwrap_or("?"),
        version["short_revision"].as_str().unwrap_or("")
    );
    let started = Instant::now();
    let metrics = discover_metrics(args, &source)?;
    eprintln!("{} metric(s) to copy", metrics.len());

    let mut local = None;
    let target = if args.dry_run {
        None
    } else if let Some(url) = &args.url {
        Some(Tsd::new(
            url,
            crate::remote::authorization()?,
            args.retries,
        )?)
    } else {
        let l = local::Local::start(&args.store)?;
        let t = Tsd::new(&l.base, None, args.retries)?;
        local = Some(l);
        Some(t)
    };
    let run = Arc::new(Run {
        source,
        target,
        start_ms: header.start_ms,
        end_ms: header.end_ms,
        chunk_ms: i64::from(args.chunk_hours) * 3_600_000,
        batch_points: args.batch_points,
        checkpoint,
        target_uids: Mutex::new(HashMap::new()),
        uid_meta_seen: Mutex::new(HashSet::new()),
        points: AtomicU64::new(0),
        series_notes: AtomicU64::new(0),
        global_notes: AtomicU64::new(0),
        uid_meta_copied: AtomicU64::new(0),
        uid_meta_absent: AtomicU64::new(0),
        ts_meta_copied: AtomicU64::new(0),
        ts_meta_absent: AtomicU64::new(0),
        meta_skipped: Mutex::new(Vec::new()),
        failures: Mutex::new(Vec::new()),
    });

    // Survey: which chunks of each metric hold points.
    let surveys = parallel(&metrics, args.concurrency, |m| survey(&run, m));
    let mut plans = Vec::with_capacity(metrics.len());
    for (metric, s) in metrics.iter().zip(surveys) {
        match s {
            Ok(chunks) => plans.push((metric.clone(), chunks)),
            Err(e) => run.fail(format!("{metric}: survey failed: {e:#}")),
        }
    }
    if args.dry_run {
        let code = dry_run(args, &run, &plans)?;
        return Ok(code);
    }
    let mut units = Vec::new();
    for (metric, chunks) in &plans {
        let metric: Arc<str> = Arc::from(metric.as_str());
        for &(chunk, count) in chunks {
            if !run.is_done(&points_unit(&metric, chunk)) {
                units.push((Arc::clone(&metric), chunk, count));
            }
        }
    }
    let total_points: u64 = units.iter().map(|u| u.2).sum();
    eprintln!(
        "copying {} chunk(s), about {total_points} point(s), {} at once",
        units.len(),
        args.concurrency
    );
    let bar = ProgressBar::new(total_points);
    bar.set_style(
        ProgressStyle::with_template(
            "{human_pos}/{human_len} points [{wide_bar}] {per_sec} {msg} ETA {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let copy_started = Instant::now();
    let chunks_done = AtomicUsize::new(0);
    let last_line = Mutex::new(Instant::now());
    let unit_count = units.len();
    parallel(
        &units,
        args.concurrency,
        |(metric, chunk, _)| match copy_chunk(&run, metric, *chunk) {
            Ok(n) => {
                bar.inc(n);
                let done = chunks_done.fetch_add(1, Ordering::Relaxed) + 1;
                bar.set_message(format!("{done}/{unit_count} chunks"));
                if bar.is_hidden() {
                    let mut last = last_line.lock();
                    if last.elapsed() >= Duration::from_secs(5) || done == unit_count {
                        *last = Instant::now();
                        progress_line(&run, copy_started, done, unit_count, total_points);
                    }
                }
            }
            Err(e) => run.fail(format!(
                "{metric}: chunk at {} failed: {e:#}",
                chrono_text(*chunk)
            )),
        },
    );
    bar.finish_and_clear();
    let copy_secs = copy_started.elapsed().as_secs_f64();
    let copied = run.points.load(Ordering::Relaxed);

    if !run.is_done(GLOBAL_NOTES_UNIT) {
        match copy_global_notes(&run) {
            Ok(()) => run.record(GLOBAL_NOTES_UNIT)?,
            Err(e) => run.fail(format!("global annotations: {e:#}")),
        }
    }
    // The source's series of each metric (for meta and verification).
    let metric_names: Vec<String> = plans.iter().map(|(m, _)| m.clone()).collect();
    let sources = parallel(&metric_names, args.concurrency, |m| {
        census(&run.source, &run, m)
    });
    let mut censuses = Vec::with_capacity(metric_names.len());
    for (metric, c) in metric_names.iter().zip(sources) {
        match c {
            Ok(c) => censuses.push((metric.clone(), c)),
            Err(e) => run.fail(format!("{metric}: verification failed: {e:#}")),
        }
    }
    if !args.no_meta {
        copy_all_meta(&run, &censuses, args.concurrency)?;
    }
    let checks = parallel(&censuses, args.concurrency, |(m, source)| {
        verify_metric(&run, m, source)
    });
    if let Some(l) = local {
        l.finish()?;
    }
    let mut rows = Vec::new();
    for ((metric, _), c) in censuses.iter().zip(checks) {
        match c {
            Ok(r) => rows.push(r),
            Err(e) => run.fail(format!("{metric}: verification failed: {e:#}")),
        }
    }
    let differences = print_verification(&rows)?;
    let failures = run.failures.lock().clone();
    eprintln!(
        "copied {copied} point(s) in {copy_secs:.1} s ({:.0} points/s), {} series and {} global \
         annotation(s); UID meta: {} copied, {} without meta; TS meta: {} copied, {} without; \
         {} request(s) tried again; {:.1} s in all",
        copied as f64 / copy_secs.max(1e-9),
        run.series_notes.load(Ordering::Relaxed),
        run.global_notes.load(Ordering::Relaxed),
        run.uid_meta_copied.load(Ordering::Relaxed),
        run.uid_meta_absent.load(Ordering::Relaxed),
        run.ts_meta_copied.load(Ordering::Relaxed),
        run.ts_meta_absent.load(Ordering::Relaxed),
        run.source.retried.load(Ordering::Relaxed)
            + run
                .target
                .as_ref()
                .map_or(0, |t| t.retried.load(Ordering::Relaxed)),
        started.elapsed().as_secs_f64()
    );
    for s in run.meta_skipped.lock().iter() {
        eprintln!("meta skipped: {s}");
    }
    for f in &failures {
        eprintln!("failed: {f}");
    }
    if differences == 0 && failures.is_empty() {
        eprintln!("verified: every series has the same point count and sum on both sides");
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "NOT verified: {differences} series differ, {} step(s) failed{}",
            failures.len(),
            if args.checkpoint.is_some() {
                "; run again with the same flags to resume"
            } else {
                ""
            }
        );
        Ok(ExitCode::from(1))
    }
}

fn progress_line(run: &Run, started: Instant, done: usize, units: usize, total: u64) {
    let points = run.points.load(Ordering::Relaxed);
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    let rate = points as f64 / secs;
    let eta = if rate > 0.0 {
        (total.saturating_sub(points)) as f64 / rate
    } else {
        0.0
    };
    eprintln!("{done}/{units} chunks, {points}/{total} points, {rate:.0} points/s, ETA {eta:.0} s");
}

/// Runs `f` on every item with at most `n` at once; results in the items' order.
fn parallel<T: Sync, R: Send>(items: &[T], n: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let results: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..n.min(items.len()) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    let r = f(item);
                    *results[i].lock() = Some(r);
                }
            });
        }
    });
    results.into_iter().filter_map(|r| r.into_inner()).collect()
}

/// A time as OpenTSDB's query reads it: seconds when whole, else milliseconds (13 digits:
/// fewer would be read as seconds).
fn time_arg(ms: i64) -> anyhow::Result<String> {
    if ms % 1000 == 0 {
        Ok((ms / 1000).to_string())
    } else if ms >= 1_000_000_000_000 {
        Ok(ms.to_string())
    } else {
        anyhow::bail!(
            "{ms} ms: a time before 2001-09-09 must be a whole second (OpenTSDB reads fewer than 13 digits as seconds)"
        )
    }
}

fn chrono_text(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|| ms.to_string())
}

// ---------------------------------------------------------------------------------------
// Discovery

fn discover_metrics(args: &MigrateArgs, source: &Tsd) -> anyhow::Result<Vec<String>> {
    let mut names: Vec<String> = args.metrics.clone();
    if let Some(path) = &args.metrics_file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        names.extend(
            text.lines()
                .map(|l| l.split('#').next().unwrap_or_default().trim())
                .filter(|l| !l.is_empty())
                .map(str::to_string),
        );
    }
    let mut prefixes = args.prefixes.clone();
    if names.is_empty() && prefixes.is_empty() {
        prefixes.push(String::new());
    }
    for p in &prefixes {
        names.extend(suggest_all(source, p, args.suggest_max)?);
    }
    names.sort();
    names.dedup();
    Ok(names)
}

/// Characters OpenTSDB accepts in names without `tsd.core.tag.allow_specialchars`, in byte
/// order: the prefixes tried when a suggest answer is full.
const NAME_CHARS: &str = "-./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz";

fn suggest(source: &Tsd, prefix: &str, max: usize) -> anyhow::Result<Vec<String>> {
    let answer = source.get(&format!(
        "/api/suggest?type=metrics&q={}&max={max}",
        encode(prefix)
    ))?;
    if !answer.ok() {
        anyhow::bail!(
            "/api/suggest answered {}: {}",
            answer.status,
            answer.message()
        );
    }
    let names = answer.json()?;
    Ok(names
        .as_array()
        .context("/api/suggest did not answer a list")?
        .iter()
        .filter_map(|n| n.as_str().map(str::to_string))
        .collect())
}

/// Every metric starting with `prefix`. Suggest answers at most `max` names in byte order;
/// a full answer is complete for the names whose next character sorts before the last
/// name's, and the rest is asked for again under longer prefixes.
fn suggest_all(source: &Tsd, prefix: &str, max: usize) -> anyhow::Result<Vec<String>> {
    let got = suggest(source, prefix, max)?;
    if got.len() < max {
        return Ok(got);
    }
    let next_char = |name: &str| name.get(prefix.len()..).and_then(|r| r.chars().next());
    let Some(last) = got.last().and_then(|n| next_char(n)) else {
        return Ok(got);
    };
    let mut out: Vec<String> = got
        .iter()
        .filter(|n| next_char(n).is_none_or(|c| c < last))
        .cloned()
        .collect();
    let mut tried = vec![last];
    tried.extend(NAME_CHARS.chars().filter(|&c| c > last));
    if !last.is_ascii() {
        tracing::warn!(
            "/api/suggest is full under {prefix:?}: names going on with characters after {last:?} may be missed; list them with --metric or --metrics-file"
        );
    } else {
        tracing::info!(
            "/api/suggest is full under {prefix:?} ({max}); paging by longer prefixes (names with characters beyond ASCII after {prefix:?}{last:?} need --metric or --metrics-file)"
        );
    }
    for c in tried {
        out.extend(suggest_all(source, &format!("{prefix}{c}"), max)?);
    }
    Ok(out)
}

/// The chunks of `metric` holding points, with their counts: one `zimsum` over a
/// `{chunk}h-count` downsample (buckets aligned to the epoch, as the chunks are).
fn survey(run: &Run, metric: &str) -> anyhow::Result<Vec<(i64, u64)>> {
    if let Some(t) = &run.target {
        // A target that does not create metrics by itself gets them now.
        target_uid(run, t, "metric", metric)?;
    }
    let body = json!({
        "start": time_arg(run.start_ms)?,
        "end": time_arg(run.end_ms)?,
        "msResolution": true,
        "noAnnotations": true,
        "queries": [{
            "metric": metric,
            "aggregator": "zimsum",
            "downsample": format!("{}h-count", run.chunk_ms / 3_600_000),
        }],
    });
    let answer = run.source.post("/api/query", &body.to_string())?;
    if !answer.ok() {
        if no_such_name(&answer.message()) {
            return Ok(Vec::new());
        }
        anyhow::bail!(
            "/api/query answered {}: {}",
            answer.status,
            answer.message()
        );
    }
    let mut chunks: BTreeMap<i64, u64> = BTreeMap::new();
    for series in answer.json()?.as_array().into_iter().flatten() {
        for (ts, count) in series["dps"].as_object().into_iter().flatten() {
            let ts: i64 = ts.parse().context("a time in the survey is not a number")?;
            let chunk = ts - ts.rem_euclid(run.chunk_ms);
            *chunks.entry(chunk).or_default() += count.as_f64().unwrap_or(0.0) as u64;
        }
    }
    Ok(chunks.into_iter().collect())
}

fn no_such_name(message: &str) -> bool {
    message.contains("No such name")
}

// ---------------------------------------------------------------------------------------
// Dry run

fn dry_run(
    args: &MigrateArgs,
    run: &Run,
    plans: &[(String, Vec<(i64, u64)>)],
) -> anyhow::Result<ExitCode> {
    let series = parallel(plans, args.concurrency, |(m, _)| {
        series_count(run, m, args.lookup_limit)
    });
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{:<40} {:>10} {:>14} {:>8}  series from",
        "metric", "series", "points", "chunks"
    )?;
    let (mut total_series, mut total_points, mut total_chunks) = (0u64, 0u64, 0usize);
    for ((metric, chunks), s) in plans.iter().zip(series) {
        let points: u64 = chunks.iter().map(|c| c.1).sum();
        let (n, how) = match s {
            Ok(v) => v,
            Err(e) => {
                run.fail(format!("{metric}: cannot count series: {e:#}"));
                (0, "failed")
            }
        };
        total_series += n;
        total_points += points;
        total_chunks += chunks.len();
        writeln!(
            out,
            "{metric:<40} {n:>10} {points:>14} {:>8}  {how}",
            chunks.len()
        )?;
    }
    writeln!(
        out,
        "{:<40} {total_series:>10} {total_points:>14} {total_chunks:>8}",
        format!("total ({} metrics)", plans.len())
    )?;
    let failures = run.failures.lock();
    for f in failures.iter() {
        eprintln!("failed: {f}");
    }
    Ok(if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The number of series of `metric`: from `/api/search/lookup` (`useMeta=false`, OpenTSDB's
/// data-table scan), else from a `none` query over the range (no meta table or lookup
/// needed).
fn series_count(run: &Run, metric: &str, limit: usize) -> anyhow::Result<(u64, &'static str)> {
    let body = json!({"metric": metric, "limit": limit, "useMeta": false});
    let answer = run.source.post("/api/search/lookup", &body.to_string())?;
    if answer.ok() {
        let found = answer.json()?;
        let n = found["results"].as_array().map_or(0, Vec::len);
        if n < limit {
            return Ok((n as u64, "lookup"));
        }
    }
    let stats = census(&run.source, run, metric)?;
    Ok((stats.len() as u64, "query"))
}

// ---------------------------------------------------------------------------------------
// Copy

/// One series of a query's answer.
struct Series {
    metric: String,
    tags: BTreeMap<String, String>,
}

fn tags_of(series: &Value) -> BTreeMap<String, String> {
    series["tags"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
        .collect()
}

/// Copies one chunk of a metric; returns the points written.
fn copy_chunk(run: &Run, metric: &str, chunk: i64) -> anyhow::Result<u64> {
    let target = run.target()?;
    // Inclusive bounds; a query ending on a whole second ends with it, the points after
    // the chunk are dropped here.
    let lo = chunk.max(run.start_ms);
    let hi = (chunk + run.chunk_ms - 1).min(run.end_ms);
    let query_end = if hi >= 1_000_000_000_000 || hi % 1000 == 0 {
        hi
    } else {
        (hi / 1000 + 1) * 1000
    };
    // An hour before the chunk is read too, as context for the first points' kind (see
    // [`PointKinds`]).
    let context_start = if lo >= 1_000_000_000_000 || (lo - CONTEXT_MS) % 1000 == 0 {
        (lo - CONTEXT_MS).max(0)
    } else {
        lo
    };
    let body = json!({
        "start": time_arg(context_start)?,
        "end": time_arg(query_end)?,
        "msResolution": true,
        "queries": [{"metric": metric, "aggregator": "none"}],
    });
    let answer = run.source.post("/api/query", &body.to_string())?;
    if !answer.ok() {
        if no_such_name(&answer.message()) {
            run.record(&points_unit(metric, chunk))?;
            return Ok(0);
        }
        anyhow::bail!(
            "/api/query answered {}: {}",
            answer.status,
            answer.message()
        );
    }
    let results = answer.json()?;
    let mut batch = String::new();
    let mut in_batch = 0usize;
    let mut written = 0u64;
    let mut notes: Vec<(Series, Value)> = Vec::new();
    for series in results.as_array().into_iter().flatten() {
        let name = series["metric"].as_str().unwrap_or(metric).to_string();
        let tags = tags_of(series);
        let head = format!(
            "{{\"metric\":{},\"tags\":{},",
            Value::String(name.clone()),
            serde_json::to_string(&tags)?
        );
        let mut kinds = PointKinds::default();
        for (ts, value) in series["dps"].as_object().into_iter().flatten() {
            let ts: i64 = ts
                .parse()
                .with_context(|| format!("a point's time {ts:?} is not a number"))?;
            let text = kinds.next(value);
            if ts < lo || ts > hi {
                continue;
            }
            let Some(text) = text else {
                continue;
            };
            // Whole seconds as seconds: the target stores them as OpenTSDB stores a put in
            // seconds; others in ms.
            let time = if ts % 1000 == 0 { ts / 1000 } else { ts };
            batch.push(if in_batch == 0 { '[' } else { ',' });
            batch.push_str(&head);
            batch.push_str(&format!("\"timestamp\":{time},\"value\":{text}}}"));
            in_batch += 1;
            if in_batch >= run.batch_points {
                batch.push(']');
                written += put(target, &batch)?;
                batch.clear();
                in_batch = 0;
            }
        }
        for note in series["annotations"].as_array().into_iter().flatten() {
            let start = note_start_ms(note);
            if (lo..=hi).contains(&start) {
                notes.push((
                    Series {
                        metric: name.clone(),
                        tags: tags.clone(),
                    },
                    note.clone(),
                ));
            }
        }
    }
    if in_batch > 0 {
        batch.push(']');
        written += put(target, &batch)?;
    }
    if !notes.is_empty() {
        let mut bulk = Vec::with_capacity(notes.len());
        for (series, mut note) in notes {
            note["tsuid"] = Value::String(target_tsuid(run, target, &series)?);
            bulk.push(note);
        }
        post_notes(target, &bulk)?;
        run.series_notes
            .fetch_add(bulk.len() as u64, Ordering::Relaxed);
    }
    run.points.fetch_add(written, Ordering::Relaxed);
    run.record(&points_unit(metric, chunk))?;
    Ok(written)
}

/// How far before a chunk its query starts, for [`PointKinds`]: the previous hourly row.
const CONTEXT_MS: i64 = 3_600_000;

/// The kind of each point of a series, read from its answer in time order.
///
/// OpenTSDB writes a point as an integer only when it and the point after it are integers
/// (its aggregation iterator looks one point ahead; Hourglass answers alike), so an integer
/// followed by a float comes as a whole float (`5.0`). An integer answer tells that the next
/// point is an integer too: a whole float right after an integer answer is an integer.
/// Left ambiguous: an integer after a float or first in the answer, and followed by a
/// float; it is copied as a float of the same value, and answers the same queries (its
/// previous point is no integer answer, its next a float).
#[derive(Debug, Default)]
struct PointKinds {
    previous_int: bool,
}

impl PointKinds {
    /// The next point's value for the target's put; `None` for what a put refuses.
    fn next(&mut self, value: &Value) -> Option<String> {
        let int = matches!(value, Value::Number(n) if n.is_i64() || n.is_u64());
        let text = match value {
            Value::Number(n) if !int && self.previous_int => n
                .as_f64()
                .filter(|d| d.fract() == 0.0 && d.abs() <= 9_007_199_254_740_992.0)
                .map(|d| (d as i64).to_string())
                .or_else(|| value_text(value)),
            _ => value_text(value),
        };
        self.previous_int = int;
        text
    }
}

/// A point's value as the target's put reads it: an integer as its digits, a float as a
/// number with a point or exponent (so it stays a float), exactly the source's value.
fn value_text(value: &Value) -> Option<String> {
    match value {
        Value::Number(n) if n.is_i64() || n.is_u64() => Some(n.to_string()),
        Value::Number(n) => n.as_f64().map(|d| {
            let text = hourglass_core::value::java_double_text(d);
            if hourglass_core::value::looks_like_integer(&text) {
                format!("{text}.0")
            } else {
                text
            }
        }),
        // OpenTSDB writes NaN and infinities as bare words; a put refuses them, and no
        // stored point holds one.
        _ => None,
    }
}

/// An annotation's start in ms (OpenTSDB keeps seconds or ms, as given).
fn note_start_ms(note: &Value) -> i64 {
    let t = note["startTime"].as_i64().unwrap_or(0);
    if t > i64::from(u32::MAX) { t } else { t * 1000 }
}

/// Posts a batch of points with `?details&sync`; every point must be stored.
fn put(target: &Tsd, body: &str) -> anyhow::Result<u64> {
    let answer = target.post("/api/put?details&sync", body)?;
    let details = answer.json().unwrap_or(Value::Null);
    let failed = details["failed"].as_u64().unwrap_or(0);
    if !answer.ok() || failed > 0 {
        let first = &details["errors"][0];
        anyhow::bail!(
            "the target refused {failed} point(s) ({}): {} {}",
            answer.status,
            first["error"].as_str().unwrap_or(&answer.message()),
            first["datapoint"]
        );
    }
    Ok(details["success"].as_u64().unwrap_or(0))
}

fn post_notes(target: &Tsd, notes: &[Value]) -> anyhow::Result<()> {
    let answer = target.post(
        "/api/annotation/bulk",
        &Value::Array(notes.to_vec()).to_string(),
    )?;
    if !answer.ok() {
        anyhow::bail!(
            "/api/annotation/bulk answered {}: {}",
            answer.status,
            answer.message()
        );
    }
    Ok(())
}

/// The target's UID of a name, assigned if new (`/api/uid/assign` answers an existing
/// name's UID in its error).
fn target_uid(run: &Run, target: &Tsd, kind: &'static str, name: &str) -> anyhow::Result<String> {
    let key = (kind, name.to_string());
    if let Some(uid) = run.target_uids.lock().get(&key) {
        return Ok(uid.clone());
    }
    let answer = target.post("/api/uid/assign", &json!({ kind: [name] }).to_string())?;
    let found = answer.json()?;
    let uid = found[kind][name]
        .as_str()
        .map(str::to_string)
        .or_else(|| {
            found[format!("{kind}_errors")][name]
                .as_str()
                .and_then(|e| e.split("Name already exists with UID: ").nth(1))
                .map(|u| u.trim().to_string())
        })
        .with_context(|| {
            format!(
                "the target cannot give a UID to the {kind} {name:?} ({}): {}",
                answer.status, answer.body
            )
        })?;
    run.target_uids.lock().insert(key, uid.clone());
    Ok(uid)
}

/// The target's TSUID of a series: metric UID, then tag pairs in tag key UID order.
fn target_tsuid(run: &Run, target: &Tsd, series: &Series) -> anyhow::Result<String> {
    let mut tsuid = target_uid(run, target, "metric", &series.metric)?;
    let mut pairs = Vec::with_capacity(series.tags.len());
    for (k, v) in &series.tags {
        pairs.push((
            target_uid(run, target, "tagk", k)?,
            target_uid(run, target, "tagv", v)?,
        ));
    }
    pairs.sort();
    for (k, v) in pairs {
        tsuid.push_str(&k);
        tsuid.push_str(&v);
    }
    Ok(tsuid)
}

fn copy_global_notes(run: &Run) -> anyhow::Result<()> {
    let target = run.target()?;
    let start = run.start_ms.max(1000);
    let answer = run.source.get(&format!(
        "/api/annotations?start_time={}&end_time={}",
        time_arg(start)?,
        time_arg(run.end_ms.max(start))?
    ))?;
    if !answer.ok() {
        run.meta_skipped.lock().push(format!(
            "global annotations: the source answered {}: {}",
            answer.status,
            answer.message()
        ));
        return Ok(());
    }
    let notes: Vec<Value> = answer
        .json()?
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| n["tsuid"].as_str().is_none_or(str::is_empty))
        .cloned()
        .collect();
    if !notes.is_empty() {
        post_notes(target, &notes)?;
    }
    run.global_notes
        .fetch_add(notes.len() as u64, Ordering::Relaxed);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Meta and verification

/// One series' point count and sum over the range.
#[derive(Debug, Clone)]
struct Stat {
    tsuid: Option<String>,
    count: u64,
    sum: Option<serde_json::Number>,
}

/// Every series of `metric` on `tsd` over the range, by tags: aggregator `none` with
/// `0all-count` and `0all-sum`.
fn census(tsd: &Tsd, run: &Run, metric: &str) -> anyhow::Result<Census> {
    let ask = |downsample: &str| -> anyhow::Result<Vec<Value>> {
        let body = json!({
            "start": time_arg(run.start_ms)?,
            "end": time_arg(run.end_ms)?,
            "msResolution": true,
            "showTSUIDs": true,
            "noAnnotations": true,
            "queries": [{"metric": metric, "aggregator": "none", "downsample": downsample}],
        });
        let answer = tsd.post("/api/query", &body.to_string())?;
        if !answer.ok() {
            if no_such_name(&answer.message()) {
                return Ok(Vec::new());
            }
            anyhow::bail!(
                "{}/api/query answered {}: {}",
                tsd.base,
                answer.status,
                answer.message()
            );
        }
        Ok(answer.json()?.as_array().cloned().unwrap_or_default())
    };
    let mut out: BTreeMap<BTreeMap<String, String>, Stat> = BTreeMap::new();
    let first = |s: &Value| -> Option<Value> {
        s["dps"]
            .as_object()
            .and_then(|d| d.values().next().cloned())
    };
    for s in ask("0all-count")? {
        let count = first(&s).and_then(|v| v.as_f64()).unwrap_or(0.0) as u64;
        let tsuid = s["tsuids"][0].as_str().map(str::to_string);
        out.insert(
            tags_of(&s),
            Stat {
                tsuid,
                count,
                sum: None,
            },
        );
    }
    for s in ask("0all-sum")? {
        if let Some(stat) = out.get_mut(&tags_of(&s))
            && let Some(Value::Number(n)) = first(&s)
        {
            stat.sum = Some(n);
        }
    }
    Ok(out)
}

/// A series' point count and sum (as text) on one side.
type Side = (u64, String);

/// A metric's verdict.
#[derive(Debug)]
struct Verdict {
    metric: String,
    source_series: usize,
    target_series: usize,
    source_points: u64,
    target_points: u64,
    /// Series that differ: tags, source (count, sum), target (count, sum).
    differences: Vec<(String, Option<Side>, Option<Side>)>,
}

/// The series of a metric on one side, by tags.
type Census = BTreeMap<BTreeMap<String, String>, Stat>;

fn verify_metric(run: &Run, metric: &str, source: &Census) -> anyhow::Result<Verdict> {
    let copied = census(run.target()?, run, metric)?;
    let text = |s: &Stat| {
        (
            s.count,
            s.sum
                .as_ref()
                .map_or_else(|| "-".to_string(), ToString::to_string),
        )
    };
    let mut differences = Vec::new();
    let keys: std::collections::BTreeSet<_> = source.keys().chain(copied.keys()).collect();
    for key in keys {
        let a = source.get(key);
        let b = copied.get(key);
        let same = match (a, b) {
            (Some(a), Some(b)) => a.count == b.count && same_sum(a.sum.as_ref(), b.sum.as_ref()),
            (Some(a), None) => a.count == 0,
            (None, Some(b)) => b.count == 0,
            (None, None) => true,
        };
        if !same {
            let tags = key
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",");
            differences.push((tags, a.map(text), b.map(text)));
        }
    }
    Ok(Verdict {
        metric: metric.to_string(),
        source_series: source.len(),
        target_series: copied.len(),
        source_points: source.values().map(|s| s.count).sum(),
        target_points: copied.values().map(|s| s.count).sum(),
        differences,
    })
}

/// Sums agree: integers exactly, floats within what another order of additions can change.
fn same_sum(a: Option<&serde_json::Number>, b: Option<&serde_json::Number>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => {
            if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
                return x == y;
            }
            let (x, y) = (
                a.as_f64().unwrap_or(f64::NAN),
                b.as_f64().unwrap_or(f64::NAN),
            );
            x == y || (x - y).abs() <= 1e-9 * x.abs().max(y.abs())
        }
        (None, None) => true,
        _ => false,
    }
}

fn print_verification(rows: &[Verdict]) -> anyhow::Result<usize> {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{:<40} {:>9} {:>9} {:>14} {:>14}  verdict",
        "metric", "series", "copied", "points", "copied"
    )?;
    let mut differences = 0;
    for r in rows {
        let verdict = if r.differences.is_empty() {
            "same".to_string()
        } else {
            format!("{} series differ", r.differences.len())
        };
        writeln!(
            out,
            "{:<40} {:>9} {:>9} {:>14} {:>14}  {verdict}",
            r.metric, r.source_series, r.target_series, r.source_points, r.target_points
        )?;
        for (tags, a, b) in &r.differences {
            let side = |s: &Option<Side>| match s {
                Some((c, sum)) => format!("{c} points, sum {sum}"),
                None => "absent".to_string(),
            };
            writeln!(
                out,
                "    {{{tags}}}: source {}; target {}",
                side(a),
                side(b)
            )?;
        }
        differences += r.differences.len();
    }
    out.flush()?;
    Ok(differences)
}

/// Copies the UID meta of the metrics and their tags, and the TS meta of their series,
/// where the source has them: every series of every metric whose meta is not done yet,
/// `concurrency` at a time; a metric is done once all its series are.
fn copy_all_meta(
    run: &Run,
    censuses: &[(String, Census)],
    concurrency: usize,
) -> anyhow::Result<()> {
    let target = run.target()?;
    let mut work = Vec::new();
    for (i, (metric, census)) in censuses.iter().enumerate() {
        if run.is_done(&meta_unit(metric)) {
            continue;
        }
        work.extend(census.iter().map(|(tags, stat)| (i, tags, stat)));
    }
    let results = parallel(&work, concurrency, |(i, tags, stat)| {
        copy_series_meta(run, target, &censuses[*i].0, tags, stat)
    });
    let mut failed = vec![false; censuses.len()];
    for ((i, tags, _), r) in work.iter().zip(results) {
        if let Err(e) = r {
            failed[*i] = true;
            run.fail(format!("{} {tags:?}: meta: {e:#}", censuses[*i].0));
        }
    }
    for (i, (metric, _)) in censuses.iter().enumerate() {
        if !failed[i] && !run.is_done(&meta_unit(metric)) {
            run.record(&meta_unit(metric))?;
        }
    }
    Ok(())
}

/// The UID meta of a series' metric and tags, and its TS meta.
fn copy_series_meta(
    run: &Run,
    target: &Tsd,
    metric: &str,
    tags: &BTreeMap<String, String>,
    stat: &Stat,
) -> anyhow::Result<()> {
    let Some(tsuid) = &stat.tsuid else {
        return Ok(());
    };
    // The TSUID's UIDs: metric, then pairs; widths from its length (equal widths, as
    // OpenTSDB's defaults).
    let parts = 1 + 2 * tags.len();
    if tsuid.is_empty() || tsuid.len() % parts != 0 {
        let mut skipped = run.meta_skipped.lock();
        if skipped.len() < 20 {
            skipped.push(format!(
                "{metric}: the source's UID widths differ; its UID meta is not copied"
            ));
        }
    } else {
        let w = tsuid.len() / parts;
        let uid_at = |i: usize| tsuid.get(i * w..(i + 1) * w).unwrap_or_default();
        // The names come with each UID's meta.
        copy_uid_meta(run, target, "metric", uid_at(0))?;
        for i in 0..tags.len() {
            copy_uid_meta(run, target, "tagk", uid_at(1 + 2 * i))?;
            copy_uid_meta(run, target, "tagv", uid_at(2 + 2 * i))?;
        }
    }
    copy_ts_meta(run, target, metric, tags, tsuid)
}

/// Meta fields a user sets (the others are computed by the TSD).
const USER_FIELDS: [&str; 4] = ["displayName", "description", "notes", "custom"];

fn has_user_fields(meta: &Value, extra: &[&str]) -> bool {
    USER_FIELDS.iter().chain(extra).any(|f| match &meta[*f] {
        Value::Null => false,
        Value::String(s) => !s.is_empty(),
        Value::Object(o) => !o.is_empty(),
        Value::Number(n) => n.as_f64().is_some_and(|v| v != 0.0),
        _ => true,
    })
}

fn copy_uid_meta(run: &Run, target: &Tsd, kind: &'static str, uid: &str) -> anyhow::Result<()> {
    if !run.uid_meta_seen.lock().insert((kind, uid.to_string())) {
        return Ok(());
    }
    let answer = run
        .source
        .get(&format!("/api/uid/uidmeta?uid={uid}&type={kind}"))?;
    if !answer.ok() {
        run.uid_meta_absent.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    }
    let meta = answer.json()?;
    if !has_user_fields(&meta, &[]) {
        run.uid_meta_absent.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    }
    let name = meta["name"]
        .as_str()
        .with_context(|| format!("the source's UID meta of {kind} {uid} has no name"))?;
    let mut update = Map::new();
    update.insert("uid".into(), json!(target_uid(run, target, kind, name)?));
    update.insert("type".into(), json!(kind));
    for f in USER_FIELDS {
        if !meta[f].is_null() {
            update.insert(f.into(), meta[f].clone());
        }
    }
    let answer = target.post("/api/uid/uidmeta", &Value::Object(update).to_string())?;
    if !answer.ok() && answer.status != 304 {
        anyhow::bail!(
            "the target refused the UID meta of {kind} {name:?} ({}): {}",
            answer.status,
            answer.message()
        );
    }
    run.uid_meta_copied.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// TS meta fields a user sets, besides [`USER_FIELDS`].
const TS_FIELDS: [&str; 5] = ["units", "dataType", "retention", "max", "min"];

fn copy_ts_meta(
    run: &Run,
    target: &Tsd,
    metric: &str,
    tags: &BTreeMap<String, String>,
    tsuid: &str,
) -> anyhow::Result<()> {
    let answer = run.source.get(&format!("/api/uid/tsmeta?tsuid={tsuid}"))?;
    if !answer.ok() {
        run.ts_meta_absent.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    }
    let mut meta = answer.json()?;
    // OpenTSDB writes an unset max and min as NaN.
    for f in ["max", "min"] {
        if meta[f].as_str().is_some_and(|s| s == "NaN") || meta[f].as_f64().is_some_and(f64::is_nan)
        {
            meta[f] = Value::Null;
        }
    }
    if !has_user_fields(&meta, &TS_FIELDS) {
        run.ts_meta_absent.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    }
    let mut update = Map::new();
    for f in USER_FIELDS.iter().chain(&TS_FIELDS) {
        if !meta[*f].is_null() {
            update.insert((*f).into(), meta[*f].clone());
        }
    }
    let series = format!(
        "{metric}{{{}}}",
        tags.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let answer = target.post(
        &format!("/api/uid/tsmeta?m={}&create=true", encode(&series)),
        &Value::Object(update).to_string(),
    )?;
    if !answer.ok() && answer.status != 304 {
        anyhow::bail!(
            "the target refused the TS meta of {series} ({}): {}",
            answer.status,
            answer.message()
        );
    }
    run.ts_meta_copied.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_keep_their_kind_and_exact_value() {
        let v: Value =
            serde_json::from_str("[42, -7, 1.5, 2.0, 1.100000023841858, 1.0E10, 0.1]").unwrap();
        let texts: Vec<String> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|x| value_text(x).unwrap())
            .collect();
        assert_eq!(texts[0], "42");
        assert_eq!(texts[1], "-7");
        assert_eq!(texts[2], "1.5");
        // A float that is whole stays a float.
        assert_eq!(texts[3], "2.0");
        // A 4-byte float read back as a double parses to the same double (and so to the
        // same 4-byte float on the target).
        assert_eq!(texts[4].parse::<f64>().unwrap(), 1.100000023841858);
        assert!(!hourglass_core::value::looks_like_integer(&texts[5]));
        assert_eq!(texts[5].parse::<f64>().unwrap(), 1e10);
        assert_eq!(texts[6], "0.1");
    }

    #[test]
    fn a_whole_float_after_an_integer_answer_is_an_integer() {
        let answers: Value =
            serde_json::from_str("[1.0, 2, 3, 4.0, 1.5, 6.0, 7, 8.0, 9.5]").unwrap();
        let mut kinds = PointKinds::default();
        let texts: Vec<String> = answers
            .as_array()
            .unwrap()
            .iter()
            .map(|v| kinds.next(v).unwrap())
            .collect();
        assert_eq!(texts, ["1.0", "2", "3", "4", "1.5", "6.0", "7", "8", "9.5"]);
        // Past 2^53 a double no longer says which integer it was: kept a float.
        let mut kinds = PointKinds::default();
        kinds.next(&json!(1));
        assert_eq!(kinds.next(&json!(9.3e18)).unwrap(), "9.3E18");
    }

    #[test]
    fn times_are_whole_seconds_or_thirteen_digit_ms() {
        assert_eq!(time_arg(1_356_998_400_000).unwrap(), "1356998400");
        assert_eq!(time_arg(1_356_998_400_001).unwrap(), "1356998400001");
        assert_eq!(time_arg(0).unwrap(), "0");
        assert!(time_arg(5_500).is_err());
    }

    #[test]
    fn float_sums_may_differ_in_the_last_bits_integers_may_not() {
        let n = |t: &str| serde_json::from_str::<serde_json::Number>(t).unwrap();
        assert!(same_sum(Some(&n("10")), Some(&n("10"))));
        assert!(!same_sum(Some(&n("10")), Some(&n("11"))));
        assert!(same_sum(Some(&n("0.30000000000000004")), Some(&n("0.3"))));
        assert!(!same_sum(Some(&n("0.3")), Some(&n("0.31"))));
        assert!(!same_sum(Some(&n("1")), None));
    }
}
