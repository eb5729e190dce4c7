//! Scatter-gather execution: page through many key-range streams concurrently and
//! merge them into one ordered, limited answer, reading from each stream only what
//! the answer still needs.
//!
//! # How much is read
//! Every stream has a *bound*: nothing it has not yet returned sorts before it. A
//! stream that was never read is bounded by the start of its time span (in merge
//! order), one that ran dry by the last key it gave. The merge pops the smallest
//! buffered head only when no stream's bound sorts before it; otherwise it reads one
//! page from each such stream, concurrently (at most `concurrency` at once). So a
//! device read over six hour-buckets opens the second bucket only when the first is
//! used up, and `limit=100` over eight shards of one epoch reads about 100 items, not
//! 800: each page's `Limit` is the stream's share of the remaining need (the need
//! divided by the streams still competing for it). The price is round trips: a stream
//! that runs dry is refilled in smaller and smaller pages as the need shrinks.
//!
//! Streams that are not in time order within their key (the all-devices plan: a
//! time-bucket partition sorts by device first) are read whole within their time
//! filter when the merge first reaches them and sorted in memory. The cost of such a
//! read is every item of the bucket inside the range, i.e. about one bucket (per
//! shard) per page of the answer.

use std::cmp::Ordering;
use std::collections::VecDeque;

use futures::StreamExt as _;
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
}

/// What one merged read returned and cost.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadOutcome {
    /// At most `limit` items in merge order.
    pub items: Vec<ReadingItem>,
    /// Whether at least one more item follows the last one returned.
    pub more: bool,
    /// Items DynamoDB evaluated (ScannedCount summed over every page).
    pub items_read: u64,
    /// Query calls made.
    pub pages: u64,
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

/// The merge key of a stored reading.
pub fn key_of(item: &ReadingItem) -> ReadingKey {
    ReadingKey {
        ts_ms: item.ts_ms,
        device_id: item.device_id.clone(),
        event_id: item.event_id.clone(),
    }
}

/// Where a stream's next item can be at the earliest, in merge order.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Bound {
    ts_ms: i64,
    /// `None`: before every key at `ts_ms`. `Some(k)`: not before `k`.
    key: Option<ReadingKey>,
}

fn cmp_bound(a: &Bound, b: &Bound, descending: bool) -> Ordering {
    let by_ts = if descending {
        b.ts_ms.cmp(&a.ts_ms)
    } else {
        a.ts_ms.cmp(&b.ts_ms)
    };
    by_ts.then_with(|| match (&a.key, &b.key) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(x), Some(y)) => {
            if descending {
                y.cmp(x)
            } else {
                x.cmp(y)
            }
        }
    })
}

/// Whether `k` comes strictly after `pos` in merge order.
pub fn is_after(k: &ReadingKey, pos: &ReadingKey, descending: bool) -> bool {
    if descending { k < pos } else { k > pos }
}

#[derive(Debug)]
struct Stream {
    spec: StreamSpec,
    buffer: VecDeque<(ReadingKey, ReadingItem)>,
    /// Where the next page starts; `None` with `started` means exhausted.
    next_start: Option<PageKey>,
    started: bool,
    done: bool,
    bound: Bound,
}

impl Stream {
    /// Its buffer is in merge order and may be popped from.
    fn mergeable(&self) -> bool {
        self.spec.time_ordered || self.done
    }
    fn has_head(&self) -> bool {
        self.mergeable() && !self.buffer.is_empty()
    }
    /// Cannot take part in the merge until it reads another page.
    fn needs_page(&self) -> bool {
        !self.done && (!self.spec.time_ordered || self.buffer.is_empty())
    }
    fn live(&self) -> bool {
        !self.done || !self.buffer.is_empty()
    }
}

/// Reads `limit` items in merge order strictly after `after` (when given), plus
/// enough to know whether more follow.
pub async fn read_merged<S: ReadingSource>(
    source: &S,
    specs: Vec<StreamSpec>,
    opts: ReadOptions,
    limit: usize,
    after: Option<&ReadingKey>,
) -> Result<ReadOutcome, ExecError> {
    let desc = opts.descending;
    let mut streams: Vec<Stream> = specs
        .into_iter()
        .map(|spec| {
            let start_ts = if desc { spec.span.1 - 1 } else { spec.span.0 };
            Stream {
                bound: Bound {
                    ts_ms: start_ts,
                    key: None,
                },
                spec,
                buffer: VecDeque::new(),
                next_start: None,
                started: false,
                done: false,
            }
        })
        .collect();
    let need = limit.saturating_add(1);
    let mut out: Vec<ReadingItem> = Vec::with_capacity(limit.min(1024));
    let mut items_read = 0u64;
    let mut pages = 0u64;
    let mut more = false;

    loop {
        // Pop while the smallest bound is a buffered head.
        let mut to_fetch: Vec<usize> = Vec::new();
        // Ends when every stream is exhausted, or to read more.
        while let Some(min_idx) = min_bound(&streams, desc) {
            if !streams[min_idx].has_head() {
                to_fetch = fetch_set(&streams, min_idx, desc);
                break;
            }
            if out.len() >= limit {
                // A further item exists.
                more = true;
                break;
            }
            let s = &mut streams[min_idx];
            let (key, item) = s.buffer.pop_front().expect("checked non-empty above");
            s.bound = match s.buffer.front() {
                Some((k, _)) => bound_of(k),
                None => bound_of(&key),
            };
            out.push(item);
        }
        if to_fetch.is_empty() {
            break;
        }
        let remaining = need.saturating_sub(out.len()).max(1);
        // Streams competing for the remaining need: those already read and still live,
        // plus the ones about to be read.
        let active = streams
            .iter()
            .enumerate()
            .filter(|(i, s)| s.live() && (s.started || to_fetch.contains(i)))
            .count()
            .max(1);
        let share = remaining.div_ceil(active);
        let requests: Vec<(usize, PageRequest)> = to_fetch
            .iter()
            .map(|&i| {
                let s = &mut streams[i];
                let limit = if s.spec.time_ordered {
                    Some(u32::try_from(share.min(remaining)).unwrap_or(u32::MAX))
                } else {
                    None
                };
                (i, page_request(&s.spec, limit, s.next_start.clone(), opts))
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
            pages += 1;
            items_read += page.items_read;
            let s = &mut streams[i];
            s.started = true;
            let (lo, hi) = s.spec.span;
            for item in page.items {
                let key = key_of(&item);
                if key.ts_ms < lo || key.ts_ms >= hi {
                    continue;
                }
                if let Some(pos) = after
                    && !is_after(&key, pos, desc)
                {
                    continue;
                }
                s.buffer.push_back((key, item));
            }
            s.next_start = page.last_key;
            if s.next_start.is_none() {
                s.done = true;
            }
            if !s.spec.time_ordered {
                // Read the whole span before merging: its key order is not time order.
                if !s.done {
                    continue;
                }
                let mut items: Vec<_> = s.buffer.drain(..).collect();
                items.sort_by(|a, b| if desc { b.0.cmp(&a.0) } else { a.0.cmp(&b.0) });
                s.buffer = items.into();
            }
            if let Some((k, _)) = s.buffer.front() {
                s.bound = bound_of(k);
            }
        }
        let buffered: usize = streams.iter().map(|s| s.buffer.len()).sum();
        if buffered > opts.max_buffered {
            return Err(ExecError::TooMuchToSort {
                limit: opts.max_buffered,
            });
        }
    }
    Ok(ReadOutcome {
        items: out,
        more,
        items_read,
        pages,
    })
}

fn bound_of(k: &ReadingKey) -> Bound {
    Bound {
        ts_ms: k.ts_ms,
        key: Some(k.clone()),
    }
}

/// The live stream whose bound sorts first; on ties, one with a buffered head (a
/// blocked stream's next item is strictly after its bound, since keys are unique).
fn min_bound(streams: &[Stream], desc: bool) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, s) in streams.iter().enumerate() {
        if !s.live() {
            continue;
        }
        best = match best {
            None => Some(i),
            Some(b) => {
                let o = &streams[b];
                match cmp_bound(&s.bound, &o.bound, desc) {
                    Ordering::Less => Some(i),
                    Ordering::Equal if !o.has_head() && s.has_head() => Some(i),
                    _ => Some(b),
                }
            }
        };
    }
    best
}

/// Which streams to read next: every stream needing a page whose bound sorts before
/// the best buffered head (each could hold the next item). Without any buffered
/// head, the streams tied for the first bound.
fn fetch_set(streams: &[Stream], min_idx: usize, desc: bool) -> Vec<usize> {
    let best_head = streams
        .iter()
        .filter(|s| s.has_head())
        .map(|s| &s.bound)
        .min_by(|a, b| cmp_bound(a, b, desc));
    let min_bound = &streams[min_idx].bound;
    streams
        .iter()
        .enumerate()
        .filter(|(_, s)| s.needs_page())
        .filter(|(_, s)| match best_head {
            Some(h) => cmp_bound(&s.bound, h, desc) == Ordering::Less,
            None => cmp_bound(&s.bound, min_bound, desc) == Ordering::Equal,
        })
        .map(|(i, _)| i)
        .collect()
}

fn page_request(
    spec: &StreamSpec,
    limit: Option<u32>,
    start_after: Option<PageKey>,
    opts: ReadOptions,
) -> PageRequest {
    PageRequest {
        pk: spec.pk.clone(),
        sk_between: spec.sk_between.clone(),
        ts_ms_between: spec.filter_time.then(|| (spec.span.0, spec.span.1 - 1)),
        limit,
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
/// stays at one page per stream in flight: nothing is collected.
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
            let req = page_request(&spec, None, start, opts);
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
