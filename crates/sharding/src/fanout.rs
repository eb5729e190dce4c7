//! Dynamic fan-out of hot entities (seed 002's dynamic sharding, made epoch-safe).
//!
//! Per entity, a metadata item holds `number_of_shards` (the latest scheduled k),
//! `last_updated` (when k was last changed, the optimistic-lock token) and `shard_history`
//! (every k with the time it takes effect). A writer that sees a key-range throttle asks
//! [`decide`]; a `Raise` is applied with a conditional update on `last_updated` and takes
//! effect at `now + propagation margin`, so keys of readings already accepted never move.

use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::epoch::{Epoch, EpochError, FanoutHistory};
use crate::time::Timestamp;

/// Seed 002's metadata item for one entity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardMeta {
    /// The latest scheduled fan-out k (may not be in force yet).
    pub number_of_shards: u32,
    /// When k was last changed (or the item created): the conditional-update token.
    pub last_updated: Timestamp,
    /// Every change of k with its effective time; empty = the layout's default.
    pub shard_history: FanoutHistory,
}

impl ShardMeta {
    /// The item a writer creates for an entity seen for the first time: k = 1, no history
    /// (the layout default stays in force, so no existing key moves).
    #[must_use]
    pub fn initial(now: Timestamp) -> Self {
        ShardMeta {
            number_of_shards: 1,
            last_updated: now,
            shard_history: FanoutHistory::new(),
        }
    }

    /// The item after `raise` (what the conditional update writes).
    pub fn raised(&self, raise: &Raise) -> Result<ShardMeta, EpochError> {
        let mut history = self.shard_history.clone();
        let mut epochs: Vec<Epoch<u32>> = history.epochs().to_vec();
        epochs.push(Epoch {
            effective_from: raise.effective_from,
            value: raise.to,
        });
        history = FanoutHistory::from_epochs(epochs)?;
        Ok(ShardMeta {
            number_of_shards: raise.to,
            last_updated: raise.updated_at,
            shard_history: history,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FanoutPolicy {
    /// Minimum time between two changes of one entity's k. Keep it >= the propagation
    /// margin: a raise cannot relieve a throttle before it takes effect.
    pub cooldown: Duration,
    /// Spread of the random back-off after the cooldown, so racing writers do not all try
    /// the conditional update at once.
    pub jitter: Duration,
    /// Largest k.
    pub max_fanout: u32,
    /// Delay between a decision and the time the new k takes effect.
    pub propagation_margin: Duration,
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
    /// A raise is scheduled but not in force yet.
    Pending {
        /// When it takes effect.
        effective_from: Timestamp,
    },
    /// A table-level throttle: more keys would not help.
    TableThrottle,
    /// k is already `max_fanout`.
    AtMax,
    /// The throttle was not a key-range throttle.
    NotKeyRange,
    /// The throttled write was keyed with a smaller k than the one now in force (it was
    /// stamped before the last raise took effect): readings stamped since already spread
    /// over more keys, and raising again would not move the throttled one.
    Superseded {
        /// The k of the throttled write's key.
        keyed: u32,
        /// The latest k.
        current: u32,
    },
}

/// A raise of k, applied with a conditional update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Raise {
    /// k before.
    pub from: u32,
    /// k after.
    pub to: u32,
    /// Condition: the item's `last_updated` still equals this.
    pub precondition_last_updated: Timestamp,
    /// When the new k takes effect (`now + propagation margin`).
    pub effective_from: Timestamp,
    /// The new `last_updated` (the decision time).
    pub updated_at: Timestamp,
}

/// What a writer should do about an entity's fan-out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum FanoutDecision {
    /// No metadata yet: create it (conditional on absence) with this k.
    Create {
        /// The initial k (1).
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

/// The `last_updated` a change written at `now` sets: `now`, but always after the
/// token it replaces, so the conditional update's token changes even when an item is
/// created and raised within one millisecond. Otherwise a writer still holding the old
/// token could win a second, stale raise.
fn next_token(last_updated: Timestamp, now: Timestamp) -> Timestamp {
    now.max(last_updated.saturating_add(Duration::from_millis(1)))
}

/// Fewest readings of one entity in one batch that [`over_rate`] draws a rate from.
pub const MIN_RATE_SAMPLE: u64 = 20;

/// Whether `count` readings of one entity, seen in one batch with timestamps spanning
/// `span_ms` from first to last, show at least `per_key` readings per second on each of
/// its `k` keys: `(count - 1) / span / k >= per_key`.
///
/// One invocation sees only part of an entity's readings, so this is a lower bound on
/// its rate, and a raise it prompts is one a throttle would soon prompt anyway. Fewer
/// than [`MIN_RATE_SAMPLE`] readings say nothing; a span under 1 ms counts as 1 ms;
/// `per_key` of 0 (or less) turns the signal off.
#[must_use]
pub fn over_rate(count: u64, span_ms: i64, k: u32, per_key: f64) -> bool {
    if count < MIN_RATE_SAMPLE || per_key <= 0.0 || !per_key.is_finite() {
        return false;
    }
    let span_secs = span_ms.max(1) as f64 / 1000.0;
    let rate = (count - 1) as f64 / span_secs;
    rate / f64::from(k.max(1)) >= per_key
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
    /// The new epoch would not come after the last scheduled one.
    #[error(transparent)]
    Epoch(#[from] EpochError),
}

/// An operator's raise of a known-hot entity to fan-out `k` ahead of its load (the
/// planner's hot-entity k, say), so its first readings already spread over `k` keys.
///
/// Unlike [`decide`] it needs no throttle and no cooldown: the operator knows the load is
/// coming. It keeps the epoch rule: the new k takes effect at `now + propagation margin`,
/// so a writer's cached history still holds every epoch its readings can fall in.
/// `Ok(None)` when the latest scheduled k is already at least `k`: a fan-out never
/// shrinks, and asking again is harmless. A `k` of 0 is refused.
pub fn planned_raise(
    meta: &ShardMeta,
    k: u32,
    now: Timestamp,
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
    let current = meta.number_of_shards.max(1);
    if k <= current {
        return Ok(None);
    }
    let raise = Raise {
        from: current,
        to: k,
        precondition_last_updated: meta.last_updated,
        effective_from: now
            .checked_add(policy.propagation_margin)
            .ok_or(EpochError::OutOfRange)?,
        updated_at: next_token(meta.last_updated, now),
    };
    // Refuses an epoch that would not follow the last scheduled one.
    meta.raised(&raise)?;
    Ok(Some(raise))
}

/// Decides whether to raise an entity's fan-out after a write keyed with fan-out
/// `keyed` saw `throttle` at `now`.
///
/// A writer raises only on a key-range throttle of a write keyed with the latest k,
/// when k < max, no raise is pending, and `now >= last_updated + cooldown + U(0, jitter)`.
/// The cooldown separates changes of k: the first raise (an empty history) waits for
/// neither cooldown nor back-off, so an entity that is hot from its first reading is
/// not throttled for a whole cooldown. The back-off is drawn from `rng` (nothing
/// sleeps here).
pub fn decide<R: Rng + ?Sized>(
    meta: Option<&ShardMeta>,
    throttle: Throttle,
    keyed: u32,
    now: Timestamp,
    policy: &FanoutPolicy,
    rng: &mut R,
) -> FanoutDecision {
    let keep = |reason| FanoutDecision::Keep { reason };
    let Some(meta) = meta else {
        return FanoutDecision::Create { k: 1 };
    };
    match throttle {
        Throttle::Table => return keep(KeepReason::TableThrottle),
        Throttle::Other => return keep(KeepReason::NotKeyRange),
        Throttle::KeyRange => {}
    }
    let k = meta.number_of_shards.max(1);
    if let Some(latest) = meta.shard_history.latest()
        && latest.effective_from > now
    {
        return keep(KeepReason::Pending {
            effective_from: latest.effective_from,
        });
    }
    if keyed < k {
        return keep(KeepReason::Superseded { keyed, current: k });
    }
    if k >= policy.max_fanout {
        return keep(KeepReason::AtMax);
    }
    let until = if meta.shard_history.latest().is_some() {
        let jitter_ms = u64::try_from(policy.jitter.as_millis()).unwrap_or(u64::MAX);
        let backoff = Duration::from_millis(if jitter_ms == 0 {
            0
        } else {
            rng.random_range(0..=jitter_ms)
        });
        meta.last_updated
            .saturating_add(policy.cooldown)
            .saturating_add(backoff)
    } else {
        // No k was ever changed: nothing to cool down from, and no writers waking
        // together at a cooldown's end to spread out (the conditional update still
        // lets exactly one of racing writers win).
        meta.last_updated
    };
    if now < until {
        return keep(KeepReason::CoolingDown { until });
    }
    FanoutDecision::Raise(Raise {
        from: k,
        to: grow(k, policy.max_fanout),
        precondition_last_updated: meta.last_updated,
        effective_from: now.saturating_add(policy.propagation_margin),
        updated_at: next_token(meta.last_updated, now),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> FanoutPolicy {
        FanoutPolicy {
            cooldown: Duration::from_secs(60),
            jitter: Duration::from_secs(10),
            max_fanout: 16,
            propagation_margin: Duration::from_secs(5),
        }
    }

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millis(ms).unwrap()
    }

    #[test]
    fn a_planned_raise_takes_effect_after_the_margin_without_a_cooldown() {
        let meta = ShardMeta::initial(at(1_000_000));
        // Right after the item was created: no cooldown applies to an operator's raise.
        let raise = planned_raise(&meta, 4, at(1_000_001), &policy())
            .unwrap()
            .unwrap();
        assert_eq!((raise.from, raise.to), (1, 4));
        assert_eq!(raise.effective_from, at(1_005_001));
        assert_eq!(raise.precondition_last_updated, at(1_000_000));
        assert_eq!(raise.updated_at, at(1_000_001));
        let raised = meta.raised(&raise).unwrap();
        assert_eq!(raised.shard_history.at(at(1_005_000)), None);
        assert_eq!(raised.shard_history.at(at(1_005_001)), Some(4));
    }

    #[test]
    fn a_raise_in_the_millisecond_of_creation_still_changes_the_token() {
        let meta = ShardMeta::initial(at(1_000));
        let planned = planned_raise(&meta, 4, at(1_000), &policy())
            .unwrap()
            .unwrap();
        assert_eq!(planned.precondition_last_updated, at(1_000));
        assert_eq!(planned.updated_at, at(1_001));
        let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(1);
        let FanoutDecision::Raise(decided) = decide(
            Some(&meta),
            Throttle::KeyRange,
            1,
            at(1_000),
            &policy(),
            &mut rng,
        ) else {
            panic!("the first raise waits for nothing");
        };
        assert_eq!(decided.updated_at, at(1_001));
        // A writer still holding the old token now loses the conditional update.
        let raised = meta.raised(&decided).unwrap();
        assert_ne!(raised.last_updated, meta.last_updated);
    }

    #[test]
    fn a_planned_raise_never_shrinks_and_respects_the_maximum() {
        let meta = ShardMeta::initial(at(0));
        let raised = meta
            .raised(&planned_raise(&meta, 8, at(10), &policy()).unwrap().unwrap())
            .unwrap();
        // Asking for the same or a smaller k again changes nothing.
        assert_eq!(planned_raise(&raised, 8, at(20_000), &policy()), Ok(None));
        assert_eq!(planned_raise(&raised, 2, at(20_000), &policy()), Ok(None));
        assert_eq!(
            planned_raise(&raised, 17, at(20_000), &policy()),
            Err(PlannedRaiseError::OverMax { k: 17, max: 16 })
        );
        assert_eq!(
            planned_raise(&raised, 0, at(20_000), &policy()),
            Err(PlannedRaiseError::Epoch(EpochError::ZeroFanout))
        );
        // Growing further later is an ordinary epoch after the last one.
        let more = planned_raise(&raised, 16, at(20_000), &policy())
            .unwrap()
            .unwrap();
        assert_eq!((more.from, more.to), (8, 16));
    }

    #[test]
    fn a_planned_raise_cannot_land_before_a_scheduled_one() {
        let meta = ShardMeta::initial(at(0));
        let long = FanoutPolicy {
            propagation_margin: Duration::from_secs(60),
            ..policy()
        };
        let raised = meta
            .raised(&planned_raise(&meta, 2, at(0), &long).unwrap().unwrap())
            .unwrap();
        // A shorter margin now would put k = 4 before the pending k = 2.
        assert!(matches!(
            planned_raise(&raised, 4, at(1_000), &policy()),
            Err(PlannedRaiseError::Epoch(
                EpochError::NotAfterPrevious { .. }
            ))
        ));
    }

    #[test]
    fn a_batch_shows_a_rate_only_with_enough_readings_and_per_key() {
        // 1,000 readings over 1 s: 999/s.
        assert!(over_rate(1000, 1000, 1, 500.0));
        assert!(!over_rate(1000, 1000, 2, 500.0));
        assert!(over_rate(1000, 1000, 1, 999.0));
        assert!(!over_rate(1000, 1000, 1, 1000.0));
        // Too few readings say nothing, whatever their span.
        assert!(!over_rate(MIN_RATE_SAMPLE - 1, 0, 1, 1.0));
        assert!(over_rate(MIN_RATE_SAMPLE, 0, 1, 1.0));
        // Off.
        assert!(!over_rate(1000, 1, 1, 0.0));
        assert!(!over_rate(1000, 1, 1, f64::NAN));
    }
}
