#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Computed rollups (RFC 0008 phase 4) across a `kill -9` of the `tsdb tsd` process in the
//! middle of computing: after a restart every tier answers exactly as the raw points do (no
//! unit double counted, none missing); `tsdb scan --delete` of computed hours has them
//! computed again.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::spawn_tsd_with;

const SERIES: usize = 20;
/// Days of points: enough that computing them takes long enough for the test to see it under
/// way (at 8 days a loaded machine once saw the first computed unit only after the last).
const DAYS: i64 = 16;

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into()
}

fn get(addr: &str, path: &str) -> Value {
    let mut r = agent().get(format!("http://{addr}{path}")).call().unwrap();
    assert_eq!(r.status().as_u16(), 200, "{path}");
    serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap()
}

/// A statistic of `/api/stats` for one tier.
fn tier_stat(addr: &str, metric: &str, interval: &str) -> Option<i64> {
    get(addr, "/api/stats")
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["metric"] == metric && s["tags"]["interval"] == interval)
        .map(|s| s["value"].as_str().unwrap().parse().unwrap())
}

fn config(dir: &Path, compute: bool) -> std::path::PathBuf {
    let rollups = dir.join("rollups.json");
    std::fs::write(
        &rollups,
        r#"{"aggregationIds": {"sum": 0, "count": 1, "max": 2, "min": 3},
            "intervals": [
              {"table": "tsdb", "preAggregationTable": "tsdb-agg", "interval": "1m",
               "rowSpan": "1h", "defaultInterval": true},
              {"table": "tsdb-rollup-1h", "preAggregationTable": "tsdb-rollup-agg-1h",
               "interval": "1h", "rowSpan": "1d"},
              {"table": "tsdb-rollup-1d", "preAggregationTable": "tsdb-rollup-agg-1d",
               "interval": "1d", "rowSpan": "1y"}]}"#,
    )
    .unwrap();
    let path = dir.join(if compute { "compute.conf" } else { "load.conf" });
    let mut text = format!(
        "tsd.rollups.enable = true\ntsd.rollups.config = {}\n",
        rollups.display()
    );
    if compute {
        text.push_str(
            "tsd.rollups.compute = true\ntsd.rollups.compute.delay = 1m\ntsd.rollups.compute.interval_ms = 10\n",
        );
    }
    std::fs::write(&path, text).unwrap();
    path
}

fn put(addr: &str, start: i64) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let mut text = String::new();
    let mut t = start;
    let mut v = 0i64;
    while t < start + DAYS * 86_400 {
        for h in 0..SERIES {
            v = (v * 31 + 7) % 100_003;
            text.push_str(&format!("put m.kill {t} {} host=h{h}\n", v - 50_000));
        }
        t += 60;
    }
    s.write_all(text.as_bytes()).unwrap();
    s.write_all(b"version\nexit\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("hourglass "), "{out}");
}

/// Kill -9 while the tiers are being computed, restart: the tiers end up equal to the raw
/// downsample.
#[test]
fn a_kill_in_the_middle_of_computing_does_not_double_count() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let start = now - now % 86_400 - DAYS * 86_400;
    // Loaded with computing off, stopped gracefully.
    let (mut child, addr) = spawn_tsd_with(Some(&config(dir.path(), false)), &data);
    put(&addr, start);
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));

    // Computing on; killed once the 1h tier has computed some units, not all.
    let conf = config(dir.path(), true);
    let (mut child, addr) = spawn_tsd_with(Some(&conf), &data);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let units = tier_stat(&addr, "tsd.rollups.compute.units", "1h").unwrap_or(0);
        let lag = tier_stat(&addr, "tsd.rollups.compute.lag", "1h").unwrap_or(0);
        if units > 0 {
            assert!(
                lag > 0,
                "computed everything before the kill; make the data larger"
            );
            break;
        }
        assert!(Instant::now() < deadline, "nothing computed");
        std::thread::sleep(Duration::from_millis(1));
    }
    child.kill().unwrap();
    child.wait().unwrap();

    let (mut child, addr) = spawn_tsd_with(Some(&conf), &data);
    let deadline = Instant::now() + Duration::from_secs(300);
    while ["1h", "1d"]
        .iter()
        .any(|i| tier_stat(&addr, "tsd.rollups.compute.lag", i) != Some(0))
    {
        assert!(Instant::now() < deadline, "tiers not computed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let end = start + DAYS * 86_400 - 1;
    for m in [
        "sum:1h-sum",
        "sum:1h-count",
        "max:1h-max",
        "sum:1d-sum",
        "min:1d-min",
    ] {
        let q = |usage: &str| {
            let answer = get(
                &addr,
                &format!("/api/query?start={start}&end={end}&m={m}:{usage}:m.kill%7Bhost=*%7D"),
            );
            answer
                .as_array()
                .unwrap()
                .iter()
                .map(|s| (s["tags"].clone(), s["dps"].clone()))
                .collect::<Vec<_>>()
        };
        let raw = q("rollup_raw");
        assert_eq!(raw.len(), SERIES, "{m}");
        assert_eq!(q("rollup_nofallback"), raw, "{m}");
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The tiers' answers against the raw points' over `[start, end]`: `(raw, rolled)` per query.
fn tiers_and_raw(addr: &str, metric: &str, start: i64, end: i64) -> Vec<(Value, Value)> {
    [
        "sum:1h-sum",
        "sum:1h-count",
        "max:1h-max",
        "sum:1d-sum",
        "sum:1d-count",
    ]
    .iter()
    .map(|m| {
        let q = |usage: &str| {
            let answer = get(
                addr,
                &format!("/api/query?start={start}&end={end}&m={m}:{usage}:{metric}%7Bhost=*%7D"),
            );
            Value::Array(
                answer
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| serde_json::json!([s["tags"], s["dps"]]))
                    .collect(),
            )
        };
        (q("rollup_raw"), q("rollup_nofallback"))
    })
    .collect()
}

/// `tsdb scan --delete` of raw rows in computed hours (the TSD stopped, the tool run with
/// the same configuration) marks their hours dirty: the restarted TSD computes those units
/// again and every tier answers as the raw points left (the seen bug: the tiers kept the
/// deleted rows' rollups).
#[test]
fn scan_delete_has_its_hours_computed_again() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let start = now - now % 86_400 - 2 * 86_400;
    let end = start + 2 * 86_400 - 1;
    let conf = config(dir.path(), true);
    let (mut child, addr) = spawn_tsd_with(Some(&conf), &data);
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut text = String::new();
    for t in (start..start + 2 * 86_400).step_by(300) {
        for h in 0..3 {
            text.push_str(&format!("put m.sd {t} {} host=h{h}\n", (t / 300) % 97 + h));
        }
    }
    s.write_all(text.as_bytes()).unwrap();
    s.write_all(b"version\nexit\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("hourglass "), "{out}");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let both = tiers_and_raw(&addr, "m.sd", start, end);
        if both.iter().all(|(raw, rolled)| raw == rolled) {
            break;
        }
        assert!(Instant::now() < deadline, "tiers not computed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let before = tiers_and_raw(&addr, "m.sd", start, end);
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));

    // 10:00 to 11:59 of the first day, one series.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .arg("scan")
        .arg("--data-dir")
        .arg(&data)
        .arg("--config")
        .arg(&conf)
        .args([
            "--delete",
            &(start + 10 * 3600).to_string(),
            &(start + 12 * 3600 - 1).to_string(),
            "sum",
            "m.sd",
            "host=h1",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let deleted = String::from_utf8_lossy(&o.stdout).lines().count();
    assert_eq!(deleted, 24, "two hours of 5-minute points");

    let (mut child, addr) = spawn_tsd_with(Some(&conf), &data);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let both = tiers_and_raw(&addr, "m.sd", start, end);
        if both.iter().all(|(raw, rolled)| raw == rolled) {
            assert_ne!(both, before, "points were deleted");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the tiers kept the deleted rows: query {:?} differs",
            both.iter().position(|(raw, rolled)| raw != rolled)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}
