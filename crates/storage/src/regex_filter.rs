use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use regex::bytes::{Regex, RegexBuilder};

use crate::{Error, Result};

/// A row-key regex with Bigtable's semantics: the whole key must match, byte-wise
/// (`\xHH` is a byte, not a code point).
#[derive(Debug, Clone)]
pub struct KeyRegex(Arc<Regex>);

/// Patterns compiled lately, shared: a dashboard asks the same queries again and again, and
/// a shared regex keeps its lazily built automaton warm between them.
const CACHED_PATTERNS: usize = 64;

/// Patterns longer than this are compiled each time (a candidate list of thousands of
/// series is not worth keeping).
const CACHED_PATTERN_BYTES: usize = 4096;

fn cache() -> &'static Mutex<HashMap<String, Arc<Regex>>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<Regex>>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

impl KeyRegex {
    pub fn new(pattern: &str) -> Result<KeyRegex> {
        let cacheable = pattern.len() <= CACHED_PATTERN_BYTES;
        if cacheable && let Some(re) = cache().lock().ok().and_then(|c| c.get(pattern).cloned()) {
            return Ok(KeyRegex(re));
        }
        let re = RegexBuilder::new(&format!(r"\A(?:{pattern})\z"))
            .unicode(false)
            .size_limit(256 << 20)
            .dfa_size_limit(64 << 20)
            .build()
            .map(Arc::new)
            .map_err(|e| Error::InvalidRegex(e.to_string()))?;
        if cacheable && let Ok(mut c) = cache().lock() {
            if c.len() >= CACHED_PATTERNS {
                c.clear();
            }
            c.insert(pattern.to_string(), Arc::clone(&re));
        }
        Ok(KeyRegex(re))
    }

    pub fn is_match(&self, key: &[u8]) -> bool {
        self.0.is_match(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pattern asked for again is the regex compiled the first time; a refused one is
    /// refused every time; whole keys only, byte-wise, either way.
    #[test]
    fn patterns_are_compiled_once_and_shared() {
        let a = KeyRegex::new(r"\x01.\xFF").expect("a pattern");
        let b = KeyRegex::new(r"\x01.\xFF").expect("a pattern");
        assert!(Arc::ptr_eq(&a.0, &b.0));
        assert!(b.is_match(&[1, 0x80, 0xFF]));
        assert!(!b.is_match(&[1, 0x80, 0xFF, 0]));
        for _ in 0..2 {
            assert!(matches!(KeyRegex::new("("), Err(Error::InvalidRegex(_))));
        }
        let long = "a".repeat(CACHED_PATTERN_BYTES + 1);
        let (c, d) = (KeyRegex::new(&long).unwrap(), KeyRegex::new(&long).unwrap());
        assert!(!Arc::ptr_eq(&c.0, &d.0));
        assert!(d.is_match(long.as_bytes()));
    }
}
