//! Points held in memory by every running sub-query together
//! (`tsd.query.limits.memory_points.total`).
//!
//! Each sub-query is bounded on its own (`tsd.query.limits.memory_points`), but nothing
//! bounded how many ran at once: sixteen queries each holding 10M raw points for their
//! aggregation took 5.7 GB. Every sub-query now takes a [`Reservation`] against the TSD's
//! one [`QueryMemory`]; as its count of held points grows (the same count its own limit
//! checks), the reservation grows with it. A growth that would take the held points past
//! the budget waits until others give theirs back, except for the oldest running
//! sub-query, which always goes on (so waiting sub-queries never wait on each other for
//! ever): the points held stay under the budget plus what the oldest holds past it, at most
//! its own limit. A sub-query that waits past its deadline (`tsd.query.timeout`, else
//! [`LONGEST_WAIT`]) fails with [`Error::Busy`] (HTTP 503: the client may try again). A
//! reservation is given back whole when the sub-query's answer is dropped, after it was
//! written out. An answer's text, built while its sub-queries run and sent after, is
//! counted too, as its bytes' worth of points ([`Hold`]): it never waits (its points waited
//! already), but others wait for it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};

/// The most a reservation takes ahead of the points counted: a 1,024th of the budget, at
/// most this.
const MAX_STEP: u64 = 65_536;

/// How long a sub-query waits for room when the query has no timeout of its own.
pub const LONGEST_WAIT: Duration = Duration::from_secs(30);

/// The TSD's budget of points held by running sub-queries; a limit of 0 is none.
#[derive(Debug, Default)]
pub struct QueryMemory {
    limit: AtomicU64,
    state: Mutex<Held>,
    room: Condvar,
    waited: AtomicU64,
    refused: AtomicU64,
}

#[derive(Debug, Default)]
struct Held {
    points: u64,
    /// Running sub-queries by age (the order they were started in).
    running: BTreeSet<u64>,
    next: u64,
}

impl QueryMemory {
    /// Sets the budget (0: none). Reservations already taken keep what they hold.
    pub fn set_limit(&self, points: u64) {
        self.limit.store(points, Ordering::Relaxed);
        self.room.notify_all();
    }

    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Points the running sub-queries hold now.
    pub fn held(&self) -> u64 {
        self.state.lock().points
    }

    /// Times a sub-query waited for room, since start.
    pub fn waited(&self) -> u64 {
        self.waited.load(Ordering::Relaxed)
    }

    /// Sub-queries refused because no room came before their deadline, since start.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

/// One sub-query's share of a [`QueryMemory`], given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    memory: Arc<QueryMemory>,
    /// The sub-query's age among the running ones.
    age: u64,
    reserved: AtomicU64,
    deadline: Instant,
    refused: AtomicBool,
}

impl Reservation {
    /// A running sub-query's reservation, empty; it waits for room until `deadline` at
    /// the latest (`None`: [`LONGEST_WAIT`] from now).
    pub fn new(memory: Arc<QueryMemory>, deadline: Option<Instant>) -> Reservation {
        let age = {
            let mut held = memory.state.lock();
            held.next += 1;
            let age = held.next;
            held.running.insert(age);
            age
        };
        Reservation {
            memory,
            age,
            reserved: AtomicU64::new(0),
            deadline: deadline.unwrap_or_else(|| Instant::now() + LONGEST_WAIT),
            refused: AtomicBool::new(false),
        }
    }

    /// Grows the reservation to `held`, the sub-query's whole count of points held so far
    /// (counts from its threads may arrive out of order: a smaller one changes nothing),
    /// waiting for room when there is none (see the module's notes).
    pub fn track(&self, held: u64) -> Result<()> {
        if held <= self.reserved.load(Ordering::Acquire) {
            return Ok(());
        }
        let memory = &*self.memory;
        let mut state = memory.state.lock();
        let mut waited = false;
        loop {
            let reserved = self.reserved.load(Ordering::Acquire);
            if held <= reserved {
                return Ok(());
            }
            let limit = memory.limit();
            // Reserved a step ahead, so a sub-query counting its points row by row takes
            // the lock once a step, not once a row (rows are the scan's hot path).
            let step = if limit == 0 {
                MAX_STEP
            } else {
                (limit / 1024).clamp(1, MAX_STEP)
            };
            let oldest = state.running.first() == Some(&self.age);
            for want in [held.max(reserved.saturating_add(step)), held] {
                let grown = want - reserved;
                if limit == 0 || state.points.saturating_add(grown) <= limit || oldest {
                    state.points += grown;
                    self.reserved.store(want, Ordering::Release);
                    return Ok(());
                }
            }
            let grown = held - reserved;
            if !waited {
                waited = true;
                memory.waited.fetch_add(1, Ordering::Relaxed);
            }
            if memory
                .room
                .wait_until(&mut state, self.deadline)
                .timed_out()
                && state.points.saturating_add(grown) > memory.limit()
                && state.running.first() != Some(&self.age)
            {
                if !self.refused.swap(true, Ordering::Relaxed) {
                    memory.refused.fetch_add(1, Ordering::Relaxed);
                }
                return Err(Error::Busy(format!(
                    "Sorry, the queries running now hold more than {limit} data points in \
                     memory together (tsd.query.limits.memory_points.total) and none were \
                     given back in time. Please try again later, or downsample, filter \
                     using more tags or decrease your time range."
                )));
            }
        }
    }

    /// Points this reservation holds.
    pub fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Relaxed)
    }
}

/// Memory a request holds outside its sub-queries' counts (an answer's text being built,
/// then sent), counted against the same budget as points: others wait for it to be given
/// back, but growing it never waits (what it is built from was counted, and waited for,
/// already), so a request never waits on itself. Given back when dropped.
#[derive(Debug)]
pub struct Hold {
    memory: Arc<QueryMemory>,
    points: u64,
}

impl Hold {
    pub fn new(memory: Arc<QueryMemory>) -> Hold {
        Hold { memory, points: 0 }
    }

    /// Holds `points` now (more or less than before).
    pub fn set(&mut self, points: u64) {
        if points == self.points {
            return;
        }
        let mut state = self.memory.state.lock();
        state.points = state.points - self.points + points;
        drop(state);
        if points < self.points {
            self.memory.room.notify_all();
        }
        self.points = points;
    }

    /// Points held.
    pub fn points(&self) -> u64 {
        self.points
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.set(0);
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let reserved = *self.reserved.get_mut();
        let mut state = self.memory.state.lock();
        state.points -= reserved;
        state.running.remove(&self.age);
        drop(state);
        self.memory.room.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn soon(ms: u64) -> Option<Instant> {
        Some(Instant::now() + Duration::from_millis(ms))
    }

    #[test]
    fn memory_held_outside_sub_queries_counts_without_waiting() {
        let memory = Arc::new(QueryMemory::default());
        memory.set_limit(100);
        let older = Reservation::new(memory.clone(), None);
        older.track(60).unwrap();
        // Past the budget at once: held, not waited for.
        let mut text = Hold::new(memory.clone());
        text.set(70);
        assert_eq!((memory.held(), text.points()), (130, 70));
        assert_eq!(memory.waited(), 0);
        // A younger sub-query waits for it, and goes on once it shrinks.
        let younger = Reservation::new(memory.clone(), soon(5_000));
        let waiter = std::thread::spawn(move || younger.track(30).map(|()| younger));
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(memory.held(), 130, "still waiting");
        text.set(10);
        let younger = waiter.join().unwrap().unwrap();
        assert_eq!(memory.held(), 100);
        drop(text);
        assert_eq!(memory.held(), 90);
        drop((older, younger));
        assert_eq!(memory.held(), 0);
    }

    #[test]
    fn a_growth_past_the_budget_waits_for_room_then_goes_on() {
        let memory = Arc::new(QueryMemory::default());
        memory.set_limit(100);
        let older = Reservation::new(memory.clone(), None);
        let younger = Reservation::new(memory.clone(), None);
        older.track(40).unwrap();
        older.track(80).unwrap();
        // A smaller count from another thread of the same sub-query changes nothing.
        older.track(50).unwrap();
        assert_eq!((older.reserved(), memory.held()), (80, 80));
        std::thread::scope(|s| {
            let waiting = s.spawn(|| {
                younger.track(50).unwrap();
            });
            std::thread::sleep(Duration::from_millis(50));
            assert!(!waiting.is_finished(), "no room yet");
            assert_eq!(memory.held(), 80);
            drop(older);
            waiting.join().unwrap();
        });
        assert_eq!(
            (memory.held(), memory.waited(), memory.refused()),
            (50, 1, 0)
        );
        drop(younger);
        assert_eq!(memory.held(), 0);
    }

    #[test]
    fn the_oldest_goes_on_so_waiting_sub_queries_never_block_each_other() {
        let memory = Arc::new(QueryMemory::default());
        memory.set_limit(100);
        let older = Reservation::new(memory.clone(), None);
        let younger = Reservation::new(memory.clone(), soon(50));
        older.track(60).unwrap();
        younger.track(40).unwrap();
        // Full: the oldest passes the budget rather than wait on the younger.
        older.track(90).unwrap();
        assert_eq!(memory.held(), 130);
        // The younger waits, and with no room before its deadline, fails.
        let e = younger.track(41).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Busy);
        assert!(e.to_string().contains("more than 100 data points"), "{e}");
        assert_eq!(
            (younger.reserved(), memory.held(), memory.refused()),
            (40, 130, 1)
        );
        drop(older);
        // Now the oldest itself.
        younger.track(200).unwrap();
        assert_eq!(memory.held(), 200);
        drop(younger);
        assert_eq!(memory.held(), 0);
    }

    #[test]
    fn reservations_step_ahead_of_their_counts_within_the_budget() {
        let memory = Arc::new(QueryMemory::default());
        // A step of 100 points.
        memory.set_limit(102_400);
        let older = Reservation::new(memory.clone(), None);
        let younger = Reservation::new(memory.clone(), soon(0));
        older.track(1).unwrap();
        older.track(100).unwrap();
        assert_eq!((older.reserved(), memory.held()), (100, 100));
        older.track(101).unwrap();
        assert_eq!((older.reserved(), memory.held()), (200, 200));
        younger.track(102_150).unwrap();
        assert_eq!(memory.held(), 102_350);
        // A step would pass the budget; the count itself fits.
        younger.track(102_180).unwrap();
        assert_eq!((younger.reserved(), memory.held()), (102_180, 102_380));
        assert_eq!(younger.track(102_201).unwrap_err().kind(), ErrorKind::Busy);
        drop((older, younger));
        assert_eq!(memory.held(), 0);
    }

    #[test]
    fn no_limit_counts_without_waiting() {
        let memory = Arc::new(QueryMemory::default());
        let older = Reservation::new(memory.clone(), None);
        let younger = Reservation::new(memory.clone(), soon(0));
        older.track(1 << 62).unwrap();
        younger.track(1 << 62).unwrap();
        assert_eq!((memory.held(), memory.waited()), (1 << 63, 0));
        drop((older, younger));
        assert_eq!(memory.held(), 0);
    }
}
