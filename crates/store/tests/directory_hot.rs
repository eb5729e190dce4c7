//! Scenario "the hot set stays small and shrinks": the hot index lists a raised entity by
//! hour, only while its readings can carry a raised key, and a read over every device
//! finds the raised entities of its range in a bounded number of batched calls.

use std::collections::BTreeSet;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use futures::StreamExt;
use rand::SeedableRng;
use rand::rngs::StdRng;
use sharding::epoch::{Epoch, FanoutHistory};
use sharding::fanout::{ShardMeta, Shrink, Signal, Throttle};
use sharding::time::{Bucket, TimeRange, Timestamp};
use stand_in::{Backend, Dynalite, ensure_dynalite, provision_tables, repo_root};
use store::directory::{FanoutChange, ShardDirectory, UpdateCondition};
use store::dynamo::DynamoShards;
use store::memory::MemoryShards;
use store::{CachedDirectory, ShardReader, ShardStore, Written};

use crate::directory_memory::directory_config;

const HOUR: i64 = 3600;

/// `secs` after 2026-06-22T01:00:00Z, an hour boundary.
fn t(secs: i64) -> Timestamp {
    Timestamp::from_millis(1_782_090_000_000 + secs * 1000).expect("in range")
}

fn range(from: i64, to: i64) -> TimeRange {
    TimeRange::new(t(from), t(to)).expect("from < to")
}

fn throttle() -> Signal {
    Signal {
        throttle: Throttle::KeyRange,
        keyed: 1,
        rate: None,
    }
}

async fn on_signal(
    directory: &ShardDirectory<MemoryShards>,
    entity: &str,
    signal: Signal,
    at: Timestamp,
) -> FanoutChange {
    let rng = &mut StdRng::seed_from_u64(at.as_millis().unsigned_abs());
    directory
        .on_signal(entity, signal, at, rng)
        .await
        .expect("the memory store does not fail")
}

async fn hot_names(
    reader: &CachedDirectory<MemoryShards>,
    r: TimeRange,
    now: Timestamp,
) -> Vec<String> {
    reader
        .hot(r, now)
        .await
        .expect("the memory store does not fail")
        .into_iter()
        .map(|(name, _)| name)
        .collect()
}

fn reader(shards: &MemoryShards) -> CachedDirectory<MemoryShards> {
    CachedDirectory::new(shards.clone(), Duration::from_secs(5))
}

/// Raised at 0 s, written all along, shrunk back to 1 at 1,000 s (in force at 1,365 s): found by a read of the time it was raised, not by a read of a range
/// after its raised keys stop being needed, which reads none of its metadata.
#[tokio::test]
async fn an_entity_shrunk_back_to_1_leaves_the_hot_set_of_later_ranges() {
    let shards = MemoryShards::new();
    let writer = ShardDirectory::new(shards.clone(), directory_config());
    assert!(matches!(
        on_signal(&writer, "dev-1", throttle(), t(0)).await,
        FanoutChange::Raised(_)
    ));
    for s in (0..1000).step_by(60) {
        writer.fanout("dev-1", t(s)).await.expect("ok");
    }
    // `sharding::fanout::decide_shrink` shrinks to twice the need, so never below 2: the
    // shrink to 1 is written as an operator's would be, through the port.
    let meta = shards.entity("dev-1").expect("stored");
    let shrink = Shrink {
        from: 2,
        to: 1,
        precondition_last_updated: meta.last_updated,
        quiet_since: t(100),
        effective_from: t(1365),
        updated_at: t(1000),
    };
    let condition = UpdateCondition {
        last_updated: meta.last_updated,
        quiet_since: Some(t(100)),
    };
    let shrunk = meta.shrunk(&shrink).expect("valid");
    assert_eq!(
        shards
            .update_entity("dev-1", &condition, &shrunk)
            .await
            .expect("ok"),
        Written::Applied
    );
    writer.invalidate("dev-1");
    // Writers go on writing the device at k = 1 for days: nothing more is listed.
    for s in (1000..5 * 86_400).step_by(600) {
        writer.fanout("dev-1", t(s)).await.expect("ok");
    }
    let later = Bucket::Hour.label(t(3 * HOUR));
    assert_eq!(shards.hot_hour(&later), None);

    let reader = reader(&shards);
    let now = t(5 * 86_400);
    assert_eq!(hot_names(&reader, range(0, 60), now).await, ["dev-1"]);
    // Readings stamped up to the shrink may carry a raised key (the hour before a raise
    // too); from the shrink on, none can.
    assert_eq!(
        hot_names(&reader, range(-HOUR, -HOUR + 1), now).await,
        ["dev-1"]
    );
    assert_eq!(hot_names(&reader, range(1364, 1365), now).await, ["dev-1"]);
    assert!(
        hot_names(&reader, range(1365, 2 * HOUR), now)
            .await
            .is_empty()
    );
    let entity_reads = shards.entity_reads();
    for day in 1..5 {
        let r = range(day * 86_400, day * 86_400 + 6 * HOUR);
        assert!(hot_names(&reader, r, now).await.is_empty());
    }
    assert_eq!(
        shards.entity_reads(),
        entity_reads,
        "a read of a range after the shrink reads no metadata of the entity"
    );
}

/// A raised device that sends nothing for hours, then a late reading of that time: the
/// writer lists the hours it may key before keying, so a read of them finds it.
#[tokio::test]
async fn a_writer_lists_the_hours_of_a_late_reading_before_keying_it() {
    let shards = MemoryShards::new();
    let writer = ShardDirectory::new(shards.clone(), directory_config());
    on_signal(&writer, "dev-1", throttle(), t(0)).await;
    let reader = reader(&shards);
    // Nothing was written in hour 4 yet, so nothing can carry a raised key there.
    assert!(
        hot_names(&reader, range(4 * HOUR, 4 * HOUR + 1), t(5 * HOUR))
            .await
            .is_empty()
    );
    // A writer at 5 h (a reading stamped in hour 4 keys with k = 2) lists hour 4 first.
    let history = writer.fanout("dev-1", t(5 * HOUR)).await.expect("ok");
    assert_eq!(history.for_write(t(4 * HOUR), t(5 * HOUR)), Some(2));
    assert_eq!(
        hot_names(&reader, range(4 * HOUR, 4 * HOUR + 1), t(5 * HOUR + 10)).await,
        ["dev-1"]
    );
    // Once listed, the writer's cache answers without a call until the next hour.
    let calls = shards.reads();
    assert!(writer.fanout_cached("dev-1", t(5 * HOUR + 30)).is_some());
    assert_eq!(shards.reads(), calls);
}

fn raised_at(secs: i64) -> FanoutHistory {
    FanoutHistory::from_epochs(vec![Epoch {
        effective_from: t(secs),
        value: 4,
    }])
    .expect("valid")
}

/// 1,000 raised devices in a 3-hour range: two batched reads of the hot index and ten of
/// metadata (100 keys a call), where one read per device made 1,001.
#[tokio::test]
async fn a_read_over_every_device_reads_the_hot_set_in_bounded_batched_calls() {
    let shards = MemoryShards::new();
    let names: BTreeSet<String> = (0..1000).map(|i| format!("dev-{i:04}")).collect();
    for (i, name) in names.iter().enumerate() {
        shards.put_history(name, raised_at(i as i64 * 10));
    }
    let reader = reader(&shards);
    let before = shards.reads();
    let found = hot_names(&reader, range(0, 3 * HOUR), t(3 * HOUR)).await;
    assert_eq!(found.into_iter().collect::<BTreeSet<_>>(), names);
    let calls = shards.reads() - before;
    assert!(calls <= 11, "{calls} calls for 1,000 raised devices");
    // Within the cache's TTL, no call at all.
    hot_names(&reader, range(0, 3 * HOUR), t(3 * HOUR + 4)).await;
    assert_eq!(shards.reads() - before, calls);
}

/// 20,000 devices raised over three days, each with an id of the longest accepted size
/// (256 characters): every raise is written, and no item of the index is over 400 KB
/// (the fake refuses a listing past it, as DynamoDB does). One item for every entity
/// ever raised would hold 5 MB.
#[tokio::test]
async fn raising_20000_distinct_entities_over_time_never_fails_a_raise() {
    let shards = MemoryShards::new();
    let writer = ShardDirectory::new(shards.clone(), directory_config());
    for i in 0..20_000i64 {
        let name = format!("{i:0>256}");
        let at = t(i * 13);
        let change = writer
            .on_signal(&name, throttle(), at, &mut StdRng::seed_from_u64(i as u64))
            .await
            .expect("a raise is never refused for the size of the hot set");
        assert!(matches!(change, FanoutChange::Raised(_)), "{i}: {change:?}");
    }
    let reader = reader(&shards);
    let one_hour = hot_names(&reader, range(10 * HOUR, 10 * HOUR + 1), t(80 * HOUR)).await;
    // Raised in that hour or the hour after (a raise widens reads an hour back).
    assert!((270..=560).contains(&one_hour.len()), "{}", one_hour.len());
}

/// A table from before the hot index: readers still read its one `hot` item, and a
/// writer lists such an entity's raised hours (within retention) before keying.
#[tokio::test]
async fn a_legacy_hot_entity_is_read_and_then_listed_by_the_first_writer() {
    let shards = MemoryShards::new();
    let meta = ShardMeta {
        number_of_shards: 4,
        last_updated: t(0),
        shard_history: raised_at(0),
        last_hot: Some(t(0)),
    };
    shards.put_legacy_entity("old-1", meta);
    let reader = reader(&shards);
    assert_eq!(hot_names(&reader, range(0, 60), t(100)).await, ["old-1"]);
    assert!(shards.hot_entities().await.expect("ok").is_empty());

    let writer = ShardDirectory::new(shards.clone(), directory_config());
    writer.fanout("old-1", t(10 * HOUR)).await.expect("ok");
    let listed = shards.record("old-1").and_then(|r| r.hot_through);
    assert_eq!(listed, Some(t(11 * HOUR)));
    for h in -1..11 {
        let (entities, expires) = shards
            .hot_hour(&Bucket::Hour.label(t(h * HOUR)))
            .expect("listed");
        assert!(entities.contains("old-1"));
        assert!(expires.is_some_and(|at| at > t(30 * 86_400)));
    }
}

/// The shards table on a dynalite started for one test.
struct OnDynalite {
    /// Dropping it stops the server.
    _server: Dynalite,
    client: aws_sdk_dynamodb::Client,
    table: String,
    shards: DynamoShards,
}

impl OnDynalite {
    async fn start() -> anyhow::Result<Self> {
        let root = repo_root()?;
        let server = Dynalite::start(&ensure_dynalite(&root)?)?;
        let template = root.join("template.yaml");
        let tables =
            provision_tables(&server.endpoint(), &template, "hot-test", Backend::Dynalite).await?;
        let client = aws_sdk_dynamodb::Client::new(&stand_in::sdk_config(&server.endpoint()).await);
        let table = tables.name("ShardsTable")?.to_owned();
        let shards = DynamoShards::new(&client, &table);
        Ok(Self {
            _server: server,
            client,
            table,
            shards,
        })
    }

    fn reader(&self) -> CachedDirectory<DynamoShards> {
        CachedDirectory::new(self.shards.clone(), Duration::from_secs(5))
    }
}

/// The DynamoDB adapter on dynalite (which, like DynamoDB, refuses an item over 400 KB):
/// 1,700 devices with 256-character ids are raised, where one item naming them all
/// (the hot set before the index) cannot be written; a read over every device finds
/// the raised devices of its range through batched reads of more than 100 keys; the
/// legacy `hot` item is still read; a device shrunk to 1 leaves later ranges; the
/// hour items carry their expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hot_index_on_dynalite() -> anyhow::Result<()> {
    let db = OnDynalite::start().await?;
    let writer = ShardDirectory::new(db.shards.clone(), directory_config());
    writer.layout(t(0)).await?;

    let names: Vec<String> = (0..1700).map(|i| format!("{i:0>256}")).collect();
    let one_item = db
        .client
        .update_item()
        .table_name(&db.table)
        .key("PK", AttributeValue::S("one-item".to_owned()))
        .update_expression("ADD entities :e")
        .expression_attribute_values(":e", AttributeValue::Ss(names.clone()))
        .send()
        .await;
    assert!(
        one_item.is_err(),
        "the stand-in refuses an item over 400 KB"
    );
    raise_one_a_minute(&writer, &names).await?;
    the_hours_list_the_devices_raised_around_them(&db, &names).await?;
    a_legacy_hot_entity_is_found(&db).await?;
    a_shrunk_device_leaves_later_ranges(&db, &names[0]).await
}

/// Raises device `i` of `names` at `i` minutes, 16 at a time; every raise is written.
async fn raise_one_a_minute(
    writer: &ShardDirectory<DynamoShards>,
    names: &[String],
) -> anyhow::Result<()> {
    let raises: Vec<FanoutChange> = futures::stream::iter(names.iter().enumerate())
        .map(|(i, name)| async move {
            let at = t(i as i64 * 60);
            let rng = &mut StdRng::seed_from_u64(i as u64);
            writer.on_signal(name, throttle(), at, rng).await
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    assert!(raises.iter().all(|c| matches!(c, FanoutChange::Raised(_))));
    Ok(())
}

/// Hours 10 to 12 list the devices raised from 9:54 (a raise lists through the hour
/// after its decision plus the 365 s margin) to 13:59 (a raise widens reads an hour
/// back): 246 devices, in three batched reads of metadata. Devices raised earlier wrote
/// nothing since, so none of their readings there can carry a raised key. The hour
/// items carry their expiry.
async fn the_hours_list_the_devices_raised_around_them(
    db: &OnDynalite,
    names: &[String],
) -> anyhow::Result<()> {
    let found = db
        .reader()
        .hot(range(10 * HOUR, 13 * HOUR), t(40 * HOUR))
        .await?;
    let expected: BTreeSet<String> = names[594..840].iter().cloned().collect();
    let found: BTreeSet<String> = found.into_iter().map(|(name, _)| name).collect();
    assert_eq!(found, expected);

    let hour = Bucket::Hour.label(t(10 * HOUR));
    let item = db
        .client
        .get_item()
        .table_name(&db.table)
        .key("PK", AttributeValue::S(format!("hot#{hour}")))
        .send()
        .await?
        .item
        .unwrap_or_default();
    let ttl: i64 = item
        .get("ttl")
        .and_then(|v| v.as_n().ok())
        .map_or(Ok(0), |n| n.parse())?;
    assert!(ttl > t(10 * HOUR + 30 * 86_400).as_millis() / 1000, "{ttl}");
    Ok(())
}

/// A device of the old one-item hot set is still found.
async fn a_legacy_hot_entity_is_found(db: &OnDynalite) -> anyhow::Result<()> {
    let legacy = ShardMeta {
        number_of_shards: 4,
        last_updated: t(0),
        shard_history: raised_at(0),
        last_hot: None,
    };
    assert_eq!(
        db.shards
            .create_entity("old-1", &ShardMeta::initial(t(-10)))
            .await?,
        Written::Applied
    );
    let condition = UpdateCondition {
        last_updated: t(-10),
        quiet_since: None,
    };
    assert_eq!(
        db.shards
            .update_record("old-1", &condition, &legacy, None)
            .await?,
        Written::Applied
    );
    db.client
        .put_item()
        .table_name(&db.table)
        .item("PK", AttributeValue::S("hot".to_owned()))
        .item("entities", AttributeValue::Ss(vec!["old-1".to_owned()]))
        .send()
        .await?;
    let found = db.reader().hot(range(0, 60), t(100)).await?;
    assert!(found.iter().any(|(name, _)| name == "old-1"));
    Ok(())
}

/// Device `first`, raised at 0 s, shrunk to 1 at 30 s: found at 20 s, not after 30 s.
async fn a_shrunk_device_leaves_later_ranges(db: &OnDynalite, first: &str) -> anyhow::Result<()> {
    let meta = db.shards.get_entity(first).await?.expect("stored");
    let shrink = Shrink {
        from: 2,
        to: 1,
        precondition_last_updated: meta.last_updated,
        quiet_since: t(10),
        effective_from: t(30),
        updated_at: t(20),
    };
    let condition = UpdateCondition {
        last_updated: meta.last_updated,
        quiet_since: Some(t(10)),
    };
    assert_eq!(
        db.shards
            .update_entity(first, &condition, &meta.shrunk(&shrink)?)
            .await?,
        Written::Applied
    );
    let reader = db.reader();
    let names_in = |found: Vec<(String, FanoutHistory)>| -> BTreeSet<String> {
        found.into_iter().map(|(name, _)| name).collect()
    };
    assert!(names_in(reader.hot(range(0, 20), t(100)).await?).contains(first));
    assert!(!names_in(reader.hot(range(30, 40), t(100)).await?).contains(first));
    Ok(())
}
