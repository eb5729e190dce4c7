//! What one invocation of the handler starts from: the wall clock read once, the
//! deadline, and a fresh RNG. The Lambda binary and `shardline-local run-local` both start
//! every invocation here, so the two run the handler alike.

use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use sharding::time::Timestamp;
pub use store::clock::ClockError;
pub use store::clock::time_left;
use store::clock::wall_clock;

/// One invocation's clock, deadline and randomness, passed down to
/// [`crate::Ingest::handle`] (the handler reads no clock and owns no RNG of its own).
#[derive(Debug)]
pub struct Invocation {
    /// The wall clock at the start of the invocation.
    pub now: Timestamp,
    /// When the invocation must have answered.
    pub deadline: tokio::time::Instant,
    /// Jitter and tie-breaking for this invocation, seeded from the OS.
    pub rng: StdRng,
}

impl Invocation {
    /// An invocation with `time_left` to answer, starting now.
    pub fn start(time_left: Duration) -> Result<Self, ClockError> {
        Ok(Self {
            now: wall_clock()?,
            deadline: tokio::time::Instant::now() + time_left,
            rng: StdRng::from_os_rng(),
        })
    }

    /// An invocation under the Lambda runtime's `deadline_ms` (see [`time_left`]).
    pub fn under_deadline(deadline_ms: u64) -> Result<Self, ClockError> {
        let now = wall_clock()?;
        // A Timestamp from the wall clock is after 1970.
        let now_ms = u64::try_from(now.as_millis()).unwrap_or(0);
        Ok(Self {
            now,
            deadline: tokio::time::Instant::now() + time_left(deadline_ms, now_ms),
            rng: StdRng::from_os_rng(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invocation_starts_at_the_wall_clock_with_its_time_left() {
        let before = tokio::time::Instant::now();
        let inv = Invocation::start(Duration::from_secs(30)).expect("a usable clock");
        assert!(inv.deadline >= before + Duration::from_secs(30));
        assert!(inv.now.as_millis() > 1_700_000_000_000);
    }
}
