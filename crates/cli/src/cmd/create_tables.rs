use std::io::Write;
use std::process::ExitCode;

use crate::open::StoreArgs;

pub(crate) fn run(args: &StoreArgs) -> anyhow::Result<ExitCode> {
    let settings = args.settings()?;
    let store = args.open_store()?;
    let names = hourglass_engine::tables::create_tables(
        store.as_ref(),
        &settings.schema,
        settings.rollups.as_deref(),
    )?;
    let mut out = std::io::stdout().lock();
    for name in names {
        writeln!(out, "{name}")?;
    }
    Ok(ExitCode::SUCCESS)
}
