//! Writes batches of points until killed, printing `acked N` after each acknowledged batch
//! (N = points acknowledged so far). Crash-safety tests kill it and check that every
//! acknowledged point is stored after a restart.

use std::io::Write;
use std::process::ExitCode;

use hourglass_core::value::Value;
use hourglass_engine::IncomingPoint;

use crate::open::StoreArgs;

#[derive(Debug, clap::Args)]
pub(crate) struct DebugIngestArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// Points per batch.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Stop after this many points (0: never).
    #[arg(long, default_value_t = 0)]
    limit: u64,
}

pub(crate) fn run(args: &DebugIngestArgs) -> anyhow::Result<ExitCode> {
    let mut settings = args.store.settings()?;
    settings.auto_create_metrics = true;
    let db = args.store.open_tsdb(settings)?;
    db.start_background();
    let hosts: Vec<String> = (0..100).map(|i| format!("h{i}")).collect();
    let tags: Vec<[(&str, &str); 1]> = hosts.iter().map(|h| [("host", h.as_str())]).collect();
    let mut out = std::io::stdout().lock();
    let mut n: u64 = 0;
    loop {
        let batch: Vec<IncomingPoint<'_>> = (0..args.batch as u64)
            .map(|i| {
                let k = n + i;
                // Point k: series k % 100, second k / 100 from 2013-01-01: every point unique.
                IncomingPoint {
                    metric: "crash.test",
                    timestamp: 1356998400 + (k / 100) as i64,
                    value: Value::Int(k as i64),
                    tags: &tags[(k % 100) as usize],
                    line_tags: None,
                }
            })
            .collect();
        let outcome = db.add_points(&batch);
        if !outcome.errors.is_empty() {
            anyhow::bail!("batch failed: {}", outcome.errors[0].1);
        }
        n += args.batch as u64;
        writeln!(out, "acked {n}")?;
        out.flush()?;
        if args.limit > 0 && n >= args.limit {
            db.close()?;
            return Ok(ExitCode::SUCCESS);
        }
    }
}
