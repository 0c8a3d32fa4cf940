//! Telnet authentication, in OpenTSDB 2.4's form: with `tsd.core.authentication.enable`, a
//! connection's first line is `auth basic USER PASSWORD` (or, Hourglass's addition,
//! `auth token TOKEN`), answered `AUTH_SUCCESS.` or `AUTH_FAIL.`. Until one succeeds, any
//! other line is refused and nothing runs; after [`MAX_FAILURES`] failed lines the
//! connection is closed. The password is what follows the user name (it may hold spaces).
//! Neither the line nor the reply ever names a secret.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{Next, reply};
use crate::State;
use crate::auth::{Access, AuthLine, parse_auth_line};

/// Failed `auth` lines a connection may send before it is closed (guessing passwords one
/// connection at a time costs a connection each few tries).
pub(super) const MAX_FAILURES: u32 = 3;

/// Who a connection is, or how often it failed to say so.
#[derive(Debug)]
pub(super) struct Login {
    /// `None` until an `auth` line succeeds (authentication on); [`Access::Open`] with it off.
    pub(super) access: Option<Access>,
    failures: u32,
    /// The client's address, for the per-address limit of failures.
    peer: Option<IpAddr>,
}

impl Login {
    pub(super) fn new(state: &State, peer: Option<IpAddr>) -> Login {
        Login {
            access: state.settings.auth.is_none().then_some(Access::Open),
            failures: 0,
            peer,
        }
    }

    /// A line of a connection not authenticated yet (runs argon2: on the blocking pool).
    pub(super) fn run(
        &mut self,
        state: &State,
        cmd: &str,
        args: Option<&str>,
        out: &mut Vec<u8>,
    ) -> Next {
        let Some(auth) = state.settings.auth.as_ref().map(|file| file.current()) else {
            self.access = Some(Access::Open);
            return Next::Continue;
        };
        if cmd != "auth" {
            reply(
                out,
                cmd,
                ": authentication required: send `auth basic USER PASSWORD` or `auth token TOKEN` first",
            );
            return Next::Continue;
        }
        if !state.auth_throttle.allows(self.peer, Instant::now()) {
            state.stats.auth_throttled.fetch_add(1, Ordering::Relaxed);
            out.extend_from_slice(b"AUTH_FAIL.\r\n");
            return Next::Close;
        }
        let principal = match args.and_then(parse_auth_line) {
            Some(AuthLine::Basic { user, password }) => auth.verify_password(user, password),
            Some(AuthLine::Token(token)) => auth.verify_token(token),
            None => None,
        };
        match principal {
            Some(principal) => {
                self.access = Some(Access::As(principal));
                out.extend_from_slice(b"AUTH_SUCCESS.\r\n");
                Next::Continue
            }
            None => {
                state.auth_throttle.failed(self.peer, Instant::now());
                state
                    .stats
                    .auth_failures_telnet
                    .fetch_add(1, Ordering::Relaxed);
                self.failures += 1;
                out.extend_from_slice(b"AUTH_FAIL.\r\n");
                if self.failures >= MAX_FAILURES {
                    tracing::info!(
                        failures = self.failures,
                        "telnet connection closed after failed auth lines"
                    );
                    Next::Close
                } else {
                    Next::Continue
                }
            }
        }
    }
}
