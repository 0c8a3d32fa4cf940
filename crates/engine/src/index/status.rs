//! What the index covers: the status rows (RFC 0007, "Status").
//!
//! `| 0x00 |` holds `g:format` (1 byte), `g:period` (4 bytes BE, seconds), `g:live_from`
//! (4 bytes BE, seconds) and `g:writers` (`hourglass`); `| 0x00 | metric |` holds
//! `g:verified` (4 bytes BE, an hour: the hours before it were proved complete by a data
//! scan). `live_from` = [`NOT_MAINTAINED`] records that a TSD ran with the index off: the
//! next TSD that maintains it again sets it to the next period's start. `g:notes_from` (8
//! bytes BE, ms), when present, says every series note has its `0x30` place (see
//! [`Status::notes_from`]).

use hourglass_core::schema::Schema;
use hourglass_storage::{Check, Mutation, ReadOptions, Row, ScanRequest, Store};

use super::{GLOBAL_FAMILY, PERIOD_SECS, metric_status_key, status_key};
use crate::{Error, Result};

/// The index format this binary writes and reads (2: RFC 0007, "Format 2"). An index of
/// another format is refused, never read or written: `tsdb index rebuild --replace`
/// replaces it.
pub const FORMAT: u8 = 0x02;
/// `live_from` of an index some TSD stopped maintaining: nothing is covered from live
/// writes until a TSD maintaining it sets it again.
pub const NOT_MAINTAINED: u32 = u32::MAX;
/// The value of `g:writers` when only Hourglass TSDs write the data table.
pub const WRITERS_HOURGLASS: &[u8] = b"hourglass";

pub const FORMAT_QUALIFIER: &[u8] = b"format";
pub const PERIOD_QUALIFIER: &[u8] = b"period";
pub const LIVE_FROM_QUALIFIER: &[u8] = b"live_from";
pub const WRITERS_QUALIFIER: &[u8] = b"writers";
pub const VERIFIED_QUALIFIER: &[u8] = b"verified";
pub const NOTES_FROM_QUALIFIER: &[u8] = b"notes_from";

/// The index's status row, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub format: u8,
    pub period_secs: u32,
    /// Hours from this one on are maintained by every writer ([`NOT_MAINTAINED`]: none).
    pub live_from: u32,
    pub writers: Vec<u8>,
    /// Notes indexed from (ms): every series note has its `0x30` place, those written since
    /// this time at their write and older ones by a rebuild (or there were none). `None`:
    /// some may lack one (written before annotation writes kept places, or while the index
    /// was off) until `tsdb index rebuild` of every metric over all time.
    pub notes_from: Option<i64>,
}

fn be_u32(table: &str, what: &str, bytes: &[u8]) -> Result<u32> {
    let b: [u8; 4] = bytes.try_into().map_err(|_| {
        Error::Corrupt(format!(
            "index status cell is not 4 bytes. table={table} cell={what} length={}",
            bytes.len()
        ))
    })?;
    Ok(u32::from_be_bytes(b))
}

/// The format the status row records, `None` when there is no status row yet.
pub fn stored_format(store: &dyn Store, table: &str) -> Result<Option<Vec<u8>>> {
    let Some(row) = store.get(table, &status_key(), &ReadOptions::latest())? else {
        return Ok(None);
    };
    Ok(row
        .value(GLOBAL_FAMILY, FORMAT_QUALIFIER)
        .map(<[u8]>::to_vec))
}

/// The refusal of an index of another format than [`FORMAT`].
fn other_format(table: &str, format: &[u8]) -> Error {
    let which = match format {
        [f] => f.to_string(),
        _ => format!("{format:02x?}"),
    };
    Error::Corrupt(format!(
        "the tag index table {table} is in format {which}, written by {}; this binary reads and writes format {FORMAT}: rebuild it with tsdb index rebuild --replace",
        if format.first().is_some_and(|f| *f < FORMAT) {
            "an older Hourglass"
        } else {
            "a newer Hourglass"
        }
    ))
}

/// The status row, `None` when there is none yet. A format or period this binary does not
/// know is an error: the index is not to be written or trusted then.
pub fn read(store: &dyn Store, table: &str) -> Result<Option<Status>> {
    let row = store.get(table, &status_key(), &ReadOptions::latest())?;
    status_of(table, row.as_ref())
}

/// [`read`]'s answer from the status row as read.
fn status_of(table: &str, row: Option<&Row>) -> Result<Option<Status>> {
    let Some(row) = row else {
        return Ok(None);
    };
    let cell = |q: &[u8]| row.value(GLOBAL_FAMILY, q);
    let Some(format) = cell(FORMAT_QUALIFIER) else {
        return Ok(None);
    };
    if format != [FORMAT] {
        return Err(other_format(table, format));
    }
    let period_secs = be_u32(table, "period", cell(PERIOD_QUALIFIER).unwrap_or_default())?;
    if period_secs != PERIOD_SECS {
        return Err(Error::Corrupt(format!(
            "unknown tag index period (this binary knows 86400). table={table} period={period_secs}"
        )));
    }
    let live_from = be_u32(
        table,
        "live_from",
        cell(LIVE_FROM_QUALIFIER).unwrap_or_default(),
    )?;
    let notes_from = match cell(NOTES_FROM_QUALIFIER) {
        Some(v) => Some(i64::from_be_bytes(v.try_into().map_err(|_| {
            Error::Corrupt(format!(
                "index status cell is not 8 bytes. table={table} cell=notes_from length={}",
                v.len()
            ))
        })?)),
        None => None,
    };
    Ok(Some(Status {
        format: FORMAT,
        period_secs,
        live_from,
        writers: cell(WRITERS_QUALIFIER).unwrap_or_default().to_vec(),
        notes_from,
    }))
}

fn set(qualifier: &[u8], value: Vec<u8>) -> Mutation {
    Mutation::set_at(GLOBAL_FAMILY, qualifier, 0, value)
}

/// Called when a TSD (or a tool writing points) opens the database. With the index on: a
/// missing status row is written (`live_from` 0 on an empty data table, else the next
/// period's start, since series written earlier are missing from today's postings), one
/// left by a TSD that did not maintain the index gets `live_from` again, and an unknown
/// format is an error. With it off, an existing status row is marked not maintained (and
/// loses its notes marker: notes written without the index get no places).
/// Returns the status now in force (`None` with the index off).
pub fn open(
    store: &dyn Store,
    schema: &Schema,
    enabled: bool,
    now_ms: i64,
) -> Result<Option<Status>> {
    let table = &schema.index_table;
    if !enabled
        && let Some(format) = stored_format(store, table)?
        && format != [FORMAT]
    {
        // Not maintained, not read: left as it is until it is replaced.
        tracing::warn!(table = %table, error = %other_format(table, &format), "tag index of another format left alone (tsd.index.enable = false)");
        return Ok(None);
    }
    let status = read(store, table)?;
    let next_period = || {
        let now = u32::try_from((now_ms / 1000).max(0)).unwrap_or(u32::MAX - PERIOD_SECS);
        super::period_of(now).saturating_add(PERIOD_SECS)
    };
    if !enabled {
        if let Some(s) = &status
            && s.notes_from.is_some()
        {
            store.mutate_row(
                table,
                &status_key(),
                &[Mutation::delete(
                    GLOBAL_FAMILY,
                    NOTES_FROM_QUALIFIER.to_vec(),
                )],
            )?;
        }
        if let Some(s) = &status
            && s.live_from != NOT_MAINTAINED
        {
            tracing::warn!(table = %table, "tag index off (tsd.index.enable = false): its coverage ends now; the next start with it on covers from the next day, and `tsdb index rebuild` the past");
            store.mutate_row(
                table,
                &status_key(),
                &[set(
                    LIVE_FROM_QUALIFIER,
                    NOT_MAINTAINED.to_be_bytes().to_vec(),
                )],
            )?;
        }
        return Ok(None);
    }
    match status {
        Some(s) if s.live_from == NOT_MAINTAINED => {
            let live_from = next_period();
            tracing::warn!(table = %table, live_from, "tag index maintained again after a run without it: covered from the next day; `tsdb index rebuild` covers the past");
            store.mutate_row(
                table,
                &status_key(),
                &[set(LIVE_FROM_QUALIFIER, live_from.to_be_bytes().to_vec())],
            )?;
            Ok(Some(Status { live_from, ..s }))
        }
        Some(s) => Ok(Some(s)),
        None => {
            let has_data = store
                .scan(
                    &schema.data_table,
                    &ScanRequest {
                        read: ReadOptions::keys_only(),
                        limit: Some(1),
                        ..ScanRequest::default()
                    },
                )?
                .next()
                .transpose()?
                .is_some();
            let live_from = if has_data { next_period() } else { 0 };
            if has_data {
                tracing::warn!(table = %table, live_from, "tag index created beside a data table holding rows: covered from the next day; `tsdb index rebuild` makes the past usable");
            }
            // Over an empty data table no note lacks its place: notes are indexed from now.
            let notes_from = (!has_data).then_some(now_ms);
            create(store, table, live_from, notes_from)?;
            read(store, table)?.map(Some).ok_or_else(|| {
                Error::Internal(format!(
                    "index status row missing after it was written. table={table}"
                ))
            })
        }
    }
}

/// Writes a status row (format, period, `live_from`, writers `hourglass`, and the notes
/// marker when given) unless one exists: several TSDs starting at once on one Bigtable, the
/// first one's row stands.
pub fn create(
    store: &dyn Store,
    table: &str,
    live_from: u32,
    notes_from: Option<i64>,
) -> Result<()> {
    let mut cells = vec![
        set(FORMAT_QUALIFIER, vec![FORMAT]),
        set(PERIOD_QUALIFIER, PERIOD_SECS.to_be_bytes().to_vec()),
        set(LIVE_FROM_QUALIFIER, live_from.to_be_bytes().to_vec()),
        set(WRITERS_QUALIFIER, WRITERS_HOURGLASS.to_vec()),
    ];
    if let Some(ms) = notes_from {
        cells.push(set(NOTES_FROM_QUALIFIER, ms.to_be_bytes().to_vec()));
    }
    let check = Check {
        family: GLOBAL_FAMILY.to_string(),
        qualifier: FORMAT_QUALIFIER.to_vec(),
        expected: None,
    };
    store.check_and_mutate(table, &status_key(), &check, &cells)?;
    Ok(())
}

/// Records that every series note has its place from `ms` on (a rebuild of every metric over
/// all time gave the older ones theirs).
pub fn set_notes_from(store: &dyn Store, table: &str, ms: i64) -> Result<()> {
    store.mutate_row(
        table,
        &status_key(),
        &[set(NOTES_FROM_QUALIFIER, ms.to_be_bytes().to_vec())],
    )?;
    Ok(())
}

/// Whether every series note has its `0x30` place: the status row's notes marker is there.
pub fn notes_indexed(store: &dyn Store, table: &str) -> Result<bool> {
    Ok(read(store, table)?.is_some_and(|s| s.notes_from.is_some()))
}

/// The hour before which a metric's hours are proved complete (0: none).
pub fn verified(store: &dyn Store, table: &str, metric: &[u8]) -> Result<u32> {
    let row = store.get(table, &metric_status_key(metric), &ReadOptions::latest())?;
    match row
        .as_ref()
        .and_then(|r| r.value(GLOBAL_FAMILY, VERIFIED_QUALIFIER))
    {
        Some(v) => be_u32(table, "verified", v),
        None => Ok(0),
    }
}

/// Sets a metric's `verified` hour (the caller decides it only rises).
pub fn set_verified(store: &dyn Store, table: &str, metric: &[u8], hour: u32) -> Result<()> {
    store.mutate_row(
        table,
        &metric_status_key(metric),
        &[set(VERIFIED_QUALIFIER, hour.to_be_bytes().to_vec())],
    )?;
    Ok(())
}

/// Whether every hour of `metric` is covered (RFC 0007, "Lookup, suggest"): the index is
/// maintained by Hourglass writers only and the metric's coverage has no gap
/// (`verified(m) >= live_from(m)`). `None` asks about every metric at once, which only an
/// index maintained from the start (`live_from` 0) answers yes to.
pub fn covers_all_hours(store: &dyn Store, table: &str, metric: Option<&[u8]>) -> Result<bool> {
    // Both status rows in one read (one round trip on Bigtable).
    let mut keys = vec![status_key()];
    keys.extend(metric.map(metric_status_key));
    let rows = store.get_rows(table, &keys, &ReadOptions::latest())?;
    let Some(status) = status_of(table, rows.first().and_then(Option::as_ref))? else {
        return Ok(false);
    };
    if status.live_from == NOT_MAINTAINED || status.writers != WRITERS_HOURGLASS {
        return Ok(false);
    }
    if metric.is_none() {
        return Ok(status.live_from == 0);
    }
    let row = rows.get(1).and_then(Option::as_ref);
    let cell = |q: &[u8]| row.and_then(|r| r.value(GLOBAL_FAMILY, q));
    let live_from = match cell(LIVE_FROM_QUALIFIER) {
        Some(v) => be_u32(table, "live_from", v)?.max(status.live_from),
        None => status.live_from,
    };
    let verified = match cell(VERIFIED_QUALIFIER) {
        Some(v) => be_u32(table, "verified", v)?,
        None => 0,
    };
    Ok(verified >= live_from)
}

/// What the status rows say of one metric's hours (RFC 0007, "Status"): covered before
/// the metric's `verified` hour, or, when only Hourglass TSDs maintaining the index write
/// the data table, from its `live_from` on. Read once, asked of several ranges (a query
/// read on two threads asks for its two halves).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coverage {
    /// Hours before this one are covered (a data scan proved them).
    verified: u32,
    /// Hours from this one on are covered, when every writer maintains the index.
    live_from: Option<u32>,
}

impl Coverage {
    /// Whether every hour from `first_hour` to `last_hour` (inclusive) is covered.
    pub fn covers(&self, first_hour: u32, last_hour: u32) -> bool {
        if last_hour < self.verified {
            return true;
        }
        // Hours before `verified` are covered, and from `live_from` on: the range must not
        // reach into a gap between the two.
        self.live_from
            .is_some_and(|live| first_hour >= live || self.verified >= live)
    }
}

/// `metric`'s coverage; `None` without a status row (nothing covered).
pub fn coverage(store: &dyn Store, table: &str, metric: &[u8]) -> Result<Option<Coverage>> {
    let Some(status) = read(store, table)? else {
        return Ok(None);
    };
    let row = store.get(table, &metric_status_key(metric), &ReadOptions::latest())?;
    let cell = |q: &[u8]| row.as_ref().and_then(|r| r.value(GLOBAL_FAMILY, q));
    let verified = match cell(VERIFIED_QUALIFIER) {
        Some(v) => be_u32(table, "verified", v)?,
        None => 0,
    };
    let live_from = if status.live_from == NOT_MAINTAINED || status.writers != WRITERS_HOURGLASS {
        None
    } else {
        Some(match cell(LIVE_FROM_QUALIFIER) {
            Some(v) => be_u32(table, "live_from", v)?.max(status.live_from),
            None => status.live_from,
        })
    };
    Ok(Some(Coverage {
        verified,
        live_from,
    }))
}

/// Empties an index table for `tsdb index rebuild --replace` (RFC 0007, "Format 2"): every
/// row deleted, 10,000 at a time from a keys-only scan, the status row last, so an
/// interrupted replace leaves the old format recorded (and is run again). Returns the rows
/// deleted; nothing when the table does not exist.
pub fn clear(store: &dyn Store, table: &str) -> Result<u64> {
    const CHUNK: usize = 10_000;
    if !store.table_exists(table)? {
        return Ok(0);
    }
    let status = status_key();
    let mut deleted = 0u64;
    let mut start = [status.as_slice(), &[0]].concat();
    loop {
        let request = ScanRequest {
            start: start.clone(),
            read: ReadOptions::keys_only(),
            limit: Some(CHUNK),
            ..ScanRequest::default()
        };
        let keys: Vec<Vec<u8>> = store
            .scan(table, &request)?
            .map(|row| row.map(|r| r.key))
            .collect::<std::result::Result<_, _>>()?;
        let Some(last) = keys.last() else {
            break;
        };
        start = [last.as_slice(), &[0]].concat();
        let rows: Vec<hourglass_storage::RowMutation> = keys
            .into_iter()
            .map(|key| hourglass_storage::RowMutation {
                key,
                mutations: vec![Mutation::DeleteRow],
            })
            .collect();
        for chunk in rows.chunks(1000) {
            store.mutate_rows(table, chunk)?;
        }
        deleted += rows.len() as u64;
    }
    if store
        .get(table, &status, &ReadOptions::keys_only())?
        .is_some()
    {
        store.mutate_row(table, &status, &[Mutation::DeleteRow])?;
        deleted += 1;
    }
    Ok(deleted)
}
