//! `hourglass-bench rollups`: series × days of points at 60 s (the issue's shape is 1,000 ×
//! 365 days, about 525M points; the default is smaller), a `1h-avg` and a `1d-max` over the
//! whole range from raw points and from the rollups Hourglass computed itself
//! (`tsd.rollups.compute`, RFC 0008 phase 4), and the same queries in VictoriaMetrics on the
//! same points.
//!
//! Hourglass loads with computing off, then restarts with it on and computes every tier from
//! the stored raw points: the CPU that takes per raw point is the computation's cost (what
//! ingest pays for it, once per point). Answers from rollups are checked equal to the raw
//! ones. Each query runs `--runs` times after one warm-up; the median is reported.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::querybench::{encode, time_get};
use crate::targets::{Server, Target};

#[derive(Debug, clap::Args)]
pub(crate) struct RollupArgs {
    /// Series of the metric (host=h0..).
    #[arg(long, default_value_t = 100)]
    series: usize,
    /// Days of points at 60 s, ending at the last UTC midnight.
    #[arg(long, default_value_t = 30)]
    days: u64,
    /// Timed runs per query (after one warm-up run); the median is reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Targets, comma separated: hourglass, victoriametrics.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "hourglass,victoriametrics"
    )]
    targets: Vec<String>,
    /// The tsdb binary (default: next to this one).
    #[arg(long)]
    tsdb: Option<std::path::PathBuf>,
}

const METRIC: &str = "bench.rollup";
const STEP: u64 = 60;

/// The tiers: `1h` in day rows, `1d` in year rows, over the raw default `1m`.
const ROLLUPS: &str = r#"{"aggregationIds":{"sum":0,"count":1,"max":2,"min":3},"intervals":[
{"table":"tsdb","preAggregationTable":"tsdb-agg","interval":"1m","rowSpan":"1h","defaultInterval":true},
{"table":"tsdb-rollup-1h","preAggregationTable":"tsdb-rollup-agg-1h","interval":"1h","rowSpan":"1d"},
{"table":"tsdb-rollup-1d","preAggregationTable":"tsdb-rollup-agg-1d","interval":"1d","rowSpan":"1y"}]}"#;

struct Case {
    name: &'static str,
    /// `m=` of `/api/query` without the usage token.
    downsample: &'static str,
    aggregator: &'static str,
    promql: String,
    step: u64,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "avg of all, 1h-avg",
            downsample: "1h-avg",
            aggregator: "avg",
            promql: format!("avg(avg_over_time({{__name__=\"{METRIC}\"}}[1h]))"),
            step: 3_600,
        },
        Case {
            name: "max of all, 1d-max",
            downsample: "1d-max",
            aggregator: "max",
            promql: format!("max(max_over_time({{__name__=\"{METRIC}\"}}[1d]))"),
            step: 86_400,
        },
    ]
}

/// Sends the put lines of series `first..series` stepping by `stride` over `[start, end)`:
/// integers, a random walk per series.
fn send(
    addr: &str,
    first: usize,
    stride: usize,
    series: usize,
    (start, end): (u64, u64),
) -> anyhow::Result<TcpStream> {
    let mut s = TcpStream::connect(addr)?;
    let mine: Vec<usize> = (first..series).step_by(stride).collect();
    let mut values: Vec<i64> = mine.iter().map(|i| (*i as i64) * 100).collect();
    let mut buf = Vec::with_capacity(8 << 20);
    let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ first as u64;
    let mut t = start;
    while t < end {
        for (j, i) in mine.iter().enumerate() {
            rng ^= rng >> 12;
            rng ^= rng << 25;
            rng ^= rng >> 27;
            values[j] += (rng.wrapping_mul(0x2545_F491_4F6C_DD1D) % 21) as i64 - 10;
            writeln!(buf, "put {METRIC} {t} {} host=h{i}", values[j])?;
        }
        if buf.len() > (4 << 20) {
            s.write_all(&buf)?;
            buf.clear();
        }
        t += STEP;
    }
    s.write_all(&buf)?;
    Ok(s)
}

fn load(
    target: &Target,
    server: &mut Server,
    series: usize,
    range: (u64, u64),
) -> anyhow::Result<usize> {
    let conns = 2;
    let points = series * ((range.1 - range.0) / STEP) as usize;
    let senders: Vec<_> = (0..conns)
        .map(|c| {
            let addr = server.put_addr.clone();
            std::thread::spawn(move || send(&addr, c, conns, series, range))
        })
        .collect();
    let mut sockets = Vec::new();
    for s in senders {
        sockets.push(s.join().map_err(|_| anyhow::anyhow!("sender panicked"))??);
    }
    target.wait_durable(server, &mut sockets, points)?;
    Ok(points)
}

/// A statistic of `/api/stats` (summed over the tags matching `tag`).
fn stat(addr: &str, metric: &str, tag: Option<(&str, &str)>) -> anyhow::Result<Option<u64>> {
    let body = ureq::get(&format!("http://{addr}/api/stats"))
        .call()?
        .body_mut()
        .read_to_string()?;
    let v: serde_json::Value = serde_json::from_str(&body)?;
    let mut found = None;
    for s in v.as_array().into_iter().flatten() {
        if s["metric"] != metric {
            continue;
        }
        if let Some((k, want)) = tag
            && s["tags"][k] != want
        {
            continue;
        }
        let n: u64 = s["value"].as_str().unwrap_or("0").parse().unwrap_or(0);
        found = Some(found.unwrap_or(0) + n);
    }
    Ok(found)
}

/// The series' points of an answer, for comparing two answers.
fn answer_points(body: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    let v: serde_json::Value = serde_json::from_str(body)?;
    Ok(v.as_array()
        .map(|a| a.iter().map(|s| s["dps"].clone()).collect())
        .unwrap_or_default())
}

pub(crate) fn run(args: &RollupArgs) -> anyhow::Result<()> {
    let tsdb = crate::targets::tsdb_binary(args.tsdb.as_deref())?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let end = now - now % 86_400;
    let start = end - args.days * 86_400;
    let points = args.series as u64 * args.days * 86_400 / STEP;
    println!(
        "{} series x {} days at {STEP} s = {points} points; queries over the whole range",
        args.series, args.days
    );
    let cases = cases();
    // (hourglass raw, hourglass rollups, victoriametrics) seconds per case.
    let mut raw_secs = vec![f64::NAN; cases.len()];
    let mut rollup_secs = vec![f64::NAN; cases.len()];
    let mut vm_secs = vec![f64::NAN; cases.len()];
    for name in &args.targets {
        let target = Target::parse(name, &tsdb)?;
        let dir = tempfile::tempdir()?;
        match target {
            Target::Hourglass(_) => {
                let conf = dir.path().join("rollups.json");
                std::fs::write(&conf, ROLLUPS.replace('\n', ""))?;
                let rollups = format!(
                    "tsd.rollups.enable = true\ntsd.rollups.config = {}\n",
                    conf.display()
                );
                let mut server = target.start_with(dir.path(), &rollups)?;
                let loaded_at = Instant::now();
                let points = load(&target, &mut server, args.series, (start, end))?;
                let load_secs = loaded_at.elapsed().as_secs_f64();
                let load_cpu = server.stop(Duration::from_secs(3600))?;
                println!(
                    "hourglass: loaded {points} points in {load_secs:.1} s, {:.2} µs CPU/point",
                    load_cpu * 1e6 / points as f64
                );
                // Computing on: every tier from the stored raw points.
                let computing = format!(
                    "{rollups}tsd.rollups.compute = true\ntsd.rollups.compute.delay = 1m\ntsd.rollups.compute.interval_ms = 200\n"
                );
                // Queries are computed each run (`nocache`): kept answers would time a cache.
                let mut server = target.start_with(dir.path(), &computing)?;
                let addr = server.put_addr.clone();
                let computed_at = Instant::now();
                let deadline = computed_at + Duration::from_secs(24 * 3600);
                loop {
                    let lag_1h = stat(&addr, "tsd.rollups.compute.lag", Some(("interval", "1h")))?;
                    let lag_1d = stat(&addr, "tsd.rollups.compute.lag", Some(("interval", "1d")))?;
                    if lag_1h == Some(0) && lag_1d == Some(0) {
                        break;
                    }
                    if Instant::now() > deadline {
                        bail!("rollups not computed within a day (lag {lag_1h:?}, {lag_1d:?})");
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
                let compute_secs = computed_at.elapsed().as_secs_f64();
                let cpu_ns = stat(&addr, "tsd.rollups.compute.cpu_ns", None)?.unwrap_or(0);
                let read = stat(&addr, "tsd.rollups.compute.points", None)?.unwrap_or(0);
                let cells = stat(&addr, "tsd.rollups.compute.cells", None)?.unwrap_or(0);
                println!(
                    "hourglass: computed the 1h and 1d tiers in {compute_secs:.1} s: {:.3} µs CPU per raw point ({read} points read, {cells} cells written)",
                    cpu_ns as f64 / 1e3 / points as f64
                );
                for (i, c) in cases.iter().enumerate() {
                    let url = |usage: &str| {
                        format!(
                            "http://{addr}/api/query?start={start}&end={}&m={}:{}:{usage}:{METRIC}&nocache",
                            end - 1,
                            c.aggregator,
                            c.downsample
                        )
                    };
                    let (raw, raw_body) = time_get(&url("rollup_raw"), args.runs)?;
                    let (rolled, rolled_body) = time_get(&url("rollup_nofallback"), args.runs)?;
                    let same = answer_points(&raw_body)? == answer_points(&rolled_body)?;
                    if !same {
                        bail!(
                            "{}: the answer from rollups differs from the raw one",
                            c.name
                        );
                    }
                    println!(
                        "  hourglass | {:<20} | raw {:>9.1} ms | rollups {:>7.1} ms | {:.2}x | answers equal",
                        c.name,
                        raw * 1e3,
                        rolled * 1e3,
                        raw / rolled
                    );
                    raw_secs[i] = raw;
                    rollup_secs[i] = rolled;
                }
                server.stop(Duration::from_secs(600))?;
                if std::env::var_os("HOURGLASS_BENCH_KEEP").is_some() {
                    println!("(data kept in {})", dir.keep().display());
                }
            }
            Target::VictoriaMetrics => {
                let mut server = match target.start(dir.path()) {
                    Ok(s) => s,
                    Err(e) => {
                        println!("victoriametrics: not run ({e:#})");
                        continue;
                    }
                };
                let loaded_at = Instant::now();
                let points = load(&target, &mut server, args.series, (start, end))
                    .context("victoriametrics load")?;
                println!(
                    "victoriametrics: loaded {points} points in {:.1} s",
                    loaded_at.elapsed().as_secs_f64()
                );
                for (i, c) in cases.iter().enumerate() {
                    let url = format!(
                        "http://{}/api/v1/query_range?query={}&start={}&end={}&step={}&nocache=1",
                        server.http_addr(),
                        encode(&c.promql),
                        start + c.step,
                        end,
                        c.step
                    );
                    let (secs, _) = time_get(&url, args.runs)?;
                    println!(
                        "  victoriametrics | {:<20} | {:>9.1} ms",
                        c.name,
                        secs * 1e3
                    );
                    vm_secs[i] = secs;
                }
                server.stop(Duration::from_secs(600))?;
            }
            _ => bail!("rollups compares hourglass and victoriametrics only"),
        }
    }
    println!(
        "\n| query | Hourglass raw ms | Hourglass rollups ms | raw / rollups | VictoriaMetrics ms | VM / Hourglass rollups |"
    );
    println!("|---|---|---|---|---|---|");
    for (i, c) in cases.iter().enumerate() {
        println!(
            "| {} | {:.1} | {:.1} | {:.2}x | {:.1} | {:.2}x |",
            c.name,
            raw_secs[i] * 1e3,
            rollup_secs[i] * 1e3,
            raw_secs[i] / rollup_secs[i],
            vm_secs[i] * 1e3,
            vm_secs[i] / rollup_secs[i]
        );
    }
    Ok(())
}
