//! A connection's first bytes: the protocol sniff (TLS, HTTP or telnet) and the telnet
//! `auth` line: any bytes give a protocol and an auth request or none, never a panic.
#![no_main]

use hourglass_server::auth::{AuthLine, parse_auth_line};
use hourglass_server::{FirstByte, sniff};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let kind = sniff(first);
    assert_eq!(kind == FirstByte::Tls, first == 0x16);
    assert_eq!(kind == FirstByte::Http, first.is_ascii_uppercase());
    let line = String::from_utf8_lossy(rest);
    match parse_auth_line(&line) {
        Some(AuthLine::Basic { user, password }) => {
            assert!(!user.is_empty() && !user.contains(' '));
            assert_eq!(line, format!("basic {user} {password}"));
        }
        Some(AuthLine::Token(token)) => {
            assert!(!token.is_empty());
            assert_eq!(line, format!("token {token}"));
        }
        None => {}
    }
});
