//! Backoff: full-jitter exponential backoff with an attempt budget and a deadline for
//! retries inside one invocation ([`Backoff`]), and the growing wait before a queue
//! redelivers a message that failed transiently ([`Redelivery`]).

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

/// The most SQS allows for a message's visibility timeout: 12 hours.
pub const MAX_VISIBILITY: Duration = Duration::from_secs(12 * 60 * 60);

/// How long a transiently failed message stays invisible before the queue delivers it
/// again, by how often it was received: `ceiling(n) = min(cap, base * 2^(n-1))`, drawn
/// from `[ceiling/2, ceiling]` (half fixed, half jitter), so retries of a throttled burst
/// spread out and the receives the redrive policy counts span minutes, not one fixed
/// timeout each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redelivery {
    /// Ceiling of the wait after the first receive.
    pub base: Duration,
    /// Largest ceiling of any wait; at most [`MAX_VISIBILITY`].
    pub cap: Duration,
}

impl Redelivery {
    /// The ceiling of the wait after receive `receive_count` (1-based; 0 reads as 1).
    #[must_use]
    pub fn ceiling(&self, receive_count: u32) -> Duration {
        let doublings = receive_count.saturating_sub(1);
        let factor = 1u32.checked_shl(doublings).unwrap_or(u32::MAX);
        self.base
            .saturating_mul(factor)
            .min(self.cap)
            .min(MAX_VISIBILITY)
    }

    /// The wait after receive `receive_count`, in whole seconds (what SQS takes), drawn
    /// from `[ceiling/2, ceiling]`.
    pub fn visibility<R: Rng + ?Sized>(&self, receive_count: u32, rng: &mut R) -> Duration {
        let ceiling = self.ceiling(receive_count).as_secs();
        Duration::from_secs(rng.random_range(ceiling.div_ceil(2)..=ceiling))
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

    /// Share of `draws` in each of `bins` equal parts of `[lo, hi]`.
    fn shares(draws: &[f64], lo: f64, hi: f64, bins: usize) -> Vec<f64> {
        let mut counts = vec![0usize; bins];
        for &d in draws {
            let bin = (((d - lo) / (hi - lo)) * bins as f64) as usize;
            counts[bin.min(bins - 1)] += 1;
        }
        counts
            .iter()
            .map(|&c| c as f64 / draws.len() as f64)
            .collect()
    }

    /// Full jitter spreads retries: the delays after one attempt cover their whole range
    /// `[0, ceiling]` evenly (each tenth holds 5% to 15% of 2,000 draws), so writers
    /// throttled together do not come back together.
    #[test]
    fn delays_spread_over_the_whole_range() {
        let mut rng = StdRng::seed_from_u64(3);
        for attempt in [0, 3, 6] {
            let ceiling = B.ceiling(attempt).as_secs_f64();
            let draws: Vec<f64> = (0..2000)
                .map(|_| B.delay(attempt, &mut rng).as_secs_f64())
                .collect();
            for (i, share) in shares(&draws, 0.0, ceiling, 10).iter().enumerate() {
                assert!(
                    (0.05..=0.15).contains(share),
                    "attempt {attempt}: tenth {i} holds {share:.3} of the delays"
                );
            }
        }
    }

    const R: Redelivery = Redelivery {
        base: Duration::from_secs(30),
        cap: Duration::from_secs(900),
    };

    #[test]
    fn redelivery_waits_double_per_receive_then_cap() {
        let got: Vec<u64> = (0..8).map(|n| R.ceiling(n).as_secs()).collect();
        assert_eq!(got, [30, 30, 60, 120, 240, 480, 900, 900]);
        assert_eq!(R.ceiling(u32::MAX), Duration::from_secs(900));
        let huge = Redelivery {
            base: Duration::from_secs(3600),
            cap: Duration::from_secs(86_400),
        };
        assert_eq!(huge.ceiling(5), MAX_VISIBILITY);
    }

    #[test]
    fn redelivery_draws_between_half_and_the_ceiling() {
        let mut rng = StdRng::seed_from_u64(11);
        for n in 1..8 {
            let ceiling = R.ceiling(n);
            for _ in 0..100 {
                let wait = R.visibility(n, &mut rng);
                assert!(
                    wait <= ceiling && wait * 2 >= ceiling,
                    "{wait:?} vs {ceiling:?}"
                );
            }
        }
        // Spread over the upper half: each fifth of [ceiling/2, ceiling] holds 10% to
        // 30% of the waits.
        let ceiling = R.ceiling(6).as_secs_f64();
        let waits: Vec<f64> = (0..2000)
            .map(|_| R.visibility(6, &mut rng).as_secs_f64())
            .collect();
        for (i, share) in shares(&waits, ceiling / 2.0, ceiling, 5).iter().enumerate() {
            assert!(
                (0.10..=0.30).contains(share),
                "fifth {i} holds {share:.3} of the waits"
            );
        }
        let zero = Redelivery {
            base: Duration::ZERO,
            cap: Duration::ZERO,
        };
        assert_eq!(zero.visibility(3, &mut rng), Duration::ZERO);
    }
}
