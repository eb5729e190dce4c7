//! The handler: one SQS batch in, one partial-batch response out.
//!
//! Every message ends in exactly one of three fates:
//! - **written**: all its readings are stored;
//! - **dead-lettered**: refused for good (bad JSON, a broken rule, an unkeyable
//!   reading), sent to the DLQ at once with the reason, and not reported, so SQS does
//!   not redeliver it;
//! - **reported** in `batchItemFailures`: something transient kept it out (a throttle,
//!   the deadline, a 5xx, a failed DLQ send, a panic), so SQS redelivers it; its keys are
//!   deterministic, so a redelivery rewrites the same items.
//!
//! A message with several readings is reported if any of them failed retryably (the
//! written ones are rewritten identically). A reported message stays invisible for a
//! wait that doubles with its receive count (when the source queue's URL is
//! configured), so the redrive policy's receives span minutes of throttling rather than
//! a few fixed timeouts. At its last receive before the redrive (`MAX_RECEIVES`), a
//! message still failing is **requeued** instead: sent back to the source queue as a
//! fresh copy, delayed, up to `MAX_REQUEUES` times, then dead-lettered with its reason,
//! so the DLQ never holds a message without one. If every message is reported, the
//! invocation fails as a whole, so Lambda backs off the queue.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use futures::StreamExt;
use rand::Rng;
use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::fanout::{self, KeepReason};
use sharding::key::{KeyError, ReadingRef, write_key};
use sharding::layout::Strategy;
use sharding::time::Timestamp;
use store::batch::{BatchTable, BatchWriter, Item, Outcome, WriteStats, WriterConfig};
use store::directory::{FanoutChange, ShardDirectory, ShardStore};
use store::dynamo::{DynamoShards, DynamoTable};
use store::size::{MAX_ITEM_BYTES, item_size};
use store::{Reading, ReadingItem, StoreError, ThrottleKind};
use tokio::time::Instant;
use tracing::Span;

use crate::config::Config;
use crate::emf::{self, Metric};
use crate::message::{Limits, Refusal, parse_body};
use crate::queue::{DeadLetter, Delay, MAX_DELAY_SECS, Queue, Requeue, SqsQueue};

/// Why the invocation failed as a whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IngestError {
    /// Every message failed transiently: failing the invocation makes Lambda back off.
    #[error("all {messages} messages failed transiently; first: {first}")]
    AllFailed {
        /// How many.
        messages: usize,
        /// The first reason.
        first: String,
    },
    /// A message to report has no id to report it by, so the whole batch must return.
    #[error("a failed message has no messageId; failing the whole batch so it is redelivered")]
    MissingMessageId,
}

/// What became of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// All its readings are stored.
    Written {
        /// How many readings.
        readings: usize,
    },
    /// Sent to the DLQ with this reason.
    DeadLettered {
        /// `field: rule`.
        reason: String,
    },
    /// Reported in `batchItemFailures`.
    Reported {
        /// The last real error.
        reason: String,
    },
    /// Failed transiently at its last receive and sent back to the queue as a fresh
    /// copy (not reported, so the original is deleted).
    Requeued {
        /// The last real error.
        reason: String,
    },
}

/// The message attribute counting how often a message was requeued.
pub const REQUEUES_ATTRIBUTE: &str = "shardline.requeues";
/// The message attribute carrying a requeued copy's first message id.
pub const SOURCE_ID_ATTRIBUTE: &str = "shardline.source_message_id";

/// How often SQS delivered this record (`ApproximateReceiveCount`, 1 when absent).
fn receive_count(record: &SqsMessage) -> u32 {
    record
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// How often this record's message was requeued before (0 for a device's message).
fn requeue_count(record: &SqsMessage) -> u32 {
    record
        .message_attributes
        .get(REQUEUES_ATTRIBUTE)
        .and_then(|a| a.string_value.as_deref())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The id of the message as the device sent it: a requeued copy's first id, else `id`.
fn source_id(record: &SqsMessage, id: &str) -> String {
    record
        .message_attributes
        .get(SOURCE_ID_ATTRIBUTE)
        .and_then(|a| a.string_value.clone())
        .unwrap_or_else(|| id.to_owned())
}

/// A fresh copy of `record`: the same body and string-valued attributes, the requeue
/// count `requeues` and the first message id.
fn copy_of(record: &SqsMessage, id: &str, requeues: u32, delay_secs: u32) -> Requeue {
    let mut attributes: BTreeMap<String, (String, String)> = record
        .message_attributes
        .iter()
        .filter_map(|(name, a)| {
            let data_type = a.data_type.clone()?;
            let value = a.string_value.clone()?;
            Some((name.clone(), (data_type, value)))
        })
        .collect();
    attributes.insert(
        SOURCE_ID_ATTRIBUTE.to_owned(),
        ("String".to_owned(), source_id(record, id)),
    );
    attributes.insert(
        REQUEUES_ATTRIBUTE.to_owned(),
        ("Number".to_owned(), requeues.to_string()),
    );
    Requeue {
        body: record.body.clone().unwrap_or_default(),
        attributes,
        delay_secs: delay_secs.min(MAX_DELAY_SECS),
    }
}

/// One message's fate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageReport {
    /// The SQS message id (empty when the record had none).
    pub message_id: String,
    /// Its fate.
    pub fate: Fate,
}

/// Everything one invocation did.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// One entry per record, in order.
    pub messages: Vec<MessageReport>,
    /// The batch writer's counters.
    pub writes: WriteStats,
    /// Fan-out raises this invocation won.
    pub fanout_raises: u64,
    /// Messages the DLQ accepted.
    pub dead_lettered: u64,
    /// Messages whose DLQ send failed (they are reported instead).
    pub dlq_failures: u64,
    /// Messages whose processing panicked (they are reported).
    pub panics: u64,
    /// Reported messages given a longer visibility timeout before redelivery.
    pub delayed: u64,
    /// Reported messages whose visibility change failed (they come back after the
    /// queue's own timeout).
    pub delay_failures: u64,
    /// Messages sent back to the queue as fresh copies at their last receive.
    pub requeued: u64,
}

impl Report {
    /// The partial-batch response: the ids of the reported messages, each once.
    pub fn response(&self) -> Result<SqsBatchResponse, IngestError> {
        let mut response = SqsBatchResponse::default();
        let mut seen = BTreeSet::new();
        for m in &self.messages {
            if let Fate::Reported { .. } = m.fate {
                if m.message_id.is_empty() {
                    return Err(IngestError::MissingMessageId);
                }
                if seen.insert(m.message_id.as_str()) {
                    response.add_failure(m.message_id.clone());
                }
            }
        }
        Ok(response)
    }

    /// The error to return when every message was reported.
    pub fn all_failed(&self) -> Option<IngestError> {
        let mut reasons = self.messages.iter().map(|m| match &m.fate {
            Fate::Reported { reason } => Some(reason.clone()),
            _ => None,
        });
        let first = reasons.next()??;
        reasons
            .all(|r| r.is_some())
            .then_some(IngestError::AllFailed {
                messages: self.messages.len(),
                first,
            })
    }

    /// The EMF lines of this invocation.
    pub fn emf_lines(&self, now: Timestamp) -> Vec<String> {
        let count =
            |f: fn(&Fate) -> bool| self.messages.iter().filter(|m| f(&m.fate)).count() as u64;
        let dims = [("Function", "ingest")];
        let mut lines = vec![emf::line(
            now.as_millis(),
            &dims,
            &[
                Metric::count("Messages", self.messages.len() as u64),
                Metric::count("ReadingsWritten", self.writes.written),
                Metric::count(
                    "BatchFailures",
                    count(|f| matches!(f, Fate::Reported { .. })),
                ),
                Metric::count("DeadLettered", self.dead_lettered),
                Metric::count("DlqSendFailures", self.dlq_failures),
                Metric::count("WriteCalls", self.writes.calls),
                Metric::count("Retries", self.writes.retries),
                Metric::count("UnprocessedItems", self.writes.unprocessed),
                Metric::count("TransientErrors", self.writes.transient_errors),
                Metric::count("LargeItems", self.writes.large_items),
                Metric::count("DuplicateItems", self.writes.duplicates),
                Metric::count("FanoutRaises", self.fanout_raises),
                Metric::count("Panics", self.panics),
                Metric::count("RedeliveriesDelayed", self.delayed),
                Metric::count("DelayFailures", self.delay_failures),
                Metric::count("Requeued", self.requeued),
            ],
        )];
        for (reason, n) in &self.writes.throttles {
            lines.push(emf::line(
                now.as_millis(),
                &[("Function", "ingest"), ("Reason", reason)],
                &[Metric::count("Throttles", *n)],
            ));
        }
        lines
    }
}

/// Where a message stands between stages.
enum Stage {
    Parsed(Vec<Reading>),
    Keyed(Vec<(Item, Reading)>),
    Refused(Refusal),
    Retry(String),
}

/// A hook run inside each message's guarded section (fault injection in tests).
pub type MessageHook = Arc<dyn Fn(&str) + Send + Sync>;

/// The ingest service: configuration plus the three ports.
pub struct Ingest<T, S, Q> {
    config: Config,
    writer: BatchWriter<T>,
    directory: ShardDirectory<S>,
    queue: Q,
    hook: Option<MessageHook>,
}

impl<T, S, Q> std::fmt::Debug for Ingest<T, S, Q> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ingest")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Ingest<DynamoTable, DynamoShards, SqsQueue> {
    /// The production wiring over SDK clients.
    pub fn from_clients(
        config: Config,
        dynamo: &aws_sdk_dynamodb::Client,
        sqs: &aws_sdk_sqs::Client,
    ) -> Self {
        let table = DynamoTable::new(dynamo, &config.table_name);
        let shards = DynamoShards::new(dynamo, &config.shard_table_name);
        let queue = SqsQueue::new(sqs, &config.dlq_url, config.source_queue_url.clone());
        Self::new(config, table, shards, queue)
    }
}

fn guarded<F: FnOnce() -> Stage>(f: F) -> Stage {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string panic".to_owned());
        Stage::Retry(format!("panic while processing: {what}"))
    })
}

/// Each entity's fan-out history, or why it could not be read.
type Fanouts = HashMap<String, Result<FanoutHistory, StoreError>>;

/// The fan-out `device`'s key at `ts` was made with: its history's k at `ts`, or the
/// layout's default where the history has none.
fn fanout_of(table: &TableHistory, fanouts: &Fanouts, device: &str, ts: Timestamp) -> u32 {
    match fanouts.get(device) {
        Some(Ok(history)) => history
            .at(ts)
            .unwrap_or_else(|| table.at(ts).default_fanout()),
        _ => table.at(ts).default_fanout(),
    }
}

/// Per partition key, the entity with the most items on it (ties: the smaller id) and
/// the fan-out its items there were keyed with.
fn key_owners(
    owners: &[(usize, String)],
    keyed_with: &[u32],
    pks: &[String],
) -> HashMap<String, (String, u32)> {
    let mut counts: HashMap<&str, HashMap<(&str, u32), usize>> = HashMap::new();
    for (((_, device), keyed), pk) in owners.iter().zip(keyed_with).zip(pks) {
        *counts
            .entry(pk.as_str())
            .or_default()
            .entry((device.as_str(), *keyed))
            .or_default() += 1;
    }
    counts
        .into_iter()
        .filter_map(|(pk, by_owner)| {
            by_owner
                .into_iter()
                .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
                .map(|((device, keyed), _)| (pk.to_owned(), (device.to_owned(), keyed)))
        })
        .collect()
}

/// Logs what the directory did about a throttle; 1 when this writer raised k.
fn log_change(entity: &str, change: Result<FanoutChange, StoreError>) -> u64 {
    match change {
        Ok(FanoutChange::Raised(raise)) => {
            tracing::info!(entity, from = raise.from, to = raise.to, "fan-out raised");
            1
        }
        Ok(change) => {
            tracing::debug!(entity, ?change, "fan-out unchanged");
            0
        }
        Err(err) => {
            tracing::warn!(entity, error = %err, "fan-out update failed");
            0
        }
    }
}

fn key_refusal(index: Option<usize>, err: &KeyError) -> Refusal {
    let prefix = index.map(|i| format!("readings[{i}].")).unwrap_or_default();
    let field = match err {
        KeyError::Empty { field }
        | KeyError::Separator { field }
        | KeyError::InvalidChar { field, .. }
        | KeyError::TooLong { field, .. } => {
            if *field == "entity" {
                "device_id".to_owned()
            } else {
                (*field).to_owned()
            }
        }
        KeyError::MissingAttribute { attribute } => format!("tags.{attribute}"),
    };
    Refusal {
        field: format!("{prefix}{field}"),
        rule: err.to_string(),
    }
}

impl<T: BatchTable, S: ShardStore, Q: Queue> Ingest<T, S, Q> {
    /// A service over the given ports.
    pub fn new(config: Config, table: T, shards: S, queue: Q) -> Self {
        let writer = BatchWriter::new(
            table,
            WriterConfig {
                max_inflight: config.max_inflight,
                backoff: config.backoff,
            },
        );
        let directory = ShardDirectory::new(shards, config.directory_config());
        Self {
            config,
            writer,
            directory,
            queue,
            hook: None,
        }
    }

    /// Runs `hook` with each message id inside the message's guarded section; a panic
    /// in it is handled like a panic in parsing. For fault-injection tests.
    #[doc(hidden)]
    pub fn with_message_hook(mut self, hook: MessageHook) -> Self {
        self.hook = Some(hook);
        self
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The batch writer.
    pub fn writer(&self) -> &BatchWriter<T> {
        &self.writer
    }

    /// The shard directory.
    pub fn directory(&self) -> &ShardDirectory<S> {
        &self.directory
    }

    /// The queue port.
    pub fn queue(&self) -> &Q {
        &self.queue
    }

    /// Handles one SQS batch: `now` is this invocation's clock reading, `deadline` the
    /// Lambda deadline. Prints the EMF metric lines.
    pub async fn handle<R: Rng + Send + ?Sized>(
        &self,
        event: &SqsEvent,
        now: Timestamp,
        deadline: Instant,
        rng: &mut R,
    ) -> Result<SqsBatchResponse, IngestError> {
        let report = self.process(event, now, deadline, rng).await;
        for line in report.emf_lines(now) {
            println!("{line}");
        }
        if let Some(err) = report.all_failed() {
            return Err(err);
        }
        report.response()
    }

    /// Processes one SQS batch and reports every message's fate (no output).
    pub async fn process<R: Rng + Send + ?Sized>(
        &self,
        event: &SqsEvent,
        now: Timestamp,
        deadline: Instant,
        rng: &mut R,
    ) -> Report {
        let records = &event.records;
        let ids: Vec<String> = records
            .iter()
            .map(|r| r.message_id.clone().unwrap_or_default())
            .collect();
        let spans: Vec<Span> = ids
            .iter()
            .map(|id| tracing::info_span!("message", message_id = %id))
            .collect();
        let started = Instant::now();
        let work_deadline = deadline
            .checked_sub(self.config.deadline_margin)
            .unwrap_or_else(Instant::now);
        let limits = Limits {
            now,
            max_future: self.config.max_future,
            retention: self.config.retention,
            max_readings: self.config.max_readings_per_message,
        };

        // 1. Parse and validate, each message guarded against panics.
        let mut stages: Vec<Stage> = records
            .iter()
            .zip(&spans)
            .zip(&ids)
            .map(|((record, span), id)| span.in_scope(|| self.parse(record, id, &limits)))
            .collect();

        // 2. Key: the layout and each entity's fan-out, then the items.
        let mut keying: Option<(TableHistory, Fanouts)> = None;
        if stages.iter().any(|s| matches!(s, Stage::Parsed(_))) {
            // Metadata reads are bounded by the deadline like the writes: a slow metadata
            // table must not keep the handler past it.
            let layout = tokio::time::timeout_at(work_deadline, self.directory.layout(now))
                .await
                .unwrap_or(Err(StoreError::Deadline));
            match layout {
                Ok(table) => {
                    let fanouts = self.fanouts(&stages, now, work_deadline).await;
                    for (stage, span) in stages.iter_mut().zip(&spans) {
                        if let Stage::Parsed(readings) = stage {
                            let readings = std::mem::take(readings);
                            *stage =
                                span.in_scope(|| guarded(|| self.key(readings, &table, &fanouts)));
                        }
                    }
                    keying = Some((table, fanouts));
                }
                Err(err) => {
                    tracing::warn!(error = %err, "shard layout unavailable");
                    for stage in &mut stages {
                        if matches!(stage, Stage::Parsed(_)) {
                            *stage = Stage::Retry(format!("shard layout unavailable: {err}"));
                        }
                    }
                }
            }
        }

        // 3. Write every keyed item in one deduplicated, chunked, bounded batch. Each
        //    owner also records the fan-out its key was made with: a throttle on a key
        //    of an older, smaller k is no reason to raise again.
        let mut owners: Vec<(usize, String)> = Vec::new();
        let mut keyed_with: Vec<u32> = Vec::new();
        let mut times: Vec<Timestamp> = Vec::new();
        let mut items: Vec<Item> = Vec::new();
        for (m, stage) in stages.iter_mut().enumerate() {
            if let Stage::Keyed(keyed) = stage {
                for (item, reading) in keyed.drain(..) {
                    keyed_with.push(keying.as_ref().map_or(1, |(table, fanouts)| {
                        fanout_of(table, fanouts, &reading.device_id, reading.ts)
                    }));
                    times.push(reading.ts);
                    owners.push((m, reading.device_id));
                    items.push(item);
                }
            }
        }
        // Entities whose readings in this batch alone show a rate near a key's limit get
        // their fan-out raised before a throttle asks for it.
        let fanout_raises_ahead = self
            .raise_ahead(
                &owners,
                &keyed_with,
                &times,
                (now, started),
                work_deadline,
                rng,
            )
            .await;
        let pks: Vec<String> = items
            .iter()
            .map(|i| match i.get(store::batch::PK) {
                Some(aws_sdk_dynamodb::types::AttributeValue::S(s)) => s.clone(),
                _ => String::new(),
            })
            .collect();
        // Per partition key, the entity with the most items on it (the one a key-range
        // throttle there is about) and the fan-out of those items' keys.
        let key_owners = key_owners(&owners, &keyed_with, &pks);
        // Key-range throttles reach the directory while the writes still back off, so
        // a raise takes effect as early as it can.
        let (throttled_tx, throttled_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let mut seed = <rand::rngs::StdRng as rand::SeedableRng>::Seed::default();
        rng.fill(&mut seed);
        let mut early_rng = <rand::rngs::StdRng as rand::SeedableRng>::from_seed(seed);
        let write_rng = &mut *rng;
        let writes = async move {
            let observer = move |pk: &str| {
                // The receiver lives until the writes end: a send cannot fail before.
                let _ = throttled_tx.send(pk.to_owned());
            };
            self.writer
                .write_observed(items, work_deadline, write_rng, &observer)
                .await
        };
        let early = self.raise_on_throttles(
            throttled_rx,
            &key_owners,
            (now, started),
            work_deadline,
            &mut early_rng,
        );
        let (batch, (mut fanout_raises, raised_early)) = tokio::join!(writes, early);
        fanout_raises += fanout_raises_ahead;
        let mut fates: Vec<Option<Fate>> = stages
            .into_iter()
            .map(|stage| match stage {
                Stage::Keyed(_) | Stage::Parsed(_) => None,
                Stage::Refused(r) => Some(Fate::DeadLettered {
                    reason: r.to_string(),
                }),
                Stage::Retry(reason) => Some(Fate::Reported { reason }),
            })
            .collect();
        let panics = fates
            .iter()
            .filter(|f| matches!(f, Some(Fate::Reported { reason }) if reason.starts_with("panic")))
            .count() as u64;
        let mut written: HashMap<usize, usize> = HashMap::new();
        let mut retry: HashMap<usize, String> = HashMap::new();
        let mut permanent: HashMap<usize, String> = HashMap::new();
        let mut hot: BTreeMap<&str, BTreeMap<&str, u64>> = BTreeMap::new();
        for (((m, device), outcome), pk) in owners.iter().zip(&batch.outcomes).zip(&pks) {
            match outcome {
                Outcome::Written => *written.entry(*m).or_default() += 1,
                Outcome::FailedRetryable { reason, throttle } => {
                    retry.entry(*m).or_insert_with(|| reason.clone());
                    if *throttle == Some(ThrottleKind::KeyRange) {
                        *hot.entry(pk.as_str())
                            .or_default()
                            .entry(device.as_str())
                            .or_default() += 1;
                    }
                }
                Outcome::FailedPermanent { reason } => {
                    permanent.entry(*m).or_insert_with(|| reason.clone());
                }
            }
        }
        for (m, fate) in fates.iter_mut().enumerate() {
            if fate.is_some() {
                continue;
            }
            *fate = Some(if let Some(reason) = retry.remove(&m) {
                Fate::Reported { reason }
            } else if let Some(reason) = permanent.remove(&m) {
                Fate::DeadLettered {
                    reason: format!("item: {reason}"),
                }
            } else {
                Fate::Written {
                    readings: written.get(&m).copied().unwrap_or(0),
                }
            });
        }

        // Items a key-range throttle refused before a retry stored them count too: the
        // key is hot although retries got them through (at the key's capped rate).
        for (((_, device), outcome), pk) in owners.iter().zip(&batch.outcomes).zip(&pks) {
            if outcome.is_written() && batch.stats.key_range_throttled.contains_key(pk) {
                *hot.entry(pk.as_str())
                    .or_default()
                    .entry(device.as_str())
                    .or_default() += 1;
            }
        }

        // 4. Key-range throttles that the writes' own throttle signal did not already
        //    bring to the directory (items that retries got through count too): per hot
        //    partition key, the entity with the most throttled items there. Table
        //    throttles only back off.
        let hot_entities: BTreeSet<(&str, u32)> = hot
            .iter()
            .filter_map(|(pk, by_entity)| {
                by_entity
                    .iter()
                    .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
                    .map(|(e, _)| {
                        let keyed = key_owners.get(*pk).map_or(1, |(_, k)| *k);
                        (*e, keyed)
                    })
            })
            .filter(|(e, _)| !raised_early.contains(*e))
            .collect();
        for (entity, keyed) in hot_entities {
            if Instant::now() >= work_deadline {
                break;
            }
            let (_, change) = self
                .key_range_throttle(entity, keyed, (now, started), work_deadline, rng)
                .await;
            fanout_raises += log_change(entity, change);
        }

        // 5. The last receive before the redrive: a message still failing transiently
        //    is requeued while it may be, else dead-lettered with its reason.
        let can_requeue = self.config.source_queue_url.is_some();
        let mut copies: Vec<(usize, Requeue)> = Vec::new();
        for (m, fate) in fates.iter_mut().enumerate() {
            let Some(Fate::Reported { reason }) = fate else {
                continue;
            };
            let receives = receive_count(&records[m]);
            if receives < self.config.max_receives {
                continue;
            }
            let requeues = requeue_count(&records[m]);
            if can_requeue && requeues < self.config.max_requeues {
                let wait = self.config.redelivery.visibility(receives, rng);
                let delay = u32::try_from(wait.as_secs()).unwrap_or(MAX_DELAY_SECS);
                copies.push((m, copy_of(&records[m], &ids[m], requeues + 1, delay)));
            } else {
                *fate = Some(Fate::DeadLettered {
                    reason: format!(
                        "message: still failing after {receives} receives and {requeues} requeues: {reason}"
                    ),
                });
            }
        }

        // 6. Dead letters, at once; a failed send is reported instead.
        let letters: Vec<(usize, DeadLetter)> = fates
            .iter()
            .enumerate()
            .filter_map(|(m, fate)| match fate {
                Some(Fate::DeadLettered { reason }) => {
                    let (field, rule) =
                        reason.split_once(": ").unwrap_or(("body", reason.as_str()));
                    Some((
                        m,
                        DeadLetter {
                            message_id: source_id(&records[m], &ids[m]),
                            body: records[m].body.clone().unwrap_or_default(),
                            field: field.to_owned(),
                            rule: rule.to_owned(),
                        },
                    ))
                }
                _ => None,
            })
            .collect();
        let mut dead_lettered = 0;
        let mut dlq_failures = 0;
        if !letters.is_empty() {
            let batch_letters: Vec<DeadLetter> = letters.iter().map(|(_, l)| l.clone()).collect();
            let results =
                match tokio::time::timeout_at(deadline, self.queue.dead_letter(&batch_letters))
                    .await
                {
                    Ok(results) => results,
                    Err(_) => {
                        vec![
                            Err("deadline reached while sending to the DLQ".to_owned());
                            letters.len()
                        ]
                    }
                };
            for ((m, letter), result) in letters.iter().zip(results) {
                match result {
                    Ok(()) => dead_lettered += 1,
                    Err(why) => {
                        dlq_failures += 1;
                        fates[*m] = Some(Fate::Reported {
                            reason: format!(
                                "DLQ send failed ({why}) for refused message: {}",
                                letter.reason()
                            ),
                        });
                    }
                }
            }
        }

        // 7. The copies; a failed send leaves the message reported.
        let mut requeued = 0;
        if !copies.is_empty() {
            let batch_copies: Vec<Requeue> = copies.iter().map(|(_, c)| c.clone()).collect();
            let results = tokio::time::timeout_at(deadline, self.queue.requeue(&batch_copies))
                .await
                .unwrap_or_else(|_| {
                    vec![Err("deadline reached while requeueing".to_owned()); copies.len()]
                });
            for ((m, _), result) in copies.iter().zip(results) {
                match (result, &fates[*m]) {
                    (Ok(()), Some(Fate::Reported { reason })) => {
                        requeued += 1;
                        fates[*m] = Some(Fate::Requeued {
                            reason: reason.clone(),
                        });
                    }
                    (Err(why), _) => {
                        tracing::warn!(message_id = %ids[*m], error = %why, "requeue failed; the message stays reported");
                    }
                    _ => {}
                }
            }
        }

        // 8. Redelivery waits for the reported messages, growing with their receives.
        let (delayed, delay_failures) = self.delay_reported(records, &fates, deadline, rng).await;

        let messages: Vec<MessageReport> = fates
            .into_iter()
            .zip(ids)
            .zip(&spans)
            .map(|((fate, message_id), span)| {
                let fate = fate.unwrap_or(Fate::Reported {
                    reason: "no outcome recorded".to_owned(),
                });
                span.in_scope(|| match &fate {
                    Fate::Written { readings } => tracing::debug!(readings, "written"),
                    Fate::DeadLettered { reason } => tracing::info!(%reason, "dead-lettered"),
                    Fate::Reported { reason } => tracing::warn!(%reason, "reported for redelivery"),
                    Fate::Requeued { reason } => {
                        tracing::warn!(%reason, "requeued as a fresh copy")
                    }
                });
                MessageReport { message_id, fate }
            })
            .collect();
        Report {
            messages,
            writes: batch.stats,
            fanout_raises,
            dead_lettered,
            dlq_failures,
            panics,
            delayed,
            delay_failures,
            requeued,
        }
    }

    /// Gives each reported message with a receipt handle the redelivery wait of its
    /// receive count (`ApproximateReceiveCount`, 1 when absent). Returns how many were
    /// delayed and how many changes failed; nothing when no source queue is configured.
    async fn delay_reported<R: Rng + ?Sized>(
        &self,
        records: &[SqsMessage],
        fates: &[Option<Fate>],
        deadline: Instant,
        rng: &mut R,
    ) -> (u64, u64) {
        if self.config.source_queue_url.is_none() {
            return (0, 0);
        }
        let delays: Vec<Delay> = records
            .iter()
            .zip(fates)
            .filter(|(_, fate)| matches!(fate, Some(Fate::Reported { .. }) | None))
            .filter_map(|(record, _)| {
                let receipt_handle = record.receipt_handle.clone()?;
                let wait = self
                    .config
                    .redelivery
                    .visibility(receive_count(record), rng);
                Some(Delay {
                    receipt_handle,
                    visibility_secs: u32::try_from(wait.as_secs()).unwrap_or(u32::MAX),
                })
            })
            .collect();
        if delays.is_empty() {
            return (0, 0);
        }
        let results = tokio::time::timeout_at(deadline, self.queue.delay(&delays))
            .await
            .unwrap_or_else(|_| {
                vec![Err("deadline reached while delaying redeliveries".to_owned()); delays.len()]
            });
        let failed: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
        if let Some(first) = failed.first() {
            tracing::warn!(
                failed = failed.len(),
                error = %first,
                "redelivery delay not set; those messages come back after the queue's timeout"
            );
        }
        let failed = failed.len() as u64;
        (delays.len() as u64 - failed, failed)
    }

    fn parse(&self, record: &SqsMessage, id: &str, limits: &Limits) -> Stage {
        guarded(|| {
            if let Some(hook) = &self.hook {
                hook(id);
            }
            let Some(body) = record.body.as_deref() else {
                return Stage::Refused(Refusal {
                    field: "body".to_owned(),
                    rule: "is missing".to_owned(),
                });
            };
            match parse_body(body, limits) {
                Ok(readings) => Stage::Parsed(readings),
                Err(refusal) => Stage::Refused(refusal),
            }
        })
    }

    /// Brings a key-range throttle of `entity`'s key, keyed with fan-out `keyed`, to the
    /// directory, bounded by `deadline`. The decision's time is now, not the
    /// invocation's start: a raise takes effect a full propagation margin after it is
    /// written. Returns that time with the directory's answer.
    async fn key_range_throttle<R: Rng + ?Sized>(
        &self,
        entity: &str,
        keyed: u32,
        (now, started): (Timestamp, Instant),
        deadline: Instant,
        rng: &mut R,
    ) -> (Timestamp, Result<FanoutChange, StoreError>) {
        let at = now.saturating_add(started.elapsed());
        let change = tokio::time::timeout_at(
            deadline,
            self.directory
                .on_throttle(entity, ThrottleKind::KeyRange, keyed, at, rng),
        )
        .await
        .unwrap_or(Err(StoreError::Deadline));
        (at, change)
    }

    /// Raises the fan-out of each entity whose readings in this batch show at least
    /// `raise_ahead_wcu` per key at the fan-out they were keyed with (the latest of
    /// its readings'), through the same decision as a key-range throttle: so the
    /// cooldown, the pending check and the conditional update apply alike. Returns the
    /// raises won.
    async fn raise_ahead<R: Rng + ?Sized>(
        &self,
        owners: &[(usize, String)],
        keyed_with: &[u32],
        times: &[Timestamp],
        (now, started): (Timestamp, Instant),
        deadline: Instant,
        rng: &mut R,
    ) -> u64 {
        // Per entity: readings, first and last timestamp, and the k of the last one.
        let mut seen: BTreeMap<&str, (u64, Timestamp, Timestamp, u32)> = BTreeMap::new();
        for (((_, entity), keyed), ts) in owners.iter().zip(keyed_with).zip(times) {
            let entry = seen.entry(entity.as_str()).or_insert((0, *ts, *ts, *keyed));
            entry.0 += 1;
            entry.1 = entry.1.min(*ts);
            if *ts >= entry.2 {
                entry.2 = *ts;
                entry.3 = *keyed;
            }
        }
        let mut raises = 0;
        for (entity, (count, first, last, keyed)) in seen {
            let span_ms = last.as_millis().saturating_sub(first.as_millis());
            if !fanout::over_rate(count, span_ms, keyed, self.config.raise_ahead_wcu) {
                continue;
            }
            // A first signal may only create the entity's metadata; the second decides.
            for _ in 0..2 {
                if Instant::now() >= deadline {
                    return raises;
                }
                let (_, change) = self
                    .key_range_throttle(entity, keyed, (now, started), deadline, rng)
                    .await;
                let created = matches!(change, Ok(FanoutChange::Created { .. }));
                if matches!(change, Ok(FanoutChange::Raised(_))) {
                    tracing::info!(
                        entity,
                        readings = count,
                        span_ms,
                        "raising fan-out ahead of throttles"
                    );
                }
                raises += log_change(entity, change);
                if !created {
                    break;
                }
            }
        }
        raises
    }

    /// Brings each key-range-throttled partition key's owner to the directory as the
    /// throttles arrive, until the writes end (the sender is dropped): once per entity,
    /// unless the directory only created its metadata (the next throttle decides again)
    /// or said it cools down (a throttle after that time decides again). Returns the
    /// raises won and the entities brought to the directory.
    async fn raise_on_throttles<R: Rng + ?Sized>(
        &self,
        mut throttled: tokio::sync::mpsc::UnboundedReceiver<String>,
        key_owners: &HashMap<String, (String, u32)>,
        (now, started): (Timestamp, Instant),
        deadline: Instant,
        rng: &mut R,
    ) -> (u64, BTreeSet<String>) {
        let mut raises = 0;
        // Per entity: `None` once settled for this invocation, else when to ask again.
        let mut next: HashMap<String, Option<Instant>> = HashMap::new();
        while let Some(pk) = throttled.recv().await {
            let Some((entity, keyed)) = key_owners.get(&pk) else {
                continue;
            };
            let due = match next.get(entity) {
                None => true,
                Some(None) => false,
                Some(Some(at)) => Instant::now() >= *at,
            };
            if !due || Instant::now() >= deadline {
                continue;
            }
            let (at, change) = self
                .key_range_throttle(entity, *keyed, (now, started), deadline, rng)
                .await;
            let again = match &change {
                Ok(FanoutChange::Created { .. }) => Some(Instant::now()),
                Ok(FanoutChange::Kept(KeepReason::CoolingDown { until })) => {
                    let wait = until.as_millis().saturating_sub(at.as_millis());
                    Some(
                        Instant::now()
                            + std::time::Duration::from_millis(u64::try_from(wait).unwrap_or(0)),
                    )
                }
                _ => None,
            };
            next.insert(entity.clone(), again);
            raises += log_change(entity, change);
        }
        (raises, next.into_keys().collect())
    }

    async fn fanouts(&self, stages: &[Stage], now: Timestamp, deadline: Instant) -> Fanouts {
        let entities: BTreeSet<&str> = stages
            .iter()
            .filter_map(|s| match s {
                Stage::Parsed(readings) => Some(readings.iter().map(|r| r.device_id.as_str())),
                _ => None,
            })
            .flatten()
            .collect();
        futures::stream::iter(entities)
            .map(|entity| async move {
                let fanout = tokio::time::timeout_at(deadline, self.directory.fanout(entity, now))
                    .await
                    .unwrap_or(Err(StoreError::Deadline));
                (entity.to_owned(), fanout)
            })
            .buffer_unordered(self.config.max_inflight.max(1))
            .collect()
            .await
    }

    fn key(&self, readings: Vec<Reading>, table: &TableHistory, fanouts: &Fanouts) -> Stage {
        let batch = readings.len() > 1;
        let mut items = Vec::with_capacity(readings.len());
        for (i, reading) in readings.into_iter().enumerate() {
            let index = batch.then_some(i);
            let fanout = match fanouts.get(&reading.device_id) {
                Some(Ok(history)) => history,
                Some(Err(err)) => {
                    return Stage::Retry(format!(
                        "shard metadata of {} unavailable: {err}",
                        reading.device_id
                    ));
                }
                None => {
                    return Stage::Retry(format!(
                        "shard metadata of {} not loaded",
                        reading.device_id
                    ));
                }
            };
            let attribute = match &table.at(reading.ts).strategy {
                Strategy::Calculated { attribute } if attribute == "device_id" => {
                    Some(reading.device_id.as_str())
                }
                Strategy::Calculated { attribute } => {
                    reading.tags.get(attribute).map(String::as_str)
                }
                _ => None,
            };
            let key = match write_key(
                &ReadingRef {
                    entity: &reading.device_id,
                    event_id: &reading.event_id,
                    ts: reading.ts,
                    attribute,
                },
                table,
                fanout,
            ) {
                Ok(key) => key,
                Err(err) => return Stage::Refused(key_refusal(index, &err)),
            };
            let item = match ReadingItem::marshal(&reading, &key, self.config.retention) {
                Ok(item) => item,
                Err(err) => {
                    return Stage::Refused(Refusal {
                        field: index
                            .map(|i| format!("readings[{i}]"))
                            .unwrap_or_else(|| "body".to_owned()),
                        rule: format!("cannot be stored: {err}"),
                    });
                }
            };
            let size = item_size(&item);
            if size > MAX_ITEM_BYTES {
                return Stage::Refused(Refusal {
                    field: index
                        .map(|i| format!("readings[{i}]"))
                        .unwrap_or_else(|| "body".to_owned()),
                    rule: format!("the stored item would be {size} bytes; the limit is 400 KB"),
                });
            }
            items.push((item, reading));
        }
        Stage::Keyed(items)
    }
}
