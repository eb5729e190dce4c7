//! Scenario 9: chunking, as a property.

use std::collections::{BTreeSet, HashSet};

use aws_sdk_dynamodb::types::AttributeValue;
use proptest::prelude::*;
use store::batch::{ItemTooLarge, MAX_BATCH_ITEMS, MAX_REQUEST_BYTES, prepare};
use store::size::{MAX_ITEM_BYTES, WCU_BYTES, item_size, wire_size};

use crate::support::{Batch, put};

fn input() -> impl Strategy<Value = Batch> {
    // Few distinct keys (so duplicates are common) and sizes up to just over 400 KB:
    // mostly small, or mostly large (so the request limit, not the item count, cuts).
    let specs = prop_oneof![
        prop::collection::vec(
            (
                0u8..6,
                0u16..60,
                prop_oneof![9 => 0usize..2_000, 1 => 300_000usize..420_000],
                0u8..3,
            ),
            0..120,
        ),
        prop::collection::vec(
            (
                0u8..6,
                0u16..60,
                prop_oneof![1 => 0usize..2_000, 9 => 300_000usize..420_000],
                0u8..3,
            ),
            0..50,
        ),
    ];
    specs.prop_map(|specs| {
        let mut batch = Batch::default();
        for (pk, sk, pad, w) in specs {
            let item = batch.push(&format!("p{pk}"), &format!("s{sk}"));
            item.insert("pad".into(), AttributeValue::S("x".repeat(pad)));
            // A write order (none: the oldest), so copies of one key differ in it.
            if w > 0 {
                item.insert("w".into(), AttributeValue::N(w.to_string()));
            }
        }
        batch
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn s09_chunks_are_bounded_unique_and_cover_the_deduplicated_input(batch in input()) {
        // The caller makes the puts: exactly the items over 400 KB are refused.
        // `items[i]` is the item of `puts[i]`.
        let (mut puts, mut items) = (Vec::new(), Vec::new());
        for (key, item) in batch.keys.iter().zip(&batch.items) {
            let size = item_size(item);
            match put(key, item) {
                Ok(put) => {
                    prop_assert_eq!(put.size(), size);
                    puts.push(put);
                    items.push(item);
                }
                Err(refused) => {
                    prop_assert!(size > MAX_ITEM_BYTES);
                    prop_assert_eq!(refused, ItemTooLarge { size });
                }
            }
        }
        prop_assert!(puts.iter().all(|p| p.size() <= MAX_ITEM_BYTES));
        let prepared = prepare(&puts);
        let mut seen_keys = HashSet::new();
        let mut chunked = BTreeSet::new();
        for chunk in &prepared.chunks {
            prop_assert!(!chunk.is_empty() && chunk.len() <= MAX_BATCH_ITEMS);
            let bytes: usize = chunk.iter().map(|&i| wire_size(items[i])).sum();
            prop_assert!(bytes <= MAX_REQUEST_BYTES);
            for &i in chunk {
                prop_assert!(seen_keys.insert(puts[i].key()), "key repeated");
                chunked.insert(i);
            }
        }
        // The union of chunks is exactly one put of every distinct key: of its puts,
        // the one with the greatest write order, the first of those.
        let written = |i: usize| match items[i].get("w") {
            Some(AttributeValue::N(w)) => w.parse::<u8>().unwrap_or(0),
            _ => 0,
        };
        let mut kept: std::collections::HashMap<_, usize> = std::collections::HashMap::new();
        for (i, put) in puts.iter().enumerate() {
            let k = kept.entry(put.key()).or_insert(i);
            if written(i) > written(*k) {
                *k = i;
            }
        }
        let first: BTreeSet<usize> = kept.values().copied().collect();
        prop_assert_eq!(&chunked, &first);
        for (i, c) in prepared.canonical.iter().enumerate() {
            prop_assert_eq!(puts[i].key(), puts[*c].key());
            prop_assert!(first.contains(c));
        }
        let large = first.iter().filter(|&&i| puts[i].size() > WCU_BYTES).count();
        prop_assert_eq!(prepared.large_items, large as u64);
        // A chunk is closed only when full, or when the next item would take its
        // estimated request over the limit: no more calls than the limits need.
        for pair in prepared.chunks.windows(2) {
            let bytes: usize = pair[0].iter().map(|&i| wire_size(items[i])).sum();
            prop_assert!(
                pair[0].len() == MAX_BATCH_ITEMS
                    || bytes + wire_size(items[pair[1][0]]) > MAX_REQUEST_BYTES
            );
        }
    }
}
