//! One log entry: the resolved points of an acknowledged batch (RFC 0004).
//!
//! Written as format `0x02`, where a series' row key template is logged once per segment
//! and entries refer to it by the writer's series id:
//!
//! ```text
//! | 0x02 | definition count (varint) | definitions: | series (varint) | key len (varint) | template key |
//! | run count (varint) | runs: | series (varint) | base hour delta (zigzag varint) | point count (varint) | points... |
//! point: | qualifier (varint of Qualifier::raw) | value (the qualifier's value length, BE) |
//! ```
//!
//! A template key is the row key with its base hour zeroed; a run is consecutive points of
//! one row; the first run's base hour delta is from 0, each later one from the run before.
//! Format `0x01` (every row key in full in each entry) is still read:
//!
//! ```text
//! | 0x01 | row count (varint) | rows: key len (varint) key |
//! | point count (varint) | points: row index (varint) | qualifier (4, BE u32) | value bits (varint) |
//! ```

use std::collections::HashMap;

use hourglass_core::compact::Point;
use hourglass_core::qualifier::Qualifier;

use crate::{Error, Result};

const FORMAT_V1: u8 = 1;
const FORMAT: u8 = 2;

/// Builds one entry.
#[derive(Debug, Default)]
pub(crate) struct EntryBuilder {
    definitions: Vec<u8>,
    definition_count: u64,
    runs: Vec<u8>,
    run_count: u64,
    last_base: u32,
}

impl EntryBuilder {
    /// Logs a series' template key (its row key with the base hour zeroed) under `series`,
    /// for this entry and the later entries of the same segment.
    pub(crate) fn define(&mut self, series: u32, template: &[u8]) {
        put_varint(&mut self.definitions, u64::from(series));
        put_varint(&mut self.definitions, template.len() as u64);
        self.definitions.extend_from_slice(template);
        self.definition_count += 1;
    }

    /// Points of one row: the series' template with `base` as its base hour.
    pub(crate) fn add_run(
        &mut self,
        series: u32,
        base: u32,
        points: impl ExactSizeIterator<Item = Point>,
    ) {
        put_varint(&mut self.runs, u64::from(series));
        let delta = i64::from(base) - i64::from(self.last_base);
        put_varint(&mut self.runs, ((delta << 1) ^ (delta >> 63)) as u64);
        self.last_base = base;
        put_varint(&mut self.runs, points.len() as u64);
        for p in points {
            put_varint(&mut self.runs, u64::from(p.qualifier.raw()));
            let len = p.qualifier.value_len().min(8);
            self.runs
                .extend_from_slice(&p.bits.to_be_bytes()[8 - len..]);
        }
        self.run_count += 1;
    }

    #[cfg(test)]
    pub(crate) fn finish(self) -> Vec<u8> {
        let mut frame = self.finish_framed(0);
        frame.drain(..16);
        frame
    }

    /// The entry as a complete log frame for `seq` (header included), built in one buffer.
    pub(crate) fn finish_framed(self, seq: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.definitions.len() + self.runs.len() + 21);
        out.resize(16, 0);
        out.push(FORMAT);
        put_varint(&mut out, self.definition_count);
        out.extend_from_slice(&self.definitions);
        put_varint(&mut out, self.run_count);
        out.extend_from_slice(&self.runs);
        frame(seq, out)
    }
}

/// Puts the frame header (RFC 0004) before a payload written after 16 reserved bytes.
fn frame(seq: u64, mut out: Vec<u8>) -> Vec<u8> {
    let len = (out.len() - 16) as u32;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&seq.to_le_bytes());
    crc.update(&out[16..]);
    out[0..4].copy_from_slice(&len.to_le_bytes());
    out[4..8].copy_from_slice(&crc.finalize().to_le_bytes());
    out[8..16].copy_from_slice(&seq.to_le_bytes());
    out
}

/// The series templates one segment has defined so far, by logged series id. Replay keeps
/// one per segment: an entry refers only to definitions earlier in its segment or in itself.
#[derive(Debug, Default)]
pub(crate) struct Dictionary {
    templates: HashMap<u64, Vec<u8>>,
}

impl Dictionary {
    pub(crate) fn clear(&mut self) {
        self.templates.clear();
    }
}

fn corrupt() -> Error {
    Error::Corrupt("write-ahead log entry is damaged".into())
}

fn short_key() -> Error {
    Error::Corrupt("write-ahead log holds a short row key".into())
}

/// Decodes an entry into (row key, point) pairs, in the order they were added. `dictionary`
/// holds the definitions of the entries before this one in its segment and gains this
/// entry's; `base_at` is where a row key holds its base hour (salt and metric widths).
pub(crate) fn decode_entry(
    bytes: &[u8],
    dictionary: &mut Dictionary,
    base_at: usize,
    mut each: impl FnMut(&[u8], Point),
) -> Result<()> {
    match bytes.first() {
        Some(&FORMAT_V1) => decode_v1(bytes, &mut each),
        Some(&FORMAT) => decode_v2(bytes, dictionary, base_at, &mut each),
        _ => Err(corrupt()),
    }
}

fn decode_v2(
    bytes: &[u8],
    dictionary: &mut Dictionary,
    base_at: usize,
    each: &mut impl FnMut(&[u8], Point),
) -> Result<()> {
    let mut pos = 1usize;
    let varint = |pos: &mut usize| read_varint(bytes, pos).ok_or_else(corrupt);
    let definitions = varint(&mut pos)?;
    for _ in 0..definitions {
        let series = varint(&mut pos)?;
        let len = varint(&mut pos)? as usize;
        let end = pos
            .checked_add(len)
            .filter(|e| *e <= bytes.len())
            .ok_or_else(corrupt)?;
        if len < base_at + 4 {
            return Err(short_key());
        }
        dictionary
            .templates
            .insert(series, bytes[pos..end].to_vec());
        pos = end;
    }
    let runs = varint(&mut pos)?;
    let mut key = Vec::new();
    let mut base = 0i64;
    for _ in 0..runs {
        let series = varint(&mut pos)?;
        let template = dictionary.templates.get(&series).ok_or_else(corrupt)?;
        let zigzag = varint(&mut pos)?;
        base += ((zigzag >> 1) as i64) ^ -((zigzag & 1) as i64);
        let base = u32::try_from(base).map_err(|_| corrupt())?;
        key.clear();
        key.extend_from_slice(template);
        key[base_at..base_at + 4].copy_from_slice(&base.to_be_bytes());
        let count = varint(&mut pos)?;
        if count == 0 {
            return Err(corrupt());
        }
        for _ in 0..count {
            let raw = u32::try_from(varint(&mut pos)?).map_err(|_| corrupt())?;
            let qualifier = Qualifier::from_raw(raw)?;
            let len = qualifier.value_len().min(8);
            let value = bytes.get(pos..pos + len).ok_or_else(corrupt)?;
            pos += len;
            let bits = value.iter().fold(0u64, |v, b| (v << 8) | u64::from(*b));
            each(&key, Point::new(qualifier, bits));
        }
    }
    if pos != bytes.len() {
        return Err(corrupt());
    }
    Ok(())
}

fn decode_v1(bytes: &[u8], each: &mut impl FnMut(&[u8], Point)) -> Result<()> {
    let mut pos = 1usize;
    let varint = |pos: &mut usize| read_varint(bytes, pos).ok_or_else(corrupt);
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

    /// Base hours sit after a 3-byte metric UID in these keys.
    const AT: usize = 3;

    fn decode_all(entries: &[&[u8]]) -> Result<Vec<(Vec<u8>, Point)>> {
        let mut dictionary = Dictionary::default();
        let mut out = Vec::new();
        for e in entries {
            decode_entry(e, &mut dictionary, AT, |k, p| out.push((k.to_vec(), p)))?;
        }
        Ok(out)
    }

    fn point(offset: u32, v: Value) -> Point {
        Point::new(Qualifier::seconds(offset, v.flags()).unwrap(), v.to_bits())
    }

    /// The example frame of docs/rfcs/0004-write-ahead-log-frames.md, byte for byte (the
    /// header and CRC computed independently of this code).
    #[test]
    fn a_frame_has_its_documented_bytes() {
        let mut b = EntryBuilder::default();
        b.define(0, &[0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1]);
        b.add_run(0, 0x50E2_2700, [point(123, Value::Int(42))].into_iter());
        assert_eq!(
            b.finish_framed(1),
            [
                0x1C, 0, 0, 0, 0xE2, 0x1F, 0xEA, 0x0C, 1, 0, 0, 0, 0, 0, 0, 0, // header
                0x02, 0x01, 0x00, 0x0D, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, // definitions
                0x01, 0x00, 0x80, 0x9C, 0x91, 0x8E, 0x0A, 0x01, 0xB0, 0x0F, 0x2A, // runs
            ]
        );
    }

    /// Entries of format 0x01 (the RFC's former example) are still read.
    #[test]
    fn format_1_entries_still_decode() {
        let v1 = [
            0x01, 0x01, 0x0D, 0, 0, 1, 0x50, 0xE2, 0x27, 0, 0, 0, 1, 0, 0, 1, // rows
            0x01, 0x00, 0, 0, 0x07, 0xB0, 0x2A, // points
        ];
        assert_eq!(
            decode_all(&[&v1]).unwrap(),
            vec![(
                vec![0, 0, 1, 0x50, 0xE2, 0x27, 0, 0, 0, 1, 0, 0, 1],
                point(123, Value::Int(42))
            )]
        );
    }

    #[test]
    fn entries_round_trip_through_their_segment_dictionary() {
        let (a, b) = (b"m01\0\0\0\0a".as_slice(), b"m01\0\0\0\0bb".as_slice());
        let key = |t: &[u8], base: u32| {
            let mut k = t.to_vec();
            k[AT..AT + 4].copy_from_slice(&base.to_be_bytes());
            k
        };
        let points = [
            point(1, Value::Int(-5)),
            point(2, Value::Double(0.1)),
            point(3, Value::Int(i64::MAX)),
            point(4, Value::Float(1.5)),
            point(5, Value::Int(300)),
        ];
        let mut first = EntryBuilder::default();
        first.define(7, a);
        first.define(300, b);
        first.add_run(7, 7200, points[..2].iter().copied());
        first.add_run(300, 3600, points[2..3].iter().copied());
        first.add_run(7, 7200, points[3..4].iter().copied());
        let first = first.finish();
        // A later entry of the segment uses the definitions without repeating them.
        let mut second = EntryBuilder::default();
        second.add_run(300, u32::MAX - 3599, points[4..].iter().copied());
        let second = second.finish();
        assert_eq!(
            decode_all(&[&first, &second]).unwrap(),
            vec![
                (key(a, 7200), points[0]),
                (key(a, 7200), points[1]),
                (key(b, 3600), points[2]),
                (key(a, 7200), points[3]),
                (key(b, u32::MAX - 3599), points[4]),
            ]
        );
        // Alone (its segment's definitions gone), the second entry is refused.
        assert!(decode_all(&[&second]).is_err());
        for cut in 0..first.len() {
            assert!(decode_all(&[&first[..cut]]).is_err(), "cut at {cut}");
        }
        // A template too short to hold a base hour is refused, not sliced.
        let mut short = EntryBuilder::default();
        short.define(1, b"m01");
        assert!(decode_all(&[&short.finish()]).is_err());
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(
            format in 1u8..=2,
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
        ) {
            let mut entry = vec![format];
            entry.extend_from_slice(&bytes);
            let _ = decode_all(&[&entry]);
            let _ = decode_all(&[&bytes]);
        }
    }
}
