//! The fleet's parts (`fleet#{hour}`/`{part}`): each the sum of its part's
//! device-hours, recomputed from them and written over the version read before them,
//! as a device-hour is over its readings (`crate::device_hour`, "Why the writes
//! converge"): the last part written read every device-hour written before it.

use std::collections::BTreeSet;

use futures::{StreamExt as _, TryStreamExt as _};
use sharding::time::Timestamp;
use store::directory::ShardReader;
use store::read::ReadingSource;
use store::rollup::{DeviceHour, FleetPart, RollupItem, RollupQuery, RollupTable, keys};

use crate::device_hour::{ATTEMPTS, Put, before_of, put_over};
use crate::{RunReport, SealError, Sealer};

/// What recomputing one part did.
enum Part {
    Written,
    Unchanged,
    /// Contended or refused: to be sealed again, through a late mark of this device.
    Isolated(String, SealError),
}

impl<S: ReadingSource, D: ShardReader, R: RollupTable> Sealer<S, D, R> {
    /// Recomputes each fleet part of `hour` in `parts` from its device-hours.
    pub(crate) async fn write_parts(
        &self,
        hour: i64,
        parts: BTreeSet<u32>,
        now: Timestamp,
        report: &mut RunReport,
    ) -> Result<(), SealError> {
        let done: Vec<Part> = futures::stream::iter(parts)
            .map(|part| self.write_part(hour, part))
            .buffer_unordered(self.settings.concurrency)
            .try_collect()
            .await?;
        for part in done {
            match part {
                Part::Written => report.parts_written += 1,
                Part::Unchanged => {}
                Part::Isolated(device, why) => {
                    self.isolate(&device, hour, &why, now, report).await?;
                }
            }
        }
        Ok(())
    }

    async fn write_part(&self, hour: i64, part: u32) -> Result<Part, SealError> {
        let key = keys::fleet_part(hour, part);
        let mut some_device = None;
        for _ in 0..ATTEMPTS {
            let before = self
                .rollups
                .get(&key.pk, &key.sk, true)
                .await?
                .as_ref()
                .map(before_of);
            let mut fleet = FleetPart {
                hour_ms: hour,
                part,
                ..FleetPart::default()
            };
            // Page by page: a part holds its devices' cells, not their device-hours.
            let mut q = RollupQuery::partition(keys::device_hours_of(hour, part), true);
            loop {
                let page = self.rollups.query(&q).await?;
                for item in &page.items {
                    match item.body::<DeviceHour>() {
                        Ok(dh) => {
                            some_device.get_or_insert_with(|| dh.device.clone());
                            fleet.merge(&FleetPart::of(hour, part, [&dh]));
                        }
                        // Not ours to read: sealed again from its readings next run.
                        Err(e) => return Ok(Part::Isolated(item.sk.clone(), e.into())),
                    }
                }
                match page.last_sk {
                    Some(last) => q.after = Some(last),
                    None => break,
                }
            }
            let item = match fleet.readings() {
                0 => None,
                _ => Some(RollupItem::with_body(
                    key.clone(),
                    0,
                    &fleet,
                    self.expiry(hour),
                )?),
            };
            match put_over(&self.rollups, item, key.clone(), &before).await? {
                Put::Written(_) => return Ok(Part::Written),
                Put::Unchanged(_) | Put::Deleted => return Ok(Part::Unchanged),
                Put::Contended => continue,
            }
        }
        let why = SealError::Contended(key.to_string());
        Ok(match some_device {
            Some(device) => Part::Isolated(device, why),
            None => return Err(why),
        })
    }
}
