//! The bodies of the derived items: cells (count, exact sum, min, max of a metric), a
//! device's hour, a part of the fleet's hour, a directory entry; and how each is
//! written as JSON, compactly.
//!
//! # The encoding, and why it is compact
//! A metric's cell of one reading is its value, `"21.5"`; of more, `[count, "sum",
//! "min", "max"]`. Minute cells are stored by metric, each name once, as
//! `{"name": [[minute, cell], ...]}`, with the readings of each minute beside them
//! (`[[minute, readings], ...]`); an hour's cells are the merge of its minutes', so a
//! device-hour does not store them twice (a summary, which has no minutes, does). At a
//! reading a minute, a metric-hour of 4-digit values takes about 600 bytes, against
//! about 5.6 KB when every minute repeated every name (the encoding before, which
//! these types still read).
//!
//! # Size
//! A body grows with what a sender sends (metric names, digits, readings), so none of
//! these bounds an item: `store::rollup::stored` splits any body over
//! `store::rollup::stored::CHUNK_BYTES` into chunk items, each within DynamoDB's 400 KB.
//! The directory entry alone is bounded here ([`MAX_DIR_METRICS`]), since the device
//! list answers it whole.

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;

use bigdecimal::BigDecimal;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::MINUTE_MS;
use crate::decimal::Decimal;

/// The metrics a directory entry names at most: the first by name of every metric the
/// device sent ([`DirEntry::more_metrics`] says when there were more). 256 names of at
/// most 64 bytes keep an entry under 20 KB, whatever a device sends.
pub const MAX_DIR_METRICS: usize = 256;

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

/// A decimal as the nearest double: the same double as the number's own text read as
/// one.
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

/// A cell as stored: one value's text, or `[count, sum, min, max]`.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum CellWire {
    One(String),
    Many(u64, String, String, String),
}

impl Serialize for Cell {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.count == 1 {
            return decimal_text(&self.sum).serialize(s);
        }
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
        let num = |t: &str| BigDecimal::from_str(t).map_err(serde::de::Error::custom);
        match CellWire::deserialize(d)? {
            CellWire::One(v) => Ok(Cell::of(num(&v)?)),
            CellWire::Many(count, sum, min, max) => Ok(Self {
                count,
                sum: num(&sum)?,
                min: num(&min)?,
                max: num(&max)?,
            }),
        }
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
        self.merge_metrics(&other.metrics);
    }

    fn merge_metrics(&mut self, metrics: &BTreeMap<String, Cell>) {
        for (name, cell) in metrics {
            match self.metrics.get_mut(name) {
                Some(mine) => mine.merge(cell),
                None => {
                    self.metrics.insert(name.clone(), cell.clone());
                }
            }
        }
    }
}

/// Minute cells as stored: each minute's readings (and devices, in a fleet part), and
/// each metric's cells by minute, its name once.
#[derive(Debug, Default, Serialize, Deserialize)]
struct MinutesWire {
    /// `[minute, readings]`, or `[minute, readings, devices]` in a fleet part.
    #[serde(rename = "mr", default, skip_serializing_if = "Vec::is_empty")]
    readings: Vec<Vec<u64>>,
    #[serde(rename = "mm", default, skip_serializing_if = "BTreeMap::is_empty")]
    metrics: BTreeMap<String, Vec<(u8, Cell)>>,
}

impl MinutesWire {
    fn of(minutes: &BTreeMap<u8, Cells>, with_devices: bool) -> Self {
        let mut out = Self::default();
        for (&minute, cells) in minutes {
            let mut row = vec![u64::from(minute), cells.readings];
            if with_devices {
                row.push(cells.devices);
            }
            out.readings.push(row);
            for (name, cell) in &cells.metrics {
                out.metrics
                    .entry(name.clone())
                    .or_default()
                    .push((minute, cell.clone()));
            }
        }
        out
    }

    fn minutes<E: serde::de::Error>(self) -> Result<BTreeMap<u8, Cells>, E> {
        let mut minutes: BTreeMap<u8, Cells> = BTreeMap::new();
        let minute_of = |m: u64| {
            u8::try_from(m)
                .ok()
                .filter(|m| *m < 60)
                .ok_or_else(|| E::custom(format!("minute {m} is not in 0..60")))
        };
        for row in self.readings {
            let (minute, readings, devices) = match row[..] {
                [m, r] => (m, r, 0),
                [m, r, d] => (m, r, d),
                _ => {
                    return Err(E::custom(
                        "a minute's readings is [minute, readings(, devices)]",
                    ));
                }
            };
            let cells = minutes.entry(minute_of(minute)?).or_default();
            cells.readings = readings;
            cells.devices = devices;
        }
        for (name, cells) in self.metrics {
            for (minute, cell) in cells {
                minutes
                    .entry(minute_of(u64::from(minute))?)
                    .or_default()
                    .metrics
                    .insert(name.clone(), cell);
            }
        }
        Ok(minutes)
    }
}

/// The merge of some minutes' metric cells: an hour's, exactly.
fn merged_metrics(minutes: &BTreeMap<u8, Cells>) -> Cells {
    let mut hour = Cells::default();
    for cells in minutes.values() {
        hour.readings += cells.readings;
        hour.merge_metrics(&cells.metrics);
    }
    hour
}

/// One device's readings of one hour, sealed: minute cells, the hour's cells, and what
/// the directory learns from them. Built by the sealer from the readings, each once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceHour {
    pub device: String,
    /// The hour's start, epoch ms.
    pub hour_ms: i64,
    /// The hour's cells.
    pub hour: Cells,
    /// Cells per minute of the hour (0..60), minutes without readings left out. Empty
    /// in a device summary.
    pub minutes: BTreeMap<u8, Cells>,
    /// The earliest reading's time.
    pub first_ms: i64,
    /// The newest reading: its time and event id (the greatest event id among those
    /// at that time).
    pub last_ms: i64,
    pub last_event: String,
    /// The newest reading's tags.
    pub last_tags: BTreeMap<String, String>,
}

/// A device-hour as stored. `hour` is written only without minutes (a summary); the
/// encoding before kept `hour` and `minutes` (by minute) always, and is still read.
#[derive(Serialize, Deserialize)]
struct DeviceHourWire {
    device: String,
    hour_ms: i64,
    first_ms: i64,
    last_ms: i64,
    last_event: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    last_tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hour: Option<Cells>,
    #[serde(default, skip_serializing)]
    minutes: BTreeMap<u8, Cells>,
    #[serde(flatten)]
    wire: MinutesWire,
}

impl Serialize for DeviceHour {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        DeviceHourWire {
            device: self.device.clone(),
            hour_ms: self.hour_ms,
            first_ms: self.first_ms,
            last_ms: self.last_ms,
            last_event: self.last_event.clone(),
            last_tags: self.last_tags.clone(),
            hour: self.minutes.is_empty().then(|| self.hour.clone()),
            minutes: BTreeMap::new(),
            wire: MinutesWire::of(&self.minutes, false),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for DeviceHour {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = DeviceHourWire::deserialize(d)?;
        let minutes = match w.minutes.is_empty() {
            true => w.wire.minutes()?,
            false => w.minutes,
        };
        let hour = match w.hour {
            Some(hour) => hour,
            None => merged_metrics(&minutes),
        };
        Ok(Self {
            device: w.device,
            hour_ms: w.hour_ms,
            hour,
            minutes,
            first_ms: w.first_ms,
            last_ms: w.last_ms,
            last_event: w.last_event,
            last_tags: w.last_tags,
        })
    }
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

    /// The distinct readings it counts.
    pub fn readings(&self) -> u64 {
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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FleetPart {
    pub hour_ms: i64,
    pub part: u32,
    pub hour: Cells,
    pub minutes: BTreeMap<u8, Cells>,
}

/// A fleet part as stored: the hour's devices (its readings and cells are the merge
/// of its minutes'), and its minutes. The encoding before kept `hour` whole and
/// `minutes` by minute, and is still read.
#[derive(Serialize, Deserialize)]
struct FleetPartWire {
    hour_ms: i64,
    part: u32,
    #[serde(rename = "devices", default)]
    devices: u64,
    #[serde(default, skip_serializing)]
    hour: Option<Cells>,
    #[serde(default, skip_serializing)]
    minutes: BTreeMap<u8, Cells>,
    #[serde(flatten)]
    wire: MinutesWire,
}

impl Serialize for FleetPart {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        FleetPartWire {
            hour_ms: self.hour_ms,
            part: self.part,
            devices: self.hour.devices,
            hour: None,
            minutes: BTreeMap::new(),
            wire: MinutesWire::of(&self.minutes, true),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for FleetPart {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = FleetPartWire::deserialize(d)?;
        if let Some(hour) = w.hour {
            return Ok(Self {
                hour_ms: w.hour_ms,
                part: w.part,
                hour,
                minutes: w.minutes,
            });
        }
        let minutes = w.wire.minutes()?;
        let mut hour = merged_metrics(&minutes);
        hour.devices = w.devices;
        Ok(Self {
            hour_ms: w.hour_ms,
            part: w.part,
            hour,
            minutes,
        })
    }
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

    /// The distinct readings of its devices.
    pub fn readings(&self) -> u64 {
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
/// event id and tags, and the metrics it sent (the first [`MAX_DIR_METRICS`] by name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    pub device: String,
    pub first_seen_ms: i64,
    pub last_seen_ms: i64,
    pub last_event: String,
    #[serde(default)]
    pub metrics: BTreeSet<String>,
    /// Whether the device sent more metrics than `metrics` names.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub more_metrics: bool,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}

impl DirEntry {
    /// The entry one device-hour makes.
    pub fn of(dh: &DeviceHour) -> Self {
        let mut metrics: BTreeSet<String> = dh.hour.metrics.keys().cloned().collect();
        let more_metrics = bounded(&mut metrics);
        Self {
            device: dh.device.clone(),
            first_seen_ms: dh.first_ms,
            last_seen_ms: dh.last_ms,
            last_event: dh.last_event.clone(),
            metrics,
            more_metrics,
            tags: dh.last_tags.clone(),
        }
    }

    /// This entry with `other` merged in: the earliest first seen, the newest reading
    /// (by time, then event id), every metric up to [`MAX_DIR_METRICS`]. On the same
    /// newest reading, `other`'s tags: the sealer merges the entry it computed from the
    /// readings into the stored one, and a reading re-sent with new tags is the last
    /// written. Otherwise commutative and idempotent, so entries merged in any order,
    /// any number of times, agree.
    pub fn merged(&self, other: &DirEntry) -> DirEntry {
        let newest = if (other.last_seen_ms, other.last_event.as_str())
            >= (self.last_seen_ms, self.last_event.as_str())
        {
            other
        } else {
            self
        };
        let mut metrics: BTreeSet<String> = self.metrics.union(&other.metrics).cloned().collect();
        let more_metrics = bounded(&mut metrics) || self.more_metrics || other.more_metrics;
        DirEntry {
            device: self.device.clone(),
            first_seen_ms: self.first_seen_ms.min(other.first_seen_ms),
            last_seen_ms: newest.last_seen_ms,
            last_event: newest.last_event.clone(),
            metrics,
            more_metrics,
            tags: newest.tags.clone(),
        }
    }
}

/// Keeps the first [`MAX_DIR_METRICS`] names; `true` when it dropped any.
fn bounded(metrics: &mut BTreeSet<String>) -> bool {
    let mut dropped = false;
    while metrics.len() > MAX_DIR_METRICS {
        metrics.pop_last();
        dropped = true;
    }
    dropped
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
        let one = Cell::of(BigDecimal::from_str("21.50").unwrap());
        assert_eq!(serde_json::to_string(&one).unwrap(), "\"21.5\"");
        let back: Cell = serde_json::from_str("\"21.5\"").unwrap();
        assert_eq!(back, one);
        assert_eq!(mean(&BigDecimal::from_str("0.3").unwrap(), 3), 0.1);
    }

    fn hour_of_readings(n: i64, metrics: &[&str]) -> DeviceHour {
        let mut dh = DeviceHour::new("d", 0);
        for i in 0..n {
            let m = metrics
                .iter()
                .map(|name| ((*name).to_owned(), d(&format!("{}.5", i % 7))))
                .collect();
            dh.add(i * 30_000, &format!("e{i}"), &m, &BTreeMap::new());
        }
        dh
    }

    #[test]
    fn device_hours_and_parts_read_back_as_written_in_both_encodings() {
        let dh = hour_of_readings(120, &["temperature", "humidity"]);
        let text = serde_json::to_string(&dh).unwrap();
        assert_eq!(serde_json::from_str::<DeviceHour>(&text).unwrap(), dh);
        let summary = dh.summary();
        let text = serde_json::to_string(&summary).unwrap();
        assert_eq!(serde_json::from_str::<DeviceHour>(&text).unwrap(), summary);
        let part = FleetPart::of(0, 3, [&dh, &hour_of_readings(7, &["x"])]);
        let text = serde_json::to_string(&part).unwrap();
        assert_eq!(serde_json::from_str::<FleetPart>(&text).unwrap(), part);
        // The encoding before: every field whole, minutes by minute.
        let legacy = serde_json::json!({
            "device": "d", "hour_ms": 0, "first_ms": 0, "last_ms": 60000, "last_event": "b",
            "hour": {"r": 2, "m": {"t": [2, "3", "1", "2"]}},
            "minutes": {"0": {"r": 1, "m": {"t": [1, "1", "1", "1"]}},
                        "1": {"r": 1, "m": {"t": [1, "2", "2", "2"]}}},
        });
        let read: DeviceHour = serde_json::from_value(legacy).unwrap();
        let mut want = DeviceHour::new("d", 0);
        want.add(
            0,
            "a",
            &BTreeMap::from([("t".to_owned(), d("1"))]),
            &BTreeMap::new(),
        );
        want.add(
            60_000,
            "b",
            &BTreeMap::from([("t".to_owned(), d("2"))]),
            &BTreeMap::new(),
        );
        assert_eq!(read, want);
    }

    #[test]
    fn a_metric_hour_costs_a_small_fraction_of_the_encoding_before() {
        // A reading a minute of one metric with a 64-character name and 38-digit values.
        let name = "m".repeat(64);
        let mut dh = DeviceHour::new("d", 0);
        for minute in 0..60 {
            let v = d(&format!("{minute:02}{}", "7".repeat(36)));
            dh.add(
                minute * MINUTE_MS,
                "e",
                &BTreeMap::from([(name.clone(), v)]),
                &BTreeMap::new(),
            );
        }
        let compact = serde_json::to_string(&dh).unwrap().len();
        // The encoding before: each minute `{"r":1,"m":{name:[1,v,v,v]}}`, and the hour.
        let before = 60 * (r#""00":{"r":1,"m":{"":[1,"","",""]}},"#.len() + 64 + 3 * 38);
        assert!(compact * 3 < before, "{compact} bytes against {before}");
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

    #[test]
    fn a_re_sent_newest_reading_brings_its_tags_and_metrics_stay_bounded() {
        let entry = |tag: &str, metrics: std::ops::Range<usize>| {
            let mut h = DeviceHour::new("d", 0);
            let m = metrics.map(|i| (format!("m{i:04}"), d("1"))).collect();
            h.add(
                5,
                "e",
                &m,
                &BTreeMap::from([("fw".to_owned(), tag.to_owned())]),
            );
            DirEntry::of(&h)
        };
        let stored = entry("1.0", 0..10);
        let resent = entry("2.0", 0..10);
        assert_eq!(stored.merged(&resent).tags["fw"], "2.0", "the last written");
        let wide = entry("1.0", 0..400).merged(&entry("1.0", 400..800));
        assert_eq!(wide.metrics.len(), MAX_DIR_METRICS);
        assert!(wide.more_metrics);
        assert_eq!(wide.metrics.first().map(String::as_str), Some("m0000"));
        assert!(serde_json::to_string(&wide).unwrap().len() < 20 * 1024);
    }
}
