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
//! Where the table's layout has slabs, the hour's one-reading devices' readings are in
//! its slab groups' run partitions (`r#{group}#{span}`, docs/design-slabs.md), each a
//! stream of the merge beside the hour's own keys ([`ByDevice::with_runs`]). A run
//! partition lists its items by their first device, and an item holds the devices from
//! its first on, so its readings are held until no later item can hold their device
//! (`sharding::by_device::release_runs`), then handed over in device order like any
//! key's. A reading held by a run and by its device's own item is one, as any copy is.
//!
//! The merge order (the next device, a key's readings of it, their order, each once) is
//! `sharding::by_device`'s pure functions; this module asks for the pages.

use std::collections::VecDeque;
use std::future::Future;

use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use sharding::by_device;
use sharding::epoch::TableHistory;
use sharding::read_plan::{KeyQuery, ReadPlan};
use sharding::slab::{run_page_bound, run_sk_upper};
use sharding::time::TimeRange;
use store::error::StoreError;
use store::item::ReadingItem;
use store::read::{ItemsPage, ItemsRequest, LastKey, Page, PageRequest, ReadingSource};

/// Above every sort key: a sort key starts with a device id, of characters below `~`.
const SK_TOP: &str = "~";

/// A run partition the merge reads: `r#{group}#{span}`, in sort-key order, every item
/// or those up to a device's own ([`run_partitions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPartition {
    pub pk: String,
    /// `SK <= sk_at_most`: a device's read needs no item of a later first device.
    pub sk_at_most: Option<String>,
}

/// The run partitions of `hour` (epoch ms) under `table`: of every slab group of each
/// layout with slabs in force over the hour, or, for `device`'s read, of its group, up
/// to its own items; a partition each span of the layout's `run_minutes` in the hour. None where no layout over the hour has slabs.
pub fn run_partitions(
    table: &TableHistory,
    hour: TimeRange,
    device: Option<&str>,
) -> Vec<RunPartition> {
    let mut runs: Vec<RunPartition> = Vec::new();
    for (piece, layout) in table.spans(hour) {
        let Some(slabs) = layout.slabs else { continue };
        let groups: Vec<u32> = match device {
            Some(device) => vec![slabs.group(device)],
            None => (0..slabs.groups.get()).collect(),
        };
        for span in slabs.run_spans(piece) {
            for &group in &groups {
                let run = RunPartition {
                    pk: slabs.run_pk(group, span),
                    sk_at_most: device.map(run_sk_upper),
                };
                if !runs.contains(&run) {
                    runs.push(run);
                }
            }
        }
    }
    runs
}

/// How a stream reads its partition.
enum Source {
    /// A key of the read plan: pages of readings, blocks expanded.
    Key {
        sk_between: Option<(String, String)>,
        /// `[from, to)` ms: the sort times of the items that can hold the key's
        /// readings (a block read back), sent as a filter where the sort key does not
        /// bound the time.
        starts: (i64, i64),
        filter_time: bool,
    },
    /// A run partition: pages of items, each expanded, its readings `held` until no
    /// later item can hold their device.
    Runs {
        sk_at_most: Option<String>,
        held: Vec<ReadingItem>,
    },
}

/// One key's stream: how it is read, the readings of its pages not handed over yet,
/// and where its next page starts.
struct Stream {
    pk: String,
    source: Source,
    /// `[from, to)` ms: the readings this key answers for; others are dropped.
    span: (i64, i64),
    buffered: VecDeque<ReadingItem>,
    next: Option<LastKey>,
    /// A page is asked for and not back yet.
    asked: bool,
    done: bool,
}

impl Stream {
    fn of(q: &KeyQuery) -> Self {
        Self::new(
            q.pk.clone(),
            Source::Key {
                sk_between: q.sk_between.clone(),
                starts: q.starts_ms(),
                filter_time: q.time_filter.is_some(),
            },
            q.span_ms(),
        )
    }

    fn of_runs(run: &RunPartition, span: (i64, i64)) -> Self {
        Self::new(
            run.pk.clone(),
            Source::Runs {
                sk_at_most: run.sk_at_most.clone(),
                held: Vec::new(),
            },
            span,
        )
    }

    fn new(pk: String, source: Source, span: (i64, i64)) -> Self {
        Self {
            pk,
            source,
            span,
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

    /// Takes a page of readings.
    fn take_page(&mut self, page: Page) {
        self.buffered.extend(page.items);
        self.done = page.last_key.is_none();
        self.next = page.last_key;
    }

    /// Takes a page of a run partition: its readings of devices after `after`, each
    /// released once no later item can hold its device.
    fn take_items(&mut self, page: ItemsPage, after: Option<&str>) -> Result<(), StoreError> {
        let Source::Runs { held, .. } = &mut self.source else {
            return Err(StoreError::Malformed(
                "a page of items for a key read as readings".to_owned(),
            ));
        };
        let mut readings = Vec::new();
        for stored in page.items {
            readings.extend(
                store::block::expand(stored.item)?
                    .into_iter()
                    .filter(|r| after.is_none_or(|a| r.device_id.as_str() > a)),
            );
        }
        let bound = page.last_key.as_ref().map(|key| run_page_bound(&key.sk));
        by_device::release_runs(held, readings, bound, &mut self.buffered);
        self.done = page.last_key.is_none();
        self.next = page.last_key.map(|key| LastKey { key, ts_ms: None });
        Ok(())
    }
}

/// A page as it comes back: readings of a key, or items of a run partition.
enum Fetched {
    Readings(Page),
    Items(ItemsPage),
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
    std::pin::Pin<Box<dyn Future<Output = (usize, Result<Fetched, StoreError>)> + Send + 'a>>;

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

    /// The read with `runs` as streams beside the plan's keys, each answering for the
    /// read's range.
    #[must_use]
    pub fn with_runs(mut self, runs: &[RunPartition]) -> Self {
        let range = self.range;
        self.streams
            .extend(runs.iter().map(|run| Stream::of_runs(run, range)));
        self
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
            let s = &mut self.streams[i];
            s.asked = false;
            match page? {
                Fetched::Readings(page) => s.take_page(page),
                Fetched::Items(page) => s.take_items(page, self.after.as_deref())?,
            }
        }
    }

    fn ask(&mut self, i: usize) {
        let s = &mut self.streams[i];
        s.asked = true;
        let source = self.source;
        let page: PageFuture<'a> = match &s.source {
            Source::Key {
                sk_between,
                starts: (from, to),
                filter_time,
            } => {
                let request = PageRequest {
                    pk: s.pk.clone(),
                    sk_between: match &self.after {
                        Some(d) => Some((format!("{d}#{SK_TOP}"), SK_TOP.to_owned())),
                        None => sk_between.clone(),
                    },
                    ts_ms_between: filter_time.then_some((*from, to - 1)),
                    time_index: None,
                    limit: None,
                    ascending: true,
                    start_after: s.next.clone(),
                    consistent: true,
                };
                Box::pin(async move {
                    let page = source.query_page(&request).await;
                    (i, page.map(Fetched::Readings))
                })
            }
            // Every item: one whose first device is before the read's `after` can hold
            // later devices.
            Source::Runs { sk_at_most, .. } => {
                let request = ItemsRequest {
                    pk: s.pk.clone(),
                    sk_at_most: sk_at_most.clone(),
                    limit: None,
                    ascending: true,
                    start_after: s.next.as_ref().map(|last| last.key.clone()),
                    consistent: true,
                };
                Box::pin(async move {
                    let page = source.query_items(&request).await;
                    (i, page.map(Fetched::Items))
                })
            }
        };
        self.pages.push(page);
    }
}

/// A stream with this many readings buffered asks for no page ahead.
const AHEAD: usize = 1_000;
