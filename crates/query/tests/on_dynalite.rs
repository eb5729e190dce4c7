//! The request budgets on dynalite (a second implementation of DynamoDB, on loopback):
//! what is counted against `QUERY_MAX_EVALUATED` is DynamoDB's own `ScannedCount`,
//! items a filter rejected included; and the worst input each route accepts, with
//! what it costs against its budget, printed as a table (`--nocapture`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{PutRequest, WriteRequest};
use query::budget::RequestBudget;
use query::params::parse_request;
use query::{QueryService, ServiceConfig};
use sharding::epoch::FanoutHistory;
use sharding::key::{ItemKey, ReadingRef, write_key};
use stand_in::{Backend, Dynalite, ensure_dynalite, provision_tables, repo_root};
use store::error::StoreError;
use store::item::{Reading, ReadingItem};
use store::memory::MemoryShards;
use store::read::{DynamoReadingSource, ItemsPage, ItemsRequest, Page, PageRequest, ReadingSource};

use crate::budget::largest_reading;
use crate::common::{BASE_MS, fanout_history, hourly, key, now, shard_table, table_history, ts};

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;

/// The DynamoDB adapter, counting the calls and the `ScannedCount` it reports.
#[derive(Debug)]
pub(crate) struct Counted {
    inner: DynamoReadingSource,
    calls: AtomicU64,
    evaluated: AtomicU64,
}

impl Counted {
    /// The adapter over `table` of `client`, nothing counted yet.
    pub(crate) fn new(client: &Client, table: &str) -> Self {
        Self {
            inner: DynamoReadingSource::new(client.clone(), table),
            calls: AtomicU64::new(0),
            evaluated: AtomicU64::new(0),
        }
    }

    /// The calls made and the items DynamoDB evaluated since the last take.
    pub(crate) fn take(&self) -> (u64, u64) {
        (
            self.calls.swap(0, Ordering::SeqCst),
            self.evaluated.swap(0, Ordering::SeqCst),
        )
    }
}

impl ReadingSource for Counted {
    async fn query_page(&self, request: &PageRequest) -> Result<Page, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let page = self.inner.query_page(request).await?;
        self.evaluated.fetch_add(page.items_read, Ordering::SeqCst);
        Ok(page)
    }

    async fn get_reading(
        &self,
        key: &ItemKey,
        consistent: bool,
    ) -> Result<Option<ReadingItem>, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.get_reading(key, consistent).await
    }

    async fn query_items(&self, request: &ItemsRequest) -> Result<ItemsPage, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let page = self.inner.query_items(request).await?;
        self.evaluated.fetch_add(page.items_read, Ordering::SeqCst);
        Ok(page)
    }
}

async fn write_all(client: &Client, table: &str, items: Vec<ReadingItem>) -> anyhow::Result<()> {
    let items = items
        .iter()
        .map(ReadingItem::to_item)
        .collect::<Result<Vec<_>, _>>()?;
    write_items(client, table, items).await
}

/// Writes stored items (readings' own items, blocks) to `table`, 25 a call.
pub(crate) async fn write_items(
    client: &Client,
    table: &str,
    items: Vec<store::batch::Item>,
) -> anyhow::Result<()> {
    for chunk in items.chunks(25) {
        let mut requests = Vec::new();
        for item in chunk {
            let put = PutRequest::builder().set_item(Some(item.clone())).build()?;
            requests.push(WriteRequest::builder().put_request(put).build());
        }
        let mut pending = requests;
        while !pending.is_empty() {
            let out = client
                .batch_write_item()
                .request_items(table, pending)
                .send()
                .await?;
            pending = out
                .unprocessed_items
                .and_then(|mut u| u.remove(table))
                .unwrap_or_default();
        }
    }
    Ok(())
}

fn small_reading(device: &str, event: &str, ts_ms: i64, history: &FanoutHistory) -> ReadingItem {
    let layout = table_history(vec![(0, hourly(1))]);
    let reading = Reading {
        device_id: device.into(),
        event_id: event.into(),
        ts: ts(ts_ms),
        metrics: BTreeMap::from([(
            "temperature".to_owned(),
            store::Decimal::from_f64(20.5).expect("a number"),
        )]),
        tags: BTreeMap::new(),
        written: store::WriteOrder::OLDEST,
    };
    let k = write_key(
        &ReadingRef::new(device, event, reading.ts),
        &layout,
        history,
        reading.ts,
    )
    .unwrap()
    .key;
    ReadingItem::new(&reading, k, Duration::from_secs(86_400 * 3650))
}

/// A private dynalite on loopback with the template's tables under `prefix`: the
/// server (stopped when dropped), a client of it and the readings table's name.
pub(crate) async fn readings_on_dynalite(
    prefix: &str,
) -> anyhow::Result<(Dynalite, Client, String)> {
    let root = repo_root()?;
    let server = Dynalite::start(&ensure_dynalite(&root)?)?;
    let tables = provision_tables(
        &server.endpoint(),
        &root.join("template.yaml"),
        prefix,
        Backend::Dynalite,
    )
    .await?;
    let client = Client::new(&stand_in::sdk_config(&server.endpoint()).await);
    let readings_table = tables.name("ReadingsTable")?.to_owned();
    Ok((server, client, readings_table))
}

/// One row of the worst-case table.
struct Row {
    route: &'static str,
    input: String,
    status: u16,
    queries: u64,
    evaluated: u64,
    bytes: usize,
    wall: Duration,
}

type Svc<'a> = QueryService<&'a Counted, Arc<MemoryShards>>;

fn service<'a>(source: &'a Counted, shards: &Arc<MemoryShards>, budget: RequestBudget) -> Svc<'a> {
    let mut config = ServiceConfig::new(key());
    config.budget = budget;
    QueryService::new(source, shards.clone(), config)
}

#[tokio::test]
async fn budgets_count_scanned_items_on_dynalite_and_bound_the_worst_inputs() -> anyhow::Result<()>
{
    let (server, client, readings_table) = readings_on_dynalite("query-budget").await?;

    // One shard of hour buckets; `hot` raised to k = 32 a day before the month read.
    let hot = fanout_history(vec![(BASE_MS - DAY, 32)]);
    let shards = Arc::new(shard_table(
        table_history(vec![(0, hourly(1))]),
        [("hot".to_owned(), hot.clone())],
    ));
    write_buckets(&client, &readings_table).await?;
    let source = Counted::new(&client, &readings_table);
    let mut rows = vec![scanned_items_count(&source, &shards).await?];
    rows.extend(worst_inputs(&source, &shards).await);
    print_rows(&rows);
    drop(server);
    Ok(())
}

/// Bucket 0: 2,000 small readings of 20 devices, 20 of them in one millisecond.
/// Bucket 1: 300 of the largest readings the ingest accepts, of one device.
async fn write_buckets(client: &Client, table: &str) -> anyhow::Result<()> {
    let cold = FanoutHistory::new();
    let bucket: Vec<ReadingItem> = (0..2000)
        .map(|i| {
            let device = format!("dev-{:02}", i % 20);
            small_reading(&device, &format!("e{i:05}"), BASE_MS + (i / 20) * 7, &cold)
        })
        .collect();
    write_all(client, table, bucket).await?;
    let big: Vec<ReadingItem> = (0..300).map(|i| largest_reading(1200 + i, 1)).collect();
    write_all(client, table, big).await
}

/// ScannedCount, not items returned, is what the evaluated budget counts: one
/// millisecond holds 20 readings, and the filter rejects the other 1,980 of the
/// bucket; all 2,000 are counted. Returns the row of the refused read.
async fn scanned_items_count(source: &Counted, shards: &Arc<MemoryShards>) -> anyhow::Result<Row> {
    let one_ms = format!("from={}&to={}", BASE_MS + 490, BASE_MS + 491);
    let svc = service(source, shards, RequestBudget::default());
    let endpoint = parse_request("GET", "/readings", Some(&one_ms), &svc.config().limits)?;
    let (body, stats) = svc.execute(endpoint, now()).await?;
    let body: serde_json::Value = serde_json::from_str(&body)?;
    assert_eq!(body["items"].as_array().map(Vec::len), Some(20), "{body}");
    assert_eq!(stats.items_read, 2000, "{stats:?}");
    assert_eq!(source.take().1, 2000);
    // So a budget of 1,000 refuses that read, though it returns only 20 items, and
    // DynamoDB evaluates no more than the budget on the way.
    let tight = RequestBudget {
        evaluated: 1000,
        ..RequestBudget::default()
    };
    let started = Instant::now();
    let resp = service(source, shards, tight)
        .handle_parts("GET", "/readings", Some(&one_ms), now())
        .await;
    let (queries, evaluated) = source.take();
    assert_eq!(resp.status(), 400, "{}", resp.body());
    assert!(
        resp.body().contains("QUERY_MAX_EVALUATED"),
        "{}",
        resp.body()
    );
    assert!(evaluated <= 1000, "{evaluated}");
    Ok(Row {
        route: "every-device readings",
        input: "1 ms, no TimeIndex, bucket of 2,000 (QUERY_MAX_EVALUATED=1,000)".into(),
        status: 400,
        queries,
        evaluated,
        bytes: resp.body().len(),
        wall: started.elapsed(),
    })
}

/// The worst inputs of each route, under the default budgets: each is answered
/// within them.
async fn worst_inputs(source: &Counted, shards: &Arc<MemoryShards>) -> Vec<Row> {
    let budget = RequestBudget::default();
    let svc = service(source, shards, budget);
    let month = format!("from={BASE_MS}&to={}", BASE_MS + 31 * DAY);
    let worst = [
        (
            "device readings",
            "largest readings, limit=1000".to_owned(),
            format!(
                "/devices/{}/readings?from={}&to={}&limit=1000",
                "d".repeat(128),
                BASE_MS,
                BASE_MS + 2 * HOUR
            ),
        ),
        (
            "device readings",
            "31 days of a k=32 device, empty".to_owned(),
            format!("/devices/hot/readings?{month}&limit=1000"),
        ),
        (
            "every-device readings",
            "24 h, no TimeIndex".to_owned(),
            format!("/readings?from={BASE_MS}&to={}&limit=1000", BASE_MS + DAY),
        ),
        (
            "stats",
            "31 days of a k=32 device, 1h, empty".to_owned(),
            format!("/devices/hot/stats?{month}&interval=1h&metric=temperature"),
        ),
        (
            "point read",
            "a missing reading of a k=32 device".to_owned(),
            format!("/devices/hot/readings/missing?ts={}", BASE_MS + DAY),
        ),
        (
            "shards",
            "a k=32 device".to_owned(),
            "/devices/hot/shards".to_owned(),
        ),
    ];
    let mut rows = Vec::new();
    for (route, input, url) in worst {
        let (path, query) = url.split_once('?').unwrap_or((&url, ""));
        let started = Instant::now();
        let resp = svc.handle_parts("GET", path, Some(query), now()).await;
        let wall = started.elapsed();
        let (queries, evaluated) = source.take();
        let status = resp.status().as_u16();
        assert!(
            [200, 400, 404].contains(&status),
            "{route}: {}",
            resp.body()
        );
        assert!(queries <= budget.queries, "{route}: {queries} Queries");
        assert!(evaluated <= budget.evaluated, "{route}: {evaluated} items");
        assert!(resp.body().len() <= budget.answer_bytes, "{route}");
        rows.push(Row {
            route,
            input,
            status,
            queries,
            evaluated,
            bytes: resp.body().len(),
            wall,
        });
    }
    rows
}

/// The worst-case table, in Markdown.
fn print_rows(rows: &[Row]) {
    println!(
        "| route | worst input | status | Queries | items evaluated | answer bytes | wall time |"
    );
    println!("|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {} | {} | {} | {} | {:.0} ms |",
            r.route,
            r.input,
            r.status,
            r.queries,
            r.evaluated,
            r.bytes,
            r.wall.as_secs_f64() * 1000.0
        );
    }
}

/// A metric is answered as the decimal sent where DynamoDB's number rule is enforced:
/// numbers of 38 significant digits, at both ends of DynamoDB's range and beyond a
/// double's digits are stored on dynalite in the ingest's canonical text and answered
/// by the query as the same decimals (checked against an independent decimal), one
/// reading's own item each.
#[tokio::test]
async fn every_number_dynamodb_stores_is_answered_as_sent_on_dynalite() -> anyhow::Result<()> {
    use std::str::FromStr;

    use bigdecimal::BigDecimal;

    let sent = [
        "0.1000000000000000055511151231257827",
        "12345678901234567890123456789012345678",
        "-9.9999999999999999999999999999999999999e125",
        "1e-130",
        "-1.5e-7",
        "21.50",
        "0",
    ];
    let (server, client, readings_table) = readings_on_dynalite("query-numbers").await?;
    let cold = FanoutHistory::new();
    let items: Vec<ReadingItem> = sent
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let mut item = small_reading("dev-n", &format!("e{i}"), BASE_MS + i as i64, &cold);
            item.metrics = BTreeMap::from([("m".to_owned(), text.parse().expect("a number"))]);
            item
        })
        .collect();
    write_all(&client, &readings_table, items).await?;
    let source = Counted::new(&client, &readings_table);
    let shards = Arc::new(shard_table(table_history(vec![(0, hourly(1))]), []));
    let svc = service(&source, &shards, RequestBudget::default());
    let query = format!("from={BASE_MS}&to={}", BASE_MS + 100);
    let endpoint = parse_request(
        "GET",
        "/devices/dev-n/readings",
        Some(&query),
        &svc.config().limits,
    )?;
    let (body, _) = svc.execute(endpoint, now()).await?;
    let answered = crate::common::answered_decimals(&body, "m");
    let expected: Vec<BigDecimal> = sent
        .iter()
        .map(|t| BigDecimal::from_str(t))
        .collect::<Result<_, _>>()?;
    assert_eq!(answered, expected, "{body}");
    drop(server);
    Ok(())
}
