//! The batch writer: dedup, chunking, bounded concurrency and bounded retries.
//!
//! [`BatchWriter::write`] takes any number of items and answers with one
//! [`Outcome`] per input item, so the caller can answer per message:
//! 1. items without a usable key or over 400 KB are refused before any call
//!    ([`Outcome::FailedPermanent`]);
//! 2. items with the same `(PK, SK)` are written once (DynamoDB refuses a batch that
//!    names a key twice); every duplicate shares the outcome of the one kept;
//! 3. the rest go in chunks of at most 25 items and 16 MB, at most
//!    `max_inflight` calls at a time. Writes that run at once may share one set of
//!    [`Slots`] and stay within the limit together, so a caller may start writing the
//!    first items of a batch and, while their calls are out, hand the writer the rest;
//! 4. items DynamoDB leaves unprocessed, and whole calls that fail with a throttle or a
//!    transient error, are retried after a full-jitter delay from `sharding`'s
//!    [`Backoff`], until the attempts or the deadline run out; a call never outlives
//!    the deadline. A call consumes the items it sends (the SDK takes its input by
//!    value), so between attempts the writer holds each item's key, not a copy of the
//!    item: an unprocessed item comes back in the answer, and an item a failed call
//!    took is made again by the caller's [`Remake`];
//! 5. a `ValidationException` on a chunk of several items splits it in halves (no
//!    delay), so one item the pre-checks missed cannot take good items down with it;
//! 6. a [`WriteObserver`] hears of every partition key a throttle refused as it happens,
//!    and may declare a key stale: its items not yet written come back as
//!    [`Outcome::Stale`] at their next attempt, for the caller to re-key (a raised
//!    fan-out spreads them over more keys) rather than retried on the hot key.
//!
//! The one call is behind the [`BatchTable`] port: [`crate::dynamo::DynamoTable`] in
//! production, [`crate::memory::MemoryTable`] (with injectable faults) in tests.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;

use aws_sdk_dynamodb::types::AttributeValue;
use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sharding::backoff::Backoff;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::error::{StoreError, ThrottleKind};
use crate::item::{PK, SK};
use crate::size::{MAX_ITEM_BYTES, WCU_BYTES, item_size_and_wire_bound, wire_size};

/// A DynamoDB item as the SDK sees it.
pub type Item = HashMap<String, AttributeValue>;

/// At most 25 put requests per `BatchWriteItem`.
pub const MAX_BATCH_ITEMS: usize = 25;
/// At most 16 MB per `BatchWriteItem` request.
pub const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;
/// Default bound on concurrent calls.
pub const DEFAULT_MAX_INFLIGHT: usize = 16;

/// The primary key of a readings-table item.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// Partition key.
    pub pk: String,
    /// Sort key.
    pub sk: String,
}

/// The `(PK, SK)` of an item, or why it has none usable.
pub fn key_of(item: &Item) -> Result<Key, String> {
    let (pk, sk) = key_ref(item)?;
    Ok(Key {
        pk: pk.to_owned(),
        sk: sk.to_owned(),
    })
}

/// [`key_of`], borrowed from the item.
fn key_ref(item: &Item) -> Result<(&str, &str), String> {
    let string = |name: &str| match item.get(name) {
        Some(AttributeValue::S(s)) if !s.is_empty() => Ok(s.as_str()),
        Some(AttributeValue::S(_)) => Err(format!("key attribute {name} is empty")),
        Some(_) => Err(format!("key attribute {name} is not a string")),
        None => Err(format!("key attribute {name} is missing")),
    };
    Ok((string(PK)?, string(SK)?))
}

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

/// Makes an input item of a write again, for another attempt after a failed call
/// consumed the one it sent. The writer then holds no copy of an item between
/// attempts: copying every item for every call cost the ingest handler about a seventh
/// of its CPU (bench item 1), for the rare call that fails whole.
pub trait Remake: Sync {
    /// Input item `index`, whose key is `key`, as it was given to the write; `None`
    /// if it cannot be made again (the item then fails, retryable).
    fn remake(&self, index: usize, key: &Key) -> Option<Item>;
}

/// Copies of the input, made again by cloning: for callers that have nothing cheaper.
impl Remake for Vec<Item> {
    fn remake(&self, index: usize, _key: &Key) -> Option<Item> {
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
    /// Never storable as it is (too large, no key, refused by validation).
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
    /// Items refused before any call.
    pub refused: u64,
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
        self.refused += other.refused;
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

/// The input, deduplicated, checked and cut into chunks; pure, see [`prepare`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// For each input item, the input index of the item written in its place
    /// (itself, or the first earlier item with the same key).
    pub canonical: Vec<usize>,
    /// Input items refused before any call, with the reason.
    pub refused: Vec<(usize, String)>,
    /// Chunks of input indices; every index appears at most once over all chunks.
    pub chunks: Vec<Vec<usize>>,
    /// Items over 1 KB among the chunked ones.
    pub large_items: u64,
}

/// Dedups by `(PK, SK)` keeping the first, refuses unkeyed and oversize items, and cuts
/// the rest into chunks of at most [`MAX_BATCH_ITEMS`] items and [`MAX_REQUEST_BYTES`]
/// of estimated request size, in input order.
pub fn prepare(items: &[Item]) -> Prepared {
    let mut canonical = Vec::with_capacity(items.len());
    let mut first_of: HashMap<(&str, &str), usize> = HashMap::with_capacity(items.len());
    let mut refused = Vec::new();
    let mut chunks = Chunker {
        items,
        chunks: Vec::new(),
        bytes: 0,
        exact: false,
    };
    let mut large_items = 0;
    for (i, item) in items.iter().enumerate() {
        let key = match key_ref(item) {
            Ok(key) => key,
            Err(reason) => {
                canonical.push(i);
                refused.push((i, reason));
                continue;
            }
        };
        if let Some(&first) = first_of.get(&key) {
            canonical.push(first);
            continue;
        }
        first_of.insert(key, i);
        canonical.push(i);
        let (size, bound) = item_size_and_wire_bound(item);
        if size > MAX_ITEM_BYTES {
            refused.push((
                i,
                format!("item size {size} bytes exceeds the 400 KB ({MAX_ITEM_BYTES} bytes) limit"),
            ));
            continue;
        }
        if size > WCU_BYTES {
            large_items += 1;
        }
        chunks.push(i, bound);
    }
    Prepared {
        canonical,
        refused,
        chunks: chunks.chunks,
        large_items,
    }
}

/// Chunks being cut from `items`, in input order: at most [`MAX_BATCH_ITEMS`] items
/// and [`MAX_REQUEST_BYTES`] of estimated request each.
struct Chunker<'i> {
    items: &'i [Item],
    chunks: Vec<Vec<usize>>,
    /// The last chunk's bytes: a sum of bounds that read no string, or of exact
    /// estimates once the bounds could cut it (`exact`).
    bytes: usize,
    exact: bool,
}

impl Chunker<'_> {
    /// Adds item `i`, whose wire-size bound is `bound`, to the last chunk if it fits
    /// there by the exact estimate, else to a new one.
    fn push(&mut self, i: usize, bound: usize) {
        if self
            .chunks
            .last()
            .is_none_or(|c| c.len() >= MAX_BATCH_ITEMS)
        {
            return self.start(i, bound);
        }
        let mut bytes = if self.exact {
            wire_size(&self.items[i])
        } else {
            bound
        };
        if !self.exact && self.bytes + bytes > MAX_REQUEST_BYTES {
            // The bounds could cut the chunk: count it exactly from here on.
            let last = self.chunks.last().into_iter().flatten();
            self.bytes = last.map(|&j| wire_size(&self.items[j])).sum();
            bytes = wire_size(&self.items[i]);
            self.exact = true;
        }
        if self.bytes + bytes > MAX_REQUEST_BYTES {
            return self.start(i, bound);
        }
        self.bytes += bytes;
        if let Some(last) = self.chunks.last_mut() {
            last.push(i);
        }
    }

    /// Starts a chunk with item `i`, counted by its bound.
    fn start(&mut self, i: usize, bound: usize) {
        self.chunks.push(vec![i]);
        self.bytes = bound;
        self.exact = false;
    }
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

    /// Writes `items`, finishing before `deadline`; one outcome per item. `rng` seeds
    /// the jitter of every chunk, so a seeded RNG makes the delays reproducible.
    pub async fn write<R: Rng + ?Sized>(
        &self,
        items: Vec<Item>,
        deadline: Instant,
        rng: &mut R,
    ) -> BatchReport {
        self.write_observed(items, deadline, rng, &()).await
    }

    /// [`write`](Self::write), telling `observer` the partition key of every item a
    /// throttle refused, as it happens, so a caller can react (raise the entity's
    /// fan-out) while the retries still back off; items whose key the observer then
    /// declares stale come back as [`Outcome::Stale`].
    pub async fn write_observed<R: Rng + ?Sized>(
        &self,
        items: Vec<Item>,
        deadline: Instant,
        rng: &mut R,
        observer: &dyn WriteObserver,
    ) -> BatchReport {
        let copies = items.clone();
        self.write_in(items, deadline, rng, observer, &self.slots(), &copies)
            .await
    }

    /// [`write_observed`](Self::write_observed) within `slots`, which other writes
    /// running at once may share: together they have at most `max_inflight` calls out.
    /// An item a failed call consumed is made again by `remake` for the next attempt.
    #[tracing::instrument(skip_all, fields(items = items.len()))]
    pub async fn write_in<R: Rng + ?Sized>(
        &self,
        items: Vec<Item>,
        deadline: Instant,
        rng: &mut R,
        observer: &dyn WriteObserver,
        slots: &Slots,
        remake: &dyn Remake,
    ) -> BatchReport {
        let prepared = prepare(&items);
        let mut stats = WriteStats {
            large_items: prepared.large_items,
            refused: prepared.refused.len() as u64,
            failed_permanent: prepared.refused.len() as u64,
            duplicates: prepared
                .canonical
                .iter()
                .enumerate()
                .filter(|(i, c)| i != *c)
                .count() as u64,
            ..WriteStats::default()
        };
        let mut by_index: HashMap<usize, Outcome> = prepared
            .refused
            .iter()
            .map(|(i, reason)| {
                (
                    *i,
                    Outcome::FailedPermanent {
                        reason: reason.clone(),
                    },
                )
            })
            .collect();

        let mut unsent: Vec<Option<Item>> = items.into_iter().map(Some).collect();
        let jobs: Vec<_> = prepared
            .chunks
            .iter()
            .map(|chunk| {
                let batch: Vec<Pending> = chunk
                    .iter()
                    .filter_map(|&index| {
                        let item = unsent.get_mut(index).and_then(Option::take)?;
                        // Every chunked item has a key: `prepare` refused the others.
                        let key = key_of(&item).ok()?;
                        Some(Pending {
                            index,
                            key,
                            item: Some(item),
                        })
                    })
                    .collect();
                let mut seed = <StdRng as SeedableRng>::Seed::default();
                rng.fill(&mut seed);
                (batch, StdRng::from_seed(seed))
            })
            .collect();
        let max_inflight = self.config.max_inflight.max(1);
        let mut results = futures::stream::iter(jobs.into_iter().map(|(batch, rng)| async move {
            // A chunk holds one of the slots until all its items have outcomes. Waiting
            // for one ends at the deadline, where the chunk fails at once.
            let _slot = tokio::time::timeout_at(deadline, slots.0.acquire()).await;
            self.write_chunk(batch, deadline, rng, observer, remake)
                .await
        }))
        .buffer_unordered(max_inflight);
        while let Some((outcomes, chunk_stats)) = results.next().await {
            stats.absorb(chunk_stats);
            by_index.extend(outcomes);
        }

        let outcomes: Vec<Outcome> = prepared
            .canonical
            .iter()
            .map(|c| {
                by_index
                    .get(c)
                    .cloned()
                    .unwrap_or_else(|| Outcome::FailedRetryable {
                        // Unreachable by construction: every canonical index is refused or chunked.
                        reason: "no outcome recorded".to_owned(),
                        throttle: None,
                    })
            })
            .collect();
        tracing::debug!(?stats, "batch written");
        BatchReport { outcomes, stats }
    }

    /// One chunk until every item has an outcome: retries within the budget, splits on
    /// validation errors.
    async fn write_chunk(
        &self,
        chunk: Vec<Pending>,
        deadline: Instant,
        mut rng: StdRng,
        observer: &dyn WriteObserver,
        remake: &dyn Remake,
    ) -> (Vec<(usize, Outcome)>, WriteStats) {
        let mut stats = WriteStats::default();
        let mut done: Vec<(usize, Outcome)> = Vec::with_capacity(chunk.len());
        let mut queue: VecDeque<Vec<Pending>> = VecDeque::from([chunk]);
        while let Some(mut pending) = queue.pop_front() {
            let mut attempt: u32 = 0;
            // The most recent call-level throttle in this sub-batch: unprocessed items
            // carry no reason, so this is the best evidence of why they stay out.
            let mut throttle: Option<ThrottleKind> = None;
            let mut last_reason = String::new();
            loop {
                if Instant::now() >= deadline {
                    if last_reason.is_empty() {
                        last_reason = "deadline reached before the first attempt".to_owned();
                    }
                    fail_all(&mut done, &mut stats, &mut pending, &last_reason, throttle);
                    break;
                }
                if attempt > 0 {
                    give_back_stale(&mut done, &mut stats, &mut pending, observer);
                }
                // Empty when every item went back stale or could not be made again.
                let items = lend(&mut done, &mut stats, &mut pending, remake);
                if items.is_empty() {
                    break;
                }
                if attempt > 0 {
                    stats.retries += 1;
                }
                stats.calls += 1;
                let result =
                    match tokio::time::timeout_at(deadline, self.table.batch_write(items)).await {
                        Ok(result) => result,
                        Err(_) => Err(StoreError::Deadline),
                    };
                match result {
                    Ok(unprocessed) => {
                        // The answer gives back the items it left: the next attempt sends
                        // them again as they are.
                        let mut left: HashMap<Key, Item> = unprocessed
                            .into_iter()
                            .filter_map(|it| Some((key_of(&it).ok()?, it)))
                            .collect();
                        let before = pending.len();
                        pending.retain_mut(|p| {
                            // The usual answer leaves nothing: nothing to look up then.
                            p.item = if left.is_empty() {
                                None
                            } else {
                                left.remove(&p.key)
                            };
                            let stays = p.item.is_some();
                            if !stays {
                                done.push((p.index, Outcome::Written));
                            }
                            stays
                        });
                        stats.written += (before - pending.len()) as u64;
                        stats.unprocessed += pending.len() as u64;
                        // Unprocessed items carry no reason: after a key-range throttle
                        // on this chunk, they are more of the same.
                        if throttle == Some(ThrottleKind::KeyRange) {
                            for p in &pending {
                                observer.throttled(&p.key.pk);
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
                            queue.push_back(std::mem::take(&mut pending));
                            queue.push_back(back);
                        } else {
                            let reason = err.to_string();
                            for p in pending.drain(..) {
                                stats.failed_permanent += 1;
                                done.push((
                                    p.index,
                                    Outcome::FailedPermanent {
                                        reason: reason.clone(),
                                    },
                                ));
                            }
                        }
                        break;
                    }
                    Err(err) if err.is_retryable() => {
                        match &err {
                            StoreError::Throttled { kind, reason } => {
                                throttle = Some(*kind);
                                *stats.throttles.entry(reason.clone()).or_default() += 1;
                                if *kind == ThrottleKind::KeyRange {
                                    for p in &pending {
                                        observer.throttled(&p.key.pk);
                                        *stats
                                            .key_range_throttled
                                            .entry(p.key.pk.clone())
                                            .or_default() += 1;
                                    }
                                }
                            }
                            _ => stats.transient_errors += 1,
                        }
                        last_reason = err.to_string();
                    }
                    Err(err) => {
                        // Deadline or configuration: another attempt now cannot help.
                        if err == StoreError::Deadline {
                            stats.transient_errors += 1;
                        }
                        fail_all(
                            &mut done,
                            &mut stats,
                            &mut pending,
                            &err.to_string(),
                            throttle,
                        );
                        break;
                    }
                }
                if pending.is_empty() {
                    break;
                }
                let remaining = deadline.saturating_duration_since(Instant::now());
                let delay = self.config.backoff.next_delay(attempt, remaining, &mut rng);
                attempt += 1;
                match delay {
                    Some(delay) => tokio::time::sleep(delay).await,
                    None => {
                        fail_all(&mut done, &mut stats, &mut pending, &last_reason, throttle);
                        break;
                    }
                }
            }
        }
        (done, stats)
    }
}

/// One item of a chunk without an outcome yet: its input index, its key, and the item
/// itself unless a failed call consumed it.
struct Pending {
    index: usize,
    key: Key,
    item: Option<Item>,
}

/// The items of `pending` for the next call, moved out: each one held, or made again by
/// `remake` when a failed call consumed it. An item that cannot be made again leaves
/// `pending` as failed, retryable.
fn lend(
    done: &mut Vec<(usize, Outcome)>,
    stats: &mut WriteStats,
    pending: &mut Vec<Pending>,
    remake: &dyn Remake,
) -> Vec<Item> {
    let mut items = Vec::with_capacity(pending.len());
    pending.retain_mut(|p| {
        match p.item.take().or_else(|| remake.remake(p.index, &p.key)) {
            Some(item) => items.push(item),
            None => {
                stats.failed_retryable += 1;
                done.push((
                    p.index,
                    Outcome::FailedRetryable {
                        reason: "the item could not be made again for another attempt".to_owned(),
                        throttle: None,
                    },
                ));
                return false;
            }
        }
        true
    });
    items
}

/// Moves the items whose key `observer` declares stale from `pending` to `done`.
fn give_back_stale(
    done: &mut Vec<(usize, Outcome)>,
    stats: &mut WriteStats,
    pending: &mut Vec<Pending>,
    observer: &dyn WriteObserver,
) {
    pending.retain(|p| {
        let stale = observer.stale(&p.key.pk);
        if stale {
            stats.stale += 1;
            done.push((p.index, Outcome::Stale));
        }
        !stale
    });
}

fn fail_all(
    done: &mut Vec<(usize, Outcome)>,
    stats: &mut WriteStats,
    pending: &mut Vec<Pending>,
    reason: &str,
    throttle: Option<ThrottleKind>,
) {
    for p in pending.drain(..) {
        stats.failed_retryable += 1;
        done.push((
            p.index,
            Outcome::FailedRetryable {
                reason: reason.to_owned(),
                throttle,
            },
        ));
    }
}
