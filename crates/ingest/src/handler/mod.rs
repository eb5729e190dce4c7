//! The handler: one SQS batch in, one partial-batch response out.
//!
//! [`Ingest::process`] is a pipeline of named stages, each in a module of its own, each
//! taking and giving one type per message of the batch, [`Message`](stages::Message),
//! generic in the writes it carries ([`stages`]). The stages that decide are functions
//! of plain values (the records, the configuration, the layout and fan-outs read, the
//! writes' outcomes), with no port and no `Ingest`; `process` keeps the I/O moments
//! between them: the layout and fan-out reads ([`reads`]), the raises ([`observe`]),
//! the write rounds ([`write`]), the marks ([`late`]) and what leaves ([`leave`]).
//! 1. **parse** each message, guarded against panics ([`parse`]): a
//!    [`ParsedMessage`](stages::ParsedMessage), its readings or why it stopped;
//! 2. **pack** each message's readings into writes and encode each write's item once,
//!    before it is keyed, where the layout packs blocks, one device's messages of the
//!    batch together in a group ([`pack`]): a [`Packed`](stages::Packed) batch; where
//!    it writes slabs (and compaction, read by [`Ingest::slab_clock`], does not lag),
//!    the writes of the devices whose share fills no write unit taken out into slabs
//!    of many devices beside it ([`slabs`]), each naming each reading's message;
//! 3. **observe** each entity's rate in the batch ([`rates`]), and raise its fan-out
//!    before its readings are keyed when the keys in force cannot carry it (or mark it
//!    busy, or shrink a quiet one) ([`observe`]);
//! 4. **key** every write with the fan-out in force now, read first ([`reads`]:
//!    a [`KeyingState`](keying::KeyingState)), by [`keying::key_batch`]: a
//!    `Message<KeyedWrite>`. A batch larger than one call per writer slot is keyed in
//!    two waves: the first before the writes, the rest while the first wave's calls are
//!    out, so a batch of thousands of readings does not hold its first call back for
//!    the CPU time of keying them all;
//! 5. **write** in rounds ([`write`], with [`watch`] beside each round): a throttle
//!    brings the entity to the directory at once, and when that raises its fan-out,
//!    the items not yet written are given back by the writer and re-keyed with the new
//!    k for the next round; each write gets its outcome ([`WrittenBatch`]);
//! 6. **settle** each message's fate, final once made, from the outcomes of the writes
//!    that hold its readings, its own or its group's ([`settle::settle_batch`], by the
//!    policy of [`crate::fate`]), then **mark** each device-hour of a written reading
//!    whose hour may already be sealed ([`late::late_written`]), after the write, with a
//!    late mark in the rollups table ([`late`]): the marks' own outcome, the readings
//!    whose marks failed, goes beside the settled fate, which it does not change, and
//!    the leave stage combines the two (`crate::fate::leave`);
//! 7. **requeue or dead-letter** what must leave the batch, and delay the reported
//!    ([`leave`], with what it reads of each SQS record in [`record`]);
//! 8. **report** every message's fate and the metrics (EMF lines) ([`report`]).
//!
//! Every message ends in exactly one of these fates:
//! - **written**: all its readings are stored;
//! - **dead-lettered**: refused for good (bad JSON, a broken rule, an unkeyable
//!   reading), sent to the DLQ at once with the reason, and not reported, so SQS does
//!   not redeliver it;
//! - **split**: some readings are stored and the rest failed transiently: the rest is
//!   sent back to the queue as a fresh copy and the message is acknowledged, so no
//!   stored reading is ever written again (under another key, after a raise);
//! - **unmarked**: its readings are stored but a late mark of some failed: those
//!   readings go back to the queue as a fresh copy marked as holding stored readings,
//!   written again under their keys and marked when it comes back, and never
//!   dead-lettered for running out of receives (`crate::fate::leave`);
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

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sharding::time::Timestamp;
use store::batch::{BatchTable, BatchWriter, MAX_BATCH_ITEMS, WriterConfig};
use store::directory::{ShardDirectory, ShardStore};
use store::dynamo::{DynamoShards, DynamoTable};
use store::queue::Queue;
use store::rollup::RollupTable;
use store::rollup::dynamo::DynamoRollups;
use store::sqs::SqsQueue;
use tokio::time::Instant;
use tracing::Span;

use crate::config::Config;
use crate::fate::{Retry, Settled, Stopped};

use late::LateHours;
use observe::Changes;
use write::WrittenBatch;

mod keying;
mod late;
mod leave;
mod observe;
mod pack;
mod parse;
mod rates;
mod reads;
mod record;
mod report;
mod settle;
mod slabs;
mod stages;
mod watch;
mod write;

pub use late::LATE_MARK_MARGIN;
pub use record::{
    FRONT_DOOR_ATTRIBUTE, OWN_ATTRIBUTE_PREFIX, REQUEUES_ATTRIBUTE, SENT_ATTRIBUTE,
    SOURCE_ID_ATTRIBUTE, STORED_ATTRIBUTE,
};
pub use report::{MessageReport, Report};

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

/// A hook run inside each message's guarded section (fault injection in tests).
pub type MessageHook = Arc<dyn Fn(&str) + Send + Sync>;

/// Rounds of re-keying after raises within one invocation: each needs a raise, and
/// raises of one entity are a cooldown apart.
const MAX_REKEY_ROUNDS: usize = 4;

/// The ingest service: configuration plus the three ports, and the rollups table's
/// (`L`, where late readings leave their marks) when `ROLLUP_TABLE` is configured.
/// Every caller names its four adapters (the production ones:
/// [`from_clients`](Self::from_clients)).
pub struct Ingest<T, S, Q, L> {
    config: Config,
    writer: BatchWriter<T>,
    directory: ShardDirectory<S>,
    queue: Q,
    rollups: Option<L>,
    /// The sealer's horizon, as last read from its watermark.
    horizon: late::HorizonCache,
    /// The compaction progress, as last read, which decides whether slabs are written.
    compaction: reads::CompactionCache,
    hook: Option<MessageHook>,
}

impl<T, S, Q, L> std::fmt::Debug for Ingest<T, S, Q, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ingest")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Ingest<DynamoTable, DynamoShards, SqsQueue, DynamoRollups> {
    /// The production wiring over SDK clients (the rollups table's when `ROLLUP_TABLE`
    /// is set).
    pub fn from_clients(
        config: Config,
        dynamo: &aws_sdk_dynamodb::Client,
        sqs: &aws_sdk_sqs::Client,
    ) -> Self {
        let table = DynamoTable::new(dynamo, &config.table_name);
        let shards = DynamoShards::new(dynamo, &config.shards.shard_table_name);
        let queue = SqsQueue::new(sqs, &config.dlq_url, config.source_queue_url.clone());
        let rollups = config
            .rollup_table
            .as_ref()
            .map(|name| DynamoRollups::new(dynamo.clone(), name));
        let mut ingest = Self::new(config, table, shards, queue);
        ingest.rollups = rollups;
        ingest
    }
}

/// What `f` gives, or, when it panics, a message stopped to be retried with the panic's
/// message.
fn guarded<T, F: FnOnce() -> Result<T, Stopped>>(f: F) -> Result<T, Stopped> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string panic".to_owned());
        Err(Stopped::Retry(Retry::Panic(what)))
    })
}

/// The batch's cx: what every stage of one invocation shares.
struct BatchContext<'a> {
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

impl<'a> BatchContext<'a> {
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

/// A random stream of its own, seeded from `rng` (so a seeded test stays reproducible).
fn seeded<R: Rng + ?Sized>(rng: &mut R) -> StdRng {
    let mut seed = <StdRng as SeedableRng>::Seed::default();
    rng.fill(&mut seed);
    StdRng::from_seed(seed)
}

impl<T: BatchTable, S: ShardStore, Q: Queue, L> Ingest<T, S, Q, L> {
    /// A service over the given ports, with no rollups table (no late marks) until
    /// [`with_rollups`](Self::with_rollups).
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
            rollups: None,
            horizon: late::HorizonCache::default(),
            compaction: reads::CompactionCache::default(),
            hook: None,
        }
    }
}

impl<T: BatchTable, S: ShardStore, Q: Queue, L: RollupTable> Ingest<T, S, Q, L> {
    /// The same service, its late readings marked in `rollups`.
    pub fn with_rollups(mut self, rollups: L) -> Self {
        self.rollups = Some(rollups);
        self
    }

    /// The rollups table, when late readings are marked.
    pub fn rollups(&self) -> Option<&L> {
        self.rollups.as_ref()
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
        let cx = BatchContext::new(&event.records, now, deadline, self.config.deadline_margin);
        let retention = self.config.retention;
        let mut changes = Changes::default();
        let parsed = parse::parse_batch(&cx, &self.config, self.hook.as_ref());
        let layout = self.rate_layout(&parsed, &cx).await;
        let slab_clock = self.slab_clock(layout.as_ref(), &cx).await;
        let (packed, slabs) = pack::pack_batch(
            parsed,
            layout.as_ref(),
            slab_clock.as_ref(),
            retention,
            &cx.spans,
        );
        let rates = rates::entity_rates(&packed, &slabs, cx.records, &self.config.intake);
        self.observe_stage(&rates, &cx, &mut changes, rng).await;
        let keying = self.load_keying(&packed, &slabs, layout, &cx).await;
        let slabs = keying::key_slabs(slabs, &keying);
        let calls = self.config.max_inflight.max(1) * MAX_BATCH_ITEMS;
        let (first, rest) = packed.waves(keying.first_wave(calls));
        let first_len = first.len();
        let first = keying::key_batch(first, &keying, retention, &cx.spans);
        let rest_spans = cx.spans.get(first_len..).unwrap_or_default();
        let key_rest = rest.map(|rest| || keying::key_batch(rest, &keying, retention, rest_spans));
        let WrittenBatch {
            messages,
            slabs,
            written,
        } = self
            .write_stage(first, slabs, key_rest, &rates, &cx, rng)
            .await;
        changes.absorb(written.changes);
        let (writes, readings_written, stale) = (written.stats, written.readings, written.stale);
        let panics = messages.iter().filter(|m| m.panicked()).count() as u64;
        let late = if self.marks_late() {
            let horizon = self.lateness_horizon(&cx).await;
            let span = cx.deadline.saturating_duration_since(cx.started);
            late::late_written(&messages, &slabs, horizon, cx.now, span)
        } else {
            LateHours::new()
        };
        let settled: Vec<Settled> = settle::settle_batch(messages, slabs, MAX_REKEY_ROUNDS);
        let marks = self.mark_stage(late, settled.len(), &cx, rng).await;
        let leaving = self.leave_stage(settled, marks.unmarked, &cx, rng).await;
        let (delayed, delay_failures) = self
            .delay_reported(cx.records, &leaving.fates, cx.deadline, rng)
            .await;
        let messages = self.log_fates(leaving.fates, &cx);
        Report {
            messages,
            writes,
            readings_written,
            fanout_raises: changes.raises,
            fanout_shrinks: changes.shrinks,
            stale,
            dead_lettered: leaving.dead_lettered,
            dlq_failures: leaving.dlq_failures,
            panics,
            delayed,
            delay_failures,
            requeued: leaving.requeued,
            split: leaving.split,
            late_marks: marks.written,
            late_mark_failures: marks.failed,
        }
    }
}
