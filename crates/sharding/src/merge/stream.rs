//! One stream of a merge: its buffer, its bound (where its next item can be at the
//! earliest), what a time-indexed or block page holds back, and how far its pages
//! reached.

use std::cmp::Ordering;
use std::collections::VecDeque;

use super::{Arrival, Order, StreamShape, TimedKey};

/// Where a stream's next item can be at the earliest, in merge order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Bound<K> {
    pub(super) ts_ms: i64,
    /// `None`: before every key at `ts_ms`. `Some(k)`: not before `k`.
    pub(super) key: Option<K>,
}

impl<K: TimedKey> Bound<K> {
    pub(super) fn of(k: &K) -> Self {
        Bound {
            ts_ms: k.ts_ms(),
            key: Some(k.clone()),
        }
    }

    pub(super) fn at(ts_ms: i64) -> Self {
        Bound { ts_ms, key: None }
    }

    pub(super) fn cmp(&self, other: &Self, order: Order) -> Ordering {
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

/// One stream of the merge and what it has read.
#[derive(Debug)]
pub(super) struct Stream<K, T> {
    pub(super) shape: StreamShape,
    pub(super) buffer: VecDeque<(K, T)>,
    pub(super) started: bool,
    pub(super) done: bool,
    pub(super) bound: Bound<K>,
    /// Items of its span it has delivered (buffered or emitted), for the density.
    pub(super) kept: u64,
    /// Time-indexed streams: items at the last page's last timestamp, held back until
    /// the next page shows every tie; block streams: readings at or after the frontier.
    pub(super) held: Vec<(K, T)>,
    /// Time-indexed streams: the last page's last timestamp, or where a page that
    /// read its whole span ended; block streams: see [`block_reach`]. Unread items are
    /// not before it.
    pub(super) frontier: Option<i64>,
    /// The span of the page asked for and not yet delivered.
    pub(super) asked: Option<(i64, i64)>,
}

impl<K: TimedKey, T> Stream<K, T> {
    pub(super) fn ordered(&self) -> bool {
        self.shape.arrival.ordered()
    }
    /// Its buffer is in merge order and may be popped from.
    fn mergeable(&self) -> bool {
        self.ordered() || self.done
    }
    pub(super) fn has_head(&self) -> bool {
        self.mergeable() && !self.buffer.is_empty()
    }
    /// Cannot take part in the merge until it reads another page.
    pub(super) fn needs_page(&self) -> bool {
        !self.done && (!self.ordered() || self.buffer.is_empty())
    }
    pub(super) fn live(&self) -> bool {
        !self.done || !self.buffer.is_empty()
    }
    /// Milliseconds of its span its pages have not reached yet.
    pub(super) fn unread_ms(&self, order: Order) -> i64 {
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
    pub(super) fn reached(&self) -> Option<i64> {
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
    pub(super) fn rebound(&mut self, last: Option<&K>) {
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
    pub(super) fn release_ties(&mut self, last_ts: Option<i64>, order: Order) {
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

    /// A block stream after a page: its readings before `reach` (in merge order; see
    /// [`block_reach`]) are released, the rest held back for the next page. Without a
    /// `reach`, the frontier stays where it was, or at the span's start, so the page's
    /// readings wait rather than be emitted ahead of an unread block. The frontier never
    /// moves back, and never before the span's start, where a block read back from
    /// before the span starts.
    pub(super) fn release_blocks(&mut self, reach: Option<i64>, order: Order) {
        let (lo, hi) = self.shape.span;
        let start = if order.descending() { hi - 1 } else { lo };
        let frontier = [reach, self.frontier, Some(start)]
            .into_iter()
            .flatten()
            .max_by(|a, b| order.cmp(a, b));
        self.release_ties(frontier, order);
    }

    /// Items per millisecond of the span its pages have covered (0 before any).
    pub(super) fn own_density(&self, order: Order) -> f64 {
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
    pub(super) fn page_span(&self, page_end: Option<i64>, order: Order) -> (i64, i64) {
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
    pub(super) fn past_end(&self, ts: i64, order: Order) -> bool {
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
    pub(super) fn clip(&mut self, end: i64, order: Order) {
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
        if self.done && self.shape.arrival.holds_back() {
            self.release_ties(None, order);
        }
        self.rebound(None);
    }
}

/// The page a stream that has reached `reached` needs to get to `cutoff`: the items
/// expected in between at `density` (items per millisecond), plus a quarter.
pub(super) fn refill(reached: i64, density: f64, cutoff: i64, order: Order) -> usize {
    let gap = if order.descending() {
        reached - cutoff
    } else {
        cutoff - reached
    };
    (density * gap.max(0) as f64 * 1.25).ceil() as usize
}

/// Where a block stream's unread readings can be at the earliest, in merge order, once
/// a page's last item starts at `s`: at `s` ascending; descending, at `s + W - 1`, the
/// latest a block starting at or before `s` can reach.
pub(super) fn block_reach(s: i64, window_ms: i64, order: Order) -> i64 {
    if order.descending() {
        s.saturating_add(window_ms.max(1) - 1)
    } else {
        s
    }
}

/// Whether two half-open spans share a millisecond.
pub(super) fn overlaps(a: (i64, i64), b: (i64, i64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}
