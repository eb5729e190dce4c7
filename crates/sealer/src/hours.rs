//! One hour of every device, sealed: the stored device-hours' versions read first,
//! then every reading of the hour once, device by device (`crate::by_device`), each
//! device-hour written over the version read before its readings
//! (`crate::device_hour`), a batch at a time; then each fleet part the hour touched.
//! A stored device-hour of a device with no reading left in the hour (its readings
//! expired, a rebuild) is deleted the same way.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use futures::StreamExt as _;
use sharding::read_plan::plan_all;
use sharding::time::Timestamp;
use store::directory::ShardReader;
use store::read::ReadingSource;
use store::rollup::{DeviceHour, HOUR_MS, PARTS, RollupQuery, RollupTable, keys, part_of};

use crate::by_device::{ByDevice, Next, run_partitions};
use crate::device_hour::{Before, HourWrite, before_of};
use crate::{RunReport, SealError, Sealer, hour_range, past};

/// Device-hours written at a time while an hour is read.
const WRITE_BATCH: usize = 256;

/// How a pass over an hour ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    /// Every device of the hour is sealed.
    Sealed,
    /// The deadline came first; nothing of the hour is lost, and the next run goes on
    /// (after the recorded progress, for a scheduled run).
    Stopped,
}

/// Whether a stopped pass records how far it got, for the next run to go on after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resume {
    /// A scheduled run: record and resume.
    Recorded,
    /// A rebuild: start the hour over.
    Over,
}

fn device_of(readings: &[store::item::ReadingItem], device: String, hour: i64) -> DeviceHour {
    let mut dh = DeviceHour::new(device, hour);
    for r in readings {
        dh.add(r.ts_ms, &r.event_id, &r.metrics, &r.tags);
    }
    dh
}

impl<S: ReadingSource, D: ShardReader, R: RollupTable> Sealer<S, D, R> {
    /// The stored device-hours of `hour` after `after`: each one's version and digest,
    /// read before any reading of the hour is.
    async fn stored_hours(
        &self,
        hour: i64,
        after: Option<&str>,
    ) -> Result<BTreeMap<String, (u64, String)>, SealError> {
        let mut out = BTreeMap::new();
        for part in 0..PARTS {
            let mut q = RollupQuery::partition(keys::device_hours_of(hour, part), true);
            loop {
                let page = self.rollups.query(&q).await?;
                for item in &page.items {
                    if after.is_none_or(|a| item.sk.as_str() > a) {
                        out.insert(item.sk.clone(), before_of(item));
                    }
                }
                match page.last_sk {
                    Some(last) => q.after = Some(last),
                    None => break,
                }
            }
        }
        Ok(out)
    }

    /// Seals one hour of every device, device by device, writing device-hours a batch
    /// at a time.
    pub(crate) async fn seal_hour(
        &self,
        hour: i64,
        now: Timestamp,
        deadline: Option<Instant>,
        resume: Resume,
        report: &mut RunReport,
    ) -> Result<Pass, SealError> {
        let range = hour_range(hour)?;
        let Some(table) = self.directory.stored_layout(now).await? else {
            return Ok(Pass::Sealed);
        };
        let hot = self.directory.hot(range, now).await?;
        let refs: Vec<(&str, &_)> = hot.iter().map(|(n, h)| (n.as_str(), h)).collect();
        let plan = plan_all(range, &table, &refs)?;
        let after = match resume {
            Resume::Recorded => self.progress(hour).await?,
            Resume::Over => None,
        };
        let mut stored = self.stored_hours(hour, after.as_deref()).await?;
        let mut read = ByDevice::new(
            &self.source,
            &plan,
            (hour, hour + HOUR_MS),
            after.as_deref(),
            self.settings.concurrency,
            self.settings.max_buffered,
        )
        .with_runs(&run_partitions(&table, range, None));
        // A run that goes on after another's devices recomputes every part; one that
        // read the whole hour, those of its devices.
        let mut parts: BTreeSet<u32> = match after {
            Some(_) => (0..PARTS).collect(),
            None => BTreeSet::new(),
        };
        let mut batch: Vec<(DeviceHour, Before)> = Vec::new();
        loop {
            let next = read.next().await?;
            let end = next.is_none();
            match next {
                Some(Next::Readings { device, readings }) if !readings.is_empty() => {
                    parts.insert(part_of(&device));
                    let before = stored.remove(&device);
                    batch.push((device_of(&readings, device, hour), before));
                }
                Some(Next::Readings { .. }) | None => {}
                // More readings in the hour than one read holds: sealed alone, by its
                // own keys in time order, before the progress can name a later device.
                Some(Next::TooMany(device)) => {
                    parts.insert(part_of(&device));
                    stored.remove(&device);
                    self.seal_device_hour(&device, hour, &table, now, report)
                        .await?;
                }
            }
            if end {
                // Stored device-hours of devices with no reading left in the hour.
                for (device, before) in std::mem::take(&mut stored) {
                    parts.insert(part_of(&device));
                    batch.push((DeviceHour::new(device, hour), Some(before)));
                }
            }
            if batch.len() >= WRITE_BATCH || (end && !batch.is_empty()) {
                let last = batch.last().map(|(dh, _)| dh.device.clone());
                self.write_batch(std::mem::take(&mut batch), &table, now, report)
                    .await?;
                if past(deadline) && !end {
                    report.readings += read.readings;
                    if let (Resume::Recorded, Some(last)) = (resume, last) {
                        self.save_progress(hour, &last).await?;
                    }
                    return Ok(Pass::Stopped);
                }
            }
            if end {
                break;
            }
        }
        report.readings += read.readings;
        self.write_parts(hour, parts, now, report).await?;
        Ok(Pass::Sealed)
    }

    /// Writes a batch of device-hours, each over the version read before the hour's
    /// readings; one another writer wrote since is sealed again on its own.
    async fn write_batch(
        &self,
        batch: Vec<(DeviceHour, Before)>,
        table: &sharding::epoch::TableHistory,
        now: Timestamp,
        report: &mut RunReport,
    ) -> Result<(), SealError> {
        let results: Vec<(String, i64, Result<HourWrite, SealError>, RunReport)> =
            futures::stream::iter(batch)
                .map(|(dh, before)| async move {
                    let mut mine = RunReport::default();
                    let result = self.write_device_hour(&dh, &before, &mut mine).await;
                    (dh.device, dh.hour_ms, result, mine)
                })
                .buffer_unordered(self.settings.concurrency)
                .collect()
                .await;
        for (device, hour, result, mine) in results {
            report.add(&mine);
            match result {
                Ok(HourWrite::Sealed) => {}
                Ok(HourWrite::Contended) => {
                    self.seal_device_hour(&device, hour, table, now, report)
                        .await?
                }
                Err(e) if crate::device_hour::isolates(&e) => {
                    self.isolate(&device, hour, &e, now, report).await?
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
