#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The TSD over the Cloud Bigtable backend (emulator): the same protocol paths, real sockets.
mod common;

use std::sync::Arc;

use common::{http, start_on, telnet};
use hourglass_core::config::Config;
use hourglass_core::value::Value;

fn auto_create() -> Config {
    let mut c = Config::default();
    c.set("tsd.core.auto_create_metrics", "true");
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telnet_and_http_puts_land_in_bigtable() {
    let store = Arc::new(hourglass_store_bigtable::emulator::fresh_store());
    let srv = start_on(store, auto_create()).await;
    let replies = telnet(srv.addr, "put bt.cpu 1356998400 42 host=web01\nput bt.cpu 1356998410 x host=web01\nput bt.cpu 1356998420 43.5 host=web01\n").await;
    assert_eq!(
        replies,
        vec!["put: invalid value: Invalid character 'x' in x".to_string()]
    );
    let r = http(srv.addr, "POST", "/api/put?details", r#"[{"metric":"bt.cpu","timestamp":1356998430,"value":44,"tags":{"host":"web01"}},{"metric":"bt.cpu","timestamp":1356998440,"value":"bad","tags":{"host":"web01"}}]"#).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["success"], 1);
    let values: Vec<(i64, Value)> = srv
        .points("bt.cpu")
        .into_iter()
        .map(|p| (p.0, p.1))
        .collect();
    assert_eq!(
        values,
        vec![
            (1356998400000, Value::Int(42)),
            (1356998420000, Value::Float(43.5)),
            (1356998430000, Value::Int(44))
        ]
    );
    srv.stop().await;
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
