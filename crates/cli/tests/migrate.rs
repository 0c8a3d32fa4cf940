#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `tsdb migrate` between real TSDs on loopback: a source seeded with every kind of point
//! (integers, 4- and 8-byte floats, milliseconds), annotations and meta; the target must
//! then answer the same queries exactly as the source. Also: the local store as target, a
//! migration killed and resumed, and a source that fails some requests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;

/// A running TSD, killed when dropped.
struct Tsd {
    child: common::Tsd,
    addr: String,
}

impl Tsd {
    fn start(dir: &Path) -> Tsd {
        let (child, addr) = common::spawn_tsd(dir);
        Tsd { child, addr }
    }

    fn start_with(config: &Path, dir: &Path) -> Tsd {
        let (child, addr) = common::spawn_tsd_with(Some(config), dir);
        Tsd { child, addr }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn stop(mut self) {
        // SIGTERM: the TSD flushes and closes its store.
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Tsd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP client whose calls fail after a minute: a TSD that stops answering fails the
/// test instead of hanging it.
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

fn post(addr: &str, path: &str, body: &Value) -> (u16, Value) {
    let mut r = agent()
        .post(format!("http://{addr}{path}"))
        .send(body.to_string())
        .unwrap();
    let status = r.status().as_u16();
    let text = r.body_mut().read_to_string().unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn get(addr: &str, path: &str) -> (u16, Value) {
    let mut r = agent().get(format!("http://{addr}{path}")).call().unwrap();
    let status = r.status().as_u16();
    let text = r.body_mut().read_to_string().unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// 2024-01-01T00:00:00Z.
const T0: i64 = 1_704_067_200;
const HOURS: i64 = 30;

/// Puts `points` in batches; every one must be stored.
fn put_all(addr: &str, points: &[Value]) {
    for batch in points.chunks(2000) {
        let (status, answer) = post(addr, "/api/put?details", &Value::Array(batch.to_vec()));
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["failed"], 0, "{answer}");
    }
}

/// Every kind of point: integers of every width, floats that fit 4 bytes and floats that
/// need 8, whole floats, milliseconds mixed with seconds, many series; series and global
/// annotations, UID meta and TS meta. Returns the number of points.
fn seed(addr: &str) -> usize {
    let mut points = Vec::new();
    // Integers: 12 hosts, one point every 10 minutes over 30 hours, of every width.
    for h in 0..12 {
        for i in 0..(HOURS * 6) {
            let v: i64 = match i % 5 {
                0 => i,
                1 => -300 - h,
                2 => 70_000 + i,
                3 => 5_000_000_000 + i,
                _ => i64::MAX - h,
            };
            points.push(json!({"metric": "mig.int", "timestamp": T0 + i * 600 + h,
                "value": v, "tags": {"host": format!("h{h:02}"), "dc": if h % 2 == 0 {"east"} else {"west"}}}));
        }
    }
    // Floats: 4-byte ones (1.5, 0.25, 1.1f read back as a double), 8-byte ones (0.1,
    // 1e300), whole floats (2.0 stays a float), negative.
    let floats = [
        "1.5",
        "0.1",
        "2.0",
        "1.100000023841858",
        "1e300",
        "-3.75",
        "0.25",
        "123456.789",
    ];
    for s in 0..3 {
        for i in 0..(HOURS * 4) {
            let text = floats[(i as usize + s) % floats.len()];
            points.push(json!({"metric": "mig.float", "timestamp": T0 + i * 900,
                "value": serde_json::from_str::<Value>(text).unwrap(), "tags": {"series": s.to_string()}}));
        }
    }
    // Whole floats (they stay floats), and a series mixing integers and floats.
    for i in 0..(HOURS * 4) {
        points.push(json!({"metric": "mig.float", "timestamp": T0 + i * 900,
            "value": (i % 9) as f64, "tags": {"series": "whole"}}));
    }
    for i in 0..(HOURS * 6) {
        let v = match i % 6 {
            0 | 1 | 4 => json!(i),
            2 => json!(i as f64 + 0.5),
            3 => json!(i as f64),
            _ => json!(i as f64 + 0.25),
        };
        points.push(
            json!({"metric": "mig.mixed", "timestamp": T0 + i * 600, "value": v,
            "tags": {"host": "m"}}),
        );
    }
    // Milliseconds, mixed with whole seconds in one series.
    for i in 0..(HOURS * 20) {
        let ts = if i % 3 == 0 {
            T0 + i * 180
        } else {
            (T0 + i * 180) * 1000 + (i * 37) % 1000
        };
        points.push(json!({"metric": "mig.ms", "timestamp": ts, "value": i * 3,
            "tags": {"host": "fast"}}));
    }
    // Many series of a few points each.
    for s in 0..300 {
        for i in 0..3 {
            points.push(json!({"metric": "mig.many", "timestamp": T0 + s * 60 + i * 3600 * 10,
                "value": s * 10 + i, "tags": {"pod": format!("pod-{s:03}"), "zone": (s % 7).to_string()}}));
        }
    }
    put_all(addr, &points);
    // Annotations: on a series (two hours apart) and global.
    let (_, series) = post(
        addr,
        "/api/query",
        &json!({"start": T0, "end": T0 + HOURS * 3600, "showTSUIDs": true,
                "queries": [{"metric": "mig.int", "aggregator": "none", "tags": {"host": "h03"}}]}),
    );
    let tsuid = series[0]["tsuids"][0].as_str().unwrap().to_string();
    for (t, d) in [(T0 + 1800, "deploy"), (T0 + 7 * 3600 + 5, "rollback")] {
        let (status, answer) = post(
            addr,
            "/api/annotation",
            &json!({"tsuid": tsuid, "startTime": t, "endTime": t + 60, "description": d,
                    "notes": "by ops", "custom": {"ticket": "OPS-1"}}),
        );
        assert_eq!(status, 200, "{answer}");
    }
    for (t, d) in [(T0 + 3600, "maintenance"), (T0 + 20 * 3600, "outage")] {
        let (status, answer) = post(
            addr,
            "/api/annotation",
            &json!({"startTime": t, "description": d}),
        );
        assert_eq!(status, 200, "{answer}");
    }
    // Meta: the metric's display name, a tag value's description, one series' TS meta.
    let (_, uids) = get(addr, "/api/uid/assign?metric=mig.int");
    let uid = uids["metric_errors"]["mig.int"]
        .as_str()
        .unwrap()
        .rsplit(' ')
        .next()
        .unwrap()
        .to_string();
    let (status, answer) = post(
        addr,
        "/api/uid/uidmeta",
        &json!({"uid": uid, "type": "metric", "displayName": "Integers", "notes": "seeded"}),
    );
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = post(
        addr,
        "/api/uid/tsmeta?m=mig.float%7Bseries%3D1%7D&create=true",
        &json!({"description": "the second float series", "units": "ms"}),
    );
    assert_eq!(status, 200, "{answer}");
    points.len()
}

/// The queries both sides must answer alike: raw points of every series (with their
/// annotations and the global ones), aggregates, downsampling, rates, filters.
fn queries() -> Vec<Value> {
    let range = |q: Value| {
        json!({"start": T0 - 3600, "end": T0 + (HOURS + 1) * 3600, "msResolution": true,
               "globalAnnotations": true, "queries": [q]})
    };
    let mut out = Vec::new();
    for m in ["mig.int", "mig.float", "mig.ms", "mig.many", "mig.mixed"] {
        out.push(range(json!({"metric": m, "aggregator": "none"})));
        out.push(range(json!({"metric": m, "aggregator": "sum"})));
        out.push(range(
            json!({"metric": m, "aggregator": "max", "downsample": "1h-avg"}),
        ));
        out.push(range(
            json!({"metric": m, "aggregator": "zimsum", "downsample": "0all-count"}),
        ));
        out.push(range(
            json!({"metric": m, "aggregator": "none", "rate": true}),
        ));
    }
    out.push(range(
        json!({"metric": "mig.int", "aggregator": "none", "tags": {"dc": "east"}}),
    ));
    out.push(range(json!({"metric": "mig.int", "aggregator": "avg",
        "filters": [{"type": "regexp", "tagk": "host", "filter": "h0[1-5]", "groupBy": true}]})));
    out.push(
        json!({"start": T0 + 7 * 3600, "end": T0 + 7 * 3600 + 1800, "msResolution": true,
        "queries": [{"metric": "mig.int", "aggregator": "none", "tags": {"host": "h03"}}]}),
    );
    out
}

/// An answer without the TSUIDs the annotations carry, its series in tag order: each side
/// assigns its own UIDs, and the order of series follows them.
fn without_tsuids(mut v: Value) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(o) => {
                o.remove("tsuid");
                o.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut v);
    if let Value::Array(series) = &mut v {
        series.sort_by_key(|s| format!("{} {}", s["metric"], s["tags"]));
    }
    v
}

/// Asserts both TSDs answer every query exactly alike (the raw answer text, less TSUIDs).
fn assert_same_answers(source: &str, target: &str) {
    for q in queries() {
        let (s1, a) = post(source, "/api/query", &q);
        let (s2, b) = post(target, "/api/query", &q);
        assert_eq!(s1, 200, "{q}: {a}");
        assert!(
            a.as_array().is_some_and(|a| !a.is_empty()),
            "the source answers {q}"
        );
        let (a, b) = (without_tsuids(a), without_tsuids(b));
        if (s1, &a) != (s2, &b) {
            panic!("{q}: {}", first_difference(&a, &b));
        }
    }
}

/// Where two answers first differ, briefly.
fn first_difference(a: &Value, b: &Value) -> String {
    let (Some(x), Some(y)) = (a.as_array(), b.as_array()) else {
        return format!("source {a:.300}, target {b:.300}");
    };
    if x.len() != y.len() {
        return format!(
            "{} series on the source, {} on the target",
            x.len(),
            y.len()
        );
    }
    for (s, t) in x.iter().zip(y) {
        if s == t {
            continue;
        }
        for key in [
            "metric",
            "tags",
            "aggregateTags",
            "annotations",
            "globalAnnotations",
        ] {
            if s[key] != t[key] {
                return format!("{key}: source {}, target {}", s[key], t[key]);
            }
        }
        let (dx, dy) = (s["dps"].as_object().unwrap(), t["dps"].as_object().unwrap());
        for (k, v) in dx {
            if dy.get(k) != Some(v) {
                return format!(
                    "{} {}: at {k} source {v}, target {:?} ({} vs {} points)",
                    s["metric"],
                    s["tags"],
                    dy.get(k),
                    dx.len(),
                    dy.len()
                );
            }
        }
        return format!("{} {}: target has more points", s["metric"], s["tags"]);
    }
    "order".to_string()
}

fn migrate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .arg("migrate")
        .args(args)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

const START: &str = "2023/12/31-00:00:00";
const END: &str = "2024/01/03-00:00:00";

#[test]
fn a_migration_to_another_tsd_answers_every_query_as_the_source() {
    let dir = tempfile::tempdir().unwrap();
    let source = Tsd::start(&dir.path().join("source"));
    let target = Tsd::start(&dir.path().join("target"));
    let n = seed(&source.addr);

    // The dry run counts without writing.
    // A suggest answer of 2 names at most: discovery pages by longer prefixes.
    let dry = migrate(&[
        "--from",
        &source.url(),
        "--start",
        START,
        "--end",
        END,
        "--dry-run",
        "--suggest-max",
        "2",
        "--lookup-limit",
        "100",
    ]);
    assert!(dry.status.success(), "{}", text(&dry));
    let table = String::from_utf8_lossy(&dry.stdout).to_string();
    let row = |m: &str| -> Vec<String> {
        table
            .lines()
            .find(|l| l.starts_with(m))
            .unwrap_or_else(|| panic!("{m} in {table}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        row("mig.int")[1..3],
        ["12".to_string(), (12 * HOURS * 6).to_string()]
    );
    assert_eq!(
        row("mig.float")[1..3],
        ["4".to_string(), (4 * HOURS * 4).to_string()]
    );
    assert_eq!(
        row("mig.ms")[1..3],
        ["1".to_string(), (HOURS * 20).to_string()]
    );
    // Lookup answers series counts; past its limit, a query does.
    assert_eq!(row("mig.int")[4], "lookup");
    assert_eq!(
        row("mig.many")[1..3],
        ["300".to_string(), "900".to_string()]
    );
    assert_eq!(row("mig.many")[4], "query");
    assert!(table.contains("total (5 metrics)"), "{table}");
    let (_, nothing) = post(
        &target.addr,
        "/api/query",
        &json!({"start": T0, "queries": [{"metric": "mig.int", "aggregator": "sum"}]}),
    );
    assert_eq!(
        nothing["error"]["code"], 400,
        "a dry run writes nothing: {nothing}"
    );

    let out = migrate(&[
        "--from",
        &source.url(),
        "--url",
        &target.url(),
        "--start",
        START,
        "--end",
        END,
        "--chunk-hours",
        "4",
        "--batch-points",
        "700",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for m in ["mig.int", "mig.float", "mig.ms", "mig.many", "mig.mixed"] {
        let line = stdout.lines().find(|l| l.starts_with(m)).unwrap();
        assert!(line.ends_with("same"), "{line}");
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("copied {n} point(s)")), "{stderr}");
    assert!(
        stderr.contains("2 series and 2 global annotation(s)"),
        "{stderr}"
    );
    assert_same_answers(&source.addr, &target.addr);

    // Meta came along.
    let (_, uids) = get(&target.addr, "/api/uid/assign?metric=mig.int");
    let uid = uids["metric_errors"]["mig.int"]
        .as_str()
        .unwrap()
        .rsplit(' ')
        .next()
        .unwrap()
        .to_string();
    let (status, meta) = get(
        &target.addr,
        &format!("/api/uid/uidmeta?uid={uid}&type=metric"),
    );
    assert_eq!(status, 200);
    assert_eq!(meta["displayName"], "Integers");
    assert_eq!(meta["notes"], "seeded");
    let (status, ts) = get(&target.addr, "/api/uid/tsmeta?m=mig.float%7Bseries%3D1%7D");
    assert_eq!(status, 200, "{ts}");
    assert_eq!(ts[0]["description"], "the second float series");
    assert_eq!(ts[0]["units"], "ms");
    let (_, notes) = get(
        &target.addr,
        &format!(
            "/api/annotations?start_time={T0}&end_time={}",
            T0 + HOURS * 3600
        ),
    );
    let mut descriptions: Vec<&str> = notes
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["description"].as_str().unwrap())
        .collect();
    descriptions.sort();
    assert_eq!(descriptions, ["maintenance", "outage"]);

    // A point only the target has: the verification reports the series and fails.
    put_all(
        &target.addr,
        &[json!({"metric": "mig.ms", "timestamp": T0 + 100, "value": 1, "tags": {"host": "fast"}})],
    );
    let again = migrate(&[
        "--from",
        &source.url(),
        "--url",
        &target.url(),
        "--start",
        START,
        "--end",
        END,
        "--metric",
        "mig.ms",
    ]);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert!(stdout.contains("1 series differ"), "{}", text(&again));
    assert!(
        stdout.contains(&format!("{{host=fast}}: source {} points", HOURS * 20)),
        "{}",
        text(&again)
    );
}

#[test]
fn a_migration_into_the_local_store_is_served_by_a_tsd_over_it() {
    let dir = tempfile::tempdir().unwrap();
    // The tag index on: the write path keeps it as the migration writes.
    let config = dir.path().join("index.conf");
    std::fs::write(&config, "tsd.index.enable = true\n").unwrap();
    into_the_local_store(dir.path(), &config, true);
}

#[test]
fn a_migration_into_bigtable_is_verified_there_with_its_tag_index() {
    let emulator = hourglass_store_bigtable::emulator::host();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bigtable.conf");
    std::fs::write(
        &config,
        format!(
            "tsd.storage.backend = bigtable\ngoogle.bigtable.emulator.host = {emulator}\n\
             google.bigtable.project.id = migrate\ngoogle.bigtable.instance.id = local\n\
             tsd.index.enable = true\n"
        ),
    )
    .unwrap();
    let created = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(["create-tables", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(created.status.success(), "{}", text(&created));
    // The migration's own verification compares every series on Bigtable, then a TSD
    // started afresh over it (cold UID caches, scans split in two) answers as the source.
    into_the_local_store(dir.path(), &config, true);
}

/// Migrates a seeded source into the store `config` names (no `--url`): every series
/// verified, then (`serve`) a TSD over that store must answer as the source, and the tag
/// index must hold the copied rows' entries.
fn into_the_local_store(dir: &Path, config: &Path, serve: bool) {
    let source = Tsd::start(&dir.join("source"));
    seed(&source.addr);
    let data = dir.join("local");
    let out = migrate(&[
        "--from",
        &source.url(),
        "--start",
        START,
        "--end",
        END,
        "--config",
        config.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
        "--prefix",
        "mig.",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for m in ["mig.int", "mig.float", "mig.ms", "mig.many", "mig.mixed"] {
        let line = stdout.lines().find(|l| l.starts_with(m)).unwrap();
        assert!(line.ends_with("same"), "{line}");
    }
    if serve {
        let target = Tsd::start_with(config, &data);
        assert_same_answers(&source.addr, &target.addr);
        target.stop();
    }
    // An index check of the data dir finds every entry of the copied rows. (A note's place,
    // `0x30`, is written by annotation writes only from RFC 0007 phase 5 on; the check
    // already asks for it, for the two series notes.)
    let fsck = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(["fsck", "--index", "--config"])
        .arg(config)
        .arg("--data-dir")
        .arg(&data)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&fsck.stdout);
    assert!(report.contains("Index rows checked: "), "{}", text(&fsck));
    let missing: Vec<&str> = report
        .lines()
        .filter(|l| l.starts_with("index entry missing"))
        .collect();
    assert!(
        missing.iter().all(|l| l.contains("kind=0x30 ")),
        "{}",
        text(&fsck)
    );
    assert!(missing.len() <= 2, "{}", text(&fsck));
    assert!(!report.contains("index counters differ"), "{}", text(&fsck));
}

/// Lines of the checkpoint file naming chunks of points done.
fn chunks_done(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("points\t"))
        .count()
}

#[test]
fn a_killed_migration_resumes_without_gaps_or_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let source = Tsd::start(&dir.path().join("source"));
    let target = Tsd::start(&dir.path().join("target"));
    let n = seed(&source.addr);
    let checkpoint = dir.path().join("checkpoint");
    let args = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "--from",
            &source.url(),
            "--url",
            &target.url(),
            "--start",
            START,
            "--end",
            END,
            "--chunk-hours",
            "1",
            "--concurrency",
            "1",
            "--batch-points",
            "10",
            "--checkpoint",
            checkpoint.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .arg("migrate")
        .args(args(&[]))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Killed (SIGKILL) once a few of its 30 chunks of each metric are done.
    let deadline = Instant::now() + Duration::from_secs(120);
    while chunks_done(&checkpoint) < 12 {
        assert!(Instant::now() < deadline, "the migration made no progress");
        assert!(
            child.try_wait().unwrap().is_none(),
            "the migration ended before it was killed"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let before = chunks_done(&checkpoint);
    // Four metrics have points in each of the 30 hours, the fifth in 15 of them.
    let total_chunks = 4 * HOURS as usize + 15;
    assert!(
        before < total_chunks,
        "killed mid-way: {before} chunks done"
    );

    let out = migrate(&args(&[]).iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("resuming from"), "{stderr}");
    // The resumed run copied only what was left.
    let copied: usize = stderr
        .split("copied ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(copied > 0 && copied < n, "copied {copied} of {n}");
    assert_eq!(chunks_done(&checkpoint), total_chunks);
    assert_same_answers(&source.addr, &target.addr);

    // Run again: nothing left to copy, and still verified.
    let out = migrate(&args(&[]).iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("copied 0 point(s)"),
        "{}",
        text(&out)
    );
    // Another range against the same checkpoint is refused.
    let mut other = args(&[]);
    let at = other.iter().position(|a| a == "--chunk-hours").unwrap();
    other[at + 1] = "2".into();
    let out = migrate(&other.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("another migration"),
        "{}",
        text(&out)
    );
}

/// A proxy before `upstream` that answers every `fail_every`th request with a 500 and
/// drops every `drop_every`th connection without an answer; returns its address and the
/// number of requests it failed.
fn flaky_proxy(
    upstream: String,
    fail_every: usize,
    drop_every: usize,
) -> (String, Arc<AtomicUsize>, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let failed = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (f, s) = (Arc::clone(&failed), Arc::clone(&stop));
    std::thread::spawn(move || {
        let mut seen = 0usize;
        for conn in listener.incoming() {
            if s.load(Ordering::Relaxed) {
                break;
            }
            let Ok(mut conn) = conn else { continue };
            seen += 1;
            let n = seen;
            let upstream = upstream.clone();
            let f = Arc::clone(&f);
            std::thread::spawn(move || {
                conn.set_read_timeout(Some(Duration::from_secs(30)))
                    .unwrap();
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut head = Vec::new();
                let mut length = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if line == "\r\n" {
                        break;
                    }
                    let lower = line.to_ascii_lowercase();
                    if let Some(v) = lower.strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap();
                    }
                    if !lower.starts_with("connection:") {
                        head.push(line);
                    }
                }
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                if n.is_multiple_of(drop_every) {
                    f.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                if n.is_multiple_of(fail_every) {
                    f.fetch_add(1, Ordering::Relaxed);
                    let msg = r#"{"error":{"code":500,"message":"flaky"}}"#;
                    let _ = write!(
                        conn,
                        "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{msg}",
                        msg.len()
                    );
                    return;
                }
                let mut up = TcpStream::connect(&upstream).unwrap();
                for l in &head {
                    up.write_all(l.as_bytes()).unwrap();
                }
                up.write_all(b"Connection: close\r\n\r\n").unwrap();
                up.write_all(&body).unwrap();
                let mut answer = Vec::new();
                up.read_to_end(&mut answer).unwrap();
                let _ = conn.write_all(&answer);
            });
        }
    });
    (addr, failed, stop)
}

#[test]
fn a_source_failing_some_requests_still_ends_complete_and_verified() {
    let dir = tempfile::tempdir().unwrap();
    let source = Tsd::start(&dir.path().join("source"));
    let target = Tsd::start(&dir.path().join("target"));
    seed(&source.addr);
    let (proxy, failed, stop) = flaky_proxy(source.addr.clone(), 4, 7);
    let out = migrate(&[
        "--from",
        &format!("http://{proxy}"),
        "--url",
        &target.url(),
        "--start",
        START,
        "--end",
        END,
        "--chunk-hours",
        "2",
    ]);
    stop.store(true, Ordering::Relaxed);
    assert!(out.status.success(), "{}", text(&out));
    let failed = failed.load(Ordering::Relaxed);
    assert!(failed >= 10, "the proxy failed {failed} requests");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let retried: usize = stderr
        .split(" request(s) tried again")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        retried >= failed,
        "{retried} retried, {failed} failed: {stderr}"
    );
    assert_same_answers(&source.addr, &target.addr);
}

#[test]
fn bad_flags_are_refused_with_a_clear_error() {
    for (args, words) in [
        (
            vec!["--from", "localhost:4242", "--dry-run"],
            "is not a TSD's URL",
        ),
        (
            vec!["--from", "http://127.0.0.1:1", "--concurrency", "0"],
            "--concurrency must be",
        ),
        (
            vec!["--from", "http://127.0.0.1:1", "--start", "yesterday"],
            "bad --start",
        ),
        (
            vec![
                "--from",
                "http://127.0.0.1:1",
                "--retries",
                "0",
                "--dry-run",
            ],
            "cannot reach the source",
        ),
    ] {
        let out = migrate(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(words),
            "{args:?}: {}",
            text(&out)
        );
    }
}

#[test]
fn a_source_asking_for_credentials_is_refused_clearly() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(
                b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    let out = migrate(&["--from", &format!("http://{addr}"), "--dry-run"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "asks for credentials (401): copying from a TSD behind authentication is not supported"
        ),
        "{stderr}"
    );
}
