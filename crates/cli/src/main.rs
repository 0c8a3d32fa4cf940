//! `tsdb`: OpenTSDB's command line, one subcommand per file under `cmd/`.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod cmd;
mod open;
mod recent_logs;
mod remote;

/// The commands whose words (a query, a `uid` subcommand, files) may be followed by options.
const WORDS_THEN_OPTIONS: &[&str] = &[
    "uid", "mkmetric", "query", "scan", "fsck", "search", "import",
];

/// A command's arguments with its own options (`--config`, `--data-dir`, `-i`...) moved in
/// front of its words: OpenTSDB's tools read options anywhere on the line (`tsdb uid
/// metasync --config F`, `tsdb scan 1h-ago sum m --import`), while what follows the first
/// word is otherwise taken as words (`uid fsck --fix` included: `--fix` is not an option of
/// `uid`). Other commands' lines are unchanged.
fn options_first(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let Some(name) = args.get(1).and_then(|a| a.to_str()) else {
        return args;
    };
    if !WORDS_THEN_OPTIONS.contains(&name) {
        return args;
    }
    let command = Cli::command();
    let Some(sub) = command.find_subcommand(name) else {
        return args;
    };
    // Its options: the long and short names, and whether each takes a value.
    let options: Vec<(Option<String>, Option<char>, bool)> = sub
        .get_arguments()
        .filter(|a| !a.is_positional())
        .map(|a| {
            let takes = a.get_action().takes_values();
            (a.get_long().map(str::to_string), a.get_short(), takes)
        })
        .collect();
    let takes_value = |arg: &str| -> Option<bool> {
        if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = long
                .split_once('=')
                .map_or((long, false), |(n, _)| (n, true));
            return options
                .iter()
                .find(|(l, _, _)| l.as_deref() == Some(name))
                .map(|(_, _, t)| *t && !inline);
        }
        let mut chars = arg.strip_prefix('-')?.chars();
        let (Some(c), None) = (chars.next(), chars.next()) else {
            return None;
        };
        options
            .iter()
            .find(|(_, s, _)| *s == Some(c))
            .map(|(_, _, t)| *t)
    };
    let (mut front, mut rest) = (args[..2].to_vec(), Vec::new());
    let mut i = 2;
    while i < args.len() {
        let arg = args[i].to_str().unwrap_or_default();
        if arg == "--" {
            rest.extend_from_slice(&args[i..]);
            break;
        }
        match takes_value(arg) {
            Some(takes) => {
                front.push(args[i].clone());
                if takes && let Some(v) = args.get(i + 1) {
                    front.push(v.clone());
                    i += 1;
                }
            }
            None => rest.push(args[i].clone()),
        }
        i += 1;
    }
    front.extend(rest);
    front
}

/// Hourglass: OpenTSDB's schema, protocols and tools.
#[derive(Debug, Parser)]
#[command(name = "tsdb", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the TSD: telnet-style `put` and the HTTP API on one port.
    Tsd(Box<cmd::tsd::TsdArgs>),
    /// Create the tables and column families (idempotent).
    CreateTables(open::StoreArgs),
    /// Assign UIDs to metric names: same as `uid assign metrics NAME...`.
    Mkmetric(cmd::uid::MkmetricArgs),
    /// Look up, assign, grep, rename and delete UIDs.
    Uid(cmd::uid::UidArgs),
    /// Import points from files in OpenTSDB's import format.
    Import(cmd::import::ImportArgs),
    /// Copy a running OpenTSDB (or Hourglass) TSD's data here or to another TSD, and verify.
    Migrate(Box<cmd::migrate::MigrateArgs>),
    /// Dump the stored rows of a metric over a time range.
    Scan(cmd::scan::ScanArgs),
    /// Query: OpenTSDB's command-line syntax, one line per point.
    Query(cmd::query::QueryArgs),
    /// Check the data table for errors (and fix them): OpenTSDB's `fsck`.
    Fsck(cmd::fsck::FsckArgs),
    /// The tag index: `index rebuild` builds it from the data table.
    Index(cmd::index::IndexArgs),
    /// Find series by metric and tags: `search lookup METRIC [TAGK=TAGV...]`.
    Search(cmd::search::SearchArgs),
    /// Edit a credentials file: `auth add-user`, `auth add-token`, `auth remove`.
    Auth(cmd::auth::AuthArgs),
    /// Print the version, the git revision and the build date.
    Version,
    /// Write points forever and report each acknowledged batch (crash-safety tests).
    #[command(hide = true)]
    DebugIngest(cmd::debug_ingest::DebugIngestArgs),
}

/// `--flag=VALUE` for a flag that takes no value, read as OpenTSDB's `ArgP` reads it: the
/// flag is set, whatever the value (`--auto-metric=true`, even `--import=false`).
fn flags_ignore_values(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let Some(name) = args.get(1).and_then(|a| a.to_str()) else {
        return args;
    };
    let command = Cli::command();
    let Some(sub) = command.find_subcommand(name) else {
        return args;
    };
    let flags: Vec<String> = sub
        .get_arguments()
        .filter(|a| !a.is_positional() && !a.get_action().takes_values())
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect();
    args.into_iter()
        .map(|arg| {
            let flag = arg
                .to_str()
                .and_then(|a| a.strip_prefix("--"))
                .and_then(|a| a.split_once('='))
                .map(|(name, _)| name)
                .filter(|name| flags.iter().any(|f| f == name));
            match flag {
                Some(name) => std::ffi::OsString::from(format!("--{name}")),
                None => arg,
            }
        })
        .collect()
}

/// The commands' flags and single-valued options may be given more than once (`-v
/// --verbose`, `--config A --config B`), the last one counting, as `ArgP` takes them.
fn flags_repeatable(command: clap::Command) -> clap::Command {
    command.mut_subcommands(|sub| {
        let flags: Vec<clap::Id> = sub
            .get_arguments()
            .filter(|a| !a.is_positional())
            .filter(|a| {
                matches!(
                    a.get_action(),
                    clap::ArgAction::SetTrue | clap::ArgAction::Set
                )
            })
            .map(|a| a.get_id().clone())
            .collect();
        flags.into_iter().fold(sub, |sub, id| {
            let own = id.clone();
            sub.mut_arg(id, |a| a.overrides_with(own))
        })
    })
}

/// `tsdb` without a command, or with one it does not know: OpenTSDB's script's words and
/// exit status 1 (`tsdb: error: unknown command 'foo'`, the usage on stderr, the valid
/// commands on stdout). Options (`--help`, `--version`) are left to the parser.
fn unknown_command(args: &[std::ffi::OsString]) -> Option<ExitCode> {
    let word = args.get(1).map(|a| a.to_string_lossy().into_owned());
    if word.as_deref().is_some_and(|w| w.starts_with('-')) {
        return None;
    }
    let command = Cli::command();
    let names: Vec<&str> = command
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| c.get_name())
        .collect();
    if let Some(w) = &word
        && (w == "help" || command.find_subcommand(w).is_some())
    {
        return None;
    }
    eprintln!(
        "tsdb: error: unknown command '{}'",
        word.unwrap_or_default()
    );
    eprintln!("usage: tsdb <command> [args]");
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "Valid commands: {}", names.join(", "));
    Some(ExitCode::from(1))
}

fn main() -> ExitCode {
    // Before any thread is started (see the crate's text).
    let allocator = hourglass_alloc::tune();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(code) = unknown_command(&args) {
        return code;
    }
    let matches =
        flags_repeatable(Cli::command()).get_matches_from(options_first(flags_ignore_values(args)));
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let verbose = match &cli.command {
        Command::Tsd(_) | Command::Import(_) => true,
        Command::Uid(a) => a.store.verbose,
        Command::Mkmetric(a) => a.store.verbose,
        Command::Scan(a) => a.store.verbose,
        Command::Migrate(a) => a.store.verbose,
        Command::Query(a) => a.store.verbose,
        Command::Search(a) => a.store.verbose,
        Command::Fsck(a) => a.store.verbose,
        Command::Index(a) => a.store().verbose,
        Command::CreateTables(a) => a.verbose,
        Command::DebugIngest(a) => a.store.verbose,
        Command::Auth(_) | Command::Version => false,
    };
    let level = if verbose {
        "info,fjall=warn,lsm_tree=warn"
    } else {
        "warn"
    };
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level)),
        )
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
        )
        // Also kept in memory for the TSD's `/logs` page.
        .with(recent_logs::RecentEvents)
        .init();
    tracing::debug!(?allocator, "the C library's allocator");
    let result = match cli.command {
        Command::Tsd(a) => cmd::tsd::run(&a),
        Command::Import(a) => cmd::import::run(&a),
        Command::CreateTables(a) => cmd::create_tables::run(&a),
        Command::Mkmetric(a) => cmd::uid::mkmetric(&a),
        Command::Uid(a) => cmd::uid::run(&a),
        Command::Scan(a) => cmd::scan::run(&a),
        Command::Migrate(a) => cmd::migrate::run(&a),
        Command::Query(a) => cmd::query::run_query(&a),
        Command::Search(a) => cmd::search::run(&a),
        Command::Fsck(a) => cmd::fsck::run(&a),
        Command::Index(a) => cmd::index::run(&a),
        Command::DebugIngest(a) => cmd::debug_ingest::run(&a),
        Command::Auth(a) => cmd::auth::run(&a),
        Command::Version => cmd::version::run(),
    };
    match result {
        Ok(code) => code,
        // A closed pipe (`tsdb scan ... | head`) is the reader's choice, not an error.
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tsdb: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
