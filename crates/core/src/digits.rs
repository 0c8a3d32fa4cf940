//! Byte scans of the `put` line, eight bytes at a time: finding a separator and reading a run
//! of ASCII digits. Words of a put line are 10 to 20 bytes, too short for a vectorised
//! search's set-up to pay, and a byte loop spends several instructions a byte; a 64-bit word
//! handles eight bytes in a few.

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Eight bytes as one word, the first in the low byte.
#[inline]
fn word(chunk: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(chunk);
    u64::from_le_bytes(b)
}

/// The index of the first `byte` in `bytes`.
#[inline]
pub(crate) fn find_byte(bytes: &[u8], byte: u8) -> Option<usize> {
    let pattern = ONES * u64::from(byte);
    let mut chunks = bytes.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let w = word(chunk) ^ pattern;
        // The lowest high bit set marks the first zero byte of `w` (a borrow can only set
        // bits above a zero byte, never below it).
        let zero = w.wrapping_sub(ONES) & !w & HIGHS;
        if zero != 0 {
            return Some(at + (zero.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|b| *b == byte)
        .map(|i| at + i)
}

/// Whether the eight bytes of `w` are all ASCII digits.
#[inline]
fn eight_digits(w: u64) -> bool {
    // A digit is 0x30..=0x39: its high nibble is 3, and adding 6 leaves it 3.
    ((w & 0xF0F0_F0F0_F0F0_F0F0)
        | ((w.wrapping_add(0x0606_0606_0606_0606) & 0xF0F0_F0F0_F0F0_F0F0) >> 4))
        == 0x3333_3333_3333_3333
}

/// The number eight ASCII digits spell (the first the most significant).
#[inline]
fn eight_digits_value(w: u64) -> u64 {
    let v = w.wrapping_sub(0x3030_3030_3030_3030);
    // Pairs, then quadruples, then all eight, by multiplications that add shifted lanes.
    let v = v.wrapping_mul(10).wrapping_add(v >> 8);
    let low = (v & 0x0000_00FF_0000_00FF).wrapping_mul(0x000F_4240_0000_0064);
    let high = ((v >> 16) & 0x0000_00FF_0000_00FF).wrapping_mul(0x0000_2710_0000_0001);
    low.wrapping_add(high) >> 32
}

/// The number a run of 1 to 19 ASCII digits spells (no sign; 19 digits never overflow a
/// `u64`), `None` for anything else.
#[inline]
pub(crate) fn digits_u64(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() || bytes.len() > 19 {
        return None;
    }
    let mut v = 0u64;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let w = word(chunk);
        if !eight_digits(w) {
            return None;
        }
        v = v * 100_000_000 + eight_digits_value(w);
    }
    for &b in chunks.remainder() {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v * 10 + u64::from(d);
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_found_in_every_lane_and_the_tail() {
        let text = b"abcdefghijklmnopqrstuvwxyz";
        for (i, b) in text.iter().enumerate() {
            assert_eq!(find_byte(text, *b), Some(i));
        }
        assert_eq!(find_byte(text, b' '), None);
        assert_eq!(find_byte(b"", b' '), None);
        // The first of several, a zero byte before it, and bytes one above and below.
        assert_eq!(find_byte(b"\x00\x1f\x21 x y", b' '), Some(3));
        assert_eq!(find_byte(b"aaaaaaaa  ", b' '), Some(8));
        assert_eq!(
            find_byte(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff ", b' '),
            Some(9)
        );
    }

    #[test]
    fn digit_runs_read_as_numbers_and_nothing_else_does() {
        assert_eq!(digits_u64(b"0"), Some(0));
        assert_eq!(digits_u64(b"12345678"), Some(12_345_678));
        assert_eq!(digits_u64(b"1735689600"), Some(1_735_689_600));
        assert_eq!(
            digits_u64(b"9999999999999999999"),
            Some(9_999_999_999_999_999_999)
        );
        assert_eq!(digits_u64(b"0000000000000000001"), Some(1));
        for other in [
            &b""[..],
            b"10000000000000000000",
            b"1234567/",
            b"1234567:",
            b"12345.78",
            b"-1",
            b"1 2",
            b"123456789012345a",
            b"\xff2345678",
        ] {
            assert_eq!(
                digits_u64(other),
                None,
                "{:?}",
                String::from_utf8_lossy(other)
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn scans_agree_with_the_byte_loops(bytes in proptest::collection::vec(
            proptest::sample::select(vec![b'0', b'5', b'9', b' ', b'/', b':', b'.', b'=', 0xff, b'a']),
            0..40,
        )) {
            proptest::prop_assert_eq!(
                find_byte(&bytes, b' '),
                bytes.iter().position(|b| *b == b' ')
            );
            let want = if (1..=19).contains(&bytes.len()) && bytes.iter().all(u8::is_ascii_digit) {
                std::str::from_utf8(&bytes).ok().and_then(|s| s.parse::<u64>().ok())
            } else {
                None
            };
            proptest::prop_assert_eq!(digits_u64(&bytes), want);
        }

        #[test]
        fn any_digit_run_reads_as_its_number(v in proptest::prelude::any::<u64>(), pad in 0usize..4) {
            let text = format!("{}{v}", "0".repeat(pad));
            let want = (text.len() <= 19).then_some(v);
            proptest::prop_assert_eq!(digits_u64(text.as_bytes()), want);
        }
    }
}
