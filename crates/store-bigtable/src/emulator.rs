//! Google's Bigtable emulator for tests and benchmarks: started once per process on a
//! loopback port of its choosing, ready once it answers gRPC calls, and stopped when the
//! process ends. A missing emulator panics with what to
//! install: tests that need it fail, they are never skipped.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hourglass_storage::Store;

use crate::{BigtableConfig, BigtableStore};

const KNOWN_PATHS: &[&str] = &[
    "/usr/lib/google-cloud-sdk/platform/bigtable-emulator/cbtemulator",
    "/usr/bin/cbtemulator",
];

fn emulator_binary() -> String {
    if let Ok(p) = std::env::var("HOURGLASS_CBTEMULATOR") {
        return p;
    }
    if let Some(p) = KNOWN_PATHS
        .iter()
        .find(|p| std::path::Path::new(p).exists())
    {
        return (*p).to_string();
    }
    panic!(
        "the Bigtable emulator (cbtemulator) is missing: install the Debian package \
         google-cloud-cli-bigtable-emulator or set HOURGLASS_CBTEMULATOR; the Bigtable tests \
         cannot run without it"
    );
}

/// `host:port` of this process's emulator.
pub fn host() -> &'static str {
    static HOST: OnceLock<(String, std::sync::Mutex<std::process::Child>)> = OnceLock::new();
    &HOST
        .get_or_init(|| {
            let (emulator, addr) = spawn_own();
            // A watcher stops the emulator when this test process is gone.
            let script = format!(
                "while kill -0 {parent} 2>/dev/null; do sleep 0.5; done; kill {emulator}",
                parent = std::process::id(),
                emulator = emulator.id()
            );
            let watcher = Command::new("sh")
                .args(["-c", &script])
                .stdin(Stdio::null())
                .spawn()
                .expect("start the emulator's watcher");
            (addr, std::sync::Mutex::new(watcher))
        })
        .0
}

/// An emulator of the caller's own (for tests that stop or kill it): the process and its
/// `host:port`, answering gRPC calls. The caller kills it.
///
/// The emulator picks its own port (`-port 0`) and prints it, so no other process can take
/// the port between choosing and binding it; it is ready once an admin call on it answers.
/// An emulator that exits or stays silent is replaced by a new one, a few times over.
pub fn spawn_own() -> (std::process::Child, String) {
    let binary = emulator_binary();
    let mut failures = Vec::new();
    for _ in 0..3 {
        match try_spawn(&binary) {
            Ok(started) => return started,
            Err(why) => failures.push(why),
        }
    }
    panic!(
        "the Bigtable emulator {binary} did not start: {}",
        failures.join("; ")
    );
}

/// One attempt: start, read the address it prints, wait for an answer. A failed emulator is
/// killed before returning its failure.
fn try_spawn(binary: &str) -> Result<(std::process::Child, String), String> {
    let mut child = Command::new(binary)
        .args(["-host", "127.0.0.1", "-port", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {binary}: {e}"))?;
    let ready = child
        .stdout
        .take()
        .ok_or_else(|| "no stdout".to_string())
        .and_then(announced_address)
        .and_then(|addr| wait_until_serving(&mut child, &addr).map(|()| addr));
    match ready {
        Ok(addr) => Ok((child, addr)),
        Err(why) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(why)
        }
    }
}

/// Reads "Cloud Bigtable emulator running on HOST:PORT" from the emulator's output (printed
/// once it listens), then keeps draining the output so the emulator never writes to a closed
/// pipe.
fn announced_address(stdout: std::process::ChildStdout) -> Result<String, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout);
        let mut line = String::new();
        loop {
            line.clear();
            match lines.read_line(&mut line) {
                Ok(0) | Err(_) => {
                    let _ = tx.send(None);
                    return;
                }
                Ok(_) => {
                    if let Some(addr) = line
                        .trim()
                        .strip_prefix("Cloud Bigtable emulator running on ")
                    {
                        let _ = tx.send(Some(addr.to_string()));
                        break;
                    }
                }
            }
        }
        let _ = std::io::copy(&mut lines, &mut std::io::sink());
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Some(addr)) => Ok(addr),
        Ok(None) => Err("it exited without saying where it listens".into()),
        Err(_) => Err("it did not say where it listens within 30 s".into()),
    }
}

/// Waits up to 30 s for the emulator on `addr` to answer an admin call (a table lookup),
/// failing early if the process exits.
fn wait_until_serving(child: &mut std::process::Child, addr: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut config = BigtableConfig::new("hourglass-probe", "probe");
    config.emulator_host = Some(addr.to_string());
    config.timeout = Duration::from_secs(2);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("it exited ({status}) before answering on {addr}"));
        }
        let last =
            match BigtableStore::connect(config.clone()).and_then(|s| s.table_exists("probe")) {
                Ok(_) => return Ok(()),
                Err(e) => e.to_string(),
            };
        if Instant::now() >= deadline {
            return Err(format!("no answer on {addr} within 30 s: {last}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A store on a fresh instance of the shared emulator (instances are isolated).
pub fn fresh_store() -> BigtableStore {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let mut config = BigtableConfig::new("hourglass-test", &format!("instance-{n}"));
    config.emulator_host = Some(host().to_string());
    BigtableStore::connect(config).expect("connect to the emulator")
}
