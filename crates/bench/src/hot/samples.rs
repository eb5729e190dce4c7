//! The proxy's counters over simulated time: sampled every 50 ms of wall time and before
//! each jump of the clock, then binned by simulated second into the first clean window.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use capacity_proxy::{Clock, ProxyHandle};
use tokio::task::JoinHandle;

use super::clock::SimClock;
use super::rig::Rig;

/// (sim time, items accepted, items throttled) so far.
pub(super) type Sample = (Duration, u64, u64);

/// The samples of one run, and the task that takes them every 50 ms.
pub(super) struct Sampler {
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl Sampler {
    /// Takes a first sample and starts sampling.
    pub(super) fn start(rig: &Rig) -> Self {
        let samples = Arc::new(Mutex::new(vec![rig.sample()]));
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(sample_until(
            samples.clone(),
            stop.clone(),
            rig.clock.clone(),
            rig.proxy.clone(),
        ));
        Self {
            samples,
            stop,
            task,
        }
    }

    /// Adds a sample taken outside the task.
    pub(super) fn record(&self, sample: Sample) {
        self.samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(sample);
    }

    /// Stops the task and waits for it.
    pub(super) async fn stop(&mut self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        (&mut self.task).await?;
        Ok(())
    }

    /// Every sample, with a last one taken now, sorted by time.
    pub(super) fn finish(self, rig: &Rig) -> Vec<Sample> {
        let mut samples =
            std::mem::take(&mut *self.samples.lock().unwrap_or_else(|e| e.into_inner()));
        samples.push(rig.sample());
        samples.sort_by_key(|s| s.0);
        samples
    }
}

/// Samples the proxy's counters every 50 ms of wall time until `stop`.
async fn sample_until(
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: Arc<AtomicBool>,
    clock: Arc<SimClock>,
    proxy: Arc<ProxyHandle>,
) {
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let s = sample(&proxy, &clock);
        samples.lock().unwrap_or_else(|e| e.into_inner()).push(s);
    }
}

/// The proxy's counters at `clock`'s now.
pub(super) fn sample(proxy: &ProxyHandle, clock: &SimClock) -> Sample {
    let s = proxy.stats();
    (
        clock.now(),
        s.items_accepted,
        s.throttled_by_reason.values().sum(),
    )
}

/// From the proxy's samples (sorted by time), per simulated second of `n`: the items
/// attempted and throttled; returns the first second from which 10 seconds pass
/// without a throttle, and the share of attempts throttled from then on.
pub(super) fn clean_window(samples: &[Sample], n: usize) -> (Option<usize>, f64) {
    let mut attempted = vec![0u64; n];
    let mut throttled = vec![0u64; n];
    for pair in samples.windows(2) {
        let (t, a1, th1) = pair[1];
        let (_, a0, th0) = pair[0];
        let sec = t.as_secs() as usize;
        if sec < n {
            attempted[sec] += a1.saturating_sub(a0) + th1.saturating_sub(th0);
            throttled[sec] += th1.saturating_sub(th0);
        }
    }
    let first_clean_window =
        (0..=n.saturating_sub(10)).find(|&s| throttled[s..(s + 10).min(n)].iter().all(|&t| t == 0));
    let throttled_after = match first_clean_window {
        Some(s) => {
            let a: u64 = attempted[s..].iter().sum();
            let t: u64 = throttled[s..].iter().sum();
            if a == 0 { 0.0 } else { t as f64 / a as f64 }
        }
        None => f64::NAN,
    };
    (first_clean_window, throttled_after)
}
