//! Dynamic fan-out decisions: instant raises to the measured need, shrinks after a
//! quiet period and the propagation margin.

use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use sharding::fanout::{grow, needed_fanout};
use sharding::{
    FanoutDecision, FanoutPolicy, KeepReason, ShardMeta, Signal, Throttle, decide, decide_shrink,
};

use crate::common::ts;

/// The template's fan-out settings, but for the key rate: `RAISE_AHEAD_WCU` 500 (the
/// default is 100), so the rates these tests name sit on either side of half a key.
const POLICY: FanoutPolicy = FanoutPolicy {
    cooldown: Duration::from_secs(2),
    jitter: Duration::from_secs(1),
    max_fanout: 32,
    propagation_margin: Duration::from_secs(365),
    key_rate: 500.0,
    shrink_after: Duration::from_secs(900),
};

fn signal(throttle: Throttle, keyed: u32, rate: Option<f64>) -> Signal {
    Signal {
        throttle,
        keyed,
        rate,
    }
}

/// An entity raised to `k` at `at` (in force since then).
fn raised_to(k: u32, at: &str) -> ShardMeta {
    let meta = ShardMeta::initial(ts("2026-06-22T00:00:00Z"));
    let raise = sharding::fanout::planned_raise(&meta, k, ts(at), 1, &POLICY)
        .expect("valid")
        .expect("a raise");
    meta.raised(&raise).expect("valid")
}

#[test]
fn growth_doubles_and_caps() {
    let got: Vec<u32> = [1, 2, 3, 8, 9, 16].iter().map(|&k| grow(k, 16)).collect();
    assert_eq!(got, [2, 4, 6, 16, 16, 16]);
    assert_eq!(needed_fanout(20.0 * 500.0, 500.0, 32), 20);
}

#[test]
fn unknown_entity_is_created_at_the_layout_default() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let now = ts("2026-06-22T01:00:00Z");
    let hot = signal(Throttle::KeyRange, 1, None);
    assert_eq!(
        decide(None, &hot, now, 1, &POLICY, &mut rng),
        FanoutDecision::Create { k: 1 }
    );
    assert_eq!(
        decide(None, &hot, now, 8, &POLICY, &mut rng),
        FanoutDecision::Create { k: 8 }
    );
}

#[test]
fn table_and_unmeasured_signals_never_raise() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let m = raised_to(2, "2026-06-22T00:00:00Z");
    let now = ts("2026-06-22T01:00:00Z");
    let table = signal(Throttle::Table, 2, Some(1e9));
    assert_eq!(
        decide(Some(&m), &table, now, 1, &POLICY, &mut rng),
        FanoutDecision::Keep {
            reason: KeepReason::TableThrottle
        }
    );
    assert_eq!(
        decide(
            Some(&m),
            &signal(Throttle::Other, 2, None),
            now,
            1,
            &POLICY,
            &mut rng
        ),
        FanoutDecision::Keep {
            reason: KeepReason::NotKeyRange
        }
    );
    let full = raised_to(32, "2026-06-22T00:00:00Z");
    assert_eq!(
        decide(
            Some(&full),
            &signal(Throttle::KeyRange, 32, None),
            now,
            1,
            &POLICY,
            &mut rng
        ),
        FanoutDecision::Keep {
            reason: KeepReason::AtMax
        }
    );
}

#[test]
fn a_device_at_twenty_times_a_key_gets_its_fanout_in_one_step() {
    // Hot from its first reading: created, then one throttle with a measured rate.
    let now = ts("2026-06-22T01:00:00Z");
    let meta = ShardMeta::initial(now);
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let hot = signal(Throttle::KeyRange, 1, Some(20.0 * 1_000.0));
    let FanoutDecision::Raise(raise) = decide(Some(&meta), &hot, now, 1, &POLICY, &mut rng) else {
        panic!("the first raise waits for nothing");
    };
    assert_eq!((raise.from, raise.to), (1, 32));
    assert_eq!(raise.effective_from, now, "in force at once");
}

#[test]
fn jitter_spreads_racing_writers() {
    // Ten writers at the same instant right after the cooldown: the seeded back-offs
    // differ, so they do not all try the conditional update at once.
    let m = raised_to(2, "2026-06-22T01:00:00Z");
    let now = ts("2026-06-22T01:00:02Z");
    let mut raising = 0;
    let mut untils = Vec::new();
    for seed in 0..10 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let hot = signal(Throttle::KeyRange, 2, None);
        match decide(Some(&m), &hot, now, 1, &POLICY, &mut rng) {
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
fn throttles_of_writes_keyed_before_the_last_raise_do_not_raise() {
    let m = raised_to(4, "2026-06-22T01:00:00Z");
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let later = ts("2026-06-22T01:00:10Z");
    assert_eq!(
        decide(
            Some(&m),
            &signal(Throttle::KeyRange, 2, None),
            later,
            1,
            &POLICY,
            &mut rng
        ),
        FanoutDecision::Keep {
            reason: KeepReason::Superseded {
                keyed: 2,
                current: 4
            }
        }
    );
    // Unless the measured rate needs more than the keys in force carry.
    let FanoutDecision::Raise(raise) = decide(
        Some(&m),
        &signal(Throttle::KeyRange, 2, Some(5_000.0)),
        later,
        1,
        &POLICY,
        &mut rng,
    ) else {
        panic!("the rate needs 10 keys");
    };
    assert_eq!((raise.from, raise.to), (4, 10));
}

#[test]
fn shrinks_wait_for_quiet_and_the_margin() {
    let m = raised_to(16, "2026-06-22T01:00:00Z");
    // 15 minutes without a change or a busy mark, no measured rate: back to the default.
    let now = ts("2026-06-22T01:15:00Z");
    let shrink = decide_shrink(&m, None, now, 1, &POLICY).expect("quiet long enough");
    assert_eq!((shrink.from, shrink.to), (16, 1));
    // A quiet entity already at two keys goes back to one too (it then leaves the hot
    // index); one whose rate needs two keys keeps twice that.
    let two = raised_to(2, "2026-06-22T01:00:00Z");
    let back = decide_shrink(&two, None, now, 1, &POLICY).expect("quiet at two keys");
    assert_eq!((back.from, back.to), (2, 1));
    let needs_two = POLICY.key_rate * 1.5;
    let halved = decide_shrink(&m, Some(needs_two), now, 1, &POLICY).expect("needs 2 of 16");
    assert_eq!(halved.to, 4);
    assert_eq!(shrink.effective_from, ts("2026-06-22T01:21:05Z"));
    assert_eq!(
        decide_shrink(&m, None, ts("2026-06-22T01:14:59.999Z"), 1, &POLICY),
        None
    );
    let busy = ShardMeta {
        last_hot: Some(ts("2026-06-22T01:10:00Z")),
        ..m
    };
    assert_eq!(decide_shrink(&busy, None, now, 1, &POLICY), None);
}
