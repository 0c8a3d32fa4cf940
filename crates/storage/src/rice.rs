//! Rice sequences: signed integers in blocks of [`BLOCK`], each block with its own Rice
//! parameter, for the embedded store's group members (group format 0x03) and joint streams
//! (version 0x02) of RFC 0006. A frame of reference
//! packs every value of a section at the width of its widest one; a Rice code spends bits on
//! each value by its own size, and a block's parameter follows the data as it changes over a
//! day (a quiet night, a busy noon, a counter reset costing its own block only).
//!
//! ```text
//! | center c (zigzag varint) | byte length L (varint) | L bytes of bits, least significant bit first |
//! block (BLOCK values; the last holds the rest): | r (6 bits) | values |
//!   r = 63: every value of the block is c, no bits follow
//! value x: u = zigzag(x - c) (wrapping), q = u >> r
//!   q < ESCAPE:  q one bits, a zero bit, the low r bits of u
//!   q >= ESCAPE: ESCAPE one bits, (w - 1) in 6 bits where w is u's bit length,
//!                the low w - 1 bits of u (its top bit is implied)
//! ```
//!
//! The writer takes c as the values' median (of an evenly spaced sample of 255 of them in a
//! longer sequence): a constant sequence costs 6 bits a block, and a
//! counter's steady rate or a walk's drift costs nothing per value.
//! L is exactly the bytes the bits fill (the last byte's unused high bits zero); a reader
//! refuses other lengths, parameters or escapes past 64 bits, and reads past L.

/// Values per block.
pub const BLOCK: usize = 32;
/// Unary quotients from this on are escaped: a spike costs about its own width.
const ESCAPE: u64 = 16;
/// The parameter that marks a block of values all equal to the center.
const CENTER_BLOCK: u32 = 63;
/// The largest parameter of a block with bits.
const MAX_PARAMETER: u32 = 62;
/// The largest parameter whose unescaped codes (at most `ESCAPE + 1 + r` bits) fit in the 56
/// bits a refill leaves buffered.
const FAST_PARAMETER: u32 = 56 - ESCAPE as u32 - 1;

/// `v` mapped so that small magnitudes of either sign stay small: 0, -1, 1, -2, ... to 0, 1,
/// 2, 3, ...
pub(crate) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The inverse of [`zigzag`].
pub(crate) fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A varint at `bytes[*pos..]`, moving `pos` past it.
fn varint(bytes: &[u8], pos: &mut usize) -> Result<u64, &'static str> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*pos).ok_or("truncated")?;
        *pos += 1;
        v |= u64::from(b & 0x7F) << shift;
        if b < 0x80 {
            return Ok(v);
        }
    }
    Err("varint too long")
}

/// Bits appended least significant first, straight onto the output.
struct BitWriter<'a> {
    bytes: &'a mut Vec<u8>,
    acc: u64,
    bits: u32,
}

impl BitWriter<'_> {
    /// Appends the low `n` bits of `v` (`n` at most 32: fewer than 32 bits are held between
    /// calls, so the accumulator never overflows). Whole 32-bit words leave in one copy.
    #[inline]
    fn put(&mut self, v: u64, n: u32) {
        debug_assert!(n <= 32);
        if n == 0 {
            return;
        }
        self.put_code(v & (u64::MAX >> (64 - n)), n);
    }

    /// [`BitWriter::put`] of a code of `n` bits (1 to 32), already within them.
    #[inline]
    fn put_code(&mut self, code: u64, n: u32) {
        debug_assert!((1..=32).contains(&n) && code >> n == 0);
        self.acc |= code << self.bits;
        self.bits += n;
        if self.bits >= 32 {
            self.bytes
                .extend_from_slice(&(self.acc as u32).to_le_bytes());
            self.acc >>= 32;
            self.bits -= 32;
        }
    }

    /// Any number of bits, in pieces.
    fn put_wide(&mut self, v: u64, n: u32) {
        if n > 32 {
            self.put(v, 32);
            self.put(v >> 32, n - 32);
        } else {
            self.put(v, n);
        }
    }

    fn ones(&mut self, mut n: u64) {
        while n > 0 {
            let k = n.min(32) as u32;
            self.put((1u64 << k) - 1, k);
            n -= u64::from(k);
        }
    }

    /// The last bits, in whole bytes.
    fn finish(mut self) {
        while self.bits > 0 {
            self.bytes.push(self.acc as u8);
            self.acc >>= 8;
            self.bits = self.bits.saturating_sub(8);
        }
    }
}

/// Bits one value of `u` costs at parameter `r`.
#[cfg(test)]
fn cost(u: u64, r: u32) -> u64 {
    let q = u >> r;
    if q < ESCAPE {
        q + 1 + u64::from(r)
    } else {
        ESCAPE + 6 + u64::from(63 - u.leading_zeros())
    }
}

/// The parameter for a block and the bits its values cost at it, `None` when every value is
/// the center (zero): the cheapest within one of two guesses, the bit length of the values'
/// mean (right for evenly spread values) and their mean bit length (right when a spike would
/// pull the mean up). Ties go to the smaller parameter.
fn parameter(us: &[u64]) -> Option<(u64, u32)> {
    let (mut sum, mut bits, mut max) = (0u128, 0u32, 0u64);
    for &u in us {
        sum += u128::from(u);
        bits += 64 - u.leading_zeros();
        max = max.max(u);
    }
    if sum == 0 {
        return None;
    }
    let count = us.len().max(1);
    let mean = sum / count as u128;
    let of_mean = (128 - mean.leading_zeros())
        .saturating_sub(1)
        .min(MAX_PARAMETER);
    let mean_bits = (bits / count as u32).saturating_sub(1).min(MAX_PARAMETER);
    // The candidates around both guesses, each costed once (the guesses often agree): at
    // most three consecutive ones around each, costed together in one pass.
    let (low, high) = (mean_bits.min(of_mean), mean_bits.max(of_mean));
    let first = (low.saturating_sub(1), (low + 1).min(MAX_PARAMETER));
    let second = (
        high.saturating_sub(1).max(first.1 + 1),
        (high + 1).min(MAX_PARAMETER),
    );
    let mut best = (u64::MAX, 0);
    for (from, to) in [first, second] {
        if from > to {
            continue;
        }
        let totals = if max >> from < ESCAPE {
            unescaped_costs_from(us, from)
        } else {
            costs_from(us, from)
        };
        for r in from..=to {
            best = best.min((totals[(r - from) as usize], r));
        }
    }
    Some(best)
}

/// The bits the values cost at parameters `r`, `r + 1` and `r + 2`, in one pass: each value's
/// unary part at each (its escape's cost when too long), the fixed `1 + r` bits of each code
/// added at the end (wrapping sums: the totals themselves are far below 2^64).
fn costs_from(us: &[u64], r: u32) -> [u64; 3] {
    let r = u64::from(r);
    let fixed = [r + 1, r + 2, r + 3];
    let (mut t0, mut t1, mut t2) = (0u64, 0u64, 0u64);
    for &u in us {
        let escaped = ESCAPE + 6 + u64::from(63 - u.leading_zeros().min(63));
        let q0 = u >> r;
        let (q1, q2) = (q0 >> 1, q0 >> 2);
        t0 = t0.wrapping_add(if q0 < ESCAPE {
            q0
        } else {
            escaped.wrapping_sub(fixed[0])
        });
        t1 = t1.wrapping_add(if q1 < ESCAPE {
            q1
        } else {
            escaped.wrapping_sub(fixed[1])
        });
        t2 = t2.wrapping_add(if q2 < ESCAPE {
            q2
        } else {
            escaped.wrapping_sub(fixed[2])
        });
    }
    let n = us.len() as u64;
    [
        t0.wrapping_add(n * fixed[0]),
        t1.wrapping_add(n * fixed[1]),
        t2.wrapping_add(n * fixed[2]),
    ]
}

/// [`costs_from`] when no value escapes at `r` (nor, then, at `r + 1` and `r + 2`): each
/// code is the value's quotient in ones plus `1 + r` bits, a loop of shifts and sums.
fn unescaped_costs_from(us: &[u64], r: u32) -> [u64; 3] {
    let (mut t0, mut t1, mut t2) = (0u64, 0u64, 0u64);
    for &u in us {
        let q = u >> r;
        t0 += q;
        t1 += q >> 1;
        t2 += q >> 2;
    }
    let n = us.len() as u64;
    let r = u64::from(r);
    [t0 + n * (r + 1), t1 + n * (r + 2), t2 + n * (r + 3)]
}

/// Appends the Rice sequence of `values` to `out`: [`Planned::new`] then [`Planned::write`].
pub fn write(values: &[i64], out: &mut Vec<u8>) {
    Planned::new(values).write(out);
}

/// A Rice sequence costed and not yet written: its center, its values' zigzags around it,
/// each block's parameter and the byte length of its bits. A writer choosing among several
/// encodings plans each, compares their [`Planned::encoded_len`]s and writes only the one
/// it keeps: the losers' bits are never written.
#[derive(Debug, Clone, Default)]
pub struct Planned {
    center: i64,
    us: Vec<u64>,
    params: Vec<u32>,
    /// Bytes of the bits.
    len: u64,
}

impl Planned {
    /// Each block's parameter is chosen first, so the byte length is known before the bits.
    pub fn new(values: &[i64]) -> Self {
        let center = median(values);
        let us: Vec<u64> = values
            .iter()
            .map(|v| zigzag(v.wrapping_sub(center)))
            .collect();
        let mut params = Vec::with_capacity(values.len().div_ceil(BLOCK));
        let mut total_bits = 0u64;
        for block in us.chunks(BLOCK) {
            let (cost, r) = parameter(block).unwrap_or((0, CENTER_BLOCK));
            total_bits += 6 + cost;
            params.push(r);
        }
        Self {
            center,
            us,
            params,
            len: total_bits.div_ceil(8),
        }
    }

    /// The bytes [`Planned::write`] appends: the center's and the length's varints and the
    /// bits.
    pub fn encoded_len(&self) -> usize {
        varint_len(zigzag(self.center)) + varint_len(self.len) + self.len as usize
    }

    /// Appends the sequence to `out`, its bits straight onto it.
    pub fn write(&self, out: &mut Vec<u8>) {
        put_varint(out, zigzag(self.center));
        put_varint(out, self.len);
        let start = out.len();
        out.reserve(self.len as usize + 4);
        let mut w = BitWriter {
            bytes: out,
            acc: 0,
            bits: 0,
        };
        for (block, &r) in self.us.chunks(BLOCK).zip(&self.params) {
            w.put(u64::from(r), 6);
            if r == CENTER_BLOCK {
                continue;
            }
            let low_mask = u64::MAX >> (63 - r) >> 1;
            for &u in block {
                let q = u >> r;
                if q < ESCAPE && q as u32 + 1 + r <= 32 {
                    // The whole code in one put: q ones, a zero, the low r bits of u.
                    w.put_code(
                        ((1u64 << q) - 1) | ((u & low_mask) << (q + 1)),
                        q as u32 + 1 + r,
                    );
                } else if q < ESCAPE {
                    w.ones(q);
                    w.put(0, 1);
                    w.put_wide(u, r);
                } else {
                    let width = 64 - u.leading_zeros();
                    w.ones(ESCAPE);
                    w.put(u64::from(width - 1), 6);
                    w.put_wide(u, width - 1);
                }
            }
        }
        w.finish();
        debug_assert_eq!((out.len() - start) as u64, self.len);
    }
}

/// The bytes `put_varint` writes for `v`.
pub fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Reads the Rice sequence of `n` values at the start of `bytes`, giving each to `f` in order;
/// returns the bytes it took. Fails on a sequence cut short, with bytes past its values, or
/// with more blocks than its length allows, and when `f` fails.
pub fn read(
    bytes: &[u8],
    n: usize,
    f: impl FnMut(i64) -> Result<(), &'static str>,
) -> Result<usize, &'static str> {
    let mut pos = 0;
    let center = unzigzag(varint(bytes, &mut pos)?);
    let len = usize::try_from(varint(bytes, &mut pos)?).map_err(|_| "truncated")?;
    let end = pos.checked_add(len).ok_or("truncated")?;
    let data = bytes.get(pos..end).ok_or("truncated")?;
    // Every block takes at least its 6-bit parameter.
    if n.div_ceil(BLOCK) > len.saturating_mul(8) / 6 {
        return Err("truncated");
    }
    let mut reader = Reader::new(center, data);
    reader.for_each(n, f)?;
    reader.finish()?;
    Ok(end)
}

/// Values a center is taken from: a longer sequence gives an evenly spaced sample of this many.
const CENTER_SAMPLE: usize = 255;

/// The center of `values`: their middle value (the upper one of an even count), or for more
/// than [`CENTER_SAMPLE`] values the middle of an evenly spaced sample of that many (a full
/// selection over thousands of values cost a third of the writing); 0 for none.
fn median(values: &[i64]) -> i64 {
    if values.is_empty() {
        return 0;
    }
    let mut copy: Vec<i64> = if values.len() <= CENTER_SAMPLE {
        values.to_vec()
    } else {
        (0..CENTER_SAMPLE)
            .map(|i| values[i * values.len() / CENTER_SAMPLE])
            .collect()
    };
    let middle = copy.len() / 2;
    *copy.select_nth_unstable(middle).1
}

/// Reads a Rice sequence's values through a 64-bit buffer refilled a word at a time. Past the
/// end of the bytes it reads zero bits and counts them: a block that needed bits the bytes do
/// not have fails.
struct Reader<'a> {
    center: i64,
    data: &'a [u8],
    /// The next byte of `data` to load.
    pos: usize,
    /// Bits loaded and not yet taken, least significant first, and how many.
    acc: u64,
    bits: u32,
}

impl<'a> Reader<'a> {
    /// A reader over `data`, the sequence's bytes after its length, around `center`.
    fn new(center: i64, data: &'a [u8]) -> Self {
        Reader {
            center,
            data,
            pos: 0,
            acc: 0,
            bits: 0,
        }
    }

    /// Bits taken in all: those loaded (zeros past the end included) less those buffered.
    fn taken(&self) -> usize {
        self.pos * 8 - self.bits as usize
    }

    /// Loads bytes until at least 56 bits are buffered (zeros past the end).
    #[inline]
    fn refill(&mut self) {
        if self.bits >= 57 {
            return;
        }
        match self.data.get(self.pos..self.pos + 8) {
            // Eight bytes at hand: the whole word goes above the buffered bits, and the
            // bytes that fit whole are counted (the bits above those are the next byte's
            // own, loaded again by the next refill).
            Some(w) => {
                let word = u64::from_le_bytes(w.try_into().unwrap_or_default());
                self.acc |= word << self.bits;
                self.pos += ((63 - self.bits) / 8) as usize;
                self.bits |= 56;
            }
            None => self.refill_at_end(),
        }
    }

    /// [`Reader::refill`] within eight bytes of the end: the bytes left, then zeros.
    #[cold]
    #[inline(never)]
    fn refill_at_end(&mut self) {
        let room = (63 - self.bits) / 8;
        let mut b = [0u8; 8];
        let rest = self.data.get(self.pos..).unwrap_or(&[]);
        let n = rest.len().min(8);
        b[..n].copy_from_slice(&rest[..n]);
        let word = u64::from_le_bytes(b);
        // The bytes that fit whole above the buffered bits (at most 7: 8 * room <= 56).
        let keep = word & ((1u64 << (8 * room)) - 1);
        self.acc |= keep << self.bits;
        self.bits += 8 * room;
        self.pos += room as usize;
    }

    /// Takes `n` bits (at most 56, after a refill).
    #[inline]
    fn take(&mut self, n: u32) -> u64 {
        self.refill();
        let v = if n == 0 {
            0
        } else {
            self.acc & (u64::MAX >> (64 - n))
        };
        self.acc = if n >= 64 { 0 } else { self.acc >> n };
        self.bits -= n;
        v
    }

    /// Any number of bits up to 64 (one take up to 56, the buffer's least after a refill).
    #[inline]
    fn take_wide(&mut self, n: u32) -> u64 {
        if n > 56 {
            let low = self.take(32);
            low | (self.take(n - 32) << 32)
        } else {
            self.take(n)
        }
    }

    /// Each of the next `n` values given to `f`, block by block; fails when the values need
    /// bits past the bytes, or `f` fails.
    fn for_each(
        &mut self,
        n: usize,
        mut f: impl FnMut(i64) -> Result<(), &'static str>,
    ) -> Result<(), &'static str> {
        let mut left = n;
        while left > 0 {
            let count = left.min(BLOCK);
            left -= count;
            let r = self.take(6) as u32;
            if r == CENTER_BLOCK {
                for _ in 0..count {
                    f(self.center)?;
                }
                continue;
            }
            let mask = u64::MAX >> (63 - r) >> 1;
            let center = self.center;
            if r <= FAST_PARAMETER {
                // Any unescaped code fits in the 56 bits a refill leaves: a refill when
                // fewer than the longest are buffered, then the code, without more checks.
                let longest = ESCAPE as u32 + 1 + r;
                for _ in 0..count {
                    if self.bits < longest {
                        self.refill();
                    }
                    let q = (!self.acc).trailing_zeros();
                    let u = if u64::from(q) < ESCAPE {
                        let u = (u64::from(q) << r) | ((self.acc >> (q + 1)) & mask);
                        let used = q + 1 + r;
                        self.acc >>= used;
                        self.bits -= used;
                        u
                    } else {
                        self.escaped(r)?
                    };
                    f(unzigzag(u).wrapping_add(center))?;
                }
                if self.taken() > self.data.len() * 8 {
                    return Err("truncated");
                }
                continue;
            }
            let mut i = 0;
            while i < count {
                // The common case in registers: a refill when under 57 bits, then whole
                // codes while they are buffered.
                self.refill();
                let (mut acc, mut bits) = (self.acc, self.bits);
                while i < count {
                    let q = (!acc).trailing_zeros();
                    let used = q + 1 + r;
                    if u64::from(q) >= ESCAPE || used > bits {
                        break;
                    }
                    let u = (u64::from(q) << r) | ((acc >> (q + 1)) & mask);
                    acc = acc.checked_shr(used).unwrap_or(0);
                    bits -= used;
                    f(unzigzag(u).wrapping_add(center))?;
                    i += 1;
                }
                (self.acc, self.bits) = (acc, bits);
                if i == count {
                    break;
                }
                self.refill();
                let q = (!self.acc).trailing_zeros();
                if u64::from(q) < ESCAPE && q + 1 + r <= self.bits {
                    // Whole in the buffer after the refill: the loop above takes it.
                    continue;
                }
                let u = if u64::from(q) < ESCAPE {
                    self.take(q + 1);
                    (u64::from(q) << r) | self.take_wide(r)
                } else {
                    self.escaped(r)?
                };
                f(unzigzag(u).wrapping_add(center))?;
                i += 1;
            }
            if self.taken() > self.data.len() * 8 {
                return Err("truncated");
            }
        }
        Ok(())
    }

    /// An escaped value at parameter `r`: its ones, its width, its bits below the top one.
    #[cold]
    fn escaped(&mut self, r: u32) -> Result<u64, &'static str> {
        self.take(ESCAPE as u32);
        let width = self.take(6) as u32 + 1;
        let u = (1u64 << (width - 1)) | self.take_wide(width - 1);
        if u >> r < ESCAPE {
            return Err("escape not needed");
        }
        Ok(u)
    }

    /// After the last value: the bits must have filled exactly the bytes given.
    fn finish(&self) -> Result<(), &'static str> {
        if self.taken().div_ceil(8) != self.data.len() {
            return Err("rice sequence length differs");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(values: &[i64]) -> Vec<u8> {
        let mut out = Vec::new();
        write(values, &mut out);
        let mut back = Vec::new();
        let used = read(&out, values.len(), |v| {
            back.push(v);
            Ok(())
        })
        .expect("values");
        assert_eq!(used, out.len());
        assert_eq!(back, values);
        out
    }

    #[test]
    fn documented_bytes() {
        // Median 1 (the upper middle of -1, 0, 1, 2): zigzags of -1, 0, -2, 1 are 1, 0, 3, 2;
        // r = 0 and r = 1 both take 10 bits, the first is taken: each value in unary.
        let out = round_trip(&[0, 1, -1, 2]);
        // Bits in stream order (least significant first): r (6), then the values: 16 bits.
        let bits = ["000000", "10", "0", "1110", "110"].concat();
        let acc = bits
            .chars()
            .enumerate()
            .fold(0u32, |a, (i, c)| a | (u32::from(c == '1') << i));
        let mut want = vec![0x02, 0x02];
        want.extend_from_slice(&acc.to_le_bytes()[..2]);
        assert_eq!(out, want);
        assert_eq!(out, [0x02, 0x02, 0x40, 0x6E]);
        // A constant sequence: a 6-bit marker a block.
        assert_eq!(round_trip(&[9; 40]), [0x12, 0x02, 0xFF, 0x0F]);
    }

    /// The bytes of a mixed sequence (unary codes, escapes, wide and constant values, codes
    /// across word boundaries), as the encoder wrote them before its word-at-a-time writes.
    /// A reader takes any parameters a writer chose; pinning the writer's choices makes a
    /// change in them (and in what sequences cost on disk) a deliberate one.
    #[test]
    fn bytes_stay_as_first_written() {
        let values: Vec<i64> = (0..100i64)
            .map(|i| match i % 10 {
                0 => i * 1000,
                3 => -(i * i),
                7 => 1 << (i % 50),
                _ => i % 7 - 3,
            })
            .collect();
        let hex: String = round_trip(&values)
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect();
        assert_eq!(
            hex,
            "00C30103982C84FCFF8F0098FCFF3B200EE1FF3F12A526FFFF12000084FFFF0F1047EDFF5F090108FF\
             FF3900000050FBFF7FC0D45010FFFF4B2018C5F8FF37010000000080F8FF87007118E5FF7F89B30010\
             FFFF30000000000000A3FCFF43A08602F0FFCFC417C228FF8000FCFF43C0D408F3FFCF047C6108C0FF\
             BF040000C2FCFF47E0220CE1FFBF094D04C2FCFF730000006008FFFF11401C02F9FF6FA2AB6208FFFF\
             26000000004020FFFF11C82FC5F8FF772207806010C0FF3F0C0000000000A0000C00"
        );
    }

    #[test]
    fn spikes_and_extremes() {
        round_trip(&[]);
        round_trip(&[i64::MIN, i64::MAX, 0, -1, 1, i64::MIN]);
        let mut v = vec![1; 100];
        v[40] = 1 << 50;
        let out = round_trip(&v);
        // One spike costs its own width, not the block's: well under 100 x 51 bits.
        assert!(out.len() < 60, "{}", out.len());
    }

    #[test]
    fn refusals() {
        let mut out = Vec::new();
        write(&[5, 6, 7], &mut out);
        let data = &out[2..];
        // Cut short.
        let mut r = Reader::new(6, &data[..data.len() - 1]);
        assert_eq!(r.for_each(3, |_| Ok(())), Err("truncated"));
        // A byte too many.
        let mut long = data.to_vec();
        long.push(0);
        let mut r = Reader::new(6, &long);
        r.for_each(3, |_| Ok(())).expect("values");
        assert_eq!(r.finish(), Err("rice sequence length differs"));
        // An escape for a value that fits: r = 0, sixteen ones, width 1.
        let mut bytes = Vec::new();
        let mut w = BitWriter {
            bytes: &mut bytes,
            acc: 0,
            bits: 0,
        };
        w.put(0, 6);
        w.ones(ESCAPE);
        w.put(0, 6);
        w.finish();
        assert_eq!(
            Reader::new(0, &bytes).for_each(1, |_| Ok(())),
            Err("escape not needed")
        );
    }

    /// The longest unescaped codes (fifteen ones) at every parameter, one after another:
    /// around the largest parameter whose codes fit in a refill's bits and past it.
    #[test]
    fn longest_codes_at_every_parameter() {
        for r in 0..=MAX_PARAMETER {
            let mut bytes = Vec::new();
            let mut w = BitWriter {
                bytes: &mut bytes,
                acc: 0,
                bits: 0,
            };
            let low = if r == 0 { 0 } else { u64::MAX >> (64 - r) };
            let mut want = Vec::new();
            w.put(u64::from(r), 6);
            for k in 0..BLOCK as u64 {
                let u = (15 << r) | (low & k.wrapping_mul(0x9E37_79B9_7F4A_7C15));
                w.ones(15);
                w.put(0, 1);
                w.put_wide(u, r);
                want.push(unzigzag(u).wrapping_add(5));
            }
            w.finish();
            let mut got = Vec::new();
            let mut reader = Reader::new(5, &bytes);
            reader
                .for_each(BLOCK, |v| {
                    got.push(v);
                    Ok(())
                })
                .expect("values");
            reader.finish().expect("whole");
            assert_eq!(got, want, "parameter {r}");
        }
    }

    proptest! {
        #[test]
        fn any_values_round_trip(values in proptest::collection::vec(any::<i64>(), 0..200)) {
            round_trip(&values);
        }

        #[test]
        fn small_walks_round_trip(values in proptest::collection::vec(-3000i64..3000, 0..300)) {
            round_trip(&values);
        }

        /// Sequences of every parameter, through the decoder's fast range (parameters up to
        /// 39) and past it, with the longest unescaped codes (steps several times the usual)
        /// and spikes that take escapes between codes.
        #[test]
        fn walks_of_every_width_round_trip(
            width in 0u32..52,
            steps in proptest::collection::vec((any::<i64>(), 0u8..10), 0..300),
        ) {
            let mut v = 0i64;
            let values: Vec<i64> = steps
                .iter()
                .map(|(step, kind)| {
                    let step = step >> (63 - width);
                    v = v.wrapping_add(match kind {
                        0 => step << 12,
                        1 | 2 => step.wrapping_mul(7),
                        _ => step,
                    });
                    v
                })
                .collect();
            round_trip(&values);
        }

        /// The parameter chosen, and its cost, are those of costing each candidate value by
        /// value ([`cost`]): the one-pass sums change no byte written.
        #[test]
        fn parameters_are_those_costed_value_by_value(
            width in 0u32..64,
            spike in 0u32..64,
            values in proptest::collection::vec((any::<u64>(), 0u8..8), 1..=BLOCK),
        ) {
            let us: Vec<u64> = values
                .iter()
                .map(|(u, kind)| match kind {
                    0 => u >> (63 - spike),
                    1 => 0,
                    _ => u >> (63 - width),
                })
                .collect();
            let count = us.len() as u128;
            let mean = us.iter().map(|u| u128::from(*u)).sum::<u128>() / count;
            let of_mean = (128 - mean.leading_zeros()).saturating_sub(1).min(MAX_PARAMETER);
            let bits: u32 = us.iter().map(|u| 64 - u.leading_zeros()).sum();
            let mean_bits = (bits / count as u32).saturating_sub(1).min(MAX_PARAMETER);
            let (low, high) = (mean_bits.min(of_mean), mean_bits.max(of_mean));
            let around = |g: u32| g.saturating_sub(1)..=(g + 1).min(MAX_PARAMETER);
            let mut best = (u64::MAX, 0);
            for r in around(low).chain(around(high).filter(|r| *r > (low + 1).min(MAX_PARAMETER))) {
                best = best.min((us.iter().map(|u| cost(*u, r)).sum::<u64>(), r));
            }
            let want = us.iter().any(|u| *u != 0).then_some(best);
            prop_assert_eq!(parameter(&us), want);
        }

        /// A planned sequence's length is the bytes it writes, for any values and
        /// real-shaped walks (the float sections choose their encoding by these lengths).
        #[test]
        fn planned_length_is_the_bytes_written(
            width in 0u32..64,
            steps in proptest::collection::vec((any::<i64>(), 0u8..10), 0..400),
        ) {
            let mut v = 0i64;
            let values: Vec<i64> = steps
                .iter()
                .map(|(step, kind)| {
                    v = v.wrapping_add(match kind {
                        0 => *step,
                        1 => 0,
                        _ => step >> (63 - width),
                    });
                    v
                })
                .collect();
            let planned = Planned::new(&values);
            let mut out = vec![7u8];
            planned.write(&mut out);
            prop_assert_eq!(out.len() - 1, planned.encoded_len());
            prop_assert_eq!(&out[1..], &round_trip(&values)[..]);
        }

        #[test]
        fn varint_len_is_the_bytes_put(v in any::<u64>(), shift in 0u32..64) {
            for v in [v, v >> shift, 0, 127, 128] {
                let mut out = Vec::new();
                put_varint(&mut out, v);
                prop_assert_eq!(out.len(), varint_len(v));
            }
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64), n in 0usize..100) {
            let mut r = Reader::new(-3, &bytes);
            if r.for_each(n, |_| Ok(())).is_ok() {
                let _ = r.finish();
            }
        }
    }
}
