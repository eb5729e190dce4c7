//! `shardline seal` end to end: the built binary against a private stand-in rebuilds a
//! range of hours' derived items from the readings (each reading once, a redelivered
//! copy included), gives a lost rollups table its watermark, restores a lost
//! device-hour on a second run and leaves the rest as they were, and names bad flags.

use std::collections::BTreeMap;
use std::process::{Command, Output};
use std::str::FromStr as _;
use std::time::Duration;

use anyhow::Result;
use aws_sdk_dynamodb::types::AttributeValue;
use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::key::{ReadingRef, write_key};
use sharding::layout::Layout;
use sharding::time::Timestamp;
use stand_in::TestStack;
use store::ShardStore as _;
use store::Written;
use store::item::{Reading, ReadingItem};
use store::rollup::dynamo::DynamoRollups;
use store::rollup::{DeviceHour, DirEntry, FleetPart, HOUR_MS, RollupTable as _, keys, part_of};

const DEVICES: [&str; 3] = ["pump-1", "pump-2", "valve-9"];
/// Readings a device sends an hour, one every 5 minutes.
const PER_HOUR: i64 = 12;

fn shardline(args: &[&str], env_file: &std::path::Path) -> Result<Output> {
    Ok(Command::new(env!("CARGO_BIN_EXE_shardline"))
        .arg("seal")
        .args(args)
        .arg("--env-file")
        .arg(env_file)
        .output()?)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn reading(device: &str, hour: i64, i: i64) -> Reading {
    Reading {
        device_id: device.to_owned(),
        event_id: format!("{device}-{hour}-{i}"),
        ts: Timestamp::from_millis(hour + i * 300_000 + 7).expect("in range"),
        metrics: BTreeMap::from([(
            "temperature".to_owned(),
            store::Decimal::from_str(&format!("{}.25", 20 + i)).expect("a number"),
        )]),
        tags: BTreeMap::new(),
        written: store::WriteOrder::OLDEST,
    }
}

/// Stores [`PER_HOUR`] readings of each device in each of `hours`, the first of each
/// device-hour delivered twice.
async fn store_readings(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    layout: &TableHistory,
    hours: &[i64],
) -> Result<()> {
    for &hour in hours {
        for device in DEVICES {
            for i in 0..PER_HOUR {
                let r = reading(device, hour, i);
                let key = write_key(
                    &ReadingRef::new(&r.device_id, &r.event_id, r.ts),
                    layout,
                    &FanoutHistory::new(),
                    r.ts,
                )?
                .key;
                let item = ReadingItem::new(&r, key, Duration::from_secs(400 * 86_400));
                for _ in 0..if i == 0 { 2 } else { 1 } {
                    client
                        .put_item()
                        .table_name(table)
                        .set_item(Some(item.to_item()?))
                        .send()
                        .await?;
                }
            }
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuilds_hours_from_the_readings_and_again_after_a_loss() -> Result<()> {
    let stack = TestStack::start().await?;
    let dir = tempfile::tempdir()?;
    let env_file = dir.path().join("stack.env");
    stack.stack.write_env(&env_file)?;
    let client = aws_sdk_dynamodb::Client::new(&stack.sdk_config().await);
    let layout = TableHistory::new(Layout::time_bucket(
        sharding::time::Bucket::Hour,
        std::num::NonZeroU32::new(4).expect("4 > 0"),
    ));
    let shards = store::dynamo::DynamoShards::new(&client, &stack.stack.shard_table_name);
    assert_eq!(shards.create_layout(&layout).await?, Written::Applied);

    // Two whole hours, sealable long ago: they ended more than a day before now.
    let now = store::clock::wall_clock()?.as_millis();
    let first = store::rollup::hour_of(now) - 30 * HOUR_MS;
    let hours = [first, first + HOUR_MS];
    store_readings(&client, &stack.stack.table_name, &layout, &hours).await?;

    let (from, to) = (first.to_string(), (first + 2 * HOUR_MS).to_string());
    let out = shardline(&["--from", &from, "--to", &to], &env_file)?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert_eq!(
        said.lines().count(),
        3,
        "a line an hour, then the watermark: {said}"
    );
    assert!(
        said.contains("36 readings, 3 device-hours written"),
        "{said}"
    );

    let rollups = DynamoRollups::new(client.clone(), &stack.stack.rollup_table_name);
    let watermark = sealer::read_watermark(&rollups)
        .await?
        .expect("a watermark");
    assert_eq!(
        (watermark.from_ms, watermark.end_ms),
        (first, first + 2 * HOUR_MS)
    );
    for &hour in &hours {
        for device in DEVICES {
            let store::rollup::RollupKey { pk, sk, .. } = keys::device_hour(device, hour);
            let item = rollups.get(&pk, &sk, true).await?.expect("a device-hour");
            let dh: DeviceHour = item.body()?;
            assert_eq!(
                dh.hour.readings, PER_HOUR as u64,
                "{device} at {hour}: each reading once"
            );
            let cell = &dh.hour.metrics["temperature"];
            // 20.25 + 21.25 + ... + 31.25
            assert_eq!(
                store::rollup::decimal_text(&cell.sum),
                "309",
                "{device} at {hour}"
            );
        }
        let parts: std::collections::BTreeSet<u32> = DEVICES.iter().map(|d| part_of(d)).collect();
        let mut readings = 0;
        for part in parts {
            let store::rollup::RollupKey { pk, sk, .. } = keys::fleet_part(hour, part);
            let fleet: FleetPart = rollups.get(&pk, &sk, true).await?.expect("a part").body()?;
            readings += fleet.hour.readings;
        }
        assert_eq!(
            readings,
            3 * PER_HOUR as u64,
            "the fleet counts each reading once"
        );
    }
    let entry: DirEntry = rollups
        .get(store::rollup::DIRECTORY_PK, "valve-9", true)
        .await?
        .expect("a directory entry")
        .body()?;
    assert_eq!(entry.last_event, format!("valve-9-{}-11", first + HOUR_MS));

    // A device-hour lost (a deleted item, a table restored from an older backup): a
    // second run writes it again, and finds the others already as they should be.
    let store::rollup::RollupKey { pk, sk, .. } = keys::device_hour("pump-2", first);
    client
        .delete_item()
        .table_name(&stack.stack.rollup_table_name)
        .key(store::item::PK, AttributeValue::S(pk.clone()))
        .key(store::item::SK, AttributeValue::S(sk.clone()))
        .send()
        .await?;
    let out = shardline(&["--from", &from, "--to", &to], &env_file)?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains("1 device-hours written, 2 already so"),
        "{said}"
    );
    assert!(
        said.contains("0 device-hours written, 3 already so"),
        "{said}"
    );
    let restored: DeviceHour = rollups
        .get(&pk, &sk, true)
        .await?
        .expect("restored")
        .body()?;
    assert_eq!(restored.hour.readings, PER_HOUR as u64);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_flags_are_named() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let env_file = dir.path().join("stack.env");
    std::fs::write(
        &env_file,
        "TABLE_NAME=t\nSHARD_TABLE_NAME=s\nROLLUP_TABLE=r\nAWS_ENDPOINT_URL=http://127.0.0.1:9\n",
    )?;
    let out = shardline(&["--from", "yesterday", "--to", "0"], &env_file)?;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("\"yesterday\" is neither RFC 3339 nor epoch ms"),
        "{}",
        text(&out.stderr)
    );
    let out = shardline(
        &[
            "--from",
            "2026-01-02T00:00:00Z",
            "--to",
            "2026-01-01T00:00:00Z",
        ],
        &env_file,
    )?;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("is not before --to"),
        "{}",
        text(&out.stderr)
    );
    Ok(())
}
