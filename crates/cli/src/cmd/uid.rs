//! `tsdb uid` and `tsdb mkmetric`, with OpenTSDB's syntax and output
//! (`metrics sys.cpu.user: [0, 0, 1]`, UIDs as signed byte lists).

use std::io::Write;
use std::process::ExitCode;

use anyhow::bail;
use hourglass_core::names::validate_name;
use hourglass_core::uid::{Uid, UidKind};
use hourglass_engine::uid::{UidRegistry, format_signed_bytes};
use hourglass_engine::{Error, Settings};

use crate::open::StoreArgs;

const USAGE: &str = "Usage: uid <subcommand> args
Sub commands:
  grep [kind] <RE>: Finds matching IDs.
  assign <kind> <name> [names]: Assign an ID for the given name(s).
  rename <kind> <name> <newname>: Renames this UID.
  delete <kind> <name>: Deletes this UID.
  metasync: Creates missing TSMeta, counters and UIDMeta from the data table.
  metapurge: Deletes every TSMeta, counter and UIDMeta.
  treesync: Process all timeseries meta objects through tree rules
  treepurge <id> [definition]: Purge a tree and/or the branches
            from storage. Provide an integer Tree ID and optionally
            add \"true\" to delete the tree definition
  fsck [fix] [delete_unknown]: Checks the UID table for errors (and fixes them).

  [kind] <name>: Lookup the ID of this name.
  [kind] <ID>: Lookup the name of this ID.

Example values for [kind]: metrics, tagk (tag name), tagv (tag value).";

#[derive(Debug, clap::Args)]
pub(crate) struct UidArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// Case-insensitive grep.
    #[arg(short, long)]
    ignore_case: bool,
    /// Bytes of the UIDs assigned, renamed and looked up (OpenTSDB's flag, default 3). The
    /// widths are the config's (`tsd.storage.uid.width.*`): a different one is refused.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    idwidth: Option<i16>,
    /// Subcommand and its arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = false)]
    args: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct MkmetricArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// As `uid --idwidth`: the metric UID width, which must be the config's.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    idwidth: Option<i16>,
    /// Metric names.
    #[arg(required = true)]
    names: Vec<String>,
}

pub(crate) fn mkmetric(args: &MkmetricArgs) -> anyhow::Result<ExitCode> {
    if args.idwidth.is_some_and(|w| w <= 0) {
        eprintln!("Negative or 0 --idwidth\n{USAGE}");
        return Ok(ExitCode::from(3));
    }
    let settings = args.store.settings()?;
    check_idwidth(args.idwidth, &settings, &[UidKind::Metric])?;
    let db = args.store.open_tsdb(settings.clone())?;
    assign(db.uids(), &settings, UidKind::Metric, &args.names)
}

fn usage(msg: &str) -> anyhow::Result<ExitCode> {
    eprintln!("{msg}\n{USAGE}");
    Ok(ExitCode::from(2))
}

pub(crate) fn run(args: &UidArgs) -> anyhow::Result<ExitCode> {
    let Some(sub) = args.args.first() else {
        return usage("Not enough arguments");
    };
    if args.idwidth.is_some_and(|w| w <= 0) {
        eprintln!("Negative or 0 --idwidth\n{USAGE}");
        return Ok(ExitCode::from(3));
    }
    if sub == "metasync" {
        // OpenTSDB's also sends what it writes to the search plugin.
        args.store.config_refusing(&[crate::open::SEARCH_PLUGIN])?;
    }
    let settings = args.store.settings()?;
    let db = args.store.open_tsdb(settings.clone())?;
    let uids = db.uids();
    let rest = &args.args[1..];
    match sub.as_str() {
        "assign" => {
            if rest.len() < 2 {
                return usage("Wrong number of arguments");
            }
            let kind = parse_kind(&rest[0])?;
            check_idwidth(args.idwidth, &settings, &[kind])?;
            assign(uids, &settings, kind, &rest[1..])
        }
        "grep" => match rest {
            [re] => grep(uids, None, re, args.ignore_case),
            [kind, re] => grep(uids, Some(parse_kind(kind)?), re, args.ignore_case),
            _ => usage("Wrong number of arguments"),
        },
        "rename" => {
            let [kind, old, new] = rest else {
                return usage("Wrong number of arguments");
            };
            let kind = parse_kind(kind)?;
            check_idwidth(args.idwidth, &settings, &[kind])?;
            validate_name(kind_what(kind), new, &settings.allow_special_chars)?;
            match uids.rename(kind, old, new) {
                Ok(_) => {
                    writeln!(std::io::stdout(), "{kind} {old} -> {new}")?;
                    Ok(ExitCode::SUCCESS)
                }
                Err(e @ Error::NoSuchName { .. }) => {
                    eprintln!("{e}");
                    Ok(ExitCode::from(1))
                }
                Err(e) => Err(e.into()),
            }
        }
        "metasync" => or_exit_3((|| -> anyhow::Result<ExitCode> {
            let started = std::time::Instant::now();
            let report = hourglass_engine::meta::meta_sync(&db)?;
            let mut out = std::io::stdout().lock();
            for line in &report.lines {
                writeln!(out, "{line}")?;
            }
            writeln!(
                out,
                "Processed {} time series: {} TSMeta created, {} counters created, {} UIDMeta updated, {} with unknown UIDs",
                report.series,
                report.ts_meta_created,
                report.counters_created,
                report.uid_meta_written,
                report.unresolved
            )?;
            writeln!(
                out,
                "Completed meta data synchronization in [{}] seconds",
                started.elapsed().as_secs()
            )?;
            db.close()?;
            Ok(ExitCode::SUCCESS)
        })()),
        "metapurge" => or_exit_3((|| -> anyhow::Result<ExitCode> {
            let started = std::time::Instant::now();
            let (uid_cells, ts_cells) = hourglass_engine::meta::meta_purge(&db)?;
            let mut out = std::io::stdout().lock();
            writeln!(out, "Purged [{uid_cells}] UIDMeta columns from storage")?;
            writeln!(out, "Purged [{ts_cells}] TSMeta columns from storage")?;
            writeln!(
                out,
                "Completed meta data purge in [{}] seconds",
                started.elapsed().as_secs()
            )?;
            db.close()?;
            Ok(ExitCode::SUCCESS)
        })()),
        "treesync" => or_exit_3((|| -> anyhow::Result<ExitCode> {
            if !settings.meta.tree_processing {
                tracing::warn!("Tree processing is disabled");
                eprintln!("Tree processing is disabled (tsd.core.tree.enable_processing)");
                return Ok(ExitCode::SUCCESS);
            }
            let started = std::time::Instant::now();
            let report = hourglass_engine::tree::tree_sync(&db)?;
            let mut out = std::io::stdout().lock();
            if report.trees == 0 {
                writeln!(out, "No enabled trees were found")?;
            } else {
                writeln!(
                    out,
                    "Processed {} time series through {} enabled trees, {} skipped",
                    report.series, report.trees, report.skipped
                )?;
            }
            writeln!(
                out,
                "Completed tree synchronization in [{}] seconds",
                started.elapsed().as_secs()
            )?;
            db.close()?;
            Ok(ExitCode::SUCCESS)
        })()),
        "treepurge" => or_exit_3((|| -> anyhow::Result<ExitCode> {
            let Some(id) = rest.first() else {
                return usage("Wrong number of arguments");
            };
            let Ok(id) = id.parse::<i64>() else {
                bail!("Invalid tree ID: {id}");
            };
            let tree_id = hourglass_engine::tree::check_tree_id(id)?;
            let definition = rest.get(1).is_some_and(|d| d.eq_ignore_ascii_case("true"));
            let started = std::time::Instant::now();
            let cells = hourglass_engine::tree::tree_purge(&db, tree_id, definition)?;
            let mut out = std::io::stdout().lock();
            if definition {
                writeln!(out, "Deleted tree branches and definition for: {tree_id}")?;
            } else {
                writeln!(out, "Deleted tree branches for: {tree_id}")?;
            }
            writeln!(
                out,
                "Purged [{cells}] columns in [{}] seconds",
                started.elapsed().as_secs()
            )?;
            db.close()?;
            Ok(ExitCode::SUCCESS)
        })()),
        "fsck" => super::uid_fsck::run(&db, rest),
        "delete" => {
            let [kind, name] = rest else {
                return usage("Wrong number of arguments");
            };
            let kind = parse_kind(kind)?;
            match uids.delete(kind, name) {
                Ok(_) => {
                    tracing::info!("UID {kind} {name} deleted.");
                    Ok(ExitCode::SUCCESS)
                }
                Err(e @ Error::NoSuchName { .. }) => {
                    eprintln!("{e}");
                    Ok(ExitCode::from(1))
                }
                Err(e) => Err(e.into()),
            }
        }
        _ => {
            let words = &args.args;
            let (kinds, target): (Vec<UidKind>, &str) = match words.as_slice() {
                [target] => (UidKind::ALL.to_vec(), target),
                [kind, target] => (vec![parse_kind(kind)?], target),
                _ => return usage("Wrong number of arguments"),
            };
            check_idwidth(args.idwidth, &settings, &kinds)?;
            lookup(uids, &settings, &kinds, target)
        }
    }
}

/// `--idwidth N`: OpenTSDB's `uid` reads and writes UIDs of N bytes whatever the config
/// says; here the config's widths are the only ones (a UID of another width would not be
/// the one stored), so N must be theirs.
fn check_idwidth(
    idwidth: Option<i16>,
    settings: &Settings,
    kinds: &[UidKind],
) -> anyhow::Result<()> {
    let Some(n) = idwidth else { return Ok(()) };
    for kind in kinds {
        let width = settings.schema.uid_width(*kind);
        if i64::from(n) != i64::from(width) {
            let key = match kind {
                UidKind::Metric => "metric",
                UidKind::TagKey => "tagk",
                UidKind::TagValue => "tagv",
            };
            bail!(
                "--idwidth {n} differs from the {kind} UID width, {width} bytes \
                 (tsd.storage.uid.width.{key}): UIDs are as wide as the config says; \
                 set the width there or drop --idwidth"
            );
        }
    }
    Ok(())
}

/// OpenTSDB's exit status 3 for a metasync, metapurge, treesync or treepurge that fails
/// (an unreadable tree ID included).
fn or_exit_3(result: anyhow::Result<ExitCode>) -> anyhow::Result<ExitCode> {
    result.or_else(|e| {
        eprintln!("tsdb: error: {e:#}");
        Ok(ExitCode::from(3))
    })
}

/// A kind word in any case (`metrics`, `TAGK`), or OpenTSDB's `Invalid type requested: X`.
fn parse_kind(word: &str) -> anyhow::Result<UidKind> {
    UidKind::parse(&word.to_ascii_lowercase())
        .map_err(|_| anyhow::anyhow!("Invalid type requested: {word}"))
}

fn kind_what(kind: UidKind) -> &'static str {
    match kind {
        UidKind::Metric => "metric name",
        UidKind::TagKey => "tag name",
        UidKind::TagValue => "tag value",
    }
}

fn assign(
    uids: &UidRegistry,
    settings: &Settings,
    kind: UidKind,
    names: &[String],
) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    let width = settings.schema.uid_width(kind);
    let mut code = ExitCode::SUCCESS;
    for name in names {
        if let Err(e) = validate_name(kind_what(kind), name, &settings.allow_special_chars) {
            eprintln!("{e}");
            code = ExitCode::from(1);
            continue;
        }
        let uid = uids.get_or_create_id(kind, name)?;
        writeln!(
            out,
            "{kind} {name}: {}",
            format_signed_bytes(&uid.to_bytes(width))
        )?;
    }
    Ok(code)
}

fn grep(
    uids: &UidRegistry,
    kind: Option<UidKind>,
    re: &str,
    ignore_case: bool,
) -> anyhow::Result<ExitCode> {
    let found = uids.grep(kind, re, ignore_case)?;
    let mut out = std::io::stdout().lock();
    for m in &found {
        writeln!(
            out,
            "{} {}: {}",
            m.kind,
            m.name,
            format_signed_bytes(&m.uid)
        )?;
    }
    Ok(if found.is_empty() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn lookup(
    uids: &UidRegistry,
    settings: &Settings,
    kinds: &[UidKind],
    target: &str,
) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    let mut found = false;
    // As OpenTSDB: a word that parses as an integer is a UID, anything else a name.
    if let Ok(id) = target.parse::<i64>() {
        if id < 0 {
            bail!("{id} is not a valid UID");
        }
        for kind in kinds {
            let width = settings.schema.uid_width(*kind);
            if id as u64 > Uid::max_for_width(width) {
                eprintln!(
                    "{id} is too large to fit on {width} bytes.  Maybe you forgot to adjust --idwidth?"
                );
                return Ok(ExitCode::from(1));
            }
            match uids.get_name(*kind, Uid(id as u64)) {
                Ok(name) => {
                    found = true;
                    writeln!(
                        out,
                        "{kind} {name}: {}",
                        format_signed_bytes(&Uid(id as u64).to_bytes(width))
                    )?;
                }
                Err(e @ Error::NoSuchId { .. }) if kinds.len() == 1 => eprintln!("{e}"),
                Err(Error::NoSuchId { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
    } else {
        for kind in kinds {
            match uids.get_id(*kind, target) {
                Ok(uid) => {
                    found = true;
                    let width = settings.schema.uid_width(*kind);
                    writeln!(
                        out,
                        "{kind} {target}: {}",
                        format_signed_bytes(&uid.to_bytes(width))
                    )?;
                }
                Err(e @ Error::NoSuchName { .. }) if kinds.len() == 1 => eprintln!("{e}"),
                Err(Error::NoSuchName { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(if found {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
