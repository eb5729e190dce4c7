//! What the benchmarks share: the generated readings, ingest wiring, small statistics.

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroU32;
use std::time::Duration;

use anyhow::{Context, Result};
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use ingest::{Config, Ingest, MemoryQueue};
use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::key::{ReadingRef, write_key};
use sharding::layout::Layout;
use sharding::time::{Bucket, Timestamp};
use store::ReadingItem;
use store::dynamo::DynamoTable;
use store::memory::MemoryShards;
use store::rollup::dynamo::DynamoRollups;

/// Most messages in one ingest invocation: the template's `IngestBatchSize` default
/// (checked against template.yaml by this crate's tests).
pub const TEMPLATE_BATCH_SIZE: usize = 100;

/// 2026-06-22T00:00:00Z, the day the generated readings start (the day of the
/// examples of README and docs/api.md).
pub const T0_MS: i64 = 1_782_086_400_000;

/// The service under test: the real handler and batch writer over the DynamoDB adapter,
/// shard metadata and dead letters held in memory (the sink answers only writes).
pub type Service = Ingest<DynamoTable, MemoryShards, MemoryQueue, DynamoRollups>;

/// A timestamp `ms` after [`T0_MS`].
pub fn ts(ms: i64) -> Result<Timestamp> {
    Ok(Timestamp::from_millis(T0_MS + ms)?)
}

/// One generated reading: its JSON body fields.
#[derive(Debug, Clone)]
pub struct Gen {
    pub device: String,
    pub event: String,
    pub ts_ms: i64,
    pub temperature: f64,
}

impl Gen {
    /// The reading as a JSON object, as a device sends it.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "device_id": self.device,
            "event_id": self.event,
            "ts": self.ts_ms,
            "metrics": {"temperature": self.temperature, "humidity": 41.5},
        })
    }

    /// The reading as the store models it.
    pub fn reading(&self) -> Result<store::Reading> {
        Ok(store::Reading {
            device_id: self.device.clone(),
            event_id: self.event.clone(),
            ts: Timestamp::from_millis(self.ts_ms)?,
            metrics: BTreeMap::from([
                ("temperature".to_owned(), number(self.temperature)?),
                ("humidity".to_owned(), number(41.5)?),
            ]),
            tags: BTreeMap::new(),
            // As the ingest stores it: its message's SentTimestamp, about its time.
            written: store::WriteOrder(self.ts_ms),
        })
    }
}

/// `x` as a device sends it, or an error for a double DynamoDB does not store.
fn number(x: f64) -> Result<store::Decimal> {
    store::Decimal::from_f64(x).ok_or_else(|| anyhow::anyhow!("{x} is no number DynamoDB stores"))
}

/// Item 1's readings: `n` readings of 5,000 devices spread evenly over one day.
pub fn day_of_readings(n: usize) -> Vec<Gen> {
    let step = 86_400_000 / n.max(1) as i64;
    (0..n)
        .map(|i| Gen {
            device: format!("dev-{:05}", i % 5_000),
            event: format!("evt-{i:08}"),
            ts_ms: T0_MS + i as i64 * step,
            temperature: 15.0 + (i % 200) as f64 / 10.0,
        })
        .collect()
}

/// The stored item of `g` under `table` (no fan-out): what every writer of item 1 puts.
pub fn keyed_item(g: &Gen, table: &TableHistory, retention: Duration) -> Result<ReadingItem> {
    let reading = g.reading()?;
    let key = write_key(
        &ReadingRef::new(&reading.device_id, &reading.event_id, reading.ts),
        table,
        &FanoutHistory::new(),
        reading.ts,
    )?
    .key;
    Ok(ReadingItem::new(&reading, key, retention))
}

/// Hour buckets over `n` shards.
pub fn hourly(n: u32) -> Layout {
    Layout::time_bucket(Bucket::Hour, NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN))
}

/// An ingest configuration over the defaults, with `extra` variables on top.
pub fn ingest_config(extra: &[(&str, &str)]) -> Result<Config> {
    let mut vars: HashMap<String, String> = [
        ("TABLE_NAME", "readings"),
        ("SHARD_TABLE_NAME", "shards"),
        ("DLQ_URL", "http://127.0.0.1:9/dlq"),
        ("INGEST_SENDER_ID", SENDER_ID),
        // Items 1 to 7 measure the item-a-reading layout (their figures predate blocks);
        // item 8 turns blocks on, a new table's default.
        ("BLOCKS", "off"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    for (k, v) in extra {
        vars.insert((*k).to_owned(), (*v).to_owned());
    }
    Config::from_lookup(|name| vars.get(name).cloned()).context("ingest configuration")
}

/// The ingest service writing through the SDK to `endpoint`.
pub async fn service(endpoint: &str, config: Config) -> Service {
    let sdk = stand_in::sdk_config(endpoint).await;
    service_on(&aws_sdk_dynamodb::Client::new(&sdk), config)
}

/// The ingest handler writing through `client`, shard metadata and queue in memory.
pub fn service_on(client: &aws_sdk_dynamodb::Client, config: Config) -> Service {
    let table = DynamoTable::new(client, &config.table_name);
    Ingest::new(config, table, MemoryShards::new(), MemoryQueue::new())
}

/// An SQS event holding one message per body, as Lambda delivers it.
pub fn event(bodies: impl IntoIterator<Item = (String, String)>) -> SqsEvent {
    let mut event = SqsEvent::default();
    event.records = bodies
        .into_iter()
        .map(|(id, body)| record(id, body))
        .collect();
    event
}

/// The one `SenderId` of the simulated queue, and the ingest's own: as on the stand-in,
/// every sender is the same, so the handler reads its copies' requeue counts.
pub const SENDER_ID: &str = "AIDABENCHSENDER";

/// One SQS record of message `id`, as Lambda delivers it.
pub fn record(id: String, body: String) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.attributes
        .insert("SenderId".to_owned(), SENDER_ID.to_owned());
    m.message_id = Some(id);
    m.body = Some(body);
    m.event_source = Some("aws:sqs".to_owned());
    m.aws_region = Some("us-east-1".to_owned());
    m
}

/// The `p` quantile (0..=1) of sorted `xs` by nearest rank.
pub fn quantile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// Median of `xs` (sorted in place).
pub fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    quantile(xs, 0.5)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_batch_size_is_the_templates_default() {
        let path = stand_in::repo_root()
            .expect("the repository root")
            .join("template.yaml");
        let text = std::fs::read_to_string(path).expect("template.yaml is readable");
        let template: yaml_serde::Value =
            yaml_serde::from_str(&text).expect("template.yaml is YAML");
        let default = template["Parameters"]["IngestBatchSize"]["Default"].as_f64();
        assert_eq!(default, Some(super::TEMPLATE_BATCH_SIZE as f64));
    }
}
