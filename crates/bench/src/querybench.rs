//! `hourglass-bench query`: loads the same points (a counter per series, one point every
//! 10 s) into Hourglass and VictoriaMetrics, then times equivalent queries on each — an
//! OpenTSDB `/api/query` against a PromQL `query_range` — and prints latency, points scanned
//! per second and the ratios.
//!
//! Hourglass is restarted after loading so every row is compacted in storage and nothing is
//! served from the write buffers; VictoriaMetrics is force-flushed and asked with
//! `nocache=1`. Each query runs `--runs` times after one warm-up; the median is reported.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::targets::{Server, Target};

#[derive(Debug, clap::Args)]
pub(crate) struct QueryArgs {
    /// Series of the metric (host=h0..; dc=dc0..dc3).
    #[arg(long, default_value_t = 1000)]
    series: usize,
    /// Days of points at 10 s intervals.
    #[arg(long, default_value_t = 7)]
    days: u64,
    /// Timed runs per query (after one warm-up run); the median is reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// The tsdb binary (default: next to this one).
    #[arg(long)]
    tsdb: Option<std::path::PathBuf>,
}

const METRIC: &str = "bench.requests";
const STEP: u64 = 10;

/// One query in both languages.
struct Case {
    name: &'static str,
    /// `/api/query` parameters after `start`/`end`.
    opentsdb: String,
    /// PromQL and its step in seconds.
    promql: String,
    step: u64,
    /// Seconds of data the query covers, back from the end.
    span: u64,
}

fn cases(days: u64) -> Vec<Case> {
    let all = days * 86_400;
    vec![
        Case {
            name: "sum of all, 1m-avg",
            opentsdb: format!("m=sum:1m-avg:{METRIC}"),
            promql: format!("sum(avg_over_time({{__name__=\"{METRIC}\"}}[1m]))"),
            step: 60,
            span: all,
        },
        Case {
            name: "max by dc, 1h-max",
            opentsdb: format!("m=max:1h-max:{METRIC}%7Bdc=*%7D"),
            promql: format!("max by (dc) (max_over_time({{__name__=\"{METRIC}\"}}[1h]))"),
            step: 3600,
            span: all,
        },
        Case {
            name: "one series raw, 1 day",
            opentsdb: format!("m=sum:{METRIC}%7Bhost=h1%7D"),
            promql: format!("{{__name__=\"{METRIC}\",host=\"h1\"}}"),
            step: STEP,
            span: 86_400.min(all),
        },
        Case {
            name: "sum of rates, 1m-avg",
            opentsdb: format!("m=sum:1m-avg:rate:{METRIC}"),
            promql: format!("sum(rate({{__name__=\"{METRIC}\"}}[1m]))"),
            step: 60,
            span: all,
        },
    ]
}

/// Sends the put lines of series `first..series` stepping by `stride` over `[start, end)`.
fn send(
    addr: &str,
    first: usize,
    stride: usize,
    series: usize,
    start: u64,
    end: u64,
) -> anyhow::Result<TcpStream> {
    let mut s = TcpStream::connect(addr)?;
    let mine: Vec<usize> = (first..series).step_by(stride).collect();
    let mut values: Vec<u64> = mine.iter().map(|i| (*i as u64) * 1000).collect();
    let mut buf = Vec::with_capacity(8 << 20);
    let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ first as u64;
    let mut t = start;
    while t < end {
        for (j, i) in mine.iter().enumerate() {
            rng ^= rng >> 12;
            rng ^= rng << 25;
            rng ^= rng >> 27;
            values[j] += rng.wrapping_mul(0x2545_F491_4F6C_DD1D) % 100;
            writeln!(
                buf,
                "put {METRIC} {t} {} host=h{i} dc=dc{}",
                values[j],
                i % 4
            )?;
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
    args: &QueryArgs,
    range: (u64, u64),
) -> anyhow::Result<usize> {
    let conns = 2;
    let points = args.series * ((range.1 - range.0) / STEP) as usize;
    let senders: Vec<_> = (0..conns)
        .map(|c| {
            let addr = server.put_addr.clone();
            let series = args.series;
            std::thread::spawn(move || send(&addr, c, conns, series, range.0, range.1))
        })
        .collect();
    let mut sockets = Vec::new();
    for s in senders {
        sockets.push(s.join().map_err(|_| anyhow::anyhow!("sender panicked"))??);
    }
    target.wait_durable(server, &mut sockets, points)?;
    Ok(points)
}

/// An HTTP client for timed queries: long timeouts, answers of any status returned.
///
/// Each phase has its timeout, and name resolution none: ureq resolves a name under a
/// timeout (a global one included) on a thread it starts for each request, which cost
/// about 120 µs a request here, more than either server took to answer a small query
/// (`/api/version` 150 µs against 27 µs through this agent).
pub(crate) fn query_agent() -> ureq::Agent {
    let long = Some(Duration::from_secs(600));
    ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_secs(60)))
        .timeout_send_request(long)
        .timeout_send_body(long)
        .timeout_recv_response(long)
        .timeout_recv_body(long)
        .http_status_as_error(false)
        .build()
        .into()
}

/// One GET: the seconds until its whole answer was read, and the answer (an error unless 200).
pub(crate) fn get_timed(agent: &ureq::Agent, url: &str) -> anyhow::Result<(f64, String)> {
    get_timed_as(agent, url, false)
}

/// [`get_timed`], asking for the answer gzip-compressed when `gzip` is set: the time is
/// until its compressed bytes were read; the answer is then decompressed (untimed).
pub(crate) fn get_timed_as(
    agent: &ureq::Agent,
    url: &str,
    gzip: bool,
) -> anyhow::Result<(f64, String)> {
    let started = Instant::now();
    let mut req = agent.get(url);
    if gzip {
        req = req.header("Accept-Encoding", "gzip");
    }
    let mut resp = req.call().with_context(|| format!("GET {url}"))?;
    let bytes = resp.body_mut().with_config().limit(1 << 30).read_to_vec()?;
    let secs = started.elapsed().as_secs_f64();
    let encoded = resp
        .headers()
        .get("content-encoding")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
    if gzip && !encoded && resp.status() == 200 {
        bail!("{url}: asked for gzip, answered as it is");
    }
    let body = if encoded {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut text)
            .with_context(|| format!("{url}: bad gzip answer"))?;
        text
    } else {
        String::from_utf8(bytes).with_context(|| format!("{url}: answer not UTF-8"))?
    };
    if resp.status() != 200 {
        bail!("{url}: {} {body}", resp.status());
    }
    Ok((secs, body))
}

/// Runs one request `runs` times after a warm-up; returns the median seconds and the last body.
pub(crate) fn time_get(url: &str, runs: usize) -> anyhow::Result<(f64, String)> {
    let agent = query_agent();
    let mut times = Vec::new();
    let mut body = String::new();
    for i in 0..=runs {
        let (secs, b) = get_timed(&agent, url)?;
        body = b;
        if i > 0 {
            times.push(secs);
        }
    }
    Ok((median(&mut times), body))
}

/// The median (the upper one of an even count); NaN when empty.
pub(crate) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

pub(crate) fn run(args: &QueryArgs) -> anyhow::Result<()> {
    let tsdb = crate::targets::tsdb_binary(args.tsdb.as_deref())?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let end = now - now % 3600 - 3600;
    let start = end - args.days * 86_400;
    println!(
        "{} series x {} days at {STEP} s = {} points per target",
        args.series,
        args.days,
        args.series as u64 * args.days * 86_400 / STEP
    );
    let cases = cases(args.days);
    let mut results: Vec<(String, Vec<(f64, u64)>)> = Vec::new();
    for name in ["hourglass", "victoriametrics"] {
        let target = Target::parse(name, &tsdb)?;
        let dir = tempfile::tempdir()?;
        let mut server = target.start(dir.path())?;
        let loaded_at = Instant::now();
        let points = load(&target, &mut server, args, (start, end))?;
        println!(
            "{name}: loaded {points} points in {:.1} s",
            loaded_at.elapsed().as_secs_f64()
        );
        if matches!(target, Target::Hourglass(_) | Target::HourglassIndex(_)) {
            // Restart: everything compacted in storage, nothing left in the write buffers.
            server.stop(Duration::from_secs(600))?;
            server = target.start(dir.path())?;
        }
        let mut timings = Vec::new();
        for c in &cases {
            let q_start = end - c.span;
            let (secs, scanned) = match target {
                Target::Hourglass(_) | Target::HourglassIndex(_) => {
                    let url = format!(
                        "http://{}/api/query?start={q_start}&end={}&{}&show_summary",
                        server.put_addr,
                        end - 1,
                        c.opentsdb
                    );
                    let (secs, body) = time_get(&url, args.runs)?;
                    let v: serde_json::Value = serde_json::from_str(&body)?;
                    let raw = v
                        .as_array()
                        .and_then(|a| a.last())
                        .and_then(|s| s["statsSummary"]["rawDatapoints"].as_u64())
                        .unwrap_or(0);
                    (secs, raw)
                }
                _ => {
                    let url = format!(
                        "http://{}/api/v1/query_range?query={}&start={q_start}&end={}&step={}&nocache=1",
                        server.http_addr(),
                        encode(&c.promql),
                        end - 1,
                        c.step
                    );
                    let (secs, _) = time_get(&url, args.runs)?;
                    (
                        secs,
                        args.series as u64 * c.span
                            / STEP
                            / if c.name.starts_with("one") {
                                args.series as u64
                            } else {
                                1
                            },
                    )
                }
            };
            println!(
                "  {name} | {:<24} | {:>8.1} ms | {:>6.1} M points/s",
                c.name,
                secs * 1000.0,
                scanned as f64 / secs / 1e6
            );
            timings.push((secs, scanned));
        }
        server.stop(Duration::from_secs(600))?;
        if std::env::var_os("HOURGLASS_BENCH_KEEP").is_some() {
            println!("({name} data kept in {})", dir.keep().display());
        }
        results.push((name.to_string(), timings));
    }
    println!(
        "\n| query | Hourglass ms | Hourglass M points/s | VictoriaMetrics ms | VM time / Hourglass time |"
    );
    println!("|---|---|---|---|---|");
    for (i, c) in cases.iter().enumerate() {
        let (h, hp) = results[0].1[i];
        let (v, _) = results[1].1[i];
        println!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.2}x |",
            c.name,
            h * 1000.0,
            hp as f64 / h / 1e6,
            v * 1000.0,
            v / h
        );
    }
    Ok(())
}

/// Percent-encodes a query parameter.
pub(crate) fn encode(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
