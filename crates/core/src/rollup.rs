//! OpenTSDB 2.4's rollup configuration and the bytes of rollup cells (RFC 0008).
//!
//! A rollup row is keyed as a data row, its base time aligned to the interval's row span
//! (the hour, `N` hours, the UTC day, month or year). Its cells:
//!
//! ```text
//! qualifier: | aggregator id (1) | offset (12 bits) | flags (4) |
//!            offset = (t - base time) / interval seconds
//! value:     as a data point's (flags: | float (1) | value length - 1 (3) |)
//! ```
//!
//! A pre-aggregate sent without an interval is a data point of the hour (2-byte qualifier)
//! in the default interval's pre-aggregate table.

use std::collections::BTreeMap;

use chrono::{Datelike, TimeZone, Utc};

use crate::put::{PutError, PutLine, parse_put};
use crate::{Error, Result};

/// OpenTSDB's cap on the intervals of one row: the offset has 12 bits in the qualifier, but
/// `RollupInterval.MAX_INTERVALS` says 7774 ("to fit in 14 bits"); kept as OpenTSDB checks it.
pub const MAX_INTERVALS: u32 = 7774;
/// OpenTSDB's floor on the intervals of one row.
pub const MIN_INTERVALS: u32 = 12;

/// The first byte's bit marking a compacted rollup column (never written by 2.4.1).
pub const COMPACTED_MASK: u8 = 0x80;
/// The aggregator id's bits of a rollup qualifier's first byte.
pub const AGGREGATOR_MASK: u8 = 0x7F;

/// The unit of a row span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanUnit {
    /// `h`, with a multiplier of 1 or an even number of hours.
    Hour,
    /// `d`: the UTC day.
    Day,
    /// `n`: the UTC month.
    Month,
    /// `y`: the UTC year.
    Year,
}

/// One configured interval (`RollupInterval`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollupInterval {
    /// `table`: rollups of raw series.
    pub table: String,
    /// `preAggregationTable`: rollups of pre-aggregated series.
    pub pre_aggregation_table: String,
    /// `interval` as configured (`1h`): the name points and queries use.
    pub interval: String,
    /// `rowSpan` as configured (`1d`).
    pub row_span: String,
    /// `defaultInterval`.
    pub default_interval: bool,
    pub unit: SpanUnit,
    /// The row span's number (`6` of `6h`).
    pub multiplier: u32,
    pub interval_seconds: u32,
    /// How many intervals one row holds (span seconds, the longest month or year, divided by
    /// the interval).
    pub intervals: u32,
    /// `retention` (Hourglass's own field, RFC 0008 phase 4): rows of this interval's tables
    /// older than this many milliseconds are removed.
    pub retention_ms: Option<i64>,
}

impl RollupInterval {
    /// Checks an interval as OpenTSDB's `RollupInterval.validateAndCompile`, with its words.
    pub fn new(
        table: &str,
        pre_aggregation_table: &str,
        interval: &str,
        row_span: &str,
        default_interval: bool,
    ) -> Result<RollupInterval> {
        let (multiplier, units) = split_duration(row_span)?;
        if units.len() > 1 {
            return Err(Error::invalid("Milliseconds are not supported"));
        }
        if table.is_empty() {
            return Err(Error::invalid("The rollup table cannot be null or empty"));
        }
        if pre_aggregation_table.is_empty() {
            return Err(Error::invalid(
                "The pre-aggregate rollup table cannot be null or empty",
            ));
        }
        if units != "h" && multiplier > 1 {
            return Err(Error::invalid(
                "Multipliers are only usable with the 'h' unit",
            ));
        }
        if units == "h" && multiplier > 1 && multiplier % 2 != 0 {
            return Err(Error::invalid("The multiplier must be 1 or an even value"));
        }
        let interval_ms = crate::time::parse_duration_ms(interval)?;
        let interval_seconds = interval_ms / 1000;
        if interval_seconds >= i64::from(i32::MAX) {
            return Err(Error::invalid(format!(
                "Interval is too big: {interval_seconds}"
            )));
        }
        let (unit, span) = match units.as_str() {
            "h" => (SpanUnit::Hour, 3_600),
            "d" => (SpanUnit::Day, 86_400),
            "n" => (SpanUnit::Month, 86_400 * 32),
            "y" => (SpanUnit::Year, 86_400 * 366),
            other => return Err(Error::invalid(format!("Unrecogznied span '{other}'"))),
        };
        let span = i64::from(span) * i64::from(multiplier);
        if interval_seconds >= span {
            return Err(Error::invalid(format!(
                "Interval [{interval_seconds}] is too large for the span [{units}]"
            )));
        }
        // OpenTSDB divides by zero here (an ArithmeticException); refused in words instead.
        if interval_seconds < 1 {
            return Err(Error::invalid(format!(
                "Interval [{interval}] is shorter than a second; rollup intervals are whole seconds"
            )));
        }
        let intervals = span / interval_seconds;
        if intervals > i64::from(MAX_INTERVALS) {
            return Err(Error::invalid(format!(
                "Too many intervals [{intervals}] in the span. Must be smaller than [{MAX_INTERVALS}] to fit in 14 bits"
            )));
        }
        if intervals < i64::from(MIN_INTERVALS) {
            return Err(Error::invalid(format!(
                "Not enough intervals [{intervals}] for the span. Must be at least [{MIN_INTERVALS}]"
            )));
        }
        Ok(RollupInterval {
            table: table.to_string(),
            pre_aggregation_table: pre_aggregation_table.to_string(),
            interval: interval.to_string(),
            row_span: row_span.to_string(),
            default_interval,
            unit,
            multiplier,
            interval_seconds: interval_seconds as u32,
            intervals: intervals as u32,
            retention_ms: None,
        })
    }

    /// The base time of the row holding `timestamp` (seconds or milliseconds), as
    /// `RollupUtils.getRollupBasetime`.
    pub fn base_time(&self, timestamp: i64) -> Result<u32> {
        if timestamp < 0 {
            return Err(Error::invalid(format!(
                "Not supporting negative timestamps at this time: {timestamp}"
            )));
        }
        let seconds = if crate::time::is_millis(timestamp) {
            timestamp / 1000
        } else {
            timestamp
        };
        let base = match self.unit {
            SpanUnit::Hour => seconds - seconds % (3_600 * i64::from(self.multiplier)),
            unit => {
                let date = Utc
                    .timestamp_opt(seconds, 0)
                    .single()
                    .ok_or_else(|| Error::invalid(format!("bad timestamp={timestamp}")))?
                    .date_naive();
                let first = match unit {
                    SpanUnit::Day => Some(date),
                    SpanUnit::Month => date.with_day(1),
                    _ => date.with_day(1).and_then(|d| d.with_month(1)),
                };
                first
                    .and_then(|d| d.and_hms_opt(0, 0, 0))
                    .map(|d| d.and_utc().timestamp())
                    .ok_or_else(|| Error::invalid(format!("bad timestamp={timestamp}")))?
            }
        };
        u32::try_from(base).map_err(|_| Error::invalid(format!("bad timestamp={timestamp}")))
    }

    /// The 3-byte qualifier of a value at `timestamp` (seconds or milliseconds) in the row
    /// of `base_time`, as `RollupUtils.buildRollupQualifier`.
    pub fn qualifier(
        &self,
        timestamp: i64,
        base_time: u32,
        flags: u8,
        aggregator_id: u8,
    ) -> Result<[u8; 3]> {
        let seconds = if crate::time::is_millis(timestamp) {
            timestamp / 1000
        } else {
            timestamp
        };
        let offset = (seconds - i64::from(base_time)) / i64::from(self.interval_seconds);
        if offset < 0 || offset >= i64::from(self.intervals) {
            return Err(Error::invalid(format!(
                "Offset of {offset} was greater than the configured intervals {}",
                self.intervals
            )));
        }
        // OpenTSDB allows up to 7774 intervals a row but keeps 12 bits of the offset: it
        // stores offset 4096 as 0, over another value's cell. Refused here instead.
        if offset >= 1 << 12 {
            return Err(Error::invalid(format!(
                "Offset of {offset} does not fit the qualifier's 12 bits (OpenTSDB would store it as {}); use a shorter row span for interval {}",
                offset % (1 << 12),
                self.interval
            )));
        }
        let packed = ((offset as u16) << 4) | u16::from(flags & crate::value::FLAGS_MASK);
        let [hi, lo] = packed.to_be_bytes();
        Ok([aggregator_id, hi, lo])
    }

    /// The end (exclusive, seconds) of the row span starting at `base_time`.
    pub fn span_end(&self, base_time: u32) -> i64 {
        let base = i64::from(base_time);
        let next = |years: i32, months: u32| {
            Utc.timestamp_opt(base, 0)
                .single()
                .map(|d| d.date_naive())
                .and_then(|d| {
                    let total = d.year() * 12 + d.month0() as i32 + months as i32 + years * 12;
                    chrono::NaiveDate::from_ymd_opt(total / 12, (total % 12) as u32 + 1, 1)
                })
                .and_then(|d| d.and_hms_opt(0, 0, 0))
                .map(|d| d.and_utc().timestamp())
        };
        match self.unit {
            SpanUnit::Hour => base + 3_600 * i64::from(self.multiplier),
            SpanUnit::Day => base + 86_400,
            SpanUnit::Month => next(0, 1).unwrap_or(base + 86_400 * 32),
            SpanUnit::Year => next(1, 0).unwrap_or(base + 86_400 * 366),
        }
    }

    /// OpenTSDB's `toString`, used in its messages.
    fn describe(&self) -> String {
        format!(
            "table={}, preAggTable={}, rowSpan={}, isDefaultInterval={}, interval={}",
            self.table,
            self.pre_aggregation_table,
            self.row_span,
            self.default_interval,
            self.interval
        )
    }
}

/// `3h` → (3, "h"), with `DateTime.getDurationUnits` / `getDurationInterval`'s words.
fn split_duration(text: &str) -> Result<(u32, String)> {
    if text.is_empty() {
        return Err(Error::invalid("Duration cannot be null or empty"));
    }
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let units = text[digits..].to_ascii_lowercase();
    if !matches!(
        units.as_str(),
        "ms" | "s" | "m" | "h" | "d" | "w" | "n" | "y"
    ) {
        return Err(Error::invalid(format!(
            "Invalid units in the duration: {units}"
        )));
    }
    if text.contains('.') {
        return Err(Error::invalid("Floating point intervals are not supported"));
    }
    let n: i64 = text[..digits]
        .parse()
        .map_err(|_| Error::invalid(format!("Invalid duration (number): {text}")))?;
    if n <= 0 {
        return Err(Error::invalid(format!("Zero or negative duration: {text}")));
    }
    let n = u32::try_from(n)
        .map_err(|_| Error::invalid(format!("Invalid duration (number): {text}")))?;
    Ok((n, units))
}

/// The whole configuration (`RollupConfig`): intervals and aggregation ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollupConfig {
    /// In configured order.
    intervals: Vec<RollupInterval>,
    /// Lower-cased aggregator name → id (0..=127).
    ids: BTreeMap<String, u8>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConfigJson {
    aggregation_ids: Option<BTreeMap<String, i64>>,
    intervals: Option<Vec<IntervalJson>>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct IntervalJson {
    table: Option<String>,
    pre_aggregation_table: Option<String>,
    interval: Option<String>,
    row_span: Option<String>,
    #[serde(default)]
    default_interval: bool,
    /// Hourglass's own: how long the interval's rows are kept (`365d`).
    retention: Option<String>,
}

impl RollupConfig {
    /// Parses and checks the JSON of `tsd.rollups.config` as OpenTSDB's `RollupConfig` and
    /// `TSDB` constructors do; `is_aggregator` says whether a lower-cased name is one of the
    /// query aggregators (the engine knows them).
    pub fn parse(json: &str, is_aggregator: &dyn Fn(&str) -> bool) -> Result<RollupConfig> {
        let raw: ConfigJson = serde_json::from_str(json)
            .map_err(|e| Error::invalid(format!("Unable to parse the rollup config: {e}")))?;
        let intervals = raw.intervals.unwrap_or_default();
        if intervals.is_empty() {
            return Err(Error::invalid(
                "Rollup config given but no intervals were found.",
            ));
        }
        let ids_in = raw.aggregation_ids.unwrap_or_default();
        if ids_in.is_empty() {
            return Err(Error::invalid(
                "Rollup config given but no aggegation ID mappings found.",
            ));
        }
        let mut out: Vec<RollupInterval> = Vec::with_capacity(intervals.len());
        let mut defaults = 0;
        for i in intervals {
            let text = |s: &Option<String>| s.clone().unwrap_or_default();
            let mut interval = RollupInterval::new(
                &text(&i.table),
                &text(&i.pre_aggregation_table),
                &text(&i.interval),
                &text(&i.row_span),
                i.default_interval,
            )?;
            if let Some(r) = &i.retention {
                interval.retention_ms = Some(crate::time::parse_duration_ms(r).map_err(|e| {
                    Error::invalid(format!(
                        "rollup interval {}: retention: {e}",
                        interval.interval
                    ))
                })?);
            }
            if out.iter().any(|o| o.interval == interval.interval) {
                return Err(Error::invalid(format!(
                    "Only one interval of each type can be configured: {}",
                    interval.describe()
                )));
            }
            if interval.default_interval {
                defaults += 1;
                if defaults > 1 {
                    return Err(Error::invalid(format!(
                        "Multiple default intervals configured. Only one is allowed: {}",
                        interval.describe()
                    )));
                }
            }
            out.push(interval);
        }
        let mut ids: BTreeMap<String, u8> = BTreeMap::new();
        for (name, id) in ids_in {
            if !(0..=127).contains(&id) {
                return Err(Error::invalid(format!(
                    "ID for aggregator must be between 0 and 127: {name}={id}"
                )));
            }
            let name = name.to_lowercase();
            if ids.values().any(|v| i64::from(*v) == id) {
                return Err(Error::invalid(format!(
                    "Multiple mappings for the ID '{id}' are not allowed."
                )));
            }
            if !is_aggregator(&name) {
                return Err(Error::invalid(format!(
                    "No such aggregator found for {name}"
                )));
            }
            ids.insert(name, id as u8);
        }
        if defaults == 0 {
            return Err(Error::invalid(
                "None of the rollup intervals were marked as the \"default\".",
            ));
        }
        Ok(RollupConfig {
            intervals: out,
            ids,
        })
    }

    pub fn intervals(&self) -> &[RollupInterval] {
        &self.intervals
    }

    /// The interval named `name` (`1h`), or OpenTSDB's `NoSuchRollupForIntervalException`
    /// message.
    pub fn interval(&self, name: &str) -> Result<&RollupInterval> {
        if name.is_empty() {
            return Err(Error::invalid("Interval cannot be null or empty"));
        }
        self.intervals
            .iter()
            .find(|i| i.interval == name)
            .ok_or_else(|| Error::invalid(no_such_interval(name)))
    }

    /// The interval marked `defaultInterval` (a parsed configuration has exactly one).
    pub fn default_interval(&self) -> &RollupInterval {
        self.intervals
            .iter()
            .find(|i| i.default_interval)
            .unwrap_or(&self.intervals[0])
    }

    /// The id of an aggregator (any case), as `RollupConfig.getIdForAggregator`.
    pub fn id_for(&self, aggregator: &str) -> Result<u8> {
        if aggregator.is_empty() {
            return Err(Error::invalid("Aggregator cannot be null or empty."));
        }
        self.ids
            .get(&aggregator.to_lowercase())
            .copied()
            .ok_or_else(|| {
                Error::invalid(format!("No ID found mapping to aggregator: {aggregator}"))
            })
    }

    /// Lower-cased aggregator name → id.
    pub fn aggregation_ids(&self) -> &BTreeMap<String, u8> {
        &self.ids
    }

    /// Every table the intervals name (rollup and pre-aggregate), each once, in order.
    pub fn tables(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for i in &self.intervals {
            for t in [&i.table, &i.pre_aggregation_table] {
                if !out.contains(t) {
                    out.push(t.clone());
                }
            }
        }
        out
    }
}

/// What the first word of a `rollup` line names (`1h-sum:max`): the interval, the rollup aggregator and the group-by one.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct IntervalAgg<'a> {
    pub interval: Option<&'a str>,
    pub aggregator: Option<&'a str>,
    pub group_by: Option<&'a str>,
}

/// `1h-sum:max` as OpenTSDB splits it: a dash before the first colon ends the interval; no
/// dash and no colon is a group-by aggregator alone, which is then the rollup one too.
pub fn split_interval_agg(word: &str) -> IntervalAgg<'_> {
    // Java's `split(":")` drops trailing empty parts.
    let mut parts: Vec<&str> = word.split(':').collect();
    while parts.len() > 1 && parts.last().is_some_and(|p| p.is_empty()) {
        parts.pop();
    }
    let first = parts.first().copied().unwrap_or_default();
    let mut out = IntervalAgg::default();
    if let Some((interval, agg)) = first.split_once('-') {
        out.interval = Some(interval);
        out.aggregator = Some(agg);
    } else if parts.len() == 1 {
        out.group_by = Some(first);
    }
    if let Some(g) = parts.get(1) {
        out.group_by = Some(g);
    }
    if out.aggregator.is_none() {
        out.aggregator = out.group_by;
    }
    out
}

/// The words of a `rollup` line after the command (`1h-sum:max METRIC TS VALUE TAG ...`),
/// checked as 2.4.1's `RollupDataPointRpc.importDataPoint` checks them: at least five words,
/// a non-empty first one, then the rest as a `put` line's.
pub fn parse_rollup_line<'a>(
    args: &'a str,
    tags: &mut Vec<(&'a str, &'a str)>,
) -> std::result::Result<(IntervalAgg<'a>, PutLine<'a>), PutError> {
    // Even an empty `args` is one (empty) word: the command was followed by a space.
    let got = args.split(' ').count();
    if got < 5 {
        return Err(rollup_not_enough_arguments(got));
    }
    let (first, rest) = args.split_once(' ').unwrap_or((args, ""));
    if first.is_empty() {
        return Err(PutError::IllegalArgument(
            "Missing interval or aggregator".into(),
        ));
    }
    let line = parse_put(rest, tags)?;
    Ok((split_interval_agg(first), line))
}

/// Fewer than five words after `rollup`: `got` is how many there were.
pub fn rollup_not_enough_arguments(got: usize) -> PutError {
    PutError::IllegalArgument(format!("not enough arguments (need least 7, got {got})"))
}

/// OpenTSDB's `NoSuchRollupForIntervalException` message.
pub fn no_such_interval(name: &str) -> String {
    format!("No rollups configured for the interval: {name}")
}

#[cfg(test)]
mod tests;
