//! `tsdb index rebuild`.
