use super::*;

#[test]
fn iso_dates() {
    assert_eq!(iso_utc(1356998430000), "2013-01-01T00:00:30Z");
    assert_eq!(iso_utc(0), "1970-01-01T00:00:00Z");
    assert_eq!(iso_utc(951_782_400_500), "2000-02-29T00:00:00.500Z");
    assert_eq!(iso_utc(4_102_444_799_000), "2099-12-31T23:59:59Z");
}

#[test]
fn value_checks() {
    let q = |b: &[u8]| Qualifier::parse(b).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(
        check_value(q(&[0, 0]), &[1]),
        ValueCheck::Valid(_)
    ));
    assert!(matches!(check_value(q(&[0, 1]), &[1]), ValueCheck::Bad(_)));
    assert!(matches!(
        check_value(q(&[0, 7]), &[0, 0, 0, 0, 0, 0, 0, 5]),
        ValueCheck::Vle(_, _, 7)
    ));
    let f = 1.5f32.to_be_bytes();
    let mut zero_padded = vec![0, 0, 0, 0];
    zero_padded.extend_from_slice(&f);
    assert!(matches!(
        check_value(q(&[0, 0x0B]), &zero_padded),
        ValueCheck::Encoding(..)
    ));
    let mut sign = vec![0xFF; 4];
    sign.extend_from_slice(&f);
    match check_value(q(&[0, 0x0B]), &sign) {
        ValueCheck::Encoding(p, msg) => {
            assert_eq!(p.value(), Value::Float(1.5));
            assert!(msg.contains("sign extension"));
        }
        other => panic!("{other:?}"),
    }
    let mut junk = vec![1, 2, 3, 4];
    junk.extend_from_slice(&f);
    assert!(matches!(
        check_value(q(&[0, 0x0B]), &junk),
        ValueCheck::Bad(_)
    ));
    assert!(matches!(check_value(q(&[0, 0x0F]), &f), ValueCheck::Bad(_)));
    assert!(matches!(
        check_value(q(&[0, 0x0B]), &[1, 2]),
        ValueCheck::Bad(_)
    ));
    assert!(matches!(check_value(q(&[0, 0x09]), &f), ValueCheck::Bad(_)));
    assert!(matches!(
        check_value(q(&[0, 0x02]), &[1, 2, 3]),
        ValueCheck::Bad(_)
    ));
}

#[test]
fn global_rows() {
    let schema = Schema::default();
    assert!(is_global_annotation_row(
        &schema,
        &[0, 0, 0, 0x50, 0xE2, 0x27, 0]
    ));
    assert!(!is_global_annotation_row(
        &schema,
        &[0, 0, 1, 0x50, 0xE2, 0x27, 0]
    ));
    assert!(!is_global_annotation_row(
        &schema,
        &[0, 0, 0, 0x50, 0xE2, 0x27, 0, 0, 0, 1, 0, 0, 1]
    ));
    let salted = Schema {
        salt_width: 1,
        ..Schema::default()
    };
    assert!(is_global_annotation_row(
        &salted,
        &[0, 0, 0, 0, 0x50, 0xE2, 0x27, 0]
    ));
    assert!(is_global_annotation_row(
        &salted,
        &[0, 0, 0, 0x50, 0xE2, 0x27, 0]
    ));
    assert!(!is_global_annotation_row(
        &salted,
        &[3, 0, 0, 0, 0x50, 0xE2, 0x27, 0]
    ));
}

#[test]
fn summary_has_opentsdb_labels_in_order() {
    let lines = FsckReport::default().summary_lines();
    assert_eq!(lines[0], "Key Values Processed: 0");
    assert_eq!(lines[19], "Datapoints Qualified for VLE : 0");
    assert_eq!(lines[24], "Total Errors Fixed: 0");
    assert_eq!(lines.len(), 29);
}
