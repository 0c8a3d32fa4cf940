//! An in-memory [`Store`] for fast unit tests. Nothing survives a drop.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use parking_lot::RwLock;

use crate::model::RowData;
use crate::{
    Check, Error, Mutation, ReadOptions, Result, Row, RowCheck, RowIter, RowMutation, ScanRequest,
    Store, TableSpec, model::ScanFilter, now_ms,
};

#[derive(Debug, Clone)]
struct Table {
    spec: TableSpec,
    rows: BTreeMap<Vec<u8>, RowData>,
}

#[derive(Debug, Default)]
pub struct MemoryStore {
    tables: RwLock<HashMap<String, Table>>,
    /// Tables whose scans come in period order, series by series within a period (the
    /// weakest order [`Store::scan`] allows), so callers are tested against it.
    period_order: HashMap<String, PeriodOrder>,
}

/// Where a table's row keys hold their 4-byte base time, and the period scans group by.
#[derive(Debug, Clone, Copy)]
struct PeriodOrder {
    timestamp_offset: usize,
    period_secs: u32,
}

impl PeriodOrder {
    /// The key rows are ordered by: the key with its base time replaced by its period's
    /// start, then the base time.
    fn sort_key(&self, key: &[u8]) -> Vec<u8> {
        let at = self.timestamp_offset;
        let Some(time) = key.get(at..at + 4) else {
            return key.to_vec();
        };
        let base = u32::from_be_bytes([time[0], time[1], time[2], time[3]]);
        let mut out = key[..at].to_vec();
        out.extend_from_slice(&(base - base % self.period_secs).to_be_bytes());
        out.extend_from_slice(&crate::series_major(key, at)[at..]);
        out
    }
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Scans of `table` return rows in period order (see [`Store::scan`]): grouped by
    /// the period of their base time (the 4 bytes at `timestamp_offset`), series by series
    /// within a period, as a store keeping a series' period together would.
    pub fn with_period_order(
        mut self,
        table: &str,
        timestamp_offset: usize,
        period_secs: u32,
    ) -> Self {
        self.period_order.insert(
            table.to_string(),
            PeriodOrder {
                timestamp_offset,
                period_secs: period_secs.max(1),
            },
        );
        self
    }

    /// A deep copy of every table as it is now (simulations keep one as the state a power
    /// loss returns to).
    pub fn snapshot(&self) -> MemoryStore {
        MemoryStore {
            tables: RwLock::new(self.tables.read().clone()),
            period_order: self.period_order.clone(),
        }
    }
}

fn table_mut<'a>(tables: &'a mut HashMap<String, Table>, name: &str) -> Result<&'a mut Table> {
    tables
        .get_mut(name)
        .ok_or_else(|| Error::TableNotFound(name.to_string()))
}

fn mutate(table: &mut Table, key: &[u8], mutations: &[Mutation]) -> Result<()> {
    let mut row = table.rows.get(key).cloned().unwrap_or_default();
    row.apply(&table.spec, mutations, now_ms())?;
    if row.is_empty() {
        table.rows.remove(key);
    } else {
        table.rows.insert(key.to_vec(), row);
    }
    Ok(())
}

impl Store for MemoryStore {
    fn backend(&self) -> &'static str {
        "memory"
    }

    fn create_table(&self, spec: &TableSpec) -> Result<()> {
        let mut tables = self.tables.write();
        let table = tables.entry(spec.name.clone()).or_insert_with(|| Table {
            spec: TableSpec {
                name: spec.name.clone(),
                families: Vec::new(),
            },
            rows: BTreeMap::new(),
        });
        for f in &spec.families {
            if !table.spec.families.iter().any(|have| have.name == f.name) {
                table.spec.families.push(f.clone());
            }
        }
        Ok(())
    }

    fn table_exists(&self, table: &str) -> Result<bool> {
        Ok(self.tables.read().contains_key(table))
    }

    fn get(&self, table: &str, key: &[u8], read: &ReadOptions) -> Result<Option<Row>> {
        let tables = self.tables.read();
        let t = tables
            .get(table)
            .ok_or_else(|| Error::TableNotFound(table.to_string()))?;
        Ok(t.rows.get(key).and_then(|r| r.read(key, read)))
    }

    fn mutate_row(&self, table: &str, key: &[u8], mutations: &[Mutation]) -> Result<()> {
        let mut tables = self.tables.write();
        mutate(table_mut(&mut tables, table)?, key, mutations)
    }

    fn mutate_rows(&self, table: &str, rows: &[RowMutation]) -> Result<()> {
        let mut tables = self.tables.write();
        let t = table_mut(&mut tables, table)?;
        rows.iter()
            .try_for_each(|r| mutate(t, &r.key, &r.mutations))
    }

    fn scan(&self, table: &str, request: &ScanRequest) -> Result<RowIter> {
        let filter = ScanFilter::new(request)?;
        let tables = self.tables.read();
        let t = tables
            .get(table)
            .ok_or_else(|| Error::TableNotFound(table.to_string()))?;
        let upper = match &request.end {
            Some(end) => Bound::Excluded(end.clone()),
            None => Bound::Unbounded,
        };
        let rows = t
            .rows
            .range((Bound::Included(request.start.clone()), upper));
        if let Some(order) = self.period_order.get(table) {
            let mut out: Vec<Row> = rows
                .filter_map(|(key, row)| filter.accept(key, row))
                .collect();
            out.sort_by_cached_key(|row| order.sort_key(&row.key));
            if let Some(limit) = request.limit {
                out.truncate(limit);
            }
            return Ok(Box::new(out.into_iter().map(Ok)));
        }
        let mut out = Vec::new();
        for (key, row) in rows {
            if filter.is_full(out.len()) {
                break;
            }
            if let Some(row) = filter.accept(key, row) {
                out.push(Ok(row));
            }
        }
        Ok(Box::new(out.into_iter()))
    }

    fn increment(
        &self,
        table: &str,
        key: &[u8],
        family: &str,
        qualifier: &[u8],
        delta: i64,
    ) -> Result<i64> {
        let mut tables = self.tables.write();
        let t = table_mut(&mut tables, table)?;
        let mut row = t.rows.get(key).cloned().unwrap_or_default();
        let v = row.increment(&t.spec, family, qualifier, delta, now_ms())?;
        t.rows.insert(key.to_vec(), row);
        Ok(v)
    }

    fn check_and_mutate(
        &self,
        table: &str,
        key: &[u8],
        check: &Check,
        mutations: &[Mutation],
    ) -> Result<bool> {
        let mut tables = self.tables.write();
        let t = table_mut(&mut tables, table)?;
        let held = t
            .rows
            .get(key)
            .map_or(check.expected.is_none(), |r| r.check(check));
        if held {
            mutate(t, key, mutations)?;
        }
        Ok(held)
    }

    /// Under the tables' write lock: checked and applied with nothing in between.
    fn check_and_mutate_rows(
        &self,
        table: &str,
        checks: &[RowCheck],
        rows: &[RowMutation],
    ) -> Result<Option<bool>> {
        let mut tables = self.tables.write();
        let t = table_mut(&mut tables, table)?;
        let held = checks.iter().all(|c| {
            t.rows
                .get(&c.key)
                .map_or(c.check.expected.is_none(), |r| r.check(&c.check))
        });
        if !held {
            return Ok(Some(false));
        }
        // Validated on copies first, so a mutation refused (an unknown family) leaves
        // every row as it was.
        let mut pending: BTreeMap<&[u8], RowData> = BTreeMap::new();
        let now = now_ms();
        for r in rows {
            let row = match pending.entry(r.key.as_slice()) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(t.rows.get(&r.key).cloned().unwrap_or_default())
                }
            };
            row.apply(&t.spec, &r.mutations, now)?;
        }
        for (key, row) in pending {
            if row.is_empty() {
                t.rows.remove(key);
            } else {
                t.rows.insert(key.to_vec(), row);
            }
        }
        Ok(Some(true))
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn is_shared(&self) -> bool {
        false
    }

    fn get_rows(
        &self,
        table: &str,
        keys: &[Vec<u8>],
        read: &crate::ReadOptions,
    ) -> crate::Result<Vec<Option<crate::Row>>> {
        crate::fallback::get_rows(self, table, keys, read)
    }

    fn put_cells(&self, table: &str, rows: &[crate::CellRow<'_>]) -> crate::Result<()> {
        crate::fallback::put_cells(self, table, rows)
    }

    fn scan_cells(
        &self,
        table: &str,
        request: &crate::ScanRequest,
        visit: crate::CellVisitor<'_>,
    ) -> crate::Result<()> {
        crate::fallback::scan_cells(self, table, request, visit)
    }

    fn scan_joint(
        &self,
        table: &str,
        request: &crate::ScanRequest,
        visit: crate::JointVisitor<'_>,
    ) -> crate::Result<()> {
        crate::fallback::scan_joint(self, table, request, visit)
    }

    fn increment_many(
        &self,
        table: &str,
        key: &[u8],
        increments: &[crate::Increment],
    ) -> crate::Result<Vec<i64>> {
        crate::fallback::increment_many(self, table, key, increments)
    }

    fn append(
        &self,
        table: &str,
        key: &[u8],
        family: &str,
        qualifier: &[u8],
        suffix: &[u8],
    ) -> crate::Result<()> {
        crate::fallback::append(self, table, key, family, qualifier, suffix)
    }

    fn checkpoint(&self) -> crate::Result<()> {
        Ok(())
    }

    fn make_table_durable(&self, table: &str) -> crate::Result<()> {
        crate::fallback::write_table_again(self, table, true)
    }

    fn maintain(&self, _now_ms: i64) -> crate::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{FamilySpec, Mutation};

    #[test]
    fn period_order_groups_series_within_a_period() {
        // Keys: 1-byte metric, 4-byte base time, 1-byte series; periods of two hours.
        let store = MemoryStore::new().with_period_order("t", 1, 7200);
        store
            .create_table(&TableSpec {
                name: "t".into(),
                families: vec![FamilySpec::new("f", None)],
            })
            .unwrap();
        let key = |hour: u32, series: u8| {
            let mut k = vec![1];
            k.extend_from_slice(&(hour * 3600).to_be_bytes());
            k.push(series);
            k
        };
        for hour in 0..4 {
            for series in [2, 1] {
                store
                    .mutate_row("t", &key(hour, series), &[Mutation::set("f", "q", "v")])
                    .unwrap();
            }
        }
        let order = |request: &ScanRequest| -> Vec<(u32, u8)> {
            store
                .scan("t", request)
                .unwrap()
                .map(|r| {
                    let k = r.unwrap().key;
                    (u32::from_be_bytes([k[1], k[2], k[3], k[4]]) / 3600, k[5])
                })
                .collect()
        };
        let all = ScanRequest::range(vec![1], Some(vec![2]));
        assert_eq!(
            order(&all),
            vec![
                (0, 1),
                (1, 1),
                (0, 2),
                (1, 2),
                (2, 1),
                (3, 1),
                (2, 2),
                (3, 2)
            ]
        );
        let first_three = ScanRequest {
            limit: Some(3),
            ..all
        };
        assert_eq!(order(&first_three), vec![(0, 1), (1, 1), (0, 2)]);
    }
}
