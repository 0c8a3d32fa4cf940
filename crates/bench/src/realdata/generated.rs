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

    /// The next value's text, `secs` after the previous one.
    fn step(&mut self, rng: &mut Rng, secs: u64) -> String {
        let secs = secs as f64;
        let noise = rng.unit() - 0.5;
        match self.kind {
            Kind::CpuPct => {
                self.level = (self.level + noise * 4.0).clamp(0.0, 100.0);
                let busy = (self.level + (rng.unit() - 0.5) * 2.0).clamp(0.0, 100.0);
                format!("{busy}")
            }
            Kind::MemoryBytes => {
                self.level = (self.level + noise * 8e6).max(1e8);
                format!("{:.0}", self.level)
            }
            Kind::NetBytes => {
                if rng.below(4000) == 0 {
                    self.level = 0.0; // the process restarted
                }
                self.level += (self.rate * secs * (0.5 + rng.unit())).floor();
                format!("{:.0}", self.level)
            }
            Kind::LatencyMs => {
                self.level = (self.level * (1.0 + noise * 0.05)).clamp(1.0, 2000.0);
                let spike = if rng.below(200) == 0 { 10.0 } else { 1.0 };
                let v = self.level * spike * (1.0 + (rng.unit() - 0.5) * 0.6);
                format!("{v:.3}")
            }
            Kind::Temperature => {
                self.level += noise * 0.3;
                format!("{:.2}", self.level)
            }
            Kind::DiskUsedPct => {
                self.level += self.rate * secs * (0.5 + rng.unit());
                if rng.below(3000) == 0 {
                    self.level *= 0.7; // a cleanup
                }
                format!("{}", 100.0 * self.level / 500e9)
            }
            Kind::Errors => {
                if rng.below(5000) == 0 {
                    self.level = 0.0;
                }
                if rng.unit() < self.rate {
                    self.level += 1.0 + rng.below(5) as f64;
                }
                format!("{:.0}", self.level)
            }
        }
    }
}

/// `series` series over `days` days from the seed.
pub(crate) fn generate(seed: u64, series: usize, days: u64) -> Vec<Series> {
    let mut rng = Rng::seeded(seed);
    let span = days.max(1) * 86_400;
    let total_weight: u64 = KINDS.iter().map(|k| k.2).sum();
    let mut out = Vec::with_capacity(series);
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
        while t < to {
            // A gap of 5 minutes to 2 hours about once in 3,000 points.
            if rng.below(3000) == 0 {
                t += 300 + rng.below(6900);
                t -= t % interval;
                continue;
            }
            let ts = START + t + rng.below(jitter);
            let since = if last_sent == 0 {
                interval
            } else {
                ts - last_sent
            };
            let value = walk.step(&mut rng, since);
            points.push((ts, value));
            last_sent = ts;
            t += interval;
        }
        if points.is_empty() {
            continue;
        }
        out.push(Series {
            metric: metric.to_string(),
            tags: vec![
                ("host".to_string(), format!("h{i:04}")),
                ("dc".to_string(), format!("dc{}", i % 3)),
            ],
            points,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let a = super::super::series::put_stream(&generate(7, 30, 1)).expect("stream");
        let b = super::super::series::put_stream(&generate(7, 30, 1)).expect("stream");
        let c = super::super::series::put_stream(&generate(8, 30, 1)).expect("stream");
        assert_eq!(a, b);
        assert_ne!(a, c);
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
