//! The slab format (`store::slab`): any members a slab or run can hold come back from
//! the stored item as they went in, and the item is never larger than the bounds a cut
//! into items is made by (`sharding::slab::cut`), so no cut yields an item over its
//! limit.

use std::collections::BTreeMap;

use proptest::prelude::*;
use sharding::time::Timestamp;
use store::Decimal;
use store::item::Reading;
use store::slab;

/// 2026-06-22T01:00:00Z
const T: i64 = 1_782_090_000_000;

fn number() -> impl Strategy<Value = Decimal> {
    crate::decimal::decimal_text().prop_filter_map("a number DynamoDB stores", |text| {
        Decimal::parse(&text).ok()
    })
}

/// Members of a few devices, sorted by (device, ts, event id), each identity once,
/// within a window: names from a small set, so columns are dense, sparse or between;
/// write orders none, one message's or several's.
fn members() -> impl Strategy<Value = Vec<Reading>> {
    let member = (
        "dev-[a-e]{1,2}",
        0i64..slab::MAX_SPAN_MS,
        "(0190a1b2-c3d4-|e-|)[A-Za-z0-9._:-]{1,12}",
        prop::collection::btree_map("[a-h]{1,2}", number(), 0..4),
        prop::collection::btree_map("[a-c]", "\\PC{0,12}", 0..2),
        0i64..86_400_000,
    );
    let written = (0..3u8, T..T + 86_400_000);
    (prop::collection::vec(member, 1..80), written).prop_map(|(raw, (spread, base))| {
        let mut by_identity: BTreeMap<(String, i64, String), Reading> = BTreeMap::new();
        for (device, dt, event_id, metrics, tags, offset) in raw {
            let written = match spread {
                0 => 0,
                1 => base,
                _ => base + offset,
            };
            by_identity.insert(
                (device.clone(), dt, event_id.clone()),
                Reading {
                    device_id: device,
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

const RUN_PK: &str = "r#3#2026-06-22T01";
const RUN_SK: &str = "dev-a#2026-06-22T01:00#0000";

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_slab_round_trips_bit_for_bit(members in members(), ttl in any::<i64>()) {
        let encoded = slab::marshal(&members, RUN_PK, RUN_SK, ttl).expect("sorted members");
        prop_assert_eq!(encoded.size, store::size::item_size(&encoded.item));
        let again = slab::marshal(&members, RUN_PK, RUN_SK, ttl).expect("again");
        prop_assert_eq!(&again.item, &encoded.item);
        let back = slab::decode(encoded.item).expect("a slab the encoder wrote is read");
        prop_assert_eq!(back.len(), members.len());
        for (got, sent) in back.into_iter().zip(&members) {
            prop_assert_eq!(&got.pk, RUN_PK);
            prop_assert_eq!(got.ttl, ttl);
            prop_assert_eq!(&got.into_reading().expect("a reading"), sent);
        }
    }

    /// What `sharding::slab::cut` adds up bounds the item marshal makes.
    #[test]
    fn an_item_is_no_larger_than_its_overhead_and_members_bounds(
        members in members(),
        ttl in any::<i64>(),
    ) {
        let encoded = slab::marshal(&members, RUN_PK, RUN_SK, ttl).expect("sorted members");
        let bound = slab::overhead(RUN_PK, RUN_SK) + members.iter().map(slab::member_bytes).sum::<usize>();
        prop_assert!(encoded.size <= bound, "{} > {}", encoded.size, bound);
    }
}

/// A cut by the bounds never yields an item over its limit, on members whose names
/// differ from each other's (the case a dense column of `NULL`s would blow up).
#[test]
fn a_cut_by_the_bounds_keeps_every_item_under_its_limit() {
    let members: Vec<Reading> = (0..2_000)
        .map(|i| Reading {
            device_id: format!("dev-{i:05}"),
            event_id: "e-1".into(),
            ts: Timestamp::from_millis(T + i).expect("in range"),
            metrics: BTreeMap::from([(
                format!("metric-{i}"),
                Decimal::from_f64(1.5).expect("a number"),
            )]),
            tags: BTreeMap::new(),
            written: store::WriteOrder(T + i),
        })
        .collect();
    let max = 16 * 1024;
    let parts = sharding::slab::cut(
        &members,
        max,
        1_000,
        slab::overhead(RUN_PK, RUN_SK),
        slab::member_bytes,
    );
    assert!(parts.len() > 1);
    for part in parts {
        let size = slab::marshal(&members[part], RUN_PK, RUN_SK, 0)
            .expect("sorted")
            .size;
        assert!(size <= max, "{size}");
    }
}

/// The vector of docs/formats.md is the slab of its three readings of two devices,
/// written in two messages, and reads back as them.
#[test]
fn the_documented_slab_vector_is_the_slab_of_its_readings() {
    let sent = 1_782_090_003_000; // 2026-06-22T01:00:03Z
    let reading =
        |device: &str, dt: i64, id: &str, metrics: &[(&str, f64)], written: i64| Reading {
            device_id: device.into(),
            event_id: id.into(),
            ts: Timestamp::from_millis(T + dt).expect("in range"),
            metrics: metrics
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Decimal::from_f64(*v).expect("a number")))
                .collect(),
            tags: BTreeMap::new(),
            written: store::WriteOrder(written),
        };
    let mut first = reading(
        "sensor-7",
        0,
        "e-0001",
        &[("temperature", 21.5), ("humidity", 40.0)],
        sent,
    );
    first.tags.insert("site".into(), "lab".into());
    let members = [
        first,
        reading(
            "sensor-7",
            1_000,
            "e-0002",
            &[("temperature", 21.75)],
            sent + 1_250,
        ),
        reading("thermo-3", 500, "e-0001", &[("humidity", 41.0)], sent),
    ];
    let layout = sharding::slab::SlabLayout::default();
    let window = layout.window(members[0].ts);
    let pk = sharding::slab::slab_pk(3, 0, window);
    let sk = sharding::slab::slab_sk(
        members
            .iter()
            .map(|r| (r.device_id.as_str(), r.ts.as_millis(), r.event_id.as_str())),
    );
    let item = slab::marshal(&members, &pk, &sk, layout.expires_at(window))
        .expect("sorted members")
        .item;
    let vector: serde_json::Value =
        serde_json::from_str(&crate::block::documented_vector("<!-- slab-vector -->"))
            .expect("json");
    assert_eq!(
        crate::block::attribute(&vector),
        aws_sdk_dynamodb::types::AttributeValue::M(item.clone()),
        "the vector of docs/formats.md is not the slab's item"
    );
    let back: Vec<Reading> = slab::decode(item)
        .expect("valid")
        .into_iter()
        .map(|r| r.into_reading().expect("a reading"))
        .collect();
    assert_eq!(back, members);
}

/// A window's marker is its key, `marker` and `ttl` alone: it holds no reading, is no
/// slab, has no `ts_ms` (so the time index never holds it), and is sized by DynamoDB's
/// rule.
#[test]
fn a_marker_holds_no_reading_and_stays_out_of_the_time_index() {
    let marker = slab::marker("r#3#2026-06-22T01", "#2026-06-22T01:05", 1_784_682_360);
    let names: Vec<&str> = {
        let mut names: Vec<&str> = marker.item.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    };
    assert_eq!(names, ["PK", "SK", "marker", "ttl"]);
    assert!(slab::is_marker(&marker.item) && !slab::is_slab(&marker.item));
    assert_eq!(marker.size, store::size::item_size(&marker.item));
    assert!(store::block::expand(marker.item).unwrap().is_empty());
}
