//! Dynamic fan-out decisions (seed 002, epoch-safe).

use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use sharding::fanout::grow;
use sharding::{Epoch, FanoutHistory};
use sharding::{FanoutDecision, FanoutPolicy, KeepReason, ShardMeta, Throttle, decide};

use crate::common::ts;

const POLICY: FanoutPolicy = FanoutPolicy {
    cooldown: Duration::from_secs(300),
    jitter: Duration::from_secs(10),
    max_fanout: 16,
    propagation_margin: Duration::from_secs(90),
};

/// An entity at `k` that was never raised (created at `last_updated`).
fn meta(k: u32, last_updated: &str) -> ShardMeta {
    ShardMeta {
        number_of_shards: k,
        ..ShardMeta::initial(ts(last_updated))
    }
}

/// An entity whose k was last raised to `k` at `last_updated` (in force since then).
fn raised_meta(k: u32, last_updated: &str) -> ShardMeta {
    let at = ts(last_updated);
    ShardMeta {
        number_of_shards: k,
        last_updated: at,
        shard_history: FanoutHistory::from_epochs(vec![Epoch {
            effective_from: at,
            value: k,
        }])
        .expect("one epoch"),
    }
}

#[test]
fn growth_doubles_and_caps() {
    let got: Vec<u32> = [1, 2, 3, 8, 9, 16].iter().map(|&k| grow(k, 16)).collect();
    assert_eq!(got, [2, 4, 6, 16, 16, 16]);
}

#[test]
fn unknown_entity_is_created_at_one() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let d = decide(
        None,
        Throttle::KeyRange,
        1,
        ts("2026-06-22T01:00:00Z"),
        &POLICY,
        &mut rng,
    );
    assert_eq!(d, FanoutDecision::Create { k: 1 });
}

#[test]
fn table_and_other_throttles_never_raise() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let m = meta(2, "2026-06-22T00:00:00Z");
    let now = ts("2026-06-22T01:00:00Z");
    assert_eq!(
        decide(Some(&m), Throttle::Table, 2, now, &POLICY, &mut rng),
        FanoutDecision::Keep {
            reason: KeepReason::TableThrottle
        }
    );
    assert_eq!(
        decide(Some(&m), Throttle::Other, 2, now, &POLICY, &mut rng),
        FanoutDecision::Keep {
            reason: KeepReason::NotKeyRange
        }
    );
    let full = meta(16, "2026-06-22T00:00:00Z");
    assert_eq!(
        decide(Some(&full), Throttle::KeyRange, 16, now, &POLICY, &mut rng),
        FanoutDecision::Keep {
            reason: KeepReason::AtMax
        }
    );
}

#[test]
fn raise_after_cooldown_and_jitter_with_precondition() {
    let m = raised_meta(2, "2026-06-22T01:00:00Z");
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    // Inside the cooldown: keep, with a retry time between cooldown and cooldown + jitter.
    let d = decide(
        Some(&m),
        Throttle::KeyRange,
        2,
        ts("2026-06-22T01:04:59Z"),
        &POLICY,
        &mut rng,
    );
    let FanoutDecision::Keep {
        reason: KeepReason::CoolingDown { until },
    } = d
    else {
        panic!("expected a cooldown, got {d:?}");
    };
    assert!(
        until >= ts("2026-06-22T01:05:00Z") && until <= ts("2026-06-22T01:05:10Z"),
        "{until}"
    );
    // After cooldown + the whole jitter: raise.
    let now = ts("2026-06-22T01:05:10Z");
    let FanoutDecision::Raise(raise) =
        decide(Some(&m), Throttle::KeyRange, 2, now, &POLICY, &mut rng)
    else {
        panic!("expected a raise");
    };
    assert_eq!((raise.from, raise.to), (2, 4));
    assert_eq!(raise.precondition_last_updated, ts("2026-06-22T01:00:00Z"));
    assert_eq!(raise.effective_from, ts("2026-06-22T01:06:40Z"));
    let after = m.raised(&raise).expect("valid");
    assert_eq!(after.number_of_shards, 4);
    assert_eq!(after.last_updated, now);
    assert_eq!(
        after.shard_history.at(ts("2026-06-22T01:06:39.999Z")),
        Some(2)
    );
    assert_eq!(after.shard_history.at(ts("2026-06-22T01:06:40Z")), Some(4));
    // The raise is pending until it takes effect, whatever the cooldown says.
    let pending = ShardMeta {
        last_updated: ts("2026-06-22T00:00:00Z"),
        ..after
    };
    assert_eq!(
        decide(
            Some(&pending),
            Throttle::KeyRange,
            2,
            ts("2026-06-22T01:06:00Z"),
            &POLICY,
            &mut rng
        ),
        FanoutDecision::Keep {
            reason: KeepReason::Pending {
                effective_from: ts("2026-06-22T01:06:40Z")
            }
        }
    );
}

#[test]
fn jitter_spreads_racing_writers() {
    // Ten writers at the same instant right after the cooldown: the seeded back-offs
    // differ, so they do not all try the conditional update at once.
    let m = raised_meta(2, "2026-06-22T01:00:00Z");
    let now = ts("2026-06-22T01:05:00Z");
    let mut raising = 0;
    let mut untils = Vec::new();
    for seed in 0..10 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        match decide(Some(&m), Throttle::KeyRange, 2, now, &POLICY, &mut rng) {
            FanoutDecision::Raise(_) => raising += 1,
            FanoutDecision::Keep {
                reason: KeepReason::CoolingDown { until },
            } => untils.push(until),
            other => panic!("unexpected {other:?}"),
        }
    }
    untils.sort_unstable();
    untils.dedup();
    assert!(
        raising < 10 && untils.len() > 1,
        "raising {raising}, distinct retry times {}",
        untils.len()
    );
}

#[test]
fn first_raise_needs_no_cooldown_or_back_off() {
    // Created (k = 1, no history) at 01:00:00 and throttled again at once: no k was
    // changed yet, so neither cooldown nor back-off applies.
    let m = meta(1, "2026-06-22T01:00:00Z");
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let now = ts("2026-06-22T01:00:00Z");
    let FanoutDecision::Raise(raise) =
        decide(Some(&m), Throttle::KeyRange, 1, now, &POLICY, &mut rng)
    else {
        panic!("expected a raise within the jitter of creation");
    };
    assert_eq!((raise.from, raise.to), (1, 2));
    assert_eq!(raise.effective_from, ts("2026-06-22T01:01:30Z"));
}

#[test]
fn throttles_of_writes_keyed_before_the_last_raise_do_not_raise() {
    // k went 2 -> 4 at 01:00 (in force); a throttle on a key of the k = 2 epoch (a
    // reading stamped before 01:00, retried now) says nothing about k = 4.
    let m = raised_meta(4, "2026-06-22T01:00:00Z");
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let late = ts("2026-06-22T02:00:00Z");
    assert_eq!(
        decide(Some(&m), Throttle::KeyRange, 2, late, &POLICY, &mut rng),
        FanoutDecision::Keep {
            reason: KeepReason::Superseded {
                keyed: 2,
                current: 4
            }
        }
    );
    assert!(matches!(
        decide(Some(&m), Throttle::KeyRange, 4, late, &POLICY, &mut rng),
        FanoutDecision::Raise(_)
    ));
}
