//! The ingest writing blocks (`BLOCKS=on`, docs/design-blocks.md), against the
//! in-memory fakes: a message of one device's readings is written as blocks that hold
//! every reading as sent; a message of one reading is today's item byte for byte; a
//! redelivery rebuilds the same blocks; a partly written message requeues only the
//! readings of its unwritten blocks; a raise re-keys a block whole.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_lambda_events::event::sqs::SqsEvent;
use ingest::{Fate, Report};
use rand::SeedableRng;
use rand::rngs::StdRng;
use sharding::block::is_block_sk;
use sharding::fanout::ShardMeta;
use sharding::key::ItemKey;
use store::ReadingItem;
use store::block::BlockItem;
use store::size::{item_size, write_units};
use tokio::time::Instant;

use crate::support::{Fixture, event, now};

pub(crate) const BLOCKS: (&str, &str) = ("BLOCKS", "on");
pub(crate) const SOURCE: (&str, &str) =
    ("SOURCE_QUEUE_URL", "http://127.0.0.1:1/000000000000/ingest");

pub(crate) fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

pub(crate) fn rng() -> StdRng {
    StdRng::seed_from_u64(34)
}

/// 2026-06-22T02:00:00Z and after: within the events' clock (`now()` is 04:00).
const T: i64 = 1_782_093_600_000;

/// One message of `device`'s readings, `n` of them `step_ms` apart from `T + from_ms`,
/// with the demo's metrics (numbers as a device sends them) and a tag.
pub(crate) fn message(device: &str, n: usize, from_ms: i64, step_ms: i64) -> serde_json::Value {
    let readings: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            serde_json::json!({
                "device_id": device,
                "event_id": format!("e-{i:04}"),
                "ts": T + from_ms + i as i64 * step_ms,
                "metrics": {
                    "temperature": 20.0 + (i % 17) as f64 * 0.125,
                    "humidity": 40.5 + (i % 5) as f64,
                    "battery": 3.7,
                },
                "tags": {"site": "lab-1"},
            })
        })
        .collect();
    serde_json::json!({ "readings": readings })
}

pub(crate) fn batch(bodies: &[serde_json::Value]) -> SqsEvent {
    let records: Vec<serde_json::Value> = bodies
        .iter()
        .enumerate()
        .map(|(i, body)| {
            serde_json::json!({
                "messageId": format!("m-{i:03}"),
                "body": body.to_string(),
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": (T + 7_000_000).to_string(),
                    "SenderId": "AIDAEXAMPLEDEVICE",
                },
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({ "Records": records })).expect("an SQS event")
}

/// Every reading the table holds, expanded from its blocks, by identity, with the key
/// of the item holding it; panics on a reading held twice.
pub(crate) fn stored(
    items: &BTreeMap<ItemKey, store::batch::Item>,
) -> BTreeMap<(String, String), ReadingItem> {
    let mut out = BTreeMap::new();
    for (key, item) in items {
        let readings = if is_block_sk(&key.sk) {
            BlockItem::from_item(item.clone())
                .and_then(|b| b.readings())
                .expect("a valid block")
        } else {
            vec![ReadingItem::from_item(item.clone()).expect("a reading")]
        };
        for r in readings {
            let id = (r.ts.clone(), r.event_id.clone());
            assert!(out.insert(id, r).is_none(), "a reading stored twice");
        }
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_message_of_fifty_readings_is_one_block_of_two_write_units_holding_every_reading_as_sent()
{
    let fx = Fixture::new();
    let body = message("sensor-7", 50, 0, 1_000);
    let report = fx
        .service(&[BLOCKS])
        .process(
            &batch(std::slice::from_ref(&body)),
            now(),
            deadline(),
            &mut rng(),
        )
        .await;
    assert_eq!(report.messages[0].fate, Fate::Written { readings: 50 });
    assert_eq!(report.readings_written, 50);
    assert_eq!(report.writes.written, 1, "one item");
    let items = fx.table.items();
    let (key, item) = items.iter().next().expect("one item");
    assert!(is_block_sk(&key.sk), "{key:?}");
    assert!(
        key.sk
            .starts_with("sensor-7#b#2026-06-22T02:00:00.000Z#e-0000#")
    );
    let units = write_units(item_size(item));
    assert!(units <= 2, "{units} write units for 50 readings");
    // Every reading as sent: the same numbers, bit for bit, and tags.
    let readings = stored(&items);
    assert_eq!(readings.len(), 50);
    let sent = body["readings"].as_array().expect("readings");
    for (r, s) in readings.values().zip(sent) {
        assert_eq!(r.ts_ms, s["ts"].as_i64().expect("ms"));
        assert_eq!(r.event_id, s["event_id"].as_str().expect("id"));
        for (name, value) in s["metrics"].as_object().expect("metrics") {
            let sent = store::Decimal::parse(&value.to_string()).expect("a number");
            assert_eq!(r.metrics[name], sent);
        }
        assert_eq!(r.tags["site"], "lab-1");
    }
}

#[tokio::test(start_paused = true)]
async fn a_message_of_one_reading_is_todays_item_byte_for_byte() {
    let (plain, blocks) = (Fixture::new(), Fixture::new());
    // Every message of these holds one reading (sqs-batch.json has one of two).
    for name in ["sqs-single.json", "sqs-mixed-bad.json"] {
        plain
            .service(&[])
            .handle(&event(name), now(), deadline(), &mut rng())
            .await
            .expect("ok");
        blocks
            .service(&[BLOCKS])
            .handle(&event(name), now(), deadline(), &mut rng())
            .await
            .expect("ok");
    }
    assert!(!plain.table.items().is_empty());
    assert_eq!(blocks.table.items(), plain.table.items());
}

#[tokio::test(start_paused = true)]
async fn a_redelivered_message_rebuilds_the_same_blocks_and_overwrites_them() {
    let fx = Fixture::new();
    // Three minutes of one device, and the same readings again in another order (a
    // publisher's retry), in two messages of one batch and again in a second batch.
    let body = message("sensor-7", 180, 0, 1_000);
    let mut reversed = body.clone();
    reversed["readings"]
        .as_array_mut()
        .expect("readings")
        .reverse();
    fx.service(&[BLOCKS])
        .handle(
            &batch(std::slice::from_ref(&body)),
            now(),
            deadline(),
            &mut rng(),
        )
        .await
        .expect("ok");
    let first = fx.table.items();
    assert_eq!(first.len(), 3, "a block a minute");
    fx.service(&[BLOCKS])
        .handle(&batch(&[reversed, body]), now(), deadline(), &mut rng())
        .await
        .expect("ok");
    assert_eq!(fx.table.items(), first);
    assert_eq!(stored(&first).len(), 180);
}

/// `ev` written with the block of the 03:00 bucket's key throttled for good (and no
/// fan-out to raise), the source queue configured so a split message's rest is
/// requeued: the fixture and the report. The key is found by a first run of `ev`.
pub(crate) async fn with_the_three_o_clock_block_throttled(ev: &SqsEvent) -> (Fixture, Report) {
    let probe = Fixture::new();
    probe
        .service(&[BLOCKS])
        .handle(ev, now(), deadline(), &mut rng())
        .await
        .expect("ok");
    let items = probe.table.items();
    assert_eq!(items.len(), 2, "a block of each bucket: {items:?}");
    let three_o_clock = items
        .keys()
        .find(|k| k.sk.contains("T03:00:00"))
        .map(|k| k.pk.clone())
        .expect("the second bucket's block");
    let fx = Fixture::new();
    fx.table.throttle_pk(three_o_clock);
    let report = fx
        .service(&[BLOCKS, SOURCE, ("FANOUT_MAX", "1")])
        .process(ev, now(), deadline(), &mut rng())
        .await;
    (fx, report)
}

/// The readings of a requeued copy.
pub(crate) fn requeued(copy: &ingest::Requeue) -> Vec<store::Reading> {
    let limits = ingest::Limits {
        now: now(),
        max_future: Duration::from_secs(300),
        retention: Duration::from_secs(30 * 86_400),
        max_readings: 500,
    };
    ingest::parse_body(&copy.body, &limits).expect("a valid body")
}

#[tokio::test(start_paused = true)]
async fn a_partly_written_message_requeues_only_the_readings_of_its_unwritten_blocks() {
    // Ten readings before 03:00 and ten after: two blocks under two buckets' keys.
    let body = message("sensor-7", 20, 3_600_000 - 10_000, 1_000);
    let (fx, report) = with_the_three_o_clock_block_throttled(&batch(&[body])).await;
    assert!(
        matches!(
            &report.messages[0].fate,
            Fate::Split {
                written: 10,
                requeued: 10,
                ..
            }
        ),
        "{report:?}"
    );
    let copies = fx.dlq.copies();
    assert_eq!(copies.len(), 1);
    let requeued = requeued(&copies[0]);
    assert_eq!(requeued.len(), 10);
    assert!(
        requeued
            .iter()
            .all(|r| r.ts.to_rfc3339().starts_with("2026-06-22T03"))
    );
    let written = stored(&fx.table.items());
    assert_eq!(written.len(), 10);
    assert!(
        written
            .keys()
            .all(|(ts, _)| ts.starts_with("2026-06-22T02"))
    );
}

#[tokio::test(start_paused = true)]
async fn a_raised_device_keys_each_block_by_its_first_member_and_keeps_its_members() {
    let fx = Fixture::new();
    let mut meta = ShardMeta::initial(now());
    meta.number_of_shards = 8;
    meta.shard_history = meta.shard_history.raised_now(8, now(), 1).expect("raised");
    fx.shards.put_entity("sensor-7", meta);
    // Eight minutes from 03:50, within the re-key horizon of the raise at 04:00.
    let body = message("sensor-7", 480, 6_600_000, 1_000);
    let report = fx
        .service(&[BLOCKS])
        .process(&batch(&[body]), now(), deadline(), &mut rng())
        .await;
    assert_eq!(report.messages[0].fate, Fate::Written { readings: 480 });
    let items = fx.table.items();
    assert_eq!(items.len(), 8, "a block a minute");
    let pks: std::collections::BTreeSet<&str> = items.keys().map(|k| k.pk.as_str()).collect();
    assert!(pks.len() > 1, "blocks spread over the raised keys: {pks:?}");
    assert_eq!(stored(&items).len(), 480);
}

#[tokio::test(start_paused = true)]
async fn a_bad_id_anywhere_in_a_message_of_blocks_refuses_it_naming_the_reading() {
    let fx = Fixture::new();
    let mut body = message("sensor-7", 30, 0, 1_000);
    body["readings"][17]["event_id"] = serde_json::json!("bad#id");
    let report = fx
        .service(&[BLOCKS])
        .process(&batch(&[body]), now(), deadline(), &mut rng())
        .await;
    let Fate::DeadLettered { reason } = &report.messages[0].fate else {
        panic!("{report:?}");
    };
    assert_eq!(reason.field, "readings[17].event_id", "{reason:?}");
    assert!(fx.table.items().is_empty());
}

/// The raise speaks write units, and blocks take few: 200 readings of one device in
/// one window, 50 to a message, take 200 write units a second as items of their own
/// (over the 100 a key is raised ahead at) but 7 as blocks (the four messages packed
/// together, a block a minute of readings), so the device stays on one key; the items
/// written agree.
#[tokio::test(start_paused = true)]
async fn a_device_writing_blocks_is_measured_by_the_write_units_of_its_blocks() {
    for (settings, k, units) in [(vec![("BLOCKS", "off")], 2, 200), (vec![BLOCKS], 1, 7)] {
        let bodies: Vec<serde_json::Value> = (0..4)
            .map(|m| {
                let mut body = message("sensor-7", 50, 6_600_000 + m * 50_000, 1_000);
                // Distinct ids across the messages.
                for r in body["readings"].as_array_mut().expect("readings") {
                    let id = format!("{m}{}", r["event_id"].as_str().expect("id"));
                    r["event_id"] = id.into();
                }
                body
            })
            .collect();
        let mut ev = batch(&bodies);
        for record in &mut ev.records {
            record.attributes.insert(
                "SentTimestamp".into(),
                (now().as_millis() - 1_000).to_string(),
            );
        }
        let fx = Fixture::new();
        fx.service(&settings)
            .process(&ev, now(), deadline(), &mut rng())
            .await;
        let written: usize = fx
            .table
            .items()
            .values()
            .map(|item| write_units(item_size(item)))
            .sum();
        assert_eq!(written, units, "{settings:?}");
        let fanout = fx
            .shards
            .entity("sensor-7")
            .map_or(1, |m| m.number_of_shards);
        assert_eq!(fanout, k, "{settings:?}");
    }
}
