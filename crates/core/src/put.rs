//! The `put` line: `put <metric> <timestamp> <value> <tagk=tagv> [<tagk=tagv> ...]`.
//!
//! Words are separated by runs of ASCII white space (OpenTSDB splits on single spaces; runs of
//! spaces and trailing spaces are tolerated here). Timestamps are seconds, milliseconds, or
//! seconds with a fraction (`1292148123.5` is 1292148123500 ms). Errors come in OpenTSDB's two
//! kinds, which its telnet replies prefix with `put: invalid value:` and
//! `put: illegal argument:`.

use crate::value::{self, Value};

/// Why a put line was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutError {
    /// A number that does not parse (Java's NumberFormatException).
    InvalidValue(String),
    /// Anything else wrong with the line (Java's IllegalArgumentException).
    IllegalArgument(String),
}

impl std::fmt::Display for PutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PutError::InvalidValue(m) | PutError::IllegalArgument(m) => f.write_str(m),
        }
    }
}

/// A parsed put line; its tags are in the caller's vector, `tags` is their range there.
#[derive(Debug, Clone, PartialEq)]
pub struct PutLine<'a> {
    pub metric: &'a str,
    pub timestamp: i64,
    pub value: Value,
    pub tags: std::ops::Range<usize>,
}

fn illegal(msg: String) -> PutError {
    PutError::IllegalArgument(msg)
}

/// Parses the words after `put`. Tag pairs are appended to `tags`.
pub fn parse_put<'a>(
    args: &'a str,
    tags: &mut Vec<(&'a str, &'a str)>,
) -> Result<PutLine<'a>, PutError> {
    let mut words = args.split_ascii_whitespace();
    let (Some(metric), Some(ts), Some(val)) = (words.next(), words.next(), words.next()) else {
        let got = args.split_ascii_whitespace().count();
        return Err(illegal(format!(
            "not enough arguments (need least 4, got {got})"
        )));
    };
    let start = tags.len();
    let mut any_tag = false;
    for w in words {
        any_tag = true;
        let Some((k, v)) = w.split_once('=') else {
            tags.truncate(start);
            return Err(illegal(format!("invalid tag: {w}")));
        };
        if k.is_empty() || v.is_empty() || v.contains('=') {
            tags.truncate(start);
            return Err(illegal(format!("invalid tag: {w}")));
        }
        match tags[start..].iter().find(|(have, _)| *have == k) {
            Some((_, have_v)) if *have_v == v => {}
            Some(_) => {
                let so_far = tag_map_text(&tags[start..]);
                tags.truncate(start);
                return Err(illegal(format!("duplicate tag: {w}, tags={so_far}")));
            }
            None => tags.push((k, v)),
        }
    }
    if !any_tag {
        return Err(illegal("not enough arguments (need least 4, got 3)".into()));
    }
    let fail = |e: PutError, tags: &mut Vec<(&'a str, &'a str)>| {
        tags.truncate(start);
        Err(e)
    };
    let timestamp = match parse_timestamp(ts) {
        Ok(t) => t,
        Err(e) => return fail(e, tags),
    };
    let value = match value::parse_value(val) {
        Ok(v) => v,
        Err(e) => return fail(PutError::InvalidValue(e.to_string()), tags),
    };
    Ok(PutLine {
        metric,
        timestamp,
        value,
        tags: start..tags.len(),
    })
}

/// `{k=v, k2=v2}`, as Java prints a map.
pub fn tag_map_text(tags: &[(&str, &str)]) -> String {
    let parts: Vec<String> = tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{{{}}}", parts.join(", "))
}

/// Seconds, milliseconds, or `seconds.fraction` (to milliseconds); must be positive.
pub fn parse_timestamp(text: &str) -> Result<i64, PutError> {
    let invalid = |e: crate::Error| PutError::InvalidValue(e.to_string());
    let ts = match text.split_once('.') {
        None => value::parse_long(text).map_err(invalid)?,
        Some((secs, frac)) => {
            let s = value::parse_long(secs).map_err(invalid)?;
            if frac.is_empty() || !frac.bytes().all(|b| b.is_ascii_digit()) {
                return Err(PutError::InvalidValue(format!(
                    "Invalid character '.' in {text}"
                )));
            }
            if crate::time::is_millis(s) {
                s // already milliseconds: the fraction is below resolution
            } else {
                let ms: i64 = frac
                    .bytes()
                    .chain(std::iter::repeat(b'0'))
                    .take(3)
                    .fold(0, |a, b| a * 10 + i64::from(b - b'0'));
                s.checked_mul(1000)
                    .and_then(|v| {
                        if s < 0 {
                            v.checked_sub(ms)
                        } else {
                            v.checked_add(ms)
                        }
                    })
                    .ok_or_else(|| PutError::InvalidValue(format!("Overflow in {text}")))?
            }
        }
    };
    if ts <= 0 {
        return Err(illegal(format!("invalid timestamp: {ts}")));
    }
    Ok(ts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type Owned = (String, i64, Value, Vec<(String, String)>);

    fn parse(line: &str) -> Result<Owned, PutError> {
        let mut tags = Vec::new();
        let p = parse_put(line, &mut tags)?;
        let t = tags[p.tags.clone()]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Ok((p.metric.to_string(), p.timestamp, p.value, t))
    }

    #[test]
    fn accepts_opentsdb_lines_and_tolerates_spacing() {
        let want = (
            "sys.cpu".to_string(),
            1356998400,
            Value::Int(42),
            vec![
                ("host".to_string(), "a".to_string()),
                ("cpu".to_string(), "0".to_string()),
            ],
        );
        for line in [
            "sys.cpu 1356998400 42 host=a cpu=0",
            "sys.cpu  1356998400   42 host=a cpu=0 ",
            "sys.cpu\t1356998400 42 host=a\tcpu=0",
            "sys.cpu 1356998400 42 host=a cpu=0 host=a",
        ] {
            assert_eq!(parse(line), Ok(want.clone()), "{line:?}");
        }
        assert_eq!(
            parse("m 1356998400.5 1.5 h=a").map(|p| (p.1, p.2)),
            Ok((1356998400500, Value::Float(1.5)))
        );
        assert_eq!(
            parse("m 1356998400123 1 h=a").map(|p| p.1),
            Ok(1356998400123)
        );
        assert_eq!(
            parse("m 1356998400.123 0.1 h=a").map(|p| (p.1, p.2)),
            Ok((1356998400123, Value::Double(0.1)))
        );
    }

    #[test]
    fn errors_use_opentsdb_words() {
        let err = |line: &str| parse(line).unwrap_err();
        assert_eq!(
            err("m 1 2"),
            PutError::IllegalArgument("not enough arguments (need least 4, got 3)".into())
        );
        assert_eq!(
            err(""),
            PutError::IllegalArgument("not enough arguments (need least 4, got 0)".into())
        );
        assert_eq!(
            err("m 1356998400 42 host"),
            PutError::IllegalArgument("invalid tag: host".into())
        );
        assert_eq!(
            err("m 1356998400 42 host="),
            PutError::IllegalArgument("invalid tag: host=".into())
        );
        assert_eq!(
            err("m 1356998400 42 a=b=c"),
            PutError::IllegalArgument("invalid tag: a=b=c".into())
        );
        assert_eq!(
            err("m 1356998400 42 h=a h=b"),
            PutError::IllegalArgument("duplicate tag: h=b, tags={h=a}".into())
        );
        assert_eq!(
            err("m 0 42 h=a"),
            PutError::IllegalArgument("invalid timestamp: 0".into())
        );
        assert_eq!(
            err("m -5 42 h=a"),
            PutError::IllegalArgument("invalid timestamp: -5".into())
        );
        assert_eq!(
            err("m 12x 42 h=a"),
            PutError::InvalidValue("Invalid character 'x' in 12x".into())
        );
        assert_eq!(
            err("m 1356998400 4x2 h=a"),
            PutError::InvalidValue("Invalid character 'x' in 4x2".into())
        );
        assert_eq!(
            err("m 1356998400 NaN h=a"),
            PutError::InvalidValue("Invalid character 'N' in NaN".into())
        );
    }

    proptest! {
        #[test]
        fn never_panics(line in "\\PC{0,80}") {
            let mut tags = Vec::new();
            let _ = parse_put(&line, &mut tags);
        }

        #[test]
        fn never_panics_on_put_shaped_lines(m in "[a-z.]{1,5}", ts in "[0-9.+-]{0,16}", v in "[0-9.eE+-]{0,12}", t in "[a-z=]{0,8}") {
            let mut tags = Vec::new();
            let _ = parse_put(&format!("{m} {ts} {v} {t}"), &mut tags);
        }
    }
}
