//! An in-memory [`Store`] for fast unit tests. Nothing survives a drop.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use parking_lot::RwLock;

use crate::model::RowData;
use crate::{
    Check, Error, Mutation, ReadOptions, Result, Row, RowIter, RowMutation, ScanRequest, Store,
    TableSpec, model::ScanFilter, now_ms,
};

#[derive(Debug, Clone)]
struct Table {
    spec: TableSpec,
    rows: BTreeMap<Vec<u8>, RowData>,
}

#[derive(Debug, Default)]
pub struct MemoryStore {
    tables: RwLock<HashMap<String, Table>>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// A deep copy of every table as it is now (simulations keep one as the state a power
    /// loss returns to).
    pub fn snapshot(&self) -> MemoryStore {
        MemoryStore {
            tables: RwLock::new(self.tables.read().clone()),
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
        let mut out = Vec::new();
        for (key, row) in t
            .rows
            .range((Bound::Included(request.start.clone()), upper))
        {
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

    fn sync(&self) -> Result<()> {
        Ok(())
    }
}
