//! How much the scatter-gather reads: over-read of `limit=100` over 8 shards, lazy
//! opening of later buckets and reading ahead into sparse ones, full-bucket reads for
//! the all-devices plan without the time index, and reads to the limit with it.

use std::sync::Arc;

use query::params::parse_request;
use sharding::layout::Layout;

use crate::common::{
    BASE_MS, R, fanout_history, hourly, load, now, nz, service, service_with, shard_table,
    table_history, without_issue_time,
};
use store::memory::{MemoryReadings, MemoryShards};

fn readings(device: &str, n: i64, step_ms: i64) -> Vec<R> {
    (0..n)
        .map(|i| R {
            device: device.into(),
            event: format!("e{i:05}"),
            ts_ms: BASE_MS + i * step_ms,
            value: crate::common::n(i as f64),
        })
        .collect()
}

async fn run(
    table: &MemoryReadings,
    shards: Arc<MemoryShards>,
    path: &str,
    query: &str,
) -> (serde_json::Value, query::service::ReadStats) {
    run_with(table, shards, None, path, query).await
}

async fn run_with(
    table: &MemoryReadings,
    shards: Arc<MemoryShards>,
    time_index: Option<&str>,
    path: &str,
    query: &str,
) -> (serde_json::Value, query::service::ReadStats) {
    let svc = service_with(table, shards, time_index);
    let endpoint = parse_request("GET", path, Some(query), &svc.config().limits).unwrap();
    let (body, stats) = svc.execute(endpoint, now()).await.unwrap();
    (serde_json::from_str(&body).expect("a JSON answer"), stats)
}

#[tokio::test]
async fn limit_100_over_8_shards_reads_about_100() {
    for desc in [false, true] {
        let table = MemoryReadings::new(None);
        let shards = shard_table(table_history(vec![(0, Layout::random(nz(8)))]), []);
        load(&table, &shards, &readings("dev-1", 4000, 250));
        let order = if desc { "desc" } else { "asc" };
        let (body, stats) = run(
            &table,
            Arc::new(shards),
            "/devices/dev-1/readings",
            &format!(
                "from={BASE_MS}&to={}&limit=100&order={order}",
                BASE_MS + 3_600_000
            ),
        )
        .await;
        assert_eq!(body["items"].as_array().unwrap().len(), 100);
        assert_eq!(stats.plan_queries, 8);
        println!(
            "{order}: items_read={} returned=100 calls={} over-read={:.2}",
            stats.items_read,
            stats.calls,
            stats.items_read as f64 / 100.0
        );
        assert!(
            stats.items_read >= 101,
            "must see one more to know a next page exists"
        );
        assert!(
            stats.items_read <= 150,
            "read {} items for 100",
            stats.items_read
        );
        assert_eq!(stats.items_read, table.evaluated());
    }
}

#[tokio::test]
async fn later_buckets_are_opened_only_when_reached() {
    // Six hour-buckets of one device, 1,000 readings each; 50 come from the first.
    let table = MemoryReadings::new(None);
    let shards = shard_table(table_history(vec![(0, hourly(4))]), []);
    load(&table, &shards, &readings("dev-1", 6000, 3_600));
    let (body, stats) = run(
        &table,
        Arc::new(shards),
        "/devices/dev-1/readings",
        &format!("from={BASE_MS}&to={}&limit=50", BASE_MS + 6 * 3_600_000),
    )
    .await;
    assert_eq!(body["items"][0]["event_id"], "e00000");
    assert_eq!(stats.plan_queries, 6);
    assert_eq!(stats.calls, 1, "only the first bucket is read");
    assert_eq!(stats.items_read, 51);
}

#[tokio::test]
async fn a_sparse_first_bucket_reads_ahead_into_the_buckets_still_needed() {
    // Six hour-buckets of one device, 30 readings each (one every 2 minutes): 100
    // items need four buckets. The first round learns the density from the first
    // bucket; the second opens the next three at once.
    for desc in [false, true] {
        let table = MemoryReadings::new(None);
        let shards = shard_table(table_history(vec![(0, hourly(4))]), []);
        load(&table, &shards, &readings("dev-1", 180, 120_000));
        let order = if desc { "desc" } else { "asc" };
        let (body, stats) = run(
            &table,
            Arc::new(shards),
            "/devices/dev-1/readings",
            &format!(
                "from={BASE_MS}&to={}&limit=100&order={order}",
                BASE_MS + 6 * 3_600_000
            ),
        )
        .await;
        let events: Vec<&str> = body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["event_id"].as_str().unwrap())
            .collect();
        let expected: Vec<String> = if desc {
            (80..180).rev().map(|i| format!("e{i:05}")).collect()
        } else {
            (0..100).map(|i| format!("e{i:05}")).collect()
        };
        assert_eq!(events, expected);
        println!(
            "{order}: rounds={} calls={} items_read={} over-read={:.2}",
            stats.rounds,
            stats.calls,
            stats.items_read,
            stats.items_read as f64 / 100.0
        );
        assert_eq!(stats.rounds, 2, "one round per bucket would be 4");
        assert!(stats.items_read <= 150, "read {}", stats.items_read);
    }
}

#[tokio::test]
async fn empty_buckets_grow_the_read_ahead_by_doubling() {
    // Readings only in the last of six buckets: nothing tells the density, so each
    // round opens at most as many new buckets as were read so far.
    let table = MemoryReadings::new(None);
    let shards = shard_table(table_history(vec![(0, hourly(4))]), []);
    let late: Vec<R> = readings("dev-1", 10, 60_000)
        .into_iter()
        .map(|mut r| {
            r.ts_ms += 5 * 3_600_000;
            r
        })
        .collect();
    load(&table, &shards, &late);
    let (body, stats) = run(
        &table,
        Arc::new(shards),
        "/devices/dev-1/readings",
        &format!("from={BASE_MS}&to={}&limit=5", BASE_MS + 6 * 3_600_000),
    )
    .await;
    assert_eq!(body["items"].as_array().unwrap().len(), 5);
    assert_eq!(body["items"][0]["event_id"], "e00000");
    // Round 1 reads bucket 1; round 2 buckets 2 and 3 (one read so far: one ahead);
    // round 3 bucket 4 and, three read so far, the last two.
    assert_eq!(stats.rounds, 3, "{stats:?}");
    assert_eq!(stats.calls, 6, "{stats:?}");
}

#[tokio::test]
async fn all_devices_through_the_time_index_read_about_the_limit() {
    // 16 devices, one reading every 2 minutes each over an hour (480 items), 8 shards;
    // ties at one millisecond across devices every 10 minutes.
    let mut rs = Vec::new();
    for d in 0..16 {
        rs.extend(
            readings(&format!("dev-{d:02}"), 30, 120_000)
                .into_iter()
                .map(|mut r| {
                    if r.ts_ms % 600_000 != 0 {
                        r.ts_ms += d;
                    }
                    r
                }),
        );
    }
    for desc in [false, true] {
        let order = if desc { "desc" } else { "asc" };
        let q = format!(
            "from={BASE_MS}&to={}&limit=100&order={order}",
            BASE_MS + 3_600_000
        );
        let mut answers = Vec::new();
        for index in [None, Some("by-time")] {
            let table = MemoryReadings::new(None);
            let shards = shard_table(table_history(vec![(0, hourly(8))]), []);
            load(&table, &shards, &rs);
            let (body, stats) = run_with(&table, Arc::new(shards), index, "/readings", &q).await;
            assert_eq!(body["items"].as_array().unwrap().len(), 100);
            println!(
                "{order} index={index:?}: rounds={} calls={} items_read={} over-read={:.2}",
                stats.rounds,
                stats.calls,
                stats.items_read,
                stats.items_read as f64 / 100.0
            );
            match index {
                None => assert_eq!(stats.items_read, 480, "whole bucket without the index"),
                Some(_) => assert!(stats.items_read <= 150, "read {}", stats.items_read),
            }
            answers.push(body);
        }
        assert_eq!(
            without_issue_time(&answers[0]),
            without_issue_time(&answers[1]),
            "same answer with and without the index"
        );
    }
}

#[tokio::test]
async fn a_read_over_every_device_plans_its_first_round_by_the_last_ones_density() {
    // 64 devices, one reading every 2 minutes each over an hour, 32 shards: the shape
    // of bench item 4. The second of two reads of one service plans its first round by
    // what the first saw, and answers in that round.
    let mut rs = Vec::new();
    for d in 0..64 {
        let phase = d * 1_873;
        rs.extend(
            readings(&format!("dev-{d:02}"), 30, 120_000)
                .into_iter()
                .map(|mut r| {
                    r.ts_ms += phase;
                    r
                }),
        );
    }
    let table = MemoryReadings::new(None);
    let shards = shard_table(table_history(vec![(0, hourly(32))]), []);
    load(&table, &shards, &rs);
    let svc = service_with(&table, Arc::new(shards), Some("by-time"));
    let q = format!("from={BASE_MS}&to={}&limit=100", BASE_MS + 3_600_000);
    let mut reads = Vec::new();
    for _ in 0..2 {
        let endpoint = parse_request("GET", "/readings", Some(&q), &svc.config().limits).unwrap();
        let (body, stats) = svc.execute(endpoint, now()).await.unwrap();
        let body: serde_json::Value = serde_json::from_str(&body).expect("a JSON answer");
        reads.push((body, stats));
    }
    let (first, second) = (&reads[0], &reads[1]);
    println!("first: {:?}\nsecond: {:?}", first.1, second.1);
    assert_eq!(
        without_issue_time(&first.0),
        without_issue_time(&second.0),
        "the same answer"
    );
    assert!(first.1.rounds >= 2, "{:?}", first.1);
    assert_eq!(second.1.rounds, 1, "{:?}", second.1);
    assert!(second.1.items_read <= 130, "{:?}", second.1);
}

#[tokio::test]
async fn fanout_raised_inside_the_range_is_read_in_order() {
    // k = 1 for the first half hour, then 4 sub-shards: 4 + 1 streams per bucket.
    let table = MemoryReadings::new(None);
    let shards = shard_table(
        table_history(vec![(0, hourly(2))]),
        [(
            "dev-1".to_string(),
            fanout_history(vec![(BASE_MS + 1_800_000, 4)]),
        )],
    );
    load(&table, &shards, &readings("dev-1", 600, 6_000));
    let (body, stats) = run(
        &table,
        Arc::new(shards),
        "/devices/dev-1/readings",
        &format!(
            "from={}&to={}&limit=20",
            BASE_MS + 1_740_000,
            BASE_MS + 3_600_000
        ),
    )
    .await;
    let events: Vec<&str> = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["event_id"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (290..310).map(|i| format!("e{i:05}")).collect();
    assert_eq!(events, expected);
    assert_eq!(stats.plan_queries, 5);
    println!(
        "fan-out change: items_read={} calls={}",
        stats.items_read, stats.calls
    );
    // All five keys are read from 00:29: a reading of the hour before the raise may
    // have been keyed with k = 4 (keys nest). The first round's shares (6 each) find
    // 6 cold readings and 24 sub-shard ones; the cold key's last 4 follow.
    assert!(stats.items_read <= 35, "read {}", stats.items_read);
}

#[tokio::test]
async fn all_devices_reads_whole_buckets_it_reaches() {
    let table = MemoryReadings::new(None);
    let shards = shard_table(table_history(vec![(0, hourly(2))]), []);
    let mut rs = readings("dev-1", 200, 36_000);
    rs.extend(readings("dev-2", 200, 36_000).into_iter().map(|mut r| {
        r.ts_ms += 1;
        r
    }));
    load(&table, &shards, &rs);
    let (body, stats) = run(
        &table,
        Arc::new(shards),
        "/readings",
        &format!("from={BASE_MS}&to={}&limit=10", BASE_MS + 2 * 3_600_000),
    )
    .await;
    let items = body["items"].as_array().unwrap();
    assert_eq!(items[0]["device_id"], "dev-1");
    assert_eq!(items[1]["device_id"], "dev-2");
    assert_eq!(items[1]["ts"], "2026-06-22T00:00:00.001Z");
    // Two hours x two shards = 4 queries; only the first hour's two are read, whole.
    assert_eq!(stats.plan_queries, 4);
    assert_eq!(stats.calls, 2);
    assert_eq!(stats.items_read, 200);
}

#[tokio::test]
async fn an_all_devices_read_over_too_big_buckets_is_refused_not_crashed() {
    let table = MemoryReadings::new(Some(50));
    let shards = shard_table(table_history(vec![(0, hourly(1))]), []);
    // 2,000 readings in one bucket, 40 pages of 50.
    load(&table, &shards, &readings("dev-1", 2_000, 1_000));
    let mut config = query::ServiceConfig::new(crate::common::key());
    config.max_buffered = 300;
    let svc = query::QueryService::new(&table, Arc::new(shards), config);
    let resp = svc
        .handle_parts(
            "GET",
            "/readings",
            Some(&format!("from={BASE_MS}&to={}", BASE_MS + 3_600_000)),
            now(),
        )
        .await;
    assert_eq!(resp.status(), 400, "{}", resp.body());
    assert!(resp.body().contains("range_too_large"), "{}", resp.body());
    assert!(
        resp.body().contains("TimeIndex=enabled"),
        "the refusal names the option that lifts it: {}",
        resp.body()
    );
    assert!(
        table.calls() <= 10,
        "it stops reading past the limit, not at the bucket's end: {} calls of 40",
        table.calls()
    );
}

#[tokio::test]
async fn all_devices_under_a_per_device_layout_is_a_400() {
    let table = MemoryReadings::new(None);
    let shards = shard_table(table_history(vec![(0, Layout::random(nz(4)))]), []);
    let svc = service(&table, Arc::new(shards));
    let resp = svc
        .handle_parts(
            "GET",
            "/readings",
            Some(&format!("from={BASE_MS}&to={}", BASE_MS + 3_600_000)),
            now(),
        )
        .await;
    assert_eq!(resp.status(), 400, "{}", resp.body());
    assert!(resp.body().contains("not_supported"), "{}", resp.body());
    assert_eq!(table.calls(), 0);
}
