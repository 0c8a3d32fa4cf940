//! The `/api/put` body parser: any bytes give points or a 400 error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = hourglass_server::check_put_body(data);
});
