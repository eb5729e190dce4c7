//! The slab-held readings of the device routes (`crate::slabs`): what their streams are
//! planned by, read once a request. Where no layout in force over a read's range has
//! slabs, nothing is read and no stream is added. Otherwise the compaction progress
//! (`store::rollup::compaction::read_compacted`, one strongly consistent GetItem, where
//! the service has the rollups table, `ROLLUP_TABLE`; without it every window is read
//! from its slabs), and the fan-out of each slab partition the device's readings can be
//! in from the shard directory (its cached entry, `sharding::slab::SlabOwner::entity`:
//! its group's, and the shared slabs').

use sharding::epoch::{FanoutHistory, REKEY_HORIZON, TableHistory};
use sharding::slab::{SlabOwner, Window};
use sharding::time::TimeRange;
use store::directory::ShardReader;
use store::read::ReadingSource;
use store::rollup::compaction::Compacted;

use super::QueryService;
use super::answer::store_error;
use crate::budget::{self, Advice};
use crate::error::ApiError;
use crate::exec::{Exhausted, ReadBudget, ReadCost, StreamSpec, within};
use crate::slabs::{owners, slab_epochs, streams};

/// What a request's reads of slab-held readings are planned by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SlabProgress {
    /// No layout in force over the request's range has slabs: nothing to read.
    NoSlabs,
    /// Slabs, compacted into runs over this progress (`None`: read slabs only).
    Compaction(Option<Compacted>),
}

/// What is left of `budget` once `cost` is spent.
pub(super) fn less(budget: ReadBudget, cost: ReadCost) -> ReadBudget {
    ReadBudget {
        queries: budget.queries.saturating_sub(cost.pages),
        evaluated: budget.evaluated.saturating_sub(cost.items_read),
        deadline: budget.deadline,
    }
}

/// `a` and `b` spent together.
pub(super) fn sum(a: ReadCost, b: ReadCost) -> ReadCost {
    ReadCost {
        items_read: a.items_read + b.items_read,
        pages: a.pages + b.pages,
        rounds: a.rounds + b.rounds,
        duplicates: a.duplicates + b.duplicates,
    }
}

impl<S: ReadingSource, D: ShardReader> QueryService<S, D> {
    /// What the request's reads of slab-held readings over `range` are planned by:
    /// [`SlabProgress::NoSlabs`] at no cost where no layout over it has slabs; else the
    /// compaction progress, read within `budget` (a call, and an item when found,
    /// charged to `cost`), where the service has the rollups table. A budget with no
    /// call or time left refuses the request: slabs alone would miss every reading
    /// compacted since its slab expired.
    pub(super) async fn slab_progress(
        &self,
        table: &TableHistory,
        range: TimeRange,
        budget: ReadBudget,
        cost: &mut ReadCost,
    ) -> Result<SlabProgress, ApiError> {
        if slab_epochs(table, range).is_empty() {
            return Ok(SlabProgress::NoSlabs);
        }
        let Some(rollups) = &self.rollups else {
            return Ok(SlabProgress::Compaction(None));
        };
        let refuse = |spent| budget::refusal(spent, &self.config.budget, Advice::NarrowRange);
        if budget.queries <= cost.pages || budget.evaluated <= cost.items_read {
            return Err(refuse(Exhausted::Queries));
        }
        let compacted = within(budget.deadline, rollups.compacted())
            .await
            .ok_or_else(|| refuse(Exhausted::Time))?
            .map_err(store_error)?;
        cost.pages += 1;
        cost.rounds += 1;
        cost.items_read += u64::from(compacted.is_some());
        Ok(SlabProgress::Compaction(compacted))
    }

    /// The slab and run streams of `device`'s read of `range` (see `crate::slabs`),
    /// each slab window on every fan-out key its group can have written it under: the
    /// most in force from the window's start to an hour after its end
    /// (`sharding::epoch::REKEY_HORIZON`, the key rule's keying time).
    pub(super) async fn slab_streams(
        &self,
        device: &str,
        range: TimeRange,
        table: &TableHistory,
        progress: SlabProgress,
        now: sharding::time::Timestamp,
    ) -> Result<Vec<StreamSpec>, ApiError> {
        let SlabProgress::Compaction(compacted) = progress else {
            return Ok(Vec::new());
        };
        let mut fanouts: Vec<(SlabOwner, FanoutHistory)> = Vec::new();
        for owner in owners(table, device, range) {
            let history = self
                .directory
                .fanout(&owner.entity(), now)
                .await
                .map_err(store_error)?;
            fanouts.push((owner, history));
        }
        let fanout = |owner: SlabOwner, window: Window| {
            fanouts
                .iter()
                .find(|(o, _)| *o == owner)
                .map_or(1, |(_, history)| {
                    let last = window.end().pred().saturating_add(REKEY_HORIZON);
                    history.max_over(window.start(), last, 1)
                })
        };
        Ok(streams(table, device, range, compacted, fanout))
    }
}
