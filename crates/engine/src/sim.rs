//! Deterministic fault injection for testing the write path, as FoundationDB's simulator and
//! TigerBeetle's VOPR do: the engine runs unchanged over a simulated log file system
//! ([`SimFiles`]) and a store wrapper ([`FaultStore`]) that fail, tear or lose operations
//! chosen by a seeded random stream ([`Faults`]). The same seed makes the same faults at the
//! same operations, so a failing seed replays exactly.
//!
//! Both simulate the two ways a TSD dies: a process crash (what reached the OS survives) and
//! a power loss (only what was synced survives).

mod files;
mod store;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

pub use files::SimFiles;
pub use store::{FaultStore, Hook, Lossy, Op};

/// A small, stable pseudo-random generator (SplitMix64): the sequence for a seed never
/// changes between versions, so recorded seeds stay meaningful.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True with probability `per_mille` / 1000.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

/// The fault plan shared by the simulated file system and store: a seeded stream deciding,
/// operation by operation, whether it fails.
#[derive(Debug)]
pub struct Faults {
    rng: Mutex<Rng>,
    /// Chance per operation (per mille) that it fails while faults are on.
    rate: AtomicU64,
    /// Every log write fails (a full disk) while set.
    disk_full: AtomicBool,
    /// Every store operation fails (storage unreachable) while set.
    store_down: AtomicBool,
    injected: AtomicU64,
}

impl Faults {
    pub fn new(seed: u64, rate_per_mille: u64) -> Faults {
        Faults {
            rng: Mutex::new(Rng::new(seed)),
            rate: AtomicU64::new(rate_per_mille),
            disk_full: AtomicBool::new(false),
            store_down: AtomicBool::new(false),
            injected: AtomicU64::new(0),
        }
    }

    /// Sets the chance (per mille) that an operation fails; 0 turns random faults off.
    pub fn set_rate(&self, per_mille: u64) {
        self.rate.store(per_mille, Ordering::Relaxed);
    }

    pub fn set_disk_full(&self, full: bool) {
        self.disk_full.store(full, Ordering::Relaxed);
    }

    pub fn set_store_down(&self, down: bool) {
        self.store_down.store(down, Ordering::Relaxed);
    }

    /// Faults injected so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    /// Whether this operation fails (counted when it does).
    fn fail(&self) -> bool {
        let rate = self.rate.load(Ordering::Relaxed);
        let fail = rate > 0 && self.rng.lock().chance(rate);
        if fail {
            self.injected.fetch_add(1, Ordering::Relaxed);
        }
        fail
    }

    /// A number in `0..n` from the plan's stream.
    fn below(&self, n: u64) -> u64 {
        self.rng.lock().below(n)
    }

    fn disk_full(&self) -> bool {
        let full = self.disk_full.load(Ordering::Relaxed);
        if full {
            self.injected.fetch_add(1, Ordering::Relaxed);
        }
        full
    }

    fn store_down(&self) -> bool {
        let down = self.store_down.load(Ordering::Relaxed);
        if down {
            self.injected.fetch_add(1, Ordering::Relaxed);
        }
        down
    }
}
