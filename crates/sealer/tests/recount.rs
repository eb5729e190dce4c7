//! The property of scenarios 39 to 41 and 58: for any sequence of writes, re-sends of
//! an identity with new values, late readings (each with its mark, as the ingest
//! writes them once the hour may be sealed), runs killed at any write and runs two at
//! once, the derived items a last run leaves are what the readings say: each
//! device-hour, summary, fleet part and directory entry equals a recount of the
//! readings as they stand (the last value written of each identity), and the bodies
//! equal one clean run's.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use proptest::prelude::*;
use sealer::{Sealer, Settings};
use sharding::time::Timestamp;
use sharding::written::WriteOrder;
use store::item::Reading;
use store::memory::{MemoryReadings, MemoryRollups, MemoryShards};
use store::rollup::RollupKey;
use store::rollup::{
    DeviceHour, DirEntry, FleetPart, HOUR_MS, MINUTE_MS, RollupTable, keys, late_mark, part_of,
};

use crate::common::{BASE_MS, hourly, load_readings, shard_table, table_history, ts};
use crate::sealer::KilledAfter;

const HOUR: i64 = BASE_MS + HOUR_MS;
const DEVICES: [&str; 3] = ["d-0", "d-1", "gw-7"];

#[derive(Debug, Clone)]
enum Op {
    /// A reading of `DEVICES[device]`, identity `slot`, with `value` (and tag): a
    /// re-send when the slot was written before.
    Write { device: usize, slot: u8, value: i8 },
    /// A run, killed after `killed_after` of its writes if set.
    Run { killed_after: Option<u8> },
    /// Two runs at once.
    TwoAtOnce,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..DEVICES.len(), 0u8..12, -3i8..4).prop_map(|(device, slot, value)| Op::Write { device, slot, value }),
        2 => proptest::option::of(0u8..40).prop_map(|killed_after| Op::Run { killed_after }),
        1 => Just(Op::TwoAtOnce),
    ]
}

fn now() -> Timestamp {
    Timestamp::from_millis(HOUR + HOUR_MS + 12 * MINUTE_MS).unwrap()
}

fn reading(device: usize, slot: u8, value: i8) -> Reading {
    Reading {
        device_id: DEVICES[device].to_owned(),
        event_id: format!("e{slot:02}"),
        ts: ts(HOUR + i64::from(slot) * 4 * MINUTE_MS + 7),
        metrics: BTreeMap::from([
            (
                "t".to_owned(),
                store::Decimal::parse(&format!("{value}.5")).unwrap(),
            ),
            (
                format!("m{}", value.rem_euclid(3)),
                store::Decimal::parse("1").unwrap(),
            ),
        ]),
        tags: BTreeMap::from([("v".to_owned(), value.to_string())]),
        written: WriteOrder::OLDEST,
    }
}

fn sealer<R: RollupTable>(
    table: &MemoryReadings,
    shards: Arc<MemoryShards>,
    rollups: R,
) -> Sealer<&MemoryReadings, Arc<MemoryShards>, R> {
    let settings = Settings {
        concurrency: 3,
        ..Settings::default()
    };
    Sealer::new(table, shards, rollups, settings)
}

/// What the readings say: each device's hour, recounted.
fn recount(readings: &BTreeMap<(usize, u8), Reading>) -> BTreeMap<String, DeviceHour> {
    let mut out: BTreeMap<String, DeviceHour> = BTreeMap::new();
    for r in readings.values() {
        out.entry(r.device_id.clone())
            .or_insert_with(|| DeviceHour::new(r.device_id.clone(), HOUR))
            .add(r.ts.as_millis(), &r.event_id, &r.metrics, &r.tags);
    }
    out
}

/// Applies `ops` to the tables; returns the readings as they stand.
async fn play(
    ops: Vec<Op>,
    table: &MemoryReadings,
    shards: &Arc<MemoryShards>,
    rollups: &MemoryRollups,
) -> BTreeMap<(usize, u8), Reading> {
    let mut stored: BTreeMap<(usize, u8), Reading> = BTreeMap::new();
    let mut nonce = 0;
    for op in ops {
        match op {
            Op::Write {
                device,
                slot,
                value,
            } => {
                // Each write later than the one before, as its message reached the queue.
                nonce += 1;
                let r = Reading {
                    written: WriteOrder(i64::try_from(nonce).unwrap()),
                    ..reading(device, slot, value)
                };
                load_readings(table, shards, std::slice::from_ref(&r));
                stored.insert((device, slot), r);
                // The ingest marks a written reading whose hour may be sealed; here
                // every one, once a run may have sealed the hour.
                rollups
                    .put(&late_mark(DEVICES[device], HOUR, nonce))
                    .await
                    .unwrap();
            }
            Op::Run { killed_after: None } => {
                sealer(table, shards.clone(), rollups)
                    .run(now(), None)
                    .await
                    .unwrap();
            }
            Op::Run {
                killed_after: Some(after),
            } => {
                let killed = KilledAfter {
                    inner: rollups.clone(),
                    after: u64::from(after),
                    writes: AtomicU64::new(0),
                };
                // Killed or not, what it leaves is the next run's to finish.
                let _ = sealer(table, shards.clone(), &killed)
                    .run(now(), None)
                    .await;
            }
            Op::TwoAtOnce => {
                let (one, two) = (
                    sealer(table, shards.clone(), rollups),
                    sealer(table, shards.clone(), rollups),
                );
                let (a, b) = tokio::join!(one.run(now(), None), two.run(now(), None));
                a.unwrap();
                b.unwrap();
            }
        }
    }
    stored
}

fn check(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let shards = Arc::new(shard_table(table_history(vec![(0, hourly(4))]), []));
        let table = MemoryReadings::new(None);
        let rollups = MemoryRollups::new();
        let stored = play(ops, &table, &shards, &rollups).await;
        // The schedule's next two runs: the first seals the hour if none did, and the
        // marks of its readings written meanwhile stand until the second.
        for _ in 0..2 {
            sealer(&table, shards.clone(), &rollups)
                .run(now(), None)
                .await
                .unwrap();
        }
        let items = rollups.items();
        let want = recount(&stored);
        let mut fleet = FleetPart::default();
        let mut want_fleet = FleetPart::default();
        for (device, dh) in &want {
            let got: DeviceHour = items[&keys::device_hour(device, HOUR)].body().unwrap();
            prop_assert_eq!(&got, dh);
            let summary: DeviceHour = items[&keys::device_summary(device, HOUR)].body().unwrap();
            prop_assert_eq!(summary, dh.summary());
            let entry: DirEntry = items[&keys::directory_entry(device)].body().unwrap();
            let want_entry = DirEntry::of(dh);
            prop_assert_eq!(
                (entry.last_seen_ms, &entry.last_event, &entry.tags),
                (
                    want_entry.last_seen_ms,
                    &want_entry.last_event,
                    &want_entry.tags
                )
            );
            want_fleet.merge(&FleetPart::of(HOUR, part_of(device), [dh]));
        }
        for (RollupKey { pk, .. }, item) in &items {
            if *pk == keys::fleet_hour(HOUR) {
                fleet.merge(&item.body().unwrap());
            }
        }
        prop_assert_eq!(fleet, want_fleet);
        // No mark outlives the last run.
        prop_assert!(
            !items
                .keys()
                .any(|RollupKey { pk, .. }| pk.starts_with("late#")),
            "{:?}",
            items.keys()
        );
        // The bodies one clean run over the readings as they stand writes.
        let clean = MemoryRollups::new();
        sealer(&table, shards, &clean)
            .run(now(), None)
            .await
            .unwrap();
        let bodies = |items: BTreeMap<RollupKey, store::rollup::RollupItem>| -> BTreeMap<_, _> {
            items
                .into_iter()
                .filter(|(RollupKey { pk, .. }, _)| !pk.starts_with("late#"))
                .map(|(k, i)| (k, i.body))
                .collect()
        };
        let (mine, theirs) = (bodies(items), bodies(clean.items()));
        // A clean run's watermark starts at this hour; so does every run's here.
        prop_assert_eq!(mine, theirs);
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn the_sealed_answers_equal_a_recount_whatever_ran_and_in_what_order(ops in proptest::collection::vec(op(), 1..24)) {
        check(ops)?;
    }
}
