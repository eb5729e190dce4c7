//! How a writer packs readings into its writes (`store::pack`): the writes hold every
//! distinct reading once, each block within its layout (one device, one table epoch,
//! one bucket, the window, the byte and count caps, measured on the item as stored),
//! and the cut follows from the readings alone: any order of the same readings, and
//! any repetition of them, is packed into the same items.

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroU32;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use proptest::prelude::*;
use sharding::block::BlockLayout;
use sharding::epoch::{Epoch, TableHistory};
use sharding::key::ItemKey;
use sharding::layout::Layout;
use sharding::time::{Bucket, Timestamp};
use store::item::Reading;
use store::pack::{self as packing, encode, item_key};
use store::size::item_size;

/// 2026-06-22T00:00:00Z
const T: i64 = 1_782_086_400_000;
const HOUR: i64 = 3_600_000;
const RETENTION: Duration = Duration::from_secs(30 * 86_400);

fn ts(ms: i64) -> Timestamp {
    Timestamp::from_millis(ms).expect("in range")
}

/// Hourly buckets over 4 shards; blocks from `T + switch` on, with `blocks`.
fn table(switch: i64, blocks: BlockLayout) -> TableHistory {
    let plain = Layout::time_bucket(Bucket::Hour, NonZeroU32::new(4).expect("non-zero"));
    TableHistory::from_epochs(vec![
        Epoch {
            effective_from: Timestamp::MIN,
            value: plain.clone(),
        },
        Epoch {
            effective_from: ts(T + switch),
            value: plain.with_blocks(blocks),
        },
    ])
    .expect("sorted")
}

fn blocks() -> impl Strategy<Value = BlockLayout> {
    (1u32..120_000, 1024u32..8192, 2u32..80).prop_map(|(window_ms, max_bytes, max_readings)| {
        BlockLayout {
            window_ms,
            max_bytes,
            max_readings,
        }
    })
}

/// Readings of up to 3 devices over 3 hours, some sharing an identity, with metrics and
/// tags of varying names.
fn readings() -> impl Strategy<Value = Vec<Reading>> {
    let reading = (
        0u8..3,
        0i64..3 * HOUR,
        "[a-z0-9]{1,8}",
        prop::collection::btree_map(
            "[a-d]",
            (-1e6..1e6f64).prop_map(|x| store::Decimal::from_f64(x).expect("a number")),
            0..4,
        ),
        prop::collection::btree_map("[s-u]", "[a-z]{0,20}", 0..3),
        // The message it came in, of a batch's few, sent seconds or days apart (none:
        // stored before write orders).
        prop_oneof![Just(0i64), Just(T), T..T + 5_000, T..T + 5 * 86_400_000],
    );
    prop::collection::vec(reading, 1..120).prop_map(|raw| {
        raw.into_iter()
            .map(|(device, at, event_id, metrics, tags, written)| Reading {
                device_id: format!("dev-{device}"),
                event_id,
                ts: ts(T + at - at % 1000),
                metrics,
                tags,
                written: store::WriteOrder(written),
            })
            .collect()
    })
}

fn pack(readings: Vec<Reading>, table: &TableHistory) -> Vec<Vec<Reading>> {
    let units = packing::pack(&readings, table);
    packing::take(readings, &units)
}

fn identity(r: &Reading) -> (String, i64, String) {
    (r.device_id.clone(), r.ts.as_millis(), r.event_id.clone())
}

/// Each write's item under a key made of its first member (the key is the writer's;
/// what is tested here is what the item holds).
fn items(units: &[Vec<Reading>]) -> BTreeSet<String> {
    units
        .iter()
        .map(|members| {
            let first = &members[0];
            let key = ItemKey {
                pk: first.device_id.clone(),
                sk: format!(
                    "{}#{}#{}",
                    first.device_id,
                    first.ts.to_rfc3339(),
                    first.event_id
                ),
            };
            let encoded = encode(members, &item_key(members, &key), RETENTION).expect("encodes");
            canonical(&AttributeValue::M(encoded.item))
        })
        .collect()
}

/// An attribute value as text, every map's names in order.
fn canonical(value: &AttributeValue) -> String {
    match value {
        AttributeValue::M(map) => {
            let sorted: BTreeMap<_, _> = map.iter().map(|(k, v)| (k, canonical(v))).collect();
            format!("{sorted:?}")
        }
        AttributeValue::L(list) => format!("{:?}", list.iter().map(canonical).collect::<Vec<_>>()),
        other => format!("{other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The size a writer measures a device's rate by covers each block as stored under
    /// any key a fan-out gives it, and is the block's own size, not a bound that counts
    /// every id and number at its longest (a few bytes of key slack at most).
    #[test]
    fn the_size_a_rate_counts_is_each_block_as_stored(
        input in readings(),
        layout in blocks(),
        j in 0u32..=u32::MAX,
    ) {
        let history = table(0, layout);
        for unit in packing::pack(&input, &history).into_iter().filter(|u| u.len() > 1) {
            let members: Vec<Reading> = unit.iter().map(|&i| input[i].clone()).collect();
            let first = &members[0];
            let bound = packing::encode_unkeyed(&members, RETENTION).expect("encodes").size;
            for pk in [format!("{j}#2026-06-22T00"), format!("{}.{j}#2026-06-22T00", u32::MAX)] {
                let key = ItemKey {
                    pk,
                    sk: format!("{}#{}#{}", first.device_id, first.ts.to_rfc3339(), first.event_id),
                };
                let key = item_key(&members, &key);
                let size = item_size(&encode(&members, &key, RETENTION).expect("encodes").item);
                prop_assert!(size <= bound, "{size} > {bound}");
                prop_assert!(bound <= size + 64, "{bound} is {} over {size}", bound - size);
            }
        }
    }

    /// A write encoded once before it is keyed, then given its key, is the item the
    /// writer would encode under that key, byte for byte and size for size, and the
    /// size it had before its key bounds it under any key a fan-out gives it.
    #[test]
    fn an_item_encoded_before_its_key_is_the_item_under_its_key(
        input in readings(),
        layout in blocks(),
        j in 0u32..=u32::MAX,
    ) {
        let history = table(0, layout);
        for unit in packing::pack(&input, &history) {
            let members: Vec<Reading> = unit.iter().map(|&i| input[i].clone()).collect();
            let first = &members[0];
            let unkeyed = packing::encode_unkeyed(&members, RETENTION).expect("encodes");
            for pk in [format!("{j}#2026-06-22T00"), format!("{}.{j}#2026-06-22T00", u32::MAX)] {
                let key = ItemKey {
                    pk,
                    sk: format!("{}#{}#{}", first.device_id, first.ts.to_rfc3339(), first.event_id),
                };
                let key = item_key(&members, &key);
                let expected = encode(&members, &key, RETENTION).expect("encodes");
                prop_assert!(expected.size <= unkeyed.size, "{} > {}", expected.size, unkeyed.size);
                let keyed = packing::with_key(unkeyed.clone(), &key);
                prop_assert_eq!(keyed.size, item_size(&expected.item));
                prop_assert_eq!(keyed, expected);
            }
        }
    }

    #[test]
    fn packing_covers_every_reading_once_within_the_layout(
        input in readings(),
        layout in blocks(),
        switch in 0i64..3 * HOUR,
    ) {
        let history = table(switch, layout);
        let units = pack(input.clone(), &history);
        // Where blocks are packed, every distinct identity once; elsewhere every
        // reading as sent.
        let blocked = |r: &Reading| r.ts.as_millis() >= T + switch;
        let mut expected: Vec<_> = input.iter().filter(|r| !blocked(r)).map(identity).collect();
        let distinct: BTreeSet<_> = input.iter().filter(|r| blocked(r)).map(identity).collect();
        expected.extend(distinct);
        expected.sort();
        let mut got: Vec<_> = units.iter().flatten().map(identity).collect();
        got.sort();
        prop_assert_eq!(got, expected);
        for members in &units {
            let first = &members[0];
            if !blocked(first) {
                prop_assert_eq!(members.len(), 1);
                continue;
            }
            prop_assert!(members.len() <= layout.max_readings as usize);
            for pair in members.windows(2) {
                prop_assert!(identity(&pair[0]) < identity(&pair[1]), "in order, each once");
            }
            for r in members {
                prop_assert_eq!(&r.device_id, &first.device_id);
                prop_assert!(blocked(r), "one table epoch");
                prop_assert_eq!(r.ts.as_millis() / HOUR, first.ts.as_millis() / HOUR, "one bucket");
                prop_assert!(r.ts.as_millis() - first.ts.as_millis() < i64::from(layout.window_ms));
            }
            if members.len() > 1 {
                let key = ItemKey {
                    pk: format!("{}.{}#2026-06-22T00", u32::MAX, u32::MAX),
                    sk: format!("{}#{}#{}", first.device_id, first.ts.to_rfc3339(), "e".repeat(128)),
                };
                let key = item_key(members, &key);
                let size = item_size(&encode(members, &key, RETENTION).expect("encodes").item);
                prop_assert!(size <= layout.max_bytes as usize, "{size} > {}", layout.max_bytes);
            }
        }
    }

    #[test]
    fn the_same_readings_in_any_order_and_repeated_pack_into_the_same_items(
        input in readings(),
        layout in blocks(),
        seed in any::<u64>(),
    ) {
        // One reading per identity (two sends of one identity carry the same reading).
        let by_identity: BTreeMap<_, _> = input.into_iter().map(|r| (identity(&r), r)).collect();
        let readings: Vec<Reading> = by_identity.into_values().collect();
        let history = table(0, layout);
        let once = items(&pack(readings.clone(), &history));
        let mut shuffled: Vec<Reading> = readings.iter().chain(readings.iter().take(7)).cloned().collect();
        let n = shuffled.len();
        let mut state = seed | 1;
        for i in (1..n).rev() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            shuffled.swap(i, (state % (i as u64 + 1)) as usize);
        }
        prop_assert_eq!(items(&pack(shuffled, &history)), once);
    }
}

#[test]
fn a_reading_alone_is_its_own_item_and_a_layout_without_blocks_packs_none() {
    let reading = Reading {
        device_id: "dev-1".into(),
        event_id: "e-1".into(),
        ts: ts(T),
        metrics: BTreeMap::from([(
            "temperature".into(),
            store::Decimal::from_f64(21.5).expect("a number"),
        )]),
        tags: BTreeMap::new(),
        written: store::WriteOrder::OLDEST,
    };
    let key = ItemKey {
        pk: "1#2026-06-22T00".into(),
        sk: "dev-1#2026-06-22T00:00:00.000Z#e-1".into(),
    };
    let with_blocks = table(0, BlockLayout::default());
    let units = pack(vec![reading.clone()], &with_blocks);
    assert_eq!(units, vec![vec![reading.clone()]]);
    assert_eq!(
        encode(&units[0], &key, RETENTION).expect("encodes"),
        store::ReadingItem::marshal(&reading, &key, RETENTION)
    );
    let without = table(3 * HOUR, BlockLayout::default());
    let twice = vec![reading.clone(), reading.clone()];
    assert_eq!(
        pack(twice.clone(), &without),
        vec![vec![reading.clone()], vec![reading]]
    );
}
