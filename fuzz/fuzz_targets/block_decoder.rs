//! The block decoder (`store::block::BlockItem::from_item` and `readings`) and the slab
//! decoder (`store::slab::decode`, for an item with a `slab` attribute) on arbitrary
//! stored items: each refuses an item that breaks a rule of its format or returns its
//! members in order, one per entry of every column, each number a canonical decimal,
//! and never panics. What the slab decoder accepts, its encoder writes again as an item
//! that reads back the same.
//!
//! The input is a JSON object read as an item: a number is an `N` of its text, a string
//! an `S`, except one that starts with `n:`, which is an `N` of the rest (so any text at
//! all reaches the number parser), a list an `L`, an object an `M`, null a `NULL`.

#![no_main]

use aws_sdk_dynamodb::types::AttributeValue;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use store::block::BlockItem;
use store::item::{Reading, ReadingItem};
use store::{Decimal, Item, slab};

fn attribute(value: Value) -> AttributeValue {
    match value {
        Value::Null => AttributeValue::Null(true),
        Value::Bool(b) => AttributeValue::Bool(b),
        Value::Number(n) => AttributeValue::N(n.to_string()),
        Value::String(s) => match s.strip_prefix("n:") {
            Some(text) => AttributeValue::N(text.to_owned()),
            None => AttributeValue::S(s),
        },
        Value::Array(list) => AttributeValue::L(list.into_iter().map(attribute).collect()),
        Value::Object(map) => {
            AttributeValue::M(map.into_iter().map(|(k, v)| (k, attribute(v))).collect())
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let item: Item = map.into_iter().map(|(k, v)| (k, attribute(v))).collect();
    if slab::is_slab(&item) {
        check_slab(item);
        return;
    }
    let Ok(block) = BlockItem::from_item(item) else {
        return;
    };
    if let Ok(readings) = block.readings() {
        assert_eq!(readings.len(), block.ids.len());
        assert!(
            readings
                .windows(2)
                .all(|w| (w[0].ts_ms, &w[0].event_id) < (w[1].ts_ms, &w[1].event_id))
        );
        assert!(readings.iter().all(|r| r.device_id == block.device_id));
        assert_canonical(&readings);
    }
});

/// A slab the decoder accepts: its members in (device, ts, event id) order, each once,
/// under the item's key, and written again by the encoder as the same members.
fn check_slab(item: Item) {
    let Some(AttributeValue::S(pk)) = item.get("PK").cloned() else {
        assert!(slab::decode(item).is_err(), "a slab without a PK string");
        return;
    };
    let Ok(readings) = slab::decode(item) else {
        return;
    };
    assert!(!readings.is_empty());
    assert!(readings.windows(2).all(|w| {
        (&w[0].device_id, w[0].ts_ms, &w[0].event_id) < (&w[1].device_id, w[1].ts_ms, &w[1].event_id)
    }));
    assert!(readings.iter().all(|r| r.pk == pk));
    assert_canonical(&readings);
    let ttl = readings[0].ttl;
    let members: Vec<Reading> = readings
        .iter()
        .map(|r| r.clone().into_reading().expect("a decoded member is a reading"))
        .collect();
    let again = slab::marshal(&members, &pk, "again", ttl).expect("decoded members are a slab");
    let back = slab::decode(again.item).expect("the encoder's slab is read");
    assert_eq!(back, readings);
}

/// Every number of `readings` is a canonical decimal.
fn assert_canonical(readings: &[ReadingItem]) {
    for value in readings.iter().flat_map(|r| r.metrics.values()) {
        assert_eq!(Decimal::parse(value.as_str()).as_ref(), Ok(value));
    }
}
