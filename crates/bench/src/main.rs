//! `hourglass-bench ingest`: streams the same `put` lines (thousands of series, several tags)
//! over 1 and 8 connections to Hourglass, VictoriaMetrics and InfluxDB 1.x, one after the
//! other on this machine, and prints for each: points/s until every point is durable, server
//! CPU time per point (ingest through graceful shutdown), peak RSS, and bytes on disk per
//! point after shutdown (less VictoriaMetrics's rebuildable `cache/`); then the ratios to
//! Hourglass. With `--repeat N` each configuration runs N times and the run with the median
//! CPU per point is reported. `hourglass-bench realdata` does the same on real monitoring
//! data and times queries afterwards.
#![allow(clippy::print_stdout)]

mod cardinality;
mod chaos;
mod dataset;
mod expbench;
mod load;
mod metabench;
mod proc;
mod querybench;
mod realdata;
mod rollbench;
mod scaling;
mod syncbench;
mod targets;

use std::io::Write;

use anyhow::Context;
use clap::Parser;

use targets::Target;

#[derive(Debug, Parser)]
#[command(name = "hourglass-bench")]
enum Cli {
    /// Ingest benchmark over the telnet `put` protocol.
    Ingest(IngestArgs),
    /// Scaling on Bigtable: 1, 2, 3 ... TSDs sharing one Bigtable emulator.
    Bigtable(scaling::ScalingArgs),
    /// Query latency against VictoriaMetrics on the same points.
    Query(querybench::QueryArgs),
    /// An `/api/query/exp` expression against the two sub-queries it reads through
    /// `/api/query`.
    Exp(expbench::ExpArgs),
    /// Suggest and lookup latency with many tag values.
    Meta(metabench::MetaArgs),
    /// Queries picking 10 of 100,000 series of one metric by literal, wildcard and regexp,
    /// with the tag index off and on, against VictoriaMetrics.
    Cardinality(cardinality::CardinalityArgs),
    /// Writers and readers against a TSD that is killed, stopped, starved of disk and of its
    /// store in turn; checks every acknowledged point is kept exactly once.
    Chaos(chaos::ChaosArgs),
    /// `/api/put?sync` throughput with concurrent clients against one fsync per request.
    Sync(syncbench::SyncArgs),
    /// Real monitoring data (CSV files) into Hourglass and VictoriaMetrics: CPU, disk and
    /// query latency side by side (`--fetch-help` tells how to get the data).
    Realdata(realdata::RealDataArgs),
    /// Rollups Hourglass computes itself: `1h-avg` and `1d-max` over the whole range from
    /// raw points and from rollups, the computation's CPU per point, and VictoriaMetrics.
    Rollups(rollbench::RollupArgs),
}

#[derive(Debug, clap::Args)]
struct IngestArgs {
    /// Points to send per run.
    #[arg(long, default_value_t = 5_000_000)]
    points: usize,
    /// Series (metric × tag combinations).
    #[arg(long, default_value_t = 10_000)]
    series: usize,
    /// Connection counts to run, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,8")]
    connections: Vec<usize>,
    /// Targets, comma separated: hourglass, hourglass-index (the tag index on:
    /// `tsd.index.enable = true`), victoriametrics, influxdb.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "hourglass,victoriametrics,influxdb"
    )]
    targets: Vec<String>,
    /// Runs of each configuration; the median run is reported.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// The tsdb binary (default: next to this one).
    #[arg(long)]
    tsdb: Option<std::path::PathBuf>,
}

/// One measured run.
#[derive(Debug)]
struct Run {
    target: String,
    connections: usize,
    points_per_sec: f64,
    cpu_us_per_point: f64,
    peak_rss_mib: f64,
    disk_bytes_per_point: f64,
}

fn main() -> anyhow::Result<()> {
    let args = match Cli::parse() {
        Cli::Ingest(args) => args,
        Cli::Bigtable(args) => return scaling::run(&args),
        Cli::Query(args) => return querybench::run(&args),
        Cli::Exp(args) => return expbench::run(&args),
        Cli::Meta(args) => return metabench::run(&args),
        Cli::Cardinality(args) => return cardinality::run(&args),
        Cli::Chaos(args) => return chaos::run(&args),
        Cli::Sync(args) => return syncbench::run(&args),
        Cli::Realdata(args) => return realdata::run(&args),
        Cli::Rollups(args) => return rollbench::run(&args),
    };
    let tsdb = targets::tsdb_binary(args.tsdb.as_deref())?;
    println!(
        "generating {} points over {} series ...",
        args.points, args.series
    );
    let data = dataset::generate(args.points, args.series);
    println!(
        "{} bytes of put lines ({:.1} bytes/line)",
        data.total_bytes(),
        data.total_bytes() as f64 / args.points as f64
    );
    let mut runs = Vec::new();
    for &conns in &args.connections {
        let streams = data.split(conns);
        for name in &args.targets {
            let target = Target::parse(name, &tsdb)?;
            print!("{name} over {conns} connection(s): ");
            std::io::stdout().flush()?;
            let mut tries = Vec::new();
            for _ in 0..args.repeat.max(1) {
                tries.push(
                    measure(&target, &streams, args.points, conns)
                        .with_context(|| format!("{name} run failed"))?,
                );
            }
            tries.sort_by(|a, b| a.cpu_us_per_point.total_cmp(&b.cpu_us_per_point));
            let run = tries.swap_remove(tries.len() / 2);
            println!(
                "{:.0} points/s, {:.2} µs CPU/point, {:.0} MiB peak RSS, {:.2} bytes/point on disk",
                run.points_per_sec,
                run.cpu_us_per_point,
                run.peak_rss_mib,
                run.disk_bytes_per_point
            );
            runs.push(run);
        }
    }
    print_table(&runs);
    Ok(())
}

fn measure(
    target: &Target,
    streams: &[Vec<u8>],
    points: usize,
    conns: usize,
) -> anyhow::Result<Run> {
    let dir = tempfile::tempdir()?;
    let loaded = load::load_and_stop(target, dir.path(), streams, points)?;
    if std::env::var_os("HOURGLASS_BENCH_KEEP").is_some() {
        println!("(data kept in {})", dir.keep().display());
    }
    Ok(Run {
        target: target.name().to_string(),
        connections: conns,
        points_per_sec: points as f64 / loaded.durable_secs,
        cpu_us_per_point: loaded.cpu_secs * 1e6 / points as f64,
        peak_rss_mib: loaded.peak_rss_bytes as f64 / (1 << 20) as f64,
        disk_bytes_per_point: loaded.disk_bytes as f64 / points as f64,
    })
}

fn print_table(runs: &[Run]) {
    println!(
        "\n| target | conns | points/s | CPU µs/point | peak RSS MiB | disk B/point | points/s vs hourglass | CPU/point vs hourglass |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in runs {
        let base = runs
            .iter()
            .find(|b| b.target == "hourglass" && b.connections == r.connections);
        let (speed, cpu) = base.map_or((f64::NAN, f64::NAN), |b| {
            (
                r.points_per_sec / b.points_per_sec,
                r.cpu_us_per_point / b.cpu_us_per_point,
            )
        });
        println!(
            "| {} | {} | {:.0} | {:.2} | {:.0} | {:.2} | {:.2}x | {:.2}x |",
            r.target,
            r.connections,
            r.points_per_sec,
            r.cpu_us_per_point,
            r.peak_rss_mib,
            r.disk_bytes_per_point,
            speed,
            cpu
        );
    }
}
