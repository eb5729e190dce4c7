//! Shard epochs: when each change of the table layout or of an entity's fan-out takes effect.
//!
//! **Table layouts** (N, strategy) do not nest: a change scheduled at `now` takes effect
//! at `now + margin`, where `margin > writer cache TTL + maximum accepted future skew of
//! a reading's ts` (see [`propagation_margin`]), and a reading is keyed with the layout in
//! force at its own timestamp. Every writer therefore knows that layout, a redelivery
//! lands on the same key, and no change needs dual writes or a backfill.
//!
//! **Fan-outs** nest: every key a reading can have under fan-out k is also read under any
//! k' >= k (see `crate::key`). A reading is keyed with the fan-out in force at its
//! *keying time* ([`keying_time`]): the later of the write and the reading's timestamp,
//! but at most [`REKEY_HORIZON`] after the timestamp. So a raise takes effect at once,
//! also for the backlog of readings not yet written, and a reader of a reading stamped
//! `ts` reads with the largest fan-out in force at any time in
//! `[ts, ts + REKEY_HORIZON]` ([`FanoutHistory::read_spans`]), which covers every k any
//! writer can have used. Only a shrink waits for the propagation margin: by the time it
//! is in force, every writer's cache holds it and no accepted reading's keying time can
//! precede it unseen.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::layout::Layout;
use crate::time::{TimeRange, Timestamp};

/// Why an epoch history was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EpochError {
    /// A table history needs at least one epoch.
    #[error("a table history needs at least one epoch")]
    Empty,
    /// The first table epoch must hold from the beginning of time.
    #[error(
        "the first table epoch must take effect at {}, not {found}",
        Timestamp::MIN
    )]
    FirstNotAtStart {
        /// Effective time of the refused first epoch.
        found: Timestamp,
    },
    /// Epochs must be strictly increasing in effective time.
    #[error("epoch effective at {next} is not after the previous one at {previous}")]
    NotAfterPrevious {
        /// Effective time of the epoch before.
        previous: Timestamp,
        /// Effective time of the refused epoch.
        next: Timestamp,
    },
    /// `now + margin` is past [`Timestamp::MAX`].
    #[error("now + margin is past the end of time")]
    OutOfRange,
    /// A fan-out of 0 partition keys.
    #[error("a fan-out must be at least 1")]
    ZeroFanout,
    /// A `shard_history` entry that is not `<effective_from_ms>:<k>`.
    #[error("bad shard_history entry {entry:?}: expected <effective_from_ms>:<k>")]
    BadEntry {
        /// The refused entry.
        entry: String,
    },
}

/// A value in force from `effective_from` until the next epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Epoch<T> {
    /// First millisecond at which `value` applies (by the reading's own timestamp).
    pub effective_from: Timestamp,
    /// The layout or fan-out in force.
    pub value: T,
}

/// How long after a reading's own timestamp its key still follows fan-out raises. A
/// reading written later than this (a late device, a long redelivery chain) is keyed
/// with the fan-out in force at `ts + REKEY_HORIZON`, so a raise makes readers of older
/// ranges read more keys only over the horizon before it. Part of the key rule: readers
/// and writers must agree on it, so it is a constant, not a setting.
pub const REKEY_HORIZON: Duration = Duration::from_secs(3600);

/// The instant whose fan-out keys a reading stamped `ts` and written at `now`:
/// `min(max(now, ts), ts + REKEY_HORIZON)`.
#[must_use]
pub fn keying_time(ts: Timestamp, now: Timestamp) -> Timestamp {
    now.max(ts).min(ts.saturating_add(REKEY_HORIZON))
}

/// `cache_ttl + max_future_skew + slack`: the delay between scheduling a change and its
/// effective time. `slack` absorbs clock differences between writers and the scheduler;
/// give it a positive value so the margin strictly exceeds TTL + skew.
#[must_use]
pub fn propagation_margin(
    cache_ttl: Duration,
    max_future_skew: Duration,
    slack: Duration,
) -> Duration {
    cache_ttl
        .saturating_add(max_future_skew)
        .saturating_add(slack)
}

fn check_sorted<T>(epochs: &[Epoch<T>]) -> Result<(), EpochError> {
    for pair in epochs.windows(2) {
        if pair[1].effective_from <= pair[0].effective_from {
            return Err(EpochError::NotAfterPrevious {
                previous: pair[0].effective_from,
                next: pair[1].effective_from,
            });
        }
    }
    Ok(())
}

/// Index of the epoch in force at `ts`, if any.
fn index_at<T>(epochs: &[Epoch<T>], ts: Timestamp) -> Option<usize> {
    epochs
        .partition_point(|e| e.effective_from <= ts)
        .checked_sub(1)
}

/// `range` cut at epoch boundaries; `None` where no epoch is in force yet.
fn spans_of<T>(epochs: &[Epoch<T>], range: TimeRange) -> Vec<(TimeRange, Option<&T>)> {
    let mut out = Vec::new();
    let mut cursor = range.from();
    let mut index = index_at(epochs, cursor);
    loop {
        let next_index = index.map_or(0, |i| i + 1);
        let boundary = epochs
            .get(next_index)
            .map_or(range.to(), |e| e.effective_from.min(range.to()));
        if let Ok(piece) = TimeRange::new(cursor, boundary) {
            out.push((piece, index.map(|i| &epochs[i].value)));
        }
        if boundary >= range.to() {
            return out;
        }
        cursor = boundary;
        index = Some(next_index);
    }
}

fn scheduled_time<T>(
    epochs: &[Epoch<T>],
    now: Timestamp,
    margin: Duration,
) -> Result<Timestamp, EpochError> {
    let effective_from = now.checked_add(margin).ok_or(EpochError::OutOfRange)?;
    if let Some(last) = epochs.last()
        && effective_from <= last.effective_from
    {
        return Err(EpochError::NotAfterPrevious {
            previous: last.effective_from,
            next: effective_from,
        });
    }
    Ok(effective_from)
}

/// The layout history of a table: non-empty, strictly increasing, the first epoch in force
/// from [`Timestamp::MIN`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<Epoch<Layout>>", into = "Vec<Epoch<Layout>>")]
pub struct TableHistory {
    epochs: Vec<Epoch<Layout>>,
}

impl TableHistory {
    /// One layout for all time.
    #[must_use]
    pub fn new(initial: Layout) -> Self {
        TableHistory {
            epochs: vec![Epoch {
                effective_from: Timestamp::MIN,
                value: initial,
            }],
        }
    }

    /// A history from its epochs (validated).
    pub fn from_epochs(epochs: Vec<Epoch<Layout>>) -> Result<Self, EpochError> {
        let first = epochs.first().ok_or(EpochError::Empty)?;
        if first.effective_from != Timestamp::MIN {
            return Err(EpochError::FirstNotAtStart {
                found: first.effective_from,
            });
        }
        check_sorted(&epochs)?;
        Ok(TableHistory { epochs })
    }

    /// The epochs, oldest first.
    #[must_use]
    pub fn epochs(&self) -> &[Epoch<Layout>] {
        &self.epochs
    }

    /// The layout in force at `ts`.
    #[must_use]
    pub fn at(&self, ts: Timestamp) -> &Layout {
        // The first epoch holds from Timestamp::MIN, so some epoch is always in force.
        let i = index_at(&self.epochs, ts).unwrap_or(0);
        &self.epochs[i].value
    }

    /// The latest scheduled layout (possibly not yet in force).
    #[must_use]
    pub fn latest(&self) -> &Layout {
        let last = self.epochs.len() - 1;
        &self.epochs[last].value
    }

    /// `range` cut at epoch boundaries, with the layout in force on each piece.
    #[must_use]
    pub fn spans(&self, range: TimeRange) -> Vec<(TimeRange, &Layout)> {
        spans_of(&self.epochs, range)
            .into_iter()
            .filter_map(|(r, v)| v.map(|v| (r, v)))
            .collect()
    }

    /// Appends `value` effective at `now + margin`; refuses a time not after the last epoch.
    pub fn schedule(
        &mut self,
        value: Layout,
        now: Timestamp,
        margin: Duration,
    ) -> Result<Epoch<Layout>, EpochError> {
        let effective_from = scheduled_time(&self.epochs, now, margin)?;
        let epoch = Epoch {
            effective_from,
            value,
        };
        self.epochs.push(epoch.clone());
        Ok(epoch)
    }
}

impl TryFrom<Vec<Epoch<Layout>>> for TableHistory {
    type Error = EpochError;
    fn try_from(epochs: Vec<Epoch<Layout>>) -> Result<Self, Self::Error> {
        TableHistory::from_epochs(epochs)
    }
}

impl From<TableHistory> for Vec<Epoch<Layout>> {
    fn from(h: TableHistory) -> Self {
        h.epochs
    }
}

/// The fan-out history of one entity: strictly increasing epochs of k >= 1. Before its
/// first epoch (or when empty) the layout's default applies (N for `Random`/`Calculated`,
/// 1 for `TimeBucket`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<Epoch<u32>>", into = "Vec<Epoch<u32>>")]
pub struct FanoutHistory {
    epochs: Vec<Epoch<u32>>,
}

impl FanoutHistory {
    /// No fan-out of its own: the default everywhere.
    #[must_use]
    pub fn new() -> Self {
        FanoutHistory::default()
    }

    /// A history from its epochs (validated: sorted, every k >= 1).
    pub fn from_epochs(epochs: Vec<Epoch<u32>>) -> Result<Self, EpochError> {
        if epochs.iter().any(|e| e.value == 0) {
            return Err(EpochError::ZeroFanout);
        }
        check_sorted(&epochs)?;
        Ok(FanoutHistory { epochs })
    }

    /// The epochs, oldest first.
    #[must_use]
    pub fn epochs(&self) -> &[Epoch<u32>] {
        &self.epochs
    }

    /// Whether there is no epoch at all.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.epochs.is_empty()
    }

    /// The fan-out in force at `ts`; `None` means the layout's default.
    #[must_use]
    pub fn at(&self, ts: Timestamp) -> Option<u32> {
        index_at(&self.epochs, ts).map(|i| self.epochs[i].value)
    }

    /// The latest scheduled epoch (possibly not yet in force).
    #[must_use]
    pub fn latest(&self) -> Option<&Epoch<u32>> {
        self.epochs.last()
    }

    /// `range` cut at epoch boundaries, with the fan-out in force (`None` = default).
    #[must_use]
    pub fn spans(&self, range: TimeRange) -> Vec<(TimeRange, Option<u32>)> {
        spans_of(&self.epochs, range)
            .into_iter()
            .map(|(r, v)| (r, v.copied()))
            .collect()
    }

    /// Whether any epoch has a fan-out above 1: the entity has sub-shards that reads over
    /// every device must look at (the hot set).
    #[must_use]
    pub fn ever_fanned_out(&self) -> bool {
        self.epochs.iter().any(|e| e.value > 1)
    }

    /// The fan-out a writer at `now` keys a reading stamped `ts` with: the k in force at
    /// [`keying_time`]`(ts, now)`; `None` means the layout's default.
    #[must_use]
    pub fn for_write(&self, ts: Timestamp, now: Timestamp) -> Option<u32> {
        self.at(keying_time(ts, now))
    }

    /// The largest fan-out in force at any instant of `[from, to]` (`default` where no
    /// epoch is in force).
    #[must_use]
    pub fn max_over(&self, from: Timestamp, to: Timestamp, default: u32) -> u32 {
        let first = index_at(&self.epochs, from);
        let start = first.unwrap_or(0);
        let mut k = if first.is_none() { default } else { 0 };
        for epoch in &self.epochs[start..] {
            if epoch.effective_from > to {
                break;
            }
            k = k.max(epoch.value);
        }
        k.max(1)
    }

    /// The fan-out to read a reading stamped `ts` with: the largest in force at any time
    /// in `[ts, ts + REKEY_HORIZON]`, the window its keying time lies in. Every k a
    /// writer can have used for it is at most this, and keys nest, so reading this k
    /// finds it.
    #[must_use]
    pub fn read_fanout(&self, ts: Timestamp, default: u32) -> u32 {
        self.max_over(ts, ts.saturating_add(REKEY_HORIZON), default)
    }

    /// `range` cut where [`FanoutHistory::read_fanout`] changes, with that fan-out on each
    /// piece (`default` where no epoch is in force).
    #[must_use]
    pub fn read_spans(&self, range: TimeRange, default: u32) -> Vec<(TimeRange, u32)> {
        // The window [ts, ts + H] starts to meet an epoch at ts = its start - H, and stops
        // meeting the epoch before it at ts = its start.
        let mut cuts: Vec<Timestamp> = self
            .epochs
            .iter()
            .flat_map(|e| {
                let early = e
                    .effective_from
                    .checked_sub(REKEY_HORIZON)
                    .unwrap_or(Timestamp::MIN);
                [early, e.effective_from]
            })
            .filter(|t| range.from() < *t && *t < range.to())
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        let mut out: Vec<(TimeRange, u32)> = Vec::new();
        let mut from = range.from();
        for to in cuts.into_iter().chain([range.to()]) {
            let Ok(piece) = TimeRange::new(from, to) else {
                continue;
            };
            let k = self.read_fanout(from, default);
            match out.last_mut() {
                Some((last, last_k)) if *last_k == k => *last = last.hull(&piece),
                _ => out.push((piece, k)),
            }
            from = to;
        }
        out
    }

    /// The history after a raise to `k` decided at `now`, in force at once: any shrink
    /// scheduled after `now` is dropped, and `k` is appended unless the latest fan-out left
    /// is already at least `k` (then the raise only cancels the shrink). The new epoch
    /// starts at `now`, or 1 ms after the last remaining one.
    ///
    /// A raise that starts after `now` (two raises in one millisecond) stays: writers may
    /// already have keyed readings stamped after `now` with it, so dropping it, or
    /// following it with a smaller k, would hide those readings from readers.
    pub fn raised_now(&self, k: u32, now: Timestamp, default: u32) -> Result<Self, EpochError> {
        if k == 0 {
            return Err(EpochError::ZeroFanout);
        }
        let mut epochs: Vec<Epoch<u32>> = Vec::with_capacity(self.epochs.len() + 1);
        for epoch in &self.epochs {
            let before = epochs.last().map_or(default, |e| e.value);
            if epoch.effective_from <= now || epoch.value > before {
                epochs.push(*epoch);
            }
        }
        let latest = epochs.last().map_or(default, |e| e.value);
        if k > latest {
            let effective_from = epochs
                .last()
                .map_or(now, |e| now.max(e.effective_from.succ()));
            epochs.push(Epoch {
                effective_from,
                value: k,
            });
        }
        FanoutHistory::from_epochs(epochs)
    }

    /// Appends fan-out `k` effective at `now + margin`; refuses k = 0 or a time not after
    /// the last epoch.
    pub fn schedule(
        &mut self,
        k: u32,
        now: Timestamp,
        margin: Duration,
    ) -> Result<Epoch<u32>, EpochError> {
        if k == 0 {
            return Err(EpochError::ZeroFanout);
        }
        let effective_from = scheduled_time(&self.epochs, now, margin)?;
        let epoch = Epoch {
            effective_from,
            value: k,
        };
        self.epochs.push(epoch);
        Ok(epoch)
    }

    /// The history as a DynamoDB string set, one `<effective_from_ms>:<k>` per epoch
    /// (the metadata item's `shard_history`, in milliseconds).
    #[must_use]
    pub fn to_string_set(&self) -> Vec<String> {
        self.epochs.iter().map(|e| e.to_string()).collect()
    }

    /// Parses a string set written by [`FanoutHistory::to_string_set`], in any order.
    pub fn from_string_set<I, S>(entries: I) -> Result<Self, EpochError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut epochs = entries
            .into_iter()
            .map(|s| s.as_ref().parse::<Epoch<u32>>())
            .collect::<Result<Vec<_>, _>>()?;
        epochs.sort_by_key(|e| e.effective_from);
        FanoutHistory::from_epochs(epochs)
    }
}

impl TryFrom<Vec<Epoch<u32>>> for FanoutHistory {
    type Error = EpochError;
    fn try_from(epochs: Vec<Epoch<u32>>) -> Result<Self, Self::Error> {
        FanoutHistory::from_epochs(epochs)
    }
}

impl From<FanoutHistory> for Vec<Epoch<u32>> {
    fn from(h: FanoutHistory) -> Self {
        h.epochs
    }
}

impl fmt::Display for Epoch<u32> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.effective_from.as_millis(), self.value)
    }
}

impl FromStr for Epoch<u32> {
    type Err = EpochError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || EpochError::BadEntry {
            entry: s.to_owned(),
        };
        let (at, k) = s.split_once(':').ok_or_else(bad)?;
        let millis: i64 = at.parse().map_err(|_| bad())?;
        let effective_from = Timestamp::from_millis(millis).map_err(|_| bad())?;
        let value: u32 = k.parse().map_err(|_| bad())?;
        if value == 0 {
            return Err(EpochError::ZeroFanout);
        }
        Ok(Epoch {
            effective_from,
            value,
        })
    }
}
