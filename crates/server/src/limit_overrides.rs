//! Per-metric query limits, as OpenTSDB's `tsd.query.limits.overrides.config` gives them: a
//! JSON file of `[{"regex": "...", "byteLimit": N, "dataPointsLimit": N}, ...]`. The first
//! entry whose regex is found in a sub-query's metric name supplies both of its limits (0:
//! none); other metrics keep the defaults. The file is read at start and again every
//! `tsd.query.limits.overrides.interval` milliseconds, so limits change without a restart;
//! a file that cannot be read or parsed keeps the limits last loaded (and is logged).

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hourglass_engine::query::plan::Limits;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    regex: String,
    #[serde(default)]
    byte_limit: u64,
    #[serde(default)]
    data_points_limit: u64,
}

#[derive(Debug)]
struct Override {
    regex: regex::Regex,
    bytes: u64,
    points: u64,
}

#[derive(Debug)]
pub(crate) struct LimitOverrides {
    path: PathBuf,
    interval: Duration,
    loaded: Mutex<(Instant, Vec<Override>)>,
}

/// Reads and checks an overrides file.
fn read(path: &PathBuf) -> Result<Vec<Override>, String> {
    let text = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let entries: Vec<Entry> = serde_json::from_slice(&text)
        .map_err(|e| format!("{} is not a list of overrides: {e}", path.display()))?;
    entries
        .into_iter()
        .map(|e| {
            Ok(Override {
                regex: regex::Regex::new(&e.regex).map_err(|err| {
                    format!("bad regex {:?} in {}: {err}", e.regex, path.display())
                })?,
                bytes: e.byte_limit,
                points: e.data_points_limit,
            })
        })
        .collect()
}

impl LimitOverrides {
    /// Loads the file; a file that cannot be read at start is an error (the TSD does not
    /// start with limits other than the ones configured).
    pub(crate) fn load(path: PathBuf, interval: Duration) -> Result<LimitOverrides, String> {
        let list = read(&path)?;
        Ok(LimitOverrides {
            path,
            interval,
            loaded: Mutex::new((Instant::now(), list)),
        })
    }

    /// `defaults` with the byte and point limits of the first override matching `metric`.
    pub(crate) fn limits_for(&self, metric: &str, defaults: Limits) -> Limits {
        let mut loaded = self
            .loaded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if loaded.0.elapsed() >= self.interval {
            match read(&self.path) {
                Ok(list) => loaded.1 = list,
                Err(e) => tracing::error!(error = %e, "query limit overrides kept as they were"),
            }
            loaded.0 = Instant::now();
        }
        match loaded.1.iter().find(|o| o.regex.is_match(metric)) {
            Some(o) => Limits {
                max_bytes: o.bytes,
                max_points: o.points,
                ..defaults
            },
            None => defaults,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_matching_entry_wins_and_the_file_is_read_again() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("limits.json");
        std::fs::write(
            &path,
            r#"[{"regex":"^sys\\.cpu","byteLimit":10,"dataPointsLimit":20},
                {"regex":"cpu","dataPointsLimit":5}]"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let o =
            LimitOverrides::load(path.clone(), Duration::ZERO).unwrap_or_else(|e| panic!("{e}"));
        let d = Limits {
            max_points: 1000,
            max_bytes: 2000,
            ..Limits::default()
        };
        let l = o.limits_for("sys.cpu.user", d);
        assert_eq!((l.max_bytes, l.max_points), (10, 20));
        let l = o.limits_for("proc.cpu", d);
        assert_eq!((l.max_bytes, l.max_points), (0, 5));
        let l = o.limits_for("mem.free", d);
        assert_eq!((l.max_bytes, l.max_points), (2000, 1000));
        std::fs::write(&path, r#"[{"regex":"mem","dataPointsLimit":7}]"#)
            .unwrap_or_else(|e| panic!("{e}"));
        let l = o.limits_for("mem.free", d);
        assert_eq!(l.max_points, 7, "read again after the interval");
        std::fs::write(&path, "not json").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            o.limits_for("mem.free", d).max_points,
            7,
            "a bad file keeps the last"
        );
        assert!(LimitOverrides::load(dir.path().join("none"), Duration::ZERO).is_err());
    }
}
