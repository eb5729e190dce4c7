//! The newest-reading route, `GET /devices/{device_id}/latest`: the device's reading
//! with the greatest timestamp, read from the readings table itself at the request's
//! `now`, so a reading is answered as soon as its write is acknowledged: with
//! `consistent=true` (an eventually consistent read can lag the write by DynamoDB's
//! usual fraction of a second), and, for a reading keyed under a fan-out raised
//! moments before, once the function's cached fan-out is as new as the raise
//! (`SHARD_CACHE_TTL_SECS`, 5 s; ARCHITECTURE.md, "What a raise guarantees").
//!
//! Each read is the range route's read, newest first, with a limit of one: the
//! device's read plan over a range ([`look_back`] at most; blocks read back included)
//! merged in descending order (`crate::exec::read_merged`). The merge opens the newest
//! bucket first and an older one only while nothing newer is found, at most doubling
//! the buckets it opens a round while they are empty (`sharding::merge`, "Reading
//! ahead"), each page with a `Limit` of about one item a lane; and the read stops at
//! the first reading the merge emits (`MergedPage::stop_at_limit`), which is the
//! greatest by the merge key. So:
//! - the answer is the newest by timestamp, not the last written: an older reading that
//!   arrives later never replaces it;
//! - readings at the same millisecond are ordered by event id, and the greatest wins
//!   (the merge key is (time, device, event id), read descending);
//! - a reading stored under two keys (a redelivery after a fan-out raise), or alone and
//!   in a block, is one reading.
//!
//! The look-back is `[now - MAX_DEVICE_RANGE, now + 5 min)`. The query knows no
//! retention of its own (the ingest's `RETENTION_DAYS`, 30 by default, sets when items
//! expire), so it looks back as far as one device's range read may reach
//! (`Limits::max_device_range_ms`, 31 days by default), and ahead as far as the ingest
//! accepts a timestamp (`store::config::DEFAULT_MAX_FUTURE_SECS`). A device with no
//! reading in it is 404.
//!
//! # Where the sealer's directory tells what is not there
//!
//! Without the rollups table (no [`QueryService::with_rollups`]), or before the sealer's
//! first watermark, the whole look-back is read as one range: a device whose newest
//! reading is days old costs a Query a lane of every empty bucket since, and one with
//! none 745 Queries at fan-out 1 in hour buckets (1,490 with blocks' two lanes).
//!
//! With it, the sealed hours `[from_ms, end_ms)` of the watermark
//! (`store::rollup::watermark::Watermark`) hold no reading of the device newer than its
//! directory entry's `last_seen_ms` (`store::rollup::DirEntry`, which the sealer
//! writes before it moves the watermark past the hour), and none at all when it has no
//! entry. So the route reads, strongly consistent, the watermark, then:
//! 1. the unsealed tail, `[end_ms, now + 5 min)`: a reading there is newer than any
//!    sealed one, and is the answer;
//! 2. otherwise the device's directory entry (one GetItem), and the readings from the
//!    look-back's start up to and including `last_seen_ms`: the first bucket read holds
//!    that reading; or, with no entry, only the hours before the first sealed one, which
//!    the directory does not cover (nothing once the sealer has run for the look-back).
//!
//! At fan-out 1 in hour buckets, with the sealer keeping up (the tail is one or two
//! buckets), that is at most 2 GetItems and 3 Queries, whether the device is recent,
//! silent for weeks, or unknown (404); 7 Queries where the layout packs blocks (two
//! lanes a bucket, and the block lane of the bucket before the reading's, where a block
//! holding it may start); a raised device (fan-out k) reads k + 1 keys a bucket. Where the reading at
//! `last_seen_ms` is gone (expired by its TTL), the read goes on back through older
//! buckets, as without the directory.
//!
//! What the directory does not know yet is not answered: a reading written late into
//! an hour already sealed (after the lateness horizon) is in no directory entry until
//! the sealer's next run seals its late mark (a minute by default). Until then a device
//! whose only readings in the look-back are such late ones is 404, and one with other
//! readings answers the newest the directory knows of (or a newer one of the tail).
//!
//! Every read, the rollups' GetItems included, is held to the request's budgets: one
//! that runs out before a reading is found is refused with 400 `budget_exceeded`,
//! naming the budget and, where known, the instant back to which the device has no
//! reading; never a timeout.

use std::time::Instant;

use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::read_plan::plan_entity;
use sharding::time::Timestamp;
use store::config::DEFAULT_MAX_FUTURE_SECS;
use store::directory::{DeviceLayout, ShardReader};
use store::item::ReadingItem;
use store::read::ReadingSource;
use store::rollup::{DirEntry, keys};

use super::answer::{exec_error, json_body, reading_out, store_error};
use super::plan::{plan_error, specs, to_time_range};
use super::rollups::{Fetch, Spend};
use super::slabs::{SlabProgress, sum};
use super::{Answer, QueryService, ReadStats};
use crate::budget::{self, Advice};
use crate::error::ApiError;
use crate::exec::{Exhausted, MergedPage, ReadBudget, ReadCost, ReadOptions, read_merged};
use crate::model::{LatestOut, format_ts};
use crate::params::{Limits, MAX_TS_MS, Range};
use store::rollup::watermark::Watermark;

/// The instants `GET /devices/{device_id}/latest` looks at, at `now`: back by the
/// device route's widest range, ahead by how far past a writer's clock the ingest
/// accepts a timestamp.
pub fn look_back(now: Timestamp, limits: &Limits) -> Range {
    let now_ms = now.as_millis();
    let ahead_ms = i64::try_from(DEFAULT_MAX_FUTURE_SECS.saturating_mul(1000)).unwrap_or(0);
    Range {
        from_ms: now_ms.saturating_sub(limits.max_device_range_ms).max(0),
        to_ms: now_ms.saturating_add(ahead_ms).min(MAX_TS_MS),
    }
}

/// The part of the look-back below the unsealed tail to read, `[look-back start, this)`,
/// given the sealed hours `span` (the part of them below `upper`, the tail's start) and
/// the device's directory entry: up to and including its newest sealed reading, or, with
/// no entry (or one older than the first sealed hour), up to the first sealed hour.
fn below_tail(span: Watermark, upper: i64, entry: Option<&DirEntry>) -> i64 {
    match entry {
        Some(e) if e.last_seen_ms >= span.from_ms => e.last_seen_ms.saturating_add(1).min(upper),
        _ => span.from_ms.min(upper),
    }
}

/// What the route's reads of one device need, and what they spent so far.
struct Look<'a> {
    device: &'a str,
    table: &'a TableHistory,
    fanout: &'a FanoutHistory,
    consistent: bool,
    /// The rollups' ledger, charged every read of the readings too; `None` without the
    /// table.
    spend: Option<&'a Spend<'a>>,
    budget: ReadBudget,
    cost: ReadCost,
    plan_queries: u64,
    /// What its reads of slab-held readings are planned by.
    slabs: SlabProgress,
    /// The request's clock, which dates the directory's cached slab group fan-outs.
    now: Timestamp,
}

impl Look<'_> {
    /// Charges what a read cost, to the rollups' ledger too.
    fn charge(&mut self, cost: ReadCost) {
        if let Some(spend) = self.spend {
            spend.charge(cost);
        }
        self.cost = sum(self.cost, cost);
    }

    /// What is left of the request's budgets.
    fn remaining(&self) -> ReadBudget {
        match self.spend {
            Some(spend) => spend.remaining(),
            None => ReadBudget {
                queries: self.budget.queries.saturating_sub(self.cost.pages),
                evaluated: self.budget.evaluated.saturating_sub(self.cost.items_read),
                deadline: self.budget.deadline,
            },
        }
    }

    fn stats(&self, returned: u64) -> ReadStats {
        let rollup_calls = self.spend.map_or(0, |s| s.calls() - self.cost.pages);
        ReadStats {
            items_read: self.spend.map_or(self.cost.items_read, Spend::evaluated),
            items_returned: returned,
            calls: self.cost.pages + rollup_calls,
            plan_queries: self.plan_queries + rollup_calls,
            // The GetItems are sent one after another, between the reads.
            rounds: self.cost.rounds + rollup_calls,
            duplicates: self.cost.duplicates,
        }
    }
}

/// How a read of the readings ended.
enum Found {
    Reading(Box<ReadingItem>),
    /// None in the range.
    Nothing,
    /// A budget ended the read first; the device has no reading from `none_since` on
    /// (where the read got to).
    Cut {
        budget: Exhausted,
        none_since: i64,
    },
}

impl<S: ReadingSource, D: ShardReader> QueryService<S, D> {
    /// The newest reading of `device` at `now`, or 404 when it has none in the
    /// look-back.
    pub(super) async fn latest(
        &self,
        device: &str,
        consistent: bool,
        now: Timestamp,
        deadline: Option<Instant>,
    ) -> Answer {
        let range = look_back(now, &self.config.limits);
        let not_found = || {
            ApiError::not_found(format!(
                "device {device} has no reading from {} to {} (MAX_DEVICE_RANGE back from \
                 the request's clock, and 5 minutes ahead of it)",
                instant(range.from_ms),
                instant(range.to_ms)
            ))
        };
        let Some(DeviceLayout { table, fanout }) = self.device_layout(device, now).await? else {
            return Err(not_found());
        };
        let budget = self.config.budget.read(deadline);
        // Strongly consistent: the directory entries the sealer wrote before it moved
        // the watermark read are all there.
        let spend = self.rollups.as_ref().map(|t| Spend::consistent(t, budget));
        let mut look = Look {
            device,
            table: &table,
            fanout: &fanout,
            consistent,
            spend: spend.as_ref(),
            budget,
            cost: ReadCost::default(),
            plan_queries: 0,
            slabs: SlabProgress::NoSlabs,
            now,
        };
        let mut progress_cost = ReadCost::default();
        look.slabs = self
            .slab_progress(
                &table,
                to_time_range(range)?,
                look.remaining(),
                &mut progress_cost,
            )
            .await?;
        look.charge(progress_cost);
        let span = match &spend {
            None => None,
            Some(spend) => match spend.sealed_span().await? {
                Fetch::Got(span) => span,
                Fetch::Cut(budget) => return Err(self.refusal(budget, None)),
            },
        };
        let Some(span) = span else {
            // Nothing sealed, or no directory: the whole look-back.
            return match self.newest_in(&mut look, range).await? {
                Found::Reading(item) => self.answer(*item, &look, now),
                Found::Nothing => Err(not_found()),
                Found::Cut { budget, none_since } => Err(self.refusal(budget, Some(none_since))),
            };
        };
        // 1. The unsealed tail: newer than anything sealed.
        let tail_start = span.end_ms.clamp(range.from_ms, range.to_ms);
        let tail = Range {
            from_ms: tail_start,
            to_ms: range.to_ms,
        };
        match self.newest_in(&mut look, tail).await? {
            Found::Reading(item) => return self.answer(*item, &look, now),
            Found::Nothing => {}
            Found::Cut { budget, none_since } => {
                return Err(self.refusal(budget, Some(none_since)));
            }
        }
        if tail_start <= range.from_ms {
            // The sealed hours end before the look-back: the tail was all of it.
            return Err(not_found());
        }
        // 2. Below the tail, what the directory leaves unknown.
        let dir_key = keys::directory_entry(device);
        let entry = match &spend {
            Some(spend) => match spend.get(&dir_key.pk, &dir_key.sk).await? {
                Fetch::Got(item) => item
                    .map(|i| i.body::<DirEntry>())
                    .transpose()
                    .map_err(store_error)?,
                Fetch::Cut(budget) => return Err(self.refusal(budget, Some(tail_start))),
            },
            None => None,
        };
        let below = Range {
            from_ms: range.from_ms,
            to_ms: below_tail(span, tail_start, entry.as_ref()),
        };
        if below.from_ms >= below.to_ms {
            return Err(not_found());
        }
        match self.newest_in(&mut look, below).await? {
            Found::Reading(item) => self.answer(*item, &look, now),
            Found::Nothing => Err(not_found()),
            // The hours between the read and the tail hold none either (sealed, and
            // newer than the directory's reading).
            Found::Cut { budget, none_since } => Err(self.refusal(budget, Some(none_since))),
        }
    }

    /// The newest reading of `look`'s device in `range` (non-empty), within what is
    /// left of the budgets; what it cost is charged to `look`.
    async fn newest_in(&self, look: &mut Look<'_>, range: Range) -> Result<Found, ApiError> {
        let time_range = to_time_range(range)?;
        let plan =
            plan_entity(look.device, time_range, look.table, look.fanout).map_err(plan_error)?;
        let mut specs = specs(&plan);
        specs.extend(
            self.slab_streams(look.device, time_range, look.table, look.slabs, look.now)
                .await?,
        );
        let opts = ReadOptions {
            descending: true,
            consistent: look.consistent,
            concurrency: self.config.concurrency,
            max_buffered: self.config.max_buffered,
            budget: look.remaining(),
        };
        let page = MergedPage {
            limit: 1,
            after: None,
            density_hint: None,
            devices: None,
            stop_at_limit: true,
        };
        look.plan_queries += specs.len() as u64;
        let outcome = read_merged(&self.source, specs, opts, page, |_| true)
            .await
            .map_err(exec_error)?;
        look.charge(outcome.cost);
        Ok(match (outcome.items.into_iter().next(), outcome.stopped) {
            (Some(item), _) => Found::Reading(Box::new(item)),
            (None, None) => Found::Nothing,
            // Descending: every reading after `settled_before` was looked at.
            (None, Some(stopped)) => Found::Cut {
                budget: stopped.budget,
                none_since: stopped.settled_before.saturating_add(1),
            },
        })
    }

    fn answer(&self, item: ReadingItem, look: &Look<'_>, now: Timestamp) -> Answer {
        let latest = LatestOut {
            reading: reading_out(item)?,
            as_of: now.to_rfc3339(),
        };
        Ok((json_body(&latest)?, look.stats(1)))
    }

    /// 400 `budget_exceeded` for a look-back that a budget ended before it found a
    /// reading: it names the budget, and the instant back to which the device has none
    /// where the reads got that far.
    fn refusal(&self, budget: Exhausted, none_since: Option<i64>) -> ApiError {
        let mut e = budget::refusal(budget, &self.config.budget, Advice::OlderRange);
        if let Some(since) = none_since {
            e.message
                .push_str(&format!(" (it has none at or after {})", instant(since)));
        }
        e
    }
}

/// `ms` as RFC 3339, or as milliseconds outside the years 0000 to 9999.
fn instant(ms: i64) -> String {
    format_ts(ms).unwrap_or_else(|| format!("{ms} ms"))
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use store::rollup::HOUR_MS;

    use super::*;

    const H: i64 = HOUR_MS;

    fn entry(last_seen_ms: i64) -> DirEntry {
        DirEntry {
            device: "d".to_owned(),
            first_seen_ms: 0,
            last_seen_ms,
            last_event: "e".to_owned(),
            metrics: BTreeSet::new(),
            more_metrics: false,
            tags: BTreeMap::new(),
        }
    }

    #[test]
    fn below_the_tail_only_what_the_directory_does_not_cover_is_read() {
        let span = Watermark::span(10 * H, 100 * H);
        // Up to and including the newest sealed reading.
        assert_eq!(
            below_tail(span, 100 * H, Some(&entry(50 * H + 7))),
            50 * H + 8
        );
        // No entry, or one from a rebuild of hours before the first sealed one: the
        // hours before the first sealed one.
        assert_eq!(below_tail(span, 100 * H, None), 10 * H);
        assert_eq!(below_tail(span, 100 * H, Some(&entry(3 * H))), 10 * H);
        // An entry past the tail's start (a run that stopped mid-hour): no hour is known
        // empty, so all of it.
        assert_eq!(
            below_tail(span, 100 * H, Some(&entry(100 * H + 5))),
            100 * H
        );
        // The tail starts earlier (the request's clock is behind the watermark).
        assert_eq!(below_tail(span, 40 * H, Some(&entry(50 * H))), 40 * H);
        assert_eq!(below_tail(span, 5 * H, None), 5 * H);
    }
}
