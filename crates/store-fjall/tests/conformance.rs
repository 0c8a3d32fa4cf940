#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::sync::Arc;

use hourglass_store_fjall::FjallStore;

fn make() -> Arc<dyn hourglass_storage::Store> {
    // The directory lives as long as the test process; each case gets its own.
    let dir = tempfile::tempdir().expect("temp dir").keep();
    Arc::new(FjallStore::open(&dir).expect("open store"))
}

hourglass_storage::conformance_tests!(make);

/// A row of uniform cells (one family, one qualifier length, one write time) is lent as its
/// columns (RFC 0011), the same cells; under `latest_only` or a time range cutting it, one
/// by one.
#[test]
fn uniform_rows_are_lent_as_columns() {
    use hourglass_storage::{
        FamilySpec, LentCells, Mutation, ReadOptions, ScanRequest, TableSpec, TimeRange,
    };
    let store = make();
    store
        .create_table(&TableSpec {
            name: "r".into(),
            families: vec![FamilySpec::new("t", None)],
        })
        .unwrap();
    let cells: Vec<Mutation> = (0u8..5)
        .map(|i| Mutation::set_at("t", vec![i, 0, 0], 1000, vec![i; usize::from(i)]))
        .collect();
    store.mutate_row("r", b"k", &cells).unwrap();
    let lent = |read: ReadOptions| {
        let mut columns = 0;
        let mut got = Vec::new();
        let request = ScanRequest {
            read,
            ..Default::default()
        };
        store
            .scan_cells("r", &request, &mut |_, row| {
                if let LentCells::Columns(c) = row {
                    columns += 1;
                    assert_eq!((c.len(), c.qualifier_len(), c.family()), (5, 3, "t"));
                    assert_eq!(c.qualifier(4), &[4, 0, 0]);
                    let values: Vec<&[u8]> = c.values(3..5).collect();
                    assert_eq!(values, vec![&[3u8, 3, 3][..], &[4, 4, 4, 4][..]]);
                }
                let mut buf = Vec::new();
                got.extend(row.cells(&mut buf).iter().map(|c| c.value.to_vec()));
                Ok(())
            })
            .unwrap();
        (columns, got.len())
    };
    assert_eq!(lent(ReadOptions::default()), (1, 5));
    let within = ReadOptions {
        time_range: TimeRange::new(1000, Some(1001)),
        ..Default::default()
    };
    assert_eq!(lent(within), (1, 5));
    assert_eq!(lent(ReadOptions::latest()), (0, 5));
    let before = ReadOptions {
        time_range: TimeRange::new(0, Some(1000)),
        ..Default::default()
    };
    assert_eq!(lent(before), (0, 0));
}
