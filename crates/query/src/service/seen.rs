//! The fleet's fresh last-seen as `GET /devices` reads it (`store::rollup::seen`): where
//! the table's layout has slabs, the device list moves each device's `last_seen` to its
//! newest slab-held reading compaction has read, within minutes of now, rather than at
//! the hour's seal.
//!
//! Which maps: for each hour after the watermark (or after compaction's first window,
//! when later) up to the compaction progress, the map of the hour's latest window
//! compacted, which holds every device's newest slab-held reading in the hour so far.
//! What is read of them: for each page of the directory read, the chunks holding its
//! ids, two Queries a map (the chunk starting at or before the page's first id, and
//! those starting within it), within the request's budgets. Nothing is read where no
//! layout after the watermark has slabs, nor without a compaction progress.

use std::collections::BTreeMap;

use sharding::epoch::TableHistory;
use sharding::time::{TimeRange, Timestamp};
use store::rollup::compaction::Compacted;
use store::rollup::seen::{self, SeenChunk};
use store::rollup::{HOUR_MS, RollupQuery, hour_of, keys};

use super::answer::store_error;
use super::rollups::{Fetch, Spend};
use crate::error::ApiError;
use crate::exec::Exhausted;

/// The maps a device list reads, and what it has read of them.
#[derive(Debug, Default)]
pub(super) struct FreshSeen {
    /// Each hour's latest compacted window: `(hour, window start)`.
    maps: Vec<(i64, i64)>,
    /// The compaction progress's end: the readings counted lie before it.
    pub(super) to_ms: Option<i64>,
    /// The newest reading of each device read so far.
    seen: BTreeMap<String, i64>,
}

impl FreshSeen {
    /// No map: the directory answers alone.
    pub(super) fn none() -> Self {
        Self::default()
    }

    /// The maps after `sealed_end` (the watermark's end; 0 before any) under `table`
    /// and the compaction progress `compacted`.
    fn of(table: &TableHistory, sealed_end: i64, compacted: Compacted) -> Self {
        let from = sealed_end.max(compacted.from_ms);
        let to = compacted.to_ms;
        let mut maps = Vec::new();
        let mut hour = hour_of(from);
        while hour < to {
            let last = (hour + HOUR_MS).min(to) - 1;
            if last >= from
                && let Ok(at) = Timestamp::from_millis(last)
                && let Some(slabs) = table.at(at).slabs
            {
                maps.push((hour, slabs.window(at).start_ms()));
            }
            hour += HOUR_MS;
        }
        Self {
            to_ms: (!maps.is_empty()).then_some(to),
            maps,
            seen: BTreeMap::new(),
        }
    }

    /// `device`'s last seen: the directory's `sealed_ms`, or its newest slab-held
    /// reading read, when later.
    pub(super) fn last_seen(&self, device: &str, sealed_ms: i64) -> i64 {
        self.seen
            .get(device)
            .map_or(sealed_ms, |&fresh| fresh.max(sealed_ms))
    }

    /// Reads the chunks holding the ids `[lo, hi]` of every map; the budget that stopped
    /// a read, if one did.
    pub(super) async fn load(
        &mut self,
        spend: &Spend<'_>,
        lo: &str,
        hi: &str,
    ) -> Result<Option<Exhausted>, ApiError> {
        let maps = self.maps.clone();
        for (hour, window) in maps {
            let pk = seen::partition(hour);
            // The chunk starting at or before `lo`, then those starting within.
            let mut before = RollupQuery::partition(pk.clone(), false);
            before.sk_between = Some((seen::window_prefix(window), seen::sort_key(window, lo)));
            before.ascending = false;
            let mut within = RollupQuery::partition(pk, false);
            within.sk_between = Some((seen::sort_key(window, lo), seen::sort_key(window, hi)));
            for (mut q, most) in [(before, Some(1)), (within, None)] {
                let mut read = 0;
                loop {
                    let page = match spend.query(&q, most.unwrap_or(100)).await? {
                        Fetch::Got(page) => page,
                        Fetch::Cut(budget) => return Ok(Some(budget)),
                    };
                    for item in &page.items {
                        self.merge(&SeenChunk::of(item).map_err(store_error)?, lo, hi);
                    }
                    read += page.items.len() as u64;
                    match page.last_sk {
                        Some(last) if most.is_none_or(|m| read < m) => q.after = Some(last),
                        _ => break,
                    }
                }
            }
        }
        Ok(None)
    }

    fn merge(&mut self, chunk: &SeenChunk, lo: &str, hi: &str) {
        for (device, at) in chunk.last_seen() {
            if (lo..=hi).contains(&device) {
                let newest = self.seen.entry(device.to_owned()).or_insert(at);
                *newest = (*newest).max(at);
            }
        }
    }
}

/// Whether a layout of `table` in force from `from_ms` to `now` has slabs: only then
/// can compaction have written fresh minutes or maps after `from_ms`.
pub(super) fn slabs_after(table: &TableHistory, from_ms: i64, now: Timestamp) -> bool {
    TimeRange::of_millis(from_ms, now.as_millis().max(from_ms + 1))
        .is_ok_and(|after| table.spans(after).iter().any(|(_, l)| l.slabs.is_some()))
}

/// The maps of the fleet's fresh last-seen a device list reads after the watermark's
/// `sealed_end` at `now`: none, at no cost, where no layout from it to `now` has slabs;
/// else after one GetItem of the compaction progress, the latest compacted window's of
/// each hour it passed since.
pub(super) async fn fresh_seen(
    spend: &Spend<'_>,
    table: Option<&TableHistory>,
    sealed_end: i64,
    now: Timestamp,
) -> Result<Fetch<FreshSeen>, ApiError> {
    let Some(table) = table.filter(|t| slabs_after(t, sealed_end, now)) else {
        return Ok(Fetch::Got(FreshSeen::none()));
    };
    let key = keys::compaction();
    Ok(match spend.get(&key.pk, &key.sk).await? {
        Fetch::Got(Some(item)) => {
            let compacted = Compacted::of(&item).map_err(store_error)?;
            Fetch::Got(FreshSeen::of(table, sealed_end, compacted))
        }
        Fetch::Got(None) => Fetch::Got(FreshSeen::none()),
        Fetch::Cut(budget) => Fetch::Cut(budget),
    })
}
