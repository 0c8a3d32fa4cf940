//! A store that stops answering in the middle of a scan: the scan ends with an error within
//! the configured timeout instead of waiting for the store to come back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use hourglass_storage::{FamilySpec, Mutation, RowMutation, ScanRequest, Store, TableSpec};
use hourglass_store_bigtable::{BigtableConfig, BigtableStore, emulator};

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

#[test]
fn a_scan_ends_with_an_error_when_the_store_stalls_mid_stream() {
    let (mut child, host) = emulator::spawn_own();
    let mut config = BigtableConfig::new("hourglass-test", "stall");
    config.emulator_host = Some(host);
    config.timeout = Duration::from_secs(1);
    let store = BigtableStore::connect(config).unwrap();
    store
        .create_table(&TableSpec {
            name: "t".into(),
            families: vec![FamilySpec::new("f", None)],
        })
        .unwrap();
    // 16 MiB of rows: far more than the stream's flow-control windows and the scan's queue.
    let value = vec![7u8; 4096];
    for chunk in 0..8u32 {
        let rows: Vec<RowMutation> = (0..512u32)
            .map(|i| RowMutation {
                key: (chunk * 512 + i).to_be_bytes().to_vec(),
                mutations: vec![Mutation::set("f", b"q".to_vec(), value.clone())],
            })
            .collect();
        store.mutate_rows("t", &rows).unwrap();
    }
    let mut rows = store.scan("t", &ScanRequest::default()).unwrap();
    assert!(rows.next().unwrap().is_ok());
    signal(child.id(), "-STOP");
    let stopped = Instant::now();
    let mut read = 1usize;
    let outcome = loop {
        match rows.next() {
            Some(Ok(_)) => read += 1,
            Some(Err(e)) => break Some(e),
            None => break None,
        }
    };
    let waited = stopped.elapsed();
    signal(child.id(), "-CONT");
    let _ = child.kill();
    let _ = child.wait();
    let error =
        outcome.unwrap_or_else(|| panic!("the scan read all {read} rows from a stopped store"));
    assert!(read < 4096, "read {read} rows");
    assert!(
        error.to_string().contains("stalled"),
        "unexpected error: {error}"
    );
    assert!(
        waited < Duration::from_secs(5),
        "the scan waited {waited:?} for a stopped store (timeout 1 s)"
    );
}
