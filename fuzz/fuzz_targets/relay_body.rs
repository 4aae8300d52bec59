//! Any request body, under any supported content-encoding, decodes within
//! the limit or fails cleanly; whatever decodes parses as an envelope or
//! as a store request, or fails cleanly. Never a panic, never more than the
//! limit in memory (a zip bomb is a refusal).
#![no_main]

use hale_relay::envelope::{parse_envelope, store_to_envelope};
use hale_relay::{decode_body, BodyError};
use libfuzzer_sys::fuzz_target;

const LIMIT: usize = 64 * 1024;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, raw)) = data.split_first() else {
        return;
    };
    let encoding = ["identity", "gzip", "deflate", "br"][usize::from(selector % 4)];
    match decode_body(raw, encoding, LIMIT) {
        Ok(body) => {
            assert!(body.len() <= LIMIT, "decoded past the limit");
            let _ = parse_envelope(&body);
            let _ = store_to_envelope(&body);
        }
        Err(BodyError::Unsupported(e)) => assert_eq!(e, "br"),
        Err(_) => {}
    }
});
