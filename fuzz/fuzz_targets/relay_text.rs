//! Any text parses as a DSN or fails cleanly; any bytes parse as an
//! envelope or fail cleanly. Never a panic.
#![no_main]

use hale_relay::envelope::parse_envelope;
use hale_relay::Dsn;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(dsn) = text.parse::<Dsn>() {
            // A parsed DSN renders, and its parts are usable.
            let _ = (dsn.to_string(), dsn.envelope_url(), dsn.auth_header());
        }
    }
    let _ = parse_envelope(data);
});
