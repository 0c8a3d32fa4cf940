//! One log entry: the resolved points of an acknowledged batch.
//!
//! ```text
//! | 0x01 | row count (varint) | rows: key len (varint) key |
//! | point count (varint) | points: row index (varint) | qualifier (4, BE u32) | value bits (varint) |
//! ```

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
    let varint = |pos: &mut usize| read_varint(bytes, pos).ok_or_else(corrupt);
    if bytes.first() != Some(&FORMAT) {
        return Err(corrupt());
    }
    pos += 1;
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

/// Reads a varint at `*pos`, moving past it; `None` when cut short or too long.
pub(crate) fn read_varint(bytes: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*pos)?;
        *pos += 1;
        v |= u64::from(b & 0x7F) << shift;
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use hourglass_core::value::Value;

    /// The example frame of docs/rfcs/0004-write-ahead-log-frames.md, byte for byte.
    #[test]
    fn a_frame_has_its_documented_bytes() {
        let mut b = EntryBuilder::default();
        let key = [0, 0, 1, 0x50, 0xE2, 0x27, 0x00, 0, 0, 1, 0, 0, 1];
        let r = b.add_row(&key);
        b.add_point(
            r,
            Point::new(Qualifier::seconds(123, Value::Int(42).flags()).unwrap(), 42),
        );
        assert_eq!(
            b.finish_framed(1),
            [
                0x17, 0, 0, 0, 0xDB, 0xDF, 0x9B, 0x86, 1, 0, 0, 0, 0, 0, 0, 0, // header
                0x01, 0x01, 0x0D, 0, 0, 1, 0x50, 0xE2, 0x27, 0, 0, 0, 1, 0, 0, 1, // rows
                0x01, 0x00, 0, 0, 0x07, 0xB0, 0x2A, // points
            ]
        );
    }

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

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = decode_entry(&bytes, |_, _| {});
        }
    }
}
