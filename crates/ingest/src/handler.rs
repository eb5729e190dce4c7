//! The handler: one SQS batch in, one partial-batch response out.
//!
//! [`Ingest::process`] is a pipeline of named stages, each about a screen:
//! 1. **parse** each message, guarded against panics;
//! 2. **observe** each entity's rate in the batch, and raise its fan-out before its
//!    readings are keyed when the keys in force cannot carry it (or mark it busy, or
//!    shrink a quiet one);
//! 3. **key** every reading with the fan-out in force now;
//! 4. **write** in rounds: a throttle brings the entity to the directory at once, and
//!    when that raises its fan-out, the items not yet written are given back by the
//!    writer and re-keyed with the new k for the next round. A batch larger than one
//!    call per writer slot is keyed and written in two waves: the first wave's calls
//!    are out while the rest is keyed, so a batch of thousands of readings does not
//!    hold its first call back for the CPU time of keying them all;
//! 5. **settle** each message's fate from its readings' outcomes;
//! 6. **requeue or dead-letter** what must leave the batch, and delay the reported;
//! 7. **metrics** (EMF lines).
//!
//! Every message ends in exactly one of these fates:
//! - **written**: all its readings are stored;
//! - **dead-lettered**: refused for good (bad JSON, a broken rule, an unkeyable
//!   reading), sent to the DLQ at once with the reason, and not reported, so SQS does
//!   not redeliver it;
//! - **split**: some readings are stored and the rest failed transiently: the rest is
//!   sent back to the queue as a fresh copy and the message is acknowledged, so no
//!   stored reading is ever written again (under another key, after a raise);
//! - **reported** in `batchItemFailures`: something transient kept all of it out (a
//!   throttle, the deadline, a 5xx, a failed DLQ send, a panic), so SQS redelivers it.
//!
//! A reported message stays invisible for a wait that doubles with its receive count
//! (when the source queue's URL is configured), so the redrive policy's receives span
//! minutes of throttling rather than a few fixed timeouts. At its last receive before
//! the redrive (`MAX_RECEIVES`), a message still failing is **requeued** instead: sent
//! back to the source queue as a fresh copy, delayed, up to `MAX_REQUEUES` times, then
//! dead-lettered with its reason, so the DLQ never holds a message without one. If
//! every message is reported, the invocation fails as a whole, so Lambda backs off the
//! queue.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use aws_sdk_dynamodb::types::AttributeValue;
use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::fanout::{self, KeepReason, Signal, Throttle};
use sharding::key::{ItemKey, KeyError, ReadingRef, write_key};
use sharding::layout::Strategy;
use sharding::time::Timestamp;
use store::batch::{
    BatchReport, BatchTable, BatchWriter, Item, Key, MAX_BATCH_ITEMS, Outcome, Remake, Slots,
    WriteObserver, WriteStats, WriterConfig,
};
use store::directory::{FanoutChange, ShardDirectory, ShardStore};
use store::dynamo::{DynamoShards, DynamoTable};
use store::item::PK;
use store::size::MAX_ITEM_BYTES;
use store::{Encoded, Reading, ReadingItem, StoreError, ThrottleKind};
use tokio::time::Instant;
use tracing::Span;

use crate::attribution::Owners;
use crate::config::{Config, Intake};
use crate::emf::{self, Metric};
use crate::fate::{
    CopyBody, Fate, Keyed, Leave, LeavePolicy, Receipt, Retry, Settled, Stage, leave, settle,
};
use crate::message::{Limits, Refusal, parse_body, to_body};
use store::queue::{
    Attributes, DeadLetter, Delay, MAX_DELAY_SECS, MAX_MESSAGE_BYTES, Queue, Requeue,
    with_attributes,
};
use store::sqs::SqsQueue;

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

/// The message attribute counting how often a message was requeued.
pub const REQUEUES_ATTRIBUTE: &str = "shardline.requeues";
/// The message attribute carrying a requeued copy's first message id.
pub const SOURCE_ID_ATTRIBUTE: &str = "shardline.source_message_id";
/// The prefix of the ingest's own message attributes. A sender's attributes under it
/// are neither read (unless the ingest sent the message) nor carried on a copy.
pub const OWN_ATTRIBUTE_PREFIX: &str = "shardline.";

/// How often SQS delivered this record (`ApproximateReceiveCount`, 1 when absent).
fn receive_count(record: &SqsMessage) -> u32 {
    record
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// Whether the ingest itself sent `record` (a requeued copy), by its `SenderId`, which
/// SQS sets from the caller's identity and no sender can choose: `own` itself or one of
/// its sessions (`"<RoleId>:<session>"`, as a Lambda's role sends). Without `own`,
/// nothing is taken for the ingest's.
fn sent_by_ingest(record: &SqsMessage, own: Option<&str>) -> bool {
    let (Some(own), Some(sender)) = (own, record.attributes.get("SenderId")) else {
        return false;
    };
    sender
        .strip_prefix(own)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(':'))
}

/// The value of the ingest's attribute `name` on `record`, when the ingest sent it.
fn own_attribute<'r>(record: &'r SqsMessage, own: Option<&str>, name: &str) -> Option<&'r str> {
    if !sent_by_ingest(record, own) {
        return None;
    }
    record
        .message_attributes
        .get(name)
        .and_then(|a| a.string_value.as_deref())
}

/// How often this record's message was requeued before: 0 for a device's message,
/// whatever attributes it carries.
fn requeue_count(record: &SqsMessage, own: Option<&str>) -> u32 {
    own_attribute(record, own, REQUEUES_ATTRIBUTE)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The id of the message as the device sent it: a requeued copy's first id, else `id`.
fn source_id(record: &SqsMessage, own: Option<&str>, id: &str) -> String {
    own_attribute(record, own, SOURCE_ID_ATTRIBUTE)
        .unwrap_or(id)
        .to_owned()
}

/// The sender's own string-valued attributes of `record`: every one but those under
/// [`OWN_ATTRIBUTE_PREFIX`] (the ingest sets its own on what it sends). Binary ones are
/// not carried.
fn sender_attributes(record: &SqsMessage) -> Attributes {
    record
        .message_attributes
        .iter()
        .filter(|(name, _)| !name.starts_with(OWN_ATTRIBUTE_PREFIX))
        .filter_map(|(name, a)| {
            let data_type = a.data_type.clone()?;
            let value = a.string_value.clone()?;
            Some((name.clone(), (data_type, value)))
        })
        .collect()
}

/// The size a copy or letter of `record` may have: SQS's [`MAX_MESSAGE_BYTES`], or the
/// record's own size (body and attributes) when its queue took a larger one, since the
/// ingest's queues share their settings.
fn message_budget(record: &SqsMessage) -> usize {
    let attributes: usize = record
        .message_attributes
        .iter()
        .map(|(name, a)| {
            name.len()
                + a.data_type.as_deref().map_or(0, str::len)
                + a.string_value.as_deref().map_or(0, str::len)
                + a.binary_value.as_ref().map_or(0, |b| b.0.len())
        })
        .sum();
    let body = record.body.as_deref().map_or(0, str::len);
    MAX_MESSAGE_BYTES.max(body + attributes)
}

/// A fresh copy of `record` holding `body`. It carries at most SQS's 10 attributes:
/// the ingest's two first (the requeue count `requeues` and the first message id),
/// then the sender's own string attributes in name order as far as they fit
/// (`store::queue::with_attributes`). So of a message that arrived with 9 or 10, the
/// last in name order are dropped (logged): a copy that SQS refuses would instead
/// leave the message to the redrive. A sender's `shardline.*` attributes are never
/// carried as if they were the ingest's.
fn copy_of(
    record: &SqsMessage,
    own: Option<&str>,
    id: &str,
    body: String,
    requeues: u32,
    delay_secs: u32,
) -> Requeue {
    let ours: Attributes = [
        (
            SOURCE_ID_ATTRIBUTE,
            ("String".to_owned(), source_id(record, own, id)),
        ),
        (
            REQUEUES_ATTRIBUTE,
            ("Number".to_owned(), requeues.to_string()),
        ),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value))
    .collect();
    let (attributes, dropped) = with_attributes(
        ours,
        &sender_attributes(record),
        body.len(),
        message_budget(record),
    );
    if !dropped.is_empty() {
        tracing::info!(message_id = %id, ?dropped, "attributes not carried on the copy (SQS allows 10)");
    }
    Requeue {
        body,
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
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// One entry per record, in order.
    pub messages: Vec<MessageReport>,
    /// The batch writer's counters.
    pub writes: WriteStats,
    /// Fan-out raises this invocation won.
    pub fanout_raises: u64,
    /// Fan-out shrinks this invocation won.
    pub fanout_shrinks: u64,
    /// Items given back unwritten by a raise and written again under a new key.
    pub rekeyed: u64,
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
    /// Messages split: their unwritten readings sent back as a fresh copy.
    pub split: u64,
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
                Metric::count("FanoutShrinks", self.fanout_shrinks),
                Metric::count("Rekeyed", self.rekeyed),
                Metric::count("SplitRequeues", self.split),
                Metric::count("Panics", self.panics),
                Metric::count("RedeliveriesDelayed", self.delayed),
                Metric::count("DelayFailures", self.delay_failures),
                Metric::count("Requeued", self.requeued),
                // 1 when the handler fails this invocation on purpose (every message
                // failed transiently, so that Lambda backs off): the errors alarm
                // subtracts these from Lambda's Errors.
                Metric::count("BackoffInvocations", u64::from(self.all_failed().is_some())),
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

/// A hook run inside each message's guarded section (fault injection in tests).
pub type MessageHook = Arc<dyn Fn(&str) + Send + Sync>;

/// Rounds of re-keying after raises within one invocation: each needs a raise, and
/// raises of one entity are a cooldown apart.
const MAX_REKEY_ROUNDS: usize = 4;

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
        let shards = DynamoShards::new(dynamo, &config.shards.shard_table_name);
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
        Stage::Retry(Retry::Panic(what))
    })
}

/// What every stage of one invocation shares.
struct Run<'a> {
    records: &'a [SqsMessage],
    ids: Vec<String>,
    spans: Vec<Span>,
    /// The clock reading at the start, and when that was.
    now: Timestamp,
    started: Instant,
    /// The Lambda deadline, and the one writes and metadata calls keep to.
    deadline: Instant,
    work_deadline: Instant,
}

impl<'a> Run<'a> {
    fn new(records: &'a [SqsMessage], now: Timestamp, deadline: Instant, margin: Duration) -> Self {
        let ids: Vec<String> = records
            .iter()
            .map(|r| r.message_id.clone().unwrap_or_default())
            .collect();
        let spans = ids
            .iter()
            .map(|id| tracing::info_span!("message", message_id = %id))
            .collect();
        Self {
            records,
            ids,
            spans,
            now,
            started: Instant::now(),
            deadline,
            work_deadline: deadline.checked_sub(margin).unwrap_or_else(Instant::now),
        }
    }

    /// The clock now: a decision during the writes, and a re-key after it, take the time
    /// it is made at, not when the batch began. The stages before the writes use `now`
    /// itself, so the reads of one invocation share one clock reading (and its cache).
    fn clock(&self) -> Timestamp {
        self.now.saturating_add(self.started.elapsed())
    }

    fn out_of_time(&self) -> bool {
        Instant::now() >= self.work_deadline
    }
}

/// Fan-out changes this invocation won.
#[derive(Debug, Default)]
struct Changes {
    raises: u64,
    shrinks: u64,
}

impl Changes {
    fn absorb(&mut self, other: Changes) {
        self.raises += other.raises;
        self.shrinks += other.shrinks;
    }

    /// Logs and counts what the directory did about `entity`.
    fn record(&mut self, entity: &str, change: &Result<FanoutChange, StoreError>) {
        match change {
            Ok(FanoutChange::Raised(raise)) => {
                tracing::info!(entity, from = raise.from, to = raise.to, "fan-out raised");
                self.raises += 1;
            }
            Ok(FanoutChange::Shrunk(shrink)) => {
                tracing::info!(entity, from = shrink.from, to = shrink.to, effective_from = %shrink.effective_from, "fan-out shrinking");
                self.shrinks += 1;
            }
            Ok(change) => tracing::debug!(entity, ?change, "fan-out unchanged"),
            Err(err) => tracing::warn!(entity, error = %err, "fan-out update failed"),
        }
    }
}

/// When SQS received `record`: its `SentTimestamp` (milliseconds), which SQS sets and
/// no sender can.
fn sent_at(record: &SqsMessage) -> Option<i64> {
    record.attributes.get("SentTimestamp")?.parse().ok()
}

/// The largest batch payload Lambda delivers (6 MB), less one message: a batch this
/// large was cut by its size, not by its window.
const FULL_PAYLOAD_BYTES: usize = 6 * 1024 * 1024 - 256 * 1024;

/// How `records` arrived: the batching window, and the batch's span by SQS's clock when
/// it was cut by its size (as many messages as the mapping's batch size, or a payload
/// near Lambda's limit) rather than by its window.
fn batch_arrival(records: &[SqsMessage], intake: &Intake) -> fanout::BatchArrival {
    let sent = records.iter().filter_map(sent_at);
    let span = sent
        .clone()
        .min()
        .zip(sent.max())
        .map(|(lo, hi)| Duration::from_millis(hi.saturating_sub(lo).unsigned_abs()));
    let bytes: usize = records
        .iter()
        .map(|r| r.body.as_ref().map_or(0, String::len))
        .sum();
    let full = records.len() >= intake.batch_size || bytes >= FULL_PAYLOAD_BYTES;
    fanout::BatchArrival {
        window: intake.window,
        full_span: span.filter(|_| full),
    }
}

/// Each entity's arrival rate in this batch, in readings per second, where a sample
/// shows one (`sharding::fanout::arrival_rate`): its readings over the span of the
/// `SentTimestamp`s of the messages that carry them, floored at the batching window.
/// The readings' own timestamps play no part: a sender chooses them. Every entity of
/// the batch is present.
fn entity_rates(
    stages: &[Stage],
    records: &[SqsMessage],
    intake: &Intake,
) -> BTreeMap<String, Option<f64>> {
    /// One entity: readings, messages, the last message it was seen in, and the first
    /// and last `SentTimestamp` of its messages.
    struct Seen {
        readings: u64,
        messages: u64,
        message: usize,
        sent: Option<(i64, i64)>,
    }
    impl Seen {
        fn sent_in(&mut self, sent: Option<i64>) {
            if let Some(t) = sent {
                self.sent = Some(self.sent.map_or((t, t), |(lo, hi)| (lo.min(t), hi.max(t))));
            }
        }
    }
    let batch = batch_arrival(records, intake);
    // One lookup per reading, borrowed ids: one allocation per entity, at the end.
    let mut seen: HashMap<&str, Seen> = HashMap::new();
    for (message, stage) in stages.iter().enumerate() {
        let Stage::Parsed(readings) = stage else {
            continue;
        };
        let sent = records.get(message).and_then(sent_at);
        for r in readings {
            let entity = seen.entry(r.device_id.as_str()).or_insert(Seen {
                readings: 0,
                messages: 0,
                message: usize::MAX,
                sent: None,
            });
            entity.readings += 1;
            if entity.message != message {
                entity.message = message;
                entity.messages += 1;
                entity.sent_in(sent);
            }
        }
    }
    let mut rates: Vec<(&str, Option<f64>)> = seen
        .into_iter()
        .map(|(entity, s)| {
            let span = s.sent.map_or(Duration::ZERO, |(lo, hi)| {
                Duration::from_millis(hi.saturating_sub(lo).unsigned_abs())
            });
            (
                entity,
                fanout::arrival_rate(s.readings, s.messages, span, &batch),
            )
        })
        .collect();
    // Sorted, the map is built in one pass.
    rates.sort_unstable_by(|a, b| a.0.cmp(b.0));
    rates
        .into_iter()
        .map(|(entity, rate)| (entity.to_owned(), rate))
        .collect()
}

/// The keyed readings of every message.
fn keyed(stages: &[Stage]) -> impl Iterator<Item = &Keyed> {
    stages
        .iter()
        .filter_map(|s| match s {
            Stage::Keyed(keyed) => Some(keyed.iter()),
            _ => None,
        })
        .flatten()
}

/// The keyed readings of every message, to change.
fn keyed_mut(stages: &mut [Stage]) -> impl Iterator<Item = &mut Keyed> {
    stages
        .iter_mut()
        .filter_map(|s| match s {
            Stage::Keyed(keyed) => Some(keyed.iter_mut()),
            _ => None,
        })
        .flatten()
}

/// Who writes to each partition key of one round, and what the writer hears.
struct Watch<'a> {
    /// Each item's partition key, and its entity with the fan-out of its key.
    pks: Vec<Option<String>>,
    keyed: &'a [(&'a str, u32)],
    /// Built from the two above at the first throttle or raise: most rounds see none.
    owners: OnceLock<Owners>,
    /// Per entity raised during the round: the fan-out now in force.
    raised: Mutex<HashMap<String, u32>>,
    throttled: Mutex<Option<tokio::sync::mpsc::UnboundedSender<String>>>,
}

impl<'a> Watch<'a> {
    fn new(
        items: &[Item],
        keyed: &'a [(&'a str, u32)],
        tx: tokio::sync::mpsc::UnboundedSender<String>,
    ) -> Self {
        let pks = items
            .iter()
            .map(|item| match item.get(PK) {
                Some(AttributeValue::S(pk)) => Some(pk.clone()),
                _ => None,
            })
            .collect();
        Self {
            pks,
            keyed,
            owners: OnceLock::new(),
            raised: Mutex::new(HashMap::new()),
            throttled: Mutex::new(Some(tx)),
        }
    }

    /// Who writes to each partition key of the round.
    fn owners(&self) -> &Owners {
        self.owners.get_or_init(|| {
            Owners::new(
                self.pks
                    .iter()
                    .zip(self.keyed)
                    .filter_map(|(pk, (entity, k))| Some((pk.as_deref()?, *entity, *k))),
            )
        })
    }

    /// Ends the round: the listener's channel closes.
    fn close(&self) {
        lock(&self.throttled).take();
    }
}

/// The readings behind one round's items, in the writer's input order.
struct Round<'a> {
    /// Each item's entity, with the fan-out of its key.
    owners: Vec<(&'a str, u32)>,
    /// Each item's reading, to make the item again after a failed call consumed it: the
    /// writer keeps no copies ([`Remake`]).
    readings: Vec<&'a Reading>,
    retention: Duration,
}

impl Remake for Round<'_> {
    fn remake(&self, index: usize, key: &Key) -> Option<Item> {
        let key = ItemKey {
            pk: key.pk.clone(),
            sk: key.sk.clone(),
        };
        let reading = self.readings.get(index)?;
        Some(ReadingItem::marshal(reading, key, self.retention).item)
    }
}

/// A random stream of its own, seeded from `rng` (so a seeded test stays reproducible).
fn seeded<R: Rng + ?Sized>(rng: &mut R) -> StdRng {
    let mut seed = <StdRng as SeedableRng>::Seed::default();
    rng.fill(&mut seed);
    StdRng::from_seed(seed)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Plain maps: a panic cannot leave them half-updated.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl WriteObserver for Watch<'_> {
    fn throttled(&self, pk: &str) {
        if let Some(tx) = lock(&self.throttled).as_ref() {
            // The receiver lives until the round ends: a send cannot fail before.
            let _ = tx.send(pk.to_owned());
        }
    }

    fn stale(&self, pk: &str) -> bool {
        let raised = lock(&self.raised);
        !raised.is_empty() && self.owners().is_stale(pk, &raised)
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

    /// Processes one SQS batch and reports every message's fate (no output): the
    /// stages of the module docs, in order.
    pub async fn process<R: Rng + Send + ?Sized>(
        &self,
        event: &SqsEvent,
        now: Timestamp,
        deadline: Instant,
        rng: &mut R,
    ) -> Report {
        let run = Run::new(&event.records, now, deadline, self.config.deadline_margin);
        let mut changes = Changes::default();
        let mut stages = self.parse_stage(&run);
        let rates = entity_rates(&stages, run.records, &self.config.intake);
        self.observe_stage(&rates, &run, &mut changes, rng).await;
        let keying = self.key_stage(&mut stages, &run).await;
        let written = self
            .write_stage(&mut stages, keying.as_ref(), &rates, &run, rng)
            .await;
        changes.absorb(written.changes);
        let (writes, rekeyed) = (written.stats, written.rekeyed);
        let panics = stages
            .iter()
            .filter(|s| matches!(s, Stage::Retry(Retry::Panic(_))))
            .count() as u64;
        let settled: Vec<Settled> = stages
            .into_iter()
            .map(|stage| settle(stage, MAX_REKEY_ROUNDS))
            .collect();
        let leaving = self.leave_stage(settled, &run, rng).await;
        let (delayed, delay_failures) = self
            .delay_reported(run.records, &leaving.fates, run.deadline, rng)
            .await;
        let messages = self.log_fates(leaving.fates, &run);
        Report {
            messages,
            writes,
            fanout_raises: changes.raises,
            fanout_shrinks: changes.shrinks,
            rekeyed,
            dead_lettered: leaving.dead_lettered,
            dlq_failures: leaving.dlq_failures,
            panics,
            delayed,
            delay_failures,
            requeued: leaving.requeued,
            split: leaving.split,
        }
    }

    /// Stage 1: parses and validates each message, guarded against panics.
    fn parse_stage(&self, run: &Run<'_>) -> Vec<Stage> {
        let limits = Limits {
            now: run.now,
            max_future: self.config.shards.max_future,
            retention: self.config.retention,
            max_readings: self.config.max_readings_per_message,
        };
        run.records
            .iter()
            .zip(&run.spans)
            .zip(&run.ids)
            .map(|((record, span), id)| span.in_scope(|| self.parse(record, id, &limits)))
            .collect()
    }

    /// Stage 2: brings each entity's rate in this batch to the directory before its
    /// readings are keyed, so a rate its keys cannot carry raises its fan-out now and
    /// this very batch is keyed with the new k (and a busy entity is marked, a quiet
    /// one shrunk). What the cache answers alone is decided in one pass (most devices of
    /// a fleet: no metadata, a rate the default carries); the rest concurrently, each
    /// entity with its own random stream.
    async fn observe_stage<R: Rng + ?Sized>(
        &self,
        rates: &BTreeMap<String, Option<f64>>,
        run: &Run<'_>,
        changes: &mut Changes,
        rng: &mut R,
    ) {
        let mut signals: Vec<(&str, Signal, StdRng)> = Vec::new();
        for (entity, rate) in rates {
            let signal = Signal {
                throttle: Throttle::Other,
                keyed: 0,
                rate: *rate,
            };
            // Every entity draws its stream, answered from the cache or not, so a seeded
            // run draws the same streams whatever the cache holds.
            let stream = seeded(rng);
            match self.directory.on_signal_cached(entity, &signal, run.now) {
                Some(change) => changes.record(entity, &Ok(change)),
                None => signals.push((entity.as_str(), signal, stream)),
            }
        }
        let results: Vec<(&str, Result<FanoutChange, StoreError>)> = futures::stream::iter(signals)
            .map(|(entity, signal, mut rng)| async move {
                let change = tokio::time::timeout_at(
                    run.work_deadline,
                    self.directory.on_signal(entity, signal, run.now, &mut rng),
                )
                .await
                .unwrap_or(Err(StoreError::Deadline));
                (entity, change)
            })
            .buffer_unordered(self.config.max_inflight.max(1))
            .collect()
            .await;
        for (entity, change) in results {
            changes.record(entity, &change);
        }
    }

    /// Stage 3: reads the layout and each entity's fan-out in force now, with which the
    /// write stage keys every parsed message ([`Self::key_messages`]); without a layout,
    /// every parsed message is reported.
    async fn key_stage(&self, stages: &mut [Stage], run: &Run<'_>) -> Option<Keying> {
        if !stages.iter().any(|s| matches!(s, Stage::Parsed(_))) {
            return None;
        }
        let now = run.now;
        // Metadata reads are bounded by the deadline like the writes: a slow metadata
        // table must not keep the handler past it.
        let layout = tokio::time::timeout_at(run.work_deadline, self.directory.layout(now))
            .await
            .unwrap_or(Err(StoreError::Deadline));
        let table = match layout {
            Ok(table) => table,
            Err(err) => {
                tracing::warn!(error = %err, "shard layout unavailable");
                for stage in stages.iter_mut() {
                    if matches!(stage, Stage::Parsed(_)) {
                        *stage =
                            Stage::Retry(Retry::Failed(format!("shard layout unavailable: {err}")));
                    }
                }
                return None;
            }
        };
        let entities: BTreeSet<&str> = stages
            .iter()
            .filter_map(|s| match s {
                Stage::Parsed(readings) => Some(readings.iter().map(|r| r.device_id.as_str())),
                _ => None,
            })
            .flatten()
            .collect();
        let fanouts = self.fanouts(entities, now, run.work_deadline).await;
        Some(Keying {
            table,
            fanouts,
            now,
        })
    }

    /// Keys every parsed message of `stages` (whose spans are `spans`).
    fn key_messages(&self, stages: &mut [Stage], spans: &[Span], keying: &Keying) {
        for (stage, span) in stages.iter_mut().zip(spans) {
            if let Stage::Parsed(readings) = stage {
                let readings = std::mem::take(readings);
                *stage = span.in_scope(|| {
                    guarded(|| self.key(readings, &keying.table, &keying.fanouts, keying.now))
                });
            }
        }
    }

    /// Stage 4: keys every parsed message ([`Self::key_messages`]) and writes every keyed
    /// reading, in rounds. In a round, a throttled key's entity goes to the directory at
    /// once; when its fan-out is raised, the writer gives back that entity's items not
    /// yet written, and the next round re-keys them with the new k. Nothing written is
    /// ever written again. Returns what every round did: the writer's counters, how many
    /// items were re-keyed and the fan-out changes won.
    async fn write_stage<R: Rng + Send + ?Sized>(
        &self,
        stages: &mut [Stage],
        keying: Option<&Keying>,
        rates: &BTreeMap<String, Option<f64>>,
        run: &Run<'_>,
        rng: &mut R,
    ) -> Written {
        let mut total = Written::default();
        for round in 0..MAX_REKEY_ROUNDS {
            let written = if round == 0 {
                self.first_round(stages, keying, rates, run, rng).await
            } else {
                self.rekey(stages, run).await;
                self.write_keyed(stages, rates, run, rng, &self.writer.slots())
                    .await
            };
            let Some(written) = written else {
                break;
            };
            total.absorb(written);
        }
        total
    }

    /// The first round of [`Self::write_stage`], in two waves when the batch holds more
    /// than one call per slot of the writer: the messages that fill every slot once are
    /// keyed and their calls sent, and the rest is keyed while those calls are out, then
    /// written in the slots they free. Keying thousands of readings takes milliseconds of
    /// CPU that would otherwise pass before the first call leaves. The two waves share
    /// one set of the writer's `MAX_INFLIGHT` slots. The writer deduplicates within a wave: a
    /// reading sent twice in one batch, once in each wave, is written by each (the same
    /// item under the same key, stored once, at the cost of a second write). `None`
    /// when there was nothing to write or no time left.
    async fn first_round<R: Rng + Send + ?Sized>(
        &self,
        stages: &mut [Stage],
        keying: Option<&Keying>,
        rates: &BTreeMap<String, Option<f64>>,
        run: &Run<'_>,
        rng: &mut R,
    ) -> Option<Written> {
        let slots = self.writer.slots();
        let Some(keying) = keying else {
            return self.write_keyed(stages, rates, run, rng, &slots).await;
        };
        let split = first_wave(stages, self.config.max_inflight.max(1) * MAX_BATCH_ITEMS);
        let (front, back) = stages.split_at_mut(split);
        let (front_spans, back_spans) = run.spans.split_at(split.min(run.spans.len()));
        self.key_messages(front, front_spans, keying);
        if !back.iter().any(|s| matches!(s, Stage::Parsed(_))) {
            return self.write_keyed(front, rates, run, rng, &slots).await;
        }
        let (mut front_rng, mut back_rng) = (seeded(rng), seeded(rng));
        let mut front_write =
            std::pin::pin!(self.write_keyed(front, rates, run, &mut front_rng, &slots));
        // Polled once, the first wave's calls are built and sent; its answers wait
        // until the rest is keyed, which takes less than a round trip.
        let front_done = futures::poll!(front_write.as_mut());
        self.key_messages(back, back_spans, keying);
        let back_write = self.write_keyed(back, rates, run, &mut back_rng, &slots);
        let (front, back) = match front_done {
            std::task::Poll::Ready(front) => (front, back_write.await),
            std::task::Poll::Pending => tokio::join!(front_write, back_write),
        };
        match (front, back) {
            (Some(mut front), Some(back)) => {
                front.absorb(back);
                Some(front)
            }
            (front, back) => front.or(back),
        }
    }

    /// Writes the keyed readings of `stages` that have an item and no outcome, within
    /// `slots`: one round's writes ([`Self::write_round`]), each outcome recorded on its
    /// reading.
    /// `None` when there was nothing to write or no time left.
    async fn write_keyed<R: Rng + Send + ?Sized>(
        &self,
        stages: &mut [Stage],
        rates: &BTreeMap<String, Option<f64>>,
        run: &Run<'_>,
        rng: &mut R,
        slots: &Slots,
    ) -> Option<Written> {
        let mut to_write: Vec<&mut Keyed> = keyed_mut(stages)
            .filter(|k| k.outcome.is_none() && k.item.is_some())
            .collect();
        if to_write.is_empty() || run.out_of_time() {
            return None;
        }
        let items: Vec<Item> = to_write.iter_mut().filter_map(|k| k.item.take()).collect();
        let round = Round {
            owners: to_write
                .iter()
                .map(|k| (k.reading.device_id.as_str(), k.fanout))
                .collect(),
            readings: to_write.iter().map(|k| &k.reading).collect(),
            retention: self.config.retention,
        };
        let (report, changes) = self
            .write_round(items, &round, rates, run, rng, slots)
            .await;
        drop(round);
        let mut rekeyed = 0;
        for (keyed, outcome) in to_write.iter_mut().zip(report.outcomes) {
            if outcome == Outcome::Stale {
                rekeyed += 1;
            } else {
                keyed.outcome = Some(outcome);
            }
        }
        Some(Written {
            stats: report.stats,
            rekeyed,
            changes,
        })
    }

    /// One round of [`Self::write_stage`]: the writes, and beside them the listener
    /// that brings throttled keys to the directory while the writes back off.
    async fn write_round<R: Rng + Send + ?Sized>(
        &self,
        items: Vec<Item>,
        round: &Round<'_>,
        rates: &BTreeMap<String, Option<f64>>,
        run: &Run<'_>,
        rng: &mut R,
        slots: &Slots,
    ) -> (BatchReport, Changes) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let watch = Watch::new(&items, &round.owners, tx);
        let mut listener_rng = seeded(rng);
        let writes = async {
            let report = self
                .writer
                .write_in(items, run.work_deadline, rng, &watch, slots, round)
                .await;
            watch.close();
            report
        };
        let listener = self.follow_throttles(rx, &watch, rates, run, &mut listener_rng);
        let (mut report, changes) = tokio::join!(writes, listener);
        // A raise the listener won after the writer's retries ran out still re-keys
        // what the throttle kept out of the raised entities: nothing of it was written.
        let raised = lock(&watch.raised);
        for (outcome, (entity, k)) in report.outcomes.iter_mut().zip(&round.owners) {
            let throttled = matches!(
                outcome,
                Outcome::FailedRetryable {
                    throttle: Some(ThrottleKind::KeyRange),
                    ..
                }
            );
            if throttled && raised.get(*entity).is_some_and(|now| now > k) {
                *outcome = Outcome::Stale;
            }
        }
        drop(raised);
        (report, changes)
    }

    /// Brings each throttled key's entities to the directory as the throttles arrive,
    /// until the round ends: each entity once, unless the directory only created its
    /// metadata or said it cools down (a throttle after that decides again). Records
    /// in `watch` every entity whose fan-out in force now exceeds its keys', so the
    /// writer gives their items back for re-keying.
    async fn follow_throttles<R: Rng + ?Sized>(
        &self,
        mut throttled: tokio::sync::mpsc::UnboundedReceiver<String>,
        watch: &Watch<'_>,
        rates: &BTreeMap<String, Option<f64>>,
        run: &Run<'_>,
        rng: &mut R,
    ) -> Changes {
        let mut changes = Changes::default();
        // Per entity: `None` once settled for this round, else when to ask again.
        let mut next: HashMap<String, Option<Instant>> = HashMap::new();
        while let Some(pk) = throttled.recv().await {
            let due =
                watch
                    .owners()
                    .of(&pk)
                    .into_iter()
                    .find(|(entity, _)| match next.get(entity) {
                        None => true,
                        Some(None) => false,
                        Some(Some(at)) => Instant::now() >= *at,
                    });
            let Some((entity, keyed)) = due else {
                continue;
            };
            if run.out_of_time() {
                continue;
            }
            let at = run.clock();
            let signal = Signal {
                throttle: Throttle::KeyRange,
                keyed,
                rate: rates.get(&entity).copied().flatten(),
            };
            let change = tokio::time::timeout_at(
                run.work_deadline,
                self.directory.on_signal(&entity, signal, at, rng),
            )
            .await
            .unwrap_or(Err(StoreError::Deadline));
            let again = match &change {
                Ok(FanoutChange::Created { .. }) => Some(Instant::now()),
                Ok(FanoutChange::Kept(KeepReason::CoolingDown { until })) => {
                    let wait = until.as_millis().saturating_sub(at.as_millis());
                    Some(Instant::now() + Duration::from_millis(u64::try_from(wait).unwrap_or(0)))
                }
                _ => None,
            };
            // The directory re-read the entity: whoever raised it, this is its k now.
            if let Ok(Ok(history)) =
                tokio::time::timeout_at(run.work_deadline, self.directory.fanout(&entity, at)).await
                && let Some(k) = history.for_write(at, at)
                && k > keyed
            {
                lock(&watch.raised).insert(entity.clone(), k);
            }
            changes.record(&entity, &change);
            next.insert(entity, again);
        }
        changes
    }

    /// Re-keys the readings a round gave back (no outcome, no item) with the fan-out in
    /// force now; one whose metadata cannot be read stays unwritten (reported).
    async fn rekey(&self, stages: &mut [Stage], run: &Run<'_>) {
        let now = run.clock();
        let Ok(Ok(table)) =
            tokio::time::timeout_at(run.work_deadline, self.directory.layout(now)).await
        else {
            return;
        };
        let entities: BTreeSet<&str> = keyed(stages)
            .filter(|k| k.outcome.is_none() && k.item.is_none())
            .map(|k| k.reading.device_id.as_str())
            .collect();
        if entities.is_empty() {
            return;
        }
        let fanouts = self.fanouts(entities, now, run.work_deadline).await;
        for k in keyed_mut(stages).filter(|k| k.outcome.is_none() && k.item.is_none()) {
            let Some(Ok(history)) = fanouts.get(&k.reading.device_id) else {
                continue;
            };
            if let Ok((item, fanout)) = self.item_for(&k.reading, &table, history, now) {
                k.item = Some(item);
                k.fanout = fanout;
            }
        }
    }

    /// Stage 6: what leaves the batch. A split message's unwritten readings, and a
    /// message still failing at its last receive (while it may be requeued), go back to
    /// the queue as fresh copies; refused messages, and those out of requeues, go to the
    /// DLQ with their reason. A failed send leaves the message reported.
    async fn leave_stage<R: Rng + ?Sized>(
        &self,
        settled: Vec<Settled>,
        run: &Run<'_>,
        rng: &mut R,
    ) -> Leaving {
        let policy = LeavePolicy {
            can_requeue: self.config.source_queue_url.is_some(),
            counts_copies: self.config.sender_id.is_some(),
            max_receives: self.config.max_receives,
            max_requeues: self.config.max_requeues,
        };
        let own = self.config.sender_id.as_deref();
        let mut fates: Vec<Option<Fate>> = Vec::with_capacity(settled.len());
        // Per copy: its message, the fate once sent, and the copy.
        let mut copies: Vec<(usize, Fate, Requeue)> = Vec::new();
        for (m, settled) in settled.into_iter().enumerate() {
            let record = &run.records[m];
            let receipt = Receipt {
                receives: receive_count(record),
                requeues: requeue_count(record, own),
            };
            let fate = match leave(settled, receipt, policy) {
                Leave::Stay(fate) => fate,
                Leave::Copy {
                    body,
                    requeues,
                    sent,
                    reason,
                } => {
                    let body = match body {
                        CopyBody::Unwritten(readings) => to_body(&readings),
                        CopyBody::Whole => record.body.clone().unwrap_or_default(),
                    };
                    let wait = self.config.redelivery.visibility(receipt.receives, rng);
                    let delay = u32::try_from(wait.as_secs()).unwrap_or(MAX_DELAY_SECS);
                    let copy = copy_of(record, own, &run.ids[m], body, requeues, delay);
                    copies.push((m, sent, copy));
                    Fate::Reported { reason }
                }
            };
            fates.push(Some(fate));
        }
        let (dead_lettered, dlq_failures) = self.dead_letter(&mut fates, run).await;
        let (requeued, split) = self.send_copies(&mut fates, copies, run).await;
        Leaving {
            fates,
            dead_lettered,
            dlq_failures,
            requeued,
            split,
        }
    }

    /// Sends the dead-lettered messages to the DLQ at once; a failed send is reported
    /// instead. Returns the sends accepted and failed. Each letter is one SQS accepts
    /// whatever the refusal echoes (`DeadLetter::new`): its reason in attributes cut to
    /// SQS's character set and 256 characters, the sender's attributes as far as SQS's
    /// 10 allow, and a body too large to take them wrapped with its digest.
    async fn dead_letter(&self, fates: &mut [Option<Fate>], run: &Run<'_>) -> (u64, u64) {
        let own = self.config.sender_id.as_deref();
        let letters: Vec<(usize, DeadLetter)> = fates
            .iter()
            .enumerate()
            .filter_map(|(m, fate)| match fate {
                Some(Fate::DeadLettered { reason }) => {
                    let Refusal { field, rule } = reason;
                    let record = &run.records[m];
                    Some((
                        m,
                        DeadLetter::new(
                            &source_id(record, own, &run.ids[m]),
                            record.body.as_deref().unwrap_or_default(),
                            field,
                            rule,
                            &sender_attributes(record),
                            message_budget(record),
                        ),
                    ))
                }
                _ => None,
            })
            .collect();
        if letters.is_empty() {
            return (0, 0);
        }
        let batch: Vec<DeadLetter> = letters.iter().map(|(_, l)| l.clone()).collect();
        let results = tokio::time::timeout_at(run.deadline, self.queue.dead_letter(&batch))
            .await
            .unwrap_or_else(|_| {
                vec![Err("deadline reached while sending to the DLQ".to_owned()); letters.len()]
            });
        let (mut sent, mut failed) = (0, 0);
        for ((m, letter), result) in letters.iter().zip(results) {
            match result {
                Ok(()) => sent += 1,
                Err(why) => {
                    failed += 1;
                    fates[*m] = Some(Fate::Reported {
                        reason: format!(
                            "DLQ send failed ({why}) for refused message: {}",
                            letter.reason()
                        ),
                    });
                }
            }
        }
        (sent, failed)
    }

    /// Sends the copies; each sent one gives its message the fate it carries, a failed
    /// one leaves the message reported. Returns the requeued and split messages.
    async fn send_copies(
        &self,
        fates: &mut [Option<Fate>],
        copies: Vec<(usize, Fate, Requeue)>,
        run: &Run<'_>,
    ) -> (u64, u64) {
        if copies.is_empty() {
            return (0, 0);
        }
        let batch: Vec<Requeue> = copies.iter().map(|(_, _, c)| c.clone()).collect();
        let results = tokio::time::timeout_at(run.deadline, self.queue.requeue(&batch))
            .await
            .unwrap_or_else(|_| {
                vec![Err("deadline reached while requeueing".to_owned()); copies.len()]
            });
        let (mut requeued, mut split) = (0, 0);
        for ((m, sent, _), result) in copies.into_iter().zip(results) {
            match result {
                Ok(()) => {
                    if matches!(sent, Fate::Split { .. }) {
                        split += 1;
                    } else {
                        requeued += 1;
                    }
                    fates[m] = Some(sent);
                }
                Err(why) => {
                    tracing::warn!(message_id = %run.ids[m], error = %why, "requeue failed; the message stays reported");
                }
            }
        }
        (requeued, split)
    }

    /// Stage 7's log line per message, and the reports.
    fn log_fates(&self, fates: Vec<Option<Fate>>, run: &Run<'_>) -> Vec<MessageReport> {
        fates
            .into_iter()
            .zip(&run.ids)
            .zip(&run.spans)
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
                    Fate::Split {
                        written,
                        requeued,
                        reason,
                    } => {
                        tracing::info!(written, requeued, %reason, "unwritten readings requeued")
                    }
                });
                MessageReport {
                    message_id: message_id.clone(),
                    fate,
                }
            })
            .collect()
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

    /// Each entity's fan-out history (cached), or why it could not be read.
    async fn fanouts(
        &self,
        entities: BTreeSet<&str>,
        now: Timestamp,
        deadline: Instant,
    ) -> Fanouts {
        // What the cache holds is read in one pass; the rest concurrently.
        let mut fanouts = Fanouts::with_capacity(entities.len());
        let mut missing = Vec::new();
        for entity in entities {
            match self.directory.fanout_cached(entity, now) {
                Some(history) => {
                    fanouts.insert(entity.to_owned(), Ok(history));
                }
                None => missing.push(entity),
            }
        }
        let read: Vec<(String, Result<FanoutHistory, StoreError>)> = futures::stream::iter(missing)
            .map(|entity| async move {
                let fanout = tokio::time::timeout_at(deadline, self.directory.fanout(entity, now))
                    .await
                    .unwrap_or(Err(StoreError::Deadline));
                (entity.to_owned(), fanout)
            })
            .buffer_unordered(self.config.max_inflight.max(1))
            .collect()
            .await;
        fanouts.extend(read);
        fanouts
    }

    /// The item of `reading` keyed by a writer at `now`, and the fan-out of its key.
    fn item_for(
        &self,
        reading: &Reading,
        table: &TableHistory,
        fanout: &FanoutHistory,
        now: Timestamp,
    ) -> Result<(Item, u32), ItemError> {
        let layout = table.at(reading.ts);
        let attribute = match &layout.strategy {
            Strategy::Calculated { attribute } if attribute == "device_id" => {
                Some(reading.device_id.as_str())
            }
            Strategy::Calculated { attribute } => reading.tags.get(attribute).map(String::as_str),
            _ => None,
        };
        let key = write_key(
            &ReadingRef {
                entity: &reading.device_id,
                event_id: &reading.event_id,
                ts: reading.ts,
                attribute,
            },
            table,
            fanout,
            now,
        )
        .map_err(ItemError::Key)?;
        let k = fanout
            .for_write(reading.ts, now)
            .unwrap_or_else(|| layout.default_fanout());
        let Encoded { item, size } = ReadingItem::marshal(reading, key, self.config.retention);
        if size > MAX_ITEM_BYTES {
            return Err(ItemError::Rule(format!(
                "the stored item would be {size} bytes; the limit is 400 KB"
            )));
        }
        Ok((item, k))
    }

    fn key(
        &self,
        readings: Vec<Reading>,
        table: &TableHistory,
        fanouts: &Fanouts,
        now: Timestamp,
    ) -> Stage {
        let batch = readings.len() > 1;
        let mut keyed = Vec::with_capacity(readings.len());
        for (i, reading) in readings.into_iter().enumerate() {
            let index = batch.then_some(i);
            let fanout = match fanouts.get(&reading.device_id) {
                Some(Ok(history)) => history,
                Some(Err(err)) => {
                    return Stage::Retry(Retry::Failed(format!(
                        "shard metadata of {} unavailable: {err}",
                        reading.device_id
                    )));
                }
                None => {
                    return Stage::Retry(Retry::Failed(format!(
                        "shard metadata of {} not loaded",
                        reading.device_id
                    )));
                }
            };
            match self.item_for(&reading, table, fanout, now) {
                Ok((item, fanout)) => keyed.push(Keyed {
                    reading,
                    item: Some(item),
                    fanout,
                    outcome: None,
                }),
                Err(ItemError::Key(err)) => return Stage::Refused(key_refusal(index, &err)),
                Err(ItemError::Rule(rule)) => {
                    return Stage::Refused(Refusal {
                        field: index
                            .map(|i| format!("readings[{i}]"))
                            .unwrap_or_else(|| "body".to_owned()),
                        rule,
                    });
                }
            }
        }
        Stage::Keyed(keyed)
    }
}

/// Why a reading has no item.
enum ItemError {
    /// Its key cannot be made.
    Key(KeyError),
    /// The item breaks a rule of the table.
    Rule(String),
}

/// Each entity's fan-out history, or why it could not be read.
type Fanouts = HashMap<String, Result<FanoutHistory, StoreError>>;

/// What the key stage read for keying: the layout and each entity's fan-out at `now`.
struct Keying {
    table: TableHistory,
    fanouts: Fanouts,
    now: Timestamp,
}

/// What one round's writes (or one wave's of the first round, or all rounds) did.
#[derive(Default)]
struct Written {
    stats: WriteStats,
    /// Items given back stale, to re-key.
    rekeyed: u64,
    changes: Changes,
}

impl Written {
    fn absorb(&mut self, other: Written) {
        self.stats.absorb(other.stats);
        self.rekeyed += other.rekeyed;
        self.changes.absorb(other.changes);
    }
}

/// How many of `stages` the first wave of a batch takes: messages up to the first whose
/// parsed readings bring the count to `readings` (all of them if they hold fewer).
fn first_wave(stages: &[Stage], readings: usize) -> usize {
    let mut count = 0;
    for (i, stage) in stages.iter().enumerate() {
        if let Stage::Parsed(parsed) = stage {
            count += parsed.len();
            if count >= readings {
                return i + 1;
            }
        }
    }
    stages.len()
}

/// What [`Ingest::leave_stage`] did.
struct Leaving {
    fates: Vec<Option<Fate>>,
    dead_lettered: u64,
    dlq_failures: u64,
    requeued: u64,
    split: u64,
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The rates read literally: per entity, its readings, its messages and the span
    /// of their `SentTimestamp`s, against the batch's arrival.
    fn rates_by_definition(
        messages: &[(i64, Vec<(u8, i64)>)],
        batch: &fanout::BatchArrival,
    ) -> BTreeMap<String, Option<f64>> {
        let entities: BTreeSet<u8> = messages
            .iter()
            .flat_map(|(_, m)| m.iter().map(|(e, _)| *e))
            .collect();
        entities
            .into_iter()
            .map(|e| {
                let carrying: Vec<&(i64, Vec<(u8, i64)>)> = messages
                    .iter()
                    .filter(|(_, m)| m.iter().any(|(x, _)| *x == e))
                    .collect();
                let readings = carrying
                    .iter()
                    .map(|(_, m)| m.iter().filter(|(x, _)| *x == e).count() as u64)
                    .sum();
                let sent: Vec<i64> = carrying.iter().map(|(t, _)| *t).collect();
                let span = sent
                    .iter()
                    .max()
                    .zip(sent.iter().min())
                    .map_or(0, |(hi, lo)| hi - lo);
                let span = Duration::from_millis(span.unsigned_abs());
                (
                    format!("dev-{e}"),
                    fanout::arrival_rate(readings, carrying.len() as u64, span, batch),
                )
            })
            .collect()
    }

    fn stage(message: &[(u8, i64)]) -> Stage {
        Stage::Parsed(
            message
                .iter()
                .map(|(e, t)| Reading {
                    device_id: format!("dev-{e}"),
                    event_id: format!("evt-{t}"),
                    ts: Timestamp::from_millis(*t).expect("in range"),
                    metrics: BTreeMap::new(),
                    tags: BTreeMap::new(),
                })
                .collect(),
        )
    }

    fn record(sent: i64) -> SqsMessage {
        let mut record = SqsMessage::default();
        record
            .attributes
            .insert("SentTimestamp".to_owned(), sent.to_string());
        record
    }

    proptest! {
        #[test]
        fn entity_rates_follow_arrival_by_the_queues_clock(
            // Messages sent over up to 3 s, their readings stamped anywhere (a sender's
            // timestamps must not matter), some refused.
            spread in prop::collection::vec(
                (
                    0i64..3_000,
                    prop::collection::vec((0u8..3, 0i64..3_600_000), 0..70),
                ),
                0..8,
            ),
            refused in prop::collection::vec(prop::bool::weighted(0.2), 8),
            batch_size in 1usize..10,
        ) {
            let sent0 = 1_782_090_000_000i64;
            let messages: Vec<(i64, Vec<(u8, i64)>)> = spread
                .iter()
                .map(|(sent, m)| {
                    (
                        sent0 + sent,
                        m.iter().map(|(e, ts)| (*e, 1_700_000_000_000 + ts)).collect(),
                    )
                })
                .collect();
            let records: Vec<SqsMessage> = messages.iter().map(|(t, _)| record(*t)).collect();
            let intake = Intake { batch_size, window: Duration::from_secs(1) };
            let batch = batch_arrival(&records, &intake);
            // A message that is not parsed (refused, say) counts for nothing.
            let kept: Vec<(i64, Vec<(u8, i64)>)> = messages
                .iter()
                .zip(&refused)
                .filter(|(_, r)| !**r)
                .map(|(m, _)| m.clone())
                .collect();
            let stages: Vec<Stage> = messages
                .iter()
                .zip(&refused)
                .map(|((_, m), r)| {
                    if *r {
                        Stage::Retry(Retry::Failed("refused".to_owned()))
                    } else {
                        stage(m)
                    }
                })
                .collect();
            prop_assert_eq!(
                entity_rates(&stages, &records, &intake),
                rates_by_definition(&kept, &batch)
            );
        }
    }

    #[test]
    fn readings_stamped_with_one_instant_count_at_most_a_windows_worth() {
        let intake = Intake {
            batch_size: 100,
            window: Duration::from_secs(1),
        };
        for n in [20u8, 200] {
            let readings: Vec<(u8, i64)> = (0..n).map(|_| (0, 1_700_000_000_000)).collect();
            let rates = entity_rates(&[stage(&readings)], &[record(1_782_090_000_000)], &intake);
            assert_eq!(rates["dev-0"], Some(f64::from(n)));
        }
    }
}
