#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The web UI in headless Chromium: starts a real TSD (embedded store, port 0) serving the UI
//! built into this binary and runs the Playwright tests of `web/tests/` against it. They need
//! Node, `npm ci --prefix web` and Debian's `chromium` (`scripts/test`, the README's test
//! command, installs all three); a missing one fails this test with what to install, it never
//! skips.
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::start_with;
use hourglass_core::config::Config;

fn web_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../web")
}

fn chromium() -> PathBuf {
    let path = std::env::var_os("HOURGLASS_CHROMIUM")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    assert!(
        path.exists(),
        "headless Chromium is required by the UI tests and {} is missing: \
         `apt-get install chromium` (or set HOURGLASS_CHROMIUM); scripts/test installs it",
        path.display()
    );
    path
}

/// The browser test files, in name order.
fn test_files(web: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(web.join("tests"))
        .expect("web/tests")
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".test.mjs"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no web/tests/*.test.mjs");
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_in_headless_chromium() {
    let web = web_dir();
    let chromium = chromium();
    assert!(
        Command::new("node")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "Node.js is required by the UI tests: `apt-get install nodejs npm`"
    );
    assert!(
        web.join("node_modules/playwright-core").is_dir(),
        "the UI tests' packages are missing: run `npm ci --prefix web` (scripts/test does)"
    );
    let files = test_files(&web);
    let artifacts = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();

    let mut config = Config::default();
    config.set("tsd.core.auto_create_metrics", "true");
    // Series whose TSMeta is created go through the trees (the tree browser's test).
    config.set("tsd.core.tree.enable_processing", "true");
    let srv = start_with("embedded", config).await;
    let url = format!("http://{}", srv.addr);
    let run = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg("--test")
            .arg("--test-reporter=spec")
            .args(&files)
            .current_dir(&web)
            .env("HOURGLASS_URL", url)
            .env("HOURGLASS_CHROMIUM", chromium)
            .env("HOURGLASS_ARTIFACTS", &artifacts)
            .output()
    })
    .await
    .unwrap()
    .expect("node runs");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    eprintln!("{report}");
    assert!(run.status.success(), "browser tests failed:\n{report}");
    // The run really exercised the UI: something passed and screenshots were taken.
    assert!(report.contains("pass "), "{report}");
    let shots = std::fs::read_dir(Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui-artifacts"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "png"))
        })
        .count();
    assert!(shots > 0, "no screenshots saved");
    srv.stop().await;
}

/// The UI behind `tsd.core.authentication.enable`: `web/tests/auth/login.mjs` against a TSD
/// with a `viewer` (read) user, seeded with ten points through a `loader` (write) user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_logs_in_behind_authentication() {
    use base64::Engine;
    let web = web_dir();
    let chromium = chromium();
    assert!(
        web.join("node_modules/playwright-core").is_dir(),
        "the UI tests' packages are missing: run `npm ci --prefix web` (scripts/test does)"
    );
    let artifacts = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui-auth-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let password = "viewer pass";
    let users = dir.path().join("users");
    std::fs::write(
        &users,
        format!(
            "user viewer read {}\nuser loader write {}\n",
            hourglass_server::auth::hash_password(password).unwrap(),
            hourglass_server::auth::hash_password("load").unwrap()
        ),
    )
    .unwrap();
    let mut config = Config::default();
    config.set("tsd.core.auto_create_metrics", "true");
    config.set("tsd.core.authentication.enable", "true");
    config.set("tsd.core.authentication.users", users.to_str().unwrap());
    let srv = start_with("embedded", config).await;
    let points: Vec<String> = (0..10)
        .map(|i| {
            format!(
                r#"{{"metric":"sys.cpu.user","timestamp":{},"value":{i},"tags":{{"host":"web01"}}}}"#,
                1_356_998_400 + 60 * (i + 1)
            )
        })
        .collect();
    let loader = base64::engine::general_purpose::STANDARD.encode("loader:load");
    let put = common::HttpConn::open(srv.addr)
        .await
        .request(
            "POST",
            "/api/put",
            &format!("Authorization: Basic {loader}\r\n"),
            format!("[{}]", points.join(",")).as_bytes(),
        )
        .await;
    assert_eq!(put.status, 204, "{}", put.text());
    let url = format!("http://{}", srv.addr);
    let run = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg("--test")
            .arg("--test-reporter=spec")
            .arg("tests/auth/login.mjs")
            .current_dir(&web)
            .env("HOURGLASS_URL", url)
            .env("HOURGLASS_PASSWORD", password)
            .env("HOURGLASS_CHROMIUM", chromium)
            .env("HOURGLASS_ARTIFACTS", &artifacts)
            .output()
    })
    .await
    .unwrap()
    .expect("node runs");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    eprintln!("{report}");
    assert!(run.status.success(), "browser tests failed:\n{report}");
    assert!(report.contains("pass 3"), "{report}");
    srv.stop().await;
}
