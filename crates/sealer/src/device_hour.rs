//! One device's hour: read from its readings, written over the version read before
//! them, its summary and directory entry after it; and a device-hour that cannot be
//! written isolated, so that it stops no one else.
//!
//! # Why the writes converge
//! A device-hour's version is a sequence: each write of a new body is conditional on
//! the version read *before* the readings were read, and takes the next. So a write
//! succeeds only if no other write landed since its readings were read, and any later
//! successful write read its readings after this one landed. A reading written (and
//! its late mark, after it) before a seal reads its readings is in every body written
//! after that; the last body written is of the newest readings. A body equal to the
//! stored one is not written (its digest compares), so a rerun, a crash and rerun, or
//! two runs at once leave the items of one clean run, and a re-sent value with the same
//! count of readings is a new body, hence a new version (a count is not a version).
//!
//! A summary (`dev#{device}`/`{hour}`) carries its device-hour's version and is written
//! only over an older one ([`RollupTable::put_if_newer`]), so it ends as the newest
//! device-hour's, whatever order two writers' summaries land in.

use std::sync::atomic::Ordering;

use sharding::epoch::TableHistory;
use sharding::read_plan::plan_entity;
use sharding::time::{TimeRange, Timestamp};
use store::Written;
use store::directory::ShardReader;
use store::read::ReadingSource;
use store::rollup::stored::digest;
use store::rollup::{
    DeviceHour, DirEntry, HOUR_MS, MINUTE_MS, RollupItem, RollupKey, RollupTable, hour_label, keys,
    late_mark,
};

use crate::by_device::{ByDevice, Next, run_partitions};
use crate::directory::EntryChange;
use crate::{RunReport, SealError, Sealer};

/// Attempts at one device-hour's conditional write, each after reading its version
/// and its readings again, before it is isolated.
pub(crate) const ATTEMPTS: u32 = 4;

/// Most isolated items a report names (it counts them all).
pub(crate) const NAMED: usize = 16;

/// A stored item's version and body digest, read before the readings it is
/// recomputed from; `None` when there was none.
pub(crate) type Before = Option<(u64, String)>;

/// The version and digest of a stored item.
pub(crate) fn before_of(item: &RollupItem) -> (u64, String) {
    (item.version, digest(&item.body))
}

/// What a conditional write of a derived item did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Put {
    /// A new body, at this version.
    Written(u64),
    /// The stored body is the computed one, at this version.
    Unchanged(u64),
    /// Nothing is left to store, and the stored item is deleted (or there was none).
    Deleted,
    /// Another writer wrote since the version was read.
    Contended,
}

/// What a write of one device-hour over the version read before its readings did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HourWrite {
    /// The device-hour, its summary and its directory entry hold its readings (written,
    /// unchanged or deleted).
    Sealed,
    /// Another writer wrote it since the version was read: the caller reads both again.
    Contended,
}

/// Writes `item` (whose version is ignored) over `before`: not at all when its body is
/// the stored one, else conditional on `before`'s version, at the next; an empty body
/// (`None`) deletes the stored item on the same condition.
pub(crate) async fn put_over<R: RollupTable>(
    rollups: &R,
    item: Option<RollupItem>,
    key: RollupKey,
    before: &Before,
) -> Result<Put, SealError> {
    let expected = before.as_ref().map(|(v, _)| *v);
    let Some(mut item) = item else {
        return Ok(match expected {
            None => Put::Deleted,
            Some(v) => match rollups.delete_if(&key.pk, &key.sk, v).await? {
                Written::Applied => Put::Deleted,
                Written::Refused => Put::Contended,
            },
        });
    };
    if let Some((v, d)) = before
        && *d == digest(&item.body)
    {
        return Ok(Put::Unchanged(*v));
    }
    item.version = expected.map_or(1, |v| v + 1);
    if rollups.put_if_version(&item, expected).await? == Written::Applied {
        return Ok(Put::Written(item.version));
    }
    // Another writer wrote since: if it wrote this body (two runs at once over the same
    // readings), it holds what these readings say, and nothing need be read again.
    Ok(match rollups.get(&key.pk, &key.sk, true).await? {
        Some(stored) if stored.body == item.body => Put::Unchanged(stored.version),
        _ => Put::Contended,
    })
}

/// Whether a failure is one device-hour's own (its data, or a contention), to be
/// isolated, rather than the table's or the run's, which stops the run.
pub(crate) fn isolates(e: &SealError) -> bool {
    match e {
        SealError::Store(e) => {
            e.is_permanent()
                || matches!(
                    e,
                    store::error::StoreError::Malformed(_)
                        | store::error::StoreError::ConditionFailed
                )
        }
        SealError::TooBusy { .. } | SealError::DirectoryContended(_) | SealError::Contended(_) => {
            true
        }
        SealError::Plan(_)
        | SealError::Layout(_)
        | SealError::Time(_)
        | SealError::NoIngestTimeout
        | SealError::RunsNotWritten { .. }
        | SealError::NotCompacted { .. }
        | SealError::Slab(_) => false,
    }
}

impl<S: ReadingSource, D: ShardReader, R: RollupTable> Sealer<S, D, R> {
    /// Writes the device-hour computed from readings read after `before` was, its
    /// summary and its directory entry. [`HourWrite::Contended`] when another writer
    /// wrote it since `before` was read: the caller reads both again
    /// ([`Sealer::seal_device_hour`]).
    pub(crate) async fn write_device_hour(
        &self,
        dh: &DeviceHour,
        before: &Before,
        report: &mut RunReport,
    ) -> Result<HourWrite, SealError> {
        let key = keys::device_hour(&dh.device, dh.hour_ms);
        let item = match dh.readings() {
            0 => None,
            _ => Some(RollupItem::with_body(
                key.clone(),
                0,
                dh,
                self.expiry(dh.hour_ms),
            )?),
        };
        let put = put_over(&self.rollups, item, key, before).await?;
        match put {
            Put::Contended => return Ok(HourWrite::Contended),
            Put::Written(_) => report.device_hours_written += 1,
            Put::Unchanged(_) => report.device_hours_unchanged += 1,
            Put::Deleted => {}
        }
        self.write_summary(dh, put).await?;
        // A device-hour's first body only widens the entry; one that was ever replaced
        // may narrow it, and is rebuilt from the summaries (on a rerun too: a run killed
        // between the replacement and the rebuild left its mark, and this is its rerun).
        let changed = match put {
            Put::Written(1) | Put::Unchanged(1) if dh.readings() > 0 => {
                self.merge_directory(&DirEntry::of(dh)).await?
            }
            Put::Written(_) | Put::Unchanged(_) | Put::Deleted => {
                self.rebuild_directory(&dh.device).await?
            }
            Put::Contended => EntryChange::Unchanged,
        };
        report.directory_written += u64::from(changed == EntryChange::Changed);
        Ok(HourWrite::Sealed)
    }

    /// Brings the device's summary of the hour to the device-hour's version `put`.
    async fn write_summary(&self, dh: &DeviceHour, put: Put) -> Result<(), SealError> {
        let key = keys::device_summary(&dh.device, dh.hour_ms);
        let version = match put {
            Put::Written(v) => v,
            Put::Unchanged(v) => {
                // A run killed between the two writes left the summary behind: this
                // one catches it up; a read costs less than a refused write.
                let stored = self.rollups.get(&key.pk, &key.sk, true).await?;
                if stored.is_some_and(|s| s.version >= v) {
                    return Ok(());
                }
                v
            }
            Put::Deleted => {
                if let Some(stored) = self.rollups.get(&key.pk, &key.sk, true).await? {
                    self.rollups
                        .delete_if(&key.pk, &key.sk, stored.version)
                        .await?;
                }
                return Ok(());
            }
            Put::Contended => return Ok(()),
        };
        let summary = RollupItem::with_body(key, version, &dh.summary(), self.expiry(dh.hour_ms))?;
        self.rollups.put_if_newer(&summary).await?;
        Ok(())
    }

    /// Seals one device's hour on its own: its stored version, then its readings (by
    /// its own keys and its group's runs), then the conditional write, again while another writer wins, at
    /// most [`ATTEMPTS`] times. A late mark, a contended write of the hour's pass, or a
    /// device with more readings than the hour's read holds. Its fleet part is the
    /// caller's to recompute. A failure of its own isolates it ([`Sealer::isolate`]).
    pub(crate) async fn seal_device_hour(
        &self,
        device: &str,
        hour: i64,
        table: &TableHistory,
        now: Timestamp,
        report: &mut RunReport,
    ) -> Result<(), SealError> {
        let key = keys::device_hour(device, hour);
        let mut outcome = Err(SealError::Contended(format!(
            "{}/{device}",
            hour_label(hour)
        )));
        for _ in 0..ATTEMPTS {
            let attempt = async {
                let before = self
                    .rollups
                    .get(&key.pk, &key.sk, true)
                    .await?
                    .as_ref()
                    .map(before_of);
                let dh = self.read_device_hour(device, hour, table, now).await?;
                report.readings += dh.readings();
                self.write_device_hour(&dh, &before, report).await
            };
            match attempt.await {
                Ok(HourWrite::Sealed) => return Ok(()),
                Ok(HourWrite::Contended) => continue,
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            }
        }
        match outcome {
            Err(e) if isolates(&e) => self.isolate(device, hour, &e, now, report).await,
            other => other,
        }
    }

    /// One device's readings of `hour`, read by its own keys and, where the hour's
    /// layout has slabs, its group's run partition: the whole hour, or minute
    /// by minute where that holds more readings than a read may (a reading lies in one
    /// minute, so none twice).
    async fn read_device_hour(
        &self,
        device: &str,
        hour: i64,
        table: &TableHistory,
        now: Timestamp,
    ) -> Result<DeviceHour, SealError> {
        let fanout = self.directory.fanout(device, now).await?;
        // Its group's runs of the hour, where a layout over it has slabs: read once a
        // slice, up to its own items.
        let runs = run_partitions(
            table,
            TimeRange::of_millis(hour, hour + HOUR_MS)?,
            Some(device),
        );
        let whole = [(hour, hour + HOUR_MS)];
        let minutes: Vec<(i64, i64)> = (0..60)
            .map(|m| (hour + m * MINUTE_MS, hour + (m + 1) * MINUTE_MS))
            .collect();
        'slices: for slices in [&whole[..], &minutes[..]] {
            let mut dh = DeviceHour::new(device, hour);
            for &(from, to) in slices {
                let plan = plan_entity(device, TimeRange::of_millis(from, to)?, table, &fanout)?;
                let mut read = ByDevice::new(
                    &self.source,
                    &plan,
                    (from, to),
                    None,
                    self.settings.concurrency,
                    self.settings.max_buffered,
                )
                .with_runs(&runs);
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
                        Next::TooMany(d) if d == device => continue 'slices,
                        Next::Readings { .. } | Next::TooMany(_) => {}
                    }
                }
            }
            return Ok(dh);
        }
        Err(SealError::TooBusy {
            device: device.to_owned(),
            hour: hour_label(hour),
            max: self.settings.max_buffered,
        })
    }

    /// Sets a device-hour aside after a failure of its own: the run goes on without it
    /// and moves the watermark, a late mark makes the next run seal it again, the
    /// report counts and names it (`DeviceHoursIsolated`, its alarm), and the device's
    /// routes answer the hour from its readings while its mark stands. Fails only if
    /// the mark cannot be written: then nothing would bring the hour back.
    pub(crate) async fn isolate(
        &self,
        device: &str,
        hour: i64,
        why: &SealError,
        now: Timestamp,
        report: &mut RunReport,
    ) -> Result<(), SealError> {
        tracing::error!(device, hour = %hour_label(hour), error = %why, "device-hour isolated: sealed again next run");
        let nonce = (now.as_millis().unsigned_abs() << 10)
            .wrapping_add(self.marks_made.fetch_add(1, Ordering::Relaxed));
        self.rollups.put(&late_mark(device, hour, nonce)).await?;
        report.isolated += 1;
        if report.isolated_items.len() < NAMED {
            report
                .isolated_items
                .push(format!("{}#{device}: {why}", hour_label(hour)));
        }
        Ok(())
    }
}
