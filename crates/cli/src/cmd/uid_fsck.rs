//! `tsdb uid fsck [fix] [delete_unknown]`: checks the UID table as OpenTSDB's `uid fsck`
//! does (`--fix` and `--delete-unknown` are accepted too). Every message prints as one line
//! on stdout; the exit status is the number of errors (at most 255), 0 when none.

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use hourglass_engine::Tsdb;
use hourglass_engine::fsck::uid::{UidFsckOptions, uid_fsck};

/// The usage line of `uid fsck`.
pub(crate) const USAGE: &str = "Usage: uid fsck [fix] [delete_unknown]";

/// Runs `uid fsck` with the words after `fsck`, then closes the database.
pub(crate) fn run(db: &Tsdb, words: &[String]) -> anyhow::Result<ExitCode> {
    let mut options = UidFsckOptions::default();
    for w in words {
        match w.as_str() {
            "fix" | "--fix" => options.fix = true,
            "delete_unknown" | "--delete-unknown" | "--delete_unknown" => {
                options.delete_unknown = true;
            }
            other => {
                eprintln!("Unknown argument for uid fsck: {other}\n{USAGE}");
                return Ok(ExitCode::from(2));
            }
        }
    }
    let started = Instant::now();
    let report = uid_fsck(db, &options)?;
    db.close()?;
    let ms = started.elapsed().as_millis().max(1);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for line in &report.lines {
        writeln!(out, "{line}")?;
    }
    writeln!(
        out,
        "{} KVs analyzed in {ms}ms (~{} KV/s)",
        report.kvs,
        u128::from(report.kvs) * 1000 / ms
    )?;
    let errors = report.errors();
    if errors == 0 {
        writeln!(out, "No errors found.")?;
    } else {
        writeln!(out, "{errors} errors found.")?;
    }
    out.flush()?;
    Ok(ExitCode::from(errors.min(255) as u8))
}
