//! How far a run its deadline stopped got into an hour (`seal`/`progress`): every
//! device up to `after`, in id order, is written, and the next run goes on after it.
//! Written unconditionally: it is a hint of where to start, never an answer. A stale
//! record (of another hour, or overwritten by a run that got less far) makes a run
//! read devices again, which leaves the same items.

use serde::{Deserialize, Serialize};
use store::directory::ShardReader;
use store::read::ReadingSource;
use store::rollup::{RollupItem, RollupTable, keys};

use crate::{SealError, Sealer};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Progress {
    hour_ms: i64,
    after: String,
}

impl<S: ReadingSource, D: ShardReader, R: RollupTable> Sealer<S, D, R> {
    /// The last device written of `hour` by a run its deadline stopped, if the record
    /// is of that hour.
    pub(crate) async fn progress(&self, hour: i64) -> Result<Option<String>, SealError> {
        let key = keys::seal_progress();
        let Some(item) = self.rollups.get(&key.pk, &key.sk, true).await? else {
            return Ok(None);
        };
        let progress: Progress = item.body()?;
        Ok((progress.hour_ms == hour).then_some(progress.after))
    }

    /// Records that every device of `hour` up to `after`, in id order, is written.
    pub(crate) async fn save_progress(&self, hour: i64, after: &str) -> Result<(), SealError> {
        let progress = Progress {
            hour_ms: hour,
            after: after.to_owned(),
        };
        let item = RollupItem::with_body(keys::seal_progress(), 0, &progress, None)?;
        self.rollups.put(&item).await?;
        Ok(())
    }
}
