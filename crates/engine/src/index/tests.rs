//! Every key layout pinned with the bytes RFC 0007 gives (its example: metric `00 00 01`,
//! `host=web01` as `00 00 01`/`00 00 07`, `dc=lon` as `00 00 02`/`00 00 09`, 2013-06-12).
#![allow(clippy::unwrap_used)]

use super::*;
use hourglass_core::uid::parse_hex;

const TAGS: &[u8] = &[0, 0, 1, 0, 0, 7, 0, 0, 2, 0, 0, 9];
const PERIOD: u32 = 0x51B7_BA00;

fn series() -> Series<'static> {
    Series {
        metric: &[0, 0, 1],
        tags: TAGS,
    }
}

fn hex(text: &str) -> Vec<u8> {
    parse_hex(&text.replace(' ', "")).unwrap()
}

#[test]
fn period_posting_has_the_rfc_example_bytes() {
    assert_eq!(period_of(1_371_040_000), PERIOD, "2013-06-12 12:26:40 UTC");
    assert_eq!(
        period_posting_key(series(), PERIOD, &[0, 0, 1], &[0, 0, 7]),
        hex("11 000001 51B7BA00 000001000007 000001000007000002000009")
    );
}

#[test]
fn every_key_kind_has_its_layout() {
    let s = series();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (status_key(), "00"),
        (metric_status_key(s.metric), "00 000001"),
        (catalog_key(s), "01 000001 000001000007000002000009"),
        (
            posting_key(s, &[0, 0, 2], &[0, 0, 9]),
            "02 000001 000002 000009 000001000007000002000009",
        ),
        (
            value_metric_key(&[0, 0, 2], &[0, 0, 9], s.metric),
            "03 000002 000009 000001",
        ),
        (
            value_name_key(s.metric, &[0, 0, 1], "web01"),
            "04 000001 000001 7765623031",
        ),
        (
            trigram_key(&[0, 0, 1], *b"eb0", &[0, 0, 7]),
            "05 000001 656230 000007",
        ),
        (
            period_series_key(s, PERIOD),
            "10 000001 51B7BA00 000001000007000002000009",
        ),
        (
            period_value_name_key(s.metric, PERIOD, &[0, 0, 2], "lon"),
            "12 000001 51B7BA00 000002 6C6F6E",
        ),
        (period_counters_key(s.metric, PERIOD), "20 000001 51B7BA00"),
        (series_counters_key(s.metric), "21 000001"),
        (
            note_key(s.metric, 1_371_040_000_123, TAGS),
            "30 000001 0000013F385A287B 000001000007000002000009",
        ),
        (key_series_qualifier(&[0, 0, 1]), "6B 000001"),
        (key_values_qualifier(&[0, 0, 1]), "76 000001"),
    ];
    for (got, want) in cases {
        assert_eq!(got, hex(want), "{want}");
    }
}

#[test]
fn value_names_are_stored_as_the_uid_table_stores_them() {
    // ISO-8859-1 when every character fits it, else UTF-8 (core::uid::name_bytes).
    assert_eq!(
        value_name_key(&[0, 0, 1], &[0, 0, 2], "café"),
        hex("04 000001 000002 636166E9")
    );
    assert_eq!(
        period_value_name_key(&[0, 0, 1], PERIOD, &[0, 0, 2], "東京"),
        hex("12 000001 51B7BA00 000002 E69DB1E4BAAC")
    );
}

#[test]
fn trigrams_are_the_lower_cased_utf8_windows() {
    assert_eq!(trigrams("Web01"), vec![*b"b01", *b"eb0", *b"web"]);
    assert_eq!(
        trigrams("ab"),
        Vec::<[u8; 3]>::new(),
        "shorter than 3 bytes"
    );
    assert_eq!(trigrams("aaaa"), vec![*b"aaa"], "each once");
    // "É" lower-cases to "é" (C3 A9): windows run over bytes, not characters.
    assert_eq!(
        trigrams("XÉ"),
        vec![[0x78, 0xC3, 0xA9]],
        "x é is 3 bytes of UTF-8"
    );
}

#[test]
fn series_come_from_row_keys_and_tsuids() {
    let schema = Schema {
        salt_width: 1,
        ..Schema::default()
    };
    let mut key = vec![7, 0, 0, 1, 0x51, 0xB7, 0xBA, 0x00];
    key.extend_from_slice(TAGS);
    assert_eq!(Series::from_row_key(&schema, &key), Some(series()));
    assert_eq!(Series::from_row_key(&schema, &key[..key.len() - 1]), None);
    assert_eq!(Series::from_row_key(&schema, &key[..8]), None, "no tags");
    let tsuid = series().tsuid();
    assert_eq!(
        Series::from_tsuid(&Schema::default(), &tsuid),
        Some(series())
    );
    let pairs: Vec<(&[u8], &[u8])> = series().pairs(&schema).collect();
    assert_eq!(
        pairs,
        vec![
            (&[0u8, 0, 1][..], &[0u8, 0, 7][..]),
            (&[0, 0, 2][..], &[0, 0, 9][..])
        ]
    );
}

#[test]
fn entries_carry_fixed_timestamps_and_their_values() {
    let schema = Schema::default();
    let names = [Some("web01".to_string()), None];
    let p = period_entries(&schema, series(), PERIOD, &names);
    assert_eq!(p.postings.len(), 2);
    assert_eq!(
        p.postings[1].key,
        period_posting_key(series(), PERIOD, &[0, 0, 2], &[0, 0, 9])
    );
    assert_eq!(
        RowMutation::from(p.postings[0].clone()).mutations,
        vec![
            Mutation::DeleteRow,
            Mutation::set_at("p", b"s".to_vec(), 1_370_995_200_000, Vec::new())
        ]
    );
    assert_eq!(
        p.values.len(),
        1,
        "the value whose name is unknown has no row"
    );
    assert_eq!(
        p.values[0]
            .rows
            .iter()
            .cloned()
            .map(RowMutation::from)
            .collect::<Vec<_>>(),
        vec![RowMutation {
            key: period_value_name_key(&[0, 0, 1], PERIOD, &[0, 0, 1], "web01"),
            mutations: vec![
                Mutation::DeleteRow,
                Mutation::set_at("p", b"v".to_vec(), 1_370_995_200_000, vec![0, 0, 7])
            ],
        }]
    );
    assert_eq!(p.marker.key, period_series_key(series(), PERIOD));

    let g = series_entries(&schema, series());
    let keys: Vec<Vec<u8>> = g.postings.iter().map(|r| r.key.clone()).collect();
    assert_eq!(
        keys,
        vec![
            posting_key(series(), &[0, 0, 1], &[0, 0, 7]),
            posting_key(series(), &[0, 0, 2], &[0, 0, 9]),
        ],
        "format 2: no per-series any-metric postings"
    );
    let value_keys =
        |rows: Vec<Entry>| -> Vec<Vec<u8>> { rows.into_iter().map(|r| r.key).collect() };
    assert_eq!(
        value_keys(value_entries(
            &[0, 0, 1],
            &[0, 0, 1],
            &[0, 0, 7],
            Some("web01")
        )),
        vec![
            value_metric_key(&[0, 0, 1], &[0, 0, 7], &[0, 0, 1]),
            value_name_key(&[0, 0, 1], &[0, 0, 1], "web01"),
        ]
    );
    assert_eq!(
        value_keys(value_entries(&[0, 0, 1], &[0, 0, 2], &[0, 0, 9], None)),
        vec![value_metric_key(&[0, 0, 2], &[0, 0, 9], &[0, 0, 1])],
        "a value without a name still lists its metric"
    );
    let want: Vec<Vec<u8>> = [*b"b01", *b"eb0", *b"web"]
        .into_iter()
        .map(|t| trigram_key(&[0, 0, 1], t, &[0, 0, 7]))
        .collect();
    assert_eq!(
        value_keys(trigram_entries(&[0, 0, 1], &[0, 0, 7], "web01")),
        want
    );
    assert!(
        g.postings
            .iter()
            .chain(std::iter::once(&g.catalog))
            .all(|r| RowMutation::from(r.clone()).mutations
                == vec![
                    Mutation::DeleteRow,
                    Mutation::set_at("g", b"s".to_vec(), 0, Vec::new())
                ])
    );
}
