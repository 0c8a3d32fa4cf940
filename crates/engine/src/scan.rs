//! Scanning a metric's rows over a time range, with exact tag filters pushed into the
//! row-key regex so rows that cannot match are never decoded.

use hourglass_core::rowkey::salt_prefixes;
use hourglass_core::schema::Schema;
use hourglass_core::time::MAX_TIMESPAN;
use hourglass_core::uid::Uid;
use hourglass_storage::{Row, ScanRequest, Store};

use crate::Result;

/// Which rows of the data table to read.
#[derive(Debug, Clone)]
pub struct RowQuery {
    pub metric: Uid,
    /// First second of interest; the scan starts at its hour.
    pub start_secs: i64,
    /// Last second of interest (inclusive).
    pub end_secs: i64,
    /// Tag pairs every row must have; several pairs of one tag key mean any of those
    /// values (a row holds each key once).
    pub tags: Vec<(Uid, Uid)>,
}

impl RowQuery {
    /// Whether a series with `series_tags` passes [`RowQuery::tags`]: for every tag key
    /// named there, the series has one of its values.
    pub fn matches_tags(&self, series_tags: &[(Uid, Uid)]) -> bool {
        self.tags.iter().all(|(k, _)| {
            series_tags
                .iter()
                .any(|(sk, sv)| sk == k && self.tags.contains(&(*sk, *sv)))
        })
    }
}

/// `\xHH` for every byte: safe in an RE2/regex pattern whatever the byte.
pub fn escape_bytes(bytes: &[u8], out: &mut String) {
    for b in bytes {
        out.push_str(&format!("\\x{b:02X}"));
    }
}

/// Full-match row-key regex requiring, for every tag key of `tags`, one of its values
/// (any other pairs allowed).
pub fn tag_regex(schema: &Schema, tags: &[(Uid, Uid)]) -> Option<String> {
    tag_regex_at(schema, schema.tags_offset(), tags)
}

/// [`tag_regex`] for keys whose tag pairs start at `tags_at` (e.g. TSUIDs: after the metric).
pub fn tag_regex_at(schema: &Schema, tags_at: usize, tags: &[(Uid, Uid)]) -> Option<String> {
    if tags.is_empty() {
        return None;
    }
    let mut sorted = tags.to_vec();
    sorted.sort();
    sorted.dedup();
    let pair = schema.tag_pair_width();
    let mut re = format!("(?s)^.{{{tags_at}}}");
    for values in sorted.chunk_by(|a, b| a.0 == b.0) {
        re.push_str(&format!("(?:.{{{pair}}})*?"));
        escape_bytes(&values[0].0.to_bytes(schema.tagk_width), &mut re);
        re.push_str("(?:");
        for (i, (_, v)) in values.iter().enumerate() {
            if i > 0 {
                re.push('|');
            }
            escape_bytes(&v.to_bytes(schema.tagv_width), &mut re);
        }
        re.push(')');
    }
    re.push_str(&format!("(?:.{{{pair}}})*$"));
    Some(re)
}

/// The scan requests (one per salt bucket) covering `query`.
pub fn scan_requests(schema: &Schema, query: &RowQuery) -> Vec<ScanRequest> {
    let span = i64::from(MAX_TIMESPAN);
    let first =
        (query.start_secs - query.start_secs.rem_euclid(span)).clamp(0, i64::from(u32::MAX)) as u32;
    let last_hour = query.end_secs - query.end_secs.rem_euclid(span);
    let regex = tag_regex(schema, &query.tags);
    salt_prefixes(schema)
        .into_iter()
        .map(|salt| {
            let mut start = salt.clone();
            query.metric.write(schema.metric_width, &mut start);
            let mut end = start.clone();
            start.extend_from_slice(&first.to_be_bytes());
            match u32::try_from(last_hour + span) {
                Ok(stop) => end.extend_from_slice(&stop.to_be_bytes()),
                Err(_) => end.extend_from_slice(&[0xFF; 5]),
            }
            ScanRequest {
                start,
                end: Some(end),
                key_regex: regex.clone(),
                ..Default::default()
            }
        })
        .collect()
}

/// Every stored row of `query`, bucket by bucket.
pub fn scan_rows(store: &dyn Store, schema: &Schema, query: &RowQuery) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for request in scan_requests(schema, query) {
        for row in store.scan(&schema.data_table, &request)? {
            rows.push(row?);
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hourglass_core::rowkey::{SeriesKey, encode_row_key};
    use hourglass_storage::KeyRegex;

    #[test]
    fn tag_regex_matches_rows_with_the_pairs_only() {
        let schema = Schema::default();
        let key = |tags: Vec<(u64, u64)>| {
            encode_row_key(
                &schema,
                &SeriesKey::new(
                    Uid(1),
                    tags.into_iter().map(|(k, v)| (Uid(k), Uid(v))).collect(),
                ),
                3600,
            )
        };
        let re = KeyRegex::new(&tag_regex(&schema, &[(Uid(2), Uid(0x0A))]).unwrap()).unwrap();
        assert!(re.is_match(&key(vec![(2, 0x0A)])));
        assert!(re.is_match(&key(vec![(1, 5), (2, 0x0A), (3, 0xFF)])));
        assert!(!re.is_match(&key(vec![(2, 0x0B)])));
        assert!(
            !re.is_match(&key(vec![(1, 2), (0x0A, 9)])),
            "pairs must align on pair boundaries"
        );
        let both =
            KeyRegex::new(&tag_regex(&schema, &[(Uid(3), Uid(0x80)), (Uid(1), Uid(1))]).unwrap())
                .unwrap();
        assert!(both.is_match(&key(vec![(1, 1), (3, 0x80)])));
        assert!(!both.is_match(&key(vec![(1, 1)])));
        let either = KeyRegex::new(
            &tag_regex(
                &schema,
                &[(Uid(2), Uid(7)), (Uid(1), Uid(1)), (Uid(2), Uid(9))],
            )
            .unwrap(),
        )
        .unwrap();
        assert!(either.is_match(&key(vec![(1, 1), (2, 7)])));
        assert!(either.is_match(&key(vec![(1, 1), (2, 9)])));
        assert!(!either.is_match(&key(vec![(1, 1), (2, 8)])));
        assert!(!either.is_match(&key(vec![(2, 9)])));
    }
}
