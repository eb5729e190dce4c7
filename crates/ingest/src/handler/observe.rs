//! Stage 3, its I/O: each entity's arrival rate in the batch (`super::rates`) brought
//! to the shard directory before its readings are keyed, so a rate its keys cannot
//! carry raises its fan-out for this very batch (a busy entity is marked, a quiet one
//! shrunk); and the fan-out changes an invocation won.

use std::collections::BTreeMap;

use futures::StreamExt;
use rand::Rng;
use rand::rngs::StdRng;
use sharding::fanout::{Signal, Throttle};
use store::StoreError;
use store::batch::BatchTable;
use store::directory::{FanoutChange, ShardStore};
use store::queue::Queue;

use super::{BatchContext, Ingest, seeded};

/// Fan-out changes this invocation won.
#[derive(Debug, Default)]
pub(super) struct Changes {
    pub(super) raises: u64,
    pub(super) shrinks: u64,
}

impl Changes {
    pub(super) fn absorb(&mut self, other: Changes) {
        self.raises += other.raises;
        self.shrinks += other.shrinks;
    }

    /// Logs and counts what the directory did about `entity`.
    pub(super) fn record(&mut self, entity: &str, change: &Result<FanoutChange, StoreError>) {
        match change {
            Ok(FanoutChange::Raised(raise)) => {
                tracing::info!(entity, from = raise.from, to = raise.to, "fan-out raised");
                self.raises += 1;
            }
            Ok(FanoutChange::Shrunk(shrink)) => {
                tracing::info!(entity, from = shrink.from, to = shrink.to, effective_from = %shrink.effective_from, "fan-out shrinking");
                self.shrinks += 1;
            }
            Ok(change) => tracing::debug!(entity, ?change, "fan-out unchanged"),
            Err(err) => tracing::warn!(entity, error = %err, "fan-out update failed"),
        }
    }
}

impl<T: BatchTable, S: ShardStore, Q: Queue, L> Ingest<T, S, Q, L> {
    /// Stage 3: brings each entity's rate in this batch to the directory before its
    /// readings are keyed, so a rate its keys cannot carry raises its fan-out now and
    /// this very batch is keyed with the new k (and a busy entity is marked, a quiet
    /// one shrunk). What the cache answers alone is decided in one pass (most devices of
    /// a fleet: no metadata, a rate the default carries); the rest concurrently, each
    /// entity with its own random stream.
    pub(super) async fn observe_stage<R: Rng + ?Sized>(
        &self,
        rates: &BTreeMap<String, Option<f64>>,
        cx: &BatchContext<'_>,
        changes: &mut Changes,
        rng: &mut R,
    ) {
        let mut signals: Vec<(&str, Signal, StdRng)> = Vec::new();
        for (entity, rate) in rates {
            let signal = Signal {
                throttle: Throttle::Other,
                keyed: 0,
                rate: *rate,
            };
            // Every entity draws its stream, answered from the cache or not, so a seeded
            // run draws the same streams whatever the cache holds.
            let stream = seeded(rng);
            match self.directory.on_signal_cached(entity, &signal, cx.now) {
                Some(change) => changes.record(entity, &Ok(change)),
                None => signals.push((entity.as_str(), signal, stream)),
            }
        }
        let results: Vec<(&str, Result<FanoutChange, StoreError>)> = futures::stream::iter(signals)
            .map(|(entity, signal, mut rng)| async move {
                let change = tokio::time::timeout_at(
                    cx.work_deadline,
                    self.directory.on_signal(entity, signal, cx.now, &mut rng),
                )
                .await
                .unwrap_or(Err(StoreError::Deadline));
                (entity, change)
            })
            .buffer_unordered(self.config.max_inflight.max(1))
            .collect()
            .await;
        for (entity, change) in results {
            changes.record(entity, &change);
        }
    }
}
