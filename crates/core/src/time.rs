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
pub fn parse_time_in(text: &str, now_ms: i64, tz: Tz) -> Result<i64> {
    let text = text.trim();
    if text.is_empty() {
        return Err(Error::invalid("Missing time"));
    }
    if text.eq_ignore_ascii_case("now") {
        return Ok(now_ms);
    }
    if let Some(rel) = text.to_ascii_lowercase().strip_suffix("-ago") {
        return Ok(now_ms - parse_duration_ms(rel)?);
    }
    if text.contains('/') || text.contains(':') {
        return parse_absolute(text, tz);
    }
    let (digits, has_fraction) = if text.contains('.') {
        if text.len() != 14 || text.as_bytes().get(10) != Some(&b'.') {
            return Err(Error::invalid(format!(
                "Invalid time: {text}. Millisecond timestamps must be in the format \
                 <seconds>.<ms> where the milliseconds are limited to 3 digits"
            )));
        }
        (text.replacen('.', "", 1), true)
    } else {
        (text.to_string(), false)
    };
    let value: i64 = digits
        .parse()
        .map_err(|_| Error::invalid(format!("Invalid time: {text}")))?;
    if value < 0 {
        return Err(Error::invalid(format!(
            "Invalid time: {text}. Negative timestamps are not supported."
        )));
    }
    if !has_fraction && text.len() <= 10 {
        Ok(value * 1000)
    } else {
        Ok(value)
    }
}

/// Parses a duration such as `1h`, `30s`, `500ms`, `2w` into milliseconds.
pub fn parse_duration_ms(text: &str) -> Result<i64> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| Error::invalid(format!("Invalid duration (number): {text}")))?;
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
        .ok_or_else(|| Error::invalid(format!("Duration too large: {text}")))
}

/// A time zone by its IANA name (`America/Denver`, `UTC`), as OpenTSDB's `timezone` field.
pub fn parse_timezone(name: &str) -> Result<Tz> {
    name.parse::<Tz>()
        .map_err(|_| Error::invalid("The timezone specification could not be found"))
}

fn parse_absolute(text: &str, tz: Tz) -> Result<i64> {
    let bad = || Error::invalid(format!("Invalid date: {text}"));
    let (date, clock) = match text.find(['-', ' ']) {
        Some(i) => (&text[..i], Some(&text[i + 1..])),
        None => (text, None),
    };
    let date = NaiveDate::parse_from_str(date, "%Y/%m/%d").map_err(|_| bad())?;
    let clock = match clock {
        None => NaiveTime::MIN,
        Some(c) => NaiveTime::parse_from_str(c, "%H:%M:%S")
            .or_else(|_| NaiveTime::parse_from_str(c, "%H:%M"))
            .map_err(|_| bad())?,
    };
    crate::calendar::local_to_ms(tz, NaiveDateTime::new(date, clock)).ok_or_else(bad)
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
        for bad in ["", "1x-ago", "abc", "2010/13/45", "12.34", "-5"] {
            assert!(parse_time(bad, now).is_err(), "{bad}");
        }
    }
}
