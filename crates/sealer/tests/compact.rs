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

#[tokio::test]
async fn with_slabs_an_hour_is_sealed_only_once_compaction_passed_its_end() {
    // Slabs from the hour before on; the hour is due as soon as it ends.
    let (table, shards) = stored(vec![(0, hourly(4)), (HOUR - HOUR_MS, with_slabs())]);
    let rollups = MemoryRollups::new();
    let due_at_once = Settings {
        horizon: Duration::ZERO,
        ..settings()
    };
    let run = |now_ms: i64| {
        let sealer = sealer(&table, shards.clone(), &rollups, due_at_once);
        async move { sealer.run(ts(now_ms), None).await.unwrap() }
    };
    // The hour's last window closes 90 s after its end (30 s accept, 30 s ingest
    // timeout, 30 s margin): a run a millisecond before compacts up to it, and the
    // hour waits.
    let end = HOUR + HOUR_MS;
    let report = run(end + 90_000 - 1).await;
    assert_eq!(
        (report.hours_sealed, report.compacted_to_ms),
        (0, Some(end - MINUTE_MS)),
        "{report:?}"
    );
    assert!(
        !rollups
            .items()
            .contains_key(&keys::device_hour("d-0", HOUR))
    );
    // Once it closes, the run compacts it and seals the hour, and reports the lag.
    let report = run(end + 90_000).await;
    assert_eq!(
        (report.hours_sealed, report.compacted_to_ms),
        (1, Some(end)),
        "{report:?}"
    );
    assert!(
        rollups
            .items()
            .contains_key(&keys::device_hour("d-0", HOUR))
    );
    let line: serde_json::Value =
        serde_json::from_str(&sealer::metrics_line(&report, ts(end + 90_000))).unwrap();
    assert_eq!(line["CompactionLagSeconds"], 90.0, "{line}");
    // The progress only grows: a run whose clock lags a minute leaves it.
    run(end + 30_000).await;
    let progress = store::rollup::compaction::read_compacted(&rollups).await;
    assert_eq!(progress.unwrap().map(|c| c.to_ms), Some(end));
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

/// Scenario 62, the compaction itself: slabs written as the ingest writes them, compacted
/// into runs by the sealer's runs, and the hour seal reading those runs.
mod runs {
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use proptest::prelude::*;
    use sealer::{SealError, Sealer, Settings};
    use sharding::epoch::TableHistory;
    use sharding::key::ItemKey;
    use sharding::slab::{SHARED_ENTITY, SlabLayout, SlabOwner, group_entity, marker_sk, slab_sk};
    use sharding::time::Timestamp;
    use sharding::written::WriteOrder;
    use store::batch::{BatchTable, Item};
    use store::error::StoreError;
    use store::item::{Reading, ReadingItem};
    use store::memory::{MemoryReadings, MemoryRollups, MemoryShards};
    use store::read::{ItemsPage, ItemsRequest, Page, PageRequest, ReadingSource};
    use store::rollup::compaction::{Compacted, advance_compacted, read_compacted};
    use store::rollup::fresh::FreshMinute;
    use store::rollup::seen::SeenChunk;
    use store::rollup::{Cells, DeviceHour, HOUR_MS, MINUTE_MS, RollupItem, RollupTable, keys};

    use crate::common::{
        BASE_MS, fanout_history, hourly, load_readings, nz, shard_table, table_history, ts,
    };

    /// The hour slabs start at: [01:00, 02:00) of the fixture's day.
    const HOUR: i64 = BASE_MS + HOUR_MS;
    const GROUPS: u32 = 2;
    const DEVICES: usize = 12;

    fn slabs() -> SlabLayout {
        SlabLayout {
            groups: nz(GROUPS),
            ..SlabLayout::default()
        }
    }

    /// No slabs before `HOUR`, slabs (two groups, one-minute windows) from it on.
    fn history() -> TableHistory {
        table_history(vec![(0, hourly(4)), (HOUR, hourly(4).with_slabs(slabs()))])
    }

    /// Rollups whose compaction progress starts at `HOUR`, where the slabs start: the
    /// ingest writes slabs only once a first compaction has set one.
    async fn started() -> MemoryRollups {
        let rollups = MemoryRollups::new();
        let start = Compacted {
            from_ms: HOUR,
            to_ms: HOUR,
        };
        advance_compacted(&rollups, &start).await.unwrap();
        rollups
    }

    fn settings() -> Settings {
        Settings {
            ingest_timeout: Some(Duration::from_secs(30)),
            concurrency: 3,
            ..Settings::default()
        }
    }

    fn device(d: usize) -> String {
        format!("d-{d:02}")
    }

    fn reading(device: &str, event: &str, ts_ms: i64, written: i64) -> Reading {
        Reading {
            device_id: device.to_owned(),
            event_id: event.to_owned(),
            ts: ts(ts_ms),
            metrics: BTreeMap::from([(
                "t".to_owned(),
                store::Decimal::parse(&format!("{}.5", written % 7)).unwrap(),
            )]),
            tags: BTreeMap::new(),
            written: WriteOrder(written),
        }
    }

    /// Writes `members` (of one group and window) as the ingest does: one slab, on the
    /// group's fan-out key `j`, its sort key their identities.
    fn put_slab(table: &MemoryReadings, j: u32, members: Vec<Reading>) {
        let layout = slabs();
        let owner = SlabOwner::Group(layout.group(&members[0].device_id));
        put_slab_of(table, owner, j, members);
    }

    /// Writes `members` as one slab of `owner`'s partition, on its fan-out key `j`.
    fn put_slab_of(table: &MemoryReadings, owner: SlabOwner, j: u32, mut members: Vec<Reading>) {
        members.sort_by(|a, b| {
            (&a.device_id, a.ts, &a.event_id).cmp(&(&b.device_id, b.ts, &b.event_id))
        });
        let layout = slabs();
        let window = layout.window(members[0].ts);
        let pk = owner.pk(j, window);
        let sk = slab_sk(
            members
                .iter()
                .map(|r| (r.device_id.as_str(), r.ts.as_millis(), r.event_id.as_str())),
        );
        let slab = store::slab::marshal(&members, &pk, &sk, layout.expires_at(window)).unwrap();
        table.put_item(slab.item).unwrap();
    }

    /// Every device's reading of each of the first `minutes` minutes of `HOUR`, each
    /// minute's written as two batches' slabs per group.
    fn fleet(minutes: i64) -> Vec<Reading> {
        let mut readings = Vec::new();
        for minute in 0..minutes {
            for d in 0..DEVICES {
                let at = HOUR + minute * MINUTE_MS + 1_000 * i64::try_from(d).unwrap();
                readings.push(reading(&device(d), &format!("e{minute:02}"), at, minute));
            }
        }
        readings
    }

    /// A table holding `readings` in slabs: per minute and group, two slabs (the first
    /// and second half of the devices, as two batches).
    fn slab_table(readings: &[Reading]) -> MemoryReadings {
        let table = MemoryReadings::new(Some(5));
        let layout = slabs();
        let mut batches: BTreeMap<(i64, u32, bool), Vec<Reading>> = BTreeMap::new();
        for r in readings {
            let window = layout.window(r.ts).start_ms();
            let half = r.device_id.as_str() >= "d-06";
            batches
                .entry((window, layout.group(&r.device_id), half))
                .or_default()
                .push(r.clone());
        }
        for members in batches.into_values() {
            put_slab(&table, 0, members);
        }
        table
    }

    fn shards() -> std::sync::Arc<MemoryShards> {
        std::sync::Arc::new(shard_table(history(), []))
    }

    fn sealer<S: ReadingSource + BatchTable>(
        table: S,
        rollups: &MemoryRollups,
        shards: std::sync::Arc<MemoryShards>,
    ) -> Sealer<S, std::sync::Arc<MemoryShards>, &MemoryRollups> {
        Sealer::new(table, shards, rollups, settings())
    }

    /// Every item of `HOUR`'s run partitions (each span of it, each group), by key.
    async fn run_items(table: &MemoryReadings) -> BTreeMap<ItemKey, Item> {
        let hour = sharding::time::TimeRange::of_millis(HOUR, HOUR + HOUR_MS).unwrap();
        let partitions: Vec<String> = slabs()
            .run_spans(hour)
            .flat_map(|span| (0..GROUPS).map(move |group| slabs().run_pk(group, span)))
            .collect();
        let mut items = BTreeMap::new();
        for pk in partitions {
            let mut request = ItemsRequest {
                pk,
                sk_at_most: None,
                limit: None,
                ascending: true,
                start_after: None,
                consistent: true,
            };
            loop {
                let page = table.query_items(&request).await.unwrap();
                for stored in page.items {
                    let key = ItemKey {
                        pk: request.pk.clone(),
                        sk: stored.sk,
                    };
                    items.insert(key, stored.item);
                }
                match page.last_key {
                    Some(last) => request.start_after = Some(last),
                    None => break,
                }
            }
        }
        items
    }

    /// The readings the run items hold, each identity with how many runs hold it.
    fn held(
        items: &BTreeMap<ItemKey, Item>,
    ) -> BTreeMap<(String, i64, String), (usize, ReadingItem)> {
        let mut held: BTreeMap<_, (usize, ReadingItem)> = BTreeMap::new();
        for item in items.values() {
            for r in store::block::expand(item.clone()).unwrap() {
                let identity = (r.device_id.clone(), r.ts_ms, r.event_id.clone());
                held.entry(identity).or_insert((0, r)).0 += 1;
            }
        }
        held
    }

    fn identities(readings: &[Reading]) -> BTreeSet<(String, i64, String)> {
        readings
            .iter()
            .map(|r| (r.device_id.clone(), r.ts.as_millis(), r.event_id.clone()))
            .collect()
    }

    /// A readings table whose writes fail from the `after`-th call on (a compaction
    /// killed there), and whose item reads wait `slow` each.
    struct KilledWrites<'a> {
        table: &'a MemoryReadings,
        after: u64,
        calls: AtomicU64,
        slow: Duration,
    }

    impl<'a> KilledWrites<'a> {
        fn after(table: &'a MemoryReadings, after: u64) -> Self {
            Self {
                table,
                after,
                calls: AtomicU64::new(0),
                slow: Duration::ZERO,
            }
        }
    }

    impl ReadingSource for KilledWrites<'_> {
        async fn query_page(&self, request: &PageRequest) -> Result<Page, StoreError> {
            self.table.query_page(request).await
        }
        async fn get_reading(
            &self,
            key: &ItemKey,
            consistent: bool,
        ) -> Result<Option<ReadingItem>, StoreError> {
            self.table.get_reading(key, consistent).await
        }
        async fn query_items(&self, request: &ItemsRequest) -> Result<ItemsPage, StoreError> {
            tokio::time::sleep(self.slow).await;
            self.table.query_items(request).await
        }
    }

    /// A rollups table that notes the compaction progress after every write.
    struct Watched<'a> {
        inner: &'a MemoryRollups,
        progress: std::sync::Mutex<Vec<i64>>,
    }

    impl Watched<'_> {
        async fn note(&self) {
            if let Some(c) = read_compacted(self.inner).await.unwrap() {
                self.progress.lock().unwrap().push(c.to_ms);
            }
        }
    }

    impl RollupTable for Watched<'_> {
        async fn put_if_newer(&self, item: &RollupItem) -> Result<store::Written, StoreError> {
            let written = self.inner.put_if_newer(item).await;
            self.note().await;
            written
        }
        async fn put_if_version(
            &self,
            item: &RollupItem,
            expected: Option<u64>,
        ) -> Result<store::Written, StoreError> {
            let written = self.inner.put_if_version(item, expected).await;
            self.note().await;
            written
        }
        async fn delete_if(
            &self,
            pk: &str,
            sk: &str,
            version: u64,
        ) -> Result<store::Written, StoreError> {
            self.inner.delete_if(pk, sk, version).await
        }
        async fn put(&self, item: &RollupItem) -> Result<(), StoreError> {
            let put = self.inner.put(item).await;
            self.note().await;
            put
        }
        async fn get(
            &self,
            pk: &str,
            sk: &str,
            consistent: bool,
        ) -> Result<Option<RollupItem>, StoreError> {
            self.inner.get(pk, sk, consistent).await
        }
        async fn query(
            &self,
            q: &store::rollup::RollupQuery,
        ) -> Result<store::rollup::RollupPage, StoreError> {
            self.inner.query(q).await
        }
    }

    #[tokio::test]
    async fn the_progress_only_grows_under_a_slower_compaction_at_once() {
        let table = slab_table(&fleet(6));
        let rollups = started().await;
        let watched = Watched {
            inner: &rollups,
            progress: std::sync::Mutex::new(Vec::new()),
        };
        // The slow one reads the progress first, and each slab page a millisecond late:
        // the fast one is done before it writes.
        let slow = KilledWrites {
            slow: Duration::from_millis(1),
            ..KilledWrites::after(&table, u64::MAX)
        };
        let (fast, slow) = (
            Sealer::new(&table, shards(), &watched, settings()),
            Sealer::new(&slow, shards(), &watched, settings()),
        );
        let (a, b) = tokio::join!(slow.run(six_closed(), None), fast.run(six_closed(), None));
        a.unwrap();
        b.unwrap();
        let seen = watched.progress.lock().unwrap().clone();
        assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
        assert_eq!(seen.last(), Some(&(HOUR + 6 * MINUTE_MS)));
    }

    impl BatchTable for KilledWrites<'_> {
        async fn batch_write(&self, items: Vec<Item>) -> Result<Vec<Item>, StoreError> {
            if self.calls.fetch_add(1, Ordering::SeqCst) >= self.after {
                return Err(StoreError::Malformed("killed".to_owned()));
            }
            self.table.batch_write(items).await
        }
    }

    /// Eight minutes into `HOUR`: its first six windows are closed (each 90 s after
    /// its end), the seventh not.
    fn six_closed() -> Timestamp {
        ts(HOUR + 8 * MINUTE_MS)
    }

    #[tokio::test]
    async fn a_compaction_killed_anywhere_or_two_at_once_write_the_runs_of_one_clean_run() {
        let readings = fleet(6);
        let clean = slab_table(&readings);
        let counted = KilledWrites::after(&clean, u64::MAX);
        let rollups = started().await;
        sealer(&counted, &rollups, shards())
            .run(six_closed(), None)
            .await
            .unwrap();
        let want = run_items(&clean).await;
        // Each reading in exactly one run, and every window of each group marked (its
        // first run under the marker's key).
        let held = held(&want);
        assert_eq!(
            held.keys().cloned().collect::<BTreeSet<_>>(),
            identities(&readings)
        );
        assert!(held.values().all(|(n, _)| *n == 1), "{held:?}");
        for minute in 0..6 {
            let window = slabs().window(ts(HOUR + minute * MINUTE_MS));
            for group in 0..GROUPS {
                let marker = ItemKey {
                    pk: slabs().run_pk(group, window),
                    sk: marker_sk(window),
                };
                assert!(want.contains_key(&marker), "{marker:?}");
            }
        }
        // A write call at least a window (its first runs), kills at each of them.
        let calls = counted.calls.load(Ordering::SeqCst);
        assert!(calls >= 6, "{calls}");
        for after in 0..calls {
            let table = slab_table(&readings);
            let rollups = started().await;
            let killed = KilledWrites::after(&table, after);
            let run = sealer(&killed, &rollups, shards())
                .run(six_closed(), None)
                .await;
            assert!(run.is_err(), "killed at {after}");
            sealer(&table, &rollups, shards())
                .run(six_closed(), None)
                .await
                .unwrap();
            assert_eq!(
                run_items(&table).await,
                want,
                "killed at call {after}, run again"
            );
        }
        let table = slab_table(&readings);
        let rollups = started().await;
        let (one, two) = (
            sealer(&table, &rollups, shards()),
            sealer(&table, &rollups, shards()),
        );
        let (a, b) = tokio::join!(one.run(six_closed(), None), two.run(six_closed(), None));
        a.unwrap();
        b.unwrap();
        assert_eq!(run_items(&table).await, want, "two at once");
    }

    /// The fresh minutes compaction left (`store::rollup::fresh`), by their start.
    fn fresh_minutes(rollups: &MemoryRollups) -> BTreeMap<i64, Cells> {
        rollups
            .items()
            .values()
            .filter(|item| item.pk.starts_with("fresh#"))
            .map(|item| {
                let minute = FreshMinute::of(item).unwrap();
                (minute.start_ms, minute.cells)
            })
            .collect()
    }

    /// The maps of the fleet's fresh last-seen compaction left (`store::rollup::seen`):
    /// each window's, device to its newest reading.
    fn seen_maps(rollups: &MemoryRollups) -> BTreeMap<i64, BTreeMap<String, i64>> {
        let mut maps: BTreeMap<i64, BTreeMap<String, i64>> = BTreeMap::new();
        for item in rollups.items().values() {
            if item.pk.starts_with("seen#") {
                let chunk = SeenChunk::of(item).unwrap();
                let map = maps.entry(chunk.window_ms).or_default();
                map.extend(chunk.last_seen().map(|(d, at)| (d.to_owned(), at)));
            }
        }
        maps
    }

    /// What `readings` say of each window's map: every device's newest reading in the
    /// hour up to the window's end.
    fn seen_recount(readings: &[Reading], windows: i64) -> BTreeMap<i64, BTreeMap<String, i64>> {
        (0..windows)
            .map(|w| {
                let end = HOUR + (w + 1) * MINUTE_MS;
                let mut map: BTreeMap<String, i64> = BTreeMap::new();
                for r in readings.iter().filter(|r| r.ts.as_millis() < end) {
                    let newest = map.entry(r.device_id.clone()).or_insert(r.ts.as_millis());
                    *newest = (*newest).max(r.ts.as_millis());
                }
                (HOUR + w * MINUTE_MS, map)
            })
            .filter(|(_, map)| !map.is_empty())
            .collect()
    }

    /// What `readings` say of each minute of `HOUR`: readings, devices and cells.
    fn minute_recount(readings: &[Reading]) -> BTreeMap<i64, Cells> {
        let mut out: BTreeMap<i64, (Cells, BTreeSet<String>)> = BTreeMap::new();
        for r in readings {
            let start = r.ts.as_millis().div_euclid(MINUTE_MS) * MINUTE_MS;
            let (cells, devices) = out.entry(start).or_default();
            cells.add_reading(&r.metrics);
            devices.insert(r.device_id.clone());
        }
        out.into_iter()
            .map(|(start, (mut cells, devices))| {
                cells.devices = devices.len() as u64;
                (start, cells)
            })
            .collect()
    }

    /// The fleet's minutes fresh: each window compaction passes leaves its fresh minute,
    /// the cells of its readings each counted once (of a copy written twice, the one
    /// written last), its devices distinct, a window of no reading a minute of none;
    /// a compaction killed anywhere, or two at once, leave the same minutes; a window
    /// still open has none.
    #[tokio::test]
    async fn each_compacted_window_leaves_the_fresh_minute_of_its_readings_each_once() {
        // Five minutes of readings; the sixth window closed with none.
        let mut readings = fleet(5);
        let table = slab_table(&readings);
        // A batch written again into another slab: d-00's first reading once more,
        // written later with another value.
        let copy = reading(&device(0), "e00", HOUR, 5);
        put_slab(&table, 0, vec![copy.clone()]);
        readings.retain(|r| (&r.device_id, &r.event_id) != (&copy.device_id, &copy.event_id));
        readings.push(copy);
        let rollups = started().await;
        sealer(&table, &rollups, shards())
            .run(six_closed(), None)
            .await
            .unwrap();
        let mut want = minute_recount(&readings);
        want.insert(HOUR + 5 * MINUTE_MS, Cells::default());
        let fresh = fresh_minutes(&rollups);
        assert_eq!(fresh, want);
        assert_eq!(fresh[&HOUR].devices, DEVICES as u64);
        // Each window's map of the fleet's fresh last-seen: the hour so far's newest
        // reading of every device, the sixth window's (no reading) the fifth's.
        let seen = seen_maps(&rollups);
        assert_eq!(seen, seen_recount(&readings, 6));
        // Killed at any write, run again; or two at once: the same minutes.
        let calls = 8;
        for after in 0..calls {
            let table = slab_table(&readings);
            let rollups = started().await;
            let killed = KilledWrites::after(&table, after);
            let _ = sealer(&killed, &rollups, shards())
                .run(six_closed(), None)
                .await;
            sealer(&table, &rollups, shards())
                .run(six_closed(), None)
                .await
                .unwrap();
            assert_eq!(fresh_minutes(&rollups), want, "killed at call {after}");
            assert_eq!(seen_maps(&rollups), seen, "killed at call {after}");
        }
        let table = slab_table(&readings);
        let rollups = started().await;
        let (one, two) = (
            sealer(&table, &rollups, shards()),
            sealer(&table, &rollups, shards()),
        );
        let (a, b) = tokio::join!(one.run(six_closed(), None), two.run(six_closed(), None));
        a.unwrap();
        b.unwrap();
        assert_eq!(fresh_minutes(&rollups), want, "two at once");
        assert_eq!(seen_maps(&rollups), seen, "two at once");
    }

    /// The fleet's minutes and last-seen fresh at steady state: twelve devices reporting every 10 s
    /// into slabs, a sealer run every minute at the template's ingest timeout (30 s)
    /// and the default horizon, for three hours of a simulated clock. From the third
    /// minute on, after each run the fresh minutes reach from where the query starts
    /// them to within the stated bound of now (8 minutes; a window closes 90 s after its
    /// end, and a run comes each minute), as does the latest compacted window's map of
    /// every device's newest reading, and every hour is sealed in turn. The figures are printed
    /// (`cargo test -p sealer fresh_minutes_at_steady -- --nocapture`).
    #[tokio::test]
    async fn fresh_minutes_at_steady_state_trail_now_by_at_most_eight_minutes() {
        const TICK: i64 = MINUTE_MS;
        let table = MemoryReadings::new(None);
        let rollups = started().await;
        let layout = slabs();
        let (mut lag_min, mut lag_max, mut seen_max) = (i64::MAX, i64::MIN, i64::MIN);
        let mut sealed_end = None;
        for tick in 1..=180 {
            let now = HOUR + tick * TICK + 17_000;
            // The minute just passed: a batch every 10 s, a slab of each group's devices.
            for batch in 0..6 {
                let at = now - TICK + batch * 10_000;
                let mut groups: BTreeMap<u32, Vec<Reading>> = BTreeMap::new();
                for d in 0..DEVICES {
                    let device = device(d);
                    let r = reading(&device, &format!("e{tick}-{batch}"), at, tick);
                    groups.entry(layout.group(&device)).or_default().push(r);
                }
                for members in groups.into_values() {
                    put_slab(&table, 0, members);
                }
            }
            let report = sealer(&table, &rollups, shards())
                .run(ts(now), None)
                .await
                .unwrap();
            sealed_end = report.watermark_ms.or(sealed_end);
            // Where the query starts them: the watermark, or the first window
            // compacted when later (`query::service::fleet::fleet_span`).
            let first = read_compacted(&rollups).await.unwrap().unwrap().from_ms;
            let from = sealed_end.map_or(first, |end| end.max(first));
            let starts = fresh_minutes(&rollups).into_keys();
            let lag = now - store::rollup::fresh::fresh_end(starts, from);
            // Once the first window has closed and been compacted.
            if tick >= 3 {
                lag_min = lag_min.min(lag);
                lag_max = lag_max.max(lag);
                // The latest map: every device's newest reading, as far behind now.
                let maps = seen_maps(&rollups);
                let (_, latest) = maps.last_key_value().unwrap();
                assert_eq!(latest.len(), DEVICES, "tick {tick}");
                let behind = now - latest.values().min().unwrap();
                seen_max = seen_max.max(behind);
            }
        }
        println!(
            "fresh minutes trail now by {} s to {} s; each device's fresh last-seen by at most \
             {} s; the watermark ends at {:?}",
            lag_min / 1000,
            lag_max / 1000,
            seen_max / 1000,
            sealed_end.map(|end| (end - HOUR) / HOUR_MS)
        );
        assert!(lag_max <= 8 * MINUTE_MS, "fresh minutes lag {lag_max} ms");
        assert!(
            seen_max <= 8 * MINUTE_MS,
            "fresh last-seen lag {seen_max} ms"
        );
        assert!(
            lag_min >= 90_000,
            "a window answered before it closed: {lag_min} ms"
        );
        assert_eq!(
            sealed_end,
            Some(HOUR + 2 * HOUR_MS),
            "the hours sealed in turn"
        );
    }

    /// Scenario 62, a reseal's side (`shardline seal`, the `reseal` event): a reseal
    /// reaching an hour whose slab windows are not all compacted is refused by name
    /// before any hour is sealed (its open slabs' readings would be missed); once they
    /// have closed, the reseal compacts them itself and seals the hour from its runs,
    /// as a recount of the readings says.
    #[tokio::test]
    async fn a_reseal_compacts_first_and_refuses_an_hour_not_compacted() {
        let readings = fleet(6);
        let table = slab_table(&readings);
        let rollups = started().await;
        let err = sealer(&table, &rollups, shards())
            .reseal(HOUR, HOUR + HOUR_MS, six_closed(), None)
            .await
            .unwrap_err();
        assert!(matches!(err, SealError::NotCompacted { .. }), "{err}");
        assert!(err.to_string().contains("not compacted yet"), "{err}");
        assert!(
            sealed(&rollups).is_empty(),
            "an hour sealed before the refusal"
        );
        let report = sealer(&table, &rollups, shards())
            .reseal(HOUR, HOUR + HOUR_MS, after_the_hour(), None)
            .await
            .unwrap();
        assert_eq!(report.hours_sealed, 1, "{report:?}");
        let stored = readings
            .iter()
            .map(|r| {
                let identity = (r.device_id.clone(), r.ts.as_millis(), r.event_id.clone());
                (identity, r.clone())
            })
            .collect();
        assert_eq!(sealed(&rollups), recount(&stored));
    }

    /// A table with slabs from the beginning of time and no progress yet: the ingest has
    /// written no slab (it writes none before a progress exists), so the first run sets
    /// the progress at the first window still open and compacts nothing before it,
    /// writing no run and no marker for the two days of windows behind it.
    #[tokio::test]
    async fn a_first_compaction_starts_the_progress_at_the_first_open_window_and_writes_nothing() {
        let table = MemoryReadings::new(None);
        let counted = KilledWrites::after(&table, u64::MAX);
        let always = table_history(vec![(0, hourly(4).with_slabs(slabs()))]);
        let shards = std::sync::Arc::new(shard_table(always, []));
        let rollups = MemoryRollups::new();
        let report = Sealer::new(&counted, shards, &rollups, settings())
            .run(six_closed(), None)
            .await
            .unwrap();
        // The first window still open at six_closed: the seventh of `HOUR`.
        let open = HOUR + 6 * MINUTE_MS;
        assert_eq!(report.compacted_to_ms, Some(open), "{report:?}");
        assert_eq!(
            read_compacted(&rollups).await.unwrap(),
            Some(Compacted {
                from_ms: open,
                to_ms: open
            })
        );
        let writes = counted.calls.load(Ordering::SeqCst);
        assert_eq!(writes, 0, "no run or marker written");
    }

    /// The runs of `window` (epoch ms of its start) in `items`, as the readings they
    /// hold: the window's first under its marker key, the others under their first
    /// devices'.
    fn window_held(
        items: &BTreeMap<ItemKey, Item>,
        window_ms: i64,
    ) -> BTreeSet<(String, i64, String)> {
        let window = slabs().window(ts(window_ms));
        let label = window.label();
        let of_window: BTreeMap<ItemKey, Item> = items
            .iter()
            .filter(|(key, _)| {
                key.sk.contains(&format!("#{label}#")) || key.sk == marker_sk(window)
            })
            .map(|(k, i)| (k.clone(), i.clone()))
            .collect();
        held(&of_window).into_keys().collect()
    }

    #[tokio::test]
    async fn a_window_is_compacted_once_closed_with_a_slab_written_just_before() {
        let readings = fleet(1);
        let table = slab_table(&readings);
        let rollups = started().await;
        let window = slabs().window(ts(HOUR));
        // 30 s accept, 30 s ingest timeout, 30 s margin.
        let closes = window.end_ms() + 90_000;
        sealer(&table, &rollups, shards())
            .run(ts(closes - 1), None)
            .await
            .unwrap();
        assert!(
            run_items(&table).await.is_empty(),
            "compacted before it closed"
        );
        assert_eq!(
            read_compacted(&rollups).await.unwrap().map(|c| c.to_ms),
            Some(HOUR),
            "nothing closed"
        );
        // The last write that can land: just before the close, a late device's slab.
        let late = reading("d-99", "late", window.end_ms() - 1, 99);
        put_slab(&table, 0, vec![late.clone()]);
        sealer(&table, &rollups, shards())
            .run(ts(closes), None)
            .await
            .unwrap();
        let mut want = identities(&readings);
        want.extend(identities(&[late]));
        assert_eq!(window_held(&run_items(&table).await, HOUR), want);
        let progress = read_compacted(&rollups).await.unwrap().unwrap();
        assert_eq!((progress.from_ms, progress.to_ms), (HOUR, window.end_ms()));
    }

    #[tokio::test]
    async fn a_reading_in_two_slabs_on_two_fanout_keys_is_in_the_runs_once_as_written_last() {
        // Group 0's fan-out is 2 from before the hour: its slabs are on two keys.
        let layout = slabs();
        let devices: Vec<String> = (0..40)
            .map(device)
            .filter(|d| layout.group(d) == 0)
            .take(3)
            .collect();
        let fanout = fanout_history(vec![(HOUR - HOUR_MS, 2)]);
        let shards = std::sync::Arc::new(shard_table(history(), [(group_entity(0), fanout)]));
        let at = HOUR + 10_000;
        let first = reading(&devices[0], "a", at, 1);
        let twice = |written| reading(&devices[1], "b", at, written);
        let other = reading(&devices[2], "c", at, 1);
        let table = MemoryReadings::new(None);
        // A batch written twice (a redelivery that cut it otherwise), the second copy
        // of `b` on the other key, written later.
        put_slab(&table, 0, vec![first.clone(), twice(1)]);
        put_slab(&table, 1, vec![twice(2), other.clone()]);
        let rollups = started().await;
        sealer(&table, &rollups, shards)
            .run(ts(HOUR + 3 * MINUTE_MS), None)
            .await
            .unwrap();
        let held = held(&run_items(&table).await);
        assert_eq!(
            held.keys().cloned().collect::<BTreeSet<_>>(),
            identities(&[first, twice(2), other])
        );
        let (copies, b) = &held[&(devices[1].clone(), at, "b".to_owned())];
        assert_eq!((*copies, b.written), (1, WriteOrder(2)));
    }

    #[tokio::test]
    async fn the_shared_slabs_readings_are_in_their_groups_runs_once_as_written_last() {
        // The shared partition's fan-out is 2 from before the hour: its slabs are on two
        // keys. Devices of both groups share its slabs; one reading is also in its
        // group's own slab, written earlier (a redelivery the ingest cut otherwise).
        let layout = slabs();
        let of = |g: u32| -> Vec<String> {
            (0..40)
                .map(device)
                .filter(|d| layout.group(d) == g)
                .take(2)
                .collect()
        };
        let (zero, one) = (of(0), of(1));
        let fanout = fanout_history(vec![(HOUR - HOUR_MS, 2)]);
        let shards =
            std::sync::Arc::new(shard_table(history(), [(SHARED_ENTITY.to_owned(), fanout)]));
        let at = HOUR + 10_000;
        let a = reading(&zero[0], "a", at, 1);
        let b = |written| reading(&one[0], "b", at, written);
        let (c, d) = (reading(&zero[1], "c", at, 1), reading(&one[1], "d", at, 1));
        let compacted = || async {
            let table = MemoryReadings::new(None);
            put_slab(&table, 0, vec![b(1)]);
            put_slab_of(&table, SlabOwner::Shared, 0, vec![a.clone(), b(2)]);
            put_slab_of(&table, SlabOwner::Shared, 1, vec![c.clone(), d.clone()]);
            let rollups = started().await;
            sealer(&table, &rollups, shards.clone())
                .run(ts(HOUR + 3 * MINUTE_MS), None)
                .await
                .unwrap();
            run_items(&table).await
        };
        let items = compacted().await;
        let held = held(&items);
        assert_eq!(
            held.keys().cloned().collect::<BTreeSet<_>>(),
            identities(&[a.clone(), b(2), c.clone(), d.clone()])
        );
        let (copies, kept) = &held[&(one[0].clone(), at, "b".to_owned())].clone();
        assert_eq!((*copies, kept.written), (1, WriteOrder(2)));
        // Each in its own group's run partition.
        let window = layout.window(ts(at));
        for (key, item) in &items {
            for r in store::block::expand(item.clone()).unwrap() {
                assert_eq!(key.pk, layout.run_pk(layout.group(&r.device_id), window));
            }
        }
        // The same slabs compacted again: the same items, byte for byte.
        assert_eq!(compacted().await, items);
    }

    /// Where the ingest put a reading: its device's own item, a slab, or both (a
    /// redelivery that went the other way).
    #[derive(Debug, Clone, Copy)]
    enum Held {
        Own,
        Slab,
        Both,
    }

    /// A reading of `HOUR` (device, minute, event) and where it is held: a re-send of an
    /// identity written before replaces it, as the copy written last.
    fn op() -> impl Strategy<Value = (usize, i64, u8, Held)> {
        (
            0..DEVICES,
            0i64..60,
            0u8..2,
            prop_oneof![Just(Held::Own), Just(Held::Slab), Just(Held::Both)],
        )
    }

    /// Writes `ops` in order; returns each identity's copy written last.
    fn write(
        ops: &[(usize, i64, u8, Held)],
        table: &MemoryReadings,
        shards: &MemoryShards,
    ) -> BTreeMap<(String, i64, String), Reading> {
        let mut stored = BTreeMap::new();
        for (n, &(d, minute, event, held)) in ops.iter().enumerate() {
            let at = HOUR + minute * MINUTE_MS + 1_000 * i64::try_from(d).unwrap();
            let r = reading(
                &device(d),
                &format!("e{event}"),
                at,
                i64::try_from(n).unwrap() + 1,
            );
            if matches!(held, Held::Own | Held::Both) {
                load_readings(table, shards, std::slice::from_ref(&r));
            }
            if matches!(held, Held::Slab | Held::Both) {
                put_slab(table, 0, vec![r.clone()]);
            }
            stored.insert((r.device_id.clone(), at, r.event_id.clone()), r);
        }
        stored
    }

    /// What the readings say of each device's hour.
    fn recount(stored: &BTreeMap<(String, i64, String), Reading>) -> BTreeMap<String, DeviceHour> {
        let mut out: BTreeMap<String, DeviceHour> = BTreeMap::new();
        for r in stored.values() {
            out.entry(r.device_id.clone())
                .or_insert_with(|| DeviceHour::new(r.device_id.clone(), HOUR))
                .add(r.ts.as_millis(), &r.event_id, &r.metrics, &r.tags);
        }
        out
    }

    /// The device-hours of `HOUR` a run left.
    fn sealed(rollups: &MemoryRollups) -> BTreeMap<String, DeviceHour> {
        let items = rollups.items();
        (0..DEVICES)
            .map(device)
            .filter_map(|d| {
                let item = items.get(&keys::device_hour(&d, HOUR))?;
                Some((d, item.body().unwrap()))
            })
            .collect()
    }

    /// Twelve minutes after `HOUR`'s end: its windows are compacted, and it is due.
    fn after_the_hour() -> Timestamp {
        ts(HOUR + HOUR_MS + 12 * MINUTE_MS)
    }

    /// The hour seal of an hour whose readings are in runs, in devices' own items and
    /// in both, from its start or resumed after a device (a run its deadline stopped
    /// recorded it), equals a recount of the readings.
    fn check(ops: &[(usize, i64, u8, Held)], after: Option<usize>) -> Result<(), TestCaseError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let table = MemoryReadings::new(Some(3));
            let shards = shards();
            let stored = write(ops, &table, &shards);
            let rollups = started().await;
            if let Some(after) = after {
                let progress = serde_json::json!({ "hour_ms": HOUR, "after": device(after) });
                let item = RollupItem::with_body(keys::seal_progress(), 0, &progress, None);
                rollups.put(&item.unwrap()).await.unwrap();
            }
            let report = sealer(&table, &rollups, shards)
                .run(after_the_hour(), None)
                .await
                .unwrap();
            prop_assert_eq!(report.hours_sealed, 1, "{:?}", report);
            let mut want = recount(&stored);
            if let Some(after) = after {
                want.retain(|d, _| *d > device(after));
            }
            prop_assert_eq!(sealed(&rollups), want);
            Ok(())
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        #[test]
        fn the_hour_seal_of_readings_in_runs_and_own_items_equals_a_recount(
            ops in proptest::collection::vec(op(), 1..40),
            after in proptest::option::of(0..DEVICES),
        ) {
            check(&ops, after)?;
        }
    }
}
