//! The newest-reading route, `GET /devices/{device_id}/latest`: the device's reading
//! with the greatest timestamp, read from the readings table itself at the request's
//! `now` (no derived data), so a reading is answered as soon as its write is
//! acknowledged: with `consistent=true` (an eventually consistent read can lag the
//! write by DynamoDB's usual fraction of a second), and, for a reading keyed under a
//! fan-out raised moments before, once the function's cached fan-out is as new as the
//! raise (`SHARD_CACHE_TTL_SECS`, 5 s; ARCHITECTURE.md, "What a raise guarantees").
//!
//! It is the range route's read, newest first, with a limit of one: the device's read
//! plan over the look-back ([`look_back`]; blocks read back included) merged in
//! descending order (`crate::exec::read_merged`). The merge opens the newest bucket
//! first and an older one only while nothing newer is found, at most doubling the
//! buckets it opens a round while they are empty (`sharding::merge`, "Reading
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
//! What it costs: one Query a lane of each bucket read (a device at fan-out k reads
//! k + 1 keys a time bucket, two lanes each where the layout packs blocks), so a device
//! whose newest reading is recent costs a few Queries, and one whose newest is days
//! old a Query a lane of every empty bucket since. The request's budgets bound it like
//! any read: one that runs out before a reading is found is refused with 400
//! `budget_exceeded`, naming the budget and the instant back to which the device has
//! no reading; never a timeout.

use std::time::Instant;

use sharding::read_plan::plan_entity;
use sharding::time::Timestamp;
use store::config::DEFAULT_MAX_FUTURE_SECS;
use store::directory::ShardReader;
use store::read::ReadingSource;

use super::answer::{exec_error, json_body, reading_out, store_error};
use super::plan::{plan_error, specs, to_time_range};
use super::{Answer, QueryService, ReadStats};
use crate::budget::{self, Advice};
use crate::error::ApiError;
use crate::exec::{MergedPage, ReadOptions, Stopped, read_merged};
use crate::model::{LatestOut, format_ts};
use crate::params::{Limits, MAX_TS_MS, Range};

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
        let Some(table) = self.stored_layout(now).await? else {
            return Err(not_found());
        };
        let fanout = self
            .directory
            .fanout(device, now)
            .await
            .map_err(store_error)?;
        let plan =
            plan_entity(device, to_time_range(range)?, &table, &fanout).map_err(plan_error)?;
        let opts = ReadOptions {
            descending: true,
            consistent,
            concurrency: self.config.concurrency,
            max_buffered: self.config.max_buffered,
            budget: self.config.budget.read(deadline),
        };
        let page = MergedPage {
            limit: 1,
            after: None,
            density_hint: None,
            devices: None,
            stop_at_limit: true,
        };
        let outcome = read_merged(&self.source, specs(&plan), opts, page, |_| true)
            .await
            .map_err(exec_error)?;
        let stats = ReadStats::of(outcome.cost, outcome.items.len() as u64, plan.len() as u64);
        let Some(item) = outcome.items.into_iter().next() else {
            return Err(match outcome.stopped {
                Some(stopped) => self.refusal(stopped),
                None => not_found(),
            });
        };
        let latest = LatestOut {
            reading: reading_out(item)?,
            as_of: now.to_rfc3339(),
        };
        Ok((json_body(&latest)?, stats))
    }

    /// 400 `budget_exceeded` for a look-back that a budget ended before it found a
    /// reading: it names the budget, and the instant back to which the device has none.
    fn refusal(&self, stopped: Stopped) -> ApiError {
        let mut e = budget::refusal(stopped.budget, &self.config.budget, Advice::OlderRange);
        // Descending: every reading after `settled_before` was looked at.
        let none_since = stopped.settled_before.saturating_add(1);
        e.message.push_str(&format!(
            " (it has none at or after {})",
            instant(none_since)
        ));
        e
    }
}

/// `ms` as RFC 3339, or as milliseconds outside the years 0000 to 9999.
fn instant(ms: i64) -> String {
    format_ts(ms).unwrap_or_else(|| format!("{ms} ms"))
}
