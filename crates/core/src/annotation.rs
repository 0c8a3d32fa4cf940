//! Annotation column qualifiers. Annotations live in the data rows (global ones in the row
//! whose metric UID is all zeros), in odd-length qualifiers:
//!
//! ```text
//! seconds:      | 0x01 | offset from base hour in s (2, BE) |
//! milliseconds: | 0x01 | offset from base hour in ms (4, BE) |
//! ```
//!
//! The value is the annotation's UTF-8 JSON.

use crate::time::MAX_TIMESPAN;
use crate::{Error, Result};

pub const ANNOTATION_PREFIX: u8 = 0x01;

/// Qualifier for an annotation at `timestamp` (seconds, or milliseconds per
/// [`crate::time::is_millis`]); returns the row base time (seconds) too.
///
/// Byte-compatible with OpenTSDB, quirk included: a time that is a multiple of 1000 is
/// divided by 1000 before the offset is taken. That turns whole-second millisecond times
/// into second qualifiers (intended) and gives second times such as `1369141000` an offset
/// that does not match their row (OpenTSDB's behaviour; lookups compute the same qualifier,
/// and readers take the time from the annotation's JSON).
pub fn encode_qualifier(timestamp: i64) -> Result<(u32, Vec<u8>)> {
    crate::time::check_timestamp(timestamp)?;
    let span = i64::from(MAX_TIMESPAN);
    let base = if crate::time::is_millis(timestamp) {
        let secs = timestamp / 1000;
        secs - secs % span
    } else {
        timestamp - timestamp % span
    };
    let t = if timestamp % 1000 == 0 {
        timestamp / 1000
    } else {
        timestamp
    };
    let mut q = vec![ANNOTATION_PREFIX];
    if crate::time::is_millis(t) {
        let offset = (t - base * 1000) as u32;
        q.extend_from_slice(&offset.to_be_bytes());
    } else {
        let offset = (t % span) as u16;
        q.extend_from_slice(&offset.to_be_bytes());
    }
    Ok((base as u32, q))
}

/// Time in milliseconds of an annotation qualifier in a row with `base_time`.
pub fn decode_qualifier(base_time: u32, qualifier: &[u8]) -> Result<i64> {
    let base = i64::from(base_time) * 1000;
    match *qualifier {
        [ANNOTATION_PREFIX, a, b] => Ok(base + i64::from(u16::from_be_bytes([a, b])) * 1000),
        [ANNOTATION_PREFIX, a, b, c, d] => Ok(base + i64::from(u32::from_be_bytes([a, b, c, d]))),
        _ => Err(Error::corrupt(format!(
            "not an annotation qualifier. qualifier={}",
            crate::uid::hex_upper(qualifier)
        ))),
    }
}

pub fn is_annotation_qualifier(qualifier: &[u8]) -> bool {
    matches!(qualifier.len(), 3 | 5) && qualifier[0] == ANNOTATION_PREFIX
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_example_qualifier() {
        let (base, q) = encode_qualifier(1292148123).unwrap();
        assert_eq!(base, 1292148000);
        assert_eq!(q, [0x01, 0x00, 0x7B]);
        assert_eq!(decode_qualifier(base, &q), Ok(1292148123000));
    }

    #[test]
    fn multiples_of_1000_follow_opentsdb() {
        // Whole-second milliseconds are stored as seconds.
        let (base, q) = encode_qualifier(1292148123000).unwrap();
        assert_eq!((base, q.as_slice()), (1292148000, &[0x01, 0x00, 0x7B][..]));
        // A second time divisible by 1000 gets OpenTSDB's offset: 1369141 % 3600 = 1141.
        let (base, q) = encode_qualifier(1369141000).unwrap();
        assert_eq!((base, q.as_slice()), (1369137600, &[0x01, 0x04, 0x75][..]));
    }

    #[test]
    fn millisecond_qualifier() {
        let (base, q) = encode_qualifier(1292148123456).unwrap();
        assert_eq!(q, [0x01, 0x00, 0x01, 0xE2, 0x40]);
        assert_eq!(decode_qualifier(base, &q), Ok(1292148123456));
        assert!(is_annotation_qualifier(&q));
        assert!(decode_qualifier(base, &[0x02, 0, 0]).is_err());
    }
}
