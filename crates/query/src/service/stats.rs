//! The stats route, `GET /devices/{device_id}/stats`: one metric of one device in
//! buckets of `interval`, a page of complete buckets at a time ([`crate::stats`] says
//! where a page ends), each reading counted once.

use std::ops::ControlFlow;
use std::time::Instant;

use sharding::read_plan::plan_entity;
use sharding::time::Timestamp;
use store::directory::ShardReader;
use store::read::ReadingSource;

use super::answer::{PAGE_OVERHEAD_BYTES, exec_error, json_body, store_error};
use super::plan::{plan_error, specs, to_time_range};
use super::{Answer, QueryService, ReadStats};
use crate::budget::{self, Advice};
use crate::cursor::{Fingerprint, decode_cursor, encode_cursor};
use crate::error::ApiError;
use crate::exec::{ReadOptions, merge_each};
use crate::model::{ReadingKey, StatsResponse};
use crate::params::Range;
use crate::stats::{PageEnd, Pager, interval_text};

/// The most bytes one stats bucket takes as JSON (a 24-character start, a 20-digit
/// count, three numbers of at most 24 characters, and the field names).
const STATS_BUCKET_MAX_BYTES: usize = 160;

/// A validated stats request.
#[derive(Debug, Clone, Copy)]
pub(super) struct StatsRequest<'a> {
    pub(super) device: &'a str,
    pub(super) range: Range,
    pub(super) interval_ms: i64,
    pub(super) metric: &'a str,
    pub(super) consistent: bool,
    pub(super) cursor: Option<&'a str>,
}

impl StatsRequest<'_> {
    /// What its cursors are bound to: everything that shapes the buckets.
    fn fingerprint(&self) -> Fingerprint {
        Fingerprint {
            route: "stats",
            device: Some(self.device.to_owned()),
            from_ms: self.range.from_ms,
            to_ms: self.range.to_ms,
            descending: false,
            limit: 0,
            detail: format!("interval={} metric={}", self.interval_ms, self.metric),
        }
    }
}

impl<S: ReadingSource, D: ShardReader> QueryService<S, D> {
    /// A page of buckets of `request`'s metric.
    pub(super) async fn stats(
        &self,
        request: &StatsRequest<'_>,
        now: Timestamp,
        deadline: Option<Instant>,
    ) -> Answer {
        let started = Instant::now();
        let StatsRequest {
            device,
            range,
            interval_ms,
            metric,
            ..
        } = *request;
        let fp = request.fingerprint();
        let read = Range {
            from_ms: self.page_start(request, &fp, now)?,
            to_ms: range.to_ms,
        };
        let Some(table) = self.stored_layout(now).await? else {
            let empty = StatsResponse {
                buckets: vec![],
                next_cursor: None,
            };
            return Ok((json_body(&empty)?, ReadStats::default()));
        };
        let fanout = self
            .directory
            .fanout(device, now)
            .await
            .map_err(store_error)?;
        let plan =
            plan_entity(device, to_time_range(read)?, &table, &fanout).map_err(plan_error)?;
        let mut pager = Pager::new(interval_ms, self.config.stats_budget, started);
        pager.limit_buckets(self.max_buckets());
        // In merge order, so a reading stored under two keys is counted once, and the
        // buckets close in time order.
        let outcome = merge_each(
            &self.source,
            specs(&plan),
            self.stats_options(request.consistent, started, deadline),
            self.config.stats_window,
            |item| {
                if item.device_id != device || !(read.from_ms..read.to_ms).contains(&item.ts_ms) {
                    return ControlFlow::Continue(());
                }
                pager.add(item.ts_ms, item.metrics.get(metric), Instant::now())
            },
        )
        .await
        .map_err(exec_error)?;
        if let Some(stopped) = outcome.stopped
            && !pager.stop_at(stopped.settled_before, read.from_ms)
        {
            return Err(budget::refusal(
                stopped.budget,
                &self.config.budget,
                Advice::NarrowRange,
            ));
        }
        let stats = ReadStats::of(outcome.cost, pager.readings(), plan.len() as u64);
        let (mut page, end) = pager.finish(&interval_text(interval_ms))?;
        if let PageEnd::ResumeAt(next) = end {
            let position = ReadingKey {
                ts_ms: next,
                device_id: device.to_owned(),
                event_id: String::new(),
            };
            let keys = self.config.cursor_keys.get();
            page.next_cursor = Some(encode_cursor(&position, &fp, &keys, now));
        }
        let body = json_body(&page)?;
        Ok((body, stats))
    }

    /// Where the page starts: a page after the first starts at the bucket the previous
    /// one left out, which its cursor names.
    fn page_start(
        &self,
        request: &StatsRequest<'_>,
        fp: &Fingerprint,
        now: Timestamp,
    ) -> Result<i64, ApiError> {
        match request.cursor {
            Some(raw) => Ok(decode_cursor(raw, fp, &self.config.cursor_keys.get(), now)
                .map_err(|e| ApiError::bad_cursor(e.to_string()))?
                .ts_ms),
            None => Ok(request.range.from_ms),
        }
    }

    /// How a page reads: in time order, within the request's budgets and by the
    /// earlier of the request's deadline and the page's own time budget (twice
    /// [`crate::stats::StatsBudget::time`]), so a sparse range stops there as well.
    fn stats_options(
        &self,
        consistent: bool,
        started: Instant,
        deadline: Option<Instant>,
    ) -> ReadOptions {
        let page_deadline = started + 2 * self.config.stats_budget.time;
        ReadOptions {
            descending: false,
            consistent,
            concurrency: self.config.concurrency,
            max_buffered: self.config.max_buffered,
            budget: self.config.budget.read(Some(
                deadline.map_or(page_deadline, |d| d.min(page_deadline)),
            )),
        }
    }

    /// The most buckets that fit the answer's byte budget.
    fn max_buckets(&self) -> usize {
        self.config
            .budget
            .answer_bytes
            .saturating_sub(PAGE_OVERHEAD_BYTES)
            / STATS_BUCKET_MAX_BYTES
    }
}
