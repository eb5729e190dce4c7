//! The ingest writing slabs (`SLABS=on`, docs/design-slabs.md), against the in-memory
//! fakes: devices whose share of a batch fills no write unit are written into slabs of
//! many devices, at a fraction of a write unit a reading; a device that fills a block,
//! or a reading too old for a slab, keeps its own items; a slab whose answer is lost is
//! written again whole; a hot slab group is raised and spread like a hot device; a
//! compaction lagging past the fallback writes no slab, nor does one that has not
//! started.

use std::collections::BTreeMap;

use aws_lambda_events::event::sqs::SqsEvent;
use ingest::{Fate, Report};
use sharding::key::ItemKey;
use sharding::slab::{SlabLayout, group_entity, slab_pk};
use sharding::time::Timestamp;
use store::ReadingItem;
use store::StoreError;
use store::batch::Item;
use store::memory::MemoryRollups;
use store::rollup::compaction::{Compacted, advance_compacted};
use store::size::{item_size, write_units};

use crate::blocks::{deadline, rng};
use crate::support::{Fixture, Service, now};

const SLABS: [(&str, &str); 2] = [("BLOCKS", "on"), ("SLABS", "on")];

/// A reading's identity: (device, ts ms, event id).
type Id = (String, i64, String);

/// A service writing slabs over `fx`, its compaction progress in `rollups`.
fn service(fx: &Fixture, rollups: &MemoryRollups, extra: &[(&str, &str)]) -> Service {
    let mut vars = SLABS.to_vec();
    vars.extend_from_slice(extra);
    fx.service(&vars).with_rollups(rollups.clone())
}

/// Rollups holding a compaction progress an hour before `now()`: the sealer has run,
/// as the ingest writes no slab before it has.
async fn progressed() -> MemoryRollups {
    let rollups = MemoryRollups::new();
    let start = at(-3_600).as_millis();
    let progress = Compacted {
        from_ms: start,
        to_ms: start,
    };
    advance_compacted(&rollups, &progress)
        .await
        .expect("stored");
    rollups
}

/// `now()` moved by `secs`.
fn at(secs: i64) -> Timestamp {
    Timestamp::from_millis(now().as_millis() + secs * 1_000).expect("in range")
}

/// One message a device of `devices`, each of one reading stamped `age_s` before
/// `now()`, the queue taking them `step_ms` apart.
fn one_reading_each(devices: &[String], age_s: i64, step_ms: i64) -> SqsEvent {
    let ts = now().as_millis() - age_s * 1_000;
    let sent0 = now().as_millis() - 2_000;
    let records: Vec<serde_json::Value> = devices
        .iter()
        .enumerate()
        .map(|(i, device)| {
            serde_json::json!({
                "messageId": format!("m-{i:05}"),
                "body": serde_json::json!({
                    "device_id": device,
                    "event_id": "e-1",
                    "ts": ts,
                    "metrics": {"kwh": 1_234.5 + i as f64, "v": 229.8},
                    "tags": {"site": "grid-7"},
                }).to_string(),
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": (sent0 + i as i64 * step_ms).to_string(),
                    "SenderId": "AIDAEXAMPLEDEVICE",
                },
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({ "Records": records })).expect("an SQS event")
}

fn meters(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("meter-{i:05}")).collect()
}

/// The table's slab items, by key.
fn slab_items(fx: &Fixture) -> BTreeMap<ItemKey, Item> {
    fx.table
        .items()
        .into_iter()
        .filter(|(_, item)| store::slab::is_slab(item))
        .collect()
}

/// Every reading the slabs hold, by identity, each copy.
fn in_slabs(fx: &Fixture) -> BTreeMap<Id, Vec<ReadingItem>> {
    let mut held: BTreeMap<Id, Vec<ReadingItem>> = BTreeMap::new();
    for item in slab_items(fx).into_values() {
        for r in store::slab::decode(item).expect("a valid slab") {
            let id = (r.device_id.clone(), r.ts_ms, r.event_id.clone());
            held.entry(id).or_default().push(r);
        }
    }
    held
}

fn all_written(report: &Report) {
    assert!(
        report
            .messages
            .iter()
            .all(|m| matches!(m.fate, Fate::Written { .. })),
        "{report:?}"
    );
}

/// A thousand devices of one reading a message cost a thousand write
/// units as items of their own; in slabs, a small fraction of one a reading.
#[tokio::test(start_paused = true)]
async fn one_reading_devices_are_written_into_slabs_at_a_fraction_of_a_write_unit() {
    let fx = Fixture::new();
    let rollups = progressed().await;
    let devices = meters(1_000);
    let report = service(&fx, &rollups, &[("BATCH_SIZE", "1000")])
        .process(
            &one_reading_each(&devices, 5, 1),
            now(),
            deadline(),
            &mut rng(),
        )
        .await;
    all_written(&report);
    assert_eq!(report.readings_written, 1_000);
    let items = fx.table.items();
    assert_eq!(slab_items(&fx).len(), items.len(), "every item is a slab");
    let units: usize = items.values().map(|i| write_units(item_size(i))).sum();
    let per_reading = units as f64 / 1_000.0;
    eprintln!(
        "{} slabs, {units} write units: {per_reading} a reading",
        items.len()
    );
    assert!(per_reading <= 0.15, "{per_reading} write units a reading");
    // Every reading read back once, as sent, under its group's slab of its window.
    let held = in_slabs(&fx);
    assert_eq!(held.len(), 1_000);
    let layout = SlabLayout::default();
    for (i, device) in devices.iter().enumerate() {
        let id = (device.clone(), at(-5).as_millis(), "e-1".to_owned());
        let copies = &held[&id];
        assert_eq!(copies.len(), 1, "{id:?} held once");
        assert_eq!(
            copies[0].metrics["kwh"].to_string(),
            format!("{}", 1_234.5 + i as f64)
        );
        let window = layout.window(at(-5));
        assert!(copies[0].pk == slab_pk(layout.group(device), 0, window));
    }
}

/// A device whose share of the batch fills a block keeps its block; a reading older
/// than `SLAB_ACCEPT_SECS` goes to its device's own item; the rest go to slabs.
#[tokio::test(start_paused = true)]
async fn a_device_filling_a_block_and_a_reading_too_old_keep_their_own_items() {
    let fx = Fixture::new();
    let rollups = progressed().await;
    let mut ev = one_reading_each(&meters(20), 5, 10);
    // meter-00000's reading is 31 s old: past the 30-s acceptance.
    let old = one_reading_each(&meters(1), 31, 10);
    ev.records[0].body.clone_from(&old.records[0].body);
    // A busy device: 120 readings of the last 24 s in one message, blocks of over a
    // write unit.
    let busy: Vec<serde_json::Value> = (0..120)
        .map(|i| {
            serde_json::json!({
                "device_id": "busy-1",
                "event_id": format!("b-{i:03}"),
                "ts": now().as_millis() - 24_000 + i * 200,
                "metrics": {"kwh": 20.5 + i as f64, "v": 230.1},
                "tags": {"phase": format!("p{}", i % 3)},
            })
        })
        .collect();
    let mut busy_record = ev.records[1].clone();
    busy_record.message_id = Some("m-busy".to_owned());
    busy_record.body = Some(serde_json::json!({ "readings": busy }).to_string());
    ev.records.push(busy_record);
    let report = service(&fx, &rollups, &[])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    all_written(&report);
    let held = in_slabs(&fx);
    assert_eq!(held.len(), 19, "{:?}", held.keys());
    assert!(
        held.keys()
            .all(|(d, _, _)| d.starts_with("meter-") && d != "meter-00000")
    );
    let own: Vec<ItemKey> = fx
        .table
        .items()
        .into_iter()
        .filter(|(_, item)| !store::slab::is_slab(item))
        .map(|(key, _)| key)
        .collect();
    assert!(
        own.iter().any(|k| k.sk.starts_with("meter-00000#")),
        "{own:?}"
    );
    let busy: Vec<&ItemKey> = own.iter().filter(|k| k.sk.starts_with("busy-1#")).collect();
    assert!(!busy.is_empty());
    assert!(
        busy.iter().all(|k| sharding::block::is_block_sk(&k.sk)),
        "{busy:?}"
    );
    assert_eq!(own.len(), 1 + busy.len(), "{own:?}");
}

/// Scenario 64: a batch whose slab write DynamoDB applied but whose answer was lost is
/// redelivered and written again: the same members make the same slab, which the write
/// overwrites; re-formed with other messages, a reading's second copy is another
/// slab's, read once.
#[tokio::test(start_paused = true)]
async fn s64_a_slab_whose_answer_was_lost_is_written_again_whole_and_read_once() {
    let fx = Fixture::new();
    let rollups = progressed().await;
    let devices = meters(40);
    let ev = one_reading_each(&devices, 5, 10);
    fx.table
        .lose_next_answers([StoreError::Transient("connection reset".to_owned())]);
    let first = service(&fx, &rollups, &[("RETRY_MAX_ATTEMPTS", "1")])
        .process(&ev, now(), deadline(), &mut rng())
        .await;
    assert!(
        first
            .messages
            .iter()
            .all(|m| matches!(m.fate, Fate::Reported { .. })),
        "{first:?}"
    );
    let applied = fx.table.items();
    assert_eq!(fx.table.calls().len(), 1);
    assert_eq!(in_slabs(&fx).len(), 40, "the write was applied");
    // Redelivered as it was: the same slabs, byte for byte.
    let again = service(&fx, &rollups, &[])
        .process(&ev, at(1), deadline(), &mut rng())
        .await;
    all_written(&again);
    assert_eq!(fx.table.items(), applied);
    assert!(in_slabs(&fx).values().all(|copies| copies.len() == 1));
    // Redelivered in a batch with other messages: another slab holds the copies.
    let mut reformed = one_reading_each(&meters(60), 5, 10);
    reformed.records.drain(..20);
    let third = service(&fx, &rollups, &[])
        .process(&reformed, at(2), deadline(), &mut rng())
        .await;
    all_written(&third);
    // Each of meters 20 to 39 is held by the same slab again (a group of the same
    // members) or by two, as copies of one reading; every other reading once.
    let held = in_slabs(&fx);
    assert_eq!(held.len(), 60, "each reading stored");
    let copies: Vec<&Id> = held
        .iter()
        .filter(|(_, c)| c.len() > 1)
        .map(|(id, _)| id)
        .collect();
    assert!(!copies.is_empty() && copies.len() <= 20, "{copies:?}");
    assert!(
        copies
            .iter()
            .all(|(d, _, _)| ("meter-00020".."meter-00040").contains(&d.as_str()))
    );
    for copies in held.values() {
        assert!(copies.len() <= 2);
        assert!(copies.windows(2).all(|w| w[0].metrics == w[1].metrics));
    }
}

/// A batch that sends little a group: the groups whose slab of the window would fill
/// under half an item write one shared slab of them all, in the window's shared
/// partition, so a few write units carry every thin group's readings rather than one
/// each; a group whose share fills half an item keeps its own slabs. A layout that
/// shares no slab (`SLAB_SHARED=off`) writes a slab a group.
#[tokio::test(start_paused = true)]
async fn thin_groups_of_a_window_share_a_slab_and_a_full_group_keeps_its_own() {
    let layout = SlabLayout::default();
    // 40 meters over every group (a few readings a group), 100 devices of group 0.
    let mut devices = meters(40);
    devices.extend(
        (0..)
            .map(|i| format!("zero-{i:05}"))
            .filter(|d| layout.group(d) == 0)
            .take(100),
    );
    let ev = one_reading_each(&devices, 5, 1);
    let written = |vars: &[(&str, &str)]| {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let ev = ev.clone();
        async move {
            let fx = Fixture::new();
            let rollups = progressed().await;
            let vars: Vec<(&str, &str)> =
                vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let report = service(&fx, &rollups, &vars)
                .process(&ev, now(), deadline(), &mut rng())
                .await;
            all_written(&report);
            fx
        }
    };
    let fx = written(&[]).await;
    let held = in_slabs(&fx);
    assert_eq!(held.len(), 140, "each reading stored");
    let thin: std::collections::BTreeSet<u32> = meters(40)
        .iter()
        .map(|d| layout.group(d))
        .filter(|&g| g != 0)
        .collect();
    assert!(thin.len() >= 2, "{thin:?}");
    for (id, copies) in &held {
        assert_eq!(copies.len(), 1, "{id:?} held once");
        let group = layout.group(&id.0);
        let pk = &copies[0].pk;
        if group == 0 {
            assert!(pk.starts_with("s#0#"), "{id:?} of the full group in {pk}");
        } else {
            assert!(pk.starts_with("s#*#"), "{id:?} of a thin group in {pk}");
        }
    }
    let shared: Vec<ItemKey> = slab_items(&fx)
        .into_keys()
        .filter(|k| k.pk.starts_with("s#*#"))
        .collect();
    assert!(
        !shared.is_empty() && shared.len() < thin.len(),
        "{} shared slabs for {} thin groups",
        shared.len(),
        thin.len()
    );
    // The same batch again makes the same slabs.
    assert_eq!(slab_items(&written(&[]).await), slab_items(&fx));
    // Without shared slabs, a slab a group (and more of them).
    let alone = written(&[("SLAB_SHARED", "off")]).await;
    let held = in_slabs(&alone);
    assert_eq!(held.len(), 140);
    for (id, copies) in &held {
        let group = layout.group(&id.0);
        assert!(copies[0].pk.starts_with(&format!("s#{group}#")), "{id:?}");
    }
    assert!(slab_items(&alone).len() > slab_items(&fx).len());
}

/// Devices of slab group 0.
fn group_zero(n: usize) -> Vec<String> {
    let layout = SlabLayout::default();
    (0..)
        .map(|i| format!("meter-{i:05}"))
        .filter(|d| layout.group(d) == 0)
        .take(n)
        .collect()
}

/// `ev` processed as one full batch (its size the mapping's batch size, so its rate is
/// measured over its span): every message written, none throttled.
async fn burst(fx: &Fixture, rollups: &MemoryRollups, ev: &SqsEvent) -> Report {
    let batch = ev.records.len().to_string();
    let report = service(fx, rollups, &[("BATCH_SIZE", batch.as_str())])
        .process(ev, now(), deadline(), &mut rng())
        .await;
    all_written(&report);
    assert!(
        report.writes.throttles.is_empty(),
        "{:?}",
        report.writes.throttles
    );
    report
}

/// Scenario 65: a burst to one slab group beyond a key's 1,000 write units a second
/// raises the group's fan-out before it is keyed, as a hot device's is, and spreads its
/// slabs over the raised keys: none throttled, each key far under its limit.
#[tokio::test(start_paused = true)]
async fn s65_a_hot_slab_group_is_raised_and_spread_over_its_fanout_keys() {
    let fx = Fixture::new();
    let rollups = progressed().await;
    // 3,000 one-reading messages of group 0, a full batch the queue took in 10 ms
    // (packed, a slab of them takes about 10 bytes a reading).
    let mut ev = one_reading_each(&group_zero(3_000), 5, 0);
    for (i, record) in ev.records.iter_mut().enumerate() {
        let sent = now().as_millis() - 2_000 + (i as i64 * 10) / 3_000;
        record
            .attributes
            .insert("SentTimestamp".to_owned(), sent.to_string());
    }
    let report = burst(&fx, &rollups, &ev).await;
    let items = slab_items(&fx);
    let units: usize = items.values().map(|i| write_units(item_size(i))).sum();
    let rate = units as f64 / 0.01;
    assert!(rate > 1_000.0, "{units} write units in 10 ms: {rate}/s");
    let meta = fx
        .shards
        .entity(&group_entity(0))
        .expect("the group raised");
    let k = meta.number_of_shards;
    assert!(
        k >= (rate / 100.0).floor() as u32,
        "k {k} for {rate} write units/s"
    );
    assert_eq!(report.fanout_raises, 1);
    let mut by_key: BTreeMap<String, usize> = BTreeMap::new();
    for (key, item) in &items {
        *by_key.entry(key.pk.clone()).or_default() += write_units(item_size(item));
    }
    let window = SlabLayout::default().window(at(-5));
    assert!(by_key.len() > 1, "{by_key:?}");
    assert!(
        by_key
            .keys()
            .all(|pk| (0..k).any(|j| *pk == slab_pk(0, j, window)))
    );
    let busiest = by_key.values().max().copied().unwrap_or(0) as f64 / 0.01;
    eprintln!("k {k} for {rate} write units/s; the busiest key {busiest}/s: {by_key:?}");
    assert!(
        busiest < 1_000.0,
        "the busiest key takes {busiest} write units/s"
    );
    assert_eq!(in_slabs(&fx).len(), 3_000);
}

/// Scenario 65, of the shared slabs: a burst of thin groups' readings beyond a key's
/// 1,000 write units a second raises the shared partition's fan-out (`s#*`) as a hot
/// group's is, and its slabs take the raised keys.
#[tokio::test(start_paused = true)]
async fn s65_a_hot_shared_partition_is_raised_as_a_hot_group_is() {
    let fx = Fixture::new();
    let rollups = progressed().await;
    // 48 one-reading messages over every group (each group's slab far under half an
    // item), all sent in the same millisecond: a full batch, cut by its size.
    let ev = one_reading_each(&meters(48), 5, 0);
    let report = burst(&fx, &rollups, &ev).await;
    let items = slab_items(&fx);
    assert!(
        items.keys().all(|k| k.pk.starts_with("s#*")),
        "{:?}",
        items.keys()
    );
    let meta = fx
        .shards
        .entity(sharding::slab::SHARED_ENTITY)
        .expect("the shared partition raised");
    assert!(meta.number_of_shards > 1, "{meta:?}");
    assert_eq!(report.fanout_raises, 1);
    let window = SlabLayout::default().window(at(-5));
    let k = meta.number_of_shards;
    assert!(
        items
            .keys()
            .all(|key| (0..k).any(|j| key.pk == sharding::slab::SlabOwner::Shared.pk(j, window)))
    );
    assert_eq!(in_slabs(&fx).len(), 48);
}

/// Scenario 63: with compaction lagging past `SlabLayout::fallback_lag` (24 h at the
/// defaults) the ingest writes each device's own items; the progress is read at most
/// once a minute, and slabs come back once compaction catches up.
#[tokio::test(start_paused = true)]
async fn s63_a_compaction_lagging_past_the_fallback_writes_per_device_items_only() {
    let fx = Fixture::new();
    let rollups = MemoryRollups::new();
    let progress = |to: Timestamp| Compacted {
        from_ms: at(-200_000).as_millis(),
        to_ms: to.as_millis(),
    };
    advance_compacted(&rollups, &progress(at(-24 * 3_600)))
        .await
        .expect("stored");
    let ingest = service(&fx, &rollups, &[]);
    let report = ingest
        .process(
            &one_reading_each(&meters(30), 5, 10),
            now(),
            deadline(),
            &mut rng(),
        )
        .await;
    all_written(&report);
    assert!(slab_items(&fx).is_empty(), "no slab when lagging");
    assert_eq!(fx.table.items().len(), 30, "an item a device");
    // Compaction catches up; a container reads it again only after a minute.
    advance_compacted(&rollups, &progress(at(-3_600)))
        .await
        .expect("stored");
    let reads = rollups.reads();
    ingest
        .process(
            &one_reading_each(&meters(30), -30, 10),
            at(30),
            deadline(),
            &mut rng(),
        )
        .await;
    assert!(
        slab_items(&fx).is_empty(),
        "the read of a minute ago stands"
    );
    assert_eq!(rollups.reads(), reads);
    ingest
        .process(
            &one_reading_each(&meters(30), -55, 10),
            at(61),
            deadline(),
            &mut rng(),
        )
        .await;
    assert_eq!(in_slabs(&fx).len(), 30, "slabs again");
}

/// A slab's readings are at most `SLAB_ACCEPT_SECS` (30 s) old, so under the default
/// horizon they are never late: readings of the hour's last seconds written after it
/// ended leave no late mark.
#[tokio::test(start_paused = true)]
async fn slab_readings_of_an_hour_just_ended_are_not_late() {
    let fx = Fixture::new();
    let rollups = progressed().await;
    // 04:00:00 is the hour's end: readings of 03:59:45 written at 04:00:14.
    let report = service(&fx, &rollups, &[])
        .process(
            &one_reading_each(&meters(30), 15, 10),
            at(14),
            deadline(),
            &mut rng(),
        )
        .await;
    all_written(&report);
    assert_eq!(in_slabs(&fx).len(), 30);
    assert_eq!(report.late_marks, 0);
    assert!(rollups.items().keys().all(|k| !k.pk.starts_with("late#")));
}

/// Before the sealer's first compaction has set a progress, no slab is written (it
/// would precede the progress, compacted by no one): each device keeps its own item.
/// A read finding none stands only seconds, so slabs start soon after the first run.
#[tokio::test(start_paused = true)]
async fn no_slab_is_written_before_a_compaction_progress_exists() {
    let fx = Fixture::new();
    let rollups = MemoryRollups::new();
    let ingest = service(&fx, &rollups, &[]);
    let report = ingest
        .process(
            &one_reading_each(&meters(30), 5, 10),
            now(),
            deadline(),
            &mut rng(),
        )
        .await;
    all_written(&report);
    assert!(slab_items(&fx).is_empty(), "no slab without a progress");
    assert_eq!(fx.table.items().len(), 30, "an item a device");
    // The sealer's first run sets the progress; seconds later, slabs.
    let start = at(-60).as_millis();
    let first = Compacted {
        from_ms: start,
        to_ms: start,
    };
    advance_compacted(&rollups, &first).await.expect("stored");
    ingest
        .process(
            &one_reading_each(&meters(30), -5, 10),
            at(10),
            deadline(),
            &mut rng(),
        )
        .await;
    assert_eq!(in_slabs(&fx).len(), 30, "slabs once a progress exists");
}
