#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]
//! Helpers shared by the binary's tests.

use std::io::{BufRead, BufReader};
use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A started `tsdb tsd`, killed when dropped if it is still running: a test that fails
/// (panics) part way leaves no server behind. A test that stops it itself (`kill`, or a
/// signal then `wait`) is unaffected.
pub(crate) struct Tsd(pub(crate) Child);

impl Deref for Tsd {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl DerefMut for Tsd {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Tsd {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// `tsdb tsd --port 0` on loopback over `dir` (auto-created metrics), with a config file.
pub(crate) fn tsd_command(config: Option<&Path>, dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tsdb"));
    cmd.args([
        "tsd",
        "--port",
        "0",
        "--bind",
        "127.0.0.1",
        "--auto-metric",
        "--data-dir",
    ])
    .arg(dir);
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    cmd
}

/// Starts `tsdb tsd` on a free loopback port over `dir`; returns it and its address once it
/// is ready.
pub(crate) fn spawn_tsd(dir: &Path) -> (Tsd, String) {
    spawn_tsd_with(None, dir)
}

/// [`spawn_tsd`] with a config file.
pub(crate) fn spawn_tsd_with(config: Option<&Path>, dir: &Path) -> (Tsd, String) {
    let mut child = Tsd(tsd_command(config, dir)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap());
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("tsd exited before it was ready")
            .unwrap();
        if let Some(rest) = line.split("Ready to serve on ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    // Keep draining the log so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (child, addr)
}

/// A TSD configuration with rollups on (RFC 0008): OpenTSDB's example intervals, `1m` in the
/// data table (the default) and `1h` in `tsdb-rollup-1h`. Written under `dir`; returns its
/// path.
pub(crate) fn rollup_config(dir: &Path) -> std::path::PathBuf {
    let rollups = dir.join("rollups.json");
    std::fs::write(
        &rollups,
        r#"{"aggregationIds": {"sum": 0, "count": 1},
            "intervals": [
              {"table": "tsdb", "preAggregationTable": "tsdb-agg", "interval": "1m",
               "rowSpan": "1h", "defaultInterval": true},
              {"table": "tsdb-rollup-1h", "preAggregationTable": "tsdb-rollup-agg-1h",
               "interval": "1h", "rowSpan": "1d"}]}"#,
    )
    .unwrap();
    let config = dir.join("tsd.conf");
    std::fs::write(
        &config,
        format!(
            "tsd.rollups.enable = true\ntsd.rollups.config = {}\n",
            rollups.display()
        ),
    )
    .unwrap();
    config
}
