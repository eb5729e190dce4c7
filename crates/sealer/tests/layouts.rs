//! Each table layout the ingest writes under the sealer: time buckets are sealed, and a
//! layout whose keys begin with the device id (unsharded, random, calculated), which
//! only a table scan could read over every device, stops the run before it seals any
//! hour, with an error naming the layout and its epoch's start (`sealer::layout`),
//! never a silent halt at the switch hour.

use std::sync::Arc;

use sealer::layout::UnsealableLayout;
use sealer::{SealError, Sealer, Settings, read_watermark};
use sharding::layout::Layout;
use sharding::time::Timestamp;
use store::memory::{MemoryReadings, MemoryRollups, MemoryShards};
use store::rollup::{HOUR_MS, MINUTE_MS, keys};

use crate::common::{BASE_MS, R, hourly, load, nz, shard_table, table_history, ts};

/// The hour a first run seals: [01:00, 02:00) of the fixture's day.
const HOUR: i64 = BASE_MS + HOUR_MS;

fn after_the_horizon() -> Timestamp {
    ts(HOUR + HOUR_MS + 12 * MINUTE_MS)
}

/// Three devices' readings of `HOUR`, stored under `epochs`' layouts.
fn table(epochs: Vec<(i64, Layout)>) -> (MemoryReadings, Arc<MemoryShards>) {
    let shards = shard_table(table_history(epochs), []);
    let table = MemoryReadings::new(None);
    let readings: Vec<R> = (0..30)
        .map(|i| R {
            device: format!("d-{}", i % 3),
            event: format!("e{i:03}"),
            ts_ms: HOUR + i * 2 * MINUTE_MS,
            value: store::Decimal::parse("1.5").unwrap(),
        })
        .collect();
    load(&table, &shards, &readings);
    (table, Arc::new(shards))
}

fn sealer<'a>(
    table: &'a MemoryReadings,
    shards: Arc<MemoryShards>,
    rollups: &'a MemoryRollups,
) -> Sealer<&'a MemoryReadings, Arc<MemoryShards>, &'a MemoryRollups> {
    Sealer::new(table, shards, rollups, Settings::default())
}

/// A run over a table of `layout` alone: refused before any hour, naming the layout as
/// the table's first, and nothing written.
async fn refused_from_the_start(layout: Layout) {
    let (table, shards) = table(vec![(0, layout.clone())]);
    let rollups = MemoryRollups::new();
    let s = sealer(&table, shards, &rollups);
    let err = s.run(after_the_horizon(), None).await.unwrap_err();
    let SealError::Layout(refused) = &err else {
        panic!("not refused for its layout: {err}");
    };
    assert_eq!(
        refused,
        &UnsealableLayout {
            layout: layout.clone(),
            effective_from: None,
            first_hour_ms: HOUR,
        }
    );
    let said = err.to_string();
    assert!(said.contains(&format!("layout {layout}")), "{said}");
    assert!(said.contains("scan"), "{said}");
    assert!(rollups.items().is_empty(), "wrote {:?}", rollups.items());
    // A rebuild of the hour is refused the same way.
    let err = s
        .reseal(HOUR, HOUR + HOUR_MS, after_the_horizon(), None)
        .await
        .unwrap_err();
    assert!(matches!(err, SealError::Layout(_)), "{err}");
}

#[tokio::test]
async fn an_unsharded_table_refuses_the_run_naming_its_layout() {
    refused_from_the_start(Layout::unsharded()).await;
}

#[tokio::test]
async fn a_random_table_refuses_the_run_naming_its_layout() {
    refused_from_the_start(Layout::random(nz(4))).await;
}

#[tokio::test]
async fn a_calculated_table_refuses_the_run_naming_its_layout() {
    refused_from_the_start(Layout::calculated("device_id", nz(4))).await;
    refused_from_the_start(Layout::calculated("event_id", nz(4))).await;
}

/// A time-bucket table with a random epoch scheduled after the hours due: the run
/// refuses now, naming the epoch and its start, rather than sealing up to the switch
/// and halting there; switched back before it, the same run seals.
#[tokio::test]
async fn a_time_bucket_table_with_a_random_epoch_scheduled_refuses_before_the_switch() {
    let switch = HOUR + 3 * HOUR_MS + 7 * MINUTE_MS;
    let (table, shards) = table(vec![(0, hourly(4)), (switch, Layout::random(nz(4)))]);
    let rollups = MemoryRollups::new();
    let s = sealer(&table, shards.clone(), &rollups);
    let err = s.run(after_the_horizon(), None).await.unwrap_err();
    let SealError::Layout(refused) = err else {
        panic!("not refused for its layout: {err}");
    };
    assert_eq!(refused.layout, Layout::random(nz(4)));
    assert_eq!(refused.effective_from, Some(ts(switch)));
    assert!(read_watermark(&rollups).await.unwrap().is_none());

    // A rebuild of hours wholly before the switch is the time buckets' alone: sealed.
    let report = s
        .reseal(HOUR, HOUR + HOUR_MS, after_the_horizon(), None)
        .await
        .unwrap();
    assert_eq!(report.readings, 30, "{report:?}");

    // The same table with time buckets after the switch: sealed.
    shards.put_layout(table_history(vec![(0, hourly(4)), (switch, hourly(8))]));
    let s = sealer(&table, shards, &rollups);
    let report = s.run(after_the_horizon(), None).await.unwrap();
    assert_eq!(report.hours_sealed, 1, "{report:?}");
}

/// A legacy unsharded table switched to time buckets: the sealer's hours are after
/// the switch, and sealed; a rebuild that reaches back into the legacy epoch (or into
/// the hour the switch falls in) is refused naming it, not half counted.
#[tokio::test]
async fn a_table_switched_from_unsharded_to_time_buckets_is_sealed_from_the_switch_on() {
    let switch = HOUR - 20 * MINUTE_MS;
    let (table, shards) = table(vec![(0, Layout::unsharded()), (switch, hourly(4))]);
    let rollups = MemoryRollups::new();
    let s = sealer(&table, shards, &rollups);
    let report = s.run(after_the_horizon(), None).await.unwrap();
    assert_eq!(report.hours_sealed, 1, "{report:?}");
    assert_eq!(report.readings, 30, "{report:?}");
    assert!(
        rollups
            .items()
            .contains_key(&keys::device_hour("d-0", HOUR))
    );

    let err = s
        .reseal(HOUR - HOUR_MS, HOUR + HOUR_MS, after_the_horizon(), None)
        .await
        .unwrap_err();
    let SealError::Layout(refused) = err else {
        panic!("not refused for its layout: {err}");
    };
    assert_eq!(refused.layout, Layout::unsharded());
    assert_eq!(refused.effective_from, None);
}

/// The Lambda's line for a refused run: the metric `SealerLayoutAlarm` watches.
#[test]
fn a_refused_run_emits_the_alarms_metric() {
    let line: serde_json::Value =
        serde_json::from_str(&sealer::layout::metrics_line(ts(HOUR))).unwrap();
    assert_eq!(line[sealer::layout::METRIC], 1.0);
    assert_eq!(line["Function"], "sealer");
    assert_eq!(
        line["_aws"]["CloudWatchMetrics"][0]["Namespace"],
        "Shardline"
    );
}
