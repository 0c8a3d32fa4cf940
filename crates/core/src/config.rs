//! OpenTSDB's configuration format: `key = value` lines, `#` comments.
//!
//! Layering is the caller's: start from [`Config::default`], [`Config::merge_text`] a file,
//! then [`Config::set`] what command-line flags override.

use std::collections::BTreeMap;

use crate::{Error, Result};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    values: BTreeMap<String, String>,
}

impl Config {
    /// Parses the text of an `opentsdb.conf`.
    pub fn parse(text: &str) -> Result<Config> {
        let mut c = Config::default();
        c.merge_text(text)?;
        Ok(c)
    }

    /// Adds the keys of a config file's text, overriding earlier values.
    pub fn merge_text(&mut self, text: &str) -> Result<()> {
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            let Some((key, value)) = line.split_once('=').or_else(|| line.split_once(':')) else {
                return Err(Error::invalid(format!(
                    "invalid config line, expected key = value. line={}",
                    n + 1
                )));
            };
            self.set(key.trim(), value.trim());
        }
        Ok(())
    }

    pub fn set(&mut self, key: &str, value: &str) {
        self.values.insert(key.to_string(), value.to_string());
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    pub fn get_str<'a>(&'a self, key: &str, default: &'a str) -> &'a str {
        self.get(key).unwrap_or(default)
    }

    /// OpenTSDB's booleans: `true`, `1`, `yes` (any case) are true.
    pub fn get_bool(&self, key: &str, default: bool) -> bool {
        match self.get(key) {
            Some(v) => matches!(v.to_ascii_lowercase().as_str(), "true" | "1" | "yes"),
            None => default,
        }
    }

    pub fn get_int(&self, key: &str, default: i64) -> Result<i64> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| {
                Error::invalid(format!(
                    "config value is not an integer. key={key} value={v}"
                ))
            }),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_opentsdb_conf() {
        let c = Config::parse(
            "# comment\n tsd.network.port = 4242\ntsd.core.auto_create_metrics=true\n\n\
             tsd.storage.hbase.data_table = metrics_data \n",
        )
        .unwrap();
        assert_eq!(c.get_int("tsd.network.port", 0), Ok(4242));
        assert!(c.get_bool("tsd.core.auto_create_metrics", false));
        assert_eq!(
            c.get_str("tsd.storage.hbase.data_table", "tsdb"),
            "metrics_data"
        );
        assert_eq!(c.get_str("missing", "dflt"), "dflt");
        assert!(c.get_int("tsd.storage.hbase.data_table", 0).is_err());
        assert!(Config::parse("no separator").is_err());
    }
}
