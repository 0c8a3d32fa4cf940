#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Trust under abuse, on the real `tsdb tsd` process: SIGKILL in a loop while writing, a real
//! full disk (a small tmpfs; needs root, as CI has), thousands of idle and slow clients,
//! connection limits and idle timeouts, and a frozen Bigtable (emulator stopped with
//! SIGSTOP). Every test counts acknowledged points and asserts each is read back exactly
//! once with its value.

mod common;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

// ---------------------------------------------------------------------------------------
// The TSD process.

/// A running `tsdb tsd`, killed when dropped (a failing test leaves no server behind).
struct Tsd {
    child: Child,
    addr: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Tsd {
    /// Starts `tsdb tsd --port 0` over `data`, with an optional config file, and waits until
    /// it is ready (a previous run's log replayed).
    fn start(data: &Path, config: Option<&Path>) -> Tsd {
        let mut child = common::tsd_command(config, data)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let keep = Arc::clone(&log);
        // Keep draining the log so the server never blocks on a full pipe; keep its tail.
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line.split("Ready to serve on ").nth(1)
                    && let Some(t) = tx.take()
                {
                    let _ = t.send(addr.split_whitespace().next().unwrap_or("").to_string());
                }
                let mut l = keep.lock().unwrap();
                if l.len() >= 200 {
                    l.remove(0);
                }
                l.push(line);
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                let status = child.wait().ok();
                std::thread::sleep(Duration::from_millis(100));
                panic!(
                    "tsd did not become ready (exit: {status:?}); its log:\n{}",
                    log.lock().unwrap().join("\n")
                );
            }
        };
        Tsd { child, addr, log }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log_tail(&self) -> String {
        let l = self.log.lock().unwrap();
        l[l.len().saturating_sub(30)..].join("\n")
    }

    /// Every line it has logged so far.
    fn log_all(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// SIGKILL.
    fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM (as an init system stops it) and its exit status.
    fn stop(mut self) -> ExitStatus {
        signal("TERM", self.pid());
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                if !status.success() {
                    std::thread::sleep(Duration::from_millis(100));
                    eprintln!("tsd exited with {status}; its log:\n{}", self.log_tail());
                }
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "tsd did not stop within 120 s of SIGTERM; its log:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Resident memory now, in bytes (VmRSS).
    fn rss(&self) -> u64 {
        self.status_bytes("VmRSS:")
    }

    /// The most resident memory it has had, in bytes (VmHWM).
    fn peak_rss(&self) -> u64 {
        self.status_bytes("VmHWM:")
    }

    fn status_bytes(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .expect(field)
            * 1024
    }
}

impl Drop for Tsd {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn signal(name: &str, pid: u32) {
    let ok = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{name} {pid} failed");
}

fn write_config(dir: &Path, lines: &[String]) -> PathBuf {
    let path = dir.join("tsd.conf");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

// ---------------------------------------------------------------------------------------
// HTTP over a plain socket (one request per connection): exact status codes and bodies.

#[derive(Debug)]
struct Resp {
    status: u16,
    body: String,
}

fn http(addr: &str, method: &str, path: &str, body: &str) -> std::io::Result<Resp> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    s.set_write_timeout(Some(Duration::from_secs(60)))?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body.as_bytes());
    s.write_all(&req)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    parse_response(&raw)
}

fn parse_response(raw: &[u8]) -> std::io::Result<Resp> {
    let bad = || std::io::Error::other(format!("bad response: {:?}", String::from_utf8_lossy(raw)));
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(bad)?;
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(bad)?;
    let mut body = raw[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = Vec::new();
        let mut rest = &body[..];
        loop {
            let eol = rest.windows(2).position(|w| w == b"\r\n").ok_or_else(bad)?;
            let size_text = String::from_utf8_lossy(&rest[..eol]).to_string();
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| bad())?;
            rest = &rest[eol + 2..];
            if size == 0 {
                break;
            }
            out.extend_from_slice(rest.get(..size).ok_or_else(bad)?);
            rest = rest.get(size + 2..).ok_or_else(bad)?;
        }
        body = out;
    }
    Ok(Resp {
        status,
        body: String::from_utf8_lossy(&body).to_string(),
    })
}

// ---------------------------------------------------------------------------------------
// Points and the ledger of what was sent and acknowledged.

#[derive(Debug, Clone)]
struct Pt {
    metric: &'static str,
    host: String,
    ts: i64,
    value: i64,
}

type Key = (String, String, i64);

impl Pt {
    fn key(&self) -> Key {
        (self.metric.to_string(), self.host.clone(), self.ts)
    }
}

fn put_body(points: &[Pt]) -> String {
    let mut s = String::from("[");
    for (i, p) in points.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&format!(
            r#"{{"metric":"{}","timestamp":{},"value":{},"tags":{{"host":"{}"}}}}"#,
            p.metric, p.ts, p.value, p.host
        ));
    }
    s.push(']');
    s
}

#[derive(Debug, Default)]
struct Ledger {
    sent: HashMap<Key, i64>,
    acked: HashSet<Key>,
}

#[derive(Debug)]
struct Checked {
    found: usize,
    unacked_found: usize,
}

impl Ledger {
    fn sent(&mut self, points: &[Pt]) {
        for p in points {
            assert!(
                self.sent.insert(p.key(), p.value).is_none(),
                "test bug: {p:?} twice"
            );
        }
    }

    fn acked(&mut self, points: &[Pt]) {
        self.acked.extend(points.iter().map(Pt::key));
    }

    /// Asserts every acknowledged point is in `found` exactly once with its value, and that
    /// nothing else is there but points sent (unacknowledged ones may or may not be).
    fn check(&self, found: &[(Key, i64)], what: &str) -> Checked {
        let mut seen: HashMap<&Key, usize> = HashMap::new();
        let mut wrong = Vec::new();
        for (k, v) in found {
            *seen.entry(k).or_default() += 1;
            match self.sent.get(k) {
                Some(sent) if sent == v => {}
                other => wrong.push(format!("{k:?} = {v} (sent: {other:?})")),
            }
        }
        let dups: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
        let mut lost: Vec<&Key> = self
            .acked
            .iter()
            .filter(|k| !seen.contains_key(k))
            .collect();
        lost.sort();
        assert!(
            wrong.is_empty() && dups.is_empty() && lost.is_empty(),
            "{what}: {} acknowledged points lost (first: {:?}), {} duplicated (e.g. {:?}), \
             {} with a wrong value or never sent (e.g. {:?}); {} acknowledged, {} sent, {} read",
            lost.len(),
            lost.iter().take(5).collect::<Vec<_>>(),
            dups.len(),
            dups.iter().take(5).collect::<Vec<_>>(),
            wrong.len(),
            wrong.iter().take(5).collect::<Vec<_>>(),
            self.acked.len(),
            self.sent.len(),
            found.len()
        );
        Checked {
            found: found.len(),
            unacked_found: seen.keys().filter(|k| !self.acked.contains(**k)).count(),
        }
    }
}

/// Every point of `metric` in `[start, end]` through `/api/query` (aggregator `none`, one
/// series per host, `arrays` so that a repeated time would show).
fn query_points(addr: &str, metric: &str, start: i64, end: i64) -> Vec<(Key, i64)> {
    query_points_where(addr, metric, "", start, end)
}

/// [`query_points`] with a `{...}` filter after the metric (URL-encoded as given).
fn query_points_where(
    addr: &str,
    metric: &str,
    filter: &str,
    start: i64,
    end: i64,
) -> Vec<(Key, i64)> {
    let path = format!("/api/query?start={start}&end={end}&m=none:{metric}{filter}&arrays");
    let r = http(addr, "GET", &path, "").unwrap();
    assert_eq!(r.status, 200, "{path}: {}", r.body);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    let mut out = Vec::new();
    for series in v.as_array().unwrap() {
        let host = series["tags"]["host"].as_str().unwrap().to_string();
        for dp in series["dps"].as_array().unwrap() {
            let ts = dp[0].as_i64().unwrap();
            let value = dp[1]
                .as_i64()
                .unwrap_or_else(|| panic!("integer value: {dp}"));
            out.push(((metric.to_string(), host.clone(), ts), value));
        }
    }
    out
}

/// Every stored point of `metric` in `[start, end]`, cell by cell, with `tsdb scan --import`
/// on a stopped TSD's data dir (a point stored twice prints twice).
fn scan_points(
    data: &Path,
    config: Option<&Path>,
    metric: &str,
    start: i64,
    end: i64,
) -> Vec<(Key, i64)> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tsdb"));
    cmd.args(["scan", "--import", "--data-dir"]).arg(data);
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    let o = cmd
        .args([&start.to_string(), &end.to_string(), "sum", metric])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let host = f[3].strip_prefix("host=").unwrap().to_string();
            (
                (f[0].to_string(), host, f[1].parse().unwrap()),
                f[2].parse().unwrap(),
            )
        })
        .collect()
}

/// A small pseudo-random sequence (the seed is printed so a run can be repeated).
struct Rng(u64);

impl Rng {
    fn from_env_or_clock() -> Rng {
        let seed: u64 = std::env::var("HOURGLASS_TRUST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .subsec_nanos()
                    .into()
            });
        eprintln!("seed {seed} (HOURGLASS_TRUST_SEED={seed} repeats this run)");
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

// ---------------------------------------------------------------------------------------
// a. SIGKILL in a loop while flushes and compactions run constantly.

#[test]
fn sigkill_loop_loses_and_duplicates_no_acknowledged_point() {
    const BATCH: u64 = 500;
    const MAX_BATCHES: u64 = 1000;
    const CYCLES: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = write_config(
        dir.path(),
        &[
            "tsd.storage.flush_interval = 200".into(),
            "tsd.storage.max_buffered_points = 2000".into(),
            "tsd.index.enable = true".into(),
        ],
    );
    let now = now_secs();
    let hour = now - now % 3600;
    // Half the points in hours already over (each flush compacts their rows), half from the
    // start of the current hour on (partial cells, compacted when the hour closes).
    let (past, current) = (hour - 12 * 3600, hour);
    let point = move |k: u64| {
        let i = (k / 8) as i64;
        // New series keep arriving over the first 64 batches (their index entries are
        // written by the flushes the kills interrupt).
        Pt {
            metric: "trust.kill",
            host: format!("h{}-{}", k % 8, (k / BATCH) % 64),
            ts: if i % 2 == 0 {
                past + i / 2
            } else {
                current + i / 2
            },
            value: k as i64,
        }
    };
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let next = Arc::new(AtomicU64::new(0));
    let unexpected = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut rng = Rng::from_env_or_clock();
    for cycle in 0..CYCLES {
        let tsd = Tsd::start(&data, Some(&config));
        let stop = Arc::new(AtomicBool::new(false));
        let acked_before = ledger.lock().unwrap().acked.len();
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let (addr, stop, next) = (tsd.addr.clone(), Arc::clone(&stop), Arc::clone(&next));
                let (ledger, unexpected) = (Arc::clone(&ledger), Arc::clone(&unexpected));
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let b = next.fetch_add(1, Ordering::Relaxed);
                        if b >= MAX_BATCHES {
                            break;
                        }
                        let points: Vec<Pt> = (b * BATCH..(b + 1) * BATCH).map(point).collect();
                        ledger.lock().unwrap().sent(&points);
                        match http(&addr, "POST", "/api/put", &put_body(&points)) {
                            Ok(r) if r.status == 204 => ledger.lock().unwrap().acked(&points),
                            Ok(r) => unexpected
                                .lock()
                                .unwrap()
                                .push(format!("batch {b}: {} {}", r.status, r.body)),
                            // The server was killed under the request: not acknowledged.
                            Err(_) => {}
                        }
                        // Paced so that every cycle gets batches to write.
                        std::thread::sleep(Duration::from_millis(5));
                    }
                })
            })
            .collect();
        let wait: u64 = 100 + rng.below(1400);
        std::thread::sleep(Duration::from_millis(wait));
        tsd.kill9();
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().unwrap();
        }
        eprintln!(
            "cycle {cycle}: SIGKILL after {wait} ms, {} points acknowledged",
            ledger.lock().unwrap().acked.len() - acked_before
        );
    }
    let unexpected = unexpected.lock().unwrap();
    assert!(unexpected.is_empty(), "puts refused: {unexpected:?}");
    let ledger = ledger.lock().unwrap();
    assert!(
        ledger.acked.len() >= 10 * BATCH as usize,
        "too few points acknowledged for the test to mean anything: {}",
        ledger.acked.len()
    );
    let end = current + (MAX_BATCHES * BATCH / 16) as i64 + 1;
    // The log directory says a process ran and did not close: the next start writes the
    // UID table again before its first sync (RFC 0001, "UIDs after a failed sync").
    let at_risk = data.join("wal").join("uids-at-risk");
    assert_eq!(std::fs::read(&at_risk).unwrap(), [2], "after SIGKILL");
    let tsd = Tsd::start(&data, Some(&config));
    let all = query_points(&tsd.addr, "trust.kill", past, end);
    let c = ledger.check(&all, "after SIGKILLs, /api/query");
    // Filters the tag index answers (every series of the run is in it, or the query
    // scans): the same points as the unfiltered query, or the part a filter keeps.
    let sorted = |mut v: Vec<(Key, i64)>| {
        v.sort();
        v
    };
    let every = sorted(all.clone());
    assert_eq!(
        sorted(query_points_where(
            &tsd.addr,
            "trust.kill",
            "%7Bhost=wildcard(h*)%7D",
            past,
            end
        )),
        every,
        "after SIGKILLs, a wildcard over every series"
    );
    let some: Vec<(Key, i64)> = every
        .iter()
        .filter(|((_, host, _), _)| host.starts_with("h3-"))
        .cloned()
        .collect();
    assert!(!some.is_empty());
    assert_eq!(
        sorted(query_points_where(
            &tsd.addr,
            "trust.kill",
            "%7Bhost=regexp(%5Eh3-)%7D",
            past,
            end
        )),
        some,
        "after SIGKILLs, an anchored regexp"
    );
    assert!(
        tsd.log_all()
            .contains("the previous process stopped without closing"),
        "the start after SIGKILL wrote the UID table again"
    );
    assert!(tsd.stop().success());
    assert_eq!(
        std::fs::read(&at_risk).unwrap(),
        Vec::<u8>::new(),
        "a graceful stop closed with everything synced"
    );
    let s = ledger.check(
        &scan_points(&data, None, "trust.kill", past, end),
        "after SIGKILLs, scan",
    );
    assert_eq!(c.found, s.found, "query and scan disagree");
    // Every stored row's series and day has its index entries (RFC 0007).
    let o = Command::new(env!("CARGO_BIN_EXE_tsdb"))
        .args(["fsck", "--index", "--data-dir"])
        .arg(&data)
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("Index entries missing: 0\n"),
        "after SIGKILLs, fsck --index: {out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    eprintln!(
        "{} acknowledged, {} read back ({} of them from batches killed in flight)",
        ledger.acked.len(),
        c.found,
        c.unacked_found
    );
}

// ---------------------------------------------------------------------------------------
// b. A real full disk: the data dir on a small tmpfs.

/// A tmpfs mounted at `dir`, unmounted when dropped (also when the test fails).
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let o = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output();
        let why = match &o {
            Ok(o) if o.status.success() => None,
            Ok(o) => Some(String::from_utf8_lossy(&o.stderr).to_string()),
            Err(e) => Some(e.to_string()),
        };
        if let Some(why) = why {
            panic!(
                "cannot mount a {size} tmpfs at {}: {why}\nThis test gives the TSD a real full \
                 disk and needs root (CAP_SYS_ADMIN) for `mount -t tmpfs`; run it as root (CI \
                 does). It is never skipped.",
                dir.display()
            );
        }
        Tmpfs {
            dir: dir.to_path_buf(),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

/// Fills the file system of `path` up with a file at `path`, then gives back `headroom`
/// bytes; returns the filler's size.
fn fill_disk(path: &Path, headroom: u64) -> u64 {
    let mut f = std::fs::File::create(path).unwrap();
    for chunk in [1 << 20, 4 << 10, 512] {
        let zeros = vec![0u8; chunk];
        while f.write_all(&zeros).is_ok() {}
    }
    // A short write may have landed part of a chunk: the file's length says.
    let len = f.metadata().unwrap().len();
    let kept = len.saturating_sub(headroom);
    f.set_len(kept).unwrap();
    kept
}

#[test]
fn full_disk_refuses_writes_then_keeps_every_acknowledged_point() {
    const BATCH: u64 = 1000;
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    // Declared before the TSD so that it is unmounted after the TSD is gone.
    let _tmpfs = Tmpfs::mount(&mnt, "12m");
    let data = mnt.join("data");
    let config = write_config(dir.path(), &["tsd.storage.flush_interval = 1000".into()]);
    let point = |k: u64| Pt {
        metric: "trust.full",
        host: format!("h{}", k % 10),
        ts: 1_356_998_400 + (k / 10) as i64,
        value: k as i64,
    };
    let mut ledger = Ledger::default();
    let mut next = 0u64;
    let mut post = |addr: &str, ledger: &mut Ledger| {
        let points: Vec<Pt> = (next * BATCH..(next + 1) * BATCH).map(point).collect();
        next += 1;
        ledger.sent(&points);
        let r = http(addr, "POST", "/api/put?sync", &put_body(&points))
            .unwrap_or_else(|e| panic!("the TSD stopped answering: {e}"));
        if r.status == 204 {
            ledger.acked(&points);
        }
        r
    };
    let tsd = Tsd::start(&data, Some(&config));
    let filler = mnt.join("filler");
    let filled = fill_disk(&filler, 1 << 20);
    eprintln!("filler: {filled} bytes, 1 MiB left");
    // Writes until the disk is full.
    let mut refused = None;
    for _ in 0..2000 {
        let r = post(&tsd.addr, &mut ledger);
        if r.status != 204 {
            refused = Some(r);
            break;
        }
    }
    let refused = refused.unwrap_or_else(|| {
        panic!(
            "2,000 batches accepted on a 12 MiB disk: {}",
            tsd.log_tail()
        )
    });
    let acked_before_full = ledger.acked.len();
    eprintln!("disk full after {acked_before_full} acknowledged points: {refused:?}");
    assert!(
        !(200..300).contains(&refused.status),
        "refusal must not be 2xx: {refused:?}"
    );
    let err: serde_json::Value = serde_json::from_str(&refused.body)
        .unwrap_or_else(|e| panic!("refusal without an error JSON ({e}): {refused:?}"));
    assert!(err["error"]["message"].is_string(), "{refused:?}");
    // The disk stays full over several flushes (the store's writes fail too); batches keep
    // coming (whatever is acknowledged counts).
    let full = Instant::now();
    while full.elapsed() < Duration::from_millis(3500) {
        post(&tsd.addr, &mut ledger);
        std::thread::sleep(Duration::from_millis(250));
    }
    // Space comes back: every batch is acknowledged again.
    std::fs::remove_file(&filler).unwrap();
    for i in 0..30 {
        let r = post(&tsd.addr, &mut ledger);
        assert_eq!(
            r.status,
            204,
            "batch {i} after space came back: {} {}\n{}",
            r.status,
            r.body,
            tsd.log_tail()
        );
    }
    assert!(ledger.acked.len() >= acked_before_full + 30_000);
    let status = tsd.stop();
    eprintln!("graceful stop after the full disk: {status}");
    let end = 1_356_998_400 + (next * BATCH / 10) as i64;
    let tsd = Tsd::start(&data, Some(&config));
    let c = ledger.check(
        &query_points(&tsd.addr, "trust.full", 1_356_998_400, end),
        "after a full disk and a restart, /api/query",
    );
    let second = tsd.stop();
    assert!(second.success(), "{second}");
    assert!(status.success(), "the first graceful stop failed: {status}");
    let s = ledger.check(
        &scan_points(&data, None, "trust.full", 1_356_998_400, end),
        "after a full disk and a restart, scan",
    );
    assert_eq!(c.found, s.found);
    eprintln!(
        "{} acknowledged ({acked_before_full} before the disk filled), {} read back",
        ledger.acked.len(),
        c.found
    );
}

/// A data dir deleted under a running TSD (or its volume unmounted lazily): SIGTERM stops it
/// at once with a non-zero status and the reason, rather than retrying a final flush that
/// cannot succeed, and no empty database is started in the dir's place.
#[test]
fn a_data_dir_deleted_under_a_running_tsd_stops_it_at_once_with_the_reason() {
    // With points buffered the log's next segment cannot be created; without, the store's
    // flush fails and it refuses to reopen: each must say so and not be retried.
    for points in [100, 0] {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let tsd = Tsd::start(&data, None);
        let batch: Vec<Pt> = (0..points)
            .map(|k| Pt {
                metric: "trust.gone",
                host: format!("h{}", k % 4),
                ts: 1_356_998_400 + k,
                value: k,
            })
            .collect();
        if !batch.is_empty() {
            let r = http(&tsd.addr, "POST", "/api/put?sync", &put_body(&batch)).unwrap();
            assert_eq!(r.status, 204, "{r:?}");
        }
        std::fs::remove_dir_all(&data).unwrap();
        let log = Arc::clone(&tsd.log);
        let status = tsd.stop();
        std::thread::sleep(Duration::from_millis(100));
        let log = log.lock().unwrap().join("\n");
        assert!(
            !status.success(),
            "{points} points: a stop that could store nothing succeeded: {log}"
        );
        assert!(
            log.contains("is gone (deleted or unmounted)"),
            "{points} points: {log}"
        );
        assert!(
            !log.contains("final flush failed; trying again"),
            "{points} points: the final flush was retried though the data dir cannot come back: {log}"
        );
        assert!(
            !data.join("store").exists(),
            "an empty database was started"
        );
    }
}

/// A large `/api/put` body costs the TSD about its own size in memory, not the many times
/// its size its points take parsed whole (about twenty: 2 GB for a 100 MB body).
#[test]
fn a_large_put_body_is_stored_without_holding_it_parsed() {
    let dir = tempfile::tempdir().unwrap();
    let tsd = Tsd::start(&dir.path().join("data"), None);
    let points: Vec<Pt> = (0..200_000)
        .map(|k| Pt {
            metric: "trust.bulk",
            host: format!("h{}", k % 50),
            ts: 1_356_998_400 + k / 50,
            value: k,
        })
        .collect();
    let warm = http(
        &tsd.addr,
        "POST",
        "/api/put?sync",
        &put_body(&points[..100]),
    )
    .unwrap();
    assert_eq!(warm.status, 204, "{warm:?}");
    let body = put_body(&points);
    assert!(body.len() > 12 << 20, "{} bytes", body.len());
    let before = tsd.peak_rss();
    let r = http(&tsd.addr, "POST", "/api/put?summary", &body).unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body, r#"{"success":200000,"failed":0}"#);
    let grew = tsd.peak_rss().saturating_sub(before);
    eprintln!(
        "a {} MB body: peak resident memory grew {} MB",
        body.len() >> 20,
        grew >> 20
    );
    assert!(
        grew < 8 * body.len() as u64,
        "a {} byte body grew the peak resident memory by {grew} bytes",
        body.len()
    );
    let stored = query_points(&tsd.addr, "trust.bulk", 1_356_998_400, 1_357_002_400);
    assert_eq!(stored.len(), points.len());
    assert!(tsd.stop().success());
}

// ---------------------------------------------------------------------------------------
// c. Many idle and slow clients, the connection limit, the idle timeout.

/// Raises this process's open-file limit to its hard limit (children inherit it).
fn raise_nofile() {
    let _ = Command::new("prlimit")
        .args([
            "--pid",
            &std::process::id().to_string(),
            "--nofile=unlimited:unlimited",
        ])
        .stderr(Stdio::null())
        .status();
    let hard = Command::new("sh")
        .args(["-c", "ulimit -Hn"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .unwrap_or_default();
    let _ = Command::new("prlimit")
        .args([
            "--pid",
            &std::process::id().to_string(),
            &format!("--nofile={0}:{0}", hard.trim()),
        ])
        .stderr(Stdio::null())
        .status();
}

/// Sends `text` followed by `version` and reads up to the end of `version`'s two-line answer
/// (its first line comes only after every earlier put was acknowledged); returns everything
/// answered, which after puts without errors is just the version.
fn telnet_version(s: &mut TcpStream, text: &str) -> std::io::Result<String> {
    s.write_all(format!("{text}version\n").as_bytes())?;
    let mut answer = Vec::new();
    let mut b = [0u8; 1];
    loop {
        match s.read(&mut b)? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            _ => answer.push(b[0]),
        }
        if b[0] == b'\n' {
            let text = String::from_utf8_lossy(&answer);
            let last = text.trim_end().rsplit('\n').next().unwrap_or("");
            if last.starts_with("Built on ") {
                return Ok(text.to_string());
            }
        }
    }
}

/// Whether the server closed `s` (a read gives end of file or a reset) within `within`.
fn closed_within(s: &mut TcpStream, within: Duration) -> Result<Duration, String> {
    let started = Instant::now();
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(started.elapsed()),
            Ok(n) => return Err(format!("got {:?}", String::from_utf8_lossy(&buf[..n]))),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(format!("still open after {within:?}"));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Ok(started.elapsed()),
        }
    }
}

#[test]
fn idle_and_slow_clients_do_not_stall_others() {
    raise_nofile();
    let dir = tempfile::tempdir().unwrap();
    let tsd = Tsd::start(&dir.path().join("data"), None);
    let mut idle = Vec::new();
    let mut open_error = None;
    for _ in 0..2000 {
        match TcpStream::connect(&tsd.addr) {
            Ok(s) => idle.push(s),
            Err(e) => {
                open_error = Some(e);
                break;
            }
        }
    }
    assert!(
        idle.len() >= 1000,
        "only {} idle connections opened: {open_error:?}",
        idle.len()
    );
    // 50 slow clients: two puts and a `version` each, one byte per socket every 20 ms.
    let base = 1_356_998_400;
    let addr = tsd.addr.clone();
    let slow = std::thread::spawn(move || {
        let mut socks: Vec<(TcpStream, Vec<u8>)> = (0..50)
            .map(|i| {
                let s = TcpStream::connect(&addr).unwrap();
                s.set_nodelay(true).unwrap();
                let text = format!(
                    "put trust.slow {base} {i} host=s{i}\nput trust.slow {} {i} host=s{i}\nversion\n",
                    base + 1
                );
                (s, text.into_bytes())
            })
            .collect();
        let longest = socks.iter().map(|(_, t)| t.len()).max().unwrap();
        for pos in 0..longest {
            for (s, text) in &mut socks {
                if let Some(b) = text.get(pos) {
                    s.write_all(&[*b]).unwrap();
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for (s, _) in &mut socks {
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut line = String::new();
            BufReader::new(s).read_line(&mut line).unwrap();
            assert!(line.starts_with("hourglass "), "slow client got {line:?}");
        }
    });
    // Meanwhile another client's puts and queries answer promptly.
    let mut longest = Duration::ZERO;
    let mut calls = 0;
    let mut k = 0i64;
    while !slow.is_finished() || calls < 20 {
        let points: Vec<Pt> = (0..100)
            .map(|_| {
                k += 1;
                Pt {
                    metric: "trust.busy",
                    host: format!("b{}", k % 4),
                    ts: base + k,
                    value: k,
                }
            })
            .collect();
        let t = Instant::now();
        let r = http(&tsd.addr, "POST", "/api/put", &put_body(&points)).unwrap();
        assert_eq!(r.status, 204, "{}", r.body);
        longest = longest.max(t.elapsed());
        let t = Instant::now();
        let q = query_points(&tsd.addr, "trust.busy", base, base + 100_000);
        longest = longest.max(t.elapsed());
        assert_eq!(q.len() as i64, k);
        calls += 2;
    }
    slow.join().unwrap();
    eprintln!(
        "{} idle + 50 slow connections: {calls} puts and queries, longest {longest:?}",
        idle.len()
    );
    assert!(
        longest < Duration::from_secs(5),
        "a put or query took {longest:?} beside idle and slow clients"
    );
    assert_eq!(
        query_points(&tsd.addr, "trust.slow", base, base + 10).len(),
        100,
        "every slow client's two points"
    );
    drop(idle);
    assert!(tsd.stop().success());
}

#[test]
fn connection_limit_closes_the_excess_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &["tsd.core.connections.limit = 100".into()]);
    let tsd = Tsd::start(&dir.path().join("data"), Some(&config));
    let mut first: Vec<TcpStream> = (0..100)
        .map(|i| {
            let mut s = TcpStream::connect(&tsd.addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let v = telnet_version(&mut s, "")
                .unwrap_or_else(|e| panic!("connection {} of 100 refused: {e}", i + 1));
            assert!(v.starts_with("hourglass "), "{v}");
            s
        })
        .collect();
    for i in 101..=105 {
        let mut s = TcpStream::connect(&tsd.addr).unwrap();
        // The write may already fail (reset); the read must end at once either way.
        let _ = s.write_all(b"version\n");
        let closed = closed_within(&mut s, Duration::from_secs(5));
        assert!(
            closed.is_ok(),
            "connection {i} past a limit of 100: {}",
            closed.unwrap_err()
        );
    }
    for (i, s) in first.iter_mut().enumerate() {
        let v = telnet_version(s, "")
            .unwrap_or_else(|e| panic!("connection {} of 100 lost: {e}", i + 1));
        assert!(v.starts_with("hourglass "), "{v}");
    }
    // One closes: a new one is served again.
    drop(first.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut s = TcpStream::connect(&tsd.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        if telnet_version(&mut s, "").is_ok_and(|v| v.starts_with("hourglass ")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no connection served 5 s after one of 100 closed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(first);
    assert!(tsd.stop().success());
}

#[test]
fn idle_connections_time_out_active_ones_stay() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &["tsd.core.socket.timeout = 1".into()]);
    let tsd = Tsd::start(&dir.path().join("data"), Some(&config));
    let mut active = TcpStream::connect(&tsd.addr).unwrap();
    active
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut idle = TcpStream::connect(&tsd.addr).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert!(
        telnet_version(&mut idle, "")
            .unwrap()
            .starts_with("hourglass ")
    );
    let keep_busy = std::thread::spawn(move || {
        let started = Instant::now();
        let mut n = 0;
        while started.elapsed() < Duration::from_secs(4) {
            let line = telnet_version(
                &mut active,
                &format!("put trust.alive {} {n} host=a\n", 1_356_998_400 + n),
            )
            .unwrap_or_else(|e| {
                panic!(
                    "the active connection was closed after {:?}: {e}",
                    started.elapsed()
                )
            });
            assert!(line.starts_with("hourglass "), "{line}");
            n += 1;
            std::thread::sleep(Duration::from_millis(300));
        }
        n
    });
    let closed = closed_within(&mut idle, Duration::from_secs(5));
    let after = closed.unwrap_or_else(|e| panic!("idle telnet connection with a 1 s timeout: {e}"));
    assert!(
        after >= Duration::from_millis(500),
        "the idle connection was closed after only {after:?}"
    );
    let puts = keep_busy.join().unwrap();
    eprintln!("idle connection closed after {after:?}; the active one made {puts} round trips");
    assert_eq!(
        query_points(&tsd.addr, "trust.alive", 1_356_998_400, 1_356_998_500).len() as i64,
        puts
    );
    assert!(tsd.stop().success());
}

// ---------------------------------------------------------------------------------------
// d. The store stops answering (Bigtable emulator frozen with SIGSTOP).

/// This test's own Bigtable emulator (it gets frozen, so it is not shared), continued and
/// killed when dropped.
struct Emulator {
    child: Child,
    host: String,
}

impl Emulator {
    fn start() -> Emulator {
        let (child, host) = hourglass_store_bigtable::emulator::spawn_own();
        Emulator { child, host }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn frozen_store_bounds_memory_refuses_then_recovers() {
    const BATCH: u64 = 1000;
    let emulator = Emulator::start();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &[
            "tsd.storage.backend = bigtable".into(),
            format!("google.bigtable.emulator.host = {}", emulator.host),
            "google.bigtable.project.id = trust".into(),
            "google.bigtable.instance.id = frozen".into(),
            "google.bigtable.timeout_ms = 2000".into(),
            "tsd.storage.flush_interval = 200".into(),
            "tsd.storage.max_buffer_bytes = 2097152".into(),
        ],
    );
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
    let data = dir.path().join("data");
    let tsd = Tsd::start(&data, Some(&config));
    let point = |k: u64| Pt {
        metric: "trust.frozen",
        host: format!("h{}", k % 10),
        ts: 1_356_998_400 + (k / 10) as i64,
        value: k as i64,
    };
    let mut ledger = Ledger::default();
    let mut next = 0u64;
    let mut post = |addr: &str, ledger: &mut Ledger| {
        let points: Vec<Pt> = (next * BATCH..(next + 1) * BATCH).map(point).collect();
        next += 1;
        ledger.sent(&points);
        let t = Instant::now();
        let r = http(addr, "POST", "/api/put", &put_body(&points))
            .unwrap_or_else(|e| panic!("the TSD stopped answering: {e}"));
        if r.status == 204 {
            ledger.acked(&points);
        }
        (r, t.elapsed())
    };
    // Every series known (UIDs assigned) before the store freezes.
    for _ in 0..5 {
        let (r, _) = post(&tsd.addr, &mut ledger);
        assert_eq!(r.status, 204, "{}", r.body);
    }
    std::thread::sleep(Duration::from_millis(500));
    signal("STOP", emulator.child.id());
    let frozen = Instant::now();
    let mut peak_rss = 0;
    let mut slowest = Duration::ZERO;
    let mut refused = None;
    while frozen.elapsed() < Duration::from_secs(60) {
        let (r, took) = post(&tsd.addr, &mut ledger);
        slowest = slowest.max(took);
        peak_rss = peak_rss.max(tsd.rss());
        if r.status != 204 {
            refused = Some(r);
            break;
        }
    }
    let acked_frozen = ledger.acked.len();
    let refused = refused.unwrap_or_else(|| {
        panic!(
            "{acked_frozen} points acknowledged in 60 s with the store frozen and a 2 MiB \
             budget, never refused; RSS {peak_rss} bytes"
        )
    });
    eprintln!(
        "store frozen: refused after {acked_frozen} acknowledged points, {:?}, slowest put \
         {slowest:?}: {refused:?}",
        frozen.elapsed()
    );
    // More batches while frozen: still refused, memory still bounded.
    for _ in 0..20 {
        let (r, took) = post(&tsd.addr, &mut ledger);
        slowest = slowest.max(took);
        peak_rss = peak_rss.max(tsd.rss());
        assert_ne!(
            r.status, 204,
            "accepted past the budget with the store frozen"
        );
    }
    assert_eq!(
        refused.status, 503,
        "past tsd.storage.max_buffer_bytes /api/put answers 503: {refused:?}"
    );
    let err: serde_json::Value = serde_json::from_str(&refused.body)
        .unwrap_or_else(|e| panic!("refusal without an error JSON ({e}): {refused:?}"));
    assert_eq!(err["error"]["code"], 503, "{refused:?}");
    assert!(
        peak_rss < 300 << 20,
        "RSS reached {} MiB with the store frozen",
        peak_rss >> 20
    );
    assert!(slowest < Duration::from_secs(10), "a put took {slowest:?}");
    let version = Instant::now();
    let r = http(&tsd.addr, "GET", "/api/version", "").unwrap();
    assert_eq!(r.status, 200);
    assert!(version.elapsed() < Duration::from_secs(5));
    // The store comes back: puts are accepted again within 30 s.
    signal("CONT", emulator.child.id());
    let resumed = Instant::now();
    loop {
        let (r, _) = post(&tsd.addr, &mut ledger);
        if r.status == 204 {
            break;
        }
        assert!(
            resumed.elapsed() < Duration::from_secs(30),
            "puts still refused 30 s after the store came back: {r:?}\n{}",
            tsd.log_tail()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let recovered = resumed.elapsed();
    // Five more are accepted; a busy machine may still be flushing what came back, so a
    // 503 (back pressure, nothing stored) is sent again, within 30 s.
    for _ in 0..5 {
        let since = Instant::now();
        loop {
            let (r, _) = post(&tsd.addr, &mut ledger);
            if r.status == 204 {
                break;
            }
            assert_eq!(r.status, 503, "{}", r.body);
            assert!(
                since.elapsed() < Duration::from_secs(30),
                "a put still refused after 30 s: {}",
                r.body
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let end = 1_356_998_400 + (next * BATCH / 10) as i64;
    let c = ledger.check(
        &query_points(&tsd.addr, "trust.frozen", 1_356_998_400, end),
        "after the store came back, /api/query",
    );
    eprintln!(
        "store back: puts accepted after {recovered:?}; {} acknowledged, {} read; peak RSS {} MiB",
        ledger.acked.len(),
        c.found,
        peak_rss >> 20
    );
    assert!(tsd.stop().success());
}

// ---------------------------------------------------------------------------------------
// e. Grouping switched on for a data dir full of rows, the TSD killed while it moves them.

#[test]
fn sigkill_while_rows_move_into_groups_loses_nothing() {
    const HOSTS: u64 = 400;
    const HOURS: i64 = 48;
    const PER_HOUR: i64 = 4;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let plain = write_config(
        dir.path(),
        &["tsd.storage.embedded.group_period = 0".into()],
    );
    let grouped_dir = dir.path().join("grouped");
    std::fs::create_dir_all(&grouped_dir).unwrap();
    let grouped = write_config(
        &grouped_dir,
        &["tsd.storage.embedded.group_period = 3600".into()],
    );
    // Two days ending a day ago: every hour closed, all of it written as rows first.
    let now = now_secs();
    let start = now - now % 3600 - (HOURS + 24) * 3600;
    let mut ledger = Ledger::default();
    let tsd = Tsd::start(&data, Some(&plain));
    let all: Vec<Pt> = (0..HOURS * PER_HOUR)
        .flat_map(|i| {
            (0..HOSTS).map(move |h| Pt {
                metric: "trust.group",
                host: format!("h{h}"),
                ts: start + i * 3600 / PER_HOUR,
                value: i * 1000 + h as i64,
            })
        })
        .collect();
    for batch in all.chunks(2000) {
        ledger.sent(batch);
        let r = http(&tsd.addr, "POST", "/api/put", &put_body(batch)).unwrap();
        assert_eq!(r.status, 204, "{}", r.body);
        ledger.acked(batch);
    }
    assert!(tsd.stop().success());
    // Started with grouping and killed at a random moment once the pass has begun (it runs
    // before the TSD serves), again and again until a start finds nothing left to move or
    // six kills have landed; then started to the end.
    let mut rng = Rng::from_env_or_clock();
    let mut logs = String::new();
    let mut kills_in_pass = 0;
    for cycle in 0..12 {
        let log_path = dir.path().join(format!("start-{cycle}.log"));
        let mut child = common::Tsd(
            common::tsd_command(Some(&grouped), &data)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log_path).unwrap())
                .spawn()
                .unwrap(),
        );
        let began = Instant::now();
        let in_pass = loop {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            if log.contains("moving the rows of closed periods") {
                break true;
            }
            if log.contains("Ready to serve") || began.elapsed() > Duration::from_secs(60) {
                break false;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let wait = if in_pass { rng.below(1500) } else { 0 };
        std::thread::sleep(Duration::from_millis(wait));
        let _ = child.kill();
        child.wait().unwrap();
        let log = std::fs::read_to_string(&log_path).unwrap();
        eprintln!(
            "cycle {cycle}: {}{}",
            if in_pass {
                format!("SIGKILL {wait} ms into the pass")
            } else {
                "nothing left to move".to_string()
            },
            if log.contains("moved into their groups") {
                " (rows had moved)"
            } else {
                ""
            }
        );
        logs.push_str(&log);
        if !in_pass {
            break;
        }
        kills_in_pass += 1;
        if kills_in_pass == 6 {
            break;
        }
    }
    let end = start + HOURS * 3600;
    let tsd = Tsd::start(&data, Some(&grouped));
    logs.push_str(&tsd.log_all());
    let c = ledger.check(
        &query_points(&tsd.addr, "trust.group", start, end),
        "after SIGKILLs while grouping, /api/query",
    );
    assert!(tsd.stop().success());
    let troubles: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("ERROR") || l.contains("WARN"))
        .collect();
    assert!(
        troubles.is_empty(),
        "a start logged trouble:\n{}",
        troubles.join("\n")
    );
    assert!(
        kills_in_pass > 0,
        "no start began moving rows into groups: the test did not exercise the pass; the logs:\n{logs}"
    );
    let s = ledger.check(
        &scan_points(&data, None, "trust.group", start, end),
        "after SIGKILLs while grouping, scan",
    );
    assert_eq!(c.found, s.found, "query and scan disagree");
    assert_eq!(c.found, all.len());
}
