//! `hourglass-bench exp`: what an `/api/query/exp` expression costs over the sub-queries it
//! reads. Loads two metrics of `--series` series each (`host=h0..`, one point every `--step`
//! seconds for `--days` days) into a real TSD, restarts it so every row is compacted in
//! storage, then times, each `--runs` times after a warm-up, alternately (the medians
//! reported):
//!
//! - the two sub-queries alone: one `/api/query` with `m=sum:1m-avg:A{host=*}` and the same
//!   for `B`;
//! - the expression `a / b * 100` over the same two sub-queries (intersection on host, one
//!   output of `--series` series) through `/api/query/exp`;
//!
//! and prints both and their ratio.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::querybench::{get_timed, median, query_agent};
use crate::targets::{Server, Target};

#[derive(Debug, clap::Args)]
pub(crate) struct ExpArgs {
    /// Series of each of the two metrics (host=h0..).
    #[arg(long, default_value_t = 1000)]
    series: usize,
    /// Days of points.
    #[arg(long, default_value_t = 7)]
    days: u64,
    /// Seconds between two points of a series.
    #[arg(long, default_value_t = 10)]
    step: u64,
    /// Timed runs of each request (after one warm-up run); the median is reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// The tsdb binary (default: next to this one).
    #[arg(long)]
    tsdb: Option<std::path::PathBuf>,
    /// Keep the TSD's data in this directory: loaded when it holds none, else reused as it is
    /// (loaded earlier with the same --series, --days and --step, ending at the same hour).
    #[arg(long)]
    data: Option<std::path::PathBuf>,
}

const METRIC_A: &str = "bench.exp.a";
const METRIC_B: &str = "bench.exp.b";

/// Sends the put lines of both metrics for series `first..series` stepping by `stride` over
/// `[start, end)`: `a` between 0 and 99, `b` between 100 and 199.
fn send(
    addr: &str,
    first: usize,
    stride: usize,
    args: (usize, u64),
    start: u64,
    end: u64,
) -> anyhow::Result<TcpStream> {
    let (series, step) = args;
    let mut s = TcpStream::connect(addr)?;
    let mine: Vec<usize> = (first..series).step_by(stride).collect();
    let mut buf = Vec::with_capacity(8 << 20);
    let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ first as u64;
    let mut t = start;
    while t < end {
        for i in &mine {
            rng ^= rng >> 12;
            rng ^= rng << 25;
            rng ^= rng >> 27;
            let r = rng.wrapping_mul(0x2545_F491_4F6C_DD1D);
            writeln!(buf, "put {METRIC_A} {t} {} host=h{i}", r % 100)?;
            writeln!(
                buf,
                "put {METRIC_B} {t} {} host=h{i}",
                100 + (r >> 32) % 100
            )?;
        }
        if buf.len() > (4 << 20) {
            s.write_all(&buf)?;
            buf.clear();
        }
        t += step;
    }
    s.write_all(&buf)?;
    Ok(s)
}

/// One POST of a JSON body: the seconds until its whole answer was read, and the answer.
fn post_timed(agent: &ureq::Agent, url: &str, body: &str) -> anyhow::Result<(f64, String)> {
    let started = Instant::now();
    let mut resp = agent
        .post(url)
        .header("Content-Type", "application/json")
        .send(body)
        .with_context(|| format!("POST {url}"))?;
    let text = resp
        .body_mut()
        .with_config()
        .limit(1 << 31)
        .read_to_string()?;
    let secs = started.elapsed().as_secs_f64();
    if resp.status() != 200 {
        bail!("{url}: {} {}", resp.status(), &text[..text.len().min(2000)]);
    }
    Ok((secs, text))
}

/// Starts the TSD on `dir`, loads both metrics, and restarts it so every row is compacted in
/// storage and nothing is left in the write buffers.
fn load(
    target: &Target,
    dir: &std::path::Path,
    args: &ExpArgs,
    (start, end): (u64, u64),
    per_metric: u64,
) -> anyhow::Result<Server> {
    let mut server = target.start(dir)?;
    let loaded_at = Instant::now();
    let conns = 2;
    let senders: Vec<_> = (0..conns)
        .map(|c| {
            let addr = server.put_addr.clone();
            let shape = (args.series, args.step);
            std::thread::spawn(move || send(&addr, c, conns, shape, start, end))
        })
        .collect();
    let mut sockets = Vec::new();
    for s in senders {
        sockets.push(s.join().map_err(|_| anyhow::anyhow!("sender panicked"))??);
    }
    target.wait_durable(&mut server, &mut sockets, 2 * per_metric as usize)?;
    drop(sockets);
    println!("loaded in {:.1} s", loaded_at.elapsed().as_secs_f64());
    server.stop(Duration::from_secs(1800))?;
    target.start(dir)
}

pub(crate) fn run(args: &ExpArgs) -> anyhow::Result<()> {
    if args.series == 0 || args.days == 0 || args.step == 0 {
        bail!("--series, --days and --step must be above 0");
    }
    let tsdb = crate::targets::tsdb_binary(args.tsdb.as_deref())?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let temp = tempfile::tempdir()?;
    let dir = args.data.as_deref().unwrap_or(temp.path());
    // A reused data dir keeps the hour its data ends at.
    let range_file = dir.join("bench-exp-end");
    let reuse = dir.join("data").exists();
    let end = if reuse {
        std::fs::read_to_string(&range_file)
            .with_context(|| {
                format!(
                    "{} holds data but no {}",
                    dir.display(),
                    range_file.display()
                )
            })?
            .trim()
            .parse()?
    } else {
        now - now % 3600 - 3600
    };
    let start = end - args.days * 86_400;
    let per_metric = args.series as u64 * (end - start) / args.step;
    println!(
        "2 metrics x {} series x {} days at {} s = {} points",
        args.series,
        args.days,
        args.step,
        2 * per_metric
    );
    let target = Target::parse("hourglass", &tsdb)?;
    let mut server = if reuse {
        println!("reusing the data in {}", dir.display());
        target.start(dir)?
    } else {
        std::fs::create_dir_all(dir)?;
        std::fs::write(&range_file, end.to_string())?;
        load(&target, dir, args, (start, end), per_metric)?
    };

    let addr = server.http_addr().to_string();
    let agent = query_agent();
    let last = end - 1;
    // Computed each run (`nocache`), as the expression is: kept answers would time a cache.
    let query_url = format!(
        "http://{addr}/api/query?start={start}&end={last}\
         &m=sum:1m-avg:{METRIC_A}%7Bhost=*%7D&m=sum:1m-avg:{METRIC_B}%7Bhost=*%7D&nocache"
    );
    let exp_url = format!("http://{addr}/api/query/exp");
    let exp_body = serde_json::json!({
        "time": {"start": start.to_string(), "end": last.to_string(), "aggregator": "sum",
                 "downsampler": {"interval": "1m", "aggregator": "avg"}},
        "filters": [{"id": "f", "tags": [{"type": "wildcard", "tagk": "host", "filter": "*", "groupBy": true}]}],
        "metrics": [{"id": "a", "metric": METRIC_A, "filter": "f"},
                    {"id": "b", "metric": METRIC_B, "filter": "f"}],
        "expressions": [{"id": "e", "expr": "a / b * 100", "join": {"operator": "intersection"}}],
        "outputs": [{"id": "e"}],
    })
    .to_string();

    // One warm-up each, then the two alternately, so both see the same machine.
    get_timed(&agent, &query_url)?;
    post_timed(&agent, &exp_url, &exp_body)?;
    let mut query_times = Vec::new();
    let mut exp_times = Vec::new();
    let mut query_body = String::new();
    let mut exp_answer = String::new();
    for _ in 0..args.runs.max(1) {
        let (secs, body) = get_timed(&agent, &query_url)?;
        query_times.push(secs);
        query_body = body;
        let (secs, body) = post_timed(&agent, &exp_url, &exp_body)?;
        exp_times.push(secs);
        exp_answer = body;
    }
    // The answers hold what was asked for: every series of both metrics, and one output of
    // as many series with one row per minute.
    let query_series = query_body.matches("\"metric\":\"").count();
    if query_series != 2 * args.series {
        bail!(
            "/api/query answered {query_series} series, not {}",
            2 * args.series
        );
    }
    let meta_at = exp_answer
        .find("\"dpsMeta\":")
        .context("no dpsMeta in the expression's answer")?;
    let meta_text = &exp_answer[meta_at + "\"dpsMeta\":".len()..];
    let meta_end = meta_text.find('}').context("unterminated dpsMeta")?;
    let meta: serde_json::Value = serde_json::from_str(&meta_text[..=meta_end])?;
    let rows = meta["setCount"].as_u64().unwrap_or(0);
    if meta["series"].as_u64() != Some(args.series as u64) || rows < (end - start) / 60 - 1 {
        bail!("/api/query/exp answered {meta}");
    }
    let q = median(&mut query_times);
    let e = median(&mut exp_times);
    println!(
        "/api/query, the two sub-queries: {:.0} ms (median of {}; {:.0} MB answered)",
        q * 1000.0,
        query_times.len(),
        query_body.len() as f64 / 1e6
    );
    println!(
        "/api/query/exp, a / b * 100:     {:.0} ms (median of {}; {:.0} MB answered, {} series x {rows} rows)",
        e * 1000.0,
        exp_times.len(),
        exp_answer.len() as f64 / 1e6,
        args.series
    );
    println!("ratio exp / query: {:.2}x", e / q);
    server.stop(Duration::from_secs(600))?;
    Ok(())
}
