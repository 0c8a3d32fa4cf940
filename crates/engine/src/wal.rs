//! The write-ahead log: one entry per acknowledged batch, appended to segment files in the
//! log directory (next to the embedded store's data). An entry is self-contained:
//!
//! ```text
//! | 0x01 | row count (varint) | rows: key len (varint) key |
//! | point count (varint) | points: row index (varint) | qualifier (4, BE u32) | value bits (varint) |
//! ```
//!
//! Segments are deleted once a flush has written all their points to the data table.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use hourglass_core::compact::Point;
use hourglass_core::qualifier::Qualifier;

use crate::{Error, Result};

const FORMAT: u8 = 1;

/// Builds one entry.
#[derive(Debug, Default)]
pub(crate) struct EntryBuilder {
    rows: Vec<u8>,
    row_count: u64,
    points: Vec<u8>,
    point_count: u64,
}

impl EntryBuilder {
    pub(crate) fn add_row(&mut self, key: &[u8]) -> u64 {
        put_varint(&mut self.rows, key.len() as u64);
        self.rows.extend_from_slice(key);
        self.row_count += 1;
        self.row_count - 1
    }

    pub(crate) fn add_point(&mut self, row: u64, point: Point) {
        put_varint(&mut self.points, row);
        self.points
            .extend_from_slice(&point.qualifier.raw().to_be_bytes());
        put_varint(&mut self.points, point.bits);
        self.point_count += 1;
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.point_count == 0
    }

    #[cfg(test)]
    pub(crate) fn finish(self) -> Vec<u8> {
        let mut frame = self.finish_framed(0);
        frame.drain(..16);
        frame
    }

    /// The entry as a complete log frame for `seq` (header included), built in one buffer.
    pub(crate) fn finish_framed(self, seq: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.rows.len() + self.points.len() + 21);
        out.resize(16, 0);
        out.push(FORMAT);
        put_varint(&mut out, self.row_count);
        out.extend_from_slice(&self.rows);
        put_varint(&mut out, self.point_count);
        out.extend_from_slice(&self.points);
        let len = (out.len() - 16) as u32;
        let mut crc = crc32fast::Hasher::new();
        crc.update(&seq.to_le_bytes());
        crc.update(&out[16..]);
        out[0..4].copy_from_slice(&len.to_le_bytes());
        out[4..8].copy_from_slice(&crc.finalize().to_le_bytes());
        out[8..16].copy_from_slice(&seq.to_le_bytes());
        out
    }
}

/// Decodes an entry into (row key, point) pairs.
pub(crate) fn decode_entry(bytes: &[u8], mut each: impl FnMut(&[u8], Point)) -> Result<()> {
    let corrupt = || Error::Corrupt("write-ahead log entry is damaged".into());
    let mut pos = 0usize;
    let byte = |pos: &mut usize| -> Result<u8> {
        let b = *bytes.get(*pos).ok_or_else(corrupt)?;
        *pos += 1;
        Ok(b)
    };
    let varint = |pos: &mut usize| -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = byte(pos)?;
            v |= u64::from(b & 0x7F) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(corrupt())
    };
    if byte(&mut pos)? != FORMAT {
        return Err(corrupt());
    }
    let row_count = varint(&mut pos)?;
    let mut rows: Vec<&[u8]> = Vec::new();
    for _ in 0..row_count {
        let len = varint(&mut pos)? as usize;
        let end = pos
            .checked_add(len)
            .filter(|e| *e <= bytes.len())
            .ok_or_else(corrupt)?;
        rows.push(&bytes[pos..end]);
        pos = end;
    }
    let point_count = varint(&mut pos)?;
    for _ in 0..point_count {
        let row = *rows.get(varint(&mut pos)? as usize).ok_or_else(corrupt)?;
        let q = bytes.get(pos..pos + 4).ok_or_else(corrupt)?;
        pos += 4;
        let qualifier = Qualifier::from_raw(u32::from_be_bytes([q[0], q[1], q[2], q[3]]))?;
        let bits = varint(&mut pos)?;
        each(row, Point::new(qualifier, bits));
    }
    if pos != bytes.len() {
        return Err(corrupt());
    }
    Ok(())
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A logged entry: sequence number and payload.
pub(crate) type Entry = (u64, Vec<u8>);

/// Segment files past this size are closed and a new one started.
const SEGMENT_BYTES: u64 = 64 << 20;

/// The log on disk: numbered segment files of frames
/// `| payload len (4, LE) | crc32 of seq+payload (4, LE) | seq (8, LE) | payload |`.
/// A frame is handed to the OS before the batch is acknowledged; a torn frame at the end of
/// a segment (a crash mid-write) ends its replay.
#[derive(Debug)]
pub(crate) struct Log {
    dir: PathBuf,
    /// Held while the log is open: one process per log directory.
    _lock: File,
    file: File,
    file_id: u64,
    file_bytes: u64,
    /// Last sequence number in the open segment (0: none yet).
    file_last_seq: u64,
    /// Closed segments: (file id, last sequence number).
    closed: Vec<(u64, u64)>,
}

fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:020}.log"))
}

fn io(context: &str, e: std::io::Error) -> Error {
    Error::Internal(format!("write-ahead log: {context}: {e}"))
}

impl Log {
    /// Opens the log in `dir`, returning it and every entry a previous process left, in order.
    pub(crate) fn open(dir: &Path) -> Result<(Log, Vec<Entry>)> {
        std::fs::create_dir_all(dir).map_err(|e| io("cannot create the log dir", e))?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("LOCK"))
            .map_err(|e| io("cannot open the log lock", e))?;
        if lock.try_lock().is_err() {
            return Err(Error::InvalidInput(format!(
                "write-ahead log dir in use: {} belongs to another running TSD (give each TSD its own --data-dir)",
                dir.display()
            )));
        }
        let mut ids: Vec<u64> = std::fs::read_dir(dir)
            .map_err(|e| io("cannot list the log dir", e))?
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".log")?.parse().ok())
            .collect();
        ids.sort_unstable();
        let mut entries = Vec::new();
        let mut closed = Vec::new();
        for id in &ids {
            let bytes = std::fs::read(segment_path(dir, *id))
                .map_err(|e| io("cannot read a segment", e))?;
            let mut last = 0;
            let mut pos = 0usize;
            while let Some((seq, payload, next)) = read_frame(&bytes, pos) {
                entries.push((seq, payload.to_vec()));
                last = seq;
                pos = next;
            }
            if pos != bytes.len() {
                tracing::warn!(
                    segment = id,
                    offset = pos,
                    "write-ahead log segment ends in a torn frame; its tail was never acknowledged"
                );
            }
            closed.push((*id, last));
        }
        let file_id = ids.last().map_or(1, |l| l + 1);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(segment_path(dir, file_id))
            .map_err(|e| io("cannot create a segment", e))?;
        let log = Log {
            dir: dir.to_path_buf(),
            _lock: lock,
            file,
            file_id,
            file_bytes: 0,
            file_last_seq: 0,
            closed,
        };
        Ok((log, entries))
    }

    /// Appends one entry's payload (tests; the write path appends whole frames).
    #[cfg(test)]
    pub(crate) fn append(&mut self, seq: u64, payload: &[u8], sync: bool) -> Result<()> {
        let mut frame = vec![0u8; 16];
        frame.extend_from_slice(payload);
        let mut crc = crc32fast::Hasher::new();
        crc.update(&seq.to_le_bytes());
        crc.update(payload);
        frame[0..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        frame[4..8].copy_from_slice(&crc.finalize().to_le_bytes());
        frame[8..16].copy_from_slice(&seq.to_le_bytes());
        self.append_frame(seq, &frame, sync)
    }

    /// Appends a frame made by [`EntryBuilder::finish_framed`] for `seq`, to OS buffers
    /// (`sync` adds an fsync).
    pub(crate) fn append_frame(&mut self, seq: u64, frame: &[u8], sync: bool) -> Result<()> {
        if self.file_bytes >= SEGMENT_BYTES {
            self.rotate()?;
        }
        self.file
            .write_all(frame)
            .map_err(|e| io("append failed", e))?;
        if sync {
            self.sync()?;
        }
        self.file_bytes += frame.len() as u64;
        self.file_last_seq = seq;
        Ok(())
    }

    pub(crate) fn sync(&self) -> Result<()> {
        self.file.sync_data().map_err(|e| io("fsync failed", e))
    }

    fn rotate(&mut self) -> Result<()> {
        self.sync()?;
        let next = self.file_id + 1;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(segment_path(&self.dir, next))
            .map_err(|e| io("cannot create a segment", e))?;
        self.closed.push((self.file_id, self.file_last_seq));
        self.file = file;
        self.file_id = next;
        self.file_bytes = 0;
        self.file_last_seq = 0;
        Ok(())
    }

    /// Deletes every segment whose entries are all at or below `seq` (flushed).
    pub(crate) fn release(&mut self, seq: u64) -> Result<()> {
        if self.file_bytes > 0 && self.file_last_seq <= seq {
            self.rotate()?;
        }
        let dir = self.dir.clone();
        let mut result = Ok(());
        self.closed.retain(|(id, last)| {
            if *last > seq {
                return true;
            }
            if let Err(e) = std::fs::remove_file(segment_path(&dir, *id))
                && e.kind() != std::io::ErrorKind::NotFound
            {
                result = Err(io("cannot delete a segment", e));
                return true;
            }
            false
        });
        result
    }
}

fn read_frame(bytes: &[u8], pos: usize) -> Option<(u64, &[u8], usize)> {
    let head = bytes.get(pos..pos + 16)?;
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    let seq = u64::from_le_bytes([
        head[8], head[9], head[10], head[11], head[12], head[13], head[14], head[15],
    ]);
    let payload = bytes.get(pos + 16..(pos + 16).checked_add(len)?)?;
    let mut h = crc32fast::Hasher::new();
    h.update(&seq.to_le_bytes());
    h.update(payload);
    (h.finalize() == crc).then_some((seq, payload, pos + 16 + len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hourglass_core::value::Value;

    #[test]
    fn entries_round_trip() {
        let mut b = EntryBuilder::default();
        let r0 = b.add_row(b"row-a");
        let r1 = b.add_row(b"");
        let p =
            |off, v: Value| Point::new(Qualifier::seconds(off, v.flags()).unwrap(), v.to_bits());
        let points = [
            (r0, p(1, Value::Int(-5))),
            (r1, p(2, Value::Double(0.1))),
            (r0, p(3, Value::Int(i64::MAX))),
        ];
        for (r, pt) in points {
            b.add_point(r, pt);
        }
        let bytes = b.finish();
        let mut out = Vec::new();
        decode_entry(&bytes, |k, pt| out.push((k.to_vec(), pt))).unwrap();
        assert_eq!(
            out,
            vec![
                (b"row-a".to_vec(), points[0].1),
                (Vec::new(), points[1].1),
                (b"row-a".to_vec(), points[2].1)
            ]
        );
        for cut in 0..bytes.len() {
            assert!(
                decode_entry(&bytes[..cut], |_, _| {}).is_err(),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn segments_replay_rotate_release_and_survive_torn_tails() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut log, old) = Log::open(dir.path()).unwrap();
            assert!(old.is_empty());
            for seq in 1..=3u64 {
                log.append(seq, &[seq as u8; 10], false).unwrap();
            }
        }
        // A torn frame at the end, as a crash mid-write leaves.
        let first = segment_path(dir.path(), 1);
        let mut f = OpenOptions::new().append(true).open(&first).unwrap();
        f.write_all(&[5, 0, 0, 0, 1, 2]).unwrap();
        drop(f);
        let (mut log, old) = Log::open(dir.path()).unwrap();
        assert_eq!(
            old,
            vec![(1, vec![1; 10]), (2, vec![2; 10]), (3, vec![3; 10])]
        );
        log.append(4, b"four", false).unwrap();
        log.release(3).unwrap();
        assert!(!first.exists(), "a flushed segment is deleted");
        assert!(Log::open(dir.path()).is_err(), "one process per log dir");
        drop(log);
        let (_, old) = Log::open(dir.path()).unwrap();
        assert_eq!(old, vec![(4, b"four".to_vec())]);
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = decode_entry(&bytes, |_, _| {});
        }
    }
}
