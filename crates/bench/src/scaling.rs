//! `hourglass-bench bigtable`: N TSD processes over one Bigtable emulator, the put stream
//! split across them (2 connections each). Reports points/s from the first byte until every
//! TSD has flushed to Bigtable and exited, and Bigtable row mutations per point (each row
//! mutation writes one cell, plus deletes when a row is compacted).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::dataset;

#[derive(Debug, clap::Args)]
pub(crate) struct ScalingArgs {
    /// Points per run.
    #[arg(long, default_value_t = 1_000_000)]
    points: usize,
    /// Series.
    #[arg(long, default_value_t = 10_000)]
    series: usize,
    /// TSD counts to run, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    tsds: Vec<usize>,
    /// The emulator binary.
    #[arg(
        long,
        default_value = "/usr/lib/google-cloud-sdk/platform/bigtable-emulator/cbtemulator"
    )]
    emulator: String,
    /// The tsdb binary (default: next to this one).
    #[arg(long)]
    tsdb: Option<std::path::PathBuf>,
}

struct Tsd {
    child: Child,
    addr: String,
    log: std::sync::mpsc::Receiver<String>,
}

fn spawn_tsd(
    tsdb: &std::path::Path,
    config: &std::path::Path,
    dir: &std::path::Path,
) -> anyhow::Result<Tsd> {
    let mut child = Command::new(tsdb)
        .args([
            "tsd",
            "--port",
            "0",
            "--bind",
            "127.0.0.1",
            "--auto-metric",
            "--config",
        ])
        .arg(config)
        .arg("--data-dir")
        .arg(dir)
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {}", tsdb.display()))?;
    let stderr = child.stderr.take().context("no stderr")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .context("tsd did not start")?;
        if let Some(rest) = line.split("Ready to serve on ").nth(1) {
            let addr = rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
            return Ok(Tsd {
                child,
                addr,
                log: rx,
            });
        }
    }
}

pub(crate) fn run(args: &ScalingArgs) -> anyhow::Result<()> {
    let tsdb = crate::targets::tsdb_binary(args.tsdb.as_deref())?;
    let data = dataset::generate(args.points, args.series);
    println!(
        "| TSDs | points/s | Bigtable row mutations per point | cells in Bigtable per point |"
    );
    println!("|---|---|---|---|");
    for &n in &args.tsds {
        let dir = tempfile::tempdir()?;
        let (mut emulator, host) = crate::targets::spawn_emulator(&args.emulator)?;
        let config = dir.path().join("bt.conf");
        std::fs::write(
            &config,
            format!(
                "tsd.storage.backend = bigtable\ngoogle.bigtable.emulator.host = {host}\ngoogle.bigtable.project.id = bench\ngoogle.bigtable.instance.id = scale\n"
            ),
        )?;
        let created = Command::new(&tsdb)
            .args(["create-tables", "--config"])
            .arg(&config)
            .arg("--data-dir")
            .arg(dir.path().join("admin"))
            .output()?;
        if !created.status.success() {
            bail!(
                "create-tables failed: {}",
                String::from_utf8_lossy(&created.stderr)
            );
        }
        let mut tsds = Vec::new();
        for i in 0..n {
            tsds.push(spawn_tsd(
                &tsdb,
                &config,
                &dir.path().join(format!("tsd{i}")),
            )?);
        }
        let streams = data.split(2 * n);
        let started = Instant::now();
        let senders: Vec<_> = streams
            .into_iter()
            .enumerate()
            .map(|(i, bytes)| {
                let addr = tsds[i % n].addr.clone();
                std::thread::spawn(move || -> anyhow::Result<()> {
                    let mut s = TcpStream::connect(&addr)?;
                    s.write_all(&bytes)?;
                    s.write_all(b"version\nexit\n")?;
                    let mut out = String::new();
                    s.read_to_string(&mut out)?;
                    if !out.starts_with("hourglass ") {
                        bail!("put errors: {}", out.lines().next().unwrap_or_default());
                    }
                    Ok(())
                })
            })
            .collect();
        for s in senders {
            s.join().map_err(|_| anyhow::anyhow!("sender panicked"))??;
        }
        let mut mutations = 0u64;
        for t in &mut tsds {
            Command::new("kill")
                .args(["-TERM", &t.child.id().to_string()])
                .status()?;
        }
        for t in &mut tsds {
            t.child.wait()?;
            for line in t.log.try_iter() {
                if let Some(v) = line
                    .split("rows_written=")
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    .and_then(|v| v.parse::<u64>().ok())
                {
                    mutations += v;
                }
            }
        }
        let elapsed = started.elapsed().as_secs_f64();
        let cells = count_cells(&tsdb, &config, dir.path())?;
        let _ = emulator.kill();
        let _ = emulator.wait();
        println!(
            "| {n} | {:.0} | {:.4} | {:.4} |",
            args.points as f64 / elapsed,
            mutations as f64 / args.points as f64,
            cells as f64 / args.points as f64
        );
    }
    Ok(())
}

/// Cells in the data table, counted through `tsdb scan` of every metric (one line per cell
/// or per compacted point group).
fn count_cells(
    tsdb: &std::path::Path,
    config: &std::path::Path,
    dir: &std::path::Path,
) -> anyhow::Result<usize> {
    let mut cells = 0;
    for m in dataset::METRICS {
        let out = Command::new(tsdb)
            .args(["scan", "--config"])
            .arg(config)
            .arg("--data-dir")
            .arg(dir.join("reader"))
            .args(["2000/01/01", "2100/01/01", "sum", m])
            .output()?;
        cells += String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("  ["))
            .count();
    }
    Ok(cells)
}
