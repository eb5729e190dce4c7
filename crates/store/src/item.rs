//! The reading, as the domain sees it and as the readings table stores it.
//!
//! A [`ReadingItem`] is the stored form: the key from `sharding::key::write_key`, the
//! reading's fields, `ts` twice (RFC 3339 for people and sort keys, `ts_ms` for
//! arithmetic) and `ttl` in epoch seconds, so DynamoDB expires it after the retention.
//! It goes through `serde_dynamo`, never through hand-built attribute maps.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sharding::key::ItemKey;
use sharding::time::Timestamp;

use crate::batch::Item;
use crate::error::StoreError;

/// One validated reading of one device.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// The entity (device) id.
    pub device_id: String,
    /// The producer's id of this reading, stable across redeliveries.
    pub event_id: String,
    /// When it was measured.
    pub ts: Timestamp,
    /// Named finite numbers.
    pub metrics: BTreeMap<String, f64>,
    /// Named strings; may be empty.
    pub tags: BTreeMap<String, String>,
}

/// A reading as stored in the readings table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadingItem {
    /// Partition key.
    #[serde(rename = "PK")]
    pub pk: String,
    /// Sort key.
    #[serde(rename = "SK")]
    pub sk: String,
    /// The entity (device) id.
    pub device_id: String,
    /// The producer's id of this reading.
    pub event_id: String,
    /// RFC 3339 with milliseconds, UTC.
    pub ts: String,
    /// Milliseconds since the Unix epoch.
    pub ts_ms: i64,
    /// Named finite numbers.
    pub metrics: BTreeMap<String, f64>,
    /// Named strings; the attribute is omitted when there are none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Expiry, epoch seconds: `ts + retention`.
    pub ttl: i64,
}

/// [`ReadingItem`] borrowing the reading: same attributes, same serde attributes.
#[derive(Serialize)]
struct ReadingItemRef<'a> {
    #[serde(rename = "PK")]
    pk: &'a str,
    #[serde(rename = "SK")]
    sk: &'a str,
    device_id: &'a str,
    event_id: &'a str,
    ts: String,
    ts_ms: i64,
    metrics: &'a BTreeMap<String, f64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    tags: &'a BTreeMap<String, String>,
    ttl: i64,
}

impl ReadingItem {
    /// The stored form of `reading` under `key`, expiring `retention` after its ts.
    pub fn new(reading: &Reading, key: ItemKey, retention: Duration) -> Self {
        let ts_ms = reading.ts.as_millis();
        let retention_secs = i64::try_from(retention.as_secs()).unwrap_or(i64::MAX);
        Self {
            pk: key.pk,
            sk: key.sk,
            device_id: reading.device_id.clone(),
            event_id: reading.event_id.clone(),
            ts: reading.ts.to_rfc3339(),
            ts_ms,
            metrics: reading.metrics.clone(),
            tags: reading.tags.clone(),
            ttl: ts_ms.div_euclid(1000).saturating_add(retention_secs),
        }
    }

    /// The SDK attribute map of `reading` under `key`: the same item as
    /// `ReadingItem::new(reading, key, retention).to_item()`, marshalled through
    /// `serde_dynamo` from a borrowed view, without copying the reading's strings and
    /// maps first (this runs once per ingested reading).
    pub fn marshal(
        reading: &Reading,
        key: &ItemKey,
        retention: Duration,
    ) -> Result<Item, StoreError> {
        let ts_ms = reading.ts.as_millis();
        let retention_secs = i64::try_from(retention.as_secs()).unwrap_or(i64::MAX);
        let view = ReadingItemRef {
            pk: &key.pk,
            sk: &key.sk,
            device_id: &reading.device_id,
            event_id: &reading.event_id,
            ts: reading.ts.to_rfc3339(),
            ts_ms,
            metrics: &reading.metrics,
            tags: &reading.tags,
            ttl: ts_ms.div_euclid(1000).saturating_add(retention_secs),
        };
        serde_dynamo::to_item(&view).map_err(|e| StoreError::Malformed(e.to_string()))
    }

    /// The item's key.
    pub fn key(&self) -> ItemKey {
        ItemKey {
            pk: self.pk.clone(),
            sk: self.sk.clone(),
        }
    }

    /// The SDK attribute map, through `serde_dynamo`.
    pub fn to_item(&self) -> Result<Item, StoreError> {
        serde_dynamo::to_item(self).map_err(|e| StoreError::Malformed(e.to_string()))
    }

    /// Back from an SDK attribute map.
    pub fn from_item(item: Item) -> Result<Self, StoreError> {
        serde_dynamo::from_item(item).map_err(|e| StoreError::Malformed(e.to_string()))
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
        })
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::AttributeValue;

    use super::*;

    fn reading(tags: &[(&str, &str)]) -> Reading {
        Reading {
            device_id: "dev-1".into(),
            event_id: "e-1".into(),
            ts: Timestamp::parse("2026-06-22T01:00:00.250Z").expect("valid ts"),
            metrics: BTreeMap::from([("temperature".into(), 21.5)]),
            tags: tags
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
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
        for tags in [&[][..], &[("site", "a"), ("zone", "b")][..]] {
            let r = reading(tags);
            for retention in [Duration::from_secs(60), Duration::MAX] {
                let owned = ReadingItem::new(&r, key(), retention)
                    .to_item()
                    .expect("serializable");
                let borrowed = ReadingItem::marshal(&r, &key(), retention).expect("serializable");
                assert_eq!(borrowed, owned);
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
}
