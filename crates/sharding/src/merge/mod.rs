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
//! - [`Arrival::Blocks`]: each stored item is a block of readings whose timestamps lie
//!   in `[s, s + W)`, `s` its first member's; pages come in order of `s` and the caller
//!   delivers each page's readings, expanded, in any order. After a page whose last item
//!   starts at `s`, every unread reading is at or after `s` (ascending) or before
//!   `s + W` (descending): the time index's rule with "ties at `t`" widened. So the
//!   page's readings at or after `s` (before `s + W`) are held back until the next page,
//!   and the bound stays before every key at `s` (at `s + W - 1`). A reading past the
//!   span's end says nothing of the next item (a block starting inside the span can end
//!   beyond it): the stream ends at its last page, or once `s` (`s + W - 1`) is past
//!   the end. Its pages read the whole span with a `Limit`, as an in-order stream's do;
//!   the caller reads back `W` before the span, and the merge drops what lies outside.
//! - [`Arrival::Unordered`]: the stream is read whole (pages without a `Limit`) when
//!   the merge first reaches it, then sorted in memory.
//!
//! Keys must be unique within a stream, except in a block stream, where one reading
//! can be stored in two items (a block and a single copy, or two blocks written before
//! and after a crash): both copies lie at or after the frontier of the page that read
//! the first, so they are held back together, sorted next to each other, and emitted
//! once, as copies in two streams are (see "Items stored twice"). Items outside a
//! stream's span, or not after the resume key, are dropped on delivery.
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
//! the last item of the page before it. Of the copies, the one written last is
//! emitted ([`crate::written::keep_last`]: a reading sent again with new values
//! replaces the old one), whatever stream or order they came in; since they come out
//! one after another, that costs no memory. Copies still count as items read where the
//! merge estimates density and which streams a round reads, which at worst costs a
//! round, never an item; the span clip counts each item once.
//!
//! # Emitting as it goes
//! [`BoundedMerge::windowed`] emits every item, with no limit, to a caller that takes
//! them after each step ([`BoundedMerge::take_emitted`]) (aggregations over a whole
//! range): its rounds are planned as if `window` items were needed, so memory stays
//! about `window` items however long the range.
//!
//! # Layout
//! - [`BoundedMerge`] (`bounded`): the merge's state, its steps and deliveries, and the
//!   emission of items in order;
//! - `estimate`: how far the read is expected to go: density, horizon, cutoff, the
//!   streams read ahead, and each page's `Limit`;
//! - `stream`: one stream's buffer, bound and pages.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

mod bounded;
mod estimate;
mod stream;
#[cfg(test)]
mod tests;

pub use bounded::BoundedMerge;

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
    /// Stored items are blocks, each holding readings whose timestamps lie in
    /// `[s, s + window_ms)` where `s` is its first member's, and come in order of `s`
    /// (a partition's sort key). The caller delivers a page's readings, expanded, in
    /// any order, and as `last_ts` the first-member timestamp `s` of the page's last
    /// item, in either order (the merge adds the window itself when descending). One
    /// reading may be in two items of the stream; it is emitted once.
    Blocks {
        /// The block window `W`, milliseconds (at least 1).
        window_ms: i64,
    },
    /// In no useful order: read whole, then sorted.
    Unordered,
}

impl Arrival {
    fn ordered(self) -> bool {
        self != Arrival::Unordered
    }

    /// Whether a page's readings come in time order, so that one past the span's end
    /// shows that nothing inside follows.
    fn time_ordered(self) -> bool {
        matches!(self, Arrival::InOrder | Arrival::TimeIndexed)
    }

    /// Whether a page holds back what the next page could still precede.
    fn holds_back(self) -> bool {
        matches!(self, Arrival::TimeIndexed | Arrival::Blocks { .. })
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
