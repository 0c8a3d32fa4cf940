#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::sync::Arc;

use hourglass_store_fjall::FjallStore;

fn make() -> Arc<dyn hourglass_storage::Store> {
    // The directory lives as long as the test process; each case gets its own.
    let dir = tempfile::tempdir().expect("temp dir").keep();
    Arc::new(FjallStore::open(&dir).expect("open store"))
}

hourglass_storage::conformance_tests!(make);
