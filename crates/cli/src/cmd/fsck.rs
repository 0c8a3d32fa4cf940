//! `tsdb fsck [flags] [--full-scan | START [END] AGG [rate] [counter,...] [downsample N FUNC]
//! METRIC [TAGK=TAGV...] [more queries]]`: checks the data table as OpenTSDB's `fsck` does and
//! optionally repairs it. Each finding prints as one line on stdout (what, the row key in
//! hex, and the flags that repair it), then OpenTSDB's summary and ours. The exit status is 1
//! when anything was found, else 0.

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use hourglass_core::config::Config;
use hourglass_core::time::Tz;
use hourglass_core::uid::UidKind;
use hourglass_engine::fsck::{FsckOptions, FsckScope, fsck};
use hourglass_engine::query::aggregator::Aggregator;
use hourglass_engine::scan::RowQuery;

use crate::open::StoreArgs;

#[derive(Debug, clap::Args)]
pub(crate) struct FsckArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// Scan the entire data table.
    #[arg(long)]
    full_scan: bool,
    /// Fix errors as they're found. Use in combination with other flags.
    #[arg(long)]
    fix: bool,
    /// Set all flags and fix errors as they're found (all but --last-write-wins).
    #[arg(long)]
    fix_all: bool,
    /// Compacts rows after parsing (rows of hours closed for an hour; needs --fix).
    #[arg(long)]
    compact: bool,
    /// Keeps the oldest (default) or newest duplicates. See --last-write-wins.
    #[arg(long)]
    resolve_duplicates: bool,
    /// Last data point written will be kept when fixing duplicates. May be set via config
    /// file and the 'tsd.storage.fix_duplicates' option.
    #[arg(long)]
    last_write_wins: bool,
    /// Delete any time series rows where one or more UIDs fail resolution.
    #[arg(long)]
    delete_orphans: bool,
    /// Delete any unrecognized column that doesn't belong to OpenTSDB.
    #[arg(long)]
    delete_unknown_columns: bool,
    /// Delete single column datapoints with bad values.
    #[arg(long)]
    delete_bad_values: bool,
    /// Delete rows with invalid keys.
    #[arg(long)]
    delete_bad_rows: bool,
    /// Delete compacted columns that cannot be parsed.
    #[arg(long)]
    delete_bad_compacts: bool,
    /// Check the tag index against the data table instead (RFC 0007): missing, stale and
    /// bad entries, counters recounted; `--fix` repairs them.
    #[arg(long)]
    index: bool,
    /// With --index: only rows and days from this time on (any time `tsdb query` takes).
    #[arg(long, requires = "index")]
    since: Option<String>,
    /// Number of threads to use when executing a full table scan.
    #[arg(long, value_name = "NUMBER", allow_negative_numbers = true)]
    threads: Option<i64>,
    /// Wait for each fix operation to finish to continue (always the case here).
    #[arg(long)]
    sync: bool,
    #[arg(
        value_name = "QUERY",
        help = "START-DATE [END-DATE] AGG [rate] [counter,max,reset] [downsample N FUNC] METRIC [TAGK=TAGV...] [more queries]"
    )]
    query: Vec<String>,
}

/// OpenTSDB's usage text, then the options.
fn usage() -> String {
    let mut cmd = FsckArgs::augment_args(clap::Command::new("fsck"));
    format!(
        "Usage: fsck [flags] [START-DATE [END-DATE] query [queries...]] \n\
         Scans the OpenTSDB data table for errors. Use the --full-scan flag\n\
         to scan the entire data table or specify a command line query to scan a subset.\n\
         To see the format in which queries should be written, see the help of the 'query' command.\n\
         The --fix or --fix-all flags will attempt to fix errors, but be careful when using them.\n\n{}",
        cmd.render_help()
    )
}

/// One command-line query: the metric and its tag pairs (`*` for any value, `a|b` for
/// either).
#[derive(Debug, PartialEq, Eq)]
struct CliQuery {
    metric: String,
    tags: Vec<(String, Vec<String>)>,
}

/// Splits OpenTSDB's command-line query syntax into a time range (ms) and queries. The
/// aggregator, rate and downsampling words are checked and otherwise ignored, as in OpenTSDB.
fn parse_queries(
    words: &[String],
    now_ms: i64,
    tz: Tz,
) -> anyhow::Result<(i64, i64, Vec<CliQuery>)> {
    let (start, end, mut i) = super::parse_range(words, now_ms, tz)?;
    let mut queries = Vec::new();
    while i < words.len() {
        let agg = &words[i];
        Aggregator::parse(agg).map_err(|_| anyhow::anyhow!("No such aggregator: {agg}"))?;
        i += 1;
        if words.get(i).is_some_and(|w| w == "rate") {
            i += 1;
            if words.get(i).is_some_and(|w| w.starts_with("counter")) {
                i += 1;
            }
        }
        if words.get(i).is_some_and(|w| w == "downsample") {
            words
                .get(i + 1)
                .and_then(|n| n.parse::<i64>().ok())
                .filter(|n| *n > 0)
                .context("downsample needs an interval in milliseconds")?;
            let func = words.get(i + 2).context("downsample needs a function")?;
            Aggregator::parse(func).map_err(|_| anyhow::anyhow!("No such aggregator: {func}"))?;
            i += 3;
        }
        let metric = words
            .get(i)
            .context("Not enough arguments, need a metric.")?
            .clone();
        i += 1;
        let mut pairs = Vec::new();
        while let Some(w) = words.get(i).filter(|w| w.contains('=')) {
            super::parse_tag(w, &mut pairs)?;
            i += 1;
        }
        let tags = pairs
            .into_iter()
            .map(|(k, v)| {
                let values = if v == "*" {
                    Vec::new()
                } else {
                    v.split('|').map(str::to_string).collect()
                };
                (k, values)
            })
            .collect();
        queries.push(CliQuery { metric, tags });
    }
    if queries.is_empty() {
        anyhow::bail!("Not enough arguments, need at least one query.");
    }
    Ok((start, end, queries))
}

/// The fix options the flags (and `tsd.storage.fix_duplicates`) ask for.
fn options(args: &FsckArgs, fix_duplicates: bool) -> FsckOptions {
    let mut o = if args.fix_all {
        FsckOptions::fix_all()
    } else {
        FsckOptions::default()
    };
    o.fix |= args.fix;
    o.compact |= args.compact;
    o.resolve_duplicates |= args.resolve_duplicates;
    o.last_write_wins = args.last_write_wins || fix_duplicates;
    o.delete_orphans |= args.delete_orphans;
    o.delete_unknown_columns |= args.delete_unknown_columns;
    o.delete_bad_values |= args.delete_bad_values;
    o.delete_bad_rows |= args.delete_bad_rows;
    o.delete_bad_compacts |= args.delete_bad_compacts;
    o
}

pub(crate) fn run(args: &FsckArgs) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = match args.threads {
        None => 0,
        Some(n) if n < 1 => {
            eprintln!("Must have at least one thread");
            return Ok(ExitCode::from(1));
        }
        Some(n) if n > 4 * cores as i64 => {
            eprintln!("Not allowed to run more than 4 threads per core");
            return Ok(ExitCode::from(1));
        }
        Some(n) => n as usize,
    };
    // Duplicates are resolved by their cells' write times (OpenTSDB with
    // `tsd.storage.use_otsdb_timestamp` stores the points' times there instead).
    let mut refused = Vec::new();
    if args.resolve_duplicates || args.fix_all {
        refused.push(crate::open::OTSDB_TIMESTAMP);
    }
    let config = args.store.config_refusing(&refused)?;
    let tz = config.timezone()?;
    if args.index {
        return run_index(args, started, &config);
    }
    if !args.full_scan && args.query.is_empty() {
        eprintln!(
            "Must supply a query or use the '--full-scan' flag\n{}",
            usage()
        );
        return Ok(ExitCode::from(1));
    }
    // As OpenTSDB: a query given scans what it names, even with --full-scan.
    let parsed = if args.query.is_empty() {
        None
    } else {
        match parse_queries(&args.query, chrono::Utc::now().timestamp_millis(), tz) {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!("Invalid usage.  {e}\n{}", usage());
                return Ok(ExitCode::from(2));
            }
        }
    };
    let settings = args.store.settings_from(&config)?;
    let mut options = options(args, settings.fix_duplicates);
    options.threads = threads;
    let db = args.store.open_tsdb(settings)?;
    let scope = match parsed {
        None => FsckScope::FullScan,
        Some((start, end, queries)) => {
            let uids = db.uids();
            let mut rows = Vec::with_capacity(queries.len());
            for q in &queries {
                let mut tags = Vec::new();
                for (k, values) in &q.tags {
                    let k = uids.get_id(UidKind::TagKey, k)?;
                    for v in values {
                        tags.push((k, uids.get_id(UidKind::TagValue, v)?));
                    }
                }
                rows.push(RowQuery {
                    metric: uids.get_id(UidKind::Metric, &q.metric)?,
                    start_secs: start.div_euclid(1000),
                    end_secs: end.div_euclid(1000),
                    tags,
                });
            }
            FsckScope::Queries(rows)
        }
    };
    let report = fsck(&db, &scope, &options)?;
    db.close()?;
    print_report(
        &report.findings,
        &report.summary_lines(),
        started,
        report.total_errors(),
    )
}

/// `fsck --index [--fix] [--since T]`: every finding on one line, then the counts. The exit
/// status is 1 when entries are missing or bad (stale entries and recounted counters are
/// allowed by the index's invariants; they are reported and fixed all the same).
fn run_index(args: &FsckArgs, started: Instant, config: &Config) -> anyhow::Result<ExitCode> {
    use hourglass_engine::index::check::{CheckOptions, check};
    let now_ms = chrono::Utc::now().timestamp_millis();
    let since = match &args.since {
        Some(word) => {
            let ms = hourglass_core::time::parse_time_in(word, now_ms, config.timezone()?)
                .with_context(|| format!("invalid time: {word}"))?;
            Some(u32::try_from(ms.div_euclid(1000).max(0)).unwrap_or(u32::MAX))
        }
        None => None,
    };
    let db = args.store.open_tsdb(args.store.settings_from(config)?)?;
    let options = CheckOptions {
        metrics: Vec::new(),
        since,
        fix: args.fix || args.fix_all,
        now_secs: u32::try_from(now_ms / 1000).unwrap_or(u32::MAX),
    };
    let report = check(&db, &options)?;
    db.close()?;
    print_report(
        &report.findings,
        &report.summary_lines(),
        started,
        report.errors(),
    )
}

/// A report's findings and summary, the time taken, and exit 1 when it found errors.
fn print_report(
    findings: &[String],
    summary: &[String],
    started: std::time::Instant,
    errors: u64,
) -> anyhow::Result<ExitCode> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for line in findings.iter().chain(summary) {
        writeln!(out, "{line}")?;
    }
    writeln!(
        out,
        "Completed fsck in [{}] seconds",
        started.elapsed().as_secs()
    )?;
    out.flush()?;
    Ok(if errors == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn parses_queries_like_opentsdb() {
        let (start, end, qs) = parse_queries(
            &words("1356998400 1357002000 sum rate counter,10 downsample 60000 avg sys.cpu host=a|b dc=* max other"),
            0,
            Tz::UTC,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((start, end), (1356998400000, 1357002000000));
        assert_eq!(
            qs,
            vec![
                CliQuery {
                    metric: "sys.cpu".into(),
                    tags: vec![
                        ("host".into(), vec!["a".into(), "b".into()]),
                        ("dc".into(), vec![])
                    ],
                },
                CliQuery {
                    metric: "other".into(),
                    tags: vec![]
                }
            ]
        );
        assert!(parse_queries(&words("1h-ago sum"), 0, Tz::UTC).is_err());
        assert!(parse_queries(&words("1356998400 bogus m"), 0, Tz::UTC).is_err());
        assert!(parse_queries(&words("1356998400 sum m host="), 0, Tz::UTC).is_err());
    }
}
