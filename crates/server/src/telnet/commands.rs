//! Telnet commands other than `put`.

use super::Next;
use crate::State;
use crate::stats::{collect, report_tags};

/// Runs `cmd` (its arguments, if any, are not read: none of these commands takes one).
pub(super) fn run(state: &State, cmd: &str, out: &mut Vec<u8>) -> Next {
    let writable = !state.settings.read_only;
    match cmd {
        "version" => out.extend_from_slice(state.settings.build.text().as_bytes()),
        "stats" => out.extend_from_slice(stats_text(state).as_bytes()),
        "help" => {
            let mut text = String::from("available commands: stats dropcaches version exit help ");
            if writable {
                text.push_str("put rollup histogram ");
            }
            if state.settings.diediedie {
                text.push_str("diediedie ");
            }
            text.push('\n');
            out.extend_from_slice(text.as_bytes());
        }
        "dropcaches" => {
            state.tsdb.uids().drop_caches();
            out.extend_from_slice(b"Caches dropped.\n");
        }
        "exit" => return Next::Close,
        "diediedie" if state.settings.diediedie => {
            tracing::warn!("shutdown requested over telnet");
            out.extend_from_slice(b"Cleaning up and exiting now.\n");
            state.begin_shutdown();
            return Next::Close;
        }
        other => {
            out.extend_from_slice(format!("unknown command: {other}.  Try `help'.\n").as_bytes())
        }
    }
    Next::Continue
}

/// `tsd.metric timestamp value [tag=value ...] host=NAME` lines.
pub(crate) fn stats_text(state: &State) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let report = report_tags(state);
    let mut text = String::new();
    for s in collect(state) {
        text.push_str(&format!("{} {now} {}", s.metric, s.value));
        for (k, v) in &s.tags {
            text.push_str(&format!(" {k}={v}"));
        }
        for (k, v) in &report {
            text.push_str(&format!(" {k}={v}"));
        }
        text.push('\n');
    }
    text
}
