//! Changing a table's layout: the next layout is scheduled as a table-layout epoch
//! under the margin rule (`TableHistory::schedule`), so every writer's cache holds it
//! before it is in force and a reading takes the layout in force at its own timestamp.
//! How an operator turns blocks on or off for an existing table (`shardline blocks`).

use sharding::epoch::Epoch;
use sharding::layout::Layout;
use sharding::time::Timestamp;

use super::{ShardDirectory, ShardStore};
use crate::error::StoreError;
use crate::written::Written;

/// Attempts of a layout change racing another one.
const ATTEMPTS: usize = 3;

/// What [`ShardDirectory::schedule_layout`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduledLayout {
    /// The next layout is written, in force from the epoch's time.
    Scheduled(Epoch<Layout>),
    /// The latest layout (in force or scheduled) is already the one asked for.
    Already(Layout),
}

impl<S: ShardStore> ShardDirectory<S> {
    /// Schedules `change` of the table's latest layout as its next epoch, in force the
    /// propagation margin after `now` (and after any epoch already scheduled), written
    /// only over the history it was made from. The stored layout is read (or stored,
    /// for a new table) first.
    pub async fn schedule_layout(
        &self,
        change: impl Fn(&Layout) -> Layout,
        now: Timestamp,
    ) -> Result<ScheduledLayout, StoreError> {
        for _ in 0..ATTEMPTS {
            let mut history = match self.store().get_layout().await? {
                Some(history) => history,
                None => self.layout(now).await?,
            };
            let next = change(history.latest());
            if &next == history.latest() {
                return Ok(ScheduledLayout::Already(next));
            }
            let expected = history.epochs().len();
            let epoch = history
                .schedule(next, now, self.config().policy.propagation_margin)
                .map_err(|e| StoreError::Malformed(format!("cannot schedule the layout: {e}")))?;
            if self.store().replace_layout(expected, &history).await? == Written::Applied {
                tracing::info!(layout = %epoch.value, from = %epoch.effective_from, "scheduled a layout");
                return Ok(ScheduledLayout::Scheduled(epoch));
            }
        }
        Err(StoreError::ConditionFailed)
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;
    use std::time::Duration;

    use sharding::block::BlockLayout;
    use sharding::epoch::TableHistory;
    use sharding::time::Bucket;

    use super::*;
    use crate::config::{Vars, WriterSettings};
    use crate::memory::MemoryShards;

    fn hourly() -> Layout {
        Layout::time_bucket(Bucket::Hour, NonZeroU32::new(4).expect("4 > 0"))
    }

    #[tokio::test]
    async fn blocks_are_switched_on_by_an_epoch_after_the_margin_and_once() {
        let shards = MemoryShards::new();
        shards.put_layout(TableHistory::new(hourly()));
        let settings = WriterSettings::parse(&Vars(|name: &str| {
            (name == "SHARD_TABLE_NAME").then(|| "shards".to_owned())
        }))
        .expect("the defaults");
        let config = settings.directory;
        let margin = config.policy.propagation_margin;
        let directory = ShardDirectory::new(shards.clone(), config);
        let now = Timestamp::from_millis(1_782_086_400_000).expect("in range");
        let on = |l: &Layout| l.clone().with_blocks(BlockLayout::default());
        let ScheduledLayout::Scheduled(epoch) =
            directory.schedule_layout(on, now).await.expect("scheduled")
        else {
            panic!("not scheduled");
        };
        assert_eq!(epoch.effective_from, now.saturating_add(margin));
        let stored = shards.layout().expect("stored");
        assert_eq!(stored.at(now), &hourly(), "the old layout until the margin");
        assert_eq!(stored.at(epoch.effective_from), &on(&hourly()));
        // Asked again, nothing more is scheduled.
        let again = directory
            .schedule_layout(on, now.saturating_add(Duration::from_secs(1)))
            .await
            .expect("answered");
        assert_eq!(again, ScheduledLayout::Already(on(&hourly())));
        assert_eq!(shards.layout().expect("stored").epochs().len(), 2);
    }
}
