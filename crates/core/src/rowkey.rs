//! Row keys of the data table: one row per series per hour.
//!
//! ```text
//! | salt (0..8) | metric uid (3) | base hour (4, BE u32) | tagk uid (3) | tagv uid (3) | ...
//! ```
//!
//! Widths are the schema's (defaults shown). Tag pairs are sorted by tag key UID bytes. The
//! salt, when enabled, is the bucket `|java_hash(metric ++ tags)| % buckets` written
//! big-endian on `salt_width` bytes; the global annotation row (all-zero metric) is never
//! salted. A TSUID is the row key without salt and base hour.

use crate::schema::Schema;
use crate::uid::Uid;
use crate::{Error, Result};

/// A series: metric UID and tag pairs sorted by tag key UID.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeriesKey {
    pub metric: Uid,
    pub tags: Vec<(Uid, Uid)>,
}

impl SeriesKey {
    /// Builds a series key, sorting the tag pairs as the row key requires.
    pub fn new(metric: Uid, mut tags: Vec<(Uid, Uid)>) -> SeriesKey {
        tags.sort_unstable();
        SeriesKey { metric, tags }
    }
}

/// A decoded data row key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowKey {
    pub series: SeriesKey,
    pub base_time: u32,
}

/// Encodes the row key of `series` for the hour starting at `base_time`, salted per schema.
pub fn encode_row_key(schema: &Schema, series: &SeriesKey, base_time: u32) -> Vec<u8> {
    let mut key =
        Vec::with_capacity(schema.tags_offset() + series.tags.len() * schema.tag_pair_width());
    key.resize(usize::from(schema.salt_width), 0);
    series.metric.write(schema.metric_width, &mut key);
    key.extend_from_slice(&base_time.to_be_bytes());
    for (k, v) in &series.tags {
        k.write(schema.tagk_width, &mut key);
        v.write(schema.tagv_width, &mut key);
    }
    apply_salt(schema, &mut key);
    key
}

/// Decodes a data row key; the salt is checked only for width.
pub fn decode_row_key(schema: &Schema, key: &[u8]) -> Result<RowKey> {
    let tags_at = schema.tags_offset();
    let pair = schema.tag_pair_width();
    if key.len() < tags_at || !(key.len() - tags_at).is_multiple_of(pair) {
        return Err(Error::corrupt(format!(
            "row key has an invalid length. length={} key={}",
            key.len(),
            crate::uid::hex_upper(key)
        )));
    }
    let salt = usize::from(schema.salt_width);
    let ts_at = schema.timestamp_offset();
    let metric = Uid::from_bytes(&key[salt..ts_at])?;
    let base_time =
        u32::from_be_bytes([key[ts_at], key[ts_at + 1], key[ts_at + 2], key[ts_at + 3]]);
    let kw = usize::from(schema.tagk_width);
    let tags = key[tags_at..]
        .chunks_exact(pair)
        .map(|c| Ok((Uid::from_bytes(&c[..kw])?, Uid::from_bytes(&c[kw..])?)))
        .collect::<Result<Vec<_>>>()?;
    Ok(RowKey {
        series: SeriesKey { metric, tags },
        base_time,
    })
}

/// Decodes a TSUID (metric and tag UIDs, no salt, no base hour) into its series.
pub fn decode_tsuid(schema: &Schema, tsuid: &[u8]) -> Result<SeriesKey> {
    let mw = usize::from(schema.metric_width);
    if tsuid.len() < mw || !(tsuid.len() - mw).is_multiple_of(schema.tag_pair_width()) {
        return Err(Error::invalid(format!(
            "Invalid TSUID: {}",
            crate::uid::hex_upper(tsuid)
        )));
    }
    let mut key = vec![0u8; usize::from(schema.salt_width)];
    key.extend_from_slice(&tsuid[..mw]);
    key.extend_from_slice(&[0; 4]);
    key.extend_from_slice(&tsuid[mw..]);
    Ok(decode_row_key(schema, &key)?.series)
}

/// Base hour of a row key, without decoding the rest.
pub fn base_time_of(schema: &Schema, key: &[u8]) -> Option<u32> {
    let at = schema.timestamp_offset();
    let b = key.get(at..at + 4)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// The TSUID of a row key: metric and tag UIDs, no salt, no base hour.
pub fn tsuid_of(schema: &Schema, key: &[u8]) -> Vec<u8> {
    let salt = usize::from(schema.salt_width).min(key.len());
    let ts = schema.timestamp_offset().min(key.len());
    let tags = schema.tags_offset().min(key.len());
    let mut out = key[salt..ts].to_vec();
    out.extend_from_slice(&key[tags..]);
    out
}

/// Writes the salt prefix of `key` in place (no-op when salting is off).
pub fn apply_salt(schema: &Schema, key: &mut [u8]) {
    let salt = usize::from(schema.salt_width);
    if salt == 0 || key.len() < schema.tags_offset() {
        return;
    }
    let metric = &key[salt..schema.timestamp_offset()];
    if metric.iter().all(|b| *b == 0) {
        return; // the global annotation row stays unsalted
    }
    let bucket = salt_bucket(schema, key);
    let be = bucket.to_be_bytes();
    for i in 0..salt {
        key[salt - 1 - i] = if i < 4 { be[3 - i] } else { 0 };
    }
}

/// The salt bucket of a (salted or unsalted-but-reserved) row key: Java's
/// `Arrays.hashCode` over metric and tag bytes, made positive, modulo the bucket count.
pub fn salt_bucket(schema: &Schema, key: &[u8]) -> u32 {
    let salt = usize::from(schema.salt_width);
    let metric = key.get(salt..schema.timestamp_offset()).unwrap_or(&[]);
    let tags = key.get(schema.tags_offset()..).unwrap_or(&[]);
    let hash = metric.iter().chain(tags).fold(1i32, |h, b| {
        h.wrapping_mul(31).wrapping_add(i32::from(*b as i8))
    });
    let modulo = hash % schema.salt_buckets as i32;
    modulo.unsigned_abs()
}

/// Salt prefixes to scan for one metric: every bucket when salted, else the empty prefix.
pub fn salt_prefixes(schema: &Schema) -> Vec<Vec<u8>> {
    let width = usize::from(schema.salt_width);
    if width == 0 {
        return vec![Vec::new()];
    }
    (0..schema.salt_buckets)
        .map(|b| {
            let be = u64::from(b).to_be_bytes();
            be[8 - width.min(8)..].to_vec()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uid::parse_hex;
    use proptest::prelude::*;

    #[test]
    fn seed_row_keys_decode() {
        let schema = Schema::default();
        let key = parse_hex("00000150E22700000001000001000002000004").unwrap();
        let row = decode_row_key(&schema, &key).unwrap();
        assert_eq!(row.series.metric, Uid(1));
        assert_eq!(row.base_time, 0x50E22700);
        assert_eq!(row.series.tags, vec![(Uid(1), Uid(1)), (Uid(2), Uid(4))]);
        assert_eq!(encode_row_key(&schema, &row.series, row.base_time), key);
        for hex in [
            "00000150E22700000001000001",
            "00000150E23510000001000003",
            "00000150E24320000001000002",
        ] {
            let key = parse_hex(hex).unwrap();
            let row = decode_row_key(&schema, &key).unwrap();
            assert_eq!(row.base_time % 3600, 0, "{hex}");
            assert_eq!(encode_row_key(&schema, &row.series, row.base_time), key);
        }
    }

    #[test]
    fn mysql_example_lands_in_its_hour() {
        // mysql.bytes_sent=0x1, host=0x2, ubuntu=0x3, 476 at 1292148123.
        let schema = Schema::default();
        let series = SeriesKey::new(Uid(1), vec![(Uid(2), Uid(3))]);
        let key = encode_row_key(&schema, &series, 1292148000);
        assert_eq!(key, parse_hex("0000014D049D20000002000003").unwrap());
    }

    #[test]
    fn tags_sort_by_uid_bytes() {
        let schema = Schema::default();
        let series = SeriesKey::new(Uid(7), vec![(Uid(9), Uid(1)), (Uid(2), Uid(5))]);
        let key = encode_row_key(&schema, &series, 0);
        assert_eq!(&key[7..], &[0, 0, 2, 0, 0, 5, 0, 0, 9, 0, 0, 1]);
    }

    #[test]
    fn salt_follows_java_array_hash() {
        let schema = Schema {
            salt_width: 1,
            salt_buckets: 20,
            ..Schema::default()
        };
        let series = SeriesKey::new(Uid(1), vec![(Uid(1), Uid(1))]);
        let key = encode_row_key(&schema, &series, 1356998400);
        // Arrays.hashCode([0,0,1,0,0,1,0,0,1]) computed by hand: fold h*31+b from 1.
        let mut h: i32 = 1;
        for b in [0i8, 0, 1, 0, 0, 1, 0, 0, 1] {
            h = h.wrapping_mul(31).wrapping_add(i32::from(b));
        }
        assert_eq!(key[0] as i32, (h % 20).abs());
        assert_eq!(decode_row_key(&schema, &key).unwrap().series, series);
        assert_eq!(
            tsuid_of(&schema, &key),
            parse_hex("000001000001000001").unwrap()
        );
        // Same series, another hour: same salt.
        let later = encode_row_key(&schema, &series, 1356998400 + 3600);
        assert_eq!(key[0], later[0]);
        // Two-byte salt puts the bucket in the low byte.
        let wide = Schema {
            salt_width: 2,
            ..schema.clone()
        };
        let key2 = encode_row_key(&wide, &series, 1356998400);
        assert_eq!(key2[..2], [0, key[0]]);
    }

    #[test]
    fn negative_hash_gives_positive_bucket() {
        let schema = Schema {
            salt_width: 1,
            salt_buckets: 7,
            ..Schema::default()
        };
        for m in 1..2000u64 {
            let key = encode_row_key(
                &schema,
                &SeriesKey::new(Uid(m), vec![(Uid(0xFFFFFF), Uid(m * 77))]),
                0,
            );
            assert!(key[0] < 7);
        }
    }

    #[test]
    fn global_annotation_row_is_not_salted() {
        let schema = Schema {
            salt_width: 1,
            ..Schema::default()
        };
        let key = encode_row_key(&schema, &SeriesKey::new(Uid(0), vec![]), 3600);
        assert_eq!(key, [0, 0, 0, 0, 0, 0, 0x0E, 0x10]);
    }

    #[test]
    fn truncated_keys_are_errors() {
        let schema = Schema::default();
        for len in [0, 3, 6, 8, 10, 12] {
            assert!(decode_row_key(&schema, &vec![1; len]).is_err(), "{len}");
        }
    }

    fn series_strategy() -> impl Strategy<Value = (SeriesKey, u32)> {
        (
            0u64..=0xFFFFFF,
            prop::collection::btree_map(0u64..=0xFFFFFF, 0u64..=0xFFFFFF, 1..4),
            any::<u32>(),
        )
            .prop_map(|(m, tags, t)| {
                (
                    SeriesKey::new(
                        Uid(m),
                        tags.into_iter().map(|(k, v)| (Uid(k), Uid(v))).collect(),
                    ),
                    t - t % 3600,
                )
            })
    }

    proptest! {
        #[test]
        fn row_key_round_trip((series, base) in series_strategy()) {
            let schema = Schema::default();
            let key = encode_row_key(&schema, &series, base);
            let row = decode_row_key(&schema, &key).unwrap();
            prop_assert_eq!(row.series, series);
            prop_assert_eq!(row.base_time, base);
        }

        #[test]
        fn byte_order_is_metric_hour_tags_order(a in series_strategy(), b in series_strategy()) {
            let schema = Schema::default();
            let ka = encode_row_key(&schema, &a.0, a.1);
            let kb = encode_row_key(&schema, &b.0, b.1);
            let oa = (a.0.metric, a.1, a.0.tags.clone());
            let ob = (b.0.metric, b.1, b.0.tags.clone());
            // Keys of different tag counts compare as their bytes, which for equal prefixes
            // puts the shorter first, like the tuple order of the tag lists.
            prop_assert_eq!(ka.cmp(&kb), oa.cmp(&ob));
        }
    }
}
