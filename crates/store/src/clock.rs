//! The wall clock, read at the edge: the one place the application crates turn
//! `SystemTime::now()` into a [`Timestamp`]. Everything below takes the time as a value.

use std::time::{SystemTime, UNIX_EPOCH};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wall_clock_is_after_the_projects_start() {
        let now = wall_clock().expect("the clock reads");
        assert!(now.as_millis() > 1_700_000_000_000);
    }
}
