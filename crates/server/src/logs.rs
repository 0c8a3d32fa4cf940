//! The last log lines of the process, for OpenTSDB's `/logs` page: the binary hands each log
//! event to [`record_event`] (in OpenTSDB's form) besides writing it out; [`record`] keeps
//! already formatted text instead.

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

/// Keeps one log event, in OpenTSDB's form for `/logs`:
/// `<unix seconds>\t<LEVEL>\t<thread>\t<logger>\t<message>` (its `LogIterator`), a message of
/// several lines kept whole, dropping the oldest past the 1,024 kept.
pub fn record_event(secs: u64, level: &str, thread: &str, logger: &str, message: &str) {
    let line = format!("{secs}\t{level}\t{thread}\t{logger}\t{message}");
    let mut lines = LINES.lock().unwrap_or_else(PoisonError::into_inner);
    if lines.len() == KEPT {
        lines.pop_front();
    }
    lines.push_back(line);
}

/// The kept lines, newest first.
pub fn recent() -> Vec<String> {
    let lines = LINES.lock().unwrap_or_else(PoisonError::into_inner);
    lines.iter().rev().cloned().collect()
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

    #[test]
    fn events_are_kept_in_opentsdbs_form() {
        record_event(
            1_356_998_400,
            "INFO",
            "main",
            "hourglass_server",
            "Ready\nto serve",
        );
        assert_eq!(
            recent()[0],
            "1356998400\tINFO\tmain\thourglass_server\tReady\nto serve"
        );
    }
}
