use regex::bytes::{Regex, RegexBuilder};

use crate::{Error, Result};

/// A row-key regex with Bigtable's semantics: the whole key must match, byte-wise
/// (`\xHH` is a byte, not a code point).
#[derive(Debug, Clone)]
pub struct KeyRegex(Regex);

impl KeyRegex {
    pub fn new(pattern: &str) -> Result<KeyRegex> {
        RegexBuilder::new(&format!(r"\A(?:{pattern})\z"))
            .unicode(false)
            .size_limit(256 << 20)
            .dfa_size_limit(64 << 20)
            .build()
            .map(KeyRegex)
            .map_err(|e| Error::InvalidRegex(e.to_string()))
    }

    pub fn is_match(&self, key: &[u8]) -> bool {
        self.0.is_match(key)
    }
}
