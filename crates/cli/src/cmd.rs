pub(crate) mod create_tables;
pub(crate) mod debug_ingest;
pub(crate) mod import;
pub(crate) mod query;
pub(crate) mod scan;
pub(crate) mod tsd;
pub(crate) mod uid;
