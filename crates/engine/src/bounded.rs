//! A map of at most a given number of entries, the least recently used leaving first (in
//! two generations: an entry found in the older one moves to the newer; when the newer
//! holds half the bound, it becomes the older and the older is dropped). The UID caches
//! (`tsd.uid.lru.name.size`, `tsd.uid.lru.id.size`) and the meta tracker's set of series
//! known to have their `ts_meta` are these, so a TSD writing ever new tag values and series
//! keeps what it uses, not everything it ever saw.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;

use parking_lot::RwLock;

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

#[derive(Debug)]
struct Generations<K, V> {
    newer: Map<K, V>,
    older: Map<K, V>,
}

#[derive(Debug)]
pub(crate) struct BoundedMap<K, V> {
    maps: RwLock<Generations<K, V>>,
    /// Entries held by the newer generation before it turns older (half the bound).
    half: usize,
}

impl<K: Hash + Eq, V: Clone> BoundedMap<K, V> {
    /// A map of at most `bound` entries (at least 2).
    pub(crate) fn new(bound: usize) -> Self {
        BoundedMap {
            maps: RwLock::new(Generations {
                newer: Map::default(),
                older: Map::default(),
            }),
            half: (bound / 2).max(1),
        }
    }

    pub(crate) fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        {
            let maps = self.maps.read();
            if let Some(v) = maps.newer.get(key) {
                return Some(v.clone());
            }
            maps.older.get(key)?;
        }
        // Used again: into the newer generation.
        let mut maps = self.maps.write();
        if let Some(v) = maps.newer.get(key) {
            return Some(v.clone());
        }
        let (key, v) = maps.older.remove_entry(key)?;
        self.put(&mut maps, key, v.clone());
        Some(v)
    }

    /// `f` of the entry for `key`, without a copy of it when it is in the newer generation;
    /// else as [`BoundedMap::get`] (an entry of the older one moves into the newer).
    pub(crate) fn get_with<Q, R>(&self, key: &Q, f: &mut impl FnMut(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if let Some(v) = self.maps.read().newer.get(key) {
            return Some(f(v));
        }
        self.get(key).map(|v| f(&v))
    }

    pub(crate) fn insert(&self, key: K, v: V) {
        let mut maps = self.maps.write();
        maps.older.remove(&key);
        self.put(&mut maps, key, v);
    }

    fn put(&self, maps: &mut Generations<K, V>, key: K, v: V) {
        if maps.newer.len() >= self.half && !maps.newer.contains_key(&key) {
            maps.older = std::mem::take(&mut maps.newer);
        }
        maps.newer.insert(key, v);
    }

    pub(crate) fn remove<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut maps = self.maps.write();
        maps.newer.remove(key);
        maps.older.remove(key);
    }

    pub(crate) fn clear(&self) {
        let mut maps = self.maps.write();
        maps.newer.clear();
        maps.older.clear();
    }

    pub(crate) fn len(&self) -> usize {
        let maps = self.maps.read();
        maps.newer.len() + maps.older.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry is lent from either generation (one of the older moving into the newer, as
    /// `get` moves it); a missing one is `None` without a call.
    #[test]
    fn entries_are_lent_where_they_are() {
        let map: BoundedMap<u32, String> = BoundedMap::new(4);
        map.insert(1, "one".into());
        map.insert(2, "two".into());
        // 1 and 2 turn older when 3 arrives (the newer holds half the bound).
        map.insert(3, "three".into());
        let mut lengths = |v: &String| v.len();
        assert_eq!(map.get_with(&3, &mut lengths), Some(5));
        assert_eq!(map.get_with(&1, &mut lengths), Some(3));
        assert!(
            map.maps.read().newer.contains_key(&1),
            "moved into the newer"
        );
        let mut calls = 0;
        assert_eq!(map.get_with(&9, &mut |_: &String| calls += 1), None);
        assert_eq!(calls, 0);
    }

    #[test]
    fn holds_at_most_its_bound_and_keeps_what_is_used() {
        let map: BoundedMap<String, u32> = BoundedMap::new(100);
        for i in 0..1_000u32 {
            map.insert(format!("k{i}"), i);
            // One key used all along stays.
            assert_eq!(map.get("k0"), Some(0), "after {i}");
            assert!(map.len() <= 100, "{} entries after {i}", map.len());
        }
        assert_eq!(map.get("k999"), Some(999));
        assert_eq!(map.get("k500"), None, "long unused: gone");
        map.remove("k0");
        assert_eq!(map.get("k0"), None);
        map.insert("k0".into(), 7);
        map.insert("k0".into(), 8);
        assert_eq!(map.get("k0"), Some(8), "the last insert wins");
        map.clear();
        assert_eq!(map.len(), 0);
    }
}
