//! Slab-held readings (docs/design-slabs.md) in every device route: a device's readings
//! split over its own items, compacted runs (several devices an item, its readings of
//! one window over two items, a window holding only other devices, windows ended by
//! their markers) and open slabs (two fan-out keys, one reading in two slabs) are each
//! answered once and in order by the range read, across pages of a small limit and
//! within a small budget; the newest one, held by a slab alone, is the latest; a point
//! read finds one in a run and one in a slab; stats and series count each once; and a
//! read of a run partition stops where its cover is done. Slab and run items are written
//! with `store::slab::marshal` under `sharding::slab`'s keys, as the ingest and the
//! compaction write them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use query::{QueryService, ServiceConfig};
use serde_json::Value;
use sharding::key::{ReadingRef, write_key};
use sharding::slab::{SlabLayout, SlabOwner, Window, group_entity, marker_sk, run_sk, slab_sk};
use sharding::time::Timestamp;
use sharding::written::WriteOrder;
use store::item::{Reading, ReadingItem};
use store::memory::{MemoryReadings, MemoryRollups, MemoryShards};
use store::rollup::compaction::{Compacted, advance_compacted};

use crate::common::{BASE_MS, fanout_history, hourly, key, shard_table, table_history, ts};

const SECOND: i64 = 1_000;
const MINUTE: i64 = 60 * SECOND;
/// The request's clock: every slab window of the fixture is in the look-back.
const NOW: i64 = BASE_MS + 10 * MINUTE;
/// The range every read covers: the minute before the slabs, and five slab windows.
const FROM: i64 = BASE_MS - MINUTE;
const TO: i64 = BASE_MS + 5 * MINUTE;

fn slabs() -> SlabLayout {
    SlabLayout::default().checked().unwrap()
}

/// Five devices of slab group 0, in sort order: two before the device read, two after.
fn mates() -> Vec<String> {
    (0..1_000)
        .map(|i| format!("dev-{i:03}"))
        .filter(|d| slabs().group(d) == 0)
        .take(5)
        .collect()
}

fn window(minute: i64) -> Window {
    slabs().window(ts(BASE_MS + minute * MINUTE))
}

/// A reading of `device` at `at_s` seconds after `BASE_MS`, `temperature` `value`,
/// written at `written`.
fn reading(device: &str, at_s: i64, value: f64, written: i64) -> Reading {
    Reading {
        device_id: device.to_owned(),
        event_id: format!("e{at_s}"),
        ts: ts(BASE_MS + at_s * SECOND),
        metrics: BTreeMap::from([("temperature".to_owned(), crate::common::n(value))]),
        tags: BTreeMap::new(),
        written: WriteOrder(written),
    }
}

/// Stores `members` as one slab or run item under `pk`, `sk`.
fn put(table: &MemoryReadings, mut members: Vec<Reading>, pk: &str, sk: &str) {
    members
        .sort_by(|a, b| (&a.device_id, a.ts, &a.event_id).cmp(&(&b.device_id, b.ts, &b.event_id)));
    let encoded = store::slab::marshal(&members, pk, sk, 4_000_000_000).unwrap();
    table.put_item(encoded.item).unwrap();
}

/// Stores the marker of `w`'s compaction in group 0's run partition.
fn put_marker(table: &MemoryReadings, w: Window) {
    let marker = reading("marker", 0, 0.0, 0);
    put(table, vec![marker], &slabs().run_pk(0, w), &marker_sk(w));
}

/// Stores `members` as a slab of window `w` on fan-out key `j` of group 0.
fn put_slab(table: &MemoryReadings, members: Vec<Reading>, j: u32, w: Window) {
    put_slab_of(table, SlabOwner::Group(0), members, j, w);
}

/// Stores `members` as a slab of window `w` on fan-out key `j` of `owner`'s partition.
fn put_slab_of(table: &MemoryReadings, owner: SlabOwner, members: Vec<Reading>, j: u32, w: Window) {
    let sk = slab_sk(
        members
            .iter()
            .map(|r| (r.device_id.as_str(), r.ts.as_millis(), r.event_id.as_str())),
    );
    put(table, members, &owner.pk(j, w), &sk);
}

/// Stores `r` as its device's own item, under the key a writer at its time gives it.
fn put_own(table: &MemoryReadings, shards: &MemoryShards, r: &Reading) {
    let layout = shards.layout().unwrap();
    let at = ReadingRef::new(&r.device_id, &r.event_id, r.ts);
    let fanout = sharding::epoch::FanoutHistory::default();
    let key = write_key(&at, &layout, &fanout, r.ts).unwrap().key;
    table.put(ReadingItem::new(
        r,
        key,
        Duration::from_secs(86_400 * 3_650),
    ));
}

struct Fixture {
    table: MemoryReadings,
    shards: Arc<MemoryShards>,
    rollups: MemoryRollups,
    device: String,
    /// The device's readings, each once, in order: (seconds after `BASE_MS`, value).
    expected: Vec<(i64, f64)>,
}

/// `mates()[2]`'s readings over the range, with its group's other devices' around them:
/// - its own items: at -30 s, at 10 s (also in a run, the same copy), at 225 s;
/// - runs of window 0 (compacted): `A#w0#0000` holding A, B and its first readings
///   (10 s, 20 s), `DEV#w0#0001` holding the rest of them (30 s, 40 s) and D's;
/// - window 1: `A#w1#0000` holding A's alone, `D#w1#0000` holding D and E;
/// - window 2: `DEV#w2#0000` (125 s, 130 s, and E's): nothing before it in the window,
///   so its marker ends the cover; every window compacted has its marker;
/// - window 3 (open): a slab on key 0 (A, and 190 s written first) and one on key 1 (190 s
///   again, written later with another value, and 200 s): the group's fan-out is 2; a
///   shared slab (of the window's thin groups) holding 195 s, 200 s again, and a device
///   of another group's reading;
/// - window 4 (open): a shared slab holding B, 290 s (the device's newest reading), and
///   another group's device's.
async fn fixture() -> Fixture {
    let m = mates();
    let (a, b, dev) = (&m[0], &m[1], &m[2]);
    let table = MemoryReadings::new(None);
    let layout = table_history(vec![(0, hourly(1).with_slabs(slabs()))]);
    let shards = shard_table(
        layout,
        [(
            group_entity(0),
            fanout_history(vec![(BASE_MS + 3 * MINUTE, 2)]),
        )],
    );
    for own in [
        reading(dev, -30, 1.0, 0),
        reading(dev, 10, 2.0, 0),
        reading(dev, 225, 12.0, 0),
    ] {
        put_own(&table, &shards, &own);
    }
    put_fixture_runs(&table, &m);
    let (w3, w4) = (window(3), window(4));
    put_slab(
        &table,
        vec![reading(a, 185, 0.0, 0), reading(dev, 190, 8.0, 1_000)],
        0,
        w3,
    );
    put_slab(
        &table,
        vec![reading(dev, 190, 9.0, 2_000), reading(dev, 200, 10.0, 0)],
        1,
        w3,
    );
    let stranger = (0..1_000)
        .map(|i| format!("dev-{i:03}"))
        .find(|d| slabs().group(d) != 0)
        .unwrap();
    put_slab_of(
        &table,
        SlabOwner::Shared,
        vec![
            reading(dev, 195, 9.5, 0),
            reading(dev, 200, 10.0, 0),
            reading(&stranger, 196, 0.0, 0),
        ],
        0,
        w3,
    );
    put_slab_of(
        &table,
        SlabOwner::Shared,
        vec![
            reading(b, 245, 0.0, 0),
            reading(dev, 290, 13.0, 0),
            reading(&stranger, 291, 0.0, 0),
        ],
        0,
        w4,
    );
    let rollups = MemoryRollups::new();
    let compacted = Compacted {
        from_ms: BASE_MS,
        to_ms: BASE_MS + 3 * MINUTE,
    };
    advance_compacted(&rollups, &compacted).await.unwrap();
    Fixture {
        table,
        shards: Arc::new(shards),
        rollups,
        device: dev.clone(),
        expected: vec![
            (-30, 1.0),
            (10, 2.0),
            (20, 3.0),
            (30, 4.0),
            (40, 5.0),
            (125, 6.0),
            (130, 7.0),
            (190, 9.0),
            (195, 9.5),
            (200, 10.0),
            (225, 12.0),
            (290, 13.0),
        ],
    }
}

/// The fixture's compacted windows 0 to 2: their runs and markers.
fn put_fixture_runs(table: &MemoryReadings, m: &[String]) {
    let (a, b, dev, d, e) = (&m[0], &m[1], &m[2], &m[3], &m[4]);
    let (w0, w1, w2) = (window(0), window(1), window(2));
    let run = |members, w, first: &str, part| {
        put(
            table,
            members,
            &slabs().run_pk(0, w),
            &run_sk(first, w, part),
        );
    };
    run(
        vec![
            reading(a, 5, 0.0, 0),
            reading(b, 6, 0.0, 0),
            reading(dev, 10, 2.0, 0),
            reading(dev, 20, 3.0, 0),
        ],
        w0,
        a,
        0,
    );
    run(
        vec![
            reading(dev, 30, 4.0, 0),
            reading(dev, 40, 5.0, 0),
            reading(d, 1, 0.0, 0),
        ],
        w0,
        dev,
        1,
    );
    run(vec![reading(a, 65, 0.0, 0)], w1, a, 0);
    run(
        vec![reading(d, 61, 0.0, 0), reading(e, 62, 0.0, 0)],
        w1,
        d,
        1,
    );
    run(
        vec![
            reading(dev, 125, 6.0, 0),
            reading(dev, 130, 7.0, 0),
            reading(e, 126, 0.0, 0),
        ],
        w2,
        dev,
        0,
    );
    for w in [w0, w1, w2] {
        put_marker(table, w);
    }
}

type Service<'a> = QueryService<&'a MemoryReadings, Arc<MemoryShards>>;

fn service_of(f: &Fixture, config: ServiceConfig) -> Service<'_> {
    QueryService::new(&f.table, f.shards.clone(), config).with_rollups(f.rollups.clone())
}

fn service(f: &Fixture) -> Service<'_> {
    service_of(f, ServiceConfig::new(key()))
}

async fn get(svc: &Service<'_>, path: &str, query: &str) -> (u16, Value) {
    let resp = svc.handle_parts("GET", path, Some(query), ts(NOW)).await;
    let body = serde_json::from_str(resp.body()).unwrap();
    (resp.status().as_u16(), body)
}

/// A reading of an answer: (seconds after `BASE_MS`, temperature).
fn point(item: &Value) -> (i64, f64) {
    let at = Timestamp::parse(item["ts"].as_str().unwrap()).unwrap();
    let value = item["metrics"]["temperature"].to_string().parse().unwrap();
    ((at.as_millis() - BASE_MS) / SECOND, value)
}

/// Every page of the device's range read, `limit` a page, in `order`: the readings and
/// the pages.
async fn read_all(
    svc: &Service<'_>,
    device: &str,
    limit: u32,
    order: &str,
) -> (Vec<(i64, f64)>, usize) {
    let path = format!("/devices/{device}/readings");
    let mut cursor: Option<String> = None;
    let mut out = Vec::new();
    let mut pages = 0;
    loop {
        let mut q = format!("from={FROM}&to={TO}&limit={limit}&order={order}");
        if let Some(c) = &cursor {
            q.push_str(&format!("&cursor={c}"));
        }
        let (status, body) = get(svc, &path, &q).await;
        assert_eq!(status, 200, "{body}");
        pages += 1;
        out.extend(body["items"].as_array().unwrap().iter().map(point));
        match body["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return (out, pages),
        }
        assert!(pages < 100, "the cursor does not move");
    }
}

#[tokio::test]
async fn the_range_read_answers_own_run_and_slab_readings_once_in_order_across_pages() {
    let f = fixture().await;
    let svc = service(&f);
    for limit in [1, 2, 3, 100] {
        let (ascending, pages) = read_all(&svc, &f.device, limit, "asc").await;
        assert_eq!(ascending, f.expected, "limit {limit}");
        assert!(pages >= f.expected.len() / limit as usize, "limit {limit}");
        let (descending, _) = read_all(&svc, &f.device, limit, "desc").await;
        let mut reversed = f.expected.clone();
        reversed.reverse();
        assert_eq!(descending, reversed, "limit {limit}");
    }
}

#[tokio::test]
async fn a_small_budget_ends_pages_early_with_cursors_and_loses_no_slab_reading() {
    let f = fixture().await;
    let mut config = ServiceConfig::new(key());
    // The compaction progress, and nine Queries: fewer than the plan's partitions (its
    // own keys, the run partition, each open window's group and shared slabs).
    config.budget.queries = 10;
    config.concurrency = 1;
    let svc = service_of(&f, config);
    let path = format!("/devices/{}/readings", f.device);
    let (status, first) = get(&svc, &path, &format!("from={FROM}&to={TO}&limit=100")).await;
    assert_eq!(status, 200, "{first}");
    assert!(first["items"].as_array().unwrap().len() < f.expected.len());
    assert!(first["next_cursor"].is_string(), "{first}");
    let (all, pages) = read_all(&svc, &f.device, 100, "asc").await;
    assert_eq!(all, f.expected);
    assert!(pages > 1);
}

#[tokio::test]
async fn latest_answers_the_newest_reading_held_by_a_slab_alone() {
    let f = fixture().await;
    let svc = service(&f);
    let (status, body) = get(&svc, &format!("/devices/{}/latest", f.device), "").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(point(&body), (290, 13.0));
}

#[tokio::test]
async fn a_point_read_finds_a_reading_in_a_run_and_in_a_slab() {
    let f = fixture().await;
    let svc = service(&f);
    // In the run item of another device's first readings, in the device's own run item,
    // in a slab, in two slabs (the copy written last), in a shared slab.
    for (at_s, value) in [(20, 3.0), (40, 5.0), (200, 10.0), (190, 9.0), (195, 9.5)] {
        let path = format!("/devices/{}/readings/e{at_s}", f.device);
        let (status, body) = get(&svc, &path, &format!("ts={}", BASE_MS + at_s * SECOND)).await;
        assert_eq!(status, 200, "{at_s}: {body}");
        assert_eq!(point(&body), (at_s, value));
    }
    // Another device's reading in the same run item is not the device's.
    let other = &mates()[0];
    let path = format!("/devices/{}/readings/e5", f.device);
    let (status, _) = get(&svc, &path, &format!("ts={}", BASE_MS + 5 * SECOND)).await;
    assert_eq!(status, 404, "{other}'s reading");
}

#[tokio::test]
async fn stats_and_series_count_each_slab_held_reading_once() {
    let f = fixture().await;
    let svc = service(&f);
    let mut per_minute: BTreeMap<i64, u64> = BTreeMap::new();
    for (at_s, _) in &f.expected {
        *per_minute.entry(at_s.div_euclid(60)).or_default() += 1;
    }
    let path = format!("/devices/{}/stats", f.device);
    let q = format!("from={FROM}&to={TO}&interval=1m&metric=temperature");
    let (status, body) = get(&svc, &path, &q).await;
    assert_eq!(status, 200, "{body}");
    let counts: BTreeMap<i64, u64> = body["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            let start = Timestamp::parse(b["start"].as_str().unwrap()).unwrap();
            (
                (start.as_millis() - BASE_MS).div_euclid(MINUTE),
                b["count"].as_u64().unwrap(),
            )
        })
        .filter(|(_, count)| *count > 0)
        .collect();
    assert_eq!(counts, per_minute);
    let path = format!("/devices/{}/series", f.device);
    let q = format!("from={FROM}&to={TO}&interval_ms=60000&metric=temperature&agg=count");
    let (status, body) = get(&svc, &path, &q).await;
    assert_eq!(status, 200, "{body}");
    let points: BTreeMap<i64, u64> = body["points"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| !p[1].is_null())
        .map(|p| {
            (
                (p[0].as_i64().unwrap() - BASE_MS).div_euclid(MINUTE),
                p[1].as_u64().unwrap(),
            )
        })
        .filter(|(_, count)| *count > 0)
        .collect();
    assert_eq!(points, per_minute);
}

#[tokio::test]
async fn a_run_partition_is_read_only_until_its_cover_is_done() {
    // Forty devices a window in three compacted windows, an item each, and the device's
    // own: its readings are in its own items, and the item before it in each window is
    // the last that can hold any. Reading on would read the whole partition.
    let table = MemoryReadings::new(None);
    let dev = mates()[2].clone();
    let others: Vec<String> = (0..40).map(|i| format!("dev-{i:03}x")).collect();
    for minute in 0..3 {
        let w = window(minute);
        for (i, device) in others.iter().chain([&dev]).enumerate() {
            let r = reading(device, minute * 60 + i as i64, i as f64, 0);
            put(
                &table,
                vec![r],
                &slabs().run_pk(0, w),
                &run_sk(device, w, i as u32),
            );
        }
        put_marker(&table, w);
    }
    let partition = 3 * (others.len() + 2) as u64;
    let shards = shard_table(table_history(vec![(0, hourly(1).with_slabs(slabs()))]), []);
    let rollups = MemoryRollups::new();
    let compacted = Compacted {
        from_ms: BASE_MS,
        to_ms: BASE_MS + 3 * MINUTE,
    };
    advance_compacted(&rollups, &compacted).await.unwrap();
    let svc = QueryService::new(&table, Arc::new(shards), ServiceConfig::new(key()))
        .with_rollups(rollups);
    let q = format!("from={BASE_MS}&to={}&limit=100", BASE_MS + 3 * MINUTE);
    let (status, body) = get(&svc, &format!("/devices/{dev}/readings"), &q).await;
    assert_eq!(status, 200, "{body}");
    let answered: Vec<(i64, f64)> = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(point)
        .collect();
    let own = others.len() as i64;
    assert_eq!(answered, [(own, 40.0), (60 + own, 40.0), (120 + own, 40.0)]);
    // Descending from the device's sort keys: its three items, then the device before
    // it in each window, six items; its pages may evaluate up to twice that (their
    // limits double), never the partition. The device's own bucket holds none.
    let evaluated = table.evaluated();
    assert!(evaluated <= 2 * 6, "{evaluated} of {partition} items read");
}

/// A fleet's group of devices over an hour, one reading every `cadence_s` seconds each,
/// written both ways: each device's own items (one a reading), and slabs of the ingest's
/// batches (a batch a second, a slab a batch and window) compacted into runs up to
/// three windows before the request's clock, with their markers.
struct Written {
    own: MemoryReadings,
    slabs: MemoryReadings,
    shards_own: Arc<MemoryShards>,
    shards_slabs: Arc<MemoryShards>,
    rollups: MemoryRollups,
    /// The device the reads are of: the middle of its group in sort order.
    device: String,
}

/// Devices a group holds in a fleet of 1,000 over the default 8 groups.
const GROUP_DEVICES: usize = 125;
/// The clock of the cost reads: an hour of readings ends here.
const COST_NOW: i64 = BASE_MS + 60 * MINUTE;

fn written(cadence_s: i64) -> Written {
    let devices: Vec<String> = (0..100_000)
        .map(|i| format!("d-{i:05}"))
        .filter(|d| slabs().group(d) == 0)
        .take(GROUP_DEVICES)
        .collect();
    let own = MemoryReadings::new(None);
    let slabs_table = MemoryReadings::new(None);
    let shards_own = shard_table(table_history(vec![(0, hourly(4))]), []);
    let shards_slabs = shard_table(table_history(vec![(0, hourly(4).with_slabs(slabs()))]), []);
    // Every reading of the hour, by the second it was sent: device i at i mod cadence.
    let mut by_second: BTreeMap<i64, Vec<Reading>> = BTreeMap::new();
    for (i, device) in devices.iter().enumerate() {
        let mut at = i as i64 % cadence_s;
        while at < 3_600 {
            let r = reading(device, at, (at % 50) as f64, BASE_MS + at * SECOND);
            put_own(&own, &shards_own, &r);
            by_second.entry(at).or_default().push(r);
            at += cadence_s;
        }
    }
    let compacted_to = COST_NOW - 3 * MINUTE;
    let mut closed: BTreeMap<Window, Vec<Reading>> = BTreeMap::new();
    for batch in by_second.into_values() {
        let w = slabs().window(batch[0].ts);
        if w.end_ms() <= compacted_to {
            closed.entry(w).or_default().extend(batch);
        } else {
            put_slab(&slabs_table, batch, 0, w);
        }
    }
    for (w, members) in closed {
        put_runs(&slabs_table, members, w);
    }
    Written {
        own,
        slabs: slabs_table,
        shards_own: Arc::new(shards_own),
        shards_slabs: Arc::new(shards_slabs),
        rollups: MemoryRollups::new(),
        device: devices[GROUP_DEVICES / 2].clone(),
    }
}

/// A closed window's readings of group 0 as the compaction writes them: sorted by
/// device, time and event id, cut into items of at most 1 KB, the first under the
/// window's marker key.
fn put_runs(table: &MemoryReadings, mut members: Vec<Reading>, w: Window) {
    members
        .sort_by(|a, b| (&a.device_id, a.ts, &a.event_id).cmp(&(&b.device_id, b.ts, &b.event_id)));
    let pk = slabs().run_pk(0, w);
    let most = slabs().max_bytes as usize;
    let longest = run_sk(&"x".repeat(16), w, 0).len();
    let cuts = store::slab::cut(&members, most, (pk.len(), longest)).unwrap();
    for (part, cut) in cuts.into_iter().enumerate() {
        let first = members[cut.start].device_id.clone();
        let sk = match part {
            0 => marker_sk(w),
            part => run_sk(&first, w, part as u32),
        };
        put(table, members[cut].to_vec(), &pk, &sk);
    }
}

/// Read units a request costs on `table` (eventually consistent), and its answer.
async fn units(svc: &Service<'_>, table: &MemoryReadings, path: &str, query: &str) -> (f64, Value) {
    let before = table.read_units();
    let resp = svc
        .handle_parts("GET", path, Some(query), ts(COST_NOW))
        .await;
    assert_eq!(
        resp.status().as_u16(),
        200,
        "{path}?{query}: {}",
        resp.body()
    );
    (
        table.read_units() - before,
        serde_json::from_str(resp.body()).unwrap(),
    )
}

/// A device's four reads on both layouts: the same answers, and their read units.
async fn costs(cadence_s: i64) -> [(f64, f64); 4] {
    let w = written(cadence_s);
    advance_compacted(
        &w.rollups,
        &Compacted {
            from_ms: BASE_MS,
            to_ms: COST_NOW - 3 * MINUTE,
        },
    )
    .await
    .unwrap();
    let own = QueryService::new(&w.own, w.shards_own.clone(), ServiceConfig::new(key()));
    let slabbed = QueryService::new(&w.slabs, w.shards_slabs.clone(), ServiceConfig::new(key()))
        .with_rollups(w.rollups.clone());
    let path = format!("/devices/{}/readings", w.device);
    // A reading of half an hour ago, in the runs.
    let at_s = (3_600 / 2 / cadence_s) * cadence_s + (GROUP_DEVICES / 2) as i64 % cadence_s;
    let requests = [
        (
            path.clone(),
            format!("from={}&to={COST_NOW}&limit=1000", COST_NOW - 15 * MINUTE),
        ),
        (
            path.clone(),
            format!("from={BASE_MS}&to={COST_NOW}&limit=1000"),
        ),
        (format!("/devices/{}/latest", w.device), String::new()),
        (
            format!("{path}/e{at_s}"),
            format!("ts={}", BASE_MS + at_s * SECOND),
        ),
    ];
    let mut out = [(0.0, 0.0); 4];
    for (i, (path, query)) in requests.iter().enumerate() {
        let (own_units, own_answer) = units(&own, &w.own, path, query).await;
        let (slab_units, slab_answer) = units(&slabbed, &w.slabs, path, query).await;
        let strip = |mut v: Value| {
            v.as_object_mut().map(|o| o.remove("as_of"));
            v
        };
        assert_eq!(strip(own_answer), strip(slab_answer), "{path}?{query}");
        out[i] = (own_units, slab_units);
    }
    out
}

#[tokio::test]
async fn a_devices_reads_answer_the_same_from_slabs_and_runs_as_from_its_own_items() {
    // The read units each costs, printed (`--nocapture`): a group of a 1,000-device fleet
    // (8 groups, 1-minute windows, 16 KiB items), eventually consistent reads.
    let names = ["last 15 min", "last hour", "latest", "point"];
    for cadence_s in [10, 60] {
        let costs = costs(cadence_s).await;
        for (name, (own, slabbed)) in names.iter().zip(costs) {
            println!(
                "every {cadence_s:>2} s, {name:<11}: own items {own:>6.1} RRU, slabs and runs {slabbed:>6.1} RRU"
            );
        }
    }
}
