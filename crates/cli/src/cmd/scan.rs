//! `tsdb scan [--import|--delete|--compact] START [END] AGG [rate] [counter...] [downsample N FUNC]
//! METRIC [TAGK=TAGV...] [more queries]`: every stored row of the matching series, either as
//! OpenTSDB prints them (row key, then each cell's qualifier and value bytes with the
//! decoded offset, type, time and date) or, with `--import`, as import-format lines. With
//! `--delete` (as OpenTSDB's) the rows are printed as import lines, then deleted whole: every
//! cell of each scanned row, so the points of its whole hour and its notes, not only those
//! inside `[START, END]`. With `--compact` the rows are compacted on demand instead.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use hourglass_core::annotation;
use hourglass_core::compact::{self, Point};
use hourglass_core::rowkey::decode_row_key;
use hourglass_core::schema::{DATA_FAMILY, Schema};
use hourglass_core::time::Tz;
use hourglass_core::uid::UidKind;
use hourglass_core::value::Value;
use hourglass_engine::Tsdb;
use hourglass_engine::scan::{RowQuery, scan_rows};
use hourglass_engine::uid::format_signed_bytes;
use hourglass_storage::{Mutation, Row, RowMutation};

use crate::open::StoreArgs;

#[derive(Debug, clap::Args)]
pub(crate) struct ScanArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// Print import-format lines (`metric timestamp value tagk=tagv...`).
    #[arg(long)]
    import: bool,
    /// Print each row as import-format lines, then delete it: the whole row (its hour's
    /// points and notes), as OpenTSDB's `scan --delete` does.
    #[arg(long)]
    delete: bool,
    /// Compact every matching row now (one compacted cell per row) instead of printing it.
    #[arg(long, conflicts_with_all = ["import", "delete"])]
    compact: bool,
    #[arg(
        required = true,
        num_args = 1..,
        allow_hyphen_values = true,
        help = "START [END] AGG [rate] [downsample N FUNC] METRIC [TAGK=TAGV...] ..."
    )]
    query: Vec<String>,
}

/// Rows deleted per store call with `--delete`.
const DELETE_BATCH: usize = 1000;

#[derive(Debug)]
struct CliQuery {
    metric: String,
    tags: Vec<(String, String)>,
}

/// Splits OpenTSDB's command-line query syntax into a time range and sub-queries.
fn parse_query(words: &[String], now_ms: i64, tz: Tz) -> anyhow::Result<(i64, i64, Vec<CliQuery>)> {
    let (start, end, mut i) = super::parse_range(words, now_ms, tz)?;
    let mut queries = Vec::new();
    while i < words.len() {
        i += 1; // aggregator
        if words.get(i).is_some_and(|w| w == "rate") {
            i += 1;
            if words.get(i).is_some_and(|w| w.starts_with("counter")) {
                i += 1;
            }
        }
        if words.get(i).is_some_and(|w| w == "downsample") {
            i += 3;
        }
        let metric = words.get(i).context("missing metric")?.clone();
        i += 1;
        let mut tags = Vec::new();
        while let Some(w) = words.get(i).filter(|w| w.contains('=')) {
            super::parse_tag(w, &mut tags)?;
            i += 1;
        }
        queries.push(CliQuery { metric, tags });
    }
    Ok((start, end, queries))
}

pub(crate) fn run(args: &ScanArgs) -> anyhow::Result<ExitCode> {
    // Dates are read and printed in `tsd.core.timezone`; compacting keeps the newest of
    // duplicates.
    let mut refused = Vec::new();
    if args.compact {
        refused.push(crate::open::OTSDB_TIMESTAMP);
    }
    let config = args.store.config_refusing(&refused)?;
    let tz = config.timezone()?;
    let now_ms = chrono::Utc::now().timestamp_millis();
    let (start, end, queries) = match parse_query(&args.query, now_ms, tz) {
        Ok(q) => q,
        Err(e) => {
            eprintln!(
                "{e}\nUsage: scan [--delete|--import] START-DATE [END-DATE] query [queries...]"
            );
            return Ok(ExitCode::from(2));
        }
    };
    let db = args.store.open_tsdb(args.store.settings_from(&config)?)?;
    let schema = db.settings().schema.clone();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for q in &queries {
        let metric = db.uids().get_id(UidKind::Metric, &q.metric)?;
        let mut tags = Vec::new();
        for (k, v) in &q.tags {
            tags.push((
                db.uids().get_id(UidKind::TagKey, k)?,
                db.uids().get_id(UidKind::TagValue, v)?,
            ));
        }
        let query = RowQuery {
            metric,
            start_secs: start.div_euclid(1000),
            end_secs: end.div_euclid(1000),
            tags,
        };
        let rows = scan_rows(db.store().as_ref(), &schema, &query)?;
        if args.compact {
            let keys: Vec<Vec<u8>> = rows.into_iter().map(|r| r.key).collect();
            let rewritten = db.compact_rows(&keys)?;
            writeln!(
                out,
                "{}: {rewritten} of {} row(s) rewritten",
                q.metric,
                keys.len()
            )?;
            continue;
        }
        let mut deletions = Vec::new();
        for row in rows {
            if args.import || args.delete {
                print_import(&mut out, &db, &schema, &row)?;
            } else {
                print_row(&mut out, &db, &schema, &row, tz)?;
            }
            if args.delete {
                deletions.push(RowMutation {
                    key: row.key,
                    mutations: vec![Mutation::DeleteRow],
                });
                if deletions.len() >= DELETE_BATCH {
                    delete_rows(&db, &std::mem::take(&mut deletions))?;
                }
            }
        }
        if !deletions.is_empty() {
            delete_rows(&db, &deletions)?;
        }
    }
    out.flush()?;
    if args.delete {
        db.store().sync()?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Deletes data rows; with computed rollups their hours are marked dirty before and after,
/// so the tiers are computed again without the points (RFC 0008 phase 4).
fn delete_rows(db: &Tsdb, deletions: &[RowMutation]) -> anyhow::Result<()> {
    let keys = || deletions.iter().map(|d| d.key.as_slice());
    db.mark_raw_rows_changed(keys())?;
    db.store()
        .mutate_rows(&db.settings().schema.data_table, deletions)?;
    db.mark_raw_rows_changed(keys())?;
    Ok(())
}

/// `java.util.Date.toString()` in the zone `tz` (its abbreviation, as Java's `zzz`).
fn date(ms: i64, tz: Tz) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |d| {
            d.with_timezone(&tz)
                .format("%a %b %d %H:%M:%S %Z %Y")
                .to_string()
        },
    )
}

/// Metric name, base hour and tag names of a row key.
type RowNames = (String, u32, Vec<(String, String)>);

fn names(db: &Tsdb, schema: &Schema, key: &[u8]) -> anyhow::Result<RowNames> {
    let rk = decode_row_key(schema, key)?;
    let metric = db.uids().get_name(UidKind::Metric, rk.series.metric)?;
    let mut tags = Vec::new();
    for (k, v) in rk.series.tags {
        tags.push((
            db.uids().get_name(UidKind::TagKey, k)?,
            db.uids().get_name(UidKind::TagValue, v)?,
        ));
    }
    Ok((metric, rk.base_time, tags))
}

/// A value as OpenTSDB's `scan --import` prints it: a long, or Java's `Double.toString` of
/// the value widened to a double (`1.2345678E7`, `0.1`, `NaN`).
fn value_text(v: Value) -> String {
    match v {
        Value::Int(i) => i.to_string(),
        Value::Float(f) => hourglass_core::value::java_double_text(f64::from(f)),
        Value::Double(d) => hourglass_core::value::java_double_text(d),
    }
}

fn point_line(p: &Point, base: u32, tz: Tz) -> String {
    let q = p.qualifier;
    let ts_ms = q.timestamp_ms(base);
    let (offset, ts) = if q.is_millis() {
        (q.offset_ms(), ts_ms)
    } else {
        (q.offset_ms() / 1000, ts_ms / 1000)
    };
    let mut value = Vec::new();
    hourglass_core::value::write_bits(p.bits, q.flags(), &mut value);
    format!(
        "{}\t{}\t{}\t{}\t{}\t({})",
        format_signed_bytes(&q.to_bytes()),
        format_signed_bytes(&value),
        offset,
        if q.is_float() { 'f' } else { 'l' },
        ts,
        date(ts_ms, tz)
    )
}

/// The `{k=v, ...}` of a row line; a tag UID without a name prints as OpenTSDB prints the
/// exception (`net.opentsdb.uid.NoSuchUniqueId: No such unique ID for 'tagv': [0, 0, 5]`)
/// and the scan goes on.
fn row_tags(db: &Tsdb, schema: &Schema, key: &[u8]) -> anyhow::Result<String> {
    let rk = decode_row_key(schema, key)?;
    let mut tags = Vec::new();
    for (k, v) in rk.series.tags {
        let names = db
            .uids()
            .get_name(UidKind::TagKey, k)
            .and_then(|k| Ok((k, db.uids().get_name(UidKind::TagValue, v)?)));
        match names {
            Ok((k, v)) => tags.push(format!("{k}={v}")),
            Err(e @ hourglass_engine::Error::NoSuchId { .. }) => {
                return Ok(format!("net.opentsdb.uid.NoSuchUniqueId: {e}"));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(format!("{{{}}}", tags.join(", ")))
}

fn print_row(
    out: &mut impl Write,
    db: &Tsdb,
    schema: &Schema,
    row: &Row,
    tz: Tz,
) -> anyhow::Result<()> {
    let rk = decode_row_key(schema, &row.key)?;
    let metric = db.uids().get_name(UidKind::Metric, rk.series.metric)?;
    let base = rk.base_time;
    writeln!(
        out,
        "{} {metric} {base} ({}) {}",
        format_signed_bytes(&row.key),
        date(i64::from(base) * 1000, tz),
        row_tags(db, schema, &row.key)?
    )?;
    for cell in row.cells.iter().filter(|c| c.family == DATA_FAMILY) {
        let (q, v) = (&cell.qualifier, &cell.value);
        if compact::is_data_qualifier(q) {
            let mut points = Vec::new();
            if let Err(e) = compact::decode_cell(q, v, &mut points) {
                writeln!(
                    out,
                    "  {}\t{}\t[Corrupt: {e}]",
                    format_signed_bytes(q),
                    format_signed_bytes(v)
                )?;
            } else if compact::is_compacted(q) {
                write!(
                    out,
                    "  {}\t{} = {} values:",
                    format_signed_bytes(q),
                    format_signed_bytes(v),
                    points.len()
                )?;
                for p in &points {
                    write!(out, "\n    {}", point_line(p, base, tz))?;
                }
                writeln!(out)?;
            } else if let Some(p) = points.first() {
                writeln!(out, "  {}", point_line(p, base, tz))?;
            }
        } else if annotation::is_annotation_qualifier(q) {
            let ts = annotation::decode_qualifier(base, q)?;
            let offset = ts - i64::from(base) * 1000;
            let offset = if q.len() == 3 { offset / 1000 } else { offset };
            let shown = if q.len() == 3 { ts / 1000 } else { ts };
            writeln!(
                out,
                "  {}\t{}\t{offset}\t{}\t{shown}\t({})",
                format_signed_bytes(q),
                format_signed_bytes(v),
                String::from_utf8_lossy(v),
                date(ts, tz)
            )?;
        } else {
            writeln!(out, "  {}\t[Not a data point]", format_signed_bytes(v))?;
        }
    }
    Ok(())
}

fn print_import(out: &mut impl Write, db: &Tsdb, schema: &Schema, row: &Row) -> anyhow::Result<()> {
    let (metric, base, tags) = names(db, schema, &row.key)?;
    let tags: String = tags.iter().map(|(k, v)| format!(" {k}={v}")).collect();
    let decoded = hourglass_engine::rows::decode_row(Some(row), &[])?;
    for p in decoded.points {
        let ms = p.qualifier.timestamp_ms(base);
        let ts = if p.qualifier.is_millis() {
            ms
        } else {
            ms / 1000
        };
        writeln!(out, "{metric} {ts} {}{tags}", value_text(p.value()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn parses_opentsdb_cli_queries() {
        let now = 1_400_000_000_000;
        let (s, e, q) = parse_query(&words("1356998400 sum sys.cpu host=a"), now, Tz::UTC).unwrap();
        assert_eq!((s, e), (1_356_998_400_000, now));
        assert_eq!(q[0].metric, "sys.cpu");
        assert_eq!(q[0].tags, vec![("host".into(), "a".into())]);
        let (_, e, q) = parse_query(
            &words("1h-ago 2014/05/13-16:00 sum rate downsample 60000 avg m x=y sum n"),
            now,
            Tz::UTC,
        )
        .unwrap();
        assert_eq!(e, 1_399_996_800_000);
        assert_eq!(q.len(), 2);
        assert_eq!((q[0].metric.as_str(), q[1].metric.as_str()), ("m", "n"));
        assert!(parse_query(&words("1h-ago sum"), now, Tz::UTC).is_err());
        assert!(parse_query(&words("1h-ago sum m =x"), now, Tz::UTC).is_err());
    }

    #[test]
    fn dates_print_like_java() {
        assert_eq!(
            date(1_356_998_400_000, Tz::UTC),
            "Tue Jan 01 00:00:00 UTC 2013"
        );
        assert_eq!(
            date(1_356_998_400_000, Tz::America__New_York),
            "Mon Dec 31 19:00:00 EST 2012"
        );
        assert_eq!(
            date(1_372_636_800_000, Tz::Europe__Paris),
            "Mon Jul 01 02:00:00 CEST 2013"
        );
    }
}
