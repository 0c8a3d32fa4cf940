//! OpenTSDB's configuration files, read as Java reads a `.properties` file (OpenTSDB loads
//! `opentsdb.conf` with `java.util.Properties`): `key = value`, `key: value` or `key value`
//! lines, `#` and `!` comment lines, a trailing `\` continuing the line on the next one, and
//! Java's escapes (`\t`, `\n`, `\uXXXX`, `\=`, `\:`, `\ `...).
//!
//! Layering is the caller's: start from [`Config::default`], [`Config::merge_text`] a file,
//! then [`Config::set`] what command-line flags override. The keys Hourglass knows are
//! [`READ_KEYS`] and [`OPENTSDB_UNUSED_KEYS`].

use std::collections::BTreeMap;

use crate::{Error, Result};

/// Where OpenTSDB looks for its config file when none is given, in order; the first one that
/// can be read is loaded.
pub const SEARCH_PATHS: &[&str] = &[
    "./opentsdb.conf",
    "/etc/opentsdb.conf",
    "/etc/opentsdb/opentsdb.conf",
    "/opt/opentsdb/opentsdb.conf",
];

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

    /// Adds the keys of a config file's text, overriding earlier values (a key given twice
    /// keeps its last value, as in Java). A line holding only a key sets it to the empty
    /// value. Trailing whitespace of a value is dropped unless escaped (`\ `). The only error
    /// is a malformed `\uXXXX` escape, which Java refuses too.
    pub fn merge_text(&mut self, text: &str) -> Result<()> {
        for (line_no, line) in logical_lines(text) {
            let (key, value) = split_entry(&line).ok_or_else(|| {
                Error::invalid(format!(
                    "invalid config line, malformed \\uXXXX escape. line={line_no}"
                ))
            })?;
            self.values.insert(key, value);
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

    /// OpenTSDB's booleans: `true`, `1`, `yes` (any case, surrounding spaces ignored) are
    /// true; anything else is false.
    pub fn get_bool(&self, key: &str, default: bool) -> bool {
        match self.get(key) {
            Some(v) => is_true(v),
            None => default,
        }
    }

    /// An integer (surrounding spaces ignored, as OpenTSDB's `getInt`).
    pub fn get_int(&self, key: &str, default: i64) -> Result<i64> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.trim().parse().map_err(|_| {
                Error::invalid(format!(
                    "config value is not an integer. key={key} value={v}"
                ))
            }),
        }
    }

    /// `tsd.core.timezone`: the zone absolute dates without a zone of their own are read in
    /// (queries, `/q` and its axes, expressions, annotations, the tools), UTC when unset.
    /// OpenTSDB 2.4.1 makes it the JVM's default zone and refuses to start on a name Java
    /// does not know, in these words; names are case-sensitive (`utc` is refused).
    /// Calendar downsampling without a `timezone` stays UTC whatever it says, as there.
    pub fn timezone(&self) -> Result<crate::time::Tz> {
        match self.get("tsd.core.timezone") {
            None => Ok(crate::time::Tz::UTC),
            Some(name) => name
                .trim()
                .parse()
                .map_err(|_| Error::invalid(format!("Invalid timezone name: {}", name.trim()))),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The refusal of the first of [`UNAVAILABLE_SWITCHES`] this config turns on.
    pub fn unavailable_switch(&self) -> Option<String> {
        UNAVAILABLE_SWITCHES
            .iter()
            .find(|(key, _)| self.get_bool(key, false))
            .map(|(key, what)| {
                format!(
                    "{key} = {} asks for {what}, which this version of Hourglass does not provide: \
                     set it to false or remove it",
                    self.get(key).unwrap_or_default().trim()
                )
            })
    }

    /// The refusal of the first of [`REFUSED_VALUES`] this config sets away from what
    /// Hourglass does.
    pub fn refused_value(&self) -> Option<String> {
        REFUSED_VALUES.iter().find_map(|r| {
            let value = self.get(r.key)?;
            (!(r.accepts)(value)).then(|| {
                format!(
                    "{} = {} asks for {}, which this version of Hourglass does not provide: {}",
                    r.key,
                    value.trim(),
                    r.asks_for,
                    r.instead
                )
            })
        })
    }

    /// Why a TSD with this config must not start: [`Config::unavailable_switch`], else
    /// [`Config::refused_value`].
    pub fn refusal(&self) -> Option<String> {
        self.unavailable_switch().or_else(|| self.refused_value())
    }

    /// The keys set here that no part of Hourglass reads and that OpenTSDB 2.4 does not
    /// know either ([`is_known_key`]): most likely typos.
    pub fn unknown_keys(&self) -> impl Iterator<Item = &str> {
        self.values
            .keys()
            .map(String::as_str)
            .filter(|k| !is_known_key(k))
    }
}

/// Whitespace as Java's `Properties` sees it.
fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\u{c}')
}

/// Natural lines end at `\n`, `\r\n` or `\r`.
fn natural_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let t = rest?;
        match t.find(['\n', '\r']) {
            Some(i) => {
                let skip = if t[i..].starts_with("\r\n") { 2 } else { 1 };
                rest = Some(&t[i + skip..]);
                Some(&t[..i])
            }
            None => {
                rest = None;
                (!t.is_empty()).then_some(t)
            }
        }
    })
}

/// The logical lines of a properties text with their first line's number: blank and comment
/// lines skipped, leading whitespace dropped, and a line ending in an odd number of
/// backslashes joined with the next one (whose leading whitespace is dropped too). Escapes
/// are left for [`split_entry`].
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (n, raw) in natural_lines(text).enumerate() {
        let line = raw.trim_start_matches(is_space);
        let (start, mut acc) = match current.take() {
            Some(partial) => partial,
            None => {
                if line.is_empty() || line.starts_with(['#', '!']) {
                    continue;
                }
                (n + 1, String::new())
            }
        };
        let backslashes = line.len() - line.trim_end_matches('\\').len();
        if backslashes % 2 == 1 {
            acc.push_str(&line[..line.len() - 1]);
            current = Some((start, acc));
        } else {
            acc.push_str(line);
            out.push((start, acc));
        }
    }
    // A continuation on the last line: the line ends there.
    if let Some(partial) = current {
        out.push(partial);
    }
    out
}

/// Splits a logical line into its key and value and resolves their escapes. The key ends at
/// the first unescaped `=`, `:` or whitespace; whitespace around the separator is skipped,
/// and a whitespace separator may be followed by one `=` or `:`. `None`: a bad `\u` escape.
fn split_entry(line: &str) -> Option<(String, String)> {
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    let mut key_end = chars.len();
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            c if c == '=' || c == ':' || is_space(c) => {
                key_end = i;
                break;
            }
            _ => i += 1,
        }
    }
    let key_end = key_end.min(chars.len());
    let mut j = key_end;
    while j < chars.len() && is_space(chars[j]) {
        j += 1;
    }
    if j < chars.len() && (chars[j] == '=' || chars[j] == ':') {
        j += 1;
        while j < chars.len() && is_space(chars[j]) {
            j += 1;
        }
    }
    let key = unescape(&chars[..key_end])?;
    let mut value = unescape(&chars[j..])?;
    // Trailing whitespace written as is (not escaped) is dropped.
    while value
        .last()
        .is_some_and(|&(c, escaped)| !escaped && is_space(c))
    {
        value.pop();
    }
    Some((
        key.into_iter().map(|(c, _)| c).collect(),
        value.into_iter().map(|(c, _)| c).collect(),
    ))
}

/// Java's escapes: `\t`, `\n`, `\r`, `\f`, `\uXXXX`, and `\c` for any other `c`; each
/// character comes with whether it was escaped. A lone trailing backslash is dropped.
fn unescape(chars: &[char]) -> Option<Vec<(char, bool)>> {
    let mut out = Vec::with_capacity(chars.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '\\' {
            out.push((chars[i], false));
            i += 1;
            continue;
        }
        let Some(&c) = chars.get(i + 1) else { break };
        i += 2;
        let resolved = match c {
            't' => '\t',
            'n' => '\n',
            'r' => '\r',
            'f' => '\u{c}',
            'u' => {
                let hex: String = chars.get(i..i + 4)?.iter().collect();
                i += 4;
                let unit = u16::from_str_radix(&hex, 16).ok()?;
                // A surrogate pair is two escapes.
                if (0xD800..0xDC00).contains(&unit)
                    && chars.get(i) == Some(&'\\')
                    && chars.get(i + 1) == Some(&'u')
                {
                    let low: String = chars.get(i + 2..i + 6)?.iter().collect();
                    let low = u16::from_str_radix(&low, 16).ok()?;
                    i += 6;
                    char::decode_utf16([unit, low])
                        .next()?
                        .unwrap_or(char::REPLACEMENT_CHARACTER)
                } else {
                    char::from_u32(u32::from(unit)).unwrap_or(char::REPLACEMENT_CHARACTER)
                }
            }
            other => other,
        };
        out.push((resolved, true));
    }
    Some(out)
}

/// The keys some part of Hourglass reads. A key set in a config file that is neither here nor
/// in [`OPENTSDB_UNUSED_KEYS`] is read by nothing, and the TSD warns about it at start
/// ([`Config::unknown_keys`]).
pub const READ_KEYS: &[&str] = &[
    "google.bigtable.emulator.host",
    "google.bigtable.instance.id",
    "google.bigtable.project.id",
    "google.bigtable.timeout_ms",
    "tsd.core.authentication.allow_unauthenticated",
    "tsd.core.authentication.enable",
    "tsd.core.authentication.max_failures",
    "tsd.core.authentication.users",
    "tsd.core.auto_create_metrics",
    "tsd.core.auto_create_tagks",
    "tsd.core.auto_create_tagvs",
    "tsd.core.connections.limit",
    "tsd.core.enable_api",
    "tsd.core.enable_ui",
    "tsd.core.histograms.config",
    "tsd.core.meta.enable_realtime_ts",
    "tsd.core.meta.enable_realtime_uid",
    "tsd.core.meta.enable_tsuid_incrementing",
    "tsd.core.meta.enable_tsuid_tracking",
    "tsd.core.socket.timeout",
    "tsd.core.stats_with_port",
    "tsd.core.tag.allow_specialchars",
    "tsd.core.timezone",
    "tsd.core.tree.enable_processing",
    "tsd.core.uid.random_metrics",
    "tsd.gnuplot.options.allowlist",
    "tsd.http.query.allow_delete",
    "tsd.http.request.cors_domains",
    "tsd.http.request.cors_headers",
    "tsd.http.request.max_body",
    "tsd.http.staticroot",
    "tsd.index.enable",
    "tsd.index.max_series_per_metric",
    "tsd.index.stats.top",
    "tsd.mode",
    "tsd.network.backlog",
    "tsd.network.bind",
    "tsd.network.max_line_length",
    "tsd.network.port",
    "tsd.network.tls.cert",
    "tsd.network.tls.key",
    "tsd.network.tls.mode",
    "tsd.network.worker_threads",
    "tsd.no_diediedie",
    "tsd.query.cache.max_age",
    "tsd.query.cache.max_bytes",
    "tsd.query.filter.expansion_limit",
    "tsd.query.inline",
    "tsd.query.limits.bytes.allow_override",
    "tsd.query.limits.bytes.default",
    "tsd.query.limits.data_points.allow_override",
    "tsd.query.limits.data_points.default",
    "tsd.query.limits.memory_points",
    "tsd.query.limits.memory_points.total",
    "tsd.query.limits.overrides.config",
    "tsd.query.limits.overrides.interval",
    "tsd.query.limits.series.default",
    "tsd.query.skip_unresolved_tagvs",
    "tsd.query.timeout",
    "tsd.rollups.agg_tag_key",
    "tsd.rollups.block_derived",
    "tsd.rollups.compute",
    "tsd.rollups.compute.delay",
    "tsd.rollups.compute.interval_ms",
    "tsd.rollups.config",
    "tsd.rollups.enable",
    "tsd.rollups.raw_agg_tag_value",
    "tsd.rollups.split_query.enable",
    "tsd.rollups.tag_raw",
    "tsd.rpc.telnet.return_errors",
    "tsd.stats.canonical",
    "tsd.storage.backend",
    "tsd.storage.embedded.group_period",
    "tsd.storage.enable_appends",
    "tsd.storage.enable_compaction",
    "tsd.storage.fix_duplicates",
    "tsd.storage.flush_interval",
    "tsd.storage.hbase.data_table",
    "tsd.storage.hbase.index_table",
    "tsd.storage.hbase.meta_table",
    "tsd.storage.hbase.tree_table",
    "tsd.storage.hbase.uid_table",
    "tsd.storage.max_buffer_bytes",
    "tsd.storage.max_buffered_points",
    "tsd.storage.max_tags",
    "tsd.storage.retention",
    "tsd.storage.salt.buckets",
    "tsd.storage.salt.width",
    "tsd.storage.series_cache.idle_ms",
    "tsd.storage.uid.width.metric",
    "tsd.storage.uid.width.tagk",
    "tsd.storage.uid.width.tagv",
    "tsd.storage.wal.dir",
    "tsd.storage.wal.enable",
    "tsd.storage.wal.sync",
    "tsd.uid.lru.id.size",
    "tsd.uid.lru.name.size",
];

/// OpenTSDB 2.4's switches for what Hourglass does not provide yet (or OpenTSDB only through
/// a plugin). Turned on, they promise what the TSD cannot keep, so a TSD with one of them
/// on refuses to start ([`Config::unavailable_switch`]), as OpenTSDB refuses when the plugin
/// a switch names cannot be loaded.
pub const UNAVAILABLE_SWITCHES: &[(&str, &str)] = &[
    ("tsd.rtpublisher.enable", "a real-time publisher plugin"),
    ("tsd.search.enable", "a search plugin"),
    ("tsd.startup.enable", "a start-up plugin"),
    ("tsd.core.meta.cache.enable", "a meta cache plugin"),
    (
        "tsd.core.storage_exception_handler.enable",
        "a storage exception handler plugin",
    ),
    ("tsd.timeseriesfilter.enable", "a time series filter plugin"),
    ("tsd.uidfilter.enable", "a UID filter plugin"),
];

/// An OpenTSDB key whose value, away from its default, changes what clients see in a way
/// Hourglass does not provide.
#[derive(Debug, Clone, Copy)]
pub struct RefusedValue {
    pub key: &'static str,
    /// Whether a value set asks for what Hourglass does.
    pub accepts: fn(&str) -> bool,
    /// What any other value asks for.
    pub asks_for: &'static str,
    /// What to do instead.
    pub instead: &'static str,
}

/// OpenTSDB's boolean true (`getBoolean`): `true`, `1` or `yes`, any case.
fn is_true(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "true" | "1" | "yes"
    )
}

/// No value (OpenTSDB skips empty plugin lists).
fn is_blank(value: &str) -> bool {
    value.trim().is_empty()
}

/// OpenTSDB 2.4's keys that Hourglass reads only to refuse a TSD that sets them away from
/// what it does (as [`UNAVAILABLE_SWITCHES`]): each would change answers, accepted input or
/// limits. The other [`OPENTSDB_UNUSED_KEYS`] change nothing a client sees (the comments
/// there say why).
pub const REFUSED_VALUES: &[RefusedValue] = &[
    // `true`: cells carry the points' times, and compaction keeps the larger (or, with
    // `tsd.storage.use_max_value = false`, the smaller) of duplicate values. Hourglass keeps
    // the newest value written (README, "Differences").
    RefusedValue {
        key: "tsd.storage.use_otsdb_timestamp",
        accepts: |v| !is_true(v),
        asks_for: "duplicate points resolved by their values (the larger, or the smaller) \
                   rather than the newest written",
        instead: "set it to false or remove it",
    },
    // Java classes serving more telnet commands or HTTP endpoints.
    RefusedValue {
        key: "tsd.rpc.plugins",
        accepts: is_blank,
        asks_for: "telnet RPC plugins",
        instead: "remove it",
    },
    RefusedValue {
        key: "tsd.http.rpc.plugins",
        accepts: is_blank,
        asks_for: "HTTP RPC plugins",
        instead: "remove it",
    },
];

/// OpenTSDB 2.4's keys with no use here (HBase, ZooKeeper, Netty, plugins, logging...):
/// accepted without a warning. None of them, at any value, changes what a client sees (the
/// comments say why), except the [`UNAVAILABLE_SWITCHES`] and [`REFUSED_VALUES`] listed here
/// too, which refuse the start when set away from what Hourglass does. A key the code starts
/// reading moves to [`READ_KEYS`] (a test checks).
pub const OPENTSDB_UNUSED_KEYS: &[&str] = &[
    // Command-line tools' and plugins' settings (`ConfigArgP`, `CliOptions`, the plugin
    // directory); plugins themselves are refused by their switches.
    "tsd.addins.rpcs",
    "tsd.addins.rpcs.classpath",
    "tsd.core.config",
    "tsd.core.config.include",
    "tsd.core.flushinterval",
    "tsd.core.plugin_path",
    // Hourglass authenticates itself (`tsd.core.authentication.*`); the class is unused.
    "tsd.core.authentication.plugin",
    // `true` lets `tsdb import` store a series' points out of time order (OpenTSDB fails
    // the import on one by default). Hourglass's import always stores them, as `true` asks.
    "tsd.core.bulk.allow_out_of_order_timestamps",
    "tsd.core.meta.cache.enable",
    "tsd.core.meta.cache.plugin",
    // Caches and their warm-up: speed only.
    "tsd.core.preload_uid_cache",
    "tsd.core.preload_uid_cache.max_entries",
    "tsd.uid.lru.enable",
    "tsd.uid.use_mode",
    // Rewrites append columns when read: the answers are the same.
    "tsd.core.repair_appends",
    "tsd.storage.repair_appends",
    "tsd.core.storage_exception_handler.enable",
    "tsd.core.storage_exception_handler.plugin",
    // gnuplot's cache directory and OpenTSDB's static files: graphs are drawn in the TSD.
    "tsd.http.cachedir",
    "tsd.ui.noexport",
    // Has no effect in OpenTSDB 2.4 either.
    "tsd.http.header_tag",
    // `false` (OpenTSDB's default) refuses chunked bodies, and `max_chunk` caps them.
    // Hourglass accepts chunked bodies of any size up to `tsd.http.request.max_body`, as
    // `true` with a large `max_chunk` asks: collectors send chunked bodies, and refusing
    // them would lose their points (README, "Differences").
    "tsd.http.request.enable_chunked",
    "tsd.http.request.max_chunk",
    "tsd.http.rpc.plugins",
    // `true` (OpenTSDB's default) adds a Java stack trace to errors; there is none here,
    // as `false` asks (README, "Differences").
    "tsd.http.show_stack_trace",
    // Logging is configured with `RUST_LOG`.
    "tsd.logback.config",
    "tsd.logback.console",
    "tsd.logback.file",
    "tsd.logback.rollpattern",
    // Socket options and Netty's I/O mode: no effect on answers.
    "tsd.network.async_io",
    "tsd.network.keep_alive",
    "tsd.network.reuse_address",
    "tsd.network.tcp_no_delay",
    // OpenTSDB's launcher writes a PID file; service managers do that for the TSD.
    "tsd.process.pid.file",
    "tsd.process.pid.ignore.existing",
    // `false` refuses a query identical to one still running from the same endpoint:
    // OpenTSDB's `QueryStats` compares the remote address with its port, so only requests
    // of one connection. Hourglass answers a connection's requests one after another (HTTP/1
    // only), so no such pair can run at once: `false` refuses nothing, here as there.
    "tsd.query.allow_simultaneous_duplicates",
    // How HBase is scanned (fuzzy row filters, multi-gets): the answers are the same.
    "tsd.query.enable_fuzzy_filter",
    "tsd.query.multi_get.batch_size",
    "tsd.query.multi_get.concurrent",
    "tsd.query.multi_get.enable",
    "tsd.query.multi_get.get_all_salts",
    "tsd.query.multi_get.limit",
    // Only named in comments of OpenTSDB 2.4.1 (the key read is `tsd.rollups.agg_tag_key`).
    "tsd.rollups.agg_tag",
    "tsd.rpc.plugins",
    "tsd.rtpublisher.enable",
    "tsd.rtpublisher.plugin",
    "tsd.search.enable",
    "tsd.search.plugin",
    "tsd.startup.enable",
    "tsd.startup.plugin",
    // HBase compaction, tables and client: no effect on answers.
    "tsd.storage.compaction.flush_interval",
    "tsd.storage.compaction.flush_speed",
    "tsd.storage.compaction.max_concurrent_flushes",
    "tsd.storage.compaction.min_flush_threshold",
    "tsd.storage.get_date_tiered_compaction_start",
    "tsd.storage.hbase.prefetch_meta",
    "tsd.storage.hbase.scanner.maxNumRows",
    "tsd.storage.hbase.zk_basedir",
    "tsd.storage.hbase.zk_quorum",
    // Read by OpenTSDB only with `tsd.storage.use_otsdb_timestamp`, which is refused.
    "tsd.storage.use_max_value",
    "tsd.storage.use_otsdb_timestamp",
    "tsd.timeseriesfilter.enable",
    "tsd.timeseriesfilter.plugin",
    "tsd.uidfilter.enable",
    // The UID filter plugin's settings; the plugin is refused by its switch.
    "tsd.uidfilter.plugin",
    "tsd.uidfilter.whitelist.delimiter",
    "tsd.uidfilter.whitelist.metric_patterns",
    "tsd.uidfilter.whitelist.tagk_patterns",
    "tsd.uidfilter.whitelist.tagv_patterns",
];

/// Prefixes of keys OpenTSDB's config file also carries for its HBase client, which reads
/// the same file (`hbase.zookeeper.quorum`, `hbase.rpc.timeout`, `asynchbase.*`...): known,
/// unused here.
/// Every key with a default, and the default this server applies (OpenTSDB 2.4's where it
/// has one and Hourglass does the same; Hourglass's where it differs, e.g. a 60 s flush, no
/// `diediedie`, chunked bodies accepted). `/api/config` lists these with the values set over
/// them, as OpenTSDB's lists its defaults.
pub const DEFAULTS: &[(&str, &str)] = &[
    ("google.bigtable.timeout_ms", "30000"),
    ("tsd.core.authentication.allow_unauthenticated", ""),
    ("tsd.core.authentication.enable", "false"),
    ("tsd.core.authentication.max_failures", "10"),
    ("tsd.core.authentication.plugin", ""),
    ("tsd.core.authentication.users", ""),
    ("tsd.core.auto_create_metrics", "false"),
    ("tsd.core.auto_create_tagks", "true"),
    ("tsd.core.auto_create_tagvs", "true"),
    ("tsd.core.bulk.allow_out_of_order_timestamps", "true"),
    ("tsd.core.connections.limit", "0"),
    ("tsd.core.enable_api", "true"),
    ("tsd.core.enable_ui", "true"),
    ("tsd.core.meta.cache.enable", "false"),
    ("tsd.core.meta.enable_realtime_ts", "false"),
    ("tsd.core.meta.enable_realtime_uid", "false"),
    ("tsd.core.meta.enable_tsuid_incrementing", "false"),
    ("tsd.core.meta.enable_tsuid_tracking", "false"),
    ("tsd.core.plugin_path", ""),
    ("tsd.core.preload_uid_cache", "false"),
    ("tsd.core.preload_uid_cache.max_entries", "300000"),
    ("tsd.core.socket.timeout", "0"),
    ("tsd.core.stats_with_port", "false"),
    ("tsd.core.storage_exception_handler.enable", "false"),
    ("tsd.core.tag.allow_specialchars", ""),
    ("tsd.core.tree.enable_processing", "false"),
    ("tsd.core.uid.random_metrics", "false"),
    ("tsd.http.header_tag", ""),
    ("tsd.http.query.allow_delete", "false"),
    ("tsd.http.request.cors_domains", ""),
    (
        "tsd.http.request.cors_headers",
        "Authorization, Content-Type, Accept, Origin, User-Agent, DNT, Cache-Control, X-Mx-ReqToken, Keep-Alive, X-Requested-With, If-Modified-Since",
    ),
    ("tsd.http.request.enable_chunked", "true"),
    ("tsd.http.request.max_body", "268435456"),
    ("tsd.http.request.max_chunk", "4096"),
    ("tsd.http.show_stack_trace", "false"),
    ("tsd.index.enable", "false"),
    ("tsd.index.max_series_per_metric", "0"),
    ("tsd.index.stats.top", "20"),
    ("tsd.mode", "rw"),
    ("tsd.network.async_io", "true"),
    ("tsd.network.backlog", "1024"),
    ("tsd.network.bind", "0.0.0.0"),
    ("tsd.network.keep_alive", "true"),
    ("tsd.network.max_line_length", "1024"),
    ("tsd.network.port", "4242"),
    ("tsd.network.reuse_address", "true"),
    ("tsd.network.tcp_no_delay", "true"),
    ("tsd.network.worker_threads", ""),
    ("tsd.no_diediedie", "true"),
    ("tsd.query.allow_simultaneous_duplicates", "true"),
    ("tsd.query.enable_fuzzy_filter", "true"),
    ("tsd.query.filter.expansion_limit", "4096"),
    ("tsd.query.limits.bytes.allow_override", "false"),
    ("tsd.query.limits.bytes.default", "0"),
    ("tsd.query.limits.data_points.allow_override", "false"),
    ("tsd.query.limits.data_points.default", "0"),
    ("tsd.query.limits.memory_points", "50000000"),
    ("tsd.query.limits.memory_points.total", ""),
    ("tsd.query.limits.overrides.interval", "60000"),
    ("tsd.query.limits.series.default", "0"),
    ("tsd.query.multi_get.batch_size", "1024"),
    ("tsd.query.multi_get.concurrent", "20"),
    ("tsd.query.multi_get.enable", "false"),
    ("tsd.query.multi_get.get_all_salts", "false"),
    ("tsd.query.multi_get.limit", "131072"),
    ("tsd.query.skip_unresolved_tagvs", "false"),
    ("tsd.query.timeout", "0"),
    ("tsd.rollups.agg_tag_key", "_aggregate"),
    ("tsd.rollups.block_derived", "true"),
    ("tsd.rollups.enable", "false"),
    ("tsd.rollups.raw_agg_tag_value", "RAW"),
    ("tsd.rollups.split_query.enable", "false"),
    ("tsd.rollups.tag_raw", "false"),
    ("tsd.rpc.telnet.return_errors", "true"),
    ("tsd.rtpublisher.enable", "false"),
    ("tsd.rtpublisher.plugin", ""),
    ("tsd.search.enable", "false"),
    ("tsd.search.plugin", ""),
    ("tsd.startup.enable", "false"),
    ("tsd.startup.plugin", ""),
    ("tsd.stats.canonical", "false"),
    ("tsd.storage.backend", "embedded"),
    ("tsd.storage.compaction.flush_interval", "10"),
    ("tsd.storage.compaction.flush_speed", "2"),
    ("tsd.storage.compaction.max_concurrent_flushes", "10000"),
    ("tsd.storage.compaction.min_flush_threshold", "100"),
    ("tsd.storage.embedded.group_period", "86400"),
    ("tsd.storage.enable_appends", "false"),
    ("tsd.storage.enable_compaction", "true"),
    ("tsd.storage.fix_duplicates", "false"),
    ("tsd.storage.flush_interval", "60000"),
    ("tsd.storage.get_date_tiered_compaction_start", "0"),
    ("tsd.storage.hbase.data_table", "tsdb"),
    ("tsd.storage.hbase.index_table", "tsdb-index"),
    ("tsd.storage.hbase.meta_table", "tsdb-meta"),
    ("tsd.storage.hbase.prefetch_meta", "false"),
    ("tsd.storage.hbase.scanner.maxNumRows", "128"),
    ("tsd.storage.hbase.tree_table", "tsdb-tree"),
    ("tsd.storage.hbase.uid_table", "tsdb-uid"),
    ("tsd.storage.hbase.zk_basedir", "/hbase"),
    ("tsd.storage.hbase.zk_quorum", "localhost"),
    ("tsd.storage.max_buffer_bytes", "536870912"),
    ("tsd.storage.max_buffered_points", "4000000"),
    ("tsd.storage.max_tags", "8"),
    ("tsd.storage.repair_appends", "false"),
    ("tsd.storage.salt.buckets", "20"),
    ("tsd.storage.salt.width", "0"),
    ("tsd.storage.series_cache.idle_ms", "3600000"),
    ("tsd.storage.uid.width.metric", "3"),
    ("tsd.storage.uid.width.tagk", "3"),
    ("tsd.storage.uid.width.tagv", "3"),
    ("tsd.storage.use_max_value", "true"),
    ("tsd.storage.use_otsdb_timestamp", "false"),
    ("tsd.storage.wal.enable", "true"),
    ("tsd.storage.wal.sync", "false"),
    ("tsd.timeseriesfilter.enable", "false"),
    ("tsd.uid.lru.enable", "false"),
    ("tsd.uid.lru.id.size", "5000000"),
    ("tsd.uid.lru.name.size", "5000000"),
    ("tsd.uid.use_mode", "false"),
    ("tsd.uidfilter.enable", "false"),
];

pub const KNOWN_PREFIXES: &[&str] = &["hbase.", "asynchbase."];

/// Whether some part of Hourglass reads `key`, or OpenTSDB 2.4 has it and it means nothing
/// here ([`READ_KEYS`], [`OPENTSDB_UNUSED_KEYS`], [`KNOWN_PREFIXES`]).
pub fn is_known_key(key: &str) -> bool {
    READ_KEYS.contains(&key)
        || OPENTSDB_UNUSED_KEYS.contains(&key)
        || KNOWN_PREFIXES.iter().any(|p| key.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_is_of_a_known_key() {
        for (k, _) in DEFAULTS {
            assert!(is_known_key(k), "{k}");
        }
        let mut keys: Vec<&str> = DEFAULTS.iter().map(|(k, _)| *k).collect();
        keys.dedup();
        assert_eq!(keys.len(), DEFAULTS.len(), "each key once");
    }

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
    }

    #[test]
    fn separators_are_javas() {
        let c = Config::parse(
            "a = 1\nb: 2\nc 3\nd=4\ne:5\nf\t \t6\ng = = 7\nh : x=y:z\ni  =  \nj\nk\\=l\\:m\\ n = 8\n\
             o=p q  \n",
        )
        .unwrap();
        let get = |k: &str| c.get(k).map(str::to_string);
        assert_eq!(get("a").as_deref(), Some("1"));
        assert_eq!(get("b").as_deref(), Some("2"));
        assert_eq!(get("c").as_deref(), Some("3"), "whitespace separates");
        assert_eq!(get("d").as_deref(), Some("4"));
        assert_eq!(get("e").as_deref(), Some("5"));
        assert_eq!(get("f").as_deref(), Some("6"));
        assert_eq!(get("g").as_deref(), Some("= 7"), "one separator only");
        assert_eq!(get("h").as_deref(), Some("x=y:z"));
        assert_eq!(get("i").as_deref(), Some(""));
        assert_eq!(get("j").as_deref(), Some(""), "a lone key is set empty");
        assert_eq!(get("k=l:m n").as_deref(), Some("8"), "escaped separators");
        assert_eq!(get("o").as_deref(), Some("p q"), "inner spaces kept");
    }

    #[test]
    fn comments_and_blank_lines() {
        let c =
            Config::parse("# a = 1\n! b = 2\n   # c = 3\n\t! d\n\n   \nx = #y\nz = a!b\n").unwrap();
        assert_eq!(
            c.iter().collect::<Vec<_>>(),
            vec![("x", "#y"), ("z", "a!b")],
            "comment signs count only at a line's start"
        );
    }

    #[test]
    fn continuations() {
        let c = Config::parse(
            "tsd.http.request.cors_headers = Authorization, \\\n    Content-Type, \\\n\
             \tAccept\nnext = 1\nsplit\\\n  .key = v\nescaped = a\\\\\nlast = x\\",
        )
        .unwrap();
        assert_eq!(
            c.get("tsd.http.request.cors_headers"),
            Some("Authorization, Content-Type, Accept")
        );
        assert_eq!(c.get("next"), Some("1"));
        assert_eq!(c.get("split.key"), Some("v"), "a key may continue too");
        assert_eq!(
            c.get("escaped"),
            Some("a\\"),
            "an even count is no continuation"
        );
        assert_eq!(
            c.get("last"),
            Some("x"),
            "a continuation at the end ends the line"
        );
        // A comment line does not continue, and a continued line may hold a `#`.
        let c = Config::parse("# a \\\nb = 1\nc = x \\\n# y\n").unwrap();
        assert_eq!(c.get("b"), Some("1"));
        assert_eq!(c.get("c"), Some("x # y"));
        // A blank line after a continuation ends it.
        let c = Config::parse("a = 1 \\\n\nb = 2\r\nc = 3\rd = 4").unwrap();
        assert_eq!(
            c.iter().collect::<Vec<_>>(),
            vec![("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")]
        );
    }

    #[test]
    fn escapes() {
        let c = Config::parse(
            "a = x\\ty\nb = \\u00e9t\\u00E9\nc = \\q\nd = trailing\\ \ne = \\ud83d\\ude00\n",
        )
        .unwrap();
        assert_eq!(c.get("a"), Some("x\ty"));
        assert_eq!(c.get("b"), Some("été"));
        assert_eq!(c.get("c"), Some("q"));
        assert_eq!(c.get("d"), Some("trailing "), "an escaped space is kept");
        assert_eq!(c.get("e"), Some("😀"));
        let err = Config::parse("ok = 1\nbad = \\u12x4\n").unwrap_err();
        assert!(err.to_string().contains("line=2"), "{err}");
        assert!(Config::parse("bad = \\u12").is_err());
    }

    #[test]
    fn values_read_as_opentsdb_reads_them() {
        let mut c = Config::default();
        c.set("n", " 42 ");
        c.set("b", " YES ");
        c.set("f", "false");
        assert_eq!(c.get_int("n", 0), Ok(42));
        assert!(c.get_bool("b", false));
        assert!(!c.get_bool("f", true));
        assert!(!c.get_bool("n", true));
    }

    #[test]
    fn switches_for_what_is_not_provided_refuse_the_start() {
        let parse = |text: &str| Config::parse(text).unwrap();
        assert_eq!(
            parse("tsd.rollups.enable = false\n").unavailable_switch(),
            None
        );
        assert_eq!(
            parse("tsd.network.port = 4242\n").unavailable_switch(),
            None
        );
        // Authentication is provided, and rollup tables are stored (RFC 0008): their
        // switches no longer refuse the start.
        for provided in ["tsd.core.authentication.enable", "tsd.rollups.enable"] {
            assert_eq!(
                parse(&format!("{provided} = true\n")).unavailable_switch(),
                None,
                "{provided}"
            );
        }
        let refused = parse("tsd.rtpublisher.enable = TRUE\n")
            .unavailable_switch()
            .unwrap();
        assert!(
            refused.contains("tsd.rtpublisher.enable = TRUE"),
            "{refused}"
        );
        assert!(
            refused.contains("a real-time publisher plugin"),
            "{refused}"
        );
        // Trees are processed (RFC 0010): the switch no longer refuses the start.
        assert_eq!(
            parse("tsd.core.tree.enable_processing = true\n").unavailable_switch(),
            None
        );
        for (key, _) in UNAVAILABLE_SWITCHES {
            assert!(OPENTSDB_UNUSED_KEYS.contains(key), "{key}");
            let c = parse(&format!("{key} = true\n"));
            assert!(c.unavailable_switch().unwrap().starts_with(key), "{key}");
        }
    }

    #[test]
    fn values_asking_for_what_is_not_provided_refuse_the_start() {
        let parse = |text: &str| Config::parse(text).unwrap();
        // Unset, or set to what Hourglass does: accepted.
        for accepted in [
            "",
            "tsd.query.allow_simultaneous_duplicates = false\n",
            "tsd.storage.use_otsdb_timestamp = false\n",
            "tsd.rpc.plugins =\n",
            "tsd.http.rpc.plugins =  \n",
            "tsd.http.request.enable_chunked = false\n",
            "tsd.core.bulk.allow_out_of_order_timestamps = true\n",
        ] {
            assert_eq!(parse(accepted).refusal(), None, "{accepted:?}");
        }
        for (text, says) in [
            (
                "tsd.storage.use_otsdb_timestamp = true\n",
                "tsd.storage.use_otsdb_timestamp = true asks for duplicate points resolved",
            ),
            (
                "tsd.rpc.plugins = net.opentsdb.tsd.DummyRpc\n",
                "tsd.rpc.plugins = net.opentsdb.tsd.DummyRpc asks for telnet RPC plugins",
            ),
            (
                "tsd.http.rpc.plugins = x.Y\n",
                "tsd.http.rpc.plugins = x.Y asks for HTTP RPC plugins",
            ),
        ] {
            let refused = parse(text).refusal().unwrap_or_default();
            assert!(refused.starts_with(says), "{text:?}: {refused}");
            assert!(
                refused.contains("which this version of Hourglass does not provide: "),
                "{refused}"
            );
        }
        // A switch is named before a value.
        assert!(
            parse("tsd.storage.use_otsdb_timestamp = true\ntsd.search.enable = true\n")
                .refusal()
                .unwrap()
                .starts_with("tsd.search.enable")
        );
        for r in REFUSED_VALUES {
            assert!(OPENTSDB_UNUSED_KEYS.contains(&r.key), "{}", r.key);
            let default = DEFAULTS.iter().find(|(k, _)| *k == r.key);
            if let Some((_, v)) = default {
                assert!((r.accepts)(v), "{} accepts its default {v}", r.key);
            }
        }
    }

    #[test]
    fn the_default_zone_is_a_java_zone_id() {
        let zone = |text: &str| Config::parse(text).unwrap().timezone();
        assert_eq!(zone("").unwrap(), crate::time::Tz::UTC);
        assert_eq!(
            zone("tsd.core.timezone = America/New_York \n").unwrap(),
            crate::time::Tz::America__New_York
        );
        assert_eq!(
            zone("tsd.core.timezone = Etc/UTC\n").unwrap(),
            crate::time::Tz::Etc__UTC
        );
        // Case-sensitive, as Java's IDs; an empty name is not one.
        for bad in ["utc", "Europe/Pariss", ""] {
            let err = zone(&format!("tsd.core.timezone = {bad}\n")).unwrap_err();
            assert_eq!(err.to_string(), format!("Invalid timezone name: {bad}"));
        }
    }

    #[test]
    fn unknown_keys_are_the_ones_nothing_reads() {
        let c = Config::parse(
            "tsd.network.port = 1\ntsd.storage.hbase.zk_quorum = zk\nhbase.rpc.timeout = 5\n\
             tsd.network.prot = 2\ntsd.storage.flush_intervall = 3\n",
        )
        .unwrap();
        assert_eq!(
            c.unknown_keys().collect::<Vec<_>>(),
            vec!["tsd.network.prot", "tsd.storage.flush_intervall"]
        );
    }

    /// `tsd.a.{b,c}.d` → `tsd.a.b.d`, `tsd.a.c.d`.
    fn expand_braces(key: &str) -> Vec<String> {
        match (key.find('{'), key.find('}')) {
            (Some(open), Some(close)) if open < close => key[open + 1..close]
                .split(',')
                .flat_map(|alt| {
                    expand_braces(&format!("{}{alt}{}", &key[..open], &key[close + 1..]))
                })
                .collect(),
            _ => vec![key.to_string()],
        }
    }

    /// The keys a Markdown text names in back-ticks: `tsd.x.y` or `google.x.y` (a
    /// following `= value` dropped), braces expanded.
    fn keys_named_in(markdown: &str) -> Vec<String> {
        let text: String = markdown
            .lines()
            .filter(|l| !l.trim_start().starts_with("```"))
            .map(|l| format!("{l}\n"))
            .collect();
        text.split('`')
            .skip(1)
            .step_by(2)
            .filter_map(|token| token.trim().split([' ', '=']).next())
            .filter(|k| {
                (k.starts_with("tsd.") || k.starts_with("google."))
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "._{},".contains(c))
            })
            .flat_map(expand_braces)
            .collect()
    }

    /// The README's configuration section (keys, flags and their keys): every key it names
    /// is known.
    #[test]
    fn every_key_the_readme_names_is_known() {
        let readme = include_str!("../../../README.md");
        let (_, section) = readme.split_once("\n## Configuration\n").unwrap();
        let section = section.split("\n## ").next().unwrap();
        let keys = keys_named_in(section);
        assert!(keys.len() > 40, "{keys:?}");
        for expected in [
            "tsd.storage.hbase.uid_table",
            "tsd.storage.uid.width.tagv",
            "tsd.query.limits.data_points.allow_override",
            "tsd.core.meta.enable_realtime_uid",
        ] {
            assert!(keys.iter().any(|k| k == expected), "{expected} in {keys:?}");
        }
        let unknown: Vec<&String> = keys.iter().filter(|k| !is_known_key(k)).collect();
        assert!(unknown.is_empty(), "README keys not known: {unknown:?}");
    }

    /// Every `"tsd.…"` or `"google.…"` literal passed to a config getter in the crates'
    /// sources is in [`READ_KEYS`], and every key there is read somewhere.
    #[test]
    fn every_key_the_code_reads_is_known() {
        let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut files = Vec::new();
        let mut dirs: Vec<std::path::PathBuf> = std::fs::read_dir(&crates)
            .unwrap()
            .map(|e| e.unwrap().path().join("src"))
            .collect();
        while let Some(dir) = dirs.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries {
                let p = e.unwrap().path();
                if p.is_dir() {
                    dirs.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    files.push(p);
                }
            }
        }
        // Config's getters, and helpers taking a key (`positive(&config, "…")` reads it too).
        let getters = [
            "get", "get_str", "get_int", "get_bool", "count", "width", "positive",
        ];
        let mut read = Vec::new();
        for f in &files {
            let text = std::fs::read_to_string(f).unwrap();
            for prefix in ["\"tsd.", "\"google."] {
                for (at, _) in text.match_indices(prefix) {
                    let Some(len) = text[at + 1..].find('"') else {
                        continue;
                    };
                    let literal = &text[at + 1..at + 1 + len];
                    let mut before = text[..at].trim_end();
                    // A key as second argument after a plain one: `positive(&config, "…")`.
                    if let Some(first) = before.strip_suffix(',') {
                        before = first
                            .trim_end_matches(|c: char| {
                                c.is_ascii_alphanumeric() || "_&.".contains(c)
                            })
                            .trim_end();
                    }
                    let Some(call) = before.strip_suffix('(') else {
                        continue;
                    };
                    let name: String = call
                        .chars()
                        .rev()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect::<Vec<_>>()
                        .into_iter()
                        .rev()
                        .collect();
                    if getters.contains(&name.as_str()) {
                        read.push((f.display().to_string(), literal.to_string()));
                    }
                }
            }
        }
        assert!(read.len() > 40, "{read:?}");
        let unlisted: Vec<_> = read
            .iter()
            .filter(|(_, k)| !READ_KEYS.contains(&k.as_str()))
            .collect();
        assert!(
            unlisted.is_empty(),
            "keys read but missing from READ_KEYS: {unlisted:?}"
        );
        let unread: Vec<&&str> = READ_KEYS
            .iter()
            .filter(|k| !read.iter().any(|(_, r)| r == *k))
            .collect();
        assert!(
            unread.is_empty(),
            "READ_KEYS that nothing reads: {unread:?}"
        );
        let both: Vec<&&str> = READ_KEYS
            .iter()
            .filter(|k| OPENTSDB_UNUSED_KEYS.contains(k))
            .collect();
        assert!(both.is_empty(), "read yet listed as unused: {both:?}");
    }
}
