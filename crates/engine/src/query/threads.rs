//! The threads that read a query's second half (or its share of the pieces): kept for the
//! life of the process, so a query split over two threads does not create and end a thread
//! each time it runs (the clone, the stack's mappings and their release cost more than a
//! small query's own reading).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

/// Runs `here` on the calling thread and `there` on one of the kept threads meanwhile, and
/// returns both answers once both are done, as a scoped thread spawned for `there` and
/// joined would: a panic in `there` is its `Err` (the kept thread goes on serving others),
/// one in `here` unwinds the caller after `there` has finished.
///
/// The first call starts the threads; should that fail, `there` runs on a thread of its own
/// as it did before they were kept.
pub fn both<A, B: Send>(
    here: impl FnOnce() -> A,
    there: impl FnOnce() -> B + Send,
) -> (A, std::thread::Result<B>) {
    let Some(pool) = pool() else {
        return std::thread::scope(|threads| {
            let other = threads.spawn(there);
            (here(), other.join())
        });
    };
    let mut theirs = None;
    let ours = pool.in_place_scope(|scope| {
        let slot = &mut theirs;
        scope.spawn(move |_| *slot = Some(catch_unwind(AssertUnwindSafe(there))));
        here()
    });
    // The scope returns only once the job it spawned has run, so the slot is filled.
    let theirs = theirs.unwrap_or_else(|| Err(Box::new("a query thread did not run")));
    (ours, theirs)
}

/// Appends to `out` what `here` writes into it, then what `there` wrote meanwhile on one of
/// the kept threads into a buffer of its own (allocated with `capacity`): two halves of a
/// text written at once and joined. `here`'s error first, then `there`'s; a panic in
/// `there` unwinds the caller, as it would have had `here` written both.
pub fn both_written<E: Send>(
    out: &mut Vec<u8>,
    capacity: usize,
    here: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    there: impl FnOnce(&mut Vec<u8>) -> Result<(), E> + Send,
) -> Result<(), E> {
    let (done, later) = both(
        || here(out),
        || {
            let mut part = Vec::with_capacity(capacity);
            there(&mut part).map(|()| part)
        },
    );
    done?;
    match later {
        Ok(part) => {
            out.extend_from_slice(&part?);
            Ok(())
        }
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// The kept threads: as many as the machine has cores, so each split query being read at
/// once has its second thread (no fewer than two: a query waiting for a kept thread waits
/// for another query's share to end).
fn pool() -> Option<&'static rayon_core::ThreadPool> {
    static POOL: OnceLock<Option<rayon_core::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        rayon_core::ThreadPoolBuilder::new()
            .num_threads(cores.max(2))
            .thread_name(|i| format!("hourglass-query-{i}"))
            .build()
            .map_err(|e| tracing::warn!(error = %e, "cannot start the query threads"))
            .ok()
    })
    .as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_written_joins_the_halves_in_order() {
        let mut out = b"<".to_vec();
        let done: Result<(), ()> = both_written(
            &mut out,
            4,
            |o| {
                o.extend_from_slice(b"ab");
                Ok(())
            },
            |o| {
                o.extend_from_slice(b"cd");
                Ok(())
            },
        );
        assert_eq!((done, out.as_slice()), (Ok(()), &b"<abcd"[..]));
        let failed = both_written(&mut Vec::new(), 0, |_| Ok(()), |_| Err("theirs"));
        assert_eq!(failed, Err("theirs"));
        let failed = both_written(&mut Vec::new(), 0, |_| Err("ours"), |_| Err("theirs"));
        assert_eq!(failed, Err("ours"));
    }

    #[test]
    fn both_answers_come_back_and_the_second_runs_elsewhere() {
        let here = std::thread::current().id();
        let data = [1, 2, 3, 4];
        let (a, b) = both(
            || (std::thread::current().id(), data[..2].iter().sum::<i32>()),
            || (std::thread::current().id(), data[2..].iter().sum::<i32>()),
        );
        let b = b.expect("no panic");
        assert_eq!(a, (here, 3));
        assert_ne!(b.0, here);
        assert_eq!(b.1, 7);
    }

    /// The same kept thread serves query after query: no thread is started per call.
    #[test]
    fn the_threads_are_kept() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..50 {
            let (_, there) = both(|| (), || std::thread::current().id());
            seen.insert(there.expect("no panic"));
        }
        let kept = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .max(2);
        assert!(seen.len() <= kept, "{} threads for 50 calls", seen.len());
    }

    /// A panic on the kept thread is that call's error; the thread lives on for the next.
    #[test]
    fn a_panic_there_is_an_error_and_the_threads_go_on() {
        let (a, b) = both(|| 1, || -> i32 { panic!("broken piece") });
        assert_eq!(a, 1);
        let why = b.expect_err("the panic is returned");
        assert_eq!(why.downcast_ref::<&str>(), Some(&"broken piece"));
        let (_, b) = both(|| (), || 2);
        assert_eq!(b.expect("no panic"), 2);
    }

    /// A panic on the calling thread unwinds it, after the other half has finished.
    #[test]
    fn a_panic_here_unwinds_the_caller_after_there_is_done() {
        let done = std::sync::atomic::AtomicBool::new(false);
        let caught = catch_unwind(AssertUnwindSafe(|| {
            both(
                || -> () { panic!("broken here") },
                || {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    done.store(true, std::sync::atomic::Ordering::Release);
                },
            )
        }));
        assert!(caught.is_err());
        assert!(done.load(std::sync::atomic::Ordering::Acquire));
        let (_, b) = both(|| (), || 3);
        assert_eq!(b.expect("no panic"), 3);
    }
}
