//! Downsampling: `interval-function[-fill]` specifications; fixed-interval buckets aligned
//! to the Unix epoch or calendar buckets in a time zone (OpenTSDB's rules: bucket timestamp =
//! bucket start, values reduced with the function's floating-point path, fill policies for
//! empty buckets).

use hourglass_core::calendar::CalendarInterval;
use hourglass_core::time::Tz;

use super::aggregator::Aggregator;
use super::fold::{Accumulator, Fold, Running, with_fold};
use crate::cell_codec::{HOUR_MS, MemberSummary};
use crate::num::Sample;
use crate::{Error, Result};

/// What an empty bucket becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FillPolicy {
    /// Not emitted (cross-series interpolation fills it).
    None,
    Zero,
    /// NaN, written `"NaN"`.
    Nan,
    /// NaN, written `null`.
    Null,
    /// Accepted, as OpenTSDB does, but fails when an empty bucket needs it.
    Scalar,
}

impl FillPolicy {
    pub fn parse(name: &str) -> Result<FillPolicy> {
        match name.to_ascii_lowercase().as_str() {
            "none" => Ok(FillPolicy::None),
            "zero" => Ok(FillPolicy::Zero),
            "nan" => Ok(FillPolicy::Nan),
            "null" => Ok(FillPolicy::Null),
            "scalar" => Ok(FillPolicy::Scalar),
            _ => Err(Error::invalid(format!("Unrecognized fill policy: {name}"))),
        }
    }
}

/// A parsed downsampling specification.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DownsampleSpec {
    /// Bucket width in ms; 0 reduces the whole query range to one point (`0all`).
    pub interval_ms: i64,
    /// Calendar buckets (`1dc`, or `useCalendar`) in the query's time zone.
    pub calendar: Option<CalendarInterval>,
    /// The interval in calendar units, when it reads as one (what `useCalendar` switches to).
    units: Option<CalendarInterval>,
    pub function: Aggregator,
    pub fill: FillPolicy,
}

/// OpenTSDB's `DateTime.parseDuration`: leading digits, then a unit taken from the last
/// character only (`ms` when the one before it is `m`); in milliseconds.
pub fn parse_duration(text: &str) -> Result<i64> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    if digits == text.len() {
        return Err(Error::invalid(format!(
            "Invalid duration, must have an integer and unit: {text}"
        )));
    }
    if digits == 0 {
        return Err(Error::invalid(format!("Invalid duration (number): {text}")));
    }
    let n: i64 = text[..digits]
        .parse()
        .map_err(|_| Error::invalid(format!("Invalid duration (number): {text}")))?;
    if n <= 0 {
        return Err(Error::invalid(format!("Zero or negative duration: {text}")));
    }
    let bytes = text.as_bytes();
    let last = bytes[bytes.len() - 1].to_ascii_lowercase();
    let before_last = bytes
        .len()
        .checked_sub(2)
        .map(|i| bytes[i].to_ascii_lowercase());
    let unit: i64 = match last {
        b's' if before_last == Some(b'm') && bytes.len() - 2 >= digits => 1,
        b's' => 1000,
        b'm' => 60_000,
        b'h' => 3_600_000,
        b'd' => 86_400_000,
        b'w' => 604_800_000,
        b'n' => 2_592_000_000,
        b'y' => 31_536_000_000,
        _ => return Err(Error::invalid(format!("Invalid duration (suffix): {text}"))),
    };
    n.checked_mul(unit)
        .ok_or_else(|| Error::invalid(format!("Invalid duration (number): {text}")))
}

impl DownsampleSpec {
    pub fn parse(spec: &str) -> Result<DownsampleSpec> {
        // Java's split drops trailing empty parts.
        let mut parts: Vec<&str> = spec.split('-').collect();
        while parts.last() == Some(&"") {
            parts.pop();
        }
        if parts.len() < 2 {
            return Err(Error::invalid(format!(
                "Invalid downsampling specifier '{spec}': must provide at least interval and function"
            )));
        }
        if parts.len() > 3 {
            return Err(Error::invalid(format!(
                "Invalid downsampling specifier '{spec}': must consist of interval, function, and optional fill policy"
            )));
        }
        let (interval_ms, calendar, units) = if parts[0].contains("all") {
            (0, false, None)
        } else if let Some(d) = parts[0].strip_suffix('c') {
            let ms = parse_duration(d)?;
            (ms, true, Some(CalendarInterval::parse(d, Tz::UTC)?))
        } else {
            let units = CalendarInterval::parse(parts[0], Tz::UTC).ok();
            (parse_duration(parts[0])?, false, units)
        };
        let function = Aggregator::parse(parts[1])
            .map_err(|_| Error::invalid(format!("No such downsampling function: {}", parts[1])))?;
        if function == Aggregator::None {
            return Err(Error::invalid(
                "cannot use the NONE aggregator for downsampling",
            ));
        }
        let fill = match parts.get(2) {
            Some(f) => FillPolicy::parse(f)?,
            None => FillPolicy::None,
        };
        Ok(DownsampleSpec {
            interval_ms,
            calendar: if calendar { units } else { None },
            units,
            function,
            fill,
        })
    }

    /// Fixed buckets of `interval_ms` aligned to the epoch.
    pub fn fixed(interval_ms: i64, function: Aggregator, fill: FillPolicy) -> DownsampleSpec {
        DownsampleSpec {
            interval_ms,
            calendar: None,
            units: None,
            function,
            fill,
        }
    }

    /// Whether a bucket starts at `ms` (so a series' points can be downsampled in two parts
    /// split there).
    pub fn is_boundary(&self, ms: i64) -> bool {
        match &self.calendar {
            Some(cal) => cal.floor(ms) == ms,
            None => self.interval_ms > 0 && ms.rem_euclid(self.interval_ms) == 0,
        }
    }

    /// Places calendar buckets in `tz`; `use_calendar` (the request's `useCalendar`) turns
    /// them on for a spec written without `c`.
    pub fn in_zone(mut self, tz: Tz, use_calendar: bool) -> Result<DownsampleSpec> {
        if self.interval_ms == 0 {
            return Ok(self);
        }
        if self.calendar.is_some() || use_calendar {
            let mut units = self.units.ok_or_else(|| {
                Error::invalid(format!(
                    "Invalid calendar interval: {} ms",
                    self.interval_ms
                ))
            })?;
            units.tz = tz;
            self.calendar = Some(units);
        }
        Ok(self)
    }

    /// Downsamples one series' points (time-ordered, ms). `window` is the scan window
    /// `[start, end)` in ms over which fill policies emit every bucket; `query` is the
    /// user's `[start, end)` used by `0all`.
    pub fn apply(
        &self,
        points: &[(i64, f64)],
        window: (i64, i64),
        query: (i64, i64),
    ) -> Result<Vec<(i64, f64)>> {
        let mut d = Downsampler::new(*self, query);
        for (t, v) in points {
            d.push(*t, *v);
        }
        d.finish(window, u64::MAX)
    }
}

/// Downsampling one series as its points arrive (in time order): only the current bucket's
/// reduction so far and the finished buckets are held.
#[derive(Debug)]
pub struct Downsampler {
    spec: DownsampleSpec,
    query: (i64, i64),
    /// The current bucket, `[start, end)`.
    bucket: Option<(i64, i64)>,
    current: Accumulator,
    /// Finished buckets of earlier parts (see [`Downsampler::append`]), then `out`'s.
    earlier: Vec<Vec<(i64, f64)>>,
    out: Vec<(i64, f64)>,
    /// Where this series' points will stop (ms), to size `out` from its first row.
    until: Option<i64>,
    /// Points before this time (ms) are not taken (see [`Downsampler::starting_at`]).
    from: i64,
}

impl Downsampler {
    pub fn new(spec: DownsampleSpec, query: (i64, i64)) -> Downsampler {
        Downsampler {
            spec,
            query,
            bucket: None,
            current: Accumulator::new(spec.function),
            earlier: Vec::new(),
            out: Vec::new(),
            until: None,
            from: i64::MIN,
        }
    }

    /// Says the points read start at `scan_start_ms`: those before the first bucket
    /// boundary at or after it are not taken, as OpenTSDB's downsampler, sought to the scan
    /// start, begins at that boundary (a bucket the scan reads only the end of is left
    /// out, or filled, rather than reduced from part of its points). `0all` takes every
    /// point of the query's range.
    pub fn starting_at(mut self, scan_start_ms: i64) -> Downsampler {
        self.from = match &self.spec.calendar {
            _ if self.spec.interval_ms == 0 => i64::MIN,
            Some(cal) => {
                let floor = cal.floor(scan_start_ms);
                if floor < scan_start_ms {
                    cal.next(floor)
                } else {
                    floor
                }
            }
            None => {
                let up = scan_start_ms.saturating_add(self.spec.interval_ms - 1);
                up - up.rem_euclid(self.spec.interval_ms)
            }
        };
        self
    }

    /// Says the points will stop before `until_ms`: the buckets of the first row pushed
    /// then size the output for the hours left (no regrowing for dense series).
    pub fn expect_until(mut self, until_ms: i64) -> Downsampler {
        self.until = Some(until_ms);
        self
    }

    /// Adds the next point (times must not go back); returns how many buckets it closed.
    pub fn push(&mut self, t: i64, v: f64) -> usize {
        if t < self.from {
            return 0;
        }
        if self.spec.interval_ms == 0 {
            if t >= self.query.0 && t < self.query.1 {
                self.current.add(v);
            }
            return 0;
        }
        let mut closed = 0;
        match self.bucket {
            Some((_, end)) if t < end => {}
            previous => {
                closed = self.close();
                self.bucket = Some(self.bucket_of(t, previous));
            }
        }
        self.current.add(v);
        closed
    }

    /// Adds points in time order (times must not go back); returns how many buckets they
    /// closed.
    pub fn push_all<V: Sample>(&mut self, times: &[i64], values: &[V]) -> usize {
        let skip = times.partition_point(|t| *t < self.from);
        let (times, values) = (&times[skip..], values.get(skip..).unwrap_or_default());
        if self.spec.interval_ms == 0 {
            return times
                .iter()
                .zip(values)
                .map(|(t, v)| self.push(*t, v.as_f64()))
                .sum();
        }
        let first_row = self.out.capacity() == 0 && self.bucket.is_none();
        if first_row && self.spec.calendar.is_none() {
            // Fixed buckets: the row's own buckets are at most its points and its span's
            // intervals, known before its buckets close (sized after, they would be
            // regrown from nothing as they close).
            if let (Some(first), Some(last)) = (times.first(), times.last()) {
                let spanned = (last - first).max(0) / self.spec.interval_ms + 1;
                self.reserve_for(*first, spanned.min(times.len() as i64));
            }
        }
        let (closed, opened) = match self.spec.calendar {
            None => with_fold!(self.current.running, F => self.push_fixed::<F, V>(times, values),
                _ => self.push_each(times, values)),
            Some(_) => self.push_each(times, values),
        };
        if let (true, Some(first)) = (first_row && self.spec.calendar.is_some(), times.first()) {
            self.reserve_for(*first, opened as i64);
        }
        closed
    }

    /// Room in the output for the buckets of the hours from `first` (ms) to
    /// [`Downsampler::expect_until`]'s end, at `per_row` buckets an hour (a first row's):
    /// never more than fixed buckets could be.
    fn reserve_for(&mut self, first: i64, per_row: i64) {
        let Some(until) = self.until else {
            return;
        };
        let hours = (until - first).max(0) / 3_600_000 + 1;
        let mut expected = per_row.saturating_mul(hours);
        if self.spec.calendar.is_none() {
            expected = expected.min((until - first).max(0) / self.spec.interval_ms + 2);
        }
        let expected = usize::try_from(expected).unwrap_or(0).min(1 << 24);
        self.out.reserve(expected.saturating_sub(self.out.len()));
    }

    /// Whether [`Downsampler::push_summaries`] can stand for pushing the points of one hour:
    /// fixed one-hour buckets, reduced by sum, avg, min, max or count.
    pub fn takes_summaries(spec: &DownsampleSpec) -> bool {
        spec.calendar.is_none()
            && spec.interval_ms == HOUR_MS
            && matches!(
                Running::of(spec.function),
                Running::Sum | Running::Avg | Running::Min | Running::Max | Running::Count
            )
    }

    /// Whether the summaries [`Downsampler::push_summaries`] takes must hold each hour's least
    /// and greatest values (a downsample by min or max), not only its sum.
    pub fn summaries_need_extremes(spec: &DownsampleSpec) -> bool {
        matches!(Running::of(spec.function), Running::Min | Running::Max)
    }

    /// Adds the points of each hour starting at a summary's time (ms) at once, by the
    /// summary, in time order, none of them pushed before; later points must not go back.
    /// Only when [`Downsampler::takes_summaries`]. Returns how many buckets they closed.
    pub fn push_summaries(&mut self, summaries: &[(i64, MemberSummary)]) -> Result<usize> {
        if !Downsampler::takes_summaries(&self.spec) {
            return Err(Error::Internal(
                "a summary pushed into buckets it does not fill".into(),
            ));
        }
        let extremes = Downsampler::summaries_need_extremes(&self.spec);
        with_fold!(self.current.running, F => self.push_summaries_folded::<F>(summaries, extremes),
            _ => Err(Error::Internal("a summary pushed into buckets it does not fill".into())))
    }

    /// [`Downsampler::push_summaries`] with the fold of the downsampling function known:
    /// each summary closes the bucket before it (its value as `close` takes it) and opens
    /// its hour's with the summary's state.
    fn push_summaries_folded<F: Fold>(
        &mut self,
        summaries: &[(i64, MemberSummary)],
        extremes: bool,
    ) -> Result<usize> {
        let mut closed = 0;
        for (start, s) in summaries {
            let start = *start;
            if start.rem_euclid(HOUR_MS) != 0 {
                return Err(Error::Internal(
                    "a summary pushed into buckets it does not fill".into(),
                ));
            }
            if self.bucket.is_some_and(|(_, end)| start < end) {
                return Err(Error::Internal(
                    "a summary pushed into a bucket already begun".into(),
                ));
            }
            if start < self.from {
                // One-hour buckets from an hour: never before the first boundary.
                continue;
            }
            if extremes && !s.extremes {
                return Err(Error::Internal(
                    "a summary without its least and greatest values pushed into min or max".into(),
                ));
            }
            let c = &mut self.current;
            match self.bucket {
                Some((open, _)) if c.seen > 0 => {
                    self.out.push((open, F::value(c.acc, c.finite)));
                    closed += 1;
                }
                Some(_) => {}
                None => {
                    if let (0, Some(until)) = (self.out.capacity(), self.until) {
                        let hours = (until - start).max(0) / HOUR_MS + 2;
                        self.out
                            .reserve(usize::try_from(hours).unwrap_or(0).min(1 << 24));
                    }
                }
            }
            self.bucket = Some((start, start + HOUR_MS));
            let count = u64::from(s.count);
            c.seen = count;
            c.finite = count;
            c.acc = match c.running {
                // Folds start from 0.0; a summary's sum may have started from -0.0 (written
                // so before): they differ only in the sign of a zero, which adding 0.0
                // settles.
                Running::Sum | Running::Avg => 0.0 + s.sum,
                Running::Min => s.min,
                Running::Max => s.max,
                _ => F::START,
            };
        }
        Ok(closed)
    }

    /// [`Downsampler::push_all`] for fixed buckets and a function folded as values arrive:
    /// one pass, the bucket's fold in registers. Returns (buckets closed, buckets opened).
    fn push_fixed<F: Fold, V: Sample>(&mut self, times: &[i64], values: &[V]) -> (usize, usize) {
        let interval = self.spec.interval_ms;
        let (mut start, mut end) = self.bucket.unwrap_or((i64::MIN, i64::MIN));
        let c = &mut self.current;
        let (mut acc, mut finite, mut seen) = (c.acc, c.finite, c.seen);
        let (mut closed, mut opened) = (0, 0);
        let mut have_bucket = self.bucket.is_some();
        let n = times.len().min(values.len());
        let mut i = 0;
        // The last bucket's points: regular times put as many in the next.
        let mut last_run = 0;
        while i < n {
            let t = times[i];
            if t >= end {
                if seen > 0 {
                    self.out.push((start, F::value(acc, finite)));
                    closed += 1;
                }
                // The next bucket is most often the one after: its start is the last one's
                // end (buckets start at multiples of the interval), without a division.
                start = if have_bucket && t.checked_sub(end).is_some_and(|d| d < interval) {
                    end
                } else {
                    t - t.rem_euclid(interval)
                };
                have_bucket = true;
                end = start + interval;
                (acc, finite, seen) = (F::START, 0, 0);
                opened += 1;
                // Regular times: the buckets from here holding as many points as the last
                // one, each closed by the point after it, folded in one go (no bucket's
                // fold waits on the one before it).
                let m = full_buckets(&times[i..n], start, interval, last_run);
                if m > 0 {
                    let k = last_run;
                    let full = &values[i..i + m * k];
                    // The usual counts unrolled (ten-second points in minutes, fifteen,
                    // thirty, five; minutes in hours).
                    match k {
                        2 => fold_full::<F, V, 2>(&mut self.out, full, start, interval),
                        4 => fold_full::<F, V, 4>(&mut self.out, full, start, interval),
                        6 => fold_full::<F, V, 6>(&mut self.out, full, start, interval),
                        12 => fold_full::<F, V, 12>(&mut self.out, full, start, interval),
                        _ => self.out.extend(
                            full.chunks_exact(k)
                                .zip(0i64..)
                                .map(|(run, j)| (start + j * interval, fold_of::<F, V>(run))),
                        ),
                    }
                    closed += m;
                    opened += m - 1;
                    i += m * k;
                    // The last of them, closed: the next point opens the one after it.
                    start += (m as i64 - 1) * interval;
                    end = start + interval;
                    continue;
                }
            }
            // The points inside this bucket: often the rest of the row.
            let run = if times[n - 1] < end {
                n
            } else {
                i + run_end(&times[i..n], end, last_run)
            };
            last_run = run - i;
            F::add_run(&mut acc, &mut finite, &values[i..run]);
            seen += (run - i) as u64;
            i = run;
        }
        if opened > 0 {
            self.bucket = Some((start, end));
        }
        let c = &mut self.current;
        (c.acc, c.finite, c.seen) = (acc, finite, seen);
        (closed, opened)
    }

    /// [`Downsampler::push_all`] a point at a time.
    fn push_each<V: Sample>(&mut self, times: &[i64], values: &[V]) -> (usize, usize) {
        let (mut closed, mut opened) = (0, 0);
        for (&t, v) in times.iter().zip(values) {
            if !matches!(self.bucket, Some((_, end)) if t < end) {
                opened += 1;
            }
            closed += self.push(t, v.as_f64());
        }
        (closed, opened)
    }

    /// Finished buckets held.
    pub fn buckets(&self) -> usize {
        self.out.len() + self.earlier.iter().map(Vec::len).sum::<usize>()
    }

    fn bucket_of(&self, t: i64, previous: Option<(i64, i64)>) -> (i64, i64) {
        match (&self.spec.calendar, previous) {
            (Some(cal), Some((_, mut end))) if t >= end => {
                // Step on from the last bucket, as OpenTSDB does.
                let mut start = end;
                while t >= end {
                    start = end;
                    let next = cal.next(end);
                    if next <= end {
                        break;
                    }
                    end = next;
                }
                (start, end)
            }
            (Some(cal), _) => {
                let start = cal.floor(t);
                (start, cal.next(start).max(start + 1))
            }
            (None, _) => {
                let start = t - t.rem_euclid(self.spec.interval_ms);
                (start, start + self.spec.interval_ms)
            }
        }
    }

    fn close(&mut self) -> usize {
        match (self.bucket, self.current.take(self.spec.function)) {
            (Some((start, _)), Some(v)) => {
                self.out.push((start, v));
                1
            }
            _ => 0,
        }
    }

    fn align(&self, t: i64) -> i64 {
        match &self.spec.calendar {
            Some(cal) => cal.floor(t),
            None => t - t.rem_euclid(self.spec.interval_ms),
        }
    }

    fn next_bucket(&self, start: i64) -> i64 {
        match &self.spec.calendar {
            Some(cal) => cal.next(start),
            None => start + self.spec.interval_ms,
        }
    }

    /// Appends the state of the same series over later times, which start on a bucket
    /// boundary (see [`DownsampleSpec::is_boundary`]).
    /// `0all` has one bucket over the whole range and is never split (its parts'
    /// reductions do not combine exactly).
    pub fn append(&mut self, mut later: Downsampler) {
        self.close();
        later.close();
        // Kept as pieces: joined once when finished, or aggregated where they lie (see
        // `Downsampler::finish_pieces`).
        self.earlier.push(std::mem::take(&mut self.out));
        self.earlier.append(&mut later.earlier);
        self.out = later.out;
        self.bucket = later.bucket;
    }

    /// [`Downsampler::finish`] in the pieces the buckets were read in (one piece for each
    /// [`Downsampler::append`], in time order), not joined where there is no fill policy;
    /// else the one piece `finish` gives.
    pub fn finish_pieces(
        mut self,
        window: (i64, i64),
        max_buckets: u64,
    ) -> Result<Vec<Vec<(i64, f64)>>> {
        if self.spec.interval_ms == 0 || self.spec.fill != FillPolicy::None {
            return Ok(vec![self.finish(window, max_buckets)?]);
        }
        self.close();
        let mut pieces = std::mem::take(&mut self.earlier);
        pieces.push(std::mem::take(&mut self.out));
        Ok(pieces)
    }

    /// The buckets. With a fill policy every bucket of the scan `window` `[start, end)` is
    /// present, empty ones filled; more than `max_buckets` of them is an error.
    pub fn finish(mut self, window: (i64, i64), max_buckets: u64) -> Result<Vec<(i64, f64)>> {
        if self.spec.interval_ms == 0 {
            let function = self.spec.function;
            return Ok(self
                .current
                .take(function)
                .map(|v| (self.query.0, v))
                .into_iter()
                .collect());
        }
        self.close();
        if !self.earlier.is_empty() {
            // The pieces of a split read put together, a copy each (an iterator chaining
            // them cost about 40 instructions a bucket).
            let mut joined = Vec::with_capacity(self.buckets());
            for piece in &self.earlier {
                joined.extend_from_slice(piece);
            }
            joined.extend_from_slice(&self.out);
            self.earlier = Vec::new();
            self.out = joined;
        }
        let fill = match self.spec.fill {
            FillPolicy::None => return Ok(self.out),
            FillPolicy::Zero => 0.0,
            FillPolicy::Nan | FillPolicy::Null => f64::NAN,
            FillPolicy::Scalar => f64::NAN,
        };
        let mut filled = Vec::with_capacity(self.out.len());
        let mut have = self.out.iter().copied().peekable();
        // The scan's end, and at least past the bucket holding the query's end: OpenTSDB
        // stops at the calendar bucket holding its scan's end, which drops the end's own
        // bucket in some zones (README, "Differences from OpenTSDB 2.4").
        let stop = self
            .align(window.1)
            .max(self.next_bucket(self.align(self.query.1)));
        let mut bucket = self.align(window.0);
        let mut count = 0u64;
        while bucket < stop {
            while let Some(p) = have.next_if(|p| p.0 < bucket) {
                filled.push(p);
            }
            match have.next_if(|p| p.0 == bucket) {
                Some(p) => filled.push(p),
                None if self.spec.fill == FillPolicy::Scalar => {
                    return Err(Error::invalid("unhandled fill policy"));
                }
                None => filled.push((bucket, fill)),
            }
            count += 1;
            if count > max_buckets {
                return Err(Error::LimitExceeded(format!(
                    "Sorry, this query would fill more than {max_buckets} downsampling buckets. \
                     Please use a wider interval or decrease your time range."
                )));
            }
            let next = self.next_bucket(bucket);
            if next <= bucket {
                break;
            }
            bucket = next;
        }
        filled.extend(have);
        Ok(filled)
    }
}

/// The buckets of `values`, `K` values each, the first starting at `start`, appended to
/// `out`: [`Fold::add_run`] of each, its length known when compiled.
#[inline(always)]
fn fold_full<F: Fold, V: Sample, const K: usize>(
    out: &mut Vec<(i64, f64)>,
    values: &[V],
    start: i64,
    interval: i64,
) {
    let (runs, _) = values.as_chunks::<K>();
    out.extend(
        runs.iter()
            .zip(0i64..)
            .map(|(run, j)| (start + j * interval, fold_of::<F, V>(run))),
    );
}

/// A bucket's value from its points alone: [`Fold::add_run`] from the start.
#[inline(always)]
fn fold_of<F: Fold, V: Sample>(run: &[V]) -> f64 {
    let (mut acc, mut finite) = (F::START, 0);
    F::add_run(&mut acc, &mut finite, run);
    F::value(acc, finite)
}

/// How many buckets from the one starting at `start` (the first of `times` in it) hold
/// exactly `k` of `times` each, every one of them followed by a time of a later bucket
/// (closed): `times` not going back, the first bucket's times are its first `k`, the next
/// bucket's the `k` after, and so on. Zero when `k` is.
#[inline]
fn full_buckets(times: &[i64], start: i64, interval: i64, k: usize) -> usize {
    if k == 0 {
        return 0;
    }
    let mut m = 0;
    let mut end = start;
    // Bucket `m` is full and closed: its last time under its end, the next at or past it.
    while let (Some(last), Some(next), Some(e)) = (
        times.get(m * k + k - 1),
        times.get(m * k + k),
        end.checked_add(interval),
    ) && *last < e
        && *next >= e
    {
        end = e;
        m += 1;
    }
    m
}

/// The index of the first of `times` at or past `end`, `times` not going back (the length
/// when none is): guessed as `hint` (the last bucket's count of points), then from their
/// first step, as regular times fall, each guess taken when its neighbours bear it out (a
/// time under `end` has only times under it before it, one at or past it only such times
/// after it), else found by looking at each time. The hint spares a division a bucket.
#[inline]
fn run_end(times: &[i64], end: i64, hint: usize) -> usize {
    if hint >= 1 && hint < times.len() && times[hint - 1] < end && times[hint] >= end {
        return hint;
    }
    if let [t0, t1, ..] = times
        && t1 > t0
        && *t0 < end
        && let Some(step) = t1.checked_sub(*t0)
    {
        let gap = end.saturating_sub(*t0);
        let guess = gap / step + i64::from(gap % step != 0);
        if let Ok(k) = usize::try_from(guess)
            && k >= 1
            && k < times.len()
            && times[k - 1] < end
            && times[k] >= end
        {
            return k;
        }
    }
    times.iter().position(|t| *t >= end).unwrap_or(times.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs_with_opentsdb_messages() {
        let s = DownsampleSpec::parse("1m-avg").unwrap();
        assert_eq!(
            (s.interval_ms, s.calendar.is_some(), s.function, s.fill),
            (60_000, false, Aggregator::Avg, FillPolicy::None)
        );
        assert_eq!(
            DownsampleSpec::parse("1m-avg-").unwrap().fill,
            FillPolicy::None
        );
        assert_eq!(
            DownsampleSpec::parse("1dc-sum-NaN").unwrap().fill,
            FillPolicy::Nan
        );
        assert!(DownsampleSpec::parse("1dc-sum").unwrap().calendar.is_some());
        assert_eq!(DownsampleSpec::parse("0all-max").unwrap().interval_ms, 0);
        assert_eq!(DownsampleSpec::parse("500ms-min").unwrap().interval_ms, 500);
        assert_eq!(
            DownsampleSpec::parse("1xm-sum").unwrap().interval_ms,
            60_000,
            "only the last char is the unit"
        );
        let err = |s: &str| DownsampleSpec::parse(s).unwrap_err().to_string();
        assert_eq!(
            err("1m"),
            "Invalid downsampling specifier '1m': must provide at least interval and function"
        );
        assert_eq!(
            err("1m-avg-zero-x"),
            "Invalid downsampling specifier '1m-avg-zero-x': must consist of interval, function, and optional fill policy"
        );
        assert_eq!(err("1m-foo"), "No such downsampling function: foo");
        assert_eq!(
            err("1m-none"),
            "cannot use the NONE aggregator for downsampling"
        );
        assert_eq!(err("1m-avg-bogus"), "Unrecognized fill policy: bogus");
        assert_eq!(
            err("60-avg"),
            "Invalid duration, must have an integer and unit: 60"
        );
        assert_eq!(err("m-avg"), "Invalid duration (number): m");
        assert_eq!(err("0m-avg"), "Zero or negative duration: 0m");
        assert_eq!(err("1q-avg"), "Invalid duration (suffix): 1q");
    }

    /// The first time at or past a bucket's end: guessed from the first step and taken only
    /// when its neighbours bear it out.
    #[test]
    fn a_runs_end_is_the_first_time_at_or_past_the_end() {
        let regular: Vec<i64> = (0..100).map(|i| i * 10).collect();
        for end in [1, 10, 11, 59, 60, 61, 990, 991, 5_000] {
            let want = regular
                .iter()
                .position(|t| *t >= end)
                .unwrap_or(regular.len());
            for hint in [0, 1, 5, 6, 7, 99, 100, 1000] {
                assert_eq!(run_end(&regular, end, hint), want, "end {end} hint {hint}");
            }
        }
        // The first step's guess (index 2) wrong: a slower step after it, equal times.
        assert_eq!(run_end(&[0, 10, 11, 12, 50], 12, 0), 3);
        assert_eq!(run_end(&[0, 10, 10, 10, 40], 20, 0), 4);
        assert_eq!(run_end(&[0, 10, 30, 30, 40], 20, 0), 2);
        // A hint is taken only where the times bear it out.
        for hint in 0..7 {
            assert_eq!(run_end(&[0, 10, 11, 12, 50], 12, hint), 3, "hint {hint}");
            assert_eq!(run_end(&[0, 10, 10, 10, 40], 20, hint), 4, "hint {hint}");
        }
        // No second time, no step, or every time before the end.
        assert_eq!(run_end(&[5], 6, 0), 1);
        assert_eq!(run_end(&[5, 5, 9], 6, 0), 2);
        assert_eq!(run_end(&[i64::MIN, i64::MAX], i64::MAX, 0), 1);
    }

    /// Full buckets: exactly `k` times each, each closed by a time of a later bucket.
    #[test]
    fn full_buckets_hold_k_times_each_and_are_closed() {
        let regular: Vec<i64> = (0..20).map(|i| i * 10).collect();
        // Buckets of 60 from 0: six times each; the fourth (180..240) is not closed.
        assert_eq!(full_buckets(&regular, 0, 60, 6), 3);
        assert_eq!(full_buckets(&regular, 0, 60, 5), 0);
        assert_eq!(full_buckets(&regular, 0, 60, 7), 0);
        assert_eq!(full_buckets(&regular, 0, 60, 0), 0);
        assert_eq!(full_buckets(&regular, 0, 10, 1), 19);
        // A late time moves one into the next bucket: the run stops before it.
        let late = [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 121, 130];
        assert_eq!(full_buckets(&late, 0, 60, 6), 1);
        // A gap (no time in 60..120): the second bucket is not the next one.
        let gap = [0, 10, 20, 120, 130, 140, 150];
        assert_eq!(full_buckets(&gap, 0, 60, 3), 1);
        assert_eq!(full_buckets(&gap, 0, 30, 3), 1);
        assert_eq!(
            full_buckets(&[i64::MAX - 5, i64::MAX], i64::MAX - 5, 3, 1),
            1
        );
        assert_eq!(
            full_buckets(&[i64::MAX - 1, i64::MAX], i64::MAX - 1, 3, 1),
            0
        );
    }

    /// A first row's fixed buckets are sized before any closes, to the hours left until
    /// `expect_until` (never past it): sized after the row, they grew from nothing as they
    /// closed, and a piece of a split query reserved every bucket up to the query's end.
    #[test]
    fn a_first_rows_buckets_are_sized_before_they_close() {
        let spec = DownsampleSpec::parse("1m-avg").unwrap();
        let hour = 1_356_998_400_000i64;
        // Points every 10 s over the hour: 60 one-minute buckets, 59 closed by the row.
        let times: Vec<i64> = (0..360).map(|i| hour + i * 10_000).collect();
        let values = vec![1.0f64; times.len()];
        for (until, room) in [(hour + 3_600_000, 61), (hour + 3 * 3_600_000, 181)] {
            let mut d = Downsampler::new(spec, (hour, until)).expect_until(until);
            assert_eq!(d.push_all(&times, &values), 59);
            // The span's minutes to `until`, plus the bucket holding it and one more.
            assert_eq!(d.out.capacity(), room + 1, "until {until}");
        }
        // Sparse points: no more buckets an hour than the row had points, for the 11 hours
        // from the first point's to `until`'s.
        let sparse = [hour, hour + 1_800_000];
        let until = hour + 10 * 3_600_000;
        let mut d = Downsampler::new(spec, (hour, until)).expect_until(until);
        d.push_all(&sparse, &[1.0f64, 2.0]);
        assert_eq!(d.out.capacity(), 2 * 11);
    }

    #[test]
    fn buckets_align_to_the_epoch_and_reduce_as_doubles() {
        let s = DownsampleSpec::parse("1m-avg").unwrap();
        let pts = [
            (1356998430000, 1.0),
            (1356998459000, 2.0),
            (1356998460000, 4.0),
            (1356998580000, 8.0),
        ];
        let out = s
            .apply(
                &pts,
                (1356998400000, 1357002000000),
                (1356998400000, 1357002000000),
            )
            .unwrap();
        assert_eq!(
            out,
            vec![
                (1356998400000, 1.5),
                (1356998460000, 4.0),
                (1356998580000, 8.0)
            ],
            "empty minute not emitted"
        );
        let week = DownsampleSpec::parse("1w-sum").unwrap();
        let out = week
            .apply(&[(1356998400000, 1.0)], (0, i64::MAX), (0, i64::MAX))
            .unwrap();
        assert_eq!(out[0].0 % 604_800_000, 0);
        assert_eq!(
            out[0].0, 1356566400000,
            "weeks start on Thursdays (the epoch's weekday)"
        );
    }

    #[test]
    fn fill_policies_emit_every_bucket_of_the_window() {
        // OpenTSDB's example: 10:30..11:15 with 10m-avg-zero, scan window 10:00..12:00.
        let ten = 1356998400000 + 10 * 3_600_000;
        let s = DownsampleSpec::parse("10m-avg-zero").unwrap();
        let out = s
            .apply(
                &[(ten + 35 * 60_000, 5.0)],
                (ten, ten + 2 * 3_600_000),
                (ten + 30 * 60_000, ten + 75 * 60_000),
            )
            .unwrap();
        assert_eq!(out.len(), 12);
        assert_eq!(out[3], (ten + 30 * 60_000, 5.0));
        assert!(
            out.iter()
                .enumerate()
                .all(|(i, (t, v))| *t == ten + i as i64 * 600_000 && (i == 3 || *v == 0.0))
        );
        let nan = DownsampleSpec::parse("10m-avg-nan").unwrap();
        assert!(
            nan.apply(&[], (ten, ten + 1_200_000), (ten, ten))
                .unwrap()
                .iter()
                .all(|(_, v)| v.is_nan())
        );
        let scalar = DownsampleSpec::parse("10m-avg-scalar").unwrap();
        assert_eq!(
            scalar
                .apply(&[], (ten, ten + 1_200_000), (ten, ten))
                .unwrap_err()
                .to_string(),
            "unhandled fill policy"
        );
    }

    #[test]
    fn run_all_reduces_the_query_range_to_its_start() {
        let s = DownsampleSpec::parse("0all-sum").unwrap();
        let pts = [(100, 1.0), (200, 2.0), (300, 4.0)];
        assert_eq!(
            s.apply(&pts, (0, 1000), (150, 300)).unwrap(),
            vec![(150, 2.0)],
            "end exclusive"
        );
        assert!(s.apply(&pts, (0, 1000), (400, 500)).unwrap().is_empty());
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use crate::num::Num;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = f64> {
        crate::query::fold::test_value()
    }

    proptest! {
        /// Fixed buckets equal a naive group-by of floor(t / interval) reduced with the
        /// function, bit for bit (NaN and signed zeros included), whether points arrive one
        /// at a time or a row at a time; from a scan start, the buckets from the first
        /// boundary at or after it, whichever way the points arrive.
        #[test]
        fn buckets_match_a_naive_group_by(
            points in prop::collection::btree_map(0i64..10_000_000, value(), 0..200),
            interval in 1i64..600_000,
            func in prop::sample::select(vec!["sum", "zimsum", "avg", "min", "mimmax", "max", "count", "dev", "p90", "first", "last", "squareSum", "mult", "diff"]),
            rows in 1usize..5,
            scan_start in prop_oneof![Just(0i64), 0i64..10_000_000],
        ) {
            let pts: Vec<(i64, f64)> = points.into_iter().collect();
            let spec = DownsampleSpec::fixed(interval, Aggregator::parse(func).unwrap(), FillPolicy::None);
            let out = spec.apply(&pts, (0, 10_000_000), (0, 10_000_000)).unwrap();
            let mut naive = std::collections::BTreeMap::<i64, Vec<f64>>::new();
            for (t, v) in &pts {
                naive.entry(t / interval * interval).or_default().push(*v);
            }
            let want: Vec<(i64, u64)> = naive.into_iter().map(|(b, vs)| (b, spec.function.run_double(&vs).to_bits())).collect();
            let bits = |o: &[(i64, f64)]| o.iter().map(|(t, v)| (*t, v.to_bits())).collect::<Vec<_>>();
            prop_assert_eq!(bits(&out), want.clone());
            let from = (scan_start + interval - 1) / interval * interval;
            let want: Vec<(i64, u64)> = want.into_iter().filter(|(b, _)| *b >= from).collect();
            let mut one_at_a_time = Downsampler::new(spec, (0, 10_000_000)).starting_at(scan_start);
            for (t, v) in &pts {
                one_at_a_time.push(*t, *v);
            }
            prop_assert_eq!(bits(&one_at_a_time.finish((0, 10_000_000), u64::MAX).unwrap()), want.clone());
            // The same points in a few slices, as rows arrive.
            let mut d = Downsampler::new(spec, (0, 10_000_000)).starting_at(scan_start);
            let chunk = pts.len().div_ceil(rows).max(1);
            for part in pts.chunks(chunk) {
                let times: Vec<i64> = part.iter().map(|p| p.0).collect();
                // As stored values and as doubles: the same buckets.
                if rows % 2 == 0 {
                    let values: Vec<Num> = part.iter().map(|p| Num::Float(p.1)).collect();
                    d.push_all(&times, &values);
                } else {
                    let values: Vec<f64> = part.iter().map(|p| p.1).collect();
                    d.push_all(&times, &values);
                }
            }
            prop_assert_eq!(bits(&d.finish((0, 10_000_000), u64::MAX).unwrap()), want);
        }

        /// Regular times, now and then off their step (late, early, a gap), in rows: the
        /// buckets of as many points as the last one, folded together, equal a naive
        /// group-by bit for bit.
        #[test]
        fn regular_times_match_a_naive_group_by(
            step in 1i64..100,
            per_bucket in 1i64..14,
            skew in 0i64..3,
            offs in prop::collection::vec(prop_oneof![8 => Just(0i64), 1 => -3i64..3, 1 => 0i64..500], 1..1500),
            value_seed in any::<u64>(),
            func in prop::sample::select(vec!["sum", "avg", "min", "max", "count", "squareSum", "zimsum"]),
            rows in 1usize..7,
        ) {
            // An interval of about `per_bucket` steps (exactly, or a little off).
            let interval = step * per_bucket + skew;
            let mut t = 1_000;
            let mut pts: Vec<(i64, f64)> = Vec::new();
            for (i, off) in offs.iter().enumerate() {
                t = (t + step + off).max(t + 1);
                let bits = value_seed.rotate_left(i as u32 % 64) ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let v = match bits % 16 {
                    0 => f64::NAN,
                    1 => -0.0,
                    _ => (bits >> 11) as f64 / 1024.0 - 1e9,
                };
                pts.push((t, v));
            }
            let spec = DownsampleSpec::fixed(interval, Aggregator::parse(func).unwrap(), FillPolicy::None);
            let mut naive = std::collections::BTreeMap::<i64, Vec<f64>>::new();
            for (t, v) in &pts {
                naive.entry(t / interval * interval).or_default().push(*v);
            }
            let want: Vec<(i64, u64)> = naive.into_iter().map(|(b, vs)| (b, spec.function.run_double(&vs).to_bits())).collect();
            let mut d = Downsampler::new(spec, (0, i64::MAX / 2));
            for part in pts.chunks(pts.len().div_ceil(rows).max(1)) {
                let times: Vec<i64> = part.iter().map(|p| p.0).collect();
                let values: Vec<f64> = part.iter().map(|p| p.1).collect();
                d.push_all(&times, &values);
            }
            let got: Vec<(i64, u64)> = d.finish((0, i64::MAX / 2), u64::MAX).unwrap().iter().map(|(t, v)| (*t, v.to_bits())).collect();
            prop_assert_eq!(got, want);
        }

        /// `0all` reduces the query range's points the same way.
        #[test]
        fn whole_range_matches_the_function(
            points in prop::collection::btree_map(0i64..1_000, value(), 0..50),
            func in prop::sample::select(vec!["sum", "avg", "min", "max", "count", "p50", "first", "last"]),
        ) {
            let pts: Vec<(i64, f64)> = points.into_iter().collect();
            let spec = DownsampleSpec::parse(&format!("0all-{func}")).unwrap();
            let out = spec.apply(&pts, (0, 1_000), (100, 900)).unwrap();
            let inside: Vec<f64> = pts.iter().filter(|p| p.0 >= 100 && p.0 < 900).map(|p| p.1).collect();
            let want: Vec<(i64, u64)> = if inside.is_empty() { vec![] } else { vec![(100, spec.function.run_double(&inside).to_bits())] };
            prop_assert_eq!(out.iter().map(|(t, v)| (*t, v.to_bits())).collect::<Vec<_>>(), want);
        }
    }
}
