//! Table names, families, UID widths and salting: everything that shapes the stored bytes.

use crate::config::Config;
use crate::uid::UidKind;
use crate::{Error, Result};

pub const DATA_FAMILY: &str = "t";
pub const UID_ID_FAMILY: &str = "id";
pub const UID_NAME_FAMILY: &str = "name";
pub const META_FAMILY: &str = "name";
pub const TREE_FAMILY: &str = "t";
/// Row key of the MAXID counters in the UID table.
pub const MAXID_ROW: &[u8] = &[0];

/// The byte-level shape of a deployment. Two processes sharing tables must agree on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    pub data_table: String,
    pub uid_table: String,
    pub meta_table: String,
    pub tree_table: String,
    /// The tag index (RFC 0007), a table of Hourglass's own beside OpenTSDB's.
    pub index_table: String,
    pub metric_width: u8,
    pub tagk_width: u8,
    pub tagv_width: u8,
    /// Salt prefix bytes (0 disables salting).
    pub salt_width: u8,
    pub salt_buckets: u32,
    pub max_tags: usize,
}

impl Default for Schema {
    fn default() -> Self {
        Schema {
            data_table: "tsdb".into(),
            uid_table: "tsdb-uid".into(),
            meta_table: "tsdb-meta".into(),
            tree_table: "tsdb-tree".into(),
            index_table: "tsdb-index".into(),
            metric_width: 3,
            tagk_width: 3,
            tagv_width: 3,
            salt_width: 0,
            salt_buckets: 20,
            max_tags: 8,
        }
    }
}

impl Schema {
    /// Reads OpenTSDB's keys (`tsd.storage.hbase.*_table`, the index table's among them, `tsd.storage.uid.width.*`,
    /// `tsd.storage.salt.*`, `tsd.storage.max_tags`).
    pub fn from_config(c: &Config) -> Result<Schema> {
        let d = Schema::default();
        let width = |key: &str, dflt: u8| -> Result<u8> {
            let v = c.get_int(key, i64::from(dflt))?;
            if !(1..=8).contains(&v) {
                return Err(Error::invalid(format!(
                    "UID width must be 1 to 8. key={key} value={v}"
                )));
            }
            Ok(v as u8)
        };
        let salt_width = c.get_int("tsd.storage.salt.width", 0)?;
        if !(0..=8).contains(&salt_width) {
            return Err(Error::invalid(format!(
                "salt width must be 0 to 8. value={salt_width}"
            )));
        }
        let salt_buckets = c.get_int("tsd.storage.salt.buckets", 20)?;
        if salt_buckets < 1 || salt_buckets > i64::from(i32::MAX) {
            return Err(Error::invalid(format!(
                "salt buckets must be positive. value={salt_buckets}"
            )));
        }
        let max_tags = c.get_int("tsd.storage.max_tags", 8)?;
        if max_tags < 1 {
            return Err(Error::invalid(format!(
                "max tags must be positive. value={max_tags}"
            )));
        }
        Ok(Schema {
            data_table: c
                .get_str("tsd.storage.hbase.data_table", &d.data_table)
                .to_string(),
            uid_table: c
                .get_str("tsd.storage.hbase.uid_table", &d.uid_table)
                .to_string(),
            meta_table: c
                .get_str("tsd.storage.hbase.meta_table", &d.meta_table)
                .to_string(),
            tree_table: c
                .get_str("tsd.storage.hbase.tree_table", &d.tree_table)
                .to_string(),
            index_table: c
                .get_str("tsd.storage.hbase.index_table", &d.index_table)
                .to_string(),
            metric_width: width("tsd.storage.uid.width.metric", 3)?,
            tagk_width: width("tsd.storage.uid.width.tagk", 3)?,
            tagv_width: width("tsd.storage.uid.width.tagv", 3)?,
            salt_width: salt_width as u8,
            salt_buckets: salt_buckets as u32,
            max_tags: max_tags as usize,
        })
    }

    pub fn uid_width(&self, kind: UidKind) -> u8 {
        match kind {
            UidKind::Metric => self.metric_width,
            UidKind::TagKey => self.tagk_width,
            UidKind::TagValue => self.tagv_width,
        }
    }

    /// Bytes of one tag pair in a row key.
    pub fn tag_pair_width(&self) -> usize {
        usize::from(self.tagk_width) + usize::from(self.tagv_width)
    }

    /// Offset of the base hour in a row key.
    pub fn timestamp_offset(&self) -> usize {
        usize::from(self.salt_width) + usize::from(self.metric_width)
    }

    /// Offset of the first tag pair in a row key.
    pub fn tags_offset(&self) -> usize {
        self.timestamp_offset() + 4
    }
}
