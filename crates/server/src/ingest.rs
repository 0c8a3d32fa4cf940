//! The one way telnet and HTTP reach the write path: engine calls run on Tokio's blocking
//! pool, never on the async workers, so slow storage (a UID lookup, a log fsync) stalls only
//! the connections that wait on it. Past the buffers' memory budget, HTTP puts are refused
//! (503) and telnet connections stop reading their sockets until flushes catch up.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::State;
use crate::activity::Activity;

/// How often a held-back connection looks for room again.
const ROOM_POLL: Duration = Duration::from_millis(10);

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
    let mut counted = false;
    while !state.tsdb.has_room() {
        if !counted {
            counted = true;
            state
                .stats
                .throttled
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        activity.touch();
        tokio::select! {
            () = tokio::time::sleep(ROOM_POLL) => {}
            _ = stop.changed() => return false,
        }
    }
    true
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
