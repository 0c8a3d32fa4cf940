//! The `dps` of a query answer written as text: `{"t":v,...}`, or `[[t,v],...]` with
//! `arrays`. An answer of a raw series over weeks is tens of thousands of points, and
//! writing them was most of such a query's CPU (itoa and a bounds-checked push per piece):
//! here each point is built in a stack chunk at fixed offsets (a timestamp a few seconds
//! after the one before changes its last two digits only), and the chunk goes to the answer
//! every few kilobytes.

use hourglass_core::value::{JAVA_SCIENTIFIC_MAX, java_double_text, java_plain, java_scientific};
use hourglass_engine::num::Num;

/// Bytes of the chunk points are built in before they go to the answer.
const CHUNK: usize = 4096;
/// The most one point takes in the chunk: its opening (copied whole), two 20-digit numbers
/// and punctuation, or a double's text (at most 24 characters) quoted.
const POINT_MAX: usize = 80;

/// Points from which an answer's second half is written on a kept query thread while this
/// thread writes the first: writing is most of a long raw answer's work (about 60-120
/// instructions a point), and the halves' texts only need joining.
const SPLIT_POINTS: usize = 8192;

/// Appends `dps` to `out` as OpenTSDB writes them: timestamps in ms when `ms`, else in
/// seconds; NaN as `null` when `null_for_nan`, else `"NaN"`; an object of `"t":v` pairs, or
/// an array of `[t,v]` pairs with `arrays`.
pub(crate) fn write_dps(
    out: &mut Vec<u8>,
    dps: &[(i64, Num)],
    ms: bool,
    arrays: bool,
    null_for_nan: bool,
) {
    let run = match (ms, arrays) {
        (false, false) => write_run::<false, false>,
        (false, true) => write_run::<false, true>,
        (true, false) => write_run::<true, false>,
        (true, true) => write_run::<true, true>,
    };
    let (open, close) = if arrays { (b'[', b']') } else { (b'{', b'}') };
    if dps.is_empty() {
        out.extend_from_slice(&[open, close]);
        return;
    }
    if dps.len() < SPLIT_POINTS {
        run(out, dps, null_for_nan, Some(open));
    } else {
        // Room for both halves, so joining the second does not move the first.
        out.reserve(dps.len() * 24 + 2);
        let (first, second) = dps.split_at(dps.len() / 2);
        let Ok(()) = hourglass_engine::query::threads::both_written::<std::convert::Infallible>(
            out,
            second.len() * 24,
            |out| {
                run(out, first, null_for_nan, Some(open));
                Ok(())
            },
            |part| {
                run(part, second, null_for_nan, None);
                Ok(())
            },
        );
    }
    out.push(close);
}

/// Appends the points of `dps` (not empty), each after a comma, but the first after `open`
/// when given: one form, its choices known when compiled.
fn write_run<const MS: bool, const ARRAYS: bool>(
    out: &mut Vec<u8>,
    dps: &[(i64, Num)],
    null_for_nan: bool,
    open: Option<u8>,
) {
    let Some((first, rest)) = dps.split_first() else {
        return;
    };
    let mut w = Writer {
        chunk: [0; CHUNK],
        len: 0,
        time: TimeText::new(ARRAYS),
        high: HighDigits::default(),
    };
    out.reserve(dps.len() * 24 + 2);
    w.point::<MS, ARRAYS>(first, null_for_nan);
    if let Some(open) = open {
        w.chunk[0] = open;
    }
    for p in rest {
        if w.len > CHUNK - POINT_MAX {
            w.flush(out);
        }
        w.point::<MS, ARRAYS>(p, null_for_nan);
    }
    w.flush(out);
}

struct Writer {
    chunk: [u8; CHUNK],
    len: usize,
    time: TimeText,
    /// The digits of the last large integer's value above its last eight.
    high: HighDigits,
}

impl Writer {
    /// One point, its comma first: the time and its punctuation in one fixed-size copy, then
    /// the value.
    #[inline]
    fn point<const MS: bool, const ARRAYS: bool>(
        &mut self,
        point: &(i64, Num),
        null_for_nan: bool,
    ) {
        let (t, v) = *point;
        self.time.set(if MS { t } else { t / 1000 });
        self.chunk[self.len..self.len + OPENING].copy_from_slice(&self.time.text);
        self.len += self.time.len;
        match v {
            Num::Int(i) => self.int(i),
            Num::Float(f) => self.float(f, null_for_nan),
        }
        if ARRAYS {
            self.byte(b']');
        }
    }

    #[inline]
    fn byte(&mut self, b: u8) {
        self.chunk[self.len] = b;
        self.len += 1;
    }

    fn float(&mut self, f: f64, null_for_nan: bool) {
        if f.is_nan() && null_for_nan {
            self.bytes(b"null");
        } else if !f.is_finite() {
            self.byte(b'"');
            self.bytes(java_double_text(f).as_bytes());
            self.byte(b'"');
        } else if java_plain(f) {
            // Most doubles: zmij's digits straight into the chunk.
            self.bytes(zmij::Buffer::new().format_finite(f).as_bytes());
        } else {
            // Java's scientific form, written as bytes (no string, no UTF-8 check).
            let mut text = [0; JAVA_SCIENTIFIC_MAX];
            let n = java_scientific(f, &mut text);
            self.bytes(&text[..n]);
        }
    }

    /// An integer's digits. One of nine digits or more is its value above the last eight
    /// (kept from the integer before when the same: counters and slow gauges change their
    /// last digits only) and the last eight, two at a time.
    #[inline(always)]
    fn int(&mut self, i: i64) {
        const EIGHT: u64 = 100_000_000;
        let Ok(v) = u64::try_from(i) else {
            self.bytes(itoa::Buffer::new().format(i).as_bytes());
            return;
        };
        if v < EIGHT {
            // Its eight digits zero-padded, moved down past the leading zeros (all but one
            // for zero) and stored as one word; the bytes past its digits are written over
            // by what follows (the chunk keeps room for a whole point).
            let digits = u64::from_le_bytes(eight_digits(v as u32));
            let zeros = ((digits - ZEROS).trailing_zeros() / 8).min(7);
            self.chunk[self.len..self.len + 8]
                .copy_from_slice(&(digits >> (8 * zeros)).to_le_bytes());
            self.len += 8 - zeros as usize;
            return;
        }
        // Within the kept digits' range (v at least their value times 10^8, less than 10^8
        // above): no division.
        let mut low = v.wrapping_sub(self.high.base);
        if low >= EIGHT || self.high.len == 0 {
            let high = v / EIGHT;
            self.high.set(high, high * EIGHT);
            low = v - high * EIGHT;
        }
        // At most 11 digits above the last eight (i64::MAX / 10^8 has 11).
        self.chunk[self.len..self.len + 20].copy_from_slice(&self.high.digits);
        self.len += self.high.len;
        let low = low as u32;
        self.chunk[self.len..self.len + 8].copy_from_slice(&eight_digits(low));
        self.len += 8;
    }

    /// A short piece of text (at most [`POINT_MAX`] less the point's other bytes).
    fn bytes(&mut self, b: &[u8]) {
        self.chunk[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
    }

    fn flush(&mut self, out: &mut Vec<u8>) {
        // Only ASCII is ever written to the chunk: the answer's bytes take it as it is.
        out.extend_from_slice(&self.chunk[..self.len]);
        self.len = 0;
    }
}

/// Two-digit pairs "00" to "99".
const PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// A point's opening, kept from one point to the next: its comma, `"` (or `[` in arrays), the
/// timestamp's digits, then `":` (or `,`). A later timestamp whose last two digits are the
/// earlier ones' plus the difference, without a carry, changes those two only (most points
/// seconds apart); one with the same digits above its last eight, those eight only.
struct TimeText {
    value: i64,
    /// The opening, left-aligned; bytes past `len` are of no meaning.
    text: [u8; OPENING],
    /// The opening's bytes.
    len: usize,
    /// Where the digits end (a leading '-' for a negative time counted in).
    end: usize,
    /// The value's last two digits as a number (times of two digits or more, not negative).
    low: usize,
    /// Whether the value has two digits or more and is not negative: a later time may then
    /// change its last two only.
    steps: bool,
    /// The punctuation after the digits: `":`, or `,` (its bytes: 2 or 1).
    close: [u8; 2],
    close_len: usize,
}

/// Bytes of a point's opening as copied: at most 2 + 20 + 2.
const OPENING: usize = 32;

impl TimeText {
    fn new(arrays: bool) -> Self {
        let mut text = [0; OPENING];
        text[0] = b',';
        text[1] = if arrays { b'[' } else { b'"' };
        TimeText {
            value: 0,
            text,
            len: 0,
            end: 2,
            low: 0,
            steps: false,
            close: if arrays { [b',', 0] } else { [b'"', b':'] },
            close_len: if arrays { 1 } else { 2 },
        }
    }

    #[inline(always)]
    fn set(&mut self, t: i64) {
        // A time not earlier, by less than 100, after one of two digits or more.
        if let Some(d) = t.checked_sub(self.value)
            && self.steps
            && (d as u64) < 100
        {
            let low = self.low + d as usize;
            if low < 100 {
                let at = self.end - 2;
                self.text[at..at + 2].copy_from_slice(&PAIRS[low * 2..low * 2 + 2]);
                self.low = low;
                self.value = t;
                return;
            }
        }
        self.set_slow(t);
    }

    #[inline(never)]
    fn set_slow(&mut self, t: i64) {
        // Further on within the same 10^8 (downsampled times, an hour or a minute apart):
        // the last eight digits only.
        const EIGHT: i64 = 100_000_000;
        if self.value >= EIGHT && t >= EIGHT && t / EIGHT == self.value / EIGHT {
            let at = self.end - 8;
            self.text[at..at + 8].copy_from_slice(&eight_digits((t % EIGHT) as u32));
            self.low = (t % 100) as usize;
            self.value = t;
            return;
        }
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(t).as_bytes();
        // An i64 takes 20 characters at most, its sign included.
        self.end = 2 + digits.len();
        self.text[2..self.end].copy_from_slice(digits);
        self.text[self.end..self.end + 2].copy_from_slice(&self.close);
        self.len = self.end + self.close_len;
        self.low = (t.rem_euclid(100)) as usize;
        self.value = t;
        self.steps = t >= 10;
    }
}

/// Eight ASCII zeros as a little-endian word.
const ZEROS: u64 = 0x3030_3030_3030_3030;

/// The eight digits of `n` (below 10^8, zero-padded), computed in the lanes of one word:
/// its halves of four digits, their halves of two, then each pair's digits.
fn eight_digits(n: u32) -> [u8; 8] {
    let fours = u64::from(n / 10_000) | (u64::from(n % 10_000) << 32);
    // n / 100 for n below 43,699, in each 32-bit lane.
    let hundreds = ((fours * 5243) >> 19) & 0x0000_007f_0000_007f;
    let pairs = hundreds | ((fours - hundreds * 100) << 16);
    // n / 10 for n below 179, in each 16-bit lane.
    let tens = ((pairs * 103) >> 10) & 0x000f_000f_000f_000f;
    let digits = tens | ((pairs - tens * 10) << 8);
    (digits + ZEROS).to_le_bytes()
}

/// The digits of an integer's value above its last eight, kept for the next integer.
#[derive(Default)]
struct HighDigits {
    /// The value the digits stand for, times 10^8.
    base: u64,
    /// Left-aligned.
    digits: [u8; 20],
    /// 0: none kept yet.
    len: usize,
}

impl HighDigits {
    #[inline(never)]
    fn set(&mut self, high: u64, base: u64) {
        let mut text = itoa::Buffer::new();
        let text = text.format(high).as_bytes();
        self.digits[..text.len()].copy_from_slice(text);
        self.len = text.len();
        self.base = base;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The text `serde_json` would give for the same points, with OpenTSDB's forms for
    /// doubles (the writer's reference).
    fn reference(dps: &[(i64, Num)], ms: bool, arrays: bool, null_for_nan: bool) -> String {
        let value = |v: &Num| match v {
            Num::Int(i) => i.to_string(),
            Num::Float(f) if f.is_nan() && null_for_nan => "null".into(),
            Num::Float(f) if !f.is_finite() => format!("\"{}\"", java_double_text(*f)),
            Num::Float(f) => java_double_text(*f),
        };
        let key = |t: &i64| if ms { *t } else { *t / 1000 };
        let items: Vec<String> = dps
            .iter()
            .map(|(t, v)| {
                if arrays {
                    format!("[{},{}]", key(t), value(v))
                } else {
                    format!("\"{}\":{}", key(t), value(v))
                }
            })
            .collect();
        if arrays {
            format!("[{}]", items.join(","))
        } else {
            format!("{{{}}}", items.join(","))
        }
    }

    fn written(dps: &[(i64, Num)], ms: bool, arrays: bool, null_for_nan: bool) -> String {
        let mut out = Vec::new();
        write_dps(&mut out, dps, ms, arrays, null_for_nan);
        String::from_utf8(out).expect("ASCII")
    }

    /// Long answers, written in two halves on two threads, as the reference: the halves
    /// joined with one comma, each starting its time and upper digits afresh.
    #[test]
    fn long_answers_split_in_halves_as_the_reference() {
        for n in [
            SPLIT_POINTS - 1,
            SPLIT_POINTS,
            SPLIT_POINTS + 1,
            3 * SPLIT_POINTS + 7,
        ] {
            let dps: Vec<(i64, Num)> = (0..n as i64)
                .map(|k| {
                    let t = 1_356_998_399_000 + k * 7_001;
                    let v = if k % 3 == 0 {
                        Num::Float(k as f64 / 7.0)
                    } else {
                        Num::Int(99_999_990 + k * 13)
                    };
                    (t, v)
                })
                .collect();
            for (ms, arrays) in [(false, false), (false, true), (true, false), (true, true)] {
                assert_eq!(
                    written(&dps, ms, arrays, true),
                    reference(&dps, ms, arrays, true),
                    "{n} {ms} {arrays}"
                );
            }
        }
    }

    #[test]
    fn digits_carry_across_lengths_and_signs() {
        let dps: Vec<(i64, Num)> = [
            -9_999_000,
            -1000,
            0,
            9_000,
            10_000,
            99_000,
            100_000,
            1_356_998_399_000,
            1_356_998_400_000,
            9_999_999_999_000,
            10_000_000_000_000,
            i64::MAX,
        ]
        .iter()
        .map(|t| (*t, Num::Int(*t / 7)))
        .collect();
        for ms in [false, true] {
            for arrays in [false, true] {
                assert_eq!(
                    written(&dps, ms, arrays, false),
                    reference(&dps, ms, arrays, false)
                );
            }
        }
        assert_eq!(written(&[], false, false, false), "{}");
        assert_eq!(written(&[], false, true, false), "[]");
        assert_eq!(
            written(&[(1000, Num::Int(i64::MIN))], false, false, false),
            "{\"1\":-9223372036854775808}"
        );
    }

    #[test]
    fn eight_digits_of_every_pattern() {
        for n in (0..100_000_000u32)
            .step_by(9_973)
            .chain([0, 1, 9, 10, 99, 100, 9_999, 10_000, 99_999_999, 10_101_010])
        {
            assert_eq!(&eight_digits(n), format!("{n:08}").as_bytes(), "{n}");
        }
    }

    /// Integers of every length, counters whose last eight digits carry into the ones
    /// above, and signs, as the reference writes them.
    #[test]
    fn integers_reuse_their_upper_digits_only_when_unchanged() {
        let mut values: Vec<i64> = vec![
            0,
            -1,
            99_999_999,
            100_000_000,
            100_000_001,
            199_999_999,
            200_000_000,
            -200_000_000,
            200_000_007,
            12_345_678_900_000_000,
            12_345_678_900_000_001,
            12_345_679_000_000_000,
            i64::MAX,
            i64::MIN,
            1_000_000_000,
            999_999_999,
        ];
        // A counter crossing several of its ninth digits.
        let mut c = 7_399_950_000i64;
        for _ in 0..40 {
            values.push(c);
            c += 3_333_333;
        }
        let dps: Vec<(i64, Num)> = values
            .iter()
            .enumerate()
            .map(|(k, v)| (1_700_000_000_000 + k as i64 * 10_000, Num::Int(*v)))
            .collect();
        for arrays in [false, true] {
            assert_eq!(
                written(&dps, false, arrays, false),
                reference(&dps, false, arrays, false)
            );
        }
        assert_eq!(
            written(&dps[3..6], false, true, false),
            "[[1700000030,100000000],[1700000040,100000001],[1700000050,199999999]]"
        );
    }

    #[test]
    fn doubles_in_opentsdb_forms() {
        let dps = [
            (1000, Num::Float(1.5)),
            (2000, Num::Float(f64::NAN)),
            (3000, Num::Float(f64::INFINITY)),
            (4000, Num::Float(-1.234_567_890_123e-300)),
            (5000, Num::Float(12_345_678_901.0)),
        ];
        for null_for_nan in [false, true] {
            assert_eq!(
                written(&dps, false, false, null_for_nan),
                reference(&dps, false, false, null_for_nan)
            );
        }
        assert_eq!(
            written(&dps[..3], false, false, true),
            "{\"1\":1.5,\"2\":null,\"3\":\"Infinity\"}"
        );
    }

    proptest! {
        /// Any points (times in any order, more than a chunk of them), as the reference.
        #[test]
        fn as_the_reference(
            start in any::<i64>().prop_map(|t| t / 4),
            steps in prop::collection::vec((-5_000i64..100_000, any::<i64>(), any::<f64>(), any::<bool>()), 0..400),
            ms in any::<bool>(),
            arrays in any::<bool>(),
        ) {
            let mut t = start;
            let dps: Vec<(i64, Num)> = steps
                .iter()
                .map(|(d, i, f, int)| {
                    t = t.saturating_add(*d);
                    (t, if *int { Num::Int(*i) } else { Num::Float(*f) })
                })
                .collect();
            prop_assert_eq!(written(&dps, ms, arrays, true), reference(&dps, ms, arrays, true));
        }

        /// Times a few seconds apart from around zero and across digit lengths (where a
        /// time's text may or may not change its last two digits only), as the reference.
        #[test]
        fn stepping_times_as_the_reference(
            start in prop_oneof![-120_000i64..120_000, 9_800_000i64..10_000_000, 99_990_000i64..100_000_000],
            steps in prop::collection::vec(0i64..150_000, 0..300),
            ms in any::<bool>(),
            arrays in any::<bool>(),
        ) {
            let mut t = start;
            let dps: Vec<(i64, Num)> = steps
                .iter()
                .map(|d| {
                    t += d;
                    (t, Num::Int(t % 1_000))
                })
                .collect();
            prop_assert_eq!(written(&dps, ms, arrays, false), reference(&dps, ms, arrays, false));
        }

        /// Counters and gauges walking by small and large steps, crossing their upper
        /// digits' changes and zero, as the reference.
        #[test]
        fn integer_walks_as_the_reference(
            start in any::<i64>().prop_map(|v| v / 2),
            steps in prop::collection::vec(prop_oneof![-1_000i64..100_000, -(1i64 << 40)..(1i64 << 40)], 0..300),
            arrays in any::<bool>(),
        ) {
            let mut v = start;
            let dps: Vec<(i64, Num)> = steps
                .iter()
                .enumerate()
                .map(|(k, d)| {
                    v = v.saturating_add(*d);
                    (k as i64 * 1000, Num::Int(v))
                })
                .collect();
            prop_assert_eq!(written(&dps, false, arrays, false), reference(&dps, false, arrays, false));
        }
    }
}
