//! Conversions between the storage model and Bigtable's protocol types.

use bigtable_rs::bigtable::RowCell;
use bigtable_rs::google::bigtable::v2 as data;
use data::row_filter::{Chain, Filter};
use hourglass_storage::{
    Cell, CellForm, Check, Error, Mutation, ReadOptions, Row, TableSpec, TimeRange,
};

/// Milliseconds to Bigtable's microseconds (millisecond granularity), saturating.
fn micros(ms: i64) -> i64 {
    ms.saturating_mul(1000)
}

fn time_range(range: &TimeRange) -> data::TimestampRange {
    data::TimestampRange {
        start_timestamp_micros: if range.start <= 0 {
            0
        } else {
            micros(range.start)
        },
        end_timestamp_micros: range.end.map_or(0, micros),
    }
}

pub(crate) fn to_mutations(mutations: &[Mutation]) -> Vec<data::Mutation> {
    use data::mutation::Mutation as M;
    mutations
        .iter()
        .map(|m| {
            let inner = match m {
                Mutation::SetCell {
                    family,
                    qualifier,
                    timestamp,
                    value,
                } => M::SetCell(data::mutation::SetCell {
                    family_name: family.clone(),
                    column_qualifier: qualifier.clone(),
                    timestamp_micros: timestamp.map_or(-1, micros),
                    value: value.clone(),
                }),
                Mutation::DeleteCells {
                    family,
                    qualifier,
                    range,
                } => M::DeleteFromColumn(data::mutation::DeleteFromColumn {
                    family_name: family.clone(),
                    column_qualifier: qualifier.clone(),
                    time_range: (!range.is_all()).then(|| time_range(range)),
                }),
                Mutation::DeleteFamily { family } => {
                    M::DeleteFromFamily(data::mutation::DeleteFromFamily {
                        family_name: family.clone(),
                    })
                }
                Mutation::DeleteRow => M::DeleteFromRow(data::mutation::DeleteFromRow {}),
            };
            data::Mutation {
                mutation: Some(inner),
            }
        })
        .collect()
}

fn filter(f: Filter) -> data::RowFilter {
    data::RowFilter { filter: Some(f) }
}

fn chain(filters: Vec<data::RowFilter>) -> Option<data::RowFilter> {
    match filters.len() {
        0 => None,
        1 => filters.into_iter().next(),
        _ => Some(filter(Filter::Chain(Chain { filters }))),
    }
}

/// `^(a|b)$` for family names (which are `[-_.a-zA-Z0-9]+`).
fn family_regex(families: &[String]) -> String {
    let escaped: Vec<String> = families.iter().map(|f| f.replace('.', "\\.")).collect();
    format!("^({})$", escaped.join("|"))
}

pub(crate) fn to_read_filter(
    key_regex: Option<&str>,
    read: &ReadOptions,
) -> Option<data::RowFilter> {
    let mut filters = Vec::new();
    if let Some(re) = key_regex {
        filters.push(filter(Filter::RowKeyRegexFilter(re.as_bytes().to_vec())));
    }
    if let Some(families) = &read.families {
        filters.push(filter(Filter::FamilyNameRegexFilter(family_regex(
            families,
        ))));
    }
    if !read.time_range.is_all() {
        filters.push(filter(Filter::TimestampRangeFilter(time_range(
            &read.time_range,
        ))));
    }
    if read.latest_only {
        filters.push(filter(Filter::CellsPerColumnLimitFilter(1)));
    }
    if read.keys_only {
        filters.push(filter(Filter::StripValueTransformer(true)));
    }
    chain(filters)
}

/// The predicate of a check: the column exists (`expected: None`) or its newest value equals
/// the expected bytes.
pub(crate) fn check_predicate(check: &Check) -> data::RowFilter {
    let q = check.qualifier.clone();
    let mut filters = vec![filter(Filter::ColumnRangeFilter(data::ColumnRange {
        family_name: check.family.clone(),
        start_qualifier: Some(data::column_range::StartQualifier::StartQualifierClosed(
            q.clone(),
        )),
        end_qualifier: Some(data::column_range::EndQualifier::EndQualifierClosed(q)),
    }))];
    if let Some(v) = &check.expected {
        filters.push(filter(Filter::CellsPerColumnLimitFilter(1)));
        filters.push(filter(Filter::ValueRangeFilter(data::ValueRange {
            start_value: Some(data::value_range::StartValue::StartValueClosed(v.clone())),
            end_value: Some(data::value_range::EndValue::EndValueClosed(v.clone())),
        })));
    }
    chain(filters).unwrap_or_else(|| filter(Filter::PassAllFilter(true)))
}

/// A read row in the model's order (family, qualifier, newest first), versions trimmed to
/// each family's limit (Bigtable's garbage collection is lazy) and to `latest_only`.
pub(crate) fn to_row(
    spec: &TableSpec,
    read: &ReadOptions,
    key: Vec<u8>,
    cells: Vec<RowCell>,
) -> Option<Row> {
    let mut cells: Vec<Cell> = cells
        .into_iter()
        .map(|c| Cell {
            family: c.family_name,
            qualifier: c.qualifier,
            timestamp: c.timestamp_micros / 1000,
            // The server strips values already; an empty value costs nothing here.
            value: if read.keys_only { Vec::new() } else { c.value },
            form: CellForm::Plain,
        })
        .collect();
    cells.sort_by(|a, b| {
        (&a.family, &a.qualifier, std::cmp::Reverse(a.timestamp)).cmp(&(
            &b.family,
            &b.qualifier,
            std::cmp::Reverse(b.timestamp),
        ))
    });
    let mut out: Vec<Cell> = Vec::with_capacity(cells.len());
    let mut run = 0usize;
    for c in cells {
        let same = out
            .last()
            .is_some_and(|p: &Cell| p.family == c.family && p.qualifier == c.qualifier);
        run = if same { run + 1 } else { 1 };
        let limit = spec
            .families
            .iter()
            .find(|f| f.name == c.family)
            .and_then(|f| f.max_versions)
            .map_or(usize::MAX, |m| m as usize);
        let limit = if read.latest_only { 1 } else { limit };
        if run <= limit {
            out.push(c);
        }
    }
    if out.is_empty() {
        None
    } else {
        Some(Row { key, cells: out })
    }
}

pub(crate) fn is_transient(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::Unavailable
            | tonic::Code::DeadlineExceeded
            | tonic::Code::Aborted
            | tonic::Code::ResourceExhausted
            | tonic::Code::Internal
    )
}

pub(crate) fn status_error(s: &tonic::Status) -> Error {
    let msg = format!("{}: {}", s.code(), s.message());
    match s.code() {
        c if is_transient(c) => Error::Unavailable(msg),
        tonic::Code::NotFound => Error::TableNotFound(msg),
        tonic::Code::InvalidArgument
        | tonic::Code::FailedPrecondition
        | tonic::Code::OutOfRange => Error::InvalidRequest(msg),
        tonic::Code::Unauthenticated | tonic::Code::PermissionDenied => Error::Unavailable(msg),
        // The client's own call timeout ends a call as cancelled: the store did not answer
        // in time, as with a deadline (not retried: the call may have been applied).
        tonic::Code::Cancelled => Error::Unavailable(msg),
        _ => Error::Internal(msg),
    }
}

pub(crate) fn client_error(e: bigtable_rs::bigtable::Error) -> Error {
    use bigtable_rs::bigtable::Error as E;
    match e {
        E::RpcError(s) => status_error(&s),
        E::TransportError(t) => Error::Unavailable(format!("bigtable unreachable: {t}")),
        E::TimeoutError(secs) => {
            Error::Unavailable(format!("bigtable call timed out after {secs} s"))
        }
        other => Error::Internal(format!("bigtable: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_that_does_not_answer_is_unavailable_not_broken() {
        let timed_out = tonic::Status::cancelled("Timeout expired");
        assert!(matches!(status_error(&timed_out), Error::Unavailable(_)));
        assert!(
            !is_transient(timed_out.code()),
            "a cancelled call is not retried"
        );
        let deadline = tonic::Status::deadline_exceeded("late");
        assert!(matches!(status_error(&deadline), Error::Unavailable(_)));
        assert!(matches!(
            status_error(&tonic::Status::unknown("?")),
            Error::Internal(_)
        ));
    }
}
