//! Group commit (RFC 0001, decision 4): one sync runs at a time, outside the callers' locks,
//! and covers every write that returned before it started; callers whose write is covered
//! by a sync already done or running wait for it instead of syncing again.
//!
//! Writes are numbered in the order they returned (a sequence number, or a ticket); the
//! sync's leader says which number its sync covered (the last one taken before it started).

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex};

use crate::Result;

#[derive(Debug, Default)]
struct State {
    /// Every write numbered at or below this is synced.
    synced: u64,
    running: bool,
}

/// One sync at a time, shared by the callers waiting for it.
#[derive(Debug, Default)]
pub(crate) struct GroupCommit {
    state: Mutex<State>,
    done: Condvar,
    /// `state.synced`, readable without the lock: a caller already covered (every batch
    /// once its UIDs are synced) returns without taking it.
    synced: AtomicU64,
}

impl GroupCommit {
    /// Returns once every write numbered at or below `through` is synced: at once when a
    /// sync already covered it, after the running sync when that one covers it, else after
    /// a sync this caller runs (`sync` syncs and returns the last number it covered; one
    /// covering less than `through` is followed by another). A failed sync fails its
    /// leader; the callers waiting for it try again (a later sync covers them or fails
    /// them).
    pub(crate) fn sync_through(
        &self,
        through: u64,
        mut sync: impl FnMut() -> Result<u64>,
    ) -> Result<()> {
        if self.synced.load(Ordering::Acquire) >= through {
            return Ok(());
        }
        loop {
            let mut s = self.state.lock();
            loop {
                if s.synced >= through {
                    return Ok(());
                }
                if !s.running {
                    break;
                }
                self.done.wait(&mut s);
            }
            s.running = true;
            drop(s);
            let result = sync();
            let mut s = self.state.lock();
            s.running = false;
            if let Ok(covered) = result {
                s.synced = s.synced.max(covered);
                self.synced.store(s.synced, Ordering::Release);
            }
            self.done.notify_all();
            result?;
            // A sync may cover less than was asked (a write it started before was not
            // covered after all): the next one does.
        }
    }

    /// Notes that a sync run by someone else (outside [`GroupCommit::sync_through`])
    /// covered every write numbered at or below `covered`.
    pub(crate) fn covered(&self, covered: u64) {
        let mut s = self.state.lock();
        if covered > s.synced {
            s.synced = covered;
            self.synced.store(covered, Ordering::Release);
            self.done.notify_all();
        }
    }

    /// The last number a finished sync covered.
    pub(crate) fn synced(&self) -> u64 {
        self.synced.load(Ordering::Acquire)
    }
}
