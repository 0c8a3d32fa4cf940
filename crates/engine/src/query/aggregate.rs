//! Cross-series aggregation with OpenTSDB's interpolation: one output per distinct time of
//! any series; at each time every series that has started and not ended contributes its
//! point there, or a value filled in by the aggregator's interpolation mode.

use super::aggregator::{Aggregator, Interpolation};
use super::rate::Num;
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
    let mode = agg.interpolation();
    let mut times: Vec<i64> = series.iter().flat_map(|s| s.iter().map(|p| p.0)).collect();
    times.sort_unstable();
    times.dedup();
    let mut out = Vec::with_capacity(times.len());
    let (mut ints, mut floats) = (Vec::new(), Vec::new());
    let mut slots = Vec::with_capacity(series.len());
    let mut cursors = vec![0usize; series.len()];
    for x in times {
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

/// Aggregates rate series. Each entry is (the series' hidden first rate, its rates). Every
/// series takes part from the start until its last rate; between its rates it contributes
/// its latest rate (no interpolation), before its first one the hidden first rate.
pub fn aggregate_rates(
    series: &[(f64, Vec<(i64, f64)>)],
    agg: Aggregator,
) -> Result<Vec<(i64, f64)>> {
    let mut times: Vec<i64> = series
        .iter()
        .flat_map(|(_, r)| r.iter().map(|p| p.0))
        .collect();
    times.sort_unstable();
    times.dedup();
    let mut out = Vec::with_capacity(times.len());
    let mut values = Vec::new();
    let mut cursors = vec![0usize; series.len()];
    for x in times {
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

    fn ints(p: &[(i64, i64)]) -> Vec<(i64, Num)> {
        p.iter().map(|(t, v)| (*t * 1000, Num::Int(*v))).collect()
    }

    fn agg(name: &str) -> Aggregator {
        Aggregator::parse(name).unwrap()
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
}
