//! The slab format (`store::slab`): any members a slab or run can hold come back from
//! the stored item as they went in, and a cut into items (`store::slab::cut`) never
//! yields an item over its limit, and leaves none it could have grown.

use std::collections::BTreeMap;
use std::io::Read as _;

use aws_sdk_dynamodb::types::AttributeValue;

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

    /// Each item of a cut is at most its limit, and the next member would take it over:
    /// the cut covers the members in order, each once.
    #[test]
    fn a_cut_fills_each_item_and_none_is_over_its_limit(
        members in members(),
        max in 200usize..3_000,
    ) {
        let keys = (RUN_PK.len(), RUN_SK.len());
        let parts = slab::cut(&members, max, keys).expect("sorted members");
        let mut next = 0;
        for part in &parts {
            prop_assert_eq!(part.start, next);
            next = part.end;
            let size = slab::marshal(&members[part.clone()], RUN_PK, RUN_SK, i64::MIN)
                .expect("sorted")
                .size;
            prop_assert!(size <= max || part.len() == 1, "{} > {}", size, max);
            if part.end < members.len() {
                let grown = slab::marshal(&members[part.start..=part.end], RUN_PK, RUN_SK, i64::MIN)
                    .expect("sorted")
                    .size;
                prop_assert!(grown > max, "{part:?} could hold one more: {grown} <= {max}");
            }
        }
        prop_assert_eq!(next, members.len());
    }
}

/// A cut sized as it encodes keeps every item under its limit on members whose names
/// differ from each other's (the case a dense column of `NULL`s would blow up), and a
/// fleet's two-metric readings pack to a fraction of what they take as attributes.
#[test]
fn a_cut_keeps_every_item_under_its_limit_and_packs_a_fleets_readings_small() {
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
    let parts = slab::cut(&members, max, (RUN_PK.len(), RUN_SK.len())).expect("sorted");
    assert!(parts.len() > 1);
    for part in parts {
        let size = slab::marshal(&members[part], RUN_PK, RUN_SK, 0)
            .expect("sorted")
            .size;
        assert!(size <= max, "{size}");
    }
    // 125 devices, one reading each, event ids a UUID whose tail counts.
    let fleet: Vec<Reading> = (0..125)
        .map(|d| Reading {
            device_id: format!("dev-{d:06}"),
            event_id: format!("0190a1b2-{d:04x}-7e5f-8a9b-{:012x}", d + 17),
            ts: Timestamp::from_millis(T + d * 480).expect("in range"),
            metrics: BTreeMap::from([
                (
                    "humidity".to_owned(),
                    Decimal::from_f64(41.5).expect("a number"),
                ),
                (
                    "temperature".to_owned(),
                    Decimal::from_f64(15.0 + (d % 200) as f64 / 10.0).expect("a number"),
                ),
            ]),
            tags: BTreeMap::new(),
            written: store::WriteOrder(T + 3_000 + d * 7),
        })
        .collect();
    let size = slab::marshal(&fleet, RUN_PK, RUN_SK, 0)
        .expect("sorted")
        .size;
    let per_reading = size / fleet.len();
    assert!(
        per_reading <= 25,
        "{size} bytes for {} readings: {per_reading} a reading",
        fleet.len()
    );
}

/// The three readings of two devices of docs/formats.md's vectors, written in two
/// messages, and their slab's partition key, sort key and expiry.
fn documented_members() -> ([Reading; 3], String, String, i64) {
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
    (members, pk, sk, layout.expires_at(window))
}

/// The readings a valid slab or run item holds.
fn readings_of(item: store::batch::Item) -> Vec<Reading> {
    slab::decode(item)
        .expect("valid")
        .into_iter()
        .map(|r| r.into_reading().expect("a reading"))
        .collect()
}

/// The vector of docs/formats.md is the slab of its three readings, its columns packed
/// into `z` as the vector of its columns says, and reads back as them.
#[test]
fn the_documented_slab_vector_is_the_slab_of_its_readings() {
    let (members, pk, sk, ttl) = documented_members();
    let mut item = slab::marshal(&members, &pk, &sk, ttl)
        .expect("sorted members")
        .item;
    let mut vector: serde_json::Value =
        serde_json::from_str(&crate::block::documented_vector("<!-- slab-vector -->"))
            .expect("json");
    let packed = vector
        .as_object_mut()
        .and_then(|v| v.remove("z"))
        .and_then(|z| z.get("B").and_then(|b| b.as_str()).map(str::to_owned))
        .expect("the vector's z, {\"B\": base64}");
    let z = item.remove("z").expect("a packed item");
    let AttributeValue::B(z) = z else {
        panic!("z is not binary");
    };
    let back_in = z.clone().into_inner();
    assert_eq!(
        aws_smithy_types::base64::encode(&back_in),
        packed,
        "the vector's z is not the slab's"
    );
    assert_eq!(
        crate::block::attribute(&vector),
        AttributeValue::M(item.clone()),
        "the vector of docs/formats.md is not the slab's item"
    );
    let mut text = String::new();
    flate2::read::ZlibDecoder::new(back_in.as_slice())
        .read_to_string(&mut text)
        .expect("zlib");
    let columns: serde_json::Value = serde_json::from_str(&crate::block::documented_vector(
        "<!-- slab-vector-columns -->",
    ))
    .expect("json");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&text).expect("json"),
        columns,
        "the columns vector of docs/formats.md is not what the slab's z inflates to"
    );
    item.insert("z".into(), AttributeValue::B(z));
    assert_eq!(readings_of(item), members);
}

/// A plain item (format 1, each column an attribute of its own, the vector of
/// docs/formats.md) still reads back as its readings.
#[test]
fn the_documented_plain_slab_reads_back_as_its_readings() {
    let (members, ..) = documented_members();
    let vector: serde_json::Value = serde_json::from_str(&crate::block::documented_vector(
        "<!-- slab-vector-plain -->",
    ))
    .expect("json");
    let AttributeValue::M(item) = crate::block::attribute(&vector) else {
        panic!("the vector is no item");
    };
    assert_eq!(readings_of(item), members);
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
