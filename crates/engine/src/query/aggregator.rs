//! OpenTSDB 2.4's aggregators: names, interpolation modes, and their integer and
//! floating-point arithmetic (the integer path truncates like Java's `long` division; the
//! double path skips NaN where OpenTSDB does).

use crate::{Error, Result};

/// How a series is filled in at a time between two of its points during cross-series
/// aggregation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interpolation {
    /// Linear interpolation between the neighbours.
    Lerp,
    /// Zero.
    Zim,
    /// The type's largest value (so `mimmin` ignores the series).
    Max,
    /// The type's smallest value (so `mimmax` ignores the series).
    Min,
    /// The previous value.
    Prev,
}

/// Percentile estimation (Apache commons-math `Percentile` types OpenTSDB uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Estimation {
    Legacy,
    R3,
    R7,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Aggregator {
    Sum,
    PfSum,
    ZimSum,
    Min,
    Max,
    MimMin,
    MimMax,
    Avg,
    Median,
    None,
    Mult,
    Dev,
    Diff,
    SquareSum,
    Count,
    First,
    Last,
    Percentile { p: f64, estimation: Estimation },
}

/// Every registered name, in the order OpenTSDB 2.4 lists them (`/api/aggregators`).
pub const NAMES: &[&str] = &[
    "mult",
    "p90",
    "zimsum",
    "mimmax",
    "sum",
    "p50",
    "none",
    "p95",
    "ep99r7",
    "pfsum",
    "p75",
    "p99",
    "ep99r3",
    "ep95r7",
    "min",
    "avg",
    "ep75r7",
    "dev",
    "ep95r3",
    "ep75r3",
    "ep50r7",
    "ep90r7",
    "mimmin",
    "p999",
    "ep50r3",
    "ep90r3",
    "ep999r7",
    "last",
    "max",
    "count",
    "diff",
    "median",
    "squareSum",
    "ep999r3",
    "first",
];

fn percentile_of(name: &str) -> Option<Aggregator> {
    let (rest, estimation) = if let Some(r) = name.strip_prefix("ep") {
        if let Some(x) = r.strip_suffix("r3") {
            (x, Estimation::R3)
        } else {
            (r.strip_suffix("r7")?, Estimation::R7)
        }
    } else {
        (name.strip_prefix('p')?, Estimation::Legacy)
    };
    let p = match rest {
        "50" => 50.0,
        "75" => 75.0,
        "90" => 90.0,
        "95" => 95.0,
        "99" => 99.0,
        "999" => 99.9,
        _ => return None,
    };
    Some(Aggregator::Percentile { p, estimation })
}

impl Aggregator {
    /// The registered name.
    pub fn name(self) -> &'static str {
        NAMES
            .iter()
            .copied()
            .find(|n| Aggregator::parse(n).is_ok_and(|a| a == self))
            .unwrap_or("none")
    }

    /// Looks an aggregator up by its registered (case-sensitive) name.
    pub fn parse(name: &str) -> Result<Aggregator> {
        let a = match name {
            "sum" => Aggregator::Sum,
            "pfsum" => Aggregator::PfSum,
            "zimsum" => Aggregator::ZimSum,
            "min" => Aggregator::Min,
            "max" => Aggregator::Max,
            "mimmin" => Aggregator::MimMin,
            "mimmax" => Aggregator::MimMax,
            "avg" => Aggregator::Avg,
            "median" => Aggregator::Median,
            "none" => Aggregator::None,
            "mult" => Aggregator::Mult,
            "dev" => Aggregator::Dev,
            "diff" => Aggregator::Diff,
            "squareSum" => Aggregator::SquareSum,
            "count" => Aggregator::Count,
            "first" => Aggregator::First,
            "last" => Aggregator::Last,
            other => percentile_of(other)
                .ok_or_else(|| Error::invalid(format!("No such aggregator: {other}")))?,
        };
        Ok(a)
    }

    pub fn interpolation(self) -> Interpolation {
        match self {
            Aggregator::PfSum => Interpolation::Prev,
            Aggregator::ZimSum
            | Aggregator::None
            | Aggregator::SquareSum
            | Aggregator::Count
            | Aggregator::First
            | Aggregator::Last => Interpolation::Zim,
            Aggregator::MimMin => Interpolation::Max,
            Aggregator::MimMax => Interpolation::Min,
            _ => Interpolation::Lerp,
        }
    }

    /// The integer path (every input an integer): Java `long` arithmetic, wrapping.
    /// `values` must not be empty.
    pub fn run_long(self, values: &[i64]) -> i64 {
        let first = values.first().copied().unwrap_or(0);
        match self {
            Aggregator::Sum | Aggregator::PfSum | Aggregator::ZimSum => {
                values.iter().fold(0i64, |a, v| a.wrapping_add(*v))
            }
            Aggregator::SquareSum => values
                .iter()
                .fold(0i64, |a, v| a.wrapping_add(v.wrapping_mul(*v))),
            Aggregator::Min | Aggregator::MimMin => values.iter().copied().min().unwrap_or(0),
            Aggregator::Max | Aggregator::MimMax => values.iter().copied().max().unwrap_or(0),
            Aggregator::Avg => {
                let sum = values.iter().fold(0i64, |a, v| a.wrapping_add(*v));
                if values.is_empty() {
                    0
                } else {
                    sum / values.len() as i64
                }
            }
            Aggregator::Median => {
                let mut sorted = values.to_vec();
                sorted.sort_unstable();
                sorted.get(sorted.len() / 2).copied().unwrap_or(0)
            }
            Aggregator::None | Aggregator::First => first,
            Aggregator::Last => values.last().copied().unwrap_or(0),
            Aggregator::Mult => values.iter().fold(1i64, |a, v| a.wrapping_mul(*v)),
            Aggregator::Dev => {
                let as_f: Vec<f64> = values.iter().map(|v| *v as f64).collect();
                population_dev(&as_f) as i64
            }
            Aggregator::Diff => values.last().copied().unwrap_or(0).wrapping_sub(first),
            Aggregator::Count => values.len() as i64,
            Aggregator::Percentile { p, estimation } => {
                let mut sorted: Vec<f64> = values.iter().map(|v| *v as f64).collect();
                sorted.sort_by(f64::total_cmp);
                percentile(&sorted, p, estimation) as i64
            }
        }
    }

    /// The floating-point path: NaN inputs are skipped where OpenTSDB skips them (a result
    /// over only NaN is NaN). `values` must not be empty.
    pub fn run_double(self, values: &[f64]) -> f64 {
        let finite = || values.iter().copied().filter(|v| !v.is_nan());
        let none_left = values.iter().all(|v| v.is_nan());
        match self {
            Aggregator::Sum | Aggregator::PfSum | Aggregator::ZimSum => {
                if none_left {
                    f64::NAN
                } else {
                    // From 0.0, as Java's `double result = 0.`: values all -0.0 sum to 0.0.
                    finite().fold(0.0, |a, v| a + v)
                }
            }
            Aggregator::SquareSum => {
                if none_left {
                    f64::NAN
                } else {
                    finite().fold(0.0, |a, v| a + v * v)
                }
            }
            // The first of equal values stays; a result of +-Infinity is NaN, as there.
            Aggregator::Min | Aggregator::MimMin => {
                let min = finite().fold(f64::INFINITY, super::fold::java_min);
                if min == f64::INFINITY { f64::NAN } else { min }
            }
            Aggregator::Max | Aggregator::MimMax => {
                let max = finite().fold(f64::NEG_INFINITY, super::fold::java_max);
                if max == f64::NEG_INFINITY {
                    f64::NAN
                } else {
                    max
                }
            }
            Aggregator::Avg => {
                let (sum, n) = finite().fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
                if n == 0 { f64::NAN } else { sum / n as f64 }
            }
            Aggregator::Median => {
                let mut sorted: Vec<f64> = finite().collect();
                sorted.sort_by(f64::total_cmp);
                sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
            }
            Aggregator::None | Aggregator::First => values.first().copied().unwrap_or(f64::NAN),
            Aggregator::Last => values.last().copied().unwrap_or(f64::NAN),
            Aggregator::Mult => values.iter().product(),
            Aggregator::Dev => {
                let vals: Vec<f64> = finite().collect();
                if vals.is_empty() {
                    f64::NAN
                } else {
                    population_dev(&vals)
                }
            }
            Aggregator::Diff => {
                // Leading NaNs are skipped; a trailing NaN is still "last".
                match values.iter().position(|v| !v.is_nan()) {
                    None => f64::NAN,
                    Some(i) => values.last().copied().unwrap_or(f64::NAN) - values[i],
                }
            }
            Aggregator::Count => finite().count() as f64,
            Aggregator::Percentile { p, .. } => {
                // OpenTSDB ignores the estimation type on doubles.
                let mut sorted: Vec<f64> = finite().collect();
                if sorted.is_empty() {
                    return f64::NAN;
                }
                sorted.sort_by(f64::total_cmp);
                percentile(&sorted, p, Estimation::Legacy)
            }
        }
    }
}

/// Population standard deviation (Welford), 0 for a single value.
fn population_dev(values: &[f64]) -> f64 {
    let (mut n, mut mean, mut m2) = (0f64, 0f64, 0f64);
    for v in values {
        n += 1.0;
        let delta = v - mean;
        mean += delta / n;
        m2 += delta * (v - mean);
    }
    if n <= 1.0 { 0.0 } else { (m2 / n).sqrt() }
}

/// Percentile `p` (0 < p <= 100) of sorted values by the given estimation.
fn percentile(sorted: &[f64], p: f64, estimation: Estimation) -> f64 {
    let n = sorted.len() as f64;
    if sorted.is_empty() {
        return f64::NAN;
    }
    let q = p / 100.0;
    let pos = match estimation {
        Estimation::Legacy => {
            if q == 0.0 {
                0.0
            } else if q == 1.0 {
                n
            } else {
                q * (n + 1.0)
            }
        }
        Estimation::R3 => {
            if q <= 0.5 / n {
                0.0
            } else {
                round_half_even(n * q)
            }
        }
        Estimation::R7 => {
            if q == 1.0 {
                n
            } else {
                1.0 + (n - 1.0) * q
            }
        }
    };
    if pos < 1.0 {
        return sorted[0];
    }
    if pos >= n {
        return sorted[sorted.len() - 1];
    }
    let lower = pos.floor();
    let i = lower as usize; // 1-based index of the lower neighbour
    sorted[i - 1] + (pos - lower) * (sorted[i] - sorted[i - 1])
}

fn round_half_even(x: f64) -> f64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
        r - x.signum()
    } else {
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registered_name_parses_and_unknown_ones_fail() {
        assert_eq!(NAMES.len(), 35);
        for name in NAMES {
            assert!(Aggregator::parse(name).is_ok(), "{name}");
        }
        assert_eq!(
            Aggregator::parse("Sum").unwrap_err().to_string(),
            "No such aggregator: Sum"
        );
        assert!(Aggregator::parse("p42").is_err());
        assert!(
            Aggregator::parse("squaresum").is_err(),
            "names are case-sensitive"
        );
    }

    #[test]
    fn interpolation_modes() {
        let i = |n: &str| Aggregator::parse(n).unwrap().interpolation();
        assert_eq!(i("sum"), Interpolation::Lerp);
        assert_eq!(i("zimsum"), Interpolation::Zim);
        assert_eq!(i("pfsum"), Interpolation::Prev);
        assert_eq!(i("mimmin"), Interpolation::Max);
        assert_eq!(i("mimmax"), Interpolation::Min);
        assert_eq!(i("count"), Interpolation::Zim);
        assert_eq!(i("p99"), Interpolation::Lerp);
    }

    #[test]
    fn integer_arithmetic_matches_java() {
        let run = |n: &str, v: &[i64]| Aggregator::parse(n).unwrap().run_long(v);
        assert_eq!(run("avg", &[1, 2]), 1);
        assert_eq!(run("avg", &[-1, -2]), -1);
        assert_eq!(run("median", &[1, 2, 3, 4]), 3);
        assert_eq!(run("dev", &[2, 4, 4, 4, 5, 5, 7, 9]), 2);
        assert_eq!(run("dev", &[5]), 0);
        assert_eq!(run("diff", &[3, 10, 4]), 1);
        assert_eq!(run("mult", &[2, 3, 4]), 24);
        assert_eq!(run("squareSum", &[2, 3]), 13);
        assert_eq!(run("count", &[7, 7, 7]), 3);
        assert_eq!(run("sum", &[i64::MAX, 1]), i64::MIN, "wraps like Java");
    }

    #[test]
    fn double_arithmetic_skips_nan() {
        let run = |n: &str, v: &[f64]| Aggregator::parse(n).unwrap().run_double(v);
        assert_eq!(run("sum", &[1.5, f64::NAN, 2.0]), 3.5);
        assert!(
            run("sum", &[-0.0, -0.0]).is_sign_positive(),
            "from 0.0, as Java"
        );
        assert!(run("squareSum", &[-0.0]).is_sign_positive());
        assert!(run("min", &[-0.0, 0.0]).is_sign_negative());
        // The first of equal values stays, whatever the optimiser makes of `f64::min`.
        let zeros = [std::hint::black_box(0.0), std::hint::black_box(-0.0)];
        assert!(run("min", &zeros).is_sign_positive());
        assert!(run("max", &zeros).is_sign_positive());
        assert!(run("max", &[-0.0, 0.0]).is_sign_negative());
        assert!(run("min", &[f64::INFINITY, f64::NAN]).is_nan());
        assert!(run("max", &[f64::NEG_INFINITY]).is_nan());
        assert_eq!(run("max", &[f64::NEG_INFINITY, -1.0]), -1.0);
        assert!(run("sum", &[f64::NAN, f64::NAN]).is_nan());
        assert_eq!(run("avg", &[1.0, 2.0, f64::NAN]), 1.5);
        assert_eq!(run("count", &[1.0, f64::NAN]), 1.0);
        assert_eq!(run("min", &[3.0, f64::NAN, 1.0]), 1.0);
        assert!(
            run("mult", &[2.0, f64::NAN]).is_nan(),
            "mult does not skip NaN"
        );
        assert_eq!(run("diff", &[f64::NAN, 1.0, 4.0]), 3.0);
        assert!(run("diff", &[1.0, f64::NAN]).is_nan());
        assert_eq!(run("dev", &[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]), 2.0);
    }

    #[test]
    fn percentiles_match_commons_math() {
        let four = [1.0, 2.0, 3.0, 4.0];
        let cases: &[(f64, Estimation, f64)] = &[
            (50.0, Estimation::Legacy, 2.5),
            (50.0, Estimation::R3, 2.0),
            (50.0, Estimation::R7, 2.5),
            (75.0, Estimation::Legacy, 3.75),
            (75.0, Estimation::R3, 3.0),
            (75.0, Estimation::R7, 3.25),
            (95.0, Estimation::Legacy, 4.0),
            (95.0, Estimation::R3, 4.0),
            (95.0, Estimation::R7, 3.8499999999999996),
            (99.9, Estimation::R7, 3.9970000000000003),
        ];
        for (p, e, want) in cases {
            assert_eq!(percentile(&four, *p, *e), *want, "p{p} {e:?}");
        }
        let five = [10.0, 20.0, 30.0, 40.0, 50.0];
        assert_eq!(
            percentile(&five, 50.0, Estimation::R3),
            20.0,
            "rint rounds half to even"
        );
        assert_eq!(percentile(&five, 90.0, Estimation::Legacy), 50.0);
        assert_eq!(percentile(&five, 90.0, Estimation::R3), 40.0);
        assert_eq!(percentile(&five, 90.0, Estimation::R7), 46.0);
        assert_eq!(
            Aggregator::parse("ep50r3")
                .unwrap()
                .run_long(&[10, 20, 30, 40, 50]),
            20
        );
        assert_eq!(
            Aggregator::parse("ep50r3").unwrap().run_double(&five),
            30.0,
            "estimation ignored on doubles"
        );
    }
}
