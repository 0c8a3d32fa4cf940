//! The C library's allocator (glibc's malloc) tuned for the TSD before any thread starts.
//!
//! A query answering tens of thousands of points allocates and frees some hundreds of KB
//! to a few MB (the points, their columns, the answer's text). By default glibc gives
//! such memory back to the kernel as soon as it is freed: blocks over its mmap threshold
//! are unmapped, and a thread's heap is trimmed once its free top passes the trim
//! threshold. The next query then faults every page in again: about 230 page faults a
//! one-series raw query of 16,682 points, some 1.5 µs each on the machines measured, a
//! third of the query's time. [`tune`] fixes both thresholds so such blocks stay in the
//! heap between queries, while a heap's free top above [`TRIM_THRESHOLD`] is still given
//! back.
//!
//! This is the workspace's only unsafe code: one call of the C library, made before any
//! other thread exists.

/// Blocks from this size are mapped on their own and unmapped when freed. Fixing it also
/// turns off glibc's own adjustment of both thresholds, which leaves the trim threshold at
/// twice the largest block freed so far: a query whose blocks together pass it trims the
/// heap, and the next one faults its pages in again.
pub const MMAP_THRESHOLD: usize = 4 << 20;

/// A heap's free top past this size is given back to the kernel when memory is freed.
pub const TRIM_THRESHOLD: usize = 8 << 20;

/// The environment variables through which glibc reads the same settings at start; when
/// the operator has set any of them, theirs are kept.
const OPERATOR_SETTINGS: [&str; 3] = [
    "GLIBC_TUNABLES",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
];

/// How the allocator was left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tuned {
    /// Both thresholds set to [`MMAP_THRESHOLD`] and [`TRIM_THRESHOLD`].
    Set,
    /// The operator's own settings kept (one of glibc's variables is set).
    Operator,
    /// Not glibc: nothing to tune.
    Other,
    /// glibc refused a setting.
    Refused,
}

/// Sets glibc's mmap and trim thresholds (see the module's text). Call it first thing in
/// `main`, before any thread is started.
pub fn tune() -> Tuned {
    if OPERATOR_SETTINGS
        .iter()
        .any(|name| std::env::var_os(name).is_some())
    {
        return Tuned::Operator;
    }
    set_thresholds()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_thresholds() -> Tuned {
    let (Ok(mmap), Ok(trim)) = (
        libc::c_int::try_from(MMAP_THRESHOLD),
        libc::c_int::try_from(TRIM_THRESHOLD),
    ) else {
        return Tuned::Refused;
    };
    // SAFETY: `mallopt` only changes the allocator's parameters, under its own lock; it
    // touches no memory of the caller's and is called with two of its documented
    // parameters and values in their ranges. It returns 1 on success, 0 on refusal.
    #[allow(unsafe_code)]
    let done = unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, mmap) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, trim) == 1
    };
    if done { Tuned::Set } else { Tuned::Refused }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_thresholds() -> Tuned {
    Tuned::Other
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    /// Minor page faults this process has taken so far.
    fn minor_faults() -> u64 {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        // After the name: state, ppid, pgrp, session, tty, tpgid, flags, minflt.
        after_name
            .split_whitespace()
            .nth(7)
            .and_then(|n| n.parse().ok())
            .unwrap_or(u64::MAX)
    }

    /// A query's way with memory: a few blocks of a MB allocated, written and freed
    /// together, again and again. Tuned, the heap keeps them and the pages stay mapped;
    /// under glibc's own thresholds the heap is trimmed after each round (its free top
    /// passes twice the largest block freed) and every page is faulted in again.
    #[test]
    fn freed_blocks_stay_mapped_for_the_next_round() {
        assert_eq!(tune(), Tuned::Set);
        let round = || {
            let blocks: Vec<Vec<u8>> = (0..3).map(|_| vec![1u8; 1 << 20]).collect();
            std::hint::black_box(&blocks);
        };
        round();
        let before = minor_faults();
        let rounds = 20;
        for _ in 0..rounds {
            round();
        }
        let faults = (minor_faults() - before) / rounds;
        // Three blocks of 256 pages each: 768 faults a round when given back.
        assert!(faults < 20, "{faults} page faults a round");
    }
}
