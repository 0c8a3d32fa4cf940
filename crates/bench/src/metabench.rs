//! `hourglass-bench meta`: suggest and lookup latency with many tag values. Starts a TSD
//! on a fresh data dir with series tracking on, writes one point for each of `--values`
//! series `bench.meta host=h0000000…` (so `--values` tag values, UIDs and meta rows), then
//! times `/api/suggest` and `/api/search/lookup` over HTTP (median of `--runs`).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::Context;

use crate::querybench::{encode, time_get};
use crate::targets::{free_port, wait_port};

#[derive(Debug, clap::Args)]
pub(crate) struct MetaArgs {
    /// Distinct tag values (= series).
    #[arg(long, default_value_t = 1_000_000)]
    values: usize,
    /// Timed runs per request (after one warm-up).
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// The tsdb binary (default: next to this one).
    #[arg(long)]
    tsdb: Option<std::path::PathBuf>,
}

pub(crate) fn run(args: &MetaArgs) -> anyhow::Result<()> {
    let tsdb = crate::targets::tsdb_binary(args.tsdb.as_deref())?;
    let dir = tempfile::tempdir()?;
    let conf = dir.path().join("opentsdb.conf");
    std::fs::write(
        &conf,
        "tsd.core.meta.enable_tsuid_tracking = true\ntsd.storage.flush_interval = 1000\n",
    )?;
    let port = free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let mut child = Command::new(&tsdb)
        .args(["tsd", "--bind", "127.0.0.1", "--auto-metric", "--port"])
        .arg(port.to_string())
        .arg("--config")
        .arg(&conf)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot run {}", tsdb.display()))?;
    wait_port(&addr, &mut child)?;
    let result = measure(args, &addr);
    child.kill().ok();
    child.wait().ok();
    result
}

fn measure(args: &MetaArgs, addr: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut s = TcpStream::connect(addr)?;
    let mut buf = Vec::with_capacity(8 << 20);
    for i in 0..args.values {
        writeln!(buf, "put bench.meta 1356998400 {i} host=h{i:07}")?;
        if buf.len() > (4 << 20) {
            s.write_all(&buf)?;
            buf.clear();
        }
    }
    buf.extend_from_slice(b"version\n");
    s.write_all(&buf)?;
    let mut reader = BufReader::new(s);
    let mut line = String::new();
    while reader.read_line(&mut line)? > 0 && !line.starts_with("hourglass ") {
        line.clear();
    }
    let base = format!("http://{addr}");
    // A data-table lookup flushes the buffers, which also records the series' meta rows.
    let check = time_get(
        &format!(
            "{base}/api/search/lookup?m={}&use_meta=false",
            encode("bench.meta{host=h0000001}")
        ),
        1,
    )?;
    anyhow::ensure!(check.1.contains("h0000001"), "load incomplete: {}", check.1);
    println!(
        "loaded {} series / tag values in {:.1} s",
        args.values,
        started.elapsed().as_secs_f64()
    );

    let mid = format!("h{:07}", args.values / 2);
    let cases: Vec<(String, String)> = vec![
        (
            "suggest tagv prefix h05 (max 25)".into(),
            format!("{base}/api/suggest?type=tagv&q=h05"),
        ),
        (
            format!("suggest tagv exact {mid}"),
            format!("{base}/api/suggest?type=tagv&q={mid}"),
        ),
        (
            "suggest tagv empty prefix (max 25)".into(),
            format!("{base}/api/suggest?type=tagv"),
        ),
        (
            "suggest tagv prefix h0 (max 1000)".into(),
            format!("{base}/api/suggest?type=tagv&q=h0&max=1000"),
        ),
        (
            format!("lookup meta table host={mid}"),
            format!(
                "{base}/api/search/lookup?m={}&use_meta=true",
                encode(&format!("bench.meta{{host={mid}}}"))
            ),
        ),
        (
            "lookup meta table, metric only (limit 25)".into(),
            format!("{base}/api/search/lookup?m=bench.meta&use_meta=true"),
        ),
        (
            format!("lookup data table host={mid}"),
            format!(
                "{base}/api/search/lookup?m={}&use_meta=false",
                encode(&format!("bench.meta{{host={mid}}}"))
            ),
        ),
    ];
    println!("| request | median ms |");
    println!("|---|---|");
    for (name, url) in cases {
        let (secs, body) = time_get(&url, args.runs)?;
        anyhow::ensure!(!body.is_empty(), "{name}: empty answer");
        println!("| {name} | {:.2} |", secs * 1000.0);
    }
    Ok(())
}
