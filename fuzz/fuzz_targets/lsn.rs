//! Any text parses as a WAL position (`X/Y`) or fails cleanly, never a
//! panic; a position that parses is written back the way PostgreSQL writes
//! it, and that text parses to the same position.
#![no_main]

use hale_postgres::{format_lsn, parse_lsn};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(lsn) = parse_lsn(text) {
            assert_eq!(parse_lsn(&format_lsn(lsn)), Ok(lsn), "format then parse is the identity");
        }
    }
});
