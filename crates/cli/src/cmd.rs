pub(crate) mod auth;
pub(crate) mod create_tables;
pub(crate) mod debug_ingest;
pub(crate) mod fsck;
pub(crate) mod import;
pub(crate) mod index;
pub(crate) mod migrate;
pub(crate) mod query;
pub(crate) mod scan;
pub(crate) mod search;
pub(crate) mod tsd;
pub(crate) mod uid;
pub(crate) mod uid_fsck;
pub(crate) mod version;

/// The `START [END]` words of OpenTSDB's command-line queries, in ms; returns the index of
/// the first word after them and the Gnuplot parameters (`+key=value`) that may follow them,
/// which only OpenTSDB's `query --graph` reads. END is taken only when more words follow and
/// it looks like a date (OpenTSDB's rule); otherwise the range ends now.
pub(crate) fn parse_range(words: &[String], now_ms: i64) -> anyhow::Result<(i64, i64, usize)> {
    if words.len() < 3 {
        anyhow::bail!("Not enough arguments.");
    }
    let start = hourglass_core::time::parse_time(&words[0], now_ms)?;
    let w = &words[1];
    let looks_like_end = !w.starts_with('+')
        && (w.contains([':', '/', '-']) || w.parse::<i64>().is_ok_and(|v| v > 0));
    let (end, mut i) = if words.len() > 3 && looks_like_end {
        (hourglass_core::time::parse_time(w, now_ms)?, 2)
    } else {
        (now_ms, 1)
    };
    while words.get(i).is_some_and(|w| w.starts_with('+')) {
        i += 1;
    }
    Ok((start, end, i))
}
