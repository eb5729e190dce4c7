//! While a round writes: who writes to each partition key, the throttles the writer
//! reports as they happen, brought to the shard directory at once, and the entities
//! raised meanwhile, whose items the writer then gives back stale for re-keying.

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use parking_lot::{Mutex, MutexGuard};
use std::time::Duration;

use rand::Rng;
use sharding::fanout::{KeepReason, Signal, Throttle};
use store::StoreError;
use store::batch::{BatchTable, WriteObserver};
use store::directory::{FanoutChange, ShardStore};
use store::queue::Queue;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::time::Instant;

use super::observe::Changes;
use super::{BatchContext, Ingest};
use crate::attribution::Owners;

/// Who writes to each partition key of one round, and what the writer hears.
pub(super) struct RoundWatch<'a> {
    /// Each item's partition key, and its entity with the fan-out of its key.
    pks: &'a [&'a str],
    keyed: &'a [(&'a str, u32)],
    /// Built from the two above at the first throttle or raise: most rounds see none.
    owners: OnceLock<Owners>,
    /// Per entity raised during the round: the fan-out now in force.
    raised: Mutex<HashMap<String, u32>>,
    throttled: Mutex<Option<UnboundedSender<String>>>,
}

impl<'a> RoundWatch<'a> {
    pub(super) fn new(
        pks: &'a [&'a str],
        keyed: &'a [(&'a str, u32)],
        tx: UnboundedSender<String>,
    ) -> Self {
        Self {
            pks,
            keyed,
            owners: OnceLock::new(),
            raised: Mutex::new(HashMap::new()),
            throttled: Mutex::new(Some(tx)),
        }
    }

    /// Who writes to each partition key of the round.
    fn owners(&self) -> &Owners {
        self.owners.get_or_init(|| {
            Owners::new(
                self.pks
                    .iter()
                    .zip(self.keyed)
                    .map(|(pk, (entity, k))| (*pk, *entity, *k)),
            )
        })
    }

    /// The fan-out now in force of each entity raised during the round.
    pub(super) fn raised(&self) -> MutexGuard<'_, HashMap<String, u32>> {
        self.raised.lock()
    }

    /// Ends the round: the listener's channel closes.
    pub(super) fn close(&self) {
        self.throttled.lock().take();
    }
}

impl WriteObserver for RoundWatch<'_> {
    fn throttled(&self, pk: &str) {
        if let Some(tx) = self.throttled.lock().as_ref() {
            // The receiver lives until the round ends: a send cannot fail before.
            let _ = tx.send(pk.to_owned());
        }
    }

    fn stale(&self, pk: &str) -> bool {
        let raised = self.raised.lock();
        !raised.is_empty() && self.owners().is_stale(pk, &raised)
    }
}

impl<T: BatchTable, S: ShardStore, Q: Queue, L> Ingest<T, S, Q, L> {
    /// Brings each throttled key's entities to the directory as the throttles arrive,
    /// until the round ends: each entity once, unless the directory only created its
    /// metadata or said it cools down (a throttle after that decides again). Records
    /// in `watch` every entity whose fan-out in force now exceeds its keys', so the
    /// writer gives their items back for re-keying.
    pub(super) async fn follow_throttles<R: Rng + ?Sized>(
        &self,
        mut throttled: UnboundedReceiver<String>,
        watch: &RoundWatch<'_>,
        rates: &BTreeMap<String, Option<f64>>,
        cx: &BatchContext<'_>,
        rng: &mut R,
    ) -> Changes {
        let mut changes = Changes::default();
        // Per entity: `None` once settled for this round, else when to ask again.
        let mut next: HashMap<String, Option<Instant>> = HashMap::new();
        while let Some(pk) = throttled.recv().await {
            let due =
                watch
                    .owners()
                    .of(&pk)
                    .into_iter()
                    .find(|(entity, _)| match next.get(entity) {
                        None => true,
                        Some(None) => false,
                        Some(Some(at)) => Instant::now() >= *at,
                    });
            let Some((entity, keyed)) = due else {
                continue;
            };
            if cx.out_of_time() {
                continue;
            }
            let at = cx.clock();
            let signal = Signal {
                throttle: Throttle::KeyRange,
                keyed,
                rate: rates.get(&entity).copied().flatten(),
            };
            let change = tokio::time::timeout_at(
                cx.work_deadline,
                self.directory.on_signal(&entity, signal, at, rng),
            )
            .await
            .unwrap_or(Err(StoreError::Deadline));
            let again = match &change {
                Ok(FanoutChange::Created { .. }) => Some(Instant::now()),
                Ok(FanoutChange::Kept(KeepReason::CoolingDown { until })) => {
                    let wait = until.as_millis().saturating_sub(at.as_millis());
                    Some(Instant::now() + Duration::from_millis(u64::try_from(wait).unwrap_or(0)))
                }
                _ => None,
            };
            // The directory re-read the entity: whoever raised it, this is its k now.
            if let Ok(Ok(history)) =
                tokio::time::timeout_at(cx.work_deadline, self.directory.fanout(&entity, at)).await
                && let Some(k) = history.for_write(at, at)
                && k > keyed
            {
                watch.raised().insert(entity.clone(), k);
            }
            changes.record(&entity, &change);
            next.insert(entity, again);
        }
        changes
    }
}
