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
//! divided by the streams still competing for it, i.e. the live streams whose time
//! spans overlap its own: streams of consecutive buckets do not compete, they follow
//! one another), plus a quarter. Streams are rarely equally dense, so an exact share
//! leaves the denser ones short and costs refill rounds; the quarter trades at most
//! 1.25x over-read from the shares for fewer of them (over 8 shards of uneven
//! density: 3-4 rounds instead of 6-7 in the engine tests). The price is still round
//! trips: a stream that runs dry is refilled in smaller pages as the need shrinks.
//!
//! # Reading ahead into later buckets
//! Waiting for bucket i to run dry before opening bucket i+1 costs one round trip per
//! bucket. So once a round has shown how dense the streams are (items kept per
//! millisecond of span covered, over every time-ordered stream read so far), each
//! later round also opens the not-yet-read time-ordered streams next in merge order,
//! concurrently with the blocking ones, until the expected supply (buffered items,
//! plus density x the unread span of every stream being read) covers the remaining
//! need. The first round reads ahead nothing (no density known yet): a dense first
//! bucket answers alone, in one round trip. A sparse one costs a second round that
//! opens about as many buckets as the need requires; over-read stays bounded by
//! what the last bucket opened holds beyond the need (each page's `Limit` is still the
//! remaining need). When the streams read so far held nothing, the estimate is
//! useless, so the read-ahead at most doubles the streams opened per round. Reading a
//! stream early never changes the answer: it only buffers items, and the merge
//! emits by bounds as before.
//!
//! # Reads over every device
//! A time-bucket partition sorts by device first (`{device}#{ts}#{event_id}`), so the
//! all-devices plan's streams are not in time order by the table's key. With the time
//! index (a local secondary index on `ts_ms`, template.yaml `TimeIndex`) such a
//! stream is read through the index: in time order, the range as key condition, and
//! paged like any other stream. The index orders by `ts_ms` only, so items sharing one
//! millisecond may come in any device/event order and may straddle pages: a page's
//! items at its last timestamp `t` are held back until the next page (or the end), and
//! the stream's bound stays "before every key at `t`", so the merge never emits an item
//! that an unread tie could precede. A resumed read asks for `ts_ms >= t` and drops
//! what is at or before the cursor's position.
//!
//! Without the index, such streams are read whole within their time filter when the
//! merge first reaches them and sorted in memory. The cost of such a read is every
//! item of the bucket inside the range, i.e. about one bucket (per shard) per page of
//! the answer.

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
    /// Read through this time index (sort key `ts_ms`): the items come in time order
    /// (ties at one millisecond in any order) and `span` is the key condition.
    pub index: Option<String>,
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
    /// Rounds of concurrent Query calls, one after another.
    pub rounds: u64,
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
    /// Items of its span it has delivered (buffered or emitted), for the density.
    kept: u64,
    /// Time-index streams: items at the last page's last timestamp, held back until
    /// the next page shows every tie (sorted in merge order on release).
    held: Vec<(ReadingKey, ReadingItem)>,
    /// Time-index streams: the last page's last timestamp; unread items are not
    /// before it.
    frontier: Option<i64>,
}

impl Stream {
    /// Whether pages come in merge order (by the table's key or through the index),
    /// so it can be read page by page.
    fn ordered(&self) -> bool {
        self.spec.time_ordered || self.spec.index.is_some()
    }
    /// Its buffer is in merge order and may be popped from.
    fn mergeable(&self) -> bool {
        self.ordered() || self.done
    }
    fn has_head(&self) -> bool {
        self.mergeable() && !self.buffer.is_empty()
    }
    /// Cannot take part in the merge until it reads another page.
    fn needs_page(&self) -> bool {
        !self.done && (!self.ordered() || self.buffer.is_empty())
    }
    /// Bound once the buffer is empty, `last` being the key last taken from it.
    fn bound_after(&self, last: &ReadingKey) -> Bound {
        match self.frontier {
            Some(ts) if !self.done => Bound {
                ts_ms: ts,
                key: None,
            },
            _ => bound_of(last),
        }
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
                kept: 0,
                held: Vec::new(),
                frontier: None,
            }
        })
        .collect();
    let need = limit.saturating_add(1);
    let mut out: Vec<ReadingItem> = Vec::with_capacity(limit.min(1024));
    let mut items_read = 0u64;
    let mut pages = 0u64;
    let mut rounds = 0u64;
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
                None => s.bound_after(&key),
            };
            out.push(item);
        }
        if to_fetch.is_empty() {
            break;
        }
        let remaining = need.saturating_sub(out.len()).max(1);
        let ahead = read_ahead(&streams, &to_fetch, remaining, desc, opts.concurrency);
        to_fetch.extend(ahead);
        let requests: Vec<(usize, PageRequest)> = to_fetch
            .iter()
            .map(|&i| {
                let s = &streams[i];
                let limit = if s.ordered() {
                    // Streams competing with this one for the remaining need: those
                    // whose spans overlap its own, already read and still live, or
                    // about to be read.
                    let active = streams
                        .iter()
                        .enumerate()
                        .filter(|(j, o)| {
                            o.live()
                                && (o.started || to_fetch.contains(j))
                                && overlaps(o.spec.span, s.spec.span)
                        })
                        .count()
                        .max(1);
                    let share = (remaining + remaining / 4).div_ceil(active).min(remaining);
                    Some(u32::try_from(share).unwrap_or(u32::MAX))
                } else {
                    None
                };
                (i, page_request(&s.spec, limit, s.next_start.clone(), opts))
            })
            .collect();
        rounds += 1;
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
            // The page's last timestamp (items in index order), for time-index streams.
            let last_ts = page
                .items
                .last()
                .map(|i| i.ts_ms)
                .or_else(|| page.last_key.as_ref().and_then(|k| k.ts_ms));
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
                s.kept += 1;
                s.buffer.push_back((key, item));
            }
            s.next_start = page.last_key;
            if s.next_start.is_none() {
                s.done = true;
            }
            if s.spec.index.is_some() {
                release_ties(s, last_ts, desc);
            } else if !s.spec.time_ordered {
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
            } else if let (Some(ts), false) = (s.frontier, s.done) {
                s.bound = Bound {
                    ts_ms: ts,
                    key: None,
                };
            }
        }
        let buffered: usize = streams.iter().map(|s| s.buffer.len() + s.held.len()).sum();
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
        rounds,
    })
}

/// A time-index stream after a page: the items it just buffered, and those held from
/// before, are sorted in merge order; those strictly before the page's last timestamp
/// `last_ts` (in merge order) are released, the ties at `last_ts` held for the next
/// page. At the end everything is released.
fn release_ties(s: &mut Stream, last_ts: Option<i64>, desc: bool) {
    let mut pending: Vec<_> = std::mem::take(&mut s.held);
    pending.extend(s.buffer.drain(..));
    pending.sort_by(|a, b| if desc { b.0.cmp(&a.0) } else { a.0.cmp(&b.0) });
    if s.done {
        s.frontier = None;
        s.buffer = pending.into();
        return;
    }
    let Some(t) = last_ts.or(s.frontier) else {
        s.buffer = pending.into();
        return;
    };
    let split = pending.partition_point(|(k, _)| if desc { k.ts_ms > t } else { k.ts_ms < t });
    s.held = pending.split_off(split);
    s.buffer = pending.into();
    s.frontier = Some(t);
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

/// Whether two half-open spans share a millisecond.
fn overlaps(a: (i64, i64), b: (i64, i64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// Milliseconds of a stream's span not yet covered by what it returned.
fn unread_ms(s: &Stream, desc: bool) -> i64 {
    let (lo, hi) = s.spec.span;
    if s.done {
        0
    } else if !s.started {
        hi - lo
    } else if desc {
        (s.bound.ts_ms - lo).clamp(0, hi - lo)
    } else {
        (hi - s.bound.ts_ms).clamp(0, hi - lo)
    }
}

/// Not-yet-read time-ordered streams to open now beside `fetching` (see "Reading
/// ahead" in the module header), in merge order of their starts.
fn read_ahead(
    streams: &[Stream],
    fetching: &[usize],
    remaining: usize,
    desc: bool,
    concurrency: usize,
) -> Vec<usize> {
    if fetching.iter().any(|&i| !streams[i].ordered()) {
        return Vec::new();
    }
    // Density over every stream read page by page so far.
    let (mut kept, mut covered) = (0u64, 0i64);
    let mut started = 0usize;
    for s in streams.iter().filter(|s| s.started && s.ordered()) {
        started += 1;
        kept += s.kept;
        covered += (s.spec.span.1 - s.spec.span.0) - unread_ms(s, desc);
    }
    if started == 0 || covered <= 0 {
        return Vec::new();
    }
    let density = kept as f64 / covered as f64;
    let need = remaining as f64;
    let mut supply: f64 = streams.iter().map(|s| s.buffer.len() as f64).sum::<f64>()
        + fetching
            .iter()
            .map(|&i| density * unread_ms(&streams[i], desc) as f64)
            .sum::<f64>();
    let mut candidates: Vec<usize> = streams
        .iter()
        .enumerate()
        .filter(|(i, s)| s.ordered() && !s.started && !fetching.contains(i))
        .map(|(i, _)| i)
        .collect();
    candidates.sort_by(|&a, &b| cmp_bound(&streams[a].bound, &streams[b].bound, desc));
    // Without a usable density, grow by doubling rather than open everything.
    let cap = if kept == 0 {
        started.min(concurrency.saturating_sub(fetching.len()))
    } else {
        concurrency.saturating_sub(fetching.len())
    };
    let mut out = Vec::new();
    for i in candidates {
        if supply >= need || out.len() >= cap {
            break;
        }
        supply += density * unread_ms(&streams[i], desc) as f64;
        out.push(i);
    }
    out
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
        // On the index the span is the key condition, which bounds what is evaluated.
        ts_ms_between: (spec.filter_time || spec.index.is_some())
            .then(|| (spec.span.0, spec.span.1 - 1)),
        time_index: spec.index.clone(),
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
