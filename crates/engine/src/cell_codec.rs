//! A compact stored form for compacted data cells, used by the embedded backend. It is an
//! encoding of the same bytes, not a new format: every read gives back OpenTSDB's exact
//! qualifier and value, and a cell whose round trip is not exact is stored as it is.
//!
//! ```text
//! | 0x01 | point count (varint) | has meta (1) | [meta byte] |
//! | resolution runs: count (varint), first is-ms (1), run lengths (varint)... |
//! | first offset ms (varint) | offset delta runs: count (varint), (zigzag delta, length)... |
//! | flag runs: count (varint), (flags (1), length (varint))... |
//! | integers: first (zigzag varint), gcd of the deltas (varint), least delta / gcd (zigzag |
//! |           varint), then each delta / gcd minus that least, bit-packed (width (1), bits) |
//! | floats: 0x00 k (1) then decimal mantissas x 10^k packed as the integers |
//! |       or 0x01 then each value's bytes as stored |
//! ```
//!
//! Regular intervals collapse to one delta run, and slowly changing values to a few bits each.

use hourglass_core::compact::{self, Point};
use hourglass_core::qualifier::Qualifier;
use hourglass_core::schema::DATA_FAMILY;
use hourglass_core::value::{FLAG_FLOAT, write_bits};
use hourglass_storage::{CellCodec, Error, Result};

const VERSION: u8 = 1;
const MAX_DECIMALS: u32 = 9;

/// The codec for the data table's family `t`.
#[derive(Debug, Default, Clone, Copy)]
pub struct DataCellCodec;

impl CellCodec for DataCellCodec {
    fn encode(&self, family: &str, qualifier: &[u8], value: &[u8]) -> Option<Vec<u8>> {
        if family != DATA_FAMILY
            || !compact::is_data_qualifier(qualifier)
            || !compact::is_compacted(qualifier)
        {
            return None;
        }
        let mut points = Vec::with_capacity(qualifier.len() / 2);
        compact::decode_cell(qualifier, value, &mut points).ok()?;
        let values_len: usize = points.iter().map(|p| p.qualifier.value_len()).sum();
        let meta = match value.len() - values_len {
            0 => None,
            _ => value.last().copied(),
        };
        let blob = encode_points(&points, meta);
        if blob.len() >= qualifier.len() + value.len() {
            return None;
        }
        // Lossless or not at all.
        match decode_blob(&blob) {
            Ok((q, v)) if q == qualifier && v == value => Some(blob),
            _ => None,
        }
    }

    fn decode(&self, _family: &str, encoded: &[u8]) -> Result<(Vec<u8>, Vec<u8>)> {
        decode_blob(encoded).map_err(|e| Error::Corrupt(format!("bad encoded data cell: {e}")))
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

/// Run-length pairs of a sequence.
fn runs<T: PartialEq + Copy>(items: impl Iterator<Item = T>) -> Vec<(T, u64)> {
    let mut out: Vec<(T, u64)> = Vec::new();
    for x in items {
        match out.last_mut() {
            Some((v, n)) if *v == x => *n += 1,
            _ => out.push((x, 1)),
        }
    }
    out
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// A sequence as its first value (zigzag varint), the greatest common divisor of its deltas
/// (varint; counters often step in fixed multiples), the smallest quotient (zigzag varint),
/// then each quotient above it, bit-packed: constant steps cost no bits.
fn pack_deltas(values: &[i64], out: &mut Vec<u8>) {
    let first = values.first().copied().unwrap_or(0);
    put_varint(out, zigzag(first));
    let deltas: Vec<i64> = values.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
    let divisor = deltas
        .iter()
        .fold(0u64, |g, d| gcd(g, d.unsigned_abs()))
        .max(1);
    put_varint(out, divisor);
    let quotients: Vec<i64> = deltas.iter().map(|d| d / divisor as i64).collect();
    let floor = quotients.iter().copied().min().unwrap_or(0);
    put_varint(out, zigzag(floor));
    let packed: Vec<u64> = quotients
        .iter()
        .map(|q| q.wrapping_sub(floor) as u64)
        .collect();
    pack(&packed, out);
}

fn pack(values: &[u64], out: &mut Vec<u8>) {
    let width = values
        .iter()
        .map(|v| 64 - v.leading_zeros())
        .max()
        .unwrap_or(0);
    out.push(width as u8);
    if width == 0 {
        return;
    }
    let (mut acc, mut bits) = (0u128, 0u32);
    for v in values {
        acc |= u128::from(*v) << bits;
        bits += width;
        while bits >= 8 {
            out.push(acc as u8);
            acc >>= 8;
            bits -= 8;
        }
    }
    if bits > 0 {
        out.push(acc as u8);
    }
}

fn is_float(p: &Point) -> bool {
    p.qualifier.flags() & FLAG_FLOAT != 0
}

fn float_f64(p: &Point) -> f64 {
    if p.qualifier.value_len() == 4 {
        f64::from(f32::from_bits(p.bits as u32))
    } else {
        f64::from_bits(p.bits)
    }
}

/// Exact powers of ten for the decimal scales.
const POW10: [f64; MAX_DECIMALS as usize + 1] = [1.0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9];

fn float_bits(m: i64, k: u32, len: usize) -> u64 {
    let f = m as f64 / POW10[k as usize];
    if len == 4 {
        u64::from((f as f32).to_bits())
    } else {
        f.to_bits()
    }
}

/// The fewest decimals that write every float exactly as an integer mantissa.
fn decimal_scale(floats: &[&Point]) -> Option<(u32, Vec<i64>)> {
    'k: for k in 0..=MAX_DECIMALS {
        let scale = POW10[k as usize];
        let mut mantissas = Vec::with_capacity(floats.len());
        for p in floats {
            let m = (float_f64(p) * scale).round();
            if !m.is_finite() || m.abs() >= 9.0e15 {
                continue 'k;
            }
            let m = m as i64;
            if float_bits(m, k, p.qualifier.value_len()) != p.bits {
                continue 'k;
            }
            mantissas.push(m);
        }
        return Some((k, mantissas));
    }
    None
}

fn encode_points(points: &[Point], meta: Option<u8>) -> Vec<u8> {
    let mut out = Vec::with_capacity(points.len() + 16);
    out.push(VERSION);
    put_varint(&mut out, points.len() as u64);
    out.push(u8::from(meta.is_some()));
    if let Some(m) = meta {
        out.push(m);
    }
    let resolution = runs(points.iter().map(|p| p.qualifier.is_millis()));
    put_varint(&mut out, resolution.len() as u64);
    out.push(u8::from(resolution.first().is_some_and(|r| r.0)));
    for (_, n) in &resolution {
        put_varint(&mut out, *n);
    }
    let offsets: Vec<i64> = points.iter().map(|p| i64::from(p.offset_ms())).collect();
    put_varint(&mut out, offsets.first().copied().unwrap_or(0) as u64);
    let deltas = runs(offsets.windows(2).map(|w| w[1] - w[0]));
    put_varint(&mut out, deltas.len() as u64);
    for (d, n) in &deltas {
        put_varint(&mut out, zigzag(*d));
        put_varint(&mut out, *n);
    }
    let flags = runs(points.iter().map(|p| p.qualifier.flags()));
    put_varint(&mut out, flags.len() as u64);
    for (f, n) in &flags {
        out.push(*f);
        put_varint(&mut out, *n);
    }
    let ints: Vec<i64> = points
        .iter()
        .filter_map(|p| match p.value() {
            hourglass_core::value::Value::Int(i) => Some(i),
            _ => None,
        })
        .collect();
    pack_deltas(&ints, &mut out);
    let floats: Vec<&Point> = points.iter().filter(|p| is_float(p)).collect();
    match decimal_scale(&floats) {
        Some((k, mantissas)) => {
            out.push(0);
            out.push(k as u8);
            pack_deltas(&mantissas, &mut out);
        }
        None => {
            out.push(1);
            for p in floats {
                write_bits(p.bits, p.qualifier.flags(), &mut out);
            }
        }
    }
    out
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, &'static str> {
        let b = *self.bytes.get(self.pos).ok_or("truncated")?;
        self.pos += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, &'static str> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7F) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err("varint too long")
    }

    /// The `n` values written by `pack_deltas`.
    fn unpack_deltas(&mut self, n: usize) -> Result<Vec<i64>, &'static str> {
        let mut v = unzigzag(self.varint()?);
        let divisor = self.varint()? as i64;
        let floor = unzigzag(self.varint()?);
        let deltas = self.unpack(n.saturating_sub(1))?;
        let mut out = Vec::with_capacity(n);
        if n > 0 {
            out.push(v);
        }
        for d in deltas {
            v = v.wrapping_add((d as i64).wrapping_add(floor).wrapping_mul(divisor));
            out.push(v);
        }
        Ok(out)
    }

    fn unpack(&mut self, n: usize) -> Result<Vec<u64>, &'static str> {
        let width = u32::from(self.byte()?);
        if width > 64 {
            return Err("bad bit width");
        }
        if width == 0 {
            return Ok(vec![0; n]);
        }
        let bytes = (n * width as usize).div_ceil(8);
        let data = self
            .bytes
            .get(self.pos..self.pos + bytes)
            .ok_or("truncated")?;
        self.pos += bytes;
        let mask = if width == 64 {
            u64::MAX
        } else {
            (1u64 << width) - 1
        };
        let mut out = Vec::with_capacity(n);
        let (mut acc, mut bits, mut i) = (0u128, 0u32, 0usize);
        for _ in 0..n {
            while bits < width {
                acc |= u128::from(data[i]) << bits;
                i += 1;
                bits += 8;
            }
            out.push((acc as u64) & mask);
            acc >>= width;
            bits -= width;
        }
        Ok(out)
    }
}

/// Decodes a blob into its points (appended to `out`); returns the cell's meta byte.
fn decode_blob_points(blob: &[u8], out: &mut Vec<Point>) -> Result<Option<u8>, &'static str> {
    let mut r = Reader {
        bytes: blob,
        pos: 0,
    };
    if r.byte()? != VERSION {
        return Err("unknown version");
    }
    let n = r.varint()? as usize;
    if n > blob.len() * 64 {
        return Err("point count too large");
    }
    let meta = if r.byte()? == 1 {
        Some(r.byte()?)
    } else {
        None
    };
    let res_runs = r.varint()? as usize;
    let mut is_ms = r.byte()? == 1;
    let mut resolution = Vec::with_capacity(n);
    for _ in 0..res_runs {
        let len = r.varint()? as usize;
        if resolution.len() + len > n {
            return Err("resolution runs overflow");
        }
        resolution.extend(std::iter::repeat_n(is_ms, len));
        is_ms = !is_ms;
    }
    let mut offsets = Vec::with_capacity(n);
    let mut at = r.varint()? as i64;
    offsets.push(at);
    let delta_runs = r.varint()? as usize;
    for _ in 0..delta_runs {
        let d = unzigzag(r.varint()?);
        let len = r.varint()? as usize;
        if offsets.len() + len > n {
            return Err("offset runs overflow");
        }
        for _ in 0..len {
            at = at.checked_add(d).ok_or("offset overflow")?;
            offsets.push(at);
        }
    }
    let flag_runs = r.varint()? as usize;
    let mut flags = Vec::with_capacity(n);
    for _ in 0..flag_runs {
        let f = r.byte()?;
        let len = r.varint()? as usize;
        if flags.len() + len > n {
            return Err("flag runs overflow");
        }
        flags.extend(std::iter::repeat_n(f, len));
    }
    if resolution.len() != n || offsets.len() != n || flags.len() != n {
        return Err("stream lengths differ");
    }
    let float_count = flags.iter().filter(|f| *f & FLAG_FLOAT != 0).count();
    let ints = r.unpack_deltas(n - float_count)?;
    let mut float_bits_out = Vec::with_capacity(float_count);
    let float_lens: Vec<usize> = flags
        .iter()
        .filter(|f| *f & FLAG_FLOAT != 0)
        .map(|f| usize::from(f & 7) + 1)
        .collect();
    match r.byte()? {
        0 => {
            let k = u32::from(r.byte()?);
            if k > MAX_DECIMALS {
                return Err("bad decimal scale");
            }
            for (m, len) in r.unpack_deltas(float_count)?.into_iter().zip(&float_lens) {
                float_bits_out.push(float_bits(m, k, *len));
            }
        }
        1 => {
            for len in &float_lens {
                let b = r.bytes.get(r.pos..r.pos + len).ok_or("truncated")?;
                r.pos += len;
                float_bits_out.push(b.iter().fold(0u64, |a, x| (a << 8) | u64::from(*x)));
            }
        }
        _ => return Err("bad float mode"),
    }
    if r.pos != blob.len() {
        return Err("trailing bytes");
    }
    out.reserve(n);
    let (mut ii, mut fi) = (0usize, 0usize);
    for i in 0..n {
        let off = u32::try_from(offsets[i]).map_err(|_| "offset out of range")?;
        let q = if resolution[i] {
            Qualifier::millis(off, flags[i])
        } else {
            if off % 1000 != 0 {
                return Err("second offset not whole");
            }
            Qualifier::seconds(off / 1000, flags[i])
        }
        .map_err(|_| "offset out of range")?;
        let bits = if flags[i] & FLAG_FLOAT != 0 {
            let b = *float_bits_out.get(fi).ok_or("missing float")?;
            fi += 1;
            b
        } else {
            let v = *ints.get(ii).ok_or("missing integer")?;
            ii += 1;
            v as u64
        };
        // As read from the value bytes: the low `len` bytes, zero-extended.
        let len = q.value_len();
        let bits = if len >= 8 {
            bits
        } else {
            bits & ((1u64 << (8 * len)) - 1)
        };
        out.push(Point::new(q, bits));
    }
    Ok(meta)
}

/// The points of an encoded data cell, straight from its stored form (no byte rebuild).
pub fn decode_points(blob: &[u8], out: &mut Vec<Point>) -> Result<()> {
    let start = out.len();
    decode_blob_points(blob, out).map(|_| ()).map_err(|e| {
        out.truncate(start);
        Error::Corrupt(format!("bad encoded data cell: {e}"))
    })
}

fn decode_blob(blob: &[u8]) -> Result<(Vec<u8>, Vec<u8>), &'static str> {
    let mut points = Vec::new();
    let meta = decode_blob_points(blob, &mut points)?;
    let mut qualifier = Vec::with_capacity(points.len() * 2);
    let mut value = Vec::with_capacity(points.len() * 4 + 1);
    for p in &points {
        p.qualifier.write(&mut qualifier);
        write_bits(p.bits, p.qualifier.flags(), &mut value);
    }
    if let Some(m) = meta {
        value.push(m);
    }
    Ok((qualifier, value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hourglass_core::value::Value;
    use proptest::prelude::*;

    fn cell(points: &[(bool, u32, Value)]) -> (Vec<u8>, Vec<u8>) {
        let pts: Vec<Point> = points
            .iter()
            .map(|(ms, off, v)| {
                let q = if *ms {
                    Qualifier::millis(*off, v.flags())
                } else {
                    Qualifier::seconds(*off / 1000, v.flags())
                };
                Point::new(q.unwrap(), v.to_bits())
            })
            .collect();
        compact::encode_cell(&pts)
    }

    #[test]
    fn regular_series_shrink_and_round_trip() {
        let points: Vec<(bool, u32, Value)> = (0..360)
            .map(|i| (false, i * 10_000, Value::Int(500 + (i as i64 % 7) - 3)))
            .collect();
        let (q, v) = cell(&points);
        let blob = DataCellCodec.encode("t", &q, &v).unwrap();
        assert!(
            blob.len() * 4 < q.len() + v.len(),
            "{} vs {}",
            blob.len(),
            q.len() + v.len()
        );
        assert!(blob.len() < 360, "under a byte per point: {}", blob.len());
        assert_eq!(DataCellCodec.decode("t", &blob).unwrap(), (q, v));
    }

    #[test]
    fn decimal_floats_and_mixed_cells_round_trip() {
        // Seconds then milliseconds; decimal doubles, floats and integers.
        let points: Vec<(bool, u32, Value)> = (0..60u32)
            .map(|i| match i {
                0..20 => (false, i * 1000, Value::Double(f64::from(1234 + i) / 100.0)),
                20..30 => (false, i * 1000, Value::Float(1.5 + i as f32)),
                _ => (true, i * 1000 + 250, Value::Int(70000 - i64::from(i) * 3)),
            })
            .collect();
        let (q, v) = cell(&points);
        let blob = DataCellCodec.encode("t", &q, &v).unwrap();
        assert_eq!(DataCellCodec.decode("t", &blob).unwrap(), (q, v));
    }

    #[test]
    fn counters_stepping_in_multiples_pack_small() {
        let points: Vec<(bool, u32, Value)> = (0..360)
            .map(|i| {
                (
                    false,
                    i * 10_000,
                    Value::Int(1_000_000 + i64::from(i % 5) * 1500 * i64::from(i)),
                )
            })
            .collect();
        let (q, v) = cell(&points);
        let blob = DataCellCodec.encode("t", &q, &v).unwrap();
        assert_eq!(DataCellCodec.decode("t", &blob).unwrap(), (q, v));
        let steps: Vec<(bool, u32, Value)> = (0..360)
            .map(|i| (false, i * 10_000, Value::Int(5000 + i64::from(i) * 300)))
            .collect();
        let (q, v) = cell(&steps);
        let blob = DataCellCodec.encode("t", &q, &v).unwrap();
        assert!(
            blob.len() < 40,
            "a constant step costs nothing per point: {}",
            blob.len()
        );
    }

    #[test]
    fn leaves_other_cells_alone() {
        assert_eq!(DataCellCodec.encode("t", &[0x07, 0xB0], &[42]), None);
        assert_eq!(
            DataCellCodec.encode("id", &[0x07, 0xB0, 0x07, 0xC0], &[1, 2, 0]),
            None
        );
        assert_eq!(DataCellCodec.encode("t", &[1, 0, 0], b"{}"), None);
        assert_eq!(
            DataCellCodec.encode("t", &[0x07, 0xB0, 0x07, 0xC0], &[1]),
            None,
            "corrupt cells stay as they are"
        );
    }

    fn value_strategy() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<i64>().prop_map(Value::Int),
            (-1000i64..1000).prop_map(Value::Int),
            any::<f32>().prop_map(Value::Float),
            any::<f64>().prop_map(Value::Double),
            (-100000i64..100000).prop_map(|m| hourglass_core::value::float_value(m as f64 / 100.0)),
        ]
    }

    proptest! {
        #[test]
        fn lossless_on_any_cell(points in prop::collection::btree_map(0u32..3_600_000, (any::<bool>(), value_strategy()), 2..100)) {
            let pts: Vec<(bool, u32, Value)> = points.into_iter().map(|(off, (ms, v))| (ms, if ms { off } else { off / 1000 * 1000 }, v)).collect();
            let mut dedup: Vec<(bool, u32, Value)> = Vec::new();
            for p in pts {
                if dedup.last().is_none_or(|l| l.1 != p.1) {
                    dedup.push(p);
                }
            }
            prop_assume!(dedup.len() >= 2);
            let (q, v) = cell(&dedup);
            if let Some(blob) = DataCellCodec.encode("t", &q, &v) {
                let mut direct = Vec::new();
                decode_points(&blob, &mut direct).unwrap();
                let mut via_bytes = Vec::new();
                compact::decode_cell(&q, &v, &mut via_bytes).unwrap();
                prop_assert_eq!(direct, via_bytes, "points straight from the blob");
                prop_assert_eq!(DataCellCodec.decode("t", &blob).unwrap(), (q, v));
            }
        }

        #[test]
        fn decode_never_panics(blob in prop::collection::vec(any::<u8>(), 0..120)) {
            let _ = decode_points(&blob, &mut Vec::new());
            let _ = DataCellCodec.decode("t", &blob);
        }
    }
}
