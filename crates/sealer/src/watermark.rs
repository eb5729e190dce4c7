//! Moving the watermark (`store::rollup::watermark`): after each hour a run seals, and
//! back over the hours a rebuild sealed.

use sharding::time::Timestamp;
use store::rollup::watermark::{Watermark, read_watermark};
use store::rollup::{HOUR_MS, RollupTable, hour_of};

use crate::{SealError, Sealer};
use store::directory::ShardReader;
use store::read::ReadingSource;

impl<S: ReadingSource, D: ShardReader, R: RollupTable> Sealer<S, D, R> {
    /// Moves the watermark to `mark` unless it is there already.
    pub(crate) async fn advance_watermark(&self, mark: &Watermark) -> Result<(), SealError> {
        self.rollups.put_if_newer(&mark.item()?).await?;
        Ok(())
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
        let item = wanted.item()?;
        let expected = current.map(|m| m.version()).transpose()?;
        // Conditional on what was read: a run that moved the watermark meanwhile wins,
        // and the next `shardline seal` of these hours takes its first hour back.
        self.rollups.put_if_version(&item, expected).await?;
        read_watermark(&self.rollups).await.map_err(Into::into)
    }
}
