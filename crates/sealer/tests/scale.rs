//! Scenario 54: an hour of many devices is sealed holding one device's readings at a
//! time, a device with more readings than that is sealed alone, and a run its deadline
//! stops mid-hour is taken up after the last device it wrote, to the items one run
//! writes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sealer::{Sealer, Settings};
use sharding::time::Timestamp;
use store::Written;
use store::error::StoreError;
use store::memory::{MemoryReadings, MemoryRollups, MemoryShards};
use store::rollup::RollupKey;
use store::rollup::{
    DeviceHour, HOUR_MS, MINUTE_MS, RollupItem, RollupPage, RollupQuery, RollupTable, keys,
};

use crate::common::{BASE_MS, R, hourly, load, put_block, shard_table, table_history};

/// The hour sealed: [01:00, 02:00) of the fixture's day.
const HOUR: i64 = BASE_MS + HOUR_MS;
/// Devices of the fleet; each sends [`PER_DEVICE`] readings in the hour.
const DEVICES: usize = 600;
const PER_DEVICE: i64 = 5;
/// What the read may hold of one device.
const MAX_READINGS: usize = 100;

fn at(ms: i64) -> Timestamp {
    Timestamp::from_millis(ms).unwrap()
}

fn settings() -> Settings {
    Settings {
        concurrency: 4,
        max_buffered: MAX_READINGS,
        ..Settings::default()
    }
}

/// 600 devices of 5 readings each, every reading also sent twice; and `busy-1`, with
/// 3 times what the read may hold of one device, part of it in blocks as well.
fn fleet() -> (MemoryReadings, Arc<MemoryShards>, BTreeMap<String, u64>) {
    let shards = shard_table(table_history(vec![(0, hourly(4))]), []);
    let table = MemoryReadings::new(Some(40));
    let mut readings = Vec::new();
    for d in 0..DEVICES {
        for i in 0..PER_DEVICE {
            readings.push(R {
                device: format!("dev-{d:04}"),
                event: format!("e{i}"),
                ts_ms: HOUR + i * 11 * MINUTE_MS + d as i64,
                value: store::Decimal::parse("2.5").unwrap(),
            });
        }
    }
    let busy: Vec<R> = (0..3 * MAX_READINGS as i64)
        .map(|i| R {
            device: "busy-1".to_owned(),
            event: format!("b{i:04}"),
            ts_ms: HOUR + i * 10_000,
            value: store::Decimal::parse("1").unwrap(),
        })
        .collect();
    load(&table, &shards, &readings);
    load(&table, &shards, &readings);
    load(&table, &shards, &busy);
    put_block(&table, &shards, &busy[..20]);
    let mut want: BTreeMap<String, u64> = (0..DEVICES)
        .map(|d| (format!("dev-{d:04}"), PER_DEVICE as u64))
        .collect();
    want.insert("busy-1".to_owned(), busy.len() as u64);
    (table, Arc::new(shards), want)
}

/// Each device-hour's readings.
fn counts(rollups: &MemoryRollups) -> BTreeMap<String, u64> {
    rollups
        .items()
        .iter()
        .filter(|(RollupKey { pk, .. }, _)| pk.starts_with("dh#"))
        .map(|(RollupKey { sk: device, .. }, item)| {
            let dh: DeviceHour = item.body().unwrap();
            (device.clone(), dh.hour.readings)
        })
        .collect()
}

#[tokio::test]
async fn an_hour_of_many_devices_holds_one_device_at_a_time_and_a_busy_one_is_sealed_alone() {
    let (table, shards, want) = fleet();
    let rollups = MemoryRollups::new();
    let s = Sealer::new(&table, shards, &rollups, settings());
    // The fleet's hour is 30 times what the read may hold of one device, 60 times
    // with its copies: read in time order, it would not fit.
    let report = s
        .run(at(HOUR + HOUR_MS + 12 * MINUTE_MS), None)
        .await
        .unwrap();
    assert_eq!(report.hours_sealed, 1, "{report:?}");
    assert_eq!(
        counts(&rollups),
        want,
        "each device-hour counts each reading once"
    );
    assert_eq!(
        report.readings,
        want.values().sum::<u64>(),
        "each reading read once"
    );
}

/// Rollups whose first write waits `pause`: a run whose deadline passes while it
/// writes its first batch of device-hours.
struct SlowFirstWrite {
    inner: MemoryRollups,
    pause: Duration,
    paused: std::sync::atomic::AtomicBool,
}

impl SlowFirstWrite {
    async fn wait(&self) {
        if !self.paused.swap(true, std::sync::atomic::Ordering::SeqCst) {
            tokio::time::sleep(self.pause).await;
        }
    }
}

impl RollupTable for SlowFirstWrite {
    async fn put_if_newer(&self, item: &RollupItem) -> Result<Written, StoreError> {
        self.wait().await;
        self.inner.put_if_newer(item).await
    }
    async fn put_if_version(
        &self,
        item: &RollupItem,
        expected: Option<u64>,
    ) -> Result<Written, StoreError> {
        self.inner.put_if_version(item, expected).await
    }
    async fn delete_if(&self, pk: &str, sk: &str, version: u64) -> Result<Written, StoreError> {
        self.inner.delete_if(pk, sk, version).await
    }
    async fn put(&self, item: &RollupItem) -> Result<(), StoreError> {
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

#[tokio::test]
async fn a_run_stopped_mid_hour_is_taken_up_after_the_last_device_it_wrote() {
    let (table, shards, want) = fleet();
    let now = at(HOUR + HOUR_MS + 12 * MINUTE_MS);
    let clean = MemoryRollups::new();
    Sealer::new(&table, shards.clone(), &clean, settings())
        .run(now, None)
        .await
        .unwrap();

    let slow = SlowFirstWrite {
        inner: MemoryRollups::new(),
        pause: Duration::from_secs(3),
        paused: std::sync::atomic::AtomicBool::new(false),
    };
    let first = Sealer::new(&table, shards.clone(), &slow, settings());
    let stopped = first
        .run(now, Some(Instant::now() + Duration::from_secs(2)))
        .await
        .unwrap();
    assert!(stopped.behind, "{stopped:?}");
    assert_eq!(stopped.hours_sealed, 0, "the hour is not sealed yet");
    let written = counts(&slow.inner).len();
    assert!(
        (1..want.len()).contains(&written),
        "a batch of device-hours written before the deadline: {written}"
    );
    assert!(
        slow.inner.items().contains_key(&keys::seal_progress()),
        "where it stopped is recorded"
    );

    let next = Sealer::new(&table, shards, &slow.inner, settings());
    let report = next.run(now, None).await.unwrap();
    assert_eq!(report.hours_sealed, 1, "{report:?}");
    assert!(
        report.readings < want.values().sum::<u64>(),
        "the next run reads only the devices after the last one written: {report:?}"
    );
    let mut items = slow.inner.items();
    items.remove(&keys::seal_progress());
    let want = clean.items();
    let differ: Vec<_> = want
        .keys()
        .chain(items.keys())
        .filter(|k| items.get(*k) != want.get(*k))
        .map(|k| (k, items.get(k), want.get(k)))
        .take(3)
        .collect();
    assert!(differ.is_empty(), "the items of one run: {differ:?}");
}
