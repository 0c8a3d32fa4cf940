//! The database engine over a [`hourglass_storage::Store`]: UID assignment, the write path
//! and compaction. It speaks OpenTSDB's schema through `hourglass-core`'s codecs.

pub mod annotation;
mod bounded;
pub mod cell_codec;
pub mod changes;
mod error;
pub mod fsck;
mod group_commit;
pub mod histogram;
pub mod index;
mod kept;
pub mod meta;
pub mod num;
pub mod query;
pub mod read;
pub mod rollup;
pub mod rows;
pub mod scan;
pub mod search;
pub mod settings;
pub mod sim;
pub mod tables;
pub mod tree;
mod tsdb;
pub mod uid;
pub mod wal;
pub mod write;

pub use error::{Error, ErrorKind, Result};
pub use read::SeriesPoints;
pub use settings::{Clock, Settings};
pub use tsdb::Tsdb;
pub use write::{BatchOutcome, IncomingPoint};
