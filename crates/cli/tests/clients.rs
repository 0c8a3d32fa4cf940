#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Real collectors against a real TSD. collectd's `write_tsdb` plugin (Debian's
//! `collectd-core`, installed by `scripts/test`; `HOURGLASS_COLLECTD` names another binary)
//! writes its readings over the line protocol, as sites run it: gauges as floats, counters
//! as integers, the host in an `fqdn` tag beside the node's own tags.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A child process killed when dropped, so a failing test leaves nothing running.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn get(addr: &str, path: &str) -> Value {
    let (status, body) = get_any(addr, path);
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

fn get_any(addr: &str, path: &str) -> (u16, String) {
    let mut r = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .new_agent()
        .get(format!("http://{addr}{path}"))
        .call()
        .unwrap();
    let status = r.status().as_u16();
    (status, r.body_mut().read_to_string().unwrap())
}

/// The one series a query answers: its tags and its points (time, value) in time order.
fn series(addr: &str, m: &str) -> (Value, Vec<(i64, Value)>) {
    let answer = get(addr, &format!("/api/query?start=1h-ago&m={m}"));
    let all = answer.as_array().unwrap();
    assert_eq!(all.len(), 1, "{m}: {answer}");
    let dps = all[0]["dps"].as_object().unwrap();
    let mut points: Vec<(i64, Value)> = dps
        .iter()
        .map(|(t, v)| (t.parse().unwrap(), v.clone()))
        .collect();
    points.sort_by_key(|p| p.0);
    (all[0]["tags"].clone(), points)
}

#[test]
fn collectd_write_tsdb_readings_are_stored_as_sent() {
    let collectd =
        std::env::var("HOURGLASS_COLLECTD").unwrap_or_else(|_| "/usr/sbin/collectd".into());
    assert!(
        Path::new(&collectd).exists(),
        "collectd is required: apt-get install collectd-core (scripts/test does), or set HOURGLASS_COLLECTD"
    );
    let plugins = ["load", "memory", "interface", "write_tsdb"]
        .map(|p| Path::new("/usr/lib/collectd").join(format!("{p}.so")));
    for p in &plugins {
        assert!(p.exists(), "collectd plugin {} is missing", p.display());
    }
    let dir = tempfile::tempdir().unwrap();
    // Killed however the test ends (`common::Tsd`).
    let (_tsd, addr) = common::spawn_tsd(&dir.path().join("data"));
    let port = addr.rsplit(':').next().unwrap();
    let config = dir.path().join("collectd.conf");
    std::fs::write(
        &config,
        format!(
            r#"Hostname "hg-collectd"
FQDNLookup false
Interval 1
BaseDir "{base}"
PIDFile "{base}/collectd.pid"
PluginDir "/usr/lib/collectd"
TypesDB "/usr/share/collectd/types.db"
LoadPlugin logfile
<Plugin logfile>
  LogLevel info
  File "{base}/collectd.log"
</Plugin>
LoadPlugin load
LoadPlugin memory
LoadPlugin interface
<Plugin interface>
  Interface "lo"
</Plugin>
LoadPlugin write_tsdb
<Plugin write_tsdb>
  <Node "hourglass">
    Host "127.0.0.1"
    Port "{port}"
    HostTags "status=production role=test"
    StoreRates false
  </Node>
</Plugin>
"#,
            base = dir.path().display()
        ),
    )
    .unwrap();
    let agent = Command::new(&collectd)
        .arg("-f")
        .arg("-C")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut agent = Killed(agent);
    // Five readings of the load, then collectd is stopped as an init system stops it.
    let started = Instant::now();
    loop {
        // 400 until the metric's first reading has come.
        let (_, answer) = get_any(&addr, "/api/query?start=1h-ago&m=sum:load.load.shortterm");
        let answer: Value = serde_json::from_str(&answer).unwrap_or(Value::Null);
        let read = answer
            .as_array()
            .and_then(|a| a.first())
            .and_then(|s| s["dps"].as_object())
            .map_or(0, |d| d.len());
        if read >= 5 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "{read} readings of the load after 90 s; collectd's log:\n{}",
            std::fs::read_to_string(dir.path().join("collectd.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    Command::new("kill")
        .arg(agent.0.id().to_string())
        .status()
        .unwrap();
    agent.0.wait().unwrap();

    let metrics = get(&addr, "/api/suggest?type=metrics&q=load.load&max=10");
    assert_eq!(
        metrics,
        serde_json::json!([
            "load.load.longterm",
            "load.load.midterm",
            "load.load.shortterm"
        ])
    );
    let tagk = get(&addr, "/api/suggest?type=tagk&max=10");
    assert_eq!(tagk, serde_json::json!(["fqdn", "role", "status"]));

    // A gauge: floats, one a second, the host and the node's tags on the series.
    let (tags, load) = series(&addr, "sum:load.load.shortterm{fqdn=hg-collectd}");
    assert_eq!(
        tags,
        serde_json::json!({"fqdn": "hg-collectd", "role": "test", "status": "production"})
    );
    assert!(load.len() >= 5, "{load:?}");
    for pair in load.windows(2) {
        let step = pair[1].0 - pair[0].0;
        assert!((1..=3).contains(&step), "readings {step} s apart: {load:?}");
    }
    assert!(
        load.iter()
            .all(|(_, v)| v.as_f64().is_some_and(|v| v.is_finite() && v >= 0.0)),
        "{load:?}"
    );
    let (_, used) = series(&addr, "sum:memory.used.memory");
    assert!(
        used.iter()
            .all(|(_, v)| v.as_f64().is_some_and(|v| v > 0.0)),
        "{used:?}"
    );

    // A counter, sent as an integer (StoreRates false): kept an integer, never falling;
    // its rate is not negative.
    let (_, octets) = series(&addr, "sum:interface.lo.if_octets.rx");
    assert!(octets.len() >= 2, "{octets:?}");
    let counts: Vec<i64> = octets
        .iter()
        .map(|(_, v)| v.as_i64().unwrap_or_else(|| panic!("not an integer: {v}")))
        .collect();
    assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
    let (_, rate) = series(&addr, "sum:rate{counter}:interface.lo.if_octets.rx");
    assert!(
        rate.iter()
            .all(|(_, v)| v.as_f64().is_some_and(|v| v >= 0.0)),
        "{rate:?}"
    );

    // Nothing it sent was refused.
    let stats = get(&addr, "/api/stats");
    for s in stats.as_array().unwrap() {
        if s["metric"] == "tsd.rpc.errors" {
            assert_eq!(s["value"], "0", "{s}");
        }
    }
}
