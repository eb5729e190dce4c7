//! The lateness horizon the sealer seals with, and publishes in its watermark for the
//! ingest (`store::rollup::horizon`: why a change takes effect over a switch).

use sharding::time::Timestamp;
use store::Written;
use store::directory::ShardReader;
use store::read::ReadingSource;
use store::rollup::horizon::Horizon;
use store::rollup::{RollupTable, hour_of};

use crate::{SealError, Sealer, Watermark};

/// The end of the hours sealable at `now` under `horizon`.
pub(crate) fn sealable_end(horizon: &Horizon, now: Timestamp) -> i64 {
    let now_ms = now.as_millis();
    let ms = i64::try_from(horizon.for_sealer(now_ms).as_millis()).unwrap_or(i64::MAX);
    hour_of(now_ms.saturating_sub(ms))
}

impl<S: ReadingSource, D: ShardReader, R: RollupTable> Sealer<S, D, R> {
    /// The horizon this run seals with, written into the watermark's body when it
    /// changed (conditional on the watermark read: a run that moved it meanwhile wrote
    /// its own, and the next run compares again). With no watermark yet, the first
    /// hour's seal writes it.
    pub(crate) async fn publish_horizon(
        &self,
        mark: Option<Watermark>,
        now: Timestamp,
    ) -> Result<Horizon, SealError> {
        let stored = mark.and_then(|m| m.horizon);
        let horizon = Horizon::next(stored, self.settings.horizon, now.as_millis());
        if let Some(m) = mark
            && stored != Some(horizon)
        {
            let body = Watermark {
                horizon: Some(horizon),
                ..m
            };
            let published = self
                .rollups
                .put_if_version(&body.item()?, Some(m.version()?))
                .await?;
            if published == Written::Refused {
                tracing::info!(
                    "the watermark moved under the horizon's publication; the next run publishes it"
                );
            }
        }
        Ok(horizon)
    }
}
