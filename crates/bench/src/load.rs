//! One measured load, shared by the ingest and real-data benchmarks: start a server on a data
//! dir, send each stream over a connection of its own, wait until every point is durable,
//! stop the server gracefully, and read what it cost.

use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::proc;
use crate::targets::Target;

/// What one load cost the server.
#[derive(Debug)]
pub(crate) struct Loaded {
    /// Seconds from the first byte sent until every point was durable.
    pub(crate) durable_secs: f64,
    /// The server's user + system CPU seconds from the first byte through graceful shutdown.
    pub(crate) cpu_secs: f64,
    /// Peak resident set size once every point was durable.
    pub(crate) peak_rss_bytes: u64,
    /// Bytes allocated on disk after shutdown, less rebuildable caches ([`Target::disk_bytes`]).
    pub(crate) disk_bytes: u64,
    /// Bytes of data in those files, likewise: without block rounding nor unwritten space.
    pub(crate) file_bytes: u64,
}

/// Starts `target` on `dir`, sends `streams` (one connection each, all at once), waits until
/// all `points` are durable, stops it gracefully and measures. The data stays in `dir`, so the
/// caller may start the target on it again.
pub(crate) fn load_and_stop(
    target: &Target,
    dir: &Path,
    streams: &[Vec<u8>],
    points: usize,
) -> anyhow::Result<Loaded> {
    let mut server = target.start(dir)?;
    let cpu_before = proc::cpu_seconds(server.pid())?;
    let started = Instant::now();
    let addr = server.put_addr.clone();
    let mut sockets = std::thread::scope(|scope| {
        let senders: Vec<_> = streams
            .iter()
            .map(|bytes| {
                let addr = &addr;
                scope.spawn(move || -> anyhow::Result<TcpStream> {
                    let mut s = TcpStream::connect(addr)?;
                    s.write_all(bytes)?;
                    Ok(s)
                })
            })
            .collect();
        senders
            .into_iter()
            .map(|s| s.join().map_err(|_| anyhow::anyhow!("sender panicked"))?)
            .collect::<anyhow::Result<Vec<_>>>()
    })?;
    target.wait_durable(&mut server, &mut sockets, points)?;
    let durable_secs = started.elapsed().as_secs_f64();
    let peak_rss_bytes = proc::peak_rss_bytes(server.pid())?;
    drop(sockets);
    let cpu_secs = server.stop(Duration::from_secs(600))? - cpu_before;
    let (disk_bytes, file_bytes) = target.disk_bytes(dir);
    Ok(Loaded {
        durable_secs,
        cpu_secs,
        peak_rss_bytes,
        disk_bytes,
        file_bytes,
    })
}
