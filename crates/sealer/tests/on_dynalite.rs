//! Scenarios 39 to 41 on dynalite (a second implementation of DynamoDB on loopback,
//! whose conditional writes are atomic as DynamoDB's are; moto's are not): the sealer
//! over its DynamoDB adapters (`DynamoReadings`, `DynamoShards`, `DynamoRollups`),
//! the tables created from template.yaml. Readings are stored by the ingest's batch
//! writer (`store::batch`) with copies: readings held in two blocks as well as their own
//! items, and readings of a raised device written again after the raise under a
//! sub-shard's key. The same items are stored in the in-memory fakes, so a run on
//! dynalite is held both to the fakes' run and to the cells of the distinct readings.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use bigdecimal::BigDecimal;
use rand::SeedableRng;
use rand::rngs::StdRng;
use sealer::{RunReport, Sealer, Settings};
use sharding::backoff::Backoff;
use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::fanout::{Raise, ShardMeta};
use sharding::key::{ItemKey, ReadingRef, write_key};
use sharding::time::Timestamp;
use stand_in::{Backend, Dynalite, ensure_dynalite, provision_tables, repo_root};
use store::Written;
use store::batch::{BatchWriter, Put, SizedItem, WriterConfig};
use store::block::BlockItem;
use store::directory::{ShardReader, ShardStore, UpdateCondition};
use store::dynamo::{DynamoShards, DynamoTable};
use store::error::StoreError;
use store::item::{Reading, ReadingItem};
use store::memory::{MemoryReadings, MemoryRollups, MemoryShards};
use store::read::DynamoReadings;
use store::rollup::RollupKey;
use store::rollup::dynamo::DynamoRollups;
use store::rollup::{
    Cells, DeviceHour, DirEntry, FleetPart, HOUR_MS, MINUTE_MS, RollupItem, RollupPage,
    RollupQuery, RollupTable, hour_of, keys, late_mark, part_of,
};
use tokio::sync::{Notify, watch};

use crate::common::{BASE_MS, R, hourly, shard_table, table_history};

/// The hour sealed: [01:00, 02:00) of the fixture's day.
const HOUR: i64 = BASE_MS + HOUR_MS;
/// `hot-1` goes from 1 to 8 keys half-way through the hour.
const RAISE: i64 = HOUR + 30 * MINUTE_MS;
const DEVICES: [&str; 6] = ["d-0", "d-1", "d-2", "d-3", "hot-1", "gateway-7"];
const PER_DEVICE: i64 = 300;
/// How long test readings are kept (their `ttl`).
const RETENTION: Duration = Duration::from_secs(86_400 * 365 * 100);

/// A time a run seals `HOUR` and no later hour at: 12 minutes after it ends.
fn after_the_horizon() -> Timestamp {
    Timestamp::from_millis(HOUR + HOUR_MS + 12 * MINUTE_MS).expect("in range")
}

/// Later, with `HOUR` still the last hour due.
fn later() -> Timestamp {
    Timestamp::from_millis(HOUR + HOUR_MS + 20 * MINUTE_MS).expect("in range")
}

fn settings() -> Settings {
    Settings {
        concurrency: 4,
        ..Settings::default()
    }
}

/// Reading `i` of device `d`: spread over the hour, some with 38-digit numbers.
fn reading(d: usize, i: i64) -> R {
    let value = match (i + d as i64) % 7 {
        0 => "12345678901234567890123456789012345678".to_owned(),
        1 => "-0.000000000000000000000000000000000001".to_owned(),
        k => format!("{}.{}", i - 150, k),
    };
    R {
        device: DEVICES[d].to_owned(),
        event: format!("e{i:05}"),
        ts_ms: HOUR + i * 11_987 + d as i64 * 13,
        value: store::Decimal::parse(&value).expect("a decimal"),
    }
}

/// `r` as the store holds it: its `temperature`, tagged `site=lab`.
fn stored_reading(r: &R) -> Reading {
    Reading {
        device_id: r.device.clone(),
        event_id: r.event.clone(),
        ts: Timestamp::from_millis(r.ts_ms).expect("in range"),
        metrics: BTreeMap::from([("temperature".to_owned(), r.value.clone())]),
        tags: BTreeMap::from([("site".to_owned(), "lab".to_owned())]),
        written: store::WriteOrder::OLDEST,
    }
}

/// One item of the readings table: a reading's own, or a block.
#[derive(Debug, Clone)]
enum Stored {
    Reading(ReadingItem),
    Block(BlockItem),
}

impl Stored {
    fn key(&self) -> ItemKey {
        match self {
            Self::Reading(item) => item.key(),
            Self::Block(block) => ItemKey {
                pk: block.pk.clone(),
                sk: block.sk.clone(),
            },
        }
    }
}

/// A dynalite with the template's tables, the shard directory of the fixture (hour
/// buckets over 4 shards; `hot-1` raised to 8 keys at [`RAISE`]) and the readings
/// table's items, the same items held by the in-memory fakes too.
struct Stand {
    /// Dropping it stops the server.
    server: Dynalite,
    client: Client,
    readings_table: String,
    shards_table: String,
    rollups_table: String,
    layout: TableHistory,
    hot: FanoutHistory,
    memory: MemoryReadings,
    memory_shards: Arc<MemoryShards>,
    /// Every reading stored, each once.
    readings: Vec<R>,
}

impl Stand {
    /// The stand with every device's 300 readings and their copies stored.
    async fn start(prefix: &str) -> anyhow::Result<Self> {
        let root = repo_root()?;
        let server = Dynalite::start(&ensure_dynalite(&root)?)?;
        let tables = provision_tables(
            &server.endpoint(),
            &root.join("template.yaml"),
            prefix,
            Backend::Dynalite,
        )
        .await?;
        let client = Client::new(&stand_in::sdk_config(&server.endpoint()).await);
        let shards_table = tables.name("ShardsTable")?.to_owned();
        let layout = table_history(vec![(0, hourly(4))]);
        let hot = raise_hot_device(&DynamoShards::new(&client, &shards_table), &layout).await?;
        let stand = Self {
            readings_table: tables.name("ReadingsTable")?.to_owned(),
            rollups_table: tables.name("RollupTable")?.to_owned(),
            shards_table,
            memory_shards: Arc::new(shard_table(
                layout.clone(),
                [("hot-1".to_owned(), hot.clone())],
            )),
            layout,
            hot,
            memory: MemoryReadings::new(None),
            readings: Vec::new(),
            server,
            client,
        };
        stand.with_fixture().await
    }

    /// Stores the fixture's readings and their copies.
    async fn with_fixture(mut self) -> anyhow::Result<Self> {
        let readings: Vec<R> = (0..DEVICES.len())
            .flat_map(|d| (0..PER_DEVICE).map(move |i| reading(d, i)))
            .collect();
        let mut items: Vec<Stored> = readings.iter().map(|r| self.own_item(r, None)).collect();
        // `d-1`'s first 20 readings held in two blocks as well (6 of them in both).
        let mut d1: Vec<R> = readings
            .iter()
            .filter(|r| r.device == "d-1")
            .take(20)
            .cloned()
            .collect();
        d1.sort_by(|a, b| (a.ts_ms, &a.event).cmp(&(b.ts_ms, &b.event)));
        items.push(self.block(&d1[..12])?);
        items.push(self.block(&d1[6..])?);
        // `hot-1`'s readings from before the raise written again after it (a redelivery
        // keyed by the raised fan-out): the same sort key under a sub-shard's key.
        let rewritten = RAISE + 5 * MINUTE_MS;
        let mut rekeyed = 0;
        for r in readings
            .iter()
            .filter(|r| r.device == "hot-1" && r.ts_ms < RAISE)
            .take(30)
        {
            let copy = self.own_item(r, Some(rewritten));
            if copy.key() != self.own_item(r, None).key() {
                rekeyed += 1;
            }
            items.push(copy);
        }
        assert!(rekeyed >= 20, "{rekeyed} of 30 copies under another key");
        let keys: BTreeSet<ItemKey> = items.iter().map(Stored::key).collect();
        self.store(items).await?;
        assert_eq!(
            self.count_readings_items().await?,
            keys.len(),
            "every copy is its own item"
        );
        assert_eq!(keys.len(), readings.len() + 2 + rekeyed);
        self.readings = readings;
        Ok(self)
    }

    /// The fan-out history of `device`, as the directory holds it.
    fn history(&self, device: &str) -> FanoutHistory {
        if device == "hot-1" {
            self.hot.clone()
        } else {
            FanoutHistory::new()
        }
    }

    /// The key a writer at `written_ms` (`None`: the reading's own time) gives `r`.
    fn key(&self, r: &R, written_ms: Option<i64>) -> ItemKey {
        let at = |ms| Timestamp::from_millis(ms).expect("in range");
        write_key(
            &ReadingRef::new(&r.device, &r.event, at(r.ts_ms)),
            &self.layout,
            &self.history(&r.device),
            at(written_ms.unwrap_or(r.ts_ms)),
        )
        .expect("a key")
        .key
    }

    /// `r`'s own item, written by a writer at `written_ms`.
    fn own_item(&self, r: &R, written_ms: Option<i64>) -> Stored {
        Stored::Reading(ReadingItem::new(
            &stored_reading(r),
            self.key(r, written_ms),
            RETENTION,
        ))
    }

    /// One block of `readings` (one device's, in order) under the first one's key.
    fn block(&self, readings: &[R]) -> anyhow::Result<Stored> {
        let members: Vec<Reading> = readings.iter().map(stored_reading).collect();
        let first = self.key(&readings[0], None);
        Ok(Stored::Block(BlockItem::new(&members, &first, RETENTION)?))
    }

    /// Writes `items` to the readings table on dynalite, through the ingest's batch
    /// writer, and to the in-memory table.
    async fn store(&self, items: Vec<Stored>) -> anyhow::Result<()> {
        let mut keyed = Vec::new();
        for stored in &items {
            let item = match stored {
                Stored::Reading(item) => item.to_item()?,
                Stored::Block(block) => block.to_item()?,
            };
            keyed.push((stored.key(), item));
        }
        let puts = keyed
            .iter()
            .map(|(key, item)| {
                let size = store::size::item_size(item);
                Ok(Put::new(key, SizedItem::new(item.clone(), size)?))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let remake: Vec<_> = keyed.iter().map(|(_, item)| item.clone()).collect();
        let writer = BatchWriter::new(
            DynamoTable::new(&self.client, &self.readings_table),
            WriterConfig {
                max_inflight: 4,
                backoff: Backoff {
                    base: Duration::from_millis(10),
                    cap: Duration::from_millis(200),
                    max_attempts: 8,
                },
            },
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        let report = writer
            .write(puts, deadline, &mut StdRng::seed_from_u64(41), &remake)
            .await;
        assert!(
            report.outcomes.iter().all(|o| o.is_written()),
            "{:?}",
            report.stats
        );
        for stored in items {
            match stored {
                Stored::Reading(item) => self.memory.put(item),
                Stored::Block(block) => self.memory.put_block(block),
            }
        }
        Ok(())
    }

    /// How many items the readings table holds.
    async fn count_readings_items(&self) -> anyhow::Result<usize> {
        let mut count = 0;
        let mut start = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(&self.readings_table)
                .set_exclusive_start_key(start)
                .send()
                .await?;
            count += page.items.unwrap_or_default().len();
            start = page.last_evaluated_key;
            if start.is_none() {
                return Ok(count);
            }
        }
    }

    /// Another set of the template's tables on the same server: its rollups table.
    async fn another_rollups_table(&self, prefix: &str) -> anyhow::Result<String> {
        let tables = provision_tables(
            &self.server.endpoint(),
            &repo_root()?.join("template.yaml"),
            prefix,
            Backend::Dynalite,
        )
        .await?;
        Ok(tables.name("RollupTable")?.to_owned())
    }

    /// A client of its own (its own connections), as another Lambda's.
    async fn new_client(&self) -> Client {
        Client::new(&stand_in::sdk_config(&self.server.endpoint()).await)
    }

    /// A sealer over the readings and the directory on dynalite, writing to
    /// `rollups_table`, through clients of its own.
    async fn sealer(&self, rollups_table: &str) -> DynamoSealer<DynamoRollups> {
        let client = self.new_client().await;
        let rollups = DynamoRollups::new(client.clone(), rollups_table);
        self.sealer_over(&client, rollups)
    }

    fn sealer_over<T: RollupTable>(&self, client: &Client, rollups: T) -> DynamoSealer<T> {
        Sealer::new(
            DynamoReadings::new(client, &self.readings_table),
            DynamoShards::new(client, &self.shards_table),
            rollups,
            settings(),
        )
    }

    /// The same sealer over the in-memory fakes, writing to `rollups`.
    fn fake_sealer<'a>(
        &'a self,
        rollups: &'a MemoryRollups,
    ) -> Sealer<&'a MemoryReadings, Arc<MemoryShards>, &'a MemoryRollups> {
        Sealer::new(
            &self.memory,
            self.memory_shards.clone(),
            rollups,
            settings(),
        )
    }

    /// Writes `r` late (a writer at `written_ms`), and its late mark with `nonce`, as
    /// the ingest does: the reading first, then the mark.
    async fn write_late(
        &mut self,
        r: &R,
        written_ms: i64,
        rollups_table: &str,
        nonce: u64,
    ) -> anyhow::Result<()> {
        self.store(vec![self.own_item(r, Some(written_ms))]).await?;
        self.readings.push(r.clone());
        DynamoRollups::new(self.client.clone(), rollups_table)
            .put(&late_mark(&r.device, hour_of(r.ts_ms), nonce))
            .await?;
        Ok(())
    }

    /// Every item of a rollups table, read by a Scan and decoded here (not by the
    /// adapter), by key.
    async fn scan(&self, table: &str) -> anyhow::Result<Items> {
        let mut out = BTreeMap::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(table)
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await?;
            for item in page.items.unwrap_or_default() {
                let item = decode(&item)?;
                out.insert(item.key(), item);
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                return Ok(out);
            }
        }
    }
}

type DynamoSealer<T> = Sealer<DynamoReadings, DynamoShards, T>;
type Items = BTreeMap<RollupKey, RollupItem>;

/// Stores the layout and raises `hot-1` from 1 to 8 keys at [`RAISE`], as the
/// directory's writers do (the change listed in the hot index first); the stored
/// history.
async fn raise_hot_device(
    shards: &DynamoShards,
    layout: &TableHistory,
) -> anyhow::Result<FanoutHistory> {
    assert_eq!(shards.create_layout(layout).await?, Written::Applied);
    let at = |ms| Timestamp::from_millis(ms).expect("in range");
    let created = ShardMeta::initial(at(BASE_MS - HOUR_MS));
    assert_eq!(
        shards.create_entity("hot-1", &created).await?,
        Written::Applied
    );
    let raise = Raise {
        from: 1,
        to: 8,
        precondition_last_updated: created.last_updated,
        effective_from: at(RAISE),
        updated_at: at(RAISE - 6 * MINUTE_MS),
    };
    let condition = UpdateCondition {
        last_updated: created.last_updated,
        quiet_since: None,
    };
    assert_eq!(
        shards
            .update_entity("hot-1", &condition, &created.raised(&raise)?)
            .await?,
        Written::Applied
    );
    let history = shards
        .get_entity("hot-1")
        .await?
        .map(|meta| meta.shard_history)
        .unwrap_or_default();
    assert_eq!(history.epochs().len(), 1, "{history:?}");
    Ok(history)
}

/// A stored derived item read by its attributes' documented types: `PK`, `SK`, `body`
/// (S), `version`, `ttl` (N).
/// Each item's body and expiry, by key: what a clean run over the same readings
/// writes. A version is not among them: it counts the bodies an item has had (a
/// device-hour sealed, then sealed again with a late reading, is at its second), where
/// a clean run writes each body once.
fn bodies(items: &Items) -> BTreeMap<RollupKey, (String, Option<i64>)> {
    items
        .iter()
        .map(|(key, item)| (key.clone(), (item.body.clone(), item.ttl)))
        .collect()
}

/// A stored head as the adapter reads it (the chunks of a long body are not read here:
/// no body of these tests is that long).
fn decode(item: &HashMap<String, AttributeValue>) -> anyhow::Result<RollupItem> {
    let row = store::rollup::stored::from_attributes(item.clone())?;
    Ok(store::rollup::stored::join(row, &[])?)
}

/// The cells of `readings` (each once) per device and minute, with exact sums.
fn expected(readings: &[R]) -> BTreeMap<String, DeviceHour> {
    let mut out: BTreeMap<String, DeviceHour> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for r in readings {
        if !seen.insert((r.device.clone(), r.ts_ms, r.event.clone())) {
            continue;
        }
        out.entry(r.device.clone())
            .or_insert_with(|| DeviceHour::new(r.device.clone(), HOUR))
            .add(
                r.ts_ms,
                &r.event,
                &BTreeMap::from([("temperature".to_owned(), r.value.clone())]),
                &BTreeMap::from([("site".to_owned(), "lab".to_owned())]),
            );
    }
    out
}

fn body<T: for<'de> serde::Deserialize<'de>>(items: &Items, key: RollupKey) -> T {
    items
        .get(&key)
        .unwrap_or_else(|| panic!("no {key}"))
        .body()
        .unwrap_or_else(|e| panic!("{key}: {e}"))
}

/// The fleet's hour and minute cells: the merge of its stored parts.
fn fleet(items: &Items) -> (Cells, BTreeMap<u8, Cells>) {
    let mut fleet = FleetPart::default();
    for (RollupKey { pk, .. }, item) in items {
        if *pk == keys::fleet_hour(HOUR) {
            fleet.merge(&item.body().expect("a fleet part"));
        }
    }
    (fleet.hour, fleet.minutes)
}

/// The fleet cells `device_hours` make.
fn expected_fleet(device_hours: &BTreeMap<String, DeviceHour>) -> (Cells, BTreeMap<u8, Cells>) {
    let mut fleet = FleetPart::default();
    for dh in device_hours.values() {
        fleet.merge(&FleetPart::of(HOUR, part_of(&dh.device), [dh]));
    }
    (fleet.hour, fleet.minutes)
}

/// The items of `items` that are not late marks.
fn without_marks(items: &Items) -> Items {
    let mut items = items.clone();
    items.retain(|RollupKey { pk, .. }, _| !pk.starts_with("late#"));
    items
}

/// Holds the device-hours of `items` to the cells of `readings`: each device-hour,
/// its summary and its directory entry, and the fleet's merged cells.
fn assert_cells_of(items: &Items, readings: &[R]) {
    let want = expected(readings);
    for (device, dh) in &want {
        let stored: DeviceHour = body(items, keys::device_hour(device, HOUR));
        assert_eq!(&stored, dh, "{device}");
        let summary: DeviceHour = body(items, keys::device_summary(device, HOUR));
        assert_eq!(summary, dh.summary(), "{device}");
        let entry: DirEntry = body(items, keys::directory_entry(device));
        assert_eq!(entry, DirEntry::of(dh), "{device}");
        // The sums are exact, against an independent sum of the distinct readings.
        let distinct: BTreeMap<(i64, &str), &R> = readings
            .iter()
            .filter(|r| &r.device == device)
            .map(|r| ((r.ts_ms, r.event.as_str()), r))
            .collect();
        let exact: BigDecimal = distinct
            .values()
            .map(|r| BigDecimal::from_str(r.value.as_str()).expect("a decimal"))
            .sum();
        let cell = &stored.hour.metrics["temperature"];
        assert_eq!(cell.sum, exact, "{device}");
        assert_eq!(cell.count, distinct.len() as u64, "{device}");
    }
    assert_eq!(fleet(items), expected_fleet(&want));
    assert_eq!(fleet(items).0.devices, want.len() as u64);
}

/// Scenarios 41 and 39: one run on dynalite reads every reading once, the copies in
/// the table (two blocks, re-keyed copies) included, and writes exactly the items the
/// same run writes over the in-memory fakes holding the same items, with the same
/// report; each device-hour, summary, directory entry and the fleet's merged parts are
/// the cells of the distinct readings, sums exact to the last of 38 digits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sealer_on_dynalite_writes_the_items_it_writes_on_the_fakes() -> anyhow::Result<()> {
    let stand = Stand::start("sealer-items").await?;
    let report = stand
        .sealer(&stand.rollups_table)
        .await
        .run(after_the_horizon(), None)
        .await?;
    assert_eq!(report.hours_sealed, 1, "{report:?}");
    assert_eq!(report.watermark_ms, Some(HOUR + HOUR_MS));
    assert_eq!(
        report.readings,
        stand.readings.len() as u64,
        "each reading read once"
    );
    let on_dynalite = stand.scan(&stand.rollups_table).await?;

    let fake = MemoryRollups::new();
    let on_fakes = stand
        .fake_sealer(&fake)
        .run(after_the_horizon(), None)
        .await?;
    assert_eq!(report, on_fakes);
    assert_eq!(on_dynalite, fake.items());

    assert_cells_of(&on_dynalite, &stand.readings);
    let parts: BTreeSet<u32> = DEVICES.iter().map(|d| part_of(d)).collect();
    assert_eq!(
        on_dynalite.len(),
        3 * DEVICES.len() + parts.len() + 1,
        "device-hours, summaries, directory entries, fleet parts, the watermark"
    );
    Ok(())
}

/// A rollups table whose writes (or its deletes alone) wait, once the first of them is
/// reached, until released: a sealer slow to write what it read.
struct Held {
    inner: DynamoRollups,
    deletes_only: bool,
    reached: Arc<Notify>,
    release: watch::Receiver<bool>,
}

impl Held {
    /// `inner`, held at its first write (or delete); the signal of that write being
    /// reached, and the release.
    fn new(inner: DynamoRollups, deletes_only: bool) -> (Self, Arc<Notify>, watch::Sender<bool>) {
        let (release, released) = watch::channel(false);
        let reached = Arc::new(Notify::new());
        let held = Self {
            inner,
            deletes_only,
            reached: reached.clone(),
            release: released,
        };
        (held, reached, release)
    }

    async fn hold(&self, delete: bool) {
        if self.deletes_only && !delete {
            return;
        }
        self.reached.notify_one();
        let mut release = self.release.clone();
        let released = release.wait_for(|r| *r).await.is_ok();
        assert!(released, "released");
    }
}

impl RollupTable for Held {
    async fn put_if_newer(&self, item: &RollupItem) -> Result<Written, StoreError> {
        self.hold(false).await;
        self.inner.put_if_newer(item).await
    }
    async fn put_if_version(
        &self,
        item: &RollupItem,
        expected: Option<u64>,
    ) -> Result<Written, StoreError> {
        self.hold(false).await;
        self.inner.put_if_version(item, expected).await
    }
    async fn delete_if(&self, pk: &str, sk: &str, version: u64) -> Result<Written, StoreError> {
        self.hold(true).await;
        self.inner.delete_if(pk, sk, version).await
    }
    async fn put(&self, item: &RollupItem) -> Result<(), StoreError> {
        self.hold(false).await;
        self.inner.put(item).await
    }
    async fn get(
        &self,
        pk: &str,
        sk: &str,
        consistent: bool,
    ) -> Result<Option<RollupItem>, StoreError> {
        self.inner.get(pk, sk, consistent).await
    }
    async fn query(&self, q: &RollupQuery) -> Result<RollupPage, StoreError> {
        self.inner.query(q).await
    }
}

/// Runs `n` sealers at once over `table`, each in a task of its own with clients of
/// its own; their reports.
async fn at_once(stand: &Stand, table: &str, n: usize, now: Timestamp) -> Vec<RunReport> {
    let mut tasks = Vec::new();
    for _ in 0..n {
        let sealer = stand.sealer(table).await;
        tasks.push(tokio::spawn(async move { sealer.run(now, None).await }));
    }
    let mut reports = Vec::new();
    for task in tasks {
        reports.push(task.await.expect("a sealer task").expect("a run"));
    }
    reports
}

/// Scenario 39 on dynalite: four sealers at once leave exactly the items one clean run
/// leaves. And where the conditions decide: a sealer that read the hour before three
/// late readings were written, and writes only after three other sealers at once
/// sealed the hour with them, leaves the newer items as they are (every derived item
/// equals a clean run's over all the readings); the next run seals their marks and
/// changes nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_sealers_at_once_on_dynalite_leave_what_one_clean_run_leaves() -> anyhow::Result<()> {
    let mut stand = Stand::start("sealer-four").await?;
    let clean_table = stand.rollups_table.clone();
    stand
        .sealer(&clean_table)
        .await
        .run(after_the_horizon(), None)
        .await?;
    let clean = stand.scan(&clean_table).await?;

    let four = stand.another_rollups_table("sealer-four-b").await?;
    let reports = at_once(&stand, &four, 4, after_the_horizon()).await;
    assert!(
        reports
            .iter()
            .all(|r| r.watermark_ms == Some(HOUR + HOUR_MS))
    );
    assert_eq!(stand.scan(&four).await?, clean, "four runs at once");

    // The slow sealer reads the hour, then waits at its first write.
    let race = stand.another_rollups_table("sealer-four-c").await?;
    let client = stand.new_client().await;
    let (held, reached, release) = Held::new(DynamoRollups::new(client.clone(), &race), false);
    let slow = stand.sealer_over(&client, held);
    let slow = tokio::spawn(async move { slow.run(after_the_horizon(), None).await });
    reached.notified().await;
    // Three readings of the hour written now, each with its mark, as the ingest writes
    // a reading whose hour may be sealed.
    let written = after_the_horizon().as_millis();
    for (d, minute, value) in [(0, 3, "-77.5"), (2, 41, "1e30"), (4, 59, "0.000001")] {
        let late = R {
            device: DEVICES[d].to_owned(),
            event: format!("late-{d}"),
            ts_ms: HOUR + minute * MINUTE_MS + 1,
            value: store::Decimal::parse(value)?,
        };
        stand
            .write_late(&late, written, &race, 100 + d as u64)
            .await?;
    }
    let readings = stand.readings.len() as u64;
    let fresh = at_once(&stand, &race, 3, after_the_horizon()).await;
    assert!(fresh.iter().all(|r| r.readings == readings), "{fresh:?}");
    release.send(true)?;
    let slow = slow.await??;
    let raced = stand.scan(&race).await?;

    // One clean run over every reading, the late ones included.
    let all = stand.another_rollups_table("sealer-four-d").await?;
    stand
        .sealer(&all)
        .await
        .run(after_the_horizon(), None)
        .await?;
    let clean_all = stand.scan(&all).await?;
    assert_eq!(without_marks(&raced), clean_all, "the slow sealer's writes");
    assert_cells_of(&clean_all, &stand.readings);
    assert_eq!(raced.len() - clean_all.len(), 3, "three marks");
    // It read the hour before the late readings; its writes over the versions it had
    // read were refused, and the three device-hours whose stored body differed (the
    // late readings') it read again, and found stored as it computed them.
    assert_eq!(
        slow.readings,
        readings - 3 + 3 * (PER_DEVICE as u64 + 1),
        "read before the late readings, and those three again"
    );
    assert_eq!(
        (slow.device_hours_written, slow.device_hours_unchanged),
        (0, DEVICES.len() as u64),
        "every write of the slow sealer refused: {slow:?}"
    );

    // The next run seals the three marks, and writes nothing else.
    let report = stand.sealer(&race).await.run(later(), None).await?;
    assert_eq!(
        (report.marks_sealed, report.device_hours_written),
        (3, 0),
        "{report:?}"
    );
    assert_eq!(stand.scan(&race).await?, clean_all);
    Ok(())
}

/// Scenario 40 on dynalite: a reading written after its hour was sealed, and its late
/// mark: the next run seals the device-hour again, and every derived item is then what
/// one clean run over all the readings writes (count +1, the exact sum +v, the minimum
/// widened, in the device-hour, its summary and the fleet's cells). Then the reading's
/// copy (in a block with the next reading) and a second mark: the run seals the mark,
/// writes no device-hour, and changes no item.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_reading_on_dynalite_adds_exactly_once_and_its_copy_adds_nothing()
-> anyhow::Result<()> {
    let mut stand = Stand::start("sealer-late").await?;
    let table = stand.rollups_table.clone();
    stand
        .sealer(&table)
        .await
        .run(after_the_horizon(), None)
        .await?;
    let before = stand.scan(&table).await?;
    let dh_before: DeviceHour = body(&before, keys::device_hour("d-2", HOUR));
    let (fleet_before, _) = fleet(&before);

    let late = R {
        device: "d-2".to_owned(),
        event: "late-1".to_owned(),
        ts_ms: HOUR + 17 * MINUTE_MS + 5,
        value: store::Decimal::parse("-1000000.5")?,
    };
    let v = BigDecimal::from_str("-1000000.5")?;
    stand
        .write_late(&late, later().as_millis(), &table, 7)
        .await?;
    let report = stand.sealer(&table).await.run(later(), None).await?;
    assert_eq!(
        (
            report.marks_sealed,
            report.hours_sealed,
            report.device_hours_written
        ),
        (1, 0, 1),
        "{report:?}"
    );
    let after = stand.scan(&table).await?;
    let dh_after: DeviceHour = body(&after, keys::device_hour("d-2", HOUR));
    let (b, a) = (
        &dh_before.hour.metrics["temperature"],
        &dh_after.hour.metrics["temperature"],
    );
    assert_eq!(a.count, b.count + 1);
    assert_eq!(a.sum, &b.sum + &v);
    assert_eq!(a.min, v, "min widened");
    assert_eq!(a.max, b.max);
    let (fleet_after, _) = fleet(&after);
    assert_eq!(fleet_after.readings, fleet_before.readings + 1);
    assert_eq!(fleet_after.devices, fleet_before.devices);
    assert_eq!(
        fleet_after.metrics["temperature"].sum,
        &fleet_before.metrics["temperature"].sum + &v
    );
    assert_cells_of(&after, &stand.readings);
    // Exactly what one clean run over every reading writes, and the mark is gone.
    let clean_table = stand.another_rollups_table("sealer-late-b").await?;
    stand.sealer(&clean_table).await.run(later(), None).await?;
    assert_eq!(bodies(&after), bodies(&stand.scan(&clean_table).await?));

    // Its copy, in a block with a copy of the next reading of d-2, and a second mark.
    let next = stand
        .readings
        .iter()
        .filter(|r| r.device == "d-2" && r.ts_ms > late.ts_ms)
        .min_by_key(|r| r.ts_ms)
        .cloned()
        .expect("a later reading");
    let copy = stand.block(&[late.clone(), next])?;
    stand.store(vec![copy]).await?;
    DynamoRollups::new(stand.client.clone(), &table)
        .put(&late_mark("d-2", HOUR, 8))
        .await?;
    let report = stand.sealer(&table).await.run(later(), None).await?;
    assert_eq!(
        (report.marks_sealed, report.device_hours_written),
        (1, 0),
        "{report:?}"
    );
    assert_eq!(stand.scan(&table).await?, after, "nothing changed");
    Ok(())
}

/// Scenario 40 on dynalite, a mark replaced while its device-hour is sealed: a run
/// reads the mark and the readings, and before it deletes the mark another late
/// reading of the device-hour is written with its own mark. The delete, conditional on
/// the nonce read, leaves the newer mark, so the next run seals the second reading; the
/// items are then one clean run's over all the readings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_replaced_while_its_hour_is_sealed_on_dynalite_stays_for_the_next_run()
-> anyhow::Result<()> {
    let mut stand = Stand::start("sealer-mark").await?;
    let table = stand.rollups_table.clone();
    stand
        .sealer(&table)
        .await
        .run(after_the_horizon(), None)
        .await?;
    let late = |event: &str, minute: i64, value: &str| R {
        device: "d-3".to_owned(),
        event: event.to_owned(),
        ts_ms: HOUR + minute * MINUTE_MS + 7,
        value: store::Decimal::parse(value).expect("a decimal"),
    };
    let written = later().as_millis();
    stand
        .write_late(&late("late-1", 12, "5.25"), written, &table, 7)
        .await?;
    let client = stand.new_client().await;
    let (held, reached, release) = Held::new(DynamoRollups::new(client.clone(), &table), true);
    let slow = stand.sealer_over(&client, held);
    let slow = tokio::spawn(async move { slow.run(later(), None).await });
    reached.notified().await;
    stand
        .write_late(&late("late-2", 44, "-9e20"), written, &table, 9)
        .await?;
    release.send(true)?;
    let report = slow.await??;
    assert_eq!(
        (report.marks_sealed, report.device_hours_written),
        (0, 1),
        "the newer mark stays: {report:?}"
    );
    let key = keys::late_mark("d-3", HOUR);
    let items = stand.scan(&table).await?;
    assert_eq!(items.get(&key).map(|m| m.version), Some(9));
    let sealed: DeviceHour = body(&items, keys::device_hour("d-3", HOUR));
    assert_eq!(
        sealed.readings(),
        PER_DEVICE as u64 + 1,
        "late-2 not read yet"
    );

    let report = stand.sealer(&table).await.run(later(), None).await?;
    assert_eq!(
        (report.marks_sealed, report.device_hours_written),
        (1, 1),
        "{report:?}"
    );
    let clean = stand.another_rollups_table("sealer-mark-b").await?;
    stand.sealer(&clean).await.run(later(), None).await?;
    let items = stand.scan(&table).await?;
    assert_eq!(bodies(&items), bodies(&stand.scan(&clean).await?));
    assert_cells_of(&items, &stand.readings);
    Ok(())
}
