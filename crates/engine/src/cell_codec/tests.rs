use super::*;
use hourglass_core::value::Value;
use proptest::prelude::*;

fn cell(points: &[(bool, u32, Value)]) -> (Vec<u8>, Vec<u8>) {
    let pts: Vec<Point> = points
        .iter()
        .map(|(ms, off, v)| {
            let q = if *ms {
                Qualifier::millis(*off, v.flags())
            } else {
                Qualifier::seconds(*off / 1000, v.flags())
            };
            Point::new(q.unwrap(), v.to_bits())
        })
        .collect();
    compact::encode_cell(&pts)
}

#[test]
fn regular_series_shrink_and_round_trip() {
    let points: Vec<(bool, u32, Value)> = (0..360)
        .map(|i| (false, i * 10_000, Value::Int(500 + (i as i64 % 7) - 3)))
        .collect();
    let (q, v) = cell(&points);
    let blob = DataCellCodec.encode("t", &q, &v).unwrap();
    assert!(
        blob.len() * 4 < q.len() + v.len(),
        "{} vs {}",
        blob.len(),
        q.len() + v.len()
    );
    assert!(blob.len() < 360, "under a byte per point: {}", blob.len());
    assert_eq!(DataCellCodec.decode("t", &blob).unwrap(), (q, v));
}

#[test]
fn decimal_floats_and_mixed_cells_round_trip() {
    // Seconds then milliseconds; decimal doubles, floats and integers.
    let points: Vec<(bool, u32, Value)> = (0..60u32)
        .map(|i| match i {
            0..20 => (false, i * 1000, Value::Double(f64::from(1234 + i) / 100.0)),
            20..30 => (false, i * 1000, Value::Float(1.5 + i as f32)),
            _ => (true, i * 1000 + 250, Value::Int(70000 - i64::from(i) * 3)),
        })
        .collect();
    let (q, v) = cell(&points);
    let blob = DataCellCodec.encode("t", &q, &v).unwrap();
    assert_eq!(DataCellCodec.decode("t", &blob).unwrap(), (q, v));
}

#[test]
fn counters_stepping_in_multiples_pack_small() {
    let points: Vec<(bool, u32, Value)> = (0..360)
        .map(|i| {
            (
                false,
                i * 10_000,
                Value::Int(1_000_000 + i64::from(i % 5) * 1500 * i64::from(i)),
            )
        })
        .collect();
    let (q, v) = cell(&points);
    let blob = DataCellCodec.encode("t", &q, &v).unwrap();
    assert_eq!(DataCellCodec.decode("t", &blob).unwrap(), (q, v));
    let steps: Vec<(bool, u32, Value)> = (0..360)
        .map(|i| (false, i * 10_000, Value::Int(5000 + i64::from(i) * 300)))
        .collect();
    let (q, v) = cell(&steps);
    let blob = DataCellCodec.encode("t", &q, &v).unwrap();
    assert!(
        blob.len() < 40,
        "a constant step costs nothing per point: {}",
        blob.len()
    );
}

#[test]
fn leaves_other_cells_alone() {
    assert_eq!(DataCellCodec.encode("t", &[0x07, 0xB0], &[42]), None);
    assert_eq!(
        DataCellCodec.encode("id", &[0x07, 0xB0, 0x07, 0xC0], &[1, 2, 0]),
        None
    );
    assert_eq!(DataCellCodec.encode("t", &[1, 0, 0], b"{}"), None);
    assert_eq!(
        DataCellCodec.encode("t", &[0x07, 0xB0, 0x07, 0xC0], &[1]),
        None,
        "corrupt cells stay as they are"
    );
}

/// A blob of `n` zero integers: one resolution run, the given offset runs.
fn blob_with_offsets(ms: bool, first: u64, runs: &[(i64, u64)]) -> Vec<u8> {
    let n = 1 + runs.iter().map(|r| r.1).sum::<u64>();
    let mut b = vec![VERSION];
    put_varint(&mut b, n);
    b.extend([0, 1, u8::from(ms)]);
    put_varint(&mut b, n);
    put_varint(&mut b, first);
    put_varint(&mut b, runs.len() as u64);
    for (d, len) in runs {
        put_varint(&mut b, zigzag(*d));
        put_varint(&mut b, *len);
    }
    b.extend([1, 0]);
    put_varint(&mut b, n);
    pack_deltas(&vec![0; n as usize], &mut b);
    b.extend([0, 0]);
    pack_deltas(&[], &mut b);
    b
}

#[test]
fn columns_refuse_what_points_refuse() {
    let columns = |b: &[u8]| decode_columns::<Num>(b, 0, &mut Vec::new(), &mut Vec::new());
    let points = |b: &[u8]| decode_points(b, &mut Vec::new());
    let ok = blob_with_offsets(false, 0, &[(10_000, 359)]);
    let mut times = Vec::new();
    decode_columns::<f64>(&ok, 5_000, &mut times, &mut Vec::new()).unwrap();
    assert_eq!(times.len(), 360);
    assert_eq!((times[0], times[359]), (5_000, 5_000 + 3_590_000));
    for (what, bad) in [
        ("half seconds", blob_with_offsets(false, 0, &[(1500, 3)])),
        (
            "first not whole",
            blob_with_offsets(false, 500, &[(1000, 3)]),
        ),
        (
            "past the hour",
            blob_with_offsets(true, 0, &[(10_000, 360)]),
        ),
        ("before the hour", blob_with_offsets(true, 10, &[(-20, 1)])),
    ] {
        assert!(points(&bad).is_err(), "{what}");
        assert!(columns(&bad).is_err(), "{what}");
    }
    for good in [
        blob_with_offsets(true, 500, &[(1500, 3)]),
        blob_with_offsets(true, 3_599_999, &[]),
        blob_with_offsets(true, 10, &[(-10, 1), (5, 2)]),
    ] {
        assert!(points(&good).is_ok());
        assert!(columns(&good).is_ok());
    }
}

fn value_strategy() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::Int),
        (-1000i64..1000).prop_map(Value::Int),
        any::<f32>().prop_map(Value::Float),
        any::<f64>().prop_map(Value::Double),
        (-100000i64..100000).prop_map(|m| hourglass_core::value::float_value(m as f64 / 100.0)),
    ]
}

proptest! {
    #[test]
    fn lossless_on_any_cell(points in prop::collection::btree_map(0u32..3_600_000, (any::<bool>(), value_strategy()), 2..100)) {
        let pts: Vec<(bool, u32, Value)> = points.into_iter().map(|(off, (ms, v))| (ms, if ms { off } else { off / 1000 * 1000 }, v)).collect();
        let mut dedup: Vec<(bool, u32, Value)> = Vec::new();
        for p in pts {
            if dedup.last().is_none_or(|l| l.1 != p.1) {
                dedup.push(p);
            }
        }
        prop_assume!(dedup.len() >= 2);
        let (q, v) = cell(&dedup);
        if let Some(blob) = DataCellCodec.encode("t", &q, &v) {
            let mut direct = Vec::new();
            decode_points(&blob, &mut direct).unwrap();
            let mut via_bytes = Vec::new();
            compact::decode_cell(&q, &v, &mut via_bytes).unwrap();
            prop_assert_eq!(direct, via_bytes, "points straight from the blob");
            prop_assert_eq!(DataCellCodec.decode("t", &blob).unwrap(), (q, v));
        }
    }

    #[test]
    fn decode_never_panics(blob in prop::collection::vec(any::<u8>(), 0..120)) {
        let _ = decode_points(&blob, &mut Vec::new());
        let _ = DataCellCodec.decode("t", &blob);
        let _ = decode_columns::<Num>(&blob, 0, &mut Vec::new(), &mut Vec::new());
    }

    /// Columns give the points' times and values, and fail exactly where points fail,
    /// on valid cells and on cells with bytes flipped.
    #[test]
    fn columns_equal_points(
        points in prop::collection::btree_map(0u32..3_600_000, (any::<bool>(), value_strategy()), 1..400),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..3),
        base in 0u32..2_000_000_000,
    ) {
        let mut pts: Vec<(bool, u32, Value)> = Vec::new();
        for (off, (ms, v)) in points {
            let off = if ms { off } else { off / 1000 * 1000 };
            if pts.last().is_none_or(|l| l.1 != off) {
                pts.push((ms, off, v));
            }
        }
        let blob = match pts.len() {
            1 => {
                let p = Point::new(if pts[0].0 { Qualifier::millis(pts[0].1, pts[0].2.flags()) } else { Qualifier::seconds(pts[0].1 / 1000, pts[0].2.flags()) }.unwrap(), pts[0].2.to_bits());
                encode_points(&[p], None)
            }
            _ => {
                let (q, v) = cell(&pts);
                match DataCellCodec.encode("t", &q, &v) {
                    Some(b) => b,
                    None => return Ok(()),
                }
            }
        };
        let mut blob = blob;
        for (at, byte) in &flips {
            let i = at.index(blob.len());
            blob[i] ^= byte;
        }
        let mut want = Vec::new();
        let expected = decode_points(&blob, &mut want).map(|()| {
            want.iter()
                .map(|p| (p.qualifier.timestamp_ms(base), match p.value() {
                    Value::Int(i) => Num::Int(i),
                    other => Num::Float(other.as_f64()),
                }))
                .collect::<Vec<_>>()
        });
        let (mut times, mut values) = (vec![7], vec![Num::Int(7)]);
        let got = decode_columns(&blob, i64::from(base) * 1000, &mut times, &mut values);
        match expected {
            Ok(want) => {
                prop_assert!(got.is_ok(), "{got:?}");
                let increasing = want.windows(2).all(|w| w[0].0 < w[1].0);
                prop_assert_eq!(got.ok(), Some(increasing), "strictly increasing");
                let mut doubles: Vec<f64> = Vec::new();
                decode_columns(&blob, 0, &mut Vec::new(), &mut doubles).unwrap();
                let want_doubles: Vec<u64> = want.iter().map(|w| w.1.as_f64().to_bits()).collect();
                prop_assert_eq!(doubles.iter().map(|d| d.to_bits()).collect::<Vec<_>>(), want_doubles, "as doubles");
                let got: Vec<(i64, Num)> = times[1..].iter().copied().zip(values[1..].iter().copied()).collect();
                prop_assert_eq!(got.len(), want.len());
                for (g, w) in got.iter().zip(&want) {
                    prop_assert_eq!(g.0, w.0);
                    // NaN payloads compare by bits.
                    match (g.1, w.1) {
                        (Num::Float(a), Num::Float(b)) => prop_assert_eq!(a.to_bits(), b.to_bits()),
                        (a, b) => prop_assert_eq!(a, b),
                    }
                }
            }
            Err(_) => {
                prop_assert!(got.is_err(), "points fail but columns decode: {blob:?}");
                prop_assert_eq!((times, values), (vec![7], vec![Num::Int(7)]), "nothing appended");
            }
        }
    }
}
