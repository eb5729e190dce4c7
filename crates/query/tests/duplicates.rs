//! The read side of a reading stored twice: a reading stored under two partition keys (written under
//! fan-out 1, then redelivered after a raise and keyed under fan-out 4) appears exactly
//! once in every answer: whole ranges, every page and cursor resume in both orders,
//! the every-device route with and without the time index, and every stats bucket.
//! A single-reading lookup finds a reading under whichever of its keys holds it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use query::model::format_ts;
use query::service::DEFAULT_STATS_WINDOW;
use query::{QueryService, ServiceConfig};
use sharding::key::{ReadingRef, key_for_layout};
use sharding::layout::Layout;
use store::item::{Reading, ReadingItem};

use crate::common::{
    BASE_MS, Service, fanout_history, get, hourly, key, nz, service_with, shard_table,
    table_history, ts,
};
use store::memory::{MemoryReadings, MemoryShards};

const HOT: &str = "hot-1";
const COLD: &str = "cold-1";
/// Two hours of readings.
const TO_MS: i64 = BASE_MS + 2 * 3_600_000;

/// Which fan-outs' keys a reading is stored under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stored {
    /// Under the k = 1 key and the k = 4 key: written, then redelivered after a raise.
    Both,
    /// Under the k = 1 key only (a writer with an older view).
    Cold,
    /// Under the k = 4 key only.
    Raised,
}

/// One reading the answers must show once: (ts_ms, device, event id, value).
type Expected = (i64, String, String, f64);

struct Fixture {
    table: MemoryReadings,
    shards: Arc<MemoryShards>,
    /// Every distinct reading, in (time, device, event id) order.
    readings: Vec<Expected>,
    /// Readings whose two copies sit under two different partition keys.
    stored_twice: usize,
}

/// `hot-1`, raised to k = 4 before the range, with 90 readings over two hours (some
/// pairs sharing a millisecond), a third stored under both k = 1 and k = 4 keys; and
/// `cold-1` (never raised) with 30 readings, for the every-device route.
fn fixture(layout: Layout) -> Fixture {
    let table = MemoryReadings::new(None);
    let shards = shard_table(
        table_history(vec![(0, layout)]),
        [(
            HOT.to_string(),
            fanout_history(vec![(BASE_MS - 7_200_000, 4)]),
        )],
    );
    let mut readings = Vec::new();
    let mut stored_twice = 0;
    for i in 0..90i64 {
        // Every fifth reading shares the millisecond of the one before it.
        let ts_ms = BASE_MS + (i - i64::from(i % 5 == 4)) * 80_000 + 7;
        let stored = match i % 3 {
            0 => Stored::Both,
            1 => Stored::Cold,
            _ => Stored::Raised,
        };
        let pks = store(&table, &shards, HOT, &format!("e{i:03}"), ts_ms, i, stored);
        stored_twice += usize::from(pks.len() == 2);
        readings.push((ts_ms, HOT.to_string(), format!("e{i:03}"), i as f64));
    }
    for i in 0..30i64 {
        let ts_ms = BASE_MS + i * 240_000 + 7;
        store(
            &table,
            &shards,
            COLD,
            &format!("c{i:03}"),
            ts_ms,
            i,
            Stored::Cold,
        );
        readings.push((ts_ms, COLD.to_string(), format!("c{i:03}"), i as f64));
    }
    readings.sort_by(|a, b| (a.0, &a.1, &a.2).cmp(&(b.0, &b.1, &b.2)));
    Fixture {
        table,
        shards: Arc::new(shards),
        readings,
        stored_twice,
    }
}

/// Puts one reading under the keys `stored` names; returns the distinct PKs used.
fn store(
    table: &MemoryReadings,
    shards: &MemoryShards,
    device: &str,
    event: &str,
    ts_ms: i64,
    value: i64,
    stored: Stored,
) -> BTreeSet<String> {
    let history = shards.layout().unwrap();
    let layout = history.at(ts(ts_ms));
    let reading = Reading {
        device_id: device.into(),
        event_id: event.into(),
        ts: ts(ts_ms),
        metrics: BTreeMap::from([(
            "temperature".to_string(),
            store::Decimal::from_f64(value as f64).expect("a number"),
        )]),
        tags: BTreeMap::new(),
        written: store::WriteOrder::OLDEST,
    };
    let fanouts: &[u32] = match stored {
        Stored::Both => &[1, 4],
        Stored::Cold => &[1],
        Stored::Raised => &[4],
    };
    let mut pks = BTreeSet::new();
    for &k in fanouts {
        let r = ReadingRef::new(device, event, reading.ts);
        let item_key = key_for_layout(&r, layout, Some(k)).unwrap();
        pks.insert(item_key.pk.clone());
        table.put(ReadingItem::new(
            &reading,
            item_key,
            Duration::from_secs(86_400 * 3650),
        ));
    }
    pks
}

/// The layouts a device's reads run under: hour buckets (cold key vs sub-shards) and
/// random suffixes (`hot-1#0` vs `hot-1#r`).
fn layouts() -> [Layout; 2] {
    [hourly(2), Layout::random(nz(1))]
}

fn svc<'a>(f: &'a Fixture, time_index: Option<&str>) -> Service<'a> {
    service_with(&f.table, f.shards.clone(), time_index)
}

/// The readings of `device` (every device: `None`) in the order asked.
fn expected(f: &Fixture, device: Option<&str>, desc: bool) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = f
        .readings
        .iter()
        .filter(|r| device.is_none_or(|d| r.1 == d))
        .map(|r| (r.1.clone(), r.2.clone()))
        .collect();
    if desc {
        out.reverse();
    }
    out
}

fn ids(body: &serde_json::Value) -> Vec<(String, String)> {
    body["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            (
                i["device_id"].as_str().unwrap().to_string(),
                i["event_id"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Follows cursors from the first page; every page but a lone first one holds at
/// least one reading (a page holding only a copy of the last one would be empty).
async fn paged(svc: &Service<'_>, base: &str) -> Vec<(String, String)> {
    let mut got = Vec::new();
    let mut cursor = String::new();
    for page in 0.. {
        let (status, body) = get(svc, &format!("{base}{cursor}")).await;
        assert_eq!(status, 200, "{body}");
        let items = ids(&body);
        assert!(
            page == 0 || !items.is_empty(),
            "empty page {page} of {base}"
        );
        got.extend(items);
        match body["next_cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => break,
        }
    }
    got
}

#[test]
fn the_fixture_stores_readings_twice() {
    for layout in layouts() {
        let f = fixture(layout.clone());
        // `random` with k = 1 and k = 4 shares the key `hot-1#0` for a quarter of them.
        assert!(f.stored_twice >= 15, "{layout:?}: {}", f.stored_twice);
    }
}

#[tokio::test]
async fn a_range_answer_shows_each_reading_once() {
    for layout in layouts() {
        let f = fixture(layout.clone());
        let svc = svc(&f, None);
        for desc in [false, true] {
            let order = if desc { "desc" } else { "asc" };
            let (status, body) = get(
                &svc,
                &format!(
                    "/devices/{HOT}/readings?from={BASE_MS}&to={TO_MS}&limit=1000&order={order}"
                ),
            )
            .await;
            assert_eq!(status, 200, "{body}");
            assert_eq!(
                ids(&body),
                expected(&f, Some(HOT), desc),
                "{layout:?} {order}"
            );
            assert!(body["next_cursor"].is_null());
        }
    }
}

#[tokio::test]
async fn pages_and_cursor_resumes_show_each_reading_once() {
    for layout in layouts() {
        let f = fixture(layout.clone());
        let svc = svc(&f, None);
        for desc in [false, true] {
            let order = if desc { "desc" } else { "asc" };
            // Every limit up to 7 puts page boundaries on readings stored twice.
            for limit in 1..=7 {
                let base = format!(
                    "/devices/{HOT}/readings?from={BASE_MS}&to={TO_MS}&limit={limit}&order={order}"
                );
                let got = paged(&svc, &base).await;
                assert_eq!(
                    got,
                    expected(&f, Some(HOT), desc),
                    "{layout:?} {order} limit {limit}"
                );
            }
        }
    }
}

#[tokio::test]
async fn a_page_ending_on_the_last_reading_has_no_next_page() {
    // As many readings as the limit, the last one (e012, alone at its millisecond)
    // stored under both keys: its copy is all that follows it, so no next page.
    let f = fixture(hourly(2));
    let svc = svc(&f, None);
    let hot: Vec<&Expected> = f.readings.iter().filter(|r| r.1 == HOT).collect();
    let n = hot.iter().position(|r| r.2 == "e012").expect("e012") + 1;
    let to = hot[n - 1].0 + 1;
    assert_eq!(hot[n].0, to - 1 + 80_000, "e013 is outside the range");
    for order in ["asc", "desc"] {
        let (status, body) = get(
            &svc,
            &format!("/devices/{HOT}/readings?from={BASE_MS}&to={to}&limit={n}&order={order}"),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(ids(&body).len(), n, "{body}");
        assert!(body["next_cursor"].is_null(), "{order}: {body}");
    }
}

#[tokio::test]
async fn every_device_shows_each_reading_once_with_and_without_the_time_index() {
    let f = fixture(hourly(2));
    for index in [None, Some("by-time")] {
        let svc = svc(&f, index);
        for desc in [false, true] {
            let order = if desc { "desc" } else { "asc" };
            for limit in [1, 4, 7, 500] {
                let base =
                    format!("/readings?from={BASE_MS}&to={TO_MS}&limit={limit}&order={order}");
                let got = paged(&svc, &base).await;
                assert_eq!(
                    got,
                    expected(&f, None, desc),
                    "index {index:?} {order} limit {limit}"
                );
            }
        }
    }
}

#[tokio::test]
async fn stats_count_each_reading_once() {
    for layout in layouts() {
        let f = fixture(layout.clone());
        // A window of 3 makes the stats read emit and drop copies across many rounds.
        for window in [3, DEFAULT_STATS_WINDOW] {
            let mut config = ServiceConfig::new(key());
            config.concurrency = 4;
            config.stats_window = window;
            let svc = QueryService::new(&f.table, f.shards.clone(), config);
            let (status, body) = get(
                &svc,
                &format!(
                    "/devices/{HOT}/stats?from={BASE_MS}&to={TO_MS}&interval=30m&metric=temperature"
                ),
            )
            .await;
            assert_eq!(status, 200, "{body}");
            let mut buckets: BTreeMap<i64, (u64, f64, f64, f64)> = BTreeMap::new();
            for r in f.readings.iter().filter(|r| r.1 == HOT) {
                let b = buckets
                    .entry(r.0.div_euclid(1_800_000) * 1_800_000)
                    .or_insert((0, f64::INFINITY, f64::NEG_INFINITY, 0.0));
                *b = (b.0 + 1, b.1.min(r.3), b.2.max(r.3), b.3 + r.3);
            }
            // The numbers compared as doubles: these values are small integers, which
            // the answer writes exactly, without a fraction.
            let want: Vec<_> = buckets
                .into_iter()
                .map(|(start, (count, min, max, sum))| {
                    let start = format_ts(start).unwrap();
                    (start, count, min, max, sum, sum / count as f64)
                })
                .collect();
            let got: Vec<_> = body["buckets"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| {
                    let n = |k: &str| b[k].as_f64().unwrap();
                    let start = b["start"].as_str().unwrap().to_owned();
                    let count = b["count"].as_u64().unwrap();
                    (start, count, n("min"), n("max"), n("sum"), n("avg"))
                })
                .collect();
            assert_eq!(got, want, "{layout:?} window {window}");
        }
    }
}

#[tokio::test]
async fn a_reading_is_found_under_whichever_key_holds_it() {
    for layout in layouts() {
        let f = fixture(layout.clone());
        let svc = svc(&f, None);
        for (ts_ms, device, event, value) in &f.readings {
            let at = format_ts(*ts_ms).unwrap();
            let (status, body) =
                get(&svc, &format!("/devices/{device}/readings/{event}?ts={at}")).await;
            assert_eq!(status, 200, "{layout:?} {device} {event}: {body}");
            assert_eq!(body["event_id"], event.as_str());
            assert_eq!(body["metrics"]["temperature"], *value);
        }
        let at = format_ts(BASE_MS + 7).unwrap();
        let (status, body) = get(&svc, &format!("/devices/{HOT}/readings/nope?ts={at}")).await;
        assert_eq!(status, 404, "{body}");
    }
}
