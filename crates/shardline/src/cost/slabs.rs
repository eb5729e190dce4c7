//! The slab layout's tiers (docs/design-slabs.md): what the ingest's slabs and the
//! compaction's runs of a fleet are, sized by the store's own encoders
//! (`cost::sample::slab_items`, `store::slab::marshal`), and what they use in a month.
//!
//! - A **slab** holds the readings of one batch whose devices share a slab group (and
//!   a window: a batch is taken as within one). A batch of `n` readings falls into
//!   `G(1 − (1 − 1/G)^n)` of the `G` groups (devices hash evenly), each such slab
//!   holding `n` over that many readings, cut at the layout's max bytes.
//! - A **run** holds a closed window's readings of a group: the fleet's readings of a
//!   window over `G`, cut at max bytes, the first under the window's marker key (a
//!   marker of its own only where the group has no reading in the window). The compaction reads each group's slabs of each window once,
//!   strongly consistent: their bytes at 4 KB a read unit, one at least.
//! - The **fleet's fresh items** of each window (docs/design-slabs.md, "The fleet's
//!   minutes fresh"): its fresh minute, a write unit, and its map of every device's
//!   newest reading in the hour so far (`store::rollup::seen`), sized by the store's
//!   encoder and DynamoDB's rule for the devices seen by then, and the map before it,
//!   read strongly consistent.

use anyhow::Context as _;
use serde::Serialize;
use sharding::capacity::MONTH_SECS;
use sharding::slab::{self, SlabLayout, SlabOwner, Window};
use sharding::time::Timestamp;

use super::bill::{Basis, Service, Use};
use super::model::{GB, Packing, Shape};
use super::prices::Key;
use super::sample::{self, MAX_READINGS_A_MESSAGE, STORAGE_OVERHEAD_BYTES, SlabKeys, Stored};

/// DynamoDB's read unit: 4 KB read strongly consistent.
const READ_UNIT_BYTES: f64 = 4096.0;

/// What a table of slabs stores a fleet's readings as.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "priced_as", rename_all = "snake_case")]
pub enum SlabPricing {
    /// Slabs and runs.
    Slabs(Box<SlabTiers>),
    /// A device's share of a batch takes more than a write unit's bytes
    /// (`device_share_bytes`, as the pack stage packs it): the ingest keeps its blocks.
    Blocks { device_share_bytes: usize },
}

/// A fleet's slabs and runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlabTiers {
    /// Slab groups (`--slab-groups`, `SLAB_GROUPS`).
    pub groups: u32,
    /// A device's readings in one batch, and their blocks' bytes: at most a write
    /// unit's, so they go to slabs.
    pub device_readings_a_batch: usize,
    pub device_share_bytes: usize,
    /// The groups one batch's readings fall into.
    pub groups_a_batch: f64,
    /// Whether each group's slab of a batch would fill under half an item, so the
    /// batch writes one shared slab of them all (`sharding::slab::thin_groups`).
    pub shared: bool,
    /// The slab partitions one batch writes: `groups_a_batch`, or 1 when shared.
    pub partitions_a_batch: f64,
    /// A batch's readings of one partition (a group's, or all of them when shared).
    pub readings_a_slab: f64,
    /// The items of one partition's readings of a batch.
    pub slab: Stored,
    /// A group's readings of a window, rounded up.
    pub run_readings: usize,
    /// Their run items.
    pub run: Stored,
    /// A marker's bytes (`store::slab::marker`).
    pub marker_bytes: usize,
    /// A group's windows a month (each compacted once, with a marker).
    pub group_windows_a_month: f64,
    /// The compaction's read units of one group's slabs of a window.
    pub compaction_read_units: f64,
    /// The ingest's slab items, write units and bytes an invocation.
    pub slab_items_an_invocation: f64,
    pub slab_write_units_an_invocation: f64,
    pub slab_bytes_an_invocation: f64,
    /// The fleet's fresh minutes and last-seen maps.
    pub fresh: FreshItems,
}

/// The fleet's fresh items of the windows compaction passes: a fresh minute and a map
/// of every device's newest reading in the hour so far, a window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FreshItems {
    /// Windows a month: a fresh minute and a map each.
    pub windows_a_month: f64,
    /// A window's map's write units and bytes, averaged over an hour's windows (a map
    /// holds the devices seen in the hour by its window).
    pub map_write_units: f64,
    pub map_bytes: f64,
    /// The read units of the map before it, read strongly consistent (none at an
    /// hour's first window), averaged likewise.
    pub map_read_units: f64,
}

/// Maps of at most this many devices are encoded whole; a larger one is priced from
/// one this large, in proportion.
const MAP_SAMPLE_DEVICES: usize = 20_000;

/// The bytes (DynamoDB's rule) and write units of a map of `devices` devices whose ids
/// are as long as the sample's, each at the latest time of the hour (the most digits).
fn map_size(devices: usize, hour_ms: i64, window_ms: i64) -> anyhow::Result<(f64, f64)> {
    let n = devices.min(MAP_SAMPLE_DEVICES);
    if n == 0 {
        return Ok((0.0, 0.0));
    }
    let width = sample::DEVICE_ID.len().saturating_sub("device-".len());
    let map: std::collections::BTreeMap<String, i64> = (0..n)
        .map(|i| (format!("device-{i:0width$}"), hour_ms + 3_599_999))
        .collect();
    let (mut bytes, mut units) = (0.0, 0.0);
    for chunk in store::rollup::seen::chunks(window_ms, &map) {
        let (head, _) = store::rollup::stored::rows(&chunk.item(Some(i64::MAX / 2))?);
        let size = store::rollup::stored::row_size(&head) as f64;
        bytes += size;
        units += (size / store::size::WCU_BYTES as f64).ceil();
    }
    let scale = devices as f64 / n as f64;
    Ok((bytes * scale, units * scale))
}

/// The fleet's fresh items of `shape` under `layout`.
fn fresh_items(shape: &Shape, layout: &SlabLayout) -> anyhow::Result<FreshItems> {
    let window_secs = f64::from(layout.window_minutes) * 60.0;
    let windows_an_hour = (3600.0 / window_secs).round().max(1.0) as usize;
    let hour_ms = sample::START_MS - sample::START_MS.rem_euclid(3_600_000);
    let last_window = hour_ms + 3_600_000 - i64::from(layout.window_minutes) * 60_000;
    let seen = |k: usize| {
        let part = ((k + 1) as f64 * window_secs / shape.interval_secs).min(1.0);
        (shape.devices * part).ceil() as usize
    };
    let maps = (0..windows_an_hour)
        .map(|k| map_size(seen(k), hour_ms, last_window))
        .collect::<anyhow::Result<Vec<(f64, f64)>>>()?;
    let write_units: f64 = maps.iter().map(|(_, units)| units).sum();
    let bytes: f64 = maps.iter().map(|(bytes, _)| bytes).sum();
    // Each window but an hour's first reads the map of the window before.
    let read_units: f64 = maps[..maps.len() - 1]
        .iter()
        .map(|(before, _)| (before / READ_UNIT_BYTES).ceil())
        .sum();
    let n = windows_an_hour as f64;
    Ok(FreshItems {
        windows_a_month: MONTH_SECS / window_secs,
        map_write_units: write_units / n,
        map_bytes: bytes / n,
        map_read_units: read_units / n,
    })
}

/// A batch's readings, the groups they fall into, and a device's readings in it.
struct BatchOf {
    readings: f64,
    groups: f64,
    device_readings: u32,
}

/// A batch's slabs.
struct BatchSlabs {
    /// Whether the groups' slabs are thin and the batch writes one shared slab.
    shared: bool,
    /// The partitions they are written to.
    partitions: f64,
    /// Each partition's readings.
    readings_a_slab: f64,
    /// Each partition's items.
    slab: Stored,
}

/// A batch's slabs. Every group is alike: each thin (`sharding::slab::is_thin`), so
/// that the batch writes one shared slab (`sharding::slab::thin_groups`), or none.
fn batch_slabs(
    shape: &Shape,
    batch: &BatchOf,
    group: u32,
    layout: &SlabLayout,
    window: Window,
) -> anyhow::Result<BatchSlabs> {
    let readings_a_slab = batch.readings / batch.groups;
    let owner = SlabOwner::Group(group);
    let slab = slab_of(
        owner,
        readings_a_slab,
        shape,
        batch.device_readings,
        layout,
        window,
    )?;
    let shared =
        layout.shared_slabs && batch.groups >= 2.0 && slab::is_thin(slab.bytes, layout.max_bytes);
    if !shared {
        return Ok(BatchSlabs {
            shared,
            partitions: batch.groups,
            readings_a_slab,
            slab,
        });
    }
    let (owner, n) = (SlabOwner::Shared, batch.readings);
    Ok(BatchSlabs {
        shared,
        partitions: 1.0,
        readings_a_slab: n,
        slab: slab_of(owner, n, shape, batch.device_readings, layout, window)?,
    })
}

/// The items of a batch's slab of `n` readings (`device_readings` a device) in
/// `owner`'s partition.
fn slab_of(
    owner: SlabOwner,
    n: f64,
    shape: &Shape,
    device_readings: u32,
    layout: &SlabLayout,
    window: Window,
) -> anyhow::Result<Stored> {
    let interval_ms = (shape.interval_secs * 1000.0).round() as i64;
    let key = |_: &str, _: usize| (owner.pk(0, window), "0".repeat(16));
    sample::slab_items(
        n.ceil() as usize,
        device_readings as usize,
        shape.metrics,
        shape.reading_bytes,
        interval_ms,
        &SlabKeys {
            // The ingest's: the longest key a fan-out can give, a digest's length.
            key_lens: (owner.pk(u32::MAX, window).len(), 16),
            max_bytes: layout.max_bytes as usize,
            key: &key,
            ttl: layout.expires_at(window),
        },
    )
}

/// How the fleet of `shape` is stored in a table of slabs, for batches of
/// `messages_an_invocation`, `invocations` a month.
pub fn price(
    shape: &Shape,
    messages_an_invocation: f64,
    invocations: f64,
) -> anyhow::Result<SlabPricing> {
    let layout = SlabLayout {
        groups: std::num::NonZeroU32::new(shape.slab_groups).context("--slab-groups")?,
        ..SlabLayout::default()
    };
    let interval_ms = (shape.interval_secs * 1000.0).round() as i64;
    let r = f64::from(shape.readings_a_message);
    // A batch gathers messages for at most the batching window; a device's messages in
    // it are those it sends in that span, one at least.
    let message_rate = shape.devices / (shape.interval_secs * r);
    let span = (messages_an_invocation / message_rate).min(shape.batching_window_secs);
    let device_messages = (span * message_rate / shape.devices).ceil().max(1.0);
    let device_readings = (device_messages * r).min(f64::from(MAX_READINGS_A_MESSAGE)) as u32;
    let share = sample::sample(
        device_readings,
        shape.metrics,
        shape.reading_bytes,
        interval_ms,
        Packing::Blocks,
    )?;
    if share.item_bytes > store::size::WCU_BYTES {
        return Ok(SlabPricing::Blocks {
            device_share_bytes: share.item_bytes,
        });
    }
    let g = f64::from(layout.groups.get());
    let n = messages_an_invocation * r;
    let groups_a_batch = g * (1.0 - (1.0 - 1.0 / g).powf(n));
    let window = Window::holding(
        Timestamp::from_millis(sample::START_MS)?,
        layout.window_minutes,
    );
    // The longest group's keys: the last group's.
    let group = layout.groups.get() - 1;
    let batch = BatchOf {
        readings: n,
        groups: groups_a_batch,
        device_readings,
    };
    let BatchSlabs {
        shared,
        partitions: partitions_a_batch,
        readings_a_slab,
        slab,
    } = batch_slabs(shape, &batch, group, &layout, window)?;
    let window_secs = f64::from(layout.window_minutes) * 60.0;
    let run_readings = (shape.devices * window_secs / shape.interval_secs / g).ceil() as usize;
    let device_a_window = (window_secs / shape.interval_secs).ceil().max(1.0) as usize;
    let run_pk = layout.run_pk(group, window);
    let run_key = |device: &str, part: usize| {
        let part = u32::try_from(part).unwrap_or(u32::MAX);
        (run_pk.clone(), slab::run_sk(device, window, part))
    };
    let run = sample::slab_items(
        run_readings,
        device_a_window,
        shape.metrics,
        shape.reading_bytes,
        interval_ms,
        &SlabKeys {
            // The compaction's: its longest device, a part no smaller than any.
            key_lens: (
                run_pk.len(),
                slab::run_sk(
                    sample::DEVICE_ID,
                    window,
                    u32::try_from(run_readings).unwrap_or(u32::MAX),
                )
                .len(),
            ),
            max_bytes: layout.max_bytes as usize,
            key: &run_key,
            ttl: layout.expires_at(window),
        },
    )?;
    let group_windows = g * MONTH_SECS / window_secs;
    let invocations_a_window = invocations * window_secs / MONTH_SECS;
    let slab_bytes = partitions_a_batch * slab.bytes as f64;
    let read = invocations_a_window * slab_bytes / g / READ_UNIT_BYTES;
    Ok(SlabPricing::Slabs(Box::new(SlabTiers {
        groups: layout.groups.get(),
        device_readings_a_batch: device_readings as usize,
        device_share_bytes: share.item_bytes,
        groups_a_batch,
        shared,
        partitions_a_batch,
        readings_a_slab,
        slab,
        run_readings,
        run,
        marker_bytes: store::slab::marker(
            &run_pk,
            &slab::marker_sk(window),
            layout.expires_at(window),
        )
        .size,
        group_windows_a_month: group_windows,
        compaction_read_units: read.ceil().max(1.0),
        slab_items_an_invocation: partitions_a_batch * slab.items as f64,
        slab_write_units_an_invocation: partitions_a_batch * slab.write_units as f64,
        slab_bytes_an_invocation: slab_bytes,
        fresh: fresh_items(shape, &layout)?,
    })))
}

fn modelled(s: &str) -> Basis {
    Basis::Modelled(s.to_owned())
}

impl SlabTiers {
    /// The bytes the seal reads a reading: the runs'.
    pub fn run_bytes_a_reading(&self) -> f64 {
        self.run.bytes as f64 / self.run_readings.max(1) as f64
    }

    /// Write units a reading: its slab's and its run's (with any marker of its own), and
    /// its share of the fleet's fresh items.
    pub fn write_units_a_reading(&self, readings_a_month: f64, invocations: f64) -> f64 {
        (invocations * self.slab_write_units_an_invocation
            + self.compaction_write_units()
            + self.fresh_write_units())
            / readings_a_month
    }

    /// Write units a month of the fleet's fresh minutes (one a window) and maps.
    fn fresh_write_units(&self) -> f64 {
        self.fresh.windows_a_month * (1.0 + self.fresh.map_write_units)
    }

    /// Bytes DynamoDB bills as stored a reading kept for the retention: its runs' and
    /// markers', with each item's overhead.
    pub fn stored_bytes_a_reading(&self) -> f64 {
        self.group_window_bytes() as f64 / self.run_readings.max(1) as f64
    }

    /// The markers of their own a group-window writes: one where it has no run (its
    /// first run is its marker otherwise).
    fn own_markers(&self) -> usize {
        usize::from(self.run.items == 0)
    }

    fn compaction_write_units(&self) -> f64 {
        self.group_windows_a_month * (self.run.write_units + self.own_markers()) as f64
    }

    /// Bytes DynamoDB bills as stored of a group's window: its runs, or its marker,
    /// with each item's overhead.
    fn group_window_bytes(&self) -> usize {
        let run = self.run.bytes + STORAGE_OVERHEAD_BYTES * self.run.items;
        run + self.own_markers() * (self.marker_bytes + STORAGE_OVERHEAD_BYTES)
    }

    /// Bytes DynamoDB bills as stored a month of runs and markers, with each item's
    /// overhead.
    fn run_bytes_a_month(&self) -> f64 {
        self.group_windows_a_month * self.group_window_bytes() as f64
    }

    /// DynamoDB's lines of the slabs and runs: the ingest's slab writes, the
    /// compaction's reads and writes, and their storage.
    /// How the ingest's slab writes are modelled.
    fn slab_note(&self) -> String {
        format!(
            "the store's encoders: a batch's readings fall into {:.2} of {} slab groups, {} \
             of {} readings of distinct devices (store::slab::marshal), {} write unit(s)",
            self.groups_a_batch,
            self.groups,
            if self.shared {
                "each group's slab under half an item, so one shared slab"
            } else {
                "each a slab"
            },
            self.readings_a_slab.ceil(),
            self.slab.write_units
        )
    }

    pub fn uses(&self, shape: &Shape, invocations: f64) -> Vec<Use> {
        let days = MONTH_SECS / 86_400.0;
        let layout = SlabLayout::default();
        // A slab is kept until it expires, SLAB_EXPIRY_HOURS after its window's end:
        // half a window more, on average, after it is written.
        let kept_secs =
            f64::from(layout.expiry_hours) * 3600.0 + f64::from(layout.window_minutes) * 30.0;
        let slab_stored = self.slab_bytes_an_invocation
            + STORAGE_OVERHEAD_BYTES as f64 * self.slab_items_an_invocation;
        let slabs_gb = invocations / MONTH_SECS * kept_secs * slab_stored / GB;
        let runs_gb = self.run_bytes_a_month() / days * shape.retention_days / GB;
        vec![
            Use::new(
                Service::DynamoDb,
                "ingest: write units (slabs)",
                invocations * self.slab_write_units_an_invocation,
                Key::DynamodbWriteRequestUnits,
                modelled(&self.slab_note()),
            ),
            Use::new(
                Service::DynamoDb,
                "sealer: write units (runs and markers)",
                self.compaction_write_units(),
                Key::DynamodbWriteRequestUnits,
                modelled(&format!(
                    "the store's encoders: a group's {} readings of a window in {} run \
                     item(s) of {} write unit(s), the first under the window's marker key",
                    self.run_readings, self.run.items, self.run.write_units
                )),
            ),
            Use::new(
                Service::DynamoDb,
                "sealer: write units (fresh minutes and last-seen maps)",
                self.fresh_write_units(),
                Key::DynamodbWriteRequestUnits,
                modelled(&format!(
                    "a window's fresh minute (1) and its map of the devices seen in the \
                     hour by then (store::rollup::seen, DynamoDB's size rule): {:.1} write \
                     units on average over an hour's windows",
                    self.fresh.map_write_units
                )),
            ),
            Use::new(
                Service::DynamoDb,
                "sealer: read units (last-seen maps)",
                self.fresh.windows_a_month * self.fresh.map_read_units,
                Key::DynamodbReadRequestUnits,
                modelled(
                    "the map of the window before, in the same hour, read strongly \
                     consistent at 4 KB a read unit",
                ),
            ),
            Use::new(
                Service::DynamoDb,
                "sealer: read units (compaction's reads of slabs)",
                self.group_windows_a_month * self.compaction_read_units,
                Key::DynamodbReadRequestUnits,
                modelled(
                    "a group's slabs of a window read once, strongly consistent: their \
                     bytes at 4 KB a read unit, one at least",
                ),
            ),
            Use::new(
                Service::DynamoDb,
                "storage: runs and markers (retention's worth)",
                runs_gb,
                Key::DynamodbStorageGbMonth,
                modelled("the store's encoders' item bytes + 100 bytes an item"),
            ),
            Use::new(
                Service::DynamoDb,
                "storage: last-seen maps (SLAB_EXPIRY_HOURS' worth)",
                f64::from(layout.expiry_hours) * 3600.0 / MONTH_SECS
                    * self.fresh.windows_a_month
                    * self.fresh.map_bytes
                    / GB,
                Key::DynamodbStorageGbMonth,
                modelled(
                    "each window's map, DynamoDB's size rule, kept until 48 h after its \
                     window (TTL)",
                ),
            ),
            Use::new(
                Service::DynamoDb,
                "storage: slabs (SLAB_EXPIRY_HOURS' worth)",
                slabs_gb,
                Key::DynamodbStorageGbMonth,
                modelled(
                    "the store's encoders' item bytes + 100 bytes an item, each kept until \
                     48 h after its window (TTL's later deletion not priced)",
                ),
            ),
        ]
    }
}
