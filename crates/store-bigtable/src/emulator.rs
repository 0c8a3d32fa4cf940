//! Google's Bigtable emulator for tests and benchmarks: started once per process on a free
//! loopback port, and stopped when the process ends. A missing emulator panics with what to
//! install: tests that need it fail, they are never skipped.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

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
            let binary = emulator_binary();
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            // A watcher stops the emulator when this test process is gone.
            let script = format!(
                "'{binary}' -host 127.0.0.1 -port {port} >/dev/null 2>&1 & e=$!; \
             while kill -0 {parent} 2>/dev/null; do sleep 0.5; done; kill $e",
                parent = std::process::id()
            );
            let watcher = Command::new("sh")
                .args(["-c", &script])
                .stdin(Stdio::null())
                .spawn()
                .expect("start the emulator");
            let addr = format!("127.0.0.1:{port}");
            wait_until_listening(&addr);
            (addr, std::sync::Mutex::new(watcher))
        })
        .0
}

/// An emulator of the caller's own (for tests that stop or kill it), on a free loopback
/// port: the process and its `host:port`, ready for connections. The caller kills it.
pub fn spawn_own() -> (std::process::Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(emulator_binary())
        .args(["-host", "127.0.0.1", "-port", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the emulator");
    let addr = format!("127.0.0.1:{port}");
    wait_until_listening(&addr);
    (child, addr)
}

/// Waits up to 30 s for an emulator to take connections on `addr`.
fn wait_until_listening(addr: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "the Bigtable emulator did not start on {addr}"
        );
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
