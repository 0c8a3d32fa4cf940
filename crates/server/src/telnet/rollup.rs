//! The telnet `rollup` command (RFC 0008), as OpenTSDB 2.4.1's `RollupDataPointRpc`:
//!
//! ```text
//! rollup INTERVAL-AGG[:GROUPBY_AGG] METRIC TIMESTAMP VALUE TAG ...   (1h-sum, 1h-sum:sum)
//! rollup GROUPBY_AGG METRIC TIMESTAMP VALUE TAG ...                  (a pre-aggregate)
//! ```
//!
//! Silent on success; an error is answered with one `rollup: ...` line. Consecutive
//! `rollup` lines of one read are written together, as `put` lines are.

use std::sync::atomic::Ordering;

use hourglass_core::put::{PutError, PutLine};
use hourglass_core::rollup::{IntervalAgg, parse_rollup_line, rollup_not_enough_arguments};
use hourglass_engine::rollup::{RollupPoint, RollupRefusal};

use crate::State;

/// `rollup` lines waiting to be written, in line order.
#[derive(Debug, Default)]
pub(super) struct RollupBatch<'a> {
    lines: Vec<Result<(IntervalAgg<'a>, PutLine<'a>), PutError>>,
    tags: Vec<(&'a str, &'a str)>,
}

impl<'a> RollupBatch<'a> {
    /// Parses one line; `args` is what follows the command's space.
    pub(super) fn add(&mut self, args: Option<&'a str>) {
        let parsed = match args {
            Some(args) => parse_rollup_line(args, &mut self.tags),
            // A bare `rollup`: no words at all.
            None => Err(rollup_not_enough_arguments(0)),
        };
        self.lines.push(parsed);
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
        state
            .stats
            .points_received
            .fetch_add(self.lines.len() as u64, Ordering::Relaxed);
        let mut points = Vec::with_capacity(self.lines.len());
        let mut origin = Vec::with_capacity(self.lines.len());
        for (i, line) in self.lines.iter().enumerate() {
            if let Ok((which, p)) = line {
                points.push(RollupPoint {
                    metric: p.metric,
                    timestamp: p.timestamp,
                    value: p.value,
                    tags: &self.tags[p.tags.clone()],
                    interval: which.interval,
                    aggregator: which.aggregator,
                    group_by: which.group_by,
                });
                origin.push(i);
            }
        }
        let mut replies: Vec<Option<String>> = vec![None; self.lines.len()];
        for (i, line) in self.lines.iter().enumerate() {
            replies[i] = match line {
                Err(PutError::InvalidValue(m)) => Some(format!("rollup: invalid value: {m}")),
                Err(PutError::IllegalArgument(m)) => Some(format!("rollup: illegal argument: {m}")),
                Ok(_) => None,
            };
        }
        // `None` for a storage failure while `tsd.rpc.telnet.return_errors` is off.
        let refusal_text = |e: &hourglass_engine::Error| {
            state.stats.count_error(e);
            let refused = crate::http::PointError::of_command("rollup", e);
            (!refused.storage || state.settings.telnet_return_errors).then_some(refused.telnet)
        };
        if !points.is_empty() {
            match state.tsdb.add_rollup_points(&points, false) {
                Ok(outcome) => {
                    for (idx, refusal) in outcome.errors {
                        replies[origin[idx]] = match refusal {
                            RollupRefusal::NoSuchRollup(m) => {
                                Some(format!("rollup: No such rollup: {m}"))
                            }
                            RollupRefusal::Error(e) => refusal_text(&e),
                        };
                    }
                }
                // The batch's write failed: none of its points is stored.
                Err(e) => {
                    for i in &origin {
                        replies[*i] = refusal_text(&e);
                    }
                }
            }
        }
        for reply in replies.into_iter().flatten() {
            out.extend_from_slice(reply.as_bytes());
            out.push(b'\n');
        }
        self.lines.clear();
        self.tags.clear();
    }
}
