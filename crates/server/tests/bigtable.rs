#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The TSD over the Cloud Bigtable backend (emulator): many connections creating the same new
//! names at once (the other end-to-end tests run on every backend through their own suites).
mod common;

use std::sync::Arc;

use common::{start_on, telnet};
use hourglass_core::config::Config;

fn auto_create() -> Config {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_names_from_many_connections_get_one_uid_each() {
    let store = Arc::new(hourglass_store_bigtable::emulator::fresh_store());
    let srv = start_on(store, auto_create()).await;
    let mut tasks = Vec::new();
    for c in 0..4 {
        let addr = srv.addr;
        tasks.push(tokio::spawn(async move {
            let text: String = (0..200)
                .map(|i| format!("put bt.m{i} {} {c} host=h{i}\n", 1356998400 + c))
                .collect();
            telnet(addr, &text).await
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), Vec::<String>::new());
    }
    for i in 0..200 {
        assert_eq!(srv.points(&format!("bt.m{i}")).len(), 4, "bt.m{i}");
    }
    srv.stop().await;
}
