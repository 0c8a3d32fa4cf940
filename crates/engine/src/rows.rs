//! Reading stored data rows: every data cell (single or compacted) decoded into points,
//! ordered by time, conflicts between cells resolved newest-write-first.

use hourglass_core::compact::{self, Duplicate, Point};
use hourglass_core::schema::DATA_FAMILY;
use hourglass_storage::{Cell, Row};

use crate::Result;

/// The data cells of a row, decoded.
#[derive(Debug, Default)]
pub struct DecodedRow {
    /// Points sorted by time, one per time (newest write kept).
    pub points: Vec<Point>,
    /// Qualifiers of the data cells the points came from.
    pub data_qualifiers: Vec<Vec<u8>>,
    /// The first conflicting pair of points at one time, if any.
    pub duplicate: Option<Duplicate>,
}

/// Decodes a row's data cells; `extra` points (newer than anything stored) are merged last.
pub fn decode_row(row: Option<&Row>, extra: &[Point]) -> Result<DecodedRow> {
    let mut cells: Vec<&Cell> = row
        .map(|r| {
            r.cells
                .iter()
                .filter(|c| c.family == DATA_FAMILY && compact::is_data_qualifier(&c.qualifier))
                .collect()
        })
        .unwrap_or_default();
    // Write order: older cell versions first, so later ones win ties.
    cells.sort_by_key(|c| c.timestamp);
    let mut points = Vec::new();
    for c in &cells {
        compact::decode_cell(&c.qualifier, &c.value, &mut points)?;
    }
    points.extend_from_slice(extra);
    let mut strict = points.clone();
    let duplicate = compact::sort_and_dedupe(&mut strict, false).err();
    if duplicate.is_some() {
        compact::sort_and_dedupe(&mut points, true).ok();
    } else {
        points = strict;
    }
    Ok(DecodedRow {
        points,
        data_qualifiers: cells.iter().map(|c| c.qualifier.clone()).collect(),
        duplicate,
    })
}
