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
use hourglass_core::value::{FLAG_FLOAT, Value, write_bits};

#[cfg(test)]
use crate::num::Num;
use crate::num::Sample;
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
            || qualifier == compact::APPEND_QUALIFIER
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
    let (mut r, n, meta) = Reader::header(blob)?;
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

/// Bits read from a packed stream of `width`-bit values (as `pack` writes them), one at a
/// time, eight bytes at once where the stream has them.
struct Unpacker<'a> {
    data: &'a [u8],
    width: u32,
    mask: u64,
    bit: usize,
}

impl Unpacker<'_> {
    fn next(&mut self) -> u64 {
        if self.width == 0 {
            return 0;
        }
        let (byte, shift) = (self.bit / 8, (self.bit % 8) as u32);
        self.bit += self.width as usize;
        let word = match self.data.get(byte..byte + 8) {
            Some(w) if self.width + shift <= 64 => {
                u64::from_le_bytes(w.try_into().unwrap_or_default()) >> shift
            }
            _ => {
                // Near the end, or wider than a word allows: gather what is there.
                let mut acc = 0u128;
                for (i, b) in self.data.iter().skip(byte).take(9).enumerate() {
                    acc |= u128::from(*b) << (8 * i);
                }
                (acc >> shift) as u64
            }
        };
        word & self.mask
    }
}

/// The values `pack_deltas` wrote, one at a time.
struct Deltas<'a> {
    value: i64,
    divisor: i64,
    floor: i64,
    bits: Unpacker<'a>,
}

impl Deltas<'_> {
    /// The next value (after the last one, the stream reads as zero bits: no harm done).
    fn next(&mut self) -> i64 {
        let v = self.value;
        let d = self.bits.next() as i64;
        self.value = v.wrapping_add(d.wrapping_add(self.floor).wrapping_mul(self.divisor));
        v
    }

    /// The next `n` values as integers read from `len` bytes, appended to `out`.
    fn ints_into<V: Sample>(&mut self, n: usize, len: u32, out: &mut Vec<V>) {
        let shift = 64 - 8 * len;
        let (floor, divisor) = (self.floor, self.divisor);
        let bits = &mut self.bits;
        let mut v = self.value;
        let mut left = n;
        if bits.width > 0 && bits.width <= 56 {
            // While eight bytes remain after a value's first byte, read it as one word.
            let width = bits.width as usize;
            let words = (bits.data.len().saturating_sub(8) * 8).saturating_sub(bits.bit) / width;
            let fast = words.min(left);
            let (data, mask) = (bits.data, bits.mask);
            let mut bit = bits.bit;
            // Slots first, then a loop whose state stays in registers.
            let from = out.len();
            out.resize(from + fast, V::from_int(0));
            for slot in &mut out[from..] {
                let at = bit / 8;
                let word = data
                    .get(at..at + 8)
                    .map_or(0, |w| u64::from_le_bytes(w.try_into().unwrap_or_default()));
                let d = ((word >> (bit % 8)) & mask) as i64;
                bit += width;
                *slot = V::from_int((v << shift) >> shift);
                v = v.wrapping_add(d.wrapping_add(floor).wrapping_mul(divisor));
            }
            bits.bit = bit;
            left -= fast;
        }
        self.value = v;
        out.extend((0..left).map(|_| V::from_int(sign_extend(self.next(), len))));
    }
}

impl<'a> Reader<'a> {
    /// A reader past a blob's version, point count and meta byte, with those two.
    fn header(blob: &'a [u8]) -> Result<(Reader<'a>, usize, Option<u8>), &'static str> {
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
        Ok((r, n, meta))
    }

    /// Skips a `pack_deltas` stream of `n` values, returning a reader over them.
    fn deltas(&mut self, n: usize) -> Result<Deltas<'a>, &'static str> {
        let first = unzigzag(self.varint()?);
        let divisor = self.varint()? as i64;
        let floor = unzigzag(self.varint()?);
        let bits = self.packed(n.saturating_sub(1))?;
        Ok(Deltas {
            value: first,
            divisor,
            floor,
            bits,
        })
    }

    /// Skips `n` packed values (width byte, then bits), returning a reader over them.
    fn packed(&mut self, n: usize) -> Result<Unpacker<'a>, &'static str> {
        let width = u32::from(self.byte()?);
        if width > 64 {
            return Err("bad bit width");
        }
        let bytes = if width == 0 {
            0
        } else {
            n.checked_mul(width as usize)
                .ok_or("truncated")?
                .div_ceil(8)
        };
        let end = self.pos.checked_add(bytes).ok_or("truncated")?;
        let data = self.bytes.get(self.pos..end).ok_or("truncated")?;
        self.pos = end;
        let mask = if width == 64 {
            u64::MAX
        } else {
            (1u64 << width) - 1
        };
        Ok(Unpacker {
            data,
            width,
            mask,
            bit: 0,
        })
    }

    /// Skips `count` varint run lengths, returning where they start and their sum (at most
    /// `limit`).
    fn run_lengths(&mut self, count: usize, limit: usize) -> Result<(usize, usize), &'static str> {
        let at = self.pos;
        let mut total = 0usize;
        for _ in 0..count {
            let len = self.varint()? as usize;
            total = total
                .checked_add(len)
                .filter(|t| *t <= limit)
                .ok_or("runs overflow")?;
        }
        Ok((at, total))
    }
}

/// Sign-extends the low `len` bytes of `v`, as a value read from `len` bytes.
fn sign_extend(v: i64, len: u32) -> i64 {
    let shift = 64 - 8 * len;
    (v << shift) >> shift
}

/// Decodes a blob straight into the points' times (`base_ms` plus each offset) and values,
/// appended to `times` and `values`: the same points [`decode_points`] gives, without
/// building qualifiers, in a few passes over runs. Returns whether the times strictly
/// increase (every time delta is positive).
pub fn decode_columns<V: Sample>(
    blob: &[u8],
    base_ms: i64,
    times: &mut Vec<i64>,
    values: &mut Vec<V>,
) -> Result<bool> {
    let (t0, v0) = (times.len(), values.len());
    decode_blob_columns(blob, base_ms, times, values).map_err(|e| {
        times.truncate(t0);
        values.truncate(v0);
        Error::Corrupt(format!("bad encoded data cell: {e}"))
    })
}

fn decode_blob_columns<V: Sample>(
    blob: &[u8],
    base_ms: i64,
    times: &mut Vec<i64>,
    values: &mut Vec<V>,
) -> Result<bool, &'static str> {
    const HOUR_MS: i64 = 3_600_000;
    let (mut r, n, _meta) = Reader::header(blob)?;
    if n == 0 {
        return Err("stream lengths differ");
    }
    // Resolution runs (alternating, from the first run's resolution).
    let res_runs = r.varint()? as usize;
    let first_ms = r.byte()? == 1;
    let (res_at, res_total) = r.run_lengths(res_runs, n)?;
    // Offsets: the first, then runs of equal deltas, written out as times.
    let first = r.varint()? as i64;
    let delta_runs = r.varint()? as usize;
    let start = times.len();
    times.reserve(n);
    times.push(base_ms.wrapping_add(first));
    let (mut low, mut high, mut at) = (first, first, first);
    let mut whole_seconds = first % 1000 == 0;
    let mut increasing = true;
    for _ in 0..delta_runs {
        let d = unzigzag(r.varint()?);
        let len = r.varint()? as usize;
        if times.len() - start + len > n {
            return Err("offset runs overflow");
        }
        if len == 0 {
            continue;
        }
        let last = i128::from(at) + i128::from(d) * len as i128;
        let last = i64::try_from(last).map_err(|_| "offset overflow")?;
        whole_seconds &= d % 1000 == 0;
        increasing &= d > 0;
        let base = base_ms.wrapping_add(at);
        times.extend((1..=len as i64).map(|k| base.wrapping_add(k.wrapping_mul(d))));
        (low, high, at) = (low.min(last), high.max(last), last);
    }
    if low < 0 || high >= HOUR_MS {
        return Err("offset out of range");
    }
    // Flag runs.
    let flag_runs = r.varint()? as usize;
    let flags_at = r.pos;
    let mut float_count = 0usize;
    let mut flag_total = 0usize;
    for _ in 0..flag_runs {
        let f = r.byte()?;
        let len = r.varint()? as usize;
        flag_total = flag_total
            .checked_add(len)
            .filter(|t| *t <= n)
            .ok_or("flag runs overflow")?;
        if f & FLAG_FLOAT != 0 {
            float_count += len;
        }
    }
    if res_total != n || times.len() - start != n || flag_total != n {
        return Err("stream lengths differ");
    }
    // Seconds-resolution points must fall on whole seconds.
    if !(whole_seconds || res_runs == 1 && first_ms) {
        let mut runs = Reader {
            bytes: blob,
            pos: res_at,
        };
        let (mut i, mut is_ms) = (start, first_ms);
        for _ in 0..res_runs {
            let len = runs.varint()? as usize;
            if !is_ms && times[i..i + len].iter().any(|t| (t - base_ms) % 1000 != 0) {
                return Err("second offset not whole");
            }
            i += len;
            is_ms = !is_ms;
        }
    }
    let mut ints = r.deltas(n - float_count)?;
    // Floats: decimal mantissas (mode 0) or each value's bytes (mode 1).
    let (mut mantissas, mut raw_floats, scale) = match r.byte()? {
        0 => {
            let k = u32::from(r.byte()?);
            if k > MAX_DECIMALS {
                return Err("bad decimal scale");
            }
            (Some(r.deltas(float_count)?), None, k)
        }
        1 => {
            let raw = Reader {
                bytes: blob,
                pos: r.pos,
            };
            // Skip the floats' bytes: their lengths come from the flags.
            let mut flags = Reader {
                bytes: blob,
                pos: flags_at,
            };
            for _ in 0..flag_runs {
                let f = flags.byte()?;
                let len = flags.varint()? as usize;
                if f & FLAG_FLOAT != 0 {
                    let bytes = len * (usize::from(f & 7) + 1);
                    r.pos = r.pos.checked_add(bytes).ok_or("truncated")?;
                }
            }
            (None, Some(raw), 0)
        }
        _ => return Err("bad float mode"),
    };
    if r.pos != blob.len() {
        return Err("trailing bytes");
    }
    // Values, run by run of equal flags.
    values.reserve(n);
    let mut flags = Reader {
        bytes: blob,
        pos: flags_at,
    };
    for _ in 0..flag_runs {
        let f = flags.byte()?;
        let len = flags.varint()? as usize;
        let value_len = u32::from(f & 7) + 1;
        if f & FLAG_FLOAT == 0 {
            ints.ints_into(len, value_len, values);
            continue;
        }
        for _ in 0..len {
            let bits = match (&mut mantissas, &mut raw_floats) {
                (Some(m), _) => float_bits(m.next(), scale, value_len as usize),
                (_, Some(raw)) => {
                    let b = raw
                        .bytes
                        .get(raw.pos..raw.pos + value_len as usize)
                        .ok_or("truncated")?;
                    raw.pos += value_len as usize;
                    b.iter().fold(0u64, |a, x| (a << 8) | u64::from(*x))
                }
                _ => return Err("bad float mode"),
            };
            let bits = if value_len >= 8 {
                bits
            } else {
                bits & ((1u64 << (8 * value_len)) - 1)
            };
            values.push(match Value::from_bits(f, bits) {
                Value::Int(i) => V::from_int(i),
                other => V::from_float(other.as_f64()),
            });
        }
    }
    Ok(increasing)
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
mod tests;
