//! `GET /devices` and `GET /stats` over the sealer's derived items (`store::rollup`),
//! written to the in-memory rollups table as the sealer writes them: directory entries,
//! fleet parts made by `FleetPart::of` from device-hours, the watermark.

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;
use std::sync::Arc;

use base64::Engine as _;
use bigdecimal::BigDecimal;
use query::lambda::handle_apigw;
use query::{QueryService, ReadScope, ServiceConfig};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use store::Decimal;
use store::Written;
use store::memory::{MemoryReadings, MemoryRollups};
use store::rollup::{
    DeviceHour, DirEntry, FleetPart, HOUR_MS, MINUTE_MS, RollupItem, RollupTable, keys, mean,
    part_of,
};

use crate::common::{BASE_MS, Service, hourly, key, now, shard_table, table_history};

const CLAIM: &str = "shardline_devices";

/// A service over an empty readings table and `rollups`.
fn service<'a>(
    table: &'a MemoryReadings,
    rollups: &MemoryRollups,
    configure: impl FnOnce(&mut ServiceConfig),
) -> Service<'a> {
    let shards = shard_table(table_history(vec![(0, hourly(4))]), []);
    let mut config = ServiceConfig::new(key());
    config.concurrency = 4;
    configure(&mut config);
    QueryService::new(table, Arc::new(shards), config).with_rollups(rollups.clone())
}

/// `GET path?query` as `scope`'s caller: status and raw body.
async fn get_as(svc: &Service<'_>, scope: &ReadScope, path: &str, query: &str) -> (u16, String) {
    let request = query::service::Request {
        method: "GET",
        path,
        query: Some(query),
    };
    let resp = svc.handle_as(Ok(scope), request, now(), None).await;
    (resp.status().as_u16(), resp.body().clone())
}

async fn get(svc: &Service<'_>, path: &str, query: &str) -> (u16, Value) {
    let (status, body) = get_as(svc, &ReadScope::Every, path, query).await;
    (status, serde_json::from_str(&body).unwrap())
}

fn scope(claim: &str) -> ReadScope {
    ReadScope::from_claim(CLAIM, claim).unwrap()
}

/// The directory entry of `device` as the sealer writes it (newest-wins; its version
/// a counter, here 1 whatever it replaces).
async fn put_device(rollups: &MemoryRollups, device: &str, last_seen_ms: i64) {
    let entry = DirEntry {
        device: device.to_owned(),
        first_seen_ms: BASE_MS,
        last_seen_ms,
        last_event: format!("evt-{last_seen_ms}"),
        metrics: BTreeSet::from(["temperature".to_owned()]),
        more_metrics: false,
        tags: BTreeMap::from([("site".to_owned(), "lab".to_owned())]),
    };
    let item = RollupItem::with_body(keys::directory_entry(device), 1, &entry, None).unwrap();
    rollups.put(&item).await.unwrap();
}

/// The watermark `[SEALED_FROM, end_ms)`, as the sealer writes it.
async fn put_watermark(rollups: &MemoryRollups, end_ms: i64) {
    put_span(rollups, SEALED_FROM, end_ms).await;
}

/// The first sealed hour of [`put_watermark`]: a month before the fixtures' readings.
const SEALED_FROM: i64 = BASE_MS - 31 * 24 * HOUR_MS;

/// The watermark `[from_ms, end_ms)`.
async fn put_span(rollups: &MemoryRollups, from_ms: i64, end_ms: i64) {
    let body = json!({ "from_ms": from_ms });
    let item = RollupItem::with_body(
        keys::watermark(),
        u64::try_from(end_ms).unwrap(),
        &body,
        None,
    )
    .unwrap();
    rollups.put(&item).await.unwrap();
}

/// The devices of every page of `GET /devices?query`, and the cursors handed out.
async fn every_device_page(
    svc: &Service<'_>,
    scope: &ReadScope,
    query: &str,
) -> (Vec<String>, Vec<String>) {
    let (mut devices, mut cursors) = (Vec::new(), Vec::new());
    let mut q = query.to_owned();
    for _ in 0..1_000 {
        let (status, body) = get_as(svc, scope, "/devices", &q).await;
        assert_eq!(status, 200, "{body}");
        let body: Value = serde_json::from_str(&body).unwrap();
        devices.extend(ids(&body));
        let Some(cursor) = body["next_cursor"].as_str() else {
            return (devices, cursors);
        };
        cursors.push(cursor.to_owned());
        q = format!("{query}&cursor={cursor}");
    }
    panic!("the listing never ended");
}

fn ids(page: &Value) -> Vec<String> {
    page["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["device_id"].as_str().unwrap().to_owned())
        .collect()
}

/// The device a cursor's position names (its body is readable, only sealed).
fn cursor_device(cursor: &str) -> String {
    let body = cursor.split_once('.').unwrap().0;
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(body)
        .unwrap();
    let opened: Value = serde_json::from_slice(&json).unwrap();
    opened["pos"]["device_id"].as_str().unwrap().to_owned()
}

/// Scenario 46: the device list paged (limit 2) while devices are added between the
/// pages, before and after the page's position: every device there at the start is
/// answered exactly once, and so is every one added after the position.
#[tokio::test]
async fn s46_the_device_list_pages_each_device_once_while_devices_are_added() {
    let (table, rollups) = (MemoryReadings::new(None), MemoryRollups::new());
    let svc = service(&table, &rollups, |_| {});
    let first: Vec<String> = (0..9).map(|i| format!("dev-{:02}", i * 10)).collect();
    for d in &first {
        put_device(&rollups, d, BASE_MS).await;
    }
    put_watermark(&rollups, BASE_MS + HOUR_MS).await;
    let mut answered = Vec::new();
    let mut query = "limit=2".to_owned();
    let mut added_after = Vec::new();
    for page in 0..100 {
        let (status, body) = get(&svc, "/devices", &query).await;
        assert_eq!(status, 200, "{body}");
        let got = ids(&body);
        assert!(got.len() <= 2);
        assert_eq!(body["as_of"], "2026-06-22T01:00:00.000Z");
        answered.extend(got.clone());
        let Some(cursor) = body["next_cursor"].as_str() else {
            break;
        };
        // A device before the page's last one (missed: the next listing has it), an
        // updated entry of one already answered, and one after the position.
        let last = got.last().unwrap().clone();
        put_device(&rollups, &format!("{last}-a"), BASE_MS).await;
        put_device(&rollups, &first[0], BASE_MS + page).await;
        if let Some(n) = last
            .strip_prefix("dev-")
            .and_then(|n| n.parse::<u32>().ok())
            && n >= 10
        {
            let before = format!("dev-{:02}", n - 1);
            put_device(&rollups, &before, BASE_MS).await;
        }
        added_after.push(format!("{last}-a"));
        query = format!("limit=2&cursor={cursor}");
    }
    let distinct: BTreeSet<&String> = answered.iter().collect();
    assert_eq!(
        distinct.len(),
        answered.len(),
        "a device answered twice: {answered:?}"
    );
    for d in first.iter().chain(&added_after) {
        assert!(distinct.contains(d), "{d} never answered: {answered:?}");
    }
    let sorted = answered.windows(2).all(|w| w[0] < w[1]);
    assert!(sorted, "in id order: {answered:?}");
}

#[tokio::test]
async fn prefix_and_seen_since_select_the_devices() {
    let (table, rollups) = (MemoryReadings::new(None), MemoryRollups::new());
    let svc = service(&table, &rollups, |_| {});
    for (i, d) in ["site-a-1", "site-a-2", "site-a-3", "site-b-1", "sensor-7"]
        .iter()
        .enumerate()
    {
        put_device(&rollups, d, BASE_MS + i as i64 * HOUR_MS).await;
    }
    let (status, body) = get(&svc, "/devices", "prefix=site-a-").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(ids(&body), ["site-a-1", "site-a-2", "site-a-3"]);
    assert!(body["as_of"].is_null(), "nothing sealed yet: {body}");
    let device = &body["devices"][1];
    assert_eq!(device["first_seen"], "2026-06-22T00:00:00.000Z");
    assert_eq!(device["last_seen"], "2026-06-22T01:00:00.000Z");
    assert_eq!(
        device["last_event_id"],
        format!("evt-{}", BASE_MS + HOUR_MS)
    );
    assert_eq!(device["metrics"], json!(["temperature"]));
    assert_eq!(device["tags"], json!({"site": "lab"}));
    // At or after: the device last seen at 02:00 is in.
    let (_, body) = get(&svc, "/devices", "seen_since=2026-06-22T02:00:00Z").await;
    assert_eq!(ids(&body), ["sensor-7", "site-a-3", "site-b-1"]);
    let since = BASE_MS + 2 * HOUR_MS;
    let (_, body) = get(
        &svc,
        "/devices",
        &format!("prefix=site-&seen_since={since}"),
    )
    .await;
    assert_eq!(ids(&body), ["site-a-3", "site-b-1"]);
    for (query, code) in [
        ("prefix=site%23a", "bad_id"),
        ("prefix=", "bad_id"),
        ("seen_since=yesterday", "bad_range"),
        ("limit=1001", "bad_limit"),
        ("from=0", "unknown_parameter"),
    ] {
        let (status, body) = get(&svc, "/devices", query).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some(code)),
            "{query}"
        );
    }
}

#[tokio::test]
async fn a_scoped_token_lists_only_its_devices_by_ids_and_prefixes() {
    let (table, rollups) = (MemoryReadings::new(None), MemoryRollups::new());
    let svc = service(&table, &rollups, |_| {});
    let all: Vec<String> = [
        "a-1", "site-a-1", "site-a-2", "site-ab", "site-b-1", "site-b-2",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain((0..40).map(|i| format!("other-{i:02}")))
    .collect();
    for d in &all {
        put_device(&rollups, d, BASE_MS).await;
    }
    for (claim, expected) in [
        (
            "site-a-* site-b-2",
            vec!["site-a-1", "site-a-2", "site-b-2"],
        ),
        (
            "site-b-1 a-1 site-a-2 nobody",
            vec!["a-1", "site-a-2", "site-b-1"],
        ),
        (
            "site-* site-a-*",
            vec!["site-a-1", "site-a-2", "site-ab", "site-b-1", "site-b-2"],
        ),
    ] {
        let scope = scope(claim);
        let before = rollups.reads();
        let (devices, cursors) = every_device_page(&svc, &scope, "limit=1").await;
        assert_eq!(devices, expected, "{claim}");
        for cursor in &cursors {
            let named = cursor_device(cursor);
            assert!(scope.allows(&named), "{claim}: a cursor names {named}");
        }
        // No page reads past its grants: the 40 others are never evaluated.
        let reads = rollups.reads() - before;
        assert!(
            reads <= 3 * (cursors.len() as u64 + 1) + 4,
            "{claim}: {reads} reads"
        );
    }
    // A few ids: a GetItem each (and the watermark's), nothing else.
    let before = rollups.reads();
    let (status, body) = get_as(&svc, &scope("site-b-1 a-1 nobody"), "/devices", "").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(rollups.reads() - before, 4);
    // With the request's prefix, the grants inside it.
    let (devices, _) = every_device_page(&svc, &scope("site-* a-1"), "prefix=site-b").await;
    assert_eq!(devices, ["site-b-1", "site-b-2"]);
}

#[tokio::test]
async fn a_tampered_or_reused_cursor_is_400_bad_cursor() {
    let (table, rollups) = (MemoryReadings::new(None), MemoryRollups::new());
    let svc = service(&table, &rollups, |_| {});
    for i in 0..6 {
        put_device(&rollups, &format!("site-a-{i}"), BASE_MS).await;
    }
    let narrow = scope("site-a-*");
    let (status, body) = get_as(&svc, &narrow, "/devices", "limit=2").await;
    assert_eq!(status, 200, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    let cursor = body["next_cursor"].as_str().unwrap().to_owned();
    let mut tampered = cursor.clone().into_bytes();
    let at = tampered.len() / 3;
    tampered[at] = if tampered[at] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let refused = [
        (
            narrow.clone(),
            "/devices",
            format!("limit=2&cursor={tampered}"),
        ),
        (
            narrow.clone(),
            "/devices",
            format!("limit=3&cursor={cursor}"),
        ),
        (
            narrow.clone(),
            "/devices",
            format!("limit=2&prefix=site&cursor={cursor}"),
        ),
        (
            narrow.clone(),
            "/devices",
            format!("limit=2&seen_since=0&cursor={cursor}"),
        ),
        (
            ReadScope::Every,
            "/devices",
            format!("limit=2&cursor={cursor}"),
        ),
        (
            scope("site-*"),
            "/devices",
            format!("limit=2&cursor={cursor}"),
        ),
        (
            ReadScope::Every,
            "/stats",
            format!("from=0&to=3600000&interval=1h&cursor={cursor}"),
        ),
    ];
    let before = rollups.reads();
    for (scope, path, query) in &refused {
        let (status, body) = get_as(&svc, scope, path, query).await;
        assert_eq!(status, 400, "{path}?{query}: {body}");
        assert!(body.contains("bad_cursor"), "{body}");
    }
    assert_eq!(rollups.reads(), before, "a refused cursor costs no read");
    // The same request, the same grants spelled otherwise: it resumes.
    let (status, _) = get_as(
        &svc,
        &scope("[site-a-*]"),
        "/devices",
        &format!("limit=2&cursor={cursor}"),
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn device_list_pages_within_the_budgets_and_move_on() {
    let (table, rollups) = (MemoryReadings::new(None), MemoryRollups::new());
    // Each request: at most 3 calls and 4 items evaluated.
    let svc = service(&table, &rollups, |c| {
        c.budget.queries = 3;
        c.budget.evaluated = 4;
    });
    let all: Vec<String> = (0..25).map(|i| format!("d-{i:02}")).collect();
    for (i, d) in all.iter().enumerate() {
        // Only every fifth is recent: most pages filter out what they read.
        let seen = if i % 5 == 0 {
            BASE_MS + HOUR_MS
        } else {
            BASE_MS
        };
        put_device(&rollups, d, seen).await;
    }
    put_watermark(&rollups, BASE_MS + 2 * HOUR_MS).await;
    let mut calls = Vec::new();
    let mut q = format!("seen_since={}", BASE_MS + HOUR_MS);
    let mut answered = Vec::new();
    loop {
        let before = rollups.reads();
        let (status, body) = get(&svc, "/devices", &q).await;
        assert_eq!(status, 200, "{body}");
        calls.push(rollups.reads() - before);
        answered.extend(ids(&body));
        let Some(cursor) = body["next_cursor"].as_str() else {
            break;
        };
        q = format!("seen_since={}&cursor={cursor}", BASE_MS + HOUR_MS);
    }
    assert_eq!(answered, ["d-00", "d-05", "d-10", "d-15", "d-20"]);
    assert!(calls.iter().all(|&c| c <= 3), "{calls:?}");
    assert!(calls.len() >= 25 / 3, "the budget ended pages: {calls:?}");
    // A budget that allows nothing but the watermark is refused, naming it.
    let svc = service(&table, &rollups, |c| c.budget.queries = 1);
    let (status, body) = get(&svc, "/devices", "").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "budget_exceeded");
}

#[tokio::test]
async fn without_the_rollups_table_both_routes_are_501_naming_it() {
    let table = MemoryReadings::new(None);
    let shards = shard_table(table_history(vec![(0, hourly(4))]), []);
    let svc = QueryService::new(&table, Arc::new(shards), ServiceConfig::new(key()));
    for (path, query) in [
        ("/devices", ""),
        ("/stats", "from=0&to=3600000&interval=1m"),
    ] {
        let (status, body) = get(&svc, path, query).await;
        assert_eq!(status, 501, "{body}");
        assert_eq!(body["error"]["code"], "not_supported");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("ROLLUP_TABLE")
        );
    }
}

/// A reading as the sealer counts it.
#[derive(Debug, Clone)]
struct Reading {
    device: String,
    ts_ms: i64,
    metrics: BTreeMap<String, Decimal>,
}

/// Numbers of every shape the ingest stores: 38 significant digits, tiny, negative.
const NUMBERS: [&str; 8] = [
    "12345678901234567890123456789012345678",
    "99999999999999999999999999999999999999",
    "-1.2345678901234567890123456789012345678",
    "0.1",
    "-0.2",
    "3.0000000000000000000000000000000000001",
    "1e-130",
    "7",
];

/// 12 devices over three hours from `BASE_MS`: each reads on minutes of its own, with
/// a temperature of [`NUMBERS`] and, on some readings, a humidity.
fn readings() -> Vec<Reading> {
    let mut out = Vec::new();
    for d in 0..12_i64 {
        for i in 0..40_i64 {
            let minute = (i * 7 + d * 3) % 180;
            let ts_ms = BASE_MS + minute * MINUTE_MS + (d * 1_009 + i * 17) % MINUTE_MS;
            let mut metrics = BTreeMap::from([(
                "temperature".to_owned(),
                Decimal::parse(NUMBERS[((d + i) % 8) as usize]).unwrap(),
            )]);
            if i % 3 == 0 {
                metrics.insert(
                    "humidity".to_owned(),
                    Decimal::parse(&format!("{}.5", d + i)).unwrap(),
                );
            }
            out.push(Reading {
                device: format!("dev-{d:02}"),
                ts_ms,
                metrics,
            });
        }
    }
    out
}

/// Writes `readings`' fleet parts as the sealer does (each device-hour from its
/// readings, each part of an hour `FleetPart::of` its device-hours), and the watermark.
async fn seal(rollups: &MemoryRollups, readings: &[Reading], watermark: i64) {
    let mut device_hours: BTreeMap<(i64, String), DeviceHour> = BTreeMap::new();
    for (n, r) in readings.iter().enumerate() {
        let hour = store::rollup::hour_of(r.ts_ms);
        device_hours
            .entry((hour, r.device.clone()))
            .or_insert_with(|| DeviceHour::new(&r.device, hour))
            .add(r.ts_ms, &format!("e{n}"), &r.metrics, &BTreeMap::new());
    }
    let mut parts: BTreeMap<(i64, u32), Vec<&DeviceHour>> = BTreeMap::new();
    for ((hour, device), dh) in &device_hours {
        parts.entry((*hour, part_of(device))).or_default().push(dh);
    }
    for ((hour, part), dhs) in parts {
        let fleet = FleetPart::of(hour, part, dhs);
        let item =
            RollupItem::with_body(keys::fleet_part(hour, part), fleet.readings(), &fleet, None)
                .unwrap();
        assert_eq!(rollups.put_if_newer(&item).await.unwrap(), Written::Applied);
    }
    put_watermark(rollups, watermark).await;
}

/// One metric's figures, as the answer writes them (the numbers read as their text).
#[derive(Debug, Deserialize)]
struct CellAnswer {
    count: u64,
    sum: Box<RawValue>,
    min: Box<RawValue>,
    max: Box<RawValue>,
    avg: f64,
}

#[derive(Debug, Deserialize)]
struct BucketAnswer {
    start: String,
    readings: u64,
    devices: u64,
    metrics: BTreeMap<String, CellAnswer>,
}

#[derive(Debug, Deserialize)]
struct StatsAnswer {
    buckets: Vec<BucketAnswer>,
    watermark: Option<String>,
    next_cursor: Option<String>,
}

/// Every bucket of `GET /stats?query`, page after page, with each page's reads.
async fn every_stats_page(
    svc: &Service<'_>,
    rollups: &MemoryRollups,
    query: &str,
) -> (Vec<BucketAnswer>, Vec<u64>, Option<String>) {
    let (mut buckets, mut reads) = (Vec::new(), Vec::new());
    let mut q = query.to_owned();
    for _ in 0..1_000 {
        let before = rollups.reads();
        let (status, body) = get_as(svc, &ReadScope::Every, "/stats", &q).await;
        assert_eq!(status, 200, "{body}");
        reads.push(rollups.reads() - before);
        let page: StatsAnswer = serde_json::from_str(&body).unwrap();
        buckets.extend(page.buckets);
        let Some(cursor) = page.next_cursor else {
            return (buckets, reads, page.watermark);
        };
        q = format!("{query}&cursor={cursor}");
    }
    panic!("the stats never ended");
}

fn exact(raw: &RawValue) -> BigDecimal {
    BigDecimal::from_str(raw.get()).unwrap()
}

/// The expected cells of one bucket, from the readings themselves.
#[derive(Debug, Default)]
struct Expected {
    readings: u64,
    metrics: BTreeMap<String, (u64, BigDecimal, BigDecimal, BigDecimal)>,
    /// Devices of each minute (or hour) of the bucket.
    units: BTreeMap<i64, BTreeSet<String>>,
}

fn expected(readings: &[Reading], interval: i64, unit: i64, end: i64) -> BTreeMap<i64, Expected> {
    let mut out: BTreeMap<i64, Expected> = BTreeMap::new();
    for r in readings.iter().filter(|r| r.ts_ms < end) {
        let e = out
            .entry(r.ts_ms.div_euclid(interval) * interval)
            .or_default();
        e.readings += 1;
        e.units
            .entry(r.ts_ms.div_euclid(unit))
            .or_default()
            .insert(r.device.clone());
        for (name, v) in &r.metrics {
            let v = BigDecimal::from_str(v.as_str()).unwrap();
            let cell = e
                .metrics
                .entry(name.clone())
                .or_insert_with(|| (0, BigDecimal::from(0), v.clone(), v.clone()));
            cell.0 += 1;
            cell.1 += &v;
            if v < cell.2 {
                cell.2 = v.clone();
            }
            if v > cell.3 {
                cell.3 = v;
            }
        }
    }
    out
}

/// The fleet's buckets at 1 m, 5 m, 1 h and 2 h are the merge of the parts: readings,
/// devices (distinct at 1 m and 1 h, the largest minute's or hour's otherwise), and
/// each metric's count, exact sum, min, max and mean, read from the answer's text.
#[tokio::test]
async fn fleet_stats_are_the_merge_of_the_parts() {
    let (table, rollups) = (MemoryReadings::new(None), MemoryRollups::new());
    let svc = service(&table, &rollups, |_| {});
    let readings = readings();
    seal(&rollups, &readings, BASE_MS + 3 * HOUR_MS).await;
    let range = format!("from={BASE_MS}&to={}", BASE_MS + 3 * HOUR_MS);
    for (interval, ms, unit) in [
        ("1m", MINUTE_MS, MINUTE_MS),
        ("5m", 5 * MINUTE_MS, MINUTE_MS),
        ("1h", HOUR_MS, HOUR_MS),
        ("2h", 2 * HOUR_MS, HOUR_MS),
    ] {
        let (buckets, _, watermark) =
            every_stats_page(&svc, &rollups, &format!("{range}&interval={interval}")).await;
        assert_eq!(watermark.as_deref(), Some("2026-06-22T03:00:00.000Z"));
        // A bucket that ends after the watermark is not answered (2h: 02:00 to 04:00).
        let sealed = (BASE_MS + 3 * HOUR_MS).div_euclid(ms) * ms;
        let want = expected(&readings, ms, unit, sealed);
        assert_eq!(
            buckets.len(),
            want.len(),
            "{interval}: empty buckets left out"
        );
        for (b, (start, e)) in buckets.iter().zip(&want) {
            assert_eq!(
                b.start,
                query::model::format_ts(*start).unwrap(),
                "{interval}"
            );
            assert_eq!(b.readings, e.readings, "{interval} {}", b.start);
            let devices = e.units.values().map(BTreeSet::len).max().unwrap() as u64;
            assert_eq!(b.devices, devices, "{interval} {}", b.start);
            assert_eq!(b.metrics.len(), e.metrics.len());
            for (name, (count, sum, min, max)) in &e.metrics {
                let cell = &b.metrics[name];
                assert_eq!(cell.count, *count, "{interval} {} {name}", b.start);
                assert_eq!(exact(&cell.sum), *sum, "{interval} {} {name}", b.start);
                assert_eq!(exact(&cell.min), *min);
                assert_eq!(exact(&cell.max), *max);
                assert_eq!(cell.avg.to_bits(), mean(sum, *count).to_bits());
            }
        }
        // A sum past 38 digits keeps them all.
        if interval == "1h" {
            let digits = buckets[0].metrics["temperature"].sum.get().len();
            assert!(digits > 40, "{}", buckets[0].metrics["temperature"].sum);
        }
    }
    // One metric: only its cells, the readings and devices of every reading.
    let (buckets, _, _) = every_stats_page(
        &svc,
        &rollups,
        &format!("{range}&interval=1h&metric=humidity"),
    )
    .await;
    assert_eq!(buckets.len(), 3);
    for b in &buckets {
        assert_eq!(b.metrics.keys().collect::<Vec<_>>(), ["humidity"]);
        assert_eq!(b.devices, 12);
    }
    let (status, body) = get(&svc, "/stats", &format!("{range}&interval=90s")).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!("bad_interval"))
    );
}

/// Only sealed buckets: none at or after the watermark, nor one that runs past it.
#[tokio::test]
async fn buckets_at_or_after_the_watermark_are_not_answered() {
    let (table, rollups) = (MemoryReadings::new(None), MemoryRollups::new());
    let svc = service(&table, &rollups, |_| {});
    let range = format!("from={BASE_MS}&to={}", BASE_MS + 3 * HOUR_MS);
    // Nothing sealed yet: no bucket, no watermark, no read but the watermark's.
    let (status, body) = get(&svc, "/stats", &format!("{range}&interval=1h")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"buckets": [], "sealed_from": null, "watermark": null, "next_cursor": null})
    );
    // The parts of all three hours are there; only the first is sealed.
    seal(&rollups, &readings(), BASE_MS + HOUR_MS).await;
    for (interval, answered) in [("1m", 60), ("1h", 1), ("2h", 0)] {
        let (buckets, _, watermark) =
            every_stats_page(&svc, &rollups, &format!("{range}&interval={interval}")).await;
        assert_eq!(watermark.as_deref(), Some("2026-06-22T01:00:00.000Z"));
        let last = buckets.last().map(|b| b.start.clone());
        let starts: BTreeSet<String> = buckets.iter().map(|b| b.start.clone()).collect();
        assert!(starts.len() <= answered, "{interval}: {last:?}");
        assert!(
            buckets
                .iter()
                .all(|b| b.start.as_str() < "2026-06-22T01:00:00.000Z"),
            "{interval}: {last:?}"
        );
        assert_eq!(
            buckets.iter().map(|b| b.readings).sum::<u64>(),
            if answered == 0 {
                0
            } else {
                readings()
                    .iter()
                    .filter(|r| r.ts_ms < BASE_MS + HOUR_MS)
                    .count() as u64
            },
            "{interval}"
        );
    }
}

#[tokio::test]
async fn a_scoped_token_is_403_on_fleet_stats_before_any_read() {
    let (table, rollups) = (MemoryReadings::new(None), MemoryRollups::new());
    let svc = service(&table, &rollups, |_| {});
    seal(&rollups, &readings(), BASE_MS + HOUR_MS).await;
    let before = rollups.reads();
    let query = format!("from={BASE_MS}&to={}&interval=1h", BASE_MS + HOUR_MS);
    for claim in ["dev-*", "dev-00 dev-01", "d*"] {
        let (status, body) = get_as(&svc, &scope(claim), "/stats", &query).await;
        assert_eq!(status, 403, "{claim}: {body}");
        assert!(body.contains("forbidden"), "{body}");
    }
    assert_eq!(rollups.reads(), before);
    let (status, _) = get_as(&svc, &scope("dev-00 *"), "/stats", &query).await;
    assert_eq!(status, 200);
}

/// A 31-day range (744 hourly partitions): every page within the request's budgets,
/// the default ones and shrunk ones, and every bucket answered once across the pages.
#[tokio::test]
async fn fleet_stats_budgets_hold_on_a_31_day_range() {
    let (table, rollups) = (MemoryReadings::new(None), MemoryRollups::new());
    let days = 31;
    let month: Vec<Reading> = (0..days * 24)
        .flat_map(|h| {
            (0..3).map(move |d| Reading {
                device: format!("dev-{d}"),
                ts_ms: BASE_MS + h * HOUR_MS + d * MINUTE_MS,
                metrics: BTreeMap::from([("t".to_owned(), Decimal::parse("1.5").unwrap())]),
            })
        })
        .collect();
    seal(&rollups, &month, BASE_MS + days * 24 * HOUR_MS).await;
    let range = format!("from={BASE_MS}&to={}", BASE_MS + days * 24 * HOUR_MS);
    for (queries, interval, buckets_expected) in [
        (2_000, "1h", days * 24),
        (2_000, "1m", days * 24 * 3),
        (2_000, "1d", days),
        (25, "1h", days * 24),
        (25, "1d", days),
    ] {
        let svc = service(&table, &rollups, |c| c.budget.queries = queries);
        let (buckets, reads, _) =
            every_stats_page(&svc, &rollups, &format!("{range}&interval={interval}")).await;
        let starts: BTreeSet<&String> = buckets.iter().map(|b| &b.start).collect();
        assert_eq!(
            starts.len(),
            buckets.len(),
            "{interval}: a bucket answered twice"
        );
        assert_eq!(
            buckets.len() as i64,
            buckets_expected,
            "{queries} {interval}"
        );
        assert_eq!(
            buckets.iter().map(|b| b.readings).sum::<u64>(),
            month.len() as u64
        );
        let most = (query::service::FLEET_PAGE_HOURS as u64 + 1).min(queries);
        assert!(
            reads.iter().all(|&r| r <= most),
            "{queries} {interval}: {reads:?}"
        );
        if queries == 2_000 && interval == "1h" {
            assert_eq!(reads.len(), 5, "a week a page: {reads:?}");
        }
    }
    // A day at 1 m: one page, a Query an hour and the watermark's GetItem.
    let svc = service(&table, &rollups, |_| {});
    let day = format!("from={BASE_MS}&to={}&interval=1m", BASE_MS + 24 * HOUR_MS);
    let (buckets, reads, _) = every_stats_page(&svc, &rollups, &day).await;
    assert_eq!((buckets.len(), reads), (24 * 3, vec![25]));
}

/// `GET /devices` and `GET /stats` through the Lambda adapter, the JWT authorizer's
/// claims in the request context, as API Gateway hands them over; each answer valid
/// against its schema in `openapi.yaml`.
#[tokio::test]
async fn through_the_lambda_adapter_a_scoped_token_lists_its_devices_and_not_the_fleet() {
    let (table, rollups) = (MemoryReadings::new(None), MemoryRollups::new());
    let svc = service(&table, &rollups, |c| c.scope_claim = Some(CLAIM.to_owned()));
    for d in ["site-a-1", "site-a-2", "site-b-1"] {
        put_device(&rollups, d, BASE_MS).await;
    }
    seal(&rollups, &readings(), BASE_MS + 2 * HOUR_MS).await;
    let stats = format!("from={BASE_MS}&to={}&interval=5m", BASE_MS + 3 * HOUR_MS);
    let call = |path: &'static str, query: String, claim: &'static str| {
        let svc = &svc;
        async move {
            let resp = handle_apigw(svc, apigw_request(path, &query, claim))
                .await
                .unwrap();
            let body = match resp.body() {
                lambda_http::Body::Text(t) => serde_json::from_str::<Value>(t).unwrap(),
                other => panic!("unexpected body {other:?}"),
            };
            (resp.status().as_u16(), body)
        }
    };
    let (status, body) = call("/devices", "limit=1".into(), "site-a-*").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(ids(&body), ["site-a-1"]);
    valid(&body, "/devices", 200);
    let cursor = body["next_cursor"].as_str().unwrap();
    let (_, body) = call("/devices", format!("limit=1&cursor={cursor}"), "site-a-*").await;
    assert_eq!(ids(&body), ["site-a-2"]);
    let (status, body) = call("/stats", stats.clone(), "site-a-*").await;
    assert_eq!(status, 403, "{body}");
    valid(&body, "/stats", 403);
    let (status, body) = call("/stats", stats.clone(), "*").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["buckets"].as_array().unwrap().len(), 24);
    valid(&body, "/stats", 200);
    let (status, body) = call("/devices", String::new(), "").await;
    assert_eq!(status, 403, "{body}");
}

/// `GET path?query` as API Gateway (HTTP API, payload 2.0) hands it over, with a JWT
/// whose device claim is `claim`.
fn apigw_request(path: &str, query: &str, claim: &str) -> lambda_http::Request {
    let mut event: Value =
        serde_json::from_str(include_str!("../../../events/apigw-all-readings.json")).unwrap();
    event["rawPath"] = json!(path);
    event["requestContext"]["http"]["path"] = json!(path);
    event["rawQueryString"] = json!(query);
    event["queryStringParameters"] = json!({});
    event["requestContext"]["authorizer"] = json!({
        "jwt": { "claims": { "sub": "user-1", CLAIM: claim }, "scopes": ["shardline/read"] }
    });
    lambda_http::request::from_str(&event.to_string()).unwrap()
}

/// `body` against `openapi.yaml`'s schema of `template`'s answer with `status`.
fn valid(body: &Value, template: &str, status: u16) {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../openapi.yaml");
    let doc: Value = yaml_serde::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut response = &doc["paths"][template]["get"]["responses"][status.to_string()];
    if let Some(reference) = response.get("$ref").and_then(Value::as_str) {
        response = doc.pointer(reference.strip_prefix('#').unwrap()).unwrap();
    }
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "allOf": [response.pointer("/content/application~1json/schema").unwrap()],
        "components": doc["components"],
    });
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(body).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{template} {status}: {errors:?}\n{body}");
}

/// Scenario 60, the query's side: an hour before the first sealed one holds a part of
/// one device (as a late reading into it leaves), and every other device's readings.
/// `GET /stats` and `GET /series` answer no bucket that starts before the first sealed
/// hour (nor one across it), never that part as the hour's fleet; they say where the
/// sealed hours start (`sealed_from`), and a range wholly before it is an empty answer
/// after the watermark's read alone.
#[tokio::test]
async fn s60_the_fleet_routes_answer_no_bucket_before_the_first_sealed_hour() {
    let (table, rollups) = (MemoryReadings::new(None), MemoryRollups::new());
    let svc = service(&table, &rollups, |_| {});
    let first_sealed = BASE_MS + HOUR_MS;
    let partial: Vec<Reading> = readings()
        .into_iter()
        .filter(|r| r.ts_ms >= first_sealed || r.device == "dev-03")
        .collect();
    seal(&rollups, &partial, BASE_MS + 3 * HOUR_MS).await;
    put_span(&rollups, first_sealed, BASE_MS + 3 * HOUR_MS).await;
    let range = format!("from={BASE_MS}&to={}", BASE_MS + 3 * HOUR_MS);
    let from_text = query::model::format_ts(first_sealed).unwrap();
    for (interval, ms, want) in [
        ("1m", MINUTE_MS, 120),
        ("5m", 5 * MINUTE_MS, 24),
        ("1h", HOUR_MS, 2),
        // [0 h, 2 h) runs across the first sealed hour, [2 h, 4 h) past the watermark.
        ("2h", 2 * HOUR_MS, 0),
    ] {
        let (buckets, _, watermark) =
            every_stats_page(&svc, &rollups, &format!("{range}&interval={interval}")).await;
        assert_eq!(watermark.as_deref(), Some("2026-06-22T03:00:00.000Z"));
        assert_eq!(buckets.len(), want, "{interval}");
        assert!(
            buckets.iter().all(|b| b.start >= from_text),
            "{interval}: a bucket before the first sealed hour"
        );
        let sealed = expected(&partial, ms, ms, BASE_MS + 3 * HOUR_MS);
        for b in &buckets {
            let start = chrono::DateTime::parse_from_rfc3339(&b.start)
                .unwrap()
                .timestamp_millis();
            assert_eq!(
                b.readings, sealed[&start].readings,
                "{interval} {}",
                b.start
            );
        }
        let (status, body) = get(&svc, "/stats", &format!("{range}&interval={interval}")).await;
        assert_eq!(status, 200);
        assert_eq!(body["sealed_from"], json!(from_text), "{body}");
    }
    // A range wholly before it: no bucket, the sealed hours named, one read.
    let before = rollups.reads();
    let q = format!("from={BASE_MS}&to={first_sealed}&interval=1m");
    let (status, body) = get(&svc, "/stats", &q).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({
            "buckets": [],
            "sealed_from": from_text,
            "watermark": "2026-06-22T03:00:00.000Z",
            "next_cursor": null
        })
    );
    assert_eq!(rollups.reads() - before, 1, "the watermark alone");
    // The fleet's series: the same buckets as points.
    for (interval_ms, want) in [(MINUTE_MS, 120), (HOUR_MS, 2), (2 * HOUR_MS, 0)] {
        let q = format!("metric=temperature&agg=count&interval_ms={interval_ms}&{range}");
        let (status, body) = get(&svc, "/series", &q).await;
        assert_eq!(status, 200, "{body}");
        let points = body["points"].as_array().unwrap();
        assert_eq!(points.len(), want, "{interval_ms}: {body}");
        assert!(
            points
                .iter()
                .all(|p| p[0].as_i64().unwrap() >= first_sealed),
            "{interval_ms}: a point before the first sealed hour"
        );
        assert_eq!(body["sealed_from"], json!(from_text));
        crate::series::valid(&body, "/series", 200);
    }
}

/// The compaction progress `[from_ms, to_ms)`, as the sealer's compaction writes it.
async fn put_compacted(rollups: &MemoryRollups, from_ms: i64, to_ms: i64) {
    let progress = store::rollup::compaction::Compacted { from_ms, to_ms };
    rollups.put(&progress.item().unwrap()).await.unwrap();
}

/// Writes the fresh minutes of `readings` (`store::rollup::fresh`) as compaction does,
/// one for each minute of `minutes` (epoch ms of their starts), of no reading too.
async fn put_fresh(rollups: &MemoryRollups, readings: &[Reading], minutes: &[i64]) {
    for &start in minutes {
        let mut cells = store::rollup::Cells::default();
        let mut devices = BTreeSet::new();
        for r in readings
            .iter()
            .filter(|r| (start..start + MINUTE_MS).contains(&r.ts_ms))
        {
            cells.add_reading(&r.metrics);
            devices.insert(r.device.clone());
        }
        cells.devices = devices.len() as u64;
        let minute = store::rollup::fresh::FreshMinute {
            start_ms: start,
            cells,
        };
        rollups.put(&minute.item(None).unwrap()).await.unwrap();
    }
}

/// The fleet's minutes fresh, the query's side: after the watermark, `GET /stats` and
/// `GET /series` answer the fresh minutes compaction wrote, from the watermark up to
/// the first minute without one (`fresh_to` says where), each bucket the readings of
/// its minutes; an hour of fresh minutes is never answered as a sealed hour (its
/// devices are its busiest minute's); before the watermark the sealed parts answer
/// alone, whatever fresh minutes an hour still has.
#[tokio::test]
async fn the_fleet_routes_answer_fresh_minutes_after_the_watermark_up_to_the_first_gap() {
    let (table, rollups) = (MemoryReadings::new(None), MemoryRollups::new());
    let svc = slab_service(&table, &rollups);
    let readings = readings();
    let sealed_end = BASE_MS + HOUR_MS;
    seal(&rollups, &readings, sealed_end).await;
    // The second hour whole in fresh minutes, the third's first 30, then a gap at
    // minute 30 and one more after it; a stale fresh minute in the sealed hour, with
    // no reading, which the sealed parts outrank.
    let mut minutes: Vec<i64> = (60..150).map(|m| BASE_MS + m * MINUTE_MS).collect();
    minutes.push(BASE_MS + 151 * MINUTE_MS);
    put_fresh(&rollups, &readings, &minutes).await;
    put_compacted(&rollups, sealed_end, BASE_MS + 152 * MINUTE_MS).await;
    put_fresh(&rollups, &[], &[BASE_MS + 5 * MINUTE_MS]).await;
    let fresh_end = BASE_MS + 150 * MINUTE_MS;
    let range = format!("from={BASE_MS}&to={}", BASE_MS + 3 * HOUR_MS);
    for (interval, ms, unit, want) in [
        ("1m", MINUTE_MS, MINUTE_MS, 150),
        ("5m", 5 * MINUTE_MS, MINUTE_MS, 30),
        // The sealed hour by its hour's devices, the fresh one by its busiest minute's.
        ("1h", HOUR_MS, HOUR_MS, 2),
        ("2h", 2 * HOUR_MS, HOUR_MS, 1),
    ] {
        let q = format!("{range}&interval={interval}");
        let (status, body) = get(&svc, "/stats", &q).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["watermark"], json!("2026-06-22T01:00:00.000Z"));
        assert_eq!(
            (&body["fresh_from"], &body["fresh_to"]),
            (
                &json!("2026-06-22T01:00:00.000Z"),
                &json!("2026-06-22T02:30:00.000Z")
            ),
            "{body}"
        );
        let (buckets, _, _) = every_stats_page(&svc, &rollups, &q).await;
        let want_cells = expected(&readings, ms, unit, fresh_end.div_euclid(ms) * ms);
        let with_readings = want_cells.len().min(want);
        assert_eq!(buckets.len(), with_readings, "{interval}");
        for b in &buckets {
            let start = chrono::DateTime::parse_from_rfc3339(&b.start)
                .unwrap()
                .timestamp_millis();
            let e = &want_cells[&start];
            assert_eq!(b.readings, e.readings, "{interval} {}", b.start);
            let minute_devices = |at: i64| {
                expected(&readings, ms, MINUTE_MS, fresh_end)[&at]
                    .units
                    .values()
                    .map(BTreeSet::len)
                    .max()
                    .unwrap() as u64
            };
            let devices = if start >= sealed_end {
                minute_devices(start)
            } else {
                e.units.values().map(BTreeSet::len).max().unwrap() as u64
            };
            assert_eq!(b.devices, devices, "{interval} {}", b.start);
            for (name, (count, sum, min, max)) in &e.metrics {
                let cell = &b.metrics[name];
                assert_eq!(cell.count, *count, "{interval} {} {name}", b.start);
                assert_eq!(exact(&cell.sum), *sum, "{interval} {} {name}", b.start);
                assert_eq!(
                    (exact(&cell.min), exact(&cell.max)),
                    (min.clone(), max.clone())
                );
            }
        }
        assert!(
            buckets
                .iter()
                .all(|b| b.start.as_str() < "2026-06-22T02:30:00.000Z"),
            "{interval}: a bucket past the first gap"
        );
    }
    // The fleet's series: the same minutes as points, and where they end.
    let q = format!("metric=temperature&agg=count&interval_ms=60000&{range}");
    let (status, body) = get(&svc, "/series", &q).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["fresh_to"],
        json!("2026-06-22T02:30:00.000Z"),
        "{body}"
    );
    let points = body["points"].as_array().unwrap();
    let want = expected(&readings, MINUTE_MS, MINUTE_MS, fresh_end);
    let counted: Vec<(i64, u64)> = want
        .iter()
        .filter_map(|(start, e)| Some((*start, e.metrics.get("temperature")?.0)))
        .collect();
    let answered: Vec<(i64, u64)> = points
        .iter()
        .map(|p| (p[0].as_i64().unwrap(), p[1].as_u64().unwrap()))
        .collect();
    assert_eq!(answered, counted);
}

/// The fleet's minutes fresh before the first hour is sealed: from the compaction's
/// first window on.
#[tokio::test]
async fn before_any_seal_the_fresh_minutes_start_at_the_first_compacted_window() {
    let (table, rollups) = (MemoryReadings::new(None), MemoryRollups::new());
    let svc = slab_service(&table, &rollups);
    let readings = readings();
    let sealed_end = BASE_MS + HOUR_MS;
    let fresh_end = BASE_MS + 150 * MINUTE_MS;
    let minutes: Vec<i64> = (60..150).map(|m| BASE_MS + m * MINUTE_MS).collect();
    let range = format!("from={BASE_MS}&to={}", BASE_MS + 3 * HOUR_MS);
    put_compacted(&rollups, sealed_end, fresh_end).await;
    put_fresh(&rollups, &readings, &minutes).await;
    let (status, body) = get(&svc, "/stats", &format!("{range}&interval=1h")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (&body["sealed_from"], &body["watermark"], &body["fresh_to"]),
        (
            &json!(null),
            &json!(null),
            &json!("2026-06-22T02:30:00.000Z")
        )
    );
    let hour = readings
        .iter()
        .filter(|r| (sealed_end..sealed_end + HOUR_MS).contains(&r.ts_ms))
        .count() as u64;
    assert_eq!(body["buckets"][0]["readings"], json!(hour), "{body}");
    // Sealed to the hour, slabs from ten minutes after it: the fresh minutes start
    // there, and the minutes between are not answered; without a compaction progress
    // (no slabs) there is no fresh minute at all.
    let rollups = MemoryRollups::new();
    let svc = slab_service(&table, &rollups);
    seal(&rollups, &readings, sealed_end).await;
    let slabs_from = sealed_end + 10 * MINUTE_MS;
    put_fresh(&rollups, &readings, &minutes).await;
    let q = format!("{range}&interval=1m");
    let (_, body) = get(&svc, "/stats", &q).await;
    assert_eq!(
        (&body["fresh_from"], &body["fresh_to"]),
        (&json!(null), &json!(null))
    );
    put_compacted(&rollups, slabs_from, fresh_end).await;
    let (status, body) = get(&svc, "/stats", &q).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["fresh_from"],
        json!("2026-06-22T01:10:00.000Z"),
        "{body}"
    );
    let (buckets, _, _) = every_stats_page(&svc, &rollups, &q).await;
    let starts: Vec<i64> = buckets
        .iter()
        .map(|b| {
            chrono::DateTime::parse_from_rfc3339(&b.start)
                .unwrap()
                .timestamp_millis()
        })
        .collect();
    let outside = |&s: &i64| s < sealed_end || s >= slabs_from;
    assert!(starts.iter().all(outside), "{starts:?}");
    assert!(starts.iter().any(|&s| s >= slabs_from), "{starts:?}");
    // A table without slabs in its layout reads no progress and no fresh minute.
    let svc = service(&table, &rollups, |_| {});
    let before = rollups.reads();
    let (_, body) = get(&svc, "/stats", &q).await;
    assert_eq!(body["fresh_to"], json!(null), "{body}");
    assert_eq!(
        rollups.reads() - before,
        2,
        "the watermark and the sealed hour"
    );
}

/// A service over `rollups` whose table has slabs from the fixtures' first hour on.
fn slab_service<'a>(table: &'a MemoryReadings, rollups: &MemoryRollups) -> Service<'a> {
    let slabs = hourly(4).with_slabs(sharding::slab::SlabLayout::default());
    let layout = table_history(vec![(0, hourly(4)), (BASE_MS, slabs)]);
    let shards = shard_table(layout, []);
    let mut config = ServiceConfig::new(key());
    config.concurrency = 4;
    QueryService::new(table, Arc::new(shards), config).with_rollups(rollups.clone())
}

/// Every device of `GET /devices?query`, page after page: id to last seen (epoch ms),
/// and the first page's `fresh_to`.
async fn every_device_seen(svc: &Service<'_>, query: &str) -> (BTreeMap<String, i64>, Value) {
    let mut out = BTreeMap::new();
    let mut q = query.to_owned();
    let mut fresh_to = None;
    for _ in 0..1_000 {
        let (status, body) = get(svc, "/devices", &q).await;
        assert_eq!(status, 200, "{body}");
        fresh_to.get_or_insert_with(|| body["fresh_to"].clone());
        for d in body["devices"].as_array().unwrap() {
            let seen = chrono::DateTime::parse_from_rfc3339(d["last_seen"].as_str().unwrap())
                .unwrap()
                .timestamp_millis();
            let id = d["device_id"].as_str().unwrap().to_owned();
            assert!(out.insert(id, seen).is_none(), "a device listed twice");
        }
        match body["next_cursor"].as_str() {
            Some(cursor) => q = format!("{query}&cursor={cursor}"),
            None => return (out, fresh_to.unwrap_or(Value::Null)),
        }
    }
    panic!("the list never ended");
}

/// The fleet's fresh last-seen, the device list's side: where the layout has slabs and
/// compaction has passed the watermark, a device's `last_seen` is its newest slab-held
/// reading in the latest compacted window's map of each hour since, when later than the
/// directory's, on every page across the map's chunks; `seen_since` selects by it; the
/// page says how far the maps reach (`fresh_to`). An older window's map is not read
/// (the latest holds the hour so far), and a table without slabs reads no map.
#[tokio::test]
async fn the_device_list_moves_last_seen_to_the_fresh_maps() {
    let (table, rollups) = (MemoryReadings::new(None), MemoryRollups::new());
    let sealed_seen = BASE_MS + 30 * MINUTE_MS;
    let devices: Vec<String> = (0..800).map(|d| format!("dev-{d:04}")).collect();
    for device in &devices {
        put_device(&rollups, device, sealed_seen).await;
    }
    let sealed_end = BASE_MS + HOUR_MS;
    put_watermark(&rollups, sealed_end).await;
    put_compacted(&rollups, sealed_end, sealed_end + 20 * MINUTE_MS).await;
    // The latest compacted window (minute 19 of the hour) maps the even devices; an
    // older window maps every device later still, as no compaction writes it.
    let latest = sealed_end + 19 * MINUTE_MS;
    let fresh: BTreeMap<String, i64> = devices
        .iter()
        .enumerate()
        .filter(|(d, _)| d % 2 == 0)
        .map(|(d, id)| (id.clone(), latest + i64::try_from(d).unwrap()))
        .collect();
    let stale: BTreeMap<String, i64> = devices
        .iter()
        .map(|id| (id.clone(), latest + 50_000))
        .collect();
    for (window, map) in [(latest, &fresh), (sealed_end + 5 * MINUTE_MS, &stale)] {
        let chunks = store::rollup::seen::chunks(window, map);
        assert!(chunks.len() >= 2 || window != latest, "{}", chunks.len());
        for chunk in chunks {
            rollups.put(&chunk.item(None).unwrap()).await.unwrap();
        }
    }
    let svc = slab_service(&table, &rollups);
    let (seen, fresh_to) = every_device_seen(&svc, "limit=100").await;
    assert_eq!(fresh_to, json!("2026-06-22T01:20:00.000Z"));
    assert_eq!(seen.len(), devices.len());
    for (id, at) in &seen {
        let want = fresh.get(id).copied().unwrap_or(sealed_seen);
        assert_eq!(*at, want, "{id}");
    }
    // Seen since the watermark: the even devices alone.
    let (since, _) = every_device_seen(&svc, &format!("limit=100&seen_since={sealed_end}")).await;
    assert_eq!(
        since.keys().collect::<Vec<_>>(),
        fresh.keys().collect::<Vec<_>>()
    );
    // A scoped caller's granted ids move too.
    let (status, body) = get_as(&svc, &scope("dev-0002 dev-0003"), "/devices", "").await;
    assert_eq!(status, 200, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    let listed: Vec<&str> = body["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["last_seen"].as_str().unwrap())
        .collect();
    assert_eq!(
        listed,
        [
            query::model::format_ts(latest + 2).unwrap().as_str(),
            query::model::format_ts(sealed_seen).unwrap().as_str()
        ]
    );
    // The same table without slabs in its layout: the directory alone, no map read.
    let svc = service(&table, &rollups, |_| {});
    let before = rollups.reads();
    let (seen, fresh_to) = every_device_seen(&svc, "limit=800").await;
    assert_eq!(fresh_to, Value::Null);
    assert!(seen.values().all(|&at| at == sealed_seen));
    assert_eq!(
        rollups.reads() - before,
        1 + 8,
        "the watermark and the directory's pages of 100, no progress nor map"
    );
}
