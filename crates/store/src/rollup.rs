//! Derived items: what the sealer keeps so that a dashboard's first questions (the
//! device list, a month of hourly stats, the fleet's readings per minute) cost a few
//! small reads. Every item here is a function of the readings alone, rebuilt by the
//! sealer (and `shardline seal`) from them; none is ever updated in place by a count.
//!
//! # The rollups table (`ROLLUP_TABLE`)
//!
//! Hash key `PK` (S), range key `SK` (S). Each item holds a `version` (N) and its body
//! as JSON text (`body`, S), plus `ttl` (N, epoch s) where it expires:
//!
//! | kind | `PK` | `SK` | body | `version` |
//! |---|---|---|---|---|
//! | device-hour | `dh#{hour}#{part}` | `{device}` | [`DeviceHour`]: minute cells | distinct readings |
//! | device summary | `dev#{device}` | `{hour}` | [`DeviceHour`] without minutes | distinct readings |
//! | fleet part | `fleet#{hour}` | `{part}` | [`FleetPart`]: minute and hour cells of the part's devices | distinct readings of the part |
//! | directory | `dir` | `{device}` | [`DirEntry`] | a counter, each write one more |
//! | late mark | `late#{part}` | `{hour}#{device}` | none | the marker's nonce |
//! | watermark | `seal` | `state` | none | the end of the last sealed hour (epoch ms) |
//!
//! `{hour}` is the hour's start in epoch milliseconds, 13 digits, so keys sort by time;
//! `{part}` is [`part_of`] the device, one of [`PARTS`].
//!
//! # Why a count is a version
//! A device-hour's distinct readings only grow (a late reading adds one; a copy adds
//! none; nothing is ever taken away until the whole hour expires). So of two
//! computations of one device-hour, the one that counted more saw a superset, and two
//! that counted the same saw the same readings and wrote the same body. A write
//! conditioned on the stored version being smaller ([`RollupTable::put_if_newer`])
//! therefore converges on the newest, whatever runs at once, crashes or runs again. A
//! fleet part's readings are the sum of its device-hours', and grow the same way: the
//! last run to recompute it read every device-hour written before it (its reads are
//! strongly consistent), so it counted the most, and its write is the one that stays.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::str::FromStr;

use bigdecimal::BigDecimal;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::decimal::Decimal;
use crate::error::StoreError;

pub mod dynamo;
pub mod horizon;

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

/// The keys of each kind of derived item.
pub mod keys {
    use super::{hour_label, part_of};

    /// A device-hour's minute cells.
    pub fn device_hour(device: &str, hour_ms: i64) -> (String, String) {
        (
            format!("dh#{}#{}", hour_label(hour_ms), part_of(device)),
            device.to_owned(),
        )
    }

    /// The partition of one part's device-hours of one hour.
    pub fn device_hours_of(hour_ms: i64, part: u32) -> String {
        format!("dh#{}#{part}", hour_label(hour_ms))
    }

    /// A device's hour summary.
    pub fn device_summary(device: &str, hour_ms: i64) -> (String, String) {
        (format!("dev#{device}"), hour_label(hour_ms))
    }

    /// The partition of a device's hour summaries.
    pub fn device_summaries(device: &str) -> String {
        format!("dev#{device}")
    }

    /// A fleet part of one hour.
    pub fn fleet_part(hour_ms: i64, part: u32) -> (String, String) {
        (fleet_hour(hour_ms), format!("{part:02}"))
    }

    /// The partition of one hour's fleet parts.
    pub fn fleet_hour(hour_ms: i64) -> String {
        format!("fleet#{}", hour_label(hour_ms))
    }

    /// A late mark of one device-hour.
    pub fn late_mark(device: &str, hour_ms: i64) -> (String, String) {
        (
            late_part(part_of(device)),
            format!("{}#{device}", hour_label(hour_ms)),
        )
    }

    /// The partition of one part's late marks.
    pub fn late_part(part: u32) -> String {
        format!("late#{part:02}")
    }

    /// The sealer's watermark.
    pub fn watermark() -> (String, String) {
        ("seal".to_owned(), "state".to_owned())
    }

    /// How far a sealing run its deadline stopped got into its hour.
    pub fn seal_progress() -> (String, String) {
        ("seal".to_owned(), "progress".to_owned())
    }
}

/// Count, exact sum, min and max of one metric over some readings. The sum is the
/// exact decimal sum of the numbers as sent, of any length; min and max are numbers
/// as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    pub count: u64,
    pub sum: BigDecimal,
    pub min: BigDecimal,
    pub max: BigDecimal,
}

impl Cell {
    /// The cell of one value.
    pub fn of(v: BigDecimal) -> Self {
        Self {
            count: 1,
            sum: v.clone(),
            min: v.clone(),
            max: v,
        }
    }

    /// Adds one value.
    pub fn add(&mut self, v: &BigDecimal) {
        self.count += 1;
        self.sum += v;
        if *v < self.min {
            self.min = v.clone();
        }
        if *v > self.max {
            self.max = v.clone();
        }
    }

    /// Adds every value of another cell.
    pub fn merge(&mut self, other: &Cell) {
        self.count += other.count;
        self.sum += &other.sum;
        if other.min < self.min {
            self.min = other.min.clone();
        }
        if other.max > self.max {
            self.max = other.max.clone();
        }
    }

    /// The mean, rounded once to the nearest double: the one rule every stats answer
    /// uses, from sealed cells or from raw readings ([`mean`]).
    pub fn avg(&self) -> f64 {
        mean(&self.sum, self.count)
    }
}

/// `sum / count`, rounded once to a double (`NaN` for no values).
pub fn mean(sum: &BigDecimal, count: u64) -> f64 {
    if count == 0 {
        return f64::NAN;
    }
    // 40 significant digits, more than a double holds, so the one rounding that
    // matters is the last one.
    to_f64(&(sum / BigDecimal::from(count)).with_prec(40))
}

/// A decimal as the nearest double: what an answer's `min` and `max` are, the same
/// double as the number's own text read as one.
pub fn to_f64(v: &BigDecimal) -> f64 {
    f64::from_str(&v.to_string()).unwrap_or(f64::NAN)
}

/// A stored number as an exact decimal.
pub fn exact(v: &Decimal) -> BigDecimal {
    // A `Decimal` is always a decimal's text DynamoDB accepts, which BigDecimal reads.
    BigDecimal::from_str(v.as_str()).unwrap_or_default()
}

/// A decimal's shortest exact text: no trailing zeros, plain notation while the
/// exponent is small. What the derived items store and the answers write.
pub fn decimal_text(v: &BigDecimal) -> String {
    let n = v.normalized();
    let (_, scale) = n.as_bigint_and_exponent();
    if (-30..=60).contains(&scale) {
        n.to_plain_string()
    } else {
        n.to_scientific_notation()
    }
}

impl Serialize for Cell {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (
            self.count,
            decimal_text(&self.sum),
            decimal_text(&self.min),
            decimal_text(&self.max),
        )
            .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Cell {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (count, sum, min, max) = <(u64, String, String, String)>::deserialize(d)?;
        let num = |t: &str| BigDecimal::from_str(t).map_err(serde::de::Error::custom);
        Ok(Self {
            count,
            sum: num(&sum)?,
            min: num(&min)?,
            max: num(&max)?,
        })
    }
}

/// Cells of some readings: how many, and each metric's cell.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cells {
    /// Readings, with or without any metric.
    #[serde(rename = "r")]
    pub readings: u64,
    /// Devices that sent them (fleet cells only; 0 in a device's).
    #[serde(rename = "d", default, skip_serializing_if = "is_zero")]
    pub devices: u64,
    /// Each metric's cell.
    #[serde(rename = "m", default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metrics: BTreeMap<String, Cell>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Cells {
    /// Adds one reading's metrics.
    pub fn add_reading<'a>(
        &mut self,
        metrics: impl IntoIterator<Item = (&'a String, &'a Decimal)>,
    ) {
        self.readings += 1;
        for (name, v) in metrics {
            let v = exact(v);
            match self.metrics.get_mut(name) {
                Some(cell) => cell.add(&v),
                None => {
                    self.metrics.insert(name.clone(), Cell::of(v));
                }
            }
        }
    }

    /// Adds every reading of other cells (their devices too).
    pub fn merge(&mut self, other: &Cells) {
        self.readings += other.readings;
        self.devices += other.devices;
        for (name, cell) in &other.metrics {
            match self.metrics.get_mut(name) {
                Some(mine) => mine.merge(cell),
                None => {
                    self.metrics.insert(name.clone(), cell.clone());
                }
            }
        }
    }
}

/// One device's readings of one hour, sealed: minute cells, the hour's cells, and what
/// the directory learns from them. Built by the sealer from the readings, each once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceHour {
    pub device: String,
    /// The hour's start, epoch ms.
    pub hour_ms: i64,
    /// The hour's cells.
    pub hour: Cells,
    /// Cells per minute of the hour (0..60), minutes without readings left out. Empty
    /// in a device summary.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub minutes: BTreeMap<u8, Cells>,
    /// The earliest reading's time.
    pub first_ms: i64,
    /// The newest reading: its time and event id (the greatest event id among those
    /// at that time).
    pub last_ms: i64,
    pub last_event: String,
    /// The newest reading's tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub last_tags: BTreeMap<String, String>,
}

impl DeviceHour {
    /// The device-hour of no reading yet.
    pub fn new(device: impl Into<String>, hour_ms: i64) -> Self {
        Self {
            device: device.into(),
            hour_ms,
            hour: Cells::default(),
            minutes: BTreeMap::new(),
            first_ms: i64::MAX,
            last_ms: i64::MIN,
            last_event: String::new(),
            last_tags: BTreeMap::new(),
        }
    }

    /// Adds one reading, which must lie in the hour and be given once.
    pub fn add(
        &mut self,
        ts_ms: i64,
        event_id: &str,
        metrics: &BTreeMap<String, Decimal>,
        tags: &BTreeMap<String, String>,
    ) {
        let minute = ((ts_ms - self.hour_ms) / MINUTE_MS).clamp(0, 59) as u8;
        self.minutes.entry(minute).or_default().add_reading(metrics);
        self.hour.add_reading(metrics);
        self.first_ms = self.first_ms.min(ts_ms);
        if (ts_ms, event_id) > (self.last_ms, self.last_event.as_str()) {
            self.last_ms = ts_ms;
            self.last_event = event_id.to_owned();
            self.last_tags = tags.clone();
        }
    }

    /// Its version: the distinct readings it counts.
    pub fn version(&self) -> u64 {
        self.hour.readings
    }

    /// The same hour without its minute cells: what a device's summary holds.
    pub fn summary(&self) -> Self {
        Self {
            minutes: BTreeMap::new(),
            ..self.clone()
        }
    }
}

/// One part of the fleet's devices over one hour: per minute and for the hour, the
/// readings, the devices reporting, and each metric's cell. The sum of its part's
/// device-hours, recomputed from them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetPart {
    pub hour_ms: i64,
    pub part: u32,
    pub hour: Cells,
    pub minutes: BTreeMap<u8, Cells>,
}

impl FleetPart {
    /// The part's cells of `device_hours`, each a device-hour of this part and hour.
    pub fn of<'a>(
        hour_ms: i64,
        part: u32,
        device_hours: impl IntoIterator<Item = &'a DeviceHour>,
    ) -> Self {
        let mut out = Self {
            hour_ms,
            part,
            ..Self::default()
        };
        for dh in device_hours {
            if dh.hour.readings == 0 {
                continue;
            }
            let mut hour = dh.hour.clone();
            hour.devices = 1;
            out.hour.merge(&hour);
            for (minute, cells) in &dh.minutes {
                let mut cells = cells.clone();
                cells.devices = 1;
                out.minutes.entry(*minute).or_default().merge(&cells);
            }
        }
        out
    }

    /// Its version: the distinct readings of its devices.
    pub fn version(&self) -> u64 {
        self.hour.readings
    }

    /// Adds the cells of another part of the same hour: the fleet's cells of an hour
    /// are its parts merged (a device is in one part, so `devices` adds up exactly).
    pub fn merge(&mut self, other: &FleetPart) {
        self.hour.merge(&other.hour);
        for (minute, cells) in &other.minutes {
            self.minutes.entry(*minute).or_default().merge(cells);
        }
    }
}

/// One device in the directory: when it was first and last seen, its newest reading's
/// event id and tags, and every metric it sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    pub device: String,
    pub first_seen_ms: i64,
    pub last_seen_ms: i64,
    pub last_event: String,
    #[serde(default)]
    pub metrics: std::collections::BTreeSet<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}

impl DirEntry {
    /// The entry one device-hour makes.
    pub fn of(dh: &DeviceHour) -> Self {
        Self {
            device: dh.device.clone(),
            first_seen_ms: dh.first_ms,
            last_seen_ms: dh.last_ms,
            last_event: dh.last_event.clone(),
            metrics: dh.hour.metrics.keys().cloned().collect(),
            tags: dh.last_tags.clone(),
        }
    }

    /// This entry with `other` merged in: the earliest first seen, the newest reading
    /// (by time, then event id), every metric. Commutative and idempotent, so entries
    /// merged in any order, any number of times, agree.
    pub fn merged(&self, other: &DirEntry) -> DirEntry {
        let newest = if (other.last_seen_ms, other.last_event.as_str())
            > (self.last_seen_ms, self.last_event.as_str())
        {
            other
        } else {
            self
        };
        DirEntry {
            device: self.device.clone(),
            first_seen_ms: self.first_seen_ms.min(other.first_seen_ms),
            last_seen_ms: newest.last_seen_ms,
            last_event: newest.last_event.clone(),
            metrics: self.metrics.union(&other.metrics).cloned().collect(),
            tags: newest.tags.clone(),
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
        (pk, sk): (String, String),
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
    let (pk, sk) = keys::late_mark(device, hour_ms);
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
    /// `false` when the stored one stays.
    fn put_if_newer(
        &self,
        item: &RollupItem,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Writes `item` if the stored item's version is `expected` (`None`: no item);
    /// `false` when it is not.
    fn put_if_version(
        &self,
        item: &RollupItem,
        expected: Option<u64>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Deletes the item at `(pk, sk)` if its version is `version`; `false` when it is
    /// not (or there is none).
    fn delete_if(
        &self,
        pk: &str,
        sk: &str,
        version: u64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

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
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        (**self).put_if_newer(item)
    }
    fn put_if_version(
        &self,
        item: &RollupItem,
        expected: Option<u64>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        (**self).put_if_version(item, expected)
    }
    fn delete_if(
        &self,
        pk: &str,
        sk: &str,
        version: u64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn d(t: &str) -> Decimal {
        Decimal::parse(t).unwrap()
    }

    #[test]
    fn a_cell_sums_exactly_and_means_round_once() {
        let mut cells = Cells::default();
        for v in [
            "0.1",
            "0.2",
            "12345678901234567890123456789012345678",
            "-1e-130",
        ] {
            cells.add_reading([(&"t".to_owned(), &d(v))]);
        }
        let cell = &cells.metrics["t"];
        assert_eq!(cell.count, 4);
        assert_eq!(
            decimal_text(&cell.sum),
            decimal_text(
                &(BigDecimal::from_str("12345678901234567890123456789012345678.3").unwrap()
                    - BigDecimal::from_str("1e-130").unwrap())
            )
        );
        let back: Cell = serde_json::from_str(&serde_json::to_string(cell).unwrap()).unwrap();
        assert_eq!(&back, cell);
        assert_eq!(mean(&BigDecimal::from_str("0.3").unwrap(), 3), 0.1);
    }

    #[test]
    fn directory_entries_merge_in_any_order_to_the_newest() {
        let dh = |first, last, ev: &str, metric: &str| {
            let mut h = DeviceHour::new("d", 0);
            h.add(
                first,
                "a",
                &BTreeMap::from([(metric.to_owned(), d("1"))]),
                &BTreeMap::new(),
            );
            h.add(last, ev, &BTreeMap::new(), &BTreeMap::new());
            DirEntry::of(&h)
        };
        let a = dh(5, 100, "e1", "x");
        let b = dh(1, 100, "e2", "y");
        let c = dh(50, 90, "e9", "z");
        let abc = a.merged(&b).merged(&c);
        let cba = c.merged(&b).merged(&a);
        assert_eq!(abc, cba);
        assert_eq!(abc, abc.merged(&a));
        assert_eq!((abc.first_seen_ms, abc.last_seen_ms), (1, 100));
        assert_eq!(abc.last_event, "e2", "ties on the time break by event id");
        assert_eq!(abc.metrics.len(), 3);
    }
}
