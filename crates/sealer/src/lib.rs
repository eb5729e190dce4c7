//! The sealer: keeps the derived items of `store::rollup` (device-hours, device
//! summaries, fleet parts, the device directory, the watermark) equal to what the
//! readings say, once per hour and again for each late reading.
//!
//! # A run
//! 1. **Late marks.** A reading written after its hour was sealed leaves a mark
//!    (`late#{part}` / `{hour}#{device}`). For each mark of an hour before the
//!    watermark, the device-hour is sealed again from its readings, its fleet part is
//!    recomputed, and the mark is deleted if no newer mark replaced it meanwhile. A mark
//!    of an hour not sealed yet stays: that hour's seal will count its reading.
//! 2. **Hours.** Each hour that ended at least the lateness horizon ago and is not yet
//!    sealed, oldest first, at most [`Settings::max_hours_per_run`]: every reading of
//!    the hour is read once, through the read plan over every device
//!    (`sharding::read_plan::plan_all`), device by device ([`by_device`]: the keys
//!    list their items in device order, so a run holds one device's readings and a
//!    page or two per key, however many devices the hour has), and a reading held by
//!    two items (a redelivery, a block formed twice, a re-keyed copy) counts once.
//!    Device-hours, their summaries and directory entries are written a batch at a
//!    time; then each fleet part the hour touched, and last the watermark. A run its
//!    deadline stops mid-hour records the last device it wrote (`seal`/`progress`), and
//!    the next run goes on after it.
//!
//! Every read of readings and derived items is strongly consistent (the late marks'
//! partitions are read eventually consistent: a mark stays until it is sealed) and
//! every write conditional (see `store::rollup`,
//! "Why a count is a version"), so a run killed at any point and run again, or two
//! runs at once, leave the items one clean run leaves.

pub mod by_device;
pub mod config;
mod horizon;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use futures::{StreamExt as _, TryStreamExt as _};
use serde::{Deserialize, Serialize};
use sharding::epoch::TableHistory;
use sharding::read_plan::{PlanError, plan_all, plan_entity};
use sharding::time::{TimeRange, Timestamp};
use store::directory::{CachedDirectory, ShardReader};
use store::error::StoreError;
use store::item::ReadingItem;
use store::read::ReadingSource;
use store::rollup::horizon::Horizon;
use store::rollup::{
    DIRECTORY_PK, DeviceHour, DirEntry, FleetPart, HOUR_MS, MINUTE_MS, RollupItem, RollupQuery,
    RollupTable, hour_label, hour_of, keys, part_of, query_all,
};

pub use config::{Config, Settings};

use crate::by_device::{ByDevice, Next};

/// How far a run its deadline stopped got into an hour: every device up to `after`,
/// in id order, is written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Progress {
    hour_ms: i64,
    after: String,
}

/// Device-hours written at a time while an hour is read.
const WRITE_BATCH: usize = 256;
/// Attempts at a directory entry's conditional write before the run gives up on it.
const DIRECTORY_ATTEMPTS: u32 = 8;

/// Why a run stopped.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("planning the read: {0}")]
    Plan(#[from] PlanError),
    #[error("an hour's time is out of range: {0}")]
    Time(String),
    #[error("the directory entry of {0:?} changed under {DIRECTORY_ATTEMPTS} writes in a row")]
    DirectoryContended(String),
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
    /// Device-hours written (new, or counting more readings than the stored one).
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
    /// The end of the sealed hours after the run (epoch ms), if any is sealed.
    pub watermark_ms: Option<i64>,
    /// Whether the run stopped at its deadline with hours left to seal.
    pub behind: bool,
    /// A rebuild ([`Sealer::reseal`]) that its deadline stopped: the hour to go on from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resume_ms: Option<i64>,
}

impl RunReport {
    /// Adds another run's counts to these (the hours of a rebuild, one at a time); the
    /// watermark, `behind` and `resume_ms` stay this report's.
    pub fn add(&mut self, other: &RunReport) {
        self.hours_sealed += other.hours_sealed;
        self.device_hours_written += other.device_hours_written;
        self.device_hours_unchanged += other.device_hours_unchanged;
        self.parts_written += other.parts_written;
        self.directory_written += other.directory_written;
        self.marks_sealed += other.marks_sealed;
        self.readings += other.readings;
    }
}

/// What one invocation is asked: the scheduled run (any event EventBridge sends), or a
/// rebuild of a range of hours from the readings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Invocation {
    #[serde(default)]
    pub reseal: Option<Reseal>,
}

/// `{"reseal": {"from": .., "to": ..}}`: hours to seal again, RFC 3339 or epoch ms.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Reseal {
    pub from: serde_json::Value,
    pub to: serde_json::Value,
}

impl Reseal {
    /// The range in epoch ms, or why it cannot be read.
    pub fn range(&self) -> Result<(i64, i64), String> {
        let at = |v: &serde_json::Value, name: &str| match v {
            serde_json::Value::Number(n) => n
                .as_i64()
                .ok_or_else(|| format!("reseal.{name}: {n} is not epoch milliseconds")),
            serde_json::Value::String(t) => Timestamp::parse(t)
                .map(Timestamp::as_millis)
                .map_err(|e| format!("reseal.{name}: {e}")),
            other => Err(format!(
                "reseal.{name}: {other} is neither RFC 3339 nor epoch ms"
            )),
        };
        let (from, to) = (at(&self.from, "from")?, at(&self.to, "to")?);
        if from >= to {
            return Err(format!("reseal: from ({from}) is not before to ({to})"));
        }
        Ok((from, to))
    }
}

/// The watermark: every hour in `[from_ms, end_ms)` is sealed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Watermark {
    /// The first hour the sealer sealed (earlier hours were never sealed, unless
    /// `shardline seal` rebuilt them).
    pub from_ms: i64,
    /// The end of the last sealed hour.
    #[serde(skip)]
    pub end_ms: i64,
    /// The lateness horizon the sealer seals with, published for the ingest
    /// (`store::rollup::horizon`); none from a sealer before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub horizon: Option<Horizon>,
}

/// Reads the watermark.
pub async fn read_watermark<R: RollupTable>(rollups: &R) -> Result<Option<Watermark>, StoreError> {
    let (pk, sk) = keys::watermark();
    let Some(item) = rollups.get(&pk, &sk, true).await? else {
        return Ok(None);
    };
    let mut mark: Watermark = item.body()?;
    mark.end_ms = i64::try_from(item.version).unwrap_or(i64::MAX);
    Ok(Some(mark))
}

/// The sealer over its three ports.
#[derive(Debug)]
pub struct Sealer<S, D, R> {
    source: S,
    directory: CachedDirectory<D>,
    rollups: R,
    settings: Settings,
}

impl<S: ReadingSource, D: ShardReader, R: RollupTable> Sealer<S, D, R> {
    pub fn new(source: S, shards: D, rollups: R, settings: Settings) -> Self {
        Self {
            source,
            // Fresh reads: a run is minutes apart from the next.
            directory: CachedDirectory::new(shards, Duration::ZERO),
            rollups,
            settings,
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
            self.seal_marks(m.end_ms, now, deadline, &mut report)
                .await?;
        }
        let due = horizon::sealable_end(&horizon, now);
        // A first run seals the last hour due; older hours are `shardline seal`'s.
        let mut next = mark.map_or(due - HOUR_MS, |m| m.end_ms);
        let from_ms = mark.map_or(next, |m| m.from_ms);
        let mut sealed = 0;
        while next < due {
            if sealed >= self.settings.max_hours_per_run || past(deadline) {
                report.behind = true;
                break;
            }
            if !self
                .seal_hour(next, now, deadline, true, &mut report)
                .await?
            {
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

    /// Seals `[from_ms, to_ms)`'s hours again from their readings, oldest first, whatever
    /// the watermark says, and leaves the watermark as it is: the rebuild of derived
    /// items from the readings (the sealer's `reseal` event). Stops at `deadline` with
    /// `resume_ms`, the hour to start the next call at.
    pub async fn reseal(
        &self,
        from_ms: i64,
        to_ms: i64,
        now: Timestamp,
        deadline: Option<Instant>,
    ) -> Result<RunReport, SealError> {
        let mut report = RunReport::default();
        let mut hour = hour_of(from_ms);
        while hour < to_ms {
            if past(deadline)
                || !self
                    .seal_hour(hour, now, deadline, false, &mut report)
                    .await?
            {
                report.resume_ms = Some(hour);
                break;
            }
            report.hours_sealed += 1;
            hour += HOUR_MS;
        }
        report.watermark_ms = read_watermark(&self.rollups).await?.map(|m| m.end_ms);
        Ok(report)
    }

    /// After a rebuild of `[from_ms, to_ms)` (`shardline seal`), makes the watermark
    /// cover it where that keeps it true: with no watermark (a lost or new rollups
    /// table), `[from, min(to, sealable end))`; with one whose first hour the rebuilt
    /// hours reach, its first hour moved back to `from`, so the routes answer those
    /// hours from their cells. Its end stays: the scheduled runs move it. Returns the
    /// watermark after.
    pub async fn extend_watermark(
        &self,
        from_ms: i64,
        to_ms: i64,
        now: Timestamp,
    ) -> Result<Option<Watermark>, SealError> {
        let from = hour_of(from_ms);
        let to = hour_of(to_ms + HOUR_MS - 1);
        let current = read_watermark(&self.rollups).await?;
        let wanted = match current {
            None => Watermark {
                from_ms: from,
                end_ms: to.min(self.sealable_end(now)),
                horizon: None,
            },
            Some(m) if from < m.from_ms && to >= m.from_ms => Watermark { from_ms: from, ..m },
            Some(m) => return Ok(Some(m)),
        };
        if wanted.from_ms >= wanted.end_ms {
            return Ok(current);
        }
        let version =
            u64::try_from(wanted.end_ms).map_err(|_| SealError::Time(hour_label(wanted.end_ms)))?;
        let item = RollupItem::with_body(keys::watermark(), version, &wanted, None)?;
        let expected = current.map(|m| version_of(m.end_ms));
        // Conditional on what was read: a run that moved the watermark meanwhile wins,
        // and the next `shardline seal` of these hours takes its first hour back.
        self.rollups.put_if_version(&item, expected).await?;
        read_watermark(&self.rollups).await.map_err(Into::into)
    }

    /// Seals one hour of every device, device by device ([`by_device`]), writing
    /// device-hours a batch at a time. `false` when the deadline came first: with
    /// `resume`, the devices written so far are recorded (`seal`/`progress`) and the
    /// next run goes on after them; nothing of the hour is lost either way.
    async fn seal_hour(
        &self,
        hour: i64,
        now: Timestamp,
        deadline: Option<Instant>,
        resume: bool,
        report: &mut RunReport,
    ) -> Result<bool, SealError> {
        let range = hour_range(hour)?;
        let Some(table) = self.directory.stored_layout(now).await? else {
            return Ok(true);
        };
        let hot = self.directory.hot(range, now).await?;
        let refs: Vec<(&str, &_)> = hot.iter().map(|(n, h)| (n.as_str(), h)).collect();
        let plan = plan_all(range, &table, &refs)?;
        let after = match resume {
            true => self.progress(hour).await?,
            false => None,
        };
        let mut read = ByDevice::new(
            &self.source,
            &plan,
            (hour, hour + HOUR_MS),
            after.as_deref(),
            self.settings.concurrency,
            self.settings.max_buffered,
        );
        // A run that goes on after another's devices recomputes every part; one that
        // read the whole hour, those of its devices.
        let mut parts: BTreeSet<u32> = match after {
            Some(_) => (0..store::rollup::PARTS).collect(),
            None => BTreeSet::new(),
        };
        let mut batch = Vec::new();
        loop {
            let next = read.next().await?;
            let end = next.is_none();
            match next {
                Some(Next::Readings { device, readings }) if !readings.is_empty() => {
                    parts.insert(part_of(&device));
                    batch.push(device_hour(device, hour, &readings));
                }
                Some(Next::Readings { .. }) | None => {}
                // More readings in the hour than one read holds: sealed alone, by its
                // own keys in time order, before the progress can name a later device.
                Some(Next::TooMany(device)) => {
                    parts.insert(part_of(&device));
                    self.seal_device_hour(&device, hour, &table, now, report)
                        .await?;
                }
            }
            if batch.len() >= WRITE_BATCH || (end && !batch.is_empty()) {
                let last = batch.last().map(|dh: &DeviceHour| dh.device.clone());
                self.write_device_hours(std::mem::take(&mut batch), report)
                    .await?;
                if past(deadline) && !end {
                    report.readings += read.readings;
                    if let (true, Some(last)) = (resume, last) {
                        self.save_progress(hour, &last).await?;
                    }
                    return Ok(false);
                }
            }
            if end {
                break;
            }
        }
        report.readings += read.readings;
        self.write_parts(hour, parts, report).await?;
        Ok(true)
    }

    /// The last device written of `hour` by a run its deadline stopped, if the record
    /// is of that hour.
    async fn progress(&self, hour: i64) -> Result<Option<String>, SealError> {
        let (pk, sk) = keys::seal_progress();
        let Some(item) = self.rollups.get(&pk, &sk, true).await? else {
            return Ok(None);
        };
        let progress: Progress = item.body()?;
        Ok((progress.hour_ms == hour).then_some(progress.after))
    }

    /// Records that every device of `hour` up to `after`, in id order, is written.
    async fn save_progress(&self, hour: i64, after: &str) -> Result<(), SealError> {
        let progress = Progress {
            hour_ms: hour,
            after: after.to_owned(),
        };
        let item = RollupItem::with_body(keys::seal_progress(), 0, &progress, None)?;
        self.rollups.put(&item).await?;
        Ok(())
    }

    /// Reads one device's hour again and writes its device-hour, summary and directory
    /// entry (a late mark, or a device with more readings than the hour's read holds;
    /// its fleet part is the caller's to recompute).
    async fn seal_device_hour(
        &self,
        device: &str,
        hour: i64,
        table: &TableHistory,
        now: Timestamp,
        report: &mut RunReport,
    ) -> Result<(), SealError> {
        let fanout = self.directory.fanout(device, now).await?;
        // The whole hour by the device's own keys; where that holds more readings than
        // a read may, minute by minute (a reading lies in one minute, so none twice).
        let whole = [(hour, hour + HOUR_MS)];
        let minutes: Vec<(i64, i64)> = (0..60)
            .map(|m| (hour + m * MINUTE_MS, hour + (m + 1) * MINUTE_MS))
            .collect();
        for slices in [&whole[..], &minutes[..]] {
            let mut dh = DeviceHour::new(device, hour);
            let mut complete = true;
            for &(from, to) in slices {
                let plan = plan_entity(device, time_range(from, to)?, table, &fanout)?;
                let mut read = ByDevice::new(
                    &self.source,
                    &plan,
                    (from, to),
                    None,
                    self.settings.concurrency,
                    self.settings.max_buffered,
                );
                while let Some(next) = read.next().await? {
                    match next {
                        Next::Readings {
                            device: d,
                            readings,
                        } if d == device => {
                            for r in &readings {
                                dh.add(r.ts_ms, &r.event_id, &r.metrics, &r.tags);
                            }
                        }
                        Next::TooMany(d) if d == device => complete = false,
                        Next::Readings { .. } | Next::TooMany(_) => {}
                    }
                }
                if !complete {
                    break;
                }
            }
            if complete {
                report.readings += dh.version();
                if dh.version() == 0 {
                    return Ok(());
                }
                return self.write_device_hours(vec![dh], report).await;
            }
        }
        Err(SealError::TooBusy {
            device: device.to_owned(),
            hour: hour_label(hour),
            max: self.settings.max_buffered,
        })
    }

    /// Writes each device-hour, its summary and its directory entry.
    async fn write_device_hours(
        &self,
        hours: Vec<DeviceHour>,
        report: &mut RunReport,
    ) -> Result<(), SealError> {
        let written: Vec<(bool, bool)> = futures::stream::iter(hours)
            .map(|dh| async move {
                let wrote = self.write_device_hour(&dh).await?;
                let entry = self.merge_directory(&DirEntry::of(&dh)).await?;
                Ok::<_, SealError>((wrote, entry))
            })
            .buffer_unordered(self.settings.concurrency)
            .try_collect()
            .await?;
        for (wrote, entry) in written {
            if wrote {
                report.device_hours_written += 1;
            } else {
                report.device_hours_unchanged += 1;
            }
            report.directory_written += u64::from(entry);
        }
        Ok(())
    }

    /// Writes a device-hour and its summary unless they already count as many
    /// readings; `true` when the device-hour was written.
    async fn write_device_hour(&self, dh: &DeviceHour) -> Result<bool, SealError> {
        let ttl = self.expiry(dh.hour_ms);
        let item = RollupItem::with_body(
            keys::device_hour(&dh.device, dh.hour_ms),
            dh.version(),
            dh,
            ttl,
        )?;
        let summary = RollupItem::with_body(
            keys::device_summary(&dh.device, dh.hour_ms),
            dh.version(),
            &dh.summary(),
            ttl,
        )?;
        let wrote = self.rollups.put_if_newer(&item).await?;
        // Written whatever the first answered: a run killed between the two writes left
        // the summary behind, and this one catches it up.
        self.rollups.put_if_newer(&summary).await?;
        Ok(wrote)
    }

    /// Merges `entry` into the device's directory entry (newest wins, earliest first
    /// seen, every metric): a conditional write on the version read, retried when
    /// another run wrote in between. `true` when it changed the entry.
    async fn merge_directory(&self, entry: &DirEntry) -> Result<bool, SealError> {
        for _ in 0..DIRECTORY_ATTEMPTS {
            let stored = self.rollups.get(DIRECTORY_PK, &entry.device, true).await?;
            let (merged, expected) = match &stored {
                Some(item) => {
                    let current: DirEntry = item.body()?;
                    let merged = current.merged(entry);
                    if merged == current {
                        return Ok(false);
                    }
                    (merged, Some(item.version))
                }
                None => (entry.clone(), None),
            };
            let version = expected.map_or(1, |v| v + 1);
            let item = RollupItem::with_body(
                (DIRECTORY_PK.to_owned(), entry.device.clone()),
                version,
                &merged,
                None,
            )?;
            if self.rollups.put_if_version(&item, expected).await? {
                return Ok(true);
            }
        }
        Err(SealError::DirectoryContended(entry.device.clone()))
    }

    /// Recomputes each fleet part of `hour` in `parts` from its device-hours.
    async fn write_parts(
        &self,
        hour: i64,
        parts: BTreeSet<u32>,
        report: &mut RunReport,
    ) -> Result<(), SealError> {
        let written: Vec<bool> = futures::stream::iter(parts)
            .map(|part| async move {
                let q = RollupQuery::partition(keys::device_hours_of(hour, part), true);
                let stored = query_all(&self.rollups, q).await?;
                let hours = stored
                    .iter()
                    .map(RollupItem::body::<DeviceHour>)
                    .collect::<Result<Vec<_>, _>>()?;
                let fleet = FleetPart::of(hour, part, &hours);
                if fleet.version() == 0 {
                    return Ok(false);
                }
                let item = RollupItem::with_body(
                    keys::fleet_part(hour, part),
                    fleet.version(),
                    &fleet,
                    self.expiry(hour),
                )?;
                Ok::<_, SealError>(self.rollups.put_if_newer(&item).await?)
            })
            .buffer_unordered(self.settings.concurrency)
            .try_collect()
            .await?;
        report.parts_written += written.into_iter().filter(|w| *w).count() as u64;
        Ok(())
    }

    /// Moves the watermark to `mark` unless it is there already.
    async fn advance_watermark(&self, mark: &Watermark) -> Result<(), SealError> {
        let end_ms = mark.end_ms;
        let version = u64::try_from(end_ms).map_err(|_| SealError::Time(hour_label(end_ms)))?;
        let item = RollupItem::with_body(keys::watermark(), version, mark, None)?;
        self.rollups.put_if_newer(&item).await?;
        Ok(())
    }

    /// Seals the device-hours marked late in hours before `sealed_end`, deleting each
    /// mark no newer mark replaced.
    async fn seal_marks(
        &self,
        sealed_end: i64,
        now: Timestamp,
        deadline: Option<Instant>,
        report: &mut RunReport,
    ) -> Result<(), SealError> {
        let Some(table) = self.directory.stored_layout(now).await? else {
            return Ok(());
        };
        for part in 0..store::rollup::PARTS {
            // Page by page, so a partition of many marks holds one page at a time.
            // Eventually consistent, at half the price: a mark is deleted only once
            // sealed, so one this read does not show yet is found by the next run, and
            // one already deleted is sealed again to the same items and not deleted
            // twice (its version is gone).
            let mut q = RollupQuery::partition(keys::late_part(part), false);
            loop {
                let page = self.rollups.query(&q).await?;
                let mut by_hour: BTreeMap<i64, Vec<(&RollupItem, &str)>> = BTreeMap::new();
                for mark in &page.items {
                    let Some((hour, device)) = parse_mark(&mark.sk) else {
                        tracing::warn!(mark = %mark, "a late mark whose key is not {{hour}}#{{device}}: left alone");
                        continue;
                    };
                    if hour < sealed_end {
                        by_hour.entry(hour).or_default().push((mark, device));
                    }
                }
                for (hour, marks) in by_hour {
                    if past(deadline) {
                        return Ok(());
                    }
                    self.seal_marked_hour(hour, &marks, &table, now, deadline, report)
                        .await?;
                }
                match page.last_sk {
                    Some(last) => q.after = Some(last),
                    None => break,
                }
            }
        }
        Ok(())
    }

    /// Seals again the device-hours `marks` name in one hour, as many as `deadline`
    /// allows, then each fleet part they touch once, and last deletes each of their
    /// marks no newer mark replaced: a crash before the deletes, or a mark the deadline
    /// left, stays for the next run, which writes the same items.
    async fn seal_marked_hour(
        &self,
        hour: i64,
        marks: &[(&RollupItem, &str)],
        table: &TableHistory,
        now: Timestamp,
        deadline: Option<Instant>,
        report: &mut RunReport,
    ) -> Result<(), SealError> {
        let mut sealed = 0;
        for (_, device) in marks {
            if past(deadline) {
                break;
            }
            self.seal_device_hour(device, hour, table, now, report)
                .await?;
            sealed += 1;
        }
        let marks = &marks[..sealed];
        let parts = marks.iter().map(|(_, device)| part_of(device)).collect();
        self.write_parts(hour, parts, report).await?;
        for (mark, _) in marks {
            if self
                .rollups
                .delete_if(&mark.pk, &mark.sk, mark.version)
                .await?
            {
                report.marks_sealed += 1;
            }
        }
        Ok(())
    }

    fn expiry(&self, hour_ms: i64) -> Option<i64> {
        let retention = i64::try_from(self.settings.retention.as_secs()).unwrap_or(i64::MAX);
        Some((hour_ms + HOUR_MS) / 1000 + retention)
    }
}

/// `{hour}#{device}` of a late mark's sort key.
fn parse_mark(sk: &str) -> Option<(i64, &str)> {
    let (hour, device) = sk.split_once('#')?;
    Some((hour.parse().ok()?, device))
}

fn hour_range(hour: i64) -> Result<TimeRange, SealError> {
    time_range(hour, hour + HOUR_MS)
}

fn time_range(from: i64, to: i64) -> Result<TimeRange, SealError> {
    let at = |ms| Timestamp::from_millis(ms).map_err(|e| SealError::Time(e.to_string()));
    TimeRange::new(at(from)?, at(to)?).map_err(|e| SealError::Time(e.to_string()))
}

/// The device-hour of one device's readings of `hour`, each given once.
fn device_hour(device: String, hour: i64, readings: &[ReadingItem]) -> DeviceHour {
    let mut dh = DeviceHour::new(device, hour);
    for r in readings {
        dh.add(r.ts_ms, &r.event_id, &r.metrics, &r.tags);
    }
    dh
}

/// A watermark's end as its item's version (ends are epoch ms after 1970).
fn version_of(end_ms: i64) -> u64 {
    u64::try_from(end_ms).unwrap_or(0)
}

fn past(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

/// The run's figures as one EMF line: `SealLagSeconds` (now less the watermark: how
/// far behind the sealed answers are), `HoursSealed`, `DeviceHoursSealed`,
/// `LateMarksSealed`, `ReadingsSealed`.
pub fn metrics_line(report: &RunReport, now: Timestamp) -> String {
    use store::emf::{Metric, line};
    let mut metrics = vec![
        Metric::count("HoursSealed", report.hours_sealed),
        Metric::count("DeviceHoursSealed", report.device_hours_written),
        Metric::count("LateMarksSealed", report.marks_sealed),
        Metric::count("ReadingsSealed", report.readings),
    ];
    if let Some(end) = report.watermark_ms {
        let lag = (now.as_millis() - end).max(0) as f64 / 1000.0;
        metrics.push(Metric {
            name: "SealLagSeconds".to_owned(),
            value: lag,
            unit: "Seconds",
        });
    }
    line(now.as_millis(), &[("Function", "sealer")], &metrics)
}
