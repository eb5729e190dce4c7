//! The shard directory's cache, creation and raise logic against the in-memory store.

use std::num::NonZeroU32;
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use sharding::epoch::TableHistory;
use sharding::fanout::{FanoutPolicy, KeepReason, ShardMeta};
use sharding::layout::Layout;
use sharding::time::{Bucket, Timestamp};
use store::ShardStore;
use store::ThrottleKind;
use store::directory::{DirectoryConfig, FanoutChange, PlannedFanout, ShardDirectory};
use store::memory::MemoryShards;

pub fn policy() -> FanoutPolicy {
    FanoutPolicy {
        cooldown: Duration::from_secs(600),
        jitter: Duration::from_secs(30),
        max_fanout: 8,
        propagation_margin: Duration::from_secs(365),
    }
}

pub fn directory_config() -> DirectoryConfig {
    DirectoryConfig {
        cache_ttl: Duration::from_secs(60),
        policy: policy(),
        initial_layout: Layout::time_bucket(Bucket::Hour, NonZeroU32::new(4).expect("4 > 0")),
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

#[tokio::test]
async fn s05_key_range_throttle_creates_then_raises_once_per_cooldown() {
    let shards = MemoryShards::new();
    let directory = ShardDirectory::new(shards.clone(), directory_config());
    let rng = &mut StdRng::seed_from_u64(5);
    let kr = ThrottleKind::KeyRange;
    assert_eq!(
        directory
            .on_throttle("hot", kr, 1, t(0), rng)
            .await
            .expect("ok"),
        FanoutChange::Created { won: true }
    );
    // The first raise waits for no cooldown: creating the item changed no k.
    let raised = directory
        .on_throttle("hot", kr, 1, t(100), rng)
        .await
        .expect("ok");
    let FanoutChange::Raised(raise) = raised else {
        panic!("expected a raise, got {raised:?}");
    };
    assert_eq!((raise.from, raise.to), (1, 2));
    assert_eq!(raise.effective_from, t(100 + 365));
    // Pending until it takes effect, then cooling down until the cooldown is over.
    assert!(matches!(
        directory
            .on_throttle("hot", kr, 1, t(200), rng)
            .await
            .expect("ok"),
        FanoutChange::Kept(KeepReason::Pending { .. })
    ));
    assert!(matches!(
        directory
            .on_throttle("hot", kr, 2, t(600), rng)
            .await
            .expect("ok"),
        FanoutChange::Kept(KeepReason::CoolingDown { .. })
    ));
    // A late retry of a reading keyed before the raise does not count.
    assert!(matches!(
        directory
            .on_throttle("hot", kr, 1, t(800), rng)
            .await
            .expect("ok"),
        FanoutChange::Kept(KeepReason::Superseded {
            keyed: 1,
            current: 2
        })
    ));
    assert!(matches!(
        directory
            .on_throttle("hot", kr, 2, t(800), rng)
            .await
            .expect("ok"),
        FanoutChange::Raised(_)
    ));
    let meta = shards.entity("hot").expect("stored");
    assert_eq!(meta.number_of_shards, 4);
    assert_eq!(meta.shard_history.epochs().len(), 2);
    assert_eq!(shards.raises().len(), 2);
    assert!(shards.hot_entities().await.expect("ok").contains("hot"));
    // The raising writer's own cache sees the new history at once.
    assert_eq!(
        directory.fanout("hot", t(1400)).await.expect("ok"),
        meta.shard_history
    );
}

#[tokio::test]
async fn s06_table_throttle_never_raises() {
    let shards = MemoryShards::new();
    shards.put_entity("dev", ShardMeta::initial(t(0)));
    let directory = ShardDirectory::new(shards.clone(), directory_config());
    let rng = &mut StdRng::seed_from_u64(6);
    for s in [1000, 5000, 90_000] {
        assert_eq!(
            directory
                .on_throttle("dev", ThrottleKind::Table, 1, t(s), rng)
                .await
                .expect("ok"),
            FanoutChange::Kept(KeepReason::TableThrottle)
        );
    }
    assert!(shards.raises().is_empty());
}

#[tokio::test]
async fn s15_ten_writers_racing_in_memory_raise_once() {
    let shards = MemoryShards::new();
    shards.put_entity("hot", ShardMeta::initial(t(0)));
    let writers: Vec<_> = (0..10)
        .map(|_| ShardDirectory::new(shards.clone(), directory_config()))
        .collect();
    // Everyone has read the same metadata before anyone raises.
    for w in &writers {
        w.meta("hot", t(1000)).await.expect("read");
    }
    let results = futures::future::join_all(writers.iter().enumerate().map(|(i, w)| async move {
        let mut rng = StdRng::seed_from_u64(i as u64);
        w.on_throttle("hot", ThrottleKind::KeyRange, 1, t(1000), &mut rng)
            .await
    }))
    .await;
    let raised = results
        .iter()
        .filter(|r| matches!(r, Ok(FanoutChange::Raised(_))))
        .count();
    let lost = results
        .iter()
        .filter(|r| matches!(r, Ok(FanoutChange::LostRace)))
        .count();
    assert_eq!((raised, lost), (1, 9), "{results:?}");
    assert_eq!(
        shards
            .entity("hot")
            .expect("stored")
            .shard_history
            .epochs()
            .len(),
        1
    );
}

#[tokio::test]
async fn a_planned_fanout_creates_the_entity_and_takes_effect_after_the_margin() {
    let shards = MemoryShards::new();
    let directory = ShardDirectory::new(shards.clone(), directory_config());
    let planned = directory
        .plan_fanout("known-hot", 4, t(0))
        .await
        .expect("ok");
    let PlannedFanout::Scheduled(raise) = planned else {
        panic!("expected a scheduled raise, got {planned:?}");
    };
    assert_eq!((raise.from, raise.to), (1, 4));
    assert_eq!(raise.effective_from, t(365));
    let meta = shards.entity("known-hot").expect("stored");
    assert_eq!(meta.number_of_shards, 4);
    assert_eq!(meta.shard_history.at(t(364)), None);
    assert_eq!(meta.shard_history.at(t(365)), Some(4));
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
    assert_eq!(shards.raises().len(), 1);
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
    assert!(shards.raises().is_empty());
    assert_eq!(
        shards.entity("known-hot").map(|m| m.number_of_shards),
        Some(1)
    );
}

#[tokio::test]
async fn a_planned_fanout_grows_an_entity_the_writers_already_raised() {
    let shards = MemoryShards::new();
    let directory = ShardDirectory::new(shards.clone(), directory_config());
    let rng = &mut StdRng::seed_from_u64(5);
    let kr = ThrottleKind::KeyRange;
    directory
        .on_throttle("hot", kr, 1, t(0), rng)
        .await
        .expect("ok");
    directory
        .on_throttle("hot", kr, 1, t(1), rng)
        .await
        .expect("ok");
    // Within the writers' cooldown, and while their raise is pending: the operator's
    // k = 8 is scheduled after it.
    let planned = directory.plan_fanout("hot", 8, t(2)).await.expect("ok");
    let PlannedFanout::Scheduled(raise) = planned else {
        panic!("expected a scheduled raise, got {planned:?}");
    };
    assert_eq!((raise.from, raise.to), (2, 8));
    let meta = shards.entity("hot").expect("stored");
    let ks: Vec<u32> = meta
        .shard_history
        .epochs()
        .iter()
        .map(|e| e.value)
        .collect();
    assert_eq!(ks, [2, 8]);
}
