//! `tsdb version`: two lines, shaped as OpenTSDB's (`net.opentsdb.tools 2.4.1 built at
//! revision ...` / `Built on ... by ...`), about this binary.

use std::io::Write;
use std::process::ExitCode;

/// What this binary is, the revision it was built from and the OpenTSDB API it speaks; then
/// when and for what it was built.
pub(crate) fn text() -> String {
    format!(
        "hourglass {} built at revision {} (OpenTSDB 2.4 API)\nBuilt on {} for {} {}\n",
        env!("CARGO_PKG_VERSION"),
        env!("HOURGLASS_GIT_REV"),
        env!("HOURGLASS_BUILD_DATE"),
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

pub(crate) fn run() -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    out.write_all(text().as_bytes())?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
