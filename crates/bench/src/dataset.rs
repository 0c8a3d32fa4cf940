//! A deterministic put stream: `series` series of 20 metrics with host, dc, rack and env tags;
//! one point per series every 10 s, recent times (so every peer's retention accepts them);
//! values like real gauges and counters (slow random walks, a third of them floats).

/// The 20 metric names of the stream.
pub(crate) const METRICS: [&str; 20] = [
    "sys.cpu.user",
    "sys.cpu.system",
    "sys.cpu.iowait",
    "sys.mem.free",
    "sys.mem.cached",
    "sys.load.1m",
    "net.bytes.in",
    "net.bytes.out",
    "net.packets.in",
    "net.packets.out",
    "disk.read.bytes",
    "disk.write.bytes",
    "disk.used.pct",
    "proc.count",
    "proc.threads",
    "app.requests",
    "app.errors",
    "app.latency.p99",
    "app.queue.depth",
    "app.gc.pause",
];

/// The put lines of one run, series by series within each timestamp.
#[derive(Debug)]
pub(crate) struct Dataset {
    /// Lines of each series, in time order.
    per_series: Vec<Vec<u8>>,
}

/// xorshift64*: deterministic and fast; the same seed gives the same numbers.
#[derive(Debug)]
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    /// A generator from any seed (xorshift must not start at zero).
    pub(crate) fn seeded(seed: u64) -> Rng {
        Rng((seed ^ 0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, n).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

pub(crate) fn generate(points: usize, series: usize) -> Dataset {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let per = points.div_ceil(series);
    let start = now - (per as u64) * 10 - 3600;
    let start = start - start % 3600;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let metrics = METRICS;
    let mut per_series = Vec::with_capacity(series);
    let mut emitted = 0usize;
    for s in 0..series {
        let metric = metrics[s % metrics.len()];
        let host = s / metrics.len();
        let tags = format!(
            "host=web{host:05} dc=dc{} rack=r{} env=prod",
            host % 4,
            host % 40
        );
        let float = s % 3 == 0;
        let counter =
            metric.contains("bytes") || metric.contains("packets") || metric.contains("requests");
        let mut level = (rng.next() % 1000) as i64;
        let mut lines = Vec::with_capacity(per * 90);
        for i in 0..per {
            if emitted >= points {
                break;
            }
            let ts = start + (i as u64) * 10;
            let step = (rng.next() % 21) as i64 - 10;
            level = if counter {
                level + step.abs() * 100
            } else {
                (level + step).max(0)
            };
            let line = if float {
                format!("put {metric} {ts} {}.{} {tags}\n", level / 100, level % 100)
            } else {
                format!("put {metric} {ts} {level} {tags}\n")
            };
            lines.extend_from_slice(line.as_bytes());
            emitted += 1;
        }
        per_series.push(lines);
    }
    Dataset { per_series }
}

impl Dataset {
    pub(crate) fn total_bytes(&self) -> usize {
        self.per_series.iter().map(Vec::len).sum()
    }

    /// One byte stream per connection; each series goes to one connection, its points
    /// interleaved with the other series' by time, as collectors send them.
    pub(crate) fn split(&self, connections: usize) -> Vec<Vec<u8>> {
        let mut out: Vec<Vec<u8>> = vec![Vec::new(); connections];
        let mut cursors: Vec<usize> = vec![0; self.per_series.len()];
        loop {
            let mut any = false;
            for (s, lines) in self.per_series.iter().enumerate() {
                let at = cursors[s];
                if at >= lines.len() {
                    continue;
                }
                let end = lines[at..]
                    .iter()
                    .position(|b| *b == b'\n')
                    .map_or(lines.len(), |p| at + p + 1);
                out[s % connections].extend_from_slice(&lines[at..end]);
                cursors[s] = end;
                any = true;
            }
            if !any {
                return out;
            }
        }
    }
}
