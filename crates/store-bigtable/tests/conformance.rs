#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The storage conformance suite against Cloud Bigtable's emulator.

use std::sync::Arc;

fn make() -> Arc<dyn hourglass_storage::Store> {
    Arc::new(hourglass_store_bigtable::emulator::fresh_store())
}

hourglass_storage::conformance_tests!(make);
