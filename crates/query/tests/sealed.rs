//! Scenario 41, the query's side: a device's stats and series read from the sealer's
//! cells over the hours it sealed (and from the readings elsewhere) answer what the
//! readings alone answer, bucket for bucket, with copies of readings in the data: the
//! real sealer (`sealer::Sealer`) seals the readings, and the same requests go to a
//! service without the rollups table and to one with it.

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use bigdecimal::BigDecimal;
use query::{QueryService, ServiceConfig};
use sealer::{Sealer, Settings};
use serde_json::Value;
use sharding::key::{ReadingRef, write_key};
use sharding::time::Timestamp;
use store::item::{Reading, ReadingItem};
use store::memory::{MemoryReadings, MemoryRollups, MemoryShards};
use store::rollup::{HOUR_MS, MINUTE_MS, mean};

use crate::common::{
    BASE_MS, R, Service, fanout_history, hourly, key, key_of, load, now, put_block, shard_table,
    table_history, ts,
};

/// The first hour the sealer sealed (its watermark's `from_ms`).
const H0: i64 = BASE_MS + 3 * HOUR_MS;
/// The watermark: hours `[H0, W)` are sealed.
const W: i64 = H0 + 4 * HOUR_MS;
/// The readings lie in `[FIRST, LAST)`: two hours before `H0`, two after `W`.
const FIRST: i64 = H0 - 2 * HOUR_MS;
const LAST: i64 = W + 2 * HOUR_MS;
/// When `hot-1` was raised to 8 keys: inside the sealed hours.
const RAISE: i64 = H0 + 2 * HOUR_MS + 30 * MINUTE_MS;
const DEVICES: [&str; 3] = ["d-1", "d-2", "hot-1"];

/// Numbers of every shape the ingest stores.
const NUMBERS: [&str; 10] = [
    "1777777777777777777777777777777777777.3",
    "12345678901234567890123456789012345678",
    "-0.000000000000000000000000000000000001",
    "21.5",
    "-7.25",
    "0.1",
    "0.2",
    "99999999999999999999999999999999999999",
    "1e-130",
    "3",
];

/// The readings, each once: every device about every 37 s over `[FIRST, LAST)` at
/// uneven milliseconds, but `d-2` silent through the hour `H0 + 1h` (a sealed hour
/// with no item).
fn readings() -> Vec<R> {
    let mut out = Vec::new();
    for (d, device) in DEVICES.iter().enumerate() {
        let mut t = FIRST + d as i64 * 1_013;
        let mut i = 0;
        while t < LAST {
            let silent = *device == "d-2" && (H0 + HOUR_MS..H0 + 2 * HOUR_MS).contains(&t);
            if !silent {
                out.push(R {
                    device: (*device).to_owned(),
                    event: format!("e{i:05}"),
                    ts_ms: t,
                    value: store::Decimal::parse(NUMBERS[(i + d) % NUMBERS.len()]).unwrap(),
                });
            }
            t += 37_013 + (i as i64 % 5) * 101;
            i += 1;
        }
    }
    out
}

/// The readings stored with copies, as the sealer's own fixture stores them: a message
/// sent twice, `d-1`'s readings held in two overlapping blocks as well as their own
/// items (in the hours before, inside and after the sealed ones), and `hot-1`'s
/// readings of the hour before its raise written again under a sub-shard (a
/// redelivery keyed after the raise). `d-2` also sent readings without the metric.
fn fixture() -> (Vec<R>, MemoryReadings, Arc<MemoryShards>) {
    let shards = shard_table(
        table_history(vec![(0, hourly(4))]),
        [("hot-1".to_owned(), fanout_history(vec![(RAISE, 8)]))],
    );
    let table = MemoryReadings::new(None);
    let readings = readings();
    load(&table, &shards, &readings);
    load(&table, &shards, &readings[..50]);
    let d1: Vec<&R> = readings.iter().filter(|r| r.device == "d-1").collect();
    for at in [
        H0 - HOUR_MS,
        H0 + 90 * MINUTE_MS,
        W - 5 * MINUTE_MS,
        W + HOUR_MS,
    ] {
        let from = d1.iter().position(|r| r.ts_ms >= at).unwrap();
        let run: Vec<R> = d1[from..from + 20].iter().map(|r| (*r).clone()).collect();
        put_block(&table, &shards, &run[..12]);
        put_block(&table, &shards, &run[6..]);
    }
    let early: Vec<R> = readings
        .iter()
        .filter(|r| r.device == "hot-1" && (RAISE - HOUR_MS..RAISE).contains(&r.ts_ms))
        .cloned()
        .collect();
    let rekeyed = shard_table(
        table_history(vec![(0, hourly(4))]),
        [(
            "hot-1".to_owned(),
            fanout_history(vec![(RAISE - 2 * HOUR_MS, 8)]),
        )],
    );
    load(&table, &rekeyed, &early);
    for i in 0..40 {
        let r = R {
            device: "d-2".to_owned(),
            event: format!("h{i:03}"),
            ts_ms: FIRST + i * 17 * MINUTE_MS + 29_999,
            value: store::Decimal::parse("1").unwrap(),
        };
        table.put(humidity_only(&shards, &r));
    }
    (readings, table, Arc::new(shards))
}

/// `r` as a reading carrying only a humidity, under the key the writer gives it.
fn humidity_only(shards: &MemoryShards, r: &R) -> ReadingItem {
    let layout = shards.layout().unwrap();
    let at = ts(r.ts_ms);
    let fanout = shards
        .entity(&r.device)
        .map(|m| m.shard_history)
        .unwrap_or_default();
    let key = write_key(
        &ReadingRef::new(&r.device, &r.event, at),
        &layout,
        &fanout,
        at,
    )
    .unwrap()
    .key;
    assert_eq!(key, key_of(shards, r));
    let reading = Reading {
        device_id: r.device.clone(),
        event_id: r.event.clone(),
        ts: at,
        metrics: BTreeMap::from([("humidity".to_owned(), r.value.clone())]),
        tags: BTreeMap::new(),
        written: store::WriteOrder::OLDEST,
    };
    ReadingItem::new(&reading, key, Duration::from_secs(86_400 * 3650))
}

/// The readings sealed by the sealer itself, in two runs: the first seals `H0` (a first
/// run seals the last hour due), the second the three hours after it, up to `W`.
async fn sealed(table: &MemoryReadings, shards: &Arc<MemoryShards>) -> MemoryRollups {
    let rollups = MemoryRollups::new();
    let settings = Settings {
        concurrency: 4,
        ..Settings::default()
    };
    let sealer = Sealer::new(table, shards.clone(), &rollups, settings);
    let at = |ms| Timestamp::from_millis(ms).unwrap();
    let first = sealer
        .run(at(H0 + HOUR_MS + 12 * MINUTE_MS), None)
        .await
        .unwrap();
    assert_eq!(first.hours_sealed, 1, "{first:?}");
    let second = sealer.run(at(W + 12 * MINUTE_MS), None).await.unwrap();
    assert_eq!(
        (second.hours_sealed, second.watermark_ms),
        (3, Some(W)),
        "{second:?}"
    );
    rollups
}

fn config() -> ServiceConfig {
    let mut config = ServiceConfig::new(key());
    config.concurrency = 4;
    config
}

/// `GET path?query`: status and JSON body.
async fn get(svc: &Service<'_>, path: &str, query: &str) -> (u16, Value) {
    let resp = svc.handle_parts("GET", path, Some(query), now()).await;
    let body = serde_json::from_str(resp.body()).unwrap();
    (resp.status().as_u16(), body)
}

/// Every bucket of a stats request, page after page.
async fn every_bucket(svc: &Service<'_>, path: &str, query: &str) -> Vec<Value> {
    let mut buckets = Vec::new();
    let mut q = query.to_owned();
    for _ in 0..100 {
        let (status, body) = get(svc, path, &q).await;
        assert_eq!(status, 200, "{path}?{q}: {body}");
        buckets.extend(body["buckets"].as_array().unwrap().iter().cloned());
        let Some(cursor) = body["next_cursor"].as_str() else {
            return buckets;
        };
        q = format!("{query}&cursor={cursor}");
    }
    panic!("{path}?{query} never ended");
}

/// `got` and `want` hold the same buckets; else the first that differs is named.
fn same_buckets(got: &[Value], want: &[Value], context: &str) {
    let differs = got.iter().zip(want).find(|(g, w)| g != w);
    assert!(differs.is_none(), "{context}: {differs:?}");
    assert_eq!(got.len(), want.len(), "{context}: as many buckets");
}

/// The ranges compared: around and inside the sealed hours, each starting and ending
/// inside a minute unless it is a whole number of hours.
fn ranges() -> Vec<(&'static str, i64, i64)> {
    vec![
        (
            "all, from before the first sealed hour to after the watermark",
            FIRST + 17_003,
            LAST - MINUTE_MS - 500,
        ),
        (
            "inside the sealed hours, cutting hours and minutes",
            H0 + 10 * MINUTE_MS + 1,
            W - MINUTE_MS - 1_001,
        ),
        ("the sealed hours exactly", H0, W),
        ("before the first sealed hour", FIRST, H0),
        (
            "before the first sealed hour, into it",
            FIRST + 5 * MINUTE_MS + 7,
            H0 + 25 * MINUTE_MS + 3,
        ),
        (
            "across the watermark",
            W - 47 * MINUTE_MS - 9_999,
            W + 31 * MINUTE_MS + 1,
        ),
        ("after the watermark", W, LAST),
    ]
}

const INTERVALS: [&str; 10] = [
    "1m", "5m", "7m", "90m", "1h", "2h", "1d", "30s", "90s", "13s",
];

/// Every device's stats over every range and interval answer the same buckets from
/// the sealed cells as from the readings: start, count, min, max and avg alike, a
/// bucket that straddles the first sealed hour or the watermark included; each
/// reading counted once (the counts add up to the distinct readings in the range).
/// Over the sealed hours the readings are not read at all.
#[tokio::test]
async fn s41_device_stats_from_sealed_cells_equal_the_raw_answer() {
    let (readings, table, shards) = fixture();
    let rollups = sealed(&table, &shards).await;
    let raw = QueryService::new(&table, shards.clone(), config());
    let from_cells =
        QueryService::new(&table, shards.clone(), config()).with_rollups(rollups.clone());
    let (mut raw_evaluated, mut sealed_evaluated) = (0, 0);
    for device in DEVICES {
        let path = format!("/devices/{device}/stats");
        for (name, from, to) in ranges() {
            let distinct = readings
                .iter()
                .filter(|r| r.device == device && (from..to).contains(&r.ts_ms))
                .count() as u64;
            for interval in INTERVALS {
                for consistent in ["false", "true"] {
                    let q = format!(
                        "from={from}&to={to}&interval={interval}&metric=temperature&consistent={consistent}"
                    );
                    let before = table.evaluated();
                    let want = every_bucket(&raw, &path, &q).await;
                    raw_evaluated += table.evaluated() - before;
                    let before = (table.evaluated(), rollups.reads());
                    let got = every_bucket(&from_cells, &path, &q).await;
                    sealed_evaluated += table.evaluated() - before.0;
                    same_buckets(&got, &want, &format!("{device} {name} at {interval}"));
                    let counted: u64 = got.iter().map(|b| b["count"].as_u64().unwrap()).sum();
                    assert_eq!(counted, distinct, "{device} {name} at {interval}");
                    let whole_minutes = !interval.ends_with('s');
                    let read_cells = rollups.reads() > before.1;
                    assert_eq!(read_cells, whole_minutes, "{device} {name} at {interval}");
                    if whole_minutes && (from, to) == (H0, W) {
                        assert_eq!(
                            table.evaluated(),
                            before.0,
                            "{device} {interval}: no reading read"
                        );
                    }
                }
            }
        }
    }
    // The sub-minute intervals read the same readings both ways, and some ranges lie
    // outside the sealed hours: less, not nothing.
    assert!(
        sealed_evaluated < raw_evaluated,
        "{sealed_evaluated} readings read against {raw_evaluated}"
    );
}

/// A stats page that a small Query budget ends inside the sealed hours ends at a
/// bucket boundary, and its cursor resumes there: page after page, the buckets are
/// the raw answer's.
#[tokio::test]
async fn sealed_stats_pages_within_a_small_budget_add_up_to_the_raw_answer() {
    let (_, table, shards) = fixture();
    let rollups = sealed(&table, &shards).await;
    let raw = QueryService::new(&table, shards.clone(), config());
    let mut small = config();
    small.budget.queries = 4;
    let paged = QueryService::new(&table, shards.clone(), small).with_rollups(rollups.clone());
    for interval in ["1m", "5m", "1h"] {
        let q = format!(
            "from={}&to={}&interval={interval}&metric=temperature",
            FIRST + 17_003,
            LAST - 500
        );
        let want = every_bucket(&raw, "/devices/d-1/stats", &q).await;
        let mut got = Vec::new();
        let mut pages = 0;
        let mut query = q.clone();
        loop {
            let before = rollups.reads() + table.calls();
            let (status, body) = get(&paged, "/devices/d-1/stats", &query).await;
            assert_eq!(status, 200, "{interval}: {body}");
            let calls = rollups.reads() + table.calls() - before;
            assert!(calls <= 4, "{interval}: a page made {calls} calls");
            got.extend(body["buckets"].as_array().unwrap().iter().cloned());
            pages += 1;
            let Some(cursor) = body["next_cursor"].as_str() else {
                break;
            };
            query = format!("{q}&cursor={cursor}");
        }
        assert!(pages > 1, "{interval}: the budget ended pages");
        same_buckets(&got, &want, interval);
    }
}

/// The exact sum of `device`'s temperatures in each bucket of `interval_ms` over
/// `[from, to)`, each reading once.
fn sums(
    readings: &[R],
    device: &str,
    from: i64,
    to: i64,
    interval_ms: i64,
) -> BTreeMap<i64, BigDecimal> {
    let mut out: BTreeMap<i64, BigDecimal> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for r in readings
        .iter()
        .filter(|r| r.device == device && (from..to).contains(&r.ts_ms))
    {
        if seen.insert((r.ts_ms, r.event.clone())) {
            *out.entry(r.ts_ms.div_euclid(interval_ms) * interval_ms)
                .or_default() += BigDecimal::from_str(r.value.as_str()).unwrap();
        }
    }
    out
}

/// A device's series is its stats as points: for each `agg`, the bucket's figure at
/// the bucket's start (epoch ms), the interval rounded up to a whole minute from a
/// minute on; `sum` the exact decimal, `count` an integer; the same from the sealed
/// cells as from the readings.
#[tokio::test]
async fn a_device_series_is_its_stats_as_points() {
    let (readings, table, shards) = fixture();
    let rollups = sealed(&table, &shards).await;
    let raw = QueryService::new(&table, shards.clone(), config());
    let from_cells =
        QueryService::new(&table, shards.clone(), config()).with_rollups(rollups.clone());
    let (from, to) = (FIRST + 17_003, LAST - MINUTE_MS - 500);
    for (asked, used, interval) in [
        (60_000, 60_000, "1m"),
        (90_000, 120_000, "2m"),
        (300_000, 300_000, "5m"),
        (3_600_000, 3_600_000, "1h"),
        (15_000, 15_000, "15s"),
    ] {
        let stats = format!("from={from}&to={to}&interval={interval}&metric=temperature");
        let buckets = every_bucket(&raw, "/devices/hot-1/stats", &stats).await;
        let exact = sums(&readings, "hot-1", from, to, used);
        for agg in ["avg", "min", "max", "count", "sum"] {
            let q = format!("metric=temperature&from={from}&to={to}&interval_ms={asked}&agg={agg}");
            let mut answers = Vec::new();
            for svc in [&raw, &from_cells] {
                let resp = svc
                    .handle_parts("GET", "/devices/hot-1/series", Some(&q), now())
                    .await;
                assert_eq!(resp.status(), 200, "{}", resp.body());
                answers.push(resp.body().clone());
            }
            assert_eq!(answers[0], answers[1], "{asked} {agg}");
            let body: Value = serde_json::from_str(&answers[0]).unwrap();
            crate::series::valid(&body, "/devices/{device_id}/series", 200);
            let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
            assert_eq!(keys, ["metric", "agg", "interval_ms", "points"]);
            assert_eq!(body["interval_ms"], used, "{asked}");
            assert_eq!(
                (&body["metric"], &body["agg"]),
                (&Value::from("temperature"), &Value::from(agg))
            );
            let points = body["points"].as_array().unwrap();
            assert_eq!(points.len(), buckets.len(), "{asked} {agg}");
            for (point, bucket) in points.iter().zip(&buckets) {
                let start = point[0].as_i64().unwrap();
                assert_eq!(start % used, 0, "aligned to the interval");
                assert_eq!(
                    query::model::format_ts(start).unwrap(),
                    bucket["start"].as_str().unwrap()
                );
                match agg {
                    "count" => assert!(point[1].is_u64() && point[1] == bucket["count"]),
                    // Read below as the decimals their digits spell.
                    "sum" => assert!(point[1].is_number()),
                    _ => assert_eq!(point[1], bucket[agg], "{asked} {agg}"),
                }
            }
            if agg == "sum" {
                let written = raw_points(&answers[0]);
                let want: Vec<(i64, BigDecimal)> = exact.clone().into_iter().collect();
                assert_eq!(written, want, "{asked}: exact sums");
            }
            if agg == "avg" {
                for (start, sum) in &exact {
                    let count = points
                        .iter()
                        .position(|p| p[0] == *start)
                        .map(|i| buckets[i]["count"].as_u64().unwrap())
                        .unwrap();
                    let point = points.iter().find(|p| p[0] == *start).unwrap();
                    assert_eq!(
                        point[1].as_f64().unwrap().to_bits(),
                        mean(sum, count).to_bits()
                    );
                }
            }
        }
    }
}

/// The points of a series answer with each value read as the decimal its text spells.
fn raw_points(body: &str) -> Vec<(i64, BigDecimal)> {
    #[derive(serde::Deserialize)]
    struct Series {
        points: Vec<(i64, Box<serde_json::value::RawValue>)>,
    }
    let series: Series = serde_json::from_str(body).unwrap();
    series
        .points
        .into_iter()
        .map(|(t, v)| (t, BigDecimal::from_str(v.get()).unwrap()))
        .collect()
}

/// Each metric's (min, max, sum) of `device`'s temperatures in each bucket of
/// `interval_ms` over `[from, to)`, each reading once, exact.
fn exact_cells(
    readings: &[R],
    device: &str,
    from: i64,
    to: i64,
    interval_ms: i64,
) -> BTreeMap<i64, (BigDecimal, BigDecimal, BigDecimal)> {
    let mut out: BTreeMap<i64, (BigDecimal, BigDecimal, BigDecimal)> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for r in readings
        .iter()
        .filter(|r| r.device == device && (from..to).contains(&r.ts_ms))
    {
        if !seen.insert((r.ts_ms, r.event.clone())) {
            continue;
        }
        let v = BigDecimal::from_str(r.value.as_str()).unwrap();
        let bucket = r.ts_ms.div_euclid(interval_ms) * interval_ms;
        let cell = out
            .entry(bucket)
            .or_insert_with(|| (v.clone(), v.clone(), BigDecimal::from(0)));
        cell.0 = cell.0.clone().min(v.clone());
        cell.1 = cell.1.clone().max(v.clone());
        cell.2 += v;
    }
    out
}

/// Every bucket of a stats request, page after page, each number read as the decimal
/// its text spells (never through a double): start (epoch ms) to (min, max, sum).
async fn exact_buckets(
    svc: &Service<'_>,
    path: &str,
    query: &str,
) -> BTreeMap<i64, (BigDecimal, BigDecimal, BigDecimal)> {
    #[derive(serde::Deserialize)]
    struct Page {
        buckets: Vec<Bucket>,
        next_cursor: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Bucket {
        start: String,
        min: Box<serde_json::value::RawValue>,
        max: Box<serde_json::value::RawValue>,
        sum: Box<serde_json::value::RawValue>,
    }
    let mut out = BTreeMap::new();
    let mut q = query.to_owned();
    for _ in 0..100 {
        let resp = svc.handle_parts("GET", path, Some(&q), now()).await;
        assert_eq!(resp.status(), 200, "{path}?{q}: {}", resp.body());
        let page: Page = serde_json::from_str(resp.body()).unwrap();
        for b in page.buckets {
            let start = chrono::DateTime::parse_from_rfc3339(&b.start)
                .unwrap()
                .timestamp_millis();
            let num = |v: &serde_json::value::RawValue| BigDecimal::from_str(v.get()).unwrap();
            out.insert(start, (num(&b.min), num(&b.max), num(&b.sum)));
        }
        let Some(cursor) = page.next_cursor else {
            return out;
        };
        q = format!("{query}&cursor={cursor}");
    }
    panic!("{path}?{query} never ended");
}

/// A device's stats answer `min`, `max` and `sum` as exact decimals, as sent (38-digit
/// values, `1777777777777777777777777777777777777.3` among them, which a double
/// answers as `1.7777777777777778E+36`), from the readings and from the sealed cells
/// alike, and a bucket across the first sealed hour or the watermark too.
#[tokio::test]
async fn device_stats_answer_min_max_and_sum_exactly_from_readings_and_from_cells() {
    let (readings, table, shards) = fixture();
    let rollups = sealed(&table, &shards).await;
    let raw = QueryService::new(&table, shards.clone(), config());
    let from_cells =
        QueryService::new(&table, shards.clone(), config()).with_rollups(rollups.clone());
    let (from, to) = (FIRST + 17_003, LAST - MINUTE_MS - 500);
    for device in DEVICES {
        let path = format!("/devices/{device}/stats");
        for (interval, ms) in [("5m", 5 * MINUTE_MS), ("1h", HOUR_MS), ("1d", 24 * HOUR_MS)] {
            let want = exact_cells(&readings, device, from, to, ms);
            let q = format!("from={from}&to={to}&interval={interval}&metric=temperature");
            assert_eq!(
                exact_buckets(&raw, &path, &q).await,
                want,
                "{device} {interval}: raw"
            );
            let before = rollups.reads();
            let got = exact_buckets(&from_cells, &path, &q).await;
            assert!(rollups.reads() > before, "{device} {interval}: cells read");
            assert_eq!(got, want, "{device} {interval}: sealed");
        }
    }
    let wide = BigDecimal::from_str(NUMBERS[0]).unwrap();
    assert!(
        readings
            .iter()
            .any(|r| BigDecimal::from_str(r.value.as_str()).unwrap() == wide),
        "the 38-digit value is sent"
    );
}

/// Scenario 60, a device's side: a device-hour and a summary of one reading left in an
/// hour before the first sealed one (as a late mark there could leave) are never read:
/// a device's stats and series over those hours answer its readings.
#[tokio::test]
async fn s60_device_routes_answer_hours_before_the_first_sealed_one_from_readings() {
    use store::rollup::{DeviceHour, RollupItem, RollupTable, keys};

    let (_, table, shards) = fixture();
    let rollups = sealed(&table, &shards).await;
    let hour = H0 - HOUR_MS;
    let mut partial = DeviceHour::new("d-1", hour);
    let metrics = BTreeMap::from([(
        "temperature".to_owned(),
        store::Decimal::parse("1e37").unwrap(),
    )]);
    partial.add(hour + 5, "zz-partial", &metrics, &BTreeMap::new());
    for (key, dh) in [
        (keys::device_hour("d-1", hour), partial.clone()),
        (keys::device_summary("d-1", hour), partial.summary()),
    ] {
        let item = RollupItem::with_body(key, partial.readings(), &dh, None).unwrap();
        rollups.put(&item).await.unwrap();
    }
    let raw = QueryService::new(&table, shards.clone(), config());
    let from_cells =
        QueryService::new(&table, shards.clone(), config()).with_rollups(rollups.clone());
    for (from, to) in [
        (FIRST, W),
        (hour, H0),
        (hour + 7 * MINUTE_MS + 3, H0 + HOUR_MS),
    ] {
        for interval in ["1m", "1h", "2h"] {
            let q = format!("from={from}&to={to}&interval={interval}&metric=temperature");
            let want = every_bucket(&raw, "/devices/d-1/stats", &q).await;
            let got = every_bucket(&from_cells, "/devices/d-1/stats", &q).await;
            same_buckets(&got, &want, &format!("{from}..{to} at {interval}"));
        }
        let q = format!("metric=temperature&agg=max&interval_ms=3600000&from={from}&to={to}");
        let (_, want) = get(&raw, "/devices/d-1/series", &q).await;
        let (_, got) = get(&from_cells, "/devices/d-1/series", &q).await;
        assert_eq!(got, want, "{from}..{to}");
    }
}
