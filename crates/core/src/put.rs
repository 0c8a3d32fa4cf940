//! The `put` line: `put <metric> <timestamp> <value> <tagk=tagv> [<tagk=tagv> ...]`.
//!
//! As OpenTSDB reads it: words are separated by single spaces and empty words are kept (so
//! `put m  1 2 h=a` has an empty timestamp), then checked in OpenTSDB's order: the word
//! count, the metric, the timestamp, the value, the tags (empty tag words are skipped), the
//! value's number. Timestamps are seconds, milliseconds, or seconds with a fraction
//! (`1292148123.5` is 1292148123500 ms). Errors come in OpenTSDB's two kinds, which its
//! telnet replies prefix with `put: invalid value:` and `put: illegal argument:`.

use crate::value::{self, Value};

/// Why a put line was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutError {
    /// A number that does not parse (Java's NumberFormatException).
    InvalidValue(String),
    /// Anything else wrong with the line (Java's IllegalArgumentException).
    IllegalArgument(String),
}

impl PutError {
    /// Fewer than four words after the command: `got` is how many there were.
    pub fn not_enough_arguments(got: usize) -> PutError {
        illegal(format!("not enough arguments (need least 4, got {got})"))
    }
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
    /// The tag words as written: the rest of the line after the value's space. The same
    /// text always parses to the same tags, so it can key a cache of series.
    pub tags_text: &'a str,
}

fn illegal(msg: String) -> PutError {
    PutError::IllegalArgument(msg)
}

/// Parses the words after `put ` (everything after the space that ends the command). Tag
/// pairs are appended to `tags`; on an error nothing is left there.
pub fn parse_put<'a>(
    args: &'a str,
    tags: &mut Vec<(&'a str, &'a str)>,
) -> Result<PutLine<'a>, PutError> {
    let head = parse_put_head(args)?;
    let start = tags.len();
    parse_tags(head.tags_text, tags)?;
    Ok(PutLine {
        metric: head.metric,
        timestamp: head.timestamp,
        value: head.value,
        tags: start..tags.len(),
        tags_text: head.tags_text,
    })
}

/// A put line read but for its tags, which are left as written: a writer that knows the
/// series of this metric and tag text needs nothing more, and reads them with
/// [`parse_tags`] when it does not.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PutHead<'a> {
    pub metric: &'a str,
    pub timestamp: i64,
    pub value: Value,
    /// The tag words as written: the rest of the line after the value's space. The same
    /// text always parses to the same tags, so it can key a cache of series.
    pub tags_text: &'a str,
}

/// [`parse_put`] without splitting the tags. Every error `parse_put` gives before the tags
/// is given; a tag error is left to [`parse_tags`], except that a value that does not parse
/// is reported after the tags are checked, as OpenTSDB checks them first.
pub fn parse_put_head(args: &str) -> Result<PutHead<'_>, PutError> {
    let mut words = Words::new(args);
    let metric = words.next().unwrap_or_default();
    let (Some(ts), Some(val)) = (words.next(), words.next()) else {
        return Err(PutError::not_enough_arguments(Words::new(args).count()));
    };
    // A fifth word, even an empty one, is there when anything follows the value's space.
    let Some(tags_text) = words.rest() else {
        return Err(PutError::not_enough_arguments(Words::new(args).count()));
    };
    if metric.is_empty() {
        return Err(illegal("empty metric name".into()));
    }
    let timestamp = match digits_value(ts.as_bytes()) {
        Some(t) if t > 0 => t,
        _ => parse_timestamp(ts)?,
    };
    if val.is_empty() {
        return Err(illegal("empty value".into()));
    }
    let integer = match val.as_bytes() {
        [b'-', digits @ ..] => digits_value(digits).map(|v| Value::Int(-v)),
        digits => digits_value(digits).map(Value::Int),
    };
    match integer.map_or_else(|| value::parse_value(val), Ok) {
        Ok(value) => Ok(PutHead {
            metric,
            timestamp,
            value,
            tags_text,
        }),
        Err(e) => {
            parse_tags(tags_text, &mut Vec::new())?;
            Err(PutError::InvalidValue(e.to_string()))
        }
    }
}

/// The number a run of 1 to 18 ASCII digits spells (no sign, no overflow possible), `None`
/// for anything else: the common case of [`parse_timestamp`] and of integer values, in one
/// pass over the bytes.
fn digits_value(bytes: &[u8]) -> Option<i64> {
    if bytes.len() > 18 {
        return None;
    }
    // At most 18 digits: below 10^18, within an i64.
    crate::digits::digits_u64(bytes).map(|v| v as i64)
}

/// Words separated by single spaces, empty ones kept (`str::split(' ')`), found eight bytes
/// at a time (`digits::find_byte`): on words this short a vectorised search's set-up costs
/// more than it saves, and a byte loop several instructions a byte.
struct Words<'a>(Option<&'a str>);

impl<'a> Words<'a> {
    fn new(text: &'a str) -> Words<'a> {
        Words(Some(text))
    }

    /// What the next words are cut from, if any are left.
    fn rest(&self) -> Option<&'a str> {
        self.0
    }
}

impl<'a> Iterator for Words<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let rest = self.0?;
        // A space is one byte: both sides are on char boundaries.
        match crate::digits::find_byte(rest.as_bytes(), b' ') {
            Some(i) => {
                self.0 = rest.get(i + 1..);
                rest.get(..i)
            }
            None => {
                self.0 = None;
                Some(rest)
            }
        }
    }
}

/// OpenTSDB's `Tags.parse` over each non-empty word of `text` (words split on single
/// spaces): `k=v`, both sides non-empty, one `=`; a repeated key with the same value is
/// ignored, with another value refused. One pass over the bytes finds each word's end and
/// its `=` together.
///
/// The pairs are appended to `tags`; on an error nothing is left there.
pub fn parse_tags<'a>(text: &'a str, tags: &mut Vec<(&'a str, &'a str)>) -> Result<(), PutError> {
    let start = tags.len();
    let parsed = parse_tags_after(text, start, tags);
    if parsed.is_err() {
        tags.truncate(start);
    }
    parsed
}

fn parse_tags_after<'a>(
    text: &'a str,
    start: usize,
    tags: &mut Vec<(&'a str, &'a str)>,
) -> Result<(), PutError> {
    let bytes = text.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        let begin = at;
        let (mut equals, mut more) = (usize::MAX, false);
        while let Some(&b) = bytes.get(at) {
            if b == b' ' {
                break;
            }
            if b == b'=' {
                more |= equals != usize::MAX;
                equals = equals.min(at);
            }
            at += 1;
        }
        let end = at;
        at += 1;
        if end == begin {
            continue;
        }
        // Spaces and `=` are ASCII: every cut is on a char boundary.
        let w = &text[begin..end];
        if equals == usize::MAX || equals == begin || equals + 1 == end || more {
            return Err(illegal(format!("invalid tag: {w}")));
        }
        let (k, v) = (&text[begin..equals], &text[equals + 1..end]);
        match tags[start..].iter().find(|(have, _)| *have == k) {
            Some((_, have_v)) if *have_v == v => {}
            Some(_) => {
                let so_far = tag_map_text(&tags[start..]);
                return Err(illegal(format!("duplicate tag: {w}, tags={so_far}")));
            }
            None => tags.push((k, v)),
        }
    }
    Ok(())
}

/// `{k=v, k2=v2}`, as Java prints a `HashMap<String, String>` filled with `tags` in this
/// order (OpenTSDB's tag maps, in its error messages), in [`java_hash_map_order`].
pub fn tag_map_text<K: AsRef<str>, V: AsRef<str>>(tags: &[(K, V)]) -> String {
    let parts: Vec<String> = java_hash_map_order(tags.iter().map(|(k, _)| k.as_ref()))
        .into_iter()
        .map(|i| format!("{}={}", tags[i].0.as_ref(), tags[i].1.as_ref()))
        .collect();
    format!("{{{}}}", parts.join(", "))
}

/// The order in which Java iterates a `HashMap` (made with the default capacity) whose
/// distinct `keys` were put in this order, as indexes into `keys`: by the bucket of each
/// key's `String.hashCode` in a table of 16 slots (doubled while over three quarters full),
/// keys of one bucket in the order they were put.
pub fn java_hash_map_order<'a>(keys: impl IntoIterator<Item = &'a str>) -> Vec<usize> {
    let keys: Vec<&str> = keys.into_iter().collect();
    let mut slots = 16usize;
    while keys.len() > slots / 4 * 3 {
        slots *= 2;
    }
    java_table_order(&keys, slots)
}

/// The order of `keys` (distinct, put in this order) in a Java hash table of `slots` slots (a
/// power of two): by `(h ^ h >>> 16) & (slots - 1)` of each key's `String.hashCode`, keys of
/// one slot in the order they were put. `HashMap` and `ConcurrentHashMap` alike.
pub fn java_table_order(keys: &[&str], slots: usize) -> Vec<usize> {
    let bucket = |key: &str| {
        let h = key
            .encode_utf16()
            .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)));
        let spread = (h as u32) ^ ((h as u32) >> 16);
        spread as usize & (slots - 1)
    };
    let mut order: Vec<(usize, usize)> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (bucket(k), i))
        .collect();
    order.sort_unstable();
    order.into_iter().map(|(_, i)| i).collect()
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
    fn accepts_opentsdb_lines() {
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
            // Empty tag words are skipped, as OpenTSDB does.
            "sys.cpu 1356998400 42 host=a  cpu=0 ",
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
        // A trailing space makes the fourth word: the tag check is the engine's.
        assert_eq!(parse("m 1356998400 1 ").map(|p| p.3), Ok(vec![]));
    }

    #[test]
    fn words_are_split_on_single_spaces_as_opentsdb_does() {
        let err = |line: &str| parse(line).unwrap_err();
        assert_eq!(
            err(""),
            PutError::IllegalArgument("not enough arguments (need least 4, got 1)".into())
        );
        assert_eq!(
            err("m 1"),
            PutError::IllegalArgument("not enough arguments (need least 4, got 2)".into())
        );
        assert_eq!(
            err(" 1356998400 42 h=a"),
            PutError::IllegalArgument("empty metric name".into())
        );
        assert_eq!(
            err("m  42 h=a"),
            PutError::InvalidValue("Empty string".into())
        );
        assert_eq!(
            err("m 1356998400  h=a"),
            PutError::IllegalArgument("empty value".into())
        );
        // Tabs are not separators: they stay inside a word.
        assert_eq!(
            err("m\t1356998400 42 h=a"),
            PutError::IllegalArgument("not enough arguments (need least 4, got 3)".into())
        );
        // The tags are checked before the value's number.
        assert_eq!(
            err("m 1356998400 x h"),
            PutError::IllegalArgument("invalid tag: h".into())
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

    /// The parser as it was written before its fast paths, kept as the reference they must
    /// agree with.
    mod reference {
        use super::super::*;

        pub(super) fn parse_put<'a>(
            args: &'a str,
            tags: &mut Vec<(&'a str, &'a str)>,
        ) -> Result<PutLine<'a>, PutError> {
            let mut words = Words(Some(args));
            let metric = words.next().unwrap_or_default();
            let (Some(ts), Some(val), Some(first_tag)) = (words.next(), words.next(), words.next())
            else {
                return Err(PutError::not_enough_arguments(Words(Some(args)).count()));
            };
            if metric.is_empty() {
                return Err(illegal("empty metric name".into()));
            }
            let timestamp = parse_timestamp(ts)?;
            if val.is_empty() {
                return Err(illegal("empty value".into()));
            }
            let start = tags.len();
            if let Err(e) = parse_tags(std::iter::once(first_tag).chain(words), start, tags) {
                tags.truncate(start);
                return Err(e);
            }
            match value::parse_value(val) {
                Ok(value) => Ok(PutLine {
                    metric,
                    timestamp,
                    value,
                    tags: start..tags.len(),
                    // Added with the field: what follows the third space.
                    tags_text: args.splitn(4, ' ').nth(3).unwrap_or_default(),
                }),
                Err(e) => {
                    tags.truncate(start);
                    Err(PutError::InvalidValue(e.to_string()))
                }
            }
        }

        /// Words separated by single spaces, empty ones kept (`str::split(' ')`, with the memchr
        /// crate's search, which is faster on these short words).
        struct Words<'a>(Option<&'a str>);

        impl<'a> Iterator for Words<'a> {
            type Item = &'a str;

            fn next(&mut self) -> Option<&'a str> {
                let rest = self.0?;
                match memchr::memchr(b' ', rest.as_bytes()) {
                    Some(i) => {
                        self.0 = Some(&rest[i + 1..]);
                        Some(&rest[..i])
                    }
                    None => {
                        self.0 = None;
                        Some(rest)
                    }
                }
            }
        }

        /// OpenTSDB's `Tags.parse` over each non-empty word: `k=v`, both sides non-empty, one `=`;
        /// a repeated key with the same value is ignored, with another value refused.
        fn parse_tags<'a>(
            words: impl Iterator<Item = &'a str>,
            start: usize,
            tags: &mut Vec<(&'a str, &'a str)>,
        ) -> Result<(), PutError> {
            for w in words.filter(|w| !w.is_empty()) {
                let Some((k, v)) = w.split_once('=') else {
                    return Err(illegal(format!("invalid tag: {w}")));
                };
                if k.is_empty() || v.is_empty() || v.contains('=') {
                    return Err(illegal(format!("invalid tag: {w}")));
                }
                match tags[start..].iter().find(|(have, _)| *have == k) {
                    Some((_, have_v)) if *have_v == v => {}
                    Some(_) => {
                        let so_far = tag_map_text(&tags[start..]);
                        return Err(illegal(format!("duplicate tag: {w}, tags={so_far}")));
                    }
                    None => tags.push((k, v)),
                }
            }
            Ok(())
        }
    }

    proptest! {
        /// Any line of put-like characters parses exactly as the reference parses it: the
        /// same words, numbers and tags, or the same error.
        #[test]
        fn parses_as_the_reference_parser(
            any in "[a-c0-9=. +-]{0,40}",
            shaped in "[a-c.=]{0,3} [0-9]{1,4}(\\.[0-9]{0,2})? -?[0-9.e=]{0,4}( {1,2}[a-c=]{0,5}){0,4} ?",
        ) {
            for line in [any, shaped] {
                let (mut got_tags, mut want_tags) = (vec![("x", "y")], vec![("x", "y")]);
                let got = parse_put(&line, &mut got_tags);
                let want = reference::parse_put(&line, &mut want_tags);
                prop_assert_eq!(got, want, "{:?}", line);
                prop_assert_eq!(got_tags, want_tags);
            }
        }

        /// Lines with long words (past the eight bytes a scan reads at a time): timestamps and
        /// values of up to 24 digits, points, signs and exponents, words of any length around
        /// them. They parse exactly as the reference parses them.
        #[test]
        fn long_words_parse_as_the_reference_parser(
            metric in "[a-c.]{0,20}",
            ts in "[+-]?[0-9]{0,21}(\\.[0-9]{0,4})?",
            v in "[+-]?[0-9]{0,21}(\\.[0-9]{0,21})?([eE][-+]?[0-9]{1,3})?|[0-9.eE+-]{0,24}",
            tags in "( {1,2}[a-c]{0,9}=[a-c]{0,9}){0,3} ?",
        ) {
            let line = format!("{metric} {ts} {v}{tags}");
            let (mut got_tags, mut want_tags) = (Vec::new(), Vec::new());
            let got = parse_put(&line, &mut got_tags);
            let want = reference::parse_put(&line, &mut want_tags);
            prop_assert_eq!(got, want, "{:?}", line);
            prop_assert_eq!(got_tags, want_tags);
        }

        #[test]
        fn never_panics(line in "\\PC{0,80}") {
            let mut tags = Vec::new();
            let _ = parse_put(&line, &mut tags);
        }

        /// The digit fast paths read what the general parsers read.
        #[test]
        fn numbers_parse_as_the_general_parsers_read_them(ts in "[+-]?[0-9]{0,20}", v in "[+-]?[0-9]{0,20}") {
            let got = parse(&format!("m {ts} {v} h=a")).map(|p| (p.1, p.2));
            let want = parse_timestamp(&ts).and_then(|t| {
                if v.is_empty() {
                    return Err(illegal("empty value".into()));
                }
                value::parse_value(&v)
                    .map(|v| (t, v))
                    .map_err(|e| PutError::InvalidValue(e.to_string()))
            });
            prop_assert_eq!(got, want);
        }

        #[test]
        fn never_panics_on_put_shaped_lines(m in "[a-z.]{1,5}", ts in "[0-9.+-]{0,16}", v in "[0-9.eE+-]{0,12}", t in "[a-z=]{0,8}") {
            let mut tags = Vec::new();
            let _ = parse_put(&format!("{m} {ts} {v} {t}"), &mut tags);
        }
    }
}
