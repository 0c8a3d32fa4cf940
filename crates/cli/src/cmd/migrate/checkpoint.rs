//! The checkpoint file of `tsdb migrate`: a header naming the migration, then one line per
//! unit of work done (a metric's chunk of points, the global annotations, a metric's meta),
//! each appended in one write and synced before the next unit is counted done. A last line
//! without its newline (a crash mid-write) is not a unit done.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use parking_lot::Mutex;

const MAGIC: &str = "# tsdb migrate checkpoint 1";

/// What a migration is: resuming one needs the same source, range words and chunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) from: String,
    pub(crate) start_arg: String,
    pub(crate) end_arg: String,
    pub(crate) chunk_hours: u32,
    /// The range the words meant when the migration began (ms).
    pub(crate) start_ms: i64,
    pub(crate) end_ms: i64,
}

impl Header {
    fn line(&self) -> String {
        format!(
            "{MAGIC}\tfrom={}\tstart_arg={}\tend_arg={}\tchunk_hours={}\tstart_ms={}\tend_ms={}\n",
            self.from, self.start_arg, self.end_arg, self.chunk_hours, self.start_ms, self.end_ms
        )
    }

    fn parse(line: &str) -> Option<Header> {
        let mut fields = line.split('\t');
        if fields.next()? != MAGIC {
            return None;
        }
        let mut get = |key: &str| {
            fields
                .next()
                .and_then(|f| f.strip_prefix(key))
                .and_then(|f| f.strip_prefix('='))
                .map(str::to_string)
        };
        Some(Header {
            from: get("from")?,
            start_arg: get("start_arg")?,
            end_arg: get("end_arg")?,
            chunk_hours: get("chunk_hours")?.parse().ok()?,
            start_ms: get("start_ms")?.parse().ok()?,
            end_ms: get("end_ms")?.parse().ok()?,
        })
    }

    fn same_migration(&self, other: &Header) -> bool {
        self.from == other.from
            && self.start_arg == other.start_arg
            && self.end_arg == other.end_arg
            && self.chunk_hours == other.chunk_hours
    }
}

/// An open checkpoint: the units done so far, and the file new ones go to.
#[derive(Debug)]
pub(crate) struct Checkpoint {
    path: PathBuf,
    file: Mutex<File>,
    done: HashSet<String>,
}

impl Checkpoint {
    /// Opens `path` (a migration resumed: its header must name the same migration; the
    /// returned header holds the range resolved when it began) or creates it with `header`.
    pub(crate) fn open(path: &Path, header: Header) -> anyhow::Result<(Checkpoint, Header)> {
        let existing = match std::fs::read(path) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                return Err(e).with_context(|| format!("cannot read {}", path.display()));
            }
        };
        let (header, done) = match existing {
            Some(bytes) if !bytes.is_empty() => {
                let text = String::from_utf8_lossy(&bytes);
                let mut lines = text.split_inclusive('\n');
                let first = lines.next().unwrap_or_default();
                let stored = Header::parse(first.trim_end_matches('\n')).with_context(|| {
                    format!("{} is not a checkpoint of tsdb migrate", path.display())
                })?;
                if !stored.same_migration(&header) {
                    anyhow::bail!(
                        "the checkpoint {} was written for another migration (--from {} \
                         --start {:?} --end {:?} --chunk-hours {}): resume with the same \
                         flags, or give another checkpoint file",
                        path.display(),
                        stored.from,
                        stored.start_arg,
                        stored.end_arg,
                        stored.chunk_hours
                    );
                }
                let done = lines
                    .filter(|l| l.ends_with('\n'))
                    .map(|l| l.trim_end_matches('\n').to_string())
                    .collect();
                (stored, done)
            }
            _ => {
                let mut file = File::create(path)
                    .with_context(|| format!("cannot create {}", path.display()))?;
                file.write_all(header.line().as_bytes())?;
                file.sync_all()?;
                (header, HashSet::new())
            }
        };
        let file = OpenOptions::new()
            .append(true)
            .open(path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        // A torn last line (no newline) is cut off, so it never reads as a unit done.
        let bytes = std::fs::read(path)?;
        if bytes.last() != Some(&b'\n') {
            let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            file.set_len(whole as u64)?;
            file.sync_all()?;
        }
        Ok((
            Checkpoint {
                path: path.to_path_buf(),
                file: Mutex::new(file),
                done,
            },
            header,
        ))
    }

    pub(crate) fn is_done(&self, unit: &str) -> bool {
        self.done.contains(unit)
    }

    pub(crate) fn done_count(&self) -> usize {
        self.done.len()
    }

    /// Records a unit done: one write of its line, then a sync.
    pub(crate) fn record(&self, unit: &str) -> anyhow::Result<()> {
        let mut file = self.file.lock();
        file.write_all(format!("{unit}\n").as_bytes())
            .and_then(|()| file.sync_data())
            .with_context(|| format!("cannot write {}", self.path.display()))
    }
}

/// A metric's chunk of points, as the checkpoint names it.
pub(crate) fn points_unit(metric: &str, chunk_start_ms: i64) -> String {
    format!("points\t{metric}\t{chunk_start_ms}")
}

/// A metric's UID and series meta.
pub(crate) fn meta_unit(metric: &str) -> String {
    format!("meta\t{metric}")
}

/// The global annotations of the range.
pub(crate) const GLOBAL_NOTES_UNIT: &str = "global-annotations";

#[cfg(test)]
mod tests {
    use super::*;

    fn header(start_ms: i64) -> Header {
        Header {
            from: "http://a:4242".into(),
            start_arg: "1h-ago".into(),
            end_arg: String::new(),
            chunk_hours: 6,
            start_ms,
            end_ms: start_ms + 3_600_000,
        }
    }

    #[test]
    fn a_resumed_checkpoint_keeps_its_range_and_units_and_drops_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cp");
        let (cp, h) = Checkpoint::open(&path, header(1_000)).unwrap();
        assert_eq!(h.start_ms, 1_000);
        cp.record(&points_unit("m", 0)).unwrap();
        drop(cp);
        // A crash in the middle of a line.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"points\tm\t216").unwrap();
        drop(f);
        // Resumed later: "1h-ago" now means another time, the stored range wins.
        let (cp, h) = Checkpoint::open(&path, header(9_000)).unwrap();
        assert_eq!(h.start_ms, 1_000);
        assert!(cp.is_done(&points_unit("m", 0)));
        assert!(!cp.is_done("points\tm\t216"));
        assert_eq!(cp.done_count(), 1);
        cp.record(&points_unit("m", 21_600_000)).unwrap();
        drop(cp);
        let (cp, _) = Checkpoint::open(&path, header(9_000)).unwrap();
        assert!(cp.is_done(&points_unit("m", 21_600_000)));
        assert_eq!(cp.done_count(), 2);
        let mut other = header(1_000);
        other.chunk_hours = 1;
        let err = Checkpoint::open(&path, other).unwrap_err().to_string();
        assert!(err.contains("another migration"), "{err}");
    }
}
