//! Data point cells: single-point cells and compacted cells.
//!
//! A single point is one cell: a 2- or 4-byte [`Qualifier`] and its value bytes. A
//! compacted cell holds many points of one row, sorted by time:
//!
//! ```text
//! qualifier: | q1 (2 or 4) | q2 (2 or 4) | ... |
//! value:     | v1 (len from q1 flags) | v2 | ... | meta (1) |
//! ```
//!
//! The trailing meta byte is `0x01` when the cell mixes second and millisecond qualifiers,
//! else `0x00`. Odd-length qualifiers are not data points (annotations and other objects),
//! except the append column ([`APPEND_QUALIFIER`], `tsd.storage.enable_appends`), whose value
//! is points appended one after another, each its qualifier then its value bytes:
//!
//! ```text
//! qualifier: 05 00 00
//! value:     | q1 (2 or 4) | v1 | q2 (2 or 4) | v2 | ... |   (any order, repeats allowed)
//! ```

use crate::qualifier::Qualifier;
use crate::value::{self, Value};
use crate::{Error, Result};

/// Meta byte flag: the compacted cell mixes second and millisecond qualifiers.
pub const MS_MIXED_COMPACT: u8 = 0x01;

/// One data point of a row: qualifier and value bits (right-aligned, length per flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Point {
    pub qualifier: Qualifier,
    pub bits: u64,
}

impl Point {
    /// Keeps only the low bytes of `bits` that the qualifier's flags say the value has.
    pub fn new(qualifier: Qualifier, bits: u64) -> Point {
        let len = qualifier.value_len();
        let bits = if len >= 8 {
            bits
        } else {
            bits & ((1u64 << (8 * len)) - 1)
        };
        Point { qualifier, bits }
    }

    pub fn value(self) -> Value {
        Value::from_bits(self.qualifier.flags(), self.bits)
    }

    pub fn offset_ms(self) -> u32 {
        self.qualifier.offset_ms()
    }
}

/// The qualifier of OpenTSDB's append column: a row's points appended in one cell.
pub const APPEND_QUALIFIER: [u8; 3] = [0x05, 0x00, 0x00];

/// True when a qualifier names data points (single, compacted or appended), not an
/// annotation.
pub fn is_data_qualifier(qualifier: &[u8]) -> bool {
    (!qualifier.is_empty() && qualifier.len().is_multiple_of(2)) || qualifier == APPEND_QUALIFIER
}

/// The bytes one point adds to an append column: its qualifier, then its value.
pub fn append_bytes(points: &[Point], out: &mut Vec<u8>) {
    for p in points {
        p.qualifier.write(out);
        value::write_bits(p.bits, p.qualifier.flags(), out);
    }
}

/// True when a data qualifier holds more than one point.
pub fn is_compacted(qualifier: &[u8]) -> bool {
    match qualifier.len() {
        2 => false,
        4 => qualifier[0] & 0xF0 != 0xF0,
        _ => true,
    }
}

/// Encodes points (sorted, no duplicate times) as one cell: a single-point cell for one
/// point, a compacted cell for more.
pub fn encode_cell(points: &[Point]) -> (Vec<u8>, Vec<u8>) {
    let mut qualifier = Vec::with_capacity(points.len() * 2);
    let mut val = Vec::with_capacity(points.len() * 8 + 1);
    let (mut has_ms, mut has_s) = (false, false);
    for p in points {
        p.qualifier.write(&mut qualifier);
        value::write_bits(p.bits, p.qualifier.flags(), &mut val);
        if p.qualifier.is_millis() {
            has_ms = true;
        } else {
            has_s = true;
        }
    }
    if points.len() > 1 {
        val.push(if has_ms && has_s { MS_MIXED_COMPACT } else { 0 });
    }
    (qualifier, val)
}

/// Decodes the points of one data cell (single or compacted), appending to `out`.
pub fn decode_cell(qualifier: &[u8], val: &[u8], out: &mut Vec<Point>) -> Result<()> {
    let start = out.len();
    let result = decode_cell_into(qualifier, val, out);
    if result.is_err() {
        out.truncate(start);
    }
    result
}

fn decode_cell_into(qualifier: &[u8], val: &[u8], out: &mut Vec<Point>) -> Result<()> {
    if qualifier == APPEND_QUALIFIER {
        return decode_appended(val, out);
    }
    if !is_compacted(qualifier) {
        let q = Qualifier::parse(qualifier)?;
        out.push(Point::new(q, value::decode_bits(q.flags(), val)?));
        return Ok(());
    }
    let (mut qi, mut vi) = (0usize, 0usize);
    out.reserve(qualifier.len() / 2);
    while qi < qualifier.len() {
        let b0 = qualifier[qi];
        let (raw, width) = if b0 & 0xF0 == 0xF0 {
            let b = qualifier
                .get(qi..qi + 4)
                .ok_or_else(|| truncated(qualifier))?;
            (u32::from_be_bytes([b[0], b[1], b[2], b[3]]), 4)
        } else {
            let b1 = *qualifier.get(qi + 1).ok_or_else(|| truncated(qualifier))?;
            (u32::from(u16::from_be_bytes([b0, b1])), 2)
        };
        let q = Qualifier::from_raw(raw)?;
        let flags = q.flags();
        let len = q.value_len();
        let vbytes = val.get(vi..vi + len).ok_or_else(|| truncated(qualifier))?;
        let bits = match (flags & value::FLAG_FLOAT != 0, vbytes) {
            (false, [a]) => u64::from(*a),
            (false, [a, b]) => u64::from(u16::from_be_bytes([*a, *b])),
            (_, [a, b, c, d]) => u64::from(u32::from_be_bytes([*a, *b, *c, *d])),
            (_, [a, b, c, d, e, f, g, h]) => u64::from_be_bytes([*a, *b, *c, *d, *e, *f, *g, *h]),
            _ => {
                return Err(Error::corrupt(format!(
                    "invalid value flags. flags=0x{flags:X}"
                )));
            }
        };
        out.push(Point { qualifier: q, bits });
        qi += width;
        vi += len;
    }
    // Trailing meta byte (absent in cells of some old writers).
    if vi != val.len() && vi + 1 != val.len() {
        return Err(Error::corrupt(format!(
            "compacted cell value has {} bytes, its qualifiers need {vi} (+1 meta byte). qualifier={}",
            val.len(),
            crate::uid::hex_upper(qualifier)
        )));
    }
    Ok(())
}

/// The points of an append column's value, in the order they were appended.
fn decode_appended(val: &[u8], out: &mut Vec<Point>) -> Result<()> {
    let mut i = 0usize;
    while i < val.len() {
        let width = if val[i] & 0xF0 == 0xF0 { 4 } else { 2 };
        let qb = val
            .get(i..i + width)
            .ok_or_else(|| truncated(&APPEND_QUALIFIER))?;
        let q = Qualifier::parse(qb)?;
        let len = q.value_len();
        let vb = val
            .get(i + width..i + width + len)
            .ok_or_else(|| truncated(&APPEND_QUALIFIER))?;
        out.push(Point::new(q, value::decode_bits(q.flags(), vb)?));
        i += width + len;
    }
    Ok(())
}

fn truncated(qualifier: &[u8]) -> Error {
    Error::corrupt(format!(
        "compacted cell is truncated. qualifier={}",
        crate::uid::hex_upper(qualifier)
    ))
}

/// Two points of one row at the same time with different bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate {
    pub offset_ms: u32,
    pub older: Point,
    pub newer: Point,
}

/// Sorts a row's points by time. `points` must be in write order (older first): equal
/// points collapse; conflicting points at one time keep the newest when `fix_duplicates`,
/// else the first conflict is returned and `points` is left sorted with every point kept.
pub fn sort_and_dedupe(points: &mut Vec<Point>, fix_duplicates: bool) -> Result<(), Duplicate> {
    points.sort_by_key(|p| p.offset_ms()); // stable: write order kept within one time
    let mut conflict = None;
    let mut w = 0usize;
    for r in 0..points.len() {
        if w > 0 && points[w - 1].offset_ms() == points[r].offset_ms() {
            let (older, newer) = (points[w - 1], points[r]);
            if older == newer {
                continue;
            }
            if fix_duplicates {
                points[w - 1] = newer;
                continue;
            }
            conflict.get_or_insert(Duplicate {
                offset_ms: newer.offset_ms(),
                older,
                newer,
            });
        }
        points[w] = points[r];
        w += 1;
    }
    points.truncate(w);
    match conflict {
        Some(d) => Err(d),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_columns_read_back_in_append_order() {
        let a = Point::new(Qualifier::seconds(10, 0).unwrap(), 5);
        let b = Point::new(
            Qualifier::millis(123, 0xB).unwrap(),
            1.5f32.to_bits().into(),
        );
        let c = Point::new(Qualifier::seconds(5, 1).unwrap(), 300);
        let mut val = Vec::new();
        append_bytes(&[a, b], &mut val);
        append_bytes(&[c], &mut val);
        assert!(is_data_qualifier(&APPEND_QUALIFIER));
        let mut out = Vec::new();
        decode_cell(&APPEND_QUALIFIER, &val, &mut out).unwrap();
        assert_eq!(out, [a, b, c]);
        // As OpenTSDB lays it out: qualifier then value, per point.
        assert_eq!(&val[..3], &[0x00, 0xA0, 0x05]);
        let mut out = Vec::new();
        assert!(decode_cell(&APPEND_QUALIFIER, &val[..val.len() - 1], &mut out).is_err());
        assert!(out.is_empty());
    }
    use proptest::prelude::*;

    fn sec(offset: u32, v: Value) -> Point {
        Point::new(Qualifier::seconds(offset, v.flags()).unwrap(), v.to_bits())
    }

    fn ms(offset: u32, v: Value) -> Point {
        Point::new(Qualifier::millis(offset, v.flags()).unwrap(), v.to_bits())
    }

    #[test]
    fn compacts_second_points_with_zero_meta_byte() {
        let points = [sec(123, Value::Int(42)), sec(125, Value::Int(476))];
        let (q, v) = encode_cell(&points);
        assert_eq!(q, [0x07, 0xB0, 0x07, 0xD1]);
        assert_eq!(v, [0x2A, 0x01, 0xDC, 0x00]);
        let mut out = Vec::new();
        decode_cell(&q, &v, &mut out).unwrap();
        assert_eq!(out, points);
    }

    #[test]
    fn compacts_millisecond_points() {
        let points = [ms(500, Value::Float(1.5)), ms(1500, Value::Int(-2))];
        let (q, v) = encode_cell(&points);
        assert_eq!(q.len(), 8);
        assert_eq!(q[..4], [0xF0, 0x00, 0x7D, 0x0B]);
        let mut want_v = 1.5f32.to_be_bytes().to_vec();
        want_v.extend_from_slice(&[0xFE, 0x00]);
        assert_eq!(v, want_v);
        let mut out = Vec::new();
        decode_cell(&q, &v, &mut out).unwrap();
        assert_eq!(out, points);
    }

    #[test]
    fn mixed_resolution_sets_meta_flag() {
        let points = [
            sec(1, Value::Int(1)),
            ms(1500, Value::Int(2)),
            sec(2, Value::Double(0.1)),
        ];
        let (q, v) = encode_cell(&points);
        assert_eq!(q.len(), 2 + 4 + 2);
        assert_eq!(*v.last().unwrap(), MS_MIXED_COMPACT);
        let mut out = Vec::new();
        decode_cell(&q, &v, &mut out).unwrap();
        assert_eq!(out, points);
        assert_eq!(out[2].value(), Value::Double(0.1));
    }

    #[test]
    fn single_points_are_plain_cells() {
        let (q, v) = encode_cell(&[sec(123, Value::Int(42))]);
        assert_eq!(
            (q.as_slice(), v.as_slice()),
            (&[0x07, 0xB0][..], &[0x2A][..])
        );
        let (q, _) = encode_cell(&[ms(123, Value::Int(42))]);
        assert!(!is_compacted(&q));
        assert!(is_compacted(&[0x07, 0xB0, 0x07, 0xD0]));
        assert!(!is_data_qualifier(&[0x01, 0x00, 0x7B]));
    }

    #[test]
    fn malformed_cells_are_errors() {
        let mut out = Vec::new();
        let cases: &[(&[u8], &[u8])] = &[
            (&[0x07, 0xB0, 0x07], &[1, 2, 0]),
            (&[0x07, 0xB0, 0x07, 0xD0], &[1]),
            (&[0x07, 0xB0, 0x07, 0xD0], &[1, 2, 0, 0, 0]),
            (&[0x07, 0xB7, 0x07, 0xD0], &[1, 2, 0]),
            (&[0x07, 0xB0], &[]),
            (&[0xF0, 0, 0, 0, 0xF0], &[1, 2]),
        ];
        for (q, v) in cases {
            assert!(decode_cell(q, v, &mut out).is_err(), "{q:?} {v:?}");
        }
        assert!(out.is_empty());
    }

    #[test]
    fn duplicates_per_fix_duplicates() {
        let mut keep_newest = vec![
            sec(5, Value::Int(1)),
            sec(1, Value::Int(9)),
            ms(5000, Value::Float(2.0)),
        ];
        assert_eq!(sort_and_dedupe(&mut keep_newest, true), Ok(()));
        assert_eq!(
            keep_newest,
            vec![sec(1, Value::Int(9)), ms(5000, Value::Float(2.0))]
        );

        let mut strict = vec![sec(5, Value::Int(1)), ms(5000, Value::Float(2.0))];
        let err = sort_and_dedupe(&mut strict, false).unwrap_err();
        assert_eq!(err.offset_ms, 5000);
        assert_eq!(err.newer, ms(5000, Value::Float(2.0)));
        assert_eq!(strict.len(), 2);

        let mut same = vec![sec(5, Value::Int(1)), sec(5, Value::Int(1))];
        assert_eq!(sort_and_dedupe(&mut same, false), Ok(()));
        assert_eq!(same.len(), 1);
    }

    fn point_strategy() -> impl Strategy<Value = Point> {
        let value = prop_oneof![
            any::<i64>().prop_map(Value::Int),
            any::<f32>().prop_map(Value::Float),
            any::<f64>().prop_map(Value::Double),
        ];
        (any::<bool>(), 0u32..3_600_000, value).prop_map(|(is_ms, off, v)| {
            if is_ms {
                ms(off, v)
            } else {
                sec(off / 1000, v)
            }
        })
    }

    proptest! {
        #[test]
        fn cell_round_trip(mut points in prop::collection::vec(point_strategy(), 1..200)) {
            sort_and_dedupe(&mut points, true).unwrap();
            let (q, v) = encode_cell(&points);
            let mut out = Vec::new();
            decode_cell(&q, &v, &mut out).unwrap();
            prop_assert_eq!(out, points);
        }

        #[test]
        fn decode_never_panics(q in prop::collection::vec(any::<u8>(), 0..40), v in prop::collection::vec(any::<u8>(), 0..80)) {
            let mut out = Vec::new();
            let _ = decode_cell(&q, &v, &mut out);
        }
    }
}
