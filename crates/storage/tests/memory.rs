#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::sync::Arc;

use hourglass_storage::memory::MemoryStore;

fn make() -> Arc<dyn hourglass_storage::Store> {
    Arc::new(MemoryStore::new())
}

hourglass_storage::conformance_tests!(make);

/// The metered wrapper behaves exactly as the store it wraps.
mod metered {
    use super::*;

    fn make() -> Arc<dyn hourglass_storage::Store> {
        Arc::new(hourglass_storage::metered::Metered::new(Arc::new(
            MemoryStore::new(),
        )))
    }

    hourglass_storage::conformance_tests!(make);
}
