#![allow(clippy::unwrap_used, clippy::expect_used)]
use hourglass_storage::{FamilySpec, Mutation, ReadOptions, ScanRequest, Store, TableSpec};
use hourglass_store_fjall::FjallStore;

fn spec() -> TableSpec {
    TableSpec {
        name: "tsdb".into(),
        families: vec![FamilySpec::new("t", Some(1))],
    }
}

#[test]
fn data_and_tables_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = FjallStore::open(dir.path()).unwrap();
        store.create_table(&spec()).unwrap();
        for i in 0u32..1000 {
            put(&store, i);
        }
        store.increment("tsdb", &[0], "t", b"ctr", 5).unwrap();
    }
    let store = FjallStore::open(dir.path()).unwrap();
    assert!(store.table_exists("tsdb").unwrap());
    // 1000 rows plus the counter row.
    assert_eq!(row_count(&store), 1001);
    let row = store
        .get("tsdb", &7u32.to_be_bytes(), &ReadOptions::default())
        .unwrap()
        .unwrap();
    assert_eq!(row.value("t", b"q"), Some(&7u32.to_le_bytes()[..]));
    assert_eq!(store.increment("tsdb", &[0], "t", b"ctr", 1).unwrap(), 6);
    // The family's max_versions came back from the catalog.
    store
        .mutate_row(
            "tsdb",
            b"v",
            &[Mutation::set_at("t", b"q".to_vec(), 1, b"a".to_vec())],
        )
        .unwrap();
    store
        .mutate_row(
            "tsdb",
            b"v",
            &[Mutation::set_at("t", b"q".to_vec(), 2, b"b".to_vec())],
        )
        .unwrap();
    assert_eq!(
        store
            .get("tsdb", b"v", &ReadOptions::default())
            .unwrap()
            .unwrap()
            .cells
            .len(),
        1
    );
}

#[test]
fn second_open_of_a_data_dir_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let _first = FjallStore::open(dir.path()).unwrap();
    let err = FjallStore::open(dir.path()).unwrap_err();
    assert!(err.to_string().contains("data dir in use"), "{err}");
}

#[test]
fn the_indexed_mark_is_kept_in_the_catalog_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = FjallStore::open(dir.path()).unwrap();
        store.create_table(&spec()).unwrap();
        assert!(!store.is_indexed("tsdb"));
        // Marked at once when the table exists.
        let store = store.with_indexed("tsdb");
        assert!(store.is_indexed("tsdb"));
        store
            .mutate_row(
                "tsdb",
                b"r",
                &[Mutation::set("t", b"q".to_vec(), b"v".to_vec())],
            )
            .unwrap();
        store.sync().unwrap();
    }
    // Opened again without asking for it: the mark stays, the data too.
    let store = FjallStore::open(dir.path()).unwrap();
    assert!(store.is_indexed("tsdb"));
    store.create_table(&spec()).unwrap();
    assert!(
        store.is_indexed("tsdb"),
        "creating the table again keeps it"
    );
    let row = store
        .get("tsdb", b"r", &ReadOptions::default())
        .unwrap()
        .unwrap();
    assert_eq!(row.value("t", b"q"), Some(&b"v"[..]));
}

/// The journal file the store's last writes went to.
fn last_journal(dir: &std::path::Path) -> std::path::PathBuf {
    journals(dir)
        .into_iter()
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .expect("a journal file")
}

/// The store's journal files (`*.jnl` under `store/`).
fn journals(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir.join("store"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jnl"))
        .collect()
}

fn row_count(store: &FjallStore) -> usize {
    store.scan("tsdb", &ScanRequest::default()).unwrap().count()
}

fn put(store: &FjallStore, i: u32) {
    store
        .mutate_row(
            "tsdb",
            &i.to_be_bytes(),
            &[Mutation::set("t", b"q".to_vec(), i.to_le_bytes().to_vec())],
        )
        .unwrap();
}

/// A journal whose tail was torn (cut inside its last batch) or holds bytes that are no
/// entry loses that tail only: every batch before it is recovered, and the journal is cut
/// exactly at the last whole batch, so what is written after reopening is recovered too.
#[test]
fn a_torn_or_garbled_journal_tail_is_cut_at_the_last_whole_batch() {
    for garble in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = FjallStore::open(dir.path()).unwrap();
            store.create_table(&spec()).unwrap();
            for i in 0u32..500 {
                put(&store, i);
            }
            store.sync().unwrap();
        }
        let journal = last_journal(dir.path());
        let len = std::fs::metadata(&journal).unwrap().len();
        if garble {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&journal)
                .unwrap();
            f.write_all(&[0xEE, 1, 2, 3, 4, 5, 6]).unwrap();
        } else {
            // Into the last batch (row 499's): its end marker is gone.
            std::fs::OpenOptions::new()
                .write(true)
                .open(&journal)
                .unwrap()
                .set_len(len - 3)
                .unwrap();
        }
        let kept = {
            let store = FjallStore::open(dir.path()).unwrap();
            let kept = row_count(&store);
            // A torn tail loses its batch at most (row 499's, or a later write of the
            // store's own); garbage after whole batches loses nothing.
            let least = if garble { 500 } else { 499 };
            assert!(
                (least..=500).contains(&kept),
                "garble={garble}: {kept} rows"
            );
            put(&store, 1000);
            store.sync().unwrap();
            kept
        };
        let store = FjallStore::open(dir.path()).unwrap();
        assert_eq!(row_count(&store), kept + 1, "garble={garble}");
        assert!(
            store
                .get("tsdb", &1000u32.to_be_bytes(), &ReadOptions::default())
                .unwrap()
                .is_some()
        );
    }
}

/// Bytes the store's journal files (`*.jnl` under `store/`) take on disk: fjall sizes a new
/// journal to 64 MiB without writing it, so each file's allocation, or its length if less.
fn journal_bytes(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    journals(dir)
        .iter()
        .map(|p| {
            let m = std::fs::metadata(p).unwrap();
            m.len().min(m.blocks() * 512)
        })
        .sum()
}

#[test]
fn a_checkpoint_leaves_no_journal_of_what_the_tables_hold() {
    let dir = tempfile::tempdir().unwrap();
    let write = |store: &FjallStore, from: u32| {
        for i in from..from + 200 {
            store
                .mutate_row(
                    "tsdb",
                    &i.to_be_bytes(),
                    &[Mutation::set("t", b"q".to_vec(), vec![i as u8; 1000])],
                )
                .unwrap();
        }
    };
    {
        let store = FjallStore::open(dir.path()).unwrap();
        store.create_table(&spec()).unwrap();
        write(&store, 0);
        // Single-row writes go through the journal.
        assert!(journal_bytes(dir.path()) > 200_000);
        store.checkpoint().unwrap();
        // Everything is in tables: the journal starts again empty.
        assert!(
            journal_bytes(dir.path()) <= 4096,
            "{}",
            journal_bytes(dir.path())
        );
        // Writes after the checkpoint, not flushed, are journaled and survive a close
        // without one (as after a crash).
        write(&store, 200);
        assert!(journal_bytes(dir.path()) > 200_000);
    }
    let store = FjallStore::open(dir.path()).unwrap();
    assert_eq!(
        store.scan("tsdb", &ScanRequest::default()).unwrap().count(),
        400
    );
    let row = store
        .get("tsdb", &7u32.to_be_bytes(), &ReadOptions::default())
        .unwrap()
        .unwrap();
    assert_eq!(row.value("t", b"q"), Some(&[7u8; 1000][..]));
    store.checkpoint().unwrap();
    drop(store);
    let store = FjallStore::open(dir.path()).unwrap();
    assert_eq!(
        store.scan("tsdb", &ScanRequest::default()).unwrap().count(),
        400
    );
    assert!(journal_bytes(dir.path()) <= 4096);
}

/// A data dir deleted under an open store: the checkpoint of a graceful stop fails (the
/// memtable's flush fails and poisons the database) instead of waiting for ever for the
/// flush, and no empty database is started in the directory's place, by that reopen or by
/// a later write's.
#[test]
fn a_data_dir_deleted_under_the_store_fails_its_checkpoint_and_is_not_recreated() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("data");
    let store = std::sync::Arc::new(FjallStore::open(&dir).unwrap());
    store.create_table(&spec()).unwrap();
    for i in 0..100 {
        put(&store, i);
    }
    std::fs::remove_dir_all(&dir).unwrap();
    let (sender, outcome) = std::sync::mpsc::channel();
    let checkpointing = std::sync::Arc::clone(&store);
    std::thread::spawn(move || sender.send(checkpointing.checkpoint()).unwrap());
    let outcome = outcome
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the checkpoint returns");
    let e = outcome.expect_err("nothing could be flushed");
    // Not `Unavailable`: callers retry that, and the dir does not come back by waiting.
    assert_eq!(e.kind(), hourglass_storage::ErrorKind::Internal, "{e}");
    assert!(e.to_string().contains("is gone"), "{e}");
    let write = store.mutate_row(
        "tsdb",
        b"k",
        &[Mutation::set("t", b"q".to_vec(), b"v".to_vec())],
    );
    let e = write.expect_err("no database to write to");
    assert!(e.to_string().contains("is gone"), "{e}");
    assert!(!dir.join("store").exists(), "an empty database was started");
}

/// `make_table_durable` leaves nothing of the table to the journal: rows written through it
/// (single-row writes) are in synced table files once it returns, so losing the journal
/// afterwards (its pages dropped by a failed sync, then a power loss) loses none of them.
/// Without it, the same loss loses them all: the test sees the difference.
#[test]
fn make_table_durable_leaves_nothing_of_the_table_to_the_journal() {
    for durable in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = FjallStore::open(dir.path()).unwrap();
            store.create_table(&spec()).unwrap();
            // The catalog's entry in table files too.
            store.checkpoint().unwrap();
            for i in 0..100 {
                put(&store, i);
            }
            if durable {
                store.make_table_durable("tsdb").unwrap();
            }
        }
        for journal in journals(dir.path()) {
            std::fs::OpenOptions::new()
                .write(true)
                .open(journal)
                .unwrap()
                .set_len(0)
                .unwrap();
        }
        let store = FjallStore::open(dir.path()).unwrap();
        let want = if durable { 100 } else { 0 };
        assert_eq!(row_count(&store), want, "made durable: {durable}");
    }
}
