//! Points held in memory by every running sub-query together
//! (`tsd.query.limits.memory_points.total`).
//!
//! Each sub-query is bounded on its own (`tsd.query.limits.memory_points`), but nothing
//! bounded how many ran at once: sixteen queries each holding 10M raw points for their
//! aggregation took 5.7 GB. Every sub-query now takes a [`Reservation`] against the TSD's
//! one [`QueryMemory`]; as its count of held points grows (the same count its own limit
//! checks), the reservation grows by the difference, and a growth past the total fails
//! that sub-query with [`Error::Busy`] (HTTP 503: the client may try again). A reservation
//! is given back whole when the sub-query's answer is dropped, after it was written out.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// The TSD's budget of points held by running sub-queries; a limit of 0 is none.
#[derive(Debug, Default)]
pub struct QueryMemory {
    limit: AtomicU64,
    held: AtomicU64,
    refused: AtomicU64,
}

impl QueryMemory {
    /// Sets the budget (0: none). Reservations already taken keep what they hold.
    pub fn set_limit(&self, points: u64) {
        self.limit.store(points, Ordering::Relaxed);
    }

    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Points the running sub-queries hold now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Sub-queries refused because the budget was spent, since start.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

/// One sub-query's share of a [`QueryMemory`], given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    memory: Arc<QueryMemory>,
    reserved: AtomicU64,
}

impl Reservation {
    pub fn new(memory: Arc<QueryMemory>) -> Reservation {
        Reservation {
            memory,
            reserved: AtomicU64::new(0),
        }
    }

    /// Grows the reservation to `held`, the sub-query's whole count of points held so far
    /// (counts from its threads may arrive out of order: a smaller one changes nothing).
    /// Past the budget the growth is given back and the sub-query fails.
    pub fn track(&self, held: u64) -> Result<()> {
        let before = self.reserved.fetch_max(held, Ordering::AcqRel);
        if held <= before {
            return Ok(());
        }
        let grown = held - before;
        let now = self.memory.held.fetch_add(grown, Ordering::AcqRel) + grown;
        let limit = self.memory.limit();
        if limit == 0 || now <= limit {
            return Ok(());
        }
        // Give the growth back (this sub-query fails; what it held before stays reserved
        // until it is dropped, a moment later).
        self.memory.held.fetch_sub(grown, Ordering::AcqRel);
        self.reserved.fetch_sub(grown, Ordering::AcqRel);
        self.memory.refused.fetch_add(1, Ordering::Relaxed);
        Err(Error::Busy(format!(
            "Sorry, the queries running now would hold more than {limit} data points in \
             memory together (tsd.query.limits.memory_points.total). Please try again \
             later, or downsample, filter using more tags or decrease your time range."
        )))
    }

    /// Points this reservation holds.
    pub fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Relaxed)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let reserved = *self.reserved.get_mut();
        self.memory.held.fetch_sub(reserved, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn reservations_share_the_budget_and_give_it_back_when_dropped() {
        let memory = Arc::new(QueryMemory::default());
        memory.set_limit(100);
        let a = Reservation::new(memory.clone());
        let b = Reservation::new(memory.clone());
        a.track(40).unwrap();
        a.track(60).unwrap();
        // A smaller count from another thread of the same sub-query changes nothing.
        a.track(50).unwrap();
        assert_eq!((a.reserved(), memory.held()), (60, 60));
        let e = b.track(50).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Busy);
        assert!(e.to_string().contains("more than 100 data points"), "{e}");
        assert_eq!((b.reserved(), memory.held(), memory.refused()), (0, 60, 1));
        b.track(40).unwrap();
        assert_eq!(memory.held(), 100);
        drop(a);
        assert_eq!(memory.held(), 40);
        b.track(90).unwrap();
        drop(b);
        assert_eq!(memory.held(), 0);
    }

    #[test]
    fn no_limit_counts_without_refusing() {
        let memory = Arc::new(QueryMemory::default());
        let a = Reservation::new(memory.clone());
        a.track(u64::MAX / 2).unwrap();
        assert_eq!(memory.held(), u64::MAX / 2);
        drop(a);
        assert_eq!(memory.held(), 0);
    }
}
