//! The rebuild of derived items from the readings (the sealer's `reseal` event and
//! `shardline seal`): each hour of a range sealed again, whatever the watermark says,
//! then the watermark made to cover the hours rebuilt where that keeps it true. Where
//! the layout has slabs, the closed windows are compacted first, and a range reaching
//! an hour whose windows are not all compacted is refused by name
//! ([`SealError::NotCompacted`]) before any hour is sealed.

use std::time::Instant;

use sharding::time::Timestamp;
use store::batch::BatchTable;
use store::directory::ShardReader;
use store::read::ReadingSource;
use store::rollup::{HOUR_MS, RollupTable, hour_label, hour_of};

use crate::hours::{Pass, Resume};
use crate::{RunReport, SealError, Sealer, Watermark, past, read_watermark};

/// What a rebuild did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rebuilt {
    /// The sum of each hour's report; `resume_ms` the hour a deadline stopped it at.
    pub report: RunReport,
    /// The watermark after.
    pub watermark: Option<Watermark>,
}

impl<S: ReadingSource + BatchTable, D: ShardReader, R: RollupTable> Sealer<S, D, R> {
    /// Seals `[from_ms, to_ms)`'s hours again from their readings, oldest first, whatever
    /// the watermark says, and leaves the watermark as it is. Stops at `deadline` with
    /// `resume_ms`, the hour to start the next call at.
    pub async fn reseal(
        &self,
        from_ms: i64,
        to_ms: i64,
        now: Timestamp,
        deadline: Option<Instant>,
    ) -> Result<RunReport, SealError> {
        let mut report = self
            .reseal_hours(from_ms, to_ms, now, deadline, |_, _| {})
            .await?;
        report.watermark_ms = read_watermark(&self.rollups).await?.map(|m| m.end_ms);
        Ok(report)
    }

    /// The rebuild of `[from_ms, to_ms)`: its hours sealed again ([`Self::reseal`]),
    /// `hour_done` told each hour's report as it ends, then the watermark extended over
    /// the hours rebuilt ([`Self::extend_watermark`]: a lost rollups table gets one, an
    /// existing one's first hour moves back over rebuilt hours that reach it). A
    /// deadline stops it with `resume_ms`, the watermark covering the hours done.
    pub async fn rebuild(
        &self,
        from_ms: i64,
        to_ms: i64,
        now: Timestamp,
        deadline: Option<Instant>,
        hour_done: impl FnMut(i64, &RunReport),
    ) -> Result<Rebuilt, SealError> {
        let mut report = self
            .reseal_hours(from_ms, to_ms, now, deadline, hour_done)
            .await?;
        let rebuilt_to = report.resume_ms.unwrap_or(to_ms);
        let watermark = if rebuilt_to > from_ms {
            self.extend_watermark(from_ms, rebuilt_to, now).await?
        } else {
            read_watermark(&self.rollups).await?
        };
        report.watermark_ms = watermark.map(|m| m.end_ms);
        Ok(Rebuilt { report, watermark })
    }

    /// The hours of `[from_ms, to_ms)` sealed again, each one's report to `hour_done`.
    async fn reseal_hours(
        &self,
        from_ms: i64,
        to_ms: i64,
        now: Timestamp,
        deadline: Option<Instant>,
        mut hour_done: impl FnMut(i64, &RunReport),
    ) -> Result<RunReport, SealError> {
        let mut report = RunReport::default();
        self.check_layouts(hour_of(from_ms), to_ms, now).await?;
        // Where slabs are written, the closed windows are compacted first, and an hour
        // whose windows are not all compacted is refused: its seal would miss the
        // readings its open slabs hold.
        let last = hour_of(to_ms - 1) + HOUR_MS;
        if let Some(history) = self.directory.stored_layout(now).await? {
            let end = self
                .compacted_end(&history, last, now, deadline, &mut report)
                .await?;
            if end < last {
                return Err(SealError::NotCompacted {
                    hour: hour_label(end.max(hour_of(from_ms))),
                    compacted_to: report
                        .compacted_to_ms
                        .map_or_else(|| "no window".to_owned(), hour_label),
                });
            }
        }
        let mut hour = hour_of(from_ms);
        while hour < to_ms {
            let mut one = RunReport::default();
            let stopped = past(deadline)
                || self
                    .seal_hour(hour, now, deadline, Resume::Over, &mut one)
                    .await?
                    == Pass::Stopped;
            report.add(&one);
            if stopped {
                report.resume_ms = Some(hour);
                break;
            }
            one.hours_sealed = 1;
            hour_done(hour, &one);
            report.hours_sealed += 1;
            hour += HOUR_MS;
        }
        Ok(report)
    }
}
