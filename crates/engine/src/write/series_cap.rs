//! The cap on new series per metric (`tsd.index.max_series_per_metric`, RFC 0007,
//! "Cardinality and the series cap"). When a series is new to this process, the metric's
//! series of the current period are counted as the index's counter says (`| 0x20 | metric |
//! period |`, re-read at most once a second) plus the series this process admitted since;
//! at or over the cap the series is admitted only if its `0x10` marker for the period
//! exists (it is counted already), else its points fail. Refused series are remembered until
//! the period ends (bounded), so their later points cost no store read. Several TSDs may
//! together pass the cap by their new series of about one flush interval.

use std::collections::{HashMap, HashSet};

use hourglass_core::schema::Schema;
use hourglass_storage::{ReadOptions, Store};
use parking_lot::Mutex;

use crate::Result;
use crate::index::{self, COUNTER_FAMILY, ENTRY_QUALIFIER, PERIOD_FAMILY, Series};

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
type Set<K> = HashSet<K, foldhash::fast::RandomState>;

/// How long a counter read stands before it is read again (ms).
const COUNTER_TTL_MS: i64 = 1_000;
/// Most refused series remembered; at it the set starts again empty.
const REFUSED_MAX: usize = 100_000;

#[derive(Debug, Default)]
struct Counted {
    stored: u64,
    read_ms: i64,
    admitted: u64,
}

#[derive(Debug, Default)]
struct State {
    period: u32,
    metrics: Map<Vec<u8>, Counted>,
    refused: Set<Vec<u8>>,
    /// Series refused per metric name, since start.
    refusals: Map<String, u64>,
}

#[derive(Debug)]
pub(crate) struct SeriesCap {
    cap: u64,
    state: Mutex<State>,
}

impl SeriesCap {
    pub(crate) fn new(cap: u64) -> SeriesCap {
        SeriesCap {
            cap,
            state: Mutex::new(State::default()),
        }
    }

    /// Whether a series new to this process (its row-key template) may be written now:
    /// `Ok(None)` yes, `Ok(Some(n))` no, the metric having `n` series this period.
    pub(crate) fn admit(
        &self,
        store: &dyn Store,
        schema: &Schema,
        metric_name: &str,
        template: &[u8],
        now_ms: i64,
    ) -> Result<Option<u64>> {
        let Some(series) = Series::from_row_key(schema, template) else {
            return Ok(None);
        };
        let period = index::period_of(u32::try_from((now_ms / 1000).max(0)).unwrap_or(u32::MAX));
        let tsuid = series.tsuid();
        // Store reads are made without the lock held: other connections' new series of
        // other metrics do not wait for them.
        let stale = {
            let mut state = self.state.lock();
            if state.period != period {
                state.period = period;
                state.metrics.clear();
                state.refused.clear();
            }
            if state.refused.contains(&tsuid) {
                return Ok(Some(self.count(&state, series.metric)));
            }
            state
                .metrics
                .get(series.metric)
                .is_none_or(|c| now_ms - c.read_ms >= COUNTER_TTL_MS)
        };
        if stale {
            let stored = store
                .get(
                    &schema.index_table,
                    &index::period_counters_key(series.metric, period),
                    &ReadOptions::latest(),
                )?
                .and_then(|r| {
                    r.value(COUNTER_FAMILY, ENTRY_QUALIFIER)
                        .and_then(|v| <[u8; 8]>::try_from(v).ok())
                        .map(u64::from_be_bytes)
                })
                .unwrap_or(0);
            self.state.lock().metrics.insert(
                series.metric.to_vec(),
                Counted {
                    stored,
                    read_ms: now_ms,
                    admitted: 0,
                },
            );
        }
        let count = {
            let mut state = self.state.lock();
            let count = self.count(&state, series.metric);
            if count < self.cap {
                if let Some(c) = state.metrics.get_mut(series.metric) {
                    c.admitted += 1;
                }
                return Ok(None);
            }
            count
        };
        // At the cap: a series already counted this period (its marker exists) goes on.
        let marker = store.get(
            &schema.index_table,
            &index::period_series_key(series, period),
            &ReadOptions {
                keys_only: true,
                ..ReadOptions::family(PERIOD_FAMILY)
            },
        )?;
        if marker.is_some() {
            return Ok(None);
        }
        let mut state = self.state.lock();
        if state.refused.len() >= REFUSED_MAX {
            state.refused.clear();
        }
        state.refused.insert(tsuid);
        *state.refusals.entry(metric_name.to_string()).or_default() += 1;
        Ok(Some(count))
    }

    fn count(&self, state: &State, metric: &[u8]) -> u64 {
        state
            .metrics
            .get(metric)
            .map_or(0, |c| c.stored.saturating_add(c.admitted))
    }

    /// Series refused per metric since start, most first.
    pub(crate) fn refusals(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = self
            .state
            .lock()
            .refusals
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        out
    }
}
