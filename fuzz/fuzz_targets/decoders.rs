//! Decoders of stored bytes: data cells, row keys, annotation qualifiers and stored rows.
#![no_main]

use hourglass_core::schema::Schema;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let split = data.first().map_or(0, |b| *b as usize).min(data.len().saturating_sub(1));
    let (q, v) = data.get(1..).unwrap_or_default().split_at(split.min(data.len().saturating_sub(1)));
    let mut points = Vec::new();
    let _ = hourglass_core::compact::decode_cell(q, v, &mut points);
    let _ = hourglass_core::rowkey::decode_row_key(&Schema::default(), data);
    let _ = hourglass_core::annotation::decode_qualifier(0, data);
    let _ = hourglass_storage::model::RowData::decode(data, None);
});
