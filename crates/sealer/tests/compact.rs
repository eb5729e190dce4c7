//! Scenario 62, the hour seal's side: where the table's layout has slabs, an hour is
//! sealed only once compaction has passed its end (its one-reading devices' readings
//! are in its windows' runs only then), an hour before slabs is sealed as before, a
//! layout with slabs and no ingest timeout refuses the run by the variable's name, and
//! each run reports compaction's lag (`CompactionLagSeconds`).

use std::sync::Arc;
use std::time::Duration;

use sealer::{SealError, Sealer, Settings};
use sharding::layout::Layout;
use sharding::slab::SlabLayout;
use sharding::time::Timestamp;
use store::memory::{MemoryReadings, MemoryRollups, MemoryShards};
use store::rollup::compaction::{Compacted, advance_compacted};
use store::rollup::{HOUR_MS, MINUTE_MS, keys};

use crate::common::{BASE_MS, R, hourly, load, shard_table, table_history, ts};

/// The hour a first run seals: [01:00, 02:00) of the fixture's day.
const HOUR: i64 = BASE_MS + HOUR_MS;

fn after_the_horizon() -> Timestamp {
    ts(HOUR + HOUR_MS + 12 * MINUTE_MS)
}

fn with_slabs() -> Layout {
    hourly(4).with_slabs(SlabLayout::default())
}

/// Two devices' readings of `HOUR`, under `epochs`' layouts.
fn stored(epochs: Vec<(i64, Layout)>) -> (MemoryReadings, Arc<MemoryShards>) {
    let shards = shard_table(table_history(epochs), []);
    let table = MemoryReadings::new(None);
    let readings: Vec<R> = (0..10)
        .map(|i| R {
            device: format!("d-{}", i % 2),
            event: format!("e{i:03}"),
            ts_ms: HOUR + i * 5 * MINUTE_MS,
            value: store::Decimal::parse("2.5").unwrap(),
        })
        .collect();
    load(&table, &shards, &readings);
    (table, Arc::new(shards))
}

fn settings() -> Settings {
    Settings {
        ingest_timeout: Some(Duration::from_secs(30)),
        ..Settings::default()
    }
}

fn sealer<'a>(
    table: &'a MemoryReadings,
    shards: Arc<MemoryShards>,
    rollups: &'a MemoryRollups,
    settings: Settings,
) -> Sealer<&'a MemoryReadings, Arc<MemoryShards>, &'a MemoryRollups> {
    Sealer::new(table, shards, rollups, settings)
}

async fn compacted_to(rollups: &MemoryRollups, to_ms: i64) {
    let progress = Compacted {
        from_ms: HOUR - HOUR_MS,
        to_ms,
    };
    advance_compacted(rollups, &progress).await.unwrap();
}

#[tokio::test]
async fn with_slabs_an_hour_is_sealed_only_once_compaction_passed_its_end() {
    let (table, shards) = stored(vec![(0, with_slabs())]);
    let rollups = MemoryRollups::new();
    let run = || async {
        sealer(&table, shards.clone(), &rollups, settings())
            .run(after_the_horizon(), None)
            .await
            .unwrap()
    };
    // Nothing compacted yet: the hour waits, and no lag is known.
    let report = run().await;
    assert_eq!(
        (report.hours_sealed, report.compacted_to_ms),
        (0, None),
        "{report:?}"
    );
    // Compacted to the hour's last window but one: it still waits.
    compacted_to(&rollups, HOUR + HOUR_MS - MINUTE_MS).await;
    let report = run().await;
    assert_eq!(report.hours_sealed, 0, "{report:?}");
    assert_eq!(report.compacted_to_ms, Some(HOUR + HOUR_MS - MINUTE_MS));
    assert!(
        !rollups
            .items()
            .contains_key(&keys::device_hour("d-0", HOUR))
    );
    // Past its end: sealed, and the lag is reported.
    compacted_to(&rollups, HOUR + HOUR_MS + 2 * MINUTE_MS).await;
    let report = run().await;
    assert_eq!(report.hours_sealed, 1, "{report:?}");
    assert!(
        rollups
            .items()
            .contains_key(&keys::device_hour("d-0", HOUR))
    );
    let line: serde_json::Value =
        serde_json::from_str(&sealer::metrics_line(&report, after_the_horizon())).unwrap();
    // 01:00 + 1 h 12 min, less 01:00 + 1 h 2 min.
    assert_eq!(line["CompactionLagSeconds"], 600.0, "{line}");
}

#[tokio::test]
async fn an_hour_before_slabs_is_sealed_as_before_and_without_slabs_no_lag_is_reported() {
    // Slabs switched on after the hour: it is sealed with nothing compacted.
    let (table, shards) = stored(vec![(0, hourly(4)), (HOUR + HOUR_MS, with_slabs())]);
    let rollups = MemoryRollups::new();
    let report = sealer(&table, shards, &rollups, settings())
        .run(after_the_horizon(), None)
        .await
        .unwrap();
    assert_eq!(report.hours_sealed, 1, "{report:?}");
    // Never slabs: no lag in the line.
    let (table, shards) = stored(vec![(0, hourly(4))]);
    let rollups = MemoryRollups::new();
    let report = sealer(&table, shards, &rollups, Settings::default())
        .run(after_the_horizon(), None)
        .await
        .unwrap();
    assert_eq!(report.hours_sealed, 1, "{report:?}");
    let line = sealer::metrics_line(&report, after_the_horizon());
    assert!(!line.contains("CompactionLagSeconds"), "{line}");
}

#[tokio::test]
async fn a_layout_with_slabs_and_no_ingest_timeout_refuses_the_run_by_its_name() {
    let (table, shards) = stored(vec![(0, with_slabs())]);
    let rollups = MemoryRollups::new();
    let err = sealer(&table, shards, &rollups, Settings::default())
        .run(after_the_horizon(), None)
        .await
        .unwrap_err();
    assert!(matches!(err, SealError::NoIngestTimeout), "{err}");
    assert!(err.to_string().contains("INGEST_TIMEOUT_SECS"), "{err}");
}
