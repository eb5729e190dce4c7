//! [`BoundedMerge`]: the merge's state, the steps that say which pages to read, the
//! deliveries of those pages, and the emission of items in merge order.

use std::cmp::Ordering;
use std::collections::VecDeque;

use super::estimate::Round;
use super::stream::{Bound, Stream, block_reach};
use super::{Arrival, Order, PageAsk, Step, StreamShape, TimedKey};
use crate::written::{Written, keep_last};

/// The merge of one read: streams, what was emitted, and the limit.
#[derive(Debug)]
pub struct BoundedMerge<K, T> {
    pub(super) streams: Vec<Stream<K, T>>,
    pub(super) order: Order,
    pub(super) limit: usize,
    /// Most items the reads of one round are planned for (see
    /// [`BoundedMerge::windowed`]); `usize::MAX` for a bounded merge.
    pub(super) window: usize,
    after: Option<K>,
    /// Emitted and not yet taken ([`BoundedMerge::take_emitted`]).
    out: Vec<T>,
    /// Items emitted so far, taken or not.
    pub(super) emitted: usize,
    /// The key last emitted: an equal key popped next is the same item stored twice.
    pub(super) last: Option<K>,
    /// Items dropped as copies of the one emitted before them.
    duplicates: u64,
    /// The density to plan by before any stream has shown its own (see "A density from
    /// an earlier read").
    pub(super) hint: Option<f64>,
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

    /// A page of stream `stream`, in arrival order with each item's key; `last_ts` is
    /// the page's last timestamp (its last item's, or where the read stopped), and
    /// `last_page` whether the read found nothing more inside the ask's
    /// [`PageAsk::span`] (no next page). Whether the stream is then done follows from
    /// that span: a page that ended short of the stream's end leaves it complete up to
    /// there.
    ///
    /// For an [`Arrival::Blocks`] stream the page is its items' readings, expanded, in
    /// any order, and `last_ts` the first-member timestamp of its last item (or of where
    /// the read stopped), ascending or descending; `None` holds every reading of the
    /// page back until a later page gives one, or the stream ends.
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
                // A stream read in time order has nothing more inside its span after this.
                past_end |= s.shape.arrival.time_ordered() && s.past_end(ts, order);
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
        // A block stream has nothing more inside its span once its unread readings
        // all lie past the end.
        let reach = match s.shape.arrival {
            Arrival::Blocks { window_ms } => last_ts.map(|t| block_reach(t, window_ms, order)),
            _ => None,
        };
        past_end |= reach.is_some_and(|r| s.past_end(r, order));
        s.done = past_end || (last_page && !short_of_end);
        let last_ts = match (last_page && !s.done, order) {
            (true, Order::Ascending) => Some(asked.1),
            (true, Order::Descending) => Some(asked.0 - 1),
            (false, _) => last_ts,
        };
        match s.shape.arrival {
            Arrival::TimeIndexed => s.release_ties(last_ts, order),
            Arrival::Blocks { .. } => s.release_blocks(reach, order),
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
    pub(super) fn min_bound(&self) -> Option<usize> {
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
}

/// What emits items: a copy is compared with the one it follows ([`Written`]).
impl<K: TimedKey, T: Written> BoundedMerge<K, T> {
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
        if let Some(c) = cutoff {
            let dry = self.running_dry(&fetch, c, concurrency);
            fetch.extend(dry);
        }
        let ahead = self.read_ahead(&fetch, remaining, density, concurrency);
        fetch.extend(ahead);
        let round = Round {
            remaining,
            density,
            cutoff,
            // Where the answer is expected to end, with a quarter to spare: a
            // time-indexed page reads up to there and no further.
            page_end: density.and_then(|(d, _)| self.cutoff(remaining + remaining / 4, d)),
        };
        let asks: Vec<PageAsk> = fetch
            .iter()
            .map(|&i| PageAsk {
                stream: i,
                limit: self.page_limit(i, &fetch, &round),
                span: self.streams[i].page_span(round.page_end, order),
            })
            .collect();
        for ask in &asks {
            self.streams[ask.stream].asked = Some(ask.span);
        }
        Step::Read(asks)
    }

    /// Emits heads in merge order while no stream's bound precedes them, dropping a
    /// head equal to the key just emitted (a second copy of one item) and keeping of
    /// the two the copy written last ([`keep_last`]). Returns the
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
                // Every copy of a key is popped right after the first, in this call
                // (see "Items stored twice"), so the item emitted last is its copy.
                if let Some(kept) = self.out.last_mut() {
                    let mut item = item;
                    keep_last(kept, &mut item);
                }
                continue;
            }
            self.out.push(item);
            self.emitted += 1;
            self.last = Some(key);
        }
        (Vec::new(), false)
    }
}
