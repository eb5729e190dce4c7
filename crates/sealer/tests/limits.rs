//! Scenarios 56 to 58: whatever a sender sends within the ingest's limits, every
//! derived item stays within DynamoDB's (the memory fake refuses a stored row over
//! 400 KB by DynamoDB's size rule, as DynamoDB does), no one device-hour stops the run,
//! and a reading re-sent with new values is answered as the last written everywhere.

use std::collections::BTreeMap;
use std::sync::Arc;

use sealer::{Sealer, Settings};
use sharding::time::Timestamp;
use sharding::written::WriteOrder;
use store::Written;
use store::error::StoreError;
use store::item::Reading;
use store::memory::{MemoryReadings, MemoryRollups, MemoryShards};
use store::rollup::RollupKey;
use store::rollup::stored::{CHUNK_BYTES, row_size};
use store::rollup::{
    DeviceHour, DirEntry, FleetPart, HOUR_MS, MINUTE_MS, PARTS, RollupItem, RollupPage,
    RollupQuery, RollupTable, keys, late_mark, part_of,
};
use store::size::MAX_ITEM_BYTES;

use crate::common::{BASE_MS, hourly, load_readings, shard_table, table_history, ts};

const HOUR: i64 = BASE_MS + HOUR_MS;

fn after_the_horizon() -> Timestamp {
    Timestamp::from_millis(HOUR + HOUR_MS + 12 * MINUTE_MS).unwrap()
}

fn later() -> Timestamp {
    Timestamp::from_millis(HOUR + 2 * HOUR_MS + 12 * MINUTE_MS).unwrap()
}

fn shards() -> Arc<MemoryShards> {
    Arc::new(shard_table(table_history(vec![(0, hourly(4))]), []))
}

fn sealer<'a, R: RollupTable + 'a>(
    table: &'a MemoryReadings,
    shards: Arc<MemoryShards>,
    rollups: R,
    settings: Settings,
) -> Sealer<&'a MemoryReadings, Arc<MemoryShards>, R> {
    Sealer::new(table, shards, rollups, settings)
}

fn settings() -> Settings {
    Settings {
        concurrency: 4,
        ..Settings::default()
    }
}

fn reading(device: &str, event: &str, ts_ms: i64, metrics: &[(String, &str)]) -> Reading {
    Reading {
        device_id: device.to_owned(),
        event_id: event.to_owned(),
        ts: ts(ts_ms),
        metrics: metrics
            .iter()
            .map(|(name, v)| (name.clone(), store::Decimal::parse(v).unwrap()))
            .collect(),
        tags: BTreeMap::from([("fw".to_owned(), "1.0".to_owned())]),
        written: WriteOrder(1),
    }
}

/// What the readings say, each device's hour computed from them directly.
fn expected(readings: &[Reading]) -> BTreeMap<String, DeviceHour> {
    let mut out: BTreeMap<String, DeviceHour> = BTreeMap::new();
    for r in readings {
        out.entry(r.device_id.clone())
            .or_insert_with(|| DeviceHour::new(r.device_id.clone(), HOUR))
            .add(r.ts.as_millis(), &r.event_id, &r.metrics, &r.tags);
    }
    out
}

fn body<T: for<'de> serde::Deserialize<'de>>(rollups: &MemoryRollups, key: RollupKey) -> T {
    rollups.items()[&key].body().unwrap()
}

/// The fleet's hour: its parts merged.
fn fleet(rollups: &MemoryRollups) -> FleetPart {
    let mut fleet = FleetPart::default();
    for (RollupKey { pk, .. }, item) in rollups.items() {
        if pk == keys::fleet_hour(HOUR) {
            fleet.merge(&item.body().unwrap());
        }
    }
    fleet
}

fn expected_fleet(device_hours: &BTreeMap<String, DeviceHour>) -> FleetPart {
    let mut fleet = FleetPart::default();
    for dh in device_hours.values() {
        fleet.merge(&FleetPart::of(HOUR, part_of(&dh.device), [dh]));
    }
    fleet
}

/// Every row stored, chunks included, within the item limit (the fake refused any over
/// it, so this holds by construction; it is said here to show the sizes).
fn largest_row(rollups: &MemoryRollups) -> usize {
    let rows = rollups.rows();
    let largest = rows.values().map(row_size).max().unwrap_or(0);
    assert!(largest <= MAX_ITEM_BYTES, "{largest}");
    largest
}

/// Scenario 56: a device as wide as the ingest accepts (64 metrics, 64-character names,
/// 38-digit values), a reading a minute, seals; its device-hour (about 750 KB of JSON
/// in the encoding before) is stored in chunks, each under the item limit, and reads
/// back exactly.
#[tokio::test]
async fn a_device_as_wide_as_the_ingest_accepts_seals_within_the_item_limit() {
    let names: Vec<String> = (0..64)
        .map(|i| format!("{i:02}{}", "m".repeat(62)))
        .collect();
    let mut readings = Vec::new();
    for minute in 0..60 {
        let metrics: Vec<(String, String)> = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                (
                    name.clone(),
                    format!("{}{minute:02}{i:02}.{}", "9".repeat(30), "7".repeat(4)),
                )
            })
            .collect();
        let metrics: Vec<(String, &str)> = metrics
            .iter()
            .map(|(n, v)| (n.clone(), v.as_str()))
            .collect();
        readings.push(reading(
            "wide-1",
            &format!("e{minute}"),
            HOUR + minute * MINUTE_MS + 5,
            &metrics,
        ));
        readings.push(reading(
            "narrow-1",
            &format!("e{minute}"),
            HOUR + minute * MINUTE_MS + 9,
            &[("t".to_owned(), "1.5")],
        ));
    }
    let shards = shards();
    let table = MemoryReadings::new(None);
    load_readings(&table, &shards, &readings);
    let rollups = MemoryRollups::new();
    let report = sealer(&table, shards, &rollups, settings())
        .run(after_the_horizon(), None)
        .await
        .unwrap();
    assert_eq!((report.hours_sealed, report.isolated), (1, 0), "{report:?}");
    let want = expected(&readings);
    let dh: DeviceHour = body(&rollups, keys::device_hour("wide-1", HOUR));
    assert_eq!(dh, want["wide-1"]);
    let summary: DeviceHour = body(&rollups, keys::device_summary("wide-1", HOUR));
    assert_eq!(summary, want["wide-1"].summary());
    assert_eq!(fleet(&rollups), expected_fleet(&want));
    let stored = &rollups.items()[&keys::device_hour("wide-1", HOUR)];
    assert!(
        stored.body.len() > CHUNK_BYTES,
        "{} bytes: in chunks",
        stored.body.len()
    );
    let largest = largest_row(&rollups);
    println!(
        "wide device-hour: {} bytes of body, largest row {largest} bytes",
        stored.body.len()
    );
}

/// Scenario 56: an hour of 3,200 metric names across the fleet (400 devices with eight
/// names of their own each) seals, and the fleet's cells read back exactly.
#[tokio::test]
async fn an_hour_of_thousands_of_metric_names_across_the_fleet_seals() {
    let mut readings = Vec::new();
    for d in 0..400 {
        let metrics: Vec<(String, &str)> = (0..8)
            .map(|m| {
                (
                    format!("dev{d:03}_metric_{m}_{}", "x".repeat(40)),
                    "123456789012345678901234567890.12345678",
                )
            })
            .collect();
        for minute in [3, 17, 42] {
            readings.push(reading(
                &format!("d-{d:03}"),
                &format!("e{minute}"),
                HOUR + minute * MINUTE_MS,
                &metrics,
            ));
        }
    }
    let shards = shards();
    let table = MemoryReadings::new(None);
    load_readings(&table, &shards, &readings);
    let rollups = MemoryRollups::new();
    let report = sealer(&table, shards, &rollups, settings())
        .run(after_the_horizon(), None)
        .await
        .unwrap();
    assert_eq!((report.hours_sealed, report.isolated), (1, 0), "{report:?}");
    let want = expected(&readings);
    let fleet = fleet(&rollups);
    assert_eq!(fleet, expected_fleet(&want));
    assert_eq!(fleet.hour.metrics.len(), 3_200);
    assert_eq!(fleet.hour.devices, 400);
    let parts: usize = rollups
        .items()
        .keys()
        .filter(|RollupKey { pk, .. }| *pk == keys::fleet_hour(HOUR))
        .count();
    assert_eq!(parts, PARTS as usize);
    largest_row(&rollups);
}

/// Scenario 58: a reading re-sent with its identity and new values after its hour was
/// sealed (its item overwritten, a late mark written, as the ingest does) is answered
/// as the last written in the device-hour, its summary, the fleet's cells and the
/// directory, though the count of readings did not change.
#[tokio::test]
async fn a_value_re_sent_after_the_seal_is_the_one_every_derived_item_holds() {
    let readings: Vec<Reading> = (0..10)
        .map(|i| {
            reading(
                "d-1",
                &format!("e{i}"),
                HOUR + i * MINUTE_MS,
                &[("t".to_owned(), "2")],
            )
        })
        .collect();
    let shards = shards();
    let table = MemoryReadings::new(None);
    load_readings(&table, &shards, &readings);
    let rollups = MemoryRollups::new();
    let s = sealer(&table, shards.clone(), &rollups, settings());
    s.run(after_the_horizon(), None).await.unwrap();
    let sealed: DeviceHour = body(&rollups, keys::device_hour("d-1", HOUR));
    assert_eq!(sealed.hour.metrics["t"].max.to_string(), "2");

    // The newest reading re-sent with a new value and new tags, after the seal.
    let mut resent = readings[9].clone();
    resent.metrics = BTreeMap::from([("t".to_owned(), store::Decimal::parse("100").unwrap())]);
    resent.tags = BTreeMap::from([("fw".to_owned(), "2.0".to_owned())]);
    resent.written = WriteOrder(2);
    load_readings(&table, &shards, std::slice::from_ref(&resent));
    rollups.put(&late_mark("d-1", HOUR, 77)).await.unwrap();
    // Before the next run, its device routes answer the marked hour from its readings,
    // not from the cells sealed before the re-send.
    let svc = crate::common::service(&table, shards.clone()).with_rollups(rollups.clone());
    let uri =
        "/devices/d-1/stats?from=2026-06-22T01:00:00Z&to=2026-06-22T02:00:00Z&interval=1h&metric=t";
    let answer = svc
        .handle(
            &http::Request::get(uri).body(()).unwrap(),
            crate::common::now(),
        )
        .await;
    assert_eq!(answer.status(), 200, "{}", answer.body());
    let page: serde_json::Value = serde_json::from_str(answer.body()).unwrap();
    assert_eq!(page["buckets"][0]["max"].to_string(), "100", "{page}");
    assert_eq!(page["buckets"][0]["count"], 10, "{page}");
    let report = s.run(later(), None).await.unwrap();
    assert_eq!(
        (report.marks_sealed, report.device_hours_written),
        (1, 1),
        "{report:?}"
    );

    let mut now_says = readings.clone();
    now_says[9] = resent;
    let want = expected(&now_says);
    let dh: DeviceHour = body(&rollups, keys::device_hour("d-1", HOUR));
    assert_eq!(dh, want["d-1"], "the same count, the new value");
    assert_eq!(dh.hour.metrics["t"].max.to_string(), "100");
    let summary: DeviceHour = body(&rollups, keys::device_summary("d-1", HOUR));
    assert_eq!(summary, want["d-1"].summary());
    assert_eq!(fleet(&rollups), expected_fleet(&want));
    let entry: DirEntry = body(&rollups, keys::directory_entry("d-1"));
    assert_eq!(
        entry.tags["fw"], "2.0",
        "the newest reading's tags, re-sent"
    );
    // Its versions moved on: a count is not a version.
    assert_eq!(rollups.items()[&keys::device_hour("d-1", HOUR)].version, 2);
}

/// The rollups table refusing every write of one key, as DynamoDB refuses an item it
/// cannot take (or a bug writes one it cannot).
struct Refusing {
    inner: MemoryRollups,
    key: RollupKey,
}

impl Refusing {
    fn check(&self, pk: &str, sk: &str) -> Result<(), StoreError> {
        match (pk, sk) == (self.key.pk.as_str(), self.key.sk.as_str()) {
            true => Err(StoreError::Validation("refused for the test".to_owned())),
            false => Ok(()),
        }
    }
}

impl RollupTable for Refusing {
    async fn put_if_newer(&self, item: &RollupItem) -> Result<Written, StoreError> {
        self.check(&item.pk, &item.sk)?;
        self.inner.put_if_newer(item).await
    }
    async fn put_if_version(
        &self,
        item: &RollupItem,
        expected: Option<u64>,
    ) -> Result<Written, StoreError> {
        self.check(&item.pk, &item.sk)?;
        self.inner.put_if_version(item, expected).await
    }
    async fn delete_if(&self, pk: &str, sk: &str, version: u64) -> Result<Written, StoreError> {
        self.check(pk, sk)?;
        self.inner.delete_if(pk, sk, version).await
    }
    async fn put(&self, item: &RollupItem) -> Result<(), StoreError> {
        self.check(&item.pk, &item.sk)?;
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

/// Scenario 57: one device-hour whose item cannot be written is isolated: the run
/// seals every other device, moves the watermark and names it; a late mark brings it
/// back, and the next run, the refusal gone, seals it to what one clean run writes.
/// A device too busy to read (more readings in a minute than a read may hold) is
/// isolated the same way.
#[tokio::test]
async fn one_device_hour_that_cannot_be_written_stops_no_one_else() {
    let mut readings = Vec::new();
    for d in ["d-1", "d-2", "d-3", "busy-1"] {
        for i in 0..30 {
            readings.push(reading(
                d,
                &format!("e{i}"),
                HOUR + i * MINUTE_MS,
                &[("t".to_owned(), "1")],
            ));
        }
    }
    // Five readings in one minute: more than this sealer's read holds.
    for i in 0..5 {
        readings.push(reading(
            "busy-1",
            &format!("b{i}"),
            HOUR + 40 * MINUTE_MS + i,
            &[("t".to_owned(), "2")],
        ));
    }
    let shards = shards();
    let table = MemoryReadings::new(None);
    load_readings(&table, &shards, &readings);
    let inner = MemoryRollups::new();
    let refusing = Refusing {
        inner: inner.clone(),
        key: keys::device_hour("d-2", HOUR),
    };
    let tight = Settings {
        max_buffered: 4,
        ..settings()
    };
    let report = sealer(&table, shards.clone(), &refusing, tight)
        .run(after_the_horizon(), None)
        .await
        .unwrap();
    assert_eq!(report.hours_sealed, 1, "the watermark moved: {report:?}");
    assert_eq!(report.isolated, 2, "{report:?}");
    assert!(
        report.isolated_items.iter().any(|i| i.contains("d-2")),
        "{report:?}"
    );
    assert!(
        report.isolated_items.iter().any(|i| i.contains("busy-1")),
        "{report:?}"
    );
    let items = inner.items();
    assert!(items.contains_key(&keys::device_hour("d-1", HOUR)));
    assert!(items.contains_key(&keys::device_hour("d-3", HOUR)));
    assert!(
        items.contains_key(&keys::late_mark("d-2", HOUR)),
        "marked for the next run"
    );
    assert!(items.contains_key(&keys::late_mark("busy-1", HOUR)));
    let line = sealer::metrics_line(&report, after_the_horizon());
    assert!(line.contains("DeviceHoursIsolated"), "{line}");

    // The refusal gone, the next run seals d-2 from its mark; busy-1 stays isolated
    // until its setting allows it, and is sealed then.
    let report = sealer(&table, shards.clone(), &inner, tight)
        .run(later(), None)
        .await
        .unwrap();
    assert_eq!(report.isolated, 1, "{report:?}");
    let report = sealer(&table, shards.clone(), &inner, settings())
        .run(later(), None)
        .await
        .unwrap();
    assert_eq!((report.isolated, report.marks_sealed), (0, 1), "{report:?}");
    let clean = MemoryRollups::new();
    sealer(&table, shards, &clean, settings())
        .run(after_the_horizon(), None)
        .await
        .unwrap();
    let bodies = |r: &MemoryRollups| -> BTreeMap<_, _> {
        r.items().into_iter().map(|(k, i)| (k, i.body)).collect()
    };
    assert_eq!(bodies(&inner), bodies(&clean), "what one clean run writes");
}
