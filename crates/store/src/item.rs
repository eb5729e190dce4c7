//! The reading, as the domain sees it and as the readings table stores it.
//!
//! A [`ReadingItem`] is the stored form: the key from `sharding::key::write_key`, the
//! reading's fields, `ts` twice (RFC 3339 for people and sort keys, `ts_ms` for
//! arithmetic) and `ttl` in epoch seconds, so DynamoDB expires it after the retention.
//! It goes through `serde_dynamo`, with two exceptions. Its `metrics` are numbers as
//! the device sent them ([`Decimal`]), which `serde_dynamo` could only carry through a
//! double: [`ReadingItem::to_item`] and [`ReadingItem::from_item`] write and read that
//! one attribute themselves ([`metrics_attribute`], [`metrics_of`]), and the item is
//! no `serde` type, so nothing sends it through `serde_dynamo` whole. And
//! [`ReadingItem::marshal`], the ingest's hot path, builds the SDK's attribute map
//! directly. Through `serde_dynamo` that step was 68% of the ingest's CPU per reading
//! (bench/REPORT.md item 5), because it builds its own map first and then the SDK's. A
//! property test (`tests/marshal.rs` of the ingest) holds it equal to
//! [`ReadingItem::to_item`] for every reading the parser accepts. Every other item,
//! and every read, stays with `serde_dynamo`: hand-built attribute maps are allowed
//! only where a figure shows the cost or a double would lose a number.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use item_size as rule;
use serde::{Deserialize, Serialize};
use sharding::by_device::DeviceReading;
use sharding::key::ItemKey;
use sharding::time::Timestamp;
use sharding::written::{WriteOrder, Written};

use crate::batch::Item;
use crate::decimal::Decimal;
use crate::error::StoreError;

/// Partition key attribute name of both tables.
pub const PK: &str = "PK";
/// Sort key attribute name of the readings table.
pub const SK: &str = "SK";

/// One validated reading of one device.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// The entity (device) id.
    pub device_id: String,
    /// The producer's id of this reading, stable across redeliveries.
    pub event_id: String,
    /// When it was measured.
    pub ts: Timestamp,
    /// Named numbers, as sent.
    pub metrics: BTreeMap<String, Decimal>,
    /// Named strings; may be empty.
    pub tags: BTreeMap<String, String>,
    /// When this copy was written: its message's `SentTimestamp` (`sharding::written`);
    /// of two copies of one identity, every read keeps the greater.
    pub written: WriteOrder,
}

/// The longest time-bucket partition key, `{s}.{j}#{bucket}`: two shard numbers of
/// at most 10 digits and a minute's label (16 characters). The other layouts' keys are
/// the entity and a suffix of at most 10 digits.
pub(crate) const BUCKET_PK_BOUND: usize = 10 + 1 + 10 + 1 + 16;
/// The longest `ts_ms` or `ttl` takes: an `i64` has at most 19 digits.
pub(crate) const INTEGER_BOUND: usize = 11;

impl Reading {
    /// An upper bound of its item's size, with no key or number formatted: the
    /// partition key at its longest, the sort key of the longest form
    /// (`{entity}#{ts}#{event_id}`), `ts_ms` and `ttl` at their longest. What the ingest
    /// measures an entity's rate in write units by, before its readings are keyed; at
    /// most a few bytes a metric above the item [`ReadingItem::marshal`] builds.
    #[must_use]
    pub fn item_size_bound(&self) -> usize {
        let ts = sharding::time::RFC3339_LEN;
        let sk = self.device_id.len() + 1 + ts + 1 + self.event_id.len();
        let metrics = rule::MAP_OVERHEAD
            + self
                .metrics
                .iter()
                .map(|(name, value)| rule::map_element_size(name, value.stored_size()))
                .sum::<usize>();
        let tags = (!self.tags.is_empty()).then(|| {
            rule::MAP_OVERHEAD
                + self
                    .tags
                    .iter()
                    .map(|(name, value)| rule::map_element_size(name, value.len()))
                    .sum::<usize>()
        });
        rule::item_size(
            [
                (PK, BUCKET_PK_BOUND.max(self.device_id.len() + 11)),
                (SK, sk),
                ("device_id", self.device_id.len()),
                ("event_id", self.event_id.len()),
                ("ts", ts),
                ("ts_ms", INTEGER_BOUND),
                ("metrics", metrics),
                ("ttl", INTEGER_BOUND),
                (WRITTEN, INTEGER_BOUND),
            ]
            .into_iter()
            .chain(tags.map(|size| ("tags", size))),
        )
    }
}

/// A reading as stored in the readings table. Written and read by
/// [`ReadingItem::to_item`] and [`ReadingItem::from_item`] only: it is no `serde` type,
/// since `serde_dynamo` would carry its numbers through a double.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadingItem {
    /// Partition key.
    pub pk: String,
    /// Sort key.
    pub sk: String,
    /// The entity (device) id.
    pub device_id: String,
    /// The producer's id of this reading.
    pub event_id: String,
    /// RFC 3339 with milliseconds, UTC.
    pub ts: String,
    /// Milliseconds since the Unix epoch.
    pub ts_ms: i64,
    /// Named numbers, as sent.
    pub metrics: BTreeMap<String, Decimal>,
    /// Named strings; the attribute is omitted when there are none.
    pub tags: BTreeMap<String, String>,
    /// Expiry, epoch seconds: `ts + retention`.
    pub ttl: i64,
    /// When this copy was written ([`Reading::written`]); stored as `w`, omitted when
    /// [`WriteOrder::OLDEST`] (an item stored before copies carried one reads as that).
    pub written: WriteOrder,
}

/// The attribute of a copy's write order (`sharding::written::WriteOrder`): N, epoch
/// milliseconds, omitted when the oldest.
pub const WRITTEN: &str = "w";

/// Of two copies of one reading, the one written last; on one millisecond, the greater
/// content, so that every reader keeps the same copy (`sharding::written`).
impl Written for ReadingItem {
    fn written_cmp(&self, other: &Self) -> Ordering {
        (self.written, &self.metrics, &self.tags).cmp(&(other.written, &other.metrics, &other.tags))
    }
}

/// A reading as the sealer's merge by device sees it (`sharding::by_device`).
impl DeviceReading for ReadingItem {
    fn device(&self) -> &str {
        &self.device_id
    }
    fn ts_ms(&self) -> i64 {
        self.ts_ms
    }
    fn event_id(&self) -> &str {
        &self.event_id
    }
}

/// A reading item's attributes but `metrics`, as `serde_dynamo` writes and reads them.
#[derive(Serialize, Deserialize)]
struct Attributes<'a> {
    #[serde(rename = "PK")]
    pk: Cow<'a, str>,
    #[serde(rename = "SK")]
    sk: Cow<'a, str>,
    device_id: Cow<'a, str>,
    event_id: Cow<'a, str>,
    ts: Cow<'a, str>,
    ts_ms: i64,
    #[serde(default, skip_serializing_if = "no_tags")]
    tags: Cow<'a, BTreeMap<String, String>>,
    ttl: i64,
    #[serde(rename = "w", default, skip_serializing_if = "oldest")]
    w: i64,
}

/// Whether a stored write order is the oldest, which is stored as no attribute.
pub(crate) fn oldest(w: &i64) -> bool {
    WriteOrder(*w).is_oldest()
}

fn no_tags(tags: &impl AsRef<BTreeMap<String, String>>) -> bool {
    tags.as_ref().is_empty()
}

/// A reading's item as the SDK sends it ([`ReadingItem::marshal`]), with its size.
#[derive(Debug, Clone, PartialEq)]
pub struct Encoded {
    /// The attribute map.
    pub item: Item,
    /// Its size in bytes, as [`crate::size::item_size`] measures it.
    pub size: usize,
}

/// An attribute value with its size.
pub(crate) type SizedValue = (AttributeValue, usize);

pub(crate) fn string(s: String) -> SizedValue {
    let size = rule::string_size(&s);
    (AttributeValue::S(s), size)
}

pub(crate) fn number(n: String) -> SizedValue {
    let size = rule::number_size(&n);
    (AttributeValue::N(n), size)
}

fn map<'a>(elements: impl ExactSizeIterator<Item = (&'a String, SizedValue)>) -> SizedValue {
    let mut map = HashMap::with_capacity(elements.len());
    let mut size = rule::MAP_OVERHEAD;
    for (name, (value, value_size)) in elements {
        size += rule::map_element_size(name, value_size);
        map.insert(name.clone(), value);
    }
    (AttributeValue::M(map), size)
}

/// A reading's `metrics` attribute: M of N, each number its canonical text.
#[must_use]
pub fn metrics_attribute(metrics: &BTreeMap<String, Decimal>) -> AttributeValue {
    AttributeValue::M(
        metrics
            .iter()
            .map(|(name, value)| (name.clone(), AttributeValue::N(value.as_str().to_owned())))
            .collect(),
    )
}

/// A reading's metrics back from its `metrics` attribute, or what is wrong with it.
pub fn metrics_of(attribute: AttributeValue) -> Result<BTreeMap<String, Decimal>, String> {
    let AttributeValue::M(map) = attribute else {
        return Err("metrics: not a map".to_owned());
    };
    map.into_iter()
        .map(|(name, value)| {
            let number = number_of(&value).map_err(|e| format!("metrics.{name}: {e}"))?;
            Ok((name, number))
        })
        .collect()
}

/// The number an N attribute holds, in canonical form, or why it is none.
pub(crate) fn number_of(value: &AttributeValue) -> Result<Decimal, String> {
    match value {
        AttributeValue::N(text) => Decimal::parse(text).map_err(|e| format!("{text:?} {e}")),
        other => Err(format!("{other:?} is not a number")),
    }
}

/// When an item whose last reading is at `ts` expires: `ts` plus `retention`, in epoch
/// seconds (DynamoDB's TTL).
pub fn expiry(ts: Timestamp, retention: Duration) -> i64 {
    let retention_secs = i64::try_from(retention.as_secs()).unwrap_or(i64::MAX);
    ts.as_millis()
        .div_euclid(1000)
        .saturating_add(retention_secs)
}

/// An SDK attribute map built attribute by attribute and sized by DynamoDB's rule as it
/// is built: the hot path's encoders ([`ReadingItem::marshal`] and the block's).
pub(crate) struct ItemBuilder {
    item: Item,
    size: usize,
}

impl ItemBuilder {
    /// An item under `key` that starts as `first`'s own would (the attributes a
    /// reading's item and a block share: the key, `device_id`, `event_id`, `ts` and
    /// `ts_ms`), with room for `attributes` in all.
    pub(crate) fn under(key: &ItemKey, first: &Reading, attributes: usize) -> Self {
        let mut builder = Self::keyed(&key.pk, &key.sk, attributes);
        builder.put("device_id", string(first.device_id.clone()));
        builder.put("event_id", string(first.event_id.clone()));
        builder.put("ts", string(first.ts.to_rfc3339()));
        builder.put("ts_ms", number(first.ts.as_millis().to_string()));
        builder
    }

    /// An item of the key `pk`, `sk` alone so far, with room for `attributes` in all.
    pub(crate) fn keyed(pk: &str, sk: &str, attributes: usize) -> Self {
        let mut builder = Self {
            item: Item::with_capacity(attributes),
            size: 0,
        };
        builder.put(PK, string(pk.to_owned()));
        builder.put(SK, string(sk.to_owned()));
        builder
    }

    /// Adds the attribute `name`.
    pub(crate) fn put(&mut self, name: &str, (value, value_size): SizedValue) {
        self.size += rule::attribute_size(name, value_size);
        self.item.insert(name.to_owned(), value);
    }

    /// The item and its size.
    pub(crate) fn finish(self) -> Encoded {
        Encoded {
            item: self.item,
            size: self.size,
        }
    }
}

impl ReadingItem {
    /// The stored form of `reading` under `key`, expiring `retention` after its ts.
    pub fn new(reading: &Reading, key: ItemKey, retention: Duration) -> Self {
        Self {
            pk: key.pk,
            sk: key.sk,
            device_id: reading.device_id.clone(),
            event_id: reading.event_id.clone(),
            ts: reading.ts.to_rfc3339(),
            ts_ms: reading.ts.as_millis(),
            metrics: reading.metrics.clone(),
            tags: reading.tags.clone(),
            ttl: expiry(reading.ts, retention),
            written: reading.written,
        }
    }

    /// The SDK attribute map of `reading` under `key` (moved in), and its size: the same item as
    /// `ReadingItem::new(reading, key, retention).to_item()`, built directly (the one
    /// hand-built attribute map of the project: this runs once per ingested reading),
    /// sized by DynamoDB's rule as it is built rather than walked again after.
    #[must_use]
    pub fn marshal(reading: &Reading, key: &ItemKey, retention: Duration) -> Encoded {
        let mut item = ItemBuilder::under(key, reading, 10);
        let metrics = reading.metrics.iter();
        item.put(
            "metrics",
            map(metrics.map(|(name, value)| (name, number(value.as_str().to_owned())))),
        );
        if !reading.tags.is_empty() {
            let tags = reading.tags.iter();
            item.put(
                "tags",
                map(tags.map(|(name, value)| (name, string(value.clone())))),
            );
        }
        item.put("ttl", number(expiry(reading.ts, retention).to_string()));
        if !reading.written.is_oldest() {
            item.put(WRITTEN, number(reading.written.0.to_string()));
        }
        item.finish()
    }

    /// The item's key.
    pub fn key(&self) -> ItemKey {
        ItemKey {
            pk: self.pk.clone(),
            sk: self.sk.clone(),
        }
    }

    /// The SDK attribute map: through `serde_dynamo`, but for `metrics`
    /// ([`metrics_attribute`]).
    pub fn to_item(&self) -> Result<Item, StoreError> {
        let attributes = Attributes {
            pk: Cow::Borrowed(&self.pk),
            sk: Cow::Borrowed(&self.sk),
            device_id: Cow::Borrowed(&self.device_id),
            event_id: Cow::Borrowed(&self.event_id),
            ts: Cow::Borrowed(&self.ts),
            ts_ms: self.ts_ms,
            tags: Cow::Borrowed(&self.tags),
            ttl: self.ttl,
            w: self.written.0,
        };
        let mut item: Item =
            serde_dynamo::to_item(attributes).map_err(|e| StoreError::Malformed(e.to_string()))?;
        item.insert("metrics".to_owned(), metrics_attribute(&self.metrics));
        Ok(item)
    }

    /// Back from an SDK attribute map: through `serde_dynamo`, but for `metrics`
    /// ([`metrics_of`]).
    pub fn from_item(mut item: Item) -> Result<Self, StoreError> {
        let metrics = item
            .remove("metrics")
            .ok_or_else(|| StoreError::Malformed("missing field `metrics`".to_owned()))?;
        let metrics = metrics_of(metrics).map_err(StoreError::Malformed)?;
        let a: Attributes<'static> =
            serde_dynamo::from_item(item).map_err(|e| StoreError::Malformed(e.to_string()))?;
        Ok(Self {
            pk: a.pk.into_owned(),
            sk: a.sk.into_owned(),
            device_id: a.device_id.into_owned(),
            event_id: a.event_id.into_owned(),
            ts: a.ts.into_owned(),
            ts_ms: a.ts_ms,
            metrics,
            tags: a.tags.into_owned(),
            ttl: a.ttl,
            written: WriteOrder(a.w),
        })
    }

    /// The domain reading (the key is dropped; `ts_ms` is authoritative).
    pub fn into_reading(self) -> Result<Reading, StoreError> {
        let ts = Timestamp::from_millis(self.ts_ms)
            .map_err(|e| StoreError::Malformed(format!("ts_ms: {e}")))?;
        Ok(Reading {
            device_id: self.device_id,
            event_id: self.event_id,
            ts,
            metrics: self.metrics,
            tags: self.tags,
            written: self.written,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(tags: &[(&str, &str)]) -> Reading {
        Reading {
            device_id: "dev-1".into(),
            event_id: "e-1".into(),
            ts: Timestamp::parse("2026-06-22T01:00:00.250Z").expect("valid ts"),
            metrics: BTreeMap::from([("temperature".into(), "21.5".parse().expect("a number"))]),
            tags: tags
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            written: WriteOrder(1_782_090_001_000),
        }
    }

    fn key() -> ItemKey {
        ItemKey {
            pk: "dev-1#0".into(),
            sk: "2026-06-22T01:00:00.250Z#e-1".into(),
        }
    }

    #[test]
    fn item_has_the_documented_attributes() {
        let item = ReadingItem::new(
            &reading(&[("site", "a")]),
            key(),
            Duration::from_secs(86_400),
        )
        .to_item()
        .expect("serializable");
        assert_eq!(item.get("PK"), Some(&AttributeValue::S("dev-1#0".into())));
        assert_eq!(
            item.get("ts"),
            Some(&AttributeValue::S("2026-06-22T01:00:00.250Z".into()))
        );
        assert_eq!(
            item.get("ts_ms"),
            Some(&AttributeValue::N("1782090000250".into()))
        );
        assert_eq!(
            item.get("ttl"),
            Some(&AttributeValue::N("1782176400".into()))
        );
        assert!(matches!(item.get("metrics"), Some(AttributeValue::M(m)) if m.len() == 1));
        assert!(matches!(item.get("tags"), Some(AttributeValue::M(_))));
    }

    #[test]
    fn marshal_equals_the_owned_item() {
        for (tags, written) in [
            (&[][..], WriteOrder::OLDEST),
            (
                &[("site", "a"), ("zone", "b")][..],
                WriteOrder(1_782_090_001_000),
            ),
        ] {
            let r = Reading {
                written,
                ..reading(tags)
            };
            for retention in [Duration::from_secs(60), Duration::MAX] {
                let owned = ReadingItem::new(&r, key(), retention)
                    .to_item()
                    .expect("serializable");
                let encoded = ReadingItem::marshal(&r, &key(), retention);
                assert_eq!(encoded.size, crate::size::item_size(&owned));
                assert_eq!(encoded.item, owned);
            }
        }
    }

    #[test]
    fn empty_tags_are_omitted_and_round_trip() {
        let original = reading(&[]);
        let stored = ReadingItem::new(&original, key(), Duration::from_secs(60));
        let item = stored.to_item().expect("serializable");
        assert!(!item.contains_key("tags"));
        let back = ReadingItem::from_item(item).expect("deserializable");
        assert_eq!(back, stored);
        assert_eq!(back.into_reading().expect("valid"), original);
    }

    #[test]
    fn a_copy_keeps_its_write_order_and_one_stored_without_reads_as_the_oldest() {
        let stored = ReadingItem::new(&reading(&[]), key(), Duration::from_secs(60));
        let item = stored.to_item().expect("serializable");
        assert_eq!(
            item.get(WRITTEN),
            Some(&AttributeValue::N("1782090001000".into()))
        );
        let mut old = item.clone();
        old.remove(WRITTEN);
        let old = ReadingItem::from_item(old).expect("an item stored before `w`");
        assert_eq!(old.written, WriteOrder::OLDEST);
        let back = ReadingItem::from_item(item).expect("deserializable");
        assert_eq!(back, stored);
        assert_eq!(back.written_cmp(&old), Ordering::Greater);
    }
}
