//! Decoders of stored bytes: data cells, row keys, annotation qualifiers, stored rows, and
//! joint rows with their streams (cells, columns and hour summaries).
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
    if let Ok((members, stream)) = hourglass_storage::model::decode_joint_row(data) {
        use hourglass_engine::cell_codec::{decode_joint_columns, joint_summaries, DataCellCodec};
        use hourglass_storage::CellCodec;
        let members: Vec<_> = members.into_iter().map(|(m, _)| m).collect();
        let _ = DataCellCodec.decode_joint("t", stream, &members);
        let _ = decode_joint_columns::<f64>(stream, &members, 0, &mut Vec::new(), &mut Vec::new());
        let _ = joint_summaries(stream, &members);
    }
});
