//! A message of the fleet's shape, as a device sends it and as the store writes it: the
//! bytes each door carries, and the items, write units and stored bytes the store's own
//! encoders (`store::ReadingItem::marshal`, `store::pack`, DynamoDB's size rule in
//! `item-size`) make of its readings, and the slab and run items (`store::slab`) many
//! devices' readings of the shape make ([`slab_items`]). Nothing here is a guessed size.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::time::Duration;

use anyhow::{Context as _, bail};
use serde_json::{Map, Value, json};
use sharding::block::BlockLayout;
use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::key::{ReadingRef, write_key};
use sharding::layout::Layout;
use sharding::time::{Bucket, Timestamp};
use store::Reading;

use super::model::Packing;

/// A sample device's id: thirteen characters, as `device-000001`.
pub const DEVICE_ID: &str = "device-000001";
/// A thing's certificate id as IoT Core's `principal()` gives it: 64 hex digits.
const PRINCIPAL_LEN: usize = 64;
/// DynamoDB bills storage for each item's bytes plus 100 bytes of overhead.
pub const STORAGE_OVERHEAD_BYTES: usize = 100;
/// The most readings a message holds (docs/formats.md).
pub const MAX_READINGS_A_MESSAGE: u32 = 500;
/// The most metrics a reading holds (docs/formats.md).
pub const MAX_METRICS: u32 = 64;
/// The first sample reading's time: the start of an hour.
pub(crate) const START_MS: i64 = 1_782_090_000_000;
/// What a tag `"note"` adds to a reading's JSON beside its text: `,"tags":{"note":""}`.
const TAG_OVERHEAD: usize = 19;

/// What one message of the shape is, sent and stored.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Sample {
    /// One reading's JSON as sent, in bytes.
    pub reading_bytes: usize,
    /// The message a device sends (one reading, or `{"readings": [...]}`), in bytes.
    pub message_bytes: usize,
    /// The message the IoT rule hands SQS (its SELECT: the payload in base64, the thing,
    /// the client and the principal), in bytes.
    pub rule_output_bytes: usize,
    /// Items the store writes for the message's readings.
    pub items: usize,
    /// Their write units (each item's started KBs).
    pub write_units: usize,
    /// Their bytes by DynamoDB's rule.
    pub item_bytes: usize,
}

/// The message of `readings` readings of `metrics` metrics, `interval_ms` apart, each
/// `reading_bytes` long as sent when given (padded with a tag), written under `packing`.
pub fn sample(
    readings: u32,
    metrics: u32,
    reading_bytes: Option<usize>,
    interval_ms: i64,
    packing: Packing,
) -> anyhow::Result<Sample> {
    if !(1..=MAX_READINGS_A_MESSAGE).contains(&readings) {
        bail!("readings a message must be 1..={MAX_READINGS_A_MESSAGE}, got {readings}");
    }
    if !(1..=MAX_METRICS).contains(&metrics) {
        bail!("metrics a reading must be 1..={MAX_METRICS}, got {metrics}");
    }
    let pad = padding(metrics, reading_bytes)?;
    let jsons: Vec<Value> = (0..readings)
        .map(|i| reading_json(i, metrics, &pad, interval_ms))
        .collect();
    let reading_len = jsons[0].to_string().len();
    let message = match jsons.as_slice() {
        [one] => one.clone(),
        _ => json!({ "readings": jsons }),
    };
    let message_bytes = message.to_string().len();
    let stored = store_readings(&jsons, packing)?;
    Ok(Sample {
        reading_bytes: reading_len,
        message_bytes,
        rule_output_bytes: rule_output_len(message_bytes),
        items: stored.0,
        write_units: stored.1,
        item_bytes: stored.2,
    })
}

/// How a reading reaches the asked size: a longer event id, or a tag.
#[derive(Debug, Clone, Default)]
struct Pad {
    event_id_extra: usize,
    tag: Option<String>,
}

fn padding(metrics: u32, reading_bytes: Option<usize>) -> anyhow::Result<Pad> {
    let natural = reading_json(0, metrics, &Pad::default(), 0)
        .to_string()
        .len();
    let Some(target) = reading_bytes else {
        return Ok(Pad::default());
    };
    if target < natural {
        bail!(
            "--reading-bytes {target} is below the smallest reading of {metrics} metrics \
             ({natural} bytes as sent)"
        );
    }
    let extra = target - natural;
    // Short of a tag's own bytes, a longer event id (36 characters and under 19 more,
    // well within the 128 an id may have); else a tag.
    Ok(if extra < TAG_OVERHEAD {
        Pad {
            event_id_extra: extra,
            tag: None,
        }
    } else {
        Pad {
            event_id_extra: 0,
            tag: Some("x".repeat(extra.saturating_sub(TAG_OVERHEAD))),
        }
    })
}

/// The `i`th reading of the sample message as a device sends it.
fn reading_json(i: u32, metrics: u32, pad: &Pad, interval_ms: i64) -> Value {
    let mut values = Map::new();
    for m in 0..metrics {
        let name = match m {
            0 => "temperature".to_owned(),
            1 => "humidity".to_owned(),
            _ => format!("metric_{m:02}"),
        };
        // Four significant digits, as a sensor reports: 21.37, 22.37, ...
        let text = format!("{}.37", 21 + m);
        let number: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        values.insert(name, number);
    }
    let ts = Timestamp::from_millis(START_MS + i64::from(i) * interval_ms)
        .map_or_else(|_| String::new(), Timestamp::to_rfc3339);
    let event_id = format!(
        "{i:08x}-0000-4000-8000-000000000001{}",
        "0".repeat(pad.event_id_extra)
    );
    let mut reading = json!({
        "device_id": DEVICE_ID,
        "event_id": event_id,
        "ts": ts,
        "metrics": values,
    });
    if let Some(note) = &pad.tag {
        reading["tags"] = json!({ "note": note });
    }
    reading
}

/// Bytes of the IoT rule's SELECT for a payload of `payload` bytes: base64 of the
/// payload, and the thing, client and principal beside it (template.yaml's rule).
fn rule_output_len(payload: usize) -> usize {
    let base64 = "A".repeat(payload.div_ceil(3) * 4);
    json!({
        "payload": base64,
        "thing": DEVICE_ID,
        "client": DEVICE_ID,
        "principal": "0".repeat(PRINCIPAL_LEN),
    })
    .to_string()
    .len()
}

/// Items, write units and bytes the store writes for `jsons` (one message of one
/// device), keyed under the template's default layout (time buckets of an hour, N = 8),
/// blocks packed by the default block layout where `packing` is blocks.
fn store_readings(jsons: &[Value], packing: Packing) -> anyhow::Result<(usize, usize, usize)> {
    let base = Layout::time_bucket(Bucket::Hour, NonZeroU32::new(8).unwrap_or(NonZeroU32::MIN));
    let layout = match packing {
        Packing::Items => base,
        // A table of slabs packs blocks as a new table does: a device whose share of a
        // batch fills a write unit keeps them.
        Packing::Blocks | Packing::Slabs => base.with_blocks(BlockLayout::default()),
    };
    let table = TableHistory::new(layout);
    let readings: Vec<Reading> = jsons
        .iter()
        .map(to_reading)
        .collect::<anyhow::Result<_>>()?;
    // The template's RetentionDays only sets the ttl's value, not its length.
    let retention = Duration::from_secs(30 * 86_400);
    let units = store::pack::pack(&readings, &table);
    let (mut items, mut write_units, mut bytes) = (0, 0, 0);
    for members in store::pack::take(readings, &units) {
        let first = members.first().context("an item of no reading")?;
        let first_key = write_key(
            &ReadingRef::new(&first.device_id, &first.event_id, first.ts),
            &table,
            &FanoutHistory::new(),
            first.ts,
        )?
        .key;
        let key = store::pack::item_key(&members, &first_key);
        let encoded = store::pack::encode(&members, &key, retention)?;
        items += 1;
        write_units += store::size::write_units(encoded.size);
        bytes += encoded.size;
    }
    Ok((items, write_units, bytes))
}

/// What a set of readings is stored as: items, their write units and their bytes by
/// DynamoDB's rule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stored {
    pub items: usize,
    pub write_units: usize,
    pub bytes: usize,
}

impl Stored {
    fn add(&mut self, other: Stored, times: usize) {
        self.items += other.items * times;
        self.write_units += other.write_units * times;
        self.bytes += other.bytes * times;
    }
}

/// How [`slab_items`] keys and sizes the items it makes.
pub(crate) struct SlabKeys<'a> {
    /// The longest partition and sort keys the writer cuts by (`store::slab::cut`).
    pub(crate) key_lens: (usize, usize),
    /// The most bytes of an item (`SlabLayout::max_bytes`).
    pub(crate) max_bytes: usize,
    /// The partition and sort key of an item: its first member's device and its part.
    pub(crate) key: &'a dyn Fn(&str, usize) -> (String, String),
    /// The items' expiry, epoch seconds.
    pub(crate) ttl: i64,
}

/// The slab or run items (`store::slab::marshal`) of `count` readings of the shape
/// (`metrics`, `reading_bytes` as sent), `per_device` of each device, of devices with
/// distinct ids as long as [`DEVICE_ID`], `interval_ms` apart within a window, cut as
/// the writers cut them (`store::slab::cut`, each item sized as it is encoded). A full
/// item is marshalled once and counted as often as the readings fill it, so `count`
/// may be a fleet's.
pub(crate) fn slab_items(
    count: usize,
    per_device: usize,
    metrics: u32,
    reading_bytes: Option<usize>,
    interval_ms: i64,
    keys: &SlabKeys<'_>,
) -> anyhow::Result<Stored> {
    if !(1..=MAX_METRICS).contains(&metrics) {
        bail!("metrics a reading must be 1..={MAX_METRICS}, got {metrics}");
    }
    if count == 0 {
        return Ok(Stored::default());
    }
    let pad = padding(metrics, reading_bytes)?;
    let base = to_reading(&reading_json(0, metrics, &pad, interval_ms))?;
    let per_device = per_device.max(1);
    // A member packs to at least a byte, so at most this many fit one item: the
    // readings are made only up to it.
    let most = keys.max_bytes + 1;
    let readings: Vec<Reading> = (0..count.min(most))
        .map(|i| fleet_reading(&base, i / per_device, i % per_device, interval_ms))
        .collect();
    let full = store::slab::cut(&readings, keys.max_bytes, keys.key_lens)?
        .first()
        .map_or(1, ExactSizeIterator::len);
    let item = |members: &[Reading], part: usize| -> anyhow::Result<Stored> {
        let first = members.first().context("an item of no reading")?;
        let (pk, sk) = (keys.key)(&first.device_id, part);
        let encoded = store::slab::marshal(members, &pk, &sk, keys.ttl)?;
        Ok(Stored {
            items: 1,
            write_units: store::size::write_units(encoded.size),
            bytes: encoded.size,
        })
    };
    let mut stored = Stored::default();
    stored.add(
        item(&readings[..full.min(readings.len())], 0)?,
        count / full,
    );
    let rest = count % full;
    if rest > 0 {
        stored.add(item(&readings[..rest], count / full)?, 1);
    }
    Ok(stored)
}

/// The `j`th reading of the `d`th device of a fleet of readings like `base`: an id as
/// long as [`DEVICE_ID`], an event id of `base`'s length that shares no prefix with
/// its neighbours' (as random ids share none).
fn fleet_reading(base: &Reading, d: usize, j: usize, interval_ms: i64) -> Reading {
    let mut r = base.clone();
    r.device_id = format!("device-{d:06}");
    let spread = u32::try_from(d * 64 + j)
        .unwrap_or(u32::MAX)
        .wrapping_mul(0x9E37_79B9);
    r.event_id = format!("{spread:08x}{}", &base.event_id[8..]);
    let ts = base.ts.as_millis() + i64::try_from(j).unwrap_or(0) * interval_ms;
    r.ts = Timestamp::from_millis(ts).unwrap_or(base.ts);
    r.written = store::WriteOrder(r.ts.as_millis());
    r
}

/// The store's reading of a sample reading's JSON.
fn to_reading(json: &Value) -> anyhow::Result<Reading> {
    let text = |k: &str| {
        json[k]
            .as_str()
            .map(str::to_owned)
            .context("a string field")
    };
    let ts = Timestamp::parse(&text("ts")?)?;
    let metrics = json["metrics"]
        .as_object()
        .context("metrics")?
        .iter()
        .map(|(k, v)| Ok((k.clone(), store::Decimal::parse(&v.to_string())?)))
        .collect::<anyhow::Result<BTreeMap<_, _>>>()?;
    let tags = json
        .get("tags")
        .and_then(Value::as_object)
        .map(|t| {
            t.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    Ok(Reading {
        device_id: text("device_id")?,
        event_id: text("event_id")?,
        ts,
        metrics,
        tags,
        // As the ingest stores it: its message's SentTimestamp, about its time.
        written: store::WriteOrder(ts.as_millis()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_padded_reading_is_as_long_as_asked_and_a_short_one_is_refused() {
        for bytes in [200, 210, 500, 2_000] {
            let s = sample(1, 2, Some(bytes), 1_000, Packing::Items).expect("a sample");
            assert_eq!(s.reading_bytes, bytes);
            assert_eq!(s.message_bytes, bytes, "one reading is the message");
        }
        let err = sample(1, 19, Some(100), 1_000, Packing::Items).expect_err("too short");
        assert!(
            err.to_string().contains("below the smallest reading"),
            "{err}"
        );
    }

    #[test]
    fn blocks_pack_a_message_of_one_device_into_fewer_write_units_than_items() {
        let items = sample(50, 2, None, 1_000, Packing::Items).expect("items");
        let blocks = sample(50, 2, None, 1_000, Packing::Blocks).expect("blocks");
        assert_eq!(items.items, 50);
        assert_eq!(items.write_units, 50, "a small reading is one write unit");
        assert!(blocks.items < items.items);
        assert!(blocks.write_units * 5 < items.write_units, "{blocks:?}");
    }
}
