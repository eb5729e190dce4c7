//! Pure check(input, expected) tests of the documented formats.

use std::time::Duration;

use sharding::epoch::Epoch;
use sharding::key::key_for_layout;
use sharding::read_plan::{plan_all, plan_entity};
use sharding::{
    Bucket, FanoutHistory, ItemKey, KeyError, Layout, PlanError, ReadPlan, ReadingRef,
    TableHistory, TimeRange, Timestamp, point_keys, propagation_margin, write_key,
};

use crate::common::{nz, ts};

const ENTITY: &str = "sensor-alpha-001";
const TS: &str = "2026-06-22T01:05:07.089Z";

fn reading(event_id: &str) -> ReadingRef<'_> {
    ReadingRef::new(ENTITY, event_id, ts(TS))
}

fn check_key(layout: Layout, fanout: Option<u32>, r: ReadingRef<'_>, pk: &str, sk: &str) {
    let key = key_for_layout(&r, &layout, fanout).expect("valid reading");
    assert_eq!(
        key,
        ItemKey {
            pk: pk.to_owned(),
            sk: sk.to_owned()
        },
        "{layout}, k = {fanout:?}"
    );
}

#[test]
fn key_formats() {
    let plain_sk = "2026-06-22T01:05:07.089Z#evt-1";
    let bucket_sk = "sensor-alpha-001#2026-06-22T01:05:07.089Z#evt-1";
    check_key(
        Layout::unsharded(),
        None,
        reading("evt-1"),
        ENTITY,
        plain_sk,
    );
    // Random: suffix = shard_index("evt-1", k); k defaults to N.
    check_key(
        Layout::random(nz(16)),
        None,
        reading("evt-1"),
        "sensor-alpha-001#9",
        plain_sk,
    );
    check_key(
        Layout::random(nz(16)),
        Some(4),
        reading("evt-1"),
        "sensor-alpha-001#1",
        plain_sk,
    );
    // Calculated on the event id and on another attribute.
    check_key(
        Layout::calculated("event_id", nz(4)),
        None,
        reading("evt-1"),
        "sensor-alpha-001#1",
        plain_sk,
    );
    let site_7 = std::collections::BTreeMap::from([("site".to_owned(), "site-7".to_owned())]);
    check_key(
        Layout::calculated("site", nz(8)),
        None,
        reading("evt-1").with_tags(&site_7),
        "sensor-alpha-001#5",
        plain_sk,
    );
    // TimeBucket: s = shard_index(entity, 16) = 13; hot sub-shard j = 1 + shard_index("evt-1", 4) = 2,
    // on base shard (13 + 2) mod 16 = 15, or on its own key 13.2 (dedicated sub-shards).
    check_key(
        Layout::time_bucket(Bucket::Hour, nz(16)),
        None,
        reading("evt-1"),
        "13#2026-06-22T01",
        bucket_sk,
    );
    check_key(
        Layout::time_bucket(Bucket::Hour, nz(16)),
        Some(1),
        reading("evt-1"),
        "13#2026-06-22T01",
        bucket_sk,
    );
    check_key(
        Layout::time_bucket(Bucket::Hour, nz(16)),
        Some(4),
        reading("evt-1"),
        "15#2026-06-22T01",
        bucket_sk,
    );
    check_key(
        Layout::time_bucket_dedicated(Bucket::Hour, nz(16)),
        Some(4),
        reading("evt-1"),
        "13.2#2026-06-22T01",
        bucket_sk,
    );
    // N = 2: s = 1; sub-shard j = 2 is not below N, so it has a key of its own.
    check_key(
        Layout::time_bucket(Bucket::Hour, nz(2)),
        Some(4),
        reading("evt-1"),
        "1.2#2026-06-22T01",
        bucket_sk,
    );
    check_key(
        Layout::time_bucket(Bucket::Minute, nz(100)),
        None,
        reading("evt-1"),
        "73#2026-06-22T01:05",
        bucket_sk,
    );
    check_key(
        Layout::time_bucket(Bucket::Day, nz(16)),
        None,
        reading("evt-1"),
        "13#2026-06-22",
        bucket_sk,
    );
    check_key(
        Layout::time_bucket(Bucket::Month, nz(16)),
        None,
        reading("evt-1"),
        "13#2026-06",
        bucket_sk,
    );
}

#[test]
fn keys_follow_the_epoch_at_the_readings_own_time() {
    let table = TableHistory::from_epochs(vec![
        Epoch {
            effective_from: Timestamp::MIN,
            value: Layout::unsharded(),
        },
        Epoch {
            effective_from: ts("2026-06-22T01:00:00Z"),
            value: Layout::time_bucket(Bucket::Hour, nz(16)),
        },
    ])
    .expect("valid history");
    let fanout = FanoutHistory::from_epochs(vec![Epoch {
        effective_from: ts("2026-06-22T01:05:07.090Z"),
        value: 4,
    }])
    .expect("valid history");
    let at = |t: &str| ReadingRef::new(ENTITY, "evt-1", ts(t));
    // Written at the reading's own time.
    let key = |t: &str| {
        write_key(&at(t), &table, &fanout, ts(t))
            .expect("valid")
            .key
            .pk
    };
    assert_eq!(key("2026-06-22T00:59:59.999Z"), ENTITY);
    assert_eq!(key("2026-06-22T01:00:00.000Z"), "13#2026-06-22T01");
    assert_eq!(key("2026-06-22T01:05:07.089Z"), "13#2026-06-22T01");
    assert_eq!(key("2026-06-22T01:05:07.090Z"), "15#2026-06-22T01");
    // A reading stamped before the raise and written after it takes the raised k.
    assert_eq!(
        write_key(
            &at("2026-06-22T01:05:07.089Z"),
            &table,
            &fanout,
            ts("2026-06-22T01:06:00Z")
        )
        .expect("valid")
        .key
        .pk,
        "15#2026-06-22T01"
    );
    // A point read tries the key at the reading's time first, then every other key a
    // writer can have used.
    let candidates = point_keys(&at(TS), &table, &fanout).expect("valid");
    assert_eq!(
        candidates.first(),
        Some(
            &write_key(&at(TS), &table, &fanout, ts(TS))
                .expect("valid")
                .key
        )
    );
    let pks: Vec<&str> = candidates.iter().map(|k| k.pk.as_str()).collect();
    assert_eq!(pks.first(), Some(&"13#2026-06-22T01"));
    assert!(pks.contains(&"15#2026-06-22T01"), "{pks:?}");
    assert!(pks.len() <= 4, "{pks:?}");
}

#[test]
fn bad_ids_are_refused() {
    let layout = Layout::time_bucket(Bucket::Hour, nz(16));
    let check = |entity: &str, event_id: &str, expected: KeyError| {
        let r = ReadingRef::new(entity, event_id, ts(TS));
        assert_eq!(
            key_for_layout(&r, &layout, None),
            Err(expected),
            "{entity:?} {event_id:?}"
        );
    };
    check("a#b", "e", KeyError::Separator { field: "entity" });
    check("a", "e#1", KeyError::Separator { field: "event_id" });
    check("", "e", KeyError::Empty { field: "entity" });
    check("a", "", KeyError::Empty { field: "event_id" });
    check(
        "a b",
        "e",
        KeyError::InvalidChar {
            field: "entity",
            ch: ' ',
        },
    );
    check(
        "a",
        "e~",
        KeyError::InvalidChar {
            field: "event_id",
            ch: '~',
        },
    );
    check(
        &"x".repeat(257),
        "e",
        KeyError::TooLong {
            field: "entity",
            len: 257,
        },
    );
    let calc = Layout::calculated("site", nz(8));
    let r = reading("evt-1");
    assert_eq!(
        key_for_layout(&r, &calc, None),
        Err(KeyError::MissingAttribute {
            attribute: "site".to_owned()
        })
    );
}

#[test]
fn bucket_labels_starts_and_names() {
    let t = ts(TS);
    let check = |b: Bucket, label: &str, start: &str, next: &str| {
        assert_eq!(b.label(t), label);
        assert_eq!(b.start(t), ts(start), "{b} start");
        assert_eq!(b.next_start(t), ts(next), "{b} next");
        assert_eq!(b.to_string().parse::<Bucket>(), Ok(b));
    };
    check(
        Bucket::Minute,
        "2026-06-22T01:05",
        "2026-06-22T01:05:00Z",
        "2026-06-22T01:06:00Z",
    );
    check(
        Bucket::Hour,
        "2026-06-22T01",
        "2026-06-22T01:00:00Z",
        "2026-06-22T02:00:00Z",
    );
    check(
        Bucket::Day,
        "2026-06-22",
        "2026-06-22T00:00:00Z",
        "2026-06-23T00:00:00Z",
    );
    check(
        Bucket::Month,
        "2026-06",
        "2026-06-01T00:00:00Z",
        "2026-07-01T00:00:00Z",
    );
    assert_eq!(
        Bucket::Month.next_start(ts("2024-02-10T00:00:00Z")),
        ts("2024-03-01T00:00:00Z")
    );
    assert_eq!(
        Bucket::Day.label(ts("1969-12-31T23:59:59.999Z")),
        "1969-12-31"
    );
    assert!("week".parse::<Bucket>().is_err());
}

#[test]
fn bucket_spans_are_clipped() {
    let range =
        TimeRange::new(ts("2026-06-22T01:30:00Z"), ts("2026-06-22T03:15:00Z")).expect("range");
    let got: Vec<(String, String, String)> = Bucket::Hour
        .spans(range)
        .map(|b| {
            (
                b.label,
                b.range.from().to_string(),
                b.range.to().to_string(),
            )
        })
        .collect();
    let expected = [
        (
            "2026-06-22T01",
            "2026-06-22T01:30:00.000Z",
            "2026-06-22T02:00:00.000Z",
        ),
        (
            "2026-06-22T02",
            "2026-06-22T02:00:00.000Z",
            "2026-06-22T03:00:00.000Z",
        ),
        (
            "2026-06-22T03",
            "2026-06-22T03:00:00.000Z",
            "2026-06-22T03:15:00.000Z",
        ),
    ];
    let expected: Vec<(String, String, String)> = expected
        .iter()
        .map(|(a, b, c)| ((*a).to_owned(), (*b).to_owned(), (*c).to_owned()))
        .collect();
    assert_eq!(got, expected);
}

#[test]
fn timestamps_parse_and_format() {
    let check = |input: &str, expected: &str| {
        assert_eq!(
            input.parse::<Timestamp>().map(|t| t.to_string()).as_deref(),
            Ok(expected),
            "{input}"
        );
    };
    check("2026-06-22T01:00:00Z", "2026-06-22T01:00:00.000Z");
    check("2026-06-22T03:00:00.5+02:00", "2026-06-22T01:00:00.500Z");
    check("2026-06-22T01:00:00.123999Z", "2026-06-22T01:00:00.123Z");
    check("1782090000000", "2026-06-22T01:00:00.000Z");
    check("0", "1970-01-01T00:00:00.000Z");
    check("-1", "1969-12-31T23:59:59.999Z");
    for bad in [
        "",
        "yesterday",
        "2026-06-22",
        "99999999999999999999",
        "10000-01-01T00:00:00Z",
    ] {
        assert!(bad.parse::<Timestamp>().is_err(), "{bad:?} parsed");
    }
    let json = serde_json::to_string(&ts("2026-06-22T01:00:00Z")).expect("encode");
    assert_eq!(json, "1782090000000");
    assert!(serde_json::from_str::<Timestamp>("-99999999999999999").is_err());
}

#[test]
fn ranges_refuse_empty() {
    let a = ts("2026-06-22T01:00:00Z");
    assert!(TimeRange::new(a, a).is_err());
    assert!(TimeRange::new(a.succ(), a).is_err());
    let r = TimeRange::new(a, a.succ()).expect("one millisecond");
    assert!(r.contains(a) && !r.contains(a.succ()));
    assert_eq!(r.last(), a);
    assert!(serde_json::from_str::<TimeRange>(r#"{"from": 5, "to": 5}"#).is_err());
}

#[test]
fn epochs_cut_ranges_and_schedule_after_the_margin() {
    let mut fanout = FanoutHistory::new();
    let now = ts("2026-06-22T01:00:00Z");
    let margin = propagation_margin(
        Duration::from_secs(60),
        Duration::from_secs(5),
        Duration::from_secs(5),
    );
    assert_eq!(margin, Duration::from_secs(70));
    let e = fanout.schedule(2, now, margin).expect("first epoch");
    assert_eq!(e.effective_from, ts("2026-06-22T01:01:10Z"));
    // Not after the last epoch: refused.
    assert!(fanout.schedule(4, now, margin).is_err());
    assert!(
        fanout
            .schedule(0, ts("2026-06-22T02:00:00Z"), margin)
            .is_err()
    );
    fanout
        .schedule(4, ts("2026-06-22T02:00:00Z"), margin)
        .expect("second epoch");
    assert_eq!(fanout.at(ts("2026-06-22T01:01:09.999Z")), None);
    assert_eq!(fanout.at(ts("2026-06-22T01:01:10Z")), Some(2));
    let range =
        TimeRange::new(ts("2026-06-22T00:00:00Z"), ts("2026-06-22T03:00:00Z")).expect("range");
    let spans: Vec<(String, Option<u32>)> = fanout
        .spans(range)
        .into_iter()
        .map(|(r, k)| (r.to_string(), k))
        .collect();
    assert_eq!(
        spans,
        [
            (
                "[2026-06-22T00:00:00.000Z, 2026-06-22T01:01:10.000Z)".to_owned(),
                None
            ),
            (
                "[2026-06-22T01:01:10.000Z, 2026-06-22T02:01:10.000Z)".to_owned(),
                Some(2)
            ),
            (
                "[2026-06-22T02:01:10.000Z, 2026-06-22T03:00:00.000Z)".to_owned(),
                Some(4)
            ),
        ]
    );
    let set = fanout.to_string_set();
    assert_eq!(set, ["1782090070000:2", "1782093670000:4"]);
    let reversed: Vec<&String> = set.iter().rev().collect();
    assert_eq!(FanoutHistory::from_string_set(reversed), Ok(fanout));
    assert!(FanoutHistory::from_string_set(["12:0"]).is_err());
    assert!(FanoutHistory::from_string_set(["12"]).is_err());

    assert!(TableHistory::from_epochs(vec![]).is_err());
    let late_first = vec![Epoch {
        effective_from: now,
        value: Layout::unsharded(),
    }];
    assert!(TableHistory::from_epochs(late_first).is_err());
}

#[test]
fn entity_plan_across_legacy_and_hot_epochs() {
    let table = TableHistory::from_epochs(vec![
        Epoch {
            effective_from: Timestamp::MIN,
            value: Layout::unsharded(),
        },
        Epoch {
            effective_from: ts("2026-06-22T01:30:00Z"),
            value: Layout::time_bucket(Bucket::Hour, nz(16)),
        },
    ])
    .expect("valid");
    let fanout = FanoutHistory::from_epochs(vec![Epoch {
        effective_from: ts("2026-06-22T02:20:00Z"),
        value: 2,
    }])
    .expect("valid");
    let range =
        TimeRange::new(ts("2026-06-22T01:00:00Z"), ts("2026-06-22T02:30:00Z")).expect("range");
    let plan = plan_entity(ENTITY, range, &table, &fanout).expect("plan");
    let got: Vec<(String, String, String)> = plan
        .queries
        .iter()
        .map(|q| {
            assert!(q.time_ordered && q.time_filter.is_none());
            let (lo, hi) = q.sk_between.clone().expect("bounded");
            (q.pk.clone(), lo, hi)
        })
        .collect();
    let e = |pk: &str, lo: &str, hi: &str| (pk.to_owned(), lo.to_owned(), hi.to_owned());
    assert_eq!(
        got,
        [
            e(
                ENTITY,
                "2026-06-22T01:00:00.000Z",
                "2026-06-22T01:29:59.999Z#~"
            ),
            e(
                "13#2026-06-22T01",
                "sensor-alpha-001#2026-06-22T01:30:00.000Z",
                "sensor-alpha-001#2026-06-22T01:59:59.999Z#~"
            ),
            // From an hour (REKEY_HORIZON) before the raise, a reading not yet written
            // can be keyed with k = 2, on sub-shards 1 and 2: base shards 14 and 15. The
            // cold key stays for writers that had not seen the raise yet.
            e(
                "14#2026-06-22T01",
                "sensor-alpha-001#2026-06-22T01:30:00.000Z",
                "sensor-alpha-001#2026-06-22T01:59:59.999Z#~"
            ),
            e(
                "15#2026-06-22T01",
                "sensor-alpha-001#2026-06-22T01:30:00.000Z",
                "sensor-alpha-001#2026-06-22T01:59:59.999Z#~"
            ),
            e(
                "13#2026-06-22T02",
                "sensor-alpha-001#2026-06-22T02:00:00.000Z",
                "sensor-alpha-001#2026-06-22T02:29:59.999Z#~"
            ),
            e(
                "14#2026-06-22T02",
                "sensor-alpha-001#2026-06-22T02:00:00.000Z",
                "sensor-alpha-001#2026-06-22T02:29:59.999Z#~"
            ),
            e(
                "15#2026-06-22T02",
                "sensor-alpha-001#2026-06-22T02:00:00.000Z",
                "sensor-alpha-001#2026-06-22T02:29:59.999Z#~"
            ),
        ]
    );
}

#[test]
fn random_plan_joins_unchanged_suffixes() {
    // k = 4 (the layout's N), then 2 from 01:00, 3 from 02:00: the suffixes nest, so a
    // reading is read with the largest k in force over the hour after it.
    let table = TableHistory::new(Layout::random(nz(4)));
    let fanout = FanoutHistory::from_epochs(vec![
        Epoch {
            effective_from: ts("2026-06-22T01:00:00Z"),
            value: 2,
        },
        Epoch {
            effective_from: ts("2026-06-22T02:00:00Z"),
            value: 3,
        },
    ])
    .expect("valid");
    let range =
        TimeRange::new(ts("2026-06-22T00:00:00Z"), ts("2026-06-22T03:00:00Z")).expect("range");
    let plan = plan_entity(ENTITY, range, &table, &fanout).expect("plan");
    let got: Vec<(String, String)> = plan
        .queries
        .iter()
        .map(|q| (q.pk.clone(), q.covers.to_string()))
        .collect();
    let e = |pk: &str, r: &str| (pk.to_owned(), r.to_owned());
    assert_eq!(
        got,
        [
            e(
                "sensor-alpha-001#0",
                "[2026-06-22T00:00:00.000Z, 2026-06-22T03:00:00.000Z)"
            ),
            e(
                "sensor-alpha-001#1",
                "[2026-06-22T00:00:00.000Z, 2026-06-22T03:00:00.000Z)"
            ),
            e(
                "sensor-alpha-001#2",
                "[2026-06-22T00:00:00.000Z, 2026-06-22T03:00:00.000Z)"
            ),
            e(
                "sensor-alpha-001#3",
                "[2026-06-22T00:00:00.000Z, 2026-06-22T01:00:00.000Z)"
            ),
        ]
    );
}

/// An every-entity plan as (PK, time filter), each query checked to be unordered and
/// unbounded by sort key.
fn all_plan_pks(plan: &ReadPlan) -> Vec<(String, String)> {
    plan.queries
        .iter()
        .map(|q| {
            assert!(!q.time_ordered && q.sk_between.is_none());
            (q.pk.clone(), q.time_filter.expect("filtered").to_string())
        })
        .collect()
}

#[test]
fn all_entities_plan() {
    let table = TableHistory::new(Layout::time_bucket_dedicated(Bucket::Day, nz(3)));
    let hot = FanoutHistory::from_epochs(vec![Epoch {
        effective_from: ts("2026-06-22T12:00:00Z"),
        value: 2,
    }])
    .expect("valid");
    let range =
        TimeRange::new(ts("2026-06-22T06:00:00Z"), ts("2026-06-23T06:00:00Z")).expect("range");
    let plan = plan_all(
        range,
        &table,
        &[(ENTITY, &hot), ("cold-one", &FanoutHistory::new())],
    )
    .expect("plan");
    let got = all_plan_pks(&plan);
    let day1 = "[2026-06-22T06:00:00.000Z, 2026-06-23T00:00:00.000Z)";
    // An hour (REKEY_HORIZON) before the raise: readings not yet written take k = 2.
    let hot1 = "[2026-06-22T11:00:00.000Z, 2026-06-23T00:00:00.000Z)";
    let day2 = "[2026-06-23T00:00:00.000Z, 2026-06-23T06:00:00.000Z)";
    // shard_index("sensor-alpha-001", 3) = 2
    let e = |pk: &str, r: &str| (pk.to_owned(), r.to_owned());
    assert_eq!(
        got,
        [
            e("0#2026-06-22", day1),
            e("1#2026-06-22", day1),
            e("2#2026-06-22", day1),
            e("2.1#2026-06-22", hot1),
            e("2.2#2026-06-22", hot1),
            e("0#2026-06-23", day2),
            e("1#2026-06-23", day2),
            e("2#2026-06-23", day2),
            e("2.1#2026-06-23", day2),
            e("2.2#2026-06-23", day2),
        ]
    );
    let legacy = TableHistory::new(Layout::unsharded());
    assert!(matches!(
        plan_all(range, &legacy, &[]),
        Err(PlanError::Unsupported { .. })
    ));
}

#[test]
fn all_entities_plan_lists_only_dedicated_sub_shards() {
    // Base placement, N = 3: sub-shards 1 and 2 live on base shards, which are read
    // anyway; from k = 4, sub-shards 3 and 4 have keys of their own.
    let table = TableHistory::new(Layout::time_bucket(Bucket::Day, nz(3)));
    let hot = FanoutHistory::from_epochs(vec![
        Epoch {
            effective_from: ts("2026-06-22T12:00:00Z"),
            value: 2,
        },
        Epoch {
            effective_from: ts("2026-06-22T18:00:00Z"),
            value: 4,
        },
    ])
    .expect("valid");
    let range =
        TimeRange::new(ts("2026-06-22T06:00:00Z"), ts("2026-06-23T06:00:00Z")).expect("range");
    let plan = plan_all(range, &table, &[(ENTITY, &hot)]).expect("plan");
    let got = all_plan_pks(&plan);
    let day1 = "[2026-06-22T06:00:00.000Z, 2026-06-23T00:00:00.000Z)";
    // An hour (REKEY_HORIZON) before the raise to 4.
    let hot1 = "[2026-06-22T17:00:00.000Z, 2026-06-23T00:00:00.000Z)";
    let day2 = "[2026-06-23T00:00:00.000Z, 2026-06-23T06:00:00.000Z)";
    let e = |pk: &str, r: &str| (pk.to_owned(), r.to_owned());
    assert_eq!(
        got,
        [
            e("0#2026-06-22", day1),
            e("1#2026-06-22", day1),
            e("2#2026-06-22", day1),
            e("2.3#2026-06-22", hot1),
            e("2.4#2026-06-22", hot1),
            e("0#2026-06-23", day2),
            e("1#2026-06-23", day2),
            e("2#2026-06-23", day2),
            e("2.3#2026-06-23", day2),
            e("2.4#2026-06-23", day2),
        ]
    );
}

#[test]
fn a_stored_layout_without_a_placement_keeps_dedicated_sub_shards() {
    let stored = r#"{"strategy":{"kind":"time_bucket","bucket":"hour"},"shards":16}"#;
    let layout: Layout = serde_json::from_str(stored).expect("a stored layout");
    assert_eq!(layout, Layout::time_bucket_dedicated(Bucket::Hour, nz(16)));
    let written = serde_json::to_string(&Layout::time_bucket(Bucket::Hour, nz(16))).expect("json");
    assert!(written.contains(r#""sub_shards":"base""#), "{written}");
    let back: Layout = serde_json::from_str(&written).expect("json");
    assert_eq!(back, Layout::time_bucket(Bucket::Hour, nz(16)));
}

#[test]
fn sub_shard_homes_wrap_without_overflow() {
    use sharding::layout::SubShards;
    let n = nz(u32::MAX);
    assert_eq!(SubShards::Base.home(u32::MAX - 2, 5, n), (3, None));
    assert_eq!(SubShards::Base.home(3, u32::MAX, n), (3, Some(u32::MAX)));
    assert_eq!(SubShards::Dedicated.home(3, 1, n), (3, Some(1)));
}
