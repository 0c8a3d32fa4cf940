//! Truncated binary frames (RFC 0014): a sequence of integers as its least value, the span
//! of the values above it, then each value above the least in a truncated binary code of that
//! span. A frame spends `w` bits on every value of a span below `2^w`; when the span is not one
//! less than a power of two, a truncated binary code spends `w - 1` bits on the first
//! `2^w - (span + 1)` values and `w` on the rest (values stepping by one of 21 equally likely
//! amounts: 4.48 bits a value against a frame's 5).
//!
//! ```text
//! | least (zigzag varint) | span s (varint, below 2^32) | bits, least significant first |
//! w = bit length of s, h = 2^(w-1), short = 2^w - (s + 1)
//! u < short:        the w - 1 bits of u
//! short <= u < h:   the w bits of u (its top bit 0)
//! u >= h:           the w bits of (u - h + short) + h (its top bit 1)
//! ```
//!
//! A reader takes the low `w - 1` bits as `x`: below `short` it is the value, else the next
//! bit `b` gives `x + b × (h - short)`. The bits fill whole bytes, the last byte's unused high
//! bits zero.

/// Spans from this on are refused: their codes would not fit the reader's word.
pub(super) const SPAN_LIMIT: u64 = 1 << 32;

/// The code of one span.
#[derive(Debug, Clone, Copy)]
struct Code {
    /// Bits of a long code (0: a span of zero, no bits at all).
    width: u32,
    /// Values below this take `width - 1` bits.
    short: u64,
    /// `2^(width - 1)`.
    half: u64,
}

impl Code {
    fn new(span: u64) -> Code {
        debug_assert!(span < SPAN_LIMIT);
        let width = 64 - span.leading_zeros();
        if width == 0 {
            return Code {
                width,
                short: 0,
                half: 0,
            };
        }
        Code {
            width,
            short: (1u64 << width) - (span + 1),
            half: 1u64 << (width - 1),
        }
    }

    /// The bits `u`'s code takes.
    #[inline]
    fn bits(self, u: u64) -> u32 {
        self.width - u32::from(u < self.short)
    }

    /// `u`'s code (within its [`Code::bits`]).
    #[inline]
    fn code(self, u: u64) -> u64 {
        if u < self.half {
            u
        } else {
            u - self.half + self.short + self.half
        }
    }
}

/// The span of `values` above their least (wrapping), with that least.
fn least_and_span(values: &[i64]) -> (i64, u64) {
    let least = values.iter().copied().min().unwrap_or(0);
    let top = values.iter().copied().max().unwrap_or(0);
    (least, top.wrapping_sub(least) as u64)
}

/// The bytes [`write()`] appends for `values`; `None` when their span is too wide.
pub(super) fn encoded_len(values: &[i64]) -> Option<usize> {
    let (least, span) = least_and_span(values);
    if span >= SPAN_LIMIT {
        return None;
    }
    let code = Code::new(span);
    let bits: u64 = values
        .iter()
        .map(|v| u64::from(code.bits(v.wrapping_sub(least) as u64)))
        .sum();
    Some(
        super::rice::varint_len(super::zigzag(least))
            + super::rice::varint_len(span)
            + bits.div_ceil(8) as usize,
    )
}

/// Appends `values` as a truncated binary frame. Their span must be below [`SPAN_LIMIT`]
/// ([`encoded_len`] gives `Some`).
pub(super) fn write(values: &[i64], out: &mut Vec<u8>) {
    let (least, span) = least_and_span(values);
    super::put_varint(out, super::zigzag(least));
    super::put_varint(out, span);
    let code = Code::new(span);
    let (mut acc, mut bits) = (0u64, 0u32);
    for v in values {
        let u = v.wrapping_sub(least) as u64;
        acc |= code.code(u) << bits;
        bits += code.bits(u);
        // At most 32 bits a code: flush whole 32-bit words.
        if bits >= 32 {
            out.extend_from_slice(&(acc as u32).to_le_bytes());
            acc >>= 32;
            bits -= 32;
        }
    }
    while bits > 0 {
        out.push(acc as u8);
        acc >>= 8;
        bits = bits.saturating_sub(8);
    }
}

/// Reads a truncated binary frame of `n` values at the start of `bytes`, giving each to `f`
/// in order; returns the bytes it took. Fails on a span of [`SPAN_LIMIT`] or more and on a
/// frame cut short.
pub(super) fn read(bytes: &[u8], n: usize, mut f: impl FnMut(i64)) -> Result<usize, &'static str> {
    let mut r = super::Reader { bytes, pos: 0 };
    let least = super::unzigzag(r.varint()?);
    let span = r.varint()?;
    if span >= SPAN_LIMIT {
        return Err("bad span");
    }
    let code = Code::new(span);
    let data = &bytes[r.pos..];
    if code.width == 0 {
        for _ in 0..n {
            f(least);
        }
        return Ok(r.pos);
    }
    // Every value takes at least `width - 1` bits: a count the bytes cannot hold is refused
    // before any is read.
    let least_bits = n as u64 * u64::from(code.width - 1);
    if least_bits > data.len() as u64 * 8 {
        return Err("truncated");
    }
    // Codes are taken from a 64-bit buffer refilled a word at a time (zeros past the end,
    // counted: a frame that needed them is cut short).
    let (width, short) = (code.width, code.short);
    let (low, step) = (code.half - 1, code.half - code.short);
    let (mut acc, mut held, mut pos) = (0u64, 0u32, 0usize);
    for _ in 0..n {
        if held < width {
            let word = match data.get(pos..pos + 8) {
                Some(w) => u64::from_le_bytes(w.try_into().unwrap_or_default()),
                None => data
                    .get(pos..)
                    .unwrap_or(&[])
                    .iter()
                    .rev()
                    .fold(0u64, |acc, b| (acc << 8) | u64::from(*b)),
            };
            // The bytes that fit whole above the bits held (at least 4: a code is at most
            // 32 bits, so fewer than 32 are held here).
            acc |= word << held;
            let bytes = (63 - held) / 8;
            pos += bytes as usize;
            held += 8 * bytes;
        }
        // Without a branch: which codes are long is as random as the values.
        let x = acc & low;
        let long = x >= short;
        let u = x + ((acc >> (width - 1)) & u64::from(long)) * step;
        let len = width - 1 + u32::from(long);
        acc >>= len;
        held -= len;
        f(least.wrapping_add(u as i64));
    }
    let taken = (pos * 8 - held as usize).div_ceil(8);
    if taken > data.len() {
        return Err("truncated");
    }
    Ok(r.pos + taken)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(values: &[i64]) -> Vec<i64> {
        let mut out = Vec::new();
        write(values, &mut out);
        assert_eq!(Some(out.len()), encoded_len(values));
        let mut back = Vec::new();
        let taken = read(&out, values.len(), |v| back.push(v)).expect("reads back");
        assert_eq!(taken, out.len());
        back
    }

    #[test]
    fn a_span_of_twenty_takes_four_or_five_bits() {
        // 21 values: 11 short codes of 4 bits, 10 long ones of 5.
        let values: Vec<i64> = (-10..=10).collect();
        let mut out = Vec::new();
        write(&values, &mut out);
        // least -10 (zigzag 19), span 20, then 11 × 4 + 10 × 5 = 94 bits in 12 bytes.
        assert_eq!(&out[..2], &[19, 20]);
        assert_eq!(out.len(), 2 + 12);
        assert_eq!(round_trip(&values), values);
        // The codes by hand: u = 10 (short) is 1010, u = 11 (below h = 16, not short) is
        // 01011, u = 16 (h and above) is 16 - 16 + 11 + 16 = 27, 11011.
        let code = Code::new(20);
        assert_eq!((code.short, code.half), (11, 16));
        assert_eq!((code.code(10), code.bits(10)), (10, 4));
        assert_eq!((code.code(11), code.bits(11)), (11, 5));
        assert_eq!((code.code(16), code.bits(16)), (27, 5));
        assert_eq!((code.code(20), code.bits(20)), (31, 5));
    }

    #[test]
    fn spans_of_a_power_of_two_less_one_are_frames() {
        for span in [1u64, 3, 7, 255] {
            let code = Code::new(span);
            assert_eq!(code.short, 0);
            assert!((0..=span).all(|u| code.bits(u) == code.width && code.code(u) == u));
        }
        // A span of zero: no bits at all.
        assert_eq!(round_trip(&[5, 5, 5]), vec![5, 5, 5]);
        assert_eq!(encoded_len(&[5, 5, 5]), Some(2));
    }

    #[test]
    fn cut_and_wide_frames_are_refused() {
        let values: Vec<i64> = (0..100).map(|i| (i * 7) % 21).collect();
        let mut out = Vec::new();
        write(&values, &mut out);
        for cut in 0..out.len() {
            assert!(
                read(&out[..cut], values.len(), |_| {}).is_err(),
                "cut at {cut}"
            );
        }
        let mut wide = Vec::new();
        super::super::put_varint(&mut wide, 0);
        super::super::put_varint(&mut wide, SPAN_LIMIT);
        wide.extend_from_slice(&[0; 64]);
        assert_eq!(read(&wide, 1, |_| {}), Err("bad span"));
        assert_eq!(encoded_len(&[0, SPAN_LIMIT as i64]), None);
    }

    proptest! {
        #[test]
        fn any_values_round_trip(
            least in any::<i64>(),
            span in 0u64..SPAN_LIMIT,
            picks in proptest::collection::vec(any::<u64>(), 0..300),
        ) {
            let values: Vec<i64> = picks
                .iter()
                .map(|p| least.wrapping_add((p % (span + 1)) as i64))
                .collect();
            prop_assert_eq!(round_trip(&values), values);
        }

        #[test]
        fn reading_any_bytes_never_panics(
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
            n in 0usize..200,
        ) {
            let _ = read(&bytes, n, |_| {});
        }
    }
}
