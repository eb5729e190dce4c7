//! The sealer: keeps the derived items of `store::rollup` (device-hours, device
//! summaries, fleet parts, the device directory, the watermark) equal to what the
//! readings say, once per hour and again for each late reading.
//!
//! # A run
//! 1. **Late marks** (`crate::marks`). A reading written after its hour was sealed
//!    leaves a mark; for each mark of a sealed hour, the device-hour is sealed again
//!    from its readings, its fleet part recomputed, and the mark deleted if no newer
//!    mark replaced it meanwhile.
//! 2. **Hours** (`crate::hours`). Each hour that ended at least the lateness horizon ago
//!    and is not yet sealed, oldest first, at most [`Settings::max_hours_per_run`]:
//!    every reading of the hour is read once, through the read plan over every device
//!    (`sharding::read_plan::plan_all`), device by device ([`by_device`]), and a
//!    reading held by two items (a redelivery, a block formed twice, a re-keyed copy)
//!    counts once. Device-hours, their summaries and directory entries
//!    (`crate::device_hour`, `crate::directory`) are written a batch at a time; then
//!    each fleet part the hour touched (`crate::parts`), and last the watermark
//!    (`crate::watermark`). A run its deadline stops mid-hour records the last device
//!    it wrote (`crate::progress`), and the next run goes on after it.
//!
//! Every read of readings and derived items is strongly consistent (the late marks'
//! partitions are read eventually consistent: a mark stays until it is sealed), and
//! every derived item is written conditionally on the version read before what it is
//! computed from (`crate::device_hour`, "Why the writes converge"), so a run killed at
//! any point and run again, or two runs at once, leave the items one clean run leaves.
//! The progress record alone is written unconditionally: a hint of where to start.
//!
//! No one device stops the fleet: a device-hour (or fleet part) that cannot be written
//! (refused, contended, unreadable, too busy to read) is isolated
//! ([`Sealer::isolate`]): the run goes on and moves the watermark, and a late mark
//! brings it back next run.

pub mod by_device;
mod compact;
pub mod config;
mod device_hour;
mod directory;
mod horizon;
mod hours;
mod invocation;
pub mod layout;
mod marks;
mod parts;
mod progress;
mod rebuild;
mod watermark;

use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use serde::Serialize;
use sharding::read_plan::PlanError;
use sharding::time::{TimeError, TimeRange, Timestamp};
use store::batch::BatchTable;
use store::directory::{CachedDirectory, ShardReader};
use store::dynamo::DynamoShards;
use store::error::StoreError;
use store::read::{DynamoReadings, ReadingSource};
use store::rollup::dynamo::DynamoRollups;
use store::rollup::{HOUR_MS, RollupTable, hour_of};

pub use config::{Config, Settings};
pub use invocation::{Invocation, InvokeError, Reseal, ResealError, invoke};
pub use rebuild::Rebuilt;
pub use store::rollup::watermark::{Watermark, read_watermark};

use crate::hours::{Pass, Resume};

/// Why a run stopped, or why one device-hour was isolated.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("planning the read: {0}")]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Layout(#[from] layout::UnsealableLayout),
    #[error("an hour's time is out of range: {0}")]
    Time(#[from] TimeError),
    #[error("the directory entry of {0:?} changed under every write in a row")]
    DirectoryContended(String),
    #[error("{0} changed under every conditional write in a row")]
    Contended(String),
    #[error(
        "the table's layout has slabs: compacting them needs INGEST_TIMEOUT_SECS, the ingest function's timeout"
    )]
    NoIngestTimeout,
    #[error("the slab window {window}'s runs were not written: {reason}")]
    RunsNotWritten { window: String, reason: String },
    #[error(
        "the hours from {hour} hold slab windows not compacted yet (compaction has reached \
         {compacted_to}), and sealing them would miss their slab-held readings: seal them \
         again once their last window has closed and a run has compacted it"
    )]
    NotCompacted { hour: String, compacted_to: String },
    #[error("a run of compacted readings: {0}")]
    Slab(#[from] store::slab::SlabError),
    #[error(
        "device {device:?} has more than SEAL_MAX_BUFFERED ({max}) readings in a minute of {hour}: raise it"
    )]
    TooBusy {
        device: String,
        hour: String,
        max: usize,
    },
}

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RunReport {
    /// Hours sealed for the first time.
    pub hours_sealed: u64,
    /// Device-hours written (new, or with another body than the stored one).
    pub device_hours_written: u64,
    /// Device-hours already stored as computed (a rerun, or a mark of a copy).
    pub device_hours_unchanged: u64,
    /// Fleet parts written.
    pub parts_written: u64,
    /// Directory entries written.
    pub directory_written: u64,
    /// Late marks sealed and deleted.
    pub marks_sealed: u64,
    /// Readings read, each once.
    pub readings: u64,
    /// Device-hours (and fleet parts) set aside after a failure of their own, each
    /// with a late mark that brings it back next run.
    pub isolated: u64,
    /// The first of them, with why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub isolated_items: Vec<String>,
    /// The end of the sealed hours after the run (epoch ms), if any is sealed.
    pub watermark_ms: Option<i64>,
    /// Whether the run stopped at its deadline with hours left to seal.
    pub behind: bool,
    /// A rebuild ([`Sealer::reseal`]) that its deadline stopped: the hour to go on from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resume_ms: Option<i64>,
    /// Where the table's layout has slabs: the start of the first window not compacted
    /// (epoch ms), as the run read it; `None` without slabs, or before any compaction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compacted_to_ms: Option<i64>,
}

impl RunReport {
    /// Adds another run's counts to these (the hours of a rebuild, one at a time), and
    /// its isolated items while the first named are fewer than a run names; the
    /// watermark, `behind` and `resume_ms` stay this report's.
    pub fn add(&mut self, other: &RunReport) {
        self.hours_sealed += other.hours_sealed;
        self.device_hours_written += other.device_hours_written;
        self.device_hours_unchanged += other.device_hours_unchanged;
        self.parts_written += other.parts_written;
        self.directory_written += other.directory_written;
        self.marks_sealed += other.marks_sealed;
        self.readings += other.readings;
        self.isolated += other.isolated;
        let room = device_hour::NAMED.saturating_sub(self.isolated_items.len());
        self.isolated_items
            .extend(other.isolated_items.iter().take(room).cloned());
    }
}

/// The sealer over its three ports.
#[derive(Debug)]
pub struct Sealer<S, D, R> {
    source: S,
    directory: CachedDirectory<D>,
    rollups: R,
    settings: Settings,
    /// Late marks this sealer wrote, so each of its marks has a nonce of its own.
    marks_made: AtomicU64,
}

/// The sealer over the stack's DynamoDB tables.
pub type DynamoSealer = Sealer<DynamoReadings, DynamoShards, DynamoRollups>;

impl DynamoSealer {
    /// The production wiring, one for every function that seals (the Lambda,
    /// `shardline seal`, the local runner's schedule and demo): the readings table
    /// (read, and written with the runs of compaction), the shard and rollups tables
    /// `config` names, through one client.
    pub fn on_dynamo(dynamodb: &aws_sdk_dynamodb::Client, config: &Config) -> Self {
        Self::new(
            DynamoReadings::new(dynamodb, &config.table_name),
            DynamoShards::new(dynamodb, &config.shard_table_name),
            DynamoRollups::new(dynamodb.clone(), &config.rollup_table),
            config.settings,
        )
    }
}

impl<S: ReadingSource, D: ShardReader, R: RollupTable> Sealer<S, D, R> {
    pub fn new(source: S, shards: D, rollups: R, settings: Settings) -> Self {
        Self {
            source,
            // Fresh reads: a run is minutes apart from the next.
            directory: CachedDirectory::new(shards, Duration::ZERO),
            rollups,
            settings,
            marks_made: AtomicU64::new(0),
        }
    }

    pub fn rollups(&self) -> &R {
        &self.rollups
    }

    /// The end of the hours sealable at `now`: every hour that ended at least the
    /// horizon ago.
    pub fn sealable_end(&self, now: Timestamp) -> i64 {
        let horizon = i64::try_from(self.settings.horizon.as_millis()).unwrap_or(i64::MAX);
        hour_of(now.as_millis().saturating_sub(horizon))
    }

    fn expiry(&self, hour_ms: i64) -> Option<i64> {
        let retention = i64::try_from(self.settings.retention.as_secs()).unwrap_or(i64::MAX);
        Some((hour_ms + HOUR_MS) / 1000 + retention)
    }
}

/// The scheduled run writes to the readings table too: the runs it compacts slabs into.
impl<S: ReadingSource + BatchTable, D: ShardReader, R: RollupTable> Sealer<S, D, R> {
    /// One run at `now`: late marks first, then the hours due, until `deadline`.
    #[tracing::instrument(skip(self), fields(now = %now.to_rfc3339()))]
    pub async fn run(
        &self,
        now: Timestamp,
        deadline: Option<Instant>,
    ) -> Result<RunReport, SealError> {
        let mut report = RunReport::default();
        let mut mark = read_watermark(&self.rollups).await?;
        let horizon = self.publish_horizon(mark, now).await?;
        if let Some(m) = mark {
            self.seal_marks(m, now, deadline, &mut report).await?;
        }
        let due = horizon::sealable_end(&horizon, now);
        // A first run seals the last hour due; older hours are `shardline seal`'s.
        let mut next = mark.map_or(due - HOUR_MS, |m| m.end_ms);
        let from_ms = mark.map_or(next, |m| m.from_ms);
        // Before any hour: a layout it cannot read, now or scheduled, stops the run.
        self.check_layouts(next, i64::MAX, now).await?;
        // Where slabs are written, the closed windows are compacted, and an hour waits
        // for compaction to pass its end.
        let due = match self.directory.stored_layout(now).await? {
            Some(history) => {
                self.compacted_end(&history, due, now, deadline, &mut report)
                    .await?
            }
            None => due,
        };
        let mut sealed = 0;
        while next < due {
            if sealed >= self.settings.max_hours_per_run || past(deadline) {
                report.behind = true;
                break;
            }
            let pass = self
                .seal_hour(next, now, deadline, Resume::Recorded, &mut report)
                .await?;
            if pass == Pass::Stopped {
                report.behind = true;
                break;
            }
            let end = next + HOUR_MS;
            let moved = Watermark {
                from_ms,
                end_ms: end,
                horizon: Some(horizon),
            };
            self.advance_watermark(&moved).await?;
            mark = Some(moved);
            report.hours_sealed += 1;
            sealed += 1;
            next = end;
        }
        report.watermark_ms = mark.map(|m| m.end_ms);
        Ok(report)
    }
}

fn hour_range(hour: i64) -> Result<TimeRange, SealError> {
    Ok(TimeRange::of_millis(hour, hour + HOUR_MS)?)
}

fn past(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

/// The run's figures as one EMF line: `SealLagSeconds` (now less the watermark: how
/// far behind the sealed answers are), `CompactionLagSeconds` (where the layout has
/// slabs: now less the start of the first window not compacted), `HoursSealed`, `DeviceHoursSealed`,
/// `LateMarksSealed`, `ReadingsSealed`, `DeviceHoursIsolated`.
pub fn metrics_line(report: &RunReport, now: Timestamp) -> String {
    use store::emf::{Metric, line};
    let mut metrics = vec![
        Metric::count("HoursSealed", report.hours_sealed),
        Metric::count("DeviceHoursSealed", report.device_hours_written),
        Metric::count("LateMarksSealed", report.marks_sealed),
        Metric::count("ReadingsSealed", report.readings),
        Metric::count("DeviceHoursIsolated", report.isolated),
    ];
    if let Some(end) = report.watermark_ms {
        let lag = (now.as_millis() - end).max(0) as f64 / 1000.0;
        metrics.push(Metric {
            name: "SealLagSeconds".to_owned(),
            value: lag,
            unit: "Seconds",
        });
    }
    if let Some(to) = report.compacted_to_ms {
        metrics.push(Metric {
            name: "CompactionLagSeconds".to_owned(),
            value: (now.as_millis() - to).max(0) as f64 / 1000.0,
            unit: "Seconds",
        });
    }
    line(now.as_millis(), &[("Function", "sealer")], &metrics)
}
