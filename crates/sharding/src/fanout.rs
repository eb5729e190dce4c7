//! Dynamic fan-out of hot entities: a per-entity shard count in a metadata item, raised
//! at once because keys nest.
//!
//! Per entity, a metadata item holds `number_of_shards` (the latest scheduled k),
//! `last_updated` (when k was last changed, the optimistic-lock token), `shard_history`
//! (every k with the time it takes effect) and `last_hot` (when a writer last saw the
//! entity busy). Fan-out keys nest (`crate::key`), so:
//! - a **raise** takes effect at once, to the k the measured rate needs
//!   ([`needed_fanout`]), not one doubling per cooldown: readers already read every key
//!   a smaller k used, and readings not yet written take the new k;
//! - a **shrink** waits for the propagation margin, after the entity stayed quiet for
//!   [`FanoutPolicy::shrink_after`]: once it is in force, no writer can still use the
//!   larger k for a reading stamped after it, so range reads go back to few Queries.
//!
//! Every change is a conditional update on `last_updated`, so of racing writers exactly
//! one wins; a shrink is also conditional on no writer having marked the entity hot
//! since the quiet period began.

use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::epoch::{Epoch, EpochError, FanoutHistory};
use crate::time::Timestamp;

/// The shard metadata item of one entity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardMeta {
    /// The latest scheduled fan-out k (a pending shrink's k until it is in force).
    pub number_of_shards: u32,
    /// When k was last changed (or the item created): the conditional-update token.
    pub last_updated: Timestamp,
    /// Every change of k with its effective time; empty = the layout's default.
    pub shard_history: FanoutHistory,
    /// When a writer last saw this entity busy (a key-range throttle, or a rate of at
    /// least a quarter of a key's on each key); a shrink needs it older than the quiet
    /// period.
    #[serde(default)]
    pub last_hot: Option<Timestamp>,
}

impl ShardMeta {
    /// The item a writer creates for an entity seen for the first time: k = 1 (a
    /// writer sets the layout's default), no history, so no existing key moves.
    #[must_use]
    pub fn initial(now: Timestamp) -> Self {
        ShardMeta {
            number_of_shards: 1,
            last_updated: now,
            shard_history: FanoutHistory::new(),
            last_hot: None,
        }
    }

    /// The fan-out in force at `now` (`default` before any epoch).
    #[must_use]
    pub fn in_force(&self, now: Timestamp, default: u32) -> u32 {
        self.shard_history.at(now).unwrap_or(default).max(1)
    }

    /// The change scheduled after `now`, if any (only shrinks wait).
    #[must_use]
    pub fn pending(&self, now: Timestamp) -> Option<u32> {
        self.shard_history
            .latest()
            .filter(|e| e.effective_from > now)
            .map(|e| e.value)
    }

    /// The item after `raise` (what the conditional update writes): the new k in force
    /// from `raise.effective_from`, any pending shrink dropped.
    pub fn raised(&self, raise: &Raise) -> Result<ShardMeta, EpochError> {
        // `raise.from` is the k in force at the decision, the default included.
        let history = self
            .shard_history
            .raised_now(raise.to, raise.effective_from, raise.from)?;
        Ok(ShardMeta {
            // A raise a millisecond ahead that was already larger stays the latest.
            number_of_shards: history.latest().map_or(raise.to, |e| e.value),
            last_updated: raise.updated_at,
            shard_history: history,
            last_hot: self.last_hot,
        })
    }

    /// The item after `shrink`: the smaller k from `shrink.effective_from`.
    pub fn shrunk(&self, shrink: &Shrink) -> Result<ShardMeta, EpochError> {
        let mut epochs = self.shard_history.epochs().to_vec();
        epochs.push(Epoch {
            effective_from: shrink.effective_from,
            value: shrink.to,
        });
        Ok(ShardMeta {
            number_of_shards: shrink.to,
            last_updated: shrink.updated_at,
            shard_history: FanoutHistory::from_epochs(epochs)?,
            last_hot: self.last_hot,
        })
    }
}

/// Which throttle a write ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Throttle {
    /// The key range of one partition is over its limit (`TableWriteKeyRangeThroughputExceeded`).
    KeyRange,
    /// The table or account is over its limit: more keys would not help.
    Table,
    /// Anything else (no throttle, or an unknown reason).
    Other,
}

/// Tuning of dynamic fan-out.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FanoutPolicy {
    /// Minimum time between two raises of one entity: long enough for the writers'
    /// throttles of keys under the old k to drain (they do not raise again), short
    /// enough that a throttle-driven doubling reaches a large k in seconds.
    pub cooldown: Duration,
    /// Spread of the random back-off after the cooldown, so racing writers do not all try
    /// the conditional update at once.
    pub jitter: Duration,
    /// Largest k.
    pub max_fanout: u32,
    /// Delay between a shrink's decision and the time it takes effect (cache TTL +
    /// accepted future skew + slack).
    pub propagation_margin: Duration,
    /// Write units per second one key is sized for (`RAISE_AHEAD_WCU`): a raise goes
    /// to `ceil(rate / key_rate)` keys, the rate in write units per second
    /// ([`arrival_rate`]).
    pub key_rate: f64,
    /// How long an entity must stay quiet (no change, no writer seeing it busy) before
    /// its fan-out shrinks.
    pub shrink_after: Duration,
}

/// Why k stays as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum KeepReason {
    /// Within cooldown plus this writer's random back-off.
    CoolingDown {
        /// When this writer may try again.
        until: Timestamp,
    },
    /// A table-level throttle: more keys would not help.
    TableThrottle,
    /// k is already `max_fanout`.
    AtMax,
    /// Neither a key-range throttle nor a rate the fan-out in force cannot carry.
    NotKeyRange,
    /// The k in force already carries the measured rate.
    Enough {
        /// The k in force.
        current: u32,
    },
    /// The throttled write was keyed with a smaller k than the one now in force (a
    /// writer with an older view, or a retry of an item keyed before the raise): the
    /// writes keyed now already spread over more keys.
    Superseded {
        /// The k of the throttled write's key.
        keyed: u32,
        /// The k in force.
        current: u32,
    },
}

/// A raise of k, in force at once, applied with a conditional update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Raise {
    /// k in force before.
    pub from: u32,
    /// k after.
    pub to: u32,
    /// Condition: the item's `last_updated` still equals this.
    pub precondition_last_updated: Timestamp,
    /// When the new k takes effect: the decision time.
    pub effective_from: Timestamp,
    /// The new `last_updated`.
    pub updated_at: Timestamp,
}

/// A shrink of k, in force after the propagation margin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shrink {
    /// k in force before.
    pub from: u32,
    /// k after.
    pub to: u32,
    /// Condition: the item's `last_updated` still equals this.
    pub precondition_last_updated: Timestamp,
    /// Condition: the item's `last_hot` is absent or earlier than this (the start of
    /// the quiet period).
    pub quiet_since: Timestamp,
    /// When the smaller k takes effect (`now + propagation margin`).
    pub effective_from: Timestamp,
    /// The new `last_updated` (the decision time).
    pub updated_at: Timestamp,
}

/// What a writer brings to a fan-out decision.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Signal {
    /// The throttle a write of the entity ran into ([`Throttle::Other`]: none).
    pub throttle: Throttle,
    /// The fan-out the throttled write was keyed with.
    pub keyed: u32,
    /// The entity's measured write rate in readings per second, if a sample showed one
    /// ([`arrival_rate`]); a lower bound, since one writer sees part of the entity's load.
    pub rate: Option<f64>,
}

/// What a writer should do about an entity's fan-out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum FanoutDecision {
    /// No metadata yet: create it (conditional on absence) with this k.
    Create {
        /// The initial k (the layout's default).
        k: u32,
    },
    /// Leave k alone.
    Keep {
        /// Why.
        reason: KeepReason,
    },
    /// Raise k.
    Raise(Raise),
}

/// The next k after `k`: doubling, at least +1, capped at `max`.
#[must_use]
pub fn grow(k: u32, max: u32) -> u32 {
    k.saturating_mul(2).max(k.saturating_add(1)).min(max)
}

/// The fan-out that carries `rate` readings per second at `key_rate` per key:
/// `ceil(rate / key_rate)`, within `1..=max`. A rate or key rate that is not a positive
/// number needs 1.
#[must_use]
pub fn needed_fanout(rate: f64, key_rate: f64, max: u32) -> u32 {
    if !(rate > 0.0 && rate.is_finite() && key_rate > 0.0 && key_rate.is_finite()) {
        return 1;
    }
    let k = (rate / key_rate).ceil();
    if k >= f64::from(max) {
        max.max(1)
    } else {
        (k as u32).max(1)
    }
}

/// The `last_updated` a change written at `now` sets: `now`, but always after the
/// token it replaces, so the conditional update's token changes even when an item is
/// created and raised within one millisecond. Otherwise a writer still holding the old
/// token could win a second, stale raise.
fn next_token(last_updated: Timestamp, now: Timestamp) -> Timestamp {
    now.max(last_updated.saturating_add(Duration::from_millis(1)))
}

/// Fewest readings of one entity a rate is drawn from ([`arrival_rate`]); also the
/// fewest messages of one entity that make a full batch's span its own measure.
pub const MIN_RATE_SAMPLE: u64 = 20;

/// The shortest time a rate is drawn over: a span of a few milliseconds by a clock of
/// millisecond resolution says little.
const MIN_RATE_SPAN: Duration = Duration::from_millis(1);

/// How one batch of messages arrived, by the queue's own clock: SQS's `SentTimestamp`,
/// which SQS sets and no sender can. A rate is drawn from it, never from the readings'
/// own timestamps, which a sender chooses (a clock of 1-s resolution, a multi-channel
/// sensor or a replayed buffer stamps many readings with one instant).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchArrival {
    /// The event source mapping's batching window: the poller gathers messages for up
    /// to this long, so readings that arrive within one window count as at most that
    /// window's worth of rate.
    pub window: Duration,
    /// The batch's span from its first to its last message, when the batch was cut by
    /// its size before its window ended (`None` otherwise). Messages then arrived
    /// faster than the window shows, and an entity with many messages in the batch
    /// ([`MIN_RATE_SAMPLE`]) is measured over this span: one message, whatever it
    /// carries, arrives at one instant and never makes a rate on its own.
    pub full_span: Option<Duration>,
}

impl BatchArrival {
    /// The shortest time `messages` messages of one entity count as arriving over.
    #[must_use]
    pub fn floor(&self, messages: u64) -> Duration {
        let floor = match self.full_span {
            Some(span) if messages >= MIN_RATE_SAMPLE => span,
            _ => self.window,
        };
        floor.max(MIN_RATE_SPAN)
    }
}

/// What one batch brought of one entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrived {
    /// Its readings.
    pub readings: u64,
    /// The write units its readings' items take (at least one each; an item of more
    /// than 1 KB takes one per started KB).
    pub write_units: u64,
    /// The messages that carried them.
    pub messages: u64,
    /// The span of those messages' `SentTimestamp`s.
    pub span: Duration,
}

impl Arrived {
    /// `readings` readings of items under 1 KB each (one write unit a reading).
    #[must_use]
    pub const fn small(readings: u64, messages: u64, span: Duration) -> Self {
        Self {
            readings,
            write_units: readings,
            messages,
            span,
        }
    }
}

/// The rate, in write units per second, at which an entity's readings arrived:
/// `write_units / max(span, floor)` ([`BatchArrival::floor`]). A key's limit is in
/// write units, so a reading whose item takes three takes three times the room of one
/// that takes one. `None` for fewer than [`MIN_RATE_SAMPLE`] readings.
#[must_use]
pub fn arrival_rate(arrived: Arrived, batch: &BatchArrival) -> Option<f64> {
    if arrived.readings < MIN_RATE_SAMPLE {
        return None;
    }
    let over = arrived.span.max(batch.floor(arrived.messages));
    Some(arrived.write_units as f64 / over.as_secs_f64())
}

/// Whether a rate of `rate` write units per second over `k` keys marks the entity busy:
/// at least a quarter of `key_rate` on each key. A busy entity is not shrunk.
#[must_use]
pub fn shows_heat(rate: f64, k: u32, key_rate: f64) -> bool {
    key_rate > 0.0 && rate / f64::from(k.max(1)) >= key_rate / 4.0
}

/// Why an operator's planned fan-out was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlannedRaiseError {
    /// Over the policy's largest k.
    #[error("fan-out {k} is over the largest allowed, {max} (FANOUT_MAX)")]
    OverMax {
        /// The k asked for.
        k: u32,
        /// `FanoutPolicy::max_fanout`.
        max: u32,
    },
    /// The new history would not be valid.
    #[error(transparent)]
    Epoch(#[from] EpochError),
}

/// An operator's raise of a known-hot entity to fan-out `k` ahead of its load (the
/// planner's hot-entity k, say). Like every raise it takes effect at once; unlike
/// [`decide`] it needs no throttle and no cooldown. `Ok(None)` when the fan-out in force
/// is already at least `k` and nothing is pending; a `k` of 0 is refused.
pub fn planned_raise(
    meta: &ShardMeta,
    k: u32,
    now: Timestamp,
    default: u32,
    policy: &FanoutPolicy,
) -> Result<Option<Raise>, PlannedRaiseError> {
    if k == 0 {
        return Err(EpochError::ZeroFanout.into());
    }
    if k > policy.max_fanout {
        return Err(PlannedRaiseError::OverMax {
            k,
            max: policy.max_fanout,
        });
    }
    let pending = meta.pending(now);
    // A raise placed a millisecond ahead (two raises in one ms) counts as in force.
    let in_force = meta.in_force(now, default);
    let current = pending.filter(|&p| p > in_force).unwrap_or(in_force);
    if k <= current && pending.is_none_or(|p| k <= p) {
        return Ok(None);
    }
    let raise = Raise {
        from: current,
        to: k.max(current),
        precondition_last_updated: meta.last_updated,
        effective_from: now,
        updated_at: next_token(meta.last_updated, now),
    };
    meta.raised(&raise)?;
    Ok(Some(raise))
}

/// Decides whether to raise an entity's fan-out on `signal` at `now`; `default` is the
/// layout's default fan-out (1 for time buckets).
///
/// The k needed is the larger of what the measured rate needs ([`needed_fanout`]) and,
/// on a key-range throttle of a write keyed with the k in force, the next doubling
/// ([`grow`]): a throttle proves the rate is over what the keys carry even when no
/// sample measured it. A raise goes straight to that k, in force at once, and cancels a
/// pending shrink. Raises are `cooldown + U(0, jitter)` apart (the first raise waits for
/// nothing); a table throttle never raises. The back-off is drawn from `rng` (nothing
/// sleeps here).
pub fn decide<R: Rng + ?Sized>(
    meta: Option<&ShardMeta>,
    signal: &Signal,
    now: Timestamp,
    default: u32,
    policy: &FanoutPolicy,
    rng: &mut R,
) -> FanoutDecision {
    let keep = |reason| FanoutDecision::Keep { reason };
    let Some(meta) = meta else {
        return FanoutDecision::Create { k: default.max(1) };
    };
    let max = policy.max_fanout.max(1);
    let current = meta.in_force(now, default);
    let by_rate = signal
        .rate
        .map_or(1, |rate| needed_fanout(rate, policy.key_rate, max));
    let need = match signal.throttle {
        Throttle::Table => return keep(KeepReason::TableThrottle),
        Throttle::KeyRange if signal.keyed >= current => by_rate.max(grow(current, max)),
        Throttle::KeyRange if by_rate <= current => {
            return keep(KeepReason::Superseded {
                keyed: signal.keyed,
                current,
            });
        }
        Throttle::KeyRange => by_rate,
        Throttle::Other if signal.rate.is_none() => return keep(KeepReason::NotKeyRange),
        Throttle::Other => by_rate,
    };
    let pending = meta.pending(now);
    if need <= current && pending.is_none_or(|p| need <= p) {
        return keep(if current >= max {
            KeepReason::AtMax
        } else {
            KeepReason::Enough { current }
        });
    }
    if !meta.shard_history.is_empty() {
        let jitter_ms = u64::try_from(policy.jitter.as_millis()).unwrap_or(u64::MAX);
        let backoff = Duration::from_millis(if jitter_ms == 0 {
            0
        } else {
            rng.random_range(0..=jitter_ms)
        });
        let until = meta
            .last_updated
            .saturating_add(policy.cooldown)
            .saturating_add(backoff);
        if now < until {
            return keep(KeepReason::CoolingDown { until });
        }
    }
    FanoutDecision::Raise(Raise {
        from: current,
        to: need.max(current),
        precondition_last_updated: meta.last_updated,
        effective_from: now,
        updated_at: next_token(meta.last_updated, now),
    })
}

/// Decides whether a raised entity's fan-out shrinks at `now`, given the rate a writer
/// measured for it (`None`: too few readings to tell). It shrinks when k is above the
/// layout's `default`, nothing is pending, and neither a change nor a busy mark
/// (`last_hot`) happened within [`FanoutPolicy::shrink_after`]; to twice what the
/// measured rate needs, or to one key when one carries it (at least `default`),
/// effective after the propagation margin.
#[must_use]
pub fn decide_shrink(
    meta: &ShardMeta,
    rate: Option<f64>,
    now: Timestamp,
    default: u32,
    policy: &FanoutPolicy,
) -> Option<Shrink> {
    let current = meta.in_force(now, default);
    if current <= default.max(1) || meta.pending(now).is_some() {
        return None;
    }
    let quiet_since = now.checked_sub(policy.shrink_after)?;
    if meta.last_updated > quiet_since || meta.last_hot.is_some_and(|h| h >= quiet_since) {
        return None;
    }
    let by_rate = rate.map_or(1, |r| needed_fanout(r, policy.key_rate, policy.max_fanout));
    // Headroom of twice the need, but a need one key carries goes back to one key: a
    // quiet entity (under a quarter of a key's rate on each key, `shows_heat`) leaves
    // the fan-out, and with it the hot index, instead of keeping two keys for good.
    let headroom = if by_rate <= 1 {
        1
    } else {
        by_rate.saturating_mul(2)
    };
    let to = headroom.max(default).max(1);
    if to >= current {
        return None;
    }
    Some(Shrink {
        from: current,
        to,
        precondition_last_updated: meta.last_updated,
        quiet_since,
        effective_from: now.checked_add(policy.propagation_margin)?,
        updated_at: next_token(meta.last_updated, now),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> FanoutPolicy {
        FanoutPolicy {
            cooldown: Duration::from_secs(2),
            jitter: Duration::from_secs(1),
            max_fanout: 32,
            propagation_margin: Duration::from_secs(365),
            key_rate: 500.0,
            shrink_after: Duration::from_secs(900),
        }
    }

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millis(ms).unwrap()
    }

    fn rng() -> rand::rngs::StdRng {
        <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(7)
    }

    fn throttled(keyed: u32, rate: Option<f64>) -> Signal {
        Signal {
            throttle: Throttle::KeyRange,
            keyed,
            rate,
        }
    }

    #[test]
    fn the_needed_fanout_rounds_up_and_caps() {
        assert_eq!(needed_fanout(20_000.0, 500.0, 64), 40);
        assert_eq!(needed_fanout(20_000.0, 500.0, 32), 32);
        assert_eq!(needed_fanout(501.0, 500.0, 32), 2);
        assert_eq!(needed_fanout(0.0, 500.0, 32), 1);
        assert_eq!(needed_fanout(f64::NAN, 500.0, 32), 1);
        assert_eq!(needed_fanout(1_000.0, 0.0, 32), 1);
    }

    #[test]
    fn a_raise_goes_to_the_measured_need_at_once() {
        let meta = ShardMeta::initial(at(1_000));
        let FanoutDecision::Raise(raise) = decide(
            Some(&meta),
            &throttled(1, Some(10_000.0)),
            at(1_500),
            1,
            &policy(),
            &mut rng(),
        ) else {
            panic!("a throttled entity with no history is raised at once");
        };
        assert_eq!((raise.from, raise.to), (1, 20));
        assert_eq!(raise.effective_from, at(1_500));
        let raised = meta.raised(&raise).unwrap();
        assert_eq!(raised.in_force(at(1_500), 1), 20);
        assert_eq!(raised.in_force(at(1_499), 1), 1);
        // Without a measured rate, a throttle doubles.
        let FanoutDecision::Raise(doubled) = decide(
            Some(&raised),
            &throttled(20, None),
            at(5_000),
            1,
            &policy(),
            &mut rng(),
        ) else {
            panic!("after the cooldown a throttle of the k in force raises");
        };
        assert_eq!((doubled.from, doubled.to), (20, 32));
    }

    #[test]
    fn raises_wait_for_the_cooldown_and_ignore_superseded_keys() {
        let meta = ShardMeta::initial(at(0));
        let FanoutDecision::Raise(raise) = decide(
            Some(&meta),
            &throttled(1, None),
            at(10),
            1,
            &policy(),
            &mut rng(),
        ) else {
            panic!("first raise");
        };
        let raised = meta.raised(&raise).unwrap();
        assert!(matches!(
            decide(
                Some(&raised),
                &throttled(2, None),
                at(1_000),
                1,
                &policy(),
                &mut rng()
            ),
            FanoutDecision::Keep {
                reason: KeepReason::CoolingDown { .. }
            }
        ));
        // A retry of an item keyed with k = 1 says nothing about k = 2.
        assert_eq!(
            decide(
                Some(&raised),
                &throttled(1, None),
                at(9_000),
                1,
                &policy(),
                &mut rng()
            ),
            FanoutDecision::Keep {
                reason: KeepReason::Superseded {
                    keyed: 1,
                    current: 2
                }
            }
        );
        // A table throttle never raises; a rate the keys carry changes nothing.
        let table = Signal {
            throttle: Throttle::Table,
            keyed: 2,
            rate: Some(1e6),
        };
        assert_eq!(
            decide(Some(&raised), &table, at(9_000), 1, &policy(), &mut rng()),
            FanoutDecision::Keep {
                reason: KeepReason::TableThrottle
            }
        );
        let calm = Signal {
            throttle: Throttle::Other,
            keyed: 2,
            rate: Some(900.0),
        };
        assert_eq!(
            decide(Some(&raised), &calm, at(9_000), 1, &policy(), &mut rng()),
            FanoutDecision::Keep {
                reason: KeepReason::Enough { current: 2 }
            }
        );
    }

    #[test]
    fn a_raise_in_the_millisecond_of_creation_still_changes_the_token() {
        let meta = ShardMeta::initial(at(1_000));
        let planned = planned_raise(&meta, 4, at(1_000), 1, &policy())
            .unwrap()
            .unwrap();
        assert_eq!(planned.precondition_last_updated, at(1_000));
        assert_eq!(planned.updated_at, at(1_001));
        let raised = meta.raised(&planned).unwrap();
        assert_ne!(raised.last_updated, meta.last_updated);
    }

    #[test]
    fn a_planned_raise_is_instant_never_shrinks_and_respects_the_maximum() {
        let meta = ShardMeta::initial(at(0));
        let raise = planned_raise(&meta, 8, at(10), 1, &policy())
            .unwrap()
            .unwrap();
        assert_eq!(raise.effective_from, at(10));
        let raised = meta.raised(&raise).unwrap();
        assert_eq!(
            planned_raise(&raised, 8, at(20_000), 1, &policy()),
            Ok(None)
        );
        assert_eq!(
            planned_raise(&raised, 2, at(20_000), 1, &policy()),
            Ok(None)
        );
        assert_eq!(
            planned_raise(&raised, 33, at(20_000), 1, &policy()),
            Err(PlannedRaiseError::OverMax { k: 33, max: 32 })
        );
        assert_eq!(
            planned_raise(&raised, 0, at(20_000), 1, &policy()),
            Err(PlannedRaiseError::Epoch(EpochError::ZeroFanout))
        );
    }

    #[test]
    fn a_quiet_entity_shrinks_after_the_margin_and_a_raise_cancels_it() {
        let meta = ShardMeta::initial(at(0));
        let raised = meta
            .raised(
                &planned_raise(&meta, 16, at(0), 1, &policy())
                    .unwrap()
                    .unwrap(),
            )
            .unwrap();
        // Not quiet long enough.
        assert_eq!(
            decide_shrink(&raised, None, at(899_999), 1, &policy()),
            None
        );
        // Marked busy within the quiet period.
        let busy = ShardMeta {
            last_hot: Some(at(500_000)),
            ..raised.clone()
        };
        assert_eq!(
            decide_shrink(&busy, None, at(1_000_000), 1, &policy()),
            None
        );
        // Quiet: shrinks to twice what the measured rate needs, after the margin.
        let shrink = decide_shrink(&raised, Some(900.0), at(1_000_000), 1, &policy()).unwrap();
        assert_eq!((shrink.from, shrink.to), (16, 4));
        assert_eq!(shrink.effective_from, at(1_365_000));
        let shrunk = raised.shrunk(&shrink).unwrap();
        assert_eq!(shrunk.in_force(at(1_364_999), 1), 16);
        assert_eq!(shrunk.in_force(at(1_365_000), 1), 4);
        // Nothing shrinks again while one is pending.
        let short_quiet = FanoutPolicy {
            shrink_after: Duration::from_secs(60),
            ..policy()
        };
        assert_eq!(
            decide_shrink(&shrunk, None, at(1_100_000), 1, &short_quiet),
            None
        );
        assert!(decide_shrink(&shrunk, None, at(1_365_000), 1, &short_quiet).is_some());
        // A busy entity with a pending shrink keeps its k: the shrink is dropped at once.
        let busy_again = Signal {
            throttle: Throttle::Other,
            keyed: 16,
            rate: Some(6_000.0),
        };
        let FanoutDecision::Raise(raise) = decide(
            Some(&shrunk),
            &busy_again,
            at(1_100_000),
            1,
            &policy(),
            &mut rng(),
        ) else {
            panic!("a rate over the pending k cancels the shrink");
        };
        assert_eq!((raise.from, raise.to), (16, 16));
        let back = shrunk.raised(&raise).unwrap();
        assert_eq!(back.pending(at(1_100_000)), None);
        assert_eq!(back.in_force(at(2_000_000), 1), 16);
        assert_eq!(back.number_of_shards, 16);
    }

    #[test]
    fn a_rate_is_drawn_from_arrival_never_from_the_readings_own_timestamps() {
        let window = BatchArrival {
            window: Duration::from_secs(1),
            full_span: None,
        };
        // 1,000 readings sent over 2 s: 500/s.
        assert_eq!(
            arrival_rate(Arrived::small(1000, 40, Duration::from_secs(2)), &window),
            Some(500.0)
        );
        // One message of 500 readings: at most a window's worth, 500/s, not the
        // 499,000/s a single stamped instant would claim.
        assert_eq!(
            arrival_rate(Arrived::small(500, 1, Duration::ZERO), &window),
            Some(500.0)
        );
        // The rate is in write units: 40 readings of 3-KB items in one window take
        // 120 write units a second of a key's 1,000, where 40 small ones take 40.
        let large = Arrived {
            write_units: 120,
            ..Arrived::small(40, 1, Duration::ZERO)
        };
        assert_eq!(arrival_rate(large, &window), Some(120.0));
        // Too few readings say nothing.
        assert_eq!(
            arrival_rate(
                Arrived::small(MIN_RATE_SAMPLE - 1, 1, Duration::ZERO),
                &window
            ),
            None
        );
        // A full batch cut after 50 ms: an entity of 100 one-reading messages in it
        // arrived at 2,000/s; one of a single message of 100 readings still counts
        // over the window.
        let full = BatchArrival {
            window: Duration::from_secs(1),
            full_span: Some(Duration::from_millis(50)),
        };
        assert_eq!(
            arrival_rate(Arrived::small(100, 100, Duration::from_millis(50)), &full),
            Some(2000.0)
        );
        assert_eq!(
            arrival_rate(Arrived::small(100, 1, Duration::ZERO), &full),
            Some(100.0)
        );
        // A full batch of one instant is floored at a millisecond.
        let instant = BatchArrival {
            window: Duration::from_secs(1),
            full_span: Some(Duration::ZERO),
        };
        assert_eq!(instant.floor(MIN_RATE_SAMPLE), MIN_RATE_SPAN);
    }
}
