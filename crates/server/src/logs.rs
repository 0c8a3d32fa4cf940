//! The last log lines of the process, for OpenTSDB's `/logs` page: the binary's log writer
//! hands each formatted line to [`record`] besides writing it out.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

/// Lines kept (OpenTSDB keeps the last 1024 log events).
const KEPT: usize = 1024;

static LINES: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());

/// Keeps the lines of `text` (a formatted log event or part of one), dropping the oldest
/// past the 1,024 kept.
pub fn record(text: &[u8]) {
    let text = strip_ansi(&String::from_utf8_lossy(text));
    let mut lines = LINES.lock().unwrap_or_else(PoisonError::into_inner);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if lines.len() == KEPT {
            lines.pop_front();
        }
        lines.push_back(line.to_string());
    }
}

/// `text` without terminal colour sequences (`ESC [ ... m`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// The kept lines, newest first.
pub fn recent() -> Vec<String> {
    let lines = LINES.lock().unwrap_or_else(PoisonError::into_inner);
    lines.iter().rev().cloned().collect()
}

/// An `io::Write` that keeps what is written as log lines (for a log writer to tee into).
#[derive(Debug, Default, Clone, Copy)]
pub struct RecentLogs;

impl std::io::Write for RecentLogs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        record(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_lines_first() {
        record(b"first line\nsecond line\n");
        record(b"third line\n");
        let lines = recent();
        let at = |l: &str| lines.iter().position(|x| x == l).unwrap_or(usize::MAX);
        assert!(at("third line") < at("second line") && at("second line") < at("first line"));
        for i in 0..KEPT + 10 {
            record(format!("filler {i}\n").as_bytes());
        }
        assert_eq!(recent().len(), KEPT);
        assert_eq!(recent()[0], format!("filler {}", KEPT + 9));
        record(b"\x1b[33m WARN\x1b[0m colours gone\n");
        assert_eq!(recent()[0], " WARN colours gone");
    }
}
