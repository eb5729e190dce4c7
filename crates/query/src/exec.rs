//! Scatter-gather execution: the I/O side of a merged read. `sharding::merge`'s
//! [`BoundedMerge`] decides which pages to read, how large, and what to emit (see its
//! module for how little is read); this module turns its asks into `Query` pages on
//! the [`ReadingSource`], at most `concurrency` in flight, and hands the pages back.
//!
//! A stream's span bounds its items; how they arrive follows from how it is read:
//! - by the table's sort key when that orders by time (`time_ordered`):
//!   [`Arrival::InOrder`];
//! - through the time index (a local secondary index on `ts_ms`, template.yaml
//!   `TimeIndex`), in time order with ties at one millisecond in any order:
//!   [`Arrival::TimeIndexed`]; the span is the key condition, and a resumed read asks
//!   for `ts_ms >= t` and drops what is at or before the cursor's position;
//! - otherwise (a `time-bucket` partition read over every device, without the index):
//!   [`Arrival::Unordered`], read whole within its time filter and sorted in memory,
//!   about one bucket (per shard) per page of the answer.
//!
//! # Readings stored twice
//! A reading can be stored under two partition keys of one plan (written, then
//! redelivered after a fan-out raise and keyed with the larger fan-out). Its sort key
//! is the same under both, and so is its merge key, [`ReadingKey`] (time, device,
//! event id), which is the reading's identity. The merge emits each key once (see
//! `sharding::merge`, "Items stored twice"): [`read_merged`] answers, their pages and
//! the reads resumed after them, and [`merge_each`] (stats), show every reading once,
//! holding one key more than they would anyway. [`scan_all`] reads in no order and does
//! not de-duplicate: it serves lookups that stop at the first match.

use std::ops::ControlFlow;

use futures::StreamExt as _;
use sharding::merge::{Arrival, BoundedMerge, Order, PageAsk, Step, StreamShape};
use store::error::StoreError;
use store::item::ReadingItem;
use store::read::{PageKey, PageRequest, ReadingSource};

use crate::model::ReadingKey;

/// One key range to read: a Query's partition, sort-key bounds and time filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSpec {
    pub pk: String,
    /// Inclusive sort-key bounds.
    pub sk_between: Option<(String, String)>,
    /// Half-open `[from, to)` in ms: items outside are filtered out (server side, and
    /// again here). Also the span the stream's items lie in, which bounds them.
    pub span: (i64, i64),
    /// Whether to send `span` as a DynamoDB filter (the sort key alone does not bound
    /// the time).
    pub filter_time: bool,
    /// Whether the sort key orders this stream's items by the merge key.
    pub time_ordered: bool,
    /// Read through this time index (sort key `ts_ms`): the items come in time order
    /// (ties at one millisecond in any order) and `span` is the key condition.
    pub index: Option<String>,
}

/// What one merged read returned and cost.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadOutcome {
    /// At most `limit` items in merge order, each reading once.
    pub items: Vec<ReadingItem>,
    /// Whether at least one more reading follows the last one returned.
    pub more: bool,
    /// What it cost.
    pub cost: ReadCost,
    /// Items per millisecond of one stream's span, as its pages showed it (`None` when
    /// no ordered stream was read page by page): the hint for the next read of streams
    /// like these.
    pub density: Option<f64>,
}

/// What a merged read cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadCost {
    /// Items DynamoDB evaluated (ScannedCount summed over every page).
    pub items_read: u64,
    /// Query calls made.
    pub pages: u64,
    /// Rounds of concurrent Query calls, one after another.
    pub rounds: u64,
    /// Second copies of readings stored under two keys, read and left out.
    pub duplicates: u64,
}

/// Why a merged read stopped without an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The buckets to sort in memory hold more than the request may buffer.
    #[error(
        "the buckets this range touches hold more than {limit} readings to sort; read a shorter range"
    )]
    TooMuchToSort { limit: usize },
}

/// Read options shared by every stream of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadOptions {
    pub descending: bool,
    pub consistent: bool,
    /// Most Query calls in flight at once.
    pub concurrency: usize,
    /// Most items held in memory at once (whole buckets of the all-devices plan are
    /// buffered to be sorted); beyond it the read is refused rather than risk the
    /// function's memory.
    pub max_buffered: usize,
}

/// The merge key of a stored reading: its identity (time, device, event id), the same
/// under every partition key it may be stored under, so copies merge as equal keys.
pub fn key_of(item: &ReadingItem) -> ReadingKey {
    ReadingKey {
        ts_ms: item.ts_ms,
        device_id: item.device_id.clone(),
        event_id: item.event_id.clone(),
    }
}

impl StreamSpec {
    fn shape(&self) -> StreamShape {
        let arrival = if self.index.is_some() {
            Arrival::TimeIndexed
        } else if self.time_ordered {
            Arrival::InOrder
        } else {
            Arrival::Unordered
        };
        StreamShape {
            span: self.span,
            arrival,
        }
    }
}

/// Reads `limit` readings in merge order strictly after `after` (when given), plus
/// enough to know whether more follow; a reading stored under two keys counts once.
/// `density_hint` is what an earlier read of streams like these saw
/// ([`ReadOutcome::density`]): the first round is planned by it (see
/// `sharding::merge`, "A density from an earlier read").
pub async fn read_merged<S: ReadingSource>(
    source: &S,
    specs: Vec<StreamSpec>,
    opts: ReadOptions,
    limit: usize,
    after: Option<&ReadingKey>,
    density_hint: Option<f64>,
) -> Result<ReadOutcome, ExecError> {
    let mut merge = BoundedMerge::new(shapes(&specs), order(opts), limit, after.cloned())
        .with_density_hint(density_hint);
    let mut items = Vec::new();
    let (more, cost) = drive(source, &specs, opts, &mut merge, |batch| {
        items.extend(batch);
        ControlFlow::Continue(())
    })
    .await?;
    Ok(ReadOutcome {
        items,
        more,
        cost,
        density: merge.observed_density(),
    })
}

/// Hands every reading of `specs` to `each` in merge order, each reading once however
/// many keys it is stored under, holding about `window` readings at a time (plus one
/// round's pages) however many there are: for aggregates over a whole range. `each`
/// may stop the read: no further page is asked for after a `Break`, and no further
/// reading is handed over.
pub async fn merge_each<S: ReadingSource, F: FnMut(ReadingItem) -> ControlFlow<()>>(
    source: &S,
    specs: Vec<StreamSpec>,
    opts: ReadOptions,
    window: usize,
    mut each: F,
) -> Result<ReadCost, ExecError> {
    let mut merge = BoundedMerge::windowed(shapes(&specs), order(opts), window, None);
    let emit = |batch: Vec<ReadingItem>| batch.into_iter().try_for_each(&mut each);
    let (_, cost) = drive(source, &specs, opts, &mut merge, emit).await?;
    Ok(cost)
}

fn shapes(specs: &[StreamSpec]) -> Vec<StreamShape> {
    specs.iter().map(StreamSpec::shape).collect()
}

fn order(opts: ReadOptions) -> Order {
    if opts.descending {
        Order::Descending
    } else {
        Order::Ascending
    }
}

/// Runs `merge` over `specs` to its end, or until `emit` breaks, handing what it emits
/// to `emit` batch by batch (after every round); returns whether more follow its limit,
/// and the cost.
async fn drive<S: ReadingSource>(
    source: &S,
    specs: &[StreamSpec],
    opts: ReadOptions,
    merge: &mut BoundedMerge<ReadingKey, ReadingItem>,
    mut emit: impl FnMut(Vec<ReadingItem>) -> ControlFlow<()>,
) -> Result<(bool, ReadCost), ExecError> {
    // Where each stream's next page starts.
    let mut next_start: Vec<Option<PageKey>> = vec![None; specs.len()];
    let mut cost = ReadCost::default();
    loop {
        let asks = match merge.step(opts.concurrency) {
            Step::Read(asks) => asks,
            Step::Done { items, more } => {
                let _ = emit(items);
                cost.duplicates = merge.duplicates();
                return Ok((more, cost));
            }
        };
        if emit(merge.take_emitted()).is_break() {
            cost.duplicates = merge.duplicates();
            return Ok((true, cost));
        }
        cost.rounds += 1;
        read_round(
            source,
            specs,
            opts,
            &asks,
            &mut next_start,
            merge,
            &mut cost,
        )
        .await?;
        if merge.buffered() > opts.max_buffered {
            return Err(ExecError::TooMuchToSort {
                limit: opts.max_buffered,
            });
        }
    }
}

/// Reads the pages `asks` names, at most `opts.concurrency` at once, and delivers each
/// to the merge.
async fn read_round<S: ReadingSource>(
    source: &S,
    specs: &[StreamSpec],
    opts: ReadOptions,
    asks: &[PageAsk],
    next_start: &mut [Option<PageKey>],
    merge: &mut BoundedMerge<ReadingKey, ReadingItem>,
    cost: &mut ReadCost,
) -> Result<(), ExecError> {
    let requests: Vec<(usize, PageRequest)> = asks
        .iter()
        .map(|ask| {
            let i = ask.stream;
            let req = page_request(&specs[i], ask, next_start[i].clone(), opts);
            (i, req)
        })
        .collect();
    let results: Vec<(usize, Result<store::read::Page, StoreError>)> =
        futures::stream::iter(requests)
            .map(|(i, req)| async move { (i, source.query_page(&req).await) })
            .buffer_unordered(opts.concurrency.max(1))
            .collect()
            .await;
    for (i, result) in results {
        let page = result?;
        cost.pages += 1;
        cost.items_read += page.items_read;
        // The page's last timestamp (what a time-indexed stream holds ties at).
        let last_ts = page
            .items
            .last()
            .map(|item| item.ts_ms)
            .or_else(|| page.last_key.as_ref().and_then(|k| k.ts_ms));
        next_start[i] = page.last_key;
        let last_page = next_start[i].is_none();
        let keyed = page.items.into_iter().map(|item| (key_of(&item), item));
        merge.deliver(i, keyed, last_ts, last_page);
    }
    Ok(())
}

fn page_request(
    spec: &StreamSpec,
    ask: &PageAsk,
    start_after: Option<PageKey>,
    opts: ReadOptions,
) -> PageRequest {
    // On the index the page's span is the key condition, which bounds what is
    // evaluated: the page ends where the merge expects the answer to end. A filter
    // keeps the stream's whole span, so that an item past the page's span still shows
    // the merge that the stream has nothing more before it.
    let span = if spec.index.is_some() {
        Some(ask.span)
    } else {
        spec.filter_time.then_some(spec.span)
    };
    PageRequest {
        pk: spec.pk.clone(),
        sk_between: spec.sk_between.clone(),
        ts_ms_between: span.map(|(from, to)| (from, to - 1)),
        time_index: spec.index.clone(),
        limit: ask.limit,
        ascending: !opts.descending,
        start_after,
        consistent: opts.consistent,
    }
}

/// What a full scan read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanOutcome {
    pub items_read: u64,
    pub pages: u64,
}

/// Reads every item of every stream (all pages), `concurrency` streams at a time, and
/// hands each item inside its stream's span to `each`, in no particular order. Memory
/// stays at one page per stream in flight: nothing is collected, and nothing is
/// de-duplicated (a reading stored under two keys comes twice; see [`merge_each`]).
pub async fn scan_all<S: ReadingSource, F: FnMut(&ReadingItem)>(
    source: &S,
    specs: Vec<StreamSpec>,
    consistent: bool,
    concurrency: usize,
    mut each: F,
) -> Result<ScanOutcome, StoreError> {
    let opts = ReadOptions {
        descending: false,
        consistent,
        concurrency,
        max_buffered: usize::MAX,
    };
    let mut outcome = ScanOutcome::default();
    // One lazily paged stream per key range, `concurrency` of them polled at once.
    let per_stream = specs.into_iter().map(|spec| {
        let state = (spec, Some(None::<PageKey>));
        futures::stream::unfold(state, move |(spec, start)| async move {
            let start = start?;
            let whole = PageAsk {
                stream: 0,
                limit: None,
                span: spec.span,
            };
            let req = page_request(&spec, &whole, start, opts);
            match source.query_page(&req).await {
                Ok(page) => {
                    let next = page.last_key.clone().map(Some);
                    let span = spec.span;
                    Some((Ok((span, page)), (spec, next)))
                }
                Err(e) => Some((Err(e), (spec, None))),
            }
        })
        .boxed()
    });
    let mut pages = futures::stream::iter(per_stream).flatten_unordered(concurrency.max(1));
    while let Some(result) = pages.next().await {
        let ((lo, hi), page) = result?;
        outcome.pages += 1;
        outcome.items_read += page.items_read;
        for item in &page.items {
            if (lo..hi).contains(&item.ts_ms) {
                each(item);
            }
        }
    }
    Ok(outcome)
}
