//! The wall clock, read at the edge: the one place the application crates turn
//! `SystemTime::now()` into a [`Timestamp`]. Everything below takes the time as a value.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sharding::time::Timestamp;

/// The wall clock could not be read as a [`Timestamp`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the wall clock is unusable: {0}")]
pub struct ClockError(String);

/// The wall clock, to the millisecond.
pub fn wall_clock() -> Result<Timestamp, ClockError> {
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| ClockError(e.to_string()))?;
    let ms = i64::try_from(wall.as_millis()).map_err(|e| ClockError(e.to_string()))?;
    Timestamp::from_millis(ms).map_err(|e| ClockError(e.to_string()))
}

/// The longest Lambda timeout; no deadline of a real invocation is this close to the
/// epoch.
const MAX_TIMEOUT_MS: u64 = 15 * 60 * 1000;

/// Time left in an invocation, for both functions. Lambda sends the deadline as epoch
/// milliseconds; `cargo lambda watch` sends its timeout (600000) instead, which read as
/// an instant lies in 1970 and would leave no time at all, so a value that small is a
/// duration.
#[must_use]
pub fn time_left(deadline_ms: u64, now_ms: u64) -> Duration {
    if deadline_ms <= MAX_TIMEOUT_MS {
        Duration::from_millis(deadline_ms)
    } else {
        Duration::from_millis(deadline_ms.saturating_sub(now_ms))
    }
}

/// Time left in an invocation whose deadline is `deadline_ms`, by the wall clock now
/// ([`time_left`]).
pub fn time_left_now(deadline_ms: u64) -> Result<Duration, ClockError> {
    let now = wall_clock()?;
    // A Timestamp from the wall clock is after 1970.
    let now_ms = u64::try_from(now.as_millis()).unwrap_or(0);
    Ok(time_left(deadline_ms, now_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_are_instants_unless_they_can_only_be_durations() {
        let now = 1_795_336_302_524;
        assert_eq!(time_left(now + 30_000, now), Duration::from_secs(30));
        assert_eq!(time_left(now - 5, now), Duration::ZERO);
        assert_eq!(time_left(600_000, now), Duration::from_secs(600));
    }

    #[test]
    fn the_wall_clock_is_after_the_projects_start() {
        let now = wall_clock().expect("the clock reads");
        assert!(now.as_millis() > 1_700_000_000_000);
    }
}
