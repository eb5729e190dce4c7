//! The hot-path item encoder (`ReadingItem::marshal`) against `serde_dynamo`, for every
//! reading the message parser accepts.

use std::collections::BTreeMap;
use std::time::Duration;

use ingest::{Limits, parse_body, to_body};
use std::str::FromStr;

use bigdecimal::{BigDecimal, Zero};
use proptest::prelude::*;
use sharding::key::ItemKey;
use sharding::time::Timestamp;
use store::size::item_size;
use store::{Decimal, Reading, ReadingItem};

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

/// JSON number text of every kind (the parser decides which ones are readings): a
/// double's shortest text, or any decimal, from a few significant digits to more than
/// DynamoDB keeps and from far below its range to far above it.
fn number_text() -> impl Strategy<Value = String> {
    let decimal = (
        any::<bool>(),
        prop_oneof![Just("0".to_owned()), "[1-9][0-9]{0,44}"],
        prop::option::of("[0-9]{1,45}"),
        prop::option::of((
            "[eE]",
            prop_oneof![Just(""), Just("+"), Just("-")],
            0u32..200,
        )),
    )
        .prop_map(|(negative, int, frac, exponent)| {
            let mut text = String::new();
            if negative {
                text.push('-');
            }
            text.push_str(&int);
            if let Some(frac) = frac {
                text.push('.');
                text.push_str(&frac);
            }
            if let Some((e, sign, n)) = exponent {
                text.push_str(&format!("{e}{sign}{n}"));
            }
            text
        });
    prop_oneof![
        3 => decimal,
        2 => any::<f64>().prop_filter("JSON has no NaN or infinity", |x| x.is_finite()).prop_map(|x| x.to_string()),
        2 => (-1e6..1e6f64).prop_map(|x| x.to_string()),
        1 => Just("1e-130".to_owned()),
        1 => Just("-9.99e125".to_owned()),
        1 => Just("-0.0".to_owned()),
    ]
}

/// Numbers DynamoDB stores, as a reading holds them.
fn number() -> impl Strategy<Value = Decimal> {
    number_text().prop_filter_map("a number DynamoDB stores", |t| Decimal::parse(&t).ok())
}

/// Whether a non-zero value's leading digit is within DynamoDB's 1e-130 to 1e125.
fn in_range(value: &BigDecimal) -> bool {
    let normalized = value.normalized();
    let (_, scale) = normalized.as_bigint_and_exponent();
    let leading = normalized.digits() as i64 - 1 - scale;
    (-130..=125).contains(&leading)
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
            written: store::WriteOrder::OLDEST,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn marshal_equals_serde_dynamo_for_every_accepted_reading(
        sent in prop::collection::vec(reading(), 1..4),
        pk in "[0-9]{1,3}(\\.[0-9]{1,2})?#2026-06-22T1[0-2]",
        retention_days in prop_oneof![Just(30u64), 1..3_650u64],
        // Its message's SentTimestamp, or none (the oldest, stored as no `w`).
        written in prop_oneof![Just(0i64), 1..i64::MAX],
    ) {
        // What the parser accepts of what was sent, as it parsed it.
        let Ok(mut accepted) = parse_body(&to_body(&sent), &limits()) else {
            // A message the parser refuses holds no reading to store.
            return Ok(());
        };
        let retention = Duration::from_secs(retention_days * 86_400);
        for r in &mut accepted {
            r.written = store::WriteOrder(written);
        }
        for r in &accepted {
            let key = ItemKey { pk: pk.clone(), sk: format!("{}#{}#{}", r.device_id, r.ts, r.event_id) };
            let expected = ReadingItem::new(r, key.clone(), retention)
                .to_item()
                .expect("serde_dynamo marshals every reading");
            let encoded = ReadingItem::marshal(r, &key, retention);
            prop_assert_eq!(encoded.size, item_size(&expected));
            prop_assert_eq!(encoded.item, expected);
        }
    }

    /// A metric is stored exactly as sent: whatever decimal text a device sends, the
    /// parser keeps the value it spells (checked against an independent decimal, not
    /// the parser's own), or refuses it with the rule DynamoDB would break. The item's
    /// number is that value, and reading the item back, answering it in JSON and
    /// requeueing it in a body each give that value again.
    #[test]
    fn a_metric_is_stored_exactly_as_sent(text in number_text()) {
        let body = format!(
            r#"{{"device_id":"dev-1","event_id":"e-1","ts":{NOW},"metrics":{{"m":{text}}}}}"#
        );
        let sent = BigDecimal::from_str(&text).expect("JSON number text is a decimal");
        let accepted = match parse_body(&body, &limits()) {
            Ok(accepted) => accepted,
            Err(refusal) => {
                // Refused only where DynamoDB would refuse it, and named so.
                prop_assert_eq!(refusal.field.as_str(), "metrics.m");
                let digits = sent.normalized().digits();
                prop_assert!(
                    !sent.is_zero() && (digits > 38 || !in_range(&sent)),
                    "{} refused: {}", text, refusal
                );
                return Ok(());
            }
        };
        let value = |d: &Decimal| BigDecimal::from_str(d.as_str()).expect("a decimal");
        let parsed = &accepted[0].metrics["m"];
        prop_assert_eq!(value(parsed), sent.clone(), "{} parsed as {}", text, parsed);
        let key = ItemKey { pk: "0#2026-06-22T12".into(), sk: "dev-1#t#e-1".into() };
        let item = ReadingItem::marshal(&accepted[0], &key, Duration::from_secs(86_400)).item;
        let stored = item["metrics"].as_m().expect("a map")["m"].as_n().expect("a number").clone();
        prop_assert_eq!(BigDecimal::from_str(&stored).expect("a decimal"), sent.clone(), "stored as {}", stored);
        let read = ReadingItem::from_item(item).expect("reads back");
        prop_assert_eq!(value(&read.metrics["m"]), sent.clone());
        let answered = serde_json::to_string(&read.metrics).expect("JSON");
        let answered: BTreeMap<String, Box<serde_json::value::RawValue>> =
            serde_json::from_str(&answered).expect("a JSON object");
        prop_assert_eq!(BigDecimal::from_str(answered["m"].get()).expect("a decimal"), sent.clone());
        let requeued = parse_body(&to_body(&accepted), &limits()).expect("a requeued body parses");
        prop_assert_eq!(&requeued, &accepted);
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
        metrics: [
            ("tiny", "2e-130"),
            ("huge", "-9.99e125"),
            ("zero", "-0.0"),
            ("third", "0.33333333333333333333333333333333333333"),
        ]
        .into_iter()
        .map(|(name, text)| (name.to_owned(), Decimal::parse(text).expect("a number")))
        .collect(),
        tags: BTreeMap::from([("ünïcode".into(), "välue ✓".into())]),
        written: store::WriteOrder::OLDEST,
    };
    let accepted = parse_body(&to_body(std::slice::from_ref(&reading)), &limits())
        .expect("every number is in DynamoDB's range");
    let key = ItemKey {
        pk: "3#2026-06-22T12".into(),
        sk: "dev-1#2026-06-22T12:00:00.000Z#e-1".into(),
    };
    let retention = Duration::from_secs(30 * 86_400);
    let expected = ReadingItem::new(&accepted[0], key.clone(), retention)
        .to_item()
        .expect("serde_dynamo marshals it");
    let encoded = ReadingItem::marshal(&accepted[0], &key, retention);
    assert_eq!(encoded.size, item_size(&expected));
    assert_eq!(encoded.item, expected);
}
