//! Scenario 9: chunking, as a property.

use std::collections::{BTreeSet, HashSet};

use aws_sdk_dynamodb::types::AttributeValue;
use proptest::prelude::*;
use store::batch::{MAX_BATCH_ITEMS, MAX_REQUEST_BYTES, key_of, prepare};
use store::size::{MAX_ITEM_BYTES, item_size, wire_size};

use crate::support::item;

fn input() -> impl Strategy<Value = Vec<store::Item>> {
    // Few distinct keys (so duplicates are common) and sizes up to just over 400 KB:
    // mostly small, or mostly large (so the request limit, not the item count, cuts).
    let specs = prop_oneof![
        prop::collection::vec(
            (
                0u8..6,
                0u16..60,
                prop_oneof![9 => 0usize..2_000, 1 => 300_000usize..420_000]
            ),
            0..120,
        ),
        prop::collection::vec(
            (
                0u8..6,
                0u16..60,
                prop_oneof![1 => 0usize..2_000, 9 => 300_000usize..420_000]
            ),
            0..50,
        ),
    ];
    specs.prop_map(|specs| {
        specs
            .into_iter()
            .map(|(pk, sk, pad)| {
                let mut it = item(&format!("p{pk}"), &format!("s{sk}"));
                it.insert("pad".into(), AttributeValue::S("x".repeat(pad)));
                it
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn s09_chunks_are_bounded_unique_and_cover_the_deduplicated_input(items in input()) {
        let prepared = prepare(&items);
        let mut seen_keys = HashSet::new();
        let mut chunked = BTreeSet::new();
        for chunk in &prepared.chunks {
            prop_assert!(!chunk.is_empty() && chunk.len() <= MAX_BATCH_ITEMS);
            let bytes: usize = chunk.iter().map(|&i| wire_size(&items[i])).sum();
            prop_assert!(bytes <= MAX_REQUEST_BYTES);
            for &i in chunk {
                prop_assert!(item_size(&items[i]) <= MAX_ITEM_BYTES);
                prop_assert!(seen_keys.insert(key_of(&items[i]).expect("keyed")), "key repeated");
                chunked.insert(i);
            }
        }
        // The union of chunks plus the refused items is exactly the first occurrence of
        // every distinct key.
        let mut first = BTreeSet::new();
        let mut keys = HashSet::new();
        for (i, it) in items.iter().enumerate() {
            if keys.insert(key_of(it).expect("keyed")) {
                first.insert(i);
            }
        }
        let refused: BTreeSet<usize> = prepared.refused.iter().map(|(i, _)| *i).collect();
        prop_assert!(chunked.is_disjoint(&refused));
        prop_assert_eq!(&chunked.union(&refused).copied().collect::<BTreeSet<_>>(), &first);
        for (i, c) in prepared.canonical.iter().enumerate() {
            prop_assert_eq!(key_of(&items[i]), key_of(&items[*c]));
            prop_assert!(first.contains(c));
        }
        // A chunk is closed only when full, or when the next item would take its
        // estimated request over the limit: no more calls than the limits need.
        for pair in prepared.chunks.windows(2) {
            let bytes: usize = pair[0].iter().map(|&i| wire_size(&items[i])).sum();
            prop_assert!(
                pair[0].len() == MAX_BATCH_ITEMS
                    || bytes + wire_size(&items[pair[1][0]]) > MAX_REQUEST_BYTES
            );
        }
    }
}
