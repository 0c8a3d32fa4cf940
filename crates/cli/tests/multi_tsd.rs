#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Three `tsdb tsd` processes on one Bigtable (emulator) writing the same new names at the
//! same time: one UID per name, one mapping each way, and every point stored.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use hourglass_storage::{ReadOptions, ScanRequest, Store};

mod common;

const NAMES: usize = 2000;

fn write_config(dir: &Path, emulator: &str) -> std::path::PathBuf {
    let path = dir.join("bigtable.conf");
    std::fs::write(
        &path,
        format!(
            "tsd.storage.backend = bigtable\ngoogle.bigtable.emulator.host = {emulator}\n\
             google.bigtable.project.id = multi\ngoogle.bigtable.instance.id = tsd\n"
        ),
    )
    .unwrap();
    path
}

fn spawn_tsd(config: &Path, data_dir: &Path) -> (common::Tsd, String) {
    common::spawn_tsd_with(Some(config), data_dir)
}

fn query(addr: &str, path: &str) -> serde_json::Value {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let body = out.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn three_tsds_share_one_bigtable() {
    let emulator = hourglass_store_bigtable::emulator::host();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), emulator);
    let created = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(["create-tables", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let tsds: Vec<(common::Tsd, String)> = (0..3)
        .map(|i| spawn_tsd(&config, &dir.path().join(format!("tsd{i}"))))
        .collect();
    // Every TSD writes one point for each of the same 2,000 new metric and tag value names.
    let writers: Vec<_> = tsds
        .iter()
        .enumerate()
        .map(|(t, (_, addr))| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(&addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
                let text: String = (0..NAMES)
                    .map(|i| format!("put multi.m{i} {} {t} host=h{i} tsd=t{t}\n", 1356998400 + t))
                    .collect();
                // Plus one shared metric, 100 points per TSD, for whole-range queries.
                let text: String = text
                    + &(0..100)
                        .map(|i| format!("put multi.all {} {i} tsd=t{t}\n", 1356998400 + i))
                        .collect::<String>();
                s.write_all(text.as_bytes()).unwrap();
                s.write_all(b"version\nexit\n").unwrap();
                let mut out = String::new();
                s.read_to_string(&mut out).unwrap();
                out
            })
        })
        .collect();
    for w in writers {
        let out = w.join().unwrap();
        assert!(out.starts_with("hourglass "), "errors: {out}");
    }
    // Any TSD answers any query with every TSD's points (flushes reach Bigtable within 1 s).
    for (_, addr) in &tsds {
        let mut body = serde_json::Value::Null;
        for _ in 0..100 {
            body = query(
                addr,
                "/api/query?start=1356998400&end=1356998600&m=none:multi.all",
            );
            if body.as_array().is_some_and(|a| {
                a.len() == 3
                    && a.iter()
                        .all(|s| s["dps"].as_object().is_some_and(|d| d.len() == 100))
            }) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let series = body.as_array().unwrap_or_else(|| panic!("{body}"));
        assert_eq!(series.len(), 3, "{addr}: {body}");
        assert!(
            series
                .iter()
                .all(|s| s["dps"].as_object().unwrap().len() == 100),
            "{addr}: {body}"
        );
        for i in (0..NAMES).step_by(97) {
            let one = query(
                addr,
                &format!("/api/query?start=1356998400&end=1356998600&m=sum:multi.m{i}"),
            );
            assert_eq!(
                one[0]["dps"].as_object().map(|d| d.len()),
                Some(3),
                "{addr} multi.m{i}: {one}"
            );
        }
    }
    for (mut child, _) in tsds {
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(child.wait().unwrap().success());
    }
    // Straight from Bigtable: one forward and one reverse mapping per name, agreeing.
    let mut bt = hourglass_store_bigtable::BigtableConfig::new("multi", "tsd");
    bt.emulator_host = Some(emulator.to_string());
    let store = hourglass_store_bigtable::BigtableStore::connect(bt).unwrap();
    let mut forward: HashMap<(String, String), Vec<u8>> = HashMap::new();
    let mut reverse: HashMap<(String, Vec<u8>), String> = HashMap::new();
    for row in store
        .scan(
            "tsdb-uid",
            &ScanRequest {
                read: ReadOptions::latest(),
                ..Default::default()
            },
        )
        .unwrap()
    {
        let row = row.unwrap();
        if row.key == [0] {
            continue;
        }
        for c in &row.cells {
            let kind = String::from_utf8(c.qualifier.clone()).unwrap();
            match c.family.as_str() {
                "id" => assert!(
                    forward
                        .insert(
                            (kind, String::from_utf8(row.key.clone()).unwrap()),
                            c.value.clone()
                        )
                        .is_none()
                ),
                "name" => assert!(
                    reverse
                        .insert(
                            (kind, row.key.clone()),
                            String::from_utf8(c.value.clone()).unwrap()
                        )
                        .is_none()
                ),
                _ => {}
            }
        }
    }
    let metrics: Vec<_> = forward
        .iter()
        .filter(|((k, n), _)| k == "metrics" && n.starts_with("multi.m"))
        .collect();
    assert_eq!(metrics.len(), NAMES);
    for ((kind, name), uid) in &forward {
        assert_eq!(
            reverse.get(&(kind.clone(), uid.clone())),
            Some(name),
            "{kind} {name}"
        );
    }
    assert_eq!(
        forward.len(),
        reverse.len(),
        "no reverse mapping without its forward one"
    );
    let uids: HashSet<_> = metrics.iter().map(|(_, u)| u.to_vec()).collect();
    assert_eq!(uids.len(), NAMES, "no two names share a UID");
    // Every point from every TSD is stored, readable by another process.
    let scan = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(["scan", "--import", "--config"])
        .arg(&config)
        .args(["--data-dir"])
        .arg(dir.path().join("reader"))
        .args(["2013/01/01", "2014/01/01", "sum", "multi.m7"])
        .output()
        .unwrap();
    let lines = String::from_utf8(scan.stdout).unwrap();
    assert_eq!(lines.lines().count(), 3, "{lines}");
    let rows = store
        .scan("tsdb", &ScanRequest::default())
        .unwrap()
        .map(|r| r.unwrap().cells.len())
        .sum::<usize>();
    assert_eq!(
        rows,
        3 * NAMES + 3,
        "every TSD's points are in Bigtable (one cell per point, one per multi.all row)"
    );
}

#[test]
fn tsd_stays_up_and_says_so_when_bigtable_is_unreachable() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens on this port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.path().join("down.conf");
    std::fs::write(
        &config,
        format!("tsd.storage.backend = bigtable\ngoogle.bigtable.emulator.host = 127.0.0.1:{port}\ngoogle.bigtable.timeout_ms = 2000\n"),
    )
    .unwrap();
    let (mut child, addr) = spawn_tsd(&config, &dir.path().join("tsd"));
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(b"put down.metric 1356998400 1 host=a\nversion\nexit\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let first = out.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("put: HBase error: storage unavailable"),
        "{out}"
    );
    assert!(out.contains("hourglass "), "the TSD still answers: {out}");
    child.kill().unwrap();
    child.wait().unwrap();
}

fn post(addr: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, out)
}

/// The seen bug: `?sync` covered only the writing TSD's log, so for about a flush interval
/// no other TSD saw the point. Now the 204 comes after the rows are in Bigtable.
#[test]
fn a_synced_put_is_read_through_another_tsd_at_once() {
    let emulator = hourglass_store_bigtable::emulator::host();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sync.conf");
    // A long flush interval: without `?sync` the points would stay in the writer's buffer.
    std::fs::write(
        &config,
        format!(
            "tsd.storage.backend = bigtable\ngoogle.bigtable.emulator.host = {emulator}\n\
             google.bigtable.project.id = syncput\ngoogle.bigtable.instance.id = tsd\n\
             tsd.storage.flush_interval = 60000\ntsd.core.auto_create_metrics = true\n"
        ),
    )
    .unwrap();
    let created = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(["create-tables", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(created.status.success());
    let (writer, a) = spawn_tsd(&config, &dir.path().join("a"));
    let (reader, b) = spawn_tsd(&config, &dir.path().join("b"));
    // Killed however the test ends (`common::Tsd`).
    let _tsds = [writer, reader];
    for i in 0..10 {
        let point = format!(
            r#"{{"metric":"sync.m","timestamp":{},"value":{i},"tags":{{"host":"a"}}}}"#,
            1356998400 + i
        );
        let (status, out) = post(&a, "/api/put?sync", &point);
        assert_eq!(status, 204, "{out}");
        let seen = query(
            &b,
            "/api/query?start=1356998400&end=1356998500&m=sum:sync.m",
        );
        assert_eq!(
            seen[0]["dps"].as_object().map(|d| d.len()),
            Some(i as usize + 1),
            "point {i} acknowledged with ?sync on one TSD is read through the other: {seen}"
        );
    }
}
