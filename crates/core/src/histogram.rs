//! Histograms as OpenTSDB 2.4.1 stores them (RFC 0008, phase 3): the codec configuration
//! (`tsd.core.histograms.config`), the data table's histogram qualifier and the built-in
//! simple bucketed histogram's bytes (`SimpleHistogram`, written with Kryo 2.21's `Output`).
//!
//! A histogram point is one cell of the data table's row of its series and hour:
//!
//! ```text
//! qualifier: | 0x06 | offset s (2, BE) |          a timestamp in seconds
//!            | 0x06 | offset ms (4, BE) |         a timestamp in milliseconds
//! value:     | codec id (1) | the codec's bytes |
//! simple:    | bucket count (2, BE, signed) | buckets: lower (f32 BE) | upper (f32 BE) |
//!            count (varint) | underflow (varint) | overflow (varint) |
//! varint:    Kryo's `writeLong(v, true)`: 7 bits a byte, least significant first, the top
//!            bit set when more follow; the ninth byte holds the last 8 bits
//! ```
//!
//! Buckets are written sorted by (lower, upper) as Java's `Float.compare` orders them, one per
//! pair of bounds. Example (2.4.1's `TestHistogramDataPointRpc`): codec id 42, buckets
//! `[0,1)=42`, `[1,5)=24`, overflow 1 → `2A 00 02 00000000 3F800000 2A 3F800000 40A00000 18
//! 00 01`.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use crate::{Error, Result};

/// The first byte of a histogram cell's qualifier (`HistogramDataPoint.PREFIX`).
pub const QUALIFIER_PREFIX: u8 = 0x06;

/// The class name OpenTSDB's configuration gives the built-in simple bucketed codec.
pub const SIMPLE_CODEC: &str = "net.opentsdb.core.SimpleHistogramDecoder";

/// True for a histogram cell's qualifier (3 or 5 bytes, first byte `0x06`).
pub fn is_histogram_qualifier(qualifier: &[u8]) -> bool {
    matches!(qualifier.len(), 3 | 5) && qualifier[0] == QUALIFIER_PREFIX
}

/// The qualifier of a histogram point and its row's base hour (`Internal.getQualifier`):
/// seconds give `06 | offset (2)`, milliseconds `06 | offset ms (4)`.
/// A base hour (seconds) as a row key holds it: 4 bytes.
fn base_hour(base: i64) -> Result<u32> {
    u32::try_from(base).map_err(|_| Error::invalid(format!("bad timestamp={base}")))
}

pub fn qualifier(timestamp: i64) -> Result<(u32, Vec<u8>)> {
    if timestamp < 1 {
        return Err(Error::invalid("The start timestamp has not been set"));
    }
    if crate::time::is_millis(timestamp) {
        let secs = timestamp / 1000;
        let base = secs - secs % 3600;
        let offset = (timestamp - base * 1000) as u32;
        let mut q = vec![QUALIFIER_PREFIX];
        q.extend_from_slice(&offset.to_be_bytes());
        Ok((base_hour(base)?, q))
    } else {
        let base = timestamp - timestamp % 3600;
        let offset = (timestamp - base) as u16;
        let mut q = vec![QUALIFIER_PREFIX];
        q.extend_from_slice(&offset.to_be_bytes());
        Ok((base_hour(base)?, q))
    }
}

/// A histogram cell's time in ms from its row's base hour and its qualifier
/// (`Internal.getTimeStampFromNonDP`); `None` for another qualifier.
pub fn time_ms(base_time: u32, qualifier: &[u8]) -> Option<i64> {
    let base = i64::from(base_time) * 1000;
    match qualifier {
        [QUALIFIER_PREFIX, a, b] => Some(base + i64::from(u16::from_be_bytes([*a, *b])) * 1000),
        [QUALIFIER_PREFIX, a, b, c, d] => {
            Some(base + i64::from(u32::from_be_bytes([*a, *b, *c, *d])))
        }
        _ => None,
    }
}

/// `tsd.core.histograms.config`: codec class names to their ids (0 to 255), as
/// `HistogramCodecManager` reads them. Only the simple bucketed codec is built in.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HistogramConfig {
    /// The simple bucketed codec's id, when configured.
    pub simple_id: Option<u8>,
}

impl HistogramConfig {
    /// Reads the JSON map (`{"net.opentsdb.core.SimpleHistogramDecoder": 0}`), with
    /// OpenTSDB's checks and words.
    pub fn parse(json: &str) -> Result<HistogramConfig> {
        let map: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(json).map_err(|e| {
                Error::invalid(format!(
                    "Unable to parse the 'tsd.core.histograms.config' JSON: {e}"
                ))
            })?;
        let mut ids: BTreeMap<i64, &str> = BTreeMap::new();
        let mut config = HistogramConfig::default();
        for (class, id) in &map {
            let id = id.as_i64().filter(|_| id.is_number()).ok_or_else(|| {
                Error::invalid(format!(
                    "Unable to parse the 'tsd.core.histograms.config' JSON: the ID for codec '{class}' is not an integer"
                ))
            })?;
            if !(0..=255).contains(&id) {
                return Err(Error::invalid(format!(
                    "ID for codec '{class}' must be from 0 to 255."
                )));
            }
            if ids.insert(id, class).is_some() {
                return Err(Error::invalid(format!(
                    "Duplicate ID found for codec '{class}': {id}"
                )));
            }
            if class != SIMPLE_CODEC {
                return Err(Error::invalid(format!(
                    "Unable to find a decoder named '{class}' (the built-in codec is {SIMPLE_CODEC}; codec plugins are not supported)"
                )));
            }
            config.simple_id = Some(id as u8);
        }
        Ok(config)
    }

    /// The simple codec's id, or OpenTSDB's words when it has none.
    pub fn simple(&self) -> Result<u8> {
        self.simple_id.ok_or_else(|| {
            Error::invalid(format!(
                "No codec ID assigned to class class {SIMPLE_CODEC}"
            ))
        })
    }

    /// Checks that `id` names a configured codec (`HistogramCodecManager.getCodec`).
    pub fn codec(&self, id: i64) -> Result<u8> {
        match self.simple_id {
            Some(s) if i64::from(s) == id => Ok(s),
            _ => Err(Error::invalid(format!("No codec found mapped to ID {id}"))),
        }
    }

    /// Decodes a stored value (codec id first).
    pub fn decode_stored(&self, value: &[u8]) -> Result<SimpleHistogram> {
        let Some(&id) = value.first() else {
            return Err(Error::invalid("The data array cannot be empty."));
        };
        self.codec(i64::from(id))?;
        SimpleHistogram::decode(value, true)
    }
}

/// Java's `Float.compare`: -0.0 before 0.0, every NaN equal and after everything else.
pub fn java_float_cmp(a: f32, b: f32) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.total_cmp(&b),
    }
}

/// A bucket's bounds, ordered as 2.4.1's `HistogramBucket` orders regular buckets.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub lower: f32,
    pub upper: f32,
}

impl PartialEq for Bounds {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bounds {}
impl PartialOrd for Bounds {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bounds {
    fn cmp(&self, other: &Self) -> Ordering {
        java_float_cmp(self.lower, other.lower).then(java_float_cmp(self.upper, other.upper))
    }
}

/// OpenTSDB's `SimpleHistogram`: counts per bucket, an underflow and an overflow count.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SimpleHistogram {
    pub buckets: BTreeMap<Bounds, i64>,
    pub underflow: i64,
    pub overflow: i64,
}

/// Kryo's buffer underflow, as 2.4.1 reports a value cut short (a runtime exception there,
/// not an illegal argument: [`Error::Corrupt`] here).
const UNDERFLOW: &str = "Buffer underflow.";

struct Input<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Input<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N]> {
        let out = self
            .bytes
            .get(self.at..self.at + N)
            .and_then(|b| <[u8; N]>::try_from(b).ok())
            .ok_or_else(|| Error::corrupt(UNDERFLOW))?;
        self.at += N;
        Ok(out)
    }

    fn float(&mut self) -> Result<f32> {
        Ok(f32::from_bits(u32::from_be_bytes(self.take::<4>()?)))
    }

    /// Kryo's `readLong(true)`.
    fn varlong(&mut self) -> Result<i64> {
        let mut result: u64 = 0;
        for i in 0..9 {
            let [b] = self.take::<1>()?;
            if i == 8 {
                result |= u64::from(b) << 56;
                break;
            }
            result |= u64::from(b & 0x7F) << (7 * i);
            if b & 0x80 == 0 {
                break;
            }
        }
        Ok(result as i64)
    }
}

/// Kryo's `writeLong(v, true)`.
fn write_varlong(v: i64, out: &mut Vec<u8>) {
    let mut v = v as u64;
    for _ in 0..8 {
        if v >> 7 == 0 {
            out.push(v as u8);
            return;
        }
        out.push((v & 0x7F) as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Java's `Float.floatToIntBits`: every NaN as the canonical one.
fn float_bits(f: f32) -> u32 {
    if f.is_nan() { 0x7FC0_0000 } else { f.to_bits() }
}

impl SimpleHistogram {
    /// Adds (or replaces) a bucket, as `addBucket` puts into its `TreeMap`.
    pub fn set_bucket(&mut self, lower: f32, upper: f32, count: i64) {
        self.buckets.insert(Bounds { lower, upper }, count);
    }

    /// The most buckets a histogram holds: 2.4.1 writes the count as a short and reads it
    /// back signed.
    pub const MAX_BUCKETS: usize = i16::MAX as usize;

    /// The bytes 2.4.1 writes (`histogram(include_id)`), with the codec id first when given.
    /// Callers refuse histograms of more than [`Self::MAX_BUCKETS`] buckets first; past it
    /// the count is written as at most that many.
    pub fn encode(&self, id: Option<u8>) -> Vec<u8> {
        let mut out = Vec::with_capacity(3 + self.buckets.len() * 10 + 2);
        if let Some(id) = id {
            out.push(id);
        }
        let n = self.buckets.len().min(Self::MAX_BUCKETS);
        out.extend_from_slice(&(n as u16).to_be_bytes());
        for (b, count) in self.buckets.iter().take(n) {
            out.extend_from_slice(&float_bits(b.lower).to_be_bytes());
            out.extend_from_slice(&float_bits(b.upper).to_be_bytes());
            write_varlong(*count, &mut out);
        }
        write_varlong(self.underflow, &mut out);
        write_varlong(self.overflow, &mut out);
        out
    }

    /// Reads 2.4.1's bytes (`fromHistogram`): at least 6 bytes, a signed bucket count (a
    /// negative one reads no bucket), then the buckets, underflow and overflow; bytes after
    /// them are not read.
    pub fn decode(raw: &[u8], includes_id: bool) -> Result<SimpleHistogram> {
        if raw.len() < 6 {
            return Err(Error::invalid(format!(
                "Byte array shorter than 6 bytes detected: {}",
                pretty(raw)
            )));
        }
        let mut input = Input {
            bytes: raw,
            at: usize::from(includes_id),
        };
        let count = i16::from_be_bytes(input.take::<2>()?);
        let mut h = SimpleHistogram::default();
        for _ in 0..count.max(0) {
            let lower = input.float()?;
            let upper = input.float()?;
            let n = input.varlong()?;
            h.set_bucket(lower, upper, n);
        }
        h.underflow = input.varlong()?;
        h.overflow = input.varlong()?;
        Ok(h)
    }

    /// Adds `other`'s counts bucket by bucket (`aggregate(.., SUM)`); Java's longs wrap.
    pub fn add(&mut self, other: &SimpleHistogram) {
        for (b, n) in &other.buckets {
            let entry = self.buckets.entry(*b).or_insert(0);
            *entry = entry.wrapping_add(*n);
        }
        self.underflow = self.underflow.wrapping_add(other.underflow);
        self.overflow = self.overflow.wrapping_add(other.overflow);
    }

    /// 2.4.1's `SimpleHistogram.percentile`: -1 outside [1, 100]; else the middle of the
    /// first bucket (in order) whose running count reaches `p` percent of the buckets'
    /// total (counts taken as Java ints), the middle computed in `float`; 0 when none does.
    pub fn percentile(&self, p: f64) -> f64 {
        if !(1.0..=100.0).contains(&p) {
            return -1.0;
        }
        let sum = self
            .buckets
            .values()
            .fold(0i32, |acc, n| acc.wrapping_add(*n as i32));
        let mut running: i64 = 0;
        for (b, n) in &self.buckets {
            running += i64::from(*n as i32);
            let area = running as f64 * 100.0 / f64::from(sum);
            if area >= p {
                return f64::from((b.lower + b.upper) / 2.0);
            }
        }
        0.0
    }
}

/// asynchbase's `Bytes.pretty`: printable ASCII as is (`\n`, `\t`, `\xNN` for the rest) in
/// quotes, or Java's `Arrays.toString` when fewer than half the bytes are printable.
pub fn pretty(bytes: &[u8]) -> String {
    let mut out = String::from("\"");
    let mut ascii = 0;
    for &b in bytes {
        match b {
            b' '..=b'~' => {
                ascii += 1;
                out.push(b as char);
            }
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            _ => out.push_str(&format!("\\x{b:02X}")),
        }
    }
    if ascii < bytes.len() / 2 {
        let inner: Vec<String> = bytes.iter().map(|b| (*b as i8).to_string()).collect();
        return format!("[{}]", inner.join(", "));
    }
    out.push('"');
    out
}

/// Java's `Float.toString`: the shortest digits that read back as `f`, plain for magnitudes
/// in [10^-3, 10^7) (`99.0`, `0.5`), else `d.dddE±n`; `NaN`, `Infinity`, `-Infinity`.
pub fn java_float_text(f: f32) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let magnitude = f.abs();
    if f == 0.0 || (1e-3..1e7).contains(&magnitude) {
        return format!("{f:?}");
    }
    let sci = format!("{f:e}");
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    if mantissa.contains('.') {
        format!("{mantissa}E{exponent}")
    } else {
        format!("{mantissa}.0E{exponent}")
    }
}

/// Java's `Float.parseFloat` for the texts clients send: surrounding whitespace and a
/// trailing `f`/`d` type letter allowed, `Infinity` and `NaN` spelled as Java spells them.
pub fn parse_java_float(text: &str) -> Option<f32> {
    let t = text.trim_matches(|c: char| c <= ' ');
    let t = t
        .strip_suffix(['f', 'F', 'd', 'D'])
        .filter(|rest| !rest.ends_with(|c: char| c.is_ascii_alphabetic()))
        .unwrap_or(t);
    let (negative, unsigned) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    match unsigned {
        "NaN" => return Some(f32::NAN),
        "Infinity" if negative => return Some(f32::NEG_INFINITY),
        "Infinity" => return Some(f32::INFINITY),
        // Rust's own spellings (`inf`, `nan`) and a second sign are not Java's.
        _ if !unsigned.starts_with(|c: char| c.is_ascii_digit() || c == '.') => return None,
        _ => {}
    }
    t.parse::<f32>().ok()
}

/// JAXB's `DatatypeConverter.parseBase64Binary`, which 2.4.1 decodes `value` with:
/// characters outside the base64 alphabet are skipped, `=` ends the text, a last group of
/// two or three characters gives one or two bytes.
pub fn decode_base64_lenient(text: &str) -> Vec<u8> {
    let mut sextets = Vec::with_capacity(text.len());
    for b in text.bytes() {
        let v = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => break,
            _ => continue,
        };
        sextets.push(v);
    }
    let mut out = Vec::with_capacity(sextets.len() * 3 / 4);
    for chunk in sextets.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, s)| acc | (u32::from(*s) << (18 - 6 * i)));
        let bytes = n.to_be_bytes();
        match chunk.len() {
            4 => out.extend_from_slice(&bytes[1..4]),
            3 => out.extend_from_slice(&bytes[1..3]),
            2 => out.push(bytes[1]),
            _ => {}
        }
    }
    out
}

/// Standard base64 (with padding) of `bytes`, as `DatatypeConverter.printBase64Binary`.
pub fn encode_base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 0x3F) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The telnet form 2.4.1 reads (`HistogramDataPointRpc.parseTelnet`):
/// `u=0:o=1:0,1=42:1,5=24` (`u`/`o` underflow and overflow, `lower,upper=count` buckets).
pub fn parse_telnet(text: &str) -> Result<SimpleHistogram> {
    let mut h = SimpleHistogram::default();
    let number = |s: &str| {
        s.parse::<i64>()
            .ok()
            .ok_or_else(|| Error::invalid(format!("For input string: \"{s}\"")))
    };
    for bucket in text.split(':') {
        let kv: Vec<&str> = bucket.split('=').collect();
        if kv.len() != 2 {
            return Err(Error::invalid(format!(
                "Improperly formatted bucket: {bucket}"
            )));
        }
        let key = kv[0].to_lowercase();
        if key == "u" {
            h.underflow = number(kv[1])?;
        } else if key == "o" {
            h.overflow = number(kv[1])?;
        } else {
            let bounds: Vec<&str> = key.split(',').collect();
            if bounds.len() != 2 {
                return Err(Error::invalid(format!(
                    "Improperly formatted bounds: {bucket}"
                )));
            }
            let bound = |s: &str| {
                parse_java_float(s)
                    .ok_or_else(|| Error::invalid(format!("For input string: \"{s}\"")))
            };
            let (lower, upper) = (bound(bounds[0])?, bound(bounds[1])?);
            h.set_bucket(lower, upper, number(kv[1])?);
        }
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2.4.1's `TestHistogramDataPointRpc` histogram: id 42, `[0,1)=42`, `[1,5)=24`,
    /// overflow 1.
    const FIXTURE: [u8; 23] = [
        0x2A, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x3F, 0x80, 0x00, 0x00, 0x2A, 0x3F, 0x80, 0x00,
        0x00, 0x40, 0xA0, 0x00, 0x00, 0x18, 0x00, 0x01,
    ];

    fn fixture() -> SimpleHistogram {
        let mut h = SimpleHistogram::default();
        h.set_bucket(0.0, 1.0, 42);
        h.set_bucket(1.0, 5.0, 24);
        h.overflow = 1;
        h
    }

    #[test]
    fn simple_histogram_bytes_are_2_4_1s() {
        assert_eq!(fixture().encode(Some(42)), FIXTURE);
        assert_eq!(fixture().encode(None), FIXTURE[1..]);
        assert_eq!(SimpleHistogram::decode(&FIXTURE, true).unwrap(), fixture());
        assert_eq!(
            SimpleHistogram::decode(&FIXTURE[1..], false).unwrap(),
            fixture()
        );
        // The telnet form of the same histogram, and its base64 (binary) form.
        assert_eq!(parse_telnet("u=0:o=1:0,1=42:1,5=24").unwrap(), fixture());
        assert_eq!(
            encode_base64(&FIXTURE[1..]),
            "AAIAAAAAP4AAACo/gAAAQKAAABgAAQ=="
        );
        assert_eq!(
            decode_base64_lenient("AAIAAAAAP4AAACo/gAAAQKAAABgAAQ=="),
            FIXTURE[1..]
        );
        // Buckets come out sorted whatever their order in.
        let mut h = SimpleHistogram::default();
        h.set_bucket(1.0, 5.0, 24);
        h.set_bucket(0.0, 1.0, 42);
        h.overflow = 1;
        assert_eq!(h.encode(Some(42)), FIXTURE);
    }

    #[test]
    fn kryo_varlongs() {
        let cases: &[(i64, &[u8])] = &[
            (0, &[0x00]),
            (127, &[0x7F]),
            (128, &[0x80, 0x01]),
            (300, &[0xAC, 0x02]),
            (-1, &[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]),
            (
                i64::MAX,
                &[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F],
            ),
        ];
        for (v, bytes) in cases {
            let mut out = Vec::new();
            write_varlong(*v, &mut out);
            assert_eq!(out, *bytes, "{v}");
            let mut input = Input { bytes, at: 0 };
            assert_eq!(input.varlong().unwrap(), *v);
        }
    }

    #[test]
    fn decode_errors_are_2_4_1s() {
        assert_eq!(
            SimpleHistogram::decode(&[0, 2, 0, 0], false)
                .unwrap_err()
                .to_string(),
            "Byte array shorter than 6 bytes detected: [0, 2, 0, 0]"
        );
        assert_eq!(
            SimpleHistogram::decode(&FIXTURE[1..8], false)
                .unwrap_err()
                .to_string(),
            "Buffer underflow."
        );
        // A negative bucket count reads no bucket.
        let h = SimpleHistogram::decode(&[0xFF, 0xFF, 0, 0, 0, 0], false).unwrap();
        assert!(h.buckets.is_empty());
    }

    /// 2.4.1's `TestSimpleHistogram.testSinglePercentile` and `testPercentileList`.
    #[test]
    fn percentiles_are_2_4_1s() {
        let mut h = SimpleHistogram::default();
        h.set_bucket(1.0, 6.0, 5);
        h.set_bucket(6.0, 10.0, 10);
        h.set_bucket(10.0, 20.0, 1);
        h.overflow = 5;
        assert_eq!(h.percentile(50.0), 8.0);
        assert_eq!(h.percentile(1000.0), -1.0);
        assert_eq!(h.percentile(0.5), -1.0);
        h.set_bucket(20.0, 40.0, 0);
        assert_eq!(h.percentile(99.0), 15.0);
        // The middle is computed in float.
        let mut f = SimpleHistogram::default();
        f.set_bucket(0.1, 0.2, 1);
        assert_eq!(f.percentile(50.0), f64::from((0.1f32 + 0.2f32) / 2.0));
        // No count at all: 0.
        assert_eq!(SimpleHistogram::default().percentile(50.0), 0.0);
    }

    #[test]
    fn config_is_read_with_2_4_1s_checks() {
        let c =
            HistogramConfig::parse(r#"{"net.opentsdb.core.SimpleHistogramDecoder": 42}"#).unwrap();
        assert_eq!(c.simple().unwrap(), 42);
        assert_eq!(c.codec(42).unwrap(), 42);
        assert_eq!(
            c.codec(7).unwrap_err().to_string(),
            "No codec found mapped to ID 7"
        );
        assert_eq!(
            HistogramConfig::parse("{}")
                .unwrap()
                .simple()
                .unwrap_err()
                .to_string(),
            "No codec ID assigned to class class net.opentsdb.core.SimpleHistogramDecoder"
        );
        assert_eq!(
            HistogramConfig::parse(r#"{"net.opentsdb.core.SimpleHistogramDecoder": 256}"#)
                .unwrap_err()
                .to_string(),
            "ID for codec 'net.opentsdb.core.SimpleHistogramDecoder' must be from 0 to 255."
        );
        assert!(
            HistogramConfig::parse(r#"{"com.example.Digest": 1}"#)
                .unwrap_err()
                .to_string()
                .starts_with("Unable to find a decoder named 'com.example.Digest'")
        );
        assert!(HistogramConfig::parse("[1]").is_err());
    }

    #[test]
    fn qualifiers_and_times() {
        assert_eq!(
            qualifier(1_356_998_400).unwrap(),
            (1_356_998_400, vec![6, 0, 0])
        );
        assert_eq!(
            qualifier(1_356_998_400 + 3599).unwrap(),
            (1_356_998_400, vec![6, 0x0E, 0x0F])
        );
        assert_eq!(
            qualifier(1_356_998_400_250).unwrap(),
            (1_356_998_400, vec![6, 0, 0, 0, 250])
        );
        assert_eq!(
            time_ms(1_356_998_400, &[6, 0x0E, 0x0F]),
            Some(1_356_998_400_000 + 3_599_000)
        );
        assert_eq!(
            time_ms(1_356_998_400, &[6, 0, 0, 0, 250]),
            Some(1_356_998_400_250)
        );
        assert!(is_histogram_qualifier(&[6, 0, 0]));
        assert!(!is_histogram_qualifier(&[1, 0, 0]));
        assert!(!is_histogram_qualifier(&[6, 0]));
    }

    proptest::proptest! {
        #[test]
        fn decoders_never_panic(
            raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
            text in "[uo0-9,.=:x-]{0,24}",
        ) {
            let _ = SimpleHistogram::decode(&raw, true);
            let _ = SimpleHistogram::decode(&raw, false);
            let _ = parse_telnet(&text);
            let _ = decode_base64_lenient(&text);
        }

        #[test]
        fn encoding_reads_back(
            buckets in proptest::collection::vec((-1e6f32..1e6, -1e6f32..1e6, proptest::prelude::any::<i64>()), 0..20),
            under in proptest::prelude::any::<i64>(),
            over in proptest::prelude::any::<i64>(),
            id in proptest::prelude::any::<u8>(),
        ) {
            let mut h = SimpleHistogram { underflow: under, overflow: over, ..SimpleHistogram::default() };
            for (lo, up, n) in buckets {
                h.set_bucket(lo, up, n);
            }
            let bytes = h.encode(Some(id));
            proptest::prop_assert_eq!(SimpleHistogram::decode(&bytes, true).unwrap(), h.clone());
            proptest::prop_assert_eq!(
                decode_base64_lenient(&encode_base64(&bytes[1..])),
                bytes[1..].to_vec()
            );
        }
    }

    #[test]
    fn java_float_texts() {
        for (f, text) in [
            (99.0f32, "99.0"),
            (99.9, "99.9"),
            (0.5, "0.5"),
            (0.001, "0.001"),
            (1e-4, "1.0E-4"),
            (1e7, "1.0E7"),
            (f32::NEG_INFINITY, "-Infinity"),
        ] {
            assert_eq!(java_float_text(f), text);
        }
        assert_eq!(parse_java_float(" 1.5f"), Some(1.5));
        assert_eq!(parse_java_float("-Infinity"), Some(f32::NEG_INFINITY));
        assert_eq!(parse_java_float("inf"), None);
        assert_eq!(parse_java_float("-nan"), None);
        assert_eq!(parse_java_float("+-1"), None);
        assert!(parse_java_float("NaN").unwrap().is_nan());
        assert_eq!(parse_java_float("+Infinity"), Some(f32::INFINITY));
        assert_eq!(parse_java_float("1e3"), Some(1000.0));
        assert_eq!(parse_java_float("x"), None);
    }
}
