//! The search query parser (`/api/search/tsmeta` and the other plugin types): any bytes
//! parse or are refused with a position inside the query, never a panic; what parses
//! evaluates on a document without panicking.
#![no_main]

use hourglass_engine::search::query_string::{Document, FieldKind, matches, parse};
use libfuzzer_sys::fuzz_target;

struct Doc;

impl Document for Doc {
    fn field(&mut self, field: &str) -> hourglass_engine::Result<(FieldKind, Vec<String>)> {
        let kind = if field == "description" {
            FieldKind::Text
        } else {
            FieldKind::Keyword
        };
        Ok((kind, vec![format!("{field} value 12"), String::new()]))
    }

    fn all_fields(&mut self) -> hourglass_engine::Result<Vec<(FieldKind, String)>> {
        Ok(vec![
            (FieldKind::Keyword, "sys.cpu".into()),
            (FieldKind::Text, "Web server CPU".into()),
        ])
    }
}

fuzz_target!(|data: &[u8]| {
    let query = String::from_utf8_lossy(data);
    match parse(&query) {
        Ok(node) => {
            let _ = matches(&node, &mut Doc);
        }
        Err(e) => assert!(e.position >= 1 && e.position <= query.chars().count() + 1),
    }
});
