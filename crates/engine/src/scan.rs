//! Scanning a metric's rows over a time range, with exact tag filters pushed into the
//! row-key regex so rows that cannot match are never decoded.

use hourglass_core::rowkey::salt_prefixes;
use hourglass_core::schema::Schema;
use hourglass_core::time::MAX_TIMESPAN;
use hourglass_core::uid::Uid;
use hourglass_storage::{Row, ScanRequest, SkipHint, Store};

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
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.reserve(bytes.len() * 4);
    for &b in bytes {
        out.push('\\');
        out.push('x');
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0x0F)]));
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

/// The least tag key UID: UIDs are assigned from MAXID counting up from 0 (as OpenTSDB
/// does), so none is 0.
const LEAST_UID: u64 = 1;

/// The first wanted pair (tag key and its least value) when the least filtered tag key is
/// the least UID: no pair can come before it in a matching key, so every tag list below it
/// is refused.
fn least_first_pair(kw: usize, filters: &[(Vec<u8>, Vec<Vec<u8>>)]) -> Option<Vec<u8>> {
    let (k, values) = filters.first()?;
    let least = LEAST_UID.to_be_bytes();
    if k.len() != kw || kw > least.len() || k.as_slice() != &least[least.len() - kw..] {
        return None;
    }
    Some([k.as_slice(), values.first()?.as_slice()].concat())
}

/// Where to go from `key`, whose pair at `at` rules out every key sharing the pairs
/// before it: past them; when that is past the whole hour (the first pair), the next
/// hour's first wanted pair if no tag key can come before it ([`least_first_pair`]).
fn past(
    tags_at: usize,
    kw: usize,
    filters: &[(Vec<u8>, Vec<Vec<u8>>)],
    key: &[u8],
    at: usize,
) -> Option<Vec<u8>> {
    let mut next = successor(&key[..at])?;
    if at == tags_at
        && next.len() == tags_at
        && let Some(first) = least_first_pair(kw, filters)
    {
        next.extend_from_slice(&first);
    }
    Some(next)
}

/// The smallest key above every key starting with `prefix` (`None`: none is).
fn successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let keep = prefix.iter().rposition(|b| *b != 0xFF)?;
    let mut next = prefix[..=keep].to_vec();
    next[keep] += 1;
    Some(next)
}

/// Where, after `key` (refused by [`tag_regex`] for `filters`), the next row holding every
/// filtered tag key with one of its values can be. `filters`: tag key bytes with their
/// sorted value bytes, sorted by key. Tag pairs are sorted by key in a row key, so a pair
/// past a wanted key, or a value past a wanted key's values, rules out every key sharing
/// the pairs before it.
fn next_candidate(
    tags_at: usize,
    widths: (usize, usize),
    filters: &[(Vec<u8>, Vec<Vec<u8>>)],
    key: &[u8],
) -> Option<Vec<u8>> {
    let (kw, vw) = widths;
    let pairs = key.get(tags_at..)?;
    if !pairs.len().is_multiple_of(kw + vw) {
        return None;
    }
    if pairs.is_empty() {
        // No tags yet: the first wanted pair, when no tag key can come before it.
        return least_first_pair(kw, filters).map(|first| [key, first.as_slice()].concat());
    }
    let mut wanted = filters.iter().peekable();
    for (i, pair) in pairs.chunks_exact(kw + vw).enumerate() {
        let Some((k, values)) = wanted.peek() else {
            return None; // every filter met: a match
        };
        let at = tags_at + i * (kw + vw);
        let (tagk, tagv) = pair.split_at(kw);
        match tagk.cmp(k.as_slice()) {
            std::cmp::Ordering::Less => continue,
            std::cmp::Ordering::Greater => return past(tags_at, kw, filters, key, at),
            std::cmp::Ordering::Equal => {}
        }
        match values.iter().find(|v| v.as_slice() >= tagv) {
            Some(v) if v.as_slice() == tagv => {
                wanted.next();
            }
            Some(v) => {
                let mut next = key[..at + kw].to_vec();
                next.extend_from_slice(v);
                return Some(next);
            }
            None => return past(tags_at, kw, filters, key, at),
        }
    }
    // Pairs ran out before a wanted key: longer keys after this one may still match.
    None
}

/// The skip hint matching [`tag_regex`]: from a refused row key, the next that may match.
pub fn tag_skip(schema: &Schema, tags: &[(Uid, Uid)]) -> Option<SkipHint> {
    if tags.is_empty() {
        return None;
    }
    let mut sorted = tags.to_vec();
    sorted.sort();
    sorted.dedup();
    let filters: Vec<(Vec<u8>, Vec<Vec<u8>>)> = sorted
        .chunk_by(|a, b| a.0 == b.0)
        .map(|values| {
            (
                values[0].0.to_bytes(schema.tagk_width),
                values
                    .iter()
                    .map(|(_, v)| v.to_bytes(schema.tagv_width))
                    .collect(),
            )
        })
        .collect();
    let tags_at = schema.tags_offset();
    let widths = (
        usize::from(schema.tagk_width),
        usize::from(schema.tagv_width),
    );
    Some(SkipHint(std::sync::Arc::new(move |key: &[u8]| {
        next_candidate(tags_at, widths, &filters, key)
    })))
}

/// The scan requests (one per salt bucket) covering `query`.
pub fn scan_requests(schema: &Schema, query: &RowQuery) -> Vec<ScanRequest> {
    let span = i64::from(MAX_TIMESPAN);
    let first =
        (query.start_secs - query.start_secs.rem_euclid(span)).clamp(0, i64::from(u32::MAX)) as u32;
    let last_hour = query.end_secs - query.end_secs.rem_euclid(span);
    let regex = tag_regex(schema, &query.tags);
    let skip = tag_skip(schema, &query.tags);
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
                skip: skip.clone(),
                // Tag filters: neither the regex nor the hint reads the base time.
                series_filter: true,
                ..Default::default()
            }
        })
        .collect()
}

/// Most bytes of a candidate regex: Bigtable refuses filters of 20 KB or more.
const MAX_CANDIDATE_REGEX: usize = 16 * 1024;

/// Where, after `key` (whose tags are no candidate's), the next candidate's row can be:
/// the next candidate's tags in the same hour, else the first candidate's in the next hour.
fn next_listed(tags_at: usize, candidates: &[Vec<u8>], key: &[u8]) -> Option<Vec<u8>> {
    let (head, tags) = (key.get(..tags_at)?, key.get(tags_at..)?);
    let next = candidates.partition_point(|c| c.as_slice() <= tags);
    match candidates.get(next) {
        Some(c) => Some([head, c.as_slice()].concat()),
        // Past the hour's last: the next hour's first (every key before it in that hour is
        // no candidate's).
        None => {
            let mut next = successor(head)?;
            if next.len() == head.len()
                && let Some(first) = candidates.first()
            {
                next.extend_from_slice(first);
            }
            Some(next)
        }
    }
}

/// [`scan_requests`] reading only the rows of the listed series (`candidates`: their tag
/// bytes, sorted): each bucket's request matches exactly its candidates (a full-match
/// regex of their tags, while it stays under 16 KB; past that the query's own tag regex)
/// and hints the next candidate's key, so a backend that can seek reads one row per series
/// and hour. Buckets without a candidate are not scanned.
pub fn candidate_requests(
    schema: &Schema,
    query: &RowQuery,
    candidates: &[Vec<u8>],
) -> Vec<ScanRequest> {
    let salt = usize::from(schema.salt_width);
    let tags_at = schema.tags_offset();
    let mut by_salt: std::collections::BTreeMap<Vec<u8>, Vec<Vec<u8>>> = Default::default();
    for tags in candidates {
        let mut key = vec![0u8; salt];
        query.metric.write(schema.metric_width, &mut key);
        key.extend_from_slice(&[0; 4]);
        key.extend_from_slice(tags);
        hourglass_core::rowkey::apply_salt(schema, &mut key);
        by_salt
            .entry(key[..salt].to_vec())
            .or_default()
            .push(tags.clone());
    }
    scan_requests(schema, query)
        .into_iter()
        .filter_map(|mut request| {
            let mut mine = by_salt.remove(request.start.get(..salt)?)?;
            mine.sort();
            mine.dedup();
            let mut re = format!("(?s)^.{{{tags_at}}}(?:");
            for (i, tags) in mine.iter().enumerate() {
                if i > 0 {
                    re.push('|');
                }
                escape_bytes(tags, &mut re);
            }
            re.push_str(")$");
            if re.len() <= MAX_CANDIDATE_REGEX {
                request.key_regex = Some(re);
            }
            let mine = std::sync::Arc::new(mine);
            request.skip = Some(SkipHint(std::sync::Arc::new(move |key: &[u8]| {
                next_listed(tags_at, &mine, key)
            })));
            Some(request)
        })
        .collect()
}

/// Every stored row of `query`, bucket by bucket, each bucket in key order (as OpenTSDB's
/// tools print them) whatever order the store returns ([`Store::scan`]).
pub fn scan_rows(store: &dyn Store, schema: &Schema, query: &RowQuery) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for request in scan_requests(schema, query) {
        let from = rows.len();
        for row in store.scan(&schema.data_table, &request)? {
            rows.push(row?);
        }
        rows[from..].sort_by(|a, b| a.key.cmp(&b.key));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hourglass_core::rowkey::{SeriesKey, encode_row_key};
    use hourglass_storage::KeyRegex;

    #[test]
    fn every_byte_is_escaped_as_two_upper_hex_digits() {
        let bytes: Vec<u8> = (0..=255).collect();
        let mut out = String::from("^");
        escape_bytes(&bytes, &mut out);
        let expected: String = bytes.iter().map(|b| format!("\\x{b:02X}")).collect();
        assert_eq!(out, format!("^{expected}"));
    }

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

    use proptest::prelude::*;

    proptest! {
        /// The hint never passes over a key the regex accepts, and always moves forward.
        #[test]
        fn skip_hint_never_jumps_a_match(
            series in prop::collection::vec(prop::collection::btree_map(1u64..6, 1u64..6, 0..4), 1..60),
            hours in prop::collection::vec(0u32..4, 1..3),
            filters in prop::collection::vec((1u64..6, 1u64..6), 1..4),
        ) {
            let schema = Schema::default();
            let mut keys: Vec<Vec<u8>> = Vec::new();
            for tags in &series {
                for h in &hours {
                    let tags = tags.iter().map(|(k, v)| (Uid(*k), Uid(*v))).collect();
                    keys.push(encode_row_key(&schema, &SeriesKey::new(Uid(1), tags), 3600 * h));
                }
            }
            keys.sort();
            keys.dedup();
            let tags: Vec<(Uid, Uid)> = filters.iter().map(|(k, v)| (Uid(*k), Uid(*v))).collect();
            let re = KeyRegex::new(&tag_regex(&schema, &tags).unwrap()).unwrap();
            let skip = tag_skip(&schema, &tags).unwrap();
            for (i, key) in keys.iter().enumerate() {
                if re.is_match(key) {
                    continue;
                }
                if let Some(target) = (skip.0)(key) {
                    prop_assert!(target.as_slice() > key.as_slice());
                    for later in &keys[i + 1..] {
                        if later.as_slice() >= target.as_slice() {
                            break;
                        }
                        prop_assert!(!re.is_match(later), "skipped a match: {later:?} (target {target:?}, from {key:?})");
                    }
                }
            }
        }
    }

    proptest! {
        /// A candidate request's regex accepts exactly its bucket's candidates, and its hint
        /// never passes over one of them.
        #[test]
        fn candidate_requests_read_every_candidate_row(
            series in prop::collection::btree_set(prop::collection::btree_map(1u64..6, 1u64..6, 1..4), 1..40),
            listed in prop::collection::vec(any::<bool>(), 40),
            hours in prop::collection::vec(0u32..4, 1..3),
        ) {
            let schema = Schema { salt_width: 1, salt_buckets: 3, ..Schema::default() };
            let tags_of = |t: &std::collections::BTreeMap<u64, u64>| -> Vec<(Uid, Uid)> {
                t.iter().map(|(k, v)| (Uid(*k), Uid(*v))).collect()
            };
            let mut keys: Vec<Vec<u8>> = Vec::new();
            for tags in &series {
                for h in &hours {
                    let key = encode_row_key(&schema, &SeriesKey::new(Uid(1), tags_of(tags)), 3600 * h);
                    keys.push(key);
                }
            }
            keys.sort();
            keys.dedup();
            let tags_at = schema.tags_offset();
            let candidates: Vec<Vec<u8>> = series
                .iter()
                .zip(&listed)
                .filter(|(_, l)| **l)
                .map(|(t, _)| {
                    encode_row_key(&schema, &SeriesKey::new(Uid(1), tags_of(t)), 0)[tags_at..].to_vec()
                })
                .collect();
            let query = RowQuery { metric: Uid(1), start_secs: 0, end_secs: 4 * 3600, tags: vec![] };
            let mut sorted = candidates.clone();
            sorted.sort();
            let requests = candidate_requests(&schema, &query, &sorted);
            for key in &keys {
                if sorted.iter().any(|c| c.as_slice() == &key[tags_at..]) {
                    prop_assert!(requests.iter().any(|r| r.start[..1] == key[..1]), "a bucket left out");
                }
            }
            for request in requests {
                let re = KeyRegex::new(request.key_regex.as_deref().unwrap()).unwrap();
                let skip = request.skip.clone().unwrap();
                let mine: Vec<&Vec<u8>> = keys
                    .iter()
                    .filter(|k| k.starts_with(&request.start[..1]))
                    .collect();
                for (i, key) in mine.iter().enumerate() {
                    let listed = sorted.iter().any(|c| c.as_slice() == &key[tags_at..]);
                    prop_assert_eq!(re.is_match(key), listed);
                    if listed {
                        continue;
                    }
                    if let Some(target) = (skip.0)(key) {
                        prop_assert!(target.as_slice() > key.as_slice());
                        for later in &mine[i + 1..] {
                            if later.as_slice() >= target.as_slice() {
                                break;
                            }
                            prop_assert!(!re.is_match(later), "skipped a candidate row");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_candidate_hint_goes_on_at_the_next_hours_first_candidate() {
        let tags_at = 4;
        let candidates = vec![vec![2u8], vec![5]];
        let key = |secs: u32, tags: &[u8]| [&secs.to_be_bytes()[..], tags].concat();
        assert_eq!(
            next_listed(tags_at, &candidates, &key(3600, &[1])),
            Some(key(3600, &[2]))
        );
        assert_eq!(
            next_listed(tags_at, &candidates, &key(3600, &[3])),
            Some(key(3600, &[5]))
        );
        assert_eq!(
            next_listed(tags_at, &candidates, &key(3600, &[6])),
            Some(key(3601, &[2]))
        );
        // A base time that cannot grow in place: the successor as it is.
        assert_eq!(
            next_listed(tags_at, &candidates, &[0, 0, 0, 0xFF, 6]),
            Some(vec![0, 0, 1])
        );
    }

    #[test]
    fn skip_hint_jumps_to_the_wanted_value_or_past_the_hour() {
        let schema = Schema::default();
        let key = |h: u32, tags: Vec<(u64, u64)>| {
            encode_row_key(
                &schema,
                &SeriesKey::new(
                    Uid(1),
                    tags.into_iter().map(|(k, v)| (Uid(k), Uid(v))).collect(),
                ),
                h,
            )
        };
        let skip = tag_skip(&schema, &[(Uid(1), Uid(5))]).unwrap();
        let hint = |k: &[u8]| (skip.0)(k);
        // Before the value: straight to it.
        assert_eq!(
            hint(&key(3600, vec![(1, 2), (2, 9)])),
            Some(key(3600, vec![(1, 5)]))
        );
        // Past the value, or past the tag key: the next hour, at the wanted pair (tag key 1
        // is the least UID: no pair comes before it in a matching key).
        // (The first key after every key of this hour; the next hour's sort after it.)
        let mut next_hour = key(3600, vec![]);
        next_hour[6] += 1;
        let mut next_hour_wanted = next_hour.clone();
        next_hour_wanted.extend_from_slice(&key(0, vec![(1, 5)])[7..]);
        assert_eq!(
            hint(&key(3600, vec![(1, 6), (2, 1)])),
            Some(next_hour_wanted.clone())
        );
        assert_eq!(
            hint(&key(3600, vec![(2, 6)])),
            Some(next_hour_wanted.clone())
        );
        // No tags yet: the wanted pair.
        assert_eq!(hint(&key(3600, vec![])), Some(key(3600, vec![(1, 5)])));
        // A wanted tag key above the least UID: a smaller one may come first, so the next
        // hour with no tags, and no hint from a key without tags.
        let skip_k2 = tag_skip(&schema, &[(Uid(2), Uid(5))]).unwrap();
        assert_eq!(
            (skip_k2.0)(&key(3600, vec![(2, 6)])),
            Some(next_hour.clone())
        );
        assert_eq!((skip_k2.0)(&key(3600, vec![])), None);
        // A smaller tag key first: the pairs after it are what can still change.
        let skip2 = tag_skip(&schema, &[(Uid(3), Uid(5))]).unwrap();
        let mut inside = key(3600, vec![(1, 1)]);
        let last = inside.len() - 1;
        inside[last] += 1; // past (1,1): the next value of tag key 1
        assert_eq!((skip2.0)(&key(3600, vec![(1, 1), (4, 2)])), Some(inside));
    }
}
