//! `hourglass-bench chaos --minutes N`: a real `tsdb tsd` under writers and readers for N
//! minutes while something goes wrong every few seconds, in turn: SIGKILL and restart,
//! SIGTERM and restart, a full disk (the data dir lives on a tmpfs that gets filled up and
//! freed again; needs root, skipped otherwise), and with `--bigtable` a store that stops
//! answering (the emulator frozen with SIGSTOP, then continued).
//!
//! Writers post batches of points with unique times and values and record which were
//! acknowledged (204). Readers count every stored point and check the count never falls
//! below what was acknowledged before the query. At the end every acknowledged point must be
//! read back exactly once with its value, before and after a last restart. Prints cycles,
//! points acknowledged, points lost, duplicates, the TSD's peak RSS and the longest stall (the
//! longest any write or read waited for its answer); exits 1 when a point was lost,
//! duplicated or changed.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};

use crate::proc;

#[derive(Debug, clap::Args)]
pub(crate) struct ChaosArgs {
    /// How long to run, in minutes.
    #[arg(long, default_value_t = 2.0)]
    minutes: f64,
    /// The tsdb binary (default: next to this one).
    #[arg(long)]
    tsdb: Option<PathBuf>,
    /// Working directory (default: a temporary one). The TSD's data goes to DIR/data, or to
    /// a tmpfs mounted at DIR/tmpfs for the full-disk episodes.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Run the TSD on a Bigtable emulator and add paused-store episodes.
    #[arg(long)]
    bigtable: bool,
    /// The emulator binary (with --bigtable).
    #[arg(
        long,
        default_value = "/usr/lib/google-cloud-sdk/platform/bigtable-emulator/cbtemulator"
    )]
    emulator: String,
    /// Size of the tmpfs holding the data dir (full-disk episodes).
    #[arg(long, default_value = "512m")]
    tmpfs_size: String,
    /// Seed of the pauses between disruptions (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
}

const METRIC: &str = "chaos.points";
const SERIES: u64 = 8;
const BATCH: u64 = 200;
const WRITERS: usize = 2;

/// Point `k`: series `h{k % 8}`, its own second, value `k`.
fn point(base: i64, k: u64) -> (u64, i64, i64) {
    (k % SERIES, base + (k / SERIES) as i64, k as i64)
}

fn batch_body(base: i64, b: u64) -> String {
    let mut s = String::with_capacity(BATCH as usize * 80);
    s.push('[');
    for k in b * BATCH..(b + 1) * BATCH {
        let (h, ts, v) = point(base, k);
        if k > b * BATCH {
            s.push(',');
        }
        s.push_str(&format!(
            r#"{{"metric":"{METRIC}","timestamp":{ts},"value":{v},"tags":{{"host":"h{h}"}}}}"#
        ));
    }
    s.push(']');
    s
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Disruption {
    Kill,
    Term,
    FullDisk,
    PausedStore,
}

/// What writers and readers saw.
#[derive(Debug, Default)]
struct Seen {
    longest_stall: Duration,
    longest_stall_what: String,
    /// Writes answered other than 204, by status.
    refused: BTreeMap<u16, u64>,
    /// Reads answered other than 200, by status.
    read_failed: BTreeMap<u16, u64>,
    /// The first answer body of each (write or read, status).
    examples: BTreeMap<(&'static str, u16), String>,
    unreachable: u64,
    reads: u64,
    read_behind: u64,
    read_behind_example: String,
}

#[derive(Debug)]
struct Shared {
    addr: String,
    base: i64,
    stop: AtomicBool,
    next_batch: AtomicU64,
    acked: Mutex<Vec<bool>>,
    acked_batches: AtomicU64,
    phase: Mutex<String>,
    seen: Mutex<Seen>,
    pid: AtomicU32,
    peak_rss: AtomicU64,
    agent: ureq::Agent,
}

impl Shared {
    fn stall(&self, took: Duration, what: &str) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if took > seen.longest_stall {
            seen.longest_stall = took;
            let phase = self.phase.lock().unwrap_or_else(|e| e.into_inner()).clone();
            seen.longest_stall_what = format!("{what} ({phase})");
        }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_phase(&self, phase: &str) {
        *self.phase.lock().unwrap_or_else(|e| e.into_inner()) = phase.to_string();
    }

    /// One request: status and body, or None when the TSD could not be reached.
    fn request(&self, post: Option<&str>, path: &str) -> Option<(u16, String)> {
        let url = format!("http://{}{path}", self.addr);
        let started = Instant::now();
        let resp = match post {
            Some(body) => self
                .agent
                .post(&url)
                .header("Content-Type", "application/json")
                .send(body),
            None => self.agent.get(&url).call(),
        };
        let out = resp.ok().and_then(|mut r| {
            let status = r.status().as_u16();
            let body = r
                .body_mut()
                .with_config()
                .limit(1 << 31)
                .read_to_string()
                .ok()?;
            Some((status, body))
        });
        let took = started.elapsed();
        self.stall(took, if post.is_some() { "write" } else { "read" });
        if out.is_none() {
            self.seen().unreachable += 1;
        }
        out
    }
}

fn writer(shared: &Shared) {
    while !shared.stop.load(Ordering::Relaxed) {
        let b = shared.next_batch.fetch_add(1, Ordering::Relaxed);
        match shared.request(Some(&batch_body(shared.base, b)), "/api/put") {
            Some((204, _)) => {
                let mut acked = shared.acked.lock().unwrap_or_else(|e| e.into_inner());
                if acked.len() <= b as usize {
                    acked.resize(b as usize + 1, false);
                }
                acked[b as usize] = true;
                shared.acked_batches.fetch_add(1, Ordering::Relaxed);
                drop(acked);
                std::thread::sleep(Duration::from_millis(40));
            }
            Some((status, body)) => {
                let mut seen = shared.seen();
                *seen.refused.entry(status).or_default() += 1;
                seen.examples
                    .entry(("write", status))
                    .or_insert_with(|| body.chars().take(300).collect());
                drop(seen);
                std::thread::sleep(Duration::from_millis(100));
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Counts every stored point (`sum:0all-count`) and checks the count is at least what was
/// acknowledged before the query was sent.
fn reader(shared: &Shared) {
    let far = shared.base + 100 * 86_400 * 365;
    let path = format!(
        "/api/query?start={}&end={far}&m=sum:0all-count:{METRIC}",
        shared.base
    );
    while !shared.stop.load(Ordering::Relaxed) {
        let acked = shared.acked_batches.load(Ordering::Relaxed) * BATCH;
        if acked == 0 {
            // Nothing written yet: the metric does not exist.
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        if let Some((status, body)) = shared.request(None, &path) {
            let count = (status == 200)
                .then(|| serde_json::from_str::<serde_json::Value>(&body).ok())
                .flatten()
                .and_then(|v| {
                    let dps = v.get(0)?.get("dps")?.as_object()?.clone();
                    Some(
                        dps.values()
                            .filter_map(serde_json::Value::as_f64)
                            .sum::<f64>(),
                    )
                })
                .unwrap_or(0.0);
            let mut seen = shared.seen();
            seen.reads += 1;
            if status == 200 && (count as u64) < acked {
                seen.read_behind += 1;
                seen.read_behind_example =
                    format!("counted {count} points with {acked} acknowledged before the query");
            } else if status != 200 {
                *seen.read_failed.entry(status).or_default() += 1;
                seen.examples
                    .entry(("read", status))
                    .or_insert_with(|| body.chars().take(300).collect());
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Peak RSS of whichever TSD is running, from its VmHWM every 200 ms.
fn sampler(shared: &Shared) {
    while !shared.stop.load(Ordering::Relaxed) {
        let pid = shared.pid.load(Ordering::Relaxed);
        if pid != 0
            && let Ok(hwm) = proc::peak_rss_bytes(pid)
        {
            shared.peak_rss.fetch_max(hwm, Ordering::Relaxed);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The TSD process and the tail of its log.
struct Tsd {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl std::fmt::Debug for Tsd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tsd({})", self.child.id())
    }
}

impl Tsd {
    fn start(tsdb: &Path, data: &Path, config: &Path, port: u16) -> anyhow::Result<Tsd> {
        let mut last_err = None;
        // The port may still be held for a moment after a kill.
        for _ in 0..20 {
            match Tsd::try_start(tsdb, data, config, port) {
                Ok(t) => return Ok(t),
                Err(e) => last_err = Some(e),
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        Err(last_err.unwrap_or_else(|| anyhow::anyhow!("tsd did not start")))
    }

    fn try_start(tsdb: &Path, data: &Path, config: &Path, port: u16) -> anyhow::Result<Tsd> {
        let mut child = Command::new(tsdb)
            .args(["tsd", "--bind", "127.0.0.1", "--auto-metric", "--port"])
            .arg(port.to_string())
            .arg("--data-dir")
            .arg(data)
            .arg("--config")
            .arg(config)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run {}", tsdb.display()))?;
        let stderr = child.stderr.take().context("no stderr")?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let keep = Arc::clone(&log);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("Ready to serve on ")
                    && let Some(t) = tx.take()
                {
                    let _ = t.send(());
                }
                let mut l = keep.lock().unwrap_or_else(|e| e.into_inner());
                if l.len() >= 40 {
                    l.remove(0);
                }
                l.push(line);
            }
        });
        if rx.recv_timeout(Duration::from_secs(600)).is_err() {
            let _ = child.kill();
            let status = child.wait()?;
            std::thread::sleep(Duration::from_millis(100));
            bail!(
                "tsd did not start ({status}): {}",
                log.lock().unwrap_or_else(|e| e.into_inner()).join("\n")
            );
        }
        Ok(Tsd { child, log })
    }

    fn log_tail(&self) -> String {
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .join("\n")
    }

    /// SIGTERM; the exit status and the log's last line.
    fn term(mut self) -> anyhow::Result<(std::process::ExitStatus, String)> {
        signal("TERM", self.child.id())?;
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            if let Some(s) = self.child.try_wait()? {
                // Let the log reader take the last lines.
                std::thread::sleep(Duration::from_millis(100));
                let last = self
                    .log_tail()
                    .lines()
                    .last()
                    .unwrap_or_default()
                    .to_string();
                return Ok((s, last));
            }
            if Instant::now() > deadline {
                self.child.kill()?;
                bail!("tsd did not stop within 300 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill9(mut self) -> anyhow::Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
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

fn signal(name: &str, pid: u32) -> anyhow::Result<()> {
    let ok = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()?
        .success();
    if !ok {
        bail!("kill -{name} {pid} failed");
    }
    Ok(())
}

/// A tmpfs, unmounted when dropped.
#[derive(Debug)]
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Result<Tmpfs, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let o = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| e.to_string())?;
        if !o.status.success() {
            return Err(String::from_utf8_lossy(&o.stderr).trim().to_string());
        }
        Ok(Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

/// Fills the file system with a file at `path` until writes fail, then gives `headroom`
/// bytes back.
fn fill_disk(path: &Path, headroom: u64) -> anyhow::Result<()> {
    let mut f = std::fs::File::create(path)?;
    for chunk in [8 << 20, 64 << 10, 512] {
        let zeros = vec![0u8; chunk];
        while f.write_all(&zeros).is_ok() {}
    }
    let len = f.metadata()?.len();
    f.set_len(len.saturating_sub(headroom))?;
    Ok(())
}

/// The emulator, continued and stopped when dropped.
#[derive(Debug)]
struct Emulator {
    child: Child,
    host: String,
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = signal("CONT", self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Every point read back through `/api/query`, one series at a time, checked against what
/// was acknowledged: (points read, lost, duplicated, wrong or never sent).
fn verify(shared: &Shared) -> anyhow::Result<(u64, u64, u64, u64)> {
    let sent = shared.next_batch.load(Ordering::Relaxed) * BATCH;
    let mut seen = vec![0u8; sent as usize];
    let (mut read, mut wrong) = (0u64, 0u64);
    let far = shared.base + 100 * 86_400 * 365;
    for h in 0..SERIES {
        let path = format!(
            "/api/query?start={}&end={far}&m=none:{METRIC}{{host=h{h}}}&arrays",
            shared.base
        );
        let Some((200, body)) = shared.request(None, &path) else {
            bail!("the verification query for h{h} failed");
        };
        let v: serde_json::Value = serde_json::from_str(&body)?;
        for series in v.as_array().context("query answer")? {
            for dp in series["dps"].as_array().context("dps")? {
                read += 1;
                let (ts, value) = (dp[0].as_i64().unwrap_or(-1), dp[1].as_i64());
                let k = (ts - shared.base) * SERIES as i64 + h as i64;
                if k < 0 || k as u64 >= sent || value != Some(k) {
                    wrong += 1;
                    continue;
                }
                seen[k as usize] = seen[k as usize].saturating_add(1);
            }
        }
    }
    let acked = shared.acked.lock().unwrap_or_else(|e| e.into_inner());
    let mut lost = 0;
    let mut dups = 0;
    for (k, n) in seen.iter().enumerate() {
        let b = k as u64 / BATCH;
        if *n == 0 && acked.get(b as usize).copied().unwrap_or(false) {
            lost += 1;
        }
        if *n > 1 {
            dups += u64::from(*n - 1);
        }
    }
    Ok((read, lost, dups, wrong))
}

pub(crate) fn run(args: &ChaosArgs) -> anyhow::Result<()> {
    let tsdb = crate::targets::tsdb_binary(args.tsdb.as_deref())?;
    let temp = tempfile::tempdir()?;
    let work = args
        .data_dir
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    std::fs::create_dir_all(&work)?;
    let mut kinds = vec![Disruption::Kill, Disruption::Term];
    let tmpfs = match Tmpfs::mount(&work.join("tmpfs"), &args.tmpfs_size) {
        Ok(t) => {
            kinds.push(Disruption::FullDisk);
            Some(t)
        }
        Err(e) => {
            println!("note: no full-disk episodes (mounting a tmpfs needs root): {e}");
            None
        }
    };
    let data = match &tmpfs {
        Some(t) => t.0.join("data"),
        None => work.join("data"),
    };
    let mut config = vec![
        "tsd.storage.flush_interval = 500".to_string(),
        "tsd.storage.max_buffered_points = 50000".to_string(),
    ];
    let emulator = if args.bigtable {
        kinds.push(Disruption::PausedStore);
        let (child, host) = crate::targets::spawn_emulator(&args.emulator)?;
        config.extend([
            "tsd.storage.backend = bigtable".to_string(),
            format!("google.bigtable.emulator.host = {host}"),
            "google.bigtable.project.id = chaos".to_string(),
            "google.bigtable.instance.id = chaos".to_string(),
            "google.bigtable.timeout_ms = 2000".to_string(),
            "tsd.storage.max_buffer_bytes = 8388608".to_string(),
        ]);
        Some(Emulator { child, host })
    } else {
        None
    };
    let config_path = work.join("chaos.conf");
    std::fs::write(&config_path, config.join("\n") + "\n")?;
    if let Some(e) = &emulator {
        let created = Command::new(&tsdb)
            .args(["create-tables", "--config"])
            .arg(&config_path)
            .arg("--data-dir")
            .arg(work.join("admin"))
            .output()?;
        if !created.status.success() {
            bail!(
                "create-tables on {} failed: {}",
                e.host,
                String::from_utf8_lossy(&created.stderr)
            );
        }
    }
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs() as i64;
    let port = free_port()?;
    let shared = Arc::new(Shared {
        addr: format!("127.0.0.1:{port}"),
        // Past hours: every flush compacts the rows it touches.
        base: now - now % 3600 - 72 * 3600,
        stop: AtomicBool::new(false),
        next_batch: AtomicU64::new(0),
        acked: Mutex::new(Vec::new()),
        acked_batches: AtomicU64::new(0),
        phase: Mutex::new("start".into()),
        seen: Mutex::new(Seen::default()),
        pid: AtomicU32::new(0),
        peak_rss: AtomicU64::new(0),
        agent: ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(120)))
            .http_status_as_error(false)
            .build()
            .into(),
    });
    let mut seed = args.seed.unwrap_or_else(|| {
        u64::from(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(1),
        )
    });
    println!(
        "chaos for {} min: disruptions {kinds:?}, seed {seed}, data in {}",
        args.minutes,
        data.display()
    );
    let mut rand = move |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };

    let first = Tsd::start(&tsdb, &data, &config_path, port)?;
    shared.pid.store(first.child.id(), Ordering::Relaxed);
    let mut tsd = Some(first);
    let mut threads = Vec::new();
    for _ in 0..WRITERS {
        let s = Arc::clone(&shared);
        threads.push(std::thread::spawn(move || writer(&s)));
    }
    let s = Arc::clone(&shared);
    threads.push(std::thread::spawn(move || reader(&s)));
    let s = Arc::clone(&shared);
    threads.push(std::thread::spawn(move || sampler(&s)));

    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(args.minutes * 60.0);
    let mut cycles = 0u64;
    let mut unclean_exits = Vec::new();
    let mut longest_restart = Duration::ZERO;
    let mut restart = |shared: &Shared| -> anyhow::Result<Option<Tsd>> {
        shared.set_phase("restart");
        let t = Instant::now();
        let new = Tsd::start(&tsdb, &data, &config_path, port)?;
        longest_restart = longest_restart.max(t.elapsed());
        shared.pid.store(new.child.id(), Ordering::Relaxed);
        Ok(Some(new))
    };
    let mut stop = |tsd: &mut Option<Tsd>, shared: &Shared, what: &str| -> anyhow::Result<()> {
        shared.pid.store(0, Ordering::Relaxed);
        let (status, last) = tsd.take().context("no tsd running")?.term()?;
        if !status.success() {
            unclean_exits.push(format!("{what}: {status}: {last}"));
        }
        Ok(())
    };
    while Instant::now() < deadline {
        let kind = kinds[cycles as usize % kinds.len()];
        shared.set_phase("steady");
        std::thread::sleep(Duration::from_millis(2000 + rand(4000)));
        shared.set_phase(&format!("{kind:?}"));
        match kind {
            Disruption::Kill => {
                shared.pid.store(0, Ordering::Relaxed);
                tsd.take().context("no tsd running")?.kill9()?;
                tsd = restart(&shared)?;
            }
            Disruption::Term => {
                stop(&mut tsd, &shared, &format!("cycle {}", cycles + 1))?;
                tsd = restart(&shared)?;
            }
            Disruption::FullDisk => {
                let filler = data.with_file_name("filler");
                fill_disk(&filler, 64 << 10)?;
                std::thread::sleep(Duration::from_secs(3));
                std::fs::remove_file(&filler)?;
            }
            Disruption::PausedStore => {
                if let Some(e) = &emulator {
                    signal("STOP", e.child.id())?;
                    std::thread::sleep(Duration::from_secs(5));
                    signal("CONT", e.child.id())?;
                }
            }
        }
        cycles += 1;
        println!(
            "cycle {cycles} ({kind:?}) at {:.0} s: {} points acknowledged",
            started.elapsed().as_secs_f64(),
            shared.acked_batches.load(Ordering::Relaxed) * BATCH
        );
    }
    shared.stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    shared.set_phase("verify");
    let live = verify(&shared)?;
    stop(&mut tsd, &shared, "stop before the last restart")?;
    tsd = restart(&shared)?;
    shared.set_phase("verify after restart");
    let restarted = verify(&shared)?;
    if let Some(t) = &tsd
        && let Ok(hwm) = proc::peak_rss_bytes(t.child.id())
    {
        shared.peak_rss.fetch_max(hwm, Ordering::Relaxed);
    }
    stop(&mut tsd, &shared, "last stop")?;
    drop(emulator);
    drop(tmpfs);

    let acked = shared.acked_batches.load(Ordering::Relaxed) * BATCH;
    let sent = shared.next_batch.load(Ordering::Relaxed) * BATCH;
    let seen = shared.seen();
    let lost = live.1.max(restarted.1);
    let dups = live.2.max(restarted.2);
    let wrong = live.3.max(restarted.3);
    println!(
        "\ncycles: {cycles} in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    println!("points acknowledged: {acked} of {sent} sent");
    println!(
        "points read back: {} live, {} after a restart",
        live.0, restarted.0
    );
    println!("points lost: {lost}");
    println!("duplicates seen: {dups}");
    println!("wrong or unknown points: {wrong}");
    println!(
        "reads: {}, counts behind acknowledged writes: {}{}",
        seen.reads,
        seen.read_behind,
        if seen.read_behind > 0 {
            format!(" (e.g. {})", seen.read_behind_example)
        } else {
            String::new()
        }
    );
    println!("writes refused, by status: {:?}", seen.refused);
    println!("reads failed, by status: {:?}", seen.read_failed);
    for ((what, status), body) in &seen.examples {
        println!("  first {what} answered {status}: {body}");
    }
    println!("requests that found no TSD: {}", seen.unreachable);
    println!(
        "peak RSS of the TSD: {:.0} MiB",
        shared.peak_rss.load(Ordering::Relaxed) as f64 / f64::from(1 << 20)
    );
    println!(
        "longest stall: {:.2} s ({})",
        seen.longest_stall.as_secs_f64(),
        seen.longest_stall_what
    );
    println!(
        "longest restart (log replay included): {:.2} s",
        longest_restart.as_secs_f64()
    );
    println!(
        "unclean exits on SIGTERM: {}{}",
        unclean_exits.len(),
        unclean_exits
            .iter()
            .map(|u| format!("\n  {u}"))
            .collect::<String>()
    );
    if lost > 0 || dups > 0 || wrong > 0 || seen.read_behind > 0 {
        println!("FAILED: acknowledged points were lost, duplicated, changed or unreadable");
        std::process::exit(1);
    }
    Ok(())
}
