//! Slabs and runs (`shardline-slab-v2`): the readings of many devices in one item, so a
//! fleet of devices that send one reading a message pays a fraction of a write unit a
//! reading (docs/design-slabs.md). This module holds what is pure about them: the
//! layout ([`SlabLayout`]), a device's slab group, the windows, when a window closes and
//! when its slabs expire, every key, and what a device's read of a time range reads
//! ([`plan_device`], [`RunCover`]). Items are cut and encoded by `store::slab`.
//!
//! # The two tiers
//! - A **slab** holds the readings of one batch of the ingest whose devices share a slab
//!   group and whose timestamps share a window: `PK = s#{group}#{window}` (with the
//!   group's fan-out, `s#{group}.{j}#{window}`), `SK` the digest of its members'
//!   identities, so the same members always make the same item and a batch written
//!   again overwrites its own slab. Where a layout shares slabs
//!   ([`SlabLayout::shared_slabs`]), the groups of a batch's window whose slab would fill
//!   under half an item ([`thin_groups`]) write one slab of them all instead, in the
//!   window's shared partition `s#*#{window}` ([`SlabOwner::Shared`]): a fleet that
//!   sends little a batch pays a write unit for many groups' readings, not one each.
//! - A **run** is a closed window's readings of one group, every copy once, sorted by
//!   `(device, ts, event id)` and cut into items: `PK = r#{group}#{hour}`,
//!   `SK = {first device}#{window}#{part}`, but for the window's first run, keyed by
//!   the window's marker, `SK = #{window}` (an item of no reading where the group has
//!   none in the window), so a reader knows the window holds nothing more of the group
//!   below it, and a window pays no item of its own to say so
//!   ([`SlabLayout::first_run_marks`]; under a layout without it every window gets a
//!   marker of none and its first run is keyed as any other). Runs are a pure function of the window's slabs, so a compaction run again,
//!   or two at once, writes the same items byte for byte.
//!
//! # When a window closes
//! The ingest writes a reading into a slab only when its timestamp is at most
//! [`SlabLayout::accept_secs`] behind the invocation's clock ([`SlabLayout::accepts`]);
//! an older one goes to its device's own items, as before slabs. So no invocation that
//! starts after `window end + accept` writes into the window, and none writes after its
//! deadline: the window is closed at `end + accept + ingest timeout + CLOSE_MARGIN`
//! ([`SlabLayout::closes_at`]). The margin covers the clocks of two hosts and a write
//! DynamoDB applies just after the deadline. The decision never trusts a timestamp to
//! size anything: a sender's old or future timestamp only moves its reading to its
//! device's own items, or into a window that closes later.
//!
//! # What a read of one device reads
//! For the part of a range in windows already compacted, the device's group's run
//! partition of each span, newest sort key first from the device's own, until every
//! window has shown the item holding the device's first readings in it (an item of an
//! earlier device, or the window's marker: [`RunCover`]). For the windows still open,
//! the group's slabs of each window, and the window's shared slabs, on every fan-out
//! key of each. Every item is expanded and
//! only the device's readings kept; a reading held twice (in two slabs, a slab and its
//! own item) is answered once, by `crate::written::keep_last`.

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroU32;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::hash::stable_hash;
use crate::time::{Bucket, TimeRange, Timestamp};

/// The version of the slab format, of its keys and of its group function.
pub const SLAB_VERSION: &str = "shardline-slab-v2";

/// What every slab's partition key starts with.
pub const SLAB_PREFIX: &str = "s#";

/// What every run's partition key starts with.
pub const RUN_PREFIX: &str = "r#";

/// What a window's marker sort key starts with: `#` sorts below every character of an id,
/// so the marker is the first item of its partition and below every device's runs.
pub const MARKER_PREFIX: char = '#';

/// How long after the ingest's deadline a write can still land, and how far two hosts'
/// clocks may disagree: the part of [`SlabLayout::closes_at`] no setting controls.
pub const CLOSE_MARGIN: Duration = Duration::from_secs(30);

/// The slab groups a new layout gets (`SLAB_GROUPS`).
pub const DEFAULT_GROUPS: u32 = 8;
/// A window of one minute (`SLAB_WINDOW_MINUTES`).
pub const DEFAULT_WINDOW_MINUTES: u32 = 1;
/// A run partition of 15 minutes (`SLAB_RUN_MINUTES`): a device's read of a few
/// windows passes the items of the partition's other windows whose first devices fall
/// between its item and itself, so a shorter partition passes fewer; a read of an hour
/// reads four partitions, a Query each.
pub const DEFAULT_RUN_MINUTES: u32 = 15;
/// The run partition of a layout stored before partitions had their own span: an hour.
const STORED_RUN_MINUTES: u32 = 60;
/// Readings at most 30 s old go to slabs (`SLAB_ACCEPT_SECS`): a reading reaches the
/// ingest a batching window and a few seconds after it is sent, and every second of
/// acceptance keeps each window open a second longer.
pub const DEFAULT_ACCEPT_SECS: u32 = 30;
/// Slabs expire two days after their window (`SLAB_EXPIRY_HOURS`).
pub const DEFAULT_EXPIRY_HOURS: u32 = 48;
/// A slab or run item of at most one write unit (1 KB), packed (`store::slab`): a
/// device's read of runs passes the items of other devices between its own, so small
/// items keep it small, and an item cut to its encoded size wastes little of its last
/// write unit, so a larger one writes no cheaper (docs/design-slabs.md).
pub const DEFAULT_MAX_BYTES: u32 = 1024;

/// The largest item a slab or run may be, well under DynamoDB's 400 KB.
pub const MAX_ITEM_BYTES: u32 = 256 * 1024;

/// How a table's layout writes the readings of devices that would pay a write unit each
/// into slabs, and compacts them into runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SlabLayout {
    /// Slab groups: a device's slabs and runs are its group's. More groups make a
    /// device's read of its open windows read less, and each slab hold fewer readings.
    pub groups: NonZeroU32,
    /// Minutes of a window (a divisor of 60): the readings compacted together.
    pub window_minutes: u32,
    /// How old a reading may be, by the invocation's clock, to go to a slab.
    pub accept_secs: u32,
    /// Hours after its window's end that a slab expires by TTL.
    pub expiry_hours: u32,
    /// Most bytes of a slab or run item, as the writer sizes it.
    pub max_bytes: u32,
    /// Minutes of a run partition (a divisor of 60 and a multiple of `window_minutes`):
    /// the windows whose runs share a partition key. A layout stored without it has an
    /// hour's, as runs were written before.
    #[serde(default = "stored_run_minutes")]
    pub run_minutes: u32,
    /// Whether the groups of a batch's window whose slabs would each fill under half an
    /// item write one shared slab instead ([`thin_groups`]). A layout stored without it
    /// shares none, as slabs were written before.
    #[serde(default)]
    pub shared_slabs: bool,
    /// Whether a compacted window's first run is keyed as its marker, so a window of
    /// readings writes no marker of its own. A layout stored without it writes a
    /// marker of none for every window, as compaction did before, so a reader deployed
    /// before this rule never meets such a run; every reader now reads both.
    #[serde(default)]
    pub first_run_marks: bool,
}

const fn stored_run_minutes() -> u32 {
    STORED_RUN_MINUTES
}

impl Default for SlabLayout {
    fn default() -> Self {
        Self {
            groups: NonZeroU32::new(DEFAULT_GROUPS).unwrap_or(NonZeroU32::MIN),
            window_minutes: DEFAULT_WINDOW_MINUTES,
            accept_secs: DEFAULT_ACCEPT_SECS,
            expiry_hours: DEFAULT_EXPIRY_HOURS,
            max_bytes: DEFAULT_MAX_BYTES,
            run_minutes: DEFAULT_RUN_MINUTES,
            shared_slabs: true,
            first_run_marks: true,
        }
    }
}

/// Why a slab layout was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlabLayoutError {
    #[error(
        "slab window_minutes must divide an hour (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30 or 60), got {0}"
    )]
    Window(u32),
    #[error("slab accept_secs must be 1..=3600, got {0}")]
    Accept(u32),
    #[error(
        "slab expiry_hours must be at least 2 (a day or more is advised: lag must stay under half of it), got {0}"
    )]
    Expiry(u32),
    #[error("slab max_bytes must be 1024..={MAX_ITEM_BYTES}, got {0}")]
    Bytes(u32),
    #[error(
        "slab run_minutes must divide an hour and be a multiple of window_minutes ({window}), got {run}"
    )]
    Runs { run: u32, window: u32 },
}

impl SlabLayout {
    /// The layout, if its bounds are sensible.
    pub fn checked(self) -> Result<Self, SlabLayoutError> {
        if self.window_minutes == 0 || 60 % self.window_minutes != 0 {
            return Err(SlabLayoutError::Window(self.window_minutes));
        }
        if !(1..=3_600).contains(&self.accept_secs) {
            return Err(SlabLayoutError::Accept(self.accept_secs));
        }
        if self.expiry_hours < 2 {
            return Err(SlabLayoutError::Expiry(self.expiry_hours));
        }
        if !(1_024..=MAX_ITEM_BYTES).contains(&self.max_bytes) {
            return Err(SlabLayoutError::Bytes(self.max_bytes));
        }
        if self.run_minutes == 0
            || 60 % self.run_minutes != 0
            || !self.run_minutes.is_multiple_of(self.window_minutes)
        {
            return Err(SlabLayoutError::Runs {
                run: self.run_minutes,
                window: self.window_minutes,
            });
        }
        Ok(self)
    }

    /// The slab group of `device`: the high 32 bits of its stable hash, modulo the
    /// groups (the low bits choose its shard in a time-bucket layout, so a group is not
    /// a set of shards).
    #[must_use]
    pub fn group(&self, device: &str) -> u32 {
        let high = stable_hash(device) >> 32;
        // The remainder of a division by a u32 always fits a u32.
        u32::try_from(high % u64::from(self.groups.get())).unwrap_or(0)
    }

    /// The fewest items a page of a run partition asks for: as many as a strongly
    /// consistent read unit (4 KB) holds at [`Self::max_bytes`], at least 1. A Query
    /// pays its page's bytes rounded up to a read unit, so a page of fewer pays as much.
    #[must_use]
    pub fn run_page_items(&self) -> u32 {
        (4_096 / self.max_bytes.max(1)).max(1)
    }

    /// The partition key of `group`'s runs of `window`: `r#{group}#{span}`, the span of
    /// [`Self::run_minutes`] holding the window, named by its hour when it is one
    /// (`r#3#2026-06-22T01`, as every run partition was before spans), by its first
    /// minute otherwise (`r#3#2026-06-22T01:15`).
    #[must_use]
    pub fn run_pk(&self, group: u32, window: Window) -> String {
        let span = Window::holding_ms(window.start_ms(), self.run_minutes);
        let label = if self.run_minutes == 60 {
            span.hour_label()
        } else {
            span.label()
        };
        format!("{RUN_PREFIX}{group}#{label}")
    }

    /// The run partitions' spans overlapping `range`, in order: a window of each.
    pub fn run_spans(&self, range: TimeRange) -> impl Iterator<Item = Window> {
        Window::covering(range, self.run_minutes)
    }

    /// The slab partitions a reading of `group` can be in: its group's, and the shared
    /// one where the layout shares slabs.
    #[must_use]
    pub fn owners(&self, group: u32) -> Vec<SlabOwner> {
        let mut owners = vec![SlabOwner::Group(group)];
        if self.shared_slabs {
            owners.push(SlabOwner::Shared);
        }
        owners
    }

    /// The window holding `ts`.
    #[must_use]
    pub fn window(&self, ts: Timestamp) -> Window {
        Window::holding(ts, self.window_minutes)
    }

    /// Whether the ingest, at `now` (its invocation's clock), writes a reading of `ts`
    /// into a slab: when it is at most `accept_secs` old.
    #[must_use]
    pub fn accepts(&self, ts: Timestamp, now: Timestamp) -> bool {
        ts.as_millis() >= now.as_millis() - i64::from(self.accept_secs) * 1_000
    }

    /// When `window` is closed: no write into it can still land, for an ingest whose
    /// invocations end within `ingest_timeout`.
    #[must_use]
    pub fn closes_at(&self, window: Window, ingest_timeout: Duration) -> Timestamp {
        let after =
            Duration::from_secs(u64::from(self.accept_secs)) + ingest_timeout + CLOSE_MARGIN;
        window.end().saturating_add(after)
    }

    /// The first window not closed at `now`: every window before it is closed.
    #[must_use]
    pub fn first_open(&self, now: Timestamp, ingest_timeout: Duration) -> Window {
        // closes_at(w) <= now  <=>  w.end <= now - after: the window holding that
        // moment is the first one whose end is later.
        let after =
            Duration::from_secs(u64::from(self.accept_secs)) + ingest_timeout + CLOSE_MARGIN;
        let edge = now.as_millis() - i64::try_from(after.as_millis()).unwrap_or(i64::MAX);
        Window::holding_ms(edge, self.window_minutes)
    }

    /// The epoch second a slab of `window` expires at.
    #[must_use]
    pub fn expires_at(&self, window: Window) -> i64 {
        (window.end_ms() + i64::from(self.expiry_hours) * 3_600_000).div_euclid(1_000)
    }

    /// The compaction lag past which the ingest writes no more slabs (half the expiry):
    /// a slab written before it still has half its life for compaction to reach it.
    #[must_use]
    pub fn fallback_lag(&self) -> Duration {
        Duration::from_secs(u64::from(self.expiry_hours) * 3_600 / 2)
    }

    /// Whether the ingest writes slabs at `now`, when compaction has reached
    /// `compacted_to` (the start of the first window not compacted). `None`, no
    /// progress yet, writes none: the sealer's first compaction starts its progress at
    /// the first window still open, and a slab written before it would precede the
    /// progress, compacted by no one.
    #[must_use]
    pub fn writes_slabs(&self, now: Timestamp, compacted_to: Option<Timestamp>) -> bool {
        let Some(to) = compacted_to else {
            return false;
        };
        let lag_ms = now.as_millis().saturating_sub(to.as_millis());
        lag_ms < i64::try_from(self.fallback_lag().as_millis()).unwrap_or(i64::MAX)
    }
}

/// A window: `window_minutes` from a start that is a multiple of them within its hour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Window {
    start_ms: i64,
    minutes: u32,
}

impl Window {
    /// The window of `minutes` holding `ts`.
    #[must_use]
    pub fn holding(ts: Timestamp, minutes: u32) -> Self {
        Self::holding_ms(ts.as_millis(), minutes)
    }

    fn holding_ms(ms: i64, minutes: u32) -> Self {
        let len = i64::from(minutes.max(1)) * 60_000;
        Self {
            start_ms: ms - ms.rem_euclid(len),
            minutes: minutes.max(1),
        }
    }

    /// Its first millisecond.
    #[must_use]
    pub fn start(self) -> Timestamp {
        Timestamp::from_millis(self.start_ms).unwrap_or(Timestamp::MIN)
    }

    /// Its first millisecond, as epoch milliseconds.
    #[must_use]
    pub const fn start_ms(self) -> i64 {
        self.start_ms
    }

    /// The millisecond after its last.
    #[must_use]
    pub fn end(self) -> Timestamp {
        Timestamp::from_millis(self.end_ms()).unwrap_or(Timestamp::MAX)
    }

    /// The millisecond after its last, as epoch milliseconds.
    #[must_use]
    pub const fn end_ms(self) -> i64 {
        self.start_ms + self.minutes as i64 * 60_000
    }

    /// The window after it.
    #[must_use]
    pub const fn next(self) -> Self {
        Self {
            start_ms: self.end_ms(),
            minutes: self.minutes,
        }
    }

    /// Its label in keys: the minute label of its start, `2026-06-22T01:05`.
    #[must_use]
    pub fn label(self) -> String {
        Bucket::Minute.label(self.start())
    }

    /// The label of its hour, `2026-06-22T01`: a run's partition.
    #[must_use]
    pub fn hour_label(self) -> String {
        Bucket::Hour.label(self.start())
    }

    /// Its span.
    #[must_use]
    pub fn range(self) -> TimeRange {
        TimeRange::of_millis(self.start_ms, self.end_ms()).unwrap_or_else(|_| {
            TimeRange::of_millis(0, 1).expect("a range of one millisecond is valid")
        })
    }

    /// The windows of `minutes` overlapping `range`, in order.
    pub fn covering(range: TimeRange, minutes: u32) -> impl Iterator<Item = Window> {
        let (from, to) = range.as_millis();
        let mut next = Self::holding_ms(from, minutes);
        std::iter::from_fn(move || {
            (next.start_ms < to).then(|| {
                let this = next;
                next = next.next();
                this
            })
        })
    }
}

/// The entity a slab group's fan-out is kept under in the shard directory: it holds a
/// `#`, so it is never a device's id.
#[must_use]
pub fn group_entity(group: u32) -> String {
    format!("{SLAB_PREFIX}{group}")
}

/// The entity the shared slabs' fan-out is kept under, and their partition's name.
pub const SHARED_ENTITY: &str = "s#*";

/// Whose slab partition a slab is in: its members' slab group's, or, for the thin
/// groups of a batch's window, the window's shared partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SlabOwner {
    /// `s#{group}#{window}`: every member is of the group.
    Group(u32),
    /// `s#*#{window}`: the members of several groups ([`thin_groups`]).
    Shared,
}

impl SlabOwner {
    /// The entity its fan-out is kept under ([`group_entity`], [`SHARED_ENTITY`]).
    #[must_use]
    pub fn entity(self) -> String {
        match self {
            Self::Group(group) => group_entity(group),
            Self::Shared => SHARED_ENTITY.to_owned(),
        }
    }

    /// Its slab partition key of `window` on fan-out key `j` ([`slab_pk`]; the shared
    /// partition's `s#*#{window}`, `s#*.{j}#{window}`).
    #[must_use]
    pub fn pk(self, j: u32, window: Window) -> String {
        match (self, j) {
            (Self::Group(group), j) => slab_pk(group, j, window),
            (Self::Shared, 0) => format!("{SHARED_ENTITY}#{}", window.label()),
            (Self::Shared, j) => format!("{SHARED_ENTITY}.{j}#{}", window.label()),
        }
    }
}

/// Whether a group's slab of `bytes` is thin: under half of `max_bytes`.
#[must_use]
pub fn is_thin(bytes: usize, max_bytes: u32) -> bool {
    bytes < usize::try_from(max_bytes / 2).unwrap_or(usize::MAX)
}

/// The groups of one window of a batch whose readings go to the window's shared slab,
/// of `bytes`, each group's slab of the window as encoded: those whose slab would fill
/// under half of `max_bytes`, when at least two would. Each such slab pays a whole
/// write unit for a fraction of one; together they fill their items. A group whose
/// slab fills half an item or more keeps its own, so a busy fleet's device reads stay
/// its group's; a lone thin group keeps its own too, as sharing it would save nothing.
#[must_use]
pub fn thin_groups(bytes: &BTreeMap<u32, usize>, max_bytes: u32) -> BTreeSet<u32> {
    let thin: BTreeSet<u32> = bytes
        .iter()
        .filter(|&(_, &b)| is_thin(b, max_bytes))
        .map(|(&g, _)| g)
        .collect();
    if thin.len() >= 2 {
        thin
    } else {
        BTreeSet::new()
    }
}

/// A slab's partition key: its group, its fan-out key `j` (0 is the group's own key),
/// and its window.
#[must_use]
pub fn slab_pk(group: u32, j: u32, window: Window) -> String {
    match j {
        0 => format!("{SLAB_PREFIX}{group}#{}", window.label()),
        j => format!("{SLAB_PREFIX}{group}.{j}#{}", window.label()),
    }
}

/// A slab's sort key: the first 8 bytes, in hex, of the SHA-256 of its members'
/// identities in member order, each its device's length (1 byte) and bytes, its
/// `ts_ms` (8 bytes, big-endian) and its event id's length (1 byte) and bytes.
#[must_use]
pub fn slab_sk<'a>(members: impl IntoIterator<Item = (&'a str, i64, &'a str)>) -> String {
    let mut hasher = Sha256::new();
    for (device, ts_ms, event_id) in members {
        // An id is at most 128 bytes (crate::key::MAX_ID_LEN).
        hasher.update([u8::try_from(device.len()).unwrap_or(u8::MAX)]);
        hasher.update(device.as_bytes());
        hasher.update(ts_ms.to_be_bytes());
        hasher.update([u8::try_from(event_id.len()).unwrap_or(u8::MAX)]);
        hasher.update(event_id.as_bytes());
    }
    let digest = hasher.finalize();
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The fan-out key `j` (in `0..k`) a slab of sort key `sk` is written under when its
/// group's fan-out is `k`: a hash of the sort key, so the same slab (the same members)
/// always takes the same key under one fan-out, and a group's slabs spread over its `k`
/// keys.
#[must_use]
pub fn fanout_key(sk: &str, k: u32) -> u32 {
    crate::hash::shard_index(sk, NonZeroU32::new(k).unwrap_or(NonZeroU32::MIN))
}

/// A run's sort key: its first member's device, its window and its part (the run's
/// place among the window's runs of the group, from 0).
#[must_use]
pub fn run_sk(first_device: &str, window: Window, part: u32) -> String {
    format!("{first_device}#{}#{part:04}", window.label())
}

/// The sort key of a window's marker in its group's run partition.
#[must_use]
pub fn marker_sk(window: Window) -> String {
    format!("{MARKER_PREFIX}{}", window.label())
}

/// What a run partition's sort key names: a window's runs from a device on, or its
/// marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunSk<'a> {
    /// A run: its first member's device, its window's label and its part.
    Run {
        first_device: &'a str,
        window: &'a str,
        part: u32,
    },
    /// A window's marker.
    Marker { window: &'a str },
}

/// Reads a run partition's sort key, `None` for anything else.
#[must_use]
pub fn parse_run_sk(sk: &str) -> Option<RunSk<'_>> {
    if let Some(window) = sk.strip_prefix(MARKER_PREFIX) {
        return Some(RunSk::Marker { window });
    }
    let mut fields = sk.split('#');
    let (first_device, window, part) = (fields.next()?, fields.next()?, fields.next()?);
    if fields.next().is_some() || first_device.is_empty() || part.len() != 4 {
        return None;
    }
    Some(RunSk::Run {
        first_device,
        window,
        part: part.parse().ok()?,
    })
}

/// The first device a page of a run partition read in sort-key order leaves to come,
/// from the sort key of its last item `last_sk`: every later item starts at it or
/// after. A marker, or a sort key of no run, leaves every device to come (`""`).
#[must_use]
pub fn run_page_bound(last_sk: &str) -> &str {
    match parse_run_sk(last_sk) {
        Some(RunSk::Run { first_device, .. }) => first_device,
        Some(RunSk::Marker { .. }) | None => "",
    }
}

/// The upper bound of a descending read of a run partition from `device`'s runs: every
/// sort key of the device's runs, and of earlier devices', is at most it.
#[must_use]
pub fn run_sk_upper(device: &str) -> String {
    format!("{device}#{}", crate::read_plan::SK_UPPER)
}

/// One Query of a device's read: a run partition read newest sort key first from
/// `sk_upper`, until its [`RunCover`] is done, or a whole slab partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlabQuery {
    /// `PK = pk`, `SK <= sk_upper`, descending, covering `windows`; a page asks for at
    /// least `page_items` items ([`SlabLayout::run_page_items`]).
    Runs {
        pk: String,
        sk_upper: String,
        windows: Vec<Window>,
        page_items: u32,
    },
    /// `PK = pk`, every item.
    Slabs { pk: String, window: Window },
}

/// The Queries of `device`'s read of `range`, in a layout of slabs `layout`: runs for
/// the windows before `compacted_to` (the start of the first window not compacted),
/// slabs for the rest, on each fan-out key of the group's partition and, where the
/// layout shares slabs, of the window's shared one (`fanout(owner, window)`, at least
/// 1, the most the owner had in that window).
#[must_use]
pub fn plan_device(
    layout: &SlabLayout,
    device: &str,
    range: TimeRange,
    compacted_to: Timestamp,
    fanout: impl Fn(SlabOwner, Window) -> u32,
) -> Vec<SlabQuery> {
    let group = layout.group(device);
    let mut queries: Vec<SlabQuery> = Vec::new();
    for window in Window::covering(range, layout.window_minutes) {
        if window.end() <= compacted_to {
            let pk = layout.run_pk(group, window);
            match queries.last_mut() {
                Some(SlabQuery::Runs {
                    pk: last, windows, ..
                }) if *last == pk => {
                    windows.push(window);
                }
                _ => queries.push(SlabQuery::Runs {
                    pk,
                    sk_upper: run_sk_upper(device),
                    windows: vec![window],
                    page_items: layout.run_page_items(),
                }),
            }
        } else {
            for owner in layout.owners(group) {
                for j in 0..fanout(owner, window).max(1) {
                    queries.push(SlabQuery::Slabs {
                        pk: owner.pk(j, window),
                        window,
                    });
                }
            }
        }
    }
    queries
}

/// A descending read of a run partition for one device: which items hold the device's
/// readings, and when every window asked for has shown all of them.
#[derive(Debug, Clone)]
pub struct RunCover {
    device: String,
    pending: BTreeSet<String>,
}

/// What [`RunCover::take`] says of an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// It can hold the device's readings: expand it and keep the device's.
    Keep,
    /// It cannot (another window, a marker, a sort key of no run).
    Skip,
}

impl RunCover {
    /// A read of `device`'s runs in `windows`.
    #[must_use]
    pub fn new(device: &str, windows: &[Window]) -> Self {
        Self {
            device: device.to_owned(),
            pending: windows.iter().map(|w| w.label()).collect(),
        }
    }

    /// What the next item met (by descending sort key), its sort key `sk`, says. An
    /// item whose first device is the device's own holds its readings; the first item
    /// of a window met whose first device is earlier holds the device's first readings
    /// of the window, and is the last one of the window that can hold any; the window's
    /// marker is its first run (or an item of none: expanded, it holds nothing), below
    /// which the window holds nothing.
    pub fn take(&mut self, sk: &str) -> Take {
        match parse_run_sk(sk) {
            Some(RunSk::Run {
                first_device,
                window,
                ..
            }) if first_device == self.device => {
                if self.pending.contains(window) {
                    Take::Keep
                } else {
                    Take::Skip
                }
            }
            Some(RunSk::Run { window, .. }) => {
                if self.pending.remove(window) {
                    Take::Keep
                } else {
                    Take::Skip
                }
            }
            Some(RunSk::Marker { window }) => {
                if self.pending.remove(window) {
                    Take::Keep
                } else {
                    Take::Skip
                }
            }
            None => Take::Skip,
        }
    }

    /// Whether every window has shown every item that can hold the device's readings.
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse(s).unwrap()
    }

    fn layout() -> SlabLayout {
        SlabLayout::default().checked().unwrap()
    }

    #[test]
    fn the_default_layout_is_valid_and_bad_ones_are_refused_by_name() {
        assert!(SlabLayout::default().checked().is_ok());
        let bad = |f: fn(&mut SlabLayout)| {
            let mut l = SlabLayout::default();
            f(&mut l);
            l.checked().unwrap_err().to_string()
        };
        assert!(bad(|l| l.window_minutes = 7).contains("window_minutes"));
        assert!(bad(|l| l.window_minutes = 0).contains("window_minutes"));
        assert!(bad(|l| l.accept_secs = 0).contains("accept_secs"));
        assert!(bad(|l| l.expiry_hours = 1).contains("expiry_hours"));
        assert!(bad(|l| l.max_bytes = 512).contains("max_bytes"));
        assert!(bad(|l| l.run_minutes = 7).contains("run_minutes"));
        assert!(bad(|l| l.run_minutes = 0).contains("run_minutes"));
        assert!(
            bad(|l| {
                l.window_minutes = 10;
                l.run_minutes = 15;
            })
            .contains("multiple of window_minutes (10)")
        );
    }

    #[test]
    fn a_layout_stored_before_run_spans_keeps_its_hour_partitions() {
        let stored = r#"{"groups":8,"window_minutes":1,"accept_secs":30,"expiry_hours":48,"max_bytes":1024}"#;
        let old: SlabLayout = serde_json::from_str(stored).unwrap();
        assert_eq!(old.run_minutes, 60);
        let w = old.window(ts("2026-06-22T01:35:00Z"));
        assert_eq!(old.run_pk(3, w), "r#3#2026-06-22T01");
        // A new layout's partitions are its spans of 15 minutes, and it reads back as
        // it was written.
        let new = layout();
        assert_eq!(new.run_pk(3, w), "r#3#2026-06-22T01:30");
        let back: SlabLayout = serde_json::from_str(&serde_json::to_string(&new).unwrap()).unwrap();
        assert_eq!(back, new);
    }

    #[test]
    fn a_run_page_asks_for_a_read_units_worth_of_items() {
        assert_eq!(layout().run_page_items(), 4);
        let big = SlabLayout {
            max_bytes: 16 * 1024,
            ..layout()
        };
        assert_eq!(big.run_page_items(), 1);
    }

    #[test]
    fn a_group_is_stable_and_spread() {
        let l = layout();
        assert_eq!(l.group("sensor-7"), l.group("sensor-7"));
        let mut counts = [0u32; DEFAULT_GROUPS as usize];
        for d in 0..8_000 {
            counts[l.group(&format!("dev-{d:05}")) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1_200).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn a_window_closes_after_accept_timeout_and_margin() {
        let l = layout();
        let w = l.window(ts("2026-06-22T01:05:30Z"));
        assert_eq!(w.label(), "2026-06-22T01:05");
        assert_eq!(w.hour_label(), "2026-06-22T01");
        let closes = l.closes_at(w, Duration::from_secs(30));
        // 01:06 + 30 s accept + 30 s timeout + 30 s margin.
        assert_eq!(closes, ts("2026-06-22T01:07:30Z"));
        assert_eq!(l.first_open(closes, Duration::from_secs(30)), w.next());
        assert_eq!(
            l.first_open(
                Timestamp::from_millis(closes.as_millis() - 1).unwrap(),
                Duration::from_secs(30)
            ),
            w
        );
    }

    #[test]
    fn only_a_reading_within_the_accept_age_goes_to_a_slab() {
        let l = layout();
        let now = ts("2026-06-22T01:10:00Z");
        assert!(l.accepts(ts("2026-06-22T01:09:30Z"), now));
        assert!(l.accepts(ts("2026-06-22T01:14:00Z"), now));
        assert!(!l.accepts(ts("2026-06-22T01:09:29.999Z"), now));
        // And no write into a window lands after it closes: the newest invocation that
        // accepts a reading of the window's last millisecond starts accept_secs after
        // it, and its deadline is inside the close.
        let w = l.window(ts("2026-06-22T01:05:00Z"));
        let last = Timestamp::from_millis(w.end_ms() - 1).unwrap();
        let latest_start = Timestamp::from_millis(last.as_millis() + 30_000).unwrap();
        assert!(l.accepts(last, latest_start));
        assert!(
            latest_start.saturating_add(Duration::from_secs(30))
                < l.closes_at(w, Duration::from_secs(30))
        );
    }

    #[test]
    fn the_ingest_falls_back_before_lag_reaches_half_the_expiry() {
        let l = layout();
        let now = ts("2026-06-22T12:00:00Z");
        // No progress yet: no slab before the first compaction has set one.
        assert!(!l.writes_slabs(now, None));
        assert!(l.writes_slabs(now, Some(ts("2026-06-21T12:00:01Z"))));
        assert!(!l.writes_slabs(now, Some(ts("2026-06-21T12:00:00Z"))));
        let w = l.window(ts("2026-06-22T01:05:00Z"));
        assert_eq!(
            l.expires_at(w),
            ts("2026-06-24T01:06:00Z").as_millis() / 1_000
        );
    }

    #[test]
    fn keys_name_group_fanout_window_and_hour() {
        let w = layout().window(ts("2026-06-22T01:05:00Z"));
        assert_eq!(slab_pk(3, 0, w), "s#3#2026-06-22T01:05");
        assert_eq!(slab_pk(3, 2, w), "s#3.2#2026-06-22T01:05");
        assert_eq!(layout().run_pk(3, w), "r#3#2026-06-22T01:00");
        assert_eq!(run_sk("sensor-7", w, 2), "sensor-7#2026-06-22T01:05#0002");
        assert_eq!(marker_sk(w), "#2026-06-22T01:05");
        assert_eq!(
            parse_run_sk("sensor-7#2026-06-22T01:05#0002"),
            Some(RunSk::Run {
                first_device: "sensor-7",
                window: "2026-06-22T01:05",
                part: 2
            })
        );
        assert_eq!(
            parse_run_sk("#2026-06-22T01:05"),
            Some(RunSk::Marker {
                window: "2026-06-22T01:05"
            })
        );
        assert_eq!(parse_run_sk("sensor-7#2026-06-22T01:05"), None);
        assert_eq!(run_page_bound("sensor-7#2026-06-22T01:05#0002"), "sensor-7");
        assert_eq!(run_page_bound("#2026-06-22T01:05"), "");
        assert_eq!(group_entity(3), "s#3");
    }

    #[test]
    fn a_slab_key_is_its_members_identities() {
        let a = slab_sk([("d-1", 1_000, "e-1"), ("d-2", 1_000, "e-1")]);
        assert_eq!(a.len(), 16);
        assert_eq!(a, slab_sk([("d-1", 1_000, "e-1"), ("d-2", 1_000, "e-1")]));
        assert_ne!(a, slab_sk([("d-1", 1_000, "e-1")]));
        // The lengths keep the fields apart: moving a byte across them changes the key.
        assert_ne!(
            slab_sk([("d-1", 1_000, "e-1")]),
            slab_sk([("d-", 1_000, "1e-1")])
        );
    }

    #[test]
    fn a_slab_keeps_its_fanout_key_and_a_group_spreads_over_all_of_them() {
        let sks: Vec<String> = (0..400)
            .map(|n| slab_sk([("d-1", i64::from(n), "e-1")]))
            .collect();
        for sk in &sks {
            assert_eq!(fanout_key(sk, 1), 0);
            assert_eq!(fanout_key(sk, 0), 0);
            assert_eq!(fanout_key(sk, 5), fanout_key(sk, 5));
        }
        let used: BTreeSet<u32> = sks.iter().map(|sk| fanout_key(sk, 5)).collect();
        assert_eq!(used, (0..5).collect());
    }

    #[test]
    fn run_keys_sort_as_their_devices_and_markers_first() {
        let w = layout().window(ts("2026-06-22T01:05:00Z"));
        let mut devices = ["dev-1", "dev-10", "dev-1.x", "dev-1:a", "Dev-2", "dev-0"];
        let mut sks: Vec<String> = devices.iter().map(|d| run_sk(d, w, 0)).collect();
        sks.push(marker_sk(w));
        sks.sort();
        devices.sort_unstable();
        assert_eq!(sks[0], marker_sk(w));
        let order: Vec<&str> = sks[1..]
            .iter()
            .map(|s| s.split('#').next().unwrap())
            .collect();
        assert_eq!(order, devices);
        // A device's upper bound takes its own runs and no later device's.
        let upper = run_sk_upper("dev-1");
        assert!(run_sk("dev-1", w, 9999) <= upper);
        assert!(run_sk("dev-10", w, 0) > upper);
        assert!(run_sk("dev-1.x", w, 0) > upper);
    }

    #[test]
    fn a_device_reads_runs_for_compacted_windows_and_slabs_on_every_key_after() {
        let l = SlabLayout {
            window_minutes: 5,
            ..layout()
        };
        let device = "sensor-7";
        let g = l.group(device);
        let range = TimeRange::new(ts("2026-06-22T00:50:00Z"), ts("2026-06-22T01:12:00Z")).unwrap();
        // The group has two fan-out keys in 01:10, the shared partition one throughout.
        let plan = plan_device(&l, device, range, ts("2026-06-22T01:05:00Z"), |o, w| {
            if o == SlabOwner::Group(g) && w.label().ends_with("01:10") {
                2
            } else {
                1
            }
        });
        let w = |s| l.window(ts(s));
        assert_eq!(
            plan,
            vec![
                SlabQuery::Runs {
                    pk: format!("r#{g}#2026-06-22T00:45"),
                    sk_upper: "sensor-7#~".into(),
                    windows: vec![w("2026-06-22T00:50:00Z"), w("2026-06-22T00:55:00Z")],
                    page_items: 4,
                },
                SlabQuery::Runs {
                    pk: format!("r#{g}#2026-06-22T01:00"),
                    sk_upper: "sensor-7#~".into(),
                    windows: vec![w("2026-06-22T01:00:00Z")],
                    page_items: 4,
                },
                SlabQuery::Slabs {
                    pk: format!("s#{g}#2026-06-22T01:05"),
                    window: w("2026-06-22T01:05:00Z")
                },
                SlabQuery::Slabs {
                    pk: "s#*#2026-06-22T01:05".into(),
                    window: w("2026-06-22T01:05:00Z")
                },
                SlabQuery::Slabs {
                    pk: format!("s#{g}#2026-06-22T01:10"),
                    window: w("2026-06-22T01:10:00Z")
                },
                SlabQuery::Slabs {
                    pk: format!("s#{g}.1#2026-06-22T01:10"),
                    window: w("2026-06-22T01:10:00Z")
                },
                SlabQuery::Slabs {
                    pk: "s#*#2026-06-22T01:10".into(),
                    window: w("2026-06-22T01:10:00Z")
                },
            ]
        );
        // A layout that shares no slab reads its group's alone.
        let alone = SlabLayout {
            shared_slabs: false,
            ..l
        };
        let plan = plan_device(&alone, device, range, ts("2026-06-22T01:05:00Z"), |_, _| 1);
        assert!(
            plan.iter()
                .all(|q| !matches!(q, SlabQuery::Slabs { pk, .. } if pk.starts_with("s#*")))
        );
        assert_eq!(plan.len(), 4);
    }

    #[test]
    fn only_two_or_more_thin_groups_share_a_slab() {
        let bytes = |v: &[(u32, usize)]| v.iter().copied().collect::<BTreeMap<u32, usize>>();
        // Under half of 1,024 is thin; two or more thin groups share.
        assert_eq!(
            thin_groups(&bytes(&[(0, 100), (1, 511), (2, 512), (3, 2_000)]), 1_024),
            BTreeSet::from([0, 1])
        );
        assert!(thin_groups(&bytes(&[(0, 100), (2, 512)]), 1_024).is_empty());
        assert!(thin_groups(&bytes(&[]), 1_024).is_empty());
    }

    #[test]
    fn the_shared_partition_is_keyed_as_a_group_is_and_never_as_one() {
        let w = layout().window(ts("2026-06-22T01:05:00Z"));
        assert_eq!(SlabOwner::Shared.pk(0, w), "s#*#2026-06-22T01:05");
        assert_eq!(SlabOwner::Shared.pk(3, w), "s#*.3#2026-06-22T01:05");
        assert_eq!(SlabOwner::Shared.entity(), "s#*");
        assert_eq!(SlabOwner::Group(3).pk(2, w), slab_pk(3, 2, w));
        assert_eq!(SlabOwner::Group(3).entity(), group_entity(3));
        // A stored layout shares no slab; a new one does.
        let stored: SlabLayout = serde_json::from_str(
            r#"{"groups":8,"window_minutes":1,"accept_secs":30,"expiry_hours":48,"max_bytes":1024}"#,
        )
        .unwrap();
        assert!(!stored.shared_slabs && !stored.first_run_marks);
        assert!(layout().shared_slabs && layout().first_run_marks);
    }

    #[test]
    fn a_run_read_keeps_the_devices_items_and_stops_once_each_window_showed_its_first() {
        let l = layout();
        let (w1, w2, w3) = (
            l.window(ts("2026-06-22T01:01:00Z")),
            l.window(ts("2026-06-22T01:02:00Z")),
            l.window(ts("2026-06-22T01:03:00Z")),
        );
        let mut cover = RunCover::new("dev-5", &[w1, w2]);
        // Descending from dev-5's own: its own items first, then earlier devices'.
        assert_eq!(cover.take(&run_sk("dev-5", w2, 4)), Take::Keep);
        assert_eq!(cover.take(&run_sk("dev-5", w3, 7)), Take::Skip);
        assert_eq!(cover.take(&run_sk("dev-5", w1, 2)), Take::Keep);
        assert!(!cover.is_done());
        assert_eq!(cover.take(&run_sk("dev-4", w2, 3)), Take::Keep);
        // An earlier item of the same window cannot hold dev-5.
        assert_eq!(cover.take(&run_sk("dev-3", w2, 2)), Take::Skip);
        assert!(!cover.is_done());
        // A window with nothing before dev-5 ends at its marker, the window's first
        // run, which can hold dev-5's first readings of it.
        assert_eq!(cover.take(&marker_sk(w3)), Take::Skip);
        assert_eq!(cover.take(&marker_sk(w1)), Take::Keep);
        assert!(cover.is_done());
        // Once done, another window's marker is nothing to it.
        assert_eq!(cover.take(&marker_sk(w2)), Take::Skip);
    }
}
