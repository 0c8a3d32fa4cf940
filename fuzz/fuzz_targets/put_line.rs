//! The telnet `put` line parser: any bytes give a point or a known error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let line = String::from_utf8_lossy(data);
    let mut tags = Vec::new();
    if let Ok(p) = hourglass_core::put::parse_put(&line, &mut tags) {
        assert!(p.timestamp > 0);
        assert!(p.tags.end <= tags.len());
    }
});
