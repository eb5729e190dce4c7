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
//! Where the layout packs readings into blocks (`block_window_ms`), an ordered stream
//! (by the sort key or the index) is [`Arrival::Blocks`]: its items come in order of
//! their first member's time, each page is delivered expanded with the sort time of
//! its last stored item ([`store::read::Page::last_ts`]), and DynamoDB is asked for
//! the items whose sort time lies in `starts` (a window before the span), since a
//! block that starts before the span can hold readings inside it.
//!
//! A stream of a slab or run partition (`slab`, [`crate::slabs`]) holds one device's
//! readings among other devices': it is [`Arrival::Unordered`], its pages are Queries
//! of items as stored ([`ReadingSource::query_items`]), and each page is handed over
//! as the device's readings it holds; a run partition's stream ends once its
//! `sharding::slab::RunCover` is done.
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
use std::time::Instant;

use futures::StreamExt as _;
use sharding::merge::{Arrival, BoundedMerge, Order, PageAsk, Step, StreamShape};
use store::error::StoreError;
use store::item::ReadingItem;
use store::read::{LastKey, PageRequest, ReadingSource};

use crate::model::ReadingKey;
use crate::scope::DeviceGrants;
use crate::slabs::{self, SlabStream};

mod stream;

use stream::{Fetched, StreamState};

/// One key range to read: a Query's partition, sort-key bounds and time filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSpec {
    pub pk: String,
    /// Inclusive sort-key bounds.
    pub sk_between: Option<(String, String)>,
    /// Half-open `[from, to)` in ms: the span the stream's readings lie in, which
    /// bounds them; readings outside are dropped here.
    pub span: (i64, i64),
    /// Half-open `[from, to)` in ms: the sort times (`ts_ms`) of the items that can
    /// hold readings of `span`, what DynamoDB is asked for; `span` itself unless the
    /// items are blocks (`sharding::read_plan::KeyQuery::starts`).
    pub starts: (i64, i64),
    /// Whether to send `starts` as a DynamoDB filter (the sort key alone does not bound
    /// the time).
    pub filter_time: bool,
    /// Whether the sort key orders this stream's items by the merge key.
    pub time_ordered: bool,
    /// Read through this time index (sort key `ts_ms`): the items come in time order
    /// (ties at one millisecond in any order) and `starts` bounds the key condition.
    pub index: Option<String>,
    /// Where the stored items are blocks: each holds readings up to this many
    /// milliseconds after its own sort time.
    pub block_window_ms: Option<i64>,
    /// Where the partition is a slab or run partition, whose items hold many devices'
    /// readings: whose readings the stream keeps, and how it is read. The sort-key and
    /// time bounds above are then unused.
    pub slab: Option<SlabStream>,
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
    /// Set when a budget ended the read before the answer was complete: `items` are
    /// then a correct prefix of it.
    pub stopped: Option<Stopped>,
}

/// What one request may spend on reads. Each bound is checked before a round of
/// Queries is sent, and a round is cut to fit, so none is ever exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadBudget {
    /// Query calls.
    pub queries: u64,
    /// Items DynamoDB evaluates (ScannedCount), filtered out or not: each page's
    /// `Limit` is cut to what is left.
    pub evaluated: u64,
    /// No round is sent after it, and a round still out at it is abandoned.
    pub deadline: Option<Instant>,
}

/// The budget that ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exhausted {
    Queries,
    Evaluated,
    Time,
}

/// Where a read that a budget ended stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    pub budget: Exhausted,
    /// Every reading whose timestamp sorts strictly before this one (in the read's
    /// order) was handed over, and none after it (`BoundedMerge::settled_before`).
    pub settled_before: i64,
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
    /// What the read may spend before it stops early.
    pub budget: ReadBudget,
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
        let ordered = self.index.is_some() || self.time_ordered;
        let arrival = if self.slab.is_some() {
            Arrival::Unordered
        } else if let Some(window_ms) = self.block_window_ms.filter(|_| ordered) {
            Arrival::Blocks { window_ms }
        } else if self.index.is_some() {
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

/// What one page of a merged read asks for.
#[derive(Debug, Clone, Copy)]
pub struct MergedPage<'a> {
    /// Most readings answered.
    pub limit: usize,
    /// The page holds only readings strictly after this position (when given).
    pub after: Option<&'a ReadingKey>,
    /// What an earlier read of streams like these saw ([`ReadOutcome::density`]): the
    /// first round is planned by it (see `sharding::merge`, "A density from an earlier
    /// read").
    pub density_hint: Option<f64>,
    /// The devices whose readings the page may hold (`None`: every device). Another
    /// device's readings are dropped as their pages arrive, before the merge sees
    /// them, so no answer, position or cursor names them; the pages still count, in
    /// full, against the budgets.
    pub devices: Option<&'a DeviceGrants>,
    /// Whether the read stops at its `limit`-th reading, without reading on to learn
    /// whether another follows: an answer that is no page (the newest reading) needs
    /// no `more`, and learning it could cost every older bucket of the range. The
    /// outcome's `more` is then true once the limit is reached.
    pub stop_at_limit: bool,
}

/// Reads `page.limit` readings in merge order strictly after `page.after`, plus enough
/// to know whether more follow (unless `page.stop_at_limit`); a reading stored under
/// two keys counts once. `fits` sees each reading in order before it joins the answer:
/// the first it refuses ends the answer (and the read) before it, with more to follow.
pub async fn read_merged<S: ReadingSource>(
    source: &S,
    specs: Vec<StreamSpec>,
    opts: ReadOptions,
    page: MergedPage<'_>,
    mut fits: impl FnMut(&ReadingItem) -> bool,
) -> Result<ReadOutcome, ExecError> {
    let mut specs = specs;
    let cut = cut_to_reach(&mut specs, opts);
    let mut merge = BoundedMerge::new(shapes(&specs), order(opts), page.limit, page.after.cloned())
        .with_density_hint(page.density_hint);
    let mut items = Vec::new();
    let read = Read {
        specs: &specs,
        opts,
        devices: page.devices,
    };
    let end = drive(source, read, &mut merge, |batch| {
        for item in batch {
            if !fits(&item) {
                return ControlFlow::Break(());
            }
            items.push(item);
            if page.stop_at_limit && items.len() >= page.limit {
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    })
    .await?
    .stopped_at_cut(cut);
    Ok(ReadOutcome {
        items,
        more: end.more,
        cost: end.cost,
        density: merge.observed_density(),
        stopped: end.stopped,
    })
}

/// What [`merge_each`] cost, and whether a budget ended it early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EachOutcome {
    pub cost: ReadCost,
    pub stopped: Option<Stopped>,
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
) -> Result<EachOutcome, ExecError> {
    let mut specs = specs;
    let cut = cut_to_reach(&mut specs, opts);
    let mut merge = BoundedMerge::windowed(shapes(&specs), order(opts), window, None);
    let emit = |batch: Vec<ReadingItem>| batch.into_iter().try_for_each(&mut each);
    let read = Read {
        specs: &specs,
        opts,
        devices: None,
    };
    let end = drive(source, read, &mut merge, emit)
        .await?
        .stopped_at_cut(cut);
    Ok(EachOutcome {
        cost: end.cost,
        stopped: end.stopped,
    })
}

/// How [`drive`] ended a merge: whether more readings follow, what it cost, and where
/// a budget stopped it.
struct MergeEnd {
    more: bool,
    cost: ReadCost,
    stopped: Option<Stopped>,
}

impl MergeEnd {
    /// This end, counted as the Query budget's stop at `cut` when the plan was cut
    /// there ([`cut_to_reach`]): a read of the cut streams that read them all is a read
    /// the Query budget stopped at the cut.
    fn stopped_at_cut(self, cut: Option<i64>) -> Self {
        match cut {
            Some(settled_before) if !self.more && self.stopped.is_none() => Self {
                more: true,
                stopped: Some(Stopped {
                    budget: Exhausted::Queries,
                    settled_before,
                }),
                ..self
            },
            _ => self,
        }
    }
}

/// Keeps only the streams the Query budget can reach: each stream read costs a Query
/// at least, and the merge opens streams in the order their spans start (in the read's
/// order), so a plan of more streams than the budget is cut where the stream past the
/// budget starts, and the streams that run on past it are clipped there. Returns where
/// a read of the cut plan that reads it all has settled (see [`Stopped`]); `None` when
/// the plan is within the budget, or cannot be cut (more streams than the budget start
/// at its very first instant; the budget then stops the read itself). The merge's
/// bookkeeping is per stream, so this also keeps a month of a raised device (24,552
/// keys) from costing the CPU of all of them at every step.
fn cut_to_reach(specs: &mut Vec<StreamSpec>, opts: ReadOptions) -> Option<i64> {
    let reach = usize::try_from(opts.budget.queries).unwrap_or(usize::MAX);
    if specs.len() <= reach {
        return None;
    }
    if opts.descending {
        let mut ends: Vec<i64> = specs.iter().map(|s| s.span.1).collect();
        ends.sort_unstable_by(|a, b| b.cmp(a));
        let cut = ends[reach];
        if cut == ends[0] {
            return None;
        }
        specs.retain(|s| s.span.1 > cut);
        for s in specs.iter_mut() {
            s.span.0 = s.span.0.max(cut);
            s.starts.0 = s.starts.0.max(cut - s.block_window_ms.unwrap_or(0));
        }
        Some(cut - 1)
    } else {
        let mut starts: Vec<i64> = specs.iter().map(|s| s.span.0).collect();
        starts.sort_unstable();
        let cut = starts[reach];
        if cut == starts[0] {
            return None;
        }
        specs.retain(|s| s.span.0 < cut);
        for s in specs.iter_mut() {
            s.span.1 = s.span.1.min(cut);
            s.starts.1 = s.starts.1.min(cut);
        }
        Some(cut)
    }
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

/// What [`drive`] reads: the streams, how, and whose readings it keeps.
#[derive(Clone, Copy)]
struct Read<'a> {
    specs: &'a [StreamSpec],
    opts: ReadOptions,
    devices: Option<&'a DeviceGrants>,
}

/// Runs `merge` over the streams to its end, until `emit` breaks, or until the budget
/// runs out, handing what it emits to `emit` batch by batch (after every round);
/// returns whether more follow its limit, the cost, and where a budget stopped it.
async fn drive<S: ReadingSource>(
    source: &S,
    read: Read<'_>,
    merge: &mut BoundedMerge<ReadingKey, ReadingItem>,
    mut emit: impl FnMut(Vec<ReadingItem>) -> ControlFlow<()>,
) -> Result<MergeEnd, ExecError> {
    let Read { specs, opts, .. } = read;
    let mut states = StreamState::of(specs);
    let mut cost = ReadCost::default();
    loop {
        let mut asks = match merge.step(opts.concurrency) {
            Step::Read(asks) => asks,
            Step::Done { items, more } => {
                let cut = emit(items).is_break();
                cost.duplicates = merge.duplicates();
                return Ok(MergeEnd {
                    more: more || cut,
                    cost,
                    stopped: None,
                });
            }
        };
        cost.duplicates = merge.duplicates();
        if emit(merge.take_emitted()).is_break() {
            return Ok(MergeEnd {
                more: true,
                cost,
                stopped: None,
            });
        }
        if let Err(budget) = fit_to_budget(&mut asks, &cost, opts.budget) {
            return Ok(stopped_by(budget, merge, cost));
        }
        cost.rounds += 1;
        let round = read_round(source, specs, opts, &asks, &states).await;
        let answered = round.answered;
        deliver_round(round.pages, read, &mut states, merge, &mut cost)?;
        if !answered {
            return Ok(answer_what_arrived(merge, opts, cost, &mut emit));
        }
        if merge.buffered() > opts.max_buffered {
            return Err(ExecError::TooMuchToSort {
                limit: opts.max_buffered,
            });
        }
    }
}

/// The deadline came mid-round: the pages that arrived are delivered (the others
/// dropped), and the merge answers what they settled.
fn answer_what_arrived(
    merge: &mut BoundedMerge<ReadingKey, ReadingItem>,
    opts: ReadOptions,
    mut cost: ReadCost,
    emit: &mut impl FnMut(Vec<ReadingItem>) -> ControlFlow<()>,
) -> MergeEnd {
    let step = merge.step(opts.concurrency);
    cost.duplicates = merge.duplicates();
    let (items, done_more) = match step {
        Step::Done { items, more } => (items, Some(more)),
        Step::Read(_) => (merge.take_emitted(), None),
    };
    let cut = emit(items).is_break();
    match done_more {
        Some(more) => MergeEnd {
            more: more || cut,
            cost,
            stopped: None,
        },
        None if cut => MergeEnd {
            more: true,
            cost,
            stopped: None,
        },
        None => stopped_by(Exhausted::Time, merge, cost),
    }
}

/// A read that `budget` stopped, where the merge stands.
fn stopped_by(
    budget: Exhausted,
    merge: &BoundedMerge<ReadingKey, ReadingItem>,
    cost: ReadCost,
) -> MergeEnd {
    let stopped = merge.settled_before().map(|settled_before| Stopped {
        budget,
        settled_before,
    });
    MergeEnd {
        more: stopped.is_some(),
        cost,
        stopped,
    }
}

/// `work`'s output, or `None` when `deadline` comes first (the work is dropped).
pub async fn within<T>(deadline: Option<Instant>, work: impl Future<Output = T>) -> Option<T> {
    match deadline {
        Some(deadline) => tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), work)
            .await
            .ok(),
        None => Some(work.await),
    }
}

/// Cuts a round's asks to what is left of the budget: at most the Queries left, and
/// `Limit`s that add up to at most the items left to evaluate (DynamoDB evaluates at
/// most `Limit` items per page). `Err` names the budget when nothing is left of it.
fn fit_to_budget(
    asks: &mut Vec<PageAsk>,
    cost: &ReadCost,
    budget: ReadBudget,
) -> Result<(), Exhausted> {
    if budget.deadline.is_some_and(|d| Instant::now() >= d) {
        return Err(Exhausted::Time);
    }
    let queries_left = budget.queries.saturating_sub(cost.pages);
    let evaluated_left = budget.evaluated.saturating_sub(cost.items_read);
    if queries_left == 0 {
        return Err(Exhausted::Queries);
    }
    if evaluated_left == 0 {
        return Err(Exhausted::Evaluated);
    }
    // The merge lists the asks that block it first: a cut round still reads them.
    let room = usize::try_from(queries_left.min(evaluated_left)).unwrap_or(usize::MAX);
    asks.truncate(room);
    let share = evaluated_left / asks.len().max(1) as u64;
    let share = u32::try_from(share).unwrap_or(u32::MAX);
    if share < u32::MAX {
        for ask in asks.iter_mut() {
            ask.limit = Some(ask.limit.map_or(share, |l| l.min(share)));
        }
    }
    Ok(())
}

/// The pages of one round that arrived by the deadline.
struct Round {
    pages: Vec<(usize, Result<Fetched, StoreError>)>,
    /// Every ask was answered before the deadline.
    answered: bool,
}

/// Reads the pages `asks` names, at most `opts.concurrency` at once, until the
/// budget's deadline: a page that is slow (a retried call) costs the round only its
/// own stream, not the pages that arrived.
async fn read_round<S: ReadingSource>(
    source: &S,
    specs: &[StreamSpec],
    opts: ReadOptions,
    asks: &[PageAsk],
    states: &[StreamState],
) -> Round {
    let requests: Vec<(usize, Request)> = asks
        .iter()
        .map(|ask| {
            let i = ask.stream;
            let start = states[i].next_start.clone();
            if let Some(stream) = &specs[i].slab {
                let at = (start.as_ref(), states[i].pages);
                let req = slabs::request(stream, ask.limit, at, opts.consistent);
                return (i, Request::Items(req));
            }
            let mut req = page_request(&specs[i], ask, start, opts);
            if specs[i].block_window_ms.is_some() {
                req.limit = req.limit.map(|l| block_limit(l, states[i].members));
            }
            (i, Request::Readings(req))
        })
        .collect();
    let mut arriving = futures::stream::iter(requests)
        .map(|(i, req)| async move {
            let fetched = match req {
                Request::Readings(req) => source.query_page(&req).await.map(Fetched::Readings),
                Request::Items(req) => source.query_items(&req).await.map(Fetched::Items),
            };
            (i, fetched)
        })
        .buffer_unordered(opts.concurrency.max(1));
    let mut pages = Vec::with_capacity(asks.len());
    loop {
        match within(opts.budget.deadline, arriving.next()).await {
            Some(Some(page)) => pages.push(page),
            Some(None) => {
                return Round {
                    pages,
                    answered: true,
                };
            }
            None => {
                return Round {
                    pages,
                    answered: false,
                };
            }
        }
    }
}

/// One Query of a round.
enum Request {
    Readings(PageRequest),
    Items(store::read::ItemsRequest),
}

/// Delivers a round's pages to the merge, each with the readings of `read.devices`
/// only (`None`: all), and counts their cost.
fn deliver_round(
    results: Vec<(usize, Result<Fetched, StoreError>)>,
    read: Read<'_>,
    states: &mut [StreamState],
    merge: &mut BoundedMerge<ReadingKey, ReadingItem>,
    cost: &mut ReadCost,
) -> Result<(), ExecError> {
    for (i, result) in results {
        let page = result?.into_page(&read.specs[i], &mut states[i])?;
        cost.pages += 1;
        cost.items_read += page.items_read;
        if page.items_read > 0 && read.specs[i].block_window_ms.is_some() {
            states[i].members = Some(page.items.len() as f64 / page.items_read as f64);
        }
        // The page's last timestamp (what a time-indexed stream holds ties at); for
        // blocks, the sort time of its last stored item (what the merge holds back at).
        let last_ts = if read.specs[i].block_window_ms.is_some() {
            page.last_ts
        } else {
            page.items
                .last()
                .map(|item| item.ts_ms)
                .or_else(|| page.last_key.as_ref().and_then(|k| k.ts_ms))
        };
        let devices = read.devices;
        states[i].next_start = page.last_key;
        let last_page = states[i].next_start.is_none();
        // How far the stream has come counts every item read; only the kept ones are
        // handed over.
        let keyed = page
            .items
            .into_iter()
            .filter(|item| devices.is_none_or(|g| g.allows(&item.device_id)))
            .map(|item| (key_of(&item), item));
        merge.deliver(i, keyed, last_ts, last_page);
    }
    Ok(())
}

/// Readings a block is taken to hold before a page of its lane shows how many: the
/// fewest a message of a few readings packs.
const BLOCK_MEMBERS_GUESS: f64 = 10.0;

/// The `Limit` of a page of a blocks' lane asked for `limit` readings: `Limit` counts
/// items, and each block holds many readings (`members` a block, as the stream's last
/// page showed, else [`BLOCK_MEMBERS_GUESS`]). A page that falls short is followed by
/// the next one, as any page that ends early.
fn block_limit(limit: u32, members: Option<f64>) -> u32 {
    let per_item = members.unwrap_or(BLOCK_MEMBERS_GUESS).max(1.0);
    let items = (f64::from(limit) / per_item).ceil();
    // In range: at most `limit`, at least 1.
    (items as u32).clamp(1, limit.max(1))
}

fn page_request(
    spec: &StreamSpec,
    ask: &PageAsk,
    start_after: Option<LastKey>,
    opts: ReadOptions,
) -> PageRequest {
    // On the index the page's span is the key condition, which bounds what is
    // evaluated: the page ends where the merge expects the answer to end. A filter
    // keeps the stream's whole span, so that an item past the page's span still shows
    // the merge that the stream has nothing more before it. Both are in sort times.
    let span = if spec.index.is_some() {
        Some(starts_of(spec, ask.span))
    } else {
        spec.filter_time.then_some(spec.starts)
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

/// The sort times of the items that can hold readings of `span` (a part of the
/// stream's): a block starting up to a window before it, and never outside `starts`.
fn starts_of(spec: &StreamSpec, span: (i64, i64)) -> (i64, i64) {
    let Some(w) = spec.block_window_ms else {
        return span;
    };
    let from = spec.starts.0.max(span.0.saturating_sub(w));
    let to = spec.starts.1.min(span.1).max(from + 1);
    (from, to)
}

/// What a full scan read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanOutcome {
    pub items_read: u64,
    pub pages: u64,
    /// Set when a budget ended the scan before every stream was read to its end.
    pub stopped: Option<Exhausted>,
}

/// Reads every item of every stream (all pages), `concurrency` streams at a time, and
/// hands each item inside its stream's span to `each`, in no particular order, until
/// the budget runs out. Memory stays at one page per stream in flight: nothing is
/// collected, and nothing is de-duplicated (a reading stored under two keys comes
/// twice; see [`merge_each`]).
pub async fn scan_all<S: ReadingSource, F: FnMut(&ReadingItem)>(
    source: &S,
    specs: Vec<StreamSpec>,
    consistent: bool,
    concurrency: usize,
    budget: ReadBudget,
    mut each: F,
) -> Result<ScanOutcome, StoreError> {
    let opts = ReadOptions {
        descending: false,
        consistent,
        concurrency,
        max_buffered: usize::MAX,
        budget,
    };
    let mut cost = ReadCost::default();
    let mut states = StreamState::of(&specs);
    // Streams not read to their end, in plan order.
    let mut open: Vec<usize> = (0..specs.len()).collect();
    let outcome = |cost: ReadCost, stopped| ScanOutcome {
        items_read: cost.items_read,
        pages: cost.pages,
        stopped,
    };
    while !open.is_empty() {
        let mut asks: Vec<PageAsk> = open
            .iter()
            .take(concurrency.max(1))
            .map(|&i| PageAsk {
                stream: i,
                limit: None,
                span: specs[i].span,
            })
            .collect();
        if let Err(budget) = fit_to_budget(&mut asks, &cost, budget) {
            return Ok(outcome(cost, Some(budget)));
        }
        let round = read_round(source, &specs, opts, &asks, &states).await;
        if !round.answered {
            return Ok(outcome(cost, Some(Exhausted::Time)));
        }
        for (i, result) in round.pages {
            let page = result?.into_page(&specs[i], &mut states[i])?;
            cost.pages += 1;
            cost.items_read += page.items_read;
            let (lo, hi) = specs[i].span;
            page.items
                .iter()
                .filter(|item| (lo..hi).contains(&item.ts_ms))
                .for_each(&mut each);
            states[i].next_start = page.last_key;
            if states[i].next_start.is_none() {
                open.retain(|&s| s != i);
            }
        }
    }
    Ok(outcome(cost, None))
}
