//! The block decoder (`store::block::BlockItem::from_item` and `readings`) on arbitrary
//! stored blocks: it refuses a block that breaks a rule of the format or returns its
//! members in order, one per entry of every column, each number a canonical decimal,
//! and never panics.
//!
//! The input is a JSON object read as an item: a number is an `N` of its text, a string
//! an `S`, except one that starts with `n:`, which is an `N` of the rest (so any text at
//! all reaches the number parser), a list an `L`, an object an `M`, null a `NULL`.

#![no_main]

use aws_sdk_dynamodb::types::AttributeValue;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use store::Decimal;
use store::block::BlockItem;

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
    let item = map.into_iter().map(|(k, v)| (k, attribute(v))).collect();
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
        for value in readings.iter().flat_map(|r| r.metrics.values()) {
            assert_eq!(Decimal::parse(value.as_str()).as_ref(), Ok(value));
        }
    }
});
