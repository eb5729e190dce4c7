//! The hot-path item encoder (`ReadingItem::marshal`) against `serde_dynamo`, for every
//! reading the message parser accepts.

use std::collections::BTreeMap;
use std::time::Duration;

use ingest::{Limits, parse_body, to_body};
use proptest::prelude::*;
use sharding::key::ItemKey;
use sharding::time::Timestamp;
use store::size::item_size;
use store::{Reading, ReadingItem};

/// 2026-06-22T12:00:00Z
const NOW: i64 = 1_782_129_600_000;
const DAY: i64 = 86_400_000;

fn limits() -> Limits {
    Limits {
        now: Timestamp::from_millis(NOW).expect("in range"),
        max_future: Duration::from_secs(300),
        retention: Duration::from_secs(30 * 86_400),
        max_readings: 500,
    }
}

fn id() -> impl Strategy<Value = String> {
    "[A-Za-z0-9._:-]{1,128}"
}

/// Any f64 at all: the parser decides which ones are readings.
fn number() -> impl Strategy<Value = f64> {
    prop_oneof![
        1 => any::<f64>(),
        6 => -1e6..1e6f64,
        1 => (-125i32..125).prop_map(|e| 10f64.powi(e) / 3.0),
        1 => Just(0.0),
        1 => Just(-0.0),
        1 => Just(1e-130),
        1 => Just(9.99e125),
        1 => Just(f64::MIN_POSITIVE),
        1 => Just(5e-324),
    ]
}

fn reading() -> impl Strategy<Value = Reading> {
    (
        id(),
        id(),
        -30 * DAY..300_000i64,
        prop::collection::btree_map("[A-Za-z0-9_]{1,64}", number(), 1..8),
        prop::collection::btree_map("\\PC{1,64}", "\\PC{0,40}", 0..5),
    )
        .prop_map(|(device_id, event_id, offset, metrics, tags)| Reading {
            device_id,
            event_id,
            ts: Timestamp::from_millis(NOW + offset).expect("in range"),
            metrics,
            tags,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn marshal_equals_serde_dynamo_for_every_accepted_reading(
        sent in prop::collection::vec(reading(), 1..4),
        pk in "[0-9]{1,3}(\\.[0-9]{1,2})?#2026-06-22T1[0-2]",
        retention_days in prop_oneof![Just(30u64), 1..3_650u64],
    ) {
        // What the parser accepts of what was sent, as it parsed it.
        let Ok(accepted) = parse_body(&to_body(&sent), &limits()) else {
            // A message the parser refuses holds no reading to store.
            return Ok(());
        };
        let retention = Duration::from_secs(retention_days * 86_400);
        for r in &accepted {
            let key = ItemKey { pk: pk.clone(), sk: format!("{}#{}#{}", r.device_id, r.ts, r.event_id) };
            let expected = serde_dynamo::to_item(ReadingItem::new(r, key.clone(), retention))
                .expect("serde_dynamo marshals every reading");
            let encoded = ReadingItem::marshal(r, &key, retention);
            prop_assert_eq!(encoded.size, item_size(&expected));
            prop_assert_eq!(encoded.item, expected);
        }
    }

    /// A metric is stored exactly as sent: the number a device sends, written as the
    /// shortest text that reads back as it (what serde_json, JavaScript and Python
    /// print), is parsed to that very double, bit for bit, and its item's number is
    /// that text again, which a reader parses back to the same double.
    #[test]
    fn a_metric_is_stored_exactly_as_sent(x in number()) {
        let reading = Reading {
            device_id: "dev-1".into(),
            event_id: "e-1".into(),
            ts: Timestamp::from_millis(NOW).expect("in range"),
            metrics: BTreeMap::from([("m".into(), x)]),
            tags: BTreeMap::new(),
        };
        let body = to_body(std::slice::from_ref(&reading));
        let Ok(accepted) = parse_body(&body, &limits()) else {
            // Outside what DynamoDB stores (or not finite): refused, never altered.
            prop_assert!(!x.is_finite() || !ingest::is_storable_number(x), "{x:e} refused: {body}");
            return Ok(());
        };
        let parsed = accepted[0].metrics["m"];
        prop_assert_eq!(parsed.to_bits(), x.to_bits(), "{} parsed as {:e}", body, parsed);
        let key = ItemKey { pk: "0#2026-06-22T12".into(), sk: "dev-1#t#e-1".into() };
        let item = ReadingItem::marshal(&accepted[0], &key, Duration::from_secs(86_400)).item;
        let stored = item["metrics"].as_m().expect("a map")["m"].as_n().expect("a number").clone();
        let read: f64 = stored.parse().expect("a number DynamoDB stores");
        prop_assert_eq!(read.to_bits(), x.to_bits(), "stored as {}", stored);
    }

    /// The size an entity's rate is measured by before its readings are keyed
    /// (`Reading::item_size_bound`) is never below the item's, under the longest key
    /// of each layout, and at most a few bytes a metric above it.
    #[test]
    fn the_size_bound_covers_the_item_under_every_layout(
        sent in prop::collection::vec(reading(), 1..4),
        suffix in any::<u32>(),
        shards in (any::<u32>(), any::<u32>()),
    ) {
        let Ok(accepted) = parse_body(&to_body(&sent), &limits()) else {
            return Ok(());
        };
        let retention = Duration::from_secs(30 * 86_400);
        for r in &accepted {
            let ts = r.ts.to_rfc3339();
            let keys = [
                // time-bucket, a dedicated sub-shard of a minute's bucket
                (format!("{}.{}#2026-06-22T12:00", shards.0, shards.1), format!("{}#{ts}#{}", r.device_id, r.event_id)),
                // random or calculated
                (format!("{}#{suffix}", r.device_id), format!("{ts}#{}", r.event_id)),
                // unsharded
                (r.device_id.clone(), format!("{ts}#{}", r.event_id)),
            ];
            let bound = r.item_size_bound();
            for (pk, sk) in keys {
                let size = ReadingItem::marshal(r, &ItemKey { pk, sk }, retention).size;
                prop_assert!(size <= bound, "item {size} over its bound {bound}");
                // The other layouts' sort keys leave the entity out.
                let slack = 64 + 8 * r.metrics.len() + 2 * r.device_id.len();
                prop_assert!(bound <= size + slack, "bound {bound} far above {size}");
            }
        }
    }
}

/// The generator reaches both sides of the parser's number rule, so the property above
/// compares readings with extreme numbers, not only ordinary ones.
#[test]
fn extreme_numbers_that_the_parser_accepts_are_marshalled_alike() {
    let reading = Reading {
        device_id: "dev-1".into(),
        event_id: "e-1".into(),
        ts: Timestamp::from_millis(NOW).expect("in range"),
        metrics: BTreeMap::from([
            ("tiny".into(), 2e-130),
            ("huge".into(), -9.99e125),
            ("zero".into(), -0.0),
            ("third".into(), 1.0 / 3.0),
        ]),
        tags: BTreeMap::from([("ünïcode".into(), "välue ✓".into())]),
    };
    let accepted = parse_body(&to_body(std::slice::from_ref(&reading)), &limits())
        .expect("every number is in DynamoDB's range");
    let key = ItemKey {
        pk: "3#2026-06-22T12".into(),
        sk: "dev-1#2026-06-22T12:00:00.000Z#e-1".into(),
    };
    let retention = Duration::from_secs(30 * 86_400);
    let expected = serde_dynamo::to_item(ReadingItem::new(&accepted[0], key.clone(), retention))
        .expect("serde_dynamo marshals it");
    let encoded = ReadingItem::marshal(&accepted[0], &key, retention);
    assert_eq!(encoded.size, item_size(&expected));
    assert_eq!(encoded.item, expected);
}
