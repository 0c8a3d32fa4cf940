//! Data point column qualifiers.
//!
//! Second resolution, 2 bytes:
//!
//! ```text
//! | offset from base hour in s (12 bits) | flags (4 bits) |
//! ```
//!
//! Millisecond resolution, 4 bytes:
//!
//! ```text
//! | 1111 | offset in ms (22 bits) | 00 | flags (4 bits) |
//! ```
//!
//! A 2-byte qualifier never starts with nibble `F` (3599 << 4 | 0xF = 0xE0FF), so both forms
//! fit one `u32` without ambiguity, and a compacted qualifier can be split by looking at the
//! first nibble of each entry. Example: 42 at 1292148123 in row 1292148000 is `07B0`.

use crate::time::{self, MAX_TIMESPAN};
use crate::value::{FLAG_FLOAT, FLAGS_MASK, value_len};
use crate::{Error, Result};

const MS_FLAG: u32 = 0xF000_0000;
const MS_FLAG_BITS: u32 = 6;
/// The bits of a millisecond qualifier between its offset and its flags: written clear.
const MS_RESERVED_BITS: u32 = 0x30;
const FLAG_BITS: u32 = 4;

/// One data point's qualifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Qualifier(u32);

impl Qualifier {
    /// A second-resolution qualifier; `offset` must be below 3600.
    pub fn seconds(offset: u32, flags: u8) -> Result<Qualifier> {
        if offset >= MAX_TIMESPAN {
            return Err(Error::invalid(format!(
                "offset out of range. offset={offset}s"
            )));
        }
        Ok(Qualifier(
            (offset << FLAG_BITS) | u32::from(flags & FLAGS_MASK),
        ))
    }

    /// A millisecond-resolution qualifier; `offset` must be below 3,600,000.
    pub fn millis(offset: u32, flags: u8) -> Result<Qualifier> {
        if offset >= MAX_TIMESPAN * 1000 {
            return Err(Error::invalid(format!(
                "offset out of range. offset={offset}ms"
            )));
        }
        Ok(Qualifier(
            MS_FLAG | (offset << MS_FLAG_BITS) | u32::from(flags & FLAGS_MASK),
        ))
    }

    /// The row base time (seconds) and qualifier for a timestamp, which is in milliseconds
    /// when it does not fit 32 bits, as in OpenTSDB.
    #[inline]
    pub fn for_timestamp(timestamp: i64, flags: u8) -> Result<(u32, Qualifier)> {
        time::check_timestamp(timestamp)?;
        if time::is_millis(timestamp) {
            let secs = timestamp / 1000;
            let base = secs - secs % i64::from(MAX_TIMESPAN);
            let q = Qualifier::millis((timestamp - base * 1000) as u32, flags)?;
            Ok((base as u32, q))
        } else {
            let base = timestamp - timestamp % i64::from(MAX_TIMESPAN);
            let q = Qualifier::seconds((timestamp - base) as u32, flags)?;
            Ok((base as u32, q))
        }
    }

    /// Rebuilds a qualifier from the `u32` form (see [`Qualifier::raw`]).
    #[inline]
    pub fn from_raw(raw: u32) -> Result<Qualifier> {
        let q = Qualifier(raw);
        let fits = if q.is_millis() {
            q.offset_ms() < MAX_TIMESPAN * 1000
        } else {
            raw <= 0xFFFF && (raw >> FLAG_BITS) < MAX_TIMESPAN
        };
        if fits {
            Ok(q)
        } else {
            Err(Error::corrupt(format!(
                "qualifier out of range. qualifier=0x{raw:X}"
            )))
        }
    }

    /// Parses exactly one encoded qualifier of 2 or 4 bytes.
    pub fn parse(bytes: &[u8]) -> Result<Qualifier> {
        match *bytes {
            [a, b] if a & 0xF0 != 0xF0 => {
                Qualifier::from_raw(u32::from(u16::from_be_bytes([a, b])))
            }
            [a, b, c, d] if a & 0xF0 == 0xF0 => {
                Qualifier::from_raw(u32::from_be_bytes([a, b, c, d]))
            }
            _ => Err(Error::corrupt(format!(
                "invalid data point qualifier. qualifier={}",
                crate::uid::hex_upper(bytes)
            ))),
        }
    }

    /// Whether the qualifier is as [`Qualifier::seconds`] or [`Qualifier::millis`] build it:
    /// a millisecond qualifier's two bits between offset and flags are clear.
    pub fn is_canonical(self) -> bool {
        !self.is_millis() || self.0 & MS_RESERVED_BITS == 0
    }

    pub fn raw(self) -> u32 {
        self.0
    }

    pub fn is_millis(self) -> bool {
        self.0 & MS_FLAG == MS_FLAG
    }

    /// Offset from the row's base time, in milliseconds.
    pub fn offset_ms(self) -> u32 {
        if self.is_millis() {
            (self.0 & !MS_FLAG) >> MS_FLAG_BITS
        } else {
            (self.0 >> FLAG_BITS) * 1000
        }
    }

    pub fn flags(self) -> u8 {
        (self.0 & u32::from(FLAGS_MASK)) as u8
    }

    /// The same qualifier with `flags` (their low four bits) in place of its own.
    pub fn with_flags(self, flags: u8) -> Qualifier {
        Qualifier((self.0 & !u32::from(FLAGS_MASK)) | u32::from(flags & FLAGS_MASK))
    }

    pub fn is_float(self) -> bool {
        self.flags() & FLAG_FLOAT != 0
    }

    pub fn value_len(self) -> usize {
        value_len(self.flags())
    }

    /// Encoded length: 2 or 4 bytes.
    pub fn encoded_len(self) -> usize {
        if self.is_millis() { 4 } else { 2 }
    }

    pub fn write(self, out: &mut Vec<u8>) {
        if self.is_millis() {
            out.extend_from_slice(&self.0.to_be_bytes());
        } else {
            out.extend_from_slice(&(self.0 as u16).to_be_bytes());
        }
    }

    pub fn to_bytes(self) -> Vec<u8> {
        let mut v = Vec::with_capacity(4);
        self.write(&mut v);
        v
    }

    /// Absolute time in milliseconds for a row with `base_time` seconds.
    pub fn timestamp_ms(self, base_time: u32) -> i64 {
        i64::from(base_time) * 1000 + i64::from(self.offset_ms())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Value;
    use proptest::prelude::*;

    #[test]
    fn seed_examples_hold() {
        // 42 at 1292148123: row 1292148000, offset 123, 1-byte int -> 07B0 (OpenTSDB's code
        // writes the shortest integer, not the 8-byte 07B4 its old docs print).
        let (base, q) = Qualifier::for_timestamp(1292148123, Value::Int(42).flags()).unwrap();
        assert_eq!(base, 1292148000);
        assert_eq!(q.to_bytes(), [0x07, 0xB0]);
        // mysql.bytes_sent 476 at the same second: 2-byte int.
        let (_, q) = Qualifier::for_timestamp(1292148123, Value::Int(476).flags()).unwrap();
        assert_eq!(q.to_bytes(), [0x07, 0xB1]);
        // Seed 003: 1297574486 -> row 1297573200 ("MWeP"), offset 1286.
        let (base, q) = Qualifier::for_timestamp(1297574486, 0x7).unwrap();
        assert_eq!(base.to_be_bytes(), *b"MWeP");
        assert_eq!(q.offset_ms(), 1286 * 1000);
    }

    #[test]
    fn every_flag_combination_on_seconds() {
        for flags in 0..16u8 {
            let q = Qualifier::seconds(123, flags).unwrap();
            assert_eq!(q.to_bytes(), [0x07, 0xB0 | flags]);
            assert_eq!(q.flags(), flags);
            assert_eq!(q.is_float(), flags & 0x8 != 0);
            assert_eq!(q.value_len(), (flags & 7) as usize + 1);
            assert_eq!(Qualifier::parse(&q.to_bytes()), Ok(q));
        }
        assert_eq!(
            Qualifier::seconds(3599, 0xF).unwrap().to_bytes(),
            [0xE0, 0xFF]
        );
        assert!(Qualifier::seconds(3600, 0).is_err());
    }

    #[test]
    fn millisecond_qualifiers() {
        // 1292148123456 ms: row 1292148000, offset 123456 ms.
        let (base, q) = Qualifier::for_timestamp(1292148123456, 0x7).unwrap();
        assert_eq!(base, 1292148000);
        assert!(q.is_millis());
        assert_eq!(q.offset_ms(), 123456);
        assert_eq!(q.raw(), 0xF000_0000 | (123456 << 6) | 0x7);
        assert_eq!(q.to_bytes(), [0xF0, 0x78, 0x90, 0x07]);
        assert_eq!(q.timestamp_ms(base), 1292148123456);
        let last = Qualifier::millis(3_599_999, 0xB).unwrap();
        assert_eq!(Qualifier::parse(&last.to_bytes()), Ok(last));
        assert!(Qualifier::millis(3_600_000, 0).is_err());
    }

    #[test]
    fn parse_rejects_malformed() {
        for bad in [
            &[][..],
            &[0x07],
            &[0xF0, 0x00],
            &[0x07, 0xB0, 0x00, 0x00],
            &[0xFF, 0xFF, 0xFF, 0xFF],
            &[0xE1, 0x00],
        ] {
            assert!(Qualifier::parse(bad).is_err(), "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn timestamp_round_trip(ts in prop_oneof![0i64..=u32::MAX as i64, (u32::MAX as i64 + 1)..=(u32::MAX as i64 * 1000 + 999)], flags in 0u8..16) {
            let (base, q) = Qualifier::for_timestamp(ts, flags).unwrap();
            let ms = if time::is_millis(ts) { ts } else { ts * 1000 };
            prop_assert_eq!(q.timestamp_ms(base), ms);
            prop_assert_eq!(Qualifier::parse(&q.to_bytes()), Ok(q));
            prop_assert_eq!(q.flags(), flags);
        }
    }
}
