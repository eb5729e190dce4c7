//! Derived items: what the sealer keeps so that a dashboard's first questions (the
//! device list, a month of hourly stats, the fleet's readings per minute) cost a few
//! small reads. Every item here is a function of the readings alone, rebuilt by the
//! sealer (and `shardline seal`) from them; none is ever updated in place by a count.
//!
//! # The rollups table (`ROLLUP_TABLE`)
//!
//! Hash key `PK` (S), range key `SK` (S). Each item holds a `version` (N) and its body
//! as JSON text (`body`, S), plus `ttl` (N, epoch s) where it expires; a body over
//! [`stored::CHUNK_BYTES`] is held by chunk items instead ([`stored`]: every stored row
//! stays far under DynamoDB's 400 KB, whatever a sender sends). The bodies are encoded
//! compactly ([`cells`]).
//!
//! | kind | `PK` | `SK` | body | `version` |
//! |---|---|---|---|---|
//! | device-hour | `dh#{hour}#{part}` | `{device}` | [`DeviceHour`]: minute cells | the bodies it has had: one more at each new body |
//! | device summary | `dev#{device}` | `{hour}` | [`DeviceHour`] without minutes | its device-hour's |
//! | fleet part | `fleet#{hour}` | `{part}` | [`FleetPart`]: minute and hour cells of the part's devices | the bodies it has had |
//! | directory | `dir` | `{device}` | [`DirEntry`] | a counter, each write one more |
//! | late mark | `late#{part}` | `{hour}#{device}` | none | the marker's nonce |
//! | watermark | `seal` | `state` | the first sealed hour and the published lateness horizon ([`watermark::Watermark`], [`horizon`]) | the end of the last sealed hour (epoch ms) |
//! | progress | `seal` | `progress` | the hour and last device a stopped run wrote | 0 |
//! | compaction | `compact` | `state` | the first slab window compacted ([`compaction::Compacted`]) | the start of the first window not compacted (epoch ms) |
//! | fresh minute | `fresh#{hour}` | `{minute}` (2 digits) | [`fresh::FreshMinute`]: the fleet cells of one compacted slab window | 0: a pure function of the window, written unconditionally |
//! | seen map | `seen#{hour}` | `{minute}#{first device}` | [`seen::SeenChunk`]: each device's newest slab-held reading in the hour up to one compacted window, a chunk of them | 0: a pure function of the hour's compacted windows, written unconditionally |
//!
//! `{hour}` is the hour's start in epoch milliseconds, 13 digits, so keys sort by time;
//! `{part}` is [`part_of`] the device, one of [`PARTS`].
//!
//! # Why the writes converge: a version is a sequence, not a count
//! A derived item is a function of what it is computed from (a device-hour of its
//! readings, a fleet part of its device-hours). Its writer reads the stored item's
//! version first, then what it is computed from (strongly consistent), and writes a
//! body that differs from the stored one only on the condition that the version is
//! still the one it read ([`RollupTable::put_if_version`]), at the next version. So
//! of two writers, the one that read first either wins before the other reads the
//! version (the other then reads after its write), or loses and reads again; the last
//! body written was computed from inputs read after every earlier write. Any change of
//! the inputs (a late reading, a reading re-sent with new values and the same count, a
//! reading expired by TTL before a rebuild) makes another body and so another version:
//! a count of readings would miss a change that keeps the count. A body equal to the
//! stored one is not written, so reruns, crashes and concurrent runs leave the items
//! one clean run leaves (the same bodies; a version counts how many bodies an item has
//! had). Summaries carry their device-hour's version and are written only over an
//! older one ([`RollupTable::put_if_newer`]); the watermark's version is its end, which
//! only grows. The sealer's `device_hour` module says the same from the writer's side.

use std::fmt;
use std::future::Future;

use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::written::Written;

pub mod cells;
pub mod compaction;
pub mod dynamo;
pub mod fresh;
pub mod seen;
pub mod stored;

pub use cells::{
    Cell, Cells, DeviceHour, DirEntry, FleetPart, MAX_DIR_METRICS, decimal_text, exact, mean,
    to_f64,
};
pub mod horizon;
pub mod watermark;

/// How many parts the fleet's devices are spread over: one fleet item per part and
/// hour, so sealing one device's late reading re-reads one part's device-hours, not the
/// fleet's.
pub const PARTS: u32 = 16;
/// One hour, in milliseconds.
pub const HOUR_MS: i64 = 3_600_000;
/// One minute, in milliseconds.
pub const MINUTE_MS: i64 = 60_000;
/// `LATENESS_HORIZON_SECS` when unset: an hour is sealed this long after it ends, and a
/// reading written later is late (the sealer seals after it, the ingest marks after it).
pub const DEFAULT_LATENESS_HORIZON_SECS: u64 = 600;
/// The partition key of the device directory.
pub const DIRECTORY_PK: &str = "dir";

/// The part a device's derived items live in: a stable hash of its id
/// (`sharding::hash`, versioned), so any reader computes it.
pub fn part_of(device: &str) -> u32 {
    sharding::hash::shard_index(device, PARTS_NONZERO)
}

const PARTS_NONZERO: std::num::NonZeroU32 = match std::num::NonZeroU32::new(PARTS) {
    Some(n) => n,
    None => panic!("PARTS > 0"),
};

/// The start of the hour `ts_ms` lies in.
pub fn hour_of(ts_ms: i64) -> i64 {
    ts_ms - ts_ms.rem_euclid(HOUR_MS)
}

/// An hour's label in keys: its start in epoch ms, 13 digits.
pub fn hour_label(hour_ms: i64) -> String {
    format!("{hour_ms:013}")
}

/// The key of one derived item: its partition and sort key. Made only by the pure
/// functions of [`keys`] (and, for an item read back, [`RollupItem::key`]), as a
/// reading's key is made only by `sharding::key`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub struct RollupKey {
    pub pk: String,
    pub sk: String,
}

impl fmt::Display for RollupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.pk, self.sk)
    }
}

/// The keys of each kind of derived item.
pub mod keys {
    use super::{DIRECTORY_PK, RollupKey, hour_label, part_of};

    fn key(pk: String, sk: String) -> RollupKey {
        RollupKey { pk, sk }
    }

    /// A device-hour's minute cells.
    pub fn device_hour(device: &str, hour_ms: i64) -> RollupKey {
        key(
            format!("dh#{}#{}", hour_label(hour_ms), part_of(device)),
            device.to_owned(),
        )
    }

    /// The partition of one part's device-hours of one hour.
    pub fn device_hours_of(hour_ms: i64, part: u32) -> String {
        format!("dh#{}#{part}", hour_label(hour_ms))
    }

    /// A device's hour summary.
    pub fn device_summary(device: &str, hour_ms: i64) -> RollupKey {
        key(device_summaries(device), hour_label(hour_ms))
    }

    /// The partition of a device's hour summaries.
    pub fn device_summaries(device: &str) -> String {
        format!("dev#{device}")
    }

    /// A fleet part of one hour.
    pub fn fleet_part(hour_ms: i64, part: u32) -> RollupKey {
        key(fleet_hour(hour_ms), format!("{part:02}"))
    }

    /// The partition of one hour's fleet parts.
    pub fn fleet_hour(hour_ms: i64) -> String {
        format!("fleet#{}", hour_label(hour_ms))
    }

    /// A late mark of one device-hour.
    pub fn late_mark(device: &str, hour_ms: i64) -> RollupKey {
        key(
            late_part(part_of(device)),
            format!("{}#{device}", hour_label(hour_ms)),
        )
    }

    /// The hour and device a late mark's sort key names: [`late_mark`]'s inverse;
    /// `None` for a key it does not make.
    pub fn parse_late_mark(sk: &str) -> Option<(i64, &str)> {
        let (hour, device) = sk.split_once('#')?;
        Some((hour.parse().ok()?, device))
    }

    /// The sort-key bounds (inclusive) of a part's late marks of the hours from
    /// `first_hour` to `last_hour`, both included.
    pub fn late_marks_between(first_hour: i64, last_hour: i64) -> (String, String) {
        (
            format!("{}#", hour_label(first_hour)),
            format!("{}#~", hour_label(last_hour)),
        )
    }

    /// The partition of one part's late marks.
    pub fn late_part(part: u32) -> String {
        format!("late#{part:02}")
    }

    /// A device's directory entry.
    pub fn directory_entry(device: &str) -> RollupKey {
        key(DIRECTORY_PK.to_owned(), device.to_owned())
    }

    /// The sealer's watermark.
    pub fn watermark() -> RollupKey {
        key("seal".to_owned(), "state".to_owned())
    }

    /// How far a sealing run its deadline stopped got into its hour.
    pub fn seal_progress() -> RollupKey {
        key("seal".to_owned(), "progress".to_owned())
    }

    /// How far the sealer's compaction of slab windows got.
    pub fn compaction() -> RollupKey {
        key("compact".to_owned(), "state".to_owned())
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_late_marks_key_reads_back_as_its_hour_and_device() {
            let hour = 1_782_090_000_000;
            for device in ["d-1", "a#b", ""] {
                let RollupKey { pk, sk } = late_mark(device, hour);
                assert_eq!(pk, late_part(part_of(device)));
                assert_eq!(parse_late_mark(&sk), Some((hour, device)));
                let (lo, hi) = late_marks_between(hour, hour);
                assert!(
                    lo.as_str() <= sk.as_str() && sk.as_str() <= hi.as_str(),
                    "{sk}"
                );
                let (lo, _) = late_marks_between(hour + 3_600_000, hour + 3_600_000);
                assert!(sk < lo, "{sk}");
            }
            assert_eq!(parse_late_mark("d-1"), None);
            assert_eq!(parse_late_mark("soon#d-1"), None);
        }

        #[test]
        fn each_derived_item_has_its_key() {
            let hour = 1_782_090_000_000;
            let label = hour_label(hour);
            let part = part_of("d-1");
            let pair = |k: RollupKey| (k.pk, k.sk);
            assert_eq!(
                pair(device_hour("d-1", hour)),
                (device_hours_of(hour, part), "d-1".to_owned())
            );
            assert_eq!(
                pair(device_summary("d-1", hour)),
                (device_summaries("d-1"), label.clone())
            );
            assert_eq!(
                pair(fleet_part(hour, 3)),
                (fleet_hour(hour), "03".to_owned())
            );
            assert_eq!(
                pair(late_mark("d-1", hour)),
                (late_part(part), format!("{label}#d-1"))
            );
            assert_eq!(
                pair(directory_entry("d-1")),
                ("dir".to_owned(), "d-1".to_owned())
            );
            assert_eq!(pair(watermark()), ("seal".to_owned(), "state".to_owned()));
            assert_eq!(
                pair(seal_progress()),
                ("seal".to_owned(), "progress".to_owned())
            );
            assert_eq!(
                pair(compaction()),
                ("compact".to_owned(), "state".to_owned())
            );
            assert_eq!(
                device_hour("d-1", hour).to_string(),
                format!("dh#{label}#{part}/d-1")
            );
        }
    }
}

/// One stored derived item, as the port reads and writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollupItem {
    pub pk: String,
    pub sk: String,
    pub version: u64,
    /// The body, JSON text; empty for marks and the watermark.
    pub body: String,
    /// Expiry, epoch seconds.
    pub ttl: Option<i64>,
}

impl RollupItem {
    /// An item holding `body` as JSON.
    pub fn with_body<T: Serialize>(
        RollupKey { pk, sk }: RollupKey,
        version: u64,
        body: &T,
        ttl: Option<i64>,
    ) -> Result<Self, StoreError> {
        let body = serde_json::to_string(body)
            .map_err(|e| StoreError::Malformed(format!("derived item {pk}/{sk}: {e}")))?;
        Ok(Self {
            pk,
            sk,
            version,
            body,
            ttl,
        })
    }

    /// The key it is stored at.
    #[must_use]
    pub fn key(&self) -> RollupKey {
        RollupKey {
            pk: self.pk.clone(),
            sk: self.sk.clone(),
        }
    }

    /// Its body, read as a `T`.
    pub fn body<T: for<'de> Deserialize<'de>>(&self) -> Result<T, StoreError> {
        serde_json::from_str(&self.body).map_err(|e| {
            StoreError::Malformed(format!("derived item {}/{}: {e}", self.pk, self.sk))
        })
    }
}

/// The late mark of a reading of `device` stamped in the hour `hour_ms`, written after
/// the reading itself: `nonce` is fresh for each mark (the writer's randomness), so a
/// sealer that read an older mark deletes it only if no newer one replaced it.
pub fn late_mark(device: &str, hour_ms: i64, nonce: u64) -> RollupItem {
    let RollupKey { pk, sk } = keys::late_mark(device, hour_ms);
    RollupItem {
        pk,
        sk,
        version: nonce,
        body: String::new(),
        ttl: None,
    }
}

/// One page of a Query of the rollups table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RollupPage {
    pub items: Vec<RollupItem>,
    /// The last sort key evaluated when more may follow.
    pub last_sk: Option<String>,
    /// Items evaluated (ScannedCount).
    pub evaluated: u64,
}

/// One Query of one partition of the rollups table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollupQuery {
    pub pk: String,
    /// Inclusive sort-key bounds.
    pub sk_between: Option<(String, String)>,
    /// Only sort keys starting with this (with or instead of `sk_between`'s bounds,
    /// never both).
    pub sk_prefix: Option<String>,
    /// Continue after this sort key.
    pub after: Option<String>,
    pub limit: Option<u32>,
    pub ascending: bool,
    pub consistent: bool,
}

impl RollupQuery {
    /// Every item of `pk`, in sort-key order.
    pub fn partition(pk: impl Into<String>, consistent: bool) -> Self {
        Self {
            pk: pk.into(),
            sk_between: None,
            sk_prefix: None,
            after: None,
            limit: None,
            ascending: true,
            consistent,
        }
    }
}

/// The port of the rollups table. Every write is conditional: on a smaller stored
/// version ([`put_if_newer`](RollupTable::put_if_newer)), or on the exact version read
/// ([`put_if_version`](RollupTable::put_if_version), [`delete_if`](RollupTable::delete_if)).
pub trait RollupTable: Send + Sync {
    /// Writes `item` unless an item at its key has a version at least as large;
    /// [`Written::Refused`] when the stored one stays.
    fn put_if_newer(
        &self,
        item: &RollupItem,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send;

    /// Writes `item` if the stored item's version is `expected` (`None`: no item);
    /// [`Written::Refused`] when it is not.
    fn put_if_version(
        &self,
        item: &RollupItem,
        expected: Option<u64>,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send;

    /// Deletes the item at `(pk, sk)` if its version is `version`; [`Written::Refused`]
    /// when it is not (or there is none).
    fn delete_if(
        &self,
        pk: &str,
        sk: &str,
        version: u64,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send;

    /// Writes `item` whatever is stored (a late mark: its version is a fresh nonce).
    fn put(&self, item: &RollupItem) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Reads one item.
    fn get(
        &self,
        pk: &str,
        sk: &str,
        consistent: bool,
    ) -> impl Future<Output = Result<Option<RollupItem>, StoreError>> + Send;

    /// Reads one page of one Query.
    fn query(&self, q: &RollupQuery)
    -> impl Future<Output = Result<RollupPage, StoreError>> + Send;
}

impl<T: RollupTable> RollupTable for &T {
    fn put_if_newer(
        &self,
        item: &RollupItem,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send {
        (**self).put_if_newer(item)
    }
    fn put_if_version(
        &self,
        item: &RollupItem,
        expected: Option<u64>,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send {
        (**self).put_if_version(item, expected)
    }
    fn delete_if(
        &self,
        pk: &str,
        sk: &str,
        version: u64,
    ) -> impl Future<Output = Result<Written, StoreError>> + Send {
        (**self).delete_if(pk, sk, version)
    }
    fn put(&self, item: &RollupItem) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).put(item)
    }
    fn get(
        &self,
        pk: &str,
        sk: &str,
        consistent: bool,
    ) -> impl Future<Output = Result<Option<RollupItem>, StoreError>> + Send {
        (**self).get(pk, sk, consistent)
    }
    fn query(
        &self,
        q: &RollupQuery,
    ) -> impl Future<Output = Result<RollupPage, StoreError>> + Send {
        (**self).query(q)
    }
}

/// Every item of one Query, page after page.
pub async fn query_all<T: RollupTable>(
    table: &T,
    q: RollupQuery,
) -> Result<Vec<RollupItem>, StoreError> {
    let mut q = q;
    let mut out = Vec::new();
    loop {
        let page = table.query(&q).await?;
        out.extend(page.items);
        match page.last_sk {
            Some(last) => q.after = Some(last),
            None => return Ok(out),
        }
    }
}

impl fmt::Display for RollupItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{} v{}", self.pk, self.sk, self.version)
    }
}
