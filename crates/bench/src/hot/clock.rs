//! The simulated clock of a run: real time while work is under way, jumps while idle.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use capacity_proxy::Clock;

/// Real time while busy, jumps while idle.
#[derive(Debug)]
pub(super) struct SimClock {
    origin: Instant,
    skipped: Mutex<Duration>,
}

impl SimClock {
    pub(super) fn new() -> Self {
        Self {
            origin: Instant::now(),
            skipped: Mutex::new(Duration::ZERO),
        }
    }

    pub(super) fn jump_to(&self, to: Duration) {
        let mut skipped = self.skipped.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.origin.elapsed() + *skipped;
        if to > now {
            *skipped += to - now;
        }
    }
}

impl Clock for SimClock {
    fn now(&self) -> Duration {
        self.origin.elapsed() + *self.skipped.lock().unwrap_or_else(|e| e.into_inner())
    }
}
