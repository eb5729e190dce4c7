//! The block format (`store::block`) round-trips bit for bit: any members one device
//! can have in a block come back from the stored item as they went in, every number
//! the decimal it was sent as, through `serde_dynamo`, the block's own `m` codec and the
//! SDK's attribute map.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use proptest::prelude::*;
use sharding::key::ItemKey;
use sharding::time::Timestamp;
use store::Decimal;
use store::block::{BlockError, BlockItem};
use store::item::Reading;

/// 2026-06-22T00:00:00Z
const T: i64 = 1_782_086_400_000;

/// Numbers as the ingest accepts them: any decimal DynamoDB stores, in any spelling.
fn number() -> impl Strategy<Value = Decimal> {
    crate::decimal::decimal_text().prop_filter_map("a number DynamoDB stores", |text| {
        Decimal::parse(&text).ok()
    })
}

/// One device's members, sorted by (ts, event id), each identity once, within a minute.
fn members() -> impl Strategy<Value = Vec<Reading>> {
    let member = (
        0i64..60_000,
        "(0190a1b2-c3d4-|e-|)[A-Za-z0-9._:-]{1,12}",
        prop::collection::btree_map("[a-z]{1,3}", number(), 1..4),
        prop::collection::btree_map("[a-z]{1,3}", "\\PC{0,12}", 0..3),
        -10_000i64..10_000,
    );
    // Write orders: none (a block stored before them), one message's, or several's.
    let written = (0..3u8, T..T + 86_400_000);
    (prop::collection::vec(member, 1..60), written).prop_map(|(raw, (spread, base))| {
        let mut by_identity: BTreeMap<(i64, String), Reading> = BTreeMap::new();
        for (dt, event_id, metrics, tags, offset) in raw {
            let written = match spread {
                0 => 0,
                1 => base,
                _ => base + offset,
            };
            by_identity.insert(
                (dt, event_id.clone()),
                Reading {
                    device_id: "sensor-alpha-001".into(),
                    event_id,
                    ts: Timestamp::from_millis(T + dt).expect("in range"),
                    metrics,
                    tags,
                    written: store::WriteOrder(written),
                },
            );
        }
        by_identity.into_values().collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_block_round_trips_bit_for_bit(members in members()) {
        let first = &members[0];
        let key = ItemKey {
            pk: "5#2026-06-22T00".into(),
            sk: format!("{}#{}#{}", first.device_id, first.ts.to_rfc3339(), first.event_id),
        };
        let block = BlockItem::new(&members, &key, Duration::from_secs(30 * 86_400))
            .expect("one device's sorted members");
        let stored = BlockItem::from_item(block.to_item().expect("encodes")).expect("decodes");
        prop_assert_eq!(&stored, &block);
        let back: Vec<Reading> = stored
            .readings()
            .expect("a block the encoder wrote is read")
            .into_iter()
            .map(|item| item.into_reading().expect("a reading"))
            .collect();
        prop_assert_eq!(back.len(), members.len());
        for (got, sent) in back.iter().zip(&members) {
            prop_assert_eq!(got, sent);
        }
        // The same members make the same item, byte for byte.
        let again = BlockItem::new(&members, &key, Duration::from_secs(30 * 86_400)).expect("again");
        prop_assert_eq!(again.to_item().expect("encodes"), block.to_item().expect("encodes"));
    }

    /// The ingest's encoder builds the item `serde_dynamo` builds from the block, and
    /// sizes it as DynamoDB's rule sizes that item, for any members and any retention.
    #[test]
    fn the_ingest_encoder_is_serde_dynamos_item_and_size(
        members in members(),
        retention_days in prop_oneof![Just(0u64), 1u64..4_000, Just(365_000)],
    ) {
        let first = &members[0];
        let first_key = ItemKey {
            pk: "12.3#2026-06-22T00".into(),
            sk: format!("{}#{}#{}", first.device_id, first.ts.to_rfc3339(), first.event_id),
        };
        let key = BlockItem::key(&members, &first_key);
        let retention = Duration::from_secs(retention_days * 86_400);
        let expected = BlockItem::at(&members, &key, retention)
            .expect("one device's sorted members")
            .to_item()
            .expect("encodes");
        let encoded = BlockItem::marshal(&members, &key, retention).expect("encodes");
        prop_assert_eq!(encoded.size, store::size::item_size(&expected));
        prop_assert_eq!(encoded.item, expected);
        let borrowed: Vec<&Reading> = members.iter().collect();
        prop_assert_eq!(
            BlockItem::marshal(&borrowed, &key, retention).expect("encodes").size,
            encoded.size
        );
    }
}

#[test]
fn the_ingest_encoder_refuses_what_is_no_block() {
    let reading = |device: &str, dt: i64, id: &str| Reading {
        device_id: device.into(),
        event_id: id.into(),
        ts: Timestamp::from_millis(T + dt).expect("in range"),
        metrics: BTreeMap::from([("t".to_owned(), Decimal::from_f64(1.0).expect("a number"))]),
        tags: BTreeMap::new(),
        written: store::WriteOrder::OLDEST,
    };
    let key = ItemKey {
        pk: "0#2026-06-22T00".into(),
        sk: "d#2026-06-22T00:00:00.000Z#a".into(),
    };
    let day = Duration::from_secs(86_400);
    let none: [Reading; 0] = [];
    assert_eq!(BlockItem::marshal(&none, &key, day), Err(BlockError::Empty));
    let two_devices = [reading("d", 0, "a"), reading("e", 1, "b")];
    assert!(matches!(
        BlockItem::marshal(&two_devices, &key, day),
        Err(BlockError::Devices(..))
    ));
    let out_of_order = [reading("d", 1, "a"), reading("d", 0, "b")];
    assert!(matches!(
        BlockItem::marshal(&out_of_order, &key, day),
        Err(BlockError::Order(..))
    ));
    let repeated = [reading("d", 0, "a"), reading("d", 0, "a")];
    assert!(matches!(
        BlockItem::marshal(&repeated, &key, day),
        Err(BlockError::Order(..))
    ));
}

/// A vector of docs/formats.md, under `marker` (of `shardline-block-v1` or
/// `shardline-slab-v2`): an item as `serde_json` maps it (each number as the JSON number
/// DynamoDB stores).
pub(crate) fn documented_vector(marker: &str) -> String {
    let formats = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/formats.md"
    ))
    .expect("docs/formats.md");
    let start = formats.find(marker).expect("the vector of docs/formats.md");
    let body = &formats[start..];
    let open = body.find("```json\n").expect("a json fence") + "```json\n".len();
    let close = body[open..].find("```").expect("a closing fence");
    body[open..open + close].to_owned()
}

/// A JSON value as the attribute DynamoDB stores for it (a number as its text).
pub(crate) fn attribute(value: &serde_json::Value) -> AttributeValue {
    use serde_json::Value;
    match value {
        Value::Null => AttributeValue::Null(true),
        Value::Bool(b) => AttributeValue::Bool(*b),
        Value::Number(n) => AttributeValue::N(n.to_string()),
        Value::String(s) => AttributeValue::S(s.clone()),
        Value::Array(list) => AttributeValue::L(list.iter().map(attribute).collect()),
        Value::Object(map) => AttributeValue::M(
            map.iter()
                .map(|(name, v)| (name.clone(), attribute(v)))
                .collect(),
        ),
    }
}

#[test]
fn the_documented_block_vector_is_the_block_of_its_readings() {
    check_vector("<!-- block-vector -->", [0; 3]);
}

/// The second vector: the same readings sent in two messages, the second's reading
/// (`e-0002`) 1.25 s after the others', so the block carries each member's write order.
#[test]
fn the_documented_block_vector_of_two_messages_carries_their_write_orders() {
    let sent = 1_782_090_003_000;
    check_vector("<!-- block-vector-written -->", [sent, sent + 1_250, sent]);
}

/// The vector under `marker` is the block of its three readings, written at `written`.
fn check_vector(marker: &str, written: [i64; 3]) {
    let t = 1_782_090_000_000; // 2026-06-22T01:00:00Z
    let reading = |dt: i64, id: &str, metrics: &[(&str, f64)], tags: &[(&str, &str)]| Reading {
        device_id: "sensor-7".into(),
        event_id: id.into(),
        ts: Timestamp::from_millis(t + dt).expect("in range"),
        metrics: metrics
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Decimal::from_f64(*v).expect("a number")))
            .collect(),
        tags: tags
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        written: store::WriteOrder::OLDEST,
    };
    let members = [
        reading(
            0,
            "e-0001",
            &[("temperature", 21.5), ("humidity", 40.0)],
            &[("site", "lab")],
        ),
        reading(
            1_000,
            "e-0002",
            &[("temperature", 21.75), ("humidity", 41.0)],
            &[],
        ),
        reading(2_500, "e-0003", &[("humidity", 42.0)], &[]),
    ]
    .into_iter()
    .zip(written)
    .map(|(r, w)| Reading {
        written: store::WriteOrder(w),
        ..r
    })
    .collect::<Vec<_>>();
    let first_key = ItemKey {
        pk: "3#2026-06-22T01".into(),
        sk: "sensor-7#2026-06-22T01:00:00.000Z#e-0001".into(),
    };
    let block = BlockItem::new(&members, &first_key, Duration::from_secs(30 * 86_400))
        .expect("one device's sorted members");
    let item = block.to_item().expect("encodes");
    let vector: serde_json::Value = serde_json::from_str(&documented_vector(marker)).expect("json");
    assert_eq!(
        attribute(&vector),
        AttributeValue::M(item.clone()),
        "the vector of docs/formats.md is not the block's item"
    );
    assert_eq!(BlockItem::from_item(item).expect("decodes"), block);
    let vector = block;
    let back: Vec<Reading> = vector
        .readings()
        .expect("valid")
        .into_iter()
        .map(|r| r.into_reading().expect("a reading"))
        .collect();
    assert_eq!(back, members);
}
