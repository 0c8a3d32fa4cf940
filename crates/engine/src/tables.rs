//! The tables and families of the schema, and the step that creates them.

use hourglass_core::schema::{self, Schema};
use hourglass_storage::{FamilySpec, Store, TableSpec};

use crate::Result;
use crate::rollup::RollupSettings;

/// OpenTSDB's four tables (one version per cell, as OpenTSDB creates them), the tag
/// index beside them (RFC 0007), and the rollup and pre-aggregate tables the rollup
/// configuration names (RFC 0008; family `t`, as the data table).
pub fn table_specs(schema: &Schema, rollups: Option<&RollupSettings>) -> Vec<TableSpec> {
    let one = Some(1);
    let mut specs = vec![
        TableSpec {
            name: schema.data_table.clone(),
            families: vec![FamilySpec::new(schema::DATA_FAMILY, one)],
        },
        TableSpec {
            name: schema.uid_table.clone(),
            families: vec![
                FamilySpec::new(schema::UID_ID_FAMILY, one),
                FamilySpec::new(schema::UID_NAME_FAMILY, one),
            ],
        },
        TableSpec {
            name: schema.meta_table.clone(),
            families: vec![FamilySpec::new(schema::META_FAMILY, one)],
        },
        TableSpec {
            name: schema.tree_table.clone(),
            families: vec![FamilySpec::new(schema::TREE_FAMILY, one)],
        },
        crate::index::table_spec(schema),
    ];
    if rollups.is_some_and(|r| r.compute.is_some()) {
        specs.push(crate::rollup::compute::state_table_spec(schema));
    }
    for name in rollups.map(RollupSettings::tables).unwrap_or_default() {
        if specs.iter().all(|s| s.name != name) {
            specs.push(TableSpec {
                name,
                families: vec![FamilySpec::new(schema::DATA_FAMILY, one)],
            });
        }
    }
    specs
}

/// Creates every table and family that is missing. Idempotent.
pub fn create_tables(
    store: &dyn Store,
    schema: &Schema,
    rollups: Option<&RollupSettings>,
) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for spec in table_specs(schema, rollups) {
        store.create_table(&spec)?;
        names.push(spec.name);
    }
    Ok(names)
}
