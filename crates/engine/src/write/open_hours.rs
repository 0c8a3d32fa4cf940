//! Compaction bookkeeping: the (row prefix, base hour) pairs whose rows got partial cells
//! while their hour was open. Once the hour closes, every row of the pair is compacted
//! into one cell, and the pair is dropped only when that succeeded, so a failed compaction
//! is retried at the next flush.
//!
//! The set is kept in the log directory (`open-hours`, replaced atomically) so a restarted
//! TSD finds the rows it left half compacted:
//!
//! ```text
//! | 0x01 | pair count (varint) | pairs: prefix len (varint) | prefix | base hour (4, BE) | crc32 of all before (4, LE) |
//! ```
//!
//! A prefix is the row key's salt and metric UID, so a pair's rows are one key range.

use std::collections::BTreeSet;

use crate::wal::entry::{put_varint, read_varint};
use crate::{Error, Result};

pub(crate) const FILE_NAME: &str = "open-hours";
const FORMAT: u8 = 1;

/// The pairs, and whether they changed since last saved.
#[derive(Debug, Default)]
pub(crate) struct OpenHours {
    pub(crate) pairs: BTreeSet<(Vec<u8>, u32)>,
    pub(crate) dirty: bool,
}

impl OpenHours {
    pub(crate) fn insert(&mut self, prefix: &[u8], hour: u32) {
        if !self.pairs.contains(&(prefix.to_vec(), hour)) {
            self.pairs.insert((prefix.to_vec(), hour));
            self.dirty = true;
        }
    }

    pub(crate) fn remove(&mut self, pair: &(Vec<u8>, u32)) {
        if self.pairs.remove(pair) {
            self.dirty = true;
        }
    }

    /// Pairs whose hour satisfies `closed`.
    pub(crate) fn due(&self, closed: impl Fn(u32) -> bool) -> Vec<(Vec<u8>, u32)> {
        self.pairs
            .iter()
            .filter(|(_, h)| closed(*h))
            .cloned()
            .collect()
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = vec![FORMAT];
        put_varint(&mut out, self.pairs.len() as u64);
        for (prefix, hour) in &self.pairs {
            put_varint(&mut out, prefix.len() as u64);
            out.extend_from_slice(prefix);
            out.extend_from_slice(&hour.to_be_bytes());
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<OpenHours> {
        let corrupt = || Error::Corrupt("the open-hours file is damaged".into());
        let (body, crc) = bytes.split_last_chunk::<4>().ok_or_else(corrupt)?;
        if crc32fast::hash(body) != u32::from_le_bytes(*crc) || body.first() != Some(&FORMAT) {
            return Err(corrupt());
        }
        let mut pos = 1usize;
        let varint = |pos: &mut usize| read_varint(body, pos).ok_or_else(corrupt);
        let count = varint(&mut pos)?;
        let mut pairs = BTreeSet::new();
        for _ in 0..count {
            let len = varint(&mut pos)? as usize;
            let prefix = body.get(pos..pos.saturating_add(len)).ok_or_else(corrupt)?;
            pos += len;
            let hour = body.get(pos..pos + 4).ok_or_else(corrupt)?;
            pos += 4;
            pairs.insert((
                prefix.to_vec(),
                u32::from_be_bytes([hour[0], hour[1], hour[2], hour[3]]),
            ));
        }
        if pos != body.len() {
            return Err(corrupt());
        }
        Ok(OpenHours {
            pairs,
            dirty: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_round_trip_and_damage_is_refused() {
        let mut open = OpenHours::default();
        open.insert(&[0, 0, 1], 1_356_998_400);
        open.insert(&[7, 0, 0, 2], 3600);
        open.insert(&[0, 0, 1], 1_356_998_400);
        assert_eq!(open.pairs.len(), 2);
        let bytes = open.encode();
        assert_eq!(OpenHours::decode(&bytes).unwrap().pairs, open.pairs);
        for cut in 0..bytes.len() {
            assert!(OpenHours::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut flipped = bytes.clone();
        flipped[3] ^= 1;
        assert!(OpenHours::decode(&flipped).is_err());
    }
}
