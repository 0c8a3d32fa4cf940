//! JSON as OpenTSDB's parser (Jackson, as OpenTSDB configures it) reads it, where that is
//! more lenient than serde_json: bare `NaN` and `Infinity` tokens, and long fields given as
//! floats or strings.

use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer, Error as _};
use serde_json::Value;

/// Parses `body` as `T`. A body that serde_json refuses only because of Jackson's non-numeric
/// number tokens (`NaN`, `Infinity`, `+Infinity`, `-Infinity`, `+INF`, `-INF`) is read with
/// those tokens as strings, which is what OpenTSDB's fields see (`"NaN"`).
pub(crate) fn from_slice<T: DeserializeOwned>(body: &[u8]) -> Result<T, serde_json::Error> {
    match serde_json::from_slice(body) {
        Ok(v) => Ok(v),
        Err(e) => match quote_non_numeric(body) {
            Some(quoted) => serde_json::from_slice(&quoted).map_err(|_| e),
            None => Err(e),
        },
    }
}

const NON_NUMERIC: [&[u8]; 6] = [
    b"NaN",
    b"Infinity",
    b"+Infinity",
    b"-Infinity",
    b"+INF",
    b"-INF",
];

/// `body` with each non-numeric number token outside strings put in quotes; `None` when it
/// has none.
pub(crate) fn quote_non_numeric(body: &[u8]) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    let mut i = 0;
    let mut in_string = false;
    while i < body.len() {
        let b = body[i];
        if in_string {
            match b {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if b == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        let token = NON_NUMERIC.iter().find(|t| {
            body[i..].starts_with(t)
                && !body
                    .get(i + t.len())
                    .is_some_and(|c| c.is_ascii_alphanumeric())
                && (i == 0 || !body[i - 1].is_ascii_alphanumeric())
        });
        match token {
            Some(t) => {
                let o = out.get_or_insert_with(|| Vec::with_capacity(body.len() + 16));
                o.extend_from_slice(&body[copied..i]);
                o.push(b'"');
                o.extend_from_slice(t);
                o.push(b'"');
                i += t.len();
                copied = i;
            }
            None => i += 1,
        }
    }
    let mut o = out?;
    o.extend_from_slice(&body[copied..]);
    Some(o)
}

/// A long field as Jackson fills it: integers as they are, floats truncated (`100.0` is
/// 100), numeric strings parsed (`""` is 0), `null` absent.
pub(crate) fn opt_long<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    let v = Value::deserialize(d)?;
    let out_of_range = |n: &dyn std::fmt::Display| {
        D::Error::custom(format!("Numeric value ({n}) out of range of long"))
    };
    match &v {
        Value::Null => Ok(None),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Ok(Some(i)),
            (None, Some(f)) if f.is_finite() && f.abs() < 9.223_372_036_854_775e18 => {
                Ok(Some(f as i64))
            }
            _ => Err(out_of_range(n)),
        },
        Value::String(s) => {
            let s = s.trim();
            if s.is_empty() || s == "null" {
                return Ok(Some(0));
            }
            s.parse().map(Some).map_err(|_| {
                D::Error::custom(format!("Cannot deserialize value of type `long` from String \"{s}\": not a valid long value"))
            })
        }
        other => Err(D::Error::custom(format!(
            "Cannot deserialize value of type `long` from {other}"
        ))),
    }
}

/// The order in which Java iterates a `HashMap` made with `new HashMap<>(initial)` into which
/// the distinct `keys` were put in this order, as indexes into `keys`: the table starts at
/// the power of two at or above `initial` and doubles while over three quarters full.
pub(crate) fn java_sized_map_order(keys: &[&str], initial: usize) -> Vec<usize> {
    let n = keys.len();
    let mut slots = initial.max(1).next_power_of_two();
    while n > slots * 3 / 4 {
        slots *= 2;
    }
    hourglass_core::put::java_table_order(keys, slots)
}

/// A boolean field as OpenTSDB's JSON reader (Jackson) fills a Java `boolean`: `true`/`false`,
/// the strings `"true"`/`"True"`/`"false"`/`"False"` (`""` and `"null"` false), a number
/// (non-zero true), `null` false; anything else is not a boolean.
pub(crate) fn java_flag(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::Null => Some(false),
        Value::Number(n) => Some(n.as_f64().is_some_and(|f| f != 0.0)),
        Value::String(s) => match s.trim() {
            "true" | "True" => Some(true),
            "false" | "False" | "" | "null" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// A `boolean` field read as [`java_flag`] reads it (for `deserialize_with`).
pub(crate) fn java_bool<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    let v = Value::deserialize(d)?;
    java_flag(&v).ok_or_else(|| {
        D::Error::custom(format!(
            "Cannot deserialize value of type `boolean` from {v}: only \"true\" or \"false\" recognized"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_numeric_tokens_are_quoted_outside_strings_only() {
        let body = br#"[{"value":NaN,"m":"NaN x","v2":-Infinity,"v3":+INF},[Infinity]]"#;
        let quoted = quote_non_numeric(body).unwrap();
        assert_eq!(
            String::from_utf8(quoted).unwrap(),
            r#"[{"value":"NaN","m":"NaN x","v2":"-Infinity","v3":"+INF"},["Infinity"]]"#
        );
        assert_eq!(quote_non_numeric(br#"{"a":"Infinity \" NaN"}"#), None);
        let v: Value = from_slice(br#"{"value": NaN}"#).unwrap();
        assert_eq!(v["value"], "NaN");
    }

    #[derive(Deserialize)]
    struct Longs {
        #[serde(default, deserialize_with = "opt_long")]
        n: Option<i64>,
    }

    #[test]
    fn long_fields_read_as_jackson_reads_them() {
        let n = |body: &str| from_slice::<Longs>(body.as_bytes()).map(|l| l.n);
        assert_eq!(n(r#"{"n": 100}"#).unwrap(), Some(100));
        assert_eq!(n(r#"{"n": 100.0}"#).unwrap(), Some(100));
        assert_eq!(n(r#"{"n": 100.7}"#).unwrap(), Some(100));
        assert_eq!(n(r#"{"n": "100"}"#).unwrap(), Some(100));
        assert_eq!(n(r#"{"n": ""}"#).unwrap(), Some(0));
        assert_eq!(n(r#"{"n": null}"#).unwrap(), None);
        assert_eq!(n("{}").unwrap(), None);
        assert!(n(r#"{"n": "100.0"}"#).is_err());
        assert!(n(r#"{"n": 1e300}"#).is_err());
        assert!(n(r#"{"n": true}"#).is_err());
    }

    proptest::proptest! {
        #[test]
        fn quoting_never_panics(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..120)) {
            let _ = quote_non_numeric(&body);
            let _ = from_slice::<Value>(&body);
        }
    }
}
