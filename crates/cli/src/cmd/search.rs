//! `tsdb search [--use-data-table] lookup METRIC [TAGK=TAGV ...]`: the series of a metric
//! having the given tags, one line each: `TSUID metric tagk=tagv ...`. `*` (or an empty
//! side, as in `host=` or `=web01`) is a wildcard. Series come from the meta table when
//! series tracking (`tsd.core.meta.enable_tsuid_tracking`) is on, else from the data table.

use std::io::Write;
use std::process::ExitCode;

use hourglass_core::uid::hex_upper;
use hourglass_engine::Error;
use hourglass_engine::search::{LookupQuery, lookup};

use crate::open::StoreArgs;

const USAGE: &str = "Usage: search <subcommand> args
Sub commands:
  lookup <query>: Retrieves a list of time series with the given
                  metric, tagk, tagv or any combination thereof.";

#[derive(Debug, clap::Args)]
pub(crate) struct SearchArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// Scan the data table even when the meta table tracks series.
    #[arg(long)]
    use_data_table: bool,
    /// `lookup` and its query.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

fn usage(msg: &str) -> ExitCode {
    eprintln!("{msg}\n{USAGE}");
    ExitCode::from(2)
}

/// One `k=v`, `k=`, `=v` word of a lookup.
fn pair(word: &str) -> Result<(Option<String>, Option<String>), String> {
    if word.len() < 2 {
        return Err(format!("When parsing tag '{word}': Missing tag pair"));
    }
    let side = |s: &str| (!s.is_empty()).then(|| s.to_string());
    match word.split_once('=') {
        Some((k, v)) if !v.contains('=') => Ok((side(k), side(v))),
        _ => Err(format!("When parsing tag '{word}': invalid tag: {word}")),
    }
}

pub(crate) fn run(args: &SearchArgs) -> anyhow::Result<ExitCode> {
    let Some(sub) = args.args.first() else {
        return Ok(usage("Not enough arguments"));
    };
    if sub != "lookup" {
        return Ok(usage(&format!("Unknown sub command: {sub}")));
    }
    let words = &args.args[1..];
    let Some(first) = words.first() else {
        return Ok(usage("Not enough arguments"));
    };
    let (metric, tag_words) = if first.contains('=') {
        (None, words)
    } else {
        (Some(first.clone()), &words[1..])
    };
    let mut tags = Vec::with_capacity(tag_words.len());
    for w in tag_words {
        match pair(w) {
            Ok(p) => tags.push(p),
            Err(e) => return Ok(usage(&e)),
        }
    }
    let settings = args.store.settings()?;
    let use_meta = !args.use_data_table && settings.meta.tracks_series();
    let db = args.store.open_tsdb(settings)?;
    let query = LookupQuery {
        metric,
        tags,
        use_meta,
        limit: 0,
    };
    let found = match lookup(&db, &query) {
        Ok(f) => f,
        Err(e @ (Error::NoSuchName { .. } | Error::NoSuchId { .. })) => {
            eprintln!("{e}");
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e.into()),
    };
    let mut out = std::io::stdout().lock();
    for r in found {
        let mut line = format!("{} {}", hex_upper(&r.tsuid), r.metric);
        for (k, v) in &r.tags {
            line.push_str(&format!(" {k}={v}"));
        }
        writeln!(out, "{line}")?;
    }
    Ok(ExitCode::SUCCESS)
}
