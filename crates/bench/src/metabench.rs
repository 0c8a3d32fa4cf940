//! `hourglass-bench meta`: suggest and lookup latency with many tag values. For each of
//! `--targets`, starts a server on a fresh data dir (Hourglass with series tracking on, and
//! the tag index off for `hourglass`, on for `hourglass-index`), writes one point for each of
//! `--values` series `bench.meta host=h0000000…` (so `--values` tag values, UIDs and meta
//! rows), then times `/api/suggest` and `/api/search/lookup` over HTTP (median of `--runs`);
//! VictoriaMetrics answers the lookup's question with `/api/v1/series`.

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
    /// Targets, comma separated: hourglass (index off), hourglass-index, victoriametrics.
    #[arg(long, default_value = "hourglass,hourglass-index,victoriametrics")]
    targets: String,
}

pub(crate) fn run(args: &MetaArgs) -> anyhow::Result<()> {
    for target in args.targets.split(',').map(str::trim) {
        println!("\n## {target}\n");
        match target {
            "hourglass" => run_hourglass(args, false)?,
            "hourglass-index" => run_hourglass(args, true)?,
            "victoriametrics" => run_victoria(args)?,
            other => anyhow::bail!(
                "unknown target {other} (hourglass, hourglass-index, victoriametrics)"
            ),
        }
    }
    Ok(())
}

fn run_hourglass(args: &MetaArgs, index: bool) -> anyhow::Result<()> {
    let tsdb = crate::targets::tsdb_binary(args.tsdb.as_deref())?;
    let dir = tempfile::tempdir()?;
    let conf = dir.path().join("opentsdb.conf");
    std::fs::write(
        &conf,
        format!(
            "tsd.core.meta.enable_tsuid_tracking = true\ntsd.storage.flush_interval = 1000\ntsd.index.enable = {index}\n"
        ),
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
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot run {}", tsdb.display()))?;
    wait_port(&addr, &mut child)?;
    let result = measure(args, &addr, child.id());
    if std::env::var_os("HOURGLASS_BENCH_KEEP").is_some() {
        // The TSD left running on its data, to be profiled or asked again.
        println!(
            "(TSD pid {} left running on {}, port {port})",
            child.id(),
            dir.keep().display()
        );
        return result;
    }
    child.kill().ok();
    child.wait().ok();
    result
}

/// Sends the put lines (then `version`, when `ack` is set, to know they were read).
fn load(args: &MetaArgs, addr: &str, ack: bool) -> anyhow::Result<TcpStream> {
    let mut s = TcpStream::connect(addr)?;
    let mut buf = Vec::with_capacity(8 << 20);
    for i in 0..args.values {
        writeln!(buf, "put bench.meta 1356998400 {i} host=h{i:07}")?;
        if buf.len() > (4 << 20) {
            s.write_all(&buf)?;
            buf.clear();
        }
    }
    if ack {
        buf.extend_from_slice(b"version\n");
    }
    s.write_all(&buf)?;
    Ok(s)
}

fn run_victoria(args: &MetaArgs) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut server = crate::targets::Target::VictoriaMetrics.start(dir.path())?;
    let result = measure_victoria(args, &server.put_addr, server.http_addr(), server.pid());
    server.stop(std::time::Duration::from_secs(30)).ok();
    result
}

fn measure_victoria(
    args: &MetaArgs,
    put_addr: &str,
    http_addr: &str,
    pid: u32,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let cpu_before = crate::proc::cpu_seconds(pid)?;
    drop(load(args, put_addr, false)?);
    let base = format!("http://{http_addr}");
    let series = |host: &str| {
        format!(
            "{base}/api/v1/series?start=1356998000&end=1357000000&match[]={}",
            encode(&format!("{{__name__=\"bench.meta\",host=\"{host}\"}}"))
        )
    };
    let last = format!("h{:07}", args.values.saturating_sub(1));
    let deadline = Instant::now() + std::time::Duration::from_secs(600);
    loop {
        let (_, body) = time_get(&series(&last), 0)?;
        if body.contains(&last) {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "load incomplete: {body}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    report_load(args, started, pid, cpu_before)?;
    let mid = format!("h{:07}", args.values / 2);
    let cases = vec![
        (format!("series host={mid}"), series(&mid)),
        (
            "label values host (all)".to_string(),
            format!("{base}/api/v1/label/host/values?start=1356998000&end=1357000000"),
        ),
    ];
    println!("| request | median ms |");
    println!("|---|---|");
    for (name, url) in cases {
        let (secs, body) = time_get(&url, args.runs)?;
        anyhow::ensure!(body.contains("success"), "{name}: {body}");
        println!("| {name} | {:.2} |", secs * 1000.0);
    }
    Ok(())
}

/// Prints the load's wall time and the server's CPU seconds through it, then waits for the
/// server to go idle (merges and compactions the load left behind) and prints its CPU
/// seconds and the bytes it wrote to storage since it started (a start's own writes are
/// small beside a load's).
fn report_load(args: &MetaArgs, started: Instant, pid: u32, cpu_before: f64) -> anyhow::Result<()> {
    let wall = started.elapsed().as_secs_f64();
    let cpu = crate::proc::cpu_seconds(pid)? - cpu_before;
    println!(
        "loaded {} series / tag values in {wall:.1} s, server CPU {cpu:.1} s",
        args.values
    );
    let idle = crate::proc::wait_idle(pid, std::time::Duration::from_secs(600))?;
    let cpu_idle = crate::proc::cpu_seconds(pid)? - cpu_before;
    let written = crate::proc::written_bytes(pid).unwrap_or(0);
    println!(
        "{} after {:.1} s: server CPU {cpu_idle:.1} s ({:.1} µs a series), {:.1} MB written",
        if idle { "idle" } else { "not idle" },
        started.elapsed().as_secs_f64(),
        cpu_idle * 1e6 / args.values.max(1) as f64,
        written as f64 / 1e6
    );
    Ok(())
}

fn measure(args: &MetaArgs, addr: &str, pid: u32) -> anyhow::Result<()> {
    let started = Instant::now();
    let cpu_before = crate::proc::cpu_seconds(pid)?;
    let s = load(args, addr, true)?;
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
    report_load(args, started, pid, cpu_before)?;

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
            "suggest tagv within metric, key host, prefix h05 (max 25)".into(),
            format!("{base}/api/suggest?type=tagv&metric=bench.meta&tagk=host&q=h05"),
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
            "lookup data table, metric only (limit 25)".into(),
            format!("{base}/api/search/lookup?m=bench.meta&use_meta=false"),
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
