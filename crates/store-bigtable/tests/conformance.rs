#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The storage conformance suite against Cloud Bigtable's emulator.

mod emulator;

use std::sync::Arc;

fn make() -> Arc<dyn hourglass_storage::Store> {
    Arc::new(emulator::fresh_store())
}

hourglass_storage::conformance_tests!(make);
