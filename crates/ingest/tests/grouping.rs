//! One device's readings grouped across the messages of a batch (`BLOCKS=on`,
//! docs/design-blocks.md), against the in-memory fakes: a device sending a reading a
//! message writes blocks; each message's fate follows the writes that hold its
//! readings, so a shared block that is not written sends back only what it held; a
//! message sent twice is packed alone and overwrites; and a batch re-formed after a
//! lost response stores a reading in two blocks, which `store::block::expand` reads
//! back as one reading each.

use std::collections::BTreeMap;

use ingest::Fate;
use sharding::block::is_block_sk;
use store::block::BlockItem;
use store::size::{item_size, write_units};

use crate::blocks::{
    BLOCKS, batch, deadline, message, requeued, rng, stored, with_the_three_o_clock_block_throttled,
};
use crate::support::{Fixture, now};

/// A message of `device`'s readings `from..to`, a reading every `step_ms` from `T +
/// from_ms`, each id `e-{n}` from the reading's number `n`, distinct across messages.
fn readings(device: &str, from: usize, to: usize, step_ms: i64) -> serde_json::Value {
    let mut body = message(device, to - from, from as i64 * step_ms, step_ms);
    for (i, r) in body["readings"]
        .as_array_mut()
        .expect("readings")
        .iter_mut()
        .enumerate()
    {
        r["event_id"] = format!("e-{}", from + i).into();
    }
    body
}

/// `bodies` written in one batch with blocks on: the report, every message written with
/// `each` readings.
async fn written(fx: &Fixture, bodies: &[serde_json::Value], each: usize) -> ingest::Report {
    let report = fx
        .service(&[BLOCKS])
        .process(&batch(bodies), now(), deadline(), &mut rng())
        .await;
    assert!(
        report
            .messages
            .iter()
            .all(|m| m.fate == Fate::Written { readings: each }),
        "{report:?}"
    );
    report
}

#[tokio::test(start_paused = true)]
async fn a_device_sending_a_reading_a_message_writes_one_block_for_the_batch() {
    let fx = Fixture::new();
    // 100 messages of one reading of sensor-7, half a second apart, and one of another
    // device alone in the batch.
    let mut bodies: Vec<serde_json::Value> = (0..100)
        .map(|n| readings("sensor-7", n, n + 1, 500))
        .collect();
    bodies.push(readings("sensor-8", 500, 501, 500));
    let report = written(&fx, &bodies, 1).await;
    assert_eq!(report.readings_written, 101);
    let items = fx.table.items();
    assert_eq!(items.len(), 2, "one block and one reading's own item");
    let (blocks, own): (Vec<_>, Vec<_>) = items.iter().partition(|(k, _)| is_block_sk(&k.sk));
    let block = BlockItem::from_item(blocks[0].1.clone()).expect("a block");
    assert_eq!(block.readings().expect("members").len(), 100);
    assert!(own[0].0.sk.starts_with("sensor-8#"), "{:?}", own[0].0);
    let units: usize = items.values().map(|i| write_units(item_size(i))).sum();
    assert!(units <= 4, "{units} write units for 101 readings");
    assert_eq!(stored(&items).len(), 101);
}

#[tokio::test(start_paused = true)]
async fn a_message_sharing_an_unwritten_block_sends_back_only_its_own_readings_in_it() {
    // One device's 30 readings a second apart from 02:59:45, in three messages: the
    // first before 03:00, the second across it, the third after. Grouped, they make a
    // block of each bucket; the 03:00 bucket's key is throttled.
    let bodies: Vec<serde_json::Value> = (0..3)
        .map(|m| {
            let mut body = readings("sensor-7", m * 10, m * 10 + 10, 1_000);
            for r in body["readings"].as_array_mut().expect("readings") {
                let ts = r["ts"].as_i64().expect("ms") + 3_600_000 - 15_000;
                r["ts"] = ts.into();
            }
            body
        })
        .collect();
    let (fx, report) = with_the_three_o_clock_block_throttled(&batch(&bodies)).await;
    let fates: Vec<&Fate> = report.messages.iter().map(|m| &m.fate).collect();
    assert_eq!(fates[0], &Fate::Written { readings: 10 }, "{fates:?}");
    assert!(
        matches!(
            fates[1],
            Fate::Split {
                written: 5,
                requeued: 5,
                ..
            }
        ),
        "{fates:?}"
    );
    assert!(matches!(fates[2], Fate::Reported { .. }), "{fates:?}");
    // Only the second message's unwritten readings go back as a copy; the third is
    // redelivered whole by SQS.
    let copies = fx.dlq.copies();
    assert_eq!(copies.len(), 1);
    let requeued = requeued(&copies[0]);
    let ids: Vec<&str> = requeued.iter().map(|r| r.event_id.as_str()).collect();
    assert_eq!(ids, ["e-15", "e-16", "e-17", "e-18", "e-19"]);
    let written = stored(&fx.table.items());
    assert_eq!(
        written.len(),
        15,
        "the 02:59 block: messages 1 and 2's readings in it"
    );
}

#[tokio::test(start_paused = true)]
async fn a_message_sent_twice_in_a_batch_is_packed_alone_and_stored_once() {
    let fx = Fixture::new();
    // A publisher's retry of the first message, and another message of the device.
    let first = readings("sensor-7", 0, 20, 1_000);
    let other = readings("sensor-7", 20, 40, 1_000);
    let bodies = [first.clone(), other, first];
    written(&fx, &bodies, 20).await;
    // The copies build one block under one key; `stored` fails on a reading held twice.
    assert_eq!(stored(&fx.table.items()).len(), 40);
}

#[tokio::test(start_paused = true)]
async fn a_batch_re_formed_after_a_lost_response_stores_a_reading_in_two_blocks_read_once() {
    let fx = Fixture::new();
    let a = readings("sensor-7", 0, 10, 1_000);
    let b = readings("sensor-7", 10, 20, 1_000);
    let c = readings("sensor-7", 20, 30, 1_000);
    // The first batch is written, then its response is lost: SQS redelivers `b` with a
    // message sent since, in another batch, and they are packed into another block.
    for bodies in [[a, b.clone()], [b, c]] {
        written(&fx, &bodies, 10).await;
    }
    let items = fx.table.items();
    assert_eq!(items.len(), 2, "two blocks: {items:?}");
    // Every reading is stored; `b`'s ten are held by both blocks, as the same readings.
    let mut held: BTreeMap<(String, String), Vec<store::ReadingItem>> = BTreeMap::new();
    for item in items.values() {
        let block = BlockItem::from_item(item.clone()).expect("a block");
        for r in block.readings().expect("members") {
            held.entry((r.ts.clone(), r.event_id.clone()))
                .or_default()
                .push(r);
        }
    }
    assert_eq!(held.len(), 30);
    let twice: Vec<&str> = held
        .iter()
        .filter(|(_, copies)| copies.len() == 2)
        .map(|((_, id), _)| id.as_str())
        .collect();
    assert_eq!(twice.len(), 10, "{twice:?}");
    assert!(
        twice
            .iter()
            .all(|id| (10..20).any(|n| *id == format!("e-{n}")))
    );
    // The copies are one reading: they differ only by the block's expiry (its first
    // member's).
    for copies in held.values_mut() {
        copies.iter_mut().for_each(|r| r.ttl = 0);
        assert!(copies.windows(2).all(|w| w[0] == w[1]), "{copies:#?}");
    }
}

mod property {
    //! Any batch of one or two devices' messages, with readings repeated across
    //! messages, and any of the batch's keys throttled: every message's fate follows
    //! the writes that hold its readings, and nothing is lost.

    use std::collections::{BTreeMap, BTreeSet};

    use ingest::Fate;
    use ingest::handler::SOURCE_ID_ATTRIBUTE;
    use proptest::prelude::*;
    use sharding::block::is_block_sk;
    use store::ReadingItem;
    use store::block::BlockItem;

    use crate::blocks::{BLOCKS, SOURCE, batch, deadline, requeued, rng};
    use crate::support::{Fixture, now};

    /// 03:58:00: a message's readings, 7 s apart, can cross into the 04:00 bucket.
    const BASE: i64 = 1_782_100_680_000;
    const DEVICES: [&str; 2] = ["d-1", "d-2"];

    /// A reading's identity: (device, ts ms, event id).
    type Id = (String, i64, String);

    fn id(device: &str, n: u32) -> Id {
        (
            device.to_owned(),
            BASE + i64::from(n) * 7_000,
            format!("e-{n}"),
        )
    }

    fn body(device: &str, numbers: &[u32]) -> serde_json::Value {
        let readings: Vec<serde_json::Value> = numbers
            .iter()
            .map(|&n| {
                let (_, ts, event) = id(device, n);
                serde_json::json!({
                    "device_id": device,
                    "event_id": event,
                    "ts": ts,
                    "metrics": {"t": f64::from(n) / 4.0},
                })
            })
            .collect();
        serde_json::json!({ "readings": readings })
    }

    /// Every reading the items hold, each time an item holds it.
    fn held(items: &BTreeMap<sharding::key::ItemKey, store::batch::Item>) -> Vec<Id> {
        let mut out = Vec::new();
        for (key, item) in items {
            let readings: Vec<ReadingItem> = if is_block_sk(&key.sk) {
                BlockItem::from_item(item.clone())
                    .and_then(|b| b.readings())
                    .expect("a valid block")
            } else {
                vec![ReadingItem::from_item(item.clone()).expect("a reading")]
            };
            out.extend(
                readings
                    .into_iter()
                    .map(|r| (r.device_id, r.ts_ms, r.event_id)),
            );
        }
        out
    }

    fn messages() -> impl Strategy<Value = Vec<(usize, Vec<u32>)>> {
        prop::collection::vec(
            (0..DEVICES.len(), prop::collection::vec(0u32..40, 1..12)),
            1..10,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn every_message_follows_the_writes_that_hold_its_readings(
            sent in messages(),
            throttled in prop::collection::vec(any::<bool>(), 8),
        ) {
            let bodies: Vec<serde_json::Value> =
                sent.iter().map(|(d, ns)| body(DEVICES[*d], ns)).collect();
            let ev = batch(&bodies);
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()
                .expect("a runtime");
            runtime.block_on(async {
                // The keys the batch writes, then the same batch with some throttled.
                let probe = Fixture::new();
                probe
                    .service(&[BLOCKS])
                    .process(&ev, now(), deadline(), &mut rng())
                    .await;
                let pks: BTreeSet<String> =
                    probe.table.items().keys().map(|k| k.pk.clone()).collect();
                let fx = Fixture::new();
                for (pk, hot) in pks.iter().zip(&throttled) {
                    if *hot {
                        fx.table.throttle_pk(pk.clone());
                    }
                }
                let report = fx
                    .service(&[BLOCKS, SOURCE, ("FANOUT_MAX", "1")])
                    .process(&ev, now(), deadline(), &mut rng())
                    .await;
                let copies: BTreeMap<String, Vec<Id>> = fx
                    .dlq
                    .copies()
                    .iter()
                    .map(|c| {
                        let source = c.attributes[SOURCE_ID_ATTRIBUTE].1.clone();
                        let ids = requeued(c)
                            .into_iter()
                            .map(|r| (r.device_id, r.ts.as_millis(), r.event_id))
                            .collect();
                        (source, ids)
                    })
                    .collect();
                let stored: BTreeSet<Id> = held(&fx.table.items()).into_iter().collect();
                for (i, (d, ns)) in sent.iter().enumerate() {
                    let own: BTreeSet<Id> = ns.iter().map(|&n| id(DEVICES[*d], n)).collect();
                    let fate = &report.messages[i].fate;
                    let copy: BTreeSet<Id> = copies
                        .get(&format!("m-{i:03}"))
                        .into_iter()
                        .flatten()
                        .cloned()
                        .collect();
                    match fate {
                        Fate::Written { readings } => {
                            assert_eq!(*readings, own.len(), "{i}: {fate:?}");
                            assert!(own.is_subset(&stored), "{i}: a written message's reading is not stored");
                        }
                        Fate::Split { written, requeued, .. } => {
                            assert_eq!(written + requeued, own.len(), "{i}: {fate:?}");
                            assert_eq!(copy.len(), *requeued, "{i}: its copy");
                            assert!(copy.is_subset(&own), "{i}: a copy holds another's reading");
                            let kept: BTreeSet<Id> = stored.union(&copy).cloned().collect();
                            assert!(own.is_subset(&kept), "{i}: a reading neither stored nor requeued");
                        }
                        Fate::Reported { .. } => assert!(copy.is_empty()),
                        other => panic!("{i}: {other:?}"),
                    }
                }
                // Without a throttle, every reading is stored, and a reading no two
                // messages share is held by one item.
                if !throttled.iter().take(pks.len()).any(|t| *t) {
                    let all = held(&fx.table.items());
                    let sent_ids: BTreeSet<Id> = sent
                        .iter()
                        .flat_map(|(d, ns)| ns.iter().map(|&n| id(DEVICES[*d], n)))
                        .collect();
                    assert_eq!(all.iter().cloned().collect::<BTreeSet<Id>>(), sent_ids);
                    let mut senders: BTreeMap<Id, BTreeSet<usize>> = BTreeMap::new();
                    for (i, (d, ns)) in sent.iter().enumerate() {
                        for &n in ns {
                            senders.entry(id(DEVICES[*d], n)).or_default().insert(i);
                        }
                    }
                    for reading in senders.iter().filter(|(_, s)| s.len() == 1).map(|(r, _)| r) {
                        let copies = all.iter().filter(|r| *r == reading).count();
                        assert_eq!(copies, 1, "{reading:?} held {copies} times");
                    }
                }
            });
        }
    }
}
