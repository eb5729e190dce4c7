//! Issue 51, hole 8: one lateness horizon. The sealer publishes the horizon it seals
//! with in its watermark (`store::rollup::horizon`); a lowered one takes effect in the
//! sealer only after `SWITCH`, so every ingest marks with it first; a raised one at once.

use std::sync::Arc;
use std::time::Duration;

use sealer::{Sealer, Settings, read_watermark};
use sharding::time::Timestamp;
use store::memory::{MemoryReadings, MemoryRollups, MemoryShards};
use store::rollup::horizon::{Horizon, SWITCH};
use store::rollup::{HOUR_MS, MINUTE_MS};

use crate::common::{BASE_MS, hourly, shard_table, table_history};

fn sealer<'a>(
    table: &'a MemoryReadings,
    shards: &Arc<MemoryShards>,
    rollups: &MemoryRollups,
    horizon_secs: u64,
) -> Sealer<&'a MemoryReadings, Arc<MemoryShards>, MemoryRollups> {
    let settings = Settings {
        horizon: Duration::from_secs(horizon_secs),
        concurrency: 2,
        ..Settings::default()
    };
    Sealer::new(table, shards.clone(), rollups.clone(), settings)
}

fn at(ms: i64) -> Timestamp {
    Timestamp::from_millis(ms).unwrap()
}

#[tokio::test]
async fn a_lowered_horizon_is_published_at_once_and_sealed_with_only_after_the_switch() {
    let table = MemoryReadings::new(None);
    let shards = Arc::new(shard_table(table_history(vec![(0, hourly(4))]), []));
    let rollups = MemoryRollups::new();
    let hour = BASE_MS + HOUR_MS;
    // 10 min: the hour is sealed 12 minutes after its end, and the horizon published.
    let first = sealer(&table, &shards, &rollups, 600)
        .run(at(hour + HOUR_MS + 12 * MINUTE_MS), None)
        .await
        .unwrap();
    assert_eq!(first.watermark_ms, Some(hour + HOUR_MS));
    let mark = read_watermark(&rollups).await.unwrap().unwrap();
    assert_eq!(mark.horizon, Some(Horizon::steady(600)));

    // Lowered to 1 min, 2 minutes after the next hour's end: published for the
    // ingest at once, but the sealer still waits out 10 min.
    let lowered = sealer(&table, &shards, &rollups, 60);
    let t = hour + 2 * HOUR_MS + 2 * MINUTE_MS;
    let report = lowered.run(at(t), None).await.unwrap();
    assert_eq!(
        report.hours_sealed, 0,
        "sealed under the lowered horizon at once"
    );
    let published = read_watermark(&rollups)
        .await
        .unwrap()
        .unwrap()
        .horizon
        .unwrap();
    assert_eq!(published.for_ingest(t), Duration::from_secs(60));
    assert_eq!(published.for_sealer(t), Duration::from_secs(600));
    let switch = i64::try_from(SWITCH.as_millis()).unwrap();
    assert_eq!(published.switch_ms, t + switch);
    // A run seals the next hour under 10 min...
    let report = lowered.run(at(t + 10 * MINUTE_MS), None).await.unwrap();
    assert_eq!(report.hours_sealed, 1);
    // ...and, once the switch has passed, the one after under 1 min.
    let after = hour + 3 * HOUR_MS + 2 * MINUTE_MS;
    assert!(after >= t + switch);
    let report = lowered.run(at(after), None).await.unwrap();
    assert_eq!(report.hours_sealed, 1);
    assert_eq!(report.watermark_ms, Some(hour + 3 * HOUR_MS));
    // The publication stays as it is while the configuration does.
    let again = read_watermark(&rollups).await.unwrap().unwrap().horizon;
    assert_eq!(again, Some(published));
}

#[tokio::test]
async fn a_raised_horizon_is_sealed_with_at_once_and_marked_with_after_the_switch() {
    let table = MemoryReadings::new(None);
    let shards = Arc::new(shard_table(table_history(vec![(0, hourly(4))]), []));
    let rollups = MemoryRollups::new();
    let hour = BASE_MS + HOUR_MS;
    sealer(&table, &shards, &rollups, 600)
        .run(at(hour + HOUR_MS + 12 * MINUTE_MS), None)
        .await
        .unwrap();
    // Raised to 20 min, 12 minutes after the next hour's end: not sealed.
    let t = hour + 2 * HOUR_MS + 12 * MINUTE_MS;
    let report = sealer(&table, &shards, &rollups, 1_200)
        .run(at(t), None)
        .await
        .unwrap();
    assert_eq!(report.hours_sealed, 0);
    let published = read_watermark(&rollups)
        .await
        .unwrap()
        .unwrap()
        .horizon
        .unwrap();
    // The ingest keeps marking with 10 min until the switch.
    assert_eq!(published.for_ingest(t), Duration::from_secs(600));
    assert_eq!(published.for_sealer(t), Duration::from_secs(1_200));
}
