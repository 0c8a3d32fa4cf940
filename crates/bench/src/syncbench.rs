//! `hourglass-bench sync`: `/api/put?sync` throughput with concurrent clients, against the
//! rate of one fsync per request on the same disk. Concurrent `?sync` requests share one
//! log fsync (group commit), so with many clients a TSD answers many requests per fsync.
//! `--endpoint rollup` or `histogram` measures `/api/rollup?sync` or `/api/histogram?sync`,
//! whose cells skip the log: their requests share store syncs the same way.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::targets::Target;

#[derive(Debug, clap::Args)]
pub(crate) struct SyncArgs {
    /// Concurrent clients to run, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,64")]
    clients: Vec<usize>,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Points per request.
    #[arg(long, default_value_t = 10)]
    points: usize,
    /// The endpoint: `put` (raw points, synced through the log), `rollup` or `histogram`
    /// (cells written straight to the store, synced there).
    #[arg(long, default_value = "put", value_parser = ["put", "rollup", "histogram"])]
    endpoint: String,
    /// The tsdb binary (default: next to this one).
    #[arg(long)]
    tsdb: Option<PathBuf>,
    /// Directory for the data (default: a temporary directory under ./target).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// Appends a small record and fdatasyncs it in a loop: the disk's rate of one fsync per
/// request.
fn fsyncs_per_second(dir: &std::path::Path, seconds: u64) -> anyhow::Result<f64> {
    let path = dir.join("fsync-probe");
    let mut f = std::fs::File::create(&path)?;
    let started = Instant::now();
    let mut n = 0u64;
    while started.elapsed() < Duration::from_secs(seconds) {
        f.write_all(&[7u8; 200])?;
        f.sync_data()?;
        n += 1;
    }
    drop(f);
    std::fs::remove_file(&path)?;
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

/// One keep-alive POST to `/api/<endpoint>?sync`; true when answered 204.
fn post(stream: &mut BufReader<TcpStream>, endpoint: &str, body: &str) -> anyhow::Result<bool> {
    // One write: a request split over several packets meets Nagle and delayed ACKs.
    let request = format!(
        "POST /api/{endpoint}?sync HTTP/1.1\r\nHost: b\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.get_mut().write_all(request.as_bytes())?;
    let mut status = String::new();
    stream.read_line(&mut status)?;
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        stream.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
    }
    let mut rest = vec![0u8; len];
    stream.read_exact(&mut rest)?;
    Ok(status.split(' ').nth(1) == Some("204"))
}

/// The syncs that serve `endpoint`'s requests so far: the log's for `put`, the store's
/// (`tsd.hbase.rpcs type=sync`) for the others.
fn syncs(addr: &str, endpoint: &str) -> anyhow::Result<u64> {
    let body = ureq::get(&format!("http://{addr}/api/stats"))
        .call()?
        .body_mut()
        .read_to_string()?;
    let stats: serde_json::Value = serde_json::from_str(&body)?;
    let wanted = |s: &serde_json::Value| {
        if endpoint == "put" {
            s["metric"] == "tsd.storage.log_syncs"
        } else {
            s["metric"] == "tsd.hbase.rpcs" && s["tags"]["type"] == "sync"
        }
    };
    stats
        .as_array()
        .and_then(|a| a.iter().find(|s| wanted(s)))
        .and_then(|s| s["value"].as_str()?.parse().ok())
        .with_context(|| format!("no sync count for {endpoint} in /api/stats"))
}

/// 2013-01-01 00:00:00 UTC.
const T0: i64 = 1_356_998_400;

/// Point `i` of a request body for `endpoint`, at time `t`.
fn point(endpoint: &str, t: i64, i: usize, c: usize, round: usize) -> String {
    let tags = format!(r#"{{"client":"c{c}","round":"r{round}"}}"#);
    match endpoint {
        // One 1h rollup cell per point: an hour apart.
        "rollup" => format!(
            r#"{{"metric":"sync.bench","timestamp":{},"value":{i},"tags":{tags},"interval":"1h","aggregator":"sum"}}"#,
            T0 + (t - T0) * 3600
        ),
        "histogram" => format!(
            r#"{{"metric":"sync.bench","timestamp":{t},"tags":{tags},"buckets":{{"0,1":{i},"1,2":3}},"underflow":0,"overflow":1}}"#
        ),
        _ => format!(r#"{{"metric":"sync.bench","timestamp":{t},"value":{i},"tags":{tags}}}"#),
    }
}

/// The configuration `endpoint` needs.
const ROLLUP_CONFIG: &str = r#"tsd.rollups.enable = true
tsd.rollups.config = {"aggregationIds":{"sum":0,"count":1},"intervals":[{"table":"tsdb","preAggregationTable":"tsdb-agg","interval":"1m","rowSpan":"1h","defaultInterval":true},{"table":"tsdb-rollup-1h","preAggregationTable":"tsdb-rollup-agg-1h","interval":"1h","rowSpan":"1d"}]}
"#;
const HISTOGRAM_CONFIG: &str =
    "tsd.core.histograms.config = {\"net.opentsdb.core.SimpleHistogramDecoder\": 42}\n";

pub(crate) fn run(args: &SyncArgs) -> anyhow::Result<()> {
    let tsdb = crate::targets::tsdb_binary(args.tsdb.as_deref())?;
    std::fs::create_dir_all("target")?;
    let tmp = tempfile::tempdir_in("target")?;
    let dir = args.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&dir)?;
    let fsyncs = fsyncs_per_second(&dir, args.seconds)?;
    println!("one fsync per request on this disk: {fsyncs:.0} requests/s");
    let target = Target::Hourglass(tsdb);
    let endpoint = args.endpoint.as_str();
    let mut server = match endpoint {
        "rollup" => target.start_with(&dir, ROLLUP_CONFIG)?,
        "histogram" => target.start_with(&dir, HISTOGRAM_CONFIG)?,
        _ => target.start(&dir)?,
    };
    let addr = server.put_addr.clone();
    let what = if endpoint == "put" { "log" } else { "store" };
    println!("`/api/{endpoint}?sync`, {} points per request", args.points);
    println!();
    println!(
        "| clients | requests/s | points/s | {what} fsyncs/request | vs one fsync per request |"
    );
    println!("|---|---|---|---|---|");
    for (round, &clients) in args.clients.iter().enumerate() {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let syncs_before = syncs(&addr, endpoint)?;
        let threads: Vec<_> = (0..clients)
            .map(|c| {
                let (stop, done, addr) = (Arc::clone(&stop), Arc::clone(&done), addr.clone());
                let points = args.points;
                let endpoint = endpoint.to_string();
                std::thread::spawn(move || -> anyhow::Result<()> {
                    let socket = TcpStream::connect(&addr)?;
                    socket.set_nodelay(true)?;
                    let mut stream = BufReader::new(socket);
                    let mut t = T0;
                    while !stop.load(Ordering::Relaxed) {
                        let body: Vec<String> = (0..points)
                            .map(|i| {
                                t += 1;
                                point(&endpoint, t, i, c, round)
                            })
                            .collect();
                        if !post(&mut stream, &endpoint, &format!("[{}]", body.join(",")))? {
                            bail!("a ?sync request to /api/{endpoint} was not answered 204");
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        let started = Instant::now();
        std::thread::sleep(Duration::from_secs(args.seconds));
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().map_err(|_| anyhow::anyhow!("client panicked"))??;
        }
        let elapsed = started.elapsed().as_secs_f64();
        let requests = done.load(Ordering::Relaxed);
        let syncs = syncs(&addr, endpoint)? - syncs_before;
        let rate = requests as f64 / elapsed;
        println!(
            "| {clients} | {rate:.0} | {:.0} | {:.3} | {:.1}x |",
            rate * args.points as f64,
            syncs as f64 / requests.max(1) as f64,
            rate / fsyncs
        );
    }
    server.stop(Duration::from_secs(60))?;
    Ok(())
}
