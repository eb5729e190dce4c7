//! The bounded k-way merge of a scatter-gather read: which pages to read, how large, and
//! which items to emit, for many key-range streams merged into one ordered, limited
//! answer. Pure: the caller reads the pages ([`BoundedMerge::step`] says which) and hands
//! them back ([`BoundedMerge::deliver`]); nothing here does I/O.
//!
//! # How much is read
//! Every stream has a *bound*: nothing it has not yet returned sorts before it. A
//! stream that was never read is bounded by the start of its time span (in merge
//! order), one that ran dry by the last key it gave. The merge pops the smallest
//! buffered head only when no stream's bound sorts before it; otherwise it asks for one
//! page from each such stream, to be read concurrently. So a device read over six
//! hour-buckets opens the second bucket only when the first is used up, and
//! `limit=100` over eight shards of one epoch reads about 100 items, not 800: each
//! page's `Limit` is the stream's share of the remaining need (the need divided by the
//! streams still competing for it, i.e. the live streams whose time spans overlap its
//! own: streams of consecutive buckets do not compete, they follow one another), plus
//! a quarter. Streams are rarely equally dense, so an exact share leaves the denser
//! ones short and costs refill rounds; the quarter trades at most 1.25x over-read from
//! the shares for fewer of them. The price is still round trips: a stream that runs
//! dry is refilled in smaller pages as the need shrinks.
//!
//! # Reading ahead into later buckets
//! Waiting for bucket i to run dry before opening bucket i+1 costs one round trip per
//! bucket. So once a round has shown how dense the streams are (items kept per
//! millisecond of span covered, over every stream read page by page so far), each
//! later round also opens the not-yet-read streams next in merge order, concurrently
//! with the blocking ones, until the expected supply (buffered items, plus density x
//! the unread span of every stream being read) covers the remaining need. The first
//! round reads ahead nothing (no density known yet, unless an earlier read's is given:
//! see "A density from an earlier read"): a dense first bucket answers alone, in one
//! round trip. When the streams read so far held nothing, the estimate
//! is useless, so the read-ahead at most doubles the streams opened per round. Reading
//! a stream early never changes the answer: it only buffers items, and the merge emits
//! by bounds as before.
//!
//! # Refill pages
//! Once a round has shown the density, the merge estimates the *cutoff*: where the
//! answer is expected to end, the first timestamp by which the items read and not yet
//! emitted, plus the density times every stream's unread time up to it, make up the
//! remaining need. Every started stream whose pages have not reached the cutoff is
//! refilled in the next round, whether it already ran dry or will, with a page of the
//! items expected up to the cutoff plus a quarter. Without that, streams run dry one
//! after another, each costs a round, and a refill's share of a small remaining need
//! among many streams is one item, which a time-indexed stream holds back as a
//! possible tie. The *horizon*, the timestamp of the `remaining`-th item already read
//! and not yet emitted, is where the answer ends at the latest: a stream bounded after
//! it is not read at all.
//!
//! # Clipping to the horizon
//! A bounded merge never needs an item after the horizon of its *distinct* items (a
//! copy of one item counts once): at least `remaining` different items lie at or
//! before it. So at every step each stream's span is clipped to end there, what was
//! read beyond is dropped, and an ordered stream whose pages already reached past the
//! new end is done. [`PageAsk::span`] carries the clipped span, so a reader that
//! bounds a page by time (the time index's key condition) stops there and returns no
//! next page. That spares the read that would otherwise show a stream's next item
//! after the answer: with `limit` 100 over 32 streams, that item alone is a third of
//! the answer's size. An unordered stream is clipped only once read whole, so that
//! what it buffers meanwhile stays what the caller's memory cap measures.
//!
//! # Time-indexed pages end where the answer is expected to end
//! Once the density is known, a time-indexed page reads only up to the cutoff for
//! `remaining` plus a quarter, and its `Limit` is at least the stream's share of the
//! need (its own density's estimate, when higher, counts too). A page that reads its
//! whole span short of the stream's end leaves the stream complete up to there, with
//! no tie held back, and the next page starts there. So a stream whose items come in
//! bursts (every device of a fleet reporting in the same second) is read to where the
//! answer ends in one round, not one item per round, and the generous `Limit` costs
//! nothing past the cutoff. The merge's first round, with no density known, still
//! reads a share per stream.
//!
//! # A density from an earlier read
//! Without a density, the first round reads a share of the need from every stream, and
//! shares fit no stream: a stream of a shard holding one device reads past where the
//! answer ends, one holding five runs dry before it, and a second round follows. A
//! caller that read streams like these a moment ago (the same route, another request)
//! can hand the merge the density that read saw ([`BoundedMerge::with_density_hint`]).
//! The first round then plans as later rounds do: the cutoff, time-indexed pages that
//! end where the answer is expected to end, and reading ahead. A time-indexed stream not
//! read yet takes up to four times its share up to there, so one denser than the
//! average (a shard holding more devices than most) is read to the end in the same
//! round (a limit of 100 over the 32 shards of 64 devices: three times the share left
//! one shard's page at its limit short of the end, and a second round read one item).
//! A wrong hint costs rounds or items read, never an item of the answer: too high, pages
//! end early and the next rounds read on; too low, pages end late, and the first round
//! still reads at most four shares a stream, five times the need in all. Once this
//! read's own pages show a density, the hint is no longer used.
//!
//! # Streams in other orders
//! - [`Arrival::TimeIndexed`]: pages come in time order through a time index, but
//!   items sharing one millisecond may come in any order and may straddle pages. A
//!   page's items at its last timestamp `t` are held back until the next page (or the
//!   end), and the stream's bound stays "before every key at `t`", so the merge never
//!   emits an item that an unread tie could precede.
//! - [`Arrival::Unordered`]: the stream is read whole (pages without a `Limit`) when
//!   the merge first reaches it, then sorted in memory.
//!
//! Keys must be unique within a stream; items outside a stream's span, or not after
//! the resume key, are dropped on delivery.
//!
//! # Items stored twice
//! Equal keys in two streams are one item stored twice (a reading written, then
//! redelivered after a fan-out raise and keyed under another partition): the merge
//! emits it once. The merge key must therefore be the item's identity (for a reading,
//! its sort key or its (time, entity, event id)). Emission is in merge order and an
//! item is emitted only when no stream's bound precedes it, so every copy of a key
//! comes out right after the first, wherever its stream is; the merge drops a head
//! equal to the key it emitted last. That costs one key of memory, whatever the
//! number of streams or items. Copies count neither toward the limit nor as "more"
//! (a page whose last item's copy is all that follows has no next page), and a
//! resumed read drops every copy of its resume key on delivery, so no page repeats
//! the last item of the page before it. Copies still count as items read where the
//! merge estimates density and which streams a round reads, which at worst costs a
//! round, never an item; the span clip counts each item once.
//!
//! # Emitting as it goes
//! [`BoundedMerge::windowed`] emits every item, with no limit, to a caller that takes
//! them after each step ([`BoundedMerge::take_emitted`]) (aggregations over a whole
//! range): its rounds are planned as if `window` items were needed, so memory stays
//! about `window` items however long the range.

use std::cmp::Ordering;
use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// Direction of the merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    /// Smallest key first.
    #[default]
    Ascending,
    /// Largest key first.
    Descending,
}

impl Order {
    /// Whether `a` comes strictly before `b` in this order.
    #[must_use]
    pub fn before<K: Ord>(self, a: &K, b: &K) -> bool {
        match self {
            Order::Ascending => a < b,
            Order::Descending => a > b,
        }
    }

    /// `a` against `b` in this order.
    #[must_use]
    pub fn cmp<K: Ord>(self, a: &K, b: &K) -> Ordering {
        match self {
            Order::Ascending => a.cmp(b),
            Order::Descending => b.cmp(a),
        }
    }

    fn descending(self) -> bool {
        self == Order::Descending
    }
}

/// A merge key that sorts by its timestamp first.
pub trait TimedKey: Ord + Clone {
    /// The timestamp, epoch milliseconds.
    fn ts_ms(&self) -> i64;
}

/// How a stream's items arrive, page by page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// In merge order (the partition's sort key orders by time).
    InOrder,
    /// In time order through a time index; ties at one millisecond in any order.
    TimeIndexed,
    /// In no useful order: read whole, then sorted.
    Unordered,
}

impl Arrival {
    fn ordered(self) -> bool {
        self != Arrival::Unordered
    }
}

/// One stream to merge: the half-open `[from, to)` span its items lie in (epoch ms) and
/// how they arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamShape {
    /// `[from, to)`, epoch milliseconds.
    pub span: (i64, i64),
    /// How its pages come.
    pub arrival: Arrival,
}

/// A page to read: of stream `stream`, at most `limit` items (`None`: no limit), within
/// `span`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageAsk {
    /// The stream's index.
    pub stream: usize,
    /// The page's `Limit`.
    pub limit: Option<u32>,
    /// `[from, to)`, epoch ms: the part of the stream's span the answer can still need
    /// (its span, clipped to the horizon; see "Clipping to the horizon"). A reader that
    /// bounds a page by time (a time index's key condition) should bound it by this:
    /// the page then ends, with no next page, where the answer can end at the latest.
    /// Items outside it are dropped on delivery either way.
    pub span: (i64, i64),
}

/// What the merge needs next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step<T> {
    /// Read these pages (concurrently), deliver each, then step again.
    Read(Vec<PageAsk>),
    /// The answer: at most `limit` items in merge order, and whether more follow.
    Done {
        /// The items.
        items: Vec<T>,
        /// Whether at least one more item follows the last one.
        more: bool,
    },
}

/// Where a stream's next item can be at the earliest, in merge order.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Bound<K> {
    ts_ms: i64,
    /// `None`: before every key at `ts_ms`. `Some(k)`: not before `k`.
    key: Option<K>,
}

impl<K: TimedKey> Bound<K> {
    fn of(k: &K) -> Self {
        Bound {
            ts_ms: k.ts_ms(),
            key: Some(k.clone()),
        }
    }

    fn at(ts_ms: i64) -> Self {
        Bound { ts_ms, key: None }
    }

    fn cmp(&self, other: &Self, order: Order) -> Ordering {
        order
            .cmp(&self.ts_ms, &other.ts_ms)
            .then_with(|| match (&self.key, &other.key) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => Ordering::Less,
                (Some(_), None) => Ordering::Greater,
                (Some(x), Some(y)) => order.cmp(x, y),
            })
    }
}

#[derive(Debug)]
struct Stream<K, T> {
    shape: StreamShape,
    buffer: VecDeque<(K, T)>,
    started: bool,
    done: bool,
    bound: Bound<K>,
    /// Items of its span it has delivered (buffered or emitted), for the density.
    kept: u64,
    /// Time-indexed streams: items at the last page's last timestamp, held back until
    /// the next page shows every tie.
    held: Vec<(K, T)>,
    /// Time-indexed streams: the last page's last timestamp, or where a page that
    /// read its whole span ended; unread items are not before it.
    frontier: Option<i64>,
    /// The span of the page asked for and not yet delivered.
    asked: Option<(i64, i64)>,
}

impl<K: TimedKey, T> Stream<K, T> {
    fn ordered(&self) -> bool {
        self.shape.arrival.ordered()
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
    fn live(&self) -> bool {
        !self.done || !self.buffer.is_empty()
    }
    /// Milliseconds of its span its pages have not reached yet.
    fn unread_ms(&self, order: Order) -> i64 {
        let (lo, hi) = self.shape.span;
        if self.done {
            0
        } else if !self.started {
            hi - lo
        } else {
            let at = self.reached().unwrap_or(self.bound.ts_ms);
            if order.descending() {
                (at - lo).clamp(0, hi - lo)
            } else {
                (hi - at).clamp(0, hi - lo)
            }
        }
    }
    /// How far its pages have reached, in merge order: the last timestamp read;
    /// `None` before its first page and after its last.
    fn reached(&self) -> Option<i64> {
        if !self.started || self.done || !self.ordered() {
            return None;
        }
        Some(self.frontier.unwrap_or_else(|| {
            self.buffer
                .back()
                .map_or(self.bound.ts_ms, |(k, _)| k.ts_ms())
        }))
    }

    /// The bound after its buffer changed; `last` is the key last taken from it.
    fn rebound(&mut self, last: Option<&K>) {
        self.bound = match (self.buffer.front(), self.frontier) {
            (Some((k, _)), _) => Bound::of(k),
            (None, Some(ts)) if !self.done => Bound::at(ts),
            (None, _) => match last {
                Some(k) => Bound::of(k),
                None => return,
            },
        };
    }
    /// A time-indexed stream after a page: what it just buffered and what it held are
    /// sorted; those before the page's last timestamp `last_ts` are released, the ties
    /// at `last_ts` held for the next page. At the end everything is released.
    fn release_ties(&mut self, last_ts: Option<i64>, order: Order) {
        let mut pending: Vec<(K, T)> = std::mem::take(&mut self.held);
        pending.extend(self.buffer.drain(..));
        pending.sort_by(|a, b| order.cmp(&a.0, &b.0));
        if self.done {
            self.frontier = None;
            self.buffer = pending.into();
            return;
        }
        let Some(t) = last_ts.or(self.frontier) else {
            self.buffer = pending.into();
            return;
        };
        let split = pending.partition_point(|(k, _)| order.cmp(&k.ts_ms(), &t) == Ordering::Less);
        self.held = pending.split_off(split);
        self.buffer = pending.into();
        self.frontier = Some(t);
    }

    /// Items per millisecond of the span its pages have covered (0 before any).
    fn own_density(&self, order: Order) -> f64 {
        let (lo, hi) = self.shape.span;
        let covered = (hi - lo) - self.unread_ms(order);
        if covered > 0 {
            self.kept as f64 / covered as f64
        } else {
            0.0
        }
    }

    /// The span its next page reads: what is left of its own, and for a time-indexed
    /// stream only up to `page_end` (inclusive, in merge order) when one is given,
    /// but never less than one millisecond.
    fn page_span(&self, page_end: Option<i64>, order: Order) -> (i64, i64) {
        let (lo, hi) = self.shape.span;
        if self.shape.arrival != Arrival::TimeIndexed {
            return (lo, hi);
        }
        if order.descending() {
            let top = self.frontier.map_or(hi, |f| (f + 1).min(hi));
            let bottom = page_end.map_or(lo, |e| e.max(lo));
            (bottom.min(top - 1).max(lo), top)
        } else {
            let from = self.frontier.map_or(lo, |f| f.max(lo));
            let to = page_end.map_or(hi, |e| e.saturating_add(1).min(hi));
            (from, to.max(from + 1).min(hi))
        }
    }

    /// Whether `ts` lies past the far end of its span, in merge order.
    fn past_end(&self, ts: i64, order: Order) -> bool {
        let (lo, hi) = self.shape.span;
        if order.descending() {
            ts < lo
        } else {
            ts >= hi
        }
    }

    /// Clips its span to end at `end` (inclusive, in merge order) and drops what it
    /// read beyond. An ordered stream whose pages have reached past the new end has
    /// nothing more to give.
    fn clip(&mut self, end: i64, order: Order) {
        // An unordered stream is read whole as it is: what it buffers is what the
        // caller's memory cap counts.
        if !self.mergeable() {
            return;
        }
        let (lo, hi) = self.shape.span;
        self.shape.span = if order.descending() {
            (lo.max(end), hi)
        } else {
            (lo, hi.min(end.saturating_add(1)))
        };
        let (lo, hi) = self.shape.span;
        let reached_past =
            self.ordered() && self.reached().is_some_and(|r| self.past_end(r, order));
        if lo >= hi || reached_past {
            self.done = true;
        }
        let before = self.buffer.len() + self.held.len();
        let keep = |k: &K| {
            !(if order.descending() {
                k.ts_ms() < lo
            } else {
                k.ts_ms() >= hi
            })
        };
        self.buffer.retain(|(k, _)| keep(k));
        self.held.retain(|(k, _)| keep(k));
        self.kept -= (before - self.buffer.len() - self.held.len()) as u64;
        if self.done && self.shape.arrival == Arrival::TimeIndexed {
            self.release_ties(None, order);
        }
        self.rebound(None);
    }
}

/// The page a stream that has reached `reached` needs to get to `cutoff`: the items
/// expected in between at `density` (items per millisecond), plus a quarter.
fn refill(reached: i64, density: f64, cutoff: i64, order: Order) -> usize {
    let gap = if order.descending() {
        reached - cutoff
    } else {
        cutoff - reached
    };
    (density * gap.max(0) as f64 * 1.25).ceil() as usize
}

/// Whether two half-open spans share a millisecond.
fn overlaps(a: (i64, i64), b: (i64, i64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// The merge of one read: streams, what was emitted, and the limit.
#[derive(Debug)]
pub struct BoundedMerge<K, T> {
    streams: Vec<Stream<K, T>>,
    order: Order,
    limit: usize,
    /// Most items the reads of one round are planned for (see
    /// [`BoundedMerge::windowed`]); `usize::MAX` for a bounded merge.
    window: usize,
    after: Option<K>,
    /// Emitted and not yet taken ([`BoundedMerge::take_emitted`]).
    out: Vec<T>,
    /// Items emitted so far, taken or not.
    emitted: usize,
    /// The key last emitted: an equal key popped next is the same item stored twice.
    last: Option<K>,
    /// Items dropped as copies of the one emitted before them.
    duplicates: u64,
    /// The density to plan by before any stream has shown its own (see "A density from
    /// an earlier read").
    hint: Option<f64>,
}

impl<K: TimedKey, T> BoundedMerge<K, T> {
    /// A merge of `shapes` in `order`, emitting at most `limit` items strictly after
    /// `after` (a resumed read), each key once.
    pub fn new(shapes: Vec<StreamShape>, order: Order, limit: usize, after: Option<K>) -> Self {
        Self::with_window(shapes, order, limit, usize::MAX, after)
    }

    /// A merge of `shapes` in `order` emitting every item strictly after `after`, each
    /// key once, to a caller that takes them as they come
    /// ([`BoundedMerge::take_emitted`] after each [`BoundedMerge::step`] that asks for
    /// pages). Each round's pages are sized, and later streams read ahead, as if
    /// `window` more items were needed, so what it buffers stays about `window` items
    /// (plus the pages of one round) however many it emits in all.
    pub fn windowed(
        shapes: Vec<StreamShape>,
        order: Order,
        window: usize,
        after: Option<K>,
    ) -> Self {
        Self::with_window(shapes, order, usize::MAX, window.max(1), after)
    }

    fn with_window(
        shapes: Vec<StreamShape>,
        order: Order,
        limit: usize,
        window: usize,
        after: Option<K>,
    ) -> Self {
        let streams = shapes
            .into_iter()
            .map(|shape| {
                let (lo, hi) = shape.span;
                let start = if order.descending() { hi - 1 } else { lo };
                Stream {
                    shape,
                    buffer: VecDeque::new(),
                    started: false,
                    done: false,
                    bound: Bound::at(start),
                    kept: 0,
                    held: Vec::new(),
                    frontier: None,
                    asked: None,
                }
            })
            .collect();
        Self {
            streams,
            order,
            limit,
            window,
            after,
            out: Vec::with_capacity(limit.min(window).min(1024)),
            emitted: 0,
            last: None,
            duplicates: 0,
            hint: None,
        }
    }

    /// Plans the first round by `hint`, items per millisecond of one stream's span as
    /// an earlier read of streams like these saw it ([`BoundedMerge::observed_density`]),
    /// until this read's own pages show one. A hint that is not a positive number is
    /// ignored. See "A density from an earlier read".
    #[must_use]
    pub fn with_density_hint(mut self, hint: Option<f64>) -> Self {
        self.hint = hint.filter(|d| d.is_finite() && *d > 0.0);
        self
    }

    /// Items kept per millisecond of span covered, over the ordered streams read page
    /// by page so far: what a later read of streams like these can start from.
    pub fn observed_density(&self) -> Option<f64> {
        self.measured_density().map(|(d, _)| d)
    }

    /// Takes the items emitted so far and not yet taken, in merge order. A windowed
    /// merge's caller calls it after each step that asks for pages, which keeps the
    /// merge's memory bounded; [`Step::Done`] carries whatever was not taken.
    pub fn take_emitted(&mut self) -> Vec<T> {
        std::mem::take(&mut self.out)
    }

    /// Items dropped so far because an equal key had just been emitted: one item
    /// stored under two of the merged streams (see the module header).
    #[must_use]
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// How far the read has come, in merge order: every item whose timestamp sorts
    /// strictly before the returned one has been emitted (or dropped as a copy), and
    /// no emitted item sorts after it; `None` once every stream is spent. A caller that
    /// stops reading between steps (a budget ran out) can resume from here and neither
    /// lose nor repeat an item.
    #[must_use]
    pub fn settled_before(&self) -> Option<i64> {
        self.min_bound().map(|i| self.streams[i].bound.ts_ms)
    }

    /// Items held in memory (buffered or held back), for the caller's memory cap.
    #[must_use]
    pub fn buffered(&self) -> usize {
        self.streams
            .iter()
            .map(|s| s.buffer.len() + s.held.len())
            .sum()
    }

    /// Emits every item that can be emitted, then says which pages to read next (at
    /// most `concurrency` streams are read ahead of need), or gives the answer.
    pub fn step(&mut self, concurrency: usize) -> Step<T> {
        self.clip_to_horizon();
        let (mut fetch, more) = self.emit_ready();
        if fetch.is_empty() {
            return Step::Done {
                items: std::mem::take(&mut self.out),
                more,
            };
        }
        let remaining = self
            .limit
            .saturating_add(1)
            .saturating_sub(self.emitted)
            .clamp(1, self.window);
        // A stream bounded after the horizon cannot hold an item of the answer.
        let order = self.order;
        if let Some(h) = self.horizon(remaining) {
            fetch.retain(|&i| order.cmp(&self.streams[i].bound.ts_ms, &h) != Ordering::Greater);
        }
        let density = self.density();
        let cutoff = density.and_then(|(d, _)| self.cutoff(remaining, d));
        // Streams that will run dry before the expected end are refilled now, in the
        // same round as those that already did: the least reached first, within the
        // concurrency.
        if let Some(c) = cutoff {
            let mut dry: Vec<(i64, usize)> = (0..self.streams.len())
                .filter(|i| !fetch.contains(i))
                .filter_map(|i| self.streams[i].reached().map(|r| (r, i)))
                .filter(|(r, _)| order.cmp(r, &c) == Ordering::Less)
                .collect();
            dry.sort_by(|a, b| order.cmp(&a.0, &b.0));
            let room = concurrency.saturating_sub(fetch.len());
            fetch.extend(dry.into_iter().take(room).map(|(_, i)| i));
        }
        let ahead = self.read_ahead(&fetch, remaining, density, concurrency);
        fetch.extend(ahead);
        // Where the answer is expected to end, with a quarter to spare: a time-indexed
        // page reads up to there and no further.
        let page_end = density.and_then(|(d, _)| self.cutoff(remaining + remaining / 4, d));
        let asks: Vec<PageAsk> = fetch
            .iter()
            .map(|&i| {
                let s = &self.streams[i];
                let limit = s.ordered().then(|| {
                    // Streams competing with this one for the remaining need: those
                    // whose spans overlap its own, already read and still live, or
                    // about to be read.
                    let competing = self
                        .streams
                        .iter()
                        .enumerate()
                        .filter(|(j, o)| {
                            o.live()
                                && (o.started || fetch.contains(j))
                                && overlaps(o.shape.span, s.shape.span)
                        })
                        .count()
                        .max(1);
                    let share = (remaining + remaining / 4).div_ceil(competing);
                    let page = match (s.reached(), density, cutoff) {
                        (Some(r), Some((d, _)), Some(c)) => {
                            let own = refill(r, d.max(s.own_density(order)), c, order);
                            if s.shape.arrival == Arrival::TimeIndexed {
                                own.max(share)
                            } else {
                                own
                            }
                        }
                        // Not read yet, bounded by time where the answer is expected
                        // to end: four times its share up to there, so that a stream
                        // denser than the average (more devices on its shard) is read
                        // to the end in this round too, and no more than that if the
                        // density was wrong.
                        (None, Some(_), Some(_))
                            if s.shape.arrival == Arrival::TimeIndexed && page_end.is_some() =>
                        {
                            share * 4
                        }
                        _ => share,
                    };
                    u32::try_from(page.clamp(1, remaining)).unwrap_or(u32::MAX)
                });
                PageAsk {
                    stream: i,
                    limit,
                    span: s.page_span(page_end, order),
                }
            })
            .collect();
        for ask in &asks {
            self.streams[ask.stream].asked = Some(ask.span);
        }
        Step::Read(asks)
    }

    /// A bounded merge: clips every stream's span to the horizon of the distinct
    /// items read and not yet emitted (see "Clipping to the horizon").
    fn clip_to_horizon(&mut self) {
        if self.window != usize::MAX {
            return;
        }
        let remaining = self.limit.saturating_add(1).saturating_sub(self.emitted);
        let Some(end) = self.distinct_horizon(remaining) else {
            return;
        };
        let order = self.order;
        for s in &mut self.streams {
            s.clip(end, order);
        }
    }

    /// The timestamp of the `remaining`-th distinct key, in merge order, among those
    /// read and not yet emitted, when there are that many. Copies of one item count
    /// once, so at least `remaining` different items lie at or before it.
    fn distinct_horizon(&self, remaining: usize) -> Option<i64> {
        let order = self.order;
        let last = self.last.as_ref();
        let mut known: Vec<&K> = self
            .streams
            .iter()
            .flat_map(|s| s.buffer.iter().chain(&s.held).map(|(k, _)| k))
            .filter(|k| last.is_none_or(|l| order.before(l, k)))
            .collect();
        if remaining == 0 || known.len() < remaining {
            return None;
        }
        known.sort_unstable_by(|a, b| order.cmp(a, b));
        known.dedup();
        known.get(remaining - 1).map(|k| k.ts_ms())
    }

    /// Emits heads in merge order while no stream's bound precedes them, dropping a
    /// head equal to the key just emitted (a second copy of one item). Returns the
    /// streams to read before anything more can be emitted (empty: the answer is
    /// complete), and whether an item beyond the limit is known to follow.
    fn emit_ready(&mut self) -> (Vec<usize>, bool) {
        while let Some(min) = self.min_bound() {
            if !self.streams[min].has_head() {
                return (self.fetch_set(min), false);
            }
            let s = &mut self.streams[min];
            let copy = matches!(
                (s.buffer.front(), &self.last),
                (Some((head, _)), Some(last)) if head == last
            );
            if !copy && self.emitted >= self.limit {
                return (Vec::new(), true);
            }
            let Some((key, item)) = s.buffer.pop_front() else {
                break;
            };
            s.rebound(Some(&key));
            if copy {
                self.duplicates += 1;
                continue;
            }
            self.out.push(item);
            self.emitted += 1;
            self.last = Some(key);
        }
        (Vec::new(), false)
    }

    /// A page of stream `stream`, in arrival order with each item's key; `last_ts` is
    /// the page's last timestamp (its last item's, or where the read stopped), and
    /// `last_page` whether the read found nothing more inside the ask's
    /// [`PageAsk::span`] (no next page). Whether the stream is then done follows from
    /// that span: a page that ended short of the stream's end leaves it complete up to
    /// there.
    pub fn deliver(
        &mut self,
        stream: usize,
        page: impl IntoIterator<Item = (K, T)>,
        last_ts: Option<i64>,
        last_page: bool,
    ) {
        let order = self.order;
        let after = self.after.as_ref();
        let Some(s) = self.streams.get_mut(stream) else {
            return;
        };
        s.started = true;
        let (lo, hi) = s.shape.span;
        let asked = s.asked.take().unwrap_or(s.shape.span);
        let mut past_end = false;
        for (key, item) in page {
            let ts = key.ts_ms();
            if ts < lo || ts >= hi {
                // An ordered stream has nothing more inside its span after this.
                past_end |= s.ordered() && s.past_end(ts, order);
                continue;
            }
            if after.is_some_and(|pos| !order.before(pos, &key)) {
                continue;
            }
            s.kept += 1;
            s.buffer.push_back((key, item));
        }
        // A page that read its whole span short of the stream's end leaves the stream
        // complete up to there, with nothing held back: every tie is before it.
        let short_of_end = if order.descending() {
            asked.0 > lo
        } else {
            asked.1 < hi
        };
        s.done = past_end || (last_page && !short_of_end);
        let last_ts = match (last_page && !s.done, order) {
            (true, Order::Ascending) => Some(asked.1),
            (true, Order::Descending) => Some(asked.0 - 1),
            (false, _) => last_ts,
        };
        match s.shape.arrival {
            Arrival::TimeIndexed => s.release_ties(last_ts, order),
            Arrival::Unordered => {
                if !s.done {
                    return;
                }
                let mut items: Vec<(K, T)> = s.buffer.drain(..).collect();
                items.sort_by(|a, b| order.cmp(&a.0, &b.0));
                s.buffer = items.into();
            }
            Arrival::InOrder => {}
        }
        s.rebound(None);
    }

    /// The live stream whose bound sorts first; on ties, one with a buffered head (a
    /// blocked stream's next item is strictly after its bound, since keys are unique
    /// within a stream).
    fn min_bound(&self) -> Option<usize> {
        let mut best: Option<usize> = None;
        for (i, s) in self.streams.iter().enumerate() {
            if !s.live() {
                continue;
            }
            best = match best {
                None => Some(i),
                Some(b) => {
                    let o = &self.streams[b];
                    match s.bound.cmp(&o.bound, self.order) {
                        Ordering::Less => Some(i),
                        Ordering::Equal if !o.has_head() && s.has_head() => Some(i),
                        _ => Some(b),
                    }
                }
            };
        }
        best
    }

    /// Which streams to read next: every stream needing a page whose bound sorts
    /// before the best buffered head (each could hold the next item). Without any
    /// buffered head, the streams tied for the first bound.
    fn fetch_set(&self, min: usize) -> Vec<usize> {
        let order = self.order;
        let best_head = self
            .streams
            .iter()
            .filter(|s| s.has_head())
            .map(|s| &s.bound)
            .min_by(|a, b| a.cmp(b, order));
        let min_bound = &self.streams[min].bound;
        self.streams
            .iter()
            .enumerate()
            .filter(|(_, s)| s.needs_page())
            .filter(|(_, s)| match best_head {
                Some(h) => s.bound.cmp(h, order) == Ordering::Less,
                None => s.bound.cmp(min_bound, order) == Ordering::Equal,
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// Items per millisecond of one stream's span, over every ordered stream read so
    /// far, and how many streams that is; before any span is covered, the hint (over
    /// no stream), if there is one.
    fn density(&self) -> Option<(f64, usize)> {
        self.measured_density()
            .or_else(|| self.hint.map(|hint| (hint, 0)))
    }

    /// The density this read's own pages show, and over how many streams.
    fn measured_density(&self) -> Option<(f64, usize)> {
        let order = self.order;
        let (mut kept, mut covered, mut started) = (0u64, 0i64, 0usize);
        for s in self.streams.iter().filter(|s| s.started && s.ordered()) {
            started += 1;
            kept += s.kept;
            covered += (s.shape.span.1 - s.shape.span.0) - s.unread_ms(order);
        }
        (started > 0 && covered > 0).then(|| (kept as f64 / covered as f64, started))
    }

    /// The timestamps of the items read and not yet emitted (buffered or held back).
    fn unemitted(&self) -> impl Iterator<Item = i64> + '_ {
        self.streams
            .iter()
            .flat_map(|s| s.buffer.iter().chain(&s.held).map(|(k, _)| k.ts_ms()))
    }

    /// Where the answer ends at the latest: the timestamp of the `remaining`-th item
    /// in merge order among those already read and not yet emitted (buffered or held
    /// back), when there are that many. The merge emits at most `remaining` more items,
    /// so nothing a stream holds beyond this timestamp can be among them (see "Refill
    /// pages" in the module header).
    fn horizon(&self, remaining: usize) -> Option<i64> {
        let order = self.order;
        let mut known: Vec<i64> = self.unemitted().collect();
        if remaining == 0 || known.len() < remaining {
            return None;
        }
        let (_, nth, _) = known.select_nth_unstable_by(remaining - 1, |a, b| order.cmp(a, b));
        Some(*nth)
    }

    /// Where the answer is expected to end: the first timestamp, in merge order, by
    /// which the items read and not yet emitted, plus `density` times the unread time
    /// of every live ordered stream up to it, add up to `remaining`. `None` when even
    /// all of it would not.
    fn cutoff(&self, remaining: usize, density: f64) -> Option<i64> {
        // Positions grow in merge order.
        let pos = |ts: i64| if self.order.descending() { -ts } else { ts };
        let known: Vec<i64> = self.unemitted().map(pos).collect();
        // Each live ordered stream's unread stretch, [from, to) in positions.
        let unread: Vec<(i64, i64)> = self
            .streams
            .iter()
            .filter(|s| s.ordered() && !s.done)
            .map(|s| {
                let (lo, hi) = s.shape.span;
                let (start, end) = if self.order.descending() {
                    (pos(hi - 1), pos(lo) + 1)
                } else {
                    (lo, hi)
                };
                let from = if s.started {
                    s.reached().map_or(end, pos)
                } else {
                    start
                };
                (from, end)
            })
            .collect();
        let supply = |c: i64| {
            known.iter().filter(|&&k| k <= c).count() as f64
                + unread
                    .iter()
                    .map(|&(from, to)| density * (c.min(to) - from).max(0) as f64)
                    .sum::<f64>()
        };
        let need = remaining as f64;
        let (mut lo, mut hi) = (
            self.min_bound().map(|i| pos(self.streams[i].bound.ts_ms))?,
            known
                .iter()
                .copied()
                .chain(unread.iter().map(|u| u.1))
                .max()?,
        );
        if supply(hi) < need {
            return None;
        }
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if supply(mid) >= need {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Some(pos(lo))
    }

    /// Not-yet-read ordered streams to open now beside `fetching` (see "Reading
    /// ahead" in the module header), in merge order of their starts.
    fn read_ahead(
        &self,
        fetching: &[usize],
        remaining: usize,
        density: Option<(f64, usize)>,
        concurrency: usize,
    ) -> Vec<usize> {
        let order = self.order;
        let streams = &self.streams;
        if fetching.iter().any(|&i| !streams[i].ordered()) {
            return Vec::new();
        }
        let Some((density, started)) = density else {
            return Vec::new();
        };
        let need = remaining as f64;
        let mut supply: f64 = streams.iter().map(|s| s.buffer.len() as f64).sum::<f64>()
            + fetching
                .iter()
                .map(|&i| density * streams[i].unread_ms(order) as f64)
                .sum::<f64>();
        let mut candidates: Vec<usize> = streams
            .iter()
            .enumerate()
            .filter(|(i, s)| s.ordered() && !s.started && !fetching.contains(i))
            .map(|(i, _)| i)
            .collect();
        candidates.sort_by(|&a, &b| streams[a].bound.cmp(&streams[b].bound, order));
        // Without a usable density, grow by doubling rather than open everything.
        let open = concurrency.saturating_sub(fetching.len());
        let cap = if density == 0.0 {
            started.min(open)
        } else {
            open
        };
        let mut out = Vec::new();
        for i in candidates {
            if supply >= need || out.len() >= cap {
                break;
            }
            supply += density * streams[i].unread_ms(order) as f64;
            out.push(i);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
    struct Key(i64, u32);

    impl TimedKey for Key {
        fn ts_ms(&self) -> i64 {
            self.0
        }
    }

    fn shape(span: (i64, i64), arrival: Arrival) -> StreamShape {
        StreamShape { span, arrival }
    }

    #[test]
    fn consecutive_buckets_are_opened_one_after_another() {
        let shapes = vec![
            shape((0, 100), Arrival::InOrder),
            shape((100, 200), Arrival::InOrder),
        ];
        let mut merge: BoundedMerge<Key, i64> =
            BoundedMerge::new(shapes, Order::Ascending, 3, None);
        let Step::Read(asks) = merge.step(8) else {
            panic!("reads first")
        };
        assert_eq!(
            asks,
            [PageAsk {
                stream: 0,
                limit: Some(4),
                span: (0, 100),
            }]
        );
        merge.deliver(0, (0..4).map(|t| (Key(t, 0), t)), Some(3), false);
        assert_eq!(
            merge.step(8),
            Step::Done {
                items: vec![0, 1, 2],
                more: true
            }
        );
    }

    #[test]
    fn overlapping_streams_share_the_need_plus_a_quarter() {
        let shapes = vec![shape((0, 100), Arrival::InOrder); 8];
        let mut merge: BoundedMerge<Key, i64> =
            BoundedMerge::new(shapes, Order::Ascending, 99, None);
        let Step::Read(asks) = merge.step(32) else {
            panic!("reads first")
        };
        assert_eq!(asks.len(), 8);
        // need 100, competing 8: ceil(125 / 8) = 16 each.
        assert!(asks.iter().all(|a| a.limit == Some(16)), "{asks:?}");
    }

    /// Reads `streams` (each in time order) through a merge of `limit`; returns the
    /// items, the rounds and the items read.
    fn drive(
        streams: &[Vec<Key>],
        span: (i64, i64),
        arrival: Arrival,
        limit: usize,
    ) -> (Vec<i64>, usize, usize) {
        let (items, rounds, read, _) = drive_hinted(streams, span, arrival, limit, None);
        (items, rounds, read)
    }

    /// [`drive`] with a density hint; also returns the density the read saw.
    fn drive_hinted(
        streams: &[Vec<Key>],
        span: (i64, i64),
        arrival: Arrival,
        limit: usize,
        hint: Option<f64>,
    ) -> (Vec<i64>, usize, usize, Option<f64>) {
        let shapes = vec![shape(span, arrival); streams.len()];
        let mut merge: BoundedMerge<Key, i64> =
            BoundedMerge::new(shapes, Order::Ascending, limit, None).with_density_hint(hint);
        let mut positions = vec![0usize; streams.len()];
        let (mut rounds, mut read) = (0, 0);
        loop {
            match merge.step(64) {
                Step::Done { items, .. } => {
                    return (items, rounds, read, merge.observed_density());
                }
                Step::Read(asks) => {
                    rounds += 1;
                    for ask in asks {
                        let (page, n) =
                            page_of(&streams[ask.stream], &mut positions[ask.stream], ask);
                        read += n;
                        let last_ts = page.last().map(|(k, _)| k.0);
                        let last = ask.limit.is_none_or(|l| n < l as usize);
                        merge.deliver(ask.stream, page, last_ts, last);
                    }
                }
            }
        }
    }

    /// The page `ask` reads of `keys` (ascending) from `position`, the way DynamoDB
    /// answers a Query whose key condition is the ask's span: at most `limit` items,
    /// with a next page whenever it stopped at the limit. Returns the page and its size.
    fn page_of(keys: &[Key], position: &mut usize, ask: PageAsk) -> (Vec<(Key, i64)>, usize) {
        let start = *position;
        let stop = keys
            .iter()
            .position(|k| k.0 >= ask.span.1)
            .unwrap_or(keys.len())
            .max(start);
        let end = ask.limit.map_or(stop, |l| (start + l as usize).min(stop));
        *position = end;
        let page = keys[start..end].iter().map(|k| (k.clone(), k.0)).collect();
        (page, end - start)
    }

    /// Every device over one hour: 32 time-indexed shards of about one item a minute
    /// each; `at(shard, i)` is the `i`-th item's gap after the one before, in ms.
    fn hour_of_shards(mut gap: impl FnMut(u32, i64) -> i64) -> Vec<Vec<Key>> {
        (0..32u32)
            .map(|s| {
                let (mut ts, mut i, mut keys) = (gap(s, 0), 0, Vec::new());
                while ts < 3_600_000 {
                    keys.push(Key(ts, s));
                    i += 1;
                    ts += gap(s, i).max(1);
                }
                keys
            })
            .collect()
    }

    #[test]
    fn refills_reach_the_horizon_in_few_rounds() {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut uniform = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let cases = [
            // A minute apart, each shard at its own second (devices on a fixed
            // schedule) ...
            (
                "regular",
                hour_of_shards(|s, i| if i == 0 { i64::from(s) * 1_873 } else { 60_000 }),
                6,
            ),
            // ... and exponential gaps of a minute on average (a Poisson stream).
            (
                "poisson",
                hour_of_shards(|_, _| (-(1.0 - uniform()).ln() * 60_000.0) as i64),
                16,
            ),
        ];
        for (name, streams, before) in cases {
            let (items, rounds, read) = drive(&streams, (0, 3_600_000), Arrival::TimeIndexed, 100);
            let mut all: Vec<i64> = streams.iter().flatten().map(|k| k.0).collect();
            all.sort_unstable();
            assert_eq!(items, all[..100], "{name}");
            // Shares alone (ceil(1.25 x need / 32) items a page) took `before` rounds
            // and read 133 and 154 items.
            assert!(
                rounds <= 4,
                "{name}: {rounds} rounds (shares alone: {before})"
            );
            assert!(read <= 160, "{name}: {read} items read for 100");
        }
    }

    /// 64 devices hashed over 32 time-indexed shards (1 to 5 devices a shard, 2 with
    /// none), each writing every 2 minutes for an hour at `phase(device)` into the
    /// period.
    fn fleet_hour(phase: impl Fn(u32) -> i64) -> Vec<Vec<Key>> {
        let n = std::num::NonZeroU32::new(32).expect("32 is not zero");
        let mut streams: Vec<Vec<Key>> = vec![Vec::new(); 32];
        for d in 0..64u32 {
            let shard = crate::hash::shard_index(&format!("dev-{d:05}"), n) as usize;
            for i in 0..30 {
                streams[shard].push(Key(i * 120_000 + phase(d), d));
            }
        }
        for keys in &mut streams {
            keys.sort();
        }
        streams
    }

    #[test]
    fn a_fleet_read_takes_two_rounds() {
        let cases = [
            // Every device in the same 64 ms of each period (a fleet on one clock):
            // bursts, which a density averaged over time does not foresee ...
            ("in step", fleet_hour(i64::from)),
            // ... and each device at its own phase.
            (
                "own phases",
                fleet_hour(|d| (crate::hash::stable_hash(&format!("phase-{d}")) % 120_000) as i64),
            ),
        ];
        for (name, streams) in cases {
            let (items, rounds, read) = drive(&streams, (0, 3_600_000), Arrival::TimeIndexed, 100);
            let mut all: Vec<i64> = streams.iter().flatten().map(|k| k.0).collect();
            all.sort_unstable();
            assert_eq!(items, all[..100], "{name}");
            // One round to learn the densities, one to read every shard up to where
            // the answer is expected to end; before pages ended there, "in step" took
            // 5 rounds and read 157 items.
            assert_eq!(rounds, 2, "{name}");
            assert!(read <= 160, "{name}: {read} items read for 100");
        }
    }

    #[test]
    fn a_fleet_read_planned_by_an_earlier_reads_density_takes_one_round() {
        let cases = [
            ("in step", fleet_hour(i64::from)),
            (
                "own phases",
                fleet_hour(|d| (crate::hash::stable_hash(&format!("phase-{d}")) % 120_000) as i64),
            ),
        ];
        for (name, streams) in cases {
            let mut all: Vec<i64> = streams.iter().flatten().map(|k| k.0).collect();
            all.sort_unstable();
            let span = (0, 3_600_000);
            let (_, _, _, seen) = drive_hinted(&streams, span, Arrival::TimeIndexed, 100, None);
            assert!(seen.is_some(), "{name}: the first read shows a density");
            let (items, rounds, read, _) =
                drive_hinted(&streams, span, Arrival::TimeIndexed, 100, seen);
            assert_eq!(items, all[..100], "{name}");
            assert_eq!(rounds, 1, "{name}");
            assert!(read <= 130, "{name}: {read} items read for 100");
            // A hint a hundred times off either way still gives the answer. Too high,
            // it costs rounds: pages end early, and a burst read over a few
            // milliseconds shows a density far above the average.
            for factor in [0.01, 100.0] {
                let hint = seen.map(|d| d * factor);
                let (items, _, _, _) =
                    drive_hinted(&streams, span, Arrival::TimeIndexed, 100, hint);
                assert_eq!(items, all[..100], "{name} x {factor}");
            }
        }
    }

    #[test]
    fn an_unordered_stream_is_read_whole_then_sorted() {
        let shapes = vec![shape((0, 100), Arrival::Unordered)];
        let mut merge: BoundedMerge<Key, i64> =
            BoundedMerge::new(shapes, Order::Descending, 10, None);
        let Step::Read(asks) = merge.step(4) else {
            panic!("reads first")
        };
        assert_eq!(asks[0].limit, None);
        merge.deliver(0, [(Key(5, 0), 5), (Key(50, 0), 50)], None, false);
        let Step::Read(again) = merge.step(4) else {
            panic!("the rest of the stream first")
        };
        assert_eq!(again[0].stream, 0);
        merge.deliver(0, [(Key(7, 0), 7), (Key(500, 0), 500)], None, true);
        assert_eq!(
            merge.step(4),
            Step::Done {
                items: vec![50, 7, 5],
                more: false
            }
        );
    }

    #[test]
    fn ties_at_a_time_indexed_pages_end_wait_for_the_next_page() {
        let shapes = vec![
            shape((0, 100), Arrival::TimeIndexed),
            shape((0, 100), Arrival::InOrder),
        ];
        let mut merge: BoundedMerge<Key, u32> =
            BoundedMerge::new(shapes, Order::Ascending, 10, None);
        let Step::Read(_) = merge.step(4) else {
            panic!("reads first")
        };
        // The index page ends at ts 5 with (5, 9); its tie (5, 1) is on the next page.
        merge.deliver(0, [(Key(1, 0), 10), (Key(5, 9), 59)], Some(5), false);
        merge.deliver(1, [(Key(9, 0), 90)], Some(9), true);
        let Step::Read(asks) = merge.step(4) else {
            panic!("the tie at 5 may still come")
        };
        assert_eq!(asks.iter().map(|a| a.stream).collect::<Vec<_>>(), [0]);
        merge.deliver(0, [(Key(5, 1), 51)], Some(5), true);
        assert_eq!(
            merge.step(4),
            Step::Done {
                items: vec![10, 51, 59, 90],
                more: false
            }
        );
    }

    /// Delivers each stream whole on its first ask; returns every item emitted.
    fn drive_whole(merge: &mut BoundedMerge<Key, i64>, streams: &[Vec<Key>]) -> (Vec<i64>, bool) {
        let mut out = Vec::new();
        loop {
            match merge.step(8) {
                Step::Done { items, more } => {
                    out.extend(items);
                    return (out, more);
                }
                Step::Read(asks) => {
                    out.extend(merge.take_emitted());
                    for ask in asks {
                        let page = streams[ask.stream].iter().map(|k| (k.clone(), k.0));
                        merge.deliver(ask.stream, page, None, true);
                    }
                }
            }
        }
    }

    #[test]
    fn a_key_in_two_streams_is_emitted_once() {
        for order in [Order::Ascending, Order::Descending] {
            let keys = |ts: &[i64]| {
                let mut v: Vec<Key> = ts.iter().map(|&t| Key(t, 0)).collect();
                v.sort_by(|a, b| order.cmp(a, b));
                v
            };
            let streams = [keys(&[1, 3, 5]), keys(&[3, 4, 5]), keys(&[5])];
            let shapes = vec![shape((0, 10), Arrival::InOrder); 3];
            let mut merge: BoundedMerge<Key, i64> = BoundedMerge::new(shapes, order, 10, None);
            let (items, more) = drive_whole(&mut merge, &streams);
            let mut expected = vec![1, 3, 4, 5];
            if order == Order::Descending {
                expected.reverse();
            }
            assert_eq!((items, more), (expected, false), "{order:?}");
            assert_eq!(merge.duplicates(), 3);
        }
    }

    #[test]
    fn a_copy_of_the_last_item_is_not_a_next_page() {
        let streams = [vec![Key(1, 0), Key(2, 0)], vec![Key(2, 0)]];
        let shapes = vec![shape((0, 10), Arrival::InOrder); 2];
        let mut merge: BoundedMerge<Key, i64> =
            BoundedMerge::new(shapes, Order::Ascending, 2, None);
        assert_eq!(drive_whole(&mut merge, &streams), (vec![1, 2], false));
    }

    #[test]
    fn a_windowed_merge_emits_everything_in_pages_of_about_the_window() {
        // Eight overlapping streams of 50 items each, every tenth also in the next one.
        let mut streams: Vec<Vec<Key>> = (0..8u32)
            .map(|s| (0..50).map(|i| Key(i * 8 + i64::from(s), 0)).collect())
            .collect();
        let copies: Vec<Vec<Key>> = streams
            .iter()
            .map(|keys| keys.iter().step_by(10).cloned().collect())
            .collect();
        for (s, copies) in copies.into_iter().enumerate() {
            let next = &mut streams[(s + 1) % 8];
            next.extend(copies);
            next.sort();
        }
        let shapes = vec![shape((0, 400), Arrival::InOrder); 8];
        let mut merge: BoundedMerge<Key, i64> =
            BoundedMerge::windowed(shapes, Order::Ascending, 16, None);
        let mut positions = [0usize; 8];
        let mut out = Vec::new();
        loop {
            match merge.step(8) {
                Step::Done { items, more } => {
                    assert!(!more);
                    out.extend(items);
                    break;
                }
                Step::Read(asks) => {
                    out.extend(merge.take_emitted());
                    for ask in asks {
                        let limit = ask.limit.expect("ordered streams get a Limit");
                        assert!(limit <= 16, "{ask:?}");
                        let keys = &streams[ask.stream];
                        let start = positions[ask.stream];
                        let end = (start + limit as usize).min(keys.len());
                        positions[ask.stream] = end;
                        let page = keys[start..end].iter().map(|k| (k.clone(), k.0));
                        merge.deliver(ask.stream, page, None, end == keys.len());
                    }
                    assert!(merge.buffered() <= 8 * 16, "{}", merge.buffered());
                }
            }
        }
        assert_eq!(out, (0..400).collect::<Vec<i64>>());
        assert_eq!(merge.duplicates(), 40);
    }

    #[test]
    fn delivery_drops_what_is_outside_the_span_or_not_after_the_resume_key() {
        let shapes = vec![shape((10, 20), Arrival::InOrder)];
        let mut merge: BoundedMerge<Key, i64> =
            BoundedMerge::new(shapes, Order::Ascending, 10, Some(Key(12, 0)));
        let _ = merge.step(1);
        merge.deliver(
            0,
            [5, 11, 12, 13, 19, 20].map(|t| (Key(t, 0), t)),
            Some(20),
            true,
        );
        assert_eq!(merge.buffered(), 2);
        assert_eq!(
            merge.step(1),
            Step::Done {
                items: vec![13, 19],
                more: false
            }
        );
    }
}
