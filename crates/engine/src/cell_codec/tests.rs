use super::*;
use hourglass_core::value::Value;
use proptest::prelude::*;
use std::collections::BTreeMap;

/// RFC 0003's encoder as it was: version 1 (both sections always, float modes 0x00 and 0x01).
fn encode_points_v1(points: &[Point], meta: Option<u8>) -> Vec<u8> {
    let mut out = Vec::new();
    encode_head(points, meta, VERSION_1, &mut out);
    pack_sequence(&int_values(points), Packing::Frame, &mut out);
    let floats: Vec<&Point> = points.iter().filter(|p| is_float(p)).collect();
    match decimal_scale(&floats) {
        Some((k, mantissas)) => {
            out.push(0);
            out.push(k as u8);
            pack_sequence(&mantissas, Packing::Frame, &mut out);
        }
        None => {
            out.push(1);
            for p in floats {
                write_bits(p.bits, p.qualifier.flags(), &mut out);
            }
        }
    }
    out
}

/// What `DataCellCodec::encode` returned before version 2.
/// A version 2 blob (RFC 0005), as the encoder wrote them before RFC 0013.
fn encode_points_v2(points: &[Point], meta: Option<u8>) -> Vec<u8> {
    let mut out = Vec::new();
    encode_head_with(points, meta, VERSION_2, Widths::Runs, &mut out);
    encode_values(points, Packing::Frame, Widths::Runs, &mut out);
    out
}

fn encode_v1(q: &[u8], v: &[u8]) -> Option<Vec<u8>> {
    encode_cell(q, v, encode_points_v1)
}

fn points_of(points: &[(bool, u32, Value)]) -> Vec<Point> {
    points
        .iter()
        .map(|(ms, off, v)| {
            let q = if *ms {
                Qualifier::millis(*off, v.flags())
            } else {
                Qualifier::seconds(*off / 1000, v.flags())
            };
            Point::new(q.unwrap(), v.to_bits())
        })
        .collect()
}

/// Seconds points `step_s` apart from the hour's start.
fn every(step_s: u32, values: &[Value]) -> Vec<(bool, u32, Value)> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| (false, i as u32 * step_s * 1000, *v))
        .collect()
}

/// A double `ulps` units in the last place from `d` (bits plus `ulps`).
fn nudge(d: f64, ulps: i64) -> f64 {
    f64::from_bits((d.to_bits() as i64).wrapping_add(ulps) as u64)
}

fn nudge32(f: f32, ulps: i32) -> f32 {
    f32::from_bits((f.to_bits() as i32).wrapping_add(ulps) as u32)
}

/// A float-only blob's float mode (the byte after the head).
fn float_mode_of(blob: &[u8]) -> u8 {
    let s = cell_sections(blob).unwrap();
    blob[s.version + s.runs + s.offsets + s.flags + s.integers]
}

/// Both decoders agree with the cell's own points (NaN payloads compared by bits).
fn assert_decoders_agree(blob: &[u8], want: &[Point]) {
    let mut points = Vec::new();
    decode_points(blob, &mut points).unwrap();
    assert_eq!(points, want, "points");
    let (mut times, mut values) = (Vec::new(), Vec::<Num>::new());
    decode_columns(blob, 0, &mut times, &mut values).unwrap();
    let got: Vec<(i64, u64)> = times
        .iter()
        .zip(&values)
        .map(|(t, v)| (*t, v.as_f64().to_bits()))
        .collect();
    let expected: Vec<(i64, u64)> = want
        .iter()
        .map(|p| (p.qualifier.timestamp_ms(0), p.value().as_f64().to_bits()))
        .collect();
    assert_eq!(got, expected, "columns");
}

fn cell(points: &[(bool, u32, Value)]) -> (Vec<u8>, Vec<u8>) {
    compact::encode_cell(&points_of(points))
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
fn a_cell_the_codec_cannot_hold_exactly_stays_as_written() {
    // Millisecond qualifiers with a bit set between offset and flags: readers accept them,
    // the codec's body has no room for them, so the cell must not be encoded.
    let mut points = points_of(
        &(0..100u32)
            .map(|i| (true, i * 1500, Value::Int(i64::from(i % 9))))
            .collect::<Vec<_>>(),
    );
    points[37].qualifier = Qualifier::from_raw(points[37].qualifier.raw() | 0x10).unwrap();
    let (q, v) = compact::encode_cell(&points);
    if let Some(blob) = DataCellCodec.encode("t", &q, &v) {
        assert_eq!(
            DataCellCodec.decode("t", &blob).unwrap(),
            (q, v),
            "an encoded cell gives back its bytes"
        );
    }
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

/// A blob of `n` zero integers: one resolution run, the given offset runs, flags as runs;
/// version 1 writes an empty float section, versions 2 and 3 none.
fn blob_with_offsets(version: u8, ms: bool, first: u64, runs: &[(i64, u64)]) -> Vec<u8> {
    let n = 1 + runs.iter().map(|r| r.1).sum::<u64>();
    let mut b = vec![version];
    put_varint(&mut b, n);
    b.extend([0, 1, u8::from(ms)]);
    put_varint(&mut b, n);
    put_varint(&mut b, first);
    put_varint(&mut b, runs.len() as u64);
    for (d, len) in runs {
        put_varint(&mut b, zigzag(*d));
        put_varint(&mut b, *len);
    }
    if has_flag_mode(version) {
        b.push(FLAG_MODE_RUNS);
    }
    b.extend([1, 0]);
    put_varint(&mut b, n);
    pack_sequence(&vec![0; n as usize], Packing::Frame, &mut b);
    if version == VERSION_1 {
        b.extend([0, 0]);
        pack_sequence(&[], Packing::Frame, &mut b);
    }
    b
}

#[test]
fn columns_refuse_what_points_refuse() {
    let columns = |b: &[u8]| decode_columns::<Num>(b, 0, &mut Vec::new(), &mut Vec::new());
    let points = |b: &[u8]| decode_points(b, &mut Vec::new());
    for version in [VERSION_1, VERSION_2, VERSION_3] {
        let ok = blob_with_offsets(version, false, 0, &[(10_000, 359)]);
        let mut times = Vec::new();
        decode_columns::<f64>(&ok, 5_000, &mut times, &mut Vec::new()).unwrap();
        assert_eq!(times.len(), 360);
        assert_eq!((times[0], times[359]), (5_000, 5_000 + 3_590_000));
        for (what, bad) in [
            (
                "half seconds",
                blob_with_offsets(version, false, 0, &[(1500, 3)]),
            ),
            (
                "first not whole",
                blob_with_offsets(version, false, 500, &[(1000, 3)]),
            ),
            (
                "past the hour",
                blob_with_offsets(version, true, 0, &[(10_000, 360)]),
            ),
            (
                "before the hour",
                blob_with_offsets(version, true, 10, &[(-20, 1)]),
            ),
        ] {
            assert!(points(&bad).is_err(), "{what} (version {version})");
            assert!(columns(&bad).is_err(), "{what} (version {version})");
        }
        for good in [
            blob_with_offsets(version, true, 500, &[(1500, 3)]),
            blob_with_offsets(version, true, 3_599_999, &[]),
            blob_with_offsets(version, true, 10, &[(-10, 1), (5, 2)]),
        ] {
            assert!(points(&good).is_ok(), "version {version}");
            assert!(columns(&good).is_ok(), "version {version}");
        }
    }
}

/// RFC 0003's example: 60 points a minute apart, integer 5.
fn rfc_integer_example() -> Vec<(bool, u32, Value)> {
    every(60, &[Value::Int(5); 60])
}

/// RFC 0005's second example: six doubles, two of them a unit in the last place off.
fn rfc_artifact_example() -> Vec<(bool, u32, Value)> {
    let values = [
        23.412,
        nudge(23.518, 1),
        23.407,
        23.611,
        nudge(23.59, -1),
        23.702,
    ];
    every(300, &values.map(Value::Double))
}

fn hex(bytes: &str) -> Vec<u8> {
    bytes
        .split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect()
}

#[test]
fn rfc_0005_examples() {
    // Version 2's bytes, as RFC 0005 gives them, still decode; version 3 writes the same
    // sections with the flag runs `01 00 3C` as flag mode 0x01 (RFC 0013).
    let (q, v) = cell(&rfc_integer_example());
    let v2 = hex("02 3C 01 00  01 00 3C  00 01 C0 A9 07 3B  01 00 3C  0A 01 00 00");
    assert_eq!(
        DataCellCodec.decode("t", &v2).unwrap(),
        (q.clone(), v.clone())
    );
    assert_eq!(
        encode_points_v2(&points_of(&rfc_integer_example()), Some(0)),
        v2
    );
    let v3 = hex("03 3C 01 00  01 00 3C  00 01 C0 A9 07 3B  01  0A 01 00 00");
    assert_eq!(encode_v3(&points_of(&rfc_integer_example()), Some(0)), v3);
    assert_eq!(
        DataCellCodec.decode("t", &v3).unwrap(),
        (q.clone(), v.clone())
    );
    // Version 4 (RFC 0014): meta code 0x01, seconds for every point, one step of 60,000 ms,
    // the integers' quotients a frame after their mode byte.
    let blob = DataCellCodec.encode("t", &q, &v).unwrap();
    assert_eq!(
        blob,
        hex("04 3C 01  00  02 00 E0 D4 03  01  0A 01 01 00 00")
    );
    assert_eq!(DataCellCodec.decode("t", &blob).unwrap(), (q, v));

    let example = rfc_artifact_example();
    assert_eq!(
        example
            .iter()
            .map(|p| p.2.as_f64().to_string())
            .collect::<Vec<_>>(),
        [
            "23.412",
            "23.518000000000004",
            "23.407",
            "23.611",
            "23.589999999999996",
            "23.702"
        ]
    );
    let (q, v) = cell(&example);
    assert_eq!((q.len(), v.len()), (12, 49));
    assert_eq!(encode_v1(&q, &v), None, "version 1 stores it as it is");
    assert_eq!(encode_points_v1(&points_of(&example), Some(0)).len(), 69);
    let v2 = hex("02 06 01 00  01 00 06  00 01 C0 CF 24 05  01 0F 06  02 03 \
         E8 ED 02 01 DD 01 09  D9 00 EC D4 F2 0D  01 02 59 04");
    assert_eq!(
        DataCellCodec.decode("t", &v2).unwrap(),
        (q.clone(), v.clone())
    );
    assert_decoders_agree(&v2, &points_of(&example));
    assert_eq!(encode_points_v2(&points_of(&example), Some(0)), v2);
    let v3 = hex("03 06 01 00  01 00 06  00 01 C0 CF 24 05  02  02 03 \
         E8 ED 02 01 DD 01 09  D9 00 EC D4 F2 0D  01 02 59 04");
    assert_eq!(encode_v3(&points_of(&example), Some(0)), v3);
    assert_decoders_agree(&v3, &points_of(&example));
    // Version 4: one step of 300,000 ms, the mantissas' quotients a frame after mode 0x01,
    // the corrections a Rice sequence after mode 0x00.
    let blob = DataCellCodec.encode("t", &q, &v).unwrap();
    assert_eq!(
        blob,
        hex("04 06 01  00  02 00 E0 A7 12  02  02 03 \
             E8 ED 02 01  01 DD 01 09 D9 00 EC D4 F2 0D  00 00 02 80 11")
    );
    assert_eq!(DataCellCodec.decode("t", &blob).unwrap(), (q, v));
    assert_decoders_agree(&blob, &points_of(&example));
}

#[test]
fn float_artifacts_cost_little() {
    // Three-decimal gauges every five minutes; four carry a one-ULP artifact.
    let decimals = [
        23.412, 23.518, 23.407, 23.611, 23.59, 23.702, 23.655, 23.689, 23.701, 23.812, 23.79,
        23.845,
    ];
    let ulps = [0, 1, 0, 0, -1, 0, 0, 1, 0, 0, -1, 0];
    let doubles: Vec<Value> = decimals
        .iter()
        .zip(ulps)
        .map(|(d, u)| Value::Double(nudge(*d, u)))
        .collect();
    let floats: Vec<Value> = decimals
        .iter()
        .zip(ulps)
        .map(|(d, u)| Value::Float(nudge32(*d as f32, u as i32)))
        .collect();
    // (values, version 1's blob, version 3's bound: 16 bytes of head, then mode, k, 20 bytes
    // of 9-bit mantissa deltas and 5 of 2-bit corrections; the doubles' widths from their
    // values, one byte for three of flag runs; the floats' flag runs after a mode byte, as
    // doubles their corrections would be wide). Version 1 writes the doubles raw, and the
    // floats at a scale where every one is exact (9 digits), with wide deltas.
    for (values, v1_len, v2_max) in [(doubles, 117, 41), (floats, 58, 44)] {
        let points = every(300, &values);
        let (q, v) = cell(&points);
        let v1 = encode_v1(&q, &v).unwrap();
        let blob = DataCellCodec.encode("t", &q, &v).unwrap();
        assert_eq!(v1.len(), v1_len, "version 1");
        assert!(blob.len() <= v2_max, "{} > {v2_max}", blob.len());
        assert_eq!(float_mode_of(&blob), 2);
        assert_eq!(DataCellCodec.decode("t", &blob).unwrap(), (q, v));
        assert_decoders_agree(&blob, &points_of(&points));
        assert_decoders_agree(&v1, &points_of(&points));
    }
}

/// Floats whose bits no short decimal gives.
fn special_doubles() -> Vec<f64> {
    vec![
        f64::from_bits(0x7FF0_0000_0000_0001), // signalling NaN, payload 1
        f64::from_bits(0xFFF8_0000_0000_1234), // negative quiet NaN with a payload
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -0.0,
        0.0,
        5e-324,
        f64::MIN_POSITIVE,
        f64::MAX,
        f64::MIN,
        1e-20,
        1e300,
        0.1 + 0.2,
        51.846000000000004,
        94.79799999999999,
        41.361999999999995,
        123_456_789.123_456_78,
        std::f64::consts::PI,
        -9.223_372_036_854_776e18,
    ]
}

fn special_floats() -> Vec<f32> {
    vec![
        f32::from_bits(0x7F80_0001),
        f32::from_bits(0xFFC0_1234),
        f32::INFINITY,
        f32::NEG_INFINITY,
        -0.0,
        1e-45,
        f32::MAX,
        f32::MIN,
        0.1 + 0.2,
        nudge32(23.412, 1),
        nudge32(-23.412, -1),
        std::f32::consts::E,
    ]
}

#[test]
fn special_floats_round_trip() {
    let mut values: Vec<Value> = special_doubles().into_iter().map(Value::Double).collect();
    values.extend(special_floats().into_iter().map(Value::Float));
    let decimals = [12.5, 12.625, 12.75, 13.0];
    let mut rows: Vec<Vec<Value>> = Vec::new();
    for v in &values {
        // Alone, and among decimals of its width.
        rows.push(vec![*v, *v]);
        let around = |d: f64| match v {
            Value::Float(_) => Value::Float(d as f32),
            _ => Value::Double(d),
        };
        let mut row: Vec<Value> = decimals.iter().map(|d| around(*d)).collect();
        row.insert(2, *v);
        rows.push(row);
    }
    rows.push(values.clone());
    for row in rows {
        let points = every(10, &row);
        let pts = points_of(&points);
        let (q, v) = cell(&points);
        if let Some(blob) = DataCellCodec.encode("t", &q, &v) {
            assert_eq!(DataCellCodec.decode("t", &blob).unwrap(), (q, v), "{row:?}");
            assert_decoders_agree(&blob, &pts);
        }
        // With widths from values where the points allow them, however long.
        if Widths::of(&pts) == Widths::FromValues {
            assert_decoders_agree(
                &encode_blob(&pts, None, VERSION_3, Widths::FromValues),
                &pts,
            );
        }
        // Mode 0x02 takes any value at any scale, whatever it costs.
        let floats: Vec<&Point> = pts.iter().collect();
        for k in 0..=MAX_DECIMALS {
            let mut blob = Vec::new();
            encode_head(&pts, None, VERSION_3, &mut blob);
            assert!(decimal_section(&floats, k, None, Packing::Frame, &mut blob));
            assert_decoders_agree(&blob, &pts);
        }
    }
}

#[test]
fn sections_left_out() {
    let ints = every(10, &[3, 4, 300, 7, 7, 9, 12].map(Value::Int));
    let floats = every(10, &[1.5, 2.25, 3.0, 3.75, 4.5].map(Value::Double));
    for (points, absent_len, absent) in [
        // Version 1's empty float section: mode 0x00, k = 0, an empty sequence.
        (ints, 6, [0, 0, 0, 1, 0, 0].as_slice()),
        // Its empty integer section, before the floats.
        (floats, 4, [0, 1, 0, 0].as_slice()),
    ] {
        let pts = points_of(&points);
        let (q, v) = cell(&points);
        let blob = encode_blob(&pts, Some(0), VERSION_3, Widths::RunsAfterMode);
        assert_eq!(decode_blob(&blob).unwrap(), (q, v));
        let v1 = encode_points_v1(&pts, Some(0));
        // Version 3's flag mode byte is all it adds to version 2.
        assert_eq!(blob.len() + absent_len, v1.len() + 1);
        assert_decoders_agree(&blob, &pts);
        assert!(encode_points(&pts, Some(0)).len() <= blob.len());
        // The empty section written anyway is refused in versions 2 and 3.
        let mut head = Vec::new();
        encode_head(&pts, Some(0), VERSION_3, &mut head);
        let at = if absent_len == 6 {
            blob.len()
        } else {
            head.len()
        };
        let mut with = blob.clone();
        with.splice(at..at, absent.iter().copied());
        assert!(decode_points(&with, &mut Vec::new()).is_err());
        assert!(decode_columns::<Num>(&with, 0, &mut Vec::new(), &mut Vec::new()).is_err());
        assert!(DataCellCodec.decode("t", &with).is_err());
    }
}

#[test]
fn version_1_blobs_still_decode() {
    // RFC 0003's example, byte for byte.
    let v1 =
        hex("01 3C 01 00  01 00 3C  00 01 C0 A9 07 3B  01 00 3C  0A 01 00 00  00 00 00 01 00 00");
    let example = rfc_integer_example();
    assert_eq!(DataCellCodec.decode("t", &v1).unwrap(), cell(&example));
    assert_decoders_agree(&v1, &points_of(&example));
    // The kept version 1 encoder: decimal and raw floats, integers, milliseconds, meta.
    let mixed: Vec<(bool, u32, Value)> = (0..60u32)
        .map(|i| match i {
            0..20 => (false, i * 1000, Value::Double(f64::from(1234 + i) / 100.0)),
            20..30 => (false, i * 1000, Value::Float(1.5 + i as f32)),
            _ => (true, i * 1000 + 250, Value::Int(70000 - i64::from(i) * 3)),
        })
        .collect();
    let raw = every(
        10,
        &special_doubles()
            .into_iter()
            .map(Value::Double)
            .collect::<Vec<_>>(),
    );
    for points in [example, mixed, raw, rfc_artifact_example()] {
        let pts = points_of(&points);
        let meta = cell(&points).1.last().copied();
        let blob = encode_points_v1(&pts, meta);
        assert_eq!(blob[0], VERSION_1);
        assert_eq!(decode_blob(&blob).unwrap(), cell(&points));
        assert_decoders_agree(&blob, &pts);
        assert_decoders_agree(&encode_points(&pts, meta), &pts);
    }
    // Version 1's limits stay: no mode 0x02, k at most 9; version 2 takes k up to 18.
    let pts = points_of(&every(10, &[Value::Double(1.5), Value::Double(2.25)]));
    let refused = |b: &[u8]| {
        let points = decode_points(b, &mut Vec::new()).is_err();
        let columns = decode_columns::<f64>(b, 0, &mut Vec::new(), &mut Vec::new()).is_err();
        assert_eq!(points, columns, "{b:?}");
        points
    };
    for (blob, k_max) in [
        (encode_points_v1(&pts, Some(0)), 9u8),
        (encode_v3(&pts, Some(0)), 18),
    ] {
        // The float section is the last 7 bytes: mode 0x00, k = 2, then 150 and 225.
        let mode_at = blob.len() - 7;
        assert_eq!(blob[mode_at..mode_at + 2], [0, 2]);
        assert!(!refused(&blob));
        let mut b = blob.clone();
        b[mode_at + 1] = k_max;
        assert!(!refused(&b), "k = {k_max}");
        b[mode_at + 1] = k_max + 1;
        assert!(refused(&b), "k = {}", k_max + 1);
        // Mode 0x02 with an empty correction stream (f = 0, width 0).
        let mut b = blob.clone();
        b[mode_at] = 2;
        b.extend([0, 0]);
        assert_eq!(refused(&b), blob[0] == VERSION_1, "mode 0x02");
        if blob[0] == VERSION_3 {
            assert_decoders_agree(&b, &pts);
        }
    }
}

#[test]
fn never_longer_than_version_1() {
    // Both within one unit in the last place of a 7-decimal number, so 7 is each one's
    // candidate scale; at 9 decimals both are exact. Mantissas at 7 decimals with 1-bit
    // corrections take 2 bytes more than version 1's exact ones at 9: version 1's scale
    // must be a candidate too.
    let values = [
        Value::Double(8_953_352.731_831_899),
        Value::Int(1),
        Value::Double(8_953_352.731_831_9),
    ];
    let pts = points_of(&every(10, &values));
    let floats: Vec<&Point> = pts.iter().filter(|p| is_float(p)).collect();
    assert_eq!(decimal_scale(&floats).map(|s| s.0), Some(9));
    for p in &floats {
        assert_eq!(decimal(p, 7).map(|d| d.1.abs() <= 1), Some(true));
    }
    let (mut at_7, mut at_9) = (Vec::new(), Vec::new());
    assert!(decimal_section(&floats, 7, None, Packing::Frame, &mut at_7));
    assert!(decimal_section(&floats, 9, None, Packing::Frame, &mut at_9));
    assert_eq!((at_7[0], at_9[0]), (2, 0));
    assert!(at_7.len() > at_9.len(), "{at_7:?} {at_9:?}");
    // With flag runs, as long as version 1's but for version 3's flag mode byte; with
    // widths from values, shorter.
    let (runs, v1) = (
        encode_blob(&pts, Some(0), VERSION_3, Widths::RunsAfterMode),
        encode_points_v1(&pts, Some(0)),
    );
    assert_eq!(runs.len(), v1.len() + 1, "{runs:02X?}");
    assert_decoders_agree(&runs, &pts);
    let v3 = encode_v3(&pts, Some(0));
    assert_eq!(v3.len(), v1.len() - 1, "{v3:02X?}");
    assert_decoders_agree(&v3, &pts);
    // Version 4's head is shorter still (one meta code, one resolution mode, one step).
    let v4 = encode_points(&pts, Some(0));
    assert!(v4.len() < v3.len(), "{v4:02X?}");
    assert_decoders_agree(&v4, &pts);
}

#[test]
fn whole_hours_of_seconds_encode() {
    // 3600 points a second apart, one value: version 1's point-count limit (64 × the blob's
    // length) refused its own 29-byte blob, so such a cell was stored as it is.
    let points = every(1, &[Value::Int(7); 3600]);
    let pts = points_of(&points);
    let (q, v) = cell(&points);
    assert_eq!(encode_v1(&q, &v), None);
    let blob = DataCellCodec.encode("t", &q, &v).unwrap();
    assert!(blob.len() < 30, "{}", blob.len());
    assert_decoders_agree(&blob, &pts);
}

/// A stable generator for the measurements below.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// In `-span..=span`.
    fn step(&mut self, span: i64) -> i64 {
        (self.next() % (2 * span as u64 + 1)) as i64 - span
    }
}

/// A cell's points: (milliseconds, offset ms, value).
type CellPoints = Vec<(bool, u32, Value)>;

/// Rows of 360 points every 10 s for the measurements: (name, points).
fn measured_rows() -> Vec<(&'static str, CellPoints)> {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let artifacts = {
        let d = [
            23.412, 23.518, 23.407, 23.611, 23.59, 23.702, 23.655, 23.689, 23.701, 23.812, 23.79,
            23.845,
        ];
        let u = [0, 1, 0, 0, -1, 0, 0, 1, 0, 0, -1, 0];
        let values: Vec<Value> = d
            .iter()
            .zip(u)
            .map(|(d, u)| Value::Double(nudge(*d, u)))
            .collect();
        every(300, &values)
    };
    let mut m = 5000i64;
    let walk: Vec<Value> = (0..360)
        .map(|_| {
            m += rng.step(20);
            Value::Double(m as f64 / 100.0)
        })
        .collect();
    // The same kind of walk summed in floating point: artifacts as real data has them.
    let mut x = 50.0f64;
    let summed: Vec<Value> = (0..360)
        .map(|_| {
            x += rng.step(20) as f64 * 0.01;
            Value::Double(x)
        })
        .collect();
    let random: Vec<Value> = (0..360)
        .map(|_| Value::Double((rng.next() >> 11) as f64 / (1u64 << 53) as f64 * 100.0))
        .collect();
    let mut i = 1_000_000i64;
    let ints: Vec<Value> = (0..360)
        .map(|_| {
            i += rng.step(1000);
            Value::Int(i)
        })
        .collect();
    vec![
        ("(a) 12 3-decimal doubles, 4 artifacts", artifacts),
        ("(b) 360 2-decimal random walk", every(10, &walk)),
        ("(b') 360 random walk summed in f64", every(10, &summed)),
        ("(c) 360 full-precision random doubles", every(10, &random)),
        ("(d) 360 integers, random walk", every(10, &ints)),
        (
            "(d') 360 integers, constant",
            every(10, &[Value::Int(42); 360]),
        ),
    ]
}

/// Sizes of the RFC's rows and the time to encode, and to decode into columns, 10,000 rows of
/// 360 points (run with `--ignored --nocapture`, in release for meaningful times). Asserts
/// nothing about time.
#[test]
#[ignore]
fn encode_timing() {
    for (name, points) in measured_rows() {
        let (q, v) = cell(&points);
        let pts = points_of(&points);
        let n = points.len() as f64;
        let (b1, b2) = (
            encode_points_v1(&pts, Some(0)),
            encode_points(&pts, Some(0)),
        );
        let stored = |b: Option<Vec<u8>>| b.map_or(q.len() + v.len(), |b| b.len());
        eprintln!(
            "{name}: cell {} B; v1 blob {} B ({:.2} B/pt), stored {:.2} B/pt; v2 blob {} B ({:.2} B/pt), stored {:.2} B/pt",
            q.len() + v.len(),
            b1.len(),
            b1.len() as f64 / n,
            stored(encode_v1(&q, &v)) as f64 / n,
            b2.len(),
            b2.len() as f64 / n,
            stored(DataCellCodec.encode("t", &q, &v)) as f64 / n,
        );
    }
    let rows = measured_rows();
    for (name, points) in rows.iter().skip(1) {
        let (q, v) = cell(points);
        for (version, encoder) in [
            (1, encode_v1 as fn(&[u8], &[u8]) -> Option<Vec<u8>>),
            (2, |q: &[u8], v: &[u8]| DataCellCodec.encode("t", q, v)),
        ] {
            let start = std::time::Instant::now();
            let mut bytes = 0;
            for _ in 0..10_000 {
                bytes += encoder(std::hint::black_box(&q), &v).map_or(0, |b| b.len());
            }
            let took = start.elapsed();
            eprintln!(
                "{name}: version {version} encode of 10,000 rows {took:?}, {:.1} µs/row, {:.0} ns/point ({bytes} B)",
                took.as_secs_f64() * 1e6 / 10_000.0,
                took.as_secs_f64() * 1e9 / 3_600_000.0,
            );
        }
        let pts = points_of(points);
        for (version, blob) in [
            (1, encode_points_v1(&pts, Some(0))),
            (2, encode_points(&pts, Some(0))),
        ] {
            let (mut times, mut values) = (Vec::with_capacity(360), Vec::<f64>::with_capacity(360));
            let start = std::time::Instant::now();
            for _ in 0..10_000 {
                times.clear();
                values.clear();
                decode_columns(std::hint::black_box(&blob), 0, &mut times, &mut values).unwrap();
            }
            let took = start.elapsed();
            eprintln!(
                "{name}: version {version} decode_columns of 10,000 rows {took:?}, {:.1} ns/point",
                took.as_secs_f64() * 1e9 / 3_600_000.0,
            );
        }
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

/// Decimals of `k` places a random walk apart, doubles or 4-byte floats, most exact and some
/// up to two units in the last place off (never off zero: that would be a NaN's bits).
fn noisy_decimals(len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<Value>> {
    (
        any::<bool>(),
        0u32..=6,
        -1_000_000i64..1_000_000,
        prop::collection::vec(
            (-500i64..500, prop_oneof![3 => Just(0i64), 1 => -2i64..=2]),
            len,
        ),
    )
        .prop_map(|(single, k, start, steps)| {
            let mut m = start;
            steps
                .into_iter()
                .map(|(step, noise)| {
                    m += step;
                    let noise = if m == 0 { 0 } else { noise };
                    let d = m as f64 / POW10[k as usize];
                    if single {
                        Value::Float(nudge32(d as f32, noise as i32))
                    } else {
                        Value::Double(nudge(d, noise))
                    }
                })
                .collect()
        })
}

/// Cells' points by offset: any values, or noisy decimals (with an integer here and there).
fn cell_points(len: std::ops::Range<usize>) -> impl Strategy<Value = BTreeMap<u32, (bool, Value)>> {
    let noisy = (
        prop::collection::btree_set(0u32..3_600_000, len.clone()),
        noisy_decimals(len.start..len.end),
        any::<bool>(),
        prop::collection::vec(any::<bool>(), len.end),
    )
        .prop_map(|(offsets, values, ints, ms)| {
            offsets
                .into_iter()
                .zip(values)
                .zip(ms)
                .enumerate()
                .map(|(i, ((off, v), ms))| {
                    let v = if ints && i % 7 == 3 {
                        Value::Int(i as i64)
                    } else {
                        v
                    };
                    (off, (ms, v))
                })
                .collect()
        });
    prop_oneof![
        prop::collection::btree_map(0u32..3_600_000, (any::<bool>(), value_strategy()), len),
        noisy,
    ]
}

proptest! {
    #[test]
    fn lossless_on_any_cell(points in cell_points(2..100)) {
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
            prop_assert!(blob[0] == VERSION || blob[0] == VERSION_3, "version {}", blob[0]);
            prop_assert_eq!(DataCellCodec.decode("t", &blob).unwrap(), (q.clone(), v.clone()));
        }
        // Never longer than version 3 by more than version 4's mode bytes (five, one paid
        // back by the meta code of meta 0x00), nor at all below 64 points; never longer
        // than version 1 but for the flag mode byte and those.
        let pts = points_of(&dedup);
        let chosen = encode_points(&pts, Some(0));
        let v3 = with_shorter_widths(&pts, |w| encode_blob(&pts, Some(0), VERSION_3, w));
        let slack = if pts.len() < BOTH_VERSIONS_BELOW { 0 } else { 4 };
        prop_assert!(chosen.len() <= v3.len() + slack, "{} {}", chosen.len(), v3.len());
        assert_decoders_agree(&chosen, &pts);
        // Version 2's blob, as written before RFC 0013, still reads as the points.
        assert_decoders_agree(&encode_points_v2(&pts, Some(0)), &pts);
        prop_assert!(chosen.len() <= encode_points_v1(&pts, Some(0)).len() + 1 + slack);
        if let Some(v1) = encode_v1(&q, &v) {
            // Declined only where the mode bytes take it to the cell's own length.
            let encoded = DataCellCodec.encode("t", &q, &v);
            let cell_len = q.len() + v.len();
            let most = v1.len() + 1 + slack;
            prop_assert!(
                encoded.as_ref().map_or(most >= cell_len, |b| b.len() <= most),
                "{encoded:?} vs {v1:?}"
            );
        }
    }

    /// Decimal rows with a few units in the last place of noise keep their decimal form and
    /// come back exactly.
    #[test]
    fn noisy_decimals_round_trip(values in noisy_decimals(2..200)) {
        let points = every(10, &values);
        let pts = points_of(&points);
        let (q, v) = cell(&points);
        let blob = encode_points(&pts, Some(0));
        prop_assert_eq!(decode_blob(&blob).unwrap(), (q.clone(), v.clone()));
        let mut direct = Vec::new();
        decode_points(&blob, &mut direct).unwrap();
        prop_assert_eq!(&direct, &pts);
        if values.len() >= 16 {
            let mode = float_mode_of(&blob);
            prop_assert!(mode == 0 || mode == 2, "mode {mode}");
        }
        if let Some(encoded) = DataCellCodec.encode("t", &q, &v) {
            prop_assert_eq!(&encoded, &blob);
            prop_assert_eq!(DataCellCodec.decode("t", &encoded).unwrap(), (q, v));
        }
    }

    #[test]
    fn decode_never_panics(
        version in prop_oneof![Just(None), (1u8..=4).prop_map(Some)],
        bytes in prop::collection::vec(any::<u8>(), 0..120),
    ) {
        let blob: Vec<u8> = version.into_iter().chain(bytes).collect();
        let _ = decode_points(&blob, &mut Vec::new());
        let _ = DataCellCodec.decode("t", &blob);
        let _ = decode_columns::<Num>(&blob, 0, &mut Vec::new(), &mut Vec::new());
    }

    /// Columns give the points' times and values, and fail exactly where points fail,
    /// on valid cells and on cells with bytes flipped.
    #[test]
    fn columns_equal_points(
        points in cell_points(1..400),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..3),
        base in 0u32..2_000_000_000,
        v1 in any::<bool>(),
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
                if v1 { encode_points_v1(&[p], None) } else { encode_points(&[p], None) }
            }
            _ => {
                let (q, v) = cell(&pts);
                let encoded = if v1 { encode_v1(&q, &v) } else { DataCellCodec.encode("t", &q, &v) };
                match encoded {
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

/// Joint members of a period (RFC 0006, group format 0x02): cells at member offsets (s).
fn joint_cells(members: &[(u32, Rebuilt)]) -> Vec<JointCell<'_>> {
    members
        .iter()
        .map(|(o, (q, v))| JointCell {
            offset_secs: *o,
            qualifier: q,
            value: v,
        })
        .collect()
}

/// Each member's points as times from the period start and values, member after member.
/// The joint members of `members` with the shapes their encoding gave each (every one
/// taken jointly).
fn joint_of(members: &[(u32, Rebuilt)], shapes: &[Option<JointShape>]) -> Vec<JointMember> {
    members
        .iter()
        .zip(shapes)
        .map(|((o, _), s)| JointMember {
            offset_secs: *o,
            shape: s.unwrap(),
        })
        .collect()
}

/// Each value's bits as [`joint_expected`] gives them: an integer's two's complement, a
/// float's bits.
fn bits_of(values: &[Num]) -> Vec<u64> {
    values
        .iter()
        .map(|v| match v {
            Num::Int(i) => *i as u64,
            Num::Float(f) => f.to_bits(),
        })
        .collect()
}

fn joint_expected(members: &[(u32, Rebuilt)]) -> (Vec<i64>, Vec<u64>) {
    let (mut times, mut bits) = (Vec::new(), Vec::new());
    for (o, (q, v)) in members {
        let mut points = Vec::new();
        compact::decode_cell(q, v, &mut points).unwrap();
        for p in points {
            times.push(i64::from(*o) * 1000 + i64::from(p.offset_ms()));
            bits.push(match p.value() {
                Value::Int(i) => i as u64,
                other => other.as_f64().to_bits(),
            });
        }
    }
    (times, bits)
}

/// RFC 0006's joint stream example: three integers five minutes apart in the first hour
/// (a compacted cell, meta 0x00), one 4-byte float 1.5 at the start of the next (a single
/// point: no meta): one offset context across the hours, integer and float sections.
#[test]
fn joint_stream_example() {
    let members = vec![
        (
            0,
            cell(&every(300, &[Value::Int(5), Value::Int(6), Value::Int(7)])),
        ),
        (3600, cell(&[(false, 0, Value::Float(1.5))])),
    ];
    assert_eq!(members[1].1, (vec![0x00, 0x0B], vec![0x3F, 0xC0, 0, 0]));
    let (shapes, stream) = DataCellCodec
        .encode_joint("t", &joint_cells(&members))
        .unwrap();
    assert_eq!(
        shapes,
        vec![
            Some(JointShape {
                points: 3,
                meta: Some(0)
            }),
            Some(JointShape {
                points: 1,
                meta: None
            })
        ]
    );
    assert_eq!(
        stream,
        hex(concat!(
            "04 ",             // joint stream version 4
            "00 ",             // no member summarized (fewer points than SUMMARY_MIN_POINTS)
            "01 00 04 ",       // one resolution run: seconds, 4 points
            "01 00 E0 A7 12 ", // offsets as a Rice sequence: first 0, divisor 300000 ms,
            "02 03 02 F4 00 ", //   quotient changes 1, 0, 9 around their median 1, 3 bytes:
            //                    r = 2 ("010000"), -1: "0 10", 0: "0 00", 8: "11110 00"
            "00 ",             // flag mode 0x00: the float as a double would cost more
            "02 00 03 0B 01 ", // flags: 0x0 (1-byte integer) x 3, 0xB (float) x 1
            "0A 01 ",          // integers: 5, g = 1,
            "01 02 00 ",       //   quotients 1, 1 as a frame: least 1, width 0
            "01 3F C0 00 00",  // floats raw: 1.5
        ))
    );
    // Version 3 of the same stream (flag runs, no flag mode) still decodes.
    let version_3 = hex(concat!(
        "03 00 01 00 04 01 00 E0 A7 12 02 03 02 F4 00 ",
        "02 00 03 0B 01 ", // flags: 0x0 (1-byte integer) x 3, 0xB (float) x 1
        "0A 01 02 01 3F ",
        "01 3F C0 00 00", // floats raw: 1.5
    ));
    // Version 2 of the same stream (no summary section) still decodes.
    let mut version_2 = version_3.clone();
    version_2.remove(1);
    version_2[0] = 2;
    // Version 1 of the same stream (runs, bit-packed sequences) still decodes.
    let version_1 = hex(concat!(
        "01 ",                               // joint stream version 1
        "01 00 04 ",                         // one resolution run: seconds, 4 points
        "00 02 C0 CF 24 02 80 9B EE 02 01 ", // from 0 ms: +300000 x 2, +3000000 x 1
        "02 00 03 0B 01 ",                   // flags: 0x0 (1-byte integer) x 3, 0xB (float) x 1
        "0A 01 02 00 ",                      // integers: 5, g = 1, f = +1, width 0
        "01 3F C0 00 00",                    // floats raw: 1.5
    ));
    let joint: Vec<JointMember> = [(0, shapes[0]), (3600, shapes[1])]
        .into_iter()
        .map(|(o, s)| JointMember {
            offset_secs: o,
            shape: s.unwrap(),
        })
        .collect();
    let cells: Vec<(Vec<u8>, Vec<u8>)> = members.iter().map(|(_, c)| c.clone()).collect();
    for stream in [&stream, &version_3, &version_2, &version_1] {
        assert_eq!(
            DataCellCodec.decode_joint("t", stream, &joint).unwrap(),
            cells
        );
        let (mut times, mut values) = (Vec::new(), Vec::<Num>::new());
        assert!(decode_joint_columns(stream, &joint, 1_000_000, &mut times, &mut values).unwrap());
        assert_eq!(times, vec![1_000_000, 1_300_000, 1_600_000, 4_600_000]);
        assert_eq!(
            values,
            vec![Num::Int(5), Num::Int(6), Num::Int(7), Num::Float(1.5)]
        );
    }
    // Another family, the append column, an annotation and a cell whose meta byte is not
    // one byte are not taken.
    assert!(
        DataCellCodec
            .encode_joint("u", &joint_cells(&members))
            .is_none()
    );
    let other = vec![
        (0, (compact::APPEND_QUALIFIER.to_vec(), vec![0, 0x10, 1])),
        (3600, (vec![1, 0, 0], b"{}".to_vec())),
        (7200, (vec![0, 0, 0, 0x10], vec![1, 2, 0, 0])),
        (10800, cell(&[(false, 0, Value::Int(9))])),
    ];
    let (shapes, _) = DataCellCodec
        .encode_joint("t", &joint_cells(&other))
        .unwrap();
    assert_eq!(
        shapes,
        vec![
            None,
            None,
            None,
            Some(JointShape {
                points: 1,
                meta: None
            })
        ]
    );
    // Points outside their member's hour are refused.
    let shifted: Vec<JointMember> = joint
        .iter()
        .map(|m| JointMember {
            offset_secs: m.offset_secs + 1,
            ..*m
        })
        .collect();
    assert!(DataCellCodec.decode_joint("t", &stream, &shifted).is_err());
    // An unknown version, a member count not matching the stream.
    let mut v5 = stream.clone();
    v5[0] = 5;
    assert_eq!(
        DataCellCodec.decode_joint("t", &v5, &joint),
        Err(Error::Corrupt("bad joint stream: unknown version".into()))
    );
    assert!(
        DataCellCodec
            .decode_joint("t", &stream, &joint[..1])
            .is_err()
    );
}

/// Integer members in one run of flags (every value of one width), as a counter's or a
/// gauge's day is: their Rice sequence gives every point in the columns, the steps' common
/// divisor and the width's sign included.
#[test]
fn integer_members_in_one_run_give_every_point() {
    // (first value, step multiplier, steps cycle): 4-byte counter steps of 100, 1-byte
    // negative gauge steps of 3, a constant.
    for (first, unit, cycle) in [(100_000i64, 100i64, 5i64), (-100, 3, 7), (42, 0, 1)] {
        let mut value = first;
        let members: Vec<(u32, Rebuilt)> = (0..3u32)
            .map(|h| {
                let pts: Vec<(bool, u32, Value)> = (0..360u32)
                    .map(|i| {
                        let step = (i64::from(h * 360 + i) % cycle) * unit;
                        // A gauge goes up and back down within its width.
                        value += if unit == 3 && (h * 360 + i) % 2 == 1 {
                            -step
                        } else {
                            step
                        };
                        (false, i * 10_000, Value::Int(value))
                    })
                    .collect();
                (h * 3600, cell(&pts))
            })
            .collect();
        let (shapes, stream) = encode_joint_as(&joint_cells(&members), Packing::Rice).unwrap();
        let joint = joint_of(&members, &shapes);
        let (want_times, want_bits) = joint_expected(&members);
        let (mut times, mut ints) = (Vec::new(), Vec::<Num>::new());
        assert!(decode_joint_columns(&stream, &joint, 0, &mut times, &mut ints).unwrap());
        assert_eq!(times, want_times, "first {first}");
        assert_eq!(bits_of(&ints), want_bits, "first {first}");
        let mut doubles = Vec::<f64>::new();
        decode_joint_columns(&stream, &joint, 0, &mut Vec::new(), &mut doubles).unwrap();
        let want: Vec<f64> = want_bits.iter().map(|b| *b as i64 as f64).collect();
        assert_eq!(doubles, want, "first {first}");
    }
}

/// Members of one period: hours (or any second offsets) with cells of any points.
fn joint_members() -> impl Strategy<Value = Vec<(u32, Rebuilt)>> {
    prop::collection::btree_map(
        prop_oneof![3 => (0u32..24).prop_map(|h| h * 3600), 1 => 0u32..90_000],
        cell_points(1..40),
        1..12,
    )
    .prop_map(|members| {
        members
            .into_iter()
            .map(|(o, points)| {
                let mut pts: Vec<(bool, u32, Value)> = Vec::new();
                for (off, (ms, v)) in points {
                    let off = if ms { off } else { off / 1000 * 1000 };
                    if pts.last().is_none_or(|l| l.1 != off) {
                        pts.push((ms, off, v));
                    }
                }
                (o, cell(&pts))
            })
            .collect()
    })
}

/// The packings of the joint stream versions: 0x01 (frame), 0x03 (Rice) and 0x04 (chosen).
fn packings() -> impl Strategy<Value = Packing> {
    prop_oneof![
        Just(Packing::Frame),
        Just(Packing::Rice),
        Just(Packing::Chosen)
    ]
}

fn version_of(packing: Packing) -> u8 {
    match packing {
        Packing::Frame => JOINT_VERSION_1,
        Packing::Rice => JOINT_VERSION_3,
        Packing::Chosen | Packing::ChosenTruncated => JOINT_VERSION,
    }
}

proptest! {
    /// Every cell the write path makes is taken jointly and comes back byte for byte; the
    /// columns decoder gives each member's points, member after member.
    #[test]
    fn joint_streams_round_trip(
        members in joint_members(),
        period in 0i64..1 << 40,
        packing in packings(),
    ) {
        // The version written, and those written before (still read).
        let (shapes, stream) = encode_joint_as(&joint_cells(&members), packing).unwrap();
        prop_assert_eq!(stream[0], version_of(packing));
        prop_assert!(shapes.iter().all(Option::is_some));
        let joint = joint_of(&members, &shapes);
        let cells: Vec<(Vec<u8>, Vec<u8>)> = members.iter().map(|(_, c)| c.clone()).collect();
        prop_assert_eq!(DataCellCodec.decode_joint("t", &stream, &joint).unwrap(), cells);
        let (mut times, mut values) = (Vec::new(), Vec::<Num>::new());
        let increasing = decode_joint_columns(&stream, &joint, period, &mut times, &mut values).unwrap();
        let ordered = members.iter().all(|(_, (q, v))| {
            let mut points = Vec::new();
            compact::decode_cell(q, v, &mut points).unwrap();
            strictly_increasing(&points)
        });
        prop_assert_eq!(increasing, ordered);
        let (want_times, want_bits) = joint_expected(&members);
        let want_times: Vec<i64> = want_times.into_iter().map(|t| t + period).collect();
        prop_assert_eq!(times, want_times);
        prop_assert_eq!(bits_of(&values), want_bits);
    }

    /// The columns decoder fails on exactly the joint streams the cell decoder fails on,
    /// bytes flipped or members moved.
    #[test]
    fn joint_columns_refuse_what_cells_refuse(
        members in joint_members(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..3),
        shift in prop_oneof![3 => Just(0u32), 1 => 1u32..4000],
        packing in packings(),
    ) {
        let (shapes, mut stream) = encode_joint_as(&joint_cells(&members), packing).unwrap();
        for (at, b) in flips {
            let i = at.index(stream.len());
            stream[i] ^= b;
        }
        let joint: Vec<JointMember> = members
            .iter()
            .zip(&shapes)
            .map(|((o, _), s)| JointMember { offset_secs: o + shift, shape: s.unwrap() })
            .collect();
        let cells = DataCellCodec.decode_joint("t", &stream, &joint);
        let (mut times, mut values) = (vec![7], vec![Num::Int(7)]);
        let columns = decode_joint_columns(&stream, &joint, 0, &mut times, &mut values);
        prop_assert_eq!(cells.is_err(), columns.is_err(), "{:?} / {:?}", cells, columns);
        if columns.is_err() {
            prop_assert_eq!((times, values), (vec![7], vec![Num::Int(7)]));
        }
    }

    #[test]
    fn joint_decode_never_panics(
        bytes in prop::collection::vec(any::<u8>(), 0..120),
        version in prop::option::of(prop_oneof![
            Just(JOINT_VERSION_1),
            Just(JOINT_VERSION_2),
            Just(JOINT_VERSION_3),
            Just(JOINT_VERSION),
        ]),
        members in prop::collection::vec((0u32..200_000, 0u32..50, prop::option::of(any::<u8>())), 0..6),
    ) {
        let stream: Vec<u8> = version.into_iter().chain(bytes).collect();
        let members: Vec<JointMember> = members
            .into_iter()
            .map(|(o, n, meta)| JointMember { offset_secs: o, shape: JointShape { points: n, meta } })
            .collect();
        let _ = DataCellCodec.decode_joint("t", &stream, &members);
        let _ = decode_joint_columns::<Num>(&stream, &members, 0, &mut Vec::new(), &mut Vec::new());
    }
}

/// A day of hourly members, a point every 5 minutes each, as `value(i)` at the `i`-th point's
/// offset (seconds into its hour) `offset(i)`.
fn day_members(
    value: impl Fn(usize) -> Value,
    offset: impl Fn(usize) -> u32,
) -> Vec<(u32, Rebuilt)> {
    (0..24u32)
        .map(|h| {
            let points: Vec<(bool, u32, Value)> = (0..12)
                .map(|k| {
                    let i = h as usize * 12 + k;
                    (false, offset(i) * 1000, value(i))
                })
                .collect();
            (h * 3600, cell(&points))
        })
        .collect()
}

/// The offset mode byte of a stream of one resolution run over a day of hourly members.
fn offset_mode(stream: &[u8]) -> u8 {
    let mut r = Reader {
        bytes: stream,
        pos: 1,
    };
    if matches!(stream[0], JOINT_VERSION | JOINT_VERSION_3) {
        read_summaries(&mut r, 24, |_| {}).unwrap();
    }
    assert_eq!(r.varint().unwrap(), 1, "one resolution run");
    r.byte().unwrap();
    r.varint().unwrap();
    r.byte().unwrap()
}

/// What version 2 buys on a day of 5-minute points: jittered collectors' offsets as a Rice
/// sequence (runs would restart at every jitter), a spike paid in its own block, and constant
/// or regular data no larger than version 1.
#[test]
fn joint_version_2_packs_real_shapes() {
    let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
    let jitter: Vec<u32> = (0..288).map(|_| (rng.next() % 3) as u32).collect();
    let mut level = 5000i64;
    let walk: Vec<i64> = (0..288)
        .map(|i| {
            level += rng.step(30);
            if i == 100 {
                level + 1_000_000_000
            } else {
                level
            }
        })
        .collect();
    let both = |members: &[(u32, Rebuilt)]| {
        let cells = joint_cells(members);
        let v1 = encode_joint_as(&cells, Packing::Frame).unwrap().1;
        let v2 = encode_joint_as(&cells, Packing::Rice).unwrap().1;
        // Both decode to the same cells.
        let shapes = DataCellCodec.encode_joint("t", &cells).unwrap().0;
        let joint = joint_of(members, &shapes);
        let want: Vec<Rebuilt> = members.iter().map(|(_, c)| c.clone()).collect();
        assert_eq!(DataCellCodec.decode_joint("t", &v1, &joint).unwrap(), want);
        assert_eq!(DataCellCodec.decode_joint("t", &v2, &joint).unwrap(), want);
        (v1, v2)
    };
    let slot = |i: usize| (i % 12) as u32 * 300;
    // A walk with a spike, collectors a second or two late now and then.
    let (v1, v2) = both(&day_members(
        |i| Value::Int(walk[i]),
        |i| slot(i) + jitter[i],
    ));
    assert_eq!(offset_mode(&v2), 1);
    assert!(v2.len() * 4 < v1.len(), "{} against {}", v2.len(), v1.len());
    // Regular offsets stay runs; a constant costs a marker a block.
    let (v1, v2) = both(&day_members(|_| Value::Int(42), slot));
    assert_eq!(offset_mode(&v2), 0);
    assert!(
        v2.len() <= v1.len() + 12,
        "{} against {}",
        v2.len(),
        v1.len()
    );
    assert!(v2.len() < 40, "{}", v2.len());
}

/// Hourly members of `n` points each, ten seconds apart, values from `value(member, i)`.
fn dense_members(hours: u32, n: u32, value: impl Fn(u32, u32) -> Value) -> Vec<(u32, Rebuilt)> {
    (0..hours)
        .map(|h| {
            let points: Vec<Value> = (0..n).map(|i| value(h, i)).collect();
            (h * 3600, cell(&every(10, &points)))
        })
        .collect()
}

fn summary_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => (-1_000_000i64..1_000_000).prop_map(Value::Int),
        1 => any::<i64>().prop_map(Value::Int),
        4 => (-1e6f64..1e6).prop_map(Value::Double),
        1 => (-1e3f32..1e3).prop_map(Value::Float),
        1 => prop_oneof![Just(-0.0f64), Just(0.0), Just(f64::INFINITY), Just(f64::NAN), Just(1e300)]
            .prop_map(Value::Double),
    ]
}

proptest! {
    /// In a stream of at least SUMMARY_MIN_POINTS points a member on average, each member
    /// without NaN is summarized with exactly what folding its decoded values as a downsample
    /// folds them gives: the sum, min and max, bit for bit, and its count; the others are not. In a stream
    /// of at least SUM_SUMMARY_MIN_POINTS a member, the same with the sum alone.
    #[test]
    fn summaries_are_the_folds_of_the_decoded_points(
        counts in prop::collection::vec(prop_oneof![
            1 => 1u32..SUM_SUMMARY_MIN_POINTS as u32,
            2 => SUM_SUMMARY_MIN_POINTS as u32..SUMMARY_MIN_POINTS as u32,
            3 => SUMMARY_MIN_POINTS as u32..360,
        ], 1..4),
        values in prop::collection::vec(summary_value(), 360),
        kind in 0u32..3,
    ) {
        let members: Vec<(u32, Rebuilt)> = counts
            .iter()
            .enumerate()
            .map(|(h, &n)| {
                let points: Vec<Value> = (0..n as usize)
                    .map(|i| match (kind, values[(i * 7 + h) % values.len()]) {
                        (0, Value::Double(d)) if d.is_nan() => Value::Double(1.5),
                        (1, v) => Value::Int(match v { Value::Int(i) => i / 3, _ => i as i64 }),
                        (_, v) => v,
                    })
                    .collect();
                (h as u32 * 3600, cell(&every(10, &points)))
            })
            .collect();
        let (shapes, stream) = encode_joint(&joint_cells(&members)).unwrap();
        let joint = joint_of(&members, &shapes);
        let summaries = joint_summaries(&stream, &joint).unwrap().unwrap();
        let total: u32 = counts.iter().sum();
        let dense = total as usize >= SUMMARY_MIN_POINTS * counts.len();
        let sums = total as usize >= SUM_SUMMARY_MIN_POINTS * counts.len();
        let (mut times, mut doubles) = (Vec::new(), Vec::<f64>::new());
        decode_joint_columns(&stream, &joint, 0, &mut times, &mut doubles).unwrap();
        let mut at = 0;
        for (m, s) in joint.iter().zip(&summaries) {
            let n = m.shape.points as usize;
            let own = &doubles[at..at + n];
            let own_times = &times[at..at + n];
            at += n;
            // Sums alone are left out of a stream whose points they would weigh on.
            let left_out = !dense && summaries.iter().all(Option::is_none);
            if !sums || left_out || own.iter().any(|v| v.is_nan()) {
                prop_assert!(s.is_none());
                continue;
            }
            let s = s.expect("a summary");
            // Folded as a downsample folds (the sum from 0.0, so -0.0 alone is 0.0; the
            // first of equal extremes, 0.0 or -0.0, kept).
            use crate::query::fold::{Fold, Max, Min, Sum};
            let (mut sum, mut min, mut max) = (Sum::START, Min::START, Max::START);
            let mut folded = 0u64;
            for v in own {
                Sum::add(&mut sum, &mut folded, *v);
                Min::add(&mut min, &mut folded, *v);
                Max::add(&mut max, &mut folded, *v);
            }
            prop_assert_eq!(s.count as usize, n);
            prop_assert_eq!(s.sum.to_bits(), sum.to_bits());
            prop_assert_eq!(s.extremes, dense);
            if dense {
                prop_assert_eq!(s.min.to_bits(), min.to_bits());
                prop_assert_eq!(s.max.to_bits(), max.to_bits());
            } else {
                prop_assert!(s.min.is_nan() && s.max.is_nan());
            }
            prop_assert!(own_times.windows(2).all(|w| w[0] < w[1]));
        }
    }
}

/// The summary section's bytes: a bitmap, then per summarized member a kind and three
/// values, integers as zigzag varints.
#[test]
fn summary_section_has_its_documented_bytes() {
    // Two members: 240 integers 0..239 at 10 s, then 3 points 1, 1, 1 (240 points a member
    // on average: both summarized).
    let mut members = dense_members(1, 240, |_, i| Value::Int(i64::from(i)));
    members.push((3600, cell(&every(10, &[Value::Int(1); 3]))));
    let (_, stream) = encode_joint(&joint_cells(&members)).unwrap();
    // version 4, both members summarized; kind 0x01: sum 28680, min 0, max 239 as zigzag
    // varints; kind 0x01: 3, 1, 1
    let want = hex("04 03 01 90 C0 03 00 DE 03 01 06 02 02");
    assert_eq!(&stream[..want.len()], want.as_slice());
    // Doubles go as their 8 bytes.
    let members = dense_members(1, 120, |_, i| Value::Double(f64::from(i) + 0.5));
    let (_, stream) = encode_joint(&joint_cells(&members)).unwrap();
    assert_eq!(&stream[..2], &[0x04, 0x01]);
    assert_eq!(stream[2], 0x00);
    assert_eq!(stream[3..11], 7200.0f64.to_le_bytes());
    assert_eq!(stream[11..19], 0.5f64.to_le_bytes());
    assert_eq!(stream[19..27], 119.5f64.to_le_bytes());
    // Twelve points an hour (a five-minute series): sums alone, kind 0x03 for integers
    // (0 + 1 + ... + 11 = 66), kind 0x02 for doubles.
    let twelve = |v: fn(u32) -> Value| {
        (0..2u32)
            .map(|h| {
                let points: Vec<Value> = (0..12).map(v).collect();
                (h * 3600, cell(&every(300, &points)))
            })
            .collect::<Vec<_>>()
    };
    let (_, stream) = encode_joint(&joint_cells(&twelve(|i| Value::Int(i64::from(i))))).unwrap();
    assert_eq!(stream[..8], hex("04 03 03 84 01 03 84 01"));
    let (_, stream) = encode_joint(&joint_cells(&twelve(|i| {
        Value::Double(f64::from(i).sin() / 3.0)
    })))
    .unwrap();
    let sum = (0..12).fold(-0.0f64, |s, i| s + f64::from(i).sin() / 3.0);
    assert_eq!(&stream[..3], &[0x04, 0x03, 0x02]);
    assert_eq!(stream[3..11], sum.to_le_bytes());
    assert_eq!(stream[11], 0x02);
    // Sums costing more than half the points' bytes are left out: a constant's points take
    // a few bits a block.
    let (_, stream) = encode_joint(&joint_cells(&twelve(|_| Value::Double(0.37)))).unwrap();
    assert_eq!(&stream[..2], &[0x04, 0x00]);
    // Nine points an hour: no summary.
    let nine: Vec<_> = (0..2u32)
        .map(|h| (h * 3600, cell(&every(400, &[Value::Int(1); 9]))))
        .collect();
    let (_, stream) = encode_joint(&joint_cells(&nine)).unwrap();
    assert_eq!(&stream[..2], &[0x04, 0x00]);
}

/// A summary section cut short or naming a member that is not there is refused by every
/// reader.
#[test]
fn bad_summary_sections_are_refused() {
    let members = dense_members(2, 130, |h, i| Value::Int(i64::from(h * 1000 + i)));
    let (shapes, stream) = encode_joint(&joint_cells(&members)).unwrap();
    let joint = joint_of(&members, &shapes);
    assert!(
        joint_summaries(&stream, &joint)
            .unwrap()
            .unwrap()
            .iter()
            .all(Option::is_some)
    );
    let mut bad_bit = stream.clone();
    bad_bit[1] |= 0x04; // a third member
    let mut bad_kind = stream.clone();
    bad_kind[2] = 0x07;
    for bad in [bad_bit, bad_kind, stream[..4].to_vec()] {
        assert!(joint_summaries(&bad, &joint).is_err());
        assert!(DataCellCodec.decode_joint("t", &bad, &joint).is_err());
        assert!(
            decode_joint_columns::<f64>(&bad, &joint, 0, &mut Vec::new(), &mut Vec::new()).is_err()
        );
    }
}

/// The joint members (offsets and shapes) of an encoded stream's cells.
fn members_of(members: &[(u32, Rebuilt)], shapes: &[Option<JointShape>]) -> Vec<JointMember> {
    members
        .iter()
        .zip(shapes)
        .filter_map(|((o, _), s)| {
            s.map(|shape| JointMember {
                offset_secs: *o,
                shape,
            })
        })
        .collect()
}

#[test]
fn joint_sections_split_the_stream() {
    // `joint_stream_example`'s stream: version, an empty bitmap, runs (3 resolution, 6 of
    // flag mode and flag runs), offsets (mode, first, divisor, a 5-byte Rice sequence),
    // integers, and one raw float after its mode byte.
    let members = vec![
        (
            0,
            cell(&every(300, &[Value::Int(5), Value::Int(6), Value::Int(7)])),
        ),
        (3600, cell(&[(false, 0, Value::Float(1.5))])),
    ];
    let (shapes, stream) = DataCellCodec
        .encode_joint("t", &joint_cells(&members))
        .unwrap();
    let joint = members_of(&members, &shapes);
    let s = joint_sections(&stream, &joint).unwrap();
    assert_eq!(
        s,
        JointSections {
            version: 1,
            summaries: 1,
            runs: 3,
            flags: 6,
            offsets: 10,
            integers: 5,
            float_head: 1,
            mantissas: 0,
            corrections: 0,
            raw_floats: 4,
            integer_points: 3,
            float_points: 1,
            scale: None,
        }
    );
    // Two hours of doubles a tenth apart, multiplied in floating point (some a unit in the
    // last place off their decimal): scale 1, mantissas and corrections, both hours
    // summarized; every byte in one section.
    let members = dense_members(2, 360, |h, i| Value::Double(f64::from(h * 360 + i) * 0.1));
    let (shapes, stream) = encode_joint(&joint_cells(&members)).unwrap();
    let joint = members_of(&members, &shapes);
    let s = joint_sections(&stream, &joint).unwrap();
    assert_eq!(s.scale, Some(1));
    assert_eq!((s.integer_points, s.float_points), (0, 720));
    assert_eq!(s.summaries, 1 + 2 * 25);
    assert!(s.mantissas > 0 && s.corrections > 0, "{s:?}");
    assert_eq!((s.integers, s.raw_floats, s.float_head), (0, 0, 2));
    let all = s.version
        + s.summaries
        + s.runs
        + s.flags
        + s.offsets
        + s.integers
        + s.float_head
        + s.mantissas
        + s.corrections
        + s.raw_floats;
    assert_eq!(all, stream.len());
    // A stream cut short is refused, as every reader refuses it.
    assert!(joint_sections(&stream[..stream.len() - 1], &joint).is_err());
}

/// The float section as it was written before sections were planned: every candidate scale's
/// section written in full, the shortest kept.
fn encode_floats_each_written(floats: &[&Point], out: &mut Vec<u8>) {
    let (raw_len, candidates) = float_candidates(floats);
    let (mut best, mut section) = (Vec::new(), Vec::new());
    for k in (0..=MAX_DECIMALS)
        .rev()
        .filter(|k| candidates & (1 << k) != 0)
    {
        let best_len = if best.is_empty() { raw_len } else { best.len() };
        section.clear();
        if decimal_section(floats, k, Some(best_len), Packing::Rice, &mut section)
            && section.len() < best_len
        {
            std::mem::swap(&mut best, &mut section);
        }
    }
    if best.is_empty() {
        out.push(1);
        for p in floats {
            write_bits(p.bits, p.qualifier.flags(), out);
        }
    } else {
        out.extend_from_slice(&best);
    }
}

/// Floats as the generated stream and real metrics carry them: two-decimal walks, counters
/// divided down to full-precision doubles, a level with spikes, and whole numbers.
fn real_shaped_floats(len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<Value>> {
    (0u8..4, prop::collection::vec((-10i64..=10, 0u8..40), len)).prop_map(|(shape, steps)| {
        let mut level = 500i64;
        steps
            .into_iter()
            .enumerate()
            .map(|(i, (step, spike))| {
                level = (level + step).max(0);
                Value::Double(match shape {
                    0 => (level as f64) / 100.0,
                    1 => level as f64 / 3.0 + i as f64 * 0.1,
                    2 if spike == 0 => level as f64 * 1e6,
                    2 => level as f64 / 100.0,
                    _ => level as f64,
                })
            })
            .collect()
    })
}

/// The float section a planned Rice section writes, byte for byte the one writing every
/// candidate in full kept: over any floats, noisy decimals and real-shaped values.
fn assert_floats_as_each_written(values: &[Value]) -> Result<(), TestCaseError> {
    let pts = points_of(&every(10, values));
    let floats: Vec<&Point> = pts.iter().filter(|p| is_float(p)).collect();
    let (mut planned, mut written) = (vec![9u8], vec![9u8]);
    encode_floats(&floats, Packing::Rice, &mut planned);
    encode_floats_each_written(&floats, &mut written);
    prop_assert_eq!(planned, written);
    Ok(())
}

#[test]
fn generated_stream_floats_as_each_written() {
    // The ingest bench's two-decimal walk, and full-precision doubles near it.
    let walk: Vec<Value> = (0..360)
        .map(|i: i64| Value::Double(((i * 37) % 1000) as f64 / 100.0))
        .collect();
    assert_floats_as_each_written(&walk).unwrap();
    let full: Vec<Value> = (0..360)
        .map(|i: i64| Value::Double(i as f64 / 7.0 + 8_953_352.731_831_899))
        .collect();
    assert_floats_as_each_written(&full).unwrap();
}

proptest! {
    #[test]
    fn planned_float_sections_as_each_written(
        values in prop_oneof![
            prop::collection::vec(value_strategy(), 1..200),
            noisy_decimals(1..200),
            real_shaped_floats(1..300),
        ],
    ) {
        assert_floats_as_each_written(&values)?;
    }
}

#[test]
fn cell_sections_split_the_blob() {
    // 20 integers a minute apart, then a 4-byte and an 8-byte float, each on the width its
    // value gives: head (version, count, the meta flag and byte), resolution runs (count,
    // first, one length), offset runs (first, one delta run), flag mode 0x03 and two kind
    // runs (count, first, two lengths), the integers (first, divisor, floor, width), the
    // floats as doubles at scale 1.
    let mut values: Vec<Value> = (5..25).map(Value::Int).collect();
    values.extend([Value::Float(1.5), Value::Double(2.1)]);
    let blob = encode_v3(&points_of(&every(60, &values)), Some(0));
    let s = cell_sections(&blob).unwrap();
    assert_eq!((s.version, s.runs, s.flags), (4, 3, 5), "{s:?}");
    assert_eq!((s.integer_points, s.float_points), (20, 2));
    assert_eq!(s.scale, Some(1));
    let parts = s.version
        + s.runs
        + s.offsets
        + s.flags
        + s.integers
        + s.float_head
        + s.mantissas
        + s.corrections
        + s.raw_floats;
    assert_eq!(parts, blob.len());
    assert!(cell_sections(&blob[..blob.len() - 1]).is_err());
}

/// A blob's flag mode byte (version 3).
fn flag_mode_of(blob: &[u8]) -> u8 {
    let s = cell_sections(blob).unwrap();
    blob[s.version + s.runs + s.offsets]
}

/// Values as OpenTSDB's `put` types them: integers, and floats on 4 bytes exactly when their
/// value as a double is a float; so every point's width is the one its value gives.
fn put_typed() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => (-1_000_000i64..1_000_000).prop_map(Value::Int),
        1 => any::<i64>().prop_map(Value::Int),
        3 => (-100_000_000i64..100_000_000, 0i32..7)
            .prop_map(|(m, k)| float_value(m as f64 / 10f64.powi(k))),
        1 => (-4096i64..4096).prop_map(|m| float_value(m as f64 / 4.0)),
        1 => any::<f64>().prop_map(float_value),
    ]
}

proptest! {
    /// Points typed as `put` types them are written with their widths from their values
    /// (flag modes 0x01 to 0x03), unless their 4-byte floats as doubles take more than flag
    /// runs, and come back exactly from every decoder, in a blob and in a joint stream.
    #[test]
    fn widths_from_values_round_trip(values in prop::collection::vec(put_typed(), 2..300)) {
        let points = every(10, &values);
        let pts = points_of(&points);
        prop_assert_eq!(Widths::of(&pts), Widths::FromValues);
        let blob = encode_blob(&pts, Some(0), VERSION_3, Widths::FromValues);
        let mode = flag_mode_of(&blob);
        prop_assert!((FLAG_MODE_INTEGERS..=FLAG_MODE_KINDS).contains(&mode), "mode {mode}");
        assert_decoders_agree(&blob, &pts);
        prop_assert_eq!(decode_blob(&blob).unwrap(), cell(&points));
        let chosen = encode_points(&pts, Some(0));
        prop_assert!(chosen.len() <= blob.len());
        if !has_4_byte_float(&pts) && chosen[0] == VERSION_3 {
            prop_assert_eq!(&chosen, &blob);
        }
        // Version 4 with widths from values reads back alike.
        let v4 = encode_blob(&pts, Some(0), VERSION, Widths::FromValues);
        prop_assert_eq!(flag_mode_of(&v4), mode);
        assert_decoders_agree(&v4, &pts);
        prop_assert_eq!(decode_blob(&v4).unwrap(), cell(&points));
        let members = vec![(0, cell(&points)), (3600, cell(&points))];
        let (shapes, stream) = encode_joint(&joint_cells(&members)).unwrap();
        let joint = members_of(&members, &shapes);
        prop_assert_eq!(joint.len(), 2);
        prop_assert_eq!(
            DataCellCodec.decode_joint("t", &stream, &joint).unwrap(),
            vec![cell(&points), cell(&points)]
        );
        let (mut times, mut got) = (Vec::new(), Vec::<f64>::new());
        decode_joint_columns(&stream, &joint, 0, &mut times, &mut got).unwrap();
        let want: Vec<u64> = pts
            .iter()
            .chain(&pts)
            .map(|p| p.value().as_f64().to_bits())
            .collect();
        prop_assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want);
    }
}

#[test]
fn widths_not_from_values_are_listed() {
    // Each of these points has a width its value does not give: an integer on more bytes
    // than it needs, a double that is exactly a float, a 4-byte NaN (NaN is never a float's
    // width). Among put-typed points, each takes flag runs back, and comes back exactly.
    let wide_int = Point::new(Qualifier::seconds(20, 7).unwrap(), 5);
    let odd = [
        wide_int,
        points_of(&[(false, 20_000, Value::Double(12.5))])[0],
        points_of(&[(false, 20_000, Value::Float(f32::NAN))])[0],
    ];
    for p in odd {
        assert_ne!(width_from_value(&p), Some(p.qualifier.flags()), "{p:?}");
        let mut pts = points_of(&every(10, &[Value::Int(3), Value::Float(1.5)]));
        pts.push(p);
        pts.extend(points_of(&[(false, 30_000, Value::Double(2.1))]));
        assert_eq!(Widths::of(&pts), Widths::RunsAfterMode);
        let blob = encode_points(&pts, Some(0));
        assert_eq!(flag_mode_of(&blob), FLAG_MODE_RUNS);
        assert_decoders_agree(&blob, &pts);
    }
}

#[test]
fn flag_modes_are_checked() {
    let values: Vec<Value> = (0..20).map(Value::Int).collect();
    let pts = points_of(&every(10, &values));
    let blob = encode_v3(&pts, None);
    let s = cell_sections(&blob).unwrap();
    let at = s.version + s.runs + s.offsets;
    assert_eq!(blob[at], FLAG_MODE_INTEGERS);
    // Refused alike by the point and the column decoders.
    let refused = |b: &[u8]| {
        let points = decode_points(b, &mut Vec::new()).is_err();
        let columns = decode_columns::<Num>(b, 0, &mut Vec::new(), &mut Vec::new()).is_err();
        assert_eq!(points, columns, "{b:02X?}");
        points
    };
    let with = |flags: &[u8]| {
        let mut b = blob.clone();
        b.splice(at..=at, flags.iter().copied());
        b
    };
    // The same points as kind runs are read; flag runs after mode 0x00 too.
    assert_decoders_agree(&with(&[3, 1, 0, 20]), &pts);
    assert_decoders_agree(&with(&[0, 1, 0, 20]), &pts);
    for bad in [
        [4].as_slice(),     // an unknown mode
        &[3, 1, 0, 21],     // kind runs past the points
        &[3, 1, 0, 19],     // short of them
        &[3, 1, 2, 20],     // a first kind neither integer nor float
        &[3, 2, 0, 10, 11], // past them over two runs
        &[3, 1],            // cut short
    ] {
        assert!(refused(&with(bad)), "{bad:?}");
    }
    // A version-2 blob has no mode byte: the same bytes there are flag runs.
    let mut v2 = with(&[1, 0, 20]);
    v2[0] = VERSION_2;
    assert_decoders_agree(&v2, &pts);
}

/// Where a joint stream's integer quotients' mode byte is (after the integers' first value
/// and divisor).
fn integer_mode_at(stream: &[u8], members: &[JointMember]) -> usize {
    let s = joint_sections(stream, members).unwrap();
    let mut r = Reader {
        bytes: stream,
        pos: s.version + s.summaries + s.runs + s.flags + s.offsets,
    };
    r.varint().unwrap();
    r.varint().unwrap();
    r.pos
}

/// A xorshift64* sequence from `seed` (not zero): test values, the same on every run.
fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        seed.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[test]
fn quotients_take_the_shorter_of_rice_and_a_frame() {
    // A counter stepping by 0..99 at random (every step as likely: a frame of 7 bits is
    // shorter than Rice codes), then a gauge mostly still with rare spikes (Rice codes of a
    // bit or two are shorter than a frame as wide as the spikes).
    let mut next = xorshift(0x9E37_79B9_7F4A_7C15);
    let mut counter = 0i64;
    let counts: Vec<i64> = (0..24 * 360)
        .map(|_| {
            counter += (next() % 100) as i64;
            counter
        })
        .collect();
    let uniform = dense_members(24, 360, |h, i| Value::Int(counts[(h * 360 + i) as usize]));
    let spiky = dense_members(24, 360, |h, i| {
        Value::Int(if (h * 360 + i) % 97 == 0 { 1 << 20 } else { 7 })
    });
    for (members, mode) in [(uniform, QUOTIENTS_FRAME), (spiky, QUOTIENTS_RICE)] {
        let cells = joint_cells(&members);
        let (shapes, stream) = encode_joint(&cells).unwrap();
        let joint = members_of(&members, &shapes);
        let at = integer_mode_at(&stream, &joint);
        assert_eq!(stream[at], mode);
        // The mode taken is the shorter.
        let mut points = Vec::new();
        for (_, (q, v)) in &members {
            compact::decode_cell(q, v, &mut points).unwrap();
        }
        let (_, _, quotients) = sequence_parts(&int_values(&points));
        let (rice_len, frame) = (
            rice::Planned::new(&quotients).encoded_len(),
            frame_len(&quotients),
        );
        assert_eq!(
            mode == QUOTIENTS_FRAME,
            frame < rice_len,
            "{frame} {rice_len}"
        );
        let expected: Vec<Rebuilt> = members.iter().map(|(_, c)| c.clone()).collect();
        assert_eq!(
            DataCellCodec.decode_joint("t", &stream, &joint).unwrap(),
            expected
        );
        let (mut times, mut values) = (Vec::new(), Vec::<f64>::new());
        decode_joint_columns(&stream, &joint, 0, &mut times, &mut values).unwrap();
        assert_eq!(values.len(), 24 * 360);
        // An unknown mode is refused by both decoders.
        let mut bad = stream.clone();
        bad[at] = 2;
        assert!(DataCellCodec.decode_joint("t", &bad, &joint).is_err());
        assert!(
            decode_joint_columns(&bad, &joint, 0, &mut Vec::new(), &mut Vec::<f64>::new()).is_err()
        );
    }
}

/// Integers of each stored length (1, 2, 4 and 8 bytes), negative ones among them, packed as
/// frames wide enough that the column decoders read them a word at a time: both decoders,
/// cell and joint stream, give each integer back, sign extended from its own length.
#[test]
fn frame_integers_of_every_length_decode_alike() {
    let mut next = xorshift(0x2545_F491_4F6C_DD1D);
    for (bits, len) in [(7u32, 1u8), (15, 2), (31, 4), (44, 8)] {
        let spread = 1i64 << bits;
        let values: Vec<i64> = (0..24 * 360)
            .map(|_| (next() % (2 * spread as u64)) as i64 - spread)
            .collect();
        let members = dense_members(24, 360, |h, i| Value::Int(values[(h * 360 + i) as usize]));
        // The lengths the test means to cover are there.
        let mut points = Vec::new();
        for (_, (q, v)) in &members {
            compact::decode_cell(q, v, &mut points).unwrap();
        }
        assert!(
            points
                .iter()
                .any(|p| p.qualifier.value_len() == usize::from(len))
        );
        for (_, (q, v)) in &members {
            let blob = DataCellCodec.encode("t", q, v).unwrap();
            let mut want = Vec::new();
            compact::decode_cell(q, v, &mut want).unwrap();
            assert_decoders_agree(&blob, &want);
        }
        let cells = joint_cells(&members);
        let (shapes, stream) = encode_joint(&cells).unwrap();
        let joint = members_of(&members, &shapes);
        assert_eq!(stream[integer_mode_at(&stream, &joint)], QUOTIENTS_FRAME);
        let (mut times, mut ints) = (Vec::new(), Vec::<Num>::new());
        decode_joint_columns(&stream, &joint, 0, &mut times, &mut ints).unwrap();
        let got: Vec<i64> = ints.iter().map(|v| v.as_f64() as i64).collect();
        assert_eq!(got, values, "{len}-byte integers as stored values");
        let mut doubles = Vec::<f64>::new();
        decode_joint_columns(&stream, &joint, 0, &mut Vec::new(), &mut doubles).unwrap();
        let want: Vec<f64> = values.iter().map(|v| *v as f64).collect();
        assert_eq!(doubles, want, "{len}-byte integers as doubles");
    }
}

/// The version 3 blob `encode_points` would write without version 4.
fn encode_v3(pts: &[Point], meta: Option<u8>) -> Vec<u8> {
    with_shorter_widths(pts, |w| encode_blob(pts, meta, VERSION_3, w))
}

/// Rows as `hourglass-bench ingest` writes them: 250 points 10 s apart of a float gauge
/// (`level / 100` and `level % 100` printed as a decimal), an integer gauge and a counter,
/// each level stepping by -10..10 (the counter by 100 times the step's size).
fn ingest_rows(seed: u64) -> [(&'static str, Vec<Point>); 3] {
    let mut next = xorshift(seed);
    let mut row = |kind: &str| {
        let mut level = (next() % 1000) as i64;
        let values: Vec<Value> = (0..250)
            .map(|_| {
                let step = (next() % 21) as i64 - 10;
                level = if kind == "counter" {
                    level + step.abs() * 100
                } else {
                    (level + step).max(0)
                };
                if kind == "float" {
                    let printed = format!("{}.{}", level / 100, level % 100);
                    float_value(printed.parse::<f64>().unwrap())
                } else {
                    Value::Int(level)
                }
            })
            .collect();
        points_of(&every(10, &values))
    };
    [
        ("float", row("float")),
        ("int", row("int")),
        ("counter", row("counter")),
    ]
}

/// The quotient mode byte of a version 4 blob's integers or mantissas (after the sequence's
/// first value and divisor), and where it is.
fn blob_quotient_mode(blob: &[u8], of_floats: bool) -> (usize, u8) {
    let s = cell_sections(blob).unwrap();
    let mut at = s.version + s.runs + s.offsets + s.flags;
    if of_floats {
        at += s.integers + s.float_head;
    }
    let mut r = Reader {
        bytes: blob,
        pos: at,
    };
    r.varint().unwrap();
    r.varint().unwrap();
    (r.pos, blob[r.pos])
}

#[test]
fn version_4_takes_each_sequence_its_shortest_form() {
    for seed in [1, 2, 3] {
        for (kind, pts) in ingest_rows(seed) {
            let blob = encode_points(&pts, Some(0));
            assert_eq!(blob[0], VERSION, "{kind}");
            assert_decoders_agree(&blob, &pts);
            let floats = kind == "float";
            let (_, mode) = blob_quotient_mode(&blob, floats);
            // Mantissas stepping by -10..10 and now and then by up to 100: Rice codes; steps
            // equally likely over a range that is not a power of two: a truncated frame.
            let want = if floats {
                QUOTIENTS_RICE
            } else {
                QUOTIENTS_TRUNCATED
            };
            assert_eq!(mode, want, "{kind}");
            // The form kept is the shortest of the three.
            let values = if floats {
                let doubles: Vec<Point> = pts.iter().map(as_double).collect();
                let refs: Vec<&Point> = doubles.iter().collect();
                let (_, candidates) = float_candidates(&refs);
                let k = (0..=MAX_DECIMALS)
                    .rev()
                    .find(|k| candidates & (1 << k) != 0 && *k > 0)
                    .unwrap();
                decimal_values(&refs, k, None).unwrap().0
            } else {
                int_values(&pts)
            };
            let (_, _, quotients) = sequence_parts(&values);
            let rice_len = rice::Planned::new(&quotients).encoded_len();
            let truncated_len = truncated::encoded_len(&quotients).unwrap();
            let lens = [rice_len, frame_len(&quotients), truncated_len];
            let least = *lens.iter().min().unwrap();
            assert_eq!(lens[usize::from(want)], least, "{kind}: {lens:?}");
            if want == QUOTIENTS_TRUNCATED {
                // A sixteenth shorter than the frame at least: worth its slower reading.
                assert!(truncated_len * 16 <= lens[1] * 15, "{kind}: {lens:?}");
            }
            // Shorter than version 3, whose frames pay the widest step on every value.
            let v3 = with_shorter_widths(&pts, |w| encode_blob(&pts, Some(0), VERSION_3, w));
            assert!(blob.len() < v3.len(), "{kind}: {} {}", blob.len(), v3.len());
            // Cut anywhere, refused by both decoders.
            for cut in 1..blob.len() {
                assert!(decode_points(&blob[..cut], &mut Vec::new()).is_err());
                let columns =
                    decode_columns::<Num>(&blob[..cut], 0, &mut Vec::new(), &mut Vec::new());
                assert!(columns.is_err(), "{kind}: cut at {cut}");
            }
        }
    }
}

#[test]
fn truncated_frames_only_where_they_save_a_sixteenth() {
    // A counter stepping by 0..99 at random: a truncated frame of the 100 steps (6.72 bits a
    // value) is shorter than a frame of 7 bits, but not by a sixteenth.
    let mut next = xorshift(11);
    let mut counter = 0i64;
    let values: Vec<Value> = (0..360)
        .map(|_| {
            counter += (next() % 100) as i64;
            Value::Int(counter)
        })
        .collect();
    let pts = points_of(&every(10, &values));
    let blob = encode_points(&pts, Some(0));
    assert_eq!(blob[0], VERSION);
    assert_eq!(blob_quotient_mode(&blob, false).1, QUOTIENTS_FRAME);
    let (_, _, quotients) = sequence_parts(&int_values(&pts));
    let (frame, truncated) = (
        frame_len(&quotients),
        truncated::encoded_len(&quotients).unwrap(),
    );
    assert!(
        truncated < frame && truncated * 16 > frame * 15,
        "{truncated} {frame}"
    );
    assert_decoders_agree(&blob, &pts);
}

#[test]
fn version_4_modes_are_checked() {
    let [_, (_, ints), _] = ingest_rows(7);
    let blob = encode_points(&ints, None);
    let (at, mode) = blob_quotient_mode(&blob, false);
    assert_eq!(mode, QUOTIENTS_TRUNCATED);
    for bad_mode in [3u8, 0x80, 0xFF] {
        let mut bad = blob.clone();
        bad[at] = bad_mode;
        assert!(decode_points(&bad, &mut Vec::new()).is_err());
        assert!(DataCellCodec.decode("t", &bad).is_err());
        assert!(decode_columns::<Num>(&bad, 0, &mut Vec::new(), &mut Vec::new()).is_err());
    }
    // A span of 2^32 is refused; the span is the varint after the least value.
    let mut r = Reader {
        bytes: &blob,
        pos: at + 1,
    };
    r.varint().unwrap();
    let span_at = r.pos;
    let mut wide = blob[..span_at].to_vec();
    put_varint(&mut wide, truncated::SPAN_LIMIT);
    wide.extend_from_slice(&[0; 200]);
    assert!(decode_points(&wide, &mut Vec::new()).is_err());
    assert!(decode_columns::<Num>(&wide, 0, &mut Vec::new(), &mut Vec::new()).is_err());
    // The same body under a version 3 head: mode bytes are not expected there.
    let mut v3 = blob.clone();
    v3[0] = VERSION_3;
    assert!(decode_points(&v3, &mut Vec::new()).is_err());
}

#[test]
fn short_rows_keep_version_3_where_it_is_shorter() {
    // Three integers at irregular offsets, of both resolutions: version 4's mode bytes
    // (resolution, offsets, quotients) win nothing back.
    let pts = points_of(&[
        (false, 0, Value::Int(3)),
        (true, 1_250, Value::Int(5)),
        (false, 7_000, Value::Int(4)),
    ]);
    let blob = encode_points(&pts, Some(0));
    assert_eq!(blob[0], VERSION_3);
    let v4 = with_shorter_widths(&pts, |w| encode_blob(&pts, Some(0), VERSION, w));
    assert!(v4.len() > blob.len());
    assert_decoders_agree(&v4, &pts);
    // A long row is version 4 whatever it costs: at most four bytes more with meta 0x00.
    let pts = points_of(&every(10, &[Value::Int(3), Value::Int(5)].repeat(40)));
    let blob = encode_points(&pts, Some(0));
    assert_eq!(blob[0], VERSION);
    let v3 = with_shorter_widths(&pts, |w| encode_blob(&pts, Some(0), VERSION_3, w));
    assert!(blob.len() <= v3.len() + 4, "{} {}", blob.len(), v3.len());
}

/// Version 4 blobs (every sequence form, both meta codes, mixed resolutions) with a byte set,
/// a bit flipped, a cut or a byte inserted: the point and the column decoders accept and
/// refuse alike, give the same points where they accept, and never panic.
#[test]
fn mutated_version_4_blobs_decode_alike_or_not_at_all() {
    let mut next = xorshift(12345);
    let mut blobs = Vec::new();
    for seed in 1..8 {
        for (_, pts) in ingest_rows(seed) {
            blobs.push(encode_points(&pts, Some(0)));
            blobs.push(encode_points(&pts[..(seed as usize * 37) % 250 + 1], None));
        }
    }
    let pts = points_of(&[
        (false, 0, Value::Int(3)),
        (true, 1_250, Value::Double(5.5)),
        (false, 7_000, Value::Int(4)),
    ]);
    blobs.push(with_shorter_widths(&pts, |w| {
        encode_blob(&pts, Some(1), VERSION, w)
    }));
    blobs.push(with_shorter_widths(&pts, |w| {
        encode_blob(&pts, Some(7), VERSION, w)
    }));
    assert!(blobs.iter().all(|b| b[0] == VERSION));
    let mut accepted = 0;
    for i in 0..20_000 {
        let mut b = blobs[i % blobs.len()].clone();
        let at = (next() as usize) % b.len();
        match next() % 4 {
            0 => b[at] = next() as u8,
            1 => b[at] ^= 1 << (next() % 8),
            2 => b.truncate(at),
            _ => b.insert(at, next() as u8),
        }
        let mut points = Vec::new();
        let by_points = decode_points(&b, &mut points);
        let by_columns = decode_columns::<Num>(&b, 0, &mut Vec::new(), &mut Vec::new());
        assert_eq!(by_points.is_ok(), by_columns.is_ok(), "{b:02X?}");
        assert_eq!(by_points.is_ok(), DataCellCodec.decode("t", &b).is_ok());
        if by_points.is_ok() {
            assert_decoders_agree(&b, &points);
            accepted += 1;
        }
    }
    // Both outcomes are met (a flipped value bit still decodes, a cut mostly does not).
    assert!(accepted > 1_000 && accepted < 19_000, "{accepted}");
}

/// A corrupt frame's floor and divisor whose steps reach past an `i128` from a negative
/// start: read one by one, as before, not in groups (the bound once overflowed there).
#[test]
fn a_bound_past_i128_reads_values_one_by_one() {
    assert!(!fits(-1, 4, i64::MIN, 1 << 62, 1, 1));
    // Ten bytes: the four values read are all within the frame's word-by-word part.
    let data = packed_bits(&[1, 0, 1, 1], 1, 0, 10);
    let deltas = || Deltas {
        value: -1,
        divisor: 1 << 62,
        floor: i64::MIN,
        bits: Unpacker {
            data: &data,
            width: 1,
            mask: 1,
            bit: 0,
        },
        listed: None,
    };
    let mut got: Vec<Num> = Vec::new();
    deltas().ints_into(4, 1, &mut got);
    let mut one_by_one = deltas();
    let want: Vec<Num> = (0..4)
        .map(|_| Num::Int(sign_extend(one_by_one.next(), 1)))
        .collect();
    assert_eq!(got, want);
}

/// `values` (each cut to `width` bits) packed from bit `skip` on, as frames are: each value's
/// bits from the lowest, a byte's bits from its lowest; then `spare` bytes (what follows a
/// frame in its blob, if anything).
fn packed_bits(values: &[u64], width: u32, skip: usize, spare: usize) -> Vec<u8> {
    let mut data = vec![0u8; (skip + values.len() * width as usize).div_ceil(8) + spare];
    let mut bit = skip;
    for v in values {
        for i in 0..width as usize {
            if v >> i & 1 == 1 {
                data[(bit + i) / 8] |= 1 << ((bit + i) % 8);
            }
        }
        bit += width as usize;
    }
    data
}

proptest! {
    /// A frame's integers read in runs (narrow frames several values a word, wide ones a value
    /// a word, the last values within eight bytes of the frame's end one at a time) are what
    /// reading them one by one and sign-extending each gives: starts near the top of their
    /// byte length's range make some runs cross it, where the values wrap, and any floor and
    /// divisor (as a corrupt blob may hold) take steps past any bound.
    #[test]
    fn frame_runs_read_as_values_one_by_one(
        width in 0u32..=20,
        len_pick in 0usize..4,
        start in prop_oneof![-1_000i64..1_000, any::<i64>(), 0i64..2_000],
        near_top in any::<bool>(),
        floor in prop_oneof![4 => -3i64..3, 1 => any::<i64>(), 1 => Just(i64::MIN)],
        divisor in prop_oneof![
            4 => prop_oneof![Just(1i64), Just(-1i64), 1i64..1_000],
            1 => any::<i64>(),
            1 => (0u32..63).prop_map(|p| 1i64 << p),
        ],
        raw in proptest::collection::vec(any::<u64>(), 0..300),
        skip in 0usize..8,
        spare in 0usize..=8,
        cut in 0usize..300,
    ) {
        let len = [1u32, 2, 4, 8][len_pick];
        let top = if len == 8 { i64::MAX } else { (1i64 << (8 * len - 1)) - 1 };
        let first = if near_top { top.wrapping_sub(start.rem_euclid(2_000)) } else { start };
        let mask = if width == 0 { 0 } else { (1u64 << width) - 1 };
        let data = packed_bits(&raw, width, skip, spare);
        let deltas = || Deltas {
            value: first,
            divisor,
            floor,
            bits: Unpacker { data: &data, width, mask, bit: skip },
            listed: None,
        };
        let n = raw.len();
        let cut = cut.min(n);
        let mut runs = deltas();
        let mut got: Vec<Num> = Vec::new();
        runs.ints_into(cut, len, &mut got);
        runs.ints_into(n - cut, len, &mut got);
        let mut one_by_one = deltas();
        let want: Vec<Num> = (0..n).map(|_| Num::Int(sign_extend(one_by_one.next(), len))).collect();
        prop_assert_eq!(&got, &want);
        // The same as doubles.
        let mut doubles: Vec<f64> = Vec::new();
        deltas().ints_into(n, len, &mut doubles);
        let want: Vec<f64> = want.iter().map(|v| v.as_f64()).collect();
        prop_assert_eq!(doubles, want);
    }
}

#[test]
fn short_decimal_floats_are_told_from_long_ones() {
    for f in [
        0.0f32,
        -0.0,
        1.0,
        912.25,
        -3.5,
        0.0625,
        16_777_215.0,
        0.0625 - 65_536.0,
    ] {
        assert!(is_short_decimal(f.to_bits()), "{f}");
    }
    let tiny = f32::from_bits(1);
    let long = [
        0.1f32,
        0.03125,
        1.0 / 3.0,
        912.34,
        tiny,
        16_777_216.0,
        -1e30,
        9.223372e18,
    ];
    for f in long.into_iter().chain([f32::INFINITY, f32::NAN]) {
        assert!(!is_short_decimal(f.to_bits()), "{f}");
    }
}

/// How many times [`with_shorter_widths`] encodes `pts` (once, or with flag runs too), after
/// checking that what it keeps is the shorter of the two and reads back.
fn encodings(pts: &[Point]) -> usize {
    let calls = std::cell::Cell::new(0);
    let blob = with_shorter_widths(pts, |w| {
        calls.set(calls.get() + 1);
        encode_blob(pts, Some(0), VERSION, w)
    });
    assert_decoders_agree(&blob, pts);
    let listed = encode_blob(pts, Some(0), VERSION, Widths::RunsAfterMode);
    assert!(
        blob.len() <= listed.len(),
        "{} > {}",
        blob.len(),
        listed.len()
    );
    calls.get()
}

/// Flag runs are encoded to compare only where a 4-byte float is long (many decimals, or
/// 2^24 and up), where a body is short of rows' points, or where the body came out long:
/// 4-byte floats of a few decimals (`912.25`) in a body of decimals are written with widths
/// from values at once.
#[test]
fn flag_runs_are_tried_only_where_they_may_be_shorter() {
    let float = hourglass_core::value::float_value;
    let values: Vec<Value> = (0..BOTH_VERSIONS_BELOW as i64)
        .map(|i| float(912.0 + i as f64 * 0.05))
        .collect();
    let short = points_of(&every(10, &values));
    assert!(has_4_byte_float(&short));
    assert_eq!(encodings(&short), 1);
    // Fewer points: both, as the float section may be raw bytes (4 a float against 8).
    assert_eq!(encodings(&short[..BOTH_VERSIONS_BELOW - 1]), 2);
    let mut long = short.clone();
    long[1] = points_of(&[(false, 10_000, Value::Float(0.1))])[0];
    assert_eq!(encodings(&long), 2);
    // Whole floats past 2^24 are raw bytes as doubles: 4 bytes a float shorter with flag runs.
    let large: Vec<Value> = (1..=BOTH_VERSIONS_BELOW)
        .map(|i| float(f64::from(i as f32 * 1e20)))
        .collect();
    assert!(large.iter().all(|v| matches!(v, Value::Float(_))));
    assert_eq!(encodings(&points_of(&every(10, &large))), 2);
    // Short floats, then doubles of many digits: a body of over 4 bytes a float, compared.
    let mut seed = 7u64;
    let mixed: Vec<Value> = (0..BOTH_VERSIONS_BELOW)
        .map(|i| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            float(if i < 32 {
                i as f64 + 0.5
            } else {
                (seed >> 11) as f64 / 3.0e9
            })
        })
        .collect();
    assert!(mixed[..32].iter().all(|v| matches!(v, Value::Float(_))));
    assert!(mixed[32..].iter().all(|v| matches!(v, Value::Double(_))));
    let mixed = points_of(&every(10, &mixed));
    let from_values = encode_blob(&mixed, Some(0), VERSION, Widths::FromValues);
    assert!(
        from_values.len() >= 4 * mixed.len(),
        "{}",
        from_values.len()
    );
    assert_eq!(encodings(&mixed), 2);
    // Halves near 2^22 on 4 bytes beside one double past 2^47: the double leaves only scale
    // 0, where a half needs a correction of 2^29 as a double (1 as a float); compared.
    let halves: Vec<Value> = (0..BOTH_VERSIONS_BELOW)
        .map(|i| {
            if i + 1 == BOTH_VERSIONS_BELOW {
                Value::Double((1u64 << 60) as f64 + 256.0)
            } else {
                float(4_194_304.0 + i as f64 + if i % 4 == 1 { 0.5 } else { 0.0 })
            }
        })
        .collect();
    let halves = points_of(&every(10, &halves));
    // Every float short but the double: only its magnitude keeps the comparison.
    assert!(
        halves[..BOTH_VERSIONS_BELOW - 1]
            .iter()
            .all(|p| is_short_decimal(p.bits as u32))
    );
    assert_eq!(settled_floats(&halves), None);
    assert_eq!(
        settled_floats(&halves[..BOTH_VERSIONS_BELOW - 1]),
        Some(BOTH_VERSIONS_BELOW - 1)
    );
    let from_values = encode_blob(&halves, Some(0), VERSION, Widths::FromValues);
    assert!(
        from_values.len() < 4 * halves.len(),
        "{}",
        from_values.len()
    );
    assert_eq!(encodings(&halves), 2);
}

/// A row's values for [`flag_runs_lose_nothing_where_left_untried`]: decimals of up to four
/// places a random walk apart, exact floats of up to four places near zero or up to 2^24,
/// halves from 2^21 to 2^24, whole floats up to 2^72, doubles past 2^50 and decimals of any
/// magnitude, mixed.
fn typed_values() -> impl Strategy<Value = Vec<Value>> {
    let value = prop_oneof![
        4 => (-100_000_000i64..100_000_000, 0usize..=4).prop_map(|(m, k)| m as f64 / POW10[k]),
        2 => (-(1i64 << 20)..(1i64 << 20)).prop_map(|m| m as f64 / 16.0),
        1 => (-(1i64 << 24)..(1i64 << 24)).prop_map(|m| m as f64),
        1 => (1i64..1 << 24, 0i32..48).prop_map(|(m, e)| m as f64 * 2f64.powi(e)),
        1 => (1i64 << 21..1 << 24, any::<bool>())
            .prop_map(|(m, half)| m as f64 + if half { 0.5 } else { 0.0 }),
        1 => (50i32..64).prop_map(|e| 2f64.powi(e) + 256.0),
        1 => (1i64..100_000, -8i32..=20, 0usize..=4)
            .prop_map(|(m, e, k)| m as f64 * 10f64.powi(e) / POW10[k]),
    ];
    (
        -1_000_000i64..1_000_000,
        0usize..=4,
        prop::collection::vec(
            (-500i64..500, any::<bool>(), value),
            BOTH_VERSIONS_BELOW..300,
        ),
    )
        .prop_map(|(start, decimals, steps)| {
            let mut m = start;
            steps
                .into_iter()
                .map(|(step, walk, other)| {
                    m += step;
                    let v = if walk {
                        m as f64 / POW10[decimals]
                    } else {
                        other
                    };
                    hourglass_core::value::float_value(v)
                })
                .collect()
        })
}

proptest! {
    /// Values typed as `put` types them (a 4-byte float where the value is exactly one): what
    /// is kept is never longer than the same points with flag runs, whether they were
    /// encoded to compare or not.
    #[test]
    fn flag_runs_lose_nothing_where_left_untried(values in typed_values()) {
        let pts = points_of(&every(10, &values));
        prop_assume!(Widths::of(&pts) == Widths::FromValues);
        let kept = with_shorter_widths(&pts, |w| encode_blob(&pts, Some(0), VERSION, w));
        let listed = encode_blob(&pts, Some(0), VERSION, Widths::RunsAfterMode);
        prop_assert!(kept.len() <= listed.len(), "{} > {}", kept.len(), listed.len());
    }
}
