//! Compaction (docs/design-slabs.md): where the table's layout has slabs, each closed
//! window's slabs become runs, and an hour is sealed only once compaction has passed
//! its end.
//!
//! # Compacting a window
//! Each scheduled run, before it seals any hour, compacts the windows from the
//! progress (`store::rollup::compaction`; none yet: the first run sets it at the first
//! window still open, or at the first slab epoch's when later, and compacts nothing
//! before it, as no slab can be there) up to the first one still open
//! (`sharding::slab::SlabLayout::first_open`), oldest first, until its deadline. For
//! each slab group, every slab of the window is read, on every fan-out key the group
//! can have written it under (the most its shard-directory entry,
//! `sharding::slab::group_entity`, had from the window's start to the key rule's
//! horizon after its end, as every reader of slabs reads them), strongly consistent,
//! with the group's readings of the window's shared slabs (where the layout shares
//! slabs: the shared partition is read once, likewise, and its readings split by
//! group); every copy of a reading kept once, the one written last; the readings put in
//! run order and cut into run items (`store::slab::cut`, `store::slab::marshal`), each
//! expiring the table's retention after its last reading, as blocks do, the first under
//! the window's marker key (an item of no reading where the group has none in the
//! window: the marker tells a reader the window holds nothing below it); then the
//! fleet's fresh minute of the window
//! (`store::rollup::fresh`): the cells of every group's readings of it, each counted
//! once, which the fleet's routes answer until the hour is sealed; then the window's
//! map of the fleet's fresh last-seen (`store::rollup::seen`: the window before's in the
//! hour with this window's devices' newest readings merged in), which the device list
//! reads. Once all of these are written, the progress moves past the window: no reader
//! trusts a window's runs before.
//!
//! # Why a compaction killed, or two at once, converge
//! A closed window's slabs no longer change, and the runs are a pure function of them:
//! the same readings, in the same order, cut the same way, make the same items byte
//! for byte. The writes are unconditional puts, so a compaction killed mid-window and
//! run again, or two at once, put the same items over each other, and the progress only
//! grows (its version is its end).
//!
//! # The hour seal
//! An hour whose span meets a layout with slabs has its one-reading devices' readings
//! in its windows' runs (`r#{group}#{span}`, read by `crate::by_device`) only once each
//! window is compacted, so it is sealed only once the progress has passed its end, and
//! a run reports how far compaction got (`CompactionLagSeconds`,
//! [`crate::metrics_line`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::{StreamExt as _, TryStreamExt as _};
use rand::SeedableRng as _;
use rand::rngs::StdRng;
use sharding::backoff::Backoff;
use sharding::by_device::in_run_order;
use sharding::epoch::{FanoutHistory, REKEY_HORIZON, TableHistory};
use sharding::key::ItemKey;
use sharding::slab::{SlabLayout, SlabOwner, Window, marker_sk, run_sk};
use sharding::time::Timestamp;
use store::batch::{BatchTable, BatchWriter, Item, Put, SizedItem, WriterConfig};
use store::directory::ShardReader;
use store::item::{Encoded, Reading, ReadingItem, expiry};
use store::read::{ItemsRequest, ReadingSource};
use store::rollup::compaction::{Compacted, advance_compacted, read_compacted};
use store::rollup::fresh::FreshMinute;
use store::rollup::seen::{self, SeenChunk};
use store::rollup::{Cells, RollupQuery, RollupTable, hour_of};
use store::slab::{cut, marshal};

use crate::{RunReport, SealError, Sealer, past};

/// The delays between attempts of a compaction's writes.
const WRITE_BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(25),
    cap: Duration::from_secs(1),
    max_attempts: 8,
};

/// How long a window's writes may take, once started: within the margin an invocation
/// keeps after its deadline (`crate::invocation`), so a window begun before the
/// deadline is written whole.
const WRITE_TIME: Duration = Duration::from_secs(10);

/// The start of the first epoch of `history` whose layout has slabs (epoch ms; the
/// table's first epoch holds from the beginning of time), if any has.
fn first_slabs_ms(history: &TableHistory) -> Option<i64> {
    history
        .epochs()
        .iter()
        .find(|epoch| epoch.value.slabs.is_some())
        .map(|epoch| epoch.effective_from.as_millis())
}

fn timestamp(ms: i64) -> Timestamp {
    Timestamp::from_millis(ms).unwrap_or(if ms < 0 {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    })
}

/// Where the progress of a table's first compaction starts (epoch ms): the first
/// window still open at `now` of the layout in force then, or, when the first slab
/// epoch starts later, the window holding its start. No window before it is compacted:
/// the ingest writes no slab before a progress exists
/// (`sharding::slab::SlabLayout::writes_slabs`), and once one does, a slab it writes
/// holds readings at most `accept_secs` old, while the first open window starts at
/// least `accept_secs`, the ingest timeout and the close margin before `now`, so no
/// slab precedes the progress.
fn first_progress_ms(
    history: &TableHistory,
    slabs_from: i64,
    now: Timestamp,
    ingest_timeout: Duration,
) -> i64 {
    let open = history.at(now).slabs.map_or(now.as_millis(), |slabs| {
        slabs.first_open(now, ingest_timeout).start_ms()
    });
    if slabs_from <= open {
        return open;
    }
    let at = timestamp(slabs_from);
    history
        .at(at)
        .slabs
        .map_or(slabs_from, |slabs| slabs.window(at).start_ms())
}

/// What compaction does from a point of time on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Compact a closed window of a layout with slabs.
    Window(SlabLayout, Window),
    /// No layout with slabs is in force before this time (epoch ms): nothing to
    /// compact.
    Skip(i64),
}

/// What compaction does from `at_ms` on at `now`, `None` when nothing is closed yet.
/// Every step ends after `at_ms`.
fn next_step(
    history: &TableHistory,
    at_ms: i64,
    now: Timestamp,
    ingest_timeout: Duration,
) -> Option<Step> {
    let at = timestamp(at_ms);
    match history.at(at).slabs {
        Some(slabs) => {
            let window = slabs.window(at);
            let open = slabs.first_open(now, ingest_timeout);
            (window.start_ms() < open.start_ms()).then_some(Step::Window(slabs, window))
        }
        None => {
            let next_epoch = history
                .epochs()
                .iter()
                .map(|epoch| epoch.effective_from.as_millis())
                .find(|&from| from > at_ms);
            let to = next_epoch.unwrap_or(i64::MAX).min(now.as_millis());
            (to > at_ms).then_some(Step::Skip(to))
        }
    }
}

/// The fan-out keys `window`'s slabs of a group with fan-out `history` can be under:
/// the most in force from its start to the key rule's horizon after its end.
fn fanout_of(history: &FanoutHistory, window: Window) -> u32 {
    let last = window.end().pred().saturating_add(REKEY_HORIZON);
    history.max_over(window.start(), last, 1)
}

/// The run items of one group's readings of a window, in run order, the first under the
/// window's marker key (`#{window}`, below every device's: a reader's descending read
/// ends there, `sharding::slab::RunCover`), so a window of readings pays no item of
/// its own to mark it; where the group has no reading in the window, its marker is an
/// item of none (`store::slab::marker`). A layout without `first_run_marks` (stored
/// before the rule) keys every run by its first device and marks every window with an
/// item of none, as compaction did before.
fn run_items(
    slabs: &SlabLayout,
    group: u32,
    window: Window,
    members: &[Reading],
    retention: Duration,
) -> Result<Vec<(ItemKey, Encoded)>, SealError> {
    let pk = slabs.run_pk(group, window);
    // The longest sort key a run of the window can have: its longest device, and a
    // part no smaller than any (there are fewer parts than members).
    let longest = members
        .iter()
        .map(|r| r.device_id.as_str())
        .max_by_key(|d| d.len())
        .unwrap_or_default();
    let longest_sk = run_sk(
        longest,
        window,
        u32::try_from(members.len()).unwrap_or(u32::MAX),
    );
    let cuts = cut(
        members,
        slabs.max_bytes as usize,
        (pk.len(), longest_sk.len()),
    )?;
    // The window's marker: its first run, or, where the group has no reading in it,
    // an item of none. It expires with the window's last millisecond.
    let marker_ttl = expiry(window.end().pred(), retention);
    let mut items = Vec::with_capacity(cuts.len().max(1));
    for (part, range) in cuts.into_iter().enumerate() {
        let run = &members[range];
        let Some(last) = run.last() else {
            continue;
        };
        let (sk, ttl) = if part == 0 && slabs.first_run_marks {
            (marker_sk(window), marker_ttl)
        } else {
            let sk = run_sk(
                &run[0].device_id,
                window,
                u32::try_from(part).unwrap_or(u32::MAX),
            );
            (sk, expiry(last.ts, retention))
        };
        let encoded = marshal(run, &pk, &sk, ttl)?;
        items.push((ItemKey { pk: pk.clone(), sk }, encoded));
    }
    if items.is_empty() || !slabs.first_run_marks {
        let sk = marker_sk(window);
        let marker = store::slab::marker(&pk, &sk, marker_ttl);
        items.push((ItemKey { pk, sk }, marker));
    }
    Ok(items)
}

/// What one group's readings of a window make: its run items (or its marker), their cells,
/// and each device's newest reading's time.
struct GroupWindow {
    items: Vec<(ItemKey, Encoded)>,
    cells: Cells,
    last_seen: BTreeMap<String, i64>,
}

/// `group`'s readings of `window`, read from its slabs and the shared ones, each once
/// (the copy written last), in run order. A reading outside the window, which no slab
/// of the ingest holds, is left out: a run holds its window's readings alone.
fn window_readings(
    group: u32,
    window: Window,
    mut readings: Vec<ReadingItem>,
) -> Result<Vec<Reading>, SealError> {
    let (from, to) = (window.start_ms(), window.end_ms());
    let all = readings.len();
    readings.retain(|r| (from..to).contains(&r.ts_ms));
    if readings.len() < all {
        tracing::warn!(
            group,
            window = %window.label(),
            left_out = all - readings.len(),
            "slab readings outside their window"
        );
    }
    in_run_order(&mut readings);
    Ok(readings
        .into_iter()
        .map(ReadingItem::into_reading)
        .collect::<Result<_, _>>()?)
}

/// The cells of `members`, readings of one window each once in run order: every
/// reading's metrics, and the distinct devices that sent them.
fn cells_of(members: &[Reading]) -> Cells {
    let mut cells = Cells::default();
    let mut last: Option<&str> = None;
    for reading in members {
        cells.add_reading(&reading.metrics);
        if last != Some(reading.device_id.as_str()) {
            cells.devices += 1;
            last = Some(&reading.device_id);
        }
    }
    cells
}

impl<S: ReadingSource + BatchTable, D: ShardReader, R: RollupTable> Sealer<S, D, R> {
    /// The end of the hours due (`due`, epoch ms) that the hour seal may seal: every
    /// hour before the first layout with slabs, and after it those that compaction has
    /// passed, once this run has compacted what it can until `deadline`. Records
    /// compaction's progress in `report`. A layout with slabs and no ingest timeout
    /// configured fails the run: nothing could compact it.
    pub(crate) async fn compacted_end(
        &self,
        history: &TableHistory,
        due: i64,
        now: Timestamp,
        deadline: Option<Instant>,
        report: &mut RunReport,
    ) -> Result<i64, SealError> {
        let Some(slabs_from) = first_slabs_ms(history) else {
            return Ok(due);
        };
        let Some(ingest_timeout) = self.settings.ingest_timeout else {
            return Err(SealError::NoIngestTimeout);
        };
        let compacted = self
            .compact(history, slabs_from, ingest_timeout, now, deadline)
            .await?;
        report.compacted_to_ms = compacted.map(|c| c.to_ms);
        let through = compacted.map_or(slabs_from, |c| c.to_ms.max(slabs_from));
        Ok(due.min(hour_of(through)))
    }

    /// Compacts every closed window from the progress on, oldest first, until
    /// `deadline`, moving the progress past each; returns the progress.
    async fn compact(
        &self,
        history: &TableHistory,
        slabs_from: i64,
        ingest_timeout: Duration,
        now: Timestamp,
        deadline: Option<Instant>,
    ) -> Result<Option<Compacted>, SealError> {
        let mut progress = read_compacted(&self.rollups).await?;
        if progress.is_none() {
            let start = first_progress_ms(history, slabs_from, now, ingest_timeout);
            let first = Compacted {
                from_ms: start,
                to_ms: start,
            };
            progress = match advance_compacted(&self.rollups, &first).await? {
                store::Written::Applied => Some(first),
                // Another first compaction set it first.
                store::Written::Refused => read_compacted(&self.rollups).await?,
            };
        }
        let Some(started) = progress else {
            return Ok(None);
        };
        let from_ms = started.from_ms;
        let mut at = started.to_ms;
        let mut fanouts: Vec<(SlabOwner, FanoutHistory)> = Vec::new();
        while let Some(step) = next_step(history, at, now, ingest_timeout) {
            if past(deadline) {
                break;
            }
            let to_ms = match step {
                Step::Skip(to_ms) => to_ms,
                Step::Window(slabs, window) => {
                    let mut owners: Vec<SlabOwner> =
                        (0..slabs.groups.get()).map(SlabOwner::Group).collect();
                    if slabs.shared_slabs {
                        owners.push(SlabOwner::Shared);
                    }
                    for owner in owners {
                        if !fanouts.iter().any(|(o, _)| *o == owner) {
                            let history = self.directory.fanout(&owner.entity(), now).await?;
                            fanouts.push((owner, history));
                        }
                    }
                    self.compact_window(&slabs, window, &fanouts).await?;
                    window.end_ms()
                }
            };
            let moved = Compacted { from_ms, to_ms };
            match advance_compacted(&self.rollups, &moved).await? {
                store::Written::Applied => progress = Some(moved),
                // Another compaction is as far or further: go on from where it is.
                store::Written::Refused => progress = read_compacted(&self.rollups).await?,
            }
            at = progress.map_or(to_ms, |c| c.to_ms.max(to_ms));
        }
        Ok(progress)
    }

    /// Writes every group's runs of `window`, then their markers.
    async fn compact_window(
        &self,
        slabs: &SlabLayout,
        window: Window,
        fanouts: &[(SlabOwner, FanoutHistory)],
    ) -> Result<(), SealError> {
        let fanout = |owner: SlabOwner| {
            fanouts
                .iter()
                .find(|(o, _)| *o == owner)
                .map_or(1, |(_, history)| fanout_of(history, window))
        };
        // The shared slabs' readings, each in its device's group.
        let mut shared: BTreeMap<u32, Vec<ReadingItem>> = BTreeMap::new();
        if slabs.shared_slabs {
            let owner = SlabOwner::Shared;
            for reading in self.slab_items(owner, fanout(owner), window).await? {
                shared
                    .entry(slabs.group(&reading.device_id))
                    .or_default()
                    .push(reading);
            }
        }
        let reads: Vec<_> = (0..slabs.groups.get())
            .map(|group| {
                let owner = SlabOwner::Group(group);
                let of_shared = shared.remove(&group).unwrap_or_default();
                self.group_items(slabs, group, (fanout(owner), of_shared), window)
            })
            .collect();
        let groups: Vec<GroupWindow> = futures::stream::iter(reads)
            .buffered(self.settings.concurrency)
            .try_collect()
            .await?;
        let mut fleet = Cells::default();
        let mut items = Vec::new();
        let mut last_seen = BTreeMap::new();
        for group in groups {
            fleet.merge(&group.cells);
            items.extend(group.items);
            last_seen.extend(group.last_seen);
        }
        // Runs first, the items under the windows' marker keys once every other run is
        // stored, then the fleet's minute: all before the progress moves past the
        // window.
        let (runs, markers): (Vec<_>, Vec<_>) = items
            .into_iter()
            .partition(|(key, _)| !key.sk.starts_with(sharding::slab::MARKER_PREFIX));
        self.write_items(runs, window).await?;
        self.write_items(markers, window).await?;
        let minute = FreshMinute {
            start_ms: window.start_ms(),
            cells: fleet,
        };
        let ttl = expiry(window.end().pred(), self.settings.retention);
        self.rollups.put(&minute.item(Some(ttl))?).await?;
        self.write_seen(slabs, window, last_seen).await
    }

    /// Writes `window`'s map of the fleet's fresh last-seen (`store::rollup::seen`): the
    /// map of the window before it in the hour, where there is one, with `last_seen`,
    /// the window's own devices' newest readings, merged in. A chunk of that map that
    /// does not read back is left out with a warning: its devices' `last_seen` then
    /// moves at the hour's seal, and no stored item stops compaction.
    async fn write_seen(
        &self,
        slabs: &SlabLayout,
        window: Window,
        mut last_seen: BTreeMap<String, i64>,
    ) -> Result<(), SealError> {
        let (start, end) = (window.start_ms(), window.end_ms());
        let before = start - (end - start);
        if hour_of(before) == hour_of(start) {
            let mut q = RollupQuery::partition(seen::partition(hour_of(start)), true);
            q.sk_prefix = Some(seen::window_prefix(before));
            loop {
                let page = self.rollups.query(&q).await?;
                for item in &page.items {
                    let chunk = match SeenChunk::of(item) {
                        Ok(chunk) => chunk,
                        Err(e) => {
                            tracing::warn!(error = %e, "a seen map's chunk left out");
                            continue;
                        }
                    };
                    for (device, at) in chunk.last_seen() {
                        let newest = last_seen.entry(device.to_owned()).or_insert(at);
                        *newest = (*newest).max(at);
                    }
                }
                match page.last_sk {
                    Some(last) => q.after = Some(last),
                    None => break,
                }
            }
        }
        let ttl = slabs.expires_at(window);
        for chunk in seen::chunks(start, &last_seen) {
            self.rollups.put(&chunk.item(Some(ttl))?).await?;
        }
        Ok(())
    }

    /// The run items and marker of `group`'s readings of `window`, its slabs on `fanout`
    /// keys and its readings of the shared slabs (`shared`), with the cells of those
    /// readings (a group's devices are its own, so the groups' device counts add up)
    /// and each device's newest.
    async fn group_items(
        &self,
        slabs: &SlabLayout,
        group: u32,
        (fanout, shared): (u32, Vec<ReadingItem>),
        window: Window,
    ) -> Result<GroupWindow, SealError> {
        let mut readings = self
            .slab_items(SlabOwner::Group(group), fanout, window)
            .await?;
        readings.extend(shared);
        let members = window_readings(group, window, readings)?;
        let items = run_items(slabs, group, window, &members, self.settings.retention)?;
        // In run order: a device's newest reading is its last.
        let mut last_seen: BTreeMap<String, i64> = BTreeMap::new();
        for reading in &members {
            last_seen.insert(reading.device_id.clone(), reading.ts.as_millis());
        }
        Ok(GroupWindow {
            items,
            cells: cells_of(&members),
            last_seen,
        })
    }

    /// Every reading of `owner`'s slabs of `window` on its `fanout` keys, as stored
    /// (copies and all), read strongly consistent.
    async fn slab_items(
        &self,
        owner: SlabOwner,
        fanout: u32,
        window: Window,
    ) -> Result<Vec<ReadingItem>, SealError> {
        let mut readings: Vec<ReadingItem> = Vec::new();
        for j in 0..fanout {
            let mut request = ItemsRequest {
                pk: owner.pk(j, window),
                sk_at_most: None,
                limit: None,
                ascending: true,
                start_after: None,
                consistent: true,
            };
            loop {
                let page = self.source.query_items(&request).await?;
                for stored in page.items {
                    readings.extend(store::block::expand(stored.item)?);
                }
                match page.last_key {
                    Some(last) => request.start_after = Some(last),
                    None => break,
                }
            }
        }
        Ok(readings)
    }

    /// Puts `items` unconditionally, through the batch writer.
    async fn write_items(
        &self,
        items: Vec<(ItemKey, Encoded)>,
        window: Window,
    ) -> Result<(), SealError> {
        if items.is_empty() {
            return Ok(());
        }
        let (keys, encoded): (Vec<ItemKey>, Vec<Encoded>) = items.into_iter().unzip();
        let remake: Vec<Item> = encoded.iter().map(|e| e.item.clone()).collect();
        let puts = keys
            .iter()
            .zip(encoded)
            .map(|(key, e)| Ok(Put::new(key, SizedItem::new(e.item, e.size)?)))
            .collect::<Result<Vec<_>, store::batch::ItemTooLarge>>()
            .map_err(|e| SealError::RunsNotWritten {
                window: window.label(),
                reason: e.to_string(),
            })?;
        let writer = BatchWriter::new(
            &self.source,
            WriterConfig {
                max_inflight: self.settings.concurrency,
                backoff: WRITE_BACKOFF,
            },
        );
        let until = tokio::time::Instant::now() + WRITE_TIME;
        let mut rng = StdRng::from_rng(&mut rand::rng());
        let report = writer.write(puts, until, &mut rng, &remake).await;
        match report.outcomes.iter().find(|o| !o.is_written()) {
            None => Ok(()),
            Some(outcome) => Err(SealError::RunsNotWritten {
                window: window.label(),
                reason: format!("{outcome:?}"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use store::WriteOrder;

    use super::*;

    fn reading(device: &str, ts_ms: i64) -> Reading {
        Reading {
            device_id: device.to_owned(),
            event_id: format!("e{ts_ms}"),
            ts: timestamp(ts_ms),
            metrics: BTreeMap::from([(
                "kwh".to_owned(),
                store::Decimal::parse("1234.5").expect("a decimal"),
            )]),
            tags: BTreeMap::new(),
            written: WriteOrder(0),
        }
    }

    #[test]
    fn a_windows_first_run_is_its_marker_and_an_empty_window_gets_a_marker_of_none() {
        let slabs = SlabLayout::default();
        let window = slabs.window(timestamp(1_782_090_000_000));
        let retention = Duration::from_secs(30 * 86_400);
        // Enough readings for several items of 1 KB.
        let members: Vec<Reading> = (0..400)
            .map(|i| reading(&format!("dev-{i:04}"), window.start_ms() + i))
            .collect();
        let items = run_items(&slabs, 3, window, &members, retention).expect("runs");
        assert!(items.len() > 2, "{} items", items.len());
        let pk = slabs.run_pk(3, window);
        assert!(items.iter().all(|(key, _)| key.pk == pk));
        // The first run under the marker's key, a run like any; no other marker.
        assert_eq!(items[0].0.sk, marker_sk(window));
        assert!(store::slab::is_slab(&items[0].1.item));
        assert!(!store::slab::is_marker(&items[0].1.item));
        for (part, (key, _)) in items.iter().enumerate().skip(1) {
            assert!(key.sk.ends_with(&format!("#{part:04}")), "{}", key.sk);
            assert_ne!(key.sk, marker_sk(window));
        }
        let mut held = Vec::new();
        for (_, encoded) in items {
            held.extend(store::block::expand(encoded.item).expect("a run"));
        }
        assert_eq!(held.len(), members.len());
        // No reading: the marker alone, holding none.
        let empty = run_items(&slabs, 3, window, &[], retention).expect("a marker");
        assert_eq!(empty.len(), 1);
        assert_eq!(empty[0].0.sk, marker_sk(window));
        assert!(store::slab::is_marker(&empty[0].1.item));
        // A layout stored before the rule: every run under its first device, then a
        // marker of none.
        let stored = SlabLayout {
            first_run_marks: false,
            ..slabs
        };
        let items = run_items(&stored, 3, window, &members, retention).expect("runs");
        let (marker, runs) = items.split_last().expect("items");
        assert_eq!(marker.0.sk, marker_sk(window));
        assert!(store::slab::is_marker(&marker.1.item));
        assert!(runs[0].0.sk.starts_with("dev-0000#"), "{}", runs[0].0.sk);
        assert!(runs.iter().all(|(key, _)| key.sk != marker_sk(window)));
    }
}
