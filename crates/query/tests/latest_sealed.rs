//! Scenario 61: `GET /devices/{device_id}/latest` on a service that reads the sealer's
//! rollups table: the watermark, then the unsealed tail, then the device's directory
//! entry and the buckets around its `last_seen`, so a device never seen is 404 and one
//! silent for weeks is found within a few calls. The real sealer (`sealer::Sealer`)
//! seals the readings; the calls to both tables are counted by the fakes
//! (`MemoryReadings::calls`, `MemoryRollups::reads`) and printed.

use std::sync::Arc;

use query::error::ApiError;
use query::params::parse_request;
use query::service::ReadStats;
use query::{QueryService, ServiceConfig};
use sealer::{Sealer, Settings};
use serde_json::Value;
use sharding::block::BlockLayout;
use sharding::layout::Layout;
use sharding::time::Bucket;
use store::memory::{MemoryReadings, MemoryRollups, MemoryShards};
use store::rollup::{HOUR_MS, RollupTable, hour_of, late_mark};

use crate::common::{BASE_MS, R, hourly, key, load_blocks, nz, shard_table, table_history, ts};

const SECOND: i64 = 1_000;
const MINUTE: i64 = 60 * SECOND;
const HOUR: i64 = HOUR_MS;
const DAY: i64 = 24 * HOUR;
/// The request's clock, 25 minutes into an hour: the sealer (10-minute horizon) has
/// sealed every hour before this one, so the unsealed tail is one hour bucket.
const NOW: i64 = BASE_MS + 10 * HOUR + 25 * MINUTE + 12_345;
/// 5 minutes into an hour: the hour before is not sealed yet, so the tail is two.
const NOW_EARLY: i64 = BASE_MS + 10 * HOUR + 5 * MINUTE;

/// Items a reading at fan-out 1 (one key a bucket), and a new table's default (blocks
/// of a minute, read in two lanes a bucket).
fn layouts() -> [(&'static str, Layout); 2] {
    [
        ("items", hourly(4)),
        (
            "blocks",
            Layout::time_bucket(Bucket::Hour, nz(8)).with_blocks(BlockLayout::default()),
        ),
    ]
}

fn reading(device: &str, event: &str, ts_ms: i64) -> R {
    R {
        device: device.to_owned(),
        event: event.to_owned(),
        ts_ms,
        value: crate::common::n((ts_ms % 1000) as f64 / 10.0),
    }
}

/// `device`'s readings every `step_ms` over `[from_ms, to_ms)`, event ids `e{i:06}`.
fn every(device: &str, from_ms: i64, to_ms: i64, step_ms: i64) -> Vec<R> {
    (0..)
        .map(|i| (i, from_ms + i * step_ms))
        .take_while(|&(_, t)| t < to_ms)
        .map(|(i, t)| reading(device, &format!("e{i:06}"), t))
        .collect()
}

/// The readings every test has: a device writing every 10 minutes for two days, and
/// `dev-1` over the minute 20 days ago.
fn fleet() -> Vec<R> {
    let mut readings = every("busy", NOW - 2 * DAY, NOW - MINUTE, 10 * MINUTE);
    readings.extend(every(
        "dev-1",
        NOW - 20 * DAY - MINUTE,
        NOW - 20 * DAY,
        10 * SECOND,
    ));
    readings
}

struct Fixture {
    table: MemoryReadings,
    shards: Arc<MemoryShards>,
    rollups: MemoryRollups,
}

impl Fixture {
    fn new(layout: Layout, readings: &[R]) -> Self {
        let shards = Arc::new(shard_table(table_history(vec![(0, layout)]), []));
        let table = MemoryReadings::new(None);
        load_blocks(&table, &shards, readings);
        Self {
            table,
            shards,
            rollups: MemoryRollups::new(),
        }
    }

    fn sealer(&self) -> Sealer<&MemoryReadings, Arc<MemoryShards>, &MemoryRollups> {
        let settings = Settings {
            concurrency: 4,
            ..Settings::default()
        };
        Sealer::new(&self.table, self.shards.clone(), &self.rollups, settings)
    }

    /// Every hour from `from_ms` up to what is sealable at `now`, sealed, and the
    /// watermark over them, as `shardline seal` leaves a table (and the scheduled runs
    /// after it).
    async fn seal_since(&self, from_ms: i64, now: i64) {
        let sealer = self.sealer();
        let end = sealer.sealable_end(ts(now));
        sealer.reseal(from_ms, end, ts(now), None).await.unwrap();
        let mark = sealer
            .extend_watermark(from_ms, end, ts(now))
            .await
            .unwrap();
        assert_eq!(mark.map(|m| (m.from_ms, m.end_ms)), Some((from_ms, end)));
    }

    /// A month and a day of sealed hours before `now`.
    async fn seal(&self, now: i64) {
        self.seal_since(hour_of(now - 32 * DAY), now).await;
    }

    fn with_directory(&self) -> QueryService<&MemoryReadings, Arc<MemoryShards>> {
        self.without_directory().with_rollups(self.rollups.clone())
    }

    fn without_directory(&self) -> QueryService<&MemoryReadings, Arc<MemoryShards>> {
        QueryService::new(&self.table, self.shards.clone(), ServiceConfig::new(key()))
    }

    /// `GET /devices/{device}/latest` at `now`: the answer, and the calls to the
    /// readings table and to the rollups table it made, as the fakes counted them.
    async fn latest(
        &self,
        svc: &QueryService<&MemoryReadings, Arc<MemoryShards>>,
        device: &str,
        now: i64,
    ) -> (Result<Value, ApiError>, Calls) {
        let path = format!("/devices/{device}/latest");
        let endpoint = parse_request("GET", &path, None, &svc.config().limits).unwrap();
        let before = (self.table.calls(), self.rollups.reads());
        let answer = svc.execute(endpoint, ts(now)).await;
        let calls = Calls {
            queries: self.table.calls() - before.0,
            gets: self.rollups.reads() - before.1,
        };
        let answer = answer.map(|(body, stats): (String, ReadStats)| {
            assert_eq!(stats.calls, calls.total(), "the stats count every call");
            serde_json::from_str(&body).unwrap()
        });
        (answer, calls)
    }
}

/// Calls one request made.
#[derive(Debug, Clone, Copy)]
struct Calls {
    /// Queries of the readings table.
    queries: u64,
    /// Reads of the rollups table (the watermark's and the directory entry's GetItems).
    gets: u64,
}

impl Calls {
    fn total(self) -> u64 {
        self.queries + self.gets
    }
}

fn event(answer: &Result<Value, ApiError>) -> &str {
    match answer {
        Ok(body) => body["event_id"].as_str().unwrap(),
        Err(e) => panic!("no reading: {e}"),
    }
}

/// A device the sealer never saw is 404 after the watermark, the unsealed tail (one or
/// two hour buckets) and its directory entry: at fan-out 1 at most 5 calls (4 with the
/// tail two buckets long), against 745 without the directory; with blocks' two lanes a
/// bucket, at most 6.
#[tokio::test]
async fn s61_a_device_never_seen_is_404_after_reading_only_the_unsealed_tail() {
    for (name, layout) in layouts() {
        for now in [NOW, NOW_EARLY] {
            let f = Fixture::new(layout.clone(), &fleet());
            f.seal(now).await;
            let (answer, calls) = f.latest(&f.with_directory(), "nobody", now).await;
            let e = answer.unwrap_err();
            assert_eq!((e.status.as_u16(), e.code), (404, "not_found"), "{e}");
            assert!(e.message.contains("nobody"), "{e}");
            println!(
                "{name}, {} min into the hour: a device never seen (404): {} Queries + {} \
                 GetItems",
                (now - hour_of(now)) / MINUTE,
                calls.queries,
                calls.gets
            );
            assert_eq!(
                calls.gets, 2,
                "{name}: the watermark and the directory entry"
            );
            let most = if name == "items" { 5 } else { 6 };
            assert!(calls.total() <= most, "{name}: {calls:?}");
            let (answer, without) = f.latest(&f.without_directory(), "nobody", now).await;
            assert_eq!(answer.unwrap_err().code, "not_found");
            println!("{name}: the same without the directory: {without:?}");
            assert!(without.queries >= 745, "{name}: {without:?}");
        }
    }
}

/// A device silent for 20 days: its directory entry's `last_seen` names the newest
/// reading, whose bucket is read after the tail; the answer is the one the whole
/// look-back gives (511 Queries without the directory), for at most 5 calls at fan-out
/// 1 and 9 with blocks (two lanes a bucket, and the block lane of the bucket before the
/// reading's, where a block holding it could start).
#[tokio::test]
async fn s61_a_device_silent_for_20_days_is_found_from_its_last_seen() {
    for (name, layout) in layouts() {
        for now in [NOW, NOW_EARLY] {
            let f = Fixture::new(layout.clone(), &fleet());
            f.seal(now).await;
            let (answer, calls) = f.latest(&f.with_directory(), "dev-1", now).await;
            let (reference, without) = f.latest(&f.without_directory(), "dev-1", now).await;
            assert_eq!(event(&answer), "e000005", "{name}");
            assert_eq!(answer.unwrap(), reference.unwrap(), "{name}");
            println!(
                "{name}, {} min into the hour: silent 20 days: {} Queries + {} GetItems \
                 ({} Queries without the directory)",
                (now - hour_of(now)) / MINUTE,
                calls.queries,
                calls.gets,
                without.queries
            );
            let most = if name == "items" { 5 } else { 9 };
            assert!(calls.total() <= most, "{name}: {calls:?}");
            assert!(without.queries > 400, "{name}: {without:?}");
        }
    }
}

/// A device that reported a minute ago is answered from the tail, after the watermark
/// alone; one whose newest reading is two hours old (sealed) from its directory entry.
#[tokio::test]
async fn s61_a_recent_device_is_answered_from_the_tail_or_its_last_seen() {
    for (name, layout) in layouts() {
        for now in [NOW, NOW_EARLY] {
            let mut readings = fleet();
            readings.extend(every("recent", now - 3 * HOUR, now - 30 * SECOND, MINUTE));
            readings.extend(every("sealed", now - 5 * HOUR, now - 2 * HOUR, MINUTE));
            let f = Fixture::new(layout.clone(), &readings);
            f.seal(now).await;
            for device in ["recent", "sealed"] {
                let (answer, calls) = f.latest(&f.with_directory(), device, now).await;
                let (reference, _) = f.latest(&f.without_directory(), device, now).await;
                let newest = readings
                    .iter()
                    .filter(|r| r.device == device)
                    .max_by_key(|r| r.ts_ms)
                    .unwrap();
                assert_eq!(event(&answer), newest.event, "{name} {device}");
                assert_eq!(answer.unwrap(), reference.unwrap(), "{name} {device}");
                println!(
                    "{name}, {} min into the hour: {device}: {} Queries + {} GetItems",
                    (now - hour_of(now)) / MINUTE,
                    calls.queries,
                    calls.gets
                );
                let (gets, most) = match (device, name) {
                    ("recent", "items") => (1, 3),
                    ("recent", _) => (1, 5),
                    (_, "items") => (2, 5),
                    _ => (2, 8),
                };
                assert_eq!(calls.gets, gets, "{name} {device}: {calls:?}");
                assert!(calls.total() <= most, "{name} {device}: {calls:?}");
            }
        }
    }
}

/// A device silent for 20 days, then writing again after the seal: its newer reading in
/// the unsealed tail (or up to 5 minutes ahead of the clock) is answered at once, ahead
/// of the directory's `last_seen`.
#[tokio::test]
async fn s61_a_newer_reading_in_the_tail_beyond_last_seen_is_answered() {
    for (name, layout) in layouts() {
        let f = Fixture::new(layout.clone(), &fleet());
        f.seal(NOW).await;
        let svc = f.with_directory();
        assert_eq!(event(&f.latest(&svc, "dev-1", NOW).await.0), "e000005");
        load_blocks(
            &f.table,
            &f.shards,
            &[reading("dev-1", "back", NOW - 2 * MINUTE)],
        );
        let (answer, calls) = f.latest(&svc, "dev-1", NOW).await;
        assert_eq!(event(&answer), "back", "{name}");
        assert_eq!(calls.gets, 1, "{name}: the tail answers, no directory read");
        load_blocks(
            &f.table,
            &f.shards,
            &[reading("dev-1", "ahead", NOW + 4 * MINUTE)],
        );
        assert_eq!(
            event(&f.latest(&svc, "dev-1", NOW).await.0),
            "ahead",
            "{name}"
        );
        // Past the 5 minutes ahead the ingest accepts: never answered.
        load_blocks(
            &f.table,
            &f.shards,
            &[reading("dev-1", "far", NOW + 6 * MINUTE)],
        );
        assert_eq!(
            event(&f.latest(&svc, "dev-1", NOW).await.0),
            "ahead",
            "{name}"
        );
    }
}

/// Scenario 42 with the directory: an older reading that arrives after a newer one
/// (late into a sealed hour, or in the tail) never replaces it; a reading at the newest
/// one's millisecond goes by event id, the greater answered at once.
#[tokio::test]
async fn s61_an_older_reading_arriving_after_a_newer_one_does_not_replace_it() {
    for (name, layout) in layouts() {
        let newest_ms = NOW - 3 * HOUR - 17;
        let mut readings = fleet();
        readings.extend(every("dev-2", NOW - 6 * HOUR, newest_ms, 7 * MINUTE));
        readings.push(reading("dev-2", "m-newest", newest_ms));
        let f = Fixture::new(layout.clone(), &readings);
        f.seal(NOW).await;
        let svc = f.with_directory();
        assert_eq!(event(&f.latest(&svc, "dev-2", NOW).await.0), "m-newest");
        // Late into sealed hours: an older reading, with a greater event id, and one at
        // the newest's millisecond with a smaller one.
        let late = [
            reading("dev-2", "z-older", newest_ms - HOUR),
            reading("dev-2", "z-older-ms", newest_ms - 1),
            reading("dev-2", "a-tie", newest_ms),
        ];
        load_blocks(&f.table, &f.shards, &late);
        assert_eq!(
            event(&f.latest(&svc, "dev-2", NOW).await.0),
            "m-newest",
            "{name}"
        );
        // A greater event id at that millisecond is the newest: its bucket is read.
        load_blocks(&f.table, &f.shards, &[reading("dev-2", "z-tie", newest_ms)]);
        assert_eq!(
            event(&f.latest(&svc, "dev-2", NOW).await.0),
            "z-tie",
            "{name}"
        );
        // In the tail: a newer one, then an older one after it, then a tie.
        load_blocks(
            &f.table,
            &f.shards,
            &[reading("dev-2", "m-tail", NOW - 10 * MINUTE)],
        );
        load_blocks(
            &f.table,
            &f.shards,
            &[reading("dev-2", "z-tail", NOW - 20 * MINUTE)],
        );
        assert_eq!(
            event(&f.latest(&svc, "dev-2", NOW).await.0),
            "m-tail",
            "{name}"
        );
        load_blocks(
            &f.table,
            &f.shards,
            &[reading("dev-2", "a-tail", NOW - 10 * MINUTE)],
        );
        assert_eq!(
            event(&f.latest(&svc, "dev-2", NOW).await.0),
            "m-tail",
            "{name}"
        );
        // After the next seal of the late hours, the same.
        f.sealer().run(ts(NOW), None).await.unwrap();
        assert_eq!(
            event(&f.latest(&svc, "dev-2", NOW).await.0),
            "m-tail",
            "{name}"
        );
    }
}

/// What the module's doc says of a device whose only readings were written late into
/// an hour already sealed: 404 until the sealer's next run seals its late mark, then
/// answered.
#[tokio::test]
async fn s61_a_device_seen_only_late_in_a_sealed_hour_is_found_after_the_next_seal() {
    let f = Fixture::new(hourly(4), &fleet());
    f.seal(NOW).await;
    let svc = f.with_directory();
    let at = NOW - 3 * HOUR;
    load_blocks(&f.table, &f.shards, &[reading("late-1", "e1", at)]);
    f.rollups
        .put(&late_mark("late-1", hour_of(at), 7))
        .await
        .unwrap();
    let (answer, _) = f.latest(&svc, "late-1", NOW).await;
    assert_eq!(answer.unwrap_err().code, "not_found");
    let report = f.sealer().run(ts(NOW), None).await.unwrap();
    assert_eq!(report.hours_sealed, 0, "{report:?}");
    assert_eq!(event(&f.latest(&svc, "late-1", NOW).await.0), "e1");
}

/// The hours before the first sealed one are in no directory entry: a device whose
/// readings lie only there is still found (those hours read from the readings), and
/// with no watermark at all the whole look-back is read, as without the table. Both
/// cost what the look-back costs, until the sealer has sealed a look-back's hours.
#[tokio::test]
async fn s61_the_hours_before_the_first_sealed_one_are_read_from_the_readings() {
    for (name, layout) in layouts() {
        let mut readings = fleet();
        readings.push(reading("early-1", "e1", NOW - 3 * DAY));
        let f = Fixture::new(layout.clone(), &readings);
        let svc = f.with_directory();
        // No watermark yet.
        let (answer, calls) = f.latest(&svc, "early-1", NOW).await;
        assert_eq!(event(&answer), "e1", "{name}");
        assert_eq!(calls.gets, 1, "{name}: the watermark alone");
        // Sealed from 2 days ago only: the directory knows dev-1 (20 days old) not.
        f.seal_since(hour_of(NOW - 2 * DAY), NOW).await;
        for (device, newest) in [("early-1", "e1"), ("dev-1", "e000005"), ("busy", "e000287")] {
            let (answer, calls) = f.latest(&svc, device, NOW).await;
            assert_eq!(event(&answer), newest, "{name} {device}");
            println!("{name}: {device}, sealed from 2 days ago: {calls:?}");
        }
        let (answer, calls) = f.latest(&svc, "nobody", NOW).await;
        assert_eq!(answer.unwrap_err().code, "not_found");
        println!("{name}: a device never seen, sealed from 2 days ago: {calls:?}");
    }
}

/// The budgets hold over both tables: a Query budget of 2 reads the watermark and one
/// Query of the tail, then refuses by name; it never reads more.
#[tokio::test]
async fn s61_the_budgets_count_the_rollups_reads_too() {
    let f = Fixture::new(hourly(4), &fleet());
    f.seal(NOW).await;
    let mut config = ServiceConfig::new(key());
    config.budget.queries = 2;
    let svc = QueryService::new(&f.table, f.shards.clone(), config).with_rollups(f.rollups.clone());
    let (answer, calls) = f.latest(&svc, "dev-1", NOW).await;
    let e = answer.unwrap_err();
    assert_eq!(e.code, "budget_exceeded", "{e}");
    assert!(e.message.contains("QUERY_MAX_QUERIES"), "{e}");
    assert!(calls.total() <= 2, "{calls:?}");
}
