//! Reductions computed as values arrive, giving exactly what [`Aggregator::run_double`]
//! gives over the same values in the same order: NaN skipped where it skips them, sums
//! started from 0.0 as OpenTSDB's are (so values all -0.0 sum to 0.0), additions in order.
//!
//! Downsampling folds each bucket's values this way, and cross-series aggregation folds
//! series one after another into a row of accumulators (reading each series once, in
//! order, instead of gathering every time's values across all series).

use super::aggregator::Aggregator;
use crate::num::Sample;

/// A reduction over a running `(accumulator, non-NaN count)` pair.
pub(crate) trait Fold {
    const START: f64;
    fn add(acc: &mut f64, finite: &mut u64, v: f64);
    fn value(acc: f64, finite: u64) -> f64;

    /// [`Fold::add`] of each of `values`, in order.
    #[inline(always)]
    fn add_run<V: Sample>(acc: &mut f64, finite: &mut u64, values: &[V]) {
        for v in values {
            Self::add(acc, finite, v.as_f64());
        }
    }
}

/// [`Sum::add`] of each of `values`: added without a test each, then added again one by
/// one only when the total is NaN. Without a NaN value the additions are the same ones in
/// the same order, and any NaN value makes the total NaN.
#[inline(always)]
fn sum_run<V: Sample>(acc: &mut f64, finite: &mut u64, values: &[V]) {
    let mut total = *acc;
    for v in values {
        total += v.as_f64();
    }
    if total.is_nan() {
        for v in values {
            Sum::add(acc, finite, v.as_f64());
        }
    } else {
        *acc = total;
        *finite += values.len() as u64;
    }
}

pub(crate) struct Sum;
pub(crate) struct SquareSum;
pub(crate) struct Avg;
pub(crate) struct Min;
pub(crate) struct Max;
pub(crate) struct Count;

impl Fold for Sum {
    const START: f64 = 0.0;
    #[inline(always)]
    fn add(acc: &mut f64, finite: &mut u64, v: f64) {
        if !v.is_nan() {
            *acc += v;
            *finite += 1;
        }
    }
    #[inline(always)]
    fn value(acc: f64, finite: u64) -> f64 {
        if finite == 0 { f64::NAN } else { acc }
    }
    #[inline(always)]
    fn add_run<V: Sample>(acc: &mut f64, finite: &mut u64, values: &[V]) {
        sum_run(acc, finite, values);
    }
}

impl Fold for SquareSum {
    const START: f64 = 0.0;
    #[inline(always)]
    fn add(acc: &mut f64, finite: &mut u64, v: f64) {
        if !v.is_nan() {
            *acc += v * v;
            *finite += 1;
        }
    }
    #[inline(always)]
    fn value(acc: f64, finite: u64) -> f64 {
        if finite == 0 { f64::NAN } else { acc }
    }
}

impl Fold for Avg {
    const START: f64 = 0.0;
    #[inline(always)]
    fn add(acc: &mut f64, finite: &mut u64, v: f64) {
        Sum::add(acc, finite, v);
    }
    #[inline(always)]
    fn add_run<V: Sample>(acc: &mut f64, finite: &mut u64, values: &[V]) {
        sum_run(acc, finite, values);
    }
    #[inline(always)]
    fn value(acc: f64, finite: u64) -> f64 {
        if finite == 0 {
            f64::NAN
        } else {
            acc / finite as f64
        }
    }
}

impl Fold for Min {
    /// OpenTSDB's `Min` starts from +Infinity (its first value unless NaN) and answers NaN
    /// when it is still there.
    const START: f64 = f64::INFINITY;
    /// A NaN value leaves the minimum as it was, and of equal values (0.0 and -0.0) the
    /// first stays (`f64::min` may answer either zero, as optimised).
    #[inline(always)]
    fn add(acc: &mut f64, _finite: &mut u64, v: f64) {
        *acc = java_min(*acc, v);
    }
    /// A minimum of +Infinity is NaN there.
    #[inline(always)]
    fn value(acc: f64, _finite: u64) -> f64 {
        if acc == f64::INFINITY { f64::NAN } else { acc }
    }
}

impl Fold for Max {
    const START: f64 = f64::NEG_INFINITY;
    #[inline(always)]
    fn add(acc: &mut f64, _finite: &mut u64, v: f64) {
        *acc = java_max(*acc, v);
    }
    /// A maximum of -Infinity is NaN there.
    #[inline(always)]
    fn value(acc: f64, _finite: u64) -> f64 {
        if acc == f64::NEG_INFINITY {
            f64::NAN
        } else {
            acc
        }
    }
}

/// The least of a running minimum (from +Infinity) and `v` as OpenTSDB's `Min` takes it:
/// a NaN `v` changes nothing, an equal `v` does not replace it (one `minsd`).
#[inline(always)]
pub(crate) fn java_min(acc: f64, v: f64) -> f64 {
    if v < acc { v } else { acc }
}

/// [`java_min`] for the greatest (from -Infinity).
#[inline(always)]
pub(crate) fn java_max(acc: f64, v: f64) -> f64 {
    if v > acc { v } else { acc }
}

impl Fold for Count {
    const START: f64 = 0.0;
    #[inline(always)]
    fn add(_acc: &mut f64, finite: &mut u64, v: f64) {
        *finite += u64::from(!v.is_nan());
    }
    #[inline(always)]
    fn value(_acc: f64, finite: u64) -> f64 {
        finite as f64
    }
}

/// How an aggregator reduces as values arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Running {
    Sum,
    SquareSum,
    Avg,
    Min,
    Max,
    Count,
    First,
    Last,
    /// Every value kept, reduced at the end (percentiles, deviation, median, ...).
    Kept,
}

impl Running {
    pub(crate) fn of(function: Aggregator) -> Running {
        match function {
            Aggregator::Sum | Aggregator::PfSum | Aggregator::ZimSum => Running::Sum,
            Aggregator::SquareSum => Running::SquareSum,
            Aggregator::Avg => Running::Avg,
            Aggregator::Min | Aggregator::MimMin => Running::Min,
            Aggregator::Max | Aggregator::MimMax => Running::Max,
            Aggregator::Count => Running::Count,
            Aggregator::First | Aggregator::None => Running::First,
            Aggregator::Last => Running::Last,
            _ => Running::Kept,
        }
    }
}

/// Runs `$body` with `$F` naming the [`Fold`] of `$running`, or `$other` when it has none.
macro_rules! with_fold {
    ($running:expr, $F:ident => $body:expr, _ => $other:expr) => {
        match $running {
            $crate::query::fold::Running::Sum => {
                type $F = $crate::query::fold::Sum;
                $body
            }
            $crate::query::fold::Running::SquareSum => {
                type $F = $crate::query::fold::SquareSum;
                $body
            }
            $crate::query::fold::Running::Avg => {
                type $F = $crate::query::fold::Avg;
                $body
            }
            $crate::query::fold::Running::Min => {
                type $F = $crate::query::fold::Min;
                $body
            }
            $crate::query::fold::Running::Max => {
                type $F = $crate::query::fold::Max;
                $body
            }
            $crate::query::fold::Running::Count => {
                type $F = $crate::query::fold::Count;
                $body
            }
            _ => $other,
        }
    };
}
pub(crate) use with_fold;

/// One reduction so far, for any aggregator.
#[derive(Debug, Clone)]
pub(crate) struct Accumulator {
    pub(crate) running: Running,
    /// Values seen, NaN included.
    pub(crate) seen: u64,
    /// Non-NaN values seen.
    pub(crate) finite: u64,
    pub(crate) acc: f64,
    kept: Vec<f64>,
}

impl Accumulator {
    pub(crate) fn new(function: Aggregator) -> Accumulator {
        let running = Running::of(function);
        Accumulator {
            running,
            seen: 0,
            finite: 0,
            acc: Accumulator::start(running),
            kept: Vec::new(),
        }
    }

    pub(crate) fn start(running: Running) -> f64 {
        with_fold!(running, F => F::START, _ => f64::NAN)
    }

    pub(crate) fn add(&mut self, v: f64) {
        self.seen += 1;
        let (acc, finite) = (&mut self.acc, &mut self.finite);
        with_fold!(self.running, F => F::add(acc, finite, v), _ => match self.running {
            Running::First if self.seen == 1 => self.acc = v,
            Running::Last => self.acc = v,
            Running::Kept => self.kept.push(v),
            _ => {}
        })
    }

    /// The value so far (`None` when nothing was added), and a fresh start.
    pub(crate) fn take(&mut self, function: Aggregator) -> Option<f64> {
        if self.seen == 0 {
            return None;
        }
        let (acc, finite) = (self.acc, self.finite);
        let v = with_fold!(self.running, F => F::value(acc, finite), _ => match self.running {
            Running::Kept => {
                let v = function.run_double(&self.kept);
                self.kept.clear();
                v
            }
            _ => acc,
        });
        self.seen = 0;
        self.finite = 0;
        self.acc = Accumulator::start(self.running);
        Some(v)
    }
}

/// Doubles for property tests: mostly ordinary, with NaN, signed zeros and infinity.
#[cfg(test)]
pub(crate) fn test_value() -> impl proptest::strategy::Strategy<Value = f64> {
    use proptest::prelude::*;
    prop_oneof![
        8 => -1e6f64..1e6,
        1 => Just(f64::NAN),
        1 => Just(-0.0f64),
        1 => Just(0.0f64),
        1 => Just(f64::INFINITY),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = f64> {
        test_value()
    }

    proptest! {
        /// Every aggregator folded value by value gives run_double's bits.
        #[test]
        fn folds_equal_run_double(
            values in prop::collection::vec(value(), 1..40),
            name in prop::sample::select(vec!["sum", "zimsum", "pfsum", "squareSum", "avg", "min", "mimmin", "max", "mimmax", "count", "first", "last", "dev", "p75", "median", "mult", "diff"]),
        ) {
            let function = Aggregator::parse(name).unwrap();
            let mut a = Accumulator::new(function);
            for v in &values {
                a.add(*v);
            }
            prop_assert_eq!(a.take(function).map(f64::to_bits), Some(function.run_double(&values).to_bits()));
            prop_assert_eq!(a.take(function), None, "a fresh start");
        }

        /// A run of values added at once leaves the sum and its count as adding them one by
        /// one does, whatever NaNs and infinities are among them or in the sum before.
        #[test]
        fn a_run_adds_as_its_values_one_by_one(
            before in prop::collection::vec(value(), 0..4),
            values in prop::collection::vec(
                prop_oneof![9 => value(), 1 => Just(f64::NEG_INFINITY)],
                0..20,
            ),
        ) {
            let (mut acc, mut finite) = (Sum::START, 0u64);
            for v in &before {
                Sum::add(&mut acc, &mut finite, *v);
            }
            let (mut one, mut one_finite) = (acc, finite);
            for v in &values {
                Sum::add(&mut one, &mut one_finite, *v);
            }
            Sum::add_run(&mut acc, &mut finite, &values);
            prop_assert_eq!(acc.to_bits(), one.to_bits());
            prop_assert_eq!(finite, one_finite);
        }
    }
}
