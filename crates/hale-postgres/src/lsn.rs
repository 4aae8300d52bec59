//! WAL positions (`pg_lsn`) as `u64`: PostgreSQL's `X/Y` text form parsed
//! and written, and the lag between two positions.

/// Text that is not a `pg_lsn` in its `X/Y` form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a WAL position (X/Y, hexadecimal): {text:?}")]
pub struct LsnParseError {
    /// The text, cut to 40 characters.
    pub text: String,
}

/// Parses PostgreSQL's text form of a WAL position, `X/Y`: two hexadecimal
/// numbers of 1 to 8 digits, the high and the low 32 bits (`16/B374D848`).
/// Total: any other text is an error, never a panic.
pub fn parse_lsn(text: &str) -> Result<u64, LsnParseError> {
    let invalid = || LsnParseError {
        text: text.chars().take(40).collect(),
    };
    let (high, low) = text.split_once('/').ok_or_else(invalid)?;
    let half = |part: &str| -> Result<u64, LsnParseError> {
        // from_str_radix alone would take a leading '+'.
        if part.is_empty() || part.len() > 8 || !part.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(invalid());
        }
        u64::from_str_radix(part, 16).map_err(|_| invalid())
    };
    Ok(half(high)? << 32 | half(low)?)
}

/// Writes a WAL position the way PostgreSQL does (`16/B374D848`).
pub fn format_lsn(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

/// How many bytes of WAL a replica's replay is behind the primary's current
/// position; 0 when it is not behind (a replica can be momentarily "ahead" of
/// a position read earlier).
pub fn lag_bytes(primary_lsn: u64, replica_replay_lsn: u64) -> u64 {
    primary_lsn.saturating_sub(replica_replay_lsn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_form_parses_to_the_high_and_low_halves() {
        assert_eq!(parse_lsn("0/0"), Ok(0));
        assert_eq!(parse_lsn("16/B374D848"), Ok(0x16_B374_D848));
        assert_eq!(parse_lsn("0/3000148"), Ok(0x300_0148));
        assert_eq!(parse_lsn("ffffffff/FFFFFFFF"), Ok(u64::MAX));
    }

    #[test]
    fn anything_else_is_refused_without_panicking() {
        for text in [
            "",
            "/",
            "0/",
            "/0",
            "0",
            "0/0/0",
            "+1/0",
            "0/-1",
            "g/0",
            "100000000/0",
            "0/100000000",
            " 0/0",
            "0/0 ",
            "é/0",
        ] {
            assert!(parse_lsn(text).is_err(), "{text:?} parsed");
        }
    }

    #[test]
    fn formatting_and_parsing_round_trip() {
        for lsn in [0, 1, 0x1_0000_0000, 0x16_B374_D848, u64::MAX] {
            assert_eq!(parse_lsn(&format_lsn(lsn)), Ok(lsn));
        }
        assert_eq!(format_lsn(0x16_B374_D848), "16/B374D848");
    }

    #[test]
    fn lag_is_how_far_the_replay_is_behind_and_never_negative() {
        assert_eq!(lag_bytes(0x2_0000_0000, 0x1_FFF0_0000), 0x10_0000);
        assert_eq!(lag_bytes(5, 9), 0);
    }
}
