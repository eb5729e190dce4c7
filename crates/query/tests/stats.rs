//! Stats pages: a stats request reads within a budget and pages by sealed cursor, each
//! page holding only complete buckets; the pages add up to the unbounded answer.

use std::sync::Arc;
use std::time::Duration;

use query::stats::StatsBudget;
use query::{QueryService, ServiceConfig};

use crate::common::{BASE_MS, R, Service, get, hourly, key, load, shard_table, table_history};
use store::memory::{MemoryReadings, MemoryShards};

/// Six hours of `dev-1`, a reading every 10 s (2,160), and `dev-2` beside it.
fn fixture() -> (MemoryReadings, Arc<MemoryShards>) {
    let table = MemoryReadings::new(Some(100));
    let shards = shard_table(table_history(vec![(0, hourly(4))]), []);
    let readings: Vec<R> = (0..2160)
        .flat_map(|i| {
            ["dev-1", "dev-2"].map(|device| R {
                device: device.into(),
                event: format!("e{i}"),
                ts_ms: BASE_MS + i * 10_000,
                value: crate::common::n((i % 97) as f64),
            })
        })
        .collect();
    load(&table, &shards, &readings);
    (table, Arc::new(shards))
}

fn service_with_budget(
    table: &MemoryReadings,
    shards: Arc<MemoryShards>,
    readings: u64,
) -> Service<'_> {
    let mut config = ServiceConfig::new(key());
    config.concurrency = 4;
    config.stats_budget = StatsBudget {
        readings,
        time: Duration::from_secs(3600),
    };
    QueryService::new(table, shards, config)
}

const TO_MS: i64 = BASE_MS + 6 * 3_600_000;

fn stats_path(interval: &str, metric: &str, cursor: Option<&str>) -> String {
    let mut path = format!(
        "/devices/dev-1/stats?from={BASE_MS}&to={TO_MS}&interval={interval}&metric={metric}"
    );
    if let Some(c) = cursor {
        path.push_str(&format!("&cursor={c}"));
    }
    path
}

/// Every page of a stats request, following its cursors.
async fn pages(svc: &Service<'_>, interval: &str) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let (status, body) =
            get(svc, &stats_path(interval, "temperature", cursor.as_deref())).await;
        assert_eq!(status, 200, "{body}");
        cursor = body["next_cursor"].as_str().map(str::to_owned);
        out.push(body);
        if cursor.is_none() {
            return out;
        }
        assert!(out.len() < 100, "the pages never end");
    }
}

#[tokio::test]
async fn pages_hold_complete_buckets_and_add_up_to_the_whole_answer() {
    let (table, shards) = fixture();
    let whole = pages(&service_with_budget(&table, shards.clone(), 100_000), "10m").await;
    assert_eq!(whole.len(), 1, "within the budget, one page");
    assert!(whole[0]["next_cursor"].is_null(), "the last page says so");
    let all = whole[0]["buckets"].as_array().unwrap().clone();
    assert_eq!(all.len(), 36);
    assert!(all.iter().all(|b| b["count"] == 60));

    let budget = 500;
    let paged = pages(&service_with_budget(&table, shards, budget), "10m").await;
    assert!(paged.len() >= 4, "{} pages", paged.len());
    let mut joined = Vec::new();
    for page in &paged {
        let buckets = page["buckets"].as_array().unwrap();
        assert!(!buckets.is_empty(), "every page makes progress");
        let readings: u64 = buckets.iter().map(|b| b["count"].as_u64().unwrap()).sum();
        assert!(readings <= 2 * budget, "a page of {readings} readings");
        joined.extend(buckets.iter().cloned());
    }
    // No bucket is split across pages, none repeated, none lost.
    assert_eq!(joined, all);
}

#[tokio::test]
async fn a_resumed_page_reads_only_from_its_cursor_on() {
    let (table, shards) = fixture();
    let svc = service_with_budget(&table, shards, 500);
    let (_, first) = get(&svc, &stats_path("10m", "temperature", None)).await;
    let cursor = first["next_cursor"].as_str().unwrap().to_owned();
    let calls_before = table.calls();
    let (status, second) = get(&svc, &stats_path("10m", "temperature", Some(&cursor))).await;
    assert_eq!(status, 200, "{second}");
    let last_of_first = first["buckets"].as_array().unwrap().last().unwrap()["start"].clone();
    let first_of_second = second["buckets"][0]["start"].clone();
    assert!(
        first_of_second.as_str() > last_of_first.as_str(),
        "{first_of_second} after {last_of_first}"
    );
    // The second page starts near its cursor: it reads about one page, not the range.
    assert!(
        table.calls() - calls_before <= 20,
        "{} calls",
        table.calls() - calls_before
    );
}

#[tokio::test]
async fn a_tampered_or_foreign_stats_cursor_is_refused() {
    let (table, shards) = fixture();
    let svc = service_with_budget(&table, shards, 500);
    let (_, first) = get(&svc, &stats_path("10m", "temperature", None)).await;
    let cursor = first["next_cursor"].as_str().unwrap().to_owned();
    let (body_b64, tag) = cursor.split_once('.').unwrap();
    // One character of the body changed.
    let mut altered: Vec<char> = body_b64.chars().collect();
    altered[5] = if altered[5] == 'A' { 'B' } else { 'A' };
    let tampered = format!("{}.{tag}", altered.into_iter().collect::<String>());
    for (path, why) in [
        (stats_path("10m", "temperature", Some(&tampered)), "altered"),
        (
            stats_path("10m", "humidity", Some(&cursor)),
            "different request",
        ),
        (
            stats_path("5m", "temperature", Some(&cursor)),
            "different request",
        ),
        (
            format!("/devices/dev-1/readings?from={BASE_MS}&to={TO_MS}&cursor={cursor}"),
            "different request",
        ),
    ] {
        let calls = table.calls();
        let (status, body) = get(&svc, &path).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(body["error"]["code"], "bad_cursor", "{path}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(why), "{path}: {message}");
        assert_eq!(
            table.calls(),
            calls,
            "{path}: a refused cursor reads nothing"
        );
    }
}

#[tokio::test]
async fn a_bucket_larger_than_a_page_may_read_is_refused_naming_the_interval() {
    let (table, shards) = fixture();
    let svc = service_with_budget(&table, shards, 500);
    let (status, body) = get(&svc, &stats_path("6h", "temperature", None)).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "bad_interval");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("interval 6h"), "{message}");
    assert!(message.contains("shorter interval"), "{message}");
}
