//! The watermark (`seal`/`state`): every hour in `[from_ms, end_ms)` is sealed. Its
//! end is its item's version, so moving it is a conditional write that only grows it.

use serde::{Deserialize, Serialize};
use sharding::time::{TimeError, Timestamp};
use store::error::StoreError;
use store::rollup::horizon::Horizon;
use store::rollup::{HOUR_MS, RollupItem, RollupTable, hour_of, keys};

use crate::{SealError, Sealer};
use store::directory::ShardReader;
use store::read::ReadingSource;

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

impl Watermark {
    /// Whether `hour` is one of the sealed hours.
    pub fn seals(&self, hour: i64) -> bool {
        (self.from_ms..self.end_ms).contains(&hour)
    }
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

/// A watermark's end as its item's version (ends are epoch ms after 1970).
pub(crate) fn version_of(end_ms: i64) -> Result<u64, SealError> {
    u64::try_from(end_ms).map_err(|_| SealError::Time(TimeError::OutOfRange { millis: end_ms }))
}

impl<S: ReadingSource, D: ShardReader, R: RollupTable> Sealer<S, D, R> {
    /// Moves the watermark to `mark` unless it is there already.
    pub(crate) async fn advance_watermark(&self, mark: &Watermark) -> Result<(), SealError> {
        let item = RollupItem::with_body(keys::watermark(), version_of(mark.end_ms)?, mark, None)?;
        self.rollups.put_if_newer(&item).await?;
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
        let item =
            RollupItem::with_body(keys::watermark(), version_of(wanted.end_ms)?, &wanted, None)?;
        let expected = current.map(|m| version_of(m.end_ms)).transpose()?;
        // Conditional on what was read: a run that moved the watermark meanwhile wins,
        // and the next `shardline seal` of these hours takes its first hour back.
        self.rollups.put_if_version(&item, expected).await?;
        read_watermark(&self.rollups).await.map_err(Into::into)
    }
}
