//! K-way merge of sorted streams with a limit and a resumable position.
//!
//! Every stream must be sorted by its merge key in the merge order, and keys must be
//! unique across all streams (for readings: timestamp, then entity and event id). An item
//! whose key equals one already emitted is taken for the same item and dropped, which is
//! also what makes resuming after a [`Position`] exact.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

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
}

/// The last merge key emitted; a later call resumes strictly after it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Position<K> {
    /// Key of the last emitted item.
    pub last: K,
}

/// Why the merger refused a push.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    /// No such stream.
    #[error("stream {stream} does not exist ({streams} streams)")]
    NoSuchStream {
        /// The index given.
        stream: usize,
        /// Number of streams.
        streams: usize,
    },
    /// Items pushed after the stream was marked exhausted.
    #[error("stream {stream} was already marked exhausted")]
    AfterEnd {
        /// The stream.
        stream: usize,
    },
    /// A stream whose items are not strictly in merge order.
    #[error("stream {stream} is not sorted in the merge order")]
    Unsorted {
        /// The stream.
        stream: usize,
    },
}

/// What [`Merger::pop`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next<T> {
    /// The next item in merge order.
    Item(T),
    /// These streams have no buffered item and are not exhausted: fetch their next page
    /// (or mark them exhausted), then pop again.
    NeedMore(Vec<usize>),
    /// Every stream is exhausted and drained.
    Done,
}

struct HeapEntry<K> {
    key: K,
    stream: usize,
    order: Order,
}

impl<K: Ord> PartialEq for HeapEntry<K> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl<K: Ord> Eq for HeapEntry<K> {}
impl<K: Ord> PartialOrd for HeapEntry<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<K: Ord> Ord for HeapEntry<K> {
    /// The entry to emit next is the heap's maximum; ties go to the lower stream index.
    fn cmp(&self, other: &Self) -> Ordering {
        let by_key = match self.order {
            Order::Ascending => other.key.cmp(&self.key),
            Order::Descending => self.key.cmp(&other.key),
        };
        by_key.then_with(|| other.stream.cmp(&self.stream))
    }
}

struct StreamState<T, K> {
    buffer: VecDeque<T>,
    /// Key of the last item accepted into the buffer, for the sortedness check.
    last_pushed: Option<K>,
    exhausted: bool,
    /// Whether the buffer's head is in the heap.
    queued: bool,
}

/// Incremental k-way merge for readers that fetch pages per stream.
///
/// Push each stream's items as pages arrive, mark a stream exhausted after its last page,
/// and [`pop`](Merger::pop): an item is emitted only when every non-exhausted stream has a
/// buffered head, so nothing that sorts earlier can still arrive.
pub struct Merger<T, K, F> {
    streams: Vec<StreamState<T, K>>,
    heap: BinaryHeap<HeapEntry<K>>,
    key_fn: F,
    order: Order,
    last: Option<K>,
    /// Number of streams neither exhausted nor buffered (a pop must wait for them).
    waiting: usize,
}

impl<T, K, F> std::fmt::Debug for Merger<T, K, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Merger")
            .field("streams", &self.streams.len())
            .field("queued", &self.heap.len())
            .field("order", &self.order)
            .finish_non_exhaustive()
    }
}

impl<T, K, F> Merger<T, K, F>
where
    K: Ord + Clone,
    F: Fn(&T) -> K,
{
    /// A merger of `streams` streams, resuming strictly after `after` if given.
    pub fn new(streams: usize, key_fn: F, order: Order, after: Option<Position<K>>) -> Self {
        let count = streams;
        let streams = (0..count)
            .map(|_| StreamState {
                buffer: VecDeque::new(),
                last_pushed: None,
                exhausted: false,
                queued: false,
            })
            .collect();
        Merger {
            streams,
            heap: BinaryHeap::new(),
            key_fn,
            order,
            last: after.map(|p| p.last),
            waiting: count,
        }
    }

    fn state(&mut self, stream: usize) -> Result<&mut StreamState<T, K>, MergeError> {
        let streams = self.streams.len();
        self.streams
            .get_mut(stream)
            .ok_or(MergeError::NoSuchStream { stream, streams })
    }

    /// Appends a page of stream `stream`. Items at or before the resume position are
    /// skipped; items must continue the stream in strictly increasing merge order.
    pub fn push<I: IntoIterator<Item = T>>(
        &mut self,
        stream: usize,
        items: I,
    ) -> Result<(), MergeError> {
        let order = self.order;
        let resume = self.last.clone();
        let key_fn = &self.key_fn;
        let streams = self.streams.len();
        let state = self
            .streams
            .get_mut(stream)
            .ok_or(MergeError::NoSuchStream { stream, streams })?;
        if state.exhausted {
            return Err(MergeError::AfterEnd { stream });
        }
        let was_waiting = state.buffer.is_empty();
        for item in items {
            let key = key_fn(&item);
            if let Some(prev) = &state.last_pushed
                && !order.before(prev, &key)
            {
                return Err(MergeError::Unsorted { stream });
            }
            state.last_pushed = Some(key.clone());
            if resume.as_ref().is_some_and(|r| !order.before(r, &key)) {
                continue;
            }
            state.buffer.push_back(item);
        }
        if was_waiting && !state.buffer.is_empty() {
            self.waiting -= 1;
        }
        self.enqueue_head(stream);
        Ok(())
    }

    /// Marks stream `stream` as having no more pages.
    pub fn mark_exhausted(&mut self, stream: usize) -> Result<(), MergeError> {
        let state = self.state(stream)?;
        let was_waiting = !state.exhausted && state.buffer.is_empty();
        state.exhausted = true;
        if was_waiting {
            self.waiting -= 1;
        }
        Ok(())
    }

    fn enqueue_head(&mut self, stream: usize) {
        let state = &mut self.streams[stream];
        if state.queued {
            return;
        }
        if let Some(head) = state.buffer.front() {
            state.queued = true;
            let key = (self.key_fn)(head);
            self.heap.push(HeapEntry {
                key,
                stream,
                order: self.order,
            });
        }
    }

    /// Streams that must deliver a page (or be marked exhausted) before the next pop.
    #[must_use]
    pub fn needs_more(&self) -> Vec<usize> {
        self.streams
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.exhausted && s.buffer.is_empty())
            .map(|(i, _)| i)
            .collect()
    }

    /// The next item in merge order, or which streams to fetch, or the end.
    pub fn pop(&mut self) -> Next<T> {
        loop {
            if self.waiting > 0 {
                return Next::NeedMore(self.needs_more());
            }
            let Some(entry) = self.heap.pop() else {
                return Next::Done;
            };
            let state = &mut self.streams[entry.stream];
            state.queued = false;
            let Some(item) = state.buffer.pop_front() else {
                continue;
            };
            if state.buffer.is_empty() && !state.exhausted {
                self.waiting += 1;
            }
            self.enqueue_head(entry.stream);
            // A key equal to the last one emitted is the same item seen twice.
            if self
                .last
                .as_ref()
                .is_some_and(|l| !self.order.before(l, &entry.key))
            {
                continue;
            }
            self.last = Some(entry.key);
            return Next::Item(item);
        }
    }

    /// Position after the last emitted item (or the resume position if none was emitted).
    #[must_use]
    pub fn position(&self) -> Option<Position<K>> {
        self.last.clone().map(|last| Position { last })
    }

    /// Whether anything is left: a buffered item or a stream not yet exhausted.
    #[must_use]
    pub fn has_more(&self) -> bool {
        self.streams
            .iter()
            .any(|s| !s.exhausted || !s.buffer.is_empty())
    }
}

/// Result of [`merge`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged<T, K> {
    /// Up to `limit` items in merge order.
    pub items: Vec<T>,
    /// Where to resume, when the limit stopped the merge before the end.
    pub next: Option<Position<K>>,
}

/// Merges fully loaded sorted streams, emitting at most `limit` items strictly after
/// `after`. `next` is set when items remain.
pub fn merge<T, K, F, S>(
    streams: Vec<S>,
    key_fn: F,
    order: Order,
    limit: Option<usize>,
    after: Option<Position<K>>,
) -> Result<Merged<T, K>, MergeError>
where
    K: Ord + Clone,
    F: Fn(&T) -> K,
    S: IntoIterator<Item = T>,
{
    let mut merger = Merger::new(streams.len(), key_fn, order, after);
    for (i, stream) in streams.into_iter().enumerate() {
        merger.push(i, stream)?;
        merger.mark_exhausted(i)?;
    }
    let limit = limit.unwrap_or(usize::MAX);
    let mut items = Vec::new();
    while items.len() < limit {
        match merger.pop() {
            Next::Item(item) => items.push(item),
            Next::Done | Next::NeedMore(_) => return Ok(Merged { items, next: None }),
        }
    }
    // Stopped by the limit: report a position only if something is left after it.
    let next = if merger.streams.iter().any(|s| !s.buffer.is_empty()) {
        merger.position()
    } else {
        None
    };
    Ok(Merged { items, next })
}
