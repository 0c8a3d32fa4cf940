//! The telnet `rollup` command (RFC 0008), as OpenTSDB 2.4.1's `RollupDataPointRpc`:
//!
//! ```text
//! rollup INTERVAL-AGG[:GROUPBY_AGG] METRIC TIMESTAMP VALUE TAG ...   (1h-sum, 1h-sum:sum)
//! rollup GROUPBY_AGG METRIC TIMESTAMP VALUE TAG ...                  (a pre-aggregate)
//! ```
//!
//! Silent on success; an error is answered with one `rollup: ...` line.

use hourglass_core::put::PutError;
use hourglass_core::rollup::parse_rollup_line;
use hourglass_engine::rollup::{RollupPoint, RollupRefusal};

use crate::State;

/// Runs one `rollup` line; `args` is what follows the command's space.
pub(super) fn run(state: &State, args: Option<&str>, out: &mut Vec<u8>) {
    if let Err(line) = write(state, args.unwrap_or_default()) {
        out.extend_from_slice(line.as_bytes());
    }
}

fn write(state: &State, args: &str) -> Result<(), String> {
    let mut tags = Vec::new();
    let (which, line) = parse_rollup_line(args, &mut tags).map_err(|e| match e {
        PutError::InvalidValue(m) => format!("rollup: invalid value: {m}\n"),
        PutError::IllegalArgument(m) => format!("rollup: illegal argument: {m}\n"),
    })?;
    let point = RollupPoint {
        metric: line.metric,
        timestamp: line.timestamp,
        value: line.value,
        tags: &tags[line.tags.clone()],
        interval: which.interval,
        aggregator: which.aggregator,
        group_by: which.group_by,
    };
    let outcome = state
        .tsdb
        .add_rollup_points(std::slice::from_ref(&point), false)
        .map_err(|e| {
            state.stats.count_error(&e);
            format!(
                "{}\n",
                crate::http::PointError::of_command("rollup", &e).telnet
            )
        })?;
    match outcome.errors.into_iter().next() {
        None => Ok(()),
        Some((_, RollupRefusal::NoSuchRollup(m))) => Err(format!("rollup: No such rollup: {m}\n")),
        Some((_, RollupRefusal::Error(e))) => {
            state.stats.count_error(&e);
            Err(format!(
                "{}\n",
                crate::http::PointError::of_command("rollup", &e).telnet
            ))
        }
    }
}
