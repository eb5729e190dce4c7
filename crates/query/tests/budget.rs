//! Every request within a budget of Queries, items evaluated (ScannedCount, counting
//! what a filter rejects), answer bytes and wall time: past one, a page that ends early
//! with a cursor that resumes exactly, or a 400 `budget_exceeded` naming the budget.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use query::budget::RequestBudget;
use query::{QueryService, ServiceConfig};
use sharding::layout::Layout;
use store::item::{Reading, ReadingItem};
use store::memory::{MemoryReadings, MemoryShards};

use crate::common::{
    BASE_MS, R, fanout_history, hourly, key, key_of, load, now, nz, shard_table, table_history, ts,
};

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;

type Svc<'a> = QueryService<&'a MemoryReadings, Arc<MemoryShards>>;

fn service_with<'a>(
    table: &'a MemoryReadings,
    shards: Arc<MemoryShards>,
    budget: RequestBudget,
    time_index: Option<&str>,
) -> Svc<'a> {
    let mut config = ServiceConfig::new(key());
    config.budget = budget;
    config.time_index = time_index.map(str::to_owned);
    QueryService::new(table, shards, config)
}

/// (status, body as text, body as JSON) of one request that must stop reading by
/// `deadline`.
async fn call(
    svc: &Svc<'_>,
    path_and_query: &str,
    deadline: Option<Instant>,
) -> (u16, String, serde_json::Value) {
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    let resp = svc
        .handle_parts_by("GET", path, Some(query), now(), deadline)
        .await;
    let text = resp.body().clone();
    let json = serde_json::from_str(&text).expect("JSON body");
    (resp.status().as_u16(), text, json)
}

/// Follows `next_cursor` from `first` (a path with its query) to the last page and
/// returns every item's (device, event) in order; each page must be a 200.
async fn follow(svc: &Svc<'_>, first: &str) -> (Vec<(String, String)>, usize) {
    let mut got = Vec::new();
    let mut cursor = String::new();
    let mut pages = 0;
    loop {
        let (status, text, body) = call(svc, &format!("{first}{cursor}"), None).await;
        assert_eq!(status, 200, "{text}");
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
        assert!(pages < 10_000, "the pages never end");
    }
}

fn refused_naming(status: u16, text: &str, variable: &str) {
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("budget_exceeded"), "{text}");
    assert!(text.contains(variable), "names {variable}: {text}");
}

#[tokio::test]
async fn a_1ms_read_over_every_device_evaluates_at_most_its_budget() {
    // 100,000 readings of 100 devices in one hour bucket over 4 shards; the read asks
    // for one millisecond that holds 100 of them.
    let shards = shard_table(table_history(vec![(0, hourly(4))]), []);
    let table = MemoryReadings::new(None);
    let readings: Vec<R> = (0..100_000)
        .map(|i| R {
            device: format!("dev-{:03}", i % 100),
            event: format!("e{i:06}"),
            ts_ms: BASE_MS + (i / 100) * 3,
            value: crate::common::n(1.0),
        })
        .collect();
    load(&table, &shards, &readings);
    let shards = Arc::new(shards);
    let budget = RequestBudget {
        evaluated: 20_000,
        ..RequestBudget::default()
    };
    let one_ms = format!("/readings?from={}&to={}", BASE_MS + 1500, BASE_MS + 1501);

    // Without the time index the range is a filter: the whole bucket would be evaluated.
    let svc = service_with(&table, shards.clone(), budget, None);
    let (status, text, _) = call(&svc, &one_ms, None).await;
    refused_naming(status, &text, "QUERY_MAX_EVALUATED");
    assert!(
        text.contains("TimeIndex=enabled"),
        "says the way out: {text}"
    );
    assert!(
        table.evaluated() <= budget.evaluated,
        "evaluated {} items, budget {}",
        table.evaluated(),
        budget.evaluated
    );

    // With it, the range is the key condition: the same read answers at once.
    let before = table.evaluated();
    let indexed = service_with(&table, shards, budget, Some("by-time"));
    let (status, text, body) = call(&indexed, &one_ms, None).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(body["items"].as_array().unwrap().len(), 100);
    assert!(table.evaluated() - before <= 200, "{}", table.evaluated());
}

#[tokio::test]
async fn stats_over_31_days_of_a_raised_empty_device_page_within_the_budget() {
    // k = 32 from before the range on: 744 hour buckets of 33 keys each, 24,552
    // Queries, and not one reading.
    let shards = shard_table(
        table_history(vec![(0, hourly(4))]),
        [("hot".to_owned(), fanout_history(vec![(BASE_MS - DAY, 32)]))],
    );
    let table = MemoryReadings::new(None);
    table.set_latency(Duration::from_millis(5));
    let budget = RequestBudget::default();
    let svc = service_with(&table, Arc::new(shards), budget, None);
    let path = format!(
        "/devices/hot/stats?from={BASE_MS}&to={}&interval=1h&metric=temperature",
        BASE_MS + 31 * DAY
    );
    let wall = Duration::from_secs(2);
    let started = Instant::now();
    let (status, text, body) = call(&svc, &path, Some(started + wall)).await;
    let took = started.elapsed();
    assert!(table.calls() <= budget.queries, "{} Queries", table.calls());
    assert!(took < wall + Duration::from_millis(500), "took {took:?}");
    assert_eq!(status, 200, "{text}");
    assert!(body["buckets"].as_array().unwrap().is_empty());
    let mut cursor = body["next_cursor"]
        .as_str()
        .expect("an early page has a cursor")
        .to_owned();

    // The pages that follow move on and end: the whole range, each within budget.
    table.set_latency(Duration::ZERO);
    let mut pages = 1;
    loop {
        let before = table.calls();
        let (status, text, body) = call(&svc, &format!("{path}&cursor={cursor}"), None).await;
        assert_eq!(status, 200, "{text}");
        assert!(table.calls() - before <= budget.queries);
        assert!(body["buckets"].as_array().unwrap().is_empty());
        pages += 1;
        match body["next_cursor"].as_str() {
            Some(c) => cursor = c.to_owned(),
            None => break,
        }
        assert!(pages < 100, "the pages never end");
    }
    assert!(pages >= 24_552 / 2_000, "{pages} pages");
}

/// The largest reading the ingest accepts: 64 metrics of 64-character names and the
/// longest numbers DynamoDB stores (38 digits, answered with an exponent), 32 tags of 64-character names and 256-character values, every
/// character one that JSON escapes to six bytes.
pub(crate) fn largest_reading(i: i64, shards: u32) -> ReadingItem {
    let escaped = |n: usize, seed: i64| -> String {
        let mut s = format!("{seed:04}");
        s.extend(std::iter::repeat_n('\u{1}', n - 4));
        s
    };
    // Thirty-eight significant digits, a sign and an exponent of three: the longest a
    // number is answered in JSON (`Decimal::json_text`, 45 bytes).
    let longest = store::Decimal::parse(&format!("-9.{}e-120", "9".repeat(37))).unwrap();
    assert_eq!(longest.json_text().len(), 45);
    let metrics: BTreeMap<String, store::Decimal> = (0..64)
        .map(|m| (format!("{m:02}{}", "m".repeat(62)), longest.clone()))
        .collect();
    let tags: BTreeMap<String, String> =
        (0..32).map(|t| (escaped(64, t), escaped(256, i))).collect();
    let reading = Reading {
        device_id: "d".repeat(128),
        event_id: format!("{i:0128}"),
        ts: ts(BASE_MS + i * 3_000),
        metrics,
        tags,
        written: store::WriteOrder::OLDEST,
    };
    let layout = table_history(vec![(0, hourly(shards))]);
    let k = sharding::key::write_key(
        &sharding::key::ReadingRef::new(&reading.device_id, &reading.event_id, reading.ts),
        &layout,
        &sharding::epoch::FanoutHistory::new(),
        reading.ts,
    )
    .unwrap()
    .key;
    ReadingItem::new(&reading, k, Duration::from_secs(86_400 * 365 * 100))
}

#[tokio::test]
async fn a_page_of_the_largest_readings_stays_under_6_mb_and_pages_on() {
    let shards = Arc::new(shard_table(table_history(vec![(0, hourly(4))]), []));
    let table = MemoryReadings::new(None);
    for i in 0..1000 {
        table.put(largest_reading(i, 4));
    }
    let budget = RequestBudget::default();
    let svc = service_with(&table, shards, budget, None);
    let device = "d".repeat(128);
    let path = format!(
        "/devices/{device}/readings?from={BASE_MS}&to={}&limit=1000",
        BASE_MS + HOUR
    );
    let (status, text, body) = call(&svc, &path, None).await;
    assert_eq!(status, 200, "{}", &text[..text.len().min(300)]);
    assert!(text.len() <= budget.answer_bytes, "{} bytes", text.len());
    assert!(text.len() < 6 * 1024 * 1024);
    let items = body["items"].as_array().unwrap().len();
    assert!((1..1000).contains(&items), "{items} items");
    assert!(
        body["next_cursor"].is_string(),
        "an early page has a cursor"
    );

    // Every reading exactly once, in order, over the pages; the same read backwards.
    let (got, pages) = follow(&svc, &path).await;
    let expected: Vec<(String, String)> = (0..1000)
        .map(|i| (device.clone(), format!("{i:0128}")))
        .collect();
    assert_eq!(got.len(), 1000, "{pages} pages");
    assert_eq!(got, expected);
    let (mut back, _) = follow(&svc, &format!("{path}&order=desc")).await;
    back.reverse();
    assert_eq!(back, expected);
}

/// One device's 2,000 readings, ten to a page, each page answered after 50 ms: a read of
/// them all outlasts any deadline near now.
fn slow_device() -> (MemoryReadings, Arc<MemoryShards>) {
    let shards = Arc::new(shard_table(table_history(vec![(0, hourly(4))]), []));
    let table = MemoryReadings::new(Some(10));
    let readings: Vec<R> = (0..2000)
        .map(|i| R {
            device: "dev-1".into(),
            event: format!("e{i:05}"),
            ts_ms: BASE_MS + i * 10_000,
            value: crate::common::n(1.0),
        })
        .collect();
    load(&table, &shards, &readings);
    table.set_latency(Duration::from_millis(50));
    (table, shards)
}

#[tokio::test]
async fn a_deadline_close_to_now_ends_the_read_early_never_hangs() {
    let (table, shards) = slow_device();
    let svc = service_with(&table, shards, RequestBudget::default(), None);
    let to = BASE_MS + 6 * HOUR;
    for path in [
        format!("/devices/dev-1/readings?from={BASE_MS}&to={to}&limit=1000"),
        format!("/readings?from={BASE_MS}&to={to}&limit=1000"),
        format!("/devices/dev-1/stats?from={BASE_MS}&to={to}&interval=1m&metric=temperature"),
        format!("/devices/dev-1/readings/e00001?ts={}", BASE_MS + 10_000),
    ] {
        let started = Instant::now();
        let (status, text, body) =
            call(&svc, &path, Some(started + Duration::from_millis(120))).await;
        let took = started.elapsed();
        assert!(took < Duration::from_millis(400), "{path}: took {took:?}");
        match status {
            // A page read within the deadline: it ends early, with a cursor.
            200 if !path.contains("/readings/") => {
                assert!(body["next_cursor"].is_string(), "{path}: {text}");
            }
            200 => assert_eq!(body["event_id"], "e00001"),
            _ => refused_naming(status, &text, "QUERY_DEADLINE_MARGIN_MS"),
        }
    }
}

#[tokio::test]
async fn a_slow_key_costs_the_deadline_only_its_own_readings() {
    // A table-layout epoch half an hour in: its keys hold only the later readings, and
    // answer after 1 s. Pages of ten: the first epoch's key takes three. The second
    // round asks its second page beside the slow keys; the deadline comes before they
    // answer, and the page still holds what the arrived page settled, with a cursor
    // that resumes exactly.
    let switch = BASE_MS + HOUR / 2;
    let shards = shard_table(
        table_history(vec![(0, hourly(4)), (switch, Layout::random(nz(2)))]),
        [],
    );
    let table = MemoryReadings::new(Some(10));
    let readings: Vec<R> = (0..60)
        .map(|i| R {
            device: "dev-1".into(),
            event: format!("e{i:02}"),
            ts_ms: BASE_MS + i * 60_000,
            value: crate::common::n(1.0),
        })
        .collect();
    load(&table, &shards, &readings);
    let first = key_of(&shards, &readings[0]).pk;
    for r in &readings[30..] {
        let pk = key_of(&shards, r).pk;
        assert_ne!(pk, first, "the second epoch keys apart");
        table.set_key_latency(&pk, Duration::from_secs(1));
    }
    let svc = service_with(&table, Arc::new(shards), RequestBudget::default(), None);
    let path = format!(
        "/devices/dev-1/readings?from={BASE_MS}&to={}&limit=1000",
        BASE_MS + HOUR
    );
    let started = Instant::now();
    let (status, text, body) = call(&svc, &path, Some(started + Duration::from_millis(300))).await;
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "never waits for the slow keys"
    );
    assert_eq!(status, 200, "{text}");
    let events: Vec<String> = body["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["event_id"].as_str().expect("event id").to_owned())
        .collect();
    let expected: Vec<String> = (0..60).map(|i| format!("e{i:02}")).collect();
    assert_eq!(
        events,
        expected[..20],
        "both arrived pages answered: {text}"
    );
    let cursor = body["next_cursor"].as_str().expect("a cursor");
    let (rest, _) = follow(&svc, &format!("{path}&cursor={cursor}")).await;
    let rest: Vec<String> = rest.into_iter().map(|(_, e)| e).collect();
    assert_eq!(rest, expected[20..]);
}

#[tokio::test]
async fn a_page_that_the_query_budget_ends_resumes_exactly() {
    // One reading a day for 31 days, over 4 shards: a month of hour buckets, most of
    // them empty, read 40 Queries at a time. Every page moves on, and the pages hold
    // every reading once, in order, both ways and over every device too.
    let shards = shard_table(
        table_history(vec![(0, hourly(4))]),
        [("dev-2".to_owned(), fanout_history(vec![(BASE_MS, 3)]))],
    );
    let table = MemoryReadings::new(None);
    let readings: Vec<R> = (0..31)
        .flat_map(|d| {
            ["dev-1", "dev-2"].map(|device| R {
                device: device.into(),
                event: format!("e{d:02}"),
                ts_ms: BASE_MS + d * DAY + 7 * HOUR,
                value: crate::common::n(d as f64),
            })
        })
        .collect();
    load(&table, &shards, &readings);
    let budget = RequestBudget {
        queries: 40,
        ..RequestBudget::default()
    };
    let shards = Arc::new(shards);
    let svc = service_with(&table, shards.clone(), budget, None);
    for device in ["dev-1", "dev-2"] {
        let path = format!(
            "/devices/{device}/readings?from={BASE_MS}&to={}&limit=1000",
            BASE_MS + 31 * DAY
        );
        let expected: Vec<(String, String)> = (0..31)
            .map(|d| (device.to_owned(), format!("e{d:02}")))
            .collect();
        let (got, pages) = follow(&svc, &path).await;
        assert!(pages > 1, "the budget ends pages early");
        assert_eq!(got, expected, "{device}");
        let (mut back, _) = follow(&svc, &format!("{path}&order=desc")).await;
        back.reverse();
        assert_eq!(back, expected, "{device} desc");
    }
    // Every device over a day (the every-device range cap), through the index.
    let indexed = service_with(&table, shards, budget, Some("by-time"));
    let path = format!(
        "/readings?from={}&to={}&limit=1000",
        BASE_MS + 8 * HOUR,
        BASE_MS + 32 * HOUR
    );
    let (got, pages) = follow(&indexed, &path).await;
    assert!(pages > 1, "the budget ends pages early");
    assert_eq!(
        got,
        vec![
            ("dev-1".to_owned(), "e01".to_owned()),
            ("dev-2".to_owned(), "e01".to_owned()),
        ],
        "{pages} pages"
    );
}

#[tokio::test]
async fn a_point_read_past_the_query_budget_is_refused_by_name() {
    // Fan-out 32 at the reading's time: up to 33 GetItems, more than a budget of 5.
    let shards = shard_table(
        table_history(vec![(0, Layout::random(nz(2)))]),
        [("hot".to_owned(), fanout_history(vec![(BASE_MS - DAY, 32)]))],
    );
    let table = MemoryReadings::new(None);
    let budget = RequestBudget {
        queries: 5,
        ..RequestBudget::default()
    };
    let svc = service_with(&table, Arc::new(shards), budget, None);
    let (status, text, _) = call(
        &svc,
        &format!("/devices/hot/readings/missing?ts={BASE_MS}"),
        None,
    )
    .await;
    refused_naming(status, &text, "QUERY_MAX_QUERIES");
    assert!(table.calls() <= 5, "{}", table.calls());
}

#[tokio::test]
async fn the_lambda_deadline_less_the_margin_bounds_the_reads() {
    use lambda_http::RequestExt as _;
    let (table, shards) = slow_device();
    let budget = RequestBudget {
        deadline_margin: Duration::from_millis(800),
        ..RequestBudget::default()
    };
    let svc = service_with(&table, shards, budget, None);
    // The invocation has 1 s left: the reads stop 800 ms before that.
    let mut context = lambda_http::Context::default();
    let in_1s = std::time::SystemTime::now() + Duration::from_secs(1);
    context.deadline = u64::try_from(
        in_1s
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    let request = http::Request::builder()
        .uri(format!(
            "https://api.example/readings?from={BASE_MS}&to={}&limit=1000",
            BASE_MS + 6 * HOUR
        ))
        .body(lambda_http::Body::Empty)
        .unwrap()
        .with_lambda_context(context);
    let started = Instant::now();
    let resp = query::lambda::handle_apigw(&svc, request).await.unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_millis(600), "took {took:?}");
    let lambda_http::Body::Text(text) = resp.body() else {
        panic!("a text body")
    };
    // Without the index the first bucket alone takes 36 pages of 50 ms.
    refused_naming(resp.status().as_u16(), text, "QUERY_DEADLINE_MARGIN_MS");
}
