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
/// The most points a row's vector is made room for ahead of them.
const MAX_ROOM: usize = 4096;

/// Points by row, in arrival order. A row is `series id << 32 | base hour`. Each series'
/// latest hour sits in a dense slot indexed by series id (no hashing on the hot path);
/// points for any earlier hour of the series go to a map.
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
        } else if base > slot.0 {
            // The series moved on to a later hour (points come in time order): its row so
            // far goes to the map and the later hour takes the dense slot, made room for
            // as many points as the row before it had (not grown from nothing again).
            let room = slot.1.len().min(MAX_ROOM);
            let earlier = std::mem::replace(&mut slot.1, Vec::with_capacity(room));
            let earlier_row = ((series as u64) << 32) | u64::from(slot.0);
            debug_assert!(
                !self.other.contains_key(&earlier_row),
                "an earlier hour's row in the map beside the slot's"
            );
            slot.0 = base;
            self.bytes += room * POINT_BYTES;
            match self.other.entry(earlier_row) {
                // None can be there: a row of an hour is in the map only while a later
                // hour holds the slot, and the slot's hour only grows.
                Entry::Occupied(e) => {
                    let points = e.into_mut();
                    let before = points.capacity();
                    points.extend(earlier);
                    self.bytes += (points.capacity() - before) * POINT_BYTES;
                }
                Entry::Vacant(e) => {
                    self.bytes += ROW_OVERHEAD;
                    e.insert(earlier);
                }
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use hourglass_core::qualifier::Qualifier;

    fn point(offset: u32, v: u64) -> Point {
        Point::new(Qualifier::seconds(offset, 0x7).unwrap(), v)
    }

    fn row(series: u64, hour: u32) -> u64 {
        (series << 32) | u64::from(hour)
    }

    /// Every row's points, sorted by row.
    fn rows(b: &Buffer) -> Vec<(u64, Vec<Point>)> {
        let mut rows: Vec<(u64, Vec<Point>)> = b.rows().map(|(r, p)| (r, p.to_vec())).collect();
        rows.sort_by_key(|r| r.0);
        rows
    }

    #[test]
    fn rows_keep_their_points_in_arrival_order_whichever_hour_comes_when() {
        let mut b = Buffer::default();
        // Series 1: hours in order, then late points to earlier hours, then a later hour.
        let writes = [
            (row(1, 3600), point(0, 1)),
            (row(1, 3600), point(10, 2)),
            (row(1, 7200), point(0, 3)),
            (row(1, 3600), point(20, 4)),
            (row(1, 7200), point(10, 5)),
            (row(1, 0), point(5, 6)),
            (row(1, 10800), point(0, 7)),
            (row(1, 7200), point(20, 8)),
            (row(1, 0), point(1, 9)),
            // Series 0, one hour.
            (row(0, 3600), point(0, 10)),
        ];
        for (r, p) in writes {
            b.push(r, p);
        }
        assert_eq!(b.points, writes.len());
        let mut want: Vec<(u64, Vec<Point>)> = Vec::new();
        for (r, p) in writes {
            match want.iter_mut().find(|(w, _)| *w == r) {
                Some((_, points)) => points.push(p),
                None => want.push((r, vec![p])),
            }
        }
        want.sort_by_key(|r| r.0);
        assert_eq!(rows(&b), want);
        for (r, points) in &want {
            assert_eq!(b.get(*r), Some(points.as_slice()));
        }
        assert_eq!(b.get(row(1, 14400)), None);
        assert_eq!(b.get(row(2, 3600)), None);
        // Every vector's capacity is counted.
        let held: usize = b.current.iter().map(|(_, p)| p.capacity()).sum::<usize>()
            + b.other.values().map(Vec::capacity).sum::<usize>();
        assert!(
            b.bytes >= held * POINT_BYTES,
            "{} < {}",
            b.bytes,
            held * POINT_BYTES
        );
    }

    #[test]
    fn a_later_hour_is_made_room_for_as_many_points_as_the_hour_before() {
        let mut b = Buffer::default();
        for i in 0..300 {
            b.push(row(4, 0), point(i, u64::from(i)));
        }
        b.push(row(4, 3600), point(0, 0));
        let room = b.current[4].1.capacity();
        assert!(room >= 300, "{room}");
        for i in 1..300 {
            b.push(row(4, 3600), point(i, u64::from(i)));
        }
        // Filled without growing.
        assert_eq!(b.current[4].1.capacity(), room);
        assert_eq!(b.get(row(4, 0)).map(<[Point]>::len), Some(300));
        assert_eq!(b.get(row(4, 3600)).map(<[Point]>::len), Some(300));
    }
}
