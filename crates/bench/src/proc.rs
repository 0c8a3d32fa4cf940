//! Process and disk measurements from /proc and the file system.

use std::path::Path;

/// User + system CPU seconds of a process so far.
pub(crate) fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let after = stat.rsplit_once(')').map(|(_, a)| a).unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: f64 = fields.get(11).and_then(|f| f.parse().ok()).unwrap_or(0.0);
    let stime: f64 = fields.get(12).and_then(|f| f.parse().ok()).unwrap_or(0.0);
    Ok((utime + stime) / clock_ticks())
}

/// Bytes the process caused to be written to storage so far (`write_bytes` of
/// `/proc/PID/io`: its own writes, its threads' included, as the block layer counts them).
pub(crate) fn written_bytes(pid: u32) -> anyhow::Result<u64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io"))?;
    Ok(io
        .lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0))
}

/// Waits until the process uses under 5% of a core over half a second (background merges and
/// compactions after a start are done), at most `limit`; returns whether it went idle.
pub(crate) fn wait_idle(pid: u32, limit: std::time::Duration) -> anyhow::Result<bool> {
    let deadline = std::time::Instant::now() + limit;
    let window = std::time::Duration::from_millis(500);
    let mut before = cpu_seconds(pid)?;
    while std::time::Instant::now() < deadline {
        std::thread::sleep(window);
        let now = cpu_seconds(pid)?;
        if now - before < 0.05 * window.as_secs_f64() {
            return Ok(true);
        }
        before = now;
    }
    Ok(false)
}

fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// Peak resident set size (VmHWM) in bytes.
pub(crate) fn peak_rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0);
    Ok(kb * 1024)
}

/// (bytes allocated, bytes of data) of `dir` and everything under it. Allocated is what `du`
/// counts (directories included; preallocated but unwritten space does not count). Data is
/// each file's length or allocation, whichever is less: its contents without the rounding up
/// to whole blocks and without unwritten (sparse) space.
pub(crate) fn dir_sizes(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return (0, 0);
    };
    let mut sizes = (meta.blocks() * 512, 0);
    if !meta.is_dir() {
        return (sizes.0, sizes.0.min(meta.len()));
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return sizes;
    };
    for e in entries.flatten() {
        let (allocated, apparent) = dir_sizes(&e.path());
        sizes.0 += allocated;
        sizes.1 += apparent;
    }
    sizes
}
