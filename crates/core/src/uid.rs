//! Unique IDs: the fixed-width integers that stand for metric names, tag keys and tag values.
//!
//! In `tsdb-uid`, a name maps to its UID in family `id`, the UID maps back to the name in
//! family `name`; the qualifier is the kind (`metrics`, `tagk`, `tagv`). Row `\x00` holds one
//! 8-byte big-endian MAXID counter per kind.

use std::fmt;

use crate::{Error, Result};

/// The three namespaces of UIDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UidKind {
    Metric,
    TagKey,
    TagValue,
}

impl UidKind {
    pub const ALL: [UidKind; 3] = [UidKind::Metric, UidKind::TagKey, UidKind::TagValue];

    /// The qualifier used in `tsdb-uid` (and the word the CLI takes).
    pub fn qualifier(self) -> &'static str {
        match self {
            UidKind::Metric => "metrics",
            UidKind::TagKey => "tagk",
            UidKind::TagValue => "tagv",
        }
    }

    /// Parses the CLI/API word: `metrics` (or `metric`), `tagk`, `tagv`.
    pub fn parse(word: &str) -> Result<UidKind> {
        match word {
            "metrics" | "metric" => Ok(UidKind::Metric),
            "tagk" => Ok(UidKind::TagKey),
            "tagv" => Ok(UidKind::TagValue),
            other => Err(Error::invalid(format!("Invalid UID type: {other}"))),
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for UidKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.qualifier())
    }
}

/// A UID's numeric value. Its width in bytes comes from the schema, per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Uid(pub u64);

impl Uid {
    /// Big-endian bytes on `width` bytes (1..=8). Bits above the width are dropped;
    /// the registry never assigns a UID that does not fit.
    pub fn to_bytes(self, width: u8) -> Vec<u8> {
        let mut out = Vec::with_capacity(width as usize);
        self.write(width, &mut out);
        out
    }

    pub fn write(self, width: u8, out: &mut Vec<u8>) {
        let be = self.0.to_be_bytes();
        out.extend_from_slice(&be[8 - width as usize..]);
    }

    /// Reads a UID from exactly `bytes` (1..=8 bytes, big-endian).
    pub fn from_bytes(bytes: &[u8]) -> Result<Uid> {
        if bytes.is_empty() || bytes.len() > 8 {
            return Err(Error::corrupt(format!(
                "invalid uid length. length={}",
                bytes.len()
            )));
        }
        Ok(Uid(bytes
            .iter()
            .fold(0u64, |acc, b| (acc << 8) | u64::from(*b))))
    }

    /// Upper-case hex on `width` bytes, as OpenTSDB prints UIDs and TSUIDs.
    pub fn to_hex(self, width: u8) -> String {
        hex_upper(&self.to_bytes(width))
    }

    /// Parses hex of exactly `width` bytes (OpenTSDB's `stringToUid` also accepts an odd
    /// number of digits by left-padding with a zero).
    pub fn from_hex(text: &str, width: u8) -> Result<Uid> {
        let bytes = parse_hex(text)?;
        if bytes.len() != width as usize {
            return Err(Error::invalid(format!(
                "UID {text} has the wrong width: expected {width} bytes"
            )));
        }
        Uid::from_bytes(&bytes)
    }

    /// Largest UID that fits `width` bytes.
    pub fn max_for_width(width: u8) -> u64 {
        if width >= 8 {
            u64::MAX
        } else {
            (1u64 << (8 * u32::from(width))) - 1
        }
    }
}

/// The stored bytes of a metric, tag key or tag value name. OpenTSDB stores names in
/// ISO-8859-1, one byte per character; a name made only of characters up to U+00FF is stored
/// that way here too, so tables shared with OpenTSDB's TSDs hold one row (and one UID) per
/// name whichever TSD wrote it (`café` is `63 61 66 E9`). A name with any character beyond
/// U+00FF, which ISO-8859-1 cannot hold (OpenTSDB would store `?` for it), is stored as UTF-8.
pub fn name_bytes(name: &str) -> std::borrow::Cow<'_, [u8]> {
    if name.is_ascii() {
        return std::borrow::Cow::Borrowed(name.as_bytes());
    }
    if name.chars().all(|c| u32::from(c) <= 0xFF) {
        return std::borrow::Cow::Owned(name.chars().map(|c| u32::from(c) as u8).collect());
    }
    std::borrow::Cow::Borrowed(name.as_bytes())
}

/// The name stored as `bytes` ([`name_bytes`] read back): UTF-8 when the bytes are UTF-8 of
/// a name that needs it (a character beyond U+00FF), else ISO-8859-1.
pub fn name_from_bytes(bytes: &[u8]) -> String {
    if bytes.is_ascii() {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    match std::str::from_utf8(bytes) {
        Ok(s) if s.chars().any(|c| u32::from(c) > 0xFF) => s.to_string(),
        _ => bytes.iter().map(|b| char::from(*b)).collect(),
    }
}

/// Upper-case hex, no separators.
pub fn hex_upper(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 0xF) as usize] as char);
    }
    s
}

/// Parses hex digits (either case); an odd count is left-padded with `0` as OpenTSDB does.
pub fn parse_hex(text: &str) -> Result<Vec<u8>> {
    if text.is_empty() {
        return Err(Error::invalid("UID was empty"));
    }
    let digits: Vec<u8> = if text.len() % 2 == 1 {
        std::iter::once(b'0').chain(text.bytes()).collect()
    } else {
        text.bytes().collect()
    };
    let nibble = |c: u8| -> Result<u8> {
        match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            b'A'..=b'F' => Ok(c - b'A' + 10),
            _ => Err(Error::invalid(format!("invalid hex string: {text}"))),
        }
    };
    digits
        .chunks_exact(2)
        .map(|pair| Ok((nibble(pair[0])? << 4) | nibble(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stored_as_opentsdb_stores_them() {
        assert_eq!(&*name_bytes("sys.cpu"), b"sys.cpu");
        assert_eq!(&*name_bytes("café"), b"caf\xE9");
        assert_eq!(&*name_bytes("Zürich"), b"Z\xFCrich");
        // Beyond ISO-8859-1: UTF-8.
        assert_eq!(&*name_bytes("温度"), "温度".as_bytes());
        for name in ["sys.cpu", "café", "Zürich", "温度", "naïve€", "ÿ"] {
            assert_eq!(name_from_bytes(&name_bytes(name)), name, "{name}");
        }
        // A name OpenTSDB wrote.
        assert_eq!(name_from_bytes(b"caf\xE9"), "café");
    }

    #[test]
    fn uid_bytes_round_trip_on_every_width() {
        for width in 1..=8u8 {
            let max = Uid::max_for_width(width);
            for v in [0, 1, 0x7F, max / 2, max] {
                let bytes = Uid(v).to_bytes(width);
                assert_eq!(bytes.len(), width as usize);
                assert_eq!(Uid::from_bytes(&bytes), Ok(Uid(v)));
            }
        }
    }

    #[test]
    fn hex_matches_opentsdb_style() {
        assert_eq!(Uid(1).to_hex(3), "000001");
        assert_eq!(Uid(0xABCDEF).to_hex(3), "ABCDEF");
        assert_eq!(Uid::from_hex("00000a", 3), Ok(Uid(10)));
        assert_eq!(parse_hex("abc"), Ok(vec![0x0A, 0xBC]));
        assert!(Uid::from_hex("0001", 3).is_err());
        assert!(parse_hex("zz").is_err());
    }

    #[test]
    fn kind_words() {
        assert_eq!(UidKind::parse("metrics"), Ok(UidKind::Metric));
        assert_eq!(UidKind::parse("tagk").map(UidKind::qualifier), Ok("tagk"));
        assert!(UidKind::parse("tags").is_err());
    }
}
