//! What one run drives: the capacity-proxy's sink on the simulated clock, the ingest
//! handler in process over it, and the device's messages with the times they are sent.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use aws_lambda_events::event::sqs::SqsEvent;
use capacity_proxy::{Clock, Proxy, ProxyConfig, ProxyHandle};
use futures::StreamExt;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::clock::SimClock;
use super::queue::{Batching, Pending};
use super::samples::{self, Sample};
use super::{CONCURRENCY, DEVICE, KEY_RATE_SHARE, Run, SOURCE_QUEUE_URL};
use crate::common::{self, Gen};

/// The proxy, the ingest service and the clock they share.
pub(super) struct Rig {
    pub(super) clock: Arc<SimClock>,
    /// Shared with the sampling task.
    pub(super) proxy: Arc<ProxyHandle>,
    pub(super) service: common::Service,
    pub(super) batching: Batching,
}

impl Rig {
    /// The proxy's sink with keys of the run's `key_wcu`, and the ingest service with
    /// the template's settings but the run's batching and a key rate that follows the
    /// key limit.
    pub(super) async fn start(run: Run) -> Result<Self> {
        let Run {
            key_wcu,
            batch,
            window,
            blocks,
            ..
        } = run;
        let batching = Batching {
            size: batch,
            window,
        };
        let clock = Arc::new(SimClock::new());
        let mut pc = ProxyConfig::sink();
        pc.seed = Some(2);
        pc.clock = clock.clone();
        pc.limits.key_wcu = f64::from(key_wcu);
        let proxy = Arc::new(Proxy::start(pc).await?);
        let key_rate = (f64::from(key_wcu) * KEY_RATE_SHARE).to_string();
        let (batch_size, window_secs) = (batch.to_string(), window.as_secs_f64().to_string());
        let config = common::ingest_config(&[
            ("BATCH_SIZE", &batch_size),
            ("BATCHING_WINDOW_SECS", &window_secs),
            ("SHARDS", "8"),
            ("BUCKET", "hour"),
            ("RETENTION_DAYS", "30"),
            ("RAISE_AHEAD_WCU", &key_rate),
            ("SOURCE_QUEUE_URL", SOURCE_QUEUE_URL),
            ("BLOCKS", if blocks { "on" } else { "off" }),
        ])?;
        let service = common::service(&proxy.url(), config).await;
        Ok(Self {
            clock,
            proxy,
            service,
            batching,
        })
    }

    /// The proxy's counters now.
    pub(super) fn sample(&self) -> Sample {
        samples::sample(&self.proxy, &self.clock)
    }

    /// Invokes the handler on each event, `CONCURRENCY` at once; invocation `base + i`
    /// gets its own seeded RNG.
    pub(super) async fn invoke(
        &self,
        events: Vec<(Vec<Pending>, SqsEvent)>,
        base: u64,
    ) -> Vec<Result<(Vec<Pending>, ingest::Report)>> {
        let (service, clock) = (&self.service, &self.clock);
        futures::stream::iter(events.into_iter().enumerate())
            .map(|(i, (batch, ev))| async move {
                let mut rng = ChaCha8Rng::seed_from_u64(base + i as u64);
                let now = common::ts(clock.now().as_millis() as i64)?;
                let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
                let report = service.process(&ev, now, deadline, &mut rng).await;
                anyhow::Ok((batch, report))
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await
    }

    /// The hot device's fan-out epochs, as `k=2 from 14 s, ...` (seconds of the run),
    /// and the largest k.
    pub(super) async fn fanout_text(&self) -> Result<(String, u32)> {
        let history = self
            .service
            .directory()
            .fanout(DEVICE, common::ts(self.clock.now().as_millis() as i64)?)
            .await?;
        let largest = history.epochs().iter().map(|e| e.value).max().unwrap_or(1);
        let text = history
            .epochs()
            .iter()
            .map(|e| {
                let at = (e.effective_from.as_millis() - common::T0_MS) as f64 / 1000.0;
                format!("k={} from {at:.0} s", e.value)
            })
            .collect::<Vec<_>>()
            .join(", ");
        Ok((text, largest))
    }

    /// Shuts the proxy down, once no other task holds it.
    pub(super) async fn shutdown(self) -> Result<()> {
        if let Ok(proxy) = Arc::try_unwrap(self.proxy) {
            proxy.shutdown().await?;
        }
        Ok(())
    }
}

/// The hot device's messages: `total` readings `gap_ms` apart, `per_message` a message.
pub(super) struct Schedule {
    bodies: Vec<Arc<str>>,
    total: usize,
    per_message: usize,
    gap_ms: f64,
}

impl Schedule {
    /// `total` readings at `rate` a second, `per_message` a message.
    pub(super) fn new(total: usize, per_message: usize, rate: usize) -> Self {
        let gap_ms = 1000.0 / rate as f64;
        Self {
            bodies: hot_bodies(total, per_message, gap_ms),
            total,
            per_message,
            gap_ms,
        }
    }

    /// How many messages.
    pub(super) fn len(&self) -> usize {
        self.bodies.len()
    }

    pub(super) fn body(&self, j: usize) -> Arc<str> {
        self.bodies[j].clone()
    }

    /// When message `j` is sent: when its last reading has been taken.
    pub(super) fn due(&self, j: usize) -> Duration {
        let last = ((j + 1) * self.per_message).min(self.total) - 1;
        Duration::from_millis((last as f64 * self.gap_ms) as u64 + 1)
    }

    /// How many readings message `j` holds.
    pub(super) fn readings(&self, j: usize) -> usize {
        ((j + 1) * self.per_message).min(self.total) - j * self.per_message
    }
}

/// The hot device's message bodies: `total` readings `gap_ms` apart, `per_message` a
/// message; message j is sent when its last reading has been taken.
fn hot_bodies(total: usize, per_message: usize, gap_ms: f64) -> Vec<Arc<str>> {
    (0..total.div_ceil(per_message))
        .map(|j| {
            let readings: Vec<serde_json::Value> = (j * per_message
                ..((j + 1) * per_message).min(total))
                .map(|i| {
                    Gen {
                        device: DEVICE.to_owned(),
                        event: format!("hot-{i:09}"),
                        ts_ms: common::T0_MS + (i as f64 * gap_ms) as i64,
                        temperature: 20.0,
                    }
                    .json()
                })
                .collect();
            serde_json::json!({ "readings": readings })
                .to_string()
                .into()
        })
        .collect()
}
