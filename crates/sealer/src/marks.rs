//! Late marks (`late#{part}`/`{hour}#{device}`): a reading written after its hour may
//! have been sealed leaves one, and a run seals that device-hour again from its
//! readings, recomputes its fleet part, and deletes the mark if no newer mark replaced
//! it meanwhile. A mark of an hour not sealed yet stays: that hour's seal counts its
//! reading. A mark of an hour before the first sealed one is deleted and seals
//! nothing: those hours were never sealed, so there is no part to correct, and a
//! rebuild of them (`shardline seal`) reads every reading anyway.

use std::collections::BTreeMap;
use std::time::Instant;

use sharding::epoch::TableHistory;
use sharding::time::Timestamp;
use store::Written;
use store::directory::ShardReader;
use store::read::ReadingSource;
use store::rollup::{RollupItem, RollupQuery, RollupTable, keys, part_of};

use crate::Watermark;
use crate::{RunReport, SealError, Sealer, past};

impl<S: ReadingSource, D: ShardReader, R: RollupTable> Sealer<S, D, R> {
    /// Seals the device-hours marked late in the sealed hours of `mark`, deleting each
    /// mark no newer mark replaced.
    pub(crate) async fn seal_marks(
        &self,
        mark: Watermark,
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
                for item in &page.items {
                    let Some((hour, device)) = keys::parse_late_mark(&item.sk) else {
                        tracing::warn!(mark = %item, "a late mark whose key is not {{hour}}#{{device}}: left alone");
                        continue;
                    };
                    if hour < mark.from_ms {
                        self.rollups
                            .delete_if(&item.pk, &item.sk, item.version)
                            .await?;
                    } else if hour < mark.end_ms {
                        by_hour.entry(hour).or_default().push((item, device));
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
        self.write_parts(hour, parts, now, report).await?;
        for (mark, _) in marks {
            let deleted = self
                .rollups
                .delete_if(&mark.pk, &mark.sk, mark.version)
                .await?;
            if deleted == Written::Applied {
                report.marks_sealed += 1;
            }
        }
        Ok(())
    }
}
