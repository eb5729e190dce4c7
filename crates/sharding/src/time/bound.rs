//! The one rule a time bound is read by, wherever one comes in: a query's `from`, `to`,
//! `ts` and `seen_since`, the sealer's `reseal` event and `shardline seal`'s flags.

use super::Timestamp;

/// The most characters an RFC 3339 bound may have (an input's budget).
pub const MAX_BOUND_CHARS: usize = 64;
/// The most digits an epoch-millisecond bound may have (an input's budget).
pub const MAX_BOUND_DIGITS: usize = 15;

/// Why a time bound was refused ([`parse_bound`], [`bound_of_millis`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BoundError {
    /// Over [`MAX_BOUND_CHARS`].
    #[error("too long")]
    TooLong,
    /// Neither RFC 3339 nor epoch milliseconds.
    #[error("unparsable")]
    Unparsable,
    /// Before 1970 or after 9999.
    #[error("before 1970 or after 9999")]
    OutOfRange,
}

/// Reads a time bound: RFC 3339 (any offset) or epoch milliseconds, by the one rule the
/// ingest reads a reading's `ts` with ([`Timestamp::parse`]: sub-millisecond digits are
/// truncated, as a stored reading's are, so a bound falls on the millisecond of the
/// readings it compares with), within an input's budget (at most
/// [`MAX_BOUND_DIGITS`] digits, or [`MAX_BOUND_CHARS`] characters, no sign, no
/// surrounding space) and the stored range (1970 to 9999).
pub fn parse_bound(raw: &str) -> Result<Timestamp, BoundError> {
    let ms = if !raw.is_empty()
        && raw.len() <= MAX_BOUND_DIGITS
        && raw.bytes().all(|b| b.is_ascii_digit())
    {
        raw.parse::<i64>().map_err(|_| BoundError::OutOfRange)?
    } else {
        if raw.len() > MAX_BOUND_CHARS {
            return Err(BoundError::TooLong);
        }
        if raw.starts_with('-') || raw.trim() != raw {
            return Err(BoundError::Unparsable);
        }
        Timestamp::parse(raw)
            .map_err(|_| BoundError::Unparsable)?
            .as_millis()
    };
    bound_of_millis(ms)
}

/// A bound given as epoch milliseconds (a JSON number): within 1970 to 9999.
pub fn bound_of_millis(ms: i64) -> Result<Timestamp, BoundError> {
    if ms < 0 {
        return Err(BoundError::OutOfRange);
    }
    Timestamp::from_millis(ms).map_err(|_| BoundError::OutOfRange)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(raw: &str, expected: Result<i64, BoundError>) {
        assert_eq!(
            parse_bound(raw).map(Timestamp::as_millis),
            expected,
            "{raw:?}"
        );
    }

    #[test]
    fn a_bound_is_rfc_3339_or_epoch_ms_within_its_budget_and_the_stored_range() {
        check("0", Ok(0));
        check("1782090000123", Ok(1_782_090_000_123));
        check("2026-06-22T01:00:00.123456Z", Ok(1_782_090_000_123));
        check("2026-06-22T03:00:00.123+02:00", Ok(1_782_090_000_123));
        check("253402300799999", Ok(253_402_300_799_999));
        check("253402300800000", Err(BoundError::OutOfRange));
        check("1969-12-31T23:59:59Z", Err(BoundError::OutOfRange));
        check("-1", Err(BoundError::Unparsable));
        check(" 2026-06-22T01:00:00Z", Err(BoundError::Unparsable));
        check("yesterday", Err(BoundError::Unparsable));
        check("", Err(BoundError::Unparsable));
        check("10000-01-01T00:00:00Z", Err(BoundError::Unparsable));
        check(&"1".repeat(16), Err(BoundError::Unparsable));
        check(&"9".repeat(65), Err(BoundError::TooLong));
        assert_eq!(bound_of_millis(-1), Err(BoundError::OutOfRange));
        assert_eq!(bound_of_millis(7).map(Timestamp::as_millis), Ok(7));
    }
}
