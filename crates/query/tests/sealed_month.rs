//! A month of hourly stats of a device writing every second, from its hour summaries on
//! dynalite (whose Query pages are DynamoDB's 1 MB ones, unlike the in-memory fake's
//! 100 items): the calls and the items evaluated, counted at the rollups table's port,
//! with the figures printed (`--nocapture`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use aws_sdk_dynamodb::Client;
use query::params::parse_request;
use query::{QueryService, ServiceConfig};
use serde_json::Value;
use stand_in::{Backend, Dynalite, ensure_dynalite, provision_tables, repo_root};
use store::Written;
use store::error::StoreError;
use store::memory::MemoryReadings;
use store::rollup::dynamo::DynamoRollups;
use store::rollup::{
    DeviceHour, HOUR_MS, MINUTE_MS, RollupItem, RollupPage, RollupQuery, RollupTable, keys,
};

use crate::common::{BASE_MS, R, hourly, key, load, now, shard_table, table_history};

const DAY: i64 = 24 * HOUR_MS;
const DEVICE: &str = "sensor-7";

/// The rollups table's adapter, counting the reads and the items DynamoDB evaluated.
#[derive(Debug, Clone)]
struct Counted {
    inner: Arc<DynamoRollups>,
    calls: Arc<AtomicU64>,
    evaluated: Arc<AtomicU64>,
}

impl Counted {
    /// Calls and items evaluated since the last take.
    fn take(&self) -> (u64, u64) {
        (
            self.calls.swap(0, Ordering::SeqCst),
            self.evaluated.swap(0, Ordering::SeqCst),
        )
    }
}

impl RollupTable for Counted {
    async fn put_if_newer(&self, item: &RollupItem) -> Result<Written, StoreError> {
        self.inner.put_if_newer(item).await
    }
    async fn put_if_version(
        &self,
        item: &RollupItem,
        expected: Option<u64>,
    ) -> Result<Written, StoreError> {
        self.inner.put_if_version(item, expected).await
    }
    async fn delete_if(&self, pk: &str, sk: &str, version: u64) -> Result<Written, StoreError> {
        self.inner.delete_if(pk, sk, version).await
    }
    async fn put(&self, item: &RollupItem) -> Result<(), StoreError> {
        self.inner.put(item).await
    }
    async fn get(
        &self,
        pk: &str,
        sk: &str,
        consistent: bool,
    ) -> Result<Option<RollupItem>, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let item = self.inner.get(pk, sk, consistent).await?;
        self.evaluated
            .fetch_add(u64::from(item.is_some()), Ordering::SeqCst);
        Ok(item)
    }
    async fn query(&self, q: &RollupQuery) -> Result<RollupPage, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let page = self.inner.query(q).await?;
        self.evaluated.fetch_add(page.evaluated, Ordering::SeqCst);
        Ok(page)
    }
}

/// One hour of the device: a reading every second, three metrics, two tags.
fn hour_of_readings(hour: i64) -> DeviceHour {
    let mut dh = DeviceHour::new(DEVICE, hour);
    let tags = BTreeMap::from([
        ("site".to_owned(), "plant-north-3".to_owned()),
        ("firmware".to_owned(), "4.12.7".to_owned()),
    ]);
    for s in 0..3600_i64 {
        let metrics = BTreeMap::from([
            (
                "temperature".to_owned(),
                store::Decimal::parse(&format!("{}.{}", 18 + s % 7, s % 10)).unwrap(),
            ),
            (
                "humidity".to_owned(),
                store::Decimal::parse(&format!("{}.25", 40 + s % 13)).unwrap(),
            ),
            (
                "pressure".to_owned(),
                store::Decimal::parse(&format!("101{}.5", s % 9)).unwrap(),
            ),
        ]);
        dh.add(hour + s * 1000, &format!("evt-{s:06}"), &metrics, &tags);
    }
    dh
}

/// `template`'s readings moved to `hour`.
fn moved(template: &DeviceHour, hour: i64) -> DeviceHour {
    let shift = hour - template.hour_ms;
    DeviceHour {
        hour_ms: hour,
        first_ms: template.first_ms + shift,
        last_ms: template.last_ms + shift,
        ..template.clone()
    }
}

/// A private dynalite with the template's tables, the device's hours `[from_ms, end)`
/// sealed in its rollups table (each hour's summary, the device-hour of the hour 31
/// days before `end`, the watermark), the table's counted adapter, and the bytes of
/// one summary's body.
async fn sealed_on_dynalite(from_ms: i64, end: i64) -> anyhow::Result<(Dynalite, Counted, usize)> {
    let root = repo_root()?;
    let server = Dynalite::start(&ensure_dynalite(&root)?)?;
    let tables = provision_tables(
        &server.endpoint(),
        &root.join("template.yaml"),
        "query-month",
        Backend::Dynalite,
    )
    .await?;
    let client = Client::new(&stand_in::sdk_config(&server.endpoint()).await);
    let rollups = Counted {
        inner: Arc::new(DynamoRollups::new(client, tables.name("RollupTable")?)),
        calls: Arc::new(AtomicU64::new(0)),
        evaluated: Arc::new(AtomicU64::new(0)),
    };
    let template = hour_of_readings(BASE_MS);
    let mut hour = from_ms;
    while hour < end {
        let dh = moved(&template, hour);
        let summary = dh.summary();
        let key = keys::device_summary(DEVICE, hour);
        rollups
            .put(&RollupItem::with_body(key, dh.readings(), &summary, None)?)
            .await?;
        if hour == end - 31 * DAY {
            let key = keys::device_hour(DEVICE, hour);
            rollups
                .put(&RollupItem::with_body(key, dh.readings(), &dh, None)?)
                .await?;
        }
        hour += HOUR_MS;
    }
    let body = serde_json::json!({ "from_ms": from_ms });
    let watermark = RollupItem::with_body(keys::watermark(), u64::try_from(end)?, &body, None)?;
    rollups.put(&watermark).await?;
    let summary_bytes = serde_json::to_string(&template.summary())?.len();
    rollups.take();
    Ok((server, rollups, summary_bytes))
}

/// Scenario 41's cost: 31 days of hourly stats of a device writing every second (2.7
/// million readings) is one page, from its 744 hour summaries: the watermark's GetItem
/// and one Query (744 small items fit one 1 MB page), at most 5 calls and 1,000 items
/// evaluated, no reading read. Ending 25 minutes past the watermark, the range adds the
/// first hour's device-hour (it starts 25 minutes into it) and the readings of the
/// unsealed 25 minutes.
#[tokio::test]
async fn a_month_of_hourly_stats_is_one_page_of_at_most_5_calls_on_dynalite() -> anyhow::Result<()>
{
    // Sealed from a day before the month to its end.
    let end = BASE_MS + 32 * DAY;
    let (server, rollups, summary_bytes) = sealed_on_dynalite(BASE_MS, end).await?;

    // The readings of the 25 minutes after the watermark, one a second.
    let table = MemoryReadings::new(None);
    let shards = shard_table(table_history(vec![(0, hourly(4))]), []);
    let tail: Vec<R> = (0..25 * 60)
        .map(|s| R {
            device: DEVICE.to_owned(),
            event: format!("tail-{s:05}"),
            ts_ms: end + s * 1000,
            value: crate::common::n(20.5),
        })
        .collect();
    load(&table, &shards, &tail);
    let mut config = ServiceConfig::new(key());
    config.concurrency = 32;
    let svc = QueryService::new(&table, Arc::new(shards), config).with_rollups(rollups.clone());

    println!(
        "| 31 days at 1h | pages | rollups calls | rollups items | reading Queries | readings evaluated | answer bytes |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (name, from, to) in [
        ("ending at the watermark", end - 31 * DAY, end),
        (
            "ending 25 min past it",
            end - 31 * DAY + 25 * MINUTE_MS,
            end + 25 * MINUTE_MS,
        ),
    ] {
        let query = format!("from={from}&to={to}&interval=1h&metric=temperature");
        let path = format!("/devices/{DEVICE}/stats");
        let endpoint = parse_request("GET", &path, Some(&query), &svc.config().limits)?;
        let before = (table.calls(), table.evaluated());
        let (body, stats) = svc.execute(endpoint, now()).await?;
        let (calls, evaluated) = rollups.take();
        let (queries, readings) = (table.calls() - before.0, table.evaluated() - before.1);
        let page: Value = serde_json::from_str(&body)?;
        assert!(page["next_cursor"].is_null(), "{name}: one page");
        let buckets = page["buckets"].as_array().map(Vec::len).unwrap_or_default();
        println!(
            "| {name} | 1 | {calls} | {evaluated} | {queries} | {readings} | {} |",
            body.len()
        );
        if to == end {
            assert_eq!(buckets, 31 * 24, "{name}");
            assert!(
                page["buckets"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .all(|b| b["count"] == 3600),
                "every hour's 3,600 readings"
            );
            // The watermark, the device's late marks (none), the summaries' Query.
            assert_eq!((calls, evaluated), (3, 31 * 24 + 1), "{name}");
            assert!(calls <= 5 && evaluated <= 1_000, "{name}");
            assert_eq!((queries, readings), (0, 0), "{name}: no reading read");
        } else {
            assert_eq!(buckets, 31 * 24 + 1, "{name}");
            // The watermark, the device's late marks (none), the first hour's
            // device-hour, the summaries' Query.
            assert_eq!((calls, evaluated), (4, 31 * 24 + 1), "{name}");
            assert!(
                calls + queries <= 5,
                "{name}: {queries} Queries of readings"
            );
            assert_eq!(readings, 25 * 60, "{name}: the unsealed minutes' readings");
        }
        assert_eq!(
            (stats.calls, stats.items_read),
            (calls + queries, evaluated + readings),
            "{name}: the request counts what the ports count"
        );
    }
    println!("(one hour summary's body: {summary_bytes} bytes)");
    drop(server);
    Ok(())
}
