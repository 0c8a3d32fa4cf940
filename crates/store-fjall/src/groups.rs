//! Series-period groups (RFC 0006): the rows of one series in one closed period kept under
//! one key of a second keyspace (`g:<table>`), below the `Store` trait. Callers still see
//! OpenTSDB's rows: a row key's row is its value in the row keyspace if there is one, else
//! its member in its group, else nothing.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use hourglass_storage::{Error, Result};

/// How a table groups rows: where the 4-byte base time sits in a row key (after the salt
/// and metric), the period a group spans, and how long after a period ends it is grouped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grouping {
    pub timestamp_offset: usize,
    pub period_secs: u32,
    pub grace_secs: u32,
}

/// The first byte of a group value.
pub(crate) const GROUP_FORMAT: u8 = 0x01;

/// A row key's window: its salt and metric bytes, and the start of its base time's period.
pub(crate) type Window<'a> = (&'a [u8], u32);

impl Grouping {
    /// A key's base time, when the key is long enough to hold one.
    pub(crate) fn base(&self, key: &[u8]) -> Option<u32> {
        let at = self.timestamp_offset;
        let b = key.get(at..at + 4)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn period_start(&self, base: u32) -> u32 {
        base - base % self.period_secs
    }

    /// The window of a row key or group key (`None` for keys too short to be grouped).
    pub(crate) fn window<'a>(&self, key: &'a [u8]) -> Option<Window<'a>> {
        let base = self.base(key)?;
        Some((&key[..self.timestamp_offset], self.period_start(base)))
    }

    /// The end (exclusive, seconds) of a row key's period.
    pub(crate) fn period_end(&self, key: &[u8]) -> Option<u64> {
        let base = self.base(key)?;
        Some(u64::from(self.period_start(base)) + u64::from(self.period_secs))
    }

    /// Periods ending at or before this time (seconds) are closed at `now_secs`.
    pub(crate) fn closed_through(&self, now_secs: i64) -> u64 {
        let settled = now_secs.saturating_sub(i64::from(self.grace_secs)).max(0) as u64;
        settled - settled % u64::from(self.period_secs)
    }

    /// A row key's group key (its base time replaced by its period's start) and its
    /// offset in the group (seconds from the period's start).
    pub(crate) fn split(&self, key: &[u8]) -> Option<(Vec<u8>, u32)> {
        let base = self.base(key)?;
        let start = self.period_start(base);
        let mut group = key.to_vec();
        let at = self.timestamp_offset;
        group[at..at + 4].copy_from_slice(&start.to_be_bytes());
        Some((group, base - start))
    }

    /// The row key of member `offset` of a group.
    pub(crate) fn member_key(&self, group_key: &[u8], offset: u32) -> Option<Vec<u8>> {
        let start = self.base(group_key)?;
        let mut key = group_key.to_vec();
        let at = self.timestamp_offset;
        key[at..at + 4].copy_from_slice(&start.checked_add(offset)?.to_be_bytes());
        Some(key)
    }

    /// A key with its base time moved to the end: the order of rows within a window, series
    /// by series, each in time order.
    pub(crate) fn series_major(&self, key: &[u8]) -> Vec<u8> {
        hourglass_storage::series_major(key, self.timestamp_offset)
    }

    /// The smallest group key whose members can be at or after `start`.
    pub(crate) fn group_scan_start(&self, start: &[u8]) -> Vec<u8> {
        let at = self.timestamp_offset;
        match self.base(start) {
            Some(base) => {
                let mut out = start[..at].to_vec();
                out.extend_from_slice(&self.period_start(base).to_be_bytes());
                out
            }
            None => start[..start.len().min(at)].to_vec(),
        }
    }

    /// A key with its base time (if it holds one) replaced by its period's start: the
    /// smallest group key at or after every row key from `key` on in its series and period.
    pub(crate) fn floor_key(&self, key: &[u8]) -> Vec<u8> {
        match self.split(key) {
            Some((group_key, _)) => group_key,
            None => key.to_vec(),
        }
    }

    /// `Some` when the two keys are in the same window.
    pub(crate) fn same_window(&self, a: &[u8], b: &[u8]) -> bool {
        matches!((self.window(a), self.window(b)), (Some(x), Some(y)) if x == y)
    }

    /// Orders two windows (`None`, a key too short to group, sorts by its bytes).
    pub(crate) fn cmp_windows(&self, a: &[u8], b: &[u8]) -> Ordering {
        match (self.window(a), self.window(b)) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => a.cmp(b),
        }
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A group value:
/// `| format 0x01 | member count (varint) | members: offset delta (varint) | value length (varint) | value |`,
/// offsets strictly increasing (the first delta is the first offset), each value a row value
/// as the row keyspace holds it (RFC 0002).
pub(crate) fn encode_group(members: &BTreeMap<u32, Vec<u8>>) -> Vec<u8> {
    let size: usize = members.values().map(|v| v.len() + 8).sum();
    let mut out = Vec::with_capacity(size + 6);
    out.push(GROUP_FORMAT);
    put_varint(&mut out, members.len() as u64);
    let mut previous = 0u32;
    for (i, (offset, value)) in members.iter().enumerate() {
        put_varint(
            &mut out,
            u64::from(if i == 0 { *offset } else { offset - previous }),
        );
        put_varint(&mut out, value.len() as u64);
        out.extend_from_slice(value);
        previous = *offset;
    }
    out
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

fn corrupt(what: &str) -> Error {
    Error::Corrupt(format!("bad row group: {what}"))
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self
                .bytes
                .get(self.pos)
                .ok_or_else(|| corrupt("truncated"))?;
            self.pos += 1;
            v |= u64::from(b & 0x7F) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(corrupt("varint too long"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or_else(|| corrupt("truncated"))?;
        let out = self
            .bytes
            .get(self.pos..end)
            .ok_or_else(|| corrupt("truncated"))?;
        self.pos = end;
        Ok(out)
    }
}

/// The members of a group value, offsets increasing, values borrowed.
pub(crate) fn decode_group(bytes: &[u8]) -> Result<Vec<(u32, &[u8])>> {
    match bytes.first() {
        Some(&GROUP_FORMAT) => {}
        _ => return Err(Error::Corrupt("unknown group format".into())),
    }
    let mut r = Reader { bytes, pos: 1 };
    let n = r.varint()?;
    if n > bytes.len() as u64 {
        return Err(corrupt("member count past its bytes"));
    }
    let mut out = Vec::with_capacity(n as usize);
    let mut offset = 0u64;
    for i in 0..n {
        let delta = r.varint()?;
        if i > 0 && delta == 0 {
            return Err(corrupt("offsets not increasing"));
        }
        offset = offset
            .checked_add(delta)
            .filter(|o| *o <= u64::from(u32::MAX))
            .ok_or_else(|| corrupt("offset out of range"))?;
        let len = r.varint()?;
        let len = usize::try_from(len).map_err(|_| corrupt("truncated"))?;
        out.push((offset as u32, r.take(len)?));
    }
    if r.pos != bytes.len() {
        return Err(corrupt("trailing bytes"));
    }
    Ok(out)
}

/// The value of the member at `offset` of a group value, found without decoding the rest.
pub(crate) fn find_member(bytes: &[u8], offset: u32) -> Result<Option<&[u8]>> {
    match bytes.first() {
        Some(&GROUP_FORMAT) => {}
        _ => return Err(Error::Corrupt("unknown group format".into())),
    }
    let mut r = Reader { bytes, pos: 1 };
    let n = r.varint()?;
    let mut at = 0u64;
    for i in 0..n {
        let delta = r.varint()?;
        if i > 0 && delta == 0 {
            return Err(corrupt("offsets not increasing"));
        }
        at = at.saturating_add(delta);
        let len = usize::try_from(r.varint()?).map_err(|_| corrupt("truncated"))?;
        let value = r.take(len)?;
        match at.cmp(&u64::from(offset)) {
            Ordering::Less => {}
            Ordering::Equal => return Ok(Some(value)),
            Ordering::Greater => return Ok(None),
        }
    }
    Ok(None)
}

/// A group value's members as owned values (to change and encode again).
pub(crate) fn group_members(bytes: Option<&[u8]>) -> Result<BTreeMap<u32, Vec<u8>>> {
    let Some(bytes) = bytes else {
        return Ok(BTreeMap::new());
    };
    Ok(decode_group(bytes)?
        .into_iter()
        .map(|(o, v)| (o, v.to_vec()))
        .collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    const G: Grouping = Grouping {
        timestamp_offset: 3,
        period_secs: 86_400,
        grace_secs: 3_600,
    };

    fn key(metric: u8, base: u32, tags: &[u8]) -> Vec<u8> {
        let mut k = vec![0, 0, metric];
        k.extend_from_slice(&base.to_be_bytes());
        k.extend_from_slice(tags);
        k
    }

    #[test]
    fn keys_split_into_group_and_offset_and_back() {
        let k = key(1, 86_400 * 3 + 7_200, &[0, 0, 1, 0, 0, 2]);
        let (group, offset) = G.split(&k).unwrap();
        assert_eq!(group, key(1, 86_400 * 3, &[0, 0, 1, 0, 0, 2]));
        assert_eq!(offset, 7_200);
        assert_eq!(G.member_key(&group, offset).unwrap(), k);
        assert_eq!(G.window(&k), Some((&[0u8, 0, 1][..], 86_400 * 3)));
        assert_eq!(G.period_end(&k), Some(86_400 * 4));
        assert!(
            G.split(&[0, 0, 1, 0]).is_none(),
            "too short to hold a base time"
        );
        assert_eq!(
            G.group_scan_start(&key(1, 86_400 + 5, &[])),
            key(1, 86_400, &[])
        );
        // A period closes one grace after it ends.
        assert_eq!(G.closed_through(86_400 * 4 + 3_599), 86_400 * 3);
        assert_eq!(G.closed_through(86_400 * 4 + 3_600), 86_400 * 4);
    }

    #[test]
    fn groups_refuse_bad_bytes() {
        let mut members = BTreeMap::new();
        members.insert(0u32, vec![1, 2]);
        members.insert(3_600u32, vec![]);
        let bytes = encode_group(&members);
        assert_eq!(bytes, vec![1, 2, 0, 2, 1, 2, 0x90, 0x1C, 0]);
        assert_eq!(group_members(Some(&bytes)).unwrap(), members);
        for bad in [
            vec![],
            vec![2, 0],
            vec![1, 1, 0, 5, 1],
            vec![1, 2, 0, 0, 0, 0],
            vec![1, 0, 0],
            vec![1, 200],
        ] {
            assert!(decode_group(&bad).is_err(), "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn groups_round_trip(members in prop::collection::btree_map(any::<u32>(), prop::collection::vec(any::<u8>(), 0..20), 0..30)) {
            let bytes = encode_group(&members);
            prop_assert_eq!(group_members(Some(&bytes)).unwrap(), members);
        }

        #[test]
        fn decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64), offset: u32) {
            let _ = decode_group(&bytes);
            let _ = find_member(&bytes, offset);
        }

        #[test]
        fn find_member_finds_what_decode_lists(members in prop::collection::btree_map(0u32..5000, prop::collection::vec(any::<u8>(), 0..4), 0..12), probe in 0u32..5000) {
            let bytes = encode_group(&members);
            prop_assert_eq!(find_member(&bytes, probe).unwrap(), members.get(&probe).map(Vec::as_slice));
        }
    }
}
