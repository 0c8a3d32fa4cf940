//! Points waiting for a flush. The writer keeps one *active* buffer that batches go into
//! and a list of *sealed* ones: a flush seals the active buffer (it becomes immutable, an
//! `Arc<Buffer>`, and stays readable by queries), writes it to the store, and only then
//! drops it.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use hourglass_core::compact::Point;

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Estimated bytes of one row's entry besides its points (map slot, vector header).
const ROW_OVERHEAD: usize = 48;
const POINT_BYTES: usize = std::mem::size_of::<Point>();

/// Points by row, in arrival order. A row is `series id << 32 | base hour`. Each series'
/// current hour sits in a dense slot indexed by series id (no hashing on the hot path);
/// points for any other hour of the series go to a map.
#[derive(Debug, Default)]
pub(crate) struct Buffer {
    current: Vec<(u32, Vec<Point>)>,
    other: Map<u64, Vec<Point>>,
    pub(crate) points: usize,
    /// Heap bytes held, from the vectors' capacities (what the budget counts).
    pub(crate) bytes: usize,
    /// When the first point arrived (ms on the writer's clock).
    pub(crate) oldest_ms: Option<i64>,
}

impl Buffer {
    pub(crate) fn push(&mut self, row: u64, p: Point) {
        let (series, base) = ((row >> 32) as usize, row as u32);
        if series >= self.current.len() {
            let before = self.current.capacity();
            self.current.resize_with(series + 1, Default::default);
            self.bytes += (self.current.capacity() - before) * ROW_OVERHEAD;
        }
        let slot = &mut self.current[series];
        let points = if slot.1.is_empty() || slot.0 == base {
            slot.0 = base;
            &mut slot.1
        } else {
            match self.other.entry(row) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(e) => {
                    self.bytes += ROW_OVERHEAD;
                    e.insert(Vec::new())
                }
            }
        };
        let before = points.capacity();
        points.push(p);
        self.bytes += (points.capacity() - before) * POINT_BYTES;
        self.points += 1;
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.points == 0
    }

    /// The points of one row, if it has any here.
    pub(crate) fn get(&self, row: u64) -> Option<&[Point]> {
        let (series, base) = ((row >> 32) as usize, row as u32);
        match self.current.get(series) {
            Some((b, points)) if *b == base && !points.is_empty() => Some(points),
            _ => self.other.get(&row).map(Vec::as_slice),
        }
    }

    /// Every row with its points.
    pub(crate) fn rows(&self) -> impl Iterator<Item = (u64, &[Point])> {
        let current = self
            .current
            .iter()
            .enumerate()
            .filter(|(_, (_, points))| !points.is_empty())
            .map(|(series, (base, points))| {
                (
                    ((series as u64) << 32) | u64::from(*base),
                    points.as_slice(),
                )
            });
        current.chain(self.other.iter().map(|(row, p)| (*row, p.as_slice())))
    }
}

/// Gathers the points of rows from several buffers, oldest buffer first, so that within a
/// row the points stay in write order (later writes win duplicate times).
#[derive(Debug, Default)]
pub(crate) struct Gathered {
    rows: Map<u64, Vec<Point>>,
}

impl Gathered {
    pub(crate) fn add(&mut self, buffer: &Buffer, mut wanted: impl FnMut(u64) -> bool) {
        for (row, points) in buffer.rows() {
            if let Some(have) = self.rows.get_mut(&row) {
                have.extend_from_slice(points);
            } else if wanted(row) {
                self.rows.insert(row, points.to_vec());
            }
        }
    }

    pub(crate) fn into_rows(self) -> impl Iterator<Item = (u64, Vec<Point>)> {
        self.rows.into_iter()
    }
}
