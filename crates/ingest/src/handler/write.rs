//! Stage 5: the writes, in rounds. A throttle brings its entity to the directory at
//! once ([`super::watch`]); when that raises its fan-out, the writer gives back the
//! entity's items not yet written, and the next round re-keys them with the new k.
//! A batch larger than one call per writer slot is written in two waves: the second
//! is keyed while the first wave's calls are out.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use rand::Rng;
use sharding::key::ItemKey;
use store::batch::{
    BatchReport, BatchTable, Item, Outcome, Put, Remake, SizedItem, Slots, WriteStats,
};
use store::directory::ShardStore;
use store::queue::Queue;
use store::{Reading, ThrottleKind, pack};

use super::keying::{KeyedItem, keyed_item, keyed_slab};
use super::observe::Changes;
use super::stages::{KeyedWrite, Message, Shared, writes, writes_mut};
use super::watch::RoundWatch;
use super::{BatchContext, Ingest, MAX_REKEY_ROUNDS, seeded};

/// What one round's writes (or one wave's of the first round, or all rounds) did.
#[derive(Default)]
pub(super) struct Written {
    pub(super) stats: WriteStats,
    /// Readings the writes stored (a block's members each), each stored key once.
    pub(super) readings: u64,
    /// Items given back stale, to re-key.
    pub(super) stale: u64,
    pub(super) changes: Changes,
}

/// What the write stage gives `settle`: every message and every slab, each write with
/// its outcome, and what the writes did.
pub(super) struct WrittenBatch {
    pub(super) messages: Vec<Message<KeyedWrite>>,
    pub(super) slabs: Vec<Shared<KeyedWrite>>,
    pub(super) written: Written,
}

impl Written {
    fn absorb(&mut self, other: Written) {
        self.stats.absorb(other.stats);
        self.readings += other.readings;
        self.stale += other.stale;
        self.changes.absorb(other.changes);
    }
}

/// The readings behind one round's puts, in the writer's input order.
struct Round<'a> {
    /// Each put's partition key.
    pks: Vec<&'a str>,
    /// Each put's entity, with the fan-out of its key.
    owners: Vec<(&'a str, u32)>,
    /// Each put's readings, to make the item again after a failed call consumed it: the
    /// writer keeps no copies ([`Remake`]).
    readings: Vec<&'a [Reading]>,
    /// Each put's slab expiry, when it is a slab.
    slab_ttls: Vec<Option<i64>>,
    retention: Duration,
}

impl<'a> Round<'a> {
    fn new(keyed: &'a [&'a mut KeyedWrite], retention: Duration) -> Self {
        Self {
            pks: keyed.iter().map(|k| k.key.pk.as_str()).collect(),
            owners: keyed.iter().map(|k| (k.entity(), k.fanout)).collect(),
            readings: keyed.iter().map(|k| k.readings.as_slice()).collect(),
            slab_ttls: keyed
                .iter()
                .map(|k| k.slab.as_ref().map(|place| place.ttl))
                .collect(),
            retention,
        }
    }
}

impl Remake for Round<'_> {
    fn remake(&self, index: usize, key: &ItemKey) -> Option<Item> {
        let members = self.readings.get(index)?;
        let encoded = match self.slab_ttls.get(index)? {
            Some(ttl) => store::slab::marshal(members, &key.pk, &key.sk, *ttl).ok()?,
            None => pack::encode(members, key, self.retention).ok()?,
        };
        Some(encoded.item)
    }
}

impl<T: BatchTable, S: ShardStore, Q: Queue, L> Ingest<T, S, Q, L> {
    /// Stage 5: writes every keyed write of `first` and of the second wave `rest` keys
    /// ([`Self::first_round`]), in rounds. In a round, a throttled key's entity goes to
    /// the directory at once; when its fan-out is raised, the writer gives back that
    /// entity's items not yet written, and the next round re-keys them with the new k.
    /// Nothing written is ever written again. Returns every message, each write with
    /// its outcome, and what every round did: the writer's counters, how many items
    /// went stale (given back for re-keying) and the fan-out changes won.
    pub(super) async fn write_stage<R: Rng + Send + ?Sized>(
        &self,
        first: Vec<Message<KeyedWrite>>,
        mut slabs: Vec<Shared<KeyedWrite>>,
        rest: Option<impl FnOnce() -> Vec<Message<KeyedWrite>>>,
        rates: &BTreeMap<String, Option<f64>>,
        cx: &BatchContext<'_>,
        rng: &mut R,
    ) -> WrittenBatch {
        let mut total = Written::default();
        let (mut messages, written) = self
            .first_round(first, &mut slabs, rest, rates, cx, rng)
            .await;
        if let Some(written) = written {
            total.absorb(written);
            for _ in 1..MAX_REKEY_ROUNDS {
                self.rekey(&mut messages, &mut slabs, cx).await;
                let slots = self.writer.slots();
                let Some(written) = self
                    .write_keyed(&mut messages, &mut slabs, rates, cx, rng, &slots)
                    .await
                else {
                    break;
                };
                total.absorb(written);
            }
        }
        WrittenBatch {
            messages,
            slabs,
            written: total,
        }
    }

    /// The first round of [`Self::write_stage`], in two waves when the batch holds more
    /// than one call per slot of the writer: the messages that fill every slot once
    /// (`first`) have their calls sent, and the rest is keyed (`rest`) while those calls
    /// are out, then written in the slots they free. Keying thousands of readings takes
    /// milliseconds of CPU that would otherwise pass before the first call leaves. The
    /// two waves share one set of the writer's `MAX_INFLIGHT` slots. The writer
    /// deduplicates within a wave: a reading sent twice in one batch, once in each wave,
    /// is written by each (the same item under the same key, stored once, at the cost
    /// of a second write). The batch's `slabs` go with the first wave. Returns every
    /// message, and what the round did: `None` when there was nothing to write or no
    /// time left.
    async fn first_round<R: Rng + Send + ?Sized>(
        &self,
        mut first: Vec<Message<KeyedWrite>>,
        slabs: &mut [Shared<KeyedWrite>],
        rest: Option<impl FnOnce() -> Vec<Message<KeyedWrite>>>,
        rates: &BTreeMap<String, Option<f64>>,
        cx: &BatchContext<'_>,
        rng: &mut R,
    ) -> (Vec<Message<KeyedWrite>>, Option<Written>) {
        let slots = self.writer.slots();
        let Some(key_rest) = rest else {
            let written = self
                .write_keyed(&mut first, slabs, rates, cx, rng, &slots)
                .await;
            return (first, written);
        };
        let (mut front_rng, mut back_rng) = (seeded(rng), seeded(rng));
        let mut rest;
        let written = {
            let mut front_write = std::pin::pin!(self.write_keyed(
                &mut first,
                slabs,
                rates,
                cx,
                &mut front_rng,
                &slots
            ));
            // Polled once, the first wave's calls are built and sent; its answers wait
            // until the rest is keyed, which takes less than a round trip.
            let front_done = futures::poll!(front_write.as_mut());
            rest = key_rest();
            let back_write = self.write_keyed(&mut rest, &mut [], rates, cx, &mut back_rng, &slots);
            let (front, back) = match front_done {
                std::task::Poll::Ready(front) => (front, back_write.await),
                std::task::Poll::Pending => tokio::join!(front_write, back_write),
            };
            match (front, back) {
                (Some(mut front), Some(back)) => {
                    front.absorb(back);
                    Some(front)
                }
                (front, back) => front.or(back),
            }
        };
        first.append(&mut rest);
        (first, written)
    }

    /// Writes the keyed writes of `messages` and `slabs` that have an item and no
    /// outcome, within `slots`: one round's writes ([`Self::write_round`]), each outcome
    /// recorded on its write. `None` when there was nothing to write or no time left.
    async fn write_keyed<R: Rng + Send + ?Sized>(
        &self,
        messages: &mut [Message<KeyedWrite>],
        slabs: &mut [Shared<KeyedWrite>],
        rates: &BTreeMap<String, Option<f64>>,
        cx: &BatchContext<'_>,
        rng: &mut R,
        slots: &Slots,
    ) -> Option<Written> {
        let mut to_write: Vec<&mut KeyedWrite> = writes_mut(messages)
            .chain(slabs.iter_mut().map(|s| &mut s.write))
            .filter(|k| k.outcome.is_none() && k.item.is_some())
            .collect();
        if to_write.is_empty() || cx.out_of_time() {
            return None;
        }
        let items: Vec<SizedItem> = to_write.iter_mut().filter_map(|k| k.item.take()).collect();
        let (report, changes) = {
            let round = Round::new(&to_write, self.config.retention);
            let puts = to_write
                .iter()
                .zip(items)
                .map(|(k, item)| Put::new(&k.key, item))
                .collect();
            self.write_round(puts, &round, rates, cx, rng, slots).await
        };
        let (mut stale, mut readings) = (0, 0);
        // The writer writes a key put twice once: its readings count once.
        let mut stored: HashSet<ItemKey> = HashSet::new();
        for (keyed, outcome) in to_write.iter_mut().zip(report.outcomes) {
            if outcome == Outcome::Stale {
                stale += 1;
                continue;
            }
            if outcome == Outcome::Written && stored.insert(keyed.key.clone()) {
                readings += keyed.readings.len() as u64;
            }
            keyed.outcome = Some(outcome);
        }
        Some(Written {
            stats: report.stats,
            readings,
            stale,
            changes,
        })
    }

    /// One round of [`Self::write_stage`]: the writes, and beside them the listener
    /// that brings throttled keys to the directory while the writes back off.
    async fn write_round<R: Rng + Send + ?Sized>(
        &self,
        puts: Vec<Put<'_>>,
        round: &Round<'_>,
        rates: &BTreeMap<String, Option<f64>>,
        cx: &BatchContext<'_>,
        rng: &mut R,
        slots: &Slots,
    ) -> (BatchReport, Changes) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let watch = RoundWatch::new(&round.pks, &round.owners, tx);
        let mut listener_rng = seeded(rng);
        let writes = async {
            let report = self
                .writer
                .write_in(puts, cx.work_deadline, rng, &watch, slots, round)
                .await;
            watch.close();
            report
        };
        let listener = self.follow_throttles(rx, &watch, rates, cx, &mut listener_rng);
        let (mut report, changes) = tokio::join!(writes, listener);
        // A raise the listener won after the writer's retries ran out still re-keys
        // what the throttle kept out of the raised entities: nothing of it was written.
        let raised = watch.raised();
        for (outcome, (entity, k)) in report.outcomes.iter_mut().zip(&round.owners) {
            let throttled = matches!(
                outcome,
                Outcome::FailedRetryable {
                    throttle: Some(ThrottleKind::KeyRange),
                    ..
                }
            );
            if throttled && raised.get(*entity).is_some_and(|now| now > k) {
                *outcome = Outcome::Stale;
            }
        }
        drop(raised);
        (report, changes)
    }

    /// Re-keys the readings a round gave back (no outcome, no item) with the fan-out in
    /// force now, a slab's with its group's; one whose metadata cannot be read stays
    /// unwritten (reported).
    async fn rekey(
        &self,
        messages: &mut [Message<KeyedWrite>],
        slabs: &mut [Shared<KeyedWrite>],
        cx: &BatchContext<'_>,
    ) {
        let now = cx.clock();
        let Ok(Ok(table)) =
            tokio::time::timeout_at(cx.work_deadline, self.directory.layout(now)).await
        else {
            return;
        };
        let given_back = |k: &KeyedWrite| k.outcome.is_none() && k.item.is_none();
        let entities: BTreeSet<&str> = writes(messages)
            .chain(slabs.iter().map(|s| &s.write))
            .filter(|k| given_back(k))
            .map(KeyedWrite::entity)
            .collect();
        if entities.is_empty() {
            return;
        }
        let fanouts = self.fanouts(entities, now, cx.work_deadline).await;
        let to_rekey = writes_mut(messages)
            .chain(slabs.iter_mut().map(|s| &mut s.write))
            .filter(|k| given_back(k));
        for k in to_rekey {
            let Some(Ok(history)) = fanouts.get(k.entity()) else {
                continue;
            };
            // A block or a slab keeps its members: its sort key follows from them, so
            // only its partition key moves with the raise.
            let keyed = match &k.slab {
                Some(place) => keyed_slab(&k.readings, place, None, &table, history, now),
                None => keyed_item(
                    &k.readings,
                    None,
                    &table,
                    history,
                    now,
                    self.config.retention,
                ),
            };
            if let Ok(KeyedItem { key, item }) = keyed {
                k.key = key.key;
                k.fanout = key.fanout;
                k.item = Some(item);
            }
        }
    }
}
