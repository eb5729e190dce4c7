//! One hour of every device, read device by device.
//!
//! A time-bucket key's sort key is `{device}#{ts}#{event id}` (a block's, its first
//! member's), and a device id holds only characters above `#`, so every key lists its
//! items device by device, in id order, and a merge of all the keys by sort key hands
//! over each device's items together, wherever they are stored: its own key, a
//! sub-shard of a raise, the keys of two table epochs, the bucket before (a block read
//! back). Once every key has moved past a device, its hour is complete: its copies are
//! dropped (a reading is its time and event id; of its copies, the one written last
//! stays, `sharding::written`), and its readings are handed over.
//! The read holds a page or two per key and one device's readings,
//! however many devices the hour has, where a merge in time order would hold the whole
//! hour.
//!
//! A device with more readings than the read may hold is named instead, for its
//! caller to read again in smaller ranges. One device's plan is read the same way.
//!
//! The merge order (the next device, a key's readings of it, their order, each once) is
//! `sharding::by_device`'s pure functions; this module asks for the pages.

use std::collections::VecDeque;
use std::future::Future;

use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use sharding::by_device;
use sharding::read_plan::{KeyQuery, ReadPlan};
use store::error::StoreError;
use store::item::ReadingItem;
use store::read::{LastKey, Page, PageRequest, ReadingSource};

/// Above every sort key: a sort key starts with a device id, of characters below `~`.
const SK_TOP: &str = "~";

/// One key's stream: its request, the readings of its pages not handed over yet, and
/// where its next page starts.
struct Stream {
    pk: String,
    sk_between: Option<(String, String)>,
    /// `[from, to)` ms: the readings this key answers for; others are dropped.
    span: (i64, i64),
    /// `[from, to)` ms: the sort times of the items that can hold them (a block read
    /// back), sent as a filter where the sort key does not bound the time.
    starts: (i64, i64),
    filter_time: bool,
    buffered: VecDeque<ReadingItem>,
    next: Option<LastKey>,
    /// A page is asked for and not back yet.
    asked: bool,
    done: bool,
}

impl Stream {
    fn of(q: &KeyQuery) -> Self {
        Self {
            pk: q.pk.clone(),
            sk_between: q.sk_between.clone(),
            span: q.span_ms(),
            starts: q.starts_ms(),
            filter_time: q.time_filter.is_some(),
            buffered: VecDeque::new(),
            next: None,
            asked: false,
            done: false,
        }
    }

    /// Whether the merge must wait for this stream's next page to know its next device.
    fn waiting(&self) -> bool {
        self.buffered.is_empty() && !self.done
    }
}

/// What [`ByDevice::next`] hands over.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// A device's readings in the range, each once, in time order (ties by event id).
    Readings {
        device: String,
        readings: Vec<ReadingItem>,
    },
    /// A device with more readings in the range than the read may hold: the caller's
    /// to read in smaller ranges.
    TooMany(String),
}

type PageFuture<'a> =
    std::pin::Pin<Box<dyn Future<Output = (usize, Result<Page, StoreError>)> + Send + 'a>>;

/// The read of one hour of every device, device by device (see the module's doc).
pub struct ByDevice<'a, S> {
    source: &'a S,
    streams: Vec<Stream>,
    pages: FuturesUnordered<PageFuture<'a>>,
    /// `[from, to)` ms: the readings handed over.
    range: (i64, i64),
    after: Option<String>,
    concurrency: usize,
    max_readings: usize,
    /// Readings handed over, each once.
    pub readings: u64,
}

impl<S> std::fmt::Debug for ByDevice<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByDevice")
            .field("range", &self.range)
            .field("keys", &self.streams.len())
            .field("pages_asked", &self.pages.len())
            .field("after", &self.after)
            .field("readings", &self.readings)
            .finish_non_exhaustive()
    }
}

impl<'a, S: ReadingSource> ByDevice<'a, S> {
    /// The read of `range` (`[from, to)` ms) over `plan`'s keys (a plan over every
    /// device, of time-bucket keys, or one device's), from the device after `after`
    /// when given. At most `concurrency` pages are asked for at once (each key's first
    /// at least), and at most `max_readings` of one device held.
    pub fn new(
        source: &'a S,
        plan: &ReadPlan,
        range: (i64, i64),
        after: Option<&str>,
        concurrency: usize,
        max_readings: usize,
    ) -> Self {
        Self {
            source,
            streams: plan.queries.iter().map(Stream::of).collect(),
            pages: FuturesUnordered::new(),
            range,
            after: after.map(str::to_owned),
            concurrency: concurrency.max(1),
            max_readings,
            readings: 0,
        }
    }

    /// The next device in id order; `None` once every key is read.
    pub async fn next(&mut self) -> Result<Option<Next>, StoreError> {
        self.wait_for_fronts().await?;
        let Some(device) = by_device::next_device(
            self.streams
                .iter()
                .filter_map(|s| s.buffered.front().map(|r| r.device_id.as_str())),
        )
        .map(str::to_owned) else {
            return Ok(None);
        };
        // The device's readings: every stream's front, until no stream may hold more.
        let mut readings = Vec::new();
        let mut over = false;
        loop {
            for s in &mut self.streams {
                over |= by_device::take_device(
                    &mut s.buffered,
                    &device,
                    s.span,
                    self.range,
                    self.max_readings,
                    &mut readings,
                );
            }
            if !self.streams.iter().any(Stream::waiting) {
                break;
            }
            self.wait_for_fronts().await?;
        }
        if over {
            return Ok(Some(Next::TooMany(device)));
        }
        // A reading stored twice (a redelivery, two blocks, a re-keyed copy) is one:
        // the copy written last, as every raw read answers it (`sharding::written`).
        by_device::in_order(&mut readings);
        self.readings += readings.len() as u64;
        Ok(Some(Next::Readings { device, readings }))
    }

    /// Asks for a page of each stream with nothing buffered, and one page ahead of the
    /// others while the concurrency allows, then waits until no stream is empty with
    /// pages left.
    async fn wait_for_fronts(&mut self) -> Result<(), StoreError> {
        loop {
            for i in 0..self.streams.len() {
                let s = &self.streams[i];
                let ahead = s.buffered.len() < AHEAD && self.pages.len() < self.concurrency;
                if !s.asked && !s.done && (s.waiting() || ahead) {
                    self.ask(i);
                }
            }
            if !self.streams.iter().any(Stream::waiting) {
                return Ok(());
            }
            let Some((i, page)) = self.pages.next().await else {
                return Ok(());
            };
            let page = page?;
            let s = &mut self.streams[i];
            s.asked = false;
            s.buffered.extend(page.items);
            s.done = page.last_key.is_none();
            s.next = page.last_key;
        }
    }

    fn ask(&mut self, i: usize) {
        let s = &mut self.streams[i];
        s.asked = true;
        let (from, to) = s.starts;
        let request = PageRequest {
            pk: s.pk.clone(),
            sk_between: match &self.after {
                Some(d) => Some((format!("{d}#{SK_TOP}"), SK_TOP.to_owned())),
                None => s.sk_between.clone(),
            },
            ts_ms_between: s.filter_time.then_some((from, to - 1)),
            time_index: None,
            limit: None,
            ascending: true,
            start_after: s.next.clone(),
            consistent: true,
        };
        let source = self.source;
        self.pages.push(Box::pin(
            async move { (i, source.query_page(&request).await) },
        ));
    }
}

/// A stream with this many readings buffered asks for no page ahead.
const AHEAD: usize = 1_000;
