//! The read side of blocks: where the table's layout packs a device's readings into
//! blocks (one item holding readings of up to a window `W` after its first member's),
//! every answer shows each reading written exactly once, whatever page, cursor, order
//! or route reads it, ranges that start inside a block included; a reading stored
//! alone and in blocks shows once; stats count it once; a point read finds a reading
//! inside a block; a page a budget ends resumes exactly. The same holds on a table
//! whose history switches from one item a reading to blocks inside the range.

use std::sync::Arc;

use query::budget::RequestBudget;
use query::{QueryService, ServiceConfig};
use sharding::block::BlockLayout;
use sharding::layout::Layout;
use store::memory::{MemoryReadings, MemoryShards};

use crate::common::{
    BASE_MS, R, Service, fanout_history, get, hourly, key, load, load_blocks, put_block,
    service_with, shard_table, table_history,
};

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;
const W: i64 = MINUTE;
/// Two hours and a bit: three hour buckets.
const TO_MS: i64 = BASE_MS + 2 * HOUR + 10 * MINUTE;
const DEVICES: [&str; 3] = ["dev-1", "dev-2", "dev-3"];

fn with_blocks(layout: Layout) -> Layout {
    layout.with_blocks(BlockLayout {
        window_ms: W as u32,
        max_bytes: 4_096,
        max_readings: 6,
    })
}

/// Each device's readings every 20 s (offset by device), every seventh sharing the
/// millisecond of the one before it.
fn readings() -> Vec<R> {
    let mut out = Vec::new();
    for (d, device) in DEVICES.iter().enumerate() {
        let mut i = 0i64;
        loop {
            let ts_ms = BASE_MS + (i - i64::from(i % 7 == 6)) * 20_000 + d as i64 * 3_001 + 5;
            if ts_ms >= TO_MS {
                break;
            }
            out.push(R {
                device: (*device).to_owned(),
                event: format!("e{i:04}"),
                ts_ms,
                value: crate::common::n(i as f64),
            });
            i += 1;
        }
    }
    out
}

/// (device, event) of `readings` in `[from, to)` of `devices`, in the answers' order.
fn expected(readings: &[R], devices: &[&str], from: i64, to: i64) -> Vec<(String, String)> {
    let mut keep: Vec<&R> = readings
        .iter()
        .filter(|r| devices.contains(&r.device.as_str()) && (from..to).contains(&r.ts_ms))
        .collect();
    keep.sort_by(|a, b| (a.ts_ms, &a.device, &a.event).cmp(&(b.ts_ms, &b.device, &b.event)));
    keep.iter()
        .map(|r| (r.device.clone(), r.event.clone()))
        .collect()
}

/// A readings table, its shard metadata, and the readings written to it.
type Fixture = (MemoryReadings, Arc<MemoryShards>, Vec<R>);

/// A table of every device's readings in blocks under `layouts` (epochs by start);
/// `dev-3` is raised to fan-out 6 before the range (sub-shards beyond the 4 base
/// shards included), so its blocks sit under the keys of their first members.
fn fixture(layouts: Vec<(i64, Layout)>) -> Fixture {
    let table = MemoryReadings::new(None);
    let raised = fanout_history(vec![(BASE_MS - 2 * HOUR, 6)]);
    let shards = shard_table(table_history(layouts), [("dev-3".to_owned(), raised)]);
    let readings = readings();
    let blocks = load_blocks(&table, &shards, &readings);
    assert!(blocks > 100, "{blocks} blocks");
    (table, Arc::new(shards), readings)
}

/// The whole-range fixtures: blocks throughout, and blocks from 50 minutes in.
fn fixtures() -> Vec<(&'static str, Fixture)> {
    vec![
        ("blocks", fixture(vec![(0, with_blocks(hourly(4)))])),
        (
            "switch",
            fixture(vec![
                (0, hourly(4)),
                (BASE_MS + 50 * MINUTE, with_blocks(hourly(4))),
            ]),
        ),
    ]
}

/// Every reading of every page from `first` on, following its cursors.
async fn follow(svc: &Service<'_>, first: &str) -> (Vec<(String, String)>, usize) {
    let mut got = Vec::new();
    let mut cursor = String::new();
    let mut pages = 0;
    loop {
        let (status, body) = get(svc, &format!("{first}{cursor}")).await;
        assert_eq!(status, 200, "{first}{cursor}: {body}");
        pages += 1;
        for item in body["items"].as_array().unwrap() {
            got.push((
                item["device_id"].as_str().unwrap().to_owned(),
                item["event_id"].as_str().unwrap().to_owned(),
            ));
        }
        match body["next_cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => return (got, pages),
        }
        assert!(pages < 5_000, "the pages never end");
    }
}

/// Both orders of `path` (which has a query string), every page: each the readings
/// `want`, once, in order.
async fn check_both_orders(svc: &Service<'_>, path: &str, want: &[(String, String)]) {
    let (got, _) = follow(svc, path).await;
    assert_eq!(got, want, "{path}");
    let (mut back, _) = follow(svc, &format!("{path}&order=desc")).await;
    back.reverse();
    assert_eq!(back, want, "{path} desc");
}

#[tokio::test]
async fn a_device_range_reads_every_reading_once_through_every_cursor() {
    for (name, (table, shards, readings)) in fixtures() {
        let svc = service_with(&table, shards, None);
        for device in ["dev-1", "dev-3"] {
            let want = expected(&readings, &[device], BASE_MS, TO_MS);
            for limit in [4, 17, 1000] {
                let path =
                    format!("/devices/{device}/readings?from={BASE_MS}&to={TO_MS}&limit={limit}");
                check_both_orders(&svc, &path, &want).await;
            }
            assert!(want.len() > 300, "{name}: {}", want.len());
        }
    }
}

#[tokio::test]
async fn a_read_over_every_device_reads_every_reading_once_with_and_without_the_index() {
    for (name, (table, shards, readings)) in fixtures() {
        // An hour and a half, across the switch and a bucket boundary.
        let (from, to) = (BASE_MS + 20 * MINUTE, BASE_MS + 110 * MINUTE);
        let want = expected(&readings, &DEVICES, from, to);
        for index in [None, Some("by-time")] {
            let svc = service_with(&table, shards.clone(), index);
            for limit in [9, 1000] {
                let path = format!("/readings?from={from}&to={to}&limit={limit}");
                check_both_orders(&svc, &path, &want).await;
            }
        }
        assert!(want.len() > 600, "{name}");
    }
}

#[tokio::test]
async fn a_range_starting_inside_a_block_answers_only_its_own_readings() {
    let (table, shards, readings) = fixture(vec![(0, with_blocks(hourly(4)))]);
    // Starts and ends a few ms into blocks, on a block's first member, on a bucket's
    // first millisecond, and ranges shorter than a block's window.
    let ranges = [
        (BASE_MS + 20_006, BASE_MS + 40_007),
        (BASE_MS + 5, BASE_MS + 6),
        (BASE_MS + 60_005, BASE_MS + 60_006),
        (BASE_MS + HOUR - 1_000, BASE_MS + HOUR + 45_000),
        (BASE_MS + 7 * MINUTE + 17, BASE_MS + 31 * MINUTE + 9),
    ];
    for index in [None, Some("by-time")] {
        let svc = service_with(&table, shards.clone(), index);
        for (from, to) in ranges {
            for device in DEVICES {
                let want = expected(&readings, &[device], from, to);
                let path = format!("/devices/{device}/readings?from={from}&to={to}&limit=3");
                check_both_orders(&svc, &path, &want).await;
            }
            let want = expected(&readings, &DEVICES, from, to);
            check_both_orders(
                &svc,
                &format!("/readings?from={from}&to={to}&limit=5"),
                &want,
            )
            .await;
        }
    }
}

/// dev-1's first 12 readings at 10 s apart, packed and stored again: alone, and in
/// two overlapping blocks.
fn stored_again() -> Fixture {
    let table = MemoryReadings::new(None);
    let shards = shard_table(table_history(vec![(0, with_blocks(hourly(4)))]), []);
    let readings: Vec<R> = (0..12)
        .map(|i| R {
            device: "dev-1".into(),
            event: format!("e{i:02}"),
            ts_ms: BASE_MS + i * 10_000,
            value: crate::common::n(i as f64),
        })
        .collect();
    load_blocks(&table, &shards, &readings);
    // Alone, as a message of one reading would store it.
    load(&table, &shards, &readings[2..4]);
    // In blocks another grouping made (a redelivery after a crash), overlapping.
    put_block(&table, &shards, &readings[1..4]);
    put_block(&table, &shards, &readings[3..7]);
    put_block(&table, &shards, &readings[5..9]);
    (table, Arc::new(shards), readings)
}

#[tokio::test]
async fn a_reading_stored_alone_and_in_blocks_is_answered_once() {
    let (table, shards, readings) = stored_again();
    let want = expected(&readings, &["dev-1"], BASE_MS, BASE_MS + HOUR);
    for index in [None, Some("by-time")] {
        let svc = service_with(&table, shards.clone(), index);
        for limit in [1, 2, 5, 100] {
            let range = format!("from={BASE_MS}&to={}&limit={limit}", BASE_MS + HOUR);
            check_both_orders(&svc, &format!("/devices/dev-1/readings?{range}"), &want).await;
            check_both_orders(&svc, &format!("/readings?{range}"), &want).await;
        }
    }
}

#[tokio::test]
async fn stats_buckets_count_each_reading_once() {
    let (table, shards, readings) = stored_again();
    let svc = service_with(&table, shards, None);
    let (status, body) = get(
        &svc,
        &format!(
            "/devices/dev-1/stats?from={BASE_MS}&to={}&interval=30s&metric=temperature",
            BASE_MS + 2 * MINUTE
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let counts: Vec<u64> = body["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["count"].as_u64().unwrap())
        .collect();
    assert_eq!(counts, [3, 3, 3, 3], "{body}");
    assert_eq!(readings.len(), 12);
    // Over the larger fixture: each bucket counts the readings written in it.
    let (table, shards, readings) = fixture(vec![(0, with_blocks(hourly(4)))]);
    let svc = service_with(&table, shards, None);
    let (from, to) = (BASE_MS + 3 * MINUTE + 7, BASE_MS + 93 * MINUTE);
    let (status, body) = get(
        &svc,
        &format!("/devices/dev-2/stats?from={from}&to={to}&interval=10m&metric=temperature"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let total: u64 = body["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["count"].as_u64().unwrap())
        .sum();
    assert_eq!(
        total as usize,
        expected(&readings, &["dev-2"], from, to).len()
    );
}

#[tokio::test]
async fn a_point_read_finds_a_reading_inside_a_block() {
    let (table, shards, readings) = stored_again();
    let (big, big_shards, big_readings) = fixture(vec![
        (0, hourly(4)),
        (BASE_MS + 50 * MINUTE, with_blocks(hourly(4))),
    ]);
    for (table, shards, readings) in [
        (&table, shards, &readings),
        (&big, big_shards, &big_readings),
    ] {
        let svc = service_with(table, shards, None);
        for r in readings.iter().step_by(7) {
            let path = format!("/devices/{}/readings/{}?ts={}", r.device, r.event, r.ts_ms);
            let (status, body) = get(&svc, &path).await;
            assert_eq!(status, 200, "{path}: {body}");
            assert_eq!(body["event_id"], r.event.as_str(), "{path}");
            assert_eq!(body["device_id"], r.device.as_str(), "{path}");
            // Not at another millisecond, nor as another event.
            let (status, _) = get(
                &svc,
                &format!(
                    "/devices/{}/readings/{}?ts={}",
                    r.device,
                    r.event,
                    r.ts_ms + 1
                ),
            )
            .await;
            assert_eq!(status, 404, "{path} + 1 ms");
        }
        let (status, _) = get(
            &svc,
            &format!("/devices/dev-1/readings/nope?ts={}", BASE_MS + 55 * MINUTE),
        )
        .await;
        assert_eq!(status, 404);
    }
}

fn budgeted<'a>(
    table: &'a MemoryReadings,
    shards: Arc<MemoryShards>,
    index: Option<&str>,
    evaluated: u64,
) -> Service<'a> {
    let mut config = ServiceConfig::new(key());
    config.concurrency = 4;
    config.time_index = index.map(str::to_owned);
    config.budget = RequestBudget {
        evaluated,
        ..RequestBudget::default()
    };
    QueryService::new(table, shards, config)
}

#[tokio::test]
async fn a_page_a_budget_ends_resumes_exactly() {
    for (name, (table, shards, readings)) in fixtures() {
        let (from, to) = (BASE_MS + 35 * MINUTE + 11, BASE_MS + 75 * MINUTE);
        for index in [None, Some("by-time")] {
            let svc = budgeted(&table, shards.clone(), index, 12);
            let want = expected(&readings, &["dev-2"], from, to);
            let path = format!("/devices/dev-2/readings?from={from}&to={to}&limit=1000");
            let (got, pages) = follow(&svc, &path).await;
            assert!(pages > 1, "{name}: the budget ends pages early");
            assert_eq!(got, want, "{name}");
            let (mut back, _) = follow(&svc, &format!("{path}&order=desc")).await;
            back.reverse();
            assert_eq!(back, want, "{name} desc");
        }
        // Every device through the index: the budget ends its pages too. Each page
        // reads back a window before its cursor in every stream (four shards and the
        // raised device's dedicated sub-shards, two buckets), so it needs room for
        // those blocks as well: much less and a page settles nothing past its cursor,
        // which is refused naming the budget.
        let svc = budgeted(&table, shards.clone(), Some("by-time"), 50);
        let (from, to) = (BASE_MS + 40 * MINUTE, BASE_MS + 80 * MINUTE);
        let want = expected(&readings, &DEVICES, from, to);
        let path = format!("/readings?from={from}&to={to}&limit=1000");
        let (got, pages) = follow(&svc, &path).await;
        assert!(pages > 1, "{name}: the budget ends pages early");
        assert_eq!(got, want, "{name} every device");
    }
}

/// A page of a blocks' lane asks for blocks, not readings: `Limit` counts items, so a
/// read of 12 readings in blocks of 50 evaluates a block or two, not 12 blocks of 600
/// readings.
#[tokio::test]
async fn a_blocks_lane_asks_for_the_blocks_the_readings_need() {
    let layout = hourly(4).with_blocks(BlockLayout {
        window_ms: W as u32,
        max_bytes: 65_536,
        max_readings: 50,
    });
    let shards = Arc::new(shard_table(table_history(vec![(0, layout)]), []));
    let table = MemoryReadings::new(None);
    // A reading a second for 20 minutes: blocks of 50 readings.
    let sent: Vec<R> = (0..1_200)
        .map(|i| R {
            device: "dev-1".into(),
            event: format!("e{i:04}"),
            ts_ms: BASE_MS + i * 1_000,
            value: crate::common::n(1.0),
        })
        .collect();
    assert!(
        load_blocks(&table, &shards, &sent) >= 20,
        "blocks were written"
    );
    let svc = crate::common::service(&table, shards);
    let (status, body) = get(
        &svc,
        &format!(
            "/devices/dev-1/readings?from={BASE_MS}&to={}&limit=12",
            BASE_MS + HOUR
        ),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["items"].as_array().map(Vec::len), Some(12));
    assert!(
        table.evaluated() <= 3,
        "{} items evaluated for 12 readings in blocks of 50",
        table.evaluated()
    );
}

/// A point read of a reading inside a block looks up the reading's own key and the
/// block window at once: with every call taking 200 ms, it answers within a 300-ms
/// deadline, where a miss and then a Query would take 400.
#[tokio::test]
async fn a_point_read_inside_a_block_is_one_round_trip() {
    let shards = Arc::new(shard_table(
        table_history(vec![(0, with_blocks(hourly(4)))]),
        [],
    ));
    let table = MemoryReadings::new(None);
    let sent: Vec<R> = (0..6)
        .map(|i| R {
            device: "dev-1".into(),
            event: format!("e{i}"),
            ts_ms: BASE_MS + i * 1_000,
            value: crate::common::n(1.0),
        })
        .collect();
    assert_eq!(load_blocks(&table, &shards, &sent), 1, "one block of six");
    table.set_latency(std::time::Duration::from_millis(200));
    let svc = crate::common::service(&table, shards);
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(300);
    let before = table.calls();
    let resp = svc
        .handle_parts_by(
            "GET",
            "/devices/dev-1/readings/e3",
            Some(&format!("ts={}", BASE_MS + 3_000)),
            crate::common::now(),
            Some(deadline),
        )
        .await;
    assert_eq!(resp.status().as_u16(), 200, "{}", resp.body());
    assert!(
        resp.body().contains("\"event_id\":\"e3\""),
        "{}",
        resp.body()
    );
    // The reading's own key (GetItem) and the blocks' lane of the window before it, in
    // its own bucket alone (BASE_MS starts an hour, and no block spans two): a
    // readings' lane would read again the item the GetItem reads.
    assert_eq!(table.calls() - before, 2, "calls of the point read");
}

mod exact {
    use std::str::FromStr;

    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// What a device sent is what every read answers: each metric, stored as a
        /// reading's own item or inside a block, is answered as the decimal it was sent
        /// as (up to DynamoDB's 38 significant digits, no double in between), checked
        /// against an independent decimal.
        #[test]
        fn every_read_answers_each_metric_exactly_as_sent(
            values in proptest::collection::vec(
                ("-?[1-9][0-9]{0,37}", -140i32..100).prop_filter_map(
                    "a number DynamoDB stores",
                    |(digits, exponent)| store::Decimal::parse(&format!("{digits}e{exponent}")).ok(),
                ),
                2..12,
            ),
        ) {
            let sent: Vec<R> = values
                .iter()
                .enumerate()
                .map(|(i, value)| R {
                    device: "dev-1".into(),
                    event: format!("e{i:02}"),
                    ts_ms: BASE_MS + i as i64 * 1_000,
                    value: value.clone(),
                })
                .collect();
            let decimal = |text: &str| bigdecimal::BigDecimal::from_str(text).expect("a decimal");
            let expected: Vec<_> = values.iter().map(|v| decimal(v.as_str())).collect();
            let rt = tokio::runtime::Runtime::new().expect("a runtime");
            for packed in [false, true] {
                let layout = if packed { with_blocks(hourly(4)) } else { hourly(4) };
                let shards = Arc::new(shard_table(table_history(vec![(0, layout)]), []));
                let table = MemoryReadings::new(None);
                if packed {
                    prop_assert!(load_blocks(&table, &shards, &sent) > 0, "blocks were written");
                } else {
                    load(&table, &shards, &sent);
                }
                let svc = crate::common::service(&table, shards);
                let query = format!("from={BASE_MS}&to={}&limit=100", BASE_MS + HOUR);
                let path = "/devices/dev-1/readings";
                let resp = rt.block_on(svc.handle_parts("GET", path, Some(&query), crate::common::now()));
                prop_assert_eq!(resp.status().as_u16(), 200);
                let answered = crate::common::answered_decimals(resp.body(), "temperature");
                prop_assert_eq!(&answered, &expected, "blocks: {}", packed);
            }
        }
    }
}
