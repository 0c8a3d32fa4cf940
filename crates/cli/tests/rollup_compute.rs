#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Computed rollups (RFC 0008 phase 4) across a `kill -9` of the `tsdb tsd` process in the
//! middle of computing: after a restart every tier answers exactly as the raw points do (no
//! unit double counted, none missing).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::spawn_tsd_with;

const SERIES: usize = 20;
const DAYS: i64 = 8;

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
        std::thread::sleep(Duration::from_millis(5));
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
