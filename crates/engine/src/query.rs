//! Query math: aggregators now; downsampling, rate and cross-series aggregation follow
//! (docs/reference/opentsdb-query.md holds the rules they implement).

pub mod aggregate;
pub mod aggregator;
pub mod downsample;
pub mod filter;
mod fold;
pub mod plan;
pub mod rate;
