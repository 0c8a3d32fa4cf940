//! `tsdb index rebuild [--metric NAME]... [--since T] [--until T] [--index-table NAME]`:
//! builds the tag index (RFC 0007) from the data table's keys, metric by metric; each
//! metric done prints one line. It may run beside live TSDs (on Bigtable; the embedded
//! store's data dir belongs to one process); an interrupted rebuild is finished by running
//! it again for the metrics it had not printed. `--replace` empties the index table first
//! (an index of another format is refused until it is replaced: RFC 0007, "Format 2") and
//! rebuilds every metric over all time.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use hourglass_core::time::Tz;
use hourglass_core::uid::{Uid, UidKind, hex_upper};
use hourglass_engine::index::rebuild::{RebuildOptions, rebuild};

use crate::open::StoreArgs;

#[derive(Debug, clap::Args)]
pub(crate) struct IndexArgs {
    #[command(subcommand)]
    command: IndexCommand,
}

#[derive(Debug, clap::Subcommand)]
enum IndexCommand {
    /// Build the index entries of the data table's rows (all metrics, or those named).
    Rebuild(RebuildArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct RebuildArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// A metric to rebuild (repeatable); all metrics of the UID table by default.
    #[arg(long = "metric", value_name = "NAME")]
    metrics: Vec<String>,
    /// Rows from this time on (any time `tsdb query` takes; widened to the day's start).
    #[arg(long)]
    since: Option<String>,
    /// Rows before this time (widened to the day's end).
    #[arg(long)]
    until: Option<String>,
    /// The index table to write (`tsd.storage.hbase.index_table` by default).
    #[arg(long, value_name = "NAME")]
    index_table: Option<String>,
    /// Empty the index table first (every row, whatever its format), then rebuild every
    /// metric over all time: how an index of an older format is replaced. Stop every TSD
    /// of an older version first.
    #[arg(long)]
    replace: bool,
}

impl IndexArgs {
    pub(crate) fn store(&self) -> &StoreArgs {
        match &self.command {
            IndexCommand::Rebuild(a) => &a.store,
        }
    }
}

/// A time word as seconds (clamped to the index's 32-bit times), absolute dates in `tz`.
fn seconds(word: &str, now_ms: i64, tz: Tz) -> anyhow::Result<u32> {
    let ms = hourglass_core::time::parse_time_in(word, now_ms, tz)
        .with_context(|| format!("invalid time: {word}"))?;
    Ok(u32::try_from(ms.div_euclid(1000).max(0)).unwrap_or(u32::MAX))
}

pub(crate) fn run(args: &IndexArgs) -> anyhow::Result<ExitCode> {
    match &args.command {
        IndexCommand::Rebuild(a) => run_rebuild(a),
    }
}

fn run_rebuild(args: &RebuildArgs) -> anyhow::Result<ExitCode> {
    let now_ms = chrono::Utc::now().timestamp_millis();
    let config = args.store.config()?;
    let tz = config.timezone()?;
    let settings = args.store.settings_from(&config)?;
    let mut replaced = None;
    let db = if args.replace {
        if !args.metrics.is_empty() || args.since.is_some() || args.until.is_some() {
            anyhow::bail!(
                "--replace rebuilds every metric over all time: it does not take --metric, --since or --until"
            );
        }
        let store = args.store.open_store()?;
        let table = args
            .index_table
            .clone()
            .unwrap_or_else(|| settings.schema.index_table.clone());
        let deleted = hourglass_engine::index::status::clear(store.as_ref(), &table)?;
        replaced = Some((table, deleted));
        crate::open::Db(hourglass_engine::Tsdb::open(store, settings)?)
    } else {
        args.store.open_tsdb(settings)?
    };
    let mut metrics = Vec::new();
    for name in &args.metrics {
        metrics.push(db.uids().get_id(UidKind::Metric, name)?);
    }
    let options = RebuildOptions {
        metrics,
        since: args
            .since
            .as_deref()
            .map(|w| seconds(w, now_ms, tz))
            .transpose()?,
        until: args
            .until
            .as_deref()
            .map(|w| seconds(w, now_ms, tz))
            .transpose()?,
        table: args.index_table.clone(),
        now_secs: u32::try_from(now_ms / 1000).unwrap_or(u32::MAX),
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if let Some((table, deleted)) = replaced {
        writeln!(
            out,
            "Emptied the index table {table}: {deleted} rows deleted"
        )?;
        out.flush()?;
    }
    let mut done = (0usize, 0usize);
    let mut failed = None;
    let report = rebuild(&db, &options, |metric, so_far| {
        let name = Uid::from_bytes(metric)
            .ok()
            .and_then(|uid| db.uids().get_name(UidKind::Metric, uid).ok())
            .unwrap_or_else(|| hex_upper(metric));
        let line = writeln!(
            out,
            "metric {name}: {} series, {} series-days",
            so_far.series - done.0,
            so_far.pairs - done.1
        )
        .and_then(|()| out.flush());
        if let Err(e) = line {
            failed.get_or_insert(e);
        }
        done = (so_far.series, so_far.pairs);
    })?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    writeln!(
        out,
        "Rebuilt the index of {} metrics: {} series, {} series-days, {} notes, {} rows written, {} metrics' verified hours raised",
        report.metrics,
        report.series,
        report.pairs,
        report.notes,
        report.rows_written,
        report.verified.len()
    )?;
    out.flush()?;
    db.close()?;
    Ok(ExitCode::SUCCESS)
}
