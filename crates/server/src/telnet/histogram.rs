//! The telnet `histogram` command (RFC 0008, phase 3), as OpenTSDB 2.4.1's
//! `HistogramDataPointRpc.importDataPoint`:
//!
//! ```text
//! histogram METRIC TIMESTAMP ID BASE64 TAG ...        (a codec's bytes, base64)
//! histogram METRIC TIMESTAMP BUCKETS TAG ...          (u=0:o=1:0,1=42:1,5=24)
//! ```
//!
//! Silent on success; consecutive `histogram` lines of one read are written as one batch.
//! Errors are answered as 2.4.1 answers them: `histogram: illegal
//! argument: ...` and `histogram: invalid value: ...` for what is read before the point is
//! built, `histogram: HBase error: ...` for what fails after (2.4.1 reports every failure of
//! decoding and storing the point through its storage error path).

use std::sync::atomic::Ordering;

use hourglass_core::histogram::{SimpleHistogram, decode_base64_lenient, parse_telnet};
use hourglass_core::put::parse_tags;
use hourglass_engine::histogram::HistogramPoint;

use crate::State;

/// How every failure on 2.4.1's storage error path begins; these replies are sent only with
/// `tsd.rpc.telnet.return_errors`.
const STORAGE_ERROR: &str = "histogram: HBase error: ";

/// A `histogram` line read: the point to store, or the line's reply.
struct Parsed {
    metric: String,
    timestamp: i64,
    value: Vec<u8>,
    tags: Vec<(String, String)>,
}

/// `histogram` lines waiting to be written, in line order (consecutive lines of one read
/// are written as one batch, as `put` and `rollup` lines are).
#[derive(Default)]
pub(super) struct HistogramBatch {
    lines: Vec<Result<Parsed, String>>,
}

impl HistogramBatch {
    /// Reads one line; `args` is what follows the command's space.
    pub(super) fn add(&mut self, state: &State, args: Option<&str>) {
        state.stats.points_received.fetch_add(1, Ordering::Relaxed);
        self.lines.push(line(state, args));
    }

    /// Writes the batch's points and answers its errors in line order. Inlined for its
    /// check: every `put` line submits the empty batch of the other kind.
    #[inline]
    pub(super) fn submit(&mut self, state: &State, out: &mut Vec<u8>) {
        if !self.lines.is_empty() {
            self.submit_lines(state, out);
        }
    }

    fn submit_lines(&mut self, state: &State, out: &mut Vec<u8>) {
        let storage_error = |e: &hourglass_engine::Error| {
            state.stats.count_error(e);
            format!("{STORAGE_ERROR}{e}")
        };
        let tags: Vec<Vec<(&str, &str)>> = self
            .lines
            .iter()
            .flatten()
            .map(|p| {
                p.tags
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect()
            })
            .collect();
        let mut origin = Vec::new();
        let mut points = Vec::new();
        for (i, p) in self.lines.iter().enumerate() {
            if let Ok(p) = p {
                points.push(HistogramPoint {
                    metric: &p.metric,
                    timestamp: p.timestamp,
                    value: p.value.clone(),
                    tags: &tags[points.len()],
                });
                origin.push(i);
            }
        }
        let mut replies: Vec<Option<String>> = self
            .lines
            .iter()
            .map(|l| l.as_ref().err().cloned())
            .collect();
        if !points.is_empty() {
            match state.tsdb.add_histogram_points(&points, false) {
                Ok(outcome) => {
                    for (idx, e) in outcome.errors {
                        replies[origin[idx]] = Some(storage_error(&e));
                    }
                }
                // The batch's write failed: none of its points is stored.
                Err(e) => {
                    for i in &origin {
                        replies[*i] = Some(storage_error(&e));
                    }
                }
            }
        }
        for reply in replies.into_iter().flatten() {
            if !state.settings.telnet_return_errors && reply.starts_with(STORAGE_ERROR) {
                continue;
            }
            out.extend_from_slice(reply.as_bytes());
            out.push(b'\n');
        }
        self.lines.clear();
    }
}

fn illegal(m: impl std::fmt::Display) -> String {
    format!("histogram: illegal argument: {m}")
}

/// One line read as 2.4.1 reads it, up to the encoded value: the point, or the reply.
fn line(state: &State, args: Option<&str>) -> Result<Parsed, String> {
    let Some(config) = state.tsdb.histograms() else {
        return Err(illegal(crate::http::put::HISTOGRAMS_OFF));
    };
    // Words after the command, split on single spaces (empty words kept), as 2.4.1 reads
    // them: `words[0]` there is the command. `None` is a bare `histogram`, no words; after
    // `histogram ` an empty `args` is one empty word.
    let words: Vec<&str> = args.map_or_else(Vec::new, |a| a.split(' ').collect());
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
    // An integer third word is a codec id (the base64 value follows); else the word is the
    // simple histogram's buckets, whose codec id is looked up first, as 2.4.1 does.
    let (value, tag_words, codec) = match words[2].parse::<i32>() {
        Ok(id) => (words[3], &words[4..], Err(id)),
        Err(_) => (words[2], &words[3..], Ok(config.simple().map_err(illegal)?)),
    };
    if value.is_empty() {
        return Err(illegal("empty histogram value"));
    }
    let tag_text = tag_words.join(" ");
    let mut tags = Vec::new();
    parse_tags(&tag_text, &mut tags).map_err(illegal)?;
    let storage_error = |m: String| format!("{STORAGE_ERROR}{m}");
    let encoded = match codec {
        // `Err`: the id the line gives, for bytes in base64.
        Err(id) => {
            let id = config
                .codec(i64::from(id))
                .map_err(|e| storage_error(e.to_string()))?;
            SimpleHistogram::decode(&decode_base64_lenient(value), false)
                .map_err(|e| storage_error(e.to_string()))?
                .encode(Some(id))
        }
        // `Ok`: the simple codec's id, for the bucket text.
        Ok(id) => parse_telnet(value)
            .map_err(|e| storage_error(e.to_string()))?
            .encode(Some(id)),
    };
    Ok(Parsed {
        metric: metric.to_string(),
        timestamp,
        value: encoded,
        tags: tags
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    })
}
