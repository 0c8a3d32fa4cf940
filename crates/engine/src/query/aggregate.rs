//! Cross-series aggregation with OpenTSDB's interpolation: one output per distinct time of
//! any series; at each time every series that has started and not ended contributes its
//! point there, or a value filled in by the aggregator's interpolation mode.

use super::aggregator::{Aggregator, Interpolation};
use super::fold::{Fold, Running, with_fold};
use crate::num::Num;
use crate::{Error, Result};

/// Where a series stands at time `x`.
enum Slot {
    /// Not started, or already ended: no contribution.
    Out,
    /// A point at `x`, and whether the following point (if any) is an integer.
    At(Num, bool),
    /// Between two points.
    Between((i64, Num), (i64, Num)),
}

/// Where `points` stands at `x`; `cursor` is the index of the first point after the
/// previous `x` asked (times asked only grow), so each series is walked once overall.
fn slot(points: &[(i64, Num)], x: i64, cursor: &mut usize) -> Slot {
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return Slot::Out;
    };
    if x < first.0 || x > last.0 {
        return Slot::Out;
    }
    while *cursor < points.len() && points[*cursor].0 <= x {
        *cursor += 1;
    }
    let i = *cursor - 1; // last point at or before x
    if points[i].0 == x {
        let next_int = points
            .get(i + 1)
            .is_none_or(|(_, v)| matches!(v, Num::Int(_)));
        Slot::At(points[i].1, next_int)
    } else {
        Slot::Between(points[i], points[i + 1])
    }
}

fn is_int(n: Num) -> bool {
    matches!(n, Num::Int(_))
}

/// A filled-in value on the integer path.
fn fill_long(mode: Interpolation, (x0, y0): (i64, i64), (x1, y1): (i64, i64), x: i64) -> i64 {
    match mode {
        Interpolation::Zim => 0,
        Interpolation::Max => i64::MAX,
        Interpolation::Min => i64::MIN,
        Interpolation::Prev => y0,
        Interpolation::Lerp => {
            y0.wrapping_add((x - x0).wrapping_mul(y1.wrapping_sub(y0)) / (x1 - x0))
        }
    }
}

/// A filled-in value on the floating-point path.
fn fill_double(mode: Interpolation, (x0, y0): (i64, f64), (x1, y1): (i64, f64), x: i64) -> f64 {
    match mode {
        Interpolation::Zim => 0.0,
        Interpolation::Max => f64::MAX,
        Interpolation::Min => -f64::MAX,
        Interpolation::Prev => y0,
        Interpolation::Lerp => y0 + (x - x0) as f64 * (y1 - y0) / (x1 - x0) as f64,
    }
}

/// Aggregates time-ordered series (ms) across each other. The integer path is taken at a
/// time when every series' current and next points (a not-yet-started series' first point
/// included) are integers; otherwise everything, interpolation too, is computed in doubles.
pub fn aggregate(series: &[Vec<(i64, Num)>], agg: Aggregator) -> Result<Vec<(i64, Num)>> {
    if let [only] = series {
        return alone(only, agg);
    }
    // Downsampled series usually share their times and hold doubles: then every series has
    // a point at every time and nothing is interpolated.
    let same_times = series.split_first().is_some_and(|(first, rest)| {
        first.iter().all(|p| matches!(p.1, Num::Float(_)))
            && rest.iter().all(|s| {
                s.len() == first.len()
                    && s.iter()
                        .zip(first)
                        .all(|(a, b)| a.0 == b.0 && matches!(a.1, Num::Float(_)))
            })
    });
    if same_times {
        let indexes: Vec<usize> = (0..series[0].len()).collect();
        let slices: Vec<&[(i64, Num)]> = series.iter().map(Vec::as_slice).collect();
        return in_two_halves(&indexes, series.len(), |part| {
            let folded = with_fold!(Running::of(agg),
            F => fold_columns::<F, _>(&slices, part, |p| p.0, |p| p.1.as_f64()),
            _ => column_wise(part, series.len(), agg, |s, k| {
                (series[0][k].0, series[s][k].1.as_f64())
            }));
            folded.map(|out| out.into_iter().map(|(t, v)| (t, Num::Float(v))).collect())
        });
    }
    let times = union_of_times(series.iter().map(|s| s.iter().map(|p| p.0)));
    in_two_halves(&times, series.len(), |part| aggregate_at(series, agg, part))
}

/// [`aggregate`] for series of doubles (downsampled ones), without making them values.
pub fn aggregate_floats(series: &[Vec<(i64, f64)>], agg: Aggregator) -> Result<Vec<(i64, f64)>> {
    let slices: Vec<&[(i64, f64)]> = series.iter().map(Vec::as_slice).collect();
    if let Some(out) = aggregate_if_shared(&slices, agg)? {
        return Ok(out);
    }
    let times = union_of_times(series.iter().map(|s| s.iter().map(|p| p.0)));
    in_two_halves(&times, series.len(), |part| {
        aggregate_floats_at(series, agg, part)
    })
}

/// [`aggregate_shared_times`] where the series have their points at the same times, None
/// where they do not (a fold checks the times as it reads the values).
fn aggregate_if_shared(
    series: &[&[(i64, f64)]],
    agg: Aggregator,
) -> Result<Option<Vec<(i64, f64)>>> {
    let Some((first, rest)) = series.split_first() else {
        return Ok(None);
    };
    if rest.iter().any(|s| s.len() != first.len()) {
        return Ok(None);
    }
    if !with_fold!(Running::of(agg), _F => true, _ => false) {
        return share_times(series)
            .then(|| aggregate_shared_times(series, agg))
            .transpose();
    }
    let differ = std::sync::atomic::AtomicBool::new(false);
    let indexes: Vec<usize> = (0..first.len()).collect();
    let out = in_two_halves(&indexes, series.len(), |part| {
        let folded = with_fold!(Running::of(agg),
            F => fold_columns_checked::<F, _, true>(series, part, |p| p.0, |p| p.1),
            _ => Ok(None));
        Ok(folded?.unwrap_or_else(|| {
            differ.store(true, std::sync::atomic::Ordering::Relaxed);
            Vec::new()
        }))
    });
    // Times that differ anywhere outrank what either half found.
    if differ.load(std::sync::atomic::Ordering::Relaxed) {
        return Ok(None);
    }
    out.map(Some)
}

/// [`aggregate_floats`] of series each read in pieces, a piece after another (the buckets
/// of a read split by hours, see `Downsampler::finish_pieces`). Where every series has as
/// many pieces, and each piece the same times in every series, the pieces are aggregated
/// where they lie, one after another: each time's answer is its own series' values at
/// that time either way. Else each series is put together first.
pub fn aggregate_float_pieces(
    series: Vec<Vec<Vec<(i64, f64)>>>,
    agg: Aggregator,
) -> Result<Vec<(i64, f64)>> {
    let pieces = series.first().map_or(0, Vec::len);
    let aligned = pieces > 1
        && series.iter().all(|s| {
            s.len() == pieces && s.iter().zip(&series[0]).all(|(a, b)| a.len() == b.len())
        });
    if aligned {
        let at =
            |p: usize| -> Vec<&[(i64, f64)]> { series.iter().map(|s| s[p].as_slice()).collect() };
        // Every piece's outcome first: times that differ in a later piece outrank an error
        // in an earlier one (the series put together answer then).
        let mut done = Vec::with_capacity(pieces);
        for p in 0..pieces {
            match aggregate_if_shared(&at(p), agg) {
                Ok(None) => break,
                outcome => done.push(outcome),
            }
        }
        if done.len() == pieces {
            let mut out = Vec::with_capacity(series[0].iter().map(Vec::len).sum());
            for piece in done {
                out.extend(piece?.unwrap_or_default());
            }
            return Ok(out);
        }
    }
    let joined: Vec<Vec<(i64, f64)>> = series
        .into_iter()
        .map(|mut s| match s.len() {
            1 => s.pop().unwrap_or_default(),
            _ => s.concat(),
        })
        .collect();
    aggregate_floats(&joined, agg)
}

/// Whether every series has its points at the same times as the first.
fn share_times(series: &[&[(i64, f64)]]) -> bool {
    series.split_first().is_some_and(|(first, rest)| {
        if rest.iter().any(|s| s.len() != first.len()) {
            return false;
        }
        // Every series' times against the first's, a half of them on each thread when
        // there are many (a week of one-minute buckets of 1,000 series: 161 MB read).
        let indexes: Vec<usize> = (0..first.len()).collect();
        let halves = in_two_halves(&indexes, series.len(), |part| {
            let (lo, len) = (part.first().copied().unwrap_or(0), part.len());
            let first = &first[lo..lo + len];
            Ok(vec![rest.iter().all(|s| {
                s[lo..lo + len].iter().zip(first).all(|(a, b)| a.0 == b.0)
            })])
        });
        halves.is_ok_and(|same| same.iter().all(|s| *s))
    })
}

/// Aggregates series of doubles that all have points at the same times.
fn aggregate_shared_times(series: &[&[(i64, f64)]], agg: Aggregator) -> Result<Vec<(i64, f64)>> {
    let indexes: Vec<usize> = (0..series.first().map_or(0, |s| s.len())).collect();
    in_two_halves(&indexes, series.len(), |part| {
        with_fold!(Running::of(agg),
            F => fold_columns::<F, _>(series, part, |p| p.0, |p| p.1),
            _ => column_wise(part, series.len(), agg, |s, k| series[s][k]))
    })
}

/// [`aggregate`] taking the series: one series under an aggregator that gives a lone value
/// back is answered in place, without a copy.
pub fn aggregate_owned(
    mut series: Vec<Vec<(i64, Num)>>,
    agg: Aggregator,
) -> Result<Vec<(i64, Num)>> {
    if series.len() != 1 || !gives_lone_values_back(agg) {
        return aggregate(&series, agg);
    }
    let mut points = series.pop().unwrap_or_default();
    // Integers alone (a counter's points) come back as they are.
    if points.iter().all(|p| is_int(p.1)) {
        return Ok(points);
    }
    let sum = adds_from_zero(agg);
    // What `alone` gives: an integer before a float becomes a double, infinity fails, a
    // sum's -0.0 is 0.0.
    for i in 0..points.len() {
        let next_int = points.get(i + 1).is_none_or(|p| is_int(p.1));
        let (x, v) = &mut points[i];
        match *v {
            Num::Int(n) if !next_int => *v = Num::Float(n as f64),
            Num::Float(f) => {
                let g = if sum { 0.0 + f } else { lone_extreme(agg, f) };
                if g.is_infinite() {
                    return Err(Error::invalid(format!("Got Infinity: {g} at {x}")));
                }
                *v = Num::Float(g);
            }
            Num::Int(_) => {}
        }
    }
    Ok(points)
}

/// Sums and the average (adding from 0.0, as OpenTSDB's; the average then divides by one):
/// a lone double comes back plus 0.0 (-0.0 as 0.0).
fn adds_from_zero(agg: Aggregator) -> bool {
    matches!(
        agg,
        Aggregator::Sum | Aggregator::PfSum | Aggregator::ZimSum | Aggregator::Avg
    )
}

/// A lone double under `min` or `max` as OpenTSDB's give it back: a least value of
/// +Infinity (a greatest of -Infinity) is NaN there; anything else as it is.
fn lone_extreme(agg: Aggregator, v: f64) -> f64 {
    match agg {
        Aggregator::Min | Aggregator::MimMin if v == f64::INFINITY => f64::NAN,
        Aggregator::Max | Aggregator::MimMax if v == f64::NEG_INFINITY => f64::NAN,
        _ => v,
    }
}

/// Aggregators giving a lone value back as it is (a sum's or average's double plus 0.0, see
/// [`adds_from_zero`]; a `min` or `max` of an infinity, see [`lone_extreme`]).
fn gives_lone_values_back(agg: Aggregator) -> bool {
    matches!(
        agg,
        Aggregator::Sum
            | Aggregator::PfSum
            | Aggregator::ZimSum
            | Aggregator::Avg
            | Aggregator::Min
            | Aggregator::MimMin
            | Aggregator::Max
            | Aggregator::MimMax
            | Aggregator::First
            | Aggregator::None
            | Aggregator::Last
    )
}

/// [`aggregate`] of one series: the aggregator over each point alone (integer math where
/// the point and the next are integers, as at any time of several series).
fn alone(points: &[(i64, Num)], agg: Aggregator) -> Result<Vec<(i64, Num)>> {
    let identity = gives_lone_values_back(agg);
    let zero = if adds_from_zero(agg) { 0.0 } else { -0.0 };
    let mut out = Vec::with_capacity(points.len());
    for (i, &(x, v)) in points.iter().enumerate() {
        let next_int = points.get(i + 1).is_none_or(|p| is_int(p.1));
        out.push(match v {
            Num::Int(n) if next_int && identity => (x, Num::Int(n)),
            Num::Int(n) if next_int => (x, Num::Int(agg.run_long(&[n]))),
            _ => {
                let v = if identity {
                    // Adding -0.0 changes nothing, adding 0.0 makes -0.0 0.0.
                    lone_extreme(agg, zero + v.as_f64())
                } else {
                    agg.run_double(&[v.as_f64()])
                };
                if v.is_infinite() {
                    return Err(Error::invalid(format!("Got Infinity: {v} at {x}")));
                }
                (x, Num::Float(v))
            }
        });
    }
    Ok(out)
}

/// Aggregates series that all have a point at each of the given indexes: `point(series,
/// index)` gives its time and value.
fn column_wise(
    indexes: &[usize],
    count: usize,
    agg: Aggregator,
    point: impl Fn(usize, usize) -> (i64, f64),
) -> Result<Vec<(i64, f64)>> {
    let mut out = Vec::with_capacity(indexes.len());
    let mut values = Vec::with_capacity(count);
    for &k in indexes {
        values.clear();
        let mut x = 0;
        for s in 0..count {
            let (t, v) = point(s, k);
            x = t;
            values.push(v);
        }
        let v = agg.run_double(&values);
        if v.is_infinite() {
            return Err(Error::invalid(format!("Got Infinity: {v} at {x}")));
        }
        out.push((x, v));
    }
    Ok(out)
}

/// [`column_wise`] for a function folded as values arrive: each series is read once, in
/// order, into a row of accumulators (the same additions in the same order as gathering
/// each time's values). `indexes` is a contiguous run of point indexes.
fn fold_columns<F: Fold, T>(
    series: &[&[T]],
    indexes: &[usize],
    time: impl Fn(&T) -> i64,
    value: impl Fn(&T) -> f64,
) -> Result<Vec<(i64, f64)>> {
    fold_columns_checked::<F, T, false>(series, indexes, time, value).map(Option::unwrap_or_default)
}

/// [`fold_columns`], each point's time checked against the first series' at the same
/// index as it is read when `CHECK`: None when one differs (the series do not share their
/// times), without a pass of its own over them.
fn fold_columns_checked<F: Fold, T, const CHECK: bool>(
    series: &[&[T]],
    indexes: &[usize],
    time: impl Fn(&T) -> i64,
    value: impl Fn(&T) -> f64,
) -> Result<Option<Vec<(i64, f64)>>> {
    let (Some(&from), Some(&last)) = (indexes.first(), indexes.last()) else {
        return Ok(Some(Vec::new()));
    };
    let range = from..last + 1;
    let mut acc = vec![F::START; range.len()];
    let mut finite = vec![0u64; range.len()];
    let times = series
        .first()
        .and_then(|s| s.get(range.clone()))
        .unwrap_or_default();
    for s in series {
        let points = s.get(range.clone()).unwrap_or_default();
        if CHECK {
            if points.len() != times.len() {
                return Ok(None);
            }
            let mut same = true;
            for (((a, n), p), first) in acc.iter_mut().zip(finite.iter_mut()).zip(points).zip(times)
            {
                same &= time(p) == time(first);
                F::add(a, n, value(p));
            }
            if !same {
                return Ok(None);
            }
        } else {
            for ((a, n), p) in acc.iter_mut().zip(finite.iter_mut()).zip(points) {
                F::add(a, n, value(p));
            }
        }
    }
    let mut out = Vec::with_capacity(times.len());
    for ((p, a), n) in times.iter().zip(acc).zip(finite) {
        let x = time(p);
        let v = F::value(a, n);
        if v.is_infinite() {
            return Err(Error::invalid(format!("Got Infinity: {v} at {x}")));
        }
        out.push((x, v));
    }
    Ok(Some(out))
}

/// The sorted, distinct times of several time-ordered series, merged one series at a time
/// (linear in the points when series share their times, as downsampled ones do).
fn union_of_times<I: Iterator<Item = i64>>(series: impl Iterator<Item = I>) -> Vec<i64> {
    let mut merged: Vec<i64> = Vec::new();
    let mut next: Vec<i64> = Vec::new();
    for times in series {
        next.clear();
        let mut have = merged.iter().copied().peekable();
        for t in times {
            while let Some(m) = have.next_if(|m| *m < t) {
                next.push(m);
            }
            have.next_if_eq(&t);
            if next.last() != Some(&t) {
                next.push(t);
            }
        }
        next.extend(have);
        std::mem::swap(&mut merged, &mut next);
    }
    merged
}

/// Runs `work` over the output times (or their indexes), split in two halves on two threads
/// when there is enough to do; the halves' answers are joined in order.
fn in_two_halves<I: Sync, T: Send>(
    times: &[I],
    series: usize,
    work: impl Fn(&[I]) -> Result<Vec<T>> + Sync,
) -> Result<Vec<T>> {
    const WORTH_A_THREAD: usize = 1 << 18;
    let parallel = super::two_cores();
    if !parallel || times.len().saturating_mul(series) < WORTH_A_THREAD || times.len() < 2 {
        return work(times);
    }
    let (first, second) = times.split_at(times.len() / 2);
    let (a, b) = super::threads::both(|| work(first), || work(second));
    let mut out = a?;
    out.extend(b.map_err(|_| Error::Internal("an aggregation thread failed".into()))??);
    Ok(out)
}

/// Cursors placed for a walk starting at `x`: each series' first point at or after it.
fn cursors_at<P>(
    series: impl Iterator<Item = P>,
    x: Option<i64>,
    time_index: impl Fn(&P, i64) -> usize,
) -> Vec<usize> {
    series.map(|s| x.map_or(0, |x| time_index(&s, x))).collect()
}

/// [`aggregate`] at the given (sorted) times.
fn aggregate_at(
    series: &[Vec<(i64, Num)>],
    agg: Aggregator,
    times: &[i64],
) -> Result<Vec<(i64, Num)>> {
    let mode = agg.interpolation();
    let mut out = Vec::with_capacity(times.len());
    let (mut ints, mut floats) = (Vec::new(), Vec::new());
    let mut slots = Vec::with_capacity(series.len());
    let mut cursors = cursors_at(series.iter(), times.first().copied(), |s, x| {
        s.partition_point(|p| p.0 < x)
    });
    for &x in times {
        slots.clear();
        let mut integer = true;
        for (s, cursor) in series.iter().zip(cursors.iter_mut()) {
            let sl = slot(s, x, cursor);
            integer &= match &sl {
                Slot::Out => s
                    .first()
                    .filter(|(t, _)| *t > x)
                    .is_none_or(|(_, v)| is_int(*v)),
                Slot::At(v, next_int) => is_int(*v) && *next_int,
                Slot::Between(a, b) => is_int(a.1) && is_int(b.1),
            };
            slots.push(sl);
        }
        ints.clear();
        floats.clear();
        for sl in &slots {
            match *sl {
                Slot::Out => {}
                Slot::At(v, _) => {
                    if let Num::Int(i) = v {
                        ints.push(i);
                    }
                    floats.push(v.as_f64());
                }
                Slot::Between((x0, y0), (x1, y1)) => {
                    if integer {
                        if let (Num::Int(a), Num::Int(b)) = (y0, y1) {
                            ints.push(fill_long(mode, (x0, a), (x1, b), x));
                        }
                    } else {
                        floats.push(fill_double(mode, (x0, y0.as_f64()), (x1, y1.as_f64()), x));
                    }
                }
            }
        }
        let value = if integer {
            if ints.is_empty() {
                continue;
            }
            Num::Int(agg.run_long(&ints))
        } else {
            if floats.is_empty() {
                continue;
            }
            let v = agg.run_double(&floats);
            if v.is_infinite() {
                return Err(Error::invalid(format!("Got Infinity: {v} at {x}")));
            }
            Num::Float(v)
        };
        out.push((x, value));
    }
    Ok(out)
}

/// [`aggregate_at`] over series of doubles: every series' values and filled-in values in
/// the same order, through the same `run_double` (or, for a function folded as values
/// arrive, the same additions in the same order), so the same bits (a double is never on
/// the integer path: a time at which every series is out gives no answer, as there).
/// Without making each point a value first (the sum of sparse series spent most of its
/// time there).
fn aggregate_floats_at(
    series: &[Vec<(i64, f64)>],
    agg: Aggregator,
    times: &[i64],
) -> Result<Vec<(i64, f64)>> {
    with_fold!(Running::of(agg),
        F => floats_at(series, agg, times, Folded::<F>::new()),
        _ => floats_at(series, agg, times, Gathered(Vec::with_capacity(series.len()))))
}

/// The values a time's series give, reduced to the time's answer.
trait Reduce {
    fn clear(&mut self);
    fn add(&mut self, v: f64);
    /// No series gave a value.
    fn is_empty(&self) -> bool;
    fn value(&self, agg: Aggregator) -> f64;
}

/// Every value kept, for `run_double`.
struct Gathered(Vec<f64>);

impl Reduce for Gathered {
    fn clear(&mut self) {
        self.0.clear();
    }
    fn add(&mut self, v: f64) {
        self.0.push(v);
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    fn value(&self, agg: Aggregator) -> f64 {
        agg.run_double(&self.0)
    }
}

/// A fold's accumulator and counts.
struct Folded<F> {
    acc: f64,
    finite: u64,
    given: usize,
    fold: std::marker::PhantomData<F>,
}

impl<F: Fold> Folded<F> {
    fn new() -> Self {
        Folded {
            acc: F::START,
            finite: 0,
            given: 0,
            fold: std::marker::PhantomData,
        }
    }
}

impl<F: Fold> Reduce for Folded<F> {
    fn clear(&mut self) {
        (self.acc, self.finite, self.given) = (F::START, 0, 0);
    }
    #[inline(always)]
    fn add(&mut self, v: f64) {
        F::add(&mut self.acc, &mut self.finite, v);
        self.given += 1;
    }
    fn is_empty(&self) -> bool {
        self.given == 0
    }
    fn value(&self, _agg: Aggregator) -> f64 {
        F::value(self.acc, self.finite)
    }
}

/// [`aggregate_floats_at`] with the values of each time reduced by `reduce`.
fn floats_at(
    series: &[Vec<(i64, f64)>],
    agg: Aggregator,
    times: &[i64],
    mut reduce: impl Reduce,
) -> Result<Vec<(i64, f64)>> {
    let mode = agg.interpolation();
    let mut out = Vec::with_capacity(times.len());
    let mut cursors = cursors_at(series.iter(), times.first().copied(), |s, x| {
        s.partition_point(|p| p.0 < x)
    });
    for &x in times {
        reduce.clear();
        for (s, cursor) in series.iter().zip(cursors.iter_mut()) {
            // As `slot`: out before the first point and after the last.
            let (Some(first), Some(last)) = (s.first(), s.last()) else {
                continue;
            };
            if x < first.0 || x > last.0 {
                continue;
            }
            while *cursor < s.len() && s[*cursor].0 <= x {
                *cursor += 1;
            }
            // The last point at or before x: the first point is, so the cursor passed it.
            let Some(&(x0, y0)) = cursor.checked_sub(1).and_then(|i| s.get(i)) else {
                continue;
            };
            if x0 == x {
                reduce.add(y0);
            } else if let Some(&next) = s.get(*cursor) {
                reduce.add(fill_double(mode, (x0, y0), next, x));
            }
        }
        if reduce.is_empty() {
            continue;
        }
        let v = reduce.value(agg);
        if v.is_infinite() {
            return Err(Error::invalid(format!("Got Infinity: {v} at {x}")));
        }
        out.push((x, v));
    }
    Ok(out)
}

/// Aggregates rate series. Each entry is (the series' hidden first rate, its rates). Every
/// series takes part from the start until its last rate; between its rates it contributes
/// its latest rate (no interpolation), before its first one the hidden first rate.
pub fn aggregate_rates(
    series: &[(f64, Vec<(i64, f64)>)],
    agg: Aggregator,
) -> Result<Vec<(i64, f64)>> {
    // Series sharing their times: each contributes its own rate at every time.
    let slices: Vec<&[(i64, f64)]> = series.iter().map(|s| s.1.as_slice()).collect();
    if let Some(out) = aggregate_if_shared(&slices, agg)? {
        return Ok(out);
    }
    let times = union_of_times(series.iter().map(|(_, r)| r.iter().map(|p| p.0)));
    in_two_halves(&times, series.len(), |part| {
        aggregate_rates_at(series, agg, part)
    })
}

/// [`aggregate_rates`] at the given (sorted) times.
fn aggregate_rates_at(
    series: &[(f64, Vec<(i64, f64)>)],
    agg: Aggregator,
    times: &[i64],
) -> Result<Vec<(i64, f64)>> {
    let mut out = Vec::with_capacity(times.len());
    let mut values = Vec::new();
    let mut cursors = cursors_at(series.iter(), times.first().copied(), |(_, r), x| {
        r.partition_point(|p| p.0 < x)
    });
    for &x in times {
        values.clear();
        for ((hidden, rates), i) in series.iter().zip(cursors.iter_mut()) {
            let Some(last) = rates.last() else { continue };
            if x > last.0 {
                continue;
            }
            while *i < rates.len() && rates[*i].0 <= x {
                *i += 1;
            }
            values.push(if *i == 0 { *hidden } else { rates[*i - 1].1 });
        }
        if values.is_empty() {
            continue;
        }
        let v = agg.run_double(&values);
        if v.is_infinite() {
            return Err(Error::invalid(format!("Got Infinity: {v} at {x}")));
        }
        out.push((x, v));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A lone series gives what running the aggregator over each point gives, for the
        /// aggregators that skip running it.
        #[test]
        fn a_lone_series_is_each_point_aggregated(
            values in prop::collection::vec(prop_oneof![
                (-1000i64..1000).prop_map(Num::Int),
                any::<i64>().prop_map(Num::Int),
                crate::query::fold::test_value().prop_map(Num::Float),
            ], 1..20),
            name in prop::sample::select(vec!["sum", "pfsum", "zimsum", "min", "mimmin", "max", "mimmax", "first", "none", "last", "avg", "dev", "count"]),
        ) {
            let agg = Aggregator::parse(name).unwrap();
            let points: Vec<(i64, Num)> = values.iter().enumerate().map(|(i, v)| (i as i64, *v)).collect();
            let want: Result<Vec<(i64, Num)>> = points
                .iter()
                .enumerate()
                .map(|(i, &(x, v))| {
                    let next_int = points.get(i + 1).is_none_or(|p| is_int(p.1));
                    match v {
                        Num::Int(n) if next_int => Ok((x, Num::Int(agg.run_long(&[n])))),
                        _ => {
                            let v = agg.run_double(&[v.as_f64()]);
                            if v.is_infinite() {
                                Err(Error::invalid(format!("Got Infinity: {v} at {x}")))
                            } else {
                                Ok((x, Num::Float(v)))
                            }
                        }
                    }
                })
                .collect();
            // NaN != NaN: compare the text.
            prop_assert_eq!(format!("{:?}", alone(&points, agg)), format!("{want:?}"));
            prop_assert_eq!(format!("{:?}", aggregate_owned(vec![points.clone()], agg)), format!("{want:?}"));
        }
    }

    fn ints(p: &[(i64, i64)]) -> Vec<(i64, Num)> {
        p.iter().map(|(t, v)| (*t * 1000, Num::Int(*v))).collect()
    }

    fn agg(name: &str) -> Aggregator {
        Aggregator::parse(name).unwrap()
    }

    #[test]
    fn union_of_times_merges_and_dedups() {
        let series = [vec![1, 3, 5], vec![], vec![2, 3, 9], vec![0, 9, 10]];
        assert_eq!(
            union_of_times(series.iter().map(|s| s.iter().copied())),
            vec![0, 1, 2, 3, 5, 9, 10]
        );
    }

    #[test]
    fn two_halves_answer_as_one_pass() {
        // Enough points to be split: 40 series of 2,000 points, staggered starts and ends,
        // integers and floats, different steps.
        let series: Vec<Vec<(i64, Num)>> = (0..40i64)
            .map(|s| {
                (0..2_000i64)
                    .map(|i| {
                        let t = s * 10_000 + i * (10_000 + s % 3 * 3_000);
                        let v = if s % 5 == 0 {
                            Num::Float(i as f64 / 3.0)
                        } else {
                            Num::Int(i * s)
                        };
                        (t, v)
                    })
                    .collect()
            })
            .collect();
        let times = union_of_times(series.iter().map(|s| s.iter().map(|p| p.0)));
        assert!(times.len() * series.len() > 1 << 18);
        for name in ["sum", "avg", "zimsum", "mimmax", "p90", "dev"] {
            let a = agg(name);
            let one = aggregate_at(&series, a, &times).unwrap();
            assert_eq!(
                format!("{:?}", aggregate(&series, a).unwrap()),
                format!("{one:?}"),
                "{name}"
            );
        }
        let rates: Vec<(f64, Vec<(i64, f64)>)> = series
            .iter()
            .map(|s| (1.5, s.iter().map(|(t, v)| (*t, v.as_f64())).collect()))
            .collect();
        let one = aggregate_rates_at(&rates, agg("sum"), &times).unwrap();
        assert_eq!(aggregate_rates(&rates, agg("sum")).unwrap(), one);
    }

    #[test]
    fn series_sharing_times_take_the_column_path_with_the_same_answers() {
        for n in [3usize, 2_000] {
            let series: Vec<Vec<(i64, Num)>> = (0..40i64)
                .map(|s| {
                    (0..n as i64)
                        .map(|i| (i * 60_000, Num::Float((i * s) as f64 / 7.0)))
                        .collect()
                })
                .collect();
            let times = union_of_times(series.iter().map(|s| s.iter().map(|p| p.0)));
            for name in ["sum", "avg", "max", "p99", "count"] {
                let a = agg(name);
                let general = format!("{:?}", aggregate_at(&series, a, &times).unwrap());
                assert_eq!(
                    format!("{:?}", aggregate(&series, a).unwrap()),
                    general,
                    "{name}"
                );
            }
            let rates: Vec<(f64, Vec<(i64, f64)>)> = series
                .iter()
                .map(|s| (9.0, s.iter().map(|(t, v)| (*t, v.as_f64())).collect()))
                .collect();
            let general = aggregate_rates_at(&rates, agg("sum"), &times).unwrap();
            assert_eq!(aggregate_rates(&rates, agg("sum")).unwrap(), general);
        }
    }

    #[test]
    fn doubles_aggregate_as_values_do() {
        for staggered in [false, true] {
            let series: Vec<Vec<(i64, f64)>> = (0..30i64)
                .map(|s| {
                    let shift = if staggered { s * 7_000 } else { 0 };
                    (0..500i64)
                        .map(|i| {
                            (
                                i * 60_000 + shift,
                                if i % 11 == 0 {
                                    f64::NAN
                                } else {
                                    (i * s) as f64 / 3.0
                                },
                            )
                        })
                        .collect()
                })
                .collect();
            let values: Vec<Vec<(i64, Num)>> = series
                .iter()
                .map(|s| s.iter().map(|(t, v)| (*t, Num::Float(*v))).collect())
                .collect();
            for name in [
                "sum", "avg", "min", "max", "count", "p90", "dev", "zimsum", "mimmax",
            ] {
                let a = agg(name);
                let want: Vec<(i64, u64)> = aggregate(&values, a)
                    .unwrap()
                    .into_iter()
                    .map(|(t, v)| (t, v.as_f64().to_bits()))
                    .collect();
                let got: Vec<(i64, u64)> = aggregate_floats(&series, a)
                    .unwrap()
                    .into_iter()
                    .map(|(t, v)| (t, v.to_bits()))
                    .collect();
                assert_eq!(got, want, "{name}, staggered {staggered}");
            }
        }
    }

    #[test]
    fn one_series_alone_answers_as_the_general_path() {
        let series = vec![vec![
            (1_000, Num::Int(5)),
            (2_000, Num::Int(-7)),
            (3_000, Num::Float(2.5)),
            (4_000, Num::Int(9)),
            (5_000, Num::Float(f64::NAN)),
            (6_000, Num::Int(i64::MAX)),
        ]];
        let times: Vec<i64> = series[0].iter().map(|p| p.0).collect();
        for name in [
            "sum",
            "avg",
            "count",
            "squareSum",
            "dev",
            "p99",
            "min",
            "mimmax",
            "mult",
            "diff",
            "zimsum",
            "first",
        ] {
            let a = agg(name);
            assert_eq!(
                format!("{:?}", aggregate(&series, a).unwrap()),
                format!("{:?}", aggregate_at(&series, a, &times).unwrap()),
                "{name}"
            );
        }
        let big = vec![vec![
            (1_000, Num::Float(f64::MAX)),
            (2_000, Num::Float(1.0)),
        ]];
        assert_eq!(
            aggregate(&big, agg("squareSum")).unwrap_err().to_string(),
            aggregate_at(&big, agg("squareSum"), &[1_000, 2_000])
                .unwrap_err()
                .to_string()
        );
    }

    #[test]
    fn opentsdb_worked_example() {
        // A = (100s,10),(120s,20); B = (110s,100).
        let series = vec![ints(&[(100, 10), (120, 20)]), ints(&[(110, 100)])];
        assert_eq!(
            aggregate(&series, agg("sum")).unwrap(),
            vec![
                (100_000, Num::Int(10)),
                (110_000, Num::Int(115)),
                (120_000, Num::Int(20))
            ]
        );
        assert_eq!(
            aggregate(&series, agg("zimsum")).unwrap()[1],
            (110_000, Num::Int(100))
        );
        assert_eq!(
            aggregate(&series, agg("count")).unwrap()[1],
            (110_000, Num::Int(2))
        );
        assert_eq!(
            aggregate(&series, agg("first")).unwrap()[1],
            (110_000, Num::Int(0)),
            "first picks series order"
        );
        assert_eq!(
            aggregate(&series, agg("mimmin")).unwrap()[1],
            (110_000, Num::Int(100))
        );
        assert_eq!(
            aggregate(&series, agg("pfsum")).unwrap()[1],
            (110_000, Num::Int(110))
        );
    }

    #[test]
    fn integer_lerp_truncates_and_one_float_makes_doubles() {
        let a = ints(&[(100, 0), (130, 10)]);
        let b = ints(&[(110, 5)]);
        assert_eq!(
            aggregate(&[a.clone(), b], agg("sum")).unwrap()[1],
            (110_000, Num::Int(3 + 5))
        );
        let f = vec![(110_000, Num::Float(0.5))];
        let out = aggregate(&[a, f], agg("sum")).unwrap();
        assert!(
            matches!(out[1].1, Num::Float(v) if (v - (10.0 / 3.0 + 0.5)).abs() < 1e-12),
            "{out:?}"
        );
        assert!(
            matches!(out[0].1, Num::Float(_)),
            "a not-yet-started float series makes doubles"
        );
    }

    #[test]
    fn opentsdb_standard_fixture_sums() {
        // Series 1..300 every 30 s from 1356998430 and 300..1: each sum is 301.
        let up: Vec<(i64, Num)> = (0..300)
            .map(|i| ((1356998430 + i * 30) * 1000, Num::Int(i + 1)))
            .collect();
        let down: Vec<(i64, Num)> = (0..300)
            .map(|i| ((1356998430 + i * 30) * 1000, Num::Int(300 - i)))
            .collect();
        let out = aggregate(&[up, down.clone()], agg("sum")).unwrap();
        assert_eq!(out.len(), 300);
        assert!(out.iter().all(|(_, v)| *v == Num::Int(301)));
        // Offset by 15 s: interpolated sums in between.
        let shifted: Vec<(i64, Num)> = down.iter().map(|(t, v)| (t + 15_000, *v)).collect();
        let up: Vec<(i64, Num)> = (0..300)
            .map(|i| ((1356998430 + i * 30) * 1000, Num::Int(i + 1)))
            .collect();
        let out = aggregate(&[up, shifted], agg("sum")).unwrap();
        assert_eq!(out.len(), 600);
        assert_eq!(
            out[0],
            (1356998430000, Num::Int(1)),
            "only the first series has started"
        );
        assert_eq!(
            out[1],
            (1356998445000, Num::Int(1 + 300)),
            "lerp of 1..2 at the half truncates to 1"
        );
    }

    #[test]
    fn rates_use_the_latest_rate_and_the_hidden_first_one() {
        let a = (0.1, vec![(20_000, 1.0), (30_000, 2.0)]);
        let b = (4.0, vec![(35_000, 3.0)]);
        let out = aggregate_rates(&[a, b], agg("sum")).unwrap();
        assert_eq!(
            out,
            vec![(20_000, 1.0 + 4.0), (30_000, 2.0 + 4.0), (35_000, 3.0)]
        );
    }

    #[test]
    fn infinity_is_an_error() {
        let series = vec![
            vec![(1000, Num::Float(f64::MAX))],
            vec![(1000, Num::Float(f64::MAX))],
        ];
        assert!(
            aggregate(&series, agg("sum"))
                .unwrap_err()
                .to_string()
                .starts_with("Got Infinity")
        );
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn series_strategy() -> impl Strategy<Value = Vec<Vec<(i64, Num)>>> {
        prop::collection::vec(
            prop::collection::btree_map(0i64..200, -1000i64..1000, 1..30),
            1..6,
        )
        .prop_map(|all| {
            all.into_iter()
                .map(|m| {
                    m.into_iter()
                        .map(|(t, v)| (t * 1000, Num::Int(v)))
                        .collect()
                })
                .collect()
        })
    }

    proptest! {
        /// zimsum fills gaps with zero, so at each time it is the sum of the points exactly there.
        #[test]
        fn zimsum_is_the_sum_of_points_at_each_time(series in series_strategy()) {
            let out = aggregate(&series, Aggregator::ZimSum).unwrap();
            let mut naive = std::collections::BTreeMap::<i64, i64>::new();
            for s in &series {
                for (t, v) in s {
                    if let Num::Int(v) = v {
                        *naive.entry(*t).or_default() += v;
                    }
                }
            }
            let got: Vec<(i64, i64)> = out.iter().map(|(t, v)| (*t, match v { Num::Int(i) => *i, Num::Float(f) => *f as i64 })).collect();
            prop_assert_eq!(got, naive.into_iter().collect::<Vec<_>>());
        }

        /// Series in pieces aggregate as the series put together do, bit for bit and in
        /// their errors: the pieces alike in every series (aggregated where they lie), or
        /// not (a series with a piece fewer, one time off).
        #[test]
        fn pieces_aggregate_as_the_series_joined(
            n in 1usize..6,
            len in 0usize..40,
            cuts in prop::collection::vec(0usize..40, 0..3),
            values in prop::collection::vec(prop_oneof![
                8 => (-1e6f64..1e6).boxed(),
                1 => Just(f64::NAN).boxed(),
                1 => Just(f64::MAX).boxed(),
            ], 240),
            skew in prop_oneof![Just(None), (0usize..6, 0usize..40).prop_map(Some)],
            fewer in prop_oneof![3 => Just(false), 1 => Just(true)],
            name in prop::sample::select(vec![
                "sum", "avg", "min", "max", "count", "p90", "dev", "zimsum", "squareSum", "first",
            ]),
        ) {
            let agg = Aggregator::parse(name).unwrap();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(len)).collect();
            cuts.sort_unstable();
            let mut series: Vec<Vec<(i64, f64)>> = (0..n)
                .map(|s| (0..len).map(|i| (i as i64 * 60_000, values[(s * 40 + i) % 240])).collect())
                .collect();
            if let Some((s, i)) = skew
                && let Some(p) = series.get_mut(s).and_then(|s| s.get_mut(i))
            {
                p.0 += 1;
            }
            let split = |s: &Vec<(i64, f64)>, cuts: &[usize]| -> Vec<Vec<(i64, f64)>> {
                let mut pieces = Vec::new();
                let mut from = 0;
                for c in cuts {
                    pieces.push(s[from..*c].to_vec());
                    from = *c;
                }
                pieces.push(s[from..].to_vec());
                pieces
            };
            let pieces: Vec<Vec<Vec<(i64, f64)>>> = series
                .iter()
                .enumerate()
                .map(|(i, s)| split(s, if fewer && i == 0 { &cuts[cuts.len().min(1)..] } else { &cuts }))
                .collect();
            let want = aggregate_floats(&series, agg);
            let got = aggregate_float_pieces(pieces, agg);
            let bits = |r: Result<Vec<(i64, f64)>>| r.map(|o| o.into_iter().map(|(t, v)| (t, v.to_bits())).collect::<Vec<_>>()).map_err(|e| e.to_string());
            prop_assert_eq!(bits(got), bits(want));
        }

        /// Series of doubles at their own times (sparse series starting and ending apart,
        /// NaN among them) aggregate to the same bits, and fail the same, as their values.
        #[test]
        fn doubles_at_their_own_times_aggregate_as_values_do(
            series in prop::collection::vec(
                prop::collection::btree_map(0i64..60, prop_oneof![
                    8 => (-1e6f64..1e6).boxed(),
                    1 => Just(f64::NAN).boxed(),
                    1 => Just(f64::MAX).boxed(),
                ], 0..20),
                0..6,
            ),
            name in prop::sample::select(vec![
                "sum", "avg", "min", "max", "count", "p90", "dev", "zimsum", "mimmax",
                "mimmin", "squareSum", "first", "last", "median",
            ]),
        ) {
            let series: Vec<Vec<(i64, f64)>> = series
                .into_iter()
                .map(|m| m.into_iter().map(|(t, v)| (t * 1000, v)).collect())
                .collect();
            let values: Vec<Vec<(i64, Num)>> = series
                .iter()
                .map(|s| s.iter().map(|(t, v)| (*t, Num::Float(*v))).collect())
                .collect();
            let a = Aggregator::parse(name).unwrap();
            let want = aggregate(&values, a)
                .map(|out| out.into_iter().map(|(t, v)| (t, v.as_f64().to_bits())).collect::<Vec<_>>())
                .map_err(|e| e.to_string());
            let got = aggregate_floats(&series, a)
                .map(|out| out.into_iter().map(|(t, v)| (t, v.to_bits())).collect::<Vec<_>>())
                .map_err(|e| e.to_string());
            prop_assert_eq!(got, want);
        }

        /// count counts every series that has started and not ended.
        #[test]
        fn count_counts_active_series(series in series_strategy()) {
            let out = aggregate(&series, Aggregator::Count).unwrap();
            for (x, v) in out {
                let active = series.iter().filter(|s| s[0].0 <= x && x <= s[s.len() - 1].0).count() as i64;
                prop_assert_eq!(v, Num::Int(active));
            }
        }
    }

    /// Series long enough to be checked for shared times on two threads, one time differing
    /// in the second half only (or none): the same answer as the general aggregation.
    #[test]
    fn times_are_checked_in_both_halves() {
        let n = 140_000i64;
        let base: Vec<(i64, f64)> = (0..n).map(|i| (i * 60_000, i as f64 * 0.5)).collect();
        for shifted in [None, Some(n as usize * 3 / 4), Some(3)] {
            let mut other = base.clone();
            if let Some(k) = shifted {
                other[k].0 += 1;
            }
            let series = vec![base.clone(), other];
            let values: Vec<Vec<(i64, Num)>> = series
                .iter()
                .map(|s| s.iter().map(|(t, v)| (*t, Num::Float(*v))).collect())
                .collect();
            let want: Vec<(i64, u64)> = aggregate(&values, Aggregator::Sum)
                .unwrap()
                .into_iter()
                .map(|(t, v)| (t, v.as_f64().to_bits()))
                .collect();
            let got: Vec<(i64, u64)> = aggregate_floats(&series, Aggregator::Sum)
                .unwrap()
                .into_iter()
                .map(|(t, v)| (t, v.to_bits()))
                .collect();
            assert_eq!(got.len(), want.len(), "shifted {shifted:?}");
            assert!(got == want, "shifted {shifted:?}");
        }
    }
}
