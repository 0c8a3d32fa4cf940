//! The one way telnet and HTTP reach the write path: engine calls run on Tokio's blocking
//! pool, never on the async workers, so slow storage (a UID lookup, a log fsync) stalls only
//! the connections that wait on it. Past the buffers' memory budget, HTTP puts are refused
//! (503) and telnet connections stop reading their sockets until flushes catch up.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::watch;

use crate::State;
use crate::activity::Activity;

/// How often the server looks for room again while connections are held back (and how
/// often a batch already read, waiting on the blocking pool, does).
const ROOM_POLL: Duration = Duration::from_millis(10);
/// How often a held-back connection renews its activity (for the idle timeout).
const ACTIVITY_TICK: Duration = Duration::from_millis(500);

/// Runs `work` on the blocking pool with the server's state.
pub(crate) async fn run_blocking<T: Send + 'static>(
    state: &Arc<State>,
    work: impl FnOnce(&State) -> T + Send + 'static,
) -> std::io::Result<T> {
    let state = Arc::clone(state);
    tokio::task::spawn_blocking(move || work(&state))
        .await
        .map_err(std::io::Error::other)
}

/// Waits until buffered points are under their budget. The wait counts as activity (the
/// server, not the client, is slow). Returns false when the server begins to stop.
pub(crate) async fn wait_for_room(
    state: &State,
    activity: &Activity,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    let mut held: Option<HeldBack<'_>> = None;
    loop {
        let room = state.room.notified();
        if state.tsdb.has_room() {
            return true;
        }
        if held.is_none() {
            held = Some(HeldBack::new(state));
            state
                .stats
                .throttled
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        activity.touch();
        tokio::select! {
            () = room => {}
            // Keeps the wait counted as activity however long it lasts.
            () = tokio::time::sleep(ACTIVITY_TICK) => {}
            _ = stop.changed() => return false,
        }
    }
}

/// A connection counted as held back (waiting in [`wait_for_room`]) while this lives.
struct HeldBack<'s> {
    state: &'s State,
}

impl<'s> HeldBack<'s> {
    fn new(state: &'s State) -> HeldBack<'s> {
        state.held_back.fetch_add(1, Ordering::AcqRel);
        // A permit if the announcer is not waiting yet: it cannot miss this connection.
        state.held_back_changed.notify_one();
        HeldBack { state }
    }
}

impl Drop for HeldBack<'_> {
    fn drop(&mut self) {
        self.state.held_back.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Wakes held-back connections when there is room again: one poller for the server, not
/// one per waiting connection, polling only while some connection is held back (an idle
/// server is not woken every [`ROOM_POLL`]). Runs until the server stops.
pub(crate) async fn announce_room(state: Arc<State>, mut stop: watch::Receiver<bool>) {
    loop {
        while state.held_back.load(Ordering::Acquire) == 0 {
            tokio::select! {
                () = state.held_back_changed.notified() => {}
                _ = stop.changed() => return,
            }
        }
        tokio::select! {
            () = tokio::time::sleep(ROOM_POLL) => {}
            _ = stop.changed() => return,
        }
        if state.tsdb.has_room() {
            state.room.notify_waiters();
        }
    }
}

/// Blocking form of [`wait_for_room`] for a batch already read (on the blocking pool):
/// true once there is room, false if the server begins to stop first.
pub(crate) fn block_for_room(state: &State) -> bool {
    while !state.tsdb.has_room() {
        if state.stopping() {
            return false;
        }
        std::thread::sleep(ROOM_POLL);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> Arc<State> {
        let store = Arc::new(hourglass_storage::memory::MemoryStore::new());
        let tsdb =
            hourglass_engine::Tsdb::open(store, hourglass_engine::Settings::default()).unwrap();
        State::new(
            tsdb,
            hourglass_core::config::Config::default(),
            crate::ServerSettings::default(),
        )
    }

    /// The announcer wakes no one while no connection is held back (it used to poll every
    /// 10 ms from start to stop), and wakes waiters once one is and there is room.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_announcer_polls_only_while_a_connection_is_held_back() {
        let state = state();
        assert!(state.tsdb.has_room());
        let (stop, stopped) = watch::channel(false);
        let announcer = tokio::spawn(announce_room(Arc::clone(&state), stopped));

        let idle = state.room.notified();
        let woken = tokio::time::timeout(ROOM_POLL * 20, idle).await;
        assert!(
            woken.is_err(),
            "the announcer woke waiters with none held back"
        );

        let held = HeldBack::new(&state);
        let waiting = state.room.notified();
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("a held-back connection is woken when there is room");
        drop(held);
        assert_eq!(state.held_back.load(Ordering::Acquire), 0);

        stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(10), announcer)
            .await
            .expect("the announcer stops with the server")
            .unwrap();
    }
}
