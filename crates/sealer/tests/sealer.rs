//! Scenarios 39 to 41: the sealer's derived items equal what the readings say, each
//! reading counted once however many items hold it, a late reading added exactly once,
//! and a run killed anywhere, or two at once, leave what one clean run leaves.

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bigdecimal::BigDecimal;
use sealer::{Sealer, Settings};
use sharding::time::Timestamp;
use store::Written;
use store::error::StoreError;
use store::memory::{MemoryReadings, MemoryRollups, MemoryShards};
use store::rollup::RollupKey;
use store::rollup::{
    Cells, DeviceHour, DirEntry, FleetPart, HOUR_MS, MINUTE_MS, RollupItem, RollupPage,
    RollupQuery, RollupTable, keys, late_mark, part_of,
};

use crate::common::{
    BASE_MS, R, fanout_history, hourly, load, put_block, shard_table, table_history,
};

/// The hour sealed: [01:00, 02:00) of the fixture's day.
const HOUR: i64 = BASE_MS + HOUR_MS;
const DEVICES: [&str; 6] = ["d-0", "d-1", "d-2", "d-3", "hot-1", "gateway-7"];

/// A time a run seals `HOUR` and no later hour at: 12 minutes after it ends.
fn after_the_horizon() -> Timestamp {
    Timestamp::from_millis(HOUR + HOUR_MS + 12 * MINUTE_MS).unwrap()
}

fn reading(device: &str, i: i64, value: &str) -> R {
    R {
        device: device.to_owned(),
        event: format!("e{i:05}"),
        ts_ms: HOUR + i * 7_919 % HOUR_MS,
        value: store::Decimal::parse(value).unwrap(),
    }
}

/// Every device reads 300 times in the hour (some with 38-digit numbers); `hot-1` was
/// raised to 8 keys mid-hour. Returns the readings, each once, and the tables holding
/// them with copies: a message sent twice, readings in two blocks, and readings of
/// the hot device written before the raise and again after it under another key.
fn fixture() -> (Vec<R>, MemoryReadings, Arc<MemoryShards>) {
    let raise = HOUR + 30 * MINUTE_MS;
    let shards = shard_table(
        table_history(vec![(0, hourly(4))]),
        [("hot-1".to_owned(), fanout_history(vec![(raise, 8)]))],
    );
    let table = MemoryReadings::new(None);
    let mut readings = Vec::new();
    for (d, device) in DEVICES.iter().enumerate() {
        for i in 0..300 {
            let value = match (i + d as i64) % 7 {
                0 => "12345678901234567890123456789012345678".to_owned(),
                1 => "-0.000000000000000000000000000000000001".to_owned(),
                k => format!("{}.{}", i - 150, k),
            };
            readings.push(reading(device, i, &value));
        }
    }
    load(&table, &shards, &readings);
    // A message sent twice: the same items again, under the same keys.
    load(&table, &shards, &readings[..40]);
    // Readings of `d-1` held in two blocks as well as their own items.
    let d1: Vec<R> = readings
        .iter()
        .filter(|r| r.device == "d-1")
        .cloned()
        .collect();
    let mut sorted = d1[..20].to_vec();
    sorted.sort_by(|a, b| (a.ts_ms, &a.event).cmp(&(b.ts_ms, &b.event)));
    put_block(&table, &shards, &sorted[..12]);
    put_block(&table, &shards, &sorted[6..]);
    // `hot-1`'s readings before the raise written again under a sub-shard (a
    // redelivery keyed after the raise): same sort key, another partition key.
    let early: Vec<R> = readings
        .iter()
        .filter(|r| r.device == "hot-1" && r.ts_ms < raise)
        .take(30)
        .map(|r| R {
            ts_ms: r.ts_ms,
            ..r.clone()
        })
        .collect();
    let rekeyed = shard_table(
        table_history(vec![(0, hourly(4))]),
        [(
            "hot-1".to_owned(),
            fanout_history(vec![(HOUR - HOUR_MS, 8)]),
        )],
    );
    load(&table, &rekeyed, &early);
    (readings, table, Arc::new(shards))
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

fn sealer<'a>(
    table: &'a MemoryReadings,
    shards: Arc<MemoryShards>,
    rollups: impl RollupTable + 'a,
) -> Sealer<&'a MemoryReadings, Arc<MemoryShards>, impl RollupTable + 'a> {
    let settings = Settings {
        concurrency: 4,
        ..Settings::default()
    };
    Sealer::new(table, shards, rollups, settings)
}

fn body<T: for<'de> serde::Deserialize<'de>>(rollups: &MemoryRollups, key: RollupKey) -> T {
    rollups.items()[&key]
        .body()
        .unwrap_or_else(|e| panic!("{key}: {e}"))
}

/// The fleet's hour and minute cells: the merge of its parts.
fn fleet(rollups: &MemoryRollups, hour: i64) -> (Cells, BTreeMap<u8, Cells>) {
    let mut fleet = FleetPart::default();
    for (RollupKey { pk, .. }, item) in rollups.items() {
        if pk == keys::fleet_hour(hour) {
            fleet.merge(&item.body().unwrap());
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

#[tokio::test]
async fn rollups_count_each_reading_once_with_copies_in_the_data() {
    let (readings, table, shards) = fixture();
    let rollups = MemoryRollups::new();
    let s = sealer(&table, shards, &rollups);
    let report = s.run(after_the_horizon(), None).await.unwrap();
    assert_eq!(report.hours_sealed, 1, "{report:?}");
    assert_eq!(report.watermark_ms, Some(HOUR + HOUR_MS));
    let want = expected(&readings);
    assert_eq!(
        report.readings,
        300 * DEVICES.len() as u64,
        "each reading read once"
    );
    for (device, dh) in &want {
        let stored: DeviceHour = body(&rollups, keys::device_hour(device, HOUR));
        assert_eq!(&stored, dh, "{device}");
        let summary: DeviceHour = body(&rollups, keys::device_summary(device, HOUR));
        assert_eq!(summary, dh.summary(), "{device}");
        let entry: DirEntry = body(&rollups, keys::directory_entry(device));
        assert_eq!(entry, DirEntry::of(dh), "{device}");
        // The sums are exact: the 38-digit numbers are all there.
        let cell = &stored.hour.metrics["temperature"];
        let exact: BigDecimal = readings
            .iter()
            .filter(|r| &r.device == device)
            .map(|r| BigDecimal::from_str(r.value.as_str()).unwrap())
            .sum();
        assert_eq!(cell.sum, exact, "{device}");
        assert_eq!(cell.count, 300);
    }
    assert_eq!(fleet(&rollups, HOUR), expected_fleet(&want));
    assert_eq!(fleet(&rollups, HOUR).0.devices, DEVICES.len() as u64);
}

#[tokio::test]
async fn the_minute_cells_equal_the_raw_stats_answer() {
    let (_, table, shards) = fixture();
    let rollups = MemoryRollups::new();
    let s = sealer(&table, shards.clone(), &rollups);
    s.run(after_the_horizon(), None).await.unwrap();
    let svc = crate::common::service(&table, shards);
    for device in DEVICES {
        let uri = format!(
            "/devices/{device}/stats?from=2026-06-22T01:00:00Z&to=2026-06-22T02:00:00Z&interval=1m&metric=temperature"
        );
        let request = http::Request::get(uri).body(()).unwrap();
        let answer = svc.handle(&request, crate::common::now()).await;
        assert_eq!(answer.status(), 200, "{}", answer.body());
        let raw: serde_json::Value = serde_json::from_str(answer.body()).unwrap();
        let stored: DeviceHour = body(&rollups, keys::device_hour(device, HOUR));
        let buckets = raw["buckets"].as_array().unwrap();
        assert_eq!(buckets.len(), stored.minutes.len(), "{device}");
        for (bucket, (minute, cells)) in buckets.iter().zip(&stored.minutes) {
            let start = Timestamp::from_millis(HOUR + i64::from(*minute) * MINUTE_MS).unwrap();
            assert_eq!(bucket["start"], start.to_rfc3339());
            let cell = &cells.metrics["temperature"];
            assert_eq!(bucket["count"], cell.count, "{device} {minute}");
            let f = |v: &BigDecimal| f64::from_str(&v.to_string()).unwrap();
            assert_eq!(
                bucket["min"].as_f64().unwrap(),
                f(&cell.min),
                "{device} {minute}"
            );
            assert_eq!(
                bucket["max"].as_f64().unwrap(),
                f(&cell.max),
                "{device} {minute}"
            );
        }
    }
}

#[tokio::test]
async fn a_late_reading_adds_exactly_once_and_its_copy_adds_nothing() {
    let (mut readings, table, shards) = fixture();
    let rollups = MemoryRollups::new();
    let s = sealer(&table, shards.clone(), &rollups);
    s.run(after_the_horizon(), None).await.unwrap();
    let before: DeviceHour = body(&rollups, keys::device_hour("d-2", HOUR));
    let (fleet_before, _) = fleet(&rollups, HOUR);

    // A reading of d-2 in the sealed hour, written late, then its mark.
    let late = R {
        device: "d-2".to_owned(),
        event: "late-1".to_owned(),
        ts_ms: HOUR + 17 * MINUTE_MS + 5,
        value: store::Decimal::parse("-1000000.5").unwrap(),
    };
    load(&table, &shards, std::slice::from_ref(&late));
    rollups.put(&late_mark("d-2", HOUR, 7)).await.unwrap();
    let later = Timestamp::from_millis(HOUR + HOUR_MS + 20 * MINUTE_MS).unwrap();
    let report = s.run(later, None).await.unwrap();
    assert_eq!(report.marks_sealed, 1, "{report:?}");
    assert_eq!(report.hours_sealed, 0);
    let after: DeviceHour = body(&rollups, keys::device_hour("d-2", HOUR));
    let (b, a) = (
        &before.hour.metrics["temperature"],
        &after.hour.metrics["temperature"],
    );
    assert_eq!(a.count, b.count + 1);
    assert_eq!(a.sum, &b.sum + BigDecimal::from_str("-1000000.5").unwrap());
    assert_eq!(
        a.min,
        BigDecimal::from_str("-1000000.5").unwrap(),
        "min widened"
    );
    assert_eq!(a.max, b.max);
    let (fleet_after, _) = fleet(&rollups, HOUR);
    assert_eq!(fleet_after.readings, fleet_before.readings + 1);
    assert_eq!(fleet_after.devices, fleet_before.devices);
    assert_eq!(
        fleet_after.metrics["temperature"].sum,
        &fleet_before.metrics["temperature"].sum + BigDecimal::from_str("-1000000.5").unwrap()
    );
    readings.push(late.clone());
    assert_eq!(after, expected(&readings)["d-2"]);
    assert!(
        rollups
            .items()
            .keys()
            .all(|RollupKey { pk, .. }| !pk.starts_with("late#")),
        "the mark is gone"
    );

    // Its copy, in a block with a copy of a later reading, and a mark again: nothing
    // changes.
    let next = readings
        .iter()
        .filter(|r| r.device == "d-2" && r.ts_ms > late.ts_ms)
        .min_by_key(|r| r.ts_ms)
        .unwrap()
        .clone();
    put_block(&table, &shards, &[late, next]);
    rollups.put(&late_mark("d-2", HOUR, 8)).await.unwrap();
    let snapshot = rollups.items();
    let report = s.run(later, None).await.unwrap();
    assert_eq!(report.marks_sealed, 1);
    assert_eq!(report.device_hours_written, 0, "{report:?}");
    let mut now_items = rollups.items();
    let mut then_items = snapshot;
    then_items.retain(|RollupKey { pk, .. }, _| !pk.starts_with("late#"));
    now_items.retain(|RollupKey { pk, .. }, _| !pk.starts_with("late#"));
    assert_eq!(now_items, then_items);
}

#[tokio::test]
async fn a_mark_of_an_hour_not_yet_sealed_waits_for_its_seal() {
    let (_, table, shards) = fixture();
    let rollups = MemoryRollups::new();
    let s = sealer(&table, shards, &rollups);
    s.run(after_the_horizon(), None).await.unwrap();
    let next_hour = HOUR + HOUR_MS;
    rollups.put(&late_mark("d-0", next_hour, 1)).await.unwrap();
    s.run(after_the_horizon(), None).await.unwrap();
    let key = keys::late_mark("d-0", next_hour);
    assert!(
        rollups.items().contains_key(&key),
        "kept for the hour's own seal"
    );
}

/// A rollups table whose writes fail from the `after`-th on: a run killed there.
pub(crate) struct KilledAfter {
    pub(crate) inner: MemoryRollups,
    pub(crate) after: u64,
    pub(crate) writes: AtomicU64,
}

impl KilledAfter {
    fn check(&self) -> Result<(), StoreError> {
        if self.writes.fetch_add(1, Ordering::SeqCst) >= self.after {
            return Err(StoreError::Malformed("killed".to_owned()));
        }
        Ok(())
    }
}

impl RollupTable for KilledAfter {
    async fn put_if_newer(&self, item: &RollupItem) -> Result<Written, StoreError> {
        self.check()?;
        self.inner.put_if_newer(item).await
    }
    async fn put_if_version(
        &self,
        item: &RollupItem,
        expected: Option<u64>,
    ) -> Result<Written, StoreError> {
        self.check()?;
        self.inner.put_if_version(item, expected).await
    }
    async fn delete_if(&self, pk: &str, sk: &str, version: u64) -> Result<Written, StoreError> {
        self.check()?;
        self.inner.delete_if(pk, sk, version).await
    }
    async fn put(&self, item: &RollupItem) -> Result<(), StoreError> {
        self.check()?;
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
async fn a_sealer_killed_at_any_write_and_run_again_or_two_at_once_leave_the_same_items() {
    let (_, table, shards) = fixture();
    let clean = MemoryRollups::new();
    sealer(&table, shards.clone(), &clean)
        .run(after_the_horizon(), None)
        .await
        .unwrap();
    let want = clean.items();
    let writes = clean.writes();
    assert!(writes > 20, "{writes}");
    for after in 0..writes {
        let killed = KilledAfter {
            inner: MemoryRollups::new(),
            after,
            writes: AtomicU64::new(0),
        };
        let s = sealer(&table, shards.clone(), &killed);
        assert!(
            s.run(after_the_horizon(), None).await.is_err(),
            "killed at {after}"
        );
        let again = sealer(&table, shards.clone(), &killed.inner);
        again.run(after_the_horizon(), None).await.unwrap();
        assert_eq!(
            killed.inner.items(),
            want,
            "killed at write {after} and run again"
        );
        // A third run changes nothing.
        again.run(after_the_horizon(), None).await.unwrap();
        assert_eq!(killed.inner.items(), want, "run a third time after {after}");
    }
    let shared = MemoryRollups::new();
    let (one, two) = (
        sealer(&table, shards.clone(), &shared),
        sealer(&table, shards.clone(), &shared),
    );
    let (a, b) = tokio::join!(
        one.run(after_the_horizon(), None),
        two.run(after_the_horizon(), None)
    );
    a.unwrap();
    b.unwrap();
    assert_eq!(shared.items(), want, "two runs at once");
}

#[tokio::test]
async fn a_first_run_seals_the_last_hour_due_and_later_runs_follow_hour_by_hour() {
    let (_, table, shards) = fixture();
    let rollups = MemoryRollups::new();
    let s = sealer(&table, shards, &rollups);
    // 9 minutes after the hour ends: within the horizon, so the hour before is due.
    let early = Timestamp::from_millis(HOUR + HOUR_MS + 9 * MINUTE_MS).unwrap();
    let report = s.run(early, None).await.unwrap();
    assert_eq!(report.watermark_ms, Some(HOUR));
    assert!(
        !rollups
            .items()
            .contains_key(&keys::device_hour("d-0", HOUR))
    );
    let report = s.run(after_the_horizon(), None).await.unwrap();
    assert_eq!(
        (report.hours_sealed, report.watermark_ms),
        (1, Some(HOUR + HOUR_MS))
    );
    let five_later = Timestamp::from_millis(HOUR + 6 * HOUR_MS + 11 * MINUTE_MS).unwrap();
    let report = s.run(five_later, None).await.unwrap();
    assert_eq!(report.hours_sealed, 5);
    assert_eq!(report.watermark_ms, Some(HOUR + 6 * HOUR_MS));
}

#[tokio::test]
async fn a_reseal_rebuilds_every_derived_item_from_the_readings() {
    let (_, table, shards) = fixture();
    let clean = MemoryRollups::new();
    let s = sealer(&table, shards.clone(), &clean);
    s.run(after_the_horizon(), None).await.unwrap();
    let want = clean.items();
    // A table that lost everything but the watermark.
    let rebuilt = MemoryRollups::new();
    let key = keys::watermark();
    rebuilt.put(&want[&key]).await.unwrap();
    let r = sealer(&table, shards, &rebuilt);
    let asked = sealer::Invocation::of(serde_json::json!({
        "reseal": {"from": "2026-06-22T01:00:00Z", "to": HOUR + HOUR_MS}
    }))
    .unwrap();
    let (from, to) = asked.reseal.unwrap().range().unwrap();
    let report = r.reseal(from, to, after_the_horizon(), None).await.unwrap();
    assert_eq!((report.hours_sealed, report.resume_ms), (1, None));
    assert_eq!(rebuilt.items(), want);
    let backwards = sealer::Reseal {
        from: serde_json::json!(HOUR),
        to: serde_json::json!(HOUR),
    };
    assert!(
        backwards
            .range()
            .unwrap_err()
            .to_string()
            .contains("not before")
    );
    let scheduled = sealer::Invocation::of(serde_json::json!({"source": "aws.scheduler"})).unwrap();
    assert!(scheduled.reseal.is_none(), "a scheduled event is a run");
    let malformed = sealer::Invocation::of(serde_json::json!({"reseal": {"to": HOUR}}));
    assert!(
        malformed.is_err(),
        "a malformed reseal is refused, never run as the schedule's run"
    );
}

/// After a rebuild (`shardline seal`), the watermark covers the rebuilt hours only where
/// that keeps it true: a lost table gets one up to the hours due; an existing one's
/// first hour moves back over rebuilt hours that reach it, and not over a gap.
#[tokio::test]
async fn a_rebuild_extends_the_watermark_only_over_hours_it_sealed() {
    let (_, table, shards) = fixture();
    let rollups = MemoryRollups::new();
    let s = sealer(&table, shards, &rollups);
    let now = Timestamp::from_millis(HOUR + 3 * HOUR_MS + 11 * MINUTE_MS).unwrap();
    // No watermark: [from, to) clipped to the hours due at `now` (up to HOUR + 3h).
    let m = s
        .extend_watermark(HOUR + 1, HOUR + 5 * HOUR_MS, now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((m.from_ms, m.end_ms), (HOUR, HOUR + 3 * HOUR_MS));
    // Rebuilt hours that end before its first hour leave a gap: nothing moves.
    let gap = s
        .extend_watermark(HOUR - 5 * HOUR_MS, HOUR - 2 * HOUR_MS, now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((gap.from_ms, gap.end_ms), (HOUR, HOUR + 3 * HOUR_MS));
    // Rebuilt hours that reach it: its first hour moves back, its end stays.
    let back = s
        .extend_watermark(HOUR - 2 * HOUR_MS, HOUR, now)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (back.from_ms, back.end_ms),
        (HOUR - 2 * HOUR_MS, HOUR + 3 * HOUR_MS)
    );
    assert_eq!(sealer::read_watermark(&rollups).await.unwrap(), Some(back));
}

/// Scenario 47, freshness at steady state, on a simulated clock: two devices report
/// every minute, on time, and the sealer runs every minute (the template's
/// `SealerSchedule`) with the default horizon. After every run of six hours, the
/// watermark trails now by at least the horizon and at most 1 h + the horizon + one
/// run interval, and each device's directory `last_seen` by at most that plus one
/// reading interval: the bounds the README's freshness table states. The figures are
/// printed (`cargo test -p sealer freshness -- --nocapture`).
#[tokio::test]
async fn freshness_at_steady_state_stays_within_the_stated_bounds() {
    const INTERVAL: i64 = MINUTE_MS;
    let shards = Arc::new(shard_table(table_history(vec![(0, hourly(4))]), []));
    let table = MemoryReadings::new(None);
    let rollups = MemoryRollups::new();
    let s = sealer(&table, shards.clone(), &rollups);
    let horizon = i64::try_from(Settings::default().horizon.as_millis()).unwrap();
    let start = BASE_MS;
    let (mut lag_min, mut lag_max, mut seen_max) = (i64::MAX, i64::MIN, i64::MIN);
    let mut steady = false;
    for tick in 0..6 * 60 {
        let now = start + tick * INTERVAL;
        // Each device's reading of this minute, written as it is taken.
        let written: Vec<R> = ["d-0", "d-1"]
            .iter()
            .map(|d| R {
                device: (*d).to_owned(),
                event: format!("e{tick:05}"),
                ts_ms: now - 1_000,
                value: store::Decimal::parse("1.5").unwrap(),
            })
            .collect();
        load(&table, &shards, &written);
        let report = s
            .run(Timestamp::from_millis(now).unwrap(), None)
            .await
            .unwrap();
        assert!(
            !report.behind,
            "a run at steady state catches up: {report:?}"
        );
        let Some(end) = report.watermark_ms else {
            continue;
        };
        // Steady state: once the first run sealed an hour with readings in it.
        steady |= report.hours_sealed > 0 && end > start + HOUR_MS;
        if !steady {
            continue;
        }
        let lag = now - end;
        lag_min = lag_min.min(lag);
        lag_max = lag_max.max(lag);
        for d in ["d-0", "d-1"] {
            let entry: DirEntry = body(&rollups, keys::directory_entry(d));
            seen_max = seen_max.max(now - entry.last_seen_ms);
        }
    }
    println!(
        "watermark lag {} s to {} s; directory last_seen lag at most {} s",
        lag_min / 1000,
        lag_max / 1000,
        seen_max / 1000
    );
    assert!(
        lag_min >= horizon,
        "the watermark never passes now less the horizon"
    );
    assert!(
        lag_max <= HOUR_MS + horizon + INTERVAL,
        "watermark lag {lag_max} ms over 1 h + horizon + one run interval"
    );
    assert!(
        seen_max <= HOUR_MS + horizon + 2 * INTERVAL,
        "last_seen lag {seen_max} ms over 1 h + horizon + a run and a reading interval"
    );
}
