//! The shard directory's cache, creation and raise logic against the in-memory store.

use std::num::NonZeroU32;
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use sharding::epoch::TableHistory;
use sharding::fanout::{FanoutPolicy, KeepReason, ShardMeta, Signal, Throttle};
use sharding::layout::Layout;
use sharding::time::{Bucket, Timestamp};
use store::directory::{
    DirectoryConfig, FanoutChange, PlannedFanout, ShardDirectory, UpdateCondition,
};
use store::memory::MemoryShards;
use store::{ShardReader, ShardStore, Written};

/// The template's fan-out settings, with FANOUT_MAX 8 and `RAISE_AHEAD_WCU` 500 (the
/// default is 100).
pub fn policy() -> FanoutPolicy {
    FanoutPolicy {
        cooldown: Duration::from_secs(2),
        jitter: Duration::from_secs(1),
        max_fanout: 8,
        propagation_margin: Duration::from_secs(365),
        key_rate: 500.0,
        shrink_after: Duration::from_secs(900),
    }
}

pub fn directory_config() -> DirectoryConfig {
    DirectoryConfig {
        cache_ttl: Duration::from_secs(60),
        policy: policy(),
        initial_layout: Layout::time_bucket(Bucket::Hour, NonZeroU32::new(4).expect("4 > 0")),
        retention: Duration::from_secs(30 * 86_400),
    }
}

fn t(secs: i64) -> Timestamp {
    Timestamp::from_millis(1_782_090_000_000 + secs * 1000).expect("in range")
}

#[tokio::test]
async fn layout_is_seeded_from_config_once_then_read_from_the_table() {
    let shards = MemoryShards::new();
    let directory = ShardDirectory::new(shards.clone(), directory_config());
    let history = directory.layout(t(0)).await.expect("layout");
    assert_eq!(
        history,
        TableHistory::new(directory_config().initial_layout)
    );
    assert_eq!(shards.get_layout().await.expect("stored"), Some(history));

    // A stored history wins over another configuration.
    let other = DirectoryConfig {
        initial_layout: Layout::unsharded(),
        ..directory_config()
    };
    let second = ShardDirectory::new(shards.clone(), other);
    assert_eq!(
        second.layout(t(0)).await.expect("layout").latest(),
        &directory_config().initial_layout
    );
}

#[tokio::test]
async fn entity_reads_are_cached_for_the_ttl() {
    let shards = MemoryShards::new();
    let directory = ShardDirectory::new(shards.clone(), directory_config());
    for s in [0, 10, 59] {
        directory.fanout("dev-1", t(s)).await.expect("read");
    }
    assert_eq!(shards.entity_reads(), 1);
    directory.fanout("dev-1", t(60)).await.expect("read");
    assert_eq!(shards.entity_reads(), 2);
}

fn throttle(keyed: u32) -> Signal {
    Signal {
        throttle: Throttle::KeyRange,
        keyed,
        rate: None,
    }
}

fn rate(rate: f64) -> Signal {
    Signal {
        throttle: Throttle::Other,
        keyed: 0,
        rate: Some(rate),
    }
}

async fn signal(
    directory: &ShardDirectory<MemoryShards>,
    entity: &str,
    signal: Signal,
    at: Timestamp,
) -> FanoutChange {
    let rng = &mut StdRng::seed_from_u64(at.as_millis() as u64);
    directory
        .on_signal(entity, signal, at, rng)
        .await
        .expect("the memory store does not fail")
}

fn ks(meta: &ShardMeta) -> Vec<(Timestamp, u32)> {
    meta.shard_history
        .epochs()
        .iter()
        .map(|e| (e.effective_from, e.value))
        .collect()
}

#[tokio::test]
async fn a_key_range_throttle_creates_and_raises_in_force_at_once() {
    let shards = MemoryShards::new();
    let directory = ShardDirectory::new(shards.clone(), directory_config());
    let raised = signal(&directory, "hot", throttle(1), t(0)).await;
    let FanoutChange::Raised(raise) = raised else {
        panic!("expected a raise, got {raised:?}");
    };
    assert_eq!((raise.from, raise.to, raise.effective_from), (1, 2, t(0)));
    let meta = shards.entity("hot").expect("stored");
    assert_eq!(ks(&meta), [(t(0), 2)]);
    assert_eq!(meta.last_hot, Some(t(0)));
    assert!(shards.hot_entities().await.expect("ok").contains("hot"));
    // The raising writer's own cache sees the new history at once.
    assert_eq!(
        directory.fanout("hot", t(1)).await.expect("ok"),
        meta.shard_history
    );
}

/// A slab group is an entity of the fan-out machinery under a name no device can have
/// (`sharding::slab::group_entity`): raised as a device is, read back by its name, and
/// never listed in the hot index, whose every-device reads would refuse the name.
#[tokio::test]
async fn a_slab_group_is_raised_like_a_device_and_never_listed_in_the_hot_index() {
    let shards = MemoryShards::new();
    let directory = ShardDirectory::new(shards.clone(), directory_config());
    let group = sharding::slab::group_entity(3);
    assert!(matches!(
        signal(&directory, &group, rate(2_600.0), t(0)).await,
        FanoutChange::Raised(r) if r.to == 6
    ));
    let meta = shards.entity(&group).expect("stored under its name");
    assert_eq!(ks(&meta), [(t(0), 6)]);
    assert_eq!(
        directory.fanout(&group, t(1)).await.expect("ok"),
        meta.shard_history
    );
    assert_eq!(
        directory.fanout_cached(&group, t(2)),
        Some(meta.shard_history)
    );
    assert!(shards.hot_entities().await.expect("ok").is_empty());
    // A device raised the same way is listed.
    signal(&directory, "dev-1", rate(2_600.0), t(0)).await;
    assert!(shards.hot_entities().await.expect("ok").contains("dev-1"));
}

#[tokio::test]
async fn a_measured_rate_raises_to_the_k_it_needs_in_one_step() {
    let shards = MemoryShards::new();
    let directory = ShardDirectory::new(shards.clone(), directory_config());
    // 2,600 readings/s at 500 per key needs 6 keys.
    assert!(matches!(
        signal(&directory, "hot", rate(2_600.0), t(0)).await,
        FanoutChange::Raised(r) if r.to == 6
    ));
    // Over the maximum: capped at FANOUT_MAX (8), after the cooldown.
    assert!(matches!(
        signal(&directory, "hot", rate(50_000.0), t(1)).await,
        FanoutChange::Kept(KeepReason::CoolingDown { .. })
    ));
    assert!(matches!(
        signal(&directory, "hot", rate(50_000.0), t(4)).await,
        FanoutChange::Raised(r) if r.to == 8
    ));
    assert_eq!(
        ks(&shards.entity("hot").expect("stored")),
        [(t(0), 6), (t(4), 8)]
    );
}

#[tokio::test]
async fn a_rate_the_default_carries_creates_nothing() {
    let shards = MemoryShards::new();
    let directory = ShardDirectory::new(shards.clone(), directory_config());
    assert!(matches!(
        signal(&directory, "calm", rate(100.0), t(0)).await,
        FanoutChange::Kept(_)
    ));
    assert_eq!(shards.entity("calm"), None);
}

#[tokio::test]
async fn the_cache_alone_answers_only_what_on_signal_would_answer_without_the_store() {
    let shards = MemoryShards::new();
    let directory = ShardDirectory::new(shards.clone(), directory_config());
    // Nothing cached yet: the store must be read.
    assert_eq!(directory.on_signal_cached("calm", &rate(100.0), t(0)), None);
    let kept = signal(&directory, "calm", rate(100.0), t(0)).await;
    signal(&directory, "hot", throttle(1), t(0)).await;
    let reads = shards.reads();

    // Within the TTL, a device without metadata at a rate the default carries is
    // answered from the cache, as `on_signal` answered, with no read.
    for r in [1.0, 100.0, 500.0] {
        assert_eq!(
            directory.on_signal_cached("calm", &rate(r), t(10)),
            Some(kept.clone())
        );
        assert_eq!(signal(&directory, "calm", rate(r), t(10)).await, kept);
    }
    assert_eq!(
        directory.on_signal_cached("calm", &rate_free(), t(10)),
        Some(kept)
    );
    assert_eq!(shards.reads(), reads);

    // Everything else goes to `on_signal`: a throttle, a rate the default does not
    // carry, an entity with metadata, an entry past its TTL.
    assert_eq!(
        directory.on_signal_cached("calm", &throttle(1), t(10)),
        None
    );
    assert_eq!(
        directory.on_signal_cached("calm", &rate(5_000.0), t(10)),
        None
    );
    assert_eq!(directory.on_signal_cached("hot", &rate(1.0), t(10)), None);
    assert_eq!(directory.on_signal_cached("calm", &rate(1.0), t(60)), None);
}

fn rate_free() -> Signal {
    Signal {
        throttle: Throttle::Other,
        keyed: 0,
        rate: None,
    }
}

#[tokio::test]
async fn throttles_raise_a_cooldown_apart_and_old_keys_do_not_count() {
    let shards = MemoryShards::new();
    let directory = ShardDirectory::new(shards.clone(), directory_config());
    assert!(matches!(
        signal(&directory, "hot", throttle(1), t(0)).await,
        FanoutChange::Raised(r) if r.to == 2
    ));
    assert!(matches!(
        signal(&directory, "hot", throttle(2), t(1)).await,
        FanoutChange::Kept(KeepReason::CoolingDown { .. })
    ));
    // Cooldown 2 s plus at most 1 s of jitter.
    assert!(matches!(
        signal(&directory, "hot", throttle(2), t(4)).await,
        FanoutChange::Raised(r) if (r.from, r.to) == (2, 4)
    ));
    // A retry of an item keyed before the raise does not raise again.
    assert_eq!(
        signal(&directory, "hot", throttle(1), t(10)).await,
        FanoutChange::Kept(KeepReason::Superseded {
            keyed: 1,
            current: 4
        })
    );
    assert_eq!(shards.changes().len(), 2);
}

#[tokio::test]
async fn a_throttle_refreshes_a_stale_cache_at_once() {
    let shards = MemoryShards::new();
    let raiser = ShardDirectory::new(shards.clone(), directory_config());
    let follower = ShardDirectory::new(shards.clone(), directory_config());
    assert_eq!(
        follower.fanout("hot", t(0)).await.expect("ok").at(t(0)),
        None
    );
    signal(&raiser, "hot", throttle(1), t(1)).await;
    // Within its cache TTL, the follower still keys with k = 1 ...
    assert_eq!(
        follower.fanout("hot", t(2)).await.expect("ok").at(t(2)),
        None
    );
    // ... until its own write of the old key is throttled: it re-reads, sees k = 2, and
    // does not raise on a key the raise already replaced.
    assert_eq!(
        signal(&follower, "hot", throttle(1), t(2)).await,
        FanoutChange::Kept(KeepReason::Superseded {
            keyed: 1,
            current: 2
        })
    );
    assert_eq!(
        follower.fanout("hot", t(2)).await.expect("ok").at(t(2)),
        Some(2)
    );
}

#[tokio::test]
async fn a_table_throttle_never_raises() {
    let shards = MemoryShards::new();
    shards.put_entity("dev", ShardMeta::initial(t(0)));
    let directory = ShardDirectory::new(shards.clone(), directory_config());
    for s in [1000, 5000, 90_000] {
        let table = Signal {
            throttle: Throttle::Table,
            ..throttle(1)
        };
        assert_eq!(
            signal(&directory, "dev", table, t(s)).await,
            FanoutChange::Kept(KeepReason::TableThrottle)
        );
    }
    assert!(shards.changes().is_empty());
}

#[tokio::test]
async fn ten_writers_racing_in_memory_raise_once() {
    let shards = MemoryShards::new();
    shards.put_entity("hot", ShardMeta::initial(t(0)));
    let writers: Vec<_> = (0..10)
        .map(|_| ShardDirectory::new(shards.clone(), directory_config()))
        .collect();
    // Everyone reads the same metadata before anyone raises.
    let metas = futures::future::join_all(writers.iter().map(|w| w.refresh("hot", t(1000)))).await;
    assert!(metas.iter().all(Result::is_ok));
    let results = futures::future::join_all(writers.iter().enumerate().map(|(i, w)| async move {
        let mut rng = StdRng::seed_from_u64(i as u64);
        let meta = w.meta("hot", t(1000)).await?;
        let decision =
            sharding::fanout::decide(meta.as_ref(), &throttle(1), t(1000), 1, &policy(), &mut rng);
        let sharding::fanout::FanoutDecision::Raise(raise) = decision else {
            panic!("expected a raise, got {decision:?}");
        };
        let raised = meta.expect("stored").raised(&raise).expect("valid");
        let condition = UpdateCondition {
            last_updated: raise.precondition_last_updated,
            quiet_since: None,
        };
        w.store().update_entity("hot", &condition, &raised).await
    }))
    .await;
    let won = results
        .iter()
        .filter(|r| matches!(r, Ok(Written::Applied)))
        .count();
    assert_eq!(won, 1, "{results:?}");
    assert_eq!(ks(&shards.entity("hot").expect("stored")).len(), 1);
}

#[tokio::test]
async fn a_quiet_entity_shrinks_after_the_quiet_period_and_a_busy_one_does_not() {
    let shards = MemoryShards::new();
    let directory = ShardDirectory::new(shards.clone(), directory_config());
    // Raised to 8 at 0 s (which marks it busy); busy again (a rate of at least a
    // quarter key on each key) at 100 s, too soon to write a mark (one per eighth of
    // the quiet period), and at 200 s.
    signal(&directory, "hot", rate(4_000.0), t(0)).await;
    signal(&directory, "hot", rate(4_000.0), t(100)).await;
    assert_eq!(shards.entity("hot").expect("stored").last_hot, Some(t(0)));
    signal(&directory, "hot", rate(4_000.0), t(200)).await;
    assert_eq!(shards.entity("hot").expect("stored").last_hot, Some(t(200)));
    // 900 s after the raise, but the busy mark is younger than the quiet period.
    assert!(matches!(
        signal(&directory, "hot", rate(10.0), t(950)).await,
        FanoutChange::Kept(_)
    ));
    // 900 s after the mark: 10 readings/s need one key, so it shrinks back to one (it
    // then leaves the hot index), in force after the propagation margin.
    let shrunk = signal(&directory, "hot", rate(10.0), t(1101)).await;
    let FanoutChange::Shrunk(shrink) = shrunk else {
        panic!("expected a shrink, got {shrunk:?}");
    };
    assert_eq!((shrink.from, shrink.to), (8, 1));
    assert_eq!(shrink.effective_from, t(1101 + 365));
    assert_eq!(
        ks(&shards.entity("hot").expect("stored")),
        [(t(0), 8), (t(1101 + 365), 1)]
    );
    // A throttle before it takes effect raises at once and cancels it.
    assert!(matches!(
        signal(&directory, "hot", throttle(8), t(1110)).await,
        FanoutChange::Raised(_)
    ));
    assert_eq!(ks(&shards.entity("hot").expect("stored")), [(t(0), 8)]);
}

#[tokio::test]
async fn a_shrink_loses_to_a_busy_mark_written_after_its_read() {
    let shards = MemoryShards::new();
    let directory = ShardDirectory::new(shards.clone(), directory_config());
    signal(&directory, "hot", rate(4_000.0), t(0)).await;
    directory.meta("hot", t(1000)).await.expect("cached");
    // Another writer marks it busy; this writer's cached copy does not know.
    shards.mark_hot("hot", t(999)).await.expect("ok");
    assert_eq!(
        signal(&directory, "hot", rate(10.0), t(1000)).await,
        FanoutChange::LostRace
    );
    assert_eq!(ks(&shards.entity("hot").expect("stored")), [(t(0), 8)]);
}

#[tokio::test]
async fn a_planned_fanout_creates_the_entity_and_takes_effect_at_once() {
    let shards = MemoryShards::new();
    let directory = ShardDirectory::new(shards.clone(), directory_config());
    let planned = directory
        .plan_fanout("known-hot", 4, t(0))
        .await
        .expect("ok");
    let PlannedFanout::Scheduled(raise) = planned else {
        panic!("expected a scheduled raise, got {planned:?}");
    };
    assert_eq!((raise.from, raise.to, raise.effective_from), (1, 4, t(0)));
    let meta = shards.entity("known-hot").expect("stored");
    assert_eq!(meta.number_of_shards, 4);
    assert_eq!(meta.shard_history.at(t(0)), Some(4));
    // Read plans find it: it is in the hot set.
    assert!(
        shards
            .hot_entities()
            .await
            .expect("ok")
            .contains("known-hot")
    );
    // Asking again, or for less, changes nothing.
    assert_eq!(
        directory.plan_fanout("known-hot", 4, t(10)).await,
        Ok(PlannedFanout::Already { k: 4 })
    );
    assert_eq!(
        directory.plan_fanout("known-hot", 2, t(10)).await,
        Ok(PlannedFanout::Already { k: 4 })
    );
    assert_eq!(shards.changes().len(), 1);
}

#[tokio::test]
async fn a_planned_fanout_over_the_maximum_is_refused_and_writes_nothing_but_the_entity() {
    let shards = MemoryShards::new();
    let directory = ShardDirectory::new(shards.clone(), directory_config());
    let refused = directory
        .plan_fanout("known-hot", 9, t(0))
        .await
        .expect_err("over FANOUT_MAX");
    assert!(
        refused.to_string().contains("over the largest allowed, 8"),
        "{refused}"
    );
    assert!(shards.changes().is_empty());
    assert_eq!(
        shards.entity("known-hot").map(|m| m.number_of_shards),
        Some(1)
    );
}

#[tokio::test]
async fn a_planned_fanout_grows_an_entity_the_writers_already_raised() {
    let shards = MemoryShards::new();
    let directory = ShardDirectory::new(shards.clone(), directory_config());
    signal(&directory, "hot", throttle(1), t(0)).await;
    // Within the writers' cooldown: the operator's plan does not wait for it.
    let planned = directory.plan_fanout("hot", 8, t(1)).await.expect("ok");
    let PlannedFanout::Scheduled(raise) = planned else {
        panic!("expected a scheduled raise, got {planned:?}");
    };
    assert_eq!((raise.from, raise.to), (2, 8));
    assert_eq!(
        ks(&shards.entity("hot").expect("stored")),
        [(t(0), 2), (t(1), 8)]
    );
}
