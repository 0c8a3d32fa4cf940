//! `hourglass-bench realdata`: real public monitoring series (CSV files of `timestamp,value`
//! lines, such as the Numenta Anomaly Benchmark's) sent as one `put` stream, in time order,
//! over one telnet connection to Hourglass and to VictoriaMetrics in turn. For each: points/s
//! until durable, CPU per point from the first byte through graceful shutdown, peak RSS, disk
//! per point after shutdown (less rebuildable caches); then, restarted on its data and once
//! it is idle, the median latency of three queries, whose point counts must agree between
//! the servers.
//! `--generated` sends a generated stream of the same traits instead (reproducible by seed).

mod generated;
mod series;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;

use crate::load::{self, Loaded};
use crate::proc;
use crate::querybench::{encode, get_timed_as, median, query_agent};
use crate::targets::{self, Server, Target};
use series::Series;

/// How to get the real data, for `--fetch-help`.
const FETCH_HELP: &str = "\
`hourglass-bench realdata --data DIR` reads every *.csv under DIR (searched recursively): one
series a file, lines `YYYY-MM-DD HH:MM:SS,value` (UTC) after an optional header line. A file's
series is metric `nab.<its folder>` (see --prefix), tag `file=<its name>`; values are sent as
written.

The Numenta Anomaly Benchmark (NAB, MIT licence) has 47 real monitoring series in this form:
cloud CPU, network, disk and request counts, request latency, temperatures, traffic sensors,
ad-exchange rates and tweet volumes, mostly at 5-minute intervals over weeks to months. Its
real-data folders make DIR:

  git clone --depth 1 https://github.com/numenta/NAB.git /tmp/NAB
  mkdir -p /tmp/nab-real && cp -r /tmp/NAB/data/real* /tmp/nab-real/
  cargo build --release -p hourglass-cli -p hourglass-bench
  target/release/hourglass-bench realdata --data /tmp/nab-real
";

#[derive(Debug, clap::Args)]
pub(crate) struct RealDataArgs {
    /// Directory of `timestamp,value` CSV files, searched recursively (see --fetch-help).
    #[arg(long, required_unless_present_any = ["fetch_help", "generated", "walk"])]
    data: Option<PathBuf>,
    /// A generated stream instead of files: dense and sparse series, 10 s to 5 min
    /// intervals, floats with many decimals, counters with resets, gaps, short-lived series.
    #[arg(long, conflicts_with = "data")]
    generated: bool,
    /// Random walks instead of files: `--series` series (1,000 unless given) of `--points`
    /// points 10 s apart, each stepping by -2.00 to +2.00 in hundredths, equally likely,
    /// written with two decimals (information: 1.08 bytes a point).
    #[arg(long, conflicts_with_all = ["data", "generated"])]
    walk: bool,
    /// Points of each random walk (2,000 unless given).
    #[arg(long, conflicts_with_all = ["data", "generated"])]
    points: Option<usize>,
    /// Seed of the generated stream: the same seed, the same stream.
    #[arg(long, default_value_t = 1, conflicts_with = "data")]
    seed: u64,
    /// Series of the generated stream (200 unless given) or of the random walks (1,000).
    #[arg(long, conflicts_with = "data")]
    series: Option<usize>,
    /// Days of the generated stream.
    #[arg(long, default_value_t = 2, conflicts_with_all = ["data", "walk"])]
    days: u64,
    /// Write the generated series as CSV files under this directory (one folder per
    /// metric, the layout `--data` reads), then go on with the run.
    #[arg(long, requires = "generated")]
    write_csv: Option<PathBuf>,
    /// Print, per metric of the generated stream, the information its draws carry (a lower
    /// bound on the bytes any lossless coding of it takes), then exit.
    #[arg(long, requires = "generated")]
    information: bool,
    /// Metric prefix: a file's series is `<prefix>.<its folder>`.
    #[arg(long, default_value = "nab")]
    prefix: String,
    /// Print how to get the real data, and exit.
    #[arg(long)]
    fetch_help: bool,
    /// Timed runs per query (after one warm-up run); the median is reported.
    #[arg(long, default_value_t = 15)]
    runs: usize,
    /// Loads of each target; the one with the median CPU per point is reported and queried.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Targets, comma separated: hourglass, victoriametrics. Ratios are to the first.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "hourglass,victoriametrics"
    )]
    targets: Vec<String>,
    /// The tsdb binary (default: next to this one).
    #[arg(long)]
    tsdb: Option<PathBuf>,
}

/// Series of the generated stream unless `--series` is given.
const GENERATED_SERIES: usize = 200;
/// Series of the random walks unless `--series` is given.
const WALK_SERIES: usize = 1000;
/// Points of each random walk unless `--points` is given.
const WALK_POINTS: usize = 2000;

/// One query in both languages.
#[derive(Debug, Clone)]
struct Query {
    name: &'static str,
    /// The series it reads.
    detail: String,
    /// `/api/query` parameters.
    opentsdb: String,
    /// A PromQL API path and its parameters.
    promql: String,
    /// Points the answer must hold, when known beforehand.
    expect: Option<usize>,
    /// Asked as is, so a repeat may be answered from a kept answer (both targets keep
    /// query answers); else with `nocache=1`, which both read as "compute it".
    kept: bool,
    /// Asked with `Accept-Encoding: gzip`, as Grafana's server and browsers ask: the time
    /// includes compressing the answer, and receiving it compressed.
    gzip: bool,
}

impl Query {
    fn label(&self) -> String {
        let mut label = self.name.to_string();
        if self.kept {
            label.push_str(", repeated (kept answers)");
        }
        if self.gzip {
            label.push_str(", gzip");
        }
        label
    }
}

/// The queries computed (`nocache=1`), then the same asked as is, where both targets may
/// answer a repeat from the answer they kept, then computed again with the answers asked
/// compressed.
fn with_variants(computed: Vec<Query>) -> Vec<Query> {
    let kept = computed.iter().map(|q| Query {
        kept: true,
        ..q.clone()
    });
    let gzip = computed.iter().map(|q| Query {
        gzip: true,
        ..q.clone()
    });
    let variants: Vec<Query> = kept.chain(gzip).collect();
    computed.into_iter().chain(variants).collect()
}

/// `{__name__="metric",tagk="tagv"...}`.
fn selector(metric: &str, tags: &[(String, String)]) -> String {
    let mut s = format!("{{__name__=\"{metric}\"");
    for (k, v) in tags {
        s.push_str(&format!(",{k}=\"{v}\""));
    }
    s.push('}');
    s
}

fn hour(ts: u64) -> u64 {
    ts - ts % 3600
}

/// The three queries: the longest series raw and 1h-avg over its whole range, and the sum of
/// the 1h-avg of every series of the metric with the most series, over that metric's range.
///
/// OpenTSDB's hour buckets are `[h, h + 3600)`; PromQL windows are `(t - 1h, t]`, so with
/// whole-second times `t = h + 3599` covers the same points and both answer one point per
/// hour that has data.
fn queries(series: &[Series]) -> anyhow::Result<Vec<Query>> {
    let Some(one) = series.iter().reduce(|a, b| {
        if b.points.len() > a.points.len() {
            b
        } else {
            a
        }
    }) else {
        bail!("no points");
    };
    let mut metrics: Vec<(&str, usize, usize, u64, u64)> = Vec::new();
    for s in series {
        match metrics.iter_mut().find(|m| m.0 == s.metric) {
            Some(m) => {
                m.1 += 1;
                m.2 += s.points.len();
                m.3 = m.3.min(s.first());
                m.4 = m.4.max(s.last());
            }
            None => metrics.push((&s.metric, 1, s.points.len(), s.first(), s.last())),
        }
    }
    let Some(&(metric, count, metric_points, m_first, m_last)) = metrics
        .iter()
        .reduce(|a, b| if (b.1, b.2) > (a.1, a.2) { b } else { a })
    else {
        bail!("no metric");
    };
    let (first, last) = (one.first(), one.last());
    let one_tags = format!("{{{}}}", one.tag_text(","));
    let one_sel = selector(&one.metric, &one.tags);
    let days = |a: u64, b: u64| (b - a) as f64 / 86_400.0;
    Ok(vec![
        Query {
            name: "one series raw, whole range",
            detail: format!(
                "{} {}: {} points over {:.0} days",
                one.metric,
                one.tag_text(" "),
                thousands(one.points.len() as f64),
                days(first, last)
            ),
            opentsdb: format!(
                "start={first}&end={last}&m={}",
                encode(&format!("sum:{}{one_tags}", one.metric))
            ),
            promql: format!(
                "query?query={}&time={last}",
                encode(&format!("{one_sel}[{}s]", last - first + 1))
            ),
            expect: Some(one.points.len()),
            kept: false,
            gzip: false,
        },
        Query {
            name: "one series 1h-avg, whole range",
            detail: "the same series".to_string(),
            opentsdb: format!(
                "start={}&end={last}&m={}",
                hour(first),
                encode(&format!("sum:1h-avg:{}{one_tags}", one.metric))
            ),
            promql: format!(
                "query_range?query={}&start={}&end={}&step=3600",
                encode(&format!("avg_over_time({one_sel}[1h])")),
                hour(first) + 3599,
                hour(last) + 3599
            ),
            expect: None,
            kept: false,
            gzip: false,
        },
        Query {
            name: "sum of one metric's series 1h-avg, whole range",
            detail: format!(
                "{metric}: {count} series, {} points over {:.0} days",
                thousands(metric_points as f64),
                days(m_first, m_last)
            ),
            opentsdb: format!(
                "start={}&end={m_last}&m={}",
                hour(m_first),
                encode(&format!("sum:1h-avg:{metric}"))
            ),
            promql: format!(
                "query_range?query={}&start={}&end={}&step=3600",
                encode(&format!(
                    "sum(avg_over_time({}[1h]))",
                    selector(metric, &[])
                )),
                hour(m_first) + 3599,
                hour(m_last) + 3599
            ),
            expect: None,
            kept: false,
            gzip: false,
        },
    ])
}

/// Points in an answer: the `dps` of each OpenTSDB result, the `values` of each PromQL one.
fn count_points(target: &Target, body: &str) -> anyhow::Result<usize> {
    let v: serde_json::Value = serde_json::from_str(body)?;
    let results = match target {
        Target::Hourglass(_) | Target::HourglassIndex(_) => v.as_array(),
        _ => v["data"]["result"].as_array(),
    };
    let Some(results) = results else {
        bail!("unexpected answer: {body:.300}");
    };
    Ok(results
        .iter()
        .map(|r| match target {
            Target::Hourglass(_) | Target::HourglassIndex(_) => {
                r["dps"].as_object().map_or(0, |d| d.len())
            }
            _ => r["values"].as_array().map_or(0, Vec::len),
        })
        .sum())
}

/// One target's figures.
#[derive(Debug)]
struct Measured {
    name: &'static str,
    loaded: Loaded,
    /// Median seconds, 90th percentile seconds and points answered, per query.
    queries: Vec<(f64, f64, usize)>,
}

/// The URL of a query on a target.
fn query_url(target: &Target, server: &Server, q: &Query) -> String {
    let url = match target {
        Target::Hourglass(_) | Target::HourglassIndex(_) => {
            format!("http://{}/api/query?{}", server.http_addr(), q.opentsdb)
        }
        _ => format!("http://{}/api/v1/{}", server.http_addr(), q.promql),
    };
    if q.kept { url } else { url + "&nocache=1" }
}

/// Loads each target in turn, alone on the machine so the CPU it uses is its own (`repeat`
/// times, keeping the load of median CPU); then restarts them all on their data, waits until
/// each is idle, and times the queries with the targets taking turns run by run, so the
/// machine's noise falls on all of them alike.
fn measure(
    targets: &[Target],
    streams: &[Vec<u8>],
    points: usize,
    queries: &[Query],
    runs: usize,
    repeat: usize,
) -> anyhow::Result<Vec<Measured>> {
    let mut loads = Vec::new();
    for target in targets {
        let mut tries = Vec::new();
        for _ in 0..repeat.max(1) {
            let dir = tempfile::tempdir()?;
            let loaded = load::load_and_stop(target, dir.path(), streams, points)?;
            tries.push((dir, loaded));
        }
        tries.sort_by(|a, b| a.1.cpu_secs.total_cmp(&b.1.cpu_secs));
        let (dir, loaded) = tries.swap_remove(tries.len() / 2);
        println!(
            "{}: {points} points durable in {:.2} s, {:.2} µs CPU/point through shutdown, {:.2} bytes/point on disk",
            target.name(),
            loaded.durable_secs,
            loaded.cpu_secs * 1e6 / points as f64,
            loaded.disk_bytes as f64 / points as f64
        );
        loads.push((dir, loaded));
    }
    let mut servers = Vec::new();
    for (target, (dir, _)) in targets.iter().zip(&loads) {
        servers.push(target.start(dir.path())?);
    }
    for (target, server) in targets.iter().zip(&servers) {
        if !proc::wait_idle(server.pid(), Duration::from_secs(60))? {
            println!("({} still busy 60 s after its restart)", target.name());
        }
    }
    let agent = query_agent();
    let mut timed: Vec<Vec<(f64, f64, usize)>> = vec![Vec::new(); targets.len()];
    for q in queries {
        let urls: Vec<String> = targets
            .iter()
            .zip(&servers)
            .map(|(t, s)| query_url(t, s, q))
            .collect();
        let mut counts = vec![0; targets.len()];
        let mut times = vec![Vec::new(); targets.len()];
        // Run 0 warms up and is counted; the others are timed.
        for run in 0..=runs {
            for (i, target) in targets.iter().enumerate() {
                let (secs, body) = get_timed_as(&agent, &urls[i], q.gzip)?;
                if run == 0 {
                    counts[i] = count_points(target, &body)?;
                } else {
                    times[i].push(secs);
                }
            }
        }
        for (i, target) in targets.iter().enumerate() {
            let secs = median(&mut times[i]);
            let p90 = percentile(&times[i], 0.9);
            println!(
                "  {:<16} {:<48} {:>8.2} ms (p90 {:.2} ms), {} points",
                target.name(),
                q.label(),
                secs * 1000.0,
                p90 * 1000.0,
                counts[i]
            );
            timed[i].push((secs, p90, counts[i]));
        }
    }
    for server in &mut servers {
        server.stop(Duration::from_secs(600))?;
    }
    let keep = std::env::var_os("HOURGLASS_BENCH_KEEP").is_some();
    Ok(targets
        .iter()
        .zip(loads)
        .zip(timed)
        .map(|((target, (dir, loaded)), queries)| {
            if keep {
                println!("({} data kept in {})", target.name(), dir.keep().display());
            }
            Measured {
                name: target.name(),
                loaded,
                queries,
            }
        })
        .collect())
}

/// The value a fraction `q` of the way through `sorted` (sorted ascending), nearest rank.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// `1234567.8` as `1,234,568`.
fn thousands(n: f64) -> String {
    let digits = format!("{:.0}", n);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 && c.is_ascii_digit() {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn print_table(results: &[Measured], queries: &[Query], points: usize) {
    let Some(base) = results.first() else {
        return;
    };
    let others = &results[1..];
    let mut header = String::from("| figure |");
    let mut rule = String::from("|---|");
    for r in results {
        header.push_str(&format!(" {} |", r.name));
        rule.push_str("---|");
    }
    for r in others {
        header.push_str(&format!(" {} vs {} |", r.name, base.name));
        rule.push_str("---|");
    }
    println!("\n{header}\n{rule}");
    let row = |name: &str, value: &dyn Fn(&Measured) -> f64, show: &dyn Fn(f64) -> String| {
        let mut line = format!("| {name} |");
        for r in results {
            line.push_str(&format!(" {} |", show(value(r))));
        }
        for r in others {
            line.push_str(&format!(" {:.2}x |", value(r) / value(base)));
        }
        println!("{line}");
    };
    let p = points as f64;
    row(
        "points/s until durable",
        &|r| p / r.loaded.durable_secs,
        &thousands,
    );
    row(
        "CPU µs/point through graceful stop",
        &|r| r.loaded.cpu_secs * 1e6 / p,
        &|v| format!("{v:.2}"),
    );
    row(
        "peak RSS MiB",
        &|r| r.loaded.peak_rss_bytes as f64 / f64::from(1 << 20),
        &|v| format!("{v:.0}"),
    );
    row(
        "disk bytes/point (allocated)",
        &|r| r.loaded.disk_bytes as f64 / p,
        &|v| format!("{v:.2}"),
    );
    row(
        "data bytes/point (files less block rounding)",
        &|r| r.loaded.file_bytes as f64 / p,
        &|v| format!("{v:.2}"),
    );
    for (i, q) in queries.iter().enumerate() {
        let answered = base.queries[i].2;
        row(
            &format!("{} ms ({answered} points answered)", q.label()),
            &|r| r.queries[i].0 * 1000.0,
            &|v| format!("{v:.2}"),
        );
        row(
            &format!("{}, 90th percentile ms", q.label()),
            &|r| r.queries[i].1 * 1000.0,
            &|v| format!("{v:.2}"),
        );
    }
}

pub(crate) fn run(args: &RealDataArgs) -> anyhow::Result<()> {
    if args.fetch_help {
        print!("{FETCH_HELP}");
        return Ok(());
    }
    if args.information {
        let (series, drawn) = generated::generate_drawn(
            args.seed,
            args.series.unwrap_or(GENERATED_SERIES),
            args.days,
        );
        println!(
            "generated (seed {}): {} series over {} days, {} points; what the draws carry:\n",
            args.seed,
            series.len(),
            args.days,
            series::points(&series)
        );
        print!("{}", generated::information_table(&drawn));
        return Ok(());
    }
    let tsdb = targets::tsdb_binary(args.tsdb.as_deref())?;
    let series = match &args.data {
        Some(dir) => {
            let (series, notes) = series::load_dir(dir, &args.prefix)?;
            println!(
                "{} files, {} series, {} points ({} duplicate timestamps dropped, {} points out of order sorted)",
                notes.files,
                series.len(),
                series::points(&series),
                notes.duplicates,
                notes.reordered
            );
            series
        }
        None if args.walk => {
            let points = args.points.unwrap_or(WALK_POINTS);
            let series =
                generated::random_walks(args.seed, args.series.unwrap_or(WALK_SERIES), points);
            println!(
                "random walks (seed {}): {} series of {} points, {} points; their information: {:.2} bytes a point",
                args.seed,
                series.len(),
                points,
                series::points(&series),
                generated::walk_floor_bytes()
            );
            series
        }
        None => {
            let series = generated::generate(
                args.seed,
                args.series.unwrap_or(GENERATED_SERIES),
                args.days,
            );
            println!(
                "generated (seed {}): {} series over {} days, {} points",
                args.seed,
                series.len(),
                args.days,
                series::points(&series)
            );
            if let Some(dir) = &args.write_csv {
                series::write_dir(&series, dir)?;
                println!("written as CSV under {}", dir.display());
            }
            series
        }
    };
    let points = series::points(&series);
    let stream = series::put_stream(&series)?;
    println!(
        "{} bytes of put lines ({:.1} bytes/line), one connection",
        stream.len(),
        stream.len() as f64 / points as f64
    );
    let queries = queries(&series)?;
    for q in &queries {
        println!("{}: {}", q.name, q.detail);
    }
    let queries = with_variants(queries);
    let mut targets = Vec::new();
    for name in &args.targets {
        let target = Target::parse(name, &tsdb)?;
        if matches!(target, Target::InfluxDb) {
            bail!("realdata compares hourglass and victoriametrics (PromQL) only");
        }
        targets.push(target);
    }
    let results = measure(
        &targets,
        std::slice::from_ref(&stream),
        points,
        &queries,
        args.runs,
        args.repeat,
    )?;
    print_table(&results, &queries, points);
    let mut wrong = Vec::new();
    for (i, q) in queries.iter().enumerate() {
        let counts: Vec<String> = results
            .iter()
            .map(|r| format!("{} {}", r.name, r.queries[i].2))
            .collect();
        // A kept answer must hold what the computed one held, target by target.
        // VictoriaMetrics's kept range answers may leave out their newest step; that is
        // noted, not an error.
        let computed = queries
            .iter()
            .position(|c| !c.kept && !c.gzip && c.name == q.name)
            .filter(|_| q.kept);
        let agree = match computed {
            Some(c) => results.iter().all(|r| {
                let same = r.queries[i].2 == r.queries[c].2;
                if !same && r.name != results[0].name {
                    println!(
                        "(note: {} kept answer to {}: {} points, computed {})",
                        r.name, q.name, r.queries[i].2, r.queries[c].2
                    );
                }
                same || r.name != results[0].name
            }),
            None => results
                .iter()
                .all(|r| Some(r.queries[i].2) == q.expect.or(Some(results[0].queries[i].2))),
        };
        if !agree {
            wrong.push(format!(
                "{}: {}{}",
                q.label(),
                counts.join(", "),
                q.expect
                    .map_or(String::new(), |e| format!(" (expected {e})"))
            ));
        }
    }
    if !wrong.is_empty() {
        bail!(
            "the servers answered different numbers of points:\n  {}",
            wrong.join("\n  ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, clap::Parser)]
    struct Command {
        #[command(flatten)]
        args: RealDataArgs,
    }

    #[test]
    fn options_of_a_stream_not_loaded_are_refused() {
        use clap::Parser;
        let parse = |line: &[&str]| Command::try_parse_from(["realdata"].iter().chain(line));
        for refused in [
            &["--data", "d", "--series", "5"][..],
            &["--data", "d", "--seed", "2"],
            &["--data", "d", "--days", "3"],
            &["--walk", "--days", "3"],
            &["--generated", "--points", "10"],
            &["--walk", "--generated"],
        ] {
            assert!(parse(refused).is_err(), "{refused:?}");
        }
        let walk = parse(&["--walk", "--series", "2", "--points", "10", "--seed", "4"]).unwrap();
        assert_eq!(
            (walk.args.series, walk.args.points, walk.args.seed),
            (Some(2), Some(10), 4)
        );
        assert!(parse(&["--generated", "--series", "3", "--days", "1"]).is_ok());
        assert!(parse(&["--data", "d"]).is_ok());
    }

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1000.0), "1,000");
        assert_eq!(thousands(1_234_567.8), "1,234,568");
    }

    #[test]
    fn queries_pick_the_longest_series_and_the_widest_metric() {
        let s = |metric: &str, file: &str, points: u64| Series {
            metric: metric.into(),
            tags: vec![("file".into(), file.into())],
            points: (0..points)
                .map(|i| (7200 + i * 300, "1.5".into()))
                .collect(),
        };
        let series = vec![s("m.a", "x", 10), s("m.b", "y", 30), s("m.a", "z", 5)];
        let q = queries(&series).expect("queries");
        assert_eq!(q[0].expect, Some(30));
        assert!(
            q[0].opentsdb.contains("m.b%7Bfile%3Dy%7D"),
            "{}",
            q[0].opentsdb
        );
        assert!(q[2].detail.starts_with("m.a: 2 series"), "{}", q[2].detail);
        assert!(
            q[2].promql.contains("start=10799&end=10799"),
            "{}",
            q[2].promql
        );
    }
}
