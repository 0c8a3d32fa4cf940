//! Calendar intervals in a time zone: the buckets of calendar downsampling (`1dc`, `1nc`,
//! `useCalendar`), with OpenTSDB's rules (`DateTime.previousInterval` and `Calendar.add`).
//!
//! A bucket starts at a calendar boundary found by snapping a timestamp to the start of a
//! parent period (the minute, hour, day, month or year, depending on the unit and whether the
//! count divides it) and stepping forward by the interval. Hours and smaller units step in
//! absolute time; days, weeks, months and years step on the wall clock, so `1dc` buckets
//! start at local midnight across daylight-saving changes.

use chrono::{Datelike, Duration, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, TimeZone};
use chrono_tz::Tz;

use crate::{Error, Result};

/// OpenTSDB's calendar units (`DateTime.unitsToCalendarType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CalendarUnit {
    Millisecond,
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl CalendarUnit {
    pub fn parse(units: &str) -> Result<CalendarUnit> {
        Ok(match units.to_ascii_lowercase().as_str() {
            "ms" => CalendarUnit::Millisecond,
            "s" => CalendarUnit::Second,
            "m" => CalendarUnit::Minute,
            "h" => CalendarUnit::Hour,
            "d" => CalendarUnit::Day,
            "w" => CalendarUnit::Week,
            "n" => CalendarUnit::Month,
            "y" => CalendarUnit::Year,
            _ => return Err(Error::invalid(format!("Unrecognized unit type: {units}"))),
        })
    }

    fn fixed_ms(self) -> Option<i64> {
        match self {
            CalendarUnit::Millisecond => Some(1),
            CalendarUnit::Second => Some(1000),
            CalendarUnit::Minute => Some(60_000),
            CalendarUnit::Hour => Some(3_600_000),
            _ => None,
        }
    }
}

/// `count` calendar `unit`s in a time zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CalendarInterval {
    pub count: u32,
    pub unit: CalendarUnit,
    pub tz: Tz,
}

impl CalendarInterval {
    /// From an interval text such as `1d`, `15m` or `500ms` (digits, then the unit).
    pub fn parse(text: &str, tz: Tz) -> Result<CalendarInterval> {
        let lower = text.to_ascii_lowercase();
        let unit_len = if lower.ends_with("ms") { 2 } else { 1 };
        let split = lower.len().saturating_sub(unit_len);
        let (count, unit) = lower.split_at(split);
        let unit = CalendarUnit::parse(unit)?;
        let count: u32 = count
            .parse()
            .ok()
            .filter(|c| *c > 0)
            .ok_or_else(|| Error::invalid(format!("Invalid calendar interval: {text}")))?;
        Ok(CalendarInterval { count, unit, tz })
    }

    /// The start of the bucket holding `ts_ms` (OpenTSDB's `previousInterval`).
    pub fn floor(&self, ts_ms: i64) -> i64 {
        let n = self.count;
        let Some(local) = self.tz.timestamp_millis_opt(ts_ms).single() else {
            return ts_ms;
        };
        let local = local.naive_local();
        let date = local.date();
        let day = |d: NaiveDate| NaiveDateTime::new(d, NaiveTime::MIN);
        let month_start = || day(date.with_day(1).unwrap_or(date));
        let year_start = || day(NaiveDate::from_ymd_opt(date.year(), 1, 1).unwrap_or(date));
        let truncate = |unit_ms: i64| {
            let since_midnight = (local - day(date)).num_milliseconds();
            day(date) + Duration::milliseconds(since_midnight - since_midnight.rem_euclid(unit_ms))
        };
        let (start, step_unit, step) = match self.unit {
            CalendarUnit::Millisecond if 1000 % n == 0 => (truncate(1000), self.unit, n),
            CalendarUnit::Millisecond => (truncate(60_000), self.unit, n),
            CalendarUnit::Second if 60 % n == 0 => (truncate(60_000), self.unit, n),
            CalendarUnit::Second => (truncate(3_600_000), self.unit, n),
            CalendarUnit::Minute if 60 % n == 0 => (truncate(3_600_000), self.unit, n),
            CalendarUnit::Minute => (day(date), self.unit, n),
            CalendarUnit::Hour if 24 % n == 0 => (day(date), self.unit, n),
            CalendarUnit::Hour => (month_start(), self.unit, n),
            CalendarUnit::Day if n == 1 => (month_start(), self.unit, n),
            CalendarUnit::Day => (year_start(), self.unit, n),
            CalendarUnit::Week => {
                // Weeks start on Sunday (Java's default locale); the count only matters
                // for whether to snap to this week (1, 2) or to the year's first week.
                let anchor = if 2 % n == 0 {
                    date
                } else {
                    year_start().date()
                };
                let sunday =
                    anchor - chrono::Days::new(u64::from(anchor.weekday().num_days_from_sunday()));
                (day(sunday), CalendarUnit::Day, 7)
            }
            CalendarUnit::Month | CalendarUnit::Year => (year_start(), self.unit, n),
        };
        let mut t = local_to_ms(self.tz, start).unwrap_or(ts_ms);
        if t == ts_ms {
            return t;
        }
        let step = i64::from(step);
        let mut guard = 0;
        while t <= ts_ms && guard < 100_000 {
            t = add(self.tz, t, step_unit, step);
            guard += 1;
        }
        add(self.tz, t, step_unit, -step)
    }

    /// The start of the bucket after the one starting at `start_ms`.
    pub fn next(&self, start_ms: i64) -> i64 {
        match self.unit {
            CalendarUnit::Week => add(
                self.tz,
                start_ms,
                CalendarUnit::Day,
                7 * i64::from(self.count),
            ),
            unit => add(self.tz, start_ms, unit, i64::from(self.count)),
        }
    }
}

/// `Calendar.add(unit, amount)`: absolute time for hours and below, wall clock above.
fn add(tz: Tz, t_ms: i64, unit: CalendarUnit, amount: i64) -> i64 {
    if let Some(ms) = unit.fixed_ms() {
        return t_ms.saturating_add(amount.saturating_mul(ms));
    }
    let Some(local) = tz.timestamp_millis_opt(t_ms).single() else {
        return t_ms;
    };
    let local = local.naive_local();
    let months = |m: i64| {
        let shifted = if m >= 0 {
            local.checked_add_months(chrono::Months::new(u32::try_from(m).unwrap_or(u32::MAX)))
        } else {
            local.checked_sub_months(chrono::Months::new(u32::try_from(-m).unwrap_or(u32::MAX)))
        };
        shifted.unwrap_or(local)
    };
    let moved = match unit {
        CalendarUnit::Day => local
            .checked_add_signed(Duration::days(amount))
            .unwrap_or(local),
        CalendarUnit::Week => local
            .checked_add_signed(Duration::days(amount.saturating_mul(7)))
            .unwrap_or(local),
        CalendarUnit::Month => months(amount),
        _ => months(amount.saturating_mul(12)),
    };
    local_to_ms(tz, moved).unwrap_or(t_ms)
}

/// The instant a wall-clock time names in `tz`: the earlier one when the clock repeats, and
/// for a time skipped by a daylight-saving jump the same distance past the jump (Java's
/// lenient calendar).
pub fn local_to_ms(tz: Tz, local: NaiveDateTime) -> Option<i64> {
    match tz.from_local_datetime(&local) {
        LocalResult::Single(d) => Some(d.timestamp_millis()),
        LocalResult::Ambiguous(a, b) => Some(a.timestamp_millis().min(b.timestamp_millis())),
        LocalResult::None => {
            let before = local.checked_sub_signed(Duration::days(1))?;
            let offset = tz.offset_from_local_datetime(&before).earliest()?;
            let offset = chrono::Offset::fix(&offset).local_minus_utc();
            Some(
                (local - Duration::seconds(i64::from(offset)))
                    .and_utc()
                    .timestamp_millis(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tz(name: &str) -> Tz {
        name.parse().unwrap()
    }

    fn ms(tz: Tz, y: i32, mo: u32, d: u32, h: u32, mi: u32) -> i64 {
        local_to_ms(
            tz,
            NaiveDate::from_ymd_opt(y, mo, d)
                .unwrap()
                .and_hms_opt(h, mi, 0)
                .unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn days_start_at_local_midnight_across_dst() {
        let denver = tz("America/Denver");
        let day = CalendarInterval::parse("1d", denver).unwrap();
        // 2013-03-10 is the spring-forward day in Denver (a 23-hour day).
        let noon = ms(denver, 2013, 3, 10, 12, 0);
        assert_eq!(day.floor(noon), ms(denver, 2013, 3, 10, 0, 0));
        assert_eq!(day.next(day.floor(noon)), ms(denver, 2013, 3, 11, 0, 0));
        assert_eq!(day.next(day.floor(noon)) - day.floor(noon), 23 * 3_600_000);
        assert_eq!(
            day.floor(ms(denver, 2013, 3, 10, 0, 0)),
            ms(denver, 2013, 3, 10, 0, 0)
        );
    }

    #[test]
    fn parents_and_steps_follow_opentsdb() {
        let utc = Tz::UTC;
        let t = ms(utc, 2013, 1, 16, 13, 47);
        let floor = |text: &str| CalendarInterval::parse(text, utc).unwrap().floor(t);
        assert_eq!(floor("15m"), ms(utc, 2013, 1, 16, 13, 45));
        assert_eq!(
            floor("7m"),
            ms(utc, 2013, 1, 16, 13, 46),
            "from the top of the day"
        );
        assert_eq!(floor("6h"), ms(utc, 2013, 1, 16, 12, 0));
        assert_eq!(
            floor("5h"),
            ms(utc, 2013, 1, 16, 10, 0),
            "from the top of the month"
        );
        assert_eq!(floor("1d"), ms(utc, 2013, 1, 16, 0, 0));
        assert_eq!(floor("2d"), ms(utc, 2013, 1, 15, 0, 0), "from Jan 1");
        assert_eq!(floor("1w"), ms(utc, 2013, 1, 13, 0, 0), "Sunday");
        assert_eq!(floor("1n"), ms(utc, 2013, 1, 1, 0, 0));
        assert_eq!(floor("1y"), ms(utc, 2013, 1, 1, 0, 0));
        let month = CalendarInterval::parse("1n", utc).unwrap();
        assert_eq!(
            month.next(ms(utc, 2013, 1, 1, 0, 0)),
            ms(utc, 2013, 2, 1, 0, 0)
        );
        let week = CalendarInterval::parse("2w", utc).unwrap();
        assert_eq!(
            week.next(ms(utc, 2013, 1, 13, 0, 0)),
            ms(utc, 2013, 1, 27, 0, 0)
        );
        assert_eq!(
            CalendarInterval::parse("1q", utc).unwrap_err().to_string(),
            "Unrecognized unit type: q"
        );
        assert_eq!(
            CalendarInterval::parse("500ms", utc).unwrap().unit,
            CalendarUnit::Millisecond
        );
    }
}
