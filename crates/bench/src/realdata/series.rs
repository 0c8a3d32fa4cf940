//! Series of the real-data benchmark and the `put` stream made of them; CSV files of
//! `timestamp,value` lines (the Numenta Anomaly Benchmark's layout) read into series.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// One series: its metric, tags and points in strictly increasing time order, each value as
/// the text to send (so its decimals reach the servers as written).
#[derive(Debug)]
pub(crate) struct Series {
    pub(crate) metric: String,
    pub(crate) tags: Vec<(String, String)>,
    /// (epoch seconds, value text).
    pub(crate) points: Vec<(u64, String)>,
}

impl Series {
    pub(crate) fn first(&self) -> u64 {
        self.points.first().map_or(0, |p| p.0)
    }

    pub(crate) fn last(&self) -> u64 {
        self.points.last().map_or(0, |p| p.0)
    }

    /// `tagk=tagv` pairs separated by `sep`.
    pub(crate) fn tag_text(&self, sep: &str) -> String {
        self.tags
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(sep)
    }
}

/// What reading a directory found besides the series.
#[derive(Debug, Default)]
pub(crate) struct LoadNotes {
    pub(crate) files: usize,
    /// Points dropped because their series already had a point at that second.
    pub(crate) duplicates: usize,
    /// Points that were out of time order in their file (sorted, not dropped).
    pub(crate) reordered: usize,
}

/// Replaces every character OpenTSDB refuses in a name (it takes ASCII letters and digits,
/// `-`, `_`, `.`, `/` and Unicode letters) by `_`.
pub(crate) fn sanitise(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_./".contains(c) || c.is_alphabetic() {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Days from 1970-01-01 to the given civil date (proleptic Gregorian calendar).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Epoch seconds as `YYYY-MM-DD HH:MM:SS` (UTC): `days_from_civil` turned around.
pub(crate) fn format_timestamp(secs: u64) -> String {
    let days = (secs / 86_400) as i64 + 719_468;
    let era = days.div_euclid(146_097);
    let doe = days - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let s = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// Writes each series as `DIR/<metric>/<tag values joined by _>.csv` of `timestamp,value`
/// lines, the layout `load_dir` reads (it names a file's metric by its folder).
pub(crate) fn write_dir(series: &[Series], dir: &Path) -> anyhow::Result<()> {
    for one in series {
        let folder = dir.join(&one.metric);
        std::fs::create_dir_all(&folder)
            .with_context(|| format!("creating {}", folder.display()))?;
        let name: Vec<&str> = one.tags.iter().map(|(_, v)| v.as_str()).collect();
        let mut text = String::from("timestamp,value\n");
        for (ts, value) in &one.points {
            text.push_str(&format_timestamp(*ts));
            text.push(',');
            text.push_str(value);
            text.push('\n');
        }
        let file = folder.join(format!("{}.csv", name.join("_")));
        std::fs::write(&file, text).with_context(|| format!("writing {}", file.display()))?;
    }
    Ok(())
}

/// `YYYY-MM-DD HH:MM:SS` (or with `T` between date and time), read as UTC, to epoch seconds.
pub(crate) fn parse_timestamp(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() != 19
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b' ' | b'T')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<i64> {
        let s = text.get(from..to)?;
        if s.bytes().all(|c| c.is_ascii_digit()) {
            s.parse().ok()
        } else {
            None
        }
    };
    let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hour, minute, second) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let secs = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    u64::try_from(secs).ok()
}

/// Reads one CSV of `timestamp,value` lines (an optional header line first; `\r\n` line ends
/// taken) into `(epoch seconds, value text)` points in file order.
pub(crate) fn parse_csv(text: &str, file: &Path) -> anyhow::Result<Vec<(u64, String)>> {
    let mut points = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Some((ts, value)) = line.split_once(',') else {
            bail!(
                "{}:{}: not `timestamp,value`: {line}",
                file.display(),
                i + 1
            );
        };
        let (ts, value) = (ts.trim(), value.trim());
        let Some(secs) = parse_timestamp(ts) else {
            if i == 0 {
                continue; // the header
            }
            bail!("{}:{}: bad timestamp {ts:?}", file.display(), i + 1);
        };
        if !value.parse::<f64>().is_ok_and(f64::is_finite) {
            bail!("{}:{}: bad value {value:?}", file.display(), i + 1);
        }
        points.push((secs, value.to_string()));
    }
    Ok(points)
}

/// Puts points in time order (stable) and keeps the first of each second; returns how many
/// were out of order and how many were dropped.
fn order(points: &mut Vec<(u64, String)>) -> (usize, usize) {
    let reordered = points.windows(2).filter(|w| w[1].0 < w[0].0).count();
    points.sort_by_key(|p| p.0);
    let before = points.len();
    points.dedup_by_key(|p| p.0);
    (reordered, before - points.len())
}

fn csv_files(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            csv_files(&path, out)?;
        } else if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
        {
            out.push(path);
        }
    }
    Ok(())
}

/// Every `*.csv` under `dir` (searched recursively) as one series: metric
/// `<prefix>.<folder the file is in>`, tag `file=<file name without .csv>`, both sanitised.
pub(crate) fn load_dir(dir: &Path, prefix: &str) -> anyhow::Result<(Vec<Series>, LoadNotes)> {
    let mut files = Vec::new();
    csv_files(dir, &mut files)?;
    files.sort();
    if files.is_empty() {
        bail!(
            "no .csv files under {} (see `hourglass-bench realdata --fetch-help`)",
            dir.display()
        );
    }
    let mut notes = LoadNotes {
        files: files.len(),
        ..LoadNotes::default()
    };
    let mut seen = BTreeSet::new();
    let mut series = Vec::new();
    for file in files {
        let folder = file
            .parent()
            .and_then(Path::file_name)
            .map_or_else(String::new, |f| f.to_string_lossy().into_owned());
        let stem = file
            .file_stem()
            .map_or_else(String::new, |f| f.to_string_lossy().into_owned());
        let metric = sanitise(&format!("{prefix}.{folder}"));
        let name = sanitise(&stem);
        if !seen.insert((metric.clone(), name.clone())) {
            bail!(
                "{}: a second file for series {metric} file={name}",
                file.display()
            );
        }
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        let mut points = parse_csv(&text, &file)?;
        let (reordered, dropped) = order(&mut points);
        notes.reordered += reordered;
        notes.duplicates += dropped;
        if points.is_empty() {
            continue;
        }
        series.push(Series {
            metric,
            tags: vec![("file".to_string(), name)],
            points,
        });
    }
    Ok((series, notes))
}

/// The `put` lines of every series merged in time order (as collectors send them: each
/// instant's points together), series in their given order within an instant.
pub(crate) fn put_stream(series: &[Series]) -> anyhow::Result<Vec<u8>> {
    let mut order: Vec<(u64, u32, u32)> = Vec::with_capacity(points(series));
    for (s, one) in series.iter().enumerate() {
        for (p, (ts, _)) in one.points.iter().enumerate() {
            order.push((*ts, u32::try_from(s)?, u32::try_from(p)?));
        }
    }
    order.sort_unstable();
    let tags: Vec<String> = series.iter().map(|s| s.tag_text(" ")).collect();
    let mut out = Vec::with_capacity(order.len() * 64);
    for (ts, s, p) in order {
        let one = &series[s as usize];
        let value = &one.points[p as usize].1;
        writeln!(out, "put {} {ts} {value} {}", one.metric, tags[s as usize])?;
    }
    Ok(out)
}

/// Points of all series.
pub(crate) fn points(series: &[Series]) -> usize {
    series.iter().map(|s| s.points.len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc_epoch_seconds() {
        assert_eq!(parse_timestamp("1970-01-01 00:00:00"), Some(0));
        assert_eq!(parse_timestamp("2014-02-14 14:30:00"), Some(1_392_388_200));
        assert_eq!(parse_timestamp("2000-02-29T23:59:59"), Some(951_868_799));
        assert_eq!(parse_timestamp("2014-02-14 24:00:00"), None);
        assert_eq!(parse_timestamp("2014-2-14 14:30:00"), None);
        assert_eq!(parse_timestamp("timestamp"), None);
        for secs in [
            0,
            951_868_799,
            1_392_388_200,
            1_735_689_600,
            4_102_444_800 + 86_399,
        ] {
            assert_eq!(parse_timestamp(&format_timestamp(secs)), Some(secs));
        }
        assert_eq!(format_timestamp(951_868_799), "2000-02-29 23:59:59");
    }

    #[test]
    fn csv_keeps_value_text_and_skips_the_header() {
        let text = "timestamp,value\r\n2014-02-14 14:30:00,0.132\r\n\r\n2014-02-14 14:35:00,17\r\n";
        let points = parse_csv(text, Path::new("x.csv")).expect("parses");
        assert_eq!(
            points,
            vec![
                (1_392_388_200, "0.132".to_string()),
                (1_392_388_500, "17".to_string())
            ]
        );
        assert!(parse_csv("t,v\n2014-02-14 14:30:00,abc\n", Path::new("x.csv")).is_err());
        assert!(parse_csv("t,v\n2014-02-14 14:30,1\n", Path::new("x.csv")).is_err());
    }

    #[test]
    fn order_sorts_and_keeps_the_first_of_a_second() {
        let mut points = vec![
            (10, "a".to_string()),
            (20, "b".to_string()),
            (10, "c".to_string()),
            (30, "d".to_string()),
        ];
        assert_eq!(order(&mut points), (1, 1));
        assert_eq!(
            points,
            vec![
                (10, "a".to_string()),
                (20, "b".to_string()),
                (30, "d".to_string())
            ]
        );
    }

    #[test]
    fn names_are_sanitised() {
        assert_eq!(
            sanitise("iio_us-east-1_i-a2eb1cd9"),
            "iio_us-east-1_i-a2eb1cd9"
        );
        assert_eq!(sanitise("cpu (avg) #2"), "cpu__avg___2");
    }

    #[test]
    fn stream_is_in_time_order() {
        let series = vec![
            Series {
                metric: "m.a".into(),
                tags: vec![("file".into(), "x".into())],
                points: vec![(1, "1.50".into()), (3, "2".into())],
            },
            Series {
                metric: "m.b".into(),
                tags: vec![("file".into(), "y".into())],
                points: vec![(2, "0.001".into())],
            },
        ];
        let text = String::from_utf8(put_stream(&series).expect("stream")).expect("utf-8");
        assert_eq!(
            text,
            "put m.a 1 1.50 file=x\nput m.b 2 0.001 file=y\nput m.a 3 2 file=x\n"
        );
    }
}
