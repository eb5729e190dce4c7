//! The batch writer: dedup, chunking, bounded concurrency and bounded retries.
//!
//! [`BatchWriter::write`] takes any number of [`Put`]s, each an item with the key and
//! the size its caller made it with, and answers with one [`Outcome`] per put, so the
//! caller can answer per message:
//! 1. puts with the same key are written once (DynamoDB refuses a batch that names a
//!    key twice); every duplicate shares the outcome of the one kept;
//! 2. the rest go in chunks of at most 25 items and 16 MB, at most
//!    `max_inflight` calls at a time. Writes that run at once may share one set of
//!    [`Slots`] and stay within the limit together, so a caller may start writing the
//!    first items of a batch and, while their calls are out, hand the writer the rest;
//! 3. items DynamoDB leaves unprocessed, and whole calls that fail with a throttle or a
//!    transient error, are retried after a full-jitter delay from `sharding`'s
//!    [`Backoff`], until the attempts or the deadline run out; a call never outlives
//!    the deadline. A call consumes the items it sends (the SDK takes its input by
//!    value), so between attempts the writer holds each put's key, not a copy of its
//!    item: an unprocessed item comes back in the answer, and an item a failed call
//!    took is made again by the caller's [`Remake`];
//! 4. a `ValidationException` on a chunk of several items splits it in halves (no
//!    delay), so one item the caller's checks missed cannot take good items down with it;
//! 5. a [`WriteObserver`] hears of every partition key a throttle refused as it happens,
//!    and may declare a key stale: its items not yet written come back as
//!    [`Outcome::Stale`] at their next attempt, for the caller to re-key (a raised
//!    fan-out spreads them over more keys) rather than retried on the hot key.
//!
//! The writer never reads a key or a size out of an item: a [`Put`] carries both, and
//! cannot be made for an item over DynamoDB's 400 KB ([`SizedItem::new`], the one place
//! that rule is checked). The one call is behind the [`BatchTable`] port:
//! [`crate::dynamo::DynamoTable`] in production, [`crate::memory::MemoryTable`] (with
//! injectable faults) in tests.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;

use aws_sdk_dynamodb::types::AttributeValue;
use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sharding::backoff::Backoff;
use sharding::key::ItemKey;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::error::{StoreError, ThrottleKind};

/// A DynamoDB item as the SDK sees it.
pub type Item = HashMap<String, AttributeValue>;

/// At most 25 put requests per `BatchWriteItem`.
pub const MAX_BATCH_ITEMS: usize = 25;
/// At most 16 MB per `BatchWriteItem` request.
pub const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;

mod attempt;
mod chunk;
mod put;

use attempt::{Attempts, Pending, Tally};
pub use chunk::{Prepared, prepare};
pub use put::{ItemTooLarge, Put, SizedItem};

/// The port: one `BatchWriteItem` call of at most 25 put requests to the readings
/// table. Answers with the items left unprocessed, or the classified error.
pub trait BatchTable: Send + Sync {
    /// Puts `items` (unique keys, at most 25); returns the unprocessed ones.
    fn batch_write(
        &self,
        items: Vec<Item>,
    ) -> impl Future<Output = Result<Vec<Item>, StoreError>> + Send;
}

impl<T: BatchTable> BatchTable for &T {
    fn batch_write(
        &self,
        items: Vec<Item>,
    ) -> impl Future<Output = Result<Vec<Item>, StoreError>> + Send {
        (**self).batch_write(items)
    }
}

impl<T: BatchTable> BatchTable for std::sync::Arc<T> {
    fn batch_write(
        &self,
        items: Vec<Item>,
    ) -> impl Future<Output = Result<Vec<Item>, StoreError>> + Send {
        (**self).batch_write(items)
    }
}

/// What a caller hears, and decides, while a write is under way.
pub trait WriteObserver: Sync {
    /// A key-range throttle refused items of partition key `pk`, or a call left them
    /// unprocessed after a key-range throttle of their chunk.
    fn throttled(&self, pk: &str) {
        let _ = pk;
    }

    /// Whether the items of `pk` not yet written are to be given back unwritten, as
    /// [`Outcome::Stale`], instead of retried under that key.
    fn stale(&self, pk: &str) -> bool {
        let _ = pk;
        false
    }
}

/// Hears nothing, declares nothing stale.
impl WriteObserver for () {}

/// Makes the item of an input put again, for another attempt after a failed call
/// consumed the one it sent. The writer then holds no copy of an item between
/// attempts: copying every item for every call cost the ingest handler about a seventh
/// of its CPU, for the rare call that fails whole.
pub trait Remake: Sync {
    /// The item of input put `index`, whose key is `key`, as it was given to the write;
    /// `None` if it cannot be made again (the put then fails, retryable).
    fn remake(&self, index: usize, key: &ItemKey) -> Option<Item>;
}

/// Nothing is made again: a put a failed call consumed fails, retryable.
impl Remake for () {
    fn remake(&self, _index: usize, _key: &ItemKey) -> Option<Item> {
        None
    }
}

/// Copies of the input items, made again by cloning: for callers that have nothing
/// cheaper (tests).
impl Remake for Vec<Item> {
    fn remake(&self, index: usize, _key: &ItemKey) -> Option<Item> {
        self.get(index).cloned()
    }
}

/// What became of one input item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Stored.
    Written,
    /// Never stored, given back before a retry because the observer declared its key
    /// stale: re-key it and write it again.
    Stale,
    /// Not stored this time; another delivery may succeed.
    FailedRetryable {
        /// The last real error (or `unprocessed` / `deadline`).
        reason: String,
        /// The throttle that kept it out, when one did: a key-range throttle is the
        /// signal to raise the entity's fan-out.
        throttle: Option<ThrottleKind>,
    },
    /// Never storable as it is (refused by DynamoDB's validation).
    FailedPermanent {
        /// Which rule it broke.
        reason: String,
    },
}

impl Outcome {
    /// Whether the item is stored.
    pub fn is_written(&self) -> bool {
        matches!(self, Self::Written)
    }
}

/// Counters of one [`BatchWriter::write`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// `BatchWriteItem` calls made.
    pub calls: u64,
    /// Calls that were retries (after unprocessed items or a retryable error).
    pub retries: u64,
    /// Distinct items stored.
    pub written: u64,
    /// Input items dropped as duplicates of another input item.
    pub duplicates: u64,
    /// Items over 1 KB (they cost more than one write unit).
    pub large_items: u64,
    /// Items returned in `UnprocessedItems`, summed over calls.
    pub unprocessed: u64,
    /// Throttled calls by DynamoDB's reason (`TableWriteKeyRangeThroughputExceeded`, ...).
    pub throttles: BTreeMap<String, u64>,
    /// Items refused by a key-range throttle, by partition key, whether a retry stored
    /// them later or not: a hot key is hot even when retries get its items through.
    pub key_range_throttled: BTreeMap<String, u64>,
    /// Calls that failed with a transient error (5xx, timeout, dispatch failure).
    pub transient_errors: u64,
    /// Distinct items left failed-retryable.
    pub failed_retryable: u64,
    /// Distinct items failed permanently (refused or rejected).
    pub failed_permanent: u64,
    /// Distinct items given back unwritten because their key went stale.
    pub stale: u64,
}

impl WriteStats {
    /// Adds `other`'s counts to these.
    pub fn absorb(&mut self, other: WriteStats) {
        self.calls += other.calls;
        self.retries += other.retries;
        self.written += other.written;
        self.duplicates += other.duplicates;
        self.large_items += other.large_items;
        self.unprocessed += other.unprocessed;
        for (reason, n) in other.throttles {
            *self.throttles.entry(reason).or_default() += n;
        }
        for (pk, n) in other.key_range_throttled {
            *self.key_range_throttled.entry(pk).or_default() += n;
        }
        self.transient_errors += other.transient_errors;
        self.failed_retryable += other.failed_retryable;
        self.failed_permanent += other.failed_permanent;
        self.stale += other.stale;
    }
}

/// The answer to one [`BatchWriter::write`]: `outcomes[i]` belongs to input item `i`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchReport {
    /// One outcome per input item, in input order.
    pub outcomes: Vec<Outcome>,
    /// Counters.
    pub stats: WriteStats,
}

/// Tuning of the writer.
#[derive(Debug, Clone)]
pub struct WriterConfig {
    /// Calls in flight at most (`MAX_INFLIGHT`).
    pub max_inflight: usize,
    /// Delay policy between attempts on the same chunk.
    pub backoff: Backoff,
}

/// A writer's `max_inflight` slots for calls in flight, one per chunk being written
/// ([`BatchWriter::slots`]). Writes given the same slots ([`BatchWriter::write_in`]) stay
/// within the limit together.
#[derive(Debug)]
pub struct Slots(Semaphore);

/// Writes batches through a [`BatchTable`]; see the module docs.
#[derive(Debug, Clone)]
pub struct BatchWriter<T> {
    table: T,
    config: WriterConfig,
}

impl<T: BatchTable> BatchWriter<T> {
    /// A writer over `table`.
    pub fn new(table: T, config: WriterConfig) -> Self {
        Self { table, config }
    }

    /// A fresh set of `max_inflight` slots, to share between writes that run at once.
    pub fn slots(&self) -> Slots {
        Slots(Semaphore::new(self.config.max_inflight.max(1)))
    }

    /// The port this writer calls.
    pub fn table(&self) -> &T {
        &self.table
    }

    /// Writes `puts`, finishing before `deadline`; one outcome per put. `rng` seeds the
    /// jitter of every chunk, so a seeded RNG makes the delays reproducible; an item a
    /// failed call consumed is made again by `remake` for the next attempt.
    pub async fn write<R: Rng + ?Sized>(
        &self,
        puts: Vec<Put<'_>>,
        deadline: Instant,
        rng: &mut R,
        remake: &dyn Remake,
    ) -> BatchReport {
        self.write_in(puts, deadline, rng, &(), &self.slots(), remake)
            .await
    }

    /// [`write`](Self::write) within `slots`, which other writes running at once may
    /// share: together they have at most `max_inflight` calls out. `observer` hears the
    /// partition key of every item a throttle refused, as it happens, so a caller can
    /// react (raise the entity's fan-out) while the retries still back off; items whose
    /// key it then declares stale come back as [`Outcome::Stale`].
    #[tracing::instrument(skip_all, fields(items = puts.len()))]
    pub async fn write_in<R: Rng + ?Sized>(
        &self,
        puts: Vec<Put<'_>>,
        deadline: Instant,
        rng: &mut R,
        observer: &dyn WriteObserver,
        slots: &Slots,
        remake: &dyn Remake,
    ) -> BatchReport {
        let prepared = prepare(&puts);
        let mut stats = WriteStats {
            large_items: prepared.large_items,
            duplicates: prepared
                .canonical
                .iter()
                .enumerate()
                .filter(|(i, c)| i != *c)
                .count() as u64,
            ..WriteStats::default()
        };
        let mut unsent: Vec<Option<Put<'_>>> = puts.into_iter().map(Some).collect();
        let jobs: Vec<_> = prepared
            .chunks
            .iter()
            .map(|chunk| {
                let batch: Vec<Pending<'_>> = chunk
                    .iter()
                    .filter_map(|&index| {
                        let put = unsent.get_mut(index).and_then(Option::take)?;
                        Some(Pending {
                            index,
                            key: put.key,
                            item: Some(put.item.item),
                        })
                    })
                    .collect();
                let mut seed = <StdRng as SeedableRng>::Seed::default();
                rng.fill(&mut seed);
                (batch, StdRng::from_seed(seed))
            })
            .collect();
        let max_inflight = self.config.max_inflight.max(1);
        // The chunks' futures made before they are streamed: a stream that mapped them
        // as it went would hold a closure over the items' lifetimes, and a caller that
        // borrows its table could not prove its own future Send.
        let chunks: Vec<_> = jobs
            .into_iter()
            .map(|(batch, rng)| async move {
                // A chunk holds one of the slots until all its items have outcomes.
                // Waiting for one ends at the deadline, where the chunk fails at once.
                let _slot = tokio::time::timeout_at(deadline, slots.0.acquire()).await;
                self.write_chunk(batch, deadline, rng, observer, remake)
                    .await
            })
            .collect();
        let mut results = futures::stream::iter(chunks).buffer_unordered(max_inflight);
        let mut by_index: HashMap<usize, Outcome> =
            HashMap::with_capacity(prepared.canonical.len());
        while let Some(tally) = results.next().await {
            stats.absorb(tally.stats);
            by_index.extend(tally.done);
        }
        let outcomes: Vec<Outcome> = prepared
            .canonical
            .iter()
            .map(|c| {
                by_index
                    .get(c)
                    .cloned()
                    .unwrap_or_else(|| Outcome::FailedRetryable {
                        // Unreachable by construction: every canonical index is chunked.
                        reason: "no outcome recorded".to_owned(),
                        throttle: None,
                    })
            })
            .collect();
        tracing::debug!(?stats, "batch written");
        BatchReport { outcomes, stats }
    }

    /// One chunk until every item has an outcome: its sub-batches in turn, the halves
    /// of one a validation error split included.
    async fn write_chunk(
        &self,
        chunk: Vec<Pending<'_>>,
        deadline: Instant,
        mut rng: StdRng,
        observer: &dyn WriteObserver,
        remake: &dyn Remake,
    ) -> Tally {
        let mut tally = Tally::default();
        let mut queue: VecDeque<Vec<Pending<'_>>> = VecDeque::from([chunk]);
        while let Some(pending) = queue.pop_front() {
            let attempts = Attempts {
                deadline,
                observer,
                remake,
            };
            if let Some(halves) = self
                .write_sub_batch(pending, &attempts, &mut rng, &mut tally)
                .await
            {
                queue.extend(halves);
            }
        }
        tally
    }

    /// Attempts one sub-batch until every item has an outcome: retries within the
    /// budget. A validation error on several items ends it early with its two halves,
    /// for the caller to write in turn.
    async fn write_sub_batch<'k>(
        &self,
        mut pending: Vec<Pending<'k>>,
        at: &Attempts<'_>,
        rng: &mut StdRng,
        tally: &mut Tally,
    ) -> Option<[Vec<Pending<'k>>; 2]> {
        let mut attempt: u32 = 0;
        // The most recent call-level throttle in this sub-batch: unprocessed items carry
        // no reason, so this is the best evidence of why they stay out.
        let mut throttle: Option<ThrottleKind> = None;
        let mut last_reason = String::new();
        loop {
            if Instant::now() >= at.deadline {
                if last_reason.is_empty() {
                    last_reason = "deadline reached before the first attempt".to_owned();
                }
                tally.fail_all(&mut pending, &last_reason, throttle);
                return None;
            }
            if attempt > 0 {
                tally.give_back_stale(&mut pending, at.observer);
            }
            // Empty when every item went back stale or could not be made again.
            let items = tally.lend(&mut pending, at.remake);
            if items.is_empty() {
                return None;
            }
            if attempt > 0 {
                tally.stats.retries += 1;
            }
            tally.stats.calls += 1;
            let result = tokio::time::timeout_at(at.deadline, self.table.batch_write(items))
                .await
                .unwrap_or(Err(StoreError::Deadline));
            match result {
                Ok(unprocessed) => {
                    tally.take_answer(&mut pending, unprocessed);
                    // Unprocessed items carry no reason: after a key-range throttle on
                    // this chunk, they are more of the same.
                    if throttle == Some(ThrottleKind::KeyRange) {
                        for p in &pending {
                            at.observer.throttled(&p.key.pk);
                        }
                    }
                    last_reason = match throttle {
                        Some(kind) => format!("unprocessed after a {kind} throttle"),
                        None => "unprocessed".to_owned(),
                    };
                }
                Err(err) if err.is_permanent() => {
                    if pending.len() > 1 {
                        let back = pending.split_off(pending.len() / 2);
                        return Some([pending, back]);
                    }
                    tally.fail_permanent(&mut pending, &err.to_string());
                    return None;
                }
                Err(err) if err.is_retryable() => {
                    if let StoreError::Throttled { kind, reason } = &err {
                        throttle = Some(*kind);
                        tally.throttled(*kind, reason, &pending, at.observer);
                    } else {
                        tally.stats.transient_errors += 1;
                    }
                    last_reason = err.to_string();
                }
                Err(err) => {
                    // Deadline or configuration: another attempt now cannot help.
                    if err == StoreError::Deadline {
                        tally.stats.transient_errors += 1;
                    }
                    tally.fail_all(&mut pending, &err.to_string(), throttle);
                    return None;
                }
            }
            if pending.is_empty() {
                return None;
            }
            let remaining = at.deadline.saturating_duration_since(Instant::now());
            let Some(delay) = self.config.backoff.next_delay(attempt, remaining, rng) else {
                tally.fail_all(&mut pending, &last_reason, throttle);
                return None;
            };
            attempt += 1;
            tokio::time::sleep(delay).await;
        }
    }
}
