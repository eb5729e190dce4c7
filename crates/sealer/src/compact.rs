//! Compaction's side of the hour seal (docs/design-slabs.md). Where the table's layout
//! has slabs, an hour's readings of one-reading devices are in its windows' slabs, and
//! reach the run partitions the hour seal reads (`r#{group}#{hour}`) only once each
//! window is compacted. So an hour whose span meets a layout with slabs is sealed only
//! once the compaction progress (`store::rollup::compaction`) has passed its end, and a
//! run reports how far compaction got (`CompactionLagSeconds`, [`crate::metrics_line`]).

use sharding::epoch::TableHistory;
use store::directory::ShardReader;
use store::read::ReadingSource;
use store::rollup::compaction::read_compacted;
use store::rollup::{RollupTable, hour_of};

use crate::{RunReport, SealError, Sealer};

/// The start of the first epoch of `history` whose layout has slabs (epoch ms; the
/// table's first epoch holds from the beginning of time), if any has.
fn first_slabs_ms(history: &TableHistory) -> Option<i64> {
    history
        .epochs()
        .iter()
        .find(|epoch| epoch.value.slabs.is_some())
        .map(|epoch| epoch.effective_from.as_millis())
}

impl<S: ReadingSource, D: ShardReader, R: RollupTable> Sealer<S, D, R> {
    /// The end of the hours due (`due`, epoch ms) that the hour seal may seal: every
    /// hour before the first layout with slabs, and after it those that compaction has
    /// passed. Records compaction's progress in `report`. A layout with slabs and no
    /// ingest timeout configured fails the run: nothing could compact it.
    pub(crate) async fn compacted_end(
        &self,
        history: &TableHistory,
        due: i64,
        report: &mut RunReport,
    ) -> Result<i64, SealError> {
        let Some(slabs_from) = first_slabs_ms(history) else {
            return Ok(due);
        };
        if self.settings.ingest_timeout.is_none() {
            return Err(SealError::NoIngestTimeout);
        }
        let compacted = read_compacted(&self.rollups).await?;
        report.compacted_to_ms = compacted.map(|c| c.to_ms);
        let through = compacted.map_or(slabs_from, |c| c.to_ms.max(slabs_from));
        Ok(due.min(hour_of(through)))
    }
}
