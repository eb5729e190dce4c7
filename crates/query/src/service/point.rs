//! The single-reading route, `GET /devices/{device_id}/readings/{event_id}?ts=`: each
//! of the reading's possible keys is read (GetItem), most likely first; under a layout
//! that hashes an attribute the request does not carry, every shard at that
//! millisecond is scanned instead. Where the layout packs readings into blocks, a
//! reading can also be a member of a block that starts up to a window earlier: the
//! device's plan at that millisecond, which reads the window back, is read for it
//! beside the keys. A reading sent again with new values can be stored twice (under
//! two keys across a raise, in two blocks): of what these reads find, the copy written
//! last is answered (`sharding::written`), as a range read answers it. Where the layout
//! at that millisecond has slabs, its window's run or slab partitions are read beside
//! the keys too (`crate::slabs`), for a reading a slab or run holds.

use std::time::Instant;

use sharding::key::{ItemKey, KeyError, ReadingRef, point_keys};
use sharding::read_plan::plan_entity;
use sharding::time::Timestamp;
use sharding::written::keep_last;
use store::directory::{DeviceLayout, ShardReader};
use store::item::ReadingItem;
use store::read::ReadingSource;

use super::answer::{json_body, reading_out, store_error};
use super::plan::{plan_error, specs, to_time_range};
use super::slabs::less;
use super::{Answer, QueryService, ReadStats};
use crate::budget::{self, Advice};
use crate::error::{ApiError, codes};
use crate::exec::{Exhausted, ReadCost, scan_all, within};
use crate::params::Range;

/// A validated point read.
#[derive(Debug, Clone, Copy)]
pub(super) struct Point<'a> {
    pub(super) device: &'a str,
    pub(super) event_id: &'a str,
    pub(super) ts_ms: i64,
    pub(super) consistent: bool,
}

impl<S: ReadingSource, D: ShardReader> QueryService<S, D> {
    /// The reading `point` names, or 404.
    pub(super) async fn reading(
        &self,
        point: &Point<'_>,
        now: Timestamp,
        deadline: Option<Instant>,
    ) -> Answer {
        let Point {
            device,
            event_id,
            ts_ms,
            consistent,
        } = *point;
        let ts =
            Timestamp::from_millis(ts_ms).map_err(|e| ApiError::bad_range(format!("ts: {e}")))?;
        let not_found = || {
            ApiError::not_found(format!(
                "no reading {event_id} of device {device} at {}",
                ts.to_rfc3339()
            ))
        };
        let Some(layout) = self.device_layout(device, now).await? else {
            return Err(not_found());
        };
        let DeviceLayout { table, fanout } = &layout;
        let reading = ReadingRef::new(device, event_id, ts);
        let mut stats = ReadStats::default();
        let found = match point_keys(&reading, table, fanout) {
            Ok(keys) => {
                // The reading's own keys and, where the layout packs blocks, the block
                // window before it, at once: a reading inside a block costs one round
                // trip, not a miss and then a Query. The window's share of the budget
                // leaves room for every GetItem.
                let mut window = ReadStats {
                    calls: keys.len() as u64,
                    ..ReadStats::default()
                };
                let (own, in_block) = tokio::join!(
                    self.first_stored(&keys, &reading, consistent, deadline, &mut stats),
                    self.scan_plan(point, &layout, (now, deadline), &mut window, true),
                );
                stats.calls += window.calls - keys.len() as u64;
                stats.items_read += window.items_read;
                match (own, in_block) {
                    (Ok(Some(mut own)), Ok(Some(mut in_block))) => {
                        keep_last(&mut own, &mut in_block);
                        Some(own)
                    }
                    (Ok(Some(item)), _) | (_, Ok(Some(item))) => Some(item),
                    (Err(e), _) => return Err(e),
                    (Ok(None), in_block) => in_block?,
                }
            }
            // A layout that hashes another attribute: look in every shard at that ms.
            Err(KeyError::MissingAttribute { .. }) => {
                self.scan_plan(point, &layout, (now, deadline), &mut stats, false)
                    .await?
            }
            Err(e) => return Err(ApiError::bad_request(codes::BAD_ID, e.to_string())),
        };
        let item = found.ok_or_else(not_found)?;
        stats.items_returned = 1;
        let out = reading_out(item)?;
        let body = json_body(&out)?;
        Ok((body, stats))
    }

    /// GetItem on each of `keys` in order (most likely first), every one: two can hold
    /// copies of `reading` (a re-send across a raise), of which the one written last is
    /// answered. Counts the calls and items read into `stats`.
    async fn first_stored(
        &self,
        keys: &[ItemKey],
        reading: &ReadingRef<'_>,
        consistent: bool,
        deadline: Option<Instant>,
        stats: &mut ReadStats,
    ) -> Result<Option<ReadingItem>, ApiError> {
        let refuse = |spent| budget::refusal(spent, &self.config.budget, Advice::NarrowRange);
        let mut found: Option<ReadingItem> = None;
        for key in keys {
            if stats.calls >= self.config.budget.queries {
                return Err(refuse(Exhausted::Queries));
            }
            stats.calls += 1;
            let item = within(deadline, self.source.get_reading(key, consistent))
                .await
                .ok_or_else(|| refuse(Exhausted::Time))?
                .map_err(store_error)?;
            stats.items_read += u64::from(item.is_some());
            if let Some(mut item) = item
                && item.device_id == reading.entity
                && item.event_id == reading.event_id
            {
                match &mut found {
                    Some(kept) => keep_last(kept, &mut item),
                    None => found = Some(item),
                }
            }
        }
        Ok(found)
    }

    /// Every key of the device's plan at the point's millisecond, read whole, for the
    /// reading (blocks read back included), and the run or slab partitions of its slab
    /// window where the layout has slabs; `only_blocks` leaves out the device's own keys
    /// (the blocks' lanes and the slabs alone), and reads nothing where there are none.
    /// Adds the calls and items read to `stats`, and spends only what is left of the
    /// request's budget. A budget that ends the scan before it found the reading refuses
    /// the request.
    async fn scan_plan(
        &self,
        point: &Point<'_>,
        DeviceLayout { table, fanout }: &DeviceLayout,
        (now, deadline): (Timestamp, Option<Instant>),
        stats: &mut ReadStats,
        only_blocks: bool,
    ) -> Result<Option<ReadingItem>, ApiError> {
        let range = to_time_range(Range {
            from_ms: point.ts_ms,
            to_ms: point.ts_ms + 1,
        })?;
        let mut plan = plan_entity(point.device, range, table, fanout).map_err(plan_error)?;
        if only_blocks {
            // The reading's own items are every key `point_keys` names, read by GetItem
            // beside this scan: only the blocks' lanes are left to read.
            plan.queries.retain(|q| q.block_window_ms.is_some());
        }
        let mut spent = ReadCost::default();
        let budget = self.config.budget.read(deadline);
        let progress = self
            .slab_progress(table, range, less(budget, spent), &mut spent)
            .await?;
        stats.calls += spent.pages;
        stats.items_read += spent.items_read;
        let mut specs = specs(&plan);
        specs.extend(
            self.slab_streams(point.device, range, table, progress, now)
                .await?,
        );
        if specs.is_empty() {
            return Ok(None);
        }
        let mut budget = budget;
        budget.queries = budget.queries.saturating_sub(stats.calls);
        budget.evaluated = budget.evaluated.saturating_sub(stats.items_read);
        let mut found: Option<ReadingItem> = None;
        let outcome = scan_all(
            &self.source,
            specs,
            point.consistent,
            self.config.concurrency,
            budget,
            |item| {
                if item.event_id == point.event_id && item.device_id == point.device {
                    let mut copy = item.clone();
                    match &mut found {
                        Some(kept) => keep_last(kept, &mut copy),
                        None => found = Some(copy),
                    }
                }
            },
        )
        .await
        .map_err(store_error)?;
        stats.calls += outcome.pages;
        stats.items_read += outcome.items_read;
        match (found, outcome.stopped) {
            (Some(item), _) => Ok(Some(item)),
            (None, Some(spent)) => Err(budget::refusal(
                spent,
                &self.config.budget,
                Advice::NarrowRange,
            )),
            (None, None) => Ok(None),
        }
    }
}
