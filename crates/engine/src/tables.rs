//! The tables and families of the schema, and the step that creates them.

use hourglass_core::schema::{self, Schema};
use hourglass_storage::{FamilySpec, Store, TableSpec};

use crate::Result;

/// OpenTSDB's four tables (one version per cell, as OpenTSDB creates them), and the tag
/// index beside them (RFC 0007).
pub fn table_specs(schema: &Schema) -> Vec<TableSpec> {
    let one = Some(1);
    vec![
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
    ]
}

/// Creates every table and family that is missing. Idempotent.
pub fn create_tables(store: &dyn Store, schema: &Schema) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for spec in table_specs(schema) {
        store.create_table(&spec)?;
        names.push(spec.name);
    }
    Ok(names)
}
