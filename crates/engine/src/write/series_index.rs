//! The series cache's text index: a point's series text (metric and tags as sent) to its
//! interned series id, looked up once per point on the ingest path.
//!
//! Laid out for that lookup: the table holds small slots (where the text sits in one arena,
//! its length, the id), so it stays in the CPU's caches even with many series, and a lookup
//! costs one read of the arena for the comparison. (A map of boxed strings reads a larger
//! table and then each key's own allocation.)

use std::hash::BuildHasher;

use hashbrown::HashTable;

#[derive(Debug, Clone, Copy)]
struct Slot {
    at: usize,
    len: u32,
    id: u32,
}

#[derive(Debug, Default)]
pub(crate) struct TextIndex {
    table: HashTable<Slot>,
    arena: String,
    hasher: foldhash::fast::RandomState,
}

impl TextIndex {
    fn text(&self, slot: &Slot) -> &str {
        self.arena
            .get(slot.at..slot.at + slot.len as usize)
            .unwrap_or_default()
    }

    pub(crate) fn get(&self, text: &str) -> Option<u32> {
        let hash = self.hasher.hash_one(text);
        self.table
            .find(hash, |slot| self.text(slot) == text)
            .map(|slot| slot.id)
    }

    /// Maps `text` to `id` (replacing what it mapped to). Texts longer than `u32::MAX`
    /// bytes are not indexed (they are looked up the slow way each time).
    pub(crate) fn insert(&mut self, text: &str, id: u32) {
        let Ok(len) = u32::try_from(text.len()) else {
            return;
        };
        let hash = self.hasher.hash_one(text);
        let (arena, hasher) = (&self.arena, &self.hasher);
        let text_of = |slot: &Slot| arena.get(slot.at..slot.at + slot.len as usize);
        match self
            .table
            .find_mut(hash, |slot| text_of(slot) == Some(text))
        {
            Some(slot) => slot.id = id,
            None => {
                let slot = Slot {
                    at: self.arena.len(),
                    len,
                    id,
                };
                self.table.insert_unique(hash, slot, |slot| {
                    hasher.hash_one(text_of(slot).unwrap_or_default())
                });
                self.arena.push_str(text);
            }
        }
    }

    /// Keeps only the texts whose id `keep` accepts, in a new table and arena (their bytes
    /// are given back).
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(u32) -> bool) {
        let mut kept = TextIndex {
            hasher: self.hasher.clone(),
            ..TextIndex::default()
        };
        for slot in self.table.iter().filter(|slot| keep(slot.id)) {
            kept.insert(self.text(slot), slot.id);
        }
        *self = kept;
    }

    /// Texts held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.table.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_map_to_their_ids_through_growth() {
        let mut index = TextIndex::default();
        let text = |i: u32| format!("m\0host\0web{i:05}");
        for i in 0..10_000u32 {
            index.insert(&text(i), i % 7_000);
        }
        for i in 0..10_000u32 {
            assert_eq!(index.get(&text(i)), Some(i % 7_000), "{}", text(i));
        }
        assert_eq!(index.get("m\0host\0web10000"), None);
        assert_eq!(index.get(""), None);
        index.insert("", 5);
        index.insert(&text(3), 42);
        assert_eq!(index.get(""), Some(5));
        assert_eq!(index.get(&text(3)), Some(42));
        assert_eq!(index.get(&text(4)), Some(4));
        // Dropping the odd ids keeps the even ones, from a smaller arena.
        let arena = index.arena.len();
        index.retain(|id| id % 2 == 0);
        assert!(index.arena.len() < arena);
        assert_eq!(index.get(&text(4)), Some(4));
        assert_eq!(index.get(&text(5)), None);
        assert_eq!(index.get(&text(3)), Some(42), "its id is even");
        assert_eq!(index.get(""), None);
        assert_eq!(index.len(), 5_001);
    }
}
