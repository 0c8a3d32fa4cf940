//! Failed authentications limited per client address: past
//! `tsd.core.authentication.max_failures` failures from one address within a minute, its
//! attempts are refused without being checked until the minute is over (HTTP 429, telnet
//! `AUTH_FAIL.` and the connection closed). Guessing passwords then costs a minute per few
//! guesses, and argon2 does not run for a flood.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The window failures are counted in.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);

/// Addresses tracked at most; past it the expired ones are dropped, and if none is, all are
/// (an attacker with that many addresses is not slowed by a per-address limit anyway).
const MAX_ADDRESSES: usize = 65_536;

#[derive(Debug)]
pub(crate) struct Throttle {
    /// Failures allowed per address and window; 0: no limit.
    max_failures: u32,
    failures: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

impl Throttle {
    pub(crate) fn new(max_failures: u32) -> Throttle {
        Throttle {
            max_failures,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `addr` may try now.
    pub(crate) fn allows(&self, addr: Option<IpAddr>, now: Instant) -> bool {
        let (Some(addr), true) = (addr, self.max_failures > 0) else {
            return true;
        };
        match self.failures.lock().get(&addr) {
            Some((start, count)) => {
                now.duration_since(*start) >= WINDOW || *count < self.max_failures
            }
            None => true,
        }
    }

    /// Notes a failed attempt from `addr`.
    pub(crate) fn failed(&self, addr: Option<IpAddr>, now: Instant) {
        let (Some(addr), true) = (addr, self.max_failures > 0) else {
            return;
        };
        let mut failures = self.failures.lock();
        if failures.len() >= MAX_ADDRESSES && !failures.contains_key(&addr) {
            failures.retain(|_, (start, _)| now.duration_since(*start) < WINDOW);
            if failures.len() >= MAX_ADDRESSES {
                failures.clear();
            }
        }
        let entry = failures.entry(addr).or_insert((now, 0));
        if now.duration_since(entry.0) >= WINDOW {
            *entry = (now, 0);
        }
        entry.1 += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_refused_past_its_failures_until_the_window_ends() {
        let throttle = Throttle::new(3);
        let t0 = Instant::now();
        let a = Some(IpAddr::from([10, 0, 0, 1]));
        let b = Some(IpAddr::from([10, 0, 0, 2]));
        for _ in 0..3 {
            assert!(throttle.allows(a, t0));
            throttle.failed(a, t0);
        }
        assert!(!throttle.allows(a, t0));
        assert!(!throttle.allows(a, t0 + WINDOW - Duration::from_millis(1)));
        assert!(throttle.allows(b, t0), "another address is not affected");
        assert!(throttle.allows(a, t0 + WINDOW), "a new window");
        throttle.failed(a, t0 + WINDOW);
        assert!(throttle.allows(a, t0 + WINDOW), "counted from zero again");
    }

    #[test]
    fn zero_or_an_unknown_address_is_never_limited() {
        let throttle = Throttle::new(0);
        let a = Some(IpAddr::from([10, 0, 0, 1]));
        let now = Instant::now();
        for _ in 0..100 {
            throttle.failed(a, now);
        }
        assert!(throttle.allows(a, now));
        let throttle = Throttle::new(1);
        throttle.failed(None, now);
        assert!(throttle.allows(None, now));
    }
}
