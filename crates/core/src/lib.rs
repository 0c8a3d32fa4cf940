//! The OpenTSDB data model and its byte encodings.
//!
//! Everything here is pure: no I/O, no clocks, no threads. The byte layouts are a
//! compatibility contract with OpenTSDB 2.4 — tables written by either side must be
//! readable by the other — so every codec pins its layout in a doc comment and in tests.

pub mod annotation;
pub mod calendar;
pub mod compact;
pub mod config;
pub mod credentials;
mod digits;
mod error;
pub mod histogram;
pub mod names;
pub mod permission;
pub mod put;
pub mod qualifier;
pub mod rollup;
pub mod rowkey;
pub mod schema;
pub mod time;
pub mod uid;
pub mod value;

pub use error::{Error, ErrorKind, Result};
