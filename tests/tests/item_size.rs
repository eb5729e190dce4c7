//! The writer and the emulator size an item alike: `store::size::item_size` (over the
//! SDK's attribute values, what the batch writer plans write units and the 400 KB
//! limit with) and `capacity_proxy::item::item_size` (over DynamoDB JSON, what the
//! hot-partition emulator charges) agree on random items of every attribute type,
//! numbers of every shape included. Pure: no stand-in.

use std::collections::HashMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// A DynamoDB number's text: a sign, digits with leading and trailing zeros, a
/// fraction, an exponent, each or not.
fn number() -> impl Strategy<Value = String> {
    (
        any::<bool>(),
        "0{0,3}[0-9]{1,20}0{0,3}",
        prop::option::of("[0-9]{0,12}0{0,3}"),
        prop::option::of((any::<bool>(), "[eE]", -130i32..126)),
    )
        .prop_map(|(negative, int, fraction, exponent)| {
            let mut text = String::new();
            if negative {
                text.push('-');
            }
            text.push_str(&int);
            if let Some(f) = fraction.filter(|f| !f.is_empty()) {
                text.push('.');
                text.push_str(&f);
            }
            if let Some((plus, e, power)) = exponent {
                text.push_str(&e);
                if plus && power >= 0 {
                    text.push('+');
                }
                text.push_str(&power.to_string());
            }
            text
        })
}

fn name() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_é€]{1,12}"
}

fn value() -> impl Strategy<Value = AttributeValue> {
    let leaf = prop_oneof![
        "\\PC{0,40}".prop_map(AttributeValue::S),
        number().prop_map(AttributeValue::N),
        prop::collection::vec(any::<u8>(), 0..40).prop_map(|b| AttributeValue::B(Blob::new(b))),
        any::<bool>().prop_map(AttributeValue::Bool),
        Just(AttributeValue::Null(true)),
        prop::collection::vec("\\PC{0,10}", 1..5).prop_map(AttributeValue::Ss),
        prop::collection::vec(number(), 1..5).prop_map(AttributeValue::Ns),
        prop::collection::vec(prop::collection::vec(any::<u8>(), 1..9), 1..4)
            .prop_map(|bs| AttributeValue::Bs(bs.into_iter().map(Blob::new).collect())),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(AttributeValue::L),
            prop::collection::hash_map(name(), inner, 0..4).prop_map(AttributeValue::M),
        ]
    })
}

/// The value as DynamoDB JSON, as the SDK puts it on the wire.
fn wire(value: &AttributeValue) -> Value {
    let base64 = |b: &Blob| aws_smithy_types::base64::encode(b.as_ref());
    match value {
        AttributeValue::S(s) => json!({ "S": s }),
        AttributeValue::N(n) => json!({ "N": n }),
        AttributeValue::B(b) => json!({ "B": base64(b) }),
        AttributeValue::Bool(b) => json!({ "BOOL": b }),
        AttributeValue::Null(n) => json!({ "NULL": n }),
        AttributeValue::Ss(set) => json!({ "SS": set }),
        AttributeValue::Ns(set) => json!({ "NS": set }),
        AttributeValue::Bs(set) => json!({ "BS": set.iter().map(base64).collect::<Vec<_>>() }),
        AttributeValue::L(list) => json!({ "L": list.iter().map(wire).collect::<Vec<_>>() }),
        AttributeValue::M(map) => {
            let m: Map<String, Value> = map.iter().map(|(k, v)| (k.clone(), wire(v))).collect();
            json!({ "M": m })
        }
        other => panic!("no wire form for {other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_writer_and_the_emulator_size_an_item_alike(
        item in prop::collection::hash_map(name(), value(), 1..8),
    ) {
        let item: HashMap<String, AttributeValue> = item;
        let json: Map<String, Value> = item.iter().map(|(k, v)| (k.clone(), wire(v))).collect();
        prop_assert_eq!(
            store::size::item_size(&item),
            capacity_proxy::item::item_size(&json),
            "{:?}",
            item
        );
    }
}

#[test]
fn a_number_is_sized_by_its_significant_digits_on_both_sides() {
    // 13 characters, 8 significant digits: 4 bytes + 1. The emulator once counted the
    // characters, and charged such items more than the writer planned.
    let item = HashMap::from([(
        "ts_ms".to_owned(),
        AttributeValue::N("1782086400000".into()),
    )]);
    let json: Map<String, Value> = item.iter().map(|(k, v)| (k.clone(), wire(v))).collect();
    assert_eq!(store::size::item_size(&item), 5 + 5);
    assert_eq!(capacity_proxy::item::item_size(&json), 5 + 5);
}
