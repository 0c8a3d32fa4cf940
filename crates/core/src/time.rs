//! Time rules: row hours, second vs millisecond timestamps, and OpenTSDB's date strings.

use chrono::{NaiveDate, NaiveDateTime, NaiveTime};
pub use chrono_tz::Tz;

use crate::{Error, Result};

/// Seconds covered by one row.
pub const MAX_TIMESPAN: u32 = 3600;

/// Largest millisecond timestamp OpenTSDB accepts (13 digits).
pub const MAX_MS_TIMESTAMP: i64 = 9_999_999_999_999;

/// OpenTSDB reads a timestamp as milliseconds when it does not fit in 32 bits.
pub fn is_millis(timestamp: i64) -> bool {
    (timestamp as u64) & 0xFFFF_FFFF_0000_0000 != 0
}

/// Refuses negative timestamps, millisecond ones beyond 13 digits, and any past the last
/// second a 4-byte base hour can hold (2106-02-07).
#[inline]
pub fn check_timestamp(timestamp: i64) -> Result<()> {
    if timestamp < 0 {
        return Err(Error::invalid(format!("negative timestamp={timestamp}")));
    }
    // A row's base hour is 4 bytes of seconds: later millisecond times cannot be stored.
    if is_millis(timestamp)
        && (timestamp > MAX_MS_TIMESTAMP || timestamp / 1000 > i64::from(u32::MAX))
    {
        return Err(Error::invalid(format!("bad timestamp={timestamp}")));
    }
    Ok(())
}

/// A timestamp (seconds or milliseconds per [`is_millis`]) in milliseconds.
pub fn to_millis(timestamp: i64) -> i64 {
    if is_millis(timestamp) {
        timestamp
    } else {
        timestamp * 1000
    }
}

/// The row base time (seconds) of a millisecond timestamp.
pub fn base_time_of_ms(ms: i64) -> i64 {
    let secs = ms.div_euclid(1000);
    secs - secs.rem_euclid(i64::from(MAX_TIMESPAN))
}

/// Parses OpenTSDB's date strings to milliseconds since the epoch (UTC for absolute dates):
/// `now`, relative `N<unit>-ago` (units ms s m h d w n y), absolute
/// `yyyy/MM/dd[-HH:mm[:ss]]` (or a space instead of `-`), Unix seconds (up to 10 digits),
/// `seconds.millis`, or milliseconds.
pub fn parse_time(text: &str, now_ms: i64) -> Result<i64> {
    parse_time_in(text, now_ms, Tz::UTC)
}

/// [`parse_time`] with absolute dates read in the time zone `tz`.
///
/// OpenTSDB's `DateTime.parseDateTimeString`, in its order and words: `<digits>ms` (epoch
/// milliseconds), `now`, `<duration>-ago`, an absolute date chosen by its length (10, 16 or 19
/// characters: `yyyy/MM/dd`, `yyyy/MM/dd-HH:mm`, `yyyy/MM/dd HH:mm:ss`, fields read leniently
/// as Java does, so `2013/02/30` is March 2nd), else epoch seconds (10 characters or fewer) or
/// milliseconds, or `<seconds>.<1 to 3 digits>`.
pub fn parse_time_in(text: &str, now_ms: i64, tz: Tz) -> Result<i64> {
    let text = text.trim();
    if text.is_empty() {
        return Err(Error::invalid("Missing time"));
    }
    if let Some(digits) = text.strip_suffix("ms")
        && !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
    {
        return crate::value::parse_long(digits);
    }
    if text.eq_ignore_ascii_case("now") {
        return Ok(now_ms);
    }
    if text.len() > 4 && text.is_char_boundary(text.len() - 4) {
        let (rel, suffix) = text.split_at(text.len() - 4);
        if suffix.eq_ignore_ascii_case("-ago") {
            return Ok(now_ms - parse_duration_ms(&rel.to_ascii_lowercase())?);
        }
    } else if text.eq_ignore_ascii_case("-ago") {
        return Err(Error::invalid("Cannot parse null or empty duration"));
    }
    if text.contains('/') || text.contains(':') {
        return parse_absolute(text, tz);
    }
    if let Some((secs, frac)) = text.split_once('.') {
        let well_formed = secs.len() == 10
            && (1..=3).contains(&frac.len())
            && secs.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit());
        if !well_formed {
            return Err(Error::invalid(format!(
                "Invalid time: {text}. Millisecond timestamps must be in the format \
                 <seconds>.<ms> where the milliseconds are limited to 3 digits"
            )));
        }
        // Digits only, 10 then 1 to 3: no overflow.
        let secs: i64 = secs.parse().unwrap_or_default();
        let ms = frac
            .bytes()
            .chain(std::iter::repeat(b'0'))
            .take(3)
            .fold(0i64, |a, b| a * 10 + i64::from(b - b'0'));
        return Ok(secs * 1000 + ms);
    }
    let value = crate::value::parse_long(text)
        .map_err(|e| Error::invalid(format!("Invalid time: {text}. {e}")))?;
    if value < 0 {
        return Err(Error::invalid(format!(
            "Invalid time: {text}. Negative timestamps are not supported."
        )));
    }
    if text.len() <= 10 {
        value
            .checked_mul(1000)
            .ok_or_else(|| Error::invalid(format!("Invalid time: {text}")))
    } else {
        Ok(value)
    }
}

/// Parses a duration such as `1h`, `30s`, `500ms`, `2w` into milliseconds, with OpenTSDB's
/// messages for each way it can be wrong. Units: `ms`, `s`, `m`, `h`, `d`, `w`, `n` (30
/// days), `y` (365 days).
pub fn parse_duration_ms(text: &str) -> Result<i64> {
    if text.is_empty() {
        return Err(Error::invalid("Cannot parse null or empty duration"));
    }
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(|| {
        Error::invalid(format!(
            "Invalid duration, must have an integer and unit: {text}"
        ))
    })?;
    let (num, unit) = text.split_at(split);
    let n: i64 = num
        .parse()
        .map_err(|_| Error::invalid(format!("Invalid duration (number): {text}")))?;
    if n <= 0 {
        return Err(Error::invalid(format!("Zero or negative duration: {text}")));
    }
    let unit_ms: i64 = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 604_800_000,
        "n" => 2_592_000_000,
        "y" => 31_536_000_000,
        _ => return Err(Error::invalid(format!("Invalid duration (suffix): {text}"))),
    };
    n.checked_mul(unit_ms)
        .ok_or_else(|| Error::invalid(format!("Duration must be < Long.MAX_VALUE ms: {text}")))
}

/// A time zone by its IANA name (`America/Denver`, `UTC`), as OpenTSDB's `timezone` field.
pub fn parse_timezone(name: &str) -> Result<Tz> {
    name.parse::<Tz>()
        .map_err(|_| Error::invalid("The timezone specification could not be found"))
}

/// An absolute date, its form chosen by its length as OpenTSDB chooses it. Fields are read
/// as Java's lenient `SimpleDateFormat` reads them: numbers of any width, out-of-range ones
/// rolling over (month 13 is January of the next year), anything after the last field
/// ignored.
fn parse_absolute(text: &str, tz: Tz) -> Result<i64> {
    // The separator before each field after the year.
    let separators: &[u8] = match text.len() {
        10 => b"//",
        16 if text.contains('-') => b"//-:",
        16 => b"// :",
        19 if text.contains('-') => b"//-::",
        19 => b"// ::",
        _ => return Err(Error::invalid(format!("Invalid absolute date: {text}"))),
    };
    let bad = || {
        Error::invalid(format!(
            "Invalid date: {text}. Unparseable date: \"{text}\""
        ))
    };
    // Year, month, day, hour, minute, second.
    let mut values = [0i64, 1, 1, 0, 0, 0];
    let mut rest = text;
    for (i, value) in values.iter_mut().enumerate().take(separators.len() + 1) {
        if i > 0 {
            rest = rest
                .strip_prefix(char::from(separators[i - 1]))
                .ok_or_else(bad)?;
        }
        let (negative, body) = match rest.strip_prefix('-') {
            Some(r) if i > 0 => (true, r),
            _ => (false, rest),
        };
        let end = body
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(body.len());
        if end == 0 {
            return Err(bad());
        }
        let n: i64 = body[..end].parse().map_err(|_| bad())?;
        *value = if negative { -n } else { n };
        rest = &body[end..];
    }
    let [year, month, day, hour, minute, second] = values;
    let months = year
        .checked_mul(12)
        .and_then(|m| m.checked_add(month - 1))
        .ok_or_else(bad)?;
    let first = i32::try_from(months.div_euclid(12))
        .ok()
        .and_then(|y| NaiveDate::from_ymd_opt(y, (months.rem_euclid(12) + 1) as u32, 1))
        .ok_or_else(bad)?;
    let seconds = (day - 1)
        .checked_mul(86_400)
        .and_then(|s| s.checked_add(hour * 3600 + minute * 60 + second))
        .ok_or_else(bad)?;
    let local = NaiveDateTime::new(first, NaiveTime::MIN)
        .checked_add_signed(chrono::TimeDelta::try_seconds(seconds).ok_or_else(bad)?)
        .ok_or_else(bad)?;
    crate::calendar::local_to_ms(tz, local).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millisecond_detection_matches_opentsdb() {
        assert!(!is_millis(1292148123));
        assert!(!is_millis(u32::MAX as i64));
        assert!(is_millis(u32::MAX as i64 + 1));
        assert!(is_millis(1292148123456));
        assert!(check_timestamp(-1).is_err());
        assert!(check_timestamp(MAX_MS_TIMESTAMP + 1).is_err());
        assert!(check_timestamp(u32::MAX as i64 * 1000 + 999).is_ok());
        assert!(check_timestamp(MAX_MS_TIMESTAMP).is_err());
    }

    #[test]
    fn parses_opentsdb_date_forms() {
        let now = 1_700_000_000_000;
        let cases: &[(&str, i64)] = &[
            ("now", now),
            ("1h-ago", now - 3_600_000),
            ("10m-ago", now - 600_000),
            ("500ms-ago", now - 500),
            ("2w-ago", now - 1_209_600_000),
            ("1292148123", 1_292_148_123_000),
            ("1292148123.456", 1_292_148_123_456),
            ("1292148123456", 1_292_148_123_456),
            ("2010/12/12", 1_292_112_000_000),
            ("2010/12/12-10:02:03", 1_292_148_123_000),
            ("2010/12/12 10:02", 1_292_148_120_000),
            ("2010/12/12 10:02:03", 1_292_148_123_000),
            ("2010/12/12-10:02", 1_292_148_120_000),
            ("1292148123456ms", 1_292_148_123_456),
            ("5ms", 5),
            ("1H-AGO", now - 3_600_000),
            ("NOW", now),
            ("1292148123.4", 1_292_148_123_400),
            // Ten characters or fewer are seconds, more are milliseconds.
            ("0", 0),
            ("12921481230", 12_921_481_230),
            // Fields roll over as Java's lenient date parsing rolls them.
            ("2013/02/30", 1_362_182_400_000),
            ("2012/13/01", 1_356_998_400_000),
        ];
        for (text, want) in cases {
            assert_eq!(parse_time(text, now), Ok(*want), "{text}");
        }
        let denver = parse_timezone("America/Denver").unwrap();
        assert_eq!(
            parse_time_in("2013/01/01", now, denver),
            Ok(1_357_023_600_000),
            "local midnight, UTC-7 in winter"
        );
        assert!(parse_timezone("Mars/Olympus").is_err());
        for (bad, want) in [
            ("", "Missing time"),
            ("1x-ago", "Invalid duration (suffix): 1x"),
            (
                "1-ago",
                "Invalid duration, must have an integer and unit: 1",
            ),
            ("h-ago", "Invalid duration (number): h"),
            ("0h-ago", "Zero or negative duration: 0h"),
            ("-ago", "Cannot parse null or empty duration"),
            ("abc", "Invalid time: abc. Invalid character 'a' in abc"),
            (
                "2013-01-01",
                "Invalid time: 2013-01-01. Invalid character '-' in 2013-01-01",
            ),
            (
                "-5",
                "Invalid time: -5. Negative timestamps are not supported.",
            ),
            (
                "12.34",
                "Invalid time: 12.34. Millisecond timestamps must be in the format <seconds>.<ms> where the milliseconds are limited to 3 digits",
            ),
            ("2010/1/1", "Invalid absolute date: 2010/1/1"),
            ("10:02", "Invalid absolute date: 10:02"),
            (
                "2010/ab/12",
                "Invalid date: 2010/ab/12. Unparseable date: \"2010/ab/12\"",
            ),
        ] {
            assert_eq!(parse_time(bad, now), Err(Error::invalid(want)), "{bad}");
        }
    }

    proptest::proptest! {
        #[test]
        fn never_panics(text in "\\PC{0,24}") {
            let _ = parse_time(&text, 1_700_000_000_000);
        }

        #[test]
        fn never_panics_on_date_shaped_text(
            a in "-?[0-9]{1,6}", b in "-?[0-9]{1,4}", c in "-?[0-9]{1,4}",
            sep in "[-/ :]", d in "-?[0-9]{1,6}", e in "-?[0-9]{1,4}",
        ) {
            for text in [format!("{a}/{b}/{c}"), format!("{a}/{b}/{c}{sep}{d}:{e}"), format!("{a}/{b}/{c}{sep}{d}:{e}:{c}")] {
                let _ = parse_time(&text, 1_700_000_000_000);
            }
        }
    }
}
