//! The behaviour every [`Store`] backend must have. Each backend's tests call
//! [`conformance_tests!`](crate::conformance_tests) with a function that makes a fresh, empty store.
#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use std::sync::Arc;

use crate::{
    CellRow, Check, FamilySpec, Increment, Mutation, ReadOptions, Row, RowCheck, RowMutation,
    ScanRequest, SkipHint, Store, TableSpec, TimeRange,
};

/// Expands to one `#[test]` per conformance case, each on a store made by `$make()`.
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!(@cases $make;
            tables_are_created_idempotently,
            unknown_tables_and_families_are_errors,
            cells_round_trip_with_families_and_versions,
            rows_sort_in_unsigned_byte_order,
            scan_bounds_and_limit,
            scan_prefix_and_open_end,
            key_regex_is_full_match_and_byte_oriented,
            skip_hints_change_no_rows,
            family_filter,
            time_shifting_reads_in_one_request,
            max_versions_keeps_newest,
            deletes_cells_families_and_rows,
            row_mutation_is_all_or_nothing,
            batched_mutations,
            increment_counts_from_zero_and_checks_width,
            concurrent_increments_lose_nothing,
            check_and_mutate_is_compare_and_set,
            concurrent_check_and_mutate_has_one_winner,
            check_and_mutate_rows_writes_all_or_nothing,
            concurrent_check_and_mutate_rows_have_one_winner,
            large_rows_and_values,
            get_rows_reads_many_keys_in_order,
            appends_concatenate_and_racing_appends_lose_nothing,
            increment_many_moves_each_counter_of_a_row,
            concurrent_increment_many_lose_nothing,
            keys_only_reads_return_cells_without_values,
            a_row_is_replaced_by_deleting_it_then_setting_cells,
            one_cell_rows_replace_rows_whole,
            lent_cells_are_the_scanned_cells,
            joint_scans_hand_over_the_scanned_rows,
            making_a_table_durable_changes_no_cell
        );
    };
    (@cases $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                let store: ::std::sync::Arc<dyn $crate::Store> = $make();
                $crate::conformance::$name(&store);
            }
        )*
    };
}

const T: &str = "tbl";

fn setup(store: &Arc<dyn Store>) {
    store
        .create_table(&TableSpec {
            name: T.into(),
            families: vec![
                FamilySpec::new("a", None),
                FamilySpec::new("b", None),
                FamilySpec::new("one", Some(1)),
            ],
        })
        .unwrap();
}

fn put(store: &Arc<dyn Store>, key: &[u8], q: &[u8], v: &[u8]) {
    store
        .mutate_row(T, key, &[Mutation::set("a", q.to_vec(), v.to_vec())])
        .unwrap();
}

fn keys(store: &Arc<dyn Store>, req: &ScanRequest) -> Vec<Vec<u8>> {
    store
        .scan(T, req)
        .unwrap()
        .map(|r| r.unwrap().key)
        .collect()
}

fn get(store: &Arc<dyn Store>, key: &[u8]) -> Option<Row> {
    store.get(T, key, &ReadOptions::default()).unwrap()
}

pub fn tables_are_created_idempotently(store: &Arc<dyn Store>) {
    assert!(!store.table_exists(T).unwrap());
    setup(store);
    put(store, b"r", b"q", b"v");
    setup(store);
    assert!(store.table_exists(T).unwrap());
    assert_eq!(
        get(store, b"r").unwrap().value("a", b"q"),
        Some(&b"v"[..]),
        "re-creating keeps data"
    );
    store
        .create_table(&TableSpec {
            name: T.into(),
            families: vec![FamilySpec::new("c", None)],
        })
        .unwrap();
    store
        .mutate_row(T, b"r", &[Mutation::set("c", b"q".to_vec(), b"w".to_vec())])
        .unwrap();
    assert_eq!(get(store, b"r").unwrap().value("c", b"q"), Some(&b"w"[..]));
}

pub fn unknown_tables_and_families_are_errors(store: &Arc<dyn Store>) {
    setup(store);
    assert!(store.get("nope", b"r", &ReadOptions::default()).is_err());
    assert!(
        store
            .mutate_row(
                "nope",
                b"r",
                &[Mutation::set("a", b"q".to_vec(), b"v".to_vec())]
            )
            .is_err()
    );
    assert!(store.scan("nope", &ScanRequest::default()).is_err());
    let err = store
        .mutate_row(
            T,
            b"r",
            &[Mutation::set("zz", b"q".to_vec(), b"v".to_vec())],
        )
        .unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::NotFound);
}

pub fn cells_round_trip_with_families_and_versions(store: &Arc<dyn Store>) {
    setup(store);
    assert_eq!(get(store, b"row"), None);
    store
        .mutate_row(
            T,
            b"row",
            &[
                Mutation::set_at("a", b"q1".to_vec(), 10, b"old".to_vec()),
                Mutation::set_at("a", b"q1".to_vec(), 20, b"new".to_vec()),
                Mutation::set_at("b", b"".to_vec(), 5, vec![0, 0xFF]),
                Mutation::set_at("a", vec![0xFF, 0], 7, b"x".to_vec()),
            ],
        )
        .unwrap();
    let row = get(store, b"row").unwrap();
    let cells: Vec<(&str, &[u8], i64, &[u8])> = row
        .cells
        .iter()
        .map(|c| {
            (
                c.family.as_str(),
                c.qualifier.as_slice(),
                c.timestamp,
                c.value.as_slice(),
            )
        })
        .collect();
    assert_eq!(
        cells,
        vec![
            ("a", &b"q1"[..], 20, &b"new"[..]),
            ("a", &b"q1"[..], 10, &b"old"[..]),
            ("a", &[0xFF, 0][..], 7, &b"x"[..]),
            ("b", &b""[..], 5, &[0, 0xFF][..]),
        ]
    );
    assert_eq!(row.value("a", b"q1"), Some(&b"new"[..]));
    let latest = store
        .get(T, b"row", &ReadOptions::latest())
        .unwrap()
        .unwrap();
    assert_eq!(latest.cells.len(), 3);
    // Same coordinates overwrite.
    store
        .mutate_row(
            T,
            b"row",
            &[Mutation::set_at("a", b"q1".to_vec(), 20, b"newer".to_vec())],
        )
        .unwrap();
    assert_eq!(
        get(store, b"row").unwrap().value("a", b"q1"),
        Some(&b"newer"[..])
    );
    // Server-assigned timestamps are recent wall-clock milliseconds.
    store
        .mutate_row(
            T,
            b"row2",
            &[Mutation::set("a", b"q".to_vec(), b"v".to_vec())],
        )
        .unwrap();
    let ts = get(store, b"row2").unwrap().cells[0].timestamp;
    assert!(
        ts > 1_600_000_000_000,
        "timestamp {ts} should be wall-clock ms"
    );
}

pub fn rows_sort_in_unsigned_byte_order(store: &Arc<dyn Store>) {
    setup(store);
    let mut want: Vec<Vec<u8>> = vec![
        vec![0x00],
        vec![0x00, 0x00],
        vec![0x00, 0x01],
        vec![0x01],
        vec![0x7F, 0xFF],
        vec![0x80],
        vec![0x80, 0x00],
        vec![0xFF],
        vec![0xFF, 0x00],
        vec![0xFF, 0xFF, 0xFF],
        b"a".to_vec(),
        b"ab".to_vec(),
    ];
    for k in want.iter().rev() {
        put(store, k, b"q", b"v");
    }
    want.sort();
    assert_eq!(keys(store, &ScanRequest::default()), want);
}

pub fn scan_bounds_and_limit(store: &Arc<dyn Store>) {
    setup(store);
    for i in 0u8..10 {
        put(store, &[b'k', i], b"q", &[i]);
    }
    let got = keys(
        store,
        &ScanRequest::range(vec![b'k', 3], Some(vec![b'k', 7])),
    );
    assert_eq!(got, (3u8..7).map(|i| vec![b'k', i]).collect::<Vec<_>>());
    let limited = keys(
        store,
        &ScanRequest {
            limit: Some(2),
            ..ScanRequest::range(vec![b'k', 5], None)
        },
    );
    assert_eq!(limited, vec![vec![b'k', 5], vec![b'k', 6]]);
    assert!(keys(store, &ScanRequest::range(vec![b'z'], None)).is_empty());
    assert!(
        keys(
            store,
            &ScanRequest::range(vec![b'k', 5], Some(vec![b'k', 5]))
        )
        .is_empty()
    );
}

pub fn scan_prefix_and_open_end(store: &Arc<dyn Store>) {
    setup(store);
    for k in [
        &[1u8, 0xFF][..],
        &[1, 0xFF, 0xFF],
        &[2],
        &[0xFF, 0xFF],
        &[0xFF, 0xFF, 1],
    ] {
        put(store, k, b"q", b"v");
    }
    assert_eq!(
        keys(store, &ScanRequest::prefix(&[1, 0xFF])),
        vec![vec![1, 0xFF], vec![1, 0xFF, 0xFF]]
    );
    assert_eq!(
        keys(store, &ScanRequest::prefix(&[0xFF, 0xFF])),
        vec![vec![0xFF, 0xFF], vec![0xFF, 0xFF, 1]]
    );
    assert_eq!(keys(store, &ScanRequest::prefix(&[])).len(), 5);
}

pub fn key_regex_is_full_match_and_byte_oriented(store: &Arc<dyn Store>) {
    setup(store);
    let rows: [&[u8]; 5] = [
        b"abc",
        b"xabcx",
        &[0x00, 0x0A, 0xFF],
        &[0x00, 0x80, 0x01],
        b"ab\ncd",
    ];
    for k in rows {
        put(store, k, b"q", b"v");
    }
    let matching = |re: &str| {
        keys(
            store,
            &ScanRequest {
                key_regex: Some(re.into()),
                ..Default::default()
            },
        )
    };
    assert_eq!(matching("abc"), vec![b"abc".to_vec()], "full match only");
    assert_eq!(
        matching(".*abc.*"),
        vec![b"abc".to_vec(), b"xabcx".to_vec()]
    );
    assert_eq!(matching(r"\x00(?s:.)\xFF"), vec![vec![0x00, 0x0A, 0xFF]]);
    assert_eq!(
        matching(r"\x00[\x80-\xFF]\x01"),
        vec![vec![0x00, 0x80, 0x01]]
    );
    assert_eq!(
        matching("ab.cd"),
        Vec::<Vec<u8>>::new(),
        "'.' excludes newline by default"
    );
    assert_eq!(matching("(?s)ab.cd"), vec![b"ab\ncd".to_vec()]);
    let err = store
        .scan(
            T,
            &ScanRequest {
                key_regex: Some("(".into()),
                ..Default::default()
            },
        )
        .err()
        .unwrap();
    assert_eq!(err.kind(), crate::ErrorKind::InvalidInput);
}

/// A scan with a skip hint returns what the regex alone returns, whether the backend jumps
/// (far or near) or reads on; a hint pointing backwards is ignored.
pub fn skip_hints_change_no_rows(store: &Arc<dyn Store>) {
    setup(store);
    let mut batch = Vec::new();
    for a in 0..40u8 {
        for b in 0..30u8 {
            batch.push(RowMutation {
                key: vec![a, b],
                mutations: vec![Mutation::set("a", b"q".to_vec(), vec![a, b])],
            });
        }
    }
    store.mutate_rows(T, &batch).unwrap();
    // Rows whose second byte is 7 or 20.
    let regex = Some(r"(?s).[\x07\x14]".to_string());
    let jump = |key: &[u8]| -> Option<Vec<u8>> {
        let (a, b) = (key[0], key[1]);
        match b {
            7 | 20 => None,
            0..=6 => Some(vec![a, 7]),
            8..=19 => Some(vec![a, 20]),
            _ => a.checked_add(1).map(|n| vec![n, 7]),
        }
    };
    let want: Vec<Vec<u8>> = (0..40u8).flat_map(|a| [vec![a, 7], vec![a, 20]]).collect();
    let hints: [Option<SkipHint>; 3] = [
        None,
        Some(SkipHint(Arc::new(jump))),
        Some(SkipHint(Arc::new(|key: &[u8]| Some(key.to_vec())))),
    ];
    for skip in hints {
        let request = ScanRequest {
            key_regex: regex.clone(),
            skip: skip.clone(),
            ..Default::default()
        };
        assert_eq!(keys(store, &request), want, "{skip:?}");
        let limited = ScanRequest {
            start: vec![3, 8],
            end: Some(vec![9, 0]),
            limit: Some(5),
            ..request
        };
        assert_eq!(
            keys(store, &limited),
            vec![
                vec![3, 20],
                vec![4, 7],
                vec![4, 20],
                vec![5, 7],
                vec![5, 20]
            ]
        );
    }
}

pub fn family_filter(store: &Arc<dyn Store>) {
    setup(store);
    store
        .mutate_row(
            T,
            b"r1",
            &[
                Mutation::set("a", b"q".to_vec(), b"1".to_vec()),
                Mutation::set("b", b"q".to_vec(), b"2".to_vec()),
            ],
        )
        .unwrap();
    store
        .mutate_row(
            T,
            b"r2",
            &[Mutation::set("a", b"q".to_vec(), b"3".to_vec())],
        )
        .unwrap();
    let rows: Vec<Row> = store
        .scan(
            T,
            &ScanRequest {
                read: ReadOptions::family("b"),
                ..Default::default()
            },
        )
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        rows.len(),
        1,
        "rows without cells in the family are skipped"
    );
    assert_eq!(rows[0].cells.len(), 1);
    assert_eq!(rows[0].value("b", b"q"), Some(&b"2"[..]));
    assert_eq!(
        store.get(T, b"r2", &ReadOptions::family("b")).unwrap(),
        None
    );
}

/// Seed 002: series values at logical timestamps 2009..2013 and a metadata cell shifted
/// 50,000 years; one read over [2012, max) returns the recent values and the metadata.
pub fn time_shifting_reads_in_one_request(store: &Arc<dyn Store>) {
    setup(store);
    let mut m = Vec::new();
    for (year, v) in [
        (2013, "1.09"),
        (2012, "0.87"),
        (2011, "0.93"),
        (2010, "1.02"),
        (2009, "0.98"),
    ] {
        m.push(Mutation::set_at(
            "a",
            b"timeseries".to_vec(),
            year,
            v.as_bytes().to_vec(),
        ));
    }
    m.push(Mutation::set_at(
        "b",
        b"metadata".to_vec(),
        52011,
        b"house".to_vec(),
    ));
    store.mutate_row(T, b"entity", &m).unwrap();
    let read = ReadOptions {
        time_range: TimeRange::new(2012, None),
        ..Default::default()
    };
    let row = store.get(T, b"entity", &read).unwrap().unwrap();
    let got: Vec<(i64, &[u8])> = row
        .cells
        .iter()
        .map(|c| (c.timestamp, c.value.as_slice()))
        .collect();
    assert_eq!(
        got,
        vec![
            (2013, &b"1.09"[..]),
            (2012, &b"0.87"[..]),
            (52011, &b"house"[..])
        ]
    );
    let bounded = ReadOptions {
        time_range: TimeRange::new(2009, Some(2011)),
        ..Default::default()
    };
    let row = store.get(T, b"entity", &bounded).unwrap().unwrap();
    assert_eq!(
        row.cells.iter().map(|c| c.timestamp).collect::<Vec<_>>(),
        vec![2010, 2009]
    );
    let scanned: Vec<Row> = store
        .scan(
            T,
            &ScanRequest {
                read: read.clone(),
                ..Default::default()
            },
        )
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(scanned.len(), 1);
    assert_eq!(scanned[0].cells.len(), 3);
    let none = ReadOptions {
        time_range: TimeRange::new(60000, None),
        ..Default::default()
    };
    assert_eq!(store.get(T, b"entity", &none).unwrap(), None);
}

pub fn max_versions_keeps_newest(store: &Arc<dyn Store>) {
    setup(store);
    for ts in [5, 9, 7] {
        store
            .mutate_row(
                T,
                b"r",
                &[Mutation::set_at(
                    "one",
                    b"q".to_vec(),
                    ts,
                    ts.to_string().into_bytes(),
                )],
            )
            .unwrap();
    }
    let row = get(store, b"r").unwrap();
    assert_eq!(row.cells.len(), 1);
    assert_eq!(
        (row.cells[0].timestamp, row.cells[0].value.as_slice()),
        (9, &b"9"[..])
    );
}

pub fn deletes_cells_families_and_rows(store: &Arc<dyn Store>) {
    setup(store);
    store
        .mutate_row(
            T,
            b"r",
            &[
                Mutation::set_at("a", b"q".to_vec(), 1, b"1".to_vec()),
                Mutation::set_at("a", b"q".to_vec(), 2, b"2".to_vec()),
                Mutation::set_at("a", b"q".to_vec(), 3, b"3".to_vec()),
                Mutation::set_at("a", b"p".to_vec(), 1, b"p".to_vec()),
                Mutation::set_at("b", b"q".to_vec(), 1, b"b".to_vec()),
            ],
        )
        .unwrap();
    store
        .mutate_row(
            T,
            b"r",
            &[Mutation::DeleteCells {
                family: "a".into(),
                qualifier: b"q".to_vec(),
                range: TimeRange::new(2, Some(3)),
            }],
        )
        .unwrap();
    let ts: Vec<i64> = get(store, b"r")
        .unwrap()
        .cells
        .iter()
        .filter(|c| c.qualifier == b"q" && c.family == "a")
        .map(|c| c.timestamp)
        .collect();
    assert_eq!(ts, vec![3, 1]);
    store
        .mutate_row(T, b"r", &[Mutation::delete("a", b"q".to_vec())])
        .unwrap();
    assert_eq!(get(store, b"r").unwrap().value("a", b"q"), None);
    store
        .mutate_row(T, b"r", &[Mutation::DeleteFamily { family: "a".into() }])
        .unwrap();
    assert_eq!(get(store, b"r").unwrap().cells.len(), 1);
    put(store, b"s", b"q", b"v");
    store.mutate_row(T, b"r", &[Mutation::DeleteRow]).unwrap();
    assert_eq!(get(store, b"r"), None);
    assert_eq!(
        keys(store, &ScanRequest::default()),
        vec![b"s".to_vec()],
        "an empty row disappears from scans"
    );
    store
        .mutate_row(T, b"s", &[Mutation::delete("a", b"q".to_vec())])
        .unwrap();
    assert!(keys(store, &ScanRequest::default()).is_empty());
}

pub fn row_mutation_is_all_or_nothing(store: &Arc<dyn Store>) {
    setup(store);
    put(store, b"r", b"q", b"before");
    let result = store.mutate_row(
        T,
        b"r",
        &[
            Mutation::set("a", b"q".to_vec(), b"after".to_vec()),
            Mutation::set("missing", b"q".to_vec(), b"x".to_vec()),
        ],
    );
    assert!(result.is_err());
    assert_eq!(
        get(store, b"r").unwrap().value("a", b"q"),
        Some(&b"before"[..])
    );
    // Set then delete in one mutation applies in order.
    store
        .mutate_row(
            T,
            b"r",
            &[
                Mutation::set("a", b"z".to_vec(), b"1".to_vec()),
                Mutation::delete("a", b"q".to_vec()),
            ],
        )
        .unwrap();
    let row = get(store, b"r").unwrap();
    assert_eq!(
        (row.value("a", b"q"), row.value("a", b"z")),
        (None, Some(&b"1"[..]))
    );
}

pub fn batched_mutations(store: &Arc<dyn Store>) {
    setup(store);
    let batch: Vec<RowMutation> = (0u32..500)
        .map(|i| RowMutation {
            key: i.to_be_bytes().to_vec(),
            mutations: vec![Mutation::set("a", b"q".to_vec(), i.to_le_bytes().to_vec())],
        })
        .collect();
    store.mutate_rows(T, &batch).unwrap();
    let rows: Vec<Row> = store
        .scan(T, &ScanRequest::default())
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows.len(), 500);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row.key, (i as u32).to_be_bytes());
        assert_eq!(row.value("a", b"q"), Some(&(i as u32).to_le_bytes()[..]));
    }
}

pub fn increment_counts_from_zero_and_checks_width(store: &Arc<dyn Store>) {
    setup(store);
    assert_eq!(store.increment(T, &[0], "a", b"metrics", 1).unwrap(), 1);
    assert_eq!(store.increment(T, &[0], "a", b"metrics", 1).unwrap(), 2);
    assert_eq!(store.increment(T, &[0], "a", b"metrics", 40).unwrap(), 42);
    assert_eq!(store.increment(T, &[0], "a", b"tagk", 1).unwrap(), 1);
    assert_eq!(
        get(store, &[0]).unwrap().value("a", b"metrics"),
        Some(&42i64.to_be_bytes()[..])
    );
    put(store, b"bad", b"c", b"abc");
    let err = store.increment(T, b"bad", "a", b"c", 1).unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::InvalidInput);
}

pub fn concurrent_increments_lose_nothing(store: &Arc<dyn Store>) {
    setup(store);
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let s = Arc::clone(store);
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                for _ in 0..100 {
                    seen.push(s.increment(T, b"ctr", "a", b"n", 1).unwrap());
                }
                seen
            })
        })
        .collect();
    let mut all: Vec<i64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    all.sort_unstable();
    assert_eq!(
        all,
        (1..=800).collect::<Vec<i64>>(),
        "every increment returns a distinct value"
    );
}

pub fn check_and_mutate_is_compare_and_set(store: &Arc<dyn Store>) {
    setup(store);
    let absent = Check {
        family: "a".into(),
        qualifier: b"q".to_vec(),
        expected: None,
    };
    let set = |v: &[u8]| vec![Mutation::set("a", b"q".to_vec(), v.to_vec())];
    assert!(
        store
            .check_and_mutate(T, b"r", &absent, &set(b"first"))
            .unwrap()
    );
    assert!(
        !store
            .check_and_mutate(T, b"r", &absent, &set(b"second"))
            .unwrap()
    );
    assert_eq!(
        get(store, b"r").unwrap().value("a", b"q"),
        Some(&b"first"[..])
    );
    let wrong = Check {
        expected: Some(b"nope".to_vec()),
        ..absent.clone()
    };
    assert!(
        !store
            .check_and_mutate(T, b"r", &wrong, &set(b"third"))
            .unwrap()
    );
    let right = Check {
        expected: Some(b"first".to_vec()),
        ..absent.clone()
    };
    assert!(
        store
            .check_and_mutate(T, b"r", &right, &set(b"third"))
            .unwrap()
    );
    assert_eq!(
        get(store, b"r").unwrap().value("a", b"q"),
        Some(&b"third"[..])
    );
    // A check on an absent row with an expected value fails.
    assert!(
        !store
            .check_and_mutate(T, b"other", &right, &set(b"x"))
            .unwrap()
    );
    assert_eq!(get(store, b"other"), None);
}

/// A check on column `a:q` of `key`.
fn row_check(key: &[u8], expected: Option<&[u8]>) -> RowCheck {
    RowCheck {
        key: key.to_vec(),
        check: Check {
            family: "a".into(),
            qualifier: b"q".to_vec(),
            expected: expected.map(<[u8]>::to_vec),
        },
    }
}

/// Sets column `a:q` (or `family:q`) of `key`.
fn row_set(key: &[u8], family: &str, value: &[u8]) -> RowMutation {
    RowMutation {
        key: key.to_vec(),
        mutations: vec![Mutation::set(family, b"q".to_vec(), value.to_vec())],
    }
}

/// Checks across rows and the rows' writes, together or not at all; a backend that cannot
/// says so (`None`) and touches nothing.
pub fn check_and_mutate_rows_writes_all_or_nothing(store: &Arc<dyn Store>) {
    setup(store);
    put(store, b"ctr", b"q", b"1");
    let rows = [
        row_set(b"ctr", "a", b"2"),
        row_set(b"new", "a", b"x"),
        // A key repeated applies on the state before it.
        RowMutation {
            key: b"new".to_vec(),
            mutations: vec![Mutation::set("b", b"q".to_vec(), b"y".to_vec())],
        },
    ];
    let checks = [row_check(b"ctr", Some(b"1")), row_check(b"new", None)];
    let Some(held) = store.check_and_mutate_rows(T, &checks, &rows).unwrap() else {
        assert_eq!(
            get(store, b"ctr").unwrap().value("a", b"q"),
            Some(&b"1"[..])
        );
        assert_eq!(get(store, b"new"), None, "a declined call writes nothing");
        return;
    };
    assert!(held);
    assert_eq!(
        get(store, b"ctr").unwrap().value("a", b"q"),
        Some(&b"2"[..])
    );
    let new = get(store, b"new").unwrap();
    assert_eq!(new.value("a", b"q"), Some(&b"x"[..]));
    assert_eq!(new.value("b", b"q"), Some(&b"y"[..]));
    // One check failing (the counter moved on) writes none of the rows.
    let again = [row_check(b"ctr", Some(b"1")), row_check(b"other", None)];
    let rows = [row_set(b"ctr", "a", b"3"), row_set(b"other", "a", b"z")];
    assert_eq!(
        store.check_and_mutate_rows(T, &again, &rows).unwrap(),
        Some(false)
    );
    assert_eq!(
        get(store, b"ctr").unwrap().value("a", b"q"),
        Some(&b"2"[..])
    );
    assert_eq!(get(store, b"other"), None);
    // A check on an absent row with an expected value fails; checks that hold on rows
    // not written let the others be written.
    let absent = [
        row_check(b"ctr", Some(b"2")),
        row_check(b"none", Some(b"v")),
    ];
    assert_eq!(
        store.check_and_mutate_rows(T, &absent, &rows).unwrap(),
        Some(false)
    );
    assert_eq!(get(store, b"other"), None);
    let only_checked = [row_check(b"ctr", Some(b"2")), row_check(b"new", Some(b"x"))];
    assert_eq!(
        store
            .check_and_mutate_rows(T, &only_checked, &[row_set(b"other", "a", b"z")])
            .unwrap(),
        Some(true)
    );
    assert_eq!(
        get(store, b"other").unwrap().value("a", b"q"),
        Some(&b"z"[..])
    );
    // A mutation the store refuses (an unknown family) fails the call before any row is
    // written.
    let bad = [row_set(b"p", "a", b"1"), row_set(b"r", "nope", b"1")];
    assert!(store.check_and_mutate_rows(T, &[], &bad).is_err());
    assert_eq!(get(store, b"p"), None);
}

/// Racing writers each move a counter from what they read to one more and create the row
/// it names, in one call: every row created has its own counter value, none is lost.
pub fn concurrent_check_and_mutate_rows_have_one_winner(store: &Arc<dyn Store>) {
    setup(store);
    let probe = store.check_and_mutate_rows(T, &[], &[]).unwrap();
    if probe.is_none() {
        return;
    }
    let threads: Vec<_> = (0..8u8)
        .map(|i| {
            let s = Arc::clone(store);
            std::thread::spawn(move || {
                let mut won = Vec::new();
                while won.len() < 25 {
                    let read = s.get(T, b"ctr", &ReadOptions::default()).unwrap();
                    let seen = read
                        .as_ref()
                        .and_then(|r| r.value("a", b"q"))
                        .map(|v| u64::from_be_bytes(v.try_into().expect("an 8-byte counter")));
                    let next = seen.unwrap_or(0) + 1;
                    let key = format!("row{next:06}").into_bytes();
                    let checks = [
                        row_check(b"ctr", seen.map(u64::to_be_bytes).as_ref().map(|b| &b[..])),
                        row_check(&key, None),
                    ];
                    let rows = [
                        row_set(b"ctr", "a", &next.to_be_bytes()),
                        row_set(&key, "a", &[i]),
                    ];
                    if s.check_and_mutate_rows(T, &checks, &rows).unwrap() == Some(true) {
                        won.push(next);
                    }
                }
                won
            })
        })
        .collect();
    let mut won: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    won.sort_unstable();
    assert_eq!(won, (1..=200).collect::<Vec<u64>>());
    let created = store
        .scan(
            T,
            &ScanRequest::range(b"row".to_vec(), Some(b"rox".to_vec())),
        )
        .unwrap()
        .count();
    assert_eq!(created, 200);
}

pub fn concurrent_check_and_mutate_has_one_winner(store: &Arc<dyn Store>) {
    setup(store);
    let threads: Vec<_> = (0..8u8)
        .map(|i| {
            let s = Arc::clone(store);
            std::thread::spawn(move || {
                let mut wins = 0;
                for k in 0..50u8 {
                    let check = Check {
                        family: "a".into(),
                        qualifier: b"q".to_vec(),
                        expected: None,
                    };
                    if s.check_and_mutate(
                        T,
                        &[k],
                        &check,
                        &[Mutation::set("a", b"q".to_vec(), vec![i])],
                    )
                    .unwrap()
                    {
                        wins += 1;
                    }
                }
                wins
            })
        })
        .collect();
    let wins: u32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(wins, 50, "exactly one writer wins each row");
    for k in 0..50u8 {
        assert_eq!(get(store, &[k]).unwrap().cells.len(), 1);
    }
}

pub fn large_rows_and_values(store: &Arc<dyn Store>) {
    setup(store);
    let muts: Vec<Mutation> = (0u16..3600)
        .map(|i| Mutation::set_at("a", i.to_be_bytes().to_vec(), 1, vec![i as u8; 8]))
        .collect();
    store.mutate_row(T, b"wide", &muts).unwrap();
    store
        .mutate_row(
            T,
            b"big",
            &[Mutation::set("a", b"q".to_vec(), vec![7u8; 4 << 20])],
        )
        .unwrap();
    assert_eq!(get(store, b"wide").unwrap().cells.len(), 3600);
    assert_eq!(
        get(store, b"big")
            .unwrap()
            .value("a", b"q")
            .map(<[u8]>::len),
        Some(4 << 20)
    );
}

pub fn get_rows_reads_many_keys_in_order(store: &Arc<dyn Store>) {
    setup(store);
    put(store, b"k1", b"q", b"1");
    put(store, b"k3", b"q", b"3");
    store
        .mutate_row(
            T,
            b"k4",
            &[Mutation::set("b", b"q".to_vec(), b"4".to_vec())],
        )
        .unwrap();
    let keys = vec![
        b"k3".to_vec(),
        b"k2".to_vec(),
        b"k1".to_vec(),
        b"k4".to_vec(),
    ];
    let rows = store.get_rows(T, &keys, &ReadOptions::family("a")).unwrap();
    let values: Vec<Option<Vec<u8>>> = rows
        .iter()
        .map(|r| {
            r.as_ref()
                .and_then(|r| r.value("a", b"q"))
                .map(<[u8]>::to_vec)
        })
        .collect();
    assert_eq!(
        values,
        vec![Some(b"3".to_vec()), None, Some(b"1".to_vec()), None],
        "k4 has no cell in family a"
    );
    assert!(
        store
            .get_rows(T, &[], &ReadOptions::default())
            .unwrap()
            .is_empty()
    );
}

pub fn appends_concatenate_and_racing_appends_lose_nothing(store: &Arc<dyn Store>) {
    setup(store);
    store.append(T, b"a", "one", b"q", b"one,").unwrap();
    store.append(T, b"a", "one", b"q", b"two,").unwrap();
    let row = store.get(T, b"a", &ReadOptions::latest()).unwrap().unwrap();
    assert_eq!(row.value("one", b"q"), Some(&b"one,two,"[..]));
    // Four writers, fifty appends each: every one lands exactly once.
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let store = Arc::clone(store);
            s.spawn(move || {
                for i in 0..50u8 {
                    store.append(T, b"race", "one", b"q", &[t, i]).unwrap();
                }
            });
        }
    });
    let row = store
        .get(T, b"race", &ReadOptions::latest())
        .unwrap()
        .unwrap();
    let value = row.value("one", b"q").unwrap();
    assert_eq!(value.len(), 400);
    let mut pairs: Vec<&[u8]> = value.chunks(2).collect();
    pairs.sort();
    pairs.dedup();
    assert_eq!(pairs.len(), 200);
}

pub fn increment_many_moves_each_counter_of_a_row(store: &Arc<dyn Store>) {
    setup(store);
    store.increment(T, b"c", "a", b"s", 5).unwrap();
    let values = store
        .increment_many(
            T,
            b"c",
            &[
                Increment::new("a", b"s".to_vec(), 2),
                Increment::new("a", b"k\x00\x01".to_vec(), 1),
                Increment::new("one", b"s".to_vec(), -3),
            ],
        )
        .unwrap();
    assert_eq!(values, vec![7, 1, -3], "new values in the order asked");
    let row = get(store, b"c").unwrap();
    assert_eq!(row.value("a", b"s"), Some(&7i64.to_be_bytes()[..]));
    assert_eq!(row.value("a", b"k\x00\x01"), Some(&1i64.to_be_bytes()[..]));
    assert_eq!(row.value("one", b"s"), Some(&(-3i64).to_be_bytes()[..]));
    assert_eq!(
        store.increment_many(T, b"c", &[]).unwrap(),
        Vec::<i64>::new()
    );
    // A column named twice is refused before anything moves.
    let twice = [
        Increment::new("a", b"s".to_vec(), 1),
        Increment::new("a", b"s".to_vec(), 1),
    ];
    let err = store.increment_many(T, b"c", &twice).unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::InvalidInput);
    assert_eq!(
        get(store, b"c").unwrap().value("a", b"s"),
        Some(&7i64.to_be_bytes()[..])
    );
    // A value that is not a counter is refused; an unknown family is not found.
    put(store, b"bad", b"c", b"abc");
    let err = store
        .increment_many(T, b"bad", &[Increment::new("a", b"c".to_vec(), 1)])
        .unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::InvalidInput);
    let err = store
        .increment_many(T, b"c", &[Increment::new("zz", b"s".to_vec(), 1)])
        .unwrap_err();
    assert_eq!(err.kind(), crate::ErrorKind::NotFound);
}

pub fn concurrent_increment_many_lose_nothing(store: &Arc<dyn Store>) {
    setup(store);
    std::thread::scope(|s| {
        for _ in 0..4 {
            let store = Arc::clone(store);
            s.spawn(move || {
                for _ in 0..50 {
                    store
                        .increment_many(
                            T,
                            b"ctr",
                            &[
                                Increment::new("a", b"x".to_vec(), 1),
                                Increment::new("a", b"y".to_vec(), 2),
                            ],
                        )
                        .unwrap();
                }
            });
        }
    });
    let row = get(store, b"ctr").unwrap();
    assert_eq!(row.value("a", b"x"), Some(&200i64.to_be_bytes()[..]));
    assert_eq!(row.value("a", b"y"), Some(&400i64.to_be_bytes()[..]));
}

pub fn keys_only_reads_return_cells_without_values(store: &Arc<dyn Store>) {
    setup(store);
    store
        .mutate_row(
            T,
            b"r1",
            &[
                Mutation::set_at("a", b"q1".to_vec(), 10, b"value one".to_vec()),
                Mutation::set_at("a", b"q1".to_vec(), 20, b"newer".to_vec()),
                Mutation::set_at("b", b"q2".to_vec(), 30, vec![0xFF; 100]),
            ],
        )
        .unwrap();
    put(store, b"r2", b"q3", b"");
    let shape = |row: &Row| -> Vec<(String, Vec<u8>, i64, usize)> {
        row.cells
            .iter()
            .map(|c| {
                (
                    c.family.clone(),
                    c.qualifier.clone(),
                    c.timestamp,
                    c.value.len(),
                )
            })
            .collect()
    };
    let read = crate::ReadOptions::keys_only();
    let row = store.get(T, b"r1", &read).unwrap().unwrap();
    assert_eq!(
        shape(&row),
        vec![
            ("a".to_string(), b"q1".to_vec(), 20, 0),
            ("a".to_string(), b"q1".to_vec(), 10, 0),
            ("b".to_string(), b"q2".to_vec(), 30, 0),
        ]
    );
    let rows = store
        .get_rows(T, &[b"r1".to_vec(), b"none".to_vec()], &read)
        .unwrap();
    assert_eq!(rows[0].as_ref().map(shape), Some(shape(&row)));
    assert_eq!(rows[1], None);
    // Combined with the other filters, in a scan: the same rows as a full read, no values.
    let request = ScanRequest {
        read: ReadOptions {
            keys_only: true,
            latest_only: true,
            families: Some(vec!["a".to_string()]),
            ..ReadOptions::default()
        },
        ..ScanRequest::default()
    };
    let rows: Vec<Row> = store
        .scan(T, &request)
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(
        rows.iter()
            .map(|r| (r.key.clone(), shape(r)))
            .collect::<Vec<_>>(),
        vec![
            (
                b"r1".to_vec(),
                vec![("a".to_string(), b"q1".to_vec(), 20, 0)]
            ),
            (
                b"r2".to_vec(),
                vec![(
                    "a".to_string(),
                    b"q3".to_vec(),
                    rows[1].cells[0].timestamp,
                    0
                )]
            ),
        ]
    );
    // Values are still there for an ordinary read.
    assert_eq!(
        get(store, b"r1").unwrap().value("a", b"q1"),
        Some(&b"newer"[..])
    );
}

pub fn a_row_is_replaced_by_deleting_it_then_setting_cells(store: &Arc<dyn Store>) {
    setup(store);
    store
        .mutate_row(
            T,
            b"r",
            &[
                Mutation::set_at("a", b"old".to_vec(), 5, b"1".to_vec()),
                Mutation::set_at("one", b"q".to_vec(), 5, b"2".to_vec()),
            ],
        )
        .unwrap();
    let replace = |key: &[u8], value: &[u8]| RowMutation {
        key: key.to_vec(),
        mutations: vec![
            Mutation::DeleteRow,
            Mutation::set_at("one", b"q".to_vec(), 7, value.to_vec()),
        ],
    };
    store.mutate_rows(T, &[replace(b"r", b"new")]).unwrap();
    let cells: Vec<(String, Vec<u8>, i64, Vec<u8>)> = get(store, b"r")
        .unwrap()
        .cells
        .into_iter()
        .map(|c| (c.family, c.qualifier, c.timestamp, c.value))
        .collect();
    assert_eq!(
        cells,
        vec![("one".to_string(), b"q".to_vec(), 7, b"new".to_vec())]
    );
    // Twice in one batch, and on a row that does not exist: the last one stands.
    store
        .mutate_rows(T, &[replace(b"r", b"x"), replace(b"r", b"y")])
        .unwrap();
    assert_eq!(
        get(store, b"r").unwrap().value("one", b"q"),
        Some(&b"y"[..])
    );
    store.mutate_rows(T, &[replace(b"fresh", b"z")]).unwrap();
    assert_eq!(get(store, b"fresh").unwrap().cells.len(), 1);
}

/// `put_cells` replaces each row with its one cell, as a `DeleteRow` then a set would: in
/// small and large batches (the embedded store writes a large sorted one as a table file),
/// sorted or not (a repeated key: the last stands); an unknown family is an error.
pub fn one_cell_rows_replace_rows_whole(store: &Arc<dyn Store>) {
    setup(store);
    let cells = |key: &[u8]| -> Vec<(String, Vec<u8>, i64, Vec<u8>)> {
        get(store, key)
            .map(|r| {
                r.cells
                    .into_iter()
                    .map(|c| (c.family, c.qualifier, c.timestamp, c.value))
                    .collect()
            })
            .unwrap_or_default()
    };
    let one = |key: &'static [u8], value: &'static [u8]| CellRow {
        key,
        family: "one",
        qualifier: b"q",
        timestamp: 7,
        value,
    };
    store
        .mutate_row(
            T,
            b"r",
            &[
                Mutation::set_at("a", b"old".to_vec(), 5, b"1".to_vec()),
                Mutation::set_at("one", b"q".to_vec(), 5, b"2".to_vec()),
            ],
        )
        .unwrap();
    store.put_cells(T, &[one(b"r", b"new")]).unwrap();
    assert_eq!(
        cells(b"r"),
        vec![("one".to_string(), b"q".to_vec(), 7, b"new".to_vec())]
    );
    // Not sorted, a key twice: the last stands.
    store
        .put_cells(T, &[one(b"s", b"1"), one(b"r", b"x"), one(b"r", b"y")])
        .unwrap();
    assert_eq!(
        get(store, b"r").unwrap().value("one", b"q"),
        Some(&b"y"[..])
    );
    assert_eq!(
        get(store, b"s").unwrap().value("one", b"q"),
        Some(&b"1"[..])
    );
    // Many rows in key order, some replacing rows of several cells, empty values among them.
    let keys: Vec<Vec<u8>> = (0..1000u32)
        .map(|i| [b"m".as_slice(), &i.to_be_bytes()].concat())
        .collect();
    for key in keys.iter().step_by(7) {
        store
            .mutate_row(
                T,
                key,
                &[
                    Mutation::set_at("a", b"x".to_vec(), 1, b"old".to_vec()),
                    Mutation::set_at("b", b"y".to_vec(), 1, b"old".to_vec()),
                ],
            )
            .unwrap();
    }
    let values: Vec<Vec<u8>> = (0..1000u32)
        .map(|i| {
            if i % 2 == 0 {
                Vec::new()
            } else {
                i.to_be_bytes().to_vec()
            }
        })
        .collect();
    let rows: Vec<CellRow<'_>> = keys
        .iter()
        .zip(&values)
        .map(|(key, value)| CellRow {
            key,
            family: "b",
            qualifier: b"s",
            timestamp: 86_400_000,
            value,
        })
        .collect();
    store.put_cells(T, &rows).unwrap();
    let scanned: Vec<Row> = store
        .scan(T, &ScanRequest::prefix(b"m"))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(scanned.len(), 1000);
    for ((row, key), value) in scanned.iter().zip(&keys).zip(&values) {
        assert_eq!(&row.key, key);
        let got: Vec<(&str, &[u8], i64, &[u8])> = row
            .cells
            .iter()
            .map(|c| {
                (
                    c.family.as_str(),
                    c.qualifier.as_slice(),
                    c.timestamp,
                    c.value.as_slice(),
                )
            })
            .collect();
        assert_eq!(got, vec![("b", &b"s"[..], 86_400_000, value.as_slice())]);
    }
    let unknown = CellRow {
        family: "nope",
        ..one(b"t", b"1")
    };
    assert!(store.put_cells(T, &[unknown]).is_err());
}

/// `scan_cells` visits the rows `scan` returns, in its order, each with its cells, under
/// every filter, also rows a store may lend as columns (one family, one qualifier length:
/// each column then gives the cells' qualifiers and values); a visitor's error ends the
/// scan with that error.
pub fn lent_cells_are_the_scanned_cells(store: &Arc<dyn Store>) {
    setup(store);
    // Rows of uniform cells (one family, 2-byte qualifiers), one time or several.
    for (i, key) in [&b"t1"[..], b"t2", b"t3"].iter().enumerate() {
        let t = i as i64;
        let mut cells = vec![
            Mutation::set_at("a", b"c1".to_vec(), 30, vec![i as u8; i]),
            Mutation::set_at("a", b"c0".to_vec(), 30 + t, b"xyz".to_vec()),
            Mutation::set_at(
                "a",
                b"c2".to_vec(),
                30,
                vec![7; if i == 1 { 200 } else { 100 }],
            ),
        ];
        if i == 2 {
            // A second version of one qualifier.
            cells.push(Mutation::set_at("a", b"c0".to_vec(), 20, b"old".to_vec()));
        }
        store.mutate_row(T, key, &cells).unwrap();
    }
    for (i, key) in [&b"r1"[..], b"r2", b"r3", b"s1", b"\xFFz"]
        .iter()
        .enumerate()
    {
        let t = i as i64;
        store
            .mutate_row(
                T,
                key,
                &[
                    Mutation::set_at("a", b"q1".to_vec(), 10 + t, vec![1, i as u8]),
                    Mutation::set_at("a", b"q1".to_vec(), 20 + t, vec![2; 300]),
                    Mutation::set_at("a", b"q2".to_vec(), 30, b"v".to_vec()),
                    Mutation::set_at("b", b"".to_vec(), 40, b"w".to_vec()),
                    Mutation::set_at("one", b"q".to_vec(), 50 + t, b"x".to_vec()),
                ],
            )
            .unwrap();
    }
    let requests = [
        ScanRequest::default(),
        ScanRequest {
            start: b"r2".to_vec(),
            end: Some(b"s2".to_vec()),
            ..Default::default()
        },
        ScanRequest {
            key_regex: Some("r.".into()),
            limit: Some(2),
            ..Default::default()
        },
        ScanRequest {
            read: ReadOptions {
                families: Some(vec!["a".into()]),
                time_range: TimeRange::new(12, Some(31)),
                ..Default::default()
            },
            ..Default::default()
        },
        ScanRequest {
            read: ReadOptions {
                latest_only: true,
                keys_only: true,
                ..Default::default()
            },
            ..Default::default()
        },
        // No cell passes: no row.
        ScanRequest {
            read: ReadOptions {
                time_range: TimeRange::new(1000, None),
                ..Default::default()
            },
            ..Default::default()
        },
    ];
    for request in &requests {
        let scanned: Vec<Row> = store
            .scan(T, request)
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        let mut lent: Vec<Row> = Vec::new();
        store
            .scan_cells(T, request, &mut |key, row| {
                if let crate::LentCells::Columns(columns) = row {
                    // The columns are the cells'.
                    let mut cells = Vec::new();
                    columns.lend(&mut cells);
                    assert_eq!(cells.len(), columns.len());
                    let q = columns.qualifier_len();
                    for (i, (c, v)) in cells.iter().zip(columns.values(0..cells.len())).enumerate()
                    {
                        assert_eq!(c.family, columns.family());
                        assert_eq!(c.qualifier, columns.qualifier(i));
                        assert_eq!(c.qualifier, &columns.qualifiers()[i * q..(i + 1) * q]);
                        assert_eq!(c.value, v);
                        let tail: Vec<&[u8]> = columns.values(i..cells.len()).collect();
                        assert_eq!(tail.first(), Some(&v));
                        let (lens, bytes) = columns.value_run(i..cells.len());
                        assert_eq!(lens.len(), cells.len() - i);
                        assert_eq!(&bytes[..usize::from(lens[0])], v);
                    }
                }
                let mut buf = Vec::new();
                let cells = row.cells(&mut buf);
                lent.push(Row {
                    key: key.to_vec(),
                    cells: cells
                        .iter()
                        .map(|c| crate::Cell {
                            family: c.family.to_string(),
                            qualifier: c.qualifier.to_vec(),
                            timestamp: c.timestamp,
                            value: c.value.to_vec(),
                            form: c.form,
                        })
                        .collect(),
                });
                Ok(())
            })
            .unwrap();
        assert_eq!(lent, scanned, "{request:?}");
    }
    assert!(
        store
            .scan_cells(T, &ScanRequest::default(), &mut |key, _| {
                assert_eq!(key, b"r1");
                Err(crate::Error::Unavailable("stop".into()))
            })
            .is_err_and(|e| e == crate::Error::Unavailable("stop".into())),
        "a visitor's error ends the scan"
    );
    assert!(
        store
            .scan_cells("nope", &ScanRequest::default(), &mut |_, _| Ok(()))
            .is_err()
    );
}

/// `scan_joint` hands over the rows `scan` returns, in its order, with or without
/// `joint_rows` (a table the store keeps no groups of has none to lend); a visitor's error
/// ends the scan with that error.
pub fn joint_scans_hand_over_the_scanned_rows(store: &Arc<dyn Store>) {
    setup(store);
    for (i, key) in [&b"r1"[..], b"r2", b"r3", b"s1", b"\xFFz"]
        .iter()
        .enumerate()
    {
        let t = i as i64;
        store
            .mutate_row(
                T,
                key,
                &[
                    Mutation::set_at("a", b"q1".to_vec(), 10 + t, vec![1, i as u8]),
                    Mutation::set_at("a", b"q2".to_vec(), 30, b"v".to_vec()),
                    Mutation::set_at("b", b"".to_vec(), 40, b"w".to_vec()),
                ],
            )
            .unwrap();
    }
    let requests = [
        ScanRequest::default(),
        ScanRequest {
            start: b"r2".to_vec(),
            end: Some(b"s2".to_vec()),
            limit: Some(2),
            ..Default::default()
        },
        ScanRequest {
            read: ReadOptions {
                families: Some(vec!["a".into()]),
                time_range: TimeRange::new(12, Some(31)),
                ..Default::default()
            },
            ..Default::default()
        },
    ];
    for request in &requests {
        for joint_rows in [false, true] {
            let request = ScanRequest {
                read: ReadOptions {
                    joint_rows,
                    ..request.read.clone()
                },
                ..request.clone()
            };
            let scanned: Vec<Row> = store
                .scan(T, &request)
                .unwrap()
                .map(|r| r.unwrap())
                .collect();
            let mut handed: Vec<Row> = Vec::new();
            store
                .scan_joint(T, &request, &mut |item| {
                    match item {
                        crate::Scanned::Row(row) => handed.push(row),
                        crate::Scanned::Group(g) => panic!("a group lent from {:?}", g.key),
                    }
                    Ok(())
                })
                .unwrap();
            assert_eq!(handed, scanned, "{request:?}");
        }
    }
    assert!(
        store
            .scan_joint(T, &ScanRequest::default(), &mut |item| {
                assert!(matches!(item, crate::Scanned::Row(ref r) if r.key == b"r1"));
                Err(crate::Error::Unavailable("stop".into()))
            })
            .is_err_and(|e| e == crate::Error::Unavailable("stop".into())),
        "a visitor's error ends the scan"
    );
    assert!(
        store
            .scan_joint("nope", &ScanRequest::default(), &mut |_| Ok(()))
            .is_err()
    );
}

/// [`Store::make_table_durable`] leaves every cell as it read: every version, timestamp and
/// value, counters too, rows written singly and in a large batch, a deleted row still gone.
pub fn making_a_table_durable_changes_no_cell(store: &Arc<dyn Store>) {
    setup(store);
    store
        .mutate_row(
            T,
            b"versions",
            &[
                Mutation::set_at("a", b"q".to_vec(), 10, b"old".to_vec()),
                Mutation::set_at("a", b"q".to_vec(), 20, b"new".to_vec()),
                Mutation::set_at("b", vec![0xFF], 5, vec![0, 0xFF]),
                Mutation::set_at("one", b"q".to_vec(), 7, b"only".to_vec()),
            ],
        )
        .unwrap();
    store.increment(T, b"counter", "a", b"n", 41).unwrap();
    let batch: Vec<RowMutation> = (0u32..300)
        .map(|i| RowMutation {
            key: i.to_be_bytes().to_vec(),
            mutations: vec![Mutation::set_at(
                "a",
                b"q".to_vec(),
                1,
                i.to_le_bytes().to_vec(),
            )],
        })
        .collect();
    store.mutate_rows(T, &batch).unwrap();
    put(store, b"gone", b"q", b"v");
    store
        .mutate_row(T, b"gone", &[Mutation::DeleteRow])
        .unwrap();
    let all = |store: &Arc<dyn Store>| -> Vec<Row> {
        store
            .scan(T, &ScanRequest::default())
            .unwrap()
            .map(|r| r.unwrap())
            .collect()
    };
    let before = all(store);
    assert_eq!(before.len(), 302);
    store.make_table_durable(T).unwrap();
    assert_eq!(all(store), before);
    assert_eq!(store.increment(T, b"counter", "a", b"n", 1).unwrap(), 42);
    assert!(store.make_table_durable("no such table").is_err());
}
