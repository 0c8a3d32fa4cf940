//! What fsck found and fixed, and how it is told.

/// What fsck found and fixed: OpenTSDB's counters, ours, and one line per finding.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FsckReport {
    /// Cells read (`Key Values Processed`).
    pub kvs_processed: u64,
    /// Rows read (`Rows Processed`).
    pub rows_processed: u64,
    /// Times with a data point, one per time (`Valid Datapoints`).
    pub valid_datapoints: u64,
    /// Annotation columns (`Annotations`).
    pub annotations: u64,
    /// Rows with keys of an invalid length (`Invalid Row Keys Found`).
    pub bad_key: u64,
    /// Such rows deleted (`Invalid Rows Deleted`).
    pub bad_key_fixed: u64,
    /// Points discarded because another one has their time (`Duplicate Datapoints`).
    pub duplicates: u64,
    /// Such points removed (`Duplicate Datapoints Resolved`).
    pub duplicates_fixed: u64,
    /// Rows whose metric or tag UIDs have no name (`Orphaned UID Rows`).
    pub orphans: u64,
    /// Such rows deleted (`Orphaned UID Rows Deleted`).
    pub orphans_fixed: u64,
    /// Odd columns of unknown kinds, not errors (`Possible Future Objects`).
    pub future: u64,
    /// Columns that are not OpenTSDB's (`Unknown Objects`).
    pub unknown: u64,
    /// Such columns deleted (`Unknown Objects Deleted`).
    pub unknown_fixed: u64,
    /// Data points whose value or qualifier cannot be read (`Unparseable Datapoint Values`).
    pub bad_values: u64,
    /// Such columns deleted (`Unparseable Datapoint Values Deleted`).
    pub bad_values_deleted: u64,
    /// 4-byte floats written on 8 bytes (`Improperly Encoded Floating Point Values`).
    pub value_encoding: u64,
    /// Such values rewritten on 4 bytes (`... Fixed`).
    pub value_encoding_fixed: u64,
    /// Compacted columns that cannot be parsed, or with a bad meta byte (`Unparseable Compacted Columns`).
    pub bad_compacted_columns: u64,
    /// Such columns deleted (`Unparseable Compacted Columns Deleted`).
    pub bad_compacted_columns_deleted: u64,
    /// 8-byte integers that fit fewer bytes, not errors (`Datapoints Qualified for VLE `).
    pub vle: u64,
    /// Such integers rewritten shorter (`Datapoints Compressed with VLE`).
    pub vle_fixed: u64,
    /// Bytes such rewrites save (`Bytes Saved with VLE`).
    pub vle_bytes: u64,
    /// Compacted columns whose points were out of order (OpenTSDB counts them in the totals
    /// only).
    pub out_of_order_compacted: u64,
    /// Rows rewritten in time order for them.
    pub out_of_order_compacted_fixed: u64,
    /// Rows of hours closed for more than [`super::UNCOMPACTED_GRACE_SECS`] holding several data
    /// cells.
    pub uncompacted_rows: u64,
    /// Such rows compacted into one column.
    pub uncompacted_rows_fixed: u64,
    /// One line per finding, in scan order: what, where (row key in hex), and the flags that
    /// repair it, or what was done.
    pub findings: Vec<String>,
}

impl FsckReport {
    /// Every error found: OpenTSDB's sum plus past rows left uncompacted.
    pub fn total_errors(&self) -> u64 {
        self.bad_key
            + self.duplicates
            + self.orphans
            + self.unknown
            + self.bad_values
            + self.bad_compacted_columns
            + self.out_of_order_compacted
            + self.value_encoding
            + self.uncompacted_rows
    }

    /// Errors fsck knows a fix for (the same sum as [`FsckReport::total_errors`], as in
    /// OpenTSDB).
    pub fn total_correctable(&self) -> u64 {
        self.total_errors()
    }

    /// Errors fixed in this run.
    pub fn total_fixed(&self) -> u64 {
        self.bad_key_fixed
            + self.duplicates_fixed
            + self.orphans_fixed
            + self.unknown_fixed
            + self.value_encoding_fixed
            + self.bad_values_deleted
            + self.bad_compacted_columns_deleted
            + self.out_of_order_compacted_fixed
            + self.uncompacted_rows_fixed
    }

    /// The summary: OpenTSDB's 25 lines in its order, then ours.
    pub fn summary_lines(&self) -> Vec<String> {
        let rows: [(&str, u64); 29] = [
            ("Key Values Processed", self.kvs_processed),
            ("Rows Processed", self.rows_processed),
            ("Valid Datapoints", self.valid_datapoints),
            ("Annotations", self.annotations),
            ("Invalid Row Keys Found", self.bad_key),
            ("Invalid Rows Deleted", self.bad_key_fixed),
            ("Duplicate Datapoints", self.duplicates),
            ("Duplicate Datapoints Resolved", self.duplicates_fixed),
            ("Orphaned UID Rows", self.orphans),
            ("Orphaned UID Rows Deleted", self.orphans_fixed),
            ("Possible Future Objects", self.future),
            ("Unknown Objects", self.unknown),
            ("Unknown Objects Deleted", self.unknown_fixed),
            ("Unparseable Datapoint Values", self.bad_values),
            (
                "Unparseable Datapoint Values Deleted",
                self.bad_values_deleted,
            ),
            (
                "Improperly Encoded Floating Point Values",
                self.value_encoding,
            ),
            (
                "Improperly Encoded Floating Point Values Fixed",
                self.value_encoding_fixed,
            ),
            ("Unparseable Compacted Columns", self.bad_compacted_columns),
            (
                "Unparseable Compacted Columns Deleted",
                self.bad_compacted_columns_deleted,
            ),
            ("Datapoints Qualified for VLE ", self.vle),
            ("Datapoints Compressed with VLE", self.vle_fixed),
            ("Bytes Saved with VLE", self.vle_bytes),
            ("Total Errors", self.total_errors()),
            ("Total Correctable Errors", self.total_correctable()),
            ("Total Errors Fixed", self.total_fixed()),
            (
                "Out of Order Compacted Columns",
                self.out_of_order_compacted,
            ),
            (
                "Out of Order Compacted Columns Fixed",
                self.out_of_order_compacted_fixed,
            ),
            ("Past Rows Left Uncompacted", self.uncompacted_rows),
            ("Past Rows Compacted", self.uncompacted_rows_fixed),
        ];
        rows.iter()
            .map(|(label, n)| format!("{label}: {n}"))
            .collect()
    }

    pub(super) fn merge(&mut self, other: FsckReport) {
        macro_rules! add {
            ($($f:ident),*) => { $(self.$f += other.$f;)* };
        }
        add!(
            kvs_processed,
            rows_processed,
            valid_datapoints,
            annotations,
            bad_key,
            bad_key_fixed,
            duplicates,
            duplicates_fixed,
            orphans,
            orphans_fixed,
            future,
            unknown,
            unknown_fixed,
            bad_values,
            bad_values_deleted,
            value_encoding,
            value_encoding_fixed,
            bad_compacted_columns,
            bad_compacted_columns_deleted,
            vle,
            vle_fixed,
            vle_bytes,
            out_of_order_compacted,
            out_of_order_compacted_fixed,
            uncompacted_rows,
            uncompacted_rows_fixed
        );
        self.findings.extend(other.findings);
    }
}
