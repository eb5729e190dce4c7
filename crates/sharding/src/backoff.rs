//! Full-jitter exponential backoff with an attempt budget and a deadline.

use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};

/// `delay(attempt) = U(0, min(cap, base * 2^attempt))`, at most `max_attempts` attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backoff {
    /// Ceiling of the first delay.
    pub base: Duration,
    /// Largest ceiling of any delay.
    pub cap: Duration,
    /// Total attempts, the first one included.
    pub max_attempts: u32,
}

impl Backoff {
    /// The ceiling of the delay after attempt `attempt` (0-based): `min(cap, base * 2^attempt)`.
    #[must_use]
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// A delay drawn uniformly from `[0, ceiling(attempt)]`.
    pub fn delay<R: Rng + ?Sized>(&self, attempt: u32, rng: &mut R) -> Duration {
        let ceiling = u64::try_from(self.ceiling(attempt).as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rng.random_range(0..=ceiling))
    }

    /// The sleep after failed attempt `attempt` (0-based) before the next one, or `None`
    /// when no attempt is left (`attempt + 1 >= max_attempts`) or the drawn delay does not
    /// fit in `remaining` (the caller's deadline minus the time it still needs).
    pub fn next_delay<R: Rng + ?Sized>(
        &self,
        attempt: u32,
        remaining: Duration,
        rng: &mut R,
    ) -> Option<Duration> {
        if attempt.saturating_add(1) >= self.max_attempts {
            return None;
        }
        let delay = self.delay(attempt, rng);
        (delay < remaining).then_some(delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    const B: Backoff = Backoff {
        base: Duration::from_millis(50),
        cap: Duration::from_secs(2),
        max_attempts: 5,
    };

    #[test]
    fn ceilings_double_then_cap() {
        let got: Vec<u128> = (0..8).map(|a| B.ceiling(a).as_millis()).collect();
        assert_eq!(got, [50, 100, 200, 400, 800, 1600, 2000, 2000]);
        assert_eq!(B.ceiling(200), Duration::from_secs(2));
    }

    #[test]
    fn delays_stay_under_ceiling_and_attempts_run_out() {
        let mut rng = StdRng::seed_from_u64(7);
        for attempt in 0..4 {
            for _ in 0..100 {
                let d = B.next_delay(attempt, Duration::from_secs(60), &mut rng);
                assert!(d.is_some_and(|d| d <= B.ceiling(attempt)));
            }
        }
        assert_eq!(B.next_delay(4, Duration::from_secs(60), &mut rng), None);
        assert_eq!(B.next_delay(0, Duration::ZERO, &mut rng), None);
    }
}
