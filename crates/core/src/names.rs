//! OpenTSDB's rules for metric names, tag keys and tag values.

use crate::{Error, Result};

/// Checks a name (`what` names it in the error, e.g. `metric name`): ASCII letters, digits, `-`, `_`, `.`, `/`, any Unicode letter, and the
/// extra characters of `tsd.core.tag.allow_specialchars`. Names are kept as UTF-8.
pub fn validate_name(what: &str, name: &str, allow_special: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid(format!("Invalid {what}: empty string")));
    }
    for c in name.chars() {
        let ok = c.is_ascii_alphanumeric()
            || matches!(c, '-' | '_' | '.' | '/')
            || (!c.is_ascii() && c.is_alphabetic())
            || allow_special.contains(c);
        if !ok {
            return Err(Error::invalid(format!(
                "Invalid {what} (\"{name}\"): illegal character: {c}"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_opentsdb_charset_and_unicode_letters() {
        for name in ["sys.cpu.user", "a-b_c/d.e", "Ünïcödé", "温度", "0"] {
            assert_eq!(validate_name("metric name", name, ""), Ok(()), "{name}");
        }
    }

    #[test]
    fn rejects_with_opentsdb_messages() {
        assert_eq!(
            validate_name("metric name", "", ""),
            Err(Error::InvalidInput(
                "Invalid metric name: empty string".into()
            ))
        );
        assert_eq!(
            validate_name("tag name", "ho st", ""),
            Err(Error::InvalidInput(
                "Invalid tag name (\"ho st\"): illegal character:  ".into()
            ))
        );
        assert!(validate_name("tag value", "a=b", "").is_err());
        assert!(validate_name("tag value", "a:b", "").is_err());
    }

    #[test]
    fn special_characters_can_be_allowed() {
        assert_eq!(validate_name("tag value", "a:b", ":"), Ok(()));
        assert!(validate_name("tag value", "a b", ":").is_err());
    }
}
