//! A generated stream with the traits of real monitoring data, for when no real data is at
//! hand or more of it is wanted: dense and sparse series mixed (10 s to 5 min intervals),
//! floats written with all their decimals, integer gauges, counters that reset, series that
//! start and stop within the range, gaps, and collectors whose timestamps drift by a second or
//! two. The same seed gives the same stream, byte for byte (times start at a fixed date).

use super::series::Series;
use crate::dataset::Rng;

/// 2025-01-01T00:00:00Z: a fixed start, so a seed always gives the same stream.
const START: u64 = 1_735_689_600;

#[derive(Debug, Clone, Copy)]
enum Kind {
    /// A percentage written with every decimal of an f64 (as collectors compute it).
    CpuPct,
    /// Integer bytes, a slow walk.
    MemoryBytes,
    /// A byte counter; resets to zero when its process restarts.
    NetBytes,
    /// Milliseconds with three decimals, log-normal-ish with spikes.
    LatencyMs,
    /// A sensor with two decimals, slow.
    Temperature,
    /// A ratio written with every decimal.
    DiskUsedPct,
    /// A counter that rarely moves; resets too.
    Errors,
}

/// Metric, kind, weight among series, intervals in seconds to pick from.
const KINDS: [(&str, Kind, u64, &[u64]); 7] = [
    ("gen.cpu.pct", Kind::CpuPct, 3, &[10, 15]),
    ("gen.mem.used", Kind::MemoryBytes, 2, &[30, 60]),
    ("gen.net.bytes", Kind::NetBytes, 3, &[10, 30]),
    ("gen.http.latency_ms", Kind::LatencyMs, 2, &[60]),
    ("gen.temp.celsius", Kind::Temperature, 1, &[300]),
    ("gen.disk.used_pct", Kind::DiskUsedPct, 1, &[300]),
    ("gen.http.errors", Kind::Errors, 1, &[60]),
];

/// The value of one series as it moves.
struct Walk {
    kind: Kind,
    level: f64,
    rate: f64,
}

impl Walk {
    fn new(kind: Kind, rng: &mut Rng) -> Walk {
        let u = rng.unit();
        let (level, rate) = match kind {
            Kind::CpuPct => (5.0 + 60.0 * u, 0.0),
            Kind::MemoryBytes => ((2u64 << 30) as f64 * (1.0 + 7.0 * u), 0.0),
            Kind::NetBytes => (0.0, 1e3 * 10f64.powf(4.0 * u)),
            Kind::LatencyMs => (5.0 + 195.0 * u, 0.0),
            Kind::Temperature => (20.0 + 50.0 * u, 0.0),
            Kind::DiskUsedPct => (100e9 * (0.2 + 0.6 * u), 1e3 * (1.0 + 99.0 * rng.unit())),
            Kind::Errors => (0.0, 0.01 + 0.2 * u),
        };
        Walk { kind, level, rate }
    }

    /// The next value's text, `secs` after the previous one, and the bits of information the
    /// value carries given the walk's state before the step ([`Drawn`]).
    fn step(&mut self, rng: &mut Rng, secs: u64) -> (String, f64) {
        let secs = secs as f64;
        let noise = rng.unit() - 0.5;
        let before = self.level;
        match self.kind {
            Kind::CpuPct => {
                self.level = (self.level + noise * 4.0).clamp(0.0, 100.0);
                let busy = (self.level + (rng.unit() - 0.5) * 2.0).clamp(0.0, 100.0);
                // Given the level before: the level's step (uniform over 4) plus the noise
                // (uniform over 2) has a trapezoid density; the double lands on one of its
                // units in the last place (the draws are 2^-53 fine, so at most 52 bits of
                // scale). A clamped value is one of two, about a bit.
                let bits = if busy == 0.0 || busy == 100.0 {
                    1.0
                } else {
                    let x = (busy - before).abs();
                    let density = if x <= 1.0 { 0.25 } else { (3.0 - x) / 8.0 };
                    -density.max(1e-9).log2() + ulp_scale(busy).min(52.0)
                };
                (format!("{busy}"), bits)
            }
            Kind::MemoryBytes => {
                self.level = (self.level + noise * 8e6).max(1e8);
                // One of 8,000,000 whole bytes around the level before.
                (format!("{:.0}", self.level), 8e6f64.log2())
            }
            Kind::NetBytes => {
                let restarted = rng.below(4000) == 0;
                if restarted {
                    self.level = 0.0; // the process restarted
                }
                let width = self.rate * secs;
                self.level += (width * (0.5 + rng.unit())).floor();
                // The step: one of `width` whole counts; a restart, one in 4,000.
                let event = if restarted {
                    4000f64.log2()
                } else {
                    -(3999.0f64 / 4000.0).log2()
                };
                (format!("{:.0}", self.level), width.max(1.0).log2() + event)
            }
            Kind::LatencyMs => {
                self.level = (self.level * (1.0 + noise * 0.05)).clamp(1.0, 2000.0);
                let spike = if rng.below(200) == 0 { 10.0 } else { 1.0 };
                let v = self.level * spike * (1.0 + (rng.unit() - 0.5) * 0.6);
                // Even knowing the new level and the spike: one of 0.6 x level x spike /
                // 0.001 values.
                let bits = (0.6 * self.level * spike * 1000.0).max(1.0).log2();
                (format!("{v:.3}"), bits)
            }
            Kind::Temperature => {
                self.level += noise * 0.3;
                (
                    format!("{:.2}", self.level),
                    rounded_uniform_bits(before, 0.3, 0.01),
                )
            }
            Kind::DiskUsedPct => {
                let width = self.rate * secs;
                self.level += width * (0.5 + rng.unit());
                if rng.below(3000) == 0 {
                    self.level *= 0.7; // a cleanup
                }
                let pct = 100.0 * self.level / 500e9;
                // A uniform step of `width` bytes, as a percentage on its units in the last
                // place, or on the level's own (bytes) when those are coarser.
                let on_pct = (width * 100.0 / 500e9).log2() + ulp_scale(pct);
                let on_level = width.log2() + ulp_scale(self.level);
                (format!("{pct}"), on_pct.min(on_level).max(0.0))
            }
            Kind::Errors => {
                if rng.below(5000) == 0 {
                    self.level = 0.0;
                }
                let bits = if rng.unit() < self.rate {
                    self.level += 1.0 + rng.below(5) as f64;
                    -(self.rate / 5.0).log2()
                } else {
                    -(1.0 - self.rate).log2()
                };
                (format!("{:.0}", self.level), bits)
            }
        }
    }
}

/// `-log2` of `v`'s unit in the last place: the bits a value known to within a unit of its
/// scale still has to give below it.
fn ulp_scale(v: f64) -> f64 {
    let v = v.abs();
    if v == 0.0 || !v.is_finite() {
        return 0.0;
    }
    let next = f64::from_bits(v.to_bits() + 1);
    -(next - v).log2()
}

/// The entropy, in bits, of `center` plus a uniform draw over `width`, rounded to a multiple
/// of `unit` (as `{:.N}` writes it).
fn rounded_uniform_bits(center: f64, width: f64, unit: f64) -> f64 {
    let (low, high) = ((center - width / 2.0) / unit, (center + width / 2.0) / unit);
    let mut bits = 0.0;
    let mut k = (low + 0.5).floor();
    while k - 0.5 < high {
        let mass = ((k + 0.5).min(high) - (k - 0.5).max(low)) / (high - low);
        if mass > 0.0 {
            bits -= mass * mass.log2();
        }
        k += 1.0;
    }
    bits
}

/// What one series' draws carry: the information of its values given each step's state
/// before it (the walk's level and rate known: a lower bound on what any lossless coding of
/// the values can take, short of one that inverts the random generator), and of its
/// timestamps (collector jitter, gaps).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Drawn {
    pub(crate) metric: &'static str,
    pub(crate) points: usize,
    pub(crate) value_bits: f64,
    pub(crate) time_bits: f64,
}

/// `series` series over `days` days from the seed.
pub(crate) fn generate(seed: u64, series: usize, days: u64) -> Vec<Series> {
    generate_drawn(seed, series, days).0
}

/// [`generate`], with what each series' draws carry (one [`Drawn`] per series given).
pub(crate) fn generate_drawn(seed: u64, series: usize, days: u64) -> (Vec<Series>, Vec<Drawn>) {
    let mut rng = Rng::seeded(seed);
    let span = days.max(1) * 86_400;
    let total_weight: u64 = KINDS.iter().map(|k| k.2).sum();
    let mut out = Vec::with_capacity(series);
    let mut drawn_all = Vec::with_capacity(series);
    for i in 0..series {
        let mut pick = rng.below(total_weight);
        let &(metric, kind, _, intervals) = KINDS
            .iter()
            .find(|k| {
                let hit = pick < k.2;
                pick = pick.saturating_sub(k.2);
                hit
            })
            .unwrap_or(&KINDS[0]);
        let interval = intervals[rng.below(intervals.len() as u64) as usize];
        // One series in five lives for part of the range only (containers come and go).
        let (from, to) = if rng.below(5) == 0 {
            let a = rng.below(span / 2);
            (a, span / 2 + rng.below(span / 2))
        } else {
            (0, span)
        };
        // Three collectors in ten send a second or two late now and then.
        let jitter = if rng.below(10) < 3 { 3 } else { 1 };
        let mut walk = Walk::new(kind, &mut rng);
        let mut points = Vec::with_capacity(((to - from) / interval) as usize);
        let mut t = from - from % interval;
        let mut last_sent = 0;
        let mut drawn = Drawn {
            metric,
            points: 0,
            value_bits: 0.0,
            time_bits: 0.0,
        };
        while t < to {
            // A gap of 5 minutes to 2 hours about once in 3,000 points.
            if rng.below(3000) == 0 {
                t += 300 + rng.below(6900);
                t -= t % interval;
                drawn.time_bits += 3000f64.log2() + 6900f64.log2();
                continue;
            }
            drawn.time_bits += (jitter as f64).log2() - (2999.0f64 / 3000.0).log2();
            let ts = START + t + rng.below(jitter);
            let since = if last_sent == 0 {
                interval
            } else {
                ts - last_sent
            };
            let (value, bits) = walk.step(&mut rng, since);
            drawn.value_bits += bits;
            points.push((ts, value));
            last_sent = ts;
            t += interval;
        }
        if points.is_empty() {
            continue;
        }
        drawn.points = points.len();
        drawn_all.push(drawn);
        out.push(Series {
            metric: metric.to_string(),
            tags: vec![
                ("host".to_string(), format!("h{i:04}")),
                ("dc".to_string(), format!("dc{}", i % 3)),
            ],
            points,
        });
    }
    (out, drawn_all)
}

/// Seconds between a random walk's points.
const WALK_INTERVAL: u64 = 10;
/// A random walk's steps: a whole number of hundredths from -200 to 200, equally likely.
const WALK_STEPS: u64 = 401;

/// `series` random walks of `points` points each, 10 s apart: each starts at a value from 0
/// to 1,000 and steps by -2.00 to +2.00 (hundredths, equally likely), written with two
/// decimals; metric `walk.value`, tag `host`. Every value carries log2(401) bits, about
/// 1.08 bytes a point at the least, times none.
pub(crate) fn random_walks(seed: u64, series: usize, points: usize) -> Vec<Series> {
    let mut rng = Rng::seeded(seed);
    (0..series)
        .map(|i| {
            let mut hundredths = rng.below(100_001) as i64;
            let points = (0..points as u64)
                .map(|n| {
                    hundredths += rng.below(WALK_STEPS) as i64 - (WALK_STEPS / 2) as i64;
                    (START + n * WALK_INTERVAL, two_decimals(hundredths))
                })
                .collect();
            Series {
                metric: "walk.value".to_string(),
                tags: vec![("host".to_string(), format!("h{i:04}"))],
                points,
            }
        })
        .collect()
}

/// The least bytes a point of [`random_walks`] takes: its step's information.
pub(crate) fn walk_floor_bytes() -> f64 {
    (WALK_STEPS as f64).log2() / 8.0
}

/// `hundredths` / 100 with two decimals (`-0.05`, `12.30`).
fn two_decimals(hundredths: i64) -> String {
    let sign = if hundredths < 0 { "-" } else { "" };
    let abs = hundredths.unsigned_abs();
    format!("{sign}{}.{:02}", abs / 100, abs % 100)
}

/// A table of what the stream's draws carry, per metric (one kind each): its points, the bits
/// a value and a timestamp carry on average, and the bytes a point of the whole stream this
/// takes at the least.
pub(crate) fn information_table(drawn: &[Drawn]) -> String {
    let mut kinds: Vec<(&str, usize, usize, f64, f64)> = Vec::new();
    for d in drawn {
        match kinds.iter_mut().find(|k| k.0 == d.metric) {
            Some(k) => {
                k.1 += 1;
                k.2 += d.points;
                k.3 += d.value_bits;
                k.4 += d.time_bits;
            }
            None => kinds.push((d.metric, 1, d.points, d.value_bits, d.time_bits)),
        }
    }
    let total: usize = kinds.iter().map(|k| k.2).sum();
    let per_point = |bits: f64| bits / 8.0 / total.max(1) as f64;
    let mut out = String::from(
        "| metric | series | points | share | value bits/value | time bits/point | bytes/point of the stream |\n|---|---|---|---|---|---|---|\n",
    );
    for (metric, series, points, value_bits, time_bits) in &kinds {
        let n = (*points).max(1) as f64;
        out.push_str(&format!(
            "| {metric} | {series} | {points} | {:.1}% | {:.2} | {:.2} | {:.3} |\n",
            100.0 * n / total.max(1) as f64,
            value_bits / n,
            time_bits / n,
            per_point(value_bits + time_bits)
        ));
    }
    let (values, times): (f64, f64) = kinds
        .iter()
        .fold((0.0, 0.0), |(v, t), k| (v + k.3, t + k.4));
    out.push_str(&format!(
        "| all | {} | {total} | 100% | {:.2} | {:.2} | {:.3} (values {:.3}, timestamps {:.3}) |\n",
        drawn.len(),
        values / total.max(1) as f64,
        times / total.max(1) as f64,
        per_point(values + times),
        per_point(values),
        per_point(times)
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_walks_step_by_at_most_two_in_hundredths() {
        let walks = random_walks(3, 20, 500);
        assert_eq!(walks.len(), 20);
        let mut steps = std::collections::BTreeSet::new();
        for w in &walks {
            assert_eq!(w.points.len(), 500);
            assert!(
                w.points
                    .windows(2)
                    .all(|p| p[1].0 == p[0].0 + WALK_INTERVAL)
            );
            let cents: Vec<i64> = w
                .points
                .iter()
                .map(|(_, v)| {
                    let (_, frac) = v.split_once('.').unwrap();
                    assert_eq!(frac.len(), 2, "{v}");
                    let x: f64 = v.parse().unwrap();
                    (x * 100.0).round() as i64
                })
                .collect();
            for c in cents.windows(2) {
                let step = c[1] - c[0];
                assert!((-200..=200).contains(&step), "{step}");
                steps.insert(step);
            }
        }
        // Every step size turns up over 9,980 steps (each about 25 times).
        assert_eq!(steps.len(), 401);
        assert_eq!(two_decimals(-5), "-0.05");
        assert_eq!(two_decimals(1230), "12.30");
        assert_eq!(two_decimals(0), "0.00");
        assert_eq!(random_walks(3, 20, 500)[7].points, walks[7].points);
    }

    #[test]
    fn same_seed_same_stream() {
        let a = super::super::series::put_stream(&generate(7, 30, 1)).expect("stream");
        let b = super::super::series::put_stream(&generate(7, 30, 1)).expect("stream");
        let c = super::super::series::put_stream(&generate(8, 30, 1)).expect("stream");
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn drawn_bits_follow_the_draws() {
        // A uniform draw over 0.3 rounded to 0.01 is one of 30 values (31 with partial ends).
        let bits = rounded_uniform_bits(20.0, 0.3, 0.01);
        assert!((30f64.log2()..31f64.log2()).contains(&bits), "{bits}");
        assert_eq!(ulp_scale(1.0), 52.0);
        assert_eq!(ulp_scale(48.0), 47.0);
        let (series, drawn) = generate_drawn(3, 40, 1);
        assert_eq!(series.len(), drawn.len());
        for (s, d) in series.iter().zip(&drawn) {
            assert_eq!(s.metric, d.metric);
            assert_eq!(s.points.len(), d.points);
            let per_value = d.value_bits / d.points as f64;
            // Full-precision percentages carry about 49 bits; byte gauges 23; error counters
            // under one.
            let expected = match d.metric {
                "gen.cpu.pct" => 45.0..54.0,
                "gen.mem.used" => 22.9..23.0,
                "gen.http.errors" => 0.0..1.5,
                _ => 0.0..64.0,
            };
            assert!(expected.contains(&per_value), "{}: {per_value}", d.metric);
        }
        assert!(information_table(&drawn).contains("| gen.cpu.pct |"));
    }

    #[test]
    fn series_are_strictly_increasing_and_mixed() {
        let series = generate(1, 100, 1);
        let mut intervals = std::collections::BTreeSet::new();
        for s in &series {
            assert!(s.points.windows(2).all(|w| w[0].0 < w[1].0), "{}", s.metric);
            assert!(s.points.iter().all(|p| p.1.parse::<f64>().is_ok()));
            if let [a, b, ..] = &s.points[..] {
                intervals.insert(b.0 - a.0);
            }
        }
        assert!(intervals.iter().any(|i| *i <= 15));
        assert!(intervals.iter().any(|i| *i >= 290));
        let metrics: std::collections::BTreeSet<&str> =
            series.iter().map(|s| s.metric.as_str()).collect();
        assert_eq!(metrics.len(), KINDS.len());
    }
}
