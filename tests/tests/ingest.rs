//! The ingest handler end to end: the real handler (`Ingest::from_clients`) with its SDK
//! pointed at `capacity-proxy` in front of a private moto, one fault per test
//! (docs/reliability.md scenarios 3, 4, 5, 6, 13 and the 5xx part of 14), and the handler on
//! dynalite for the table side, so no behaviour of one emulator is taken for DynamoDB's.
//!
//! Time comes in as `now` and the proxy's capacity runs on a `ManualClock` wherever
//! budgets matter, so throttles fall on the same items on every run; fault draws are
//! seeded.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_dynamodb::types::AttributeValue;
use capacity_proxy::{Faults, ManualClock, Proxy, ProxyConfig, ProxyHandle, TableConfig};
use ingest::{Config, Fate, Ingest, Report};
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::{Value, json};
use sharding::epoch::TableHistory;
use sharding::key::{ReadingRef, write_key};
use sharding::time::Timestamp;
use stand_in::{Backend, Dynalite, TestStack};
use store::dynamo::{DynamoShards, DynamoTable};
use store::rollup::dynamo::DynamoRollups;
use store::{ReadingItem, ShardReader, ShardStore};
use tokio::time::Instant;

use crate::harness;

pub(crate) type Service = Ingest<DynamoTable, DynamoShards, ingest::SqsQueue, DynamoRollups>;

/// Seed of the proxy's fault draws.
const SEED: u64 = 4;
/// Throttle reasons as DynamoDB (and the proxy) spell them.
const KEY_RANGE: &str = "TableWriteKeyRangeThroughputExceeded";
const TABLE_CAP: &str = "TableWriteProvisionedThroughputExceeded";

/// The clock of the handler: shortly after the readings of `events/`.
pub(crate) fn t0() -> Timestamp {
    Timestamp::parse("2026-06-22T04:00:00Z").expect("valid timestamp")
}

/// An hour before [`t0`]: the readings' bucket.
fn hour3() -> Timestamp {
    Timestamp::parse("2026-06-22T03:00:00Z").expect("valid timestamp")
}

fn at(base: Timestamp, secs: u64) -> Timestamp {
    base.saturating_add(Duration::from_secs(secs))
}

/// A generous Lambda deadline for tests where time is not the fault.
pub(crate) fn roomy() -> Instant {
    Instant::now() + Duration::from_secs(120)
}

/// One test's world: moto (SQS, and DynamoDB unless dynalite serves it), the proxy in
/// front of the DynamoDB endpoint, and clients.
pub(crate) struct Rig {
    pub(crate) stack: TestStack,
    /// Keeps dynalite running when it serves the tables.
    pub(crate) _dynalite: Option<Dynalite>,
    pub(crate) table_name: String,
    pub(crate) shard_table_name: String,
    pub(crate) proxy: ProxyHandle,
    /// Straight to the DynamoDB endpoint: checks bypass the proxy's faults.
    pub(crate) direct: aws_sdk_dynamodb::Client,
    pub(crate) via_proxy: aws_sdk_dynamodb::Client,
    pub(crate) sqs: aws_sdk_sqs::Client,
}

impl Rig {
    pub(crate) async fn start(
        backend: Backend,
        configure: impl FnOnce(&mut ProxyConfig, &str),
    ) -> Result<Self> {
        let stack = TestStack::start().await?;
        let (dynalite, endpoint, table_name, shard_table_name) = match backend {
            Backend::Moto => (
                None,
                stack.endpoint(),
                stack.stack.table_name.clone(),
                stack.stack.shard_table_name.clone(),
            ),
            Backend::Dynalite => {
                let root = stand_in::repo_root()?;
                let dynalite = Dynalite::start(&stand_in::ensure_dynalite(&root)?)?;
                let tables = stand_in::provision_tables(
                    &dynalite.endpoint(),
                    &harness::template_path()?,
                    "e2e-ingest",
                    Backend::Dynalite,
                )
                .await?;
                let (readings, shards) = (
                    tables.name("ReadingsTable")?.to_owned(),
                    tables.name("ShardsTable")?.to_owned(),
                );
                let endpoint = dynalite.endpoint();
                (Some(dynalite), endpoint, readings, shards)
            }
        };
        let mut config = ProxyConfig::forward(&endpoint)?;
        config.seed = Some(SEED);
        configure(&mut config, &table_name);
        let proxy = Proxy::start(config).await?;
        Ok(Self {
            direct: harness::dynamodb(&endpoint).await,
            via_proxy: harness::dynamodb(&proxy.url()).await,
            sqs: harness::sqs(&stack.endpoint()).await,
            stack,
            _dynalite: dynalite,
            table_name,
            shard_table_name,
            proxy,
        })
    }

    pub(crate) fn config(&self, extra: &[(&str, &str)]) -> Config {
        let mut vars: BTreeMap<&str, &str> = BTreeMap::from([
            ("TABLE_NAME", self.table_name.as_str()),
            ("SHARD_TABLE_NAME", self.shard_table_name.as_str()),
            ("DLQ_URL", self.stack.stack.dlq_url.as_str()),
            ("SHARD_STRATEGY", "time-bucket"),
            ("BUCKET", "hour"),
            ("SHARDS", "8"),
            ("MAX_INFLIGHT", "4"),
            ("RETRY_BASE_MS", "5"),
            ("RETRY_CAP_MS", "50"),
            ("RETRY_MAX_ATTEMPTS", "4"),
            ("DEADLINE_MARGIN_MS", "500"),
            // These tests count items of one reading each, so they run on the
            // item-a-reading layout; blocks.rs runs the same handler with blocks, the
            // layout of a new table by default.
            ("BLOCKS", "off"),
        ]);
        vars.extend(extra.iter().copied());
        Config::from_lookup(|name| vars.get(name).map(|v| (*v).to_owned()))
            .expect("valid test configuration")
    }

    /// A fresh handler instance (empty caches, like a new Lambda instance) through the
    /// proxy.
    pub(crate) fn service(&self, extra: &[(&str, &str)]) -> Service {
        Ingest::from_clients(self.config(extra), &self.via_proxy, &self.sqs)
    }

    /// A handler instance straight to the DynamoDB endpoint (a redelivery after the
    /// fault has passed).
    pub(crate) fn direct_service(&self, extra: &[(&str, &str)]) -> Service {
        Ingest::from_clients(self.config(extra), &self.direct, &self.sqs)
    }

    pub(crate) fn shards(&self) -> DynamoShards {
        DynamoShards::new(&self.direct, &self.shard_table_name)
    }

    /// Every reading of the readings table, blocks expanded (a reading held by two
    /// items appears twice).
    pub(crate) async fn readings(&self) -> Result<Vec<ReadingItem>> {
        let mut readings = Vec::new();
        for item in scan(&self.direct, &self.table_name).await? {
            readings.extend(store::block::expand(item)?);
        }
        Ok(readings)
    }

    /// Partition keys of the shard metadata table.
    async fn metadata_keys(&self) -> Result<BTreeSet<String>> {
        Ok(scan(&self.direct, &self.shard_table_name)
            .await?
            .iter()
            .filter_map(|item| match item.get("PK") {
                Some(AttributeValue::S(pk)) => Some(pk.clone()),
                _ => None,
            })
            .collect())
    }

    pub(crate) async fn finish(self) -> Result<()> {
        self.proxy.shutdown().await?;
        Ok(())
    }
}

pub(crate) async fn scan(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<Vec<store::batch::Item>> {
    store::scan::scan_items(client.scan().table_name(table).consistent_read(true))
        .await
        .with_context(|| format!("scanning {table}"))
}

/// A reading's identity.
type Id = (String, String);

/// Messages built for a test, with the readings each one carries.
#[derive(Debug, Default)]
struct Batch {
    records: Vec<Value>,
    owned: BTreeMap<String, Vec<Id>>,
}

impl Batch {
    /// Adds one message carrying `readings` of `device` at `ts`, `ts + 1 s`, ...
    fn push(&mut self, id: &str, device: &str, first_event: usize, count: usize, ts: Timestamp) {
        let readings: Vec<Value> = (0..count)
            .map(|i| {
                json!({
                    "device_id": device,
                    "event_id": format!("{id}-{}", first_event + i),
                    "ts": at(ts, i as u64).to_rfc3339(),
                    "metrics": {"temperature": 20.0 + i as f64, "humidity": 40.5},
                    "tags": {"site": "e2e"},
                })
            })
            .collect();
        let ids = readings
            .iter()
            .map(|r| {
                (
                    r["device_id"].as_str().unwrap_or_default().to_owned(),
                    r["event_id"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        let body = match readings.as_slice() {
            [one] => one.to_string(),
            _ => json!({ "readings": readings }).to_string(),
        };
        self.records.push(json!({
            "messageId": id,
            "receiptHandle": format!("handle-{id}"),
            "body": body,
            // Sent when its last reading was taken, as a device sends: what the ingest
            // measures a device's rate by.
            "attributes": {
                "ApproximateReceiveCount": "1",
                "SentTimestamp": at(ts, count.saturating_sub(1) as u64).as_millis().to_string(),
            },
            "messageAttributes": {},
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:shardline-ingest",
            "awsRegion": "us-east-1",
        }));
        self.owned.insert(id.to_owned(), ids);
    }

    fn event(&self) -> SqsEvent {
        serde_json::from_value(json!({ "Records": self.records })).expect("valid SQS event")
    }

    /// The messages among these with the given ids, as SQS would redeliver them.
    fn redelivery(&self, ids: &BTreeSet<String>) -> SqsEvent {
        let records: Vec<&Value> = self
            .records
            .iter()
            .filter(|r| r["messageId"].as_str().is_some_and(|id| ids.contains(id)))
            .collect();
        serde_json::from_value(json!({ "Records": records })).expect("valid SQS event")
    }

    fn ids(&self) -> BTreeSet<Id> {
        self.owned.values().flatten().cloned().collect()
    }
}

fn reported(report: &Report) -> BTreeSet<String> {
    report
        .messages
        .iter()
        .filter(|m| matches!(m.fate, Fate::Reported { .. }))
        .map(|m| m.message_id.clone())
        .collect()
}

fn written(report: &Report) -> BTreeSet<String> {
    report
        .messages
        .iter()
        .filter(|m| matches!(m.fate, Fate::Written { .. }))
        .map(|m| m.message_id.clone())
        .collect()
}

/// Every reading of `expected` is stored exactly once, and nothing else is.
fn assert_exactly_once(items: &[ReadingItem], expected: &BTreeSet<Id>) {
    let mut counts: BTreeMap<Id, usize> = BTreeMap::new();
    for item in items {
        *counts
            .entry((item.device_id.clone(), item.event_id.clone()))
            .or_default() += 1;
    }
    let duplicated: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        duplicated.is_empty(),
        "stored more than once: {duplicated:?}"
    );
    let stored: BTreeSet<Id> = counts.into_keys().collect();
    let missing: Vec<_> = expected.difference(&stored).collect();
    let extra: Vec<_> = stored.difference(expected).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {} readings (first {:?}), {} unexpected (first {:?})",
        missing.len(),
        missing.first(),
        extra.len(),
        extra.first()
    );
}

/// The partition key a reading of `device` at `ts` gets under the stored layout with
/// fan-out 1.
fn cold_pk(layout: &TableHistory, device: &str, ts: Timestamp) -> Result<String> {
    Ok(write_key(
        &ReadingRef::new(device, "probe", ts),
        layout,
        &Default::default(),
        ts,
    )?
    .key
    .pk)
}

/// Redelivers the reported messages (SQS would) until none is reported, stepping the
/// proxy's manual clock one second per round so budgets refill; bounded.
async fn drain(
    service: &Service,
    batch: &Batch,
    mut pending: BTreeSet<String>,
    now: Timestamp,
    clock: &ManualClock,
) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(99);
    for _ in 0..30 {
        if pending.is_empty() {
            return Ok(());
        }
        clock.advance(Duration::from_secs(1));
        let report = service
            .process(&batch.redelivery(&pending), now, roomy(), &mut rng)
            .await;
        ensure!(
            report.dead_lettered == 0,
            "nothing here is invalid: {report:?}"
        );
        pending = reported(&report);
    }
    anyhow::bail!(
        "{} messages still reported after 30 redeliveries",
        pending.len()
    )
}

/// Scenario 3: 30% of the items of every `BatchWriteItem` come back unprocessed.
async fn unprocessed_items_are_retried_until_written(backend: Backend) -> Result<()> {
    let rig = Rig::start(backend, |c, _| c.faults.unprocessed_rate = 0.3).await?;
    let attempts = 12;
    let service = rig.service(&[("RETRY_MAX_ATTEMPTS", "12")]);
    let mut batch = Batch::default();
    for m in 0..100 {
        batch.push(
            &format!("a{m:03}"),
            &format!("dev-{}", m % 8),
            0,
            3,
            at(hour3(), 60 + m),
        );
    }
    let report = service
        .process(&batch.event(), t0(), roomy(), &mut StdRng::seed_from_u64(1))
        .await;

    assert_eq!(written(&report).len(), 100, "{report:?}");
    assert!(report.response()?.batch_item_failures.is_empty());
    assert_exactly_once(&rig.readings().await?, &batch.ids());
    // 300 distinct items make 12 chunks of 25, or 13 when the first round goes in two
    // waves (under MAX_INFLIGHT 4, 100 readings fill every slot once) and the first
    // wave ends in a short chunk. Every call but a chunk's first is a retry, and each
    // chunk makes at most `attempts` calls.
    let stats = &report.writes;
    assert_eq!(stats.written, 300);
    let chunks = stats.calls - stats.retries;
    assert!((12..=13).contains(&chunks), "{stats:?}");
    assert!(stats.calls > chunks, "retries expected: {stats:?}");
    assert!(stats.calls <= chunks * attempts, "{stats:?}");
    let proxy = rig.proxy.stats();
    assert_eq!(
        proxy.requests_by_op.get("BatchWriteItem"),
        Some(&stats.calls)
    );
    // The writer saw exactly the items the proxy held back.
    assert_eq!(stats.unprocessed, proxy.faults.unprocessed_items);
    assert!(stats.unprocessed >= 90, "{stats:?}");
    rig.finish().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_thirty_percent_unprocessed_all_written_once_calls_bounded() -> Result<()> {
    unprocessed_items_are_retried_until_written(Backend::Moto).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynalite_thirty_percent_unprocessed_all_written_once_calls_bounded() -> Result<()> {
    unprocessed_items_are_retried_until_written(Backend::Dynalite).await
}

/// Scenarios 4 and 5, with the default fan-out settings: one hot device over its key's
/// budget. Its first throttle raises its fan-out, in force at once, and the items not
/// yet written are re-keyed onto sub-shards within the same invocation; only messages
/// owning hot items can be reported, and after redeliveries every reading is stored,
/// any reading stored twice (re-keyed on a redelivery) under one sort key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_hot_device_fan_out_is_raised_at_once_and_the_backlog_rekeyed() -> Result<()> {
    hot_device_fan_out_is_raised_at_once_and_the_backlog_rekeyed(Backend::Moto).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynalite_hot_device_fan_out_is_raised_at_once_and_the_backlog_rekeyed() -> Result<()> {
    hot_device_fan_out_is_raised_at_once_and_the_backlog_rekeyed(Backend::Dynalite).await
}

async fn hot_device_fan_out_is_raised_at_once_and_the_backlog_rekeyed(
    backend: Backend,
) -> Result<()> {
    let clock = Arc::new(ManualClock::new());
    let proxy_clock = clock.clone();
    let rig = Rig::start(backend, move |c, readings| {
        c.clock = proxy_clock;
        c.tables.insert(
            readings.to_owned(),
            TableConfig {
                key_wcu: Some(40.0),
                ..TableConfig::default()
            },
        );
    })
    .await?;
    let config = rig.config(&[]);
    let policy = config.shards.directory.policy;
    let hot = "hot-1";
    let hour3 = hour3();
    let layout = TableHistory::new(config.shards.directory.initial_layout.clone());
    let hot_pk = cold_pk(&layout, hot, hour3)?;
    // Cold devices on other partition keys than the hot one.
    let mut cold = Vec::new();
    for i in 0..100 {
        let device = format!("cold-{i:02}");
        if cold_pk(&layout, &device, hour3)? != hot_pk {
            cold.push(device);
        }
        if cold.len() == 4 {
            break;
        }
    }

    // Run 1 at t0: 120 hot items against a budget of 40, 40 cold items interleaved.
    let mut first = Batch::default();
    for m in 0..12 {
        first.push(&format!("h1-{m:02}"), hot, 0, 10, at(hour3, 10 * m));
        if m < 8 {
            let device = &cold[m as usize % cold.len()];
            first.push(&format!("c1-{m:02}"), device, 0, 5, at(hour3, 10 * m));
        }
    }
    let service = rig.service(&[]);
    let mut rng = StdRng::seed_from_u64(2);
    let report = service
        .process(&first.event(), t0(), roomy(), &mut rng)
        .await;
    let failed = reported(&report);
    let cold_messages: BTreeSet<String> = first
        .owned
        .keys()
        .filter(|id| id.starts_with("c1-"))
        .cloned()
        .collect();
    assert!(
        failed.iter().all(|id| id.starts_with("h1-")),
        "only messages owning hot items are reported: {failed:?}"
    );
    assert!(cold_messages.is_subset(&written(&report)));
    assert!(
        report.writes.throttles.contains_key(KEY_RANGE),
        "the hot key must be throttled: {report:?}"
    );
    assert!(!report.writes.throttles.contains_key(TABLE_CAP));
    // The first throttle created the metadata and raised k in the same call, in force
    // at once: the items not yet written were re-keyed onto sub-shards, each with a
    // budget of its own, so more than the cold key's 40 hot items are stored.
    assert!(report.fanout_raises >= 1, "{report:?}");
    assert!(report.stale > 0, "{report:?}");
    assert!(report.writes.written > 40 + 40, "{report:?}");
    let meta = rig
        .shards()
        .get_entity(hot)
        .await?
        .context("hot metadata")?;
    assert!(meta.number_of_shards >= 2, "{meta:?}");
    let first_raise = meta.shard_history.epochs()[0];
    assert!(
        first_raise.effective_from >= t0() && first_raise.effective_from < at(t0(), 120),
        "in force from its decision: {first_raise:?}"
    );
    assert!(first_raise.effective_from < at(t0(), policy.propagation_margin.as_secs()));
    // The raise listed the device in the hot index's hours.
    assert!(
        rig.metadata_keys()
            .await?
            .iter()
            .any(|k| k.starts_with("hot#")),
        "no hot index item"
    );
    for device in &cold {
        assert!(rig.shards().get_entity(device).await?.is_none());
    }
    let hot_keys: BTreeSet<String> = rig
        .readings()
        .await?
        .into_iter()
        .filter(|i| i.device_id == hot)
        .map(|i| i.pk)
        .collect();
    assert!(
        hot_keys.len() > 1 && hot_keys.iter().any(|pk| *pk != hot_pk),
        "{hot_keys:?}"
    );

    // Nothing lost: redelivering the reported messages once budgets refill writes them.
    // A reading a redelivery re-keys after a raise may be stored twice; both copies
    // carry one sort key, which every read de-duplicates by.
    drain(&service, &first, failed, t0(), &clock).await?;
    assert_stored_under_one_sort_key(&rig.readings().await?, &first.ids());
    rig.finish().await
}

/// Every reading of `expected` is stored, nothing else is, and a reading stored more than
/// once has one sort key across its copies.
fn assert_stored_under_one_sort_key(items: &[ReadingItem], expected: &BTreeSet<Id>) {
    let mut sort_keys: BTreeMap<Id, BTreeSet<String>> = BTreeMap::new();
    for item in items {
        sort_keys
            .entry((item.device_id.clone(), item.event_id.clone()))
            .or_default()
            .insert(item.sk.clone());
    }
    assert!(
        sort_keys.values().all(|sks| sks.len() == 1),
        "{sort_keys:?}"
    );
    let stored: BTreeSet<Id> = sort_keys.into_keys().collect();
    assert_eq!(&stored, expected);
}

/// Scenario 6: a table-level cap. The handler backs off and reports; no fan-out is
/// raised (no metadata is even created), however long past any cooldown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_cap_backs_off_without_raising_fan_out() -> Result<()> {
    let clock = Arc::new(ManualClock::new());
    let proxy_clock = clock.clone();
    let rig = Rig::start(Backend::Moto, move |c, readings| {
        c.clock = proxy_clock;
        c.tables.insert(
            readings.to_owned(),
            TableConfig {
                table_wcu: Some(30.0),
                ..TableConfig::default()
            },
        );
    })
    .await?;
    let policy = rig.config(&[]).shards.directory.policy;
    let mut batch = Batch::default();
    for m in 0..8 {
        batch.push(
            &format!("t1-{m}"),
            &format!("dev-{m}"),
            0,
            10,
            at(hour3(), 60 * m),
        );
    }
    let mut later = Batch::default();
    for m in 0..4 {
        later.push(
            &format!("t2-{m}"),
            &format!("dev-{m}"),
            100,
            10,
            at(hour3(), 600 + 60 * m),
        );
    }
    let service = rig.service(&[]);
    let mut rng = StdRng::seed_from_u64(3);
    let first = service
        .process(&batch.event(), t0(), roomy(), &mut rng)
        .await;
    assert!(!reported(&first).is_empty(), "{first:?}");
    assert_eq!(first.writes.written, 30);
    assert!(first.writes.throttles.contains_key(TABLE_CAP), "{first:?}");
    assert!(!first.writes.throttles.contains_key(KEY_RANGE));
    assert_eq!(first.fanout_raises, 0);

    let past_cooldown = at(t0(), 2 * (policy.cooldown + policy.jitter).as_secs());
    let second = service
        .process(&later.event(), past_cooldown, roomy(), &mut rng)
        .await;
    assert!(second.all_failed().is_some(), "{second:?}");
    assert_eq!(second.fanout_raises, 0);
    // Only the layout item: no entity was created or raised, the hot set is empty.
    assert_eq!(
        rig.metadata_keys().await?,
        BTreeSet::from(["layout".to_owned()])
    );

    let mut all = Batch::default();
    for b in [&batch, &later] {
        all.records.extend(b.records.iter().cloned());
        all.owned.extend(b.owned.clone());
    }
    let pending = reported(&first)
        .union(&reported(&second))
        .cloned()
        .collect();
    drain(&service, &all, pending, past_cooldown, &clock).await?;
    assert_exactly_once(&rig.readings().await?, &all.ids());
    assert_eq!(
        rig.metadata_keys().await?,
        BTreeSet::from(["layout".to_owned()])
    );
    rig.finish().await
}

/// Scenario 14's 5xx part: 5% of data-plane calls answered with HTTP 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_percent_http_500_retried_all_written() -> Result<()> {
    let rig = Rig::start(Backend::Moto, |c, _| c.faults.error_rate = 0.05).await?;
    let service = rig.service(&[("RETRY_MAX_ATTEMPTS", "8")]);
    let mut batch = Batch::default();
    for m in 0..200 {
        batch.push(
            &format!("e{m:03}"),
            &format!("dev-{}", m % 20),
            0,
            10,
            at(hour3(), 10 * m),
        );
    }
    let report = service
        .process(&batch.event(), t0(), roomy(), &mut StdRng::seed_from_u64(5))
        .await;
    assert_eq!(written(&report).len(), 200, "{:?}", reported(&report));
    assert_exactly_once(&rig.readings().await?, &batch.ids());
    let proxy = rig.proxy.stats();
    assert!(report.writes.transient_errors > 0, "{:?}", report.writes);
    assert!(proxy.faults.error >= report.writes.transient_errors);
    // 2,000 items in 80 chunks; every failed call was retried.
    assert_eq!(report.writes.calls, 80 + report.writes.retries);
    assert_eq!(report.writes.retries, report.writes.transient_errors);
    rig.finish().await
}

/// Scenario 13: 2 s injected latency on every DynamoDB call and a short deadline. The
/// handler answers before the deadline, reports what it could not finish, and a
/// redelivery of the reported messages completes the table with no loss and no
/// duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_second_latency_answers_before_the_deadline_without_loss() -> Result<()> {
    let rig = Rig::start(Backend::Moto, |c, _| {
        c.faults = Faults {
            latency_ms: 2000,
            ..Faults::default()
        }
    })
    .await?;
    let extra = [("MAX_INFLIGHT", "2"), ("DEADLINE_MARGIN_MS", "500")];
    // The layout exists, as in any deployed stack after its first invocation.
    let config = rig.config(&extra);
    rig.shards()
        .create_layout(&TableHistory::new(
            config.shards.directory.initial_layout.clone(),
        ))
        .await?;
    let mut batch = Batch::default();
    for m in 0..100 {
        batch.push(
            &format!("l{m:03}"),
            // Two devices: their fan-out reads fit in one round of MAX_INFLIGHT.
            &format!("dev-{}", m % 2),
            0,
            1,
            at(hour3(), 5 * m),
        );
    }
    let service = rig.service(&extra);
    let mut rng = StdRng::seed_from_u64(6);

    // A deadline shorter than the metadata reads (layout, then fan-outs, 2 s each):
    // nothing can be written, everything is reported, in time.
    let deadline = Instant::now() + Duration::from_millis(3500);
    let report = service
        .process(&batch.event(), t0(), deadline, &mut rng)
        .await;
    let returned = Instant::now();
    assert!(
        returned <= deadline,
        "returned {:?} late",
        returned - deadline
    );
    assert_eq!(reported(&report).len(), 100, "{report:?}");

    // SQS redelivers; the layout is cached now. Fan-outs (2 s) then two rounds of two
    // chunks (2 s each) need 6 s: the first round is written, the second is cut at the
    // deadline and reported.
    let deadline = Instant::now() + Duration::from_millis(6000);
    let report = service
        .process(&batch.event(), t0(), deadline, &mut rng)
        .await;
    let returned = Instant::now();
    assert!(
        returned <= deadline,
        "returned {:?} late",
        returned - deadline
    );
    let pending = reported(&report);
    assert!(!pending.is_empty(), "{report:?}");
    assert!(!written(&report).is_empty(), "{report:?}");
    assert_eq!(pending.len() + written(&report).len(), 100);
    assert!(
        report
            .messages
            .iter()
            .all(|m| !matches!(m.fate, Fate::DeadLettered { .. }))
    );

    // Redelivery of the reported messages once the latency is gone.
    let report = rig
        .direct_service(&extra)
        .process(&batch.redelivery(&pending), t0(), roomy(), &mut rng)
        .await;
    assert_eq!(written(&report), pending);
    assert_exactly_once(&rig.readings().await?, &batch.ids());
    rig.finish().await
}

/// The handler end to end on dynalite (tables) and moto (DLQ), with the shared events:
/// every valid reading stored once, the malformed message in the DLQ with its reason,
/// a redelivery changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynalite_events_land_in_the_table_and_the_dlq() -> Result<()> {
    let rig = Rig::start(Backend::Dynalite, |_, _| {}).await?;
    let service = rig.direct_service(&[]);
    let events = stand_in::repo_root()?.join("events");
    let load = |name: &str| -> Result<SqsEvent> {
        let path = events.join(name);
        let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
        Ok(serde_json::from_str(&text)?)
    };
    let mut rng = StdRng::seed_from_u64(8);
    let mut written = 0;
    for name in [
        "sqs-single.json",
        "sqs-batch.json",
        "sqs-hot-burst.json",
        "sqs-mixed-bad.json",
    ] {
        let report = service.process(&load(name)?, t0(), roomy(), &mut rng).await;
        assert!(
            report.response()?.batch_item_failures.is_empty(),
            "{name}: {report:?}"
        );
        written += report
            .messages
            .iter()
            .map(|m| match m.fate {
                Fate::Written { readings } => readings,
                _ => 0,
            })
            .sum::<usize>();
    }
    assert_eq!(written, 1 + 11 + 100 + 9);
    let count = rig.readings().await?.len();
    assert_eq!(count, written);
    // A redelivery through the Lambda entry point changes nothing.
    let response = service
        .handle(&load("sqs-batch.json")?, t0(), roomy(), &mut rng)
        .await?;
    assert!(response.batch_item_failures.is_empty());
    let items = rig.readings().await?;
    assert_eq!(items.len(), count);
    let distinct: BTreeSet<Id> = items
        .iter()
        .map(|i| (i.device_id.clone(), i.event_id.clone()))
        .collect();
    assert_eq!(distinct.len(), items.len());
    assert!(rig.shards().get_layout().await?.is_some());

    // Exactly one DLQ message: the malformed body, with its reason as attributes.
    let mixed = load("sqs-mixed-bad.json")?;
    let received = rig
        .sqs
        .receive_message()
        .queue_url(&rig.stack.stack.dlq_url)
        .max_number_of_messages(10)
        .message_attribute_names("All")
        .send()
        .await?;
    let messages = received.messages();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].body(), mixed.records[4].body.as_deref());
    let attributes = messages[0].message_attributes().context("attributes")?;
    let value = |k: &str| attributes.get(k).and_then(|v| v.string_value());
    assert_eq!(value("field"), Some("body"));
    assert_eq!(
        value("source_message_id"),
        mixed.records[4].message_id.as_deref()
    );
    assert!(value("reason").is_some_and(|r| r.contains("valid JSON")));
    rig.finish().await
}
