#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Series-period groups (RFC 0006) against a model: any mix of writes, deletes and grouping
//! passes leaves every row readable exactly as the memory store (key order, no groups) has
//! it, and scans return the same rows in period order. The table's codec takes most one-cell
//! rows jointly, so groups are written in format 0x02 with every member shape. Without a
//! codec (the grouped rollup tiers of RFC 0012), groups hold row values (format 0x01, rows of
//! several cells as column rows), and the cells `scan_cells` lends from them are the
//! scanned rows' cells.

use std::path::Path;
use std::sync::Arc;

use hourglass_storage::memory::MemoryStore;
use hourglass_storage::model::{decode_joint_row, encode_joint_row};
use hourglass_storage::{
    Cell, CellCodec, CellForm, Error, FamilySpec, JointCell, JointForm, JointMember, JointShape,
    Mutation, ReadOptions, Row, RowMutation, ScanRequest, Scanned, SkipHint, Store, TableSpec,
    TimeRange,
};
use hourglass_store_fjall::{FjallStore, Grouping};
use proptest::prelude::*;

const TABLE: &str = "tsdb";
/// Keys: metric (1 byte) | base hour (4 bytes) | series (1 byte, or 2 for a longer series).
const GROUPING: Grouping = Grouping {
    timestamp_offset: 1,
    period_secs: 7200,
    grace_secs: 0,
};

fn spec() -> TableSpec {
    TableSpec {
        name: TABLE.into(),
        families: vec![FamilySpec::new("t", Some(1))],
    }
}

/// A joint codec (RFC 0006, group format 0x02) for the model: it takes a row's only cell of
/// qualifier `[0]`, `[1]` or `[2]` unless its value's first byte is 7 modulo 8 (those stay
/// row values); the cell's shape has the value's length plus one points and meta byte
/// `Some(q)` (`None` for 2), so every joint shape occurs; the stream is `A7` then the values.
#[derive(Debug)]
struct Joint;

impl CellCodec for Joint {
    fn encode(&self, _family: &str, _qualifier: &[u8], _value: &[u8]) -> Option<Vec<u8>> {
        None
    }
    fn decode(
        &self,
        _family: &str,
        _encoded: &[u8],
    ) -> hourglass_storage::Result<(Vec<u8>, Vec<u8>)> {
        Err(Error::Corrupt("no blobs".into()))
    }
    fn encode_joint(&self, _family: &str, cells: &[JointCell<'_>]) -> Option<JointForm> {
        let mut stream = vec![0xA7];
        let shapes: Vec<Option<JointShape>> = cells
            .iter()
            .map(|c| match c.qualifier {
                [q @ 0..=2] if c.value.first().is_none_or(|v| v % 8 != 7) => {
                    stream.extend_from_slice(c.value);
                    Some(JointShape {
                        points: c.value.len() as u32 + 1,
                        meta: (*q < 2).then_some(*q),
                    })
                }
                _ => None,
            })
            .collect();
        shapes
            .iter()
            .any(Option::is_some)
            .then_some((shapes, stream))
    }
    fn decode_joint(
        &self,
        _family: &str,
        stream: &[u8],
        members: &[JointMember],
    ) -> hourglass_storage::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let bad = || Error::Corrupt("bad stream".into());
        let (first, mut rest) = stream.split_first().ok_or_else(bad)?;
        if *first != 0xA7 {
            return Err(bad());
        }
        let mut out = Vec::new();
        for m in members {
            let n = m.shape.points as usize - 1;
            let value = rest.get(..n).ok_or_else(bad)?;
            rest = &rest[n..];
            out.push((vec![m.shape.meta.unwrap_or(2)], value.to_vec()));
        }
        if rest.is_empty() { Ok(out) } else { Err(bad()) }
    }
}

fn open(dir: &Path, grouped: bool, codec: bool) -> FjallStore {
    let store = FjallStore::open(dir).unwrap();
    let store = if codec {
        store.with_cell_codec(TABLE, Arc::new(Joint))
    } else {
        store
    };
    let store = if grouped {
        store.with_grouping(TABLE, GROUPING)
    } else {
        store
    };
    store.create_table(&spec()).unwrap();
    store
}

fn key(metric: u8, hour: u32, series: u8) -> Vec<u8> {
    let mut k = vec![metric];
    k.extend_from_slice(&(hour * 3600).to_be_bytes());
    k.push(series);
    if series >= 3 {
        k.push(0xFF); // a longer series key beside the short ones
    }
    k
}

#[derive(Debug, Clone)]
enum Op {
    Put(Vec<u8>, u8, u8),
    /// A cell of 2,500 bytes: a group of two such members fills a data block, which a
    /// series filter refusing it seeks past at once.
    PutLarge(Vec<u8>, u8, u8),
    DeleteCell(Vec<u8>, u8),
    DeleteRow(Vec<u8>),
    /// Several rows in one call (a flush), a key possibly twice.
    Batch(Vec<(Vec<u8>, u8, u8)>),
    /// A grouping pass at this many hours.
    Maintain(u32),
    Reopen,
}

fn any_key() -> impl Strategy<Value = Vec<u8>> {
    (1u8..3, 0u32..8, 0u8..4).prop_map(|(m, h, s)| key(m, h, s))
}

fn any_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any_key(), 0u8..3, any::<u8>()).prop_map(|(k, q, v)| Op::Put(k, q, v)),
        2 => (any_key(), 0u8..3, any::<u8>()).prop_map(|(k, q, v)| Op::PutLarge(k, q, v)),
        1 => (any_key(), 0u8..3).prop_map(|(k, q)| Op::DeleteCell(k, q)),
        1 => any_key().prop_map(Op::DeleteRow),
        2 => prop::collection::vec((any_key(), 0u8..3, any::<u8>()), 1..12).prop_map(Op::Batch),
        2 => (0u32..12).prop_map(Op::Maintain),
        1 => Just(Op::Reopen),
    ]
}

fn mutations(op: &Op) -> Vec<RowMutation> {
    let set = |k: &Vec<u8>, q: u8, v: u8| RowMutation {
        key: k.clone(),
        mutations: vec![Mutation::set_at("t", vec![q], 1, vec![v])],
    };
    match op {
        Op::Put(k, q, v) => vec![set(k, *q, *v)],
        Op::PutLarge(k, q, v) => vec![RowMutation {
            key: k.clone(),
            mutations: vec![Mutation::set_at("t", vec![*q], 1, vec![*v; 2500])],
        }],
        Op::DeleteCell(k, q) => vec![RowMutation {
            key: k.clone(),
            mutations: vec![Mutation::DeleteCells {
                family: "t".into(),
                qualifier: vec![*q],
                range: TimeRange::ALL,
            }],
        }],
        Op::DeleteRow(k) => vec![RowMutation {
            key: k.clone(),
            mutations: vec![Mutation::DeleteRow],
        }],
        Op::Batch(rows) => rows.iter().map(|(k, q, v)| set(k, *q, *v)).collect(),
        Op::Maintain(_) | Op::Reopen => Vec::new(),
    }
}

fn scan(store: &dyn Store, request: &ScanRequest) -> Vec<Row> {
    store
        .scan(TABLE, request)
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

/// Period order: for one metric, periods never go back; each series (metric and the key
/// after the time) strictly forward in time; no row twice.
fn assert_period_order(rows: &[Row]) {
    let g = GROUPING;
    for (i, a) in rows.iter().enumerate() {
        for b in &rows[i + 1..] {
            assert_ne!(a.key, b.key, "a row twice");
            if a.key[0] != b.key[0] {
                continue;
            }
            let (ta, tb) = (
                u32::from_be_bytes(a.key[1..5].try_into().unwrap()),
                u32::from_be_bytes(b.key[1..5].try_into().unwrap()),
            );
            let (pa, pb) = (ta - ta % g.period_secs, tb - tb % g.period_secs);
            assert!(pa <= pb, "period went back: {:?} then {:?}", a.key, b.key);
            if a.key[5..] == b.key[5..] {
                assert!(ta < tb, "series went back: {:?} then {:?}", a.key, b.key);
            }
        }
    }
}

/// The hint of the regex `^.{5}\x01$` (series 1): a smaller series jumps to series 1 of
/// the same hour, a larger one past the hour.
fn series_one_hint() -> SkipHint {
    SkipHint(Arc::new(|key: &[u8]| {
        let series = *key.get(5)?;
        if series < 1 {
            let mut next = key[..5].to_vec();
            next.push(1);
            return Some(next);
        }
        let mut next = key[..5].to_vec();
        while let Some(last) = next.pop() {
            if last < 0xFF {
                next.push(last + 1);
                return Some(next);
            }
        }
        None
    }))
}

fn sorted(mut rows: Vec<Row>) -> Vec<Row> {
    rows.sort_by(|a, b| a.key.cmp(&b.key));
    rows
}

/// Joint rows (`CellForm::Joint`) as the member rows they stand for in `request`'s key range
/// (a joint row lists its group's members outside it too).
fn expand_joint_rows(rows: &[Row], request: &ScanRequest) -> Vec<Row> {
    let mut out = Vec::new();
    for row in rows {
        match row.cells.as_slice() {
            [cell] if cell.form == CellForm::Joint => {
                let (members, stream) = decode_joint_row(&cell.value).unwrap();
                assert!(!members.is_empty());
                let joint: Vec<JointMember> = members.iter().map(|(m, _)| *m).collect();
                let cells = Joint.decode_joint(&cell.family, stream, &joint).unwrap();
                let period = u32::from_be_bytes(row.key[1..5].try_into().unwrap());
                for ((m, timestamp), (qualifier, value)) in members.iter().zip(cells) {
                    let mut key = row.key.clone();
                    key[1..5].copy_from_slice(&(period + m.offset_secs).to_be_bytes());
                    if key < request.start || request.end.as_ref().is_some_and(|e| key >= *e) {
                        continue;
                    }
                    out.push(Row {
                        key,
                        cells: vec![Cell {
                            family: cell.family.clone(),
                            qualifier,
                            timestamp: *timestamp,
                            value,
                            form: CellForm::Plain,
                        }],
                    });
                }
            }
            _ => out.push(row.clone()),
        }
    }
    out
}

/// What `scan_joint` hands over, a group lent as the joint row `scan` returns for it (its
/// timestamps, when the store left them out, those `scan` gives).
fn lent_groups(store: &dyn Store, request: &ScanRequest) -> Vec<Row> {
    let joint = scan(store, request);
    let mut rows = Vec::new();
    let mut visit = |item: Scanned<'_>| {
        rows.push(match item {
            Scanned::Row(row) => row,
            Scanned::Group(g) => {
                let timestamps: Vec<i64> = if g.timestamps.is_empty() {
                    // Left out only where the read takes every time.
                    assert!(request.read.time_range.is_all());
                    let row = joint.iter().find(|r| r.key == g.key).unwrap();
                    let (members, _) = decode_joint_row(&row.cells[0].value).unwrap();
                    members.iter().map(|(_, t)| *t).collect()
                } else {
                    g.timestamps.to_vec()
                };
                assert_eq!(g.members.len(), timestamps.len());
                let members: Vec<(JointMember, i64)> =
                    g.members.iter().copied().zip(timestamps).collect();
                Row {
                    key: g.key.to_vec(),
                    cells: vec![Cell {
                        family: g.family.to_string(),
                        qualifier: Vec::new(),
                        timestamp: members.first().map_or(0, |(_, t)| *t),
                        value: encode_joint_row(&members, g.stream),
                        form: CellForm::Joint,
                    }],
                }
            }
        });
        Ok(())
    };
    store.scan_joint(TABLE, request, &mut visit).unwrap();
    rows
}

/// The rows `scan_cells` lends (a row lent as columns given its cells one by one).
fn lent(store: &dyn Store, request: &ScanRequest) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut visit = |key: &[u8], cells: hourglass_storage::LentCells<'_, '_>| {
        let mut buf = Vec::new();
        let cells = cells.cells(&mut buf);
        rows.push(Row {
            key: key.to_vec(),
            cells: cells
                .iter()
                .map(|c| Cell {
                    family: c.family.to_string(),
                    qualifier: c.qualifier.to_vec(),
                    timestamp: c.timestamp,
                    value: c.value.to_vec(),
                    form: c.form,
                })
                .collect(),
        });
        Ok(())
    };
    store.scan_cells(TABLE, request, &mut visit).unwrap();
    rows
}

/// The rows `scan_cells` lends with `series_rows` asked for, a series' rows lent together
/// given as the rows they are (their keys made from the first's and their base times), and
/// how many visits lent a series' rows. Checks what the store says of each row's layout:
/// a row said to have the layout of the row before has its qualifiers, value lengths and
/// cell time differences, and is in the same series, later.
fn lent_series(store: &dyn Store, request: &ScanRequest) -> (Vec<Row>, usize, usize) {
    let mut rows = Vec::new();
    let (mut series_visits, mut same_rows) = (0, 0);
    let request = ScanRequest {
        read: ReadOptions {
            series_rows: true,
            ..request.read.clone()
        },
        ..request.clone()
    };
    let row_of = |key: Vec<u8>, cells: &[hourglass_storage::CellRef<'_>]| Row {
        key,
        cells: cells
            .iter()
            .map(|c| Cell {
                family: c.family.to_string(),
                qualifier: c.qualifier.to_vec(),
                timestamp: c.timestamp,
                value: c.value.to_vec(),
                form: c.form,
            })
            .collect(),
    };
    let mut visit = |key: &[u8], cells: hourglass_storage::LentCells<'_, '_>| {
        let mut buf = Vec::new();
        match cells {
            hourglass_storage::LentCells::Series(series) => {
                series_visits += 1;
                assert!(!series.rows.is_empty());
                let at = series.base_at;
                assert_eq!(
                    u32::from_be_bytes(key[at..at + 4].try_into().unwrap()),
                    series.rows[0].base,
                    "the visit's key is the first row's"
                );
                // The row before's base time, (qualifier, value length) a cell, time steps.
                type Before = (u32, Vec<(Vec<u8>, usize)>, Vec<i64>);
                let mut before: Option<Before> = None;
                for r in series.rows {
                    assert!(
                        !r.same_layout || before.is_some(),
                        "a first row of its layout"
                    );
                    same_rows += usize::from(r.same_layout);
                    r.cells.lend(&mut buf);
                    let layout: Vec<(Vec<u8>, usize)> = buf
                        .iter()
                        .map(|c| (c.qualifier.to_vec(), c.value.len()))
                        .collect();
                    let steps: Vec<i64> = buf
                        .windows(2)
                        .map(|w| w[1].timestamp - w[0].timestamp)
                        .collect();
                    if let Some((base, l, d)) = &before {
                        assert!(r.base > *base, "rows of a series in time order");
                        if r.same_layout {
                            assert_eq!((&layout, &steps), (l, d), "a layout said the same");
                        }
                    }
                    let mut k = key.to_vec();
                    k[at..at + 4].copy_from_slice(&r.base.to_be_bytes());
                    rows.push(row_of(k, &buf));
                    before = Some((r.base, layout, steps));
                }
            }
            cells => {
                let cells = cells.cells(&mut buf);
                rows.push(row_of(key.to_vec(), cells));
            }
        }
        Ok(())
    };
    store.scan_cells(TABLE, &request, &mut visit).unwrap();
    (rows, series_visits, same_rows)
}

fn check(store: &dyn Store, model: &MemoryStore) {
    let read = ReadOptions::default();
    for m in 1u8..3 {
        for h in 0..8 {
            for s in 0..4 {
                let k = key(m, h, s);
                assert_eq!(
                    store.get(TABLE, &k, &read).unwrap(),
                    model.get(TABLE, &k, &read).unwrap(),
                    "get {k:?}"
                );
            }
        }
    }
    // Whole table, one metric, a range starting and ending mid-period, a regex.
    let requests = [
        ScanRequest::range(Vec::new(), None),
        ScanRequest::range(vec![1], Some(vec![2])),
        ScanRequest::range(key(2, 1, 2), Some(key(2, 6, 1))),
        ScanRequest {
            key_regex: Some("(?s)^.{5}\\x01$".into()),
            ..ScanRequest::range(Vec::new(), None)
        },
        // A series filter with a hint: groups of other series skipped by seeking.
        ScanRequest {
            key_regex: Some("(?s)^.{5}\\x01$".into()),
            skip: Some(series_one_hint()),
            series_filter: true,
            ..ScanRequest::range(Vec::new(), None)
        },
        ScanRequest {
            key_regex: Some("(?s)^.{5}\\x01$".into()),
            skip: Some(series_one_hint()),
            series_filter: true,
            ..ScanRequest::range(key(1, 1, 0), Some(key(2, 5, 0)))
        },
    ];
    for request in &requests {
        let got = scan(store, request);
        assert_period_order(&got);
        // Asked for joint rows: groups of joint members only come as one row each, which
        // expand to exactly the rows the plain scan returns, in its order.
        let joint_request = ScanRequest {
            read: ReadOptions {
                joint_rows: true,
                ..request.read.clone()
            },
            ..request.clone()
        };
        let joint = scan(store, &joint_request);
        assert_eq!(
            expand_joint_rows(&joint, request),
            got,
            "joint rows {request:?}"
        );
        // Lent, the same groups (their buffers reused from group to group), and without
        // joint rows asked for, the rows of the scan.
        assert_eq!(
            lent_groups(store, &joint_request),
            joint,
            "lent groups {request:?}"
        );
        assert_eq!(lent_groups(store, request), got, "lent rows {request:?}");
        assert_eq!(
            sorted(got.clone()),
            scan(model, request),
            "scan {request:?}"
        );
        // A limit returns the first rows of the same order.
        let limited = scan(
            store,
            &ScanRequest {
                limit: Some(3),
                ..request.clone()
            },
        );
        assert_eq!(limited, got.iter().take(3).cloned().collect::<Vec<_>>());
        // Lent cells are the scanned rows' (from groups' members too), whatever the read
        // keeps: every cell, a time range, keys only, newest only, another family, a limit.
        let reads = [
            ReadOptions::default(),
            ReadOptions {
                time_range: TimeRange::new(1, Some(2)),
                ..ReadOptions::default()
            },
            ReadOptions {
                time_range: TimeRange::new(2, None),
                ..ReadOptions::default()
            },
            ReadOptions {
                keys_only: true,
                ..ReadOptions::default()
            },
            ReadOptions {
                latest_only: true,
                ..ReadOptions::default()
            },
            ReadOptions {
                families: Some(vec!["u".into()]),
                ..ReadOptions::default()
            },
        ];
        for read in reads {
            let request = ScanRequest {
                read: ReadOptions {
                    joint_rows: request.read.joint_rows,
                    ..read
                },
                ..request.clone()
            };
            assert_eq!(
                lent(store, &request),
                scan(store, &request),
                "lent {request:?}"
            );
            // A series' rows lent together are the rows lent one by one (lent so only
            // where the read keeps each whole: never with a limit, keys only or newest only).
            let (series, visits, _) = lent_series(store, &request);
            assert_eq!(series, scan(store, &request), "lent series {request:?}");
            if request.read.keys_only || request.read.latest_only {
                assert_eq!(visits, 0);
            }
            let limited = ScanRequest {
                limit: Some(2),
                ..request.clone()
            };
            assert_eq!(
                lent(store, &limited),
                scan(store, &limited),
                "lent {limited:?}"
            );
            let (series, visits, _) = lent_series(store, &limited);
            assert_eq!(series, scan(store, &limited), "lent series {limited:?}");
            assert_eq!(visits, 0, "a limit lends rows one by one");
            // Groups lent as `scan` returns them as joint rows, under every read: a time
            // range or another family leaves a group to its members' rows.
            for limit in [None, Some(2)] {
                let joint = ScanRequest {
                    read: ReadOptions {
                        joint_rows: true,
                        ..request.read.clone()
                    },
                    limit,
                    ..request.clone()
                };
                assert_eq!(
                    lent_groups(store, &joint),
                    scan(store, &joint),
                    "lent groups {joint:?}"
                );
            }
        }
    }
}

fn run(ops: &[Op], codec: bool) {
    let dir = tempfile::tempdir().unwrap();
    let model = MemoryStore::new();
    model.create_table(&spec()).unwrap();
    let mut store = Arc::new(open(dir.path(), true, codec));
    for op in ops {
        match op {
            // The clock may go back (across a reopen, a period grouped before is open
            // again by it): rows then go to the row keyspace over their groups.
            Op::Maintain(hours) => store.maintain(i64::from(*hours) * 3_600_000).unwrap(),
            Op::Reopen => {
                drop(store);
                store = Arc::new(open(dir.path(), true, codec));
            }
            _ => {
                let rows = mutations(op);
                store.mutate_rows(TABLE, &rows).unwrap();
                model.mutate_rows(TABLE, &rows).unwrap();
            }
        }
        check(store.as_ref(), &model);
    }
    // Opened without grouping bound, the table is still grouped as its catalog says.
    drop(store);
    let plain = open(dir.path(), false, codec);
    check(&plain, &model);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn grouped_rows_read_as_the_model_has_them(ops in prop::collection::vec(any_op(), 1..40)) {
        run(&ops, true);
    }

    /// Without a codec (the grouped rollup tiers, RFC 0012): groups of row values, column
    /// rows among them, read and lent as the model's rows.
    #[test]
    fn grouped_rows_without_codec_read_and_lend_as_the_model_has_them(
        ops in prop::collection::vec(any_op(), 1..40),
    ) {
        run(&ops, false);
    }
}

#[test]
fn closed_periods_move_into_groups_and_late_writes_join_them() {
    let dir = tempfile::tempdir().unwrap();
    let model = MemoryStore::new();
    model.create_table(&spec()).unwrap();
    let mut store = Arc::new(open(dir.path(), true, true));
    let ops = [
        Op::Batch(vec![
            (key(1, 0, 1), 0, 1),
            (key(1, 1, 1), 0, 2),
            (key(1, 0, 2), 0, 3),
        ]),
        Op::Put(key(1, 2, 1), 0, 4),
        // Hours 0-1 close: their rows move into groups; hour 2 stays.
        Op::Maintain(2),
        // Late writes to the grouped period go to the group; a delete leaves it.
        Op::Put(key(1, 1, 2), 1, 5),
        Op::DeleteRow(key(1, 0, 1)),
        Op::Maintain(4),
        Op::Put(key(1, 3, 1), 2, 6),
        // Reopened, nothing is grouped by the clock until a pass: a delete of a grouped row
        // must still leave its group, and a write shadows it until the next pass.
        Op::Reopen,
        Op::DeleteRow(key(1, 1, 1)),
        Op::Put(key(1, 0, 2), 2, 7),
        Op::Maintain(3),
    ];
    for op in &ops {
        match op {
            Op::Maintain(h) => store.maintain(i64::from(*h) * 3_600_000).unwrap(),
            Op::Reopen => {
                drop(store);
                store = Arc::new(open(dir.path(), true, true));
            }
            _ => {
                store.mutate_rows(TABLE, &mutations(op)).unwrap();
                model.mutate_rows(TABLE, &mutations(op)).unwrap();
            }
        }
        check(store.as_ref(), &model);
    }
    // Period order: metric 1, period 0 series by series, then period 1 (hours 2-3).
    let keys: Vec<Vec<u8>> = scan(store.as_ref(), &ScanRequest::range(Vec::new(), None))
        .into_iter()
        .map(|r| r.key)
        .collect();
    assert_eq!(
        keys,
        vec![key(1, 0, 2), key(1, 1, 2), key(1, 2, 1), key(1, 3, 1)]
    );
    // Period 0 of series 2 is one group of joint members (hour 1's row of two cells is not
    // joint: the group comes as its rows); period 1 of series 1 (hours 2 and 3) comes as one
    // joint row keyed by the group.
    let joint = scan(
        store.as_ref(),
        &ScanRequest {
            read: ReadOptions {
                joint_rows: true,
                ..ReadOptions::default()
            },
            ..ScanRequest::range(Vec::new(), None)
        },
    );
    let forms: Vec<(Vec<u8>, CellForm)> = joint
        .iter()
        .map(|r| (r.key.clone(), r.cells[0].form))
        .collect();
    assert_eq!(
        forms,
        vec![
            (key(1, 0, 2), CellForm::Plain),
            (key(1, 1, 2), CellForm::Plain),
            (key(1, 2, 1), CellForm::Joint),
        ]
    );
    // A scan cutting period 1's group (from hour 3) still gets it as one joint row, listing
    // both members (the reader skips hour 2's); one ending before it gets nothing of it.
    let cut = |start: Vec<u8>, end: Vec<u8>| {
        scan(
            store.as_ref(),
            &ScanRequest {
                read: ReadOptions {
                    joint_rows: true,
                    ..ReadOptions::default()
                },
                ..ScanRequest::range(start, Some(end))
            },
        )
    };
    let from_hour_3 = cut(key(1, 3, 0), key(1, 4, 0));
    assert_eq!(from_hour_3.len(), 1);
    assert_eq!(from_hour_3[0].cells[0].form, CellForm::Joint);
    let (members, _) = decode_joint_row(&from_hour_3[0].cells[0].value).unwrap();
    let offsets: Vec<u32> = members.iter().map(|(m, _)| m.offset_secs).collect();
    assert_eq!(offsets, vec![0, 3600]);
    assert!(
        cut(key(1, 0, 0), key(1, 2, 0))
            .iter()
            .all(|r| r.key < key(1, 2, 0))
    );
}

#[test]
fn keyspace_bytes_and_visited_groups_account_for_what_is_held() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), true, true);
    let op = Op::Batch(vec![
        (key(1, 0, 1), 0, 10),
        (key(1, 1, 1), 1, 11),
        (key(1, 2, 1), 0, 12),
    ]);
    store.mutate_rows(TABLE, &mutations(&op)).unwrap();
    // Hours 0-1 close: series 1's period 0 is one group of two joint members; hour 2 stays
    // a row.
    store.maintain(2 * 3_600_000).unwrap();
    let mut groups = Vec::new();
    store
        .visit_groups(TABLE, &mut |g| {
            let (members, stream) = g.joint.expect("joint members");
            groups.push((g.key.to_vec(), g.value_len, members, stream.to_vec()));
        })
        .unwrap();
    assert_eq!(groups.len(), 1);
    let (group_key, value_len, members, stream) = &groups[0];
    assert_eq!(group_key, &key(1, 0, 1));
    let offsets: Vec<(u32, u32)> = members
        .iter()
        .map(|m| (m.offset_secs, m.shape.points))
        .collect();
    assert_eq!(offsets, vec![(0, 2), (3600, 2)]);
    assert_eq!(stream, &vec![0xA7, 10, 11]);
    assert!(*value_len > stream.len() + 1);
    let held = store.keyspace_bytes().unwrap();
    let names: Vec<&str> = held.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(names, vec!["_tables", "t:tsdb", "g:tsdb"]);
    let g = &held[2];
    assert_eq!(
        (g.entries, g.key_bytes, g.value_bytes),
        (1, group_key.len() as u64, *value_len as u64)
    );
    let t = &held[1];
    assert_eq!((t.entries, t.key_bytes), (1, key(1, 2, 1).len() as u64));
    assert_eq!(held[0].entries, 1);
    // A table without grouping has no groups to visit.
    let plain = TableSpec {
        name: "plain".into(),
        families: vec![FamilySpec::new("t", Some(1))],
    };
    store.create_table(&plain).unwrap();
    store
        .visit_groups("plain", &mut |_| panic!("no groups"))
        .unwrap();
}

#[test]
fn scans_racing_grouping_passes_see_every_row_once() {
    // A writer fills hour after hour (rows in the row keyspace while the hour is open), a
    // pass closes each hour behind it (moving its rows into groups), and readers scan all
    // the while, with a series filter that seeks: every row written before a scan began
    // is in it, none twice.
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(FjallStore::open(dir.path()).unwrap().with_grouping(
        TABLE,
        Grouping {
            timestamp_offset: 1,
            period_secs: 3600,
            grace_secs: 0,
        },
    ));
    store.create_table(&spec()).unwrap();
    let written = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (store, written, stop) =
                (Arc::clone(&store), Arc::clone(&written), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut scans = 0;
                while !stop.load(std::sync::atomic::Ordering::Acquire) {
                    let hours = written.load(std::sync::atomic::Ordering::Acquire);
                    let request = ScanRequest {
                        key_regex: Some("(?s)^.{5}\\x01$".into()),
                        skip: Some(series_one_hint()),
                        series_filter: true,
                        ..ScanRequest::range(vec![1], Some(vec![2]))
                    };
                    let keys: Vec<Vec<u8>> = scan(store.as_ref(), &request)
                        .into_iter()
                        .map(|r| r.key)
                        .collect();
                    let mut unique = keys.clone();
                    unique.sort();
                    unique.dedup();
                    assert_eq!(unique.len(), keys.len(), "a row twice");
                    for h in 0..hours {
                        assert!(
                            unique.binary_search(&key(1, h, 1)).is_ok(),
                            "hour {h} of series 1 missing ({hours} written, scan {scans})"
                        );
                    }
                    scans += 1;
                }
                scans
            })
        })
        .collect();
    for h in 0..300u32 {
        let rows: Vec<RowMutation> = (0..3u8)
            .map(|s| RowMutation {
                key: key(1, h, s),
                mutations: vec![Mutation::set_at("t", vec![0], 1, vec![s])],
            })
            .collect();
        store.maintain(i64::from(h) * 3_600_000).unwrap();
        store.mutate_rows(TABLE, &rows).unwrap();
        written.store(h + 1, std::sync::atomic::Ordering::Release);
    }
    stop.store(true, std::sync::atomic::Ordering::Release);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
}

/// A series filter over periods of many series: the scan reads on past the first few
/// refused groups toward the hint's target, then seeks there; either way it returns exactly
/// the matching rows, as the model does, plain and as joint rows.
#[test]
fn series_filters_read_on_then_seek_past_refused_groups() {
    let dir = tempfile::tempdir().unwrap();
    let model = MemoryStore::new();
    model.create_table(&spec()).unwrap();
    let store = open(dir.path(), true, true);
    // 40 one-byte series (none past 2 takes the longer key form here) over three periods.
    let mut rows = Vec::new();
    for h in 0..6u32 {
        for s in 0..40u8 {
            let mut k = vec![1u8];
            k.extend_from_slice(&(h * 3600).to_be_bytes());
            k.push(s);
            rows.push(RowMutation {
                key: k,
                mutations: vec![Mutation::set_at("t", vec![0], 1, vec![s.wrapping_mul(8)])],
            });
        }
    }
    store.mutate_rows(TABLE, &rows).unwrap();
    model.mutate_rows(TABLE, &rows).unwrap();
    store.maintain(12 * 3_600_000).unwrap();
    // Series 2 (two refused groups before it, read on past) and 37 (37 refused: a seek).
    for wanted in [2u8, 37] {
        let hint = SkipHint(Arc::new(move |key: &[u8]| {
            let series = *key.get(5)?;
            let mut next = key[..5].to_vec();
            if series < wanted {
                next.push(wanted);
                return Some(next);
            }
            let hour = u32::from_be_bytes(key[1..5].try_into().ok()?);
            let mut next = vec![1u8];
            next.extend_from_slice(&(hour + 3600).to_be_bytes());
            next.push(wanted);
            Some(next)
        }));
        let request = ScanRequest {
            key_regex: Some(format!("(?s)^.{{5}}\\x{wanted:02x}$")),
            skip: Some(hint),
            series_filter: true,
            ..ScanRequest::range(Vec::new(), None)
        };
        let got = scan(&store, &request);
        assert_eq!(got.len(), 6, "series {wanted}");
        assert_eq!(
            sorted(got.clone()),
            scan(&model, &request),
            "series {wanted}"
        );
        let joint_request = ScanRequest {
            read: ReadOptions {
                joint_rows: true,
                ..request.read.clone()
            },
            ..request.clone()
        };
        assert_eq!(
            expand_joint_rows(&scan(&store, &joint_request), &request),
            got,
            "series {wanted}"
        );
    }
}

/// A table without codec written ungrouped (a rollup tier before RFC 0012), then opened
/// with grouping bound: its rows read and lend the same before the first pass (all in the
/// row keyspace), after it (moved into groups as their stored values), and after late
/// writes into grouped periods (members rewritten, the others kept as stored).
#[test]
fn rows_written_before_grouping_read_the_same_once_grouped() {
    let dir = tempfile::tempdir().unwrap();
    let model = MemoryStore::new();
    model.create_table(&spec()).unwrap();
    let write = |store: &dyn Store, rows: &[RowMutation]| {
        store.mutate_rows(TABLE, rows).unwrap();
        model.mutate_rows(TABLE, rows).unwrap();
    };
    let cells = |k: Vec<u8>, n: u8, v: u8| RowMutation {
        key: k,
        mutations: (0..n)
            .map(|q| Mutation::set_at("t", vec![q], 1, vec![v.wrapping_add(q)]))
            .collect(),
    };
    {
        let store = open(dir.path(), false, false);
        let rows: Vec<RowMutation> = (0..8u32)
            .flat_map(|h| (0..3u8).map(move |s| (h, s)))
            .map(|(h, s)| cells(key(1, h, s), 1 + (h as u8 + s) % 4, h as u8 * 10 + s))
            .collect();
        write(&store, &rows);
        check(&store, &model);
    }
    let store = open(dir.path(), true, false);
    check(&store, &model);
    let whole = ScanRequest::range(Vec::new(), None);
    let before = lent(&store, &whole);
    store.maintain(6 * 3_600_000).unwrap();
    check(&store, &model);
    // The same rows and cells (in period order now, which `check` asserts).
    assert_eq!(sorted(lent(&store, &whole)), sorted(before));
    // Late writes into a grouped period: one member changed, one removed, one added.
    write(&store, &[cells(key(1, 0, 1), 3, 99)]);
    write(
        &store,
        &[RowMutation {
            key: key(1, 1, 1),
            mutations: vec![Mutation::DeleteRow],
        }],
    );
    write(&store, &[cells(key(2, 2, 0), 2, 7)]);
    check(&store, &model);
}

/// A grouped table without codec whose rows are column rows as a computed tier writes them
/// (the same qualifiers, values of one width, each row written at its own time): a series'
/// rows of a group come in one visit, most of them lent as the row before's layout, and
/// read exactly as the rows lent one by one; also with a row of another layout among them,
/// after a late write into a group, a member deleted, and under a time range cutting rows.
#[test]
fn a_series_rows_lent_together_read_as_lent_one_by_one() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), true, false);
    // Series 2's hour 5 has a two-byte value (its values longer), series 1's hour 3 another
    // qualifier in place of one (all else as long).
    let row = |hour: u32, series: u8| {
        let mutations = (0u8..3)
            .map(|q| {
                let v = hour as u8 * 3 + q + series;
                let value = if (series, hour, q) == (2, 5, 1) {
                    vec![v, 0x80]
                } else {
                    vec![v]
                };
                let q = if (series, hour, q) == (1, 3, 2) { 4 } else { q };
                Mutation::set_at("t", vec![q], 1_000 + i64::from(hour) * 7, value)
            })
            .collect();
        RowMutation {
            key: key(1, hour, series),
            mutations,
        }
    };
    let mut rows = Vec::new();
    for hour in 0..8 {
        for series in 1..3 {
            rows.push(row(hour, series));
        }
    }
    store.mutate_rows(TABLE, &rows).unwrap();
    // Hours 0-5 close into groups of two rows; 6 and 7 stay in the row keyspace.
    store.maintain(6 * 3_600_000).unwrap();
    let all = ScanRequest::range(Vec::new(), None);
    let check = |store: &dyn Store, request: &ScanRequest| {
        let (series, visits, same) = lent_series(store, request);
        assert_eq!(series, scan(store, request), "{request:?}");
        assert_eq!(series, lent(store, request), "{request:?}");
        (visits, same)
    };
    // 2 series x 3 groups; 4 of 6 second members of the layout of the first.
    assert_eq!(check(&store, &all), (6, 4));
    // A late write into a group (a cell of another qualifier: another layout), a member
    // deleted (as retention deletes), both read the same.
    store
        .mutate_rows(
            TABLE,
            &[
                RowMutation {
                    key: key(1, 1, 1),
                    mutations: vec![Mutation::set_at("t", vec![3], 5, vec![9])],
                },
                RowMutation {
                    key: key(1, 2, 2),
                    mutations: vec![Mutation::DeleteRow],
                },
            ],
        )
        .unwrap();
    assert_eq!(check(&store, &all), (6, 2));
    // A time range keeping some rows' cells whole and leaving others: those groups go a
    // row at a time.
    let cut = ScanRequest {
        read: ReadOptions {
            time_range: TimeRange::new(1_000, Some(1_020)),
            ..ReadOptions::default()
        },
        ..all.clone()
    };
    let (visits, _) = check(&store, &cut);
    assert!(visits > 0 && visits < 6, "{visits}");
    // A key range starting within a group: its members before the start are not lent.
    let from = ScanRequest::range(key(1, 3, 1), None);
    let (visits, _) = check(&store, &from);
    assert!(visits > 0);
}

/// Groups a data block or more in size (each passed would be a block read): a series filter
/// seeks past a refused one at once, to the wanted series' group of the same period or to
/// the next period. The wanted series found whatever their neighbours: a series whose key
/// is another's with a byte more (both ways), in every period, with rows written since the
/// grouping pass still in memory (one replacing a grouped member, others in an open
/// period), read as the model has them, plain and as joint rows.
#[test]
fn series_filters_seek_past_large_groups_at_once() {
    for codec in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let model = MemoryStore::new();
        model.create_table(&spec()).unwrap();
        let store = open(dir.path(), true, codec);
        let row = |hour: u32, series: &[u8], fill: u8| {
            let mut k = vec![1u8];
            k.extend_from_slice(&(hour * 3600).to_be_bytes());
            k.extend_from_slice(series);
            RowMutation {
                key: k,
                mutations: vec![Mutation::set_at("t", vec![0], 1, vec![fill; 2500])],
            }
        };
        // Twelve series, the odd ones also with a longer key, over four periods of two
        // hours: groups of two 2,500-byte members.
        let mut rows = Vec::new();
        for h in 0..8u32 {
            for s in 0..12u8 {
                rows.push(row(h, &[s], s));
                if s % 2 == 1 {
                    rows.push(row(h, &[s, 0xFF], s ^ 0x80));
                }
            }
        }
        store.mutate_rows(TABLE, &rows).unwrap();
        model.mutate_rows(TABLE, &rows).unwrap();
        store.maintain(6 * 3_600_000).unwrap();
        // Since the pass: a grouped member replaced, rows of the open period (hours 6-7)
        // and of a new hour.
        let late = vec![
            row(2, &[5], 0x55),
            row(3, &[5, 0xFF], 0x56),
            row(7, &[5], 0x57),
            row(8, &[5], 0x58),
            row(8, &[5, 0xFF], 0x59),
        ];
        store.mutate_rows(TABLE, &late).unwrap();
        model.mutate_rows(TABLE, &late).unwrap();
        for wanted in [vec![5u8], vec![5, 0xFF], vec![0], vec![11]] {
            let target = wanted.clone();
            let hint = SkipHint(Arc::new(move |key: &[u8]| {
                let series = key.get(5..)?;
                let mut next = key[..5].to_vec();
                if series < target.as_slice() {
                    next.extend_from_slice(&target);
                    return Some(next);
                }
                let hour = u32::from_be_bytes(key[1..5].try_into().ok()?);
                let mut next = vec![1u8];
                next.extend_from_slice(&(hour + 3600).to_be_bytes());
                next.extend_from_slice(&target);
                Some(next)
            }));
            let escaped: String = wanted.iter().map(|b| format!("\\x{b:02x}")).collect();
            let request = ScanRequest {
                key_regex: Some(format!("(?s)^.{{5}}{escaped}$")),
                skip: Some(hint),
                series_filter: true,
                ..ScanRequest::range(Vec::new(), None)
            };
            let got = scan(&store, &request);
            let hours = if wanted == [5] || wanted == [5, 0xFF] {
                9
            } else {
                8
            };
            assert_eq!(got.len(), hours, "codec {codec}, series {wanted:?}");
            assert_eq!(
                sorted(got.clone()),
                scan(&model, &request),
                "codec {codec}, series {wanted:?}"
            );
            let joint_request = ScanRequest {
                read: ReadOptions {
                    joint_rows: true,
                    ..request.read.clone()
                },
                ..request.clone()
            };
            assert_eq!(
                expand_joint_rows(&scan(&store, &joint_request), &request),
                got,
                "codec {codec}, series {wanted:?}"
            );
        }
    }
}

/// The groups keyspace's (files, live value bytes).
fn group_bytes(store: &FjallStore) -> (u64, u64) {
    let held = store.keyspace_bytes().unwrap();
    let g = held.iter().find(|k| k.name == "g:tsdb").unwrap();
    (g.disk_bytes, g.value_bytes)
}

/// Writes `rounds` versions of 40 series' rows in the closed period 0, hours 0 and 1 in
/// turn (each version of a group flushed into a file of its own), incompressible values of 2,000 bytes. Returns the
/// rows as last written.
fn rewrite_groups(store: &FjallStore, rounds: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut last = std::collections::BTreeMap::new();
    for round in 0..rounds {
        let rows: Vec<(Vec<u8>, Vec<u8>)> = (0..40u8)
            .map(|series| {
                let value: Vec<u8> = (0..2000)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        // Not 7 modulo 8 first: the codec takes the cell jointly.
                        (seed >> 32) as u8 & 0xF0
                    })
                    .collect();
                (key(1, round % 2, series), value)
            })
            .collect();
        let mutations: Vec<RowMutation> = rows
            .iter()
            .map(|(key, value)| RowMutation {
                key: key.clone(),
                mutations: vec![Mutation::set_at("t", vec![0], 1, value.clone())],
            })
            .collect();
        store.mutate_rows(TABLE, &mutations).unwrap();
        store.make_table_durable(TABLE).unwrap();
        last.extend(rows);
    }
    last.into_iter().collect()
}

/// Every row's key and only cell's value, in key order.
fn stored_rows(store: &FjallStore) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut rows: Vec<(Vec<u8>, Vec<u8>)> = scan(store, &ScanRequest::range(Vec::new(), None))
        .into_iter()
        .map(|r| (r.key, r.cells[0].value.clone()))
        .collect();
    rows.sort();
    rows
}

#[test]
fn superseded_groups_are_merged_away_at_a_checkpoint_and_by_upkeep() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), true, true);
    // Period 0 (hours 0-1) closes: every later write to it rewrites its group.
    store.maintain(2 * 3_600_000).unwrap();
    // Three versions: fewer files than fjall merges its first level at.
    let written = rewrite_groups(&store, 3);
    let (files, live) = group_bytes(&store);
    assert!(
        files > 2 * live,
        "before a checkpoint: files {files}, live {live}"
    );
    store.checkpoint().unwrap();
    let (files, live) = group_bytes(&store);
    assert!(
        files < live + live / 8 + 8192,
        "after a checkpoint: files {files}, live {live}"
    );
    assert_eq!(written.len(), 80);
    assert_eq!(stored_rows(&store), written);
    // Upkeep merges in the background; a store dropped waits for its merge.
    let written = rewrite_groups(&store, 3);
    let (files, live) = group_bytes(&store);
    assert!(
        files > 2 * live,
        "before upkeep: files {files}, live {live}"
    );
    store.maintain(2 * 3_600_000).unwrap();
    drop(store);
    let store = open(dir.path(), true, true);
    let (files, live) = group_bytes(&store);
    assert!(
        files < live + live / 8 + 8192,
        "after upkeep: files {files}, live {live}"
    );
    assert_eq!(stored_rows(&store), written);
}
