//! The telnet `histogram` command (RFC 0008, phase 3), as OpenTSDB 2.4.1's
//! `HistogramDataPointRpc.importDataPoint`:
//!
//! ```text
//! histogram METRIC TIMESTAMP ID BASE64 TAG ...        (a codec's bytes, base64)
//! histogram METRIC TIMESTAMP BUCKETS TAG ...          (u=0:o=1:0,1=42:1,5=24)
//! ```
//!
//! Silent on success. Errors are answered as 2.4.1 answers them: `histogram: illegal
//! argument: ...` and `histogram: invalid value: ...` for what is read before the point is
//! built, `histogram: HBase error: ...` for what fails after (2.4.1 reports every failure of
//! decoding and storing the point through its storage error path).

use std::sync::atomic::Ordering;

use hourglass_core::histogram::{SimpleHistogram, decode_base64_lenient, parse_telnet};
use hourglass_core::put::parse_tags;
use hourglass_engine::histogram::HistogramPoint;

use crate::State;

/// Runs one `histogram` line (`args`: what follows the command's space); the reply, if any.
pub(super) fn run(state: &State, args: Option<&str>) -> Option<String> {
    state.stats.points_received.fetch_add(1, Ordering::Relaxed);
    line(state, args.unwrap_or_default()).err()
}

fn illegal(m: impl std::fmt::Display) -> String {
    format!("histogram: illegal argument: {m}")
}

fn line(state: &State, args: &str) -> Result<(), String> {
    let Some(config) = state.tsdb.histograms() else {
        return Err(illegal(crate::http::put::HISTOGRAMS_OFF));
    };
    // Words after the command, split on single spaces (empty words kept), as 2.4.1 reads
    // them: `words[0]` there is the command.
    let words: Vec<&str> = if args.is_empty() {
        Vec::new()
    } else {
        args.split(' ').collect()
    };
    if words.len() < 4 {
        return Err(illegal(format!(
            "not enough arguments (need least 5, got {})",
            words.len()
        )));
    }
    let metric = words[0];
    if metric.is_empty() {
        return Err(illegal("empty metric name"));
    }
    let ts_text = words[1].replace('.', "");
    let timestamp = hourglass_core::value::parse_long(&ts_text)
        .map_err(|e| format!("histogram: invalid value: {e}"))?;
    if timestamp <= 0 {
        return Err(illegal(format!("invalid timestamp: {timestamp}")));
    }
    // An integer third word is a codec id (then the base64 value follows); else the word is
    // the simple histogram's buckets.
    let id: Option<i32> = words[2].parse().ok();
    let (value, tag_words) = match id {
        Some(_) => (words[3], &words[4..]),
        None => (words[2], &words[3..]),
    };
    let simple = match id {
        Some(_) => None,
        None => Some(config.simple().map_err(illegal)?),
    };
    if value.is_empty() {
        return Err(illegal("empty histogram value"));
    }
    let tag_text = tag_words.join(" ");
    let mut tags = Vec::new();
    parse_tags(&tag_text, &mut tags).map_err(illegal)?;
    let storage_error = |m: String| format!("histogram: HBase error: {m}");
    let encoded = match (id, simple) {
        (Some(id), _) => {
            let id = config
                .codec(i64::from(id))
                .map_err(|e| storage_error(e.to_string()))?;
            let h = SimpleHistogram::decode(&decode_base64_lenient(value), false)
                .map_err(|e| storage_error(e.to_string()))?;
            h.encode(Some(id))
        }
        (None, Some(id)) => parse_telnet(value)
            .map_err(|e| storage_error(e.to_string()))?
            .encode(Some(id)),
        (None, None) => return Err(illegal("no codec")),
    };
    let point = HistogramPoint {
        metric,
        timestamp,
        value: encoded,
        tags: &tags,
    };
    let outcome = state
        .tsdb
        .add_histogram_points(std::slice::from_ref(&point), false)
        .map_err(|e| {
            state.stats.count_error(&e);
            storage_error(e.to_string())
        })?;
    if let Some((_, e)) = outcome.errors.first() {
        state.stats.count_error(e);
        return Err(storage_error(e.to_string()));
    }
    Ok(())
}
