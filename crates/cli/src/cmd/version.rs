//! `tsdb version`: two lines, shaped as OpenTSDB's (`net.opentsdb.tools 2.4.1 built at
//! revision ...` / `Built on ... by ...`), about this binary.

use std::io::Write;
use std::process::ExitCode;

/// This binary: its version, the revision it was built from (stamped by the build script)
/// and when.
pub(crate) fn build_info() -> hourglass_server::BuildInfo {
    hourglass_server::BuildInfo {
        version: env!("CARGO_PKG_VERSION").to_string(),
        revision: env!("HOURGLASS_GIT_REV").to_string(),
        date: env!("HOURGLASS_BUILD_DATE").to_string(),
        timestamp: env!("HOURGLASS_BUILD_TIMESTAMP").parse().unwrap_or(0),
    }
}

/// What this binary is, the revision it was built from and the OpenTSDB API it speaks; then
/// when and for what it was built (the TSD's telnet `version` says the same).
pub(crate) fn text() -> String {
    build_info().text()
}

pub(crate) fn run() -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    out.write_all(text().as_bytes())?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
