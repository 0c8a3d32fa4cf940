//! Query math: aggregators now; downsampling, rate and cross-series aggregation follow
//! (docs/reference/opentsdb-query.md holds the rules they implement).

pub mod aggregate;
pub mod aggregator;
pub mod downsample;
pub mod filter;
pub(crate) mod fold;
pub mod memory;
pub mod plan;
pub mod rate;
pub mod threads;

/// Whether this machine has more than one core to give a query's second thread. Asked once:
/// the standard library reads the cgroup's CPU quota from files at every call.
pub(crate) fn two_cores() -> bool {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get())) > 1
}
