//! `hourglass-bench cardinality`: queries picking 10 series out of `--series` series of one
//! metric (`bench.hc host=h000000… dc=dc0…dc9`, one point a minute over `--minutes`), by
//! literal, wildcard, case-insensitive wildcard and regular expressions (anchored and not),
//! on Hourglass with the tag index off and on and on VictoriaMetrics, in the same run
//! (RFC 0007's query benchmark). Hourglass is restarted after loading (every row stored,
//! nothing buffered); both are asked with `nocache=1` (each query computed, not a kept
//! answer) and VictoriaMetrics is force-flushed; each server is left to go idle before
//! timing. Each
//! query runs `--runs` times after one warm-up; the median is reported, with each filter's
//! time over the literal query's and VictoriaMetrics's time over Hourglass's.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::querybench::{encode, time_get};
use crate::targets::{Server, Target};

#[derive(Debug, clap::Args)]
pub(crate) struct CardinalityArgs {
    /// Series of the metric.
    #[arg(long, default_value_t = 100_000)]
    series: usize,
    /// Minutes of points, one a minute per series, ending an hour before now.
    #[arg(long, default_value_t = 60)]
    minutes: u64,
    /// Timed runs per query (after one warm-up run); the median is reported.
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Targets, comma separated: hourglass (index off), hourglass-index, victoriametrics.
    #[arg(long, default_value = "hourglass,hourglass-index,victoriametrics")]
    targets: String,
    /// The tsdb binary (default: next to this one).
    #[arg(long)]
    tsdb: Option<std::path::PathBuf>,
}

const METRIC: &str = "bench.hc";

/// One query in both languages; each picks the 10 series `host=h000010…h000019`.
struct Case {
    name: &'static str,
    /// The `{...}` filter of an `m=sum:bench.hc{...}` sub-query.
    filter: String,
    /// The label matcher of the PromQL `sum({__name__="bench.hc",...})`.
    matcher: String,
}

fn cases() -> Vec<Case> {
    let hosts: Vec<String> = (10..20).map(|i| format!("h{i:06}")).collect();
    vec![
        Case {
            name: "literal_or (10 values)",
            filter: format!("host=literal_or({})", hosts.join("|")),
            matcher: format!("host=~\"{}\"", hosts.join("|")),
        },
        Case {
            name: "wildcard(h00001*)",
            filter: "host=wildcard(h00001*)".into(),
            matcher: "host=~\"h00001.*\"".into(),
        },
        Case {
            name: "iwildcard(H00001*)",
            filter: "host=iwildcard(H00001*)".into(),
            matcher: "host=~\"(?i)h00001.*\"".into(),
        },
        Case {
            name: "regexp(^h00001[0-9]$)",
            filter: "host=regexp(^h00001[0-9]$)".into(),
            matcher: "host=~\"h00001[0-9]\"".into(),
        },
        Case {
            name: "regexp(00001[0-9]) unanchored",
            filter: "host=regexp(00001[0-9])".into(),
            matcher: "host=~\".*00001[0-9].*\"".into(),
        },
    ]
}

fn send(addr: &str, args: &CardinalityArgs, (start, end): (u64, u64)) -> anyhow::Result<TcpStream> {
    let mut s = TcpStream::connect(addr)?;
    let mut buf = Vec::with_capacity(8 << 20);
    let mut t = start;
    while t < end {
        for i in 0..args.series {
            writeln!(
                buf,
                "put {METRIC} {t} {} host=h{i:06} dc=dc{}",
                (t / 60 + i as u64) % 1000,
                i % 10
            )?;
            if buf.len() > (4 << 20) {
                s.write_all(&buf)?;
                buf.clear();
            }
        }
        t += 60;
    }
    s.write_all(&buf)?;
    Ok(s)
}

/// Median seconds of each case on one target.
fn measure(
    target: &Target,
    server: &Server,
    args: &CardinalityArgs,
    (start, end): (u64, u64),
) -> anyhow::Result<Vec<f64>> {
    let mut out = Vec::new();
    for c in cases() {
        let secs = match target {
            Target::Hourglass(_) | Target::HourglassIndex(_) => {
                let base = format!(
                    "http://{}/api/query?start={start}&end={}&nocache=1",
                    server.put_addr,
                    end - 1
                );
                // The filter picks the 10 series (checked once, untimed).
                let check = format!(
                    "{base}&m={}",
                    encode(&format!("none:{METRIC}{{{}}}", c.filter))
                );
                let (_, body) = time_get(&check, 0)?;
                let v: serde_json::Value = serde_json::from_str(&body)?;
                let n = v.as_array().map_or(0, Vec::len);
                if n != 10 {
                    bail!("{}: {n} series instead of 10", c.name);
                }
                let url = format!(
                    "{base}&m={}",
                    encode(&format!("sum:{METRIC}{{{}}}", c.filter))
                );
                time_get(&url, args.runs)?.0
            }
            _ => {
                let promql = format!("sum({{__name__=\"{METRIC}\",{}}})", c.matcher);
                let url = format!(
                    "http://{}/api/v1/query_range?query={}&start={start}&end={}&step=60&nocache=1",
                    server.http_addr(),
                    encode(&promql),
                    end - 1
                );
                let count = format!(
                    "http://{}/api/v1/query?query={}&time={}&nocache=1",
                    server.http_addr(),
                    encode(&format!(
                        "count(last_over_time({{__name__=\"{METRIC}\",{}}}[1h]))",
                        c.matcher
                    )),
                    end - 1
                );
                let (_, body) = time_get(&count, 0)?;
                if !body.contains("\"10\"") {
                    bail!(
                        "{}: VictoriaMetrics did not count 10 series: {body}",
                        c.name
                    );
                }
                time_get(&url, args.runs)?.0
            }
        };
        println!("  {:<32} {:>9.2} ms", c.name, secs * 1000.0);
        out.push(secs);
    }
    Ok(out)
}

pub(crate) fn run(args: &CardinalityArgs) -> anyhow::Result<()> {
    let tsdb = crate::targets::tsdb_binary(args.tsdb.as_deref())?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let end = now - now % 3600 - 3600;
    let start = end - args.minutes * 60;
    let points = args.series * args.minutes as usize;
    println!(
        "{} series of {METRIC} x {} minutes = {points} points per target; queries pick 10 series",
        args.series, args.minutes
    );
    let mut results: Vec<(String, Vec<f64>)> = Vec::new();
    for name in args.targets.split(',').map(str::trim) {
        let target = Target::parse(name, &tsdb)?;
        let dir = tempfile::tempdir()?;
        let mut server = target.start(dir.path())?;
        let loaded_at = Instant::now();
        let mut sockets = vec![send(&server.put_addr, args, (start, end))?];
        target
            .wait_durable(&mut server, &mut sockets, points)
            .with_context(|| format!("loading {name}"))?;
        drop(sockets);
        println!(
            "{name}: loaded {points} points in {:.1} s",
            loaded_at.elapsed().as_secs_f64()
        );
        if matches!(target, Target::Hourglass(_) | Target::HourglassIndex(_)) {
            server.stop(Duration::from_secs(600))?;
            server = target.start(dir.path())?;
        }
        // Work the server does after loading or starting (grouping, compaction) is over
        // before anything is timed.
        if !crate::proc::wait_idle(server.pid(), Duration::from_secs(120))? {
            println!("{name}: still busy after 120 s; timing anyway");
        }
        let timings = measure(&target, &server, args, (start, end));
        server.stop(Duration::from_secs(600))?;
        results.push((name.to_string(), timings?));
    }
    let header: Vec<String> = results.iter().map(|(n, _)| format!("{n} ms")).collect();
    println!(
        "\n| filter (10 of {} series) | {} | each / its literal | VM / hourglass-index |",
        args.series,
        header.join(" | ")
    );
    println!("|---|{}---|---|", "---|".repeat(results.len()));
    let index = results.iter().position(|(n, _)| n == "hourglass-index");
    let vm = results.iter().position(|(n, _)| n == "victoriametrics");
    for (i, c) in cases().iter().enumerate() {
        let cells: Vec<String> = results
            .iter()
            .map(|(_, t)| format!("{:.2}", t[i] * 1000.0))
            .collect();
        let ratios: Vec<String> = results
            .iter()
            .map(|(n, t)| format!("{n} {:.2}x", t[i] / t[0]))
            .collect();
        let vm_ratio = match (index, vm) {
            (Some(h), Some(v)) => format!("{:.2}x", results[v].1[i] / results[h].1[i]),
            _ => "-".into(),
        };
        println!(
            "| {} | {} | {} | {vm_ratio} |",
            c.name,
            cells.join(" | "),
            ratios.join(", ")
        );
    }
    Ok(())
}
