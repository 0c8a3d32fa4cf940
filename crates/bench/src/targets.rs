//! Starting, checking and stopping each server under test, all on loopback.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::proc;

#[derive(Debug)]
pub(crate) enum Target {
    Hourglass(PathBuf),
    /// Hourglass with the tag index on (`tsd.index.enable = true`; off by default until
    /// queries read it), beside `Hourglass` to measure what maintaining it costs (RFC 0007).
    HourglassIndex(PathBuf),
    VictoriaMetrics,
    InfluxDb,
}

#[derive(Debug)]
pub(crate) struct Server {
    child: Child,
    pub(crate) put_addr: String,
    http_addr: String,
}

/// The `tsdb` binary to run: the one given, else the one next to this binary.
pub(crate) fn tsdb_binary(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    Ok(match given {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()?.with_file_name("tsdb"),
    })
}

pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Starts Google's Bigtable emulator on a loopback port of its choosing (`-port 0`, so no
/// other process can take the port between choosing and binding it) and returns it with the
/// `host:port` it prints once listening. Its later output is drained.
pub(crate) fn spawn_emulator(binary: &str) -> anyhow::Result<(Child, String)> {
    let mut child = Command::new(binary)
        .args(["-host", "127.0.0.1", "-port", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| {
            format!("cannot run {binary} (package google-cloud-cli-bigtable-emulator)")
        })?;
    let Some(stdout) = child.stdout.take() else {
        bail!("the emulator's output is not piped");
    };
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
        Ok(Some(addr)) => Ok((child, addr)),
        other => {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "the Bigtable emulator did not say where it listens ({})",
                if other.is_ok() { "it exited" } else { "30 s" }
            )
        }
    }
}

pub(crate) fn wait_port(addr: &str, child: &mut Child) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if TcpStream::connect(addr).is_ok() {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!("server exited before listening: {status}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("server did not listen on {addr} within 60 s")
}

fn get(url: &str) -> anyhow::Result<String> {
    let mut resp = ureq::get(url)
        .call()
        .with_context(|| format!("GET {url}"))?;
    Ok(resp.body_mut().read_to_string()?)
}

impl Target {
    pub(crate) fn parse(name: &str, tsdb: &Path) -> anyhow::Result<Target> {
        Ok(match name {
            "hourglass" => Target::Hourglass(tsdb.to_path_buf()),
            "hourglass-index" => Target::HourglassIndex(tsdb.to_path_buf()),
            "victoriametrics" => Target::VictoriaMetrics,
            "influxdb" => Target::InfluxDb,
            other => bail!("unknown target {other}"),
        })
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            Target::Hourglass(_) => "hourglass",
            Target::HourglassIndex(_) => "hourglass-index",
            Target::VictoriaMetrics => "victoriametrics",
            Target::InfluxDb => "influxdb",
        }
    }

    /// `--config FILE` for a run with the index on or `extra` configuration lines (the file
    /// written in `dir`), else nothing.
    fn hourglass_config(&self, dir: &Path, extra: &str) -> anyhow::Result<Vec<std::ffi::OsString>> {
        let index = matches!(self, Target::HourglassIndex(_));
        if !index && extra.is_empty() {
            return Ok(Vec::new());
        }
        let conf = dir.join("opentsdb.conf");
        let mut text = String::new();
        if index {
            text.push_str("tsd.index.enable = true\n");
        }
        text.push_str(extra);
        std::fs::write(&conf, text)?;
        Ok(vec!["--config".into(), conf.into_os_string()])
    }

    pub(crate) fn start(&self, dir: &Path) -> anyhow::Result<Server> {
        self.start_with(dir, "")
    }

    /// [`Target::start`], Hourglass with `extra` lines of configuration.
    pub(crate) fn start_with(&self, dir: &Path, extra: &str) -> anyhow::Result<Server> {
        let put_port = free_port()?;
        let http_port = free_port()?;
        let put_addr = format!("127.0.0.1:{put_port}");
        let http_addr = match self {
            // One port serves telnet and HTTP.
            Target::Hourglass(_) | Target::HourglassIndex(_) => put_addr.clone(),
            _ => format!("127.0.0.1:{http_port}"),
        };
        let mut child = match self {
            Target::Hourglass(tsdb) | Target::HourglassIndex(tsdb) => Command::new(tsdb)
                .args([
                    "tsd",
                    "--bind",
                    "127.0.0.1",
                    "--auto-metric",
                    "--port",
                    &put_port.to_string(),
                    "--data-dir",
                ])
                .arg(dir.join("data"))
                .args(self.hourglass_config(dir, extra)?)
                .stderr(Stdio::null())
                .spawn()
                .with_context(|| format!("cannot run {}", tsdb.display()))?,
            Target::VictoriaMetrics => Command::new("victoria-metrics")
                .arg(format!("-storageDataPath={}", dir.join("data").display()))
                .arg(format!("-httpListenAddr={http_addr}"))
                .arg(format!("-opentsdbListenAddr={put_addr}"))
                .arg("-retentionPeriod=100y")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("cannot run victoria-metrics (Debian package victoria-metrics)")?,
            Target::InfluxDb => {
                let conf = dir.join("influxdb.conf");
                let mut f = std::fs::File::create(&conf)?;
                let d = dir.display();
                write!(
                    f,
                    "reporting-disabled = true\nbind-address = \"127.0.0.1:{}\"\n[meta]\n  dir = \"{d}/meta\"\n\
                     [data]\n  dir = \"{d}/data\"\n  wal-dir = \"{d}/wal\"\n  query-log-enabled = false\n\
                     [http]\n  bind-address = \"{http_addr}\"\n  log-enabled = false\n[monitor]\n  store-enabled = false\n\
                     [[opentsdb]]\n  enabled = true\n  bind-address = \"{put_addr}\"\n  database = \"opentsdb\"\n  batch-size = 5000\n  batch-timeout = \"1s\"\n",
                    free_port()?
                )?;
                Command::new("influxd")
                    .arg("-config")
                    .arg(&conf)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .context("cannot run influxd (Debian package influxdb)")?
            }
        };
        wait_port(&put_addr, &mut child)?;
        if http_addr != put_addr {
            // The two listeners open one after the other.
            wait_port(&http_addr, &mut child)?;
        }
        Ok(Server {
            child,
            put_addr,
            http_addr,
        })
    }

    /// Bytes the server keeps on disk under `dir` (after [`Target::start`] on it), less what
    /// it rebuilds by itself (VictoriaMetrics's `cache/` directory): allocated, and of data
    /// ([`proc::dir_sizes`]).
    pub(crate) fn disk_bytes(&self, dir: &Path) -> (u64, u64) {
        let all = proc::dir_sizes(dir);
        let cache = match self {
            Target::VictoriaMetrics => proc::dir_sizes(&dir.join("data/cache")),
            _ => (0, 0),
        };
        (all.0.saturating_sub(cache.0), all.1.saturating_sub(cache.1))
    }

    /// Returns once every point sent is durable (Hourglass: acknowledged into its log;
    /// VictoriaMetrics: inserted and force-flushed; InfluxDB: written to its WAL).
    pub(crate) fn wait_durable(
        &self,
        server: &mut Server,
        sockets: &mut [TcpStream],
        points: usize,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(1800);
        match self {
            Target::Hourglass(_) | Target::HourglassIndex(_) => {
                // Commands on a connection run in order: the reply to `version` comes after
                // every earlier put was acknowledged.
                for s in sockets.iter_mut() {
                    s.write_all(b"version\n")?;
                    let mut line = String::new();
                    BufReader::new(s.try_clone()?).read_line(&mut line)?;
                    if !line.starts_with("hourglass") {
                        bail!("unexpected reply: {line}");
                    }
                }
                Ok(())
            }
            Target::VictoriaMetrics => {
                loop {
                    let metrics = get(&format!("http://{}/metrics", server.http_addr))?;
                    let inserted: f64 = metrics
                        .lines()
                        .find(|l| l.starts_with("vm_rows_inserted_total{type=\"opentsdb\"}"))
                        .and_then(|l| l.split_whitespace().last())
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0.0);
                    if inserted as usize >= points {
                        break;
                    }
                    if Instant::now() > deadline {
                        bail!("only {inserted} of {points} points arrived");
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                get(&format!("http://{}/internal/force_flush", server.http_addr))?;
                Ok(())
            }
            Target::InfluxDb => loop {
                let vars: serde_json::Value = serde_json::from_str(&get(&format!(
                    "http://{}/debug/vars",
                    server.http_addr
                ))?)?;
                let written = vars["write"]["values"]["pointReq"].as_u64().unwrap_or(0);
                if written as usize >= points {
                    return Ok(());
                }
                if Instant::now() > deadline {
                    bail!("only {written} of {points} points written");
                }
                std::thread::sleep(Duration::from_millis(20));
            },
        }
    }
}

impl Drop for Server {
    /// A server still running when dropped (a run failed half-way) is killed, not left behind.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Server {
    /// Where the server answers HTTP (Hourglass: the put port).
    pub(crate) fn http_addr(&self) -> &str {
        &self.http_addr
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, wait for a graceful exit, and return the CPU seconds the process used (its
    /// last reading before exit).
    pub(crate) fn stop(&mut self, timeout: Duration) -> anyhow::Result<f64> {
        let pid = self.pid();
        Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()?;
        let deadline = Instant::now() + timeout;
        let mut cpu = proc::cpu_seconds(pid).unwrap_or(0.0);
        loop {
            if self.child.try_wait()?.is_some() {
                return Ok(cpu);
            }
            if let Ok(c) = proc::cpu_seconds(pid) {
                cpu = c;
            }
            if Instant::now() > deadline {
                self.child.kill()?;
                bail!("server did not stop within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
