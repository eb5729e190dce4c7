//! Time source for the capacity model, the per-second statistics and the heat CSV.
//!
//! Logic never reads the wall clock itself: it receives `now` from a [`Clock`], so tests can
//! drive seconds by hand with [`ManualClock`] and assert exact budgets without sleeping.

use parking_lot::Mutex;
use std::fmt::Debug;
use std::time::{Duration, Instant};

/// Monotonic time since the proxy started.
pub trait Clock: Send + Sync + Debug {
    /// Elapsed time since an arbitrary, fixed origin.
    fn now(&self) -> Duration;
}

/// The real monotonic clock (origin = creation).
#[derive(Debug)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// A clock that only moves when told to; for tests and simulations.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: Mutex<Duration>,
}

impl ManualClock {
    /// A clock standing at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock();
        *now += by;
    }

    /// Sets the clock to `to` (never backwards: a smaller value is ignored).
    pub fn set(&self, to: Duration) {
        let mut now = self.now.lock();
        if to > *now {
            *now = to;
        }
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        *self.now.lock()
    }
}
