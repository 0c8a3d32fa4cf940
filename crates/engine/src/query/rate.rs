//! Rate of change per second, with OpenTSDB's counter options.

use crate::num::Sample;
use crate::{Error, Result};

/// `rateOptions`: counter handling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateOptions {
    pub counter: bool,
    pub counter_max: i64,
    /// A counter rate above this (when > 0) is reported as 0 (a reset, not real growth).
    pub reset_value: i64,
    /// Drop the rate point at a counter reset instead of computing a wrapped one.
    pub drop_resets: bool,
}

impl Default for RateOptions {
    fn default() -> Self {
        RateOptions {
            counter: false,
            counter_max: i64::MAX,
            reset_value: 0,
            drop_resets: false,
        }
    }
}

impl RateOptions {
    /// Parses the `rate{counter[,max[,reset]]}` token of a GET query as OpenTSDB's
    /// `parseRateOptions` does: four characters are the defaults; else at least six, the
    /// options read between the fifth character and the last (whatever those two are, so
    /// `RATE{counter}` and `rate{counter` read as written); `dropcounter` also drops resets.
    pub fn parse_token(spec: &str) -> Result<RateOptions> {
        let chars = spec.chars().count();
        if chars == 4 {
            return Ok(RateOptions::default());
        }
        if chars < 6 {
            return Err(Error::invalid(format!(
                "Invalid rate options specification: {spec}"
            )));
        }
        let inner: String = spec.chars().skip(5).take(chars - 6).collect();
        let parts: Vec<&str> = inner.split(',').collect();
        if parts.len() > 3 {
            return Err(Error::invalid(format!(
                "Incorrect number of values in rate options specification, must be counter[,counter max value,reset value], recieved: {} parts",
                parts.len()
            )));
        }
        let mut o = RateOptions {
            counter: parts[0].ends_with("counter"),
            drop_resets: parts[0] == "dropcounter",
            ..Default::default()
        };
        if let Some(max) = parts.get(1).filter(|m| !m.is_empty()) {
            o.counter_max = max.parse().map_err(|_| {
                Error::invalid(format!(
                    "Max value of counter was not a number, received '{max}'"
                ))
            })?;
        }
        if let Some(reset) = parts.get(2).filter(|r| !r.is_empty()) {
            o.reset_value = reset.parse().map_err(|_| {
                Error::invalid(format!(
                    "Reset value of counter was not a number, received '{reset}'"
                ))
            })?;
        }
        Ok(o)
    }
}

/// Per-second rates of one series' points (time-ordered, ms). Each rate carries the later
/// point's time; the first point yields none (OpenTSDB computes a hidden one against (0, 0)).
pub fn rates<V: Sample>(points: &[(i64, V)], options: &RateOptions) -> Vec<(i64, f64)> {
    rates_in(&[points], options)
}

/// [`rates`] of the points of `pieces`, one piece after another, as if put together.
pub fn rates_in<V: Sample>(pieces: &[&[(i64, V)]], options: &RateOptions) -> Vec<(i64, f64)> {
    let points: usize = pieces.iter().map(|p| p.len()).sum();
    let mut out = Vec::with_capacity(points.saturating_sub(1));
    let mut prev: Option<(i64, V)> = None;
    // The last step (ms) and its seconds: regular points divide once, not at every point.
    let (mut step, mut seconds) = (0i64, 0.0f64);
    // A loop a piece (a chained iterator costs more a point).
    for piece in pieces {
        for &(t1, v1) in *piece {
            let Some((t0, v0)) = prev else {
                prev = Some((t1, v1));
                continue;
            };
            prev = Some((t1, v1));
            if t1 <= t0 {
                continue; // not strictly increasing: no rate (OpenTSDB fails the query)
            }
            if t1 - t0 != step {
                step = t1 - t0;
                seconds = step_seconds(t0, t1);
            }
            if let Some(rate) = rate_over(seconds, v0, v1, options) {
                out.push((t1, rate));
            }
        }
    }
    out
}

/// The rate from one point to a later one (`t1 > t0`), OpenTSDB's `RateSpan`: `None` for a
/// counter reset dropped (`dropResets`).
pub fn rate_between<V: Sample>(
    (t0, v0): (i64, V),
    (t1, v1): (i64, V),
    options: &RateOptions,
) -> Option<f64> {
    rate_over(step_seconds(t0, t1), v0, v1, options)
}

/// The seconds from `t0` to `t1` (ms), as a rate divides by them.
#[inline]
fn step_seconds(t0: i64, t1: i64) -> f64 {
    (t1 - t0) as f64 / 1000.0
}

/// [`rate_between`] over `dt` seconds.
#[inline]
fn rate_over<V: Sample>(dt: f64, v0: V, v1: V, options: &RateOptions) -> Option<f64> {
    let diff = match (v0.as_int(), v1.as_int()) {
        (Some(a), Some(b)) => b.wrapping_sub(a) as f64,
        _ => v1.as_f64() - v0.as_f64(),
    };
    if options.counter && diff < 0.0 {
        if options.drop_resets {
            return None;
        }
        let wrapped = match (v0.as_int(), v1.as_int()) {
            (Some(a), Some(b)) => options.counter_max.wrapping_sub(a).wrapping_add(b) as f64,
            _ => options.counter_max as f64 - v0.as_f64() + v1.as_f64(),
        };
        let rate = wrapped / dt;
        return Some(
            if options.reset_value > 0 && rate > options.reset_value as f64 {
                0.0
            } else {
                rate
            },
        );
    }
    Some(diff / dt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::num::Num;

    #[test]
    fn counter_examples_from_opentsdb() {
        let pts = [
            (10_000, Num::Int(100)),
            (20_000, Num::Int(150)),
            (30_000, Num::Int(20)),
            (40_000, Num::Int(40)),
        ];
        let max200 = RateOptions {
            counter: true,
            counter_max: 200,
            ..Default::default()
        };
        assert_eq!(
            rates(&pts, &max200),
            vec![(20_000, 5.0), (30_000, 7.0), (40_000, 2.0)]
        );
        let reset = RateOptions {
            reset_value: 5,
            ..max200
        };
        assert_eq!(rates(&pts, &reset)[1], (30_000, 0.0));
        let drop = RateOptions {
            drop_resets: true,
            ..max200
        };
        assert_eq!(
            rates(&pts, &drop),
            vec![(20_000, 5.0), (40_000, 2.0)],
            "next rate is from the post-reset point"
        );
        let gauge = RateOptions::default();
        assert_eq!(
            rates(&pts, &gauge)[1],
            (30_000, -13.0),
            "negative rates pass without counter"
        );
        let ms = [(1000, Num::Float(1.0)), (1500, Num::Float(2.0))];
        assert_eq!(rates(&ms, &gauge), vec![(1500, 2.0)], "always per second");
    }

    #[test]
    fn parses_get_rate_tokens() {
        assert_eq!(
            RateOptions::parse_token("rate").unwrap(),
            RateOptions::default()
        );
        let o = RateOptions::parse_token("rate{counter,,1000}").unwrap();
        assert_eq!(
            (o.counter, o.counter_max, o.reset_value, o.drop_resets),
            (true, i64::MAX, 1000, false)
        );
        let o = RateOptions::parse_token("rate{dropcounter}").unwrap();
        assert!(o.counter && o.drop_resets);
        let o = RateOptions::parse_token("rate{counter,65535}").unwrap();
        assert_eq!(o.counter_max, 65535);
        let err = |s: &str| RateOptions::parse_token(s).unwrap_err().to_string();
        assert_eq!(err("rate{"), "Invalid rate options specification: rate{");
        assert_eq!(
            err("rate{counter,x}"),
            "Max value of counter was not a number, received 'x'"
        );
        assert_eq!(
            err("rate{counter,1,y}"),
            "Reset value of counter was not a number, received 'y'"
        );
        assert!(err("rate{a,b,c,d}").starts_with("Incorrect number of values"));
        // Read between the fifth character and the last, whatever they are.
        assert!(RateOptions::parse_token("RATE{counter}").unwrap().counter);
        assert!(!RateOptions::parse_token("rate{counter").unwrap().counter);
        assert!(RateOptions::parse_token("rate{counterX").unwrap().counter);
        assert_eq!(
            RateOptions::parse_token("rate{}").unwrap(),
            RateOptions::default()
        );
        assert_eq!(
            RateOptions::parse_token("ratéXcounter,5é")
                .unwrap()
                .counter_max,
            5
        );
    }

    proptest::proptest! {
        /// Rates of a series in pieces are the rates of the pieces put together: the first
        /// point of a piece is rated against the last of the piece before.
        #[test]
        fn rates_in_pieces_are_the_rates_joined(
            points in proptest::collection::vec((proptest::prop_oneof![3 => proptest::strategy::Just(1_000i64), 1 => 0i64..5_000], -1_000i64..1_000), 0..60),
            cuts in proptest::collection::vec(0usize..60, 0..4),
            counter in proptest::bool::ANY,
            drop_resets in proptest::bool::ANY,
        ) {
            let mut t = 0;
            let points: Vec<(i64, f64)> = points
                .into_iter()
                .map(|(dt, v)| {
                    t += dt;
                    (t, v as f64 / 4.0)
                })
                .collect();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(points.len())).collect();
            cuts.sort_unstable();
            let mut pieces: Vec<&[(i64, f64)]> = Vec::new();
            let mut from = 0;
            for c in cuts.into_iter().chain([points.len()]) {
                pieces.push(&points[from..c]);
                from = c;
            }
            let options = RateOptions { counter, drop_resets, counter_max: 1_000, ..Default::default() };
            let bits = |r: Vec<(i64, f64)>| r.into_iter().map(|(t, v)| (t, v.to_bits())).collect::<Vec<_>>();
            proptest::prop_assert_eq!(bits(rates_in(&pieces, &options)), bits(rates(&points, &options)));
            // Each the rate between a point and the one before it (steps repeat and change).
            let naive: Vec<(i64, f64)> = points
                .windows(2)
                .filter(|w| w[1].0 > w[0].0)
                .filter_map(|w| rate_between(w[0], w[1], &options).map(|r| (w[1].0, r)))
                .collect();
            proptest::prop_assert_eq!(bits(rates(&points, &options)), bits(naive));
        }
    }
}
