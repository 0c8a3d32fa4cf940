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

/// Bytes allocated on disk by every file under `dir` (as `du`: preallocated but unwritten
/// space does not count).
pub(crate) fn dir_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}
