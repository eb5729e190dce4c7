//! The query service: validated request in, JSON response out. Independent of the
//! Lambda runtime: [`QueryService::handle`] takes any `http::Request`, so the Lambda,
//! the local runner and tests share it.
//!
//! A reading can be stored under more than one partition key (fan-out keys nest, and a
//! redelivery after a raise keys it with the larger fan-out). Every answer shows it
//! once: range reads and stats merge by the reading's identity and drop copies (see
//! [`crate::exec`]), and a single-reading lookup stops at the first key that holds it.

use std::ops::ControlFlow;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use http::{HeaderValue, Response, StatusCode, header};
use serde_json::json;
use sharding::epoch::{FanoutHistory, TableHistory};
use sharding::key::{ItemKey, KeyError, ReadingRef, point_keys};
use sharding::read_plan::{KeyQuery, PlanError, ReadPlan, plan_all, plan_entity};
use sharding::time::{TimeRange, Timestamp};
use store::clock::{ClockError, wall_clock};
use store::directory::{CachedDirectory, ShardReader};
use store::error::StoreError;
use store::item::ReadingItem;
use store::read::{PageKey, ReadingSource};

use crate::budget::{self, Advice, RequestBudget};
use crate::cursor::{CursorKey, Fingerprint, decode_cursor, encode_cursor};
use crate::error::{ApiError, codes};
use crate::exec::{
    ExecError, Exhausted, ReadCost, ReadOptions, ReadOutcome, StreamSpec, key_of, merge_each,
    read_merged, scan_all, within,
};
use crate::model::{ReadingKey, ReadingOut, ReadingsPage, StatsResponse, format_ts};
use crate::params::{Endpoint, Limits, Range, ReadParams, parse_request};
use crate::stats::{PageEnd, Pager, StatsBudget, interval_text};

/// Readings a stats read plans each round for, by default
/// ([`ServiceConfig::stats_window`]).
pub const DEFAULT_STATS_WINDOW: usize = 5_000;

/// Settings of the service.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    pub limits: Limits,
    /// Most Query calls in flight for one request.
    pub concurrency: usize,
    pub cursor_key: CursorKey,
    /// How long directory entries are reused.
    pub directory_ttl: Duration,
    /// `Retry-After` seconds sent with a 503.
    pub retry_after_secs: u32,
    /// Most readings one request may hold in memory to sort (all-devices reads).
    pub max_buffered: usize,
    /// The readings table's time index (LSI with sort key `ts_ms`), for reads over
    /// every device; `None`: such reads sort whole buckets in memory.
    pub time_index: Option<String>,
    /// Readings a stats read plans each round of Queries for: it holds about this many
    /// in memory (merged in order, to count each reading once) however long the range.
    pub stats_window: usize,
    /// How much one stats page may read before it ends at a bucket boundary.
    pub stats_budget: StatsBudget,
    /// What any one request may cost.
    pub budget: RequestBudget,
}

impl ServiceConfig {
    /// Defaults: the limits of [`Limits::default`], 32 Queries in flight, 60 s
    /// directory cache, 200,000 readings buffered at most, stats read 5,000 readings a
    /// round.
    pub fn new(cursor_key: CursorKey) -> Self {
        Self {
            limits: Limits::default(),
            concurrency: 32,
            cursor_key,
            directory_ttl: Duration::from_secs(60),
            retry_after_secs: 1,
            max_buffered: 200_000,
            time_index: None,
            stats_window: DEFAULT_STATS_WINDOW,
            stats_budget: StatsBudget::default(),
            budget: RequestBudget::default(),
        }
    }
}

/// What one request cost; logged per request and returned to in-process callers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Items DynamoDB evaluated.
    pub items_read: u64,
    /// Items returned (readings) or aggregated (stats).
    pub items_returned: u64,
    /// Query and GetItem calls.
    pub calls: u64,
    /// Queries in the read plan.
    pub plan_queries: u64,
    /// Rounds of concurrent Queries the read waited for one after another (its round
    /// trips); 0 where not tracked (point reads).
    pub rounds: u64,
    /// Second copies of readings stored under two keys that the read came across and
    /// left out of the answer.
    pub duplicates: u64,
}

impl ReadStats {
    fn of(cost: ReadCost, items_returned: u64, plan_queries: u64) -> Self {
        Self {
            items_read: cost.items_read,
            items_returned,
            calls: cost.pages,
            plan_queries,
            rounds: cost.rounds,
            duplicates: cost.duplicates,
        }
    }
}

/// A validated stats request.
#[derive(Debug, Clone, Copy)]
struct StatsRequest<'a> {
    device: &'a str,
    range: Range,
    interval_ms: i64,
    metric: &'a str,
    consistent: bool,
    cursor: Option<&'a str>,
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

/// The query API over a reading source and the shard metadata.
#[derive(Debug)]
pub struct QueryService<S, D> {
    source: S,
    directory: CachedDirectory<D>,
    config: ServiceConfig,
    /// What the last read over every device saw of its streams' density: the next
    /// such read plans its first round by it.
    every_device_density: Mutex<Option<DensityHint>>,
}

/// How long a read over every device plans by the density an earlier one saw. A
/// fleet's rate drifts; a wrong hint costs rounds or items read, never an item of the
/// answer (`sharding::merge`, "A density from an earlier read"), and the read it
/// misleads leaves the density it saw for the next.
const DENSITY_HINT_TTL: Duration = Duration::from_secs(60);

/// A density a read saw (items per millisecond of one stream's span), and when.
#[derive(Debug, Clone, Copy)]
struct DensityHint {
    density: f64,
    seen_at: Timestamp,
}

type Answer = Result<(serde_json::Value, ReadStats), ApiError>;

impl<S: ReadingSource, D: ShardReader> QueryService<S, D> {
    pub fn new(source: S, shards: D, config: ServiceConfig) -> Self {
        Self {
            directory: CachedDirectory::new(shards, config.directory_ttl),
            source,
            config,
            every_device_density: Mutex::new(None),
        }
    }

    pub fn source(&self) -> &S {
        &self.source
    }

    pub fn config(&self) -> &ServiceConfig {
        &self.config
    }

    /// Answers one HTTP request. Never fails: every outcome is a response.
    pub async fn handle<B>(&self, request: &http::Request<B>) -> Response<String> {
        let path = request.uri().path();
        let query = request.uri().query();
        self.handle_parts(request.method().as_str(), path, query)
            .await
    }

    /// [`QueryService::handle`] on the request's parts, with no deadline.
    pub async fn handle_parts(
        &self,
        method: &str,
        path: &str,
        query: Option<&str>,
    ) -> Response<String> {
        self.handle_parts_by(method, path, query, None).await
    }

    /// [`QueryService::handle_parts`] for a request that must stop reading by
    /// `deadline` (the Lambda's deadline less the margin, or whatever the caller has).
    pub async fn handle_parts_by(
        &self,
        method: &str,
        path: &str,
        query: Option<&str>,
        deadline: Option<Instant>,
    ) -> Response<String> {
        let result = match parse_request(method, path, query, &self.config.limits) {
            Ok(endpoint) => self.execute_by(endpoint, deadline).await,
            Err(e) => Err(e),
        };
        match result {
            Ok((body, stats)) => {
                tracing::info!(
                    method,
                    path,
                    status = 200,
                    items_read = stats.items_read,
                    items_returned = stats.items_returned,
                    calls = stats.calls,
                    plan_queries = stats.plan_queries,
                    duplicates = stats.duplicates,
                    over_read = over_read(&stats),
                    "query answered"
                );
                json_response(StatusCode::OK, body.to_string(), None)
            }
            Err(e) => {
                if e.status.is_server_error() {
                    tracing::warn!(method, path, status = e.status.as_u16(), code = e.code, message = %e.message, "query failed");
                } else {
                    tracing::info!(method, path, status = e.status.as_u16(), code = e.code, message = %e.message, "query refused");
                }
                json_response(e.status, e.body(), e.retry_after)
            }
        }
    }

    /// The wall clock, which dates the shard directory's cache, and the table's layout
    /// history as of it (`None`: nothing was written yet).
    async fn stored_layout(&self) -> Result<(Timestamp, Option<TableHistory>), ApiError> {
        let now = wall_clock().map_err(clock_error)?;
        let table = self
            .directory
            .stored_layout(now)
            .await
            .map_err(store_error)?;
        Ok((now, table))
    }

    /// The density the last read over every device saw, while it is recent.
    fn density_hint(&self, now: Timestamp) -> Option<f64> {
        let hint = (*lock(&self.every_device_density))?;
        let fresh = hint.seen_at <= now && now < hint.seen_at.saturating_add(DENSITY_HINT_TTL);
        fresh.then_some(hint.density)
    }

    fn remember_density(&self, density: f64, now: Timestamp) {
        *lock(&self.every_device_density) = Some(DensityHint {
            density,
            seen_at: now,
        });
    }

    /// Runs a validated request, with no deadline.
    pub async fn execute(&self, endpoint: Endpoint) -> Answer {
        self.execute_by(endpoint, None).await
    }

    /// Runs a validated request that must stop reading by `deadline`. The reads stop
    /// there themselves; a lookup of the shard metadata that outlasts it by the
    /// margin is answered 503 rather than left to the function's timeout.
    pub async fn execute_by(&self, endpoint: Endpoint, deadline: Option<Instant>) -> Answer {
        let last_resort = deadline.map(|d| d + self.config.budget.deadline_margin / 2);
        let run = self.route(endpoint, deadline);
        match last_resort {
            Some(at) => tokio::time::timeout_at(tokio::time::Instant::from_std(at), run)
                .await
                .unwrap_or_else(|_| {
                    let mut e = ApiError::unavailable("the request ran out of time; retry later");
                    e.retry_after = Some(1);
                    Err(e)
                }),
            None => run.await,
        }
    }

    async fn route(&self, endpoint: Endpoint, deadline: Option<Instant>) -> Answer {
        match endpoint {
            Endpoint::DeviceReadings { device, read } => {
                self.readings("device_readings", Some(device), read, deadline)
                    .await
            }
            Endpoint::AllReadings { read } => {
                self.readings("all_readings", None, read, deadline).await
            }
            Endpoint::Reading {
                device,
                event_id,
                ts_ms,
                consistent,
            } => {
                let point = Point {
                    device: &device,
                    event_id: &event_id,
                    ts_ms,
                    consistent,
                };
                self.reading(&point, deadline).await
            }
            Endpoint::Stats {
                device,
                range,
                interval_ms,
                metric,
                consistent,
                cursor,
            } => {
                let request = StatsRequest {
                    device: &device,
                    range,
                    interval_ms,
                    metric: &metric,
                    consistent,
                    cursor: cursor.as_deref(),
                };
                self.stats(&request, deadline).await
            }
            Endpoint::Shards { device } => self.shards(&device).await,
        }
    }

    async fn readings(
        &self,
        route: &'static str,
        device: Option<String>,
        read: ReadParams,
        deadline: Option<Instant>,
    ) -> Answer {
        let fp = Fingerprint {
            route,
            device: device.clone(),
            from_ms: read.range.from_ms,
            to_ms: read.range.to_ms,
            descending: read.descending,
            limit: read.limit,
            detail: String::new(),
        };
        // The cursor is opened before any read: a bad one costs nothing.
        let after = match &read.cursor {
            Some(raw) => Some(
                decode_cursor(raw, &fp, &self.config.cursor_key)
                    .map_err(|e| ApiError::bad_cursor(e.to_string()))?,
            ),
            None => None,
        };
        // Resuming narrows the range to what lies after the position; the position's
        // own timestamp stays in (ties at the same ms are dropped by key, and so is
        // every copy of the position's own reading, under whichever key).
        let mut range = read.range;
        if let Some(pos) = &after {
            if read.descending {
                range.to_ms = pos.ts_ms + 1;
            } else {
                range.from_ms = pos.ts_ms;
            }
        }
        let time_range = to_time_range(range)?;
        let (now, table) = self.stored_layout().await?;
        let Some(table) = table else {
            return Ok((page_json(Vec::new(), None), ReadStats::default()));
        };
        let plan = match &device {
            Some(d) => {
                let fanout = self.directory.fanout(d, now).await.map_err(store_error)?;
                plan_entity(d, time_range, &table, &fanout).map_err(plan_error)?
            }
            None => {
                let hot = self
                    .directory
                    .hot(time_range, now)
                    .await
                    .map_err(store_error)?;
                let refs: Vec<(&str, &FanoutHistory)> =
                    hot.iter().map(|(n, h)| (n.as_str(), h)).collect();
                plan_all(time_range, &table, &refs).map_err(plan_error)?
            }
        };
        let plan_queries = plan.len() as u64;
        let hint = if device.is_none() {
            self.density_hint(now)
        } else {
            None
        };
        let opts = ReadOptions {
            descending: read.descending,
            consistent: read.consistent,
            concurrency: self.config.concurrency,
            max_buffered: self.config.max_buffered,
            budget: self.config.budget.read(deadline),
        };
        let mut room = AnswerRoom::new(self.config.budget.answer_bytes);
        let outcome = read_merged(
            &self.source,
            specs_with_index(&plan, self.config.time_index.as_deref()),
            opts,
            read.limit as usize,
            after.as_ref(),
            hint,
            |item| room.take(item),
        )
        .await
        .map_err(|e| self.read_error(e, device.is_none()))?;
        if device.is_none()
            && let Some(density) = outcome.density
        {
            self.remember_density(density, now);
        }
        let next_cursor = self
            .next_position(&read, device.as_deref(), after.as_ref(), &outcome)?
            .map(|position| encode_cursor(&position, &fp, &self.config.cursor_key));
        let stats = ReadStats::of(outcome.cost, outcome.items.len() as u64, plan_queries);
        let items = outcome
            .items
            .into_iter()
            .map(reading_out)
            .collect::<Result<Vec<_>, _>>()?;
        Ok((page_json(items, next_cursor), stats))
    }

    /// A read's failure as an answer. Without the index, a read over every device sorts
    /// whole buckets: the refusal says which deployment setting lifts the limit.
    fn read_error(&self, e: ExecError, every_device: bool) -> ApiError {
        match e {
            ExecError::TooMuchToSort { limit }
                if every_device && self.config.time_index.is_none() =>
            {
                ApiError::bad_request(
                    codes::RANGE_TOO_LARGE,
                    format!(
                        "without the time index, a read over every device sorts the whole time \
                         buckets its range touches, and these hold more than {limit} readings; \
                         read a shorter range, or deploy with TimeIndex=enabled (one more write \
                         unit per reading) so that such a read stops after the readings it needs"
                    ),
                )
            }
            e => exec_error(e),
        }
    }

    /// Where the page after `outcome` starts, if one follows. A page that a budget
    /// ended resumes from where the read stood; one that answered nothing is refused
    /// with the budget's name.
    fn next_position(
        &self,
        read: &ReadParams,
        device: Option<&str>,
        after: Option<&ReadingKey>,
        outcome: &ReadOutcome,
    ) -> Result<Option<ReadingKey>, ApiError> {
        let last = outcome.items.last().map(key_of);
        let Some(stopped) = outcome.stopped else {
            return match last {
                Some(last) => Ok(outcome.more.then_some(last)),
                // Only the answer's byte budget ends a page before its first reading.
                None if outcome.more => Err(budget::too_large(&self.config.budget)),
                None => Ok(None),
            };
        };
        let device_part = device.unwrap_or("");
        let start = after.cloned().unwrap_or_else(|| {
            budget::start_position(
                read.range.from_ms,
                read.range.to_ms,
                device_part,
                read.descending,
            )
        });
        let advice = if device.is_none() && self.config.time_index.is_none() {
            Advice::TimeIndex
        } else {
            Advice::NarrowRange
        };
        budget::resume_position(
            last,
            stopped.settled_before,
            device_part,
            read.descending,
            &start,
        )
        .map(Some)
        .ok_or_else(|| budget::refusal(stopped.budget, &self.config.budget, advice))
    }

    async fn reading(&self, point: &Point<'_>, deadline: Option<Instant>) -> Answer {
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
        let (now, table) = self.stored_layout().await?;
        let Some(table) = table else {
            return Err(not_found());
        };
        let fanout = self
            .directory
            .fanout(device, now)
            .await
            .map_err(store_error)?;
        let reading = ReadingRef {
            entity: device,
            event_id,
            ts,
            attribute: None,
        };
        let mut stats = ReadStats::default();
        let found = match point_keys(&reading, &table, &fanout) {
            Ok(keys) => {
                self.first_stored(&keys, &reading, consistent, deadline, &mut stats)
                    .await?
            }
            // A layout that hashes another attribute: look in every shard at that ms.
            Err(KeyError::MissingAttribute { .. }) => {
                let range = to_time_range(Range {
                    from_ms: ts_ms,
                    to_ms: ts_ms + 1,
                })?;
                let plan = plan_entity(device, range, &table, &fanout).map_err(plan_error)?;
                let mut found = None;
                let outcome = scan_all(
                    &self.source,
                    specs(&plan),
                    consistent,
                    self.config.concurrency,
                    self.config.budget.read(deadline),
                    |item| {
                        if item.event_id == event_id && item.device_id == device {
                            found = Some(item.clone());
                        }
                    },
                )
                .await
                .map_err(store_error)?;
                stats.calls = outcome.pages;
                stats.items_read = outcome.items_read;
                match (found, outcome.stopped) {
                    (Some(item), _) => Some(item),
                    (None, Some(spent)) => {
                        return Err(budget::refusal(
                            spent,
                            &self.config.budget,
                            Advice::NarrowRange,
                        ));
                    }
                    (None, None) => None,
                }
            }
            Err(e) => return Err(ApiError::bad_request(codes::BAD_ID, e.to_string())),
        };
        let item = found.ok_or_else(not_found)?;
        stats.items_returned = 1;
        let out = reading_out(item)?;
        let body = serde_json::to_value(out).map_err(|e| ApiError::internal(e.to_string()))?;
        Ok((body, stats))
    }

    /// GetItem on each of `keys` in order (most likely first) until one holds
    /// `reading`; counts the calls and items read into `stats`.
    async fn first_stored(
        &self,
        keys: &[ItemKey],
        reading: &ReadingRef<'_>,
        consistent: bool,
        deadline: Option<Instant>,
        stats: &mut ReadStats,
    ) -> Result<Option<ReadingItem>, ApiError> {
        let refuse = |spent| budget::refusal(spent, &self.config.budget, Advice::NarrowRange);
        for key in keys {
            let key = PageKey {
                pk: key.pk.clone(),
                sk: key.sk.clone(),
                ts_ms: None,
            };
            if stats.calls >= self.config.budget.queries {
                return Err(refuse(Exhausted::Queries));
            }
            stats.calls += 1;
            let item = within(deadline, self.source.get_reading(&key, consistent))
                .await
                .ok_or_else(|| refuse(Exhausted::Time))?
                .map_err(store_error)?;
            stats.items_read += u64::from(item.is_some());
            if let Some(item) = item
                && item.device_id == reading.entity
                && item.event_id == reading.event_id
            {
                return Ok(Some(item));
            }
        }
        Ok(None)
    }

    async fn stats(&self, request: &StatsRequest<'_>, deadline: Option<Instant>) -> Answer {
        let started = Instant::now();
        let StatsRequest {
            device,
            range,
            interval_ms,
            metric,
            consistent,
            cursor,
        } = *request;
        let fp = request.fingerprint();
        // A page after the first starts at the bucket the previous one left out.
        let from_ms = match cursor {
            Some(raw) => {
                decode_cursor(raw, &fp, &self.config.cursor_key)
                    .map_err(|e| ApiError::bad_cursor(e.to_string()))?
                    .ts_ms
            }
            None => range.from_ms,
        };
        let read = Range {
            from_ms,
            to_ms: range.to_ms,
        };
        let empty = || {
            json!(StatsResponse {
                buckets: vec![],
                next_cursor: None
            })
        };
        let (now, table) = self.stored_layout().await?;
        let Some(table) = table else {
            return Ok((empty(), ReadStats::default()));
        };
        let fanout = self
            .directory
            .fanout(device, now)
            .await
            .map_err(store_error)?;
        let plan =
            plan_entity(device, to_time_range(read)?, &table, &fanout).map_err(plan_error)?;
        let mut pager = Pager::new(interval_ms, self.config.stats_budget, started);
        // The page's own time budget bounds the reads too, not only the readings that
        // arrive: a sparse range stops there as well.
        let page_deadline = started + 2 * self.config.stats_budget.time;
        let opts = ReadOptions {
            descending: false,
            consistent,
            concurrency: self.config.concurrency,
            max_buffered: self.config.max_buffered,
            budget: self.config.budget.read(Some(
                deadline.map_or(page_deadline, |d| d.min(page_deadline)),
            )),
        };
        let max_buckets = self
            .config
            .budget
            .answer_bytes
            .saturating_sub(PAGE_OVERHEAD_BYTES)
            / STATS_BUCKET_MAX_BYTES;
        pager.limit_buckets(max_buckets);
        // In merge order, so a reading stored under two keys is counted once, and the
        // buckets close in time order.
        let outcome = merge_each(
            &self.source,
            specs(&plan),
            opts,
            self.config.stats_window,
            |item| {
                if item.device_id != device || !(read.from_ms..read.to_ms).contains(&item.ts_ms) {
                    return ControlFlow::Continue(());
                }
                let value = item.metrics.get(metric).copied();
                pager.add(item.ts_ms, value, Instant::now())
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
            page.next_cursor = Some(encode_cursor(&position, &fp, &self.config.cursor_key));
        }
        let body = serde_json::to_value(page).map_err(|e| ApiError::internal(e.to_string()))?;
        Ok((body, stats))
    }

    async fn shards(&self, device: &str) -> Answer {
        let (now, table) = self.stored_layout().await?;
        let fanout = self
            .directory
            .fanout(device, now)
            .await
            .map_err(store_error)?;
        Ok((
            shards_json(device, table.as_ref(), &fanout),
            ReadStats::default(),
        ))
    }
}

/// Room a readings page keeps for everything but its items: the brackets, the
/// `next_cursor` field and the cursor itself.
const PAGE_OVERHEAD_BYTES: usize = 1024;

/// The most bytes one stats bucket takes as JSON (a 24-character start, a 20-digit
/// count, three numbers of at most 24 characters, and the field names).
const STATS_BUCKET_MAX_BYTES: usize = 160;

/// What is left of a readings page's byte budget as its items join it.
struct AnswerRoom {
    left: usize,
}

impl AnswerRoom {
    fn new(answer_bytes: usize) -> Self {
        Self {
            left: answer_bytes.saturating_sub(PAGE_OVERHEAD_BYTES),
        }
    }

    /// Whether `item` (and the comma before it) still fits; it then takes its room.
    fn take(&mut self, item: &ReadingItem) -> bool {
        let size = reading_out(item.clone()).map_or(0, |out| budget::json_len(&out)) + 1;
        let fits = size <= self.left;
        self.left = self.left.saturating_sub(size);
        fits
    }
}

/// A validated point read.
#[derive(Debug, Clone, Copy)]
struct Point<'a> {
    device: &'a str,
    event_id: &'a str,
    ts_ms: i64,
    consistent: bool,
}

/// The plan's queries as merge streams, on the table.
pub fn specs(plan: &ReadPlan) -> Vec<StreamSpec> {
    specs_with_index(plan, None)
}

/// The plan's queries as merge streams; a whole-partition query whose items are not
/// in time order by the table's key (a time bucket read over every device) goes
/// through the time index when there is one.
pub fn specs_with_index(plan: &ReadPlan, time_index: Option<&str>) -> Vec<StreamSpec> {
    plan.queries
        .iter()
        .map(|q| spec_of(q, time_index))
        .collect()
}

fn spec_of(q: &KeyQuery, time_index: Option<&str>) -> StreamSpec {
    let span = q.time_filter.unwrap_or(q.covers);
    let index = time_index
        .filter(|_| !q.time_ordered && q.sk_between.is_none())
        .map(str::to_owned);
    StreamSpec {
        pk: q.pk.clone(),
        sk_between: q.sk_between.clone(),
        span: (span.from().as_millis(), span.to().as_millis()),
        filter_time: q.time_filter.is_some(),
        time_ordered: q.time_ordered,
        index,
    }
}

fn to_time_range(r: Range) -> Result<TimeRange, ApiError> {
    let ts = |ms| Timestamp::from_millis(ms).map_err(|e| ApiError::bad_range(e.to_string()));
    TimeRange::new(ts(r.from_ms)?, ts(r.to_ms)?).map_err(|e| ApiError::bad_range(e.to_string()))
}

fn exec_error(e: ExecError) -> ApiError {
    match e {
        ExecError::Store(e) => store_error(e),
        e @ ExecError::TooMuchToSort { .. } => {
            ApiError::bad_request(codes::RANGE_TOO_LARGE, e.to_string())
        }
    }
}

fn plan_error(e: PlanError) -> ApiError {
    match e {
        PlanError::Key(k) => ApiError::bad_request(codes::BAD_ID, k.to_string()),
        PlanError::Unsupported { .. } => ApiError::bad_request(codes::NOT_SUPPORTED, e.to_string()),
        PlanError::TooLarge { .. } => ApiError::bad_request(codes::RANGE_TOO_LARGE, e.to_string()),
    }
}

/// The one place store failures meet HTTP: throttles and transient failures are
/// 503 (come back later); anything else is the deployment's fault, never the input's.
/// The wall clock, which dates the shard directory's cache, could not be read.
fn clock_error(e: ClockError) -> ApiError {
    tracing::error!(error = %e, "no usable clock");
    ApiError::internal("the read failed")
}

pub fn store_error(e: StoreError) -> ApiError {
    match &e {
        StoreError::Throttled { .. } => ApiError::throttled(1),
        StoreError::Transient(_) | StoreError::Deadline => {
            let mut a = ApiError::unavailable("the table could not be read; retry later");
            a.retry_after = Some(1);
            a
        }
        _ => {
            tracing::error!(error = %e, "read failed");
            ApiError::internal("the read failed")
        }
    }
}

fn reading_out(item: ReadingItem) -> Result<ReadingOut, ApiError> {
    let ts = format_ts(item.ts_ms)
        .ok_or_else(|| ApiError::internal(format!("stored ts_ms {} out of range", item.ts_ms)))?;
    Ok(ReadingOut {
        device_id: item.device_id,
        event_id: item.event_id,
        ts,
        metrics: item.metrics,
        tags: item.tags,
    })
}

fn page_json(items: Vec<ReadingOut>, next_cursor: Option<String>) -> serde_json::Value {
    json!(ReadingsPage { items, next_cursor })
}

fn shards_json(
    device: &str,
    table: Option<&TableHistory>,
    fanout: &FanoutHistory,
) -> serde_json::Value {
    let layout: Vec<serde_json::Value> = table
        .map(|t| {
            t.epochs()
                .iter()
                .map(|e| {
                    json!({
                        "effective_from": e.effective_from.to_rfc3339(),
                        "strategy": e.value.strategy.to_string(),
                        "shards": e.value.shards.get(),
                        "default_fanout": e.value.default_fanout(),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let fanout: Vec<serde_json::Value> = fanout
        .epochs()
        .iter()
        .map(|e| json!({"effective_from": e.effective_from.to_rfc3339(), "k": e.value}))
        .collect();
    json!({"device_id": device, "fanout": fanout, "layout": layout})
}

fn over_read(s: &ReadStats) -> f64 {
    if s.items_returned == 0 {
        s.items_read as f64
    } else {
        s.items_read as f64 / s.items_returned as f64
    }
}

fn json_response(status: StatusCode, body: String, retry_after: Option<u32>) -> Response<String> {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(secs) = retry_after {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    if status == StatusCode::METHOD_NOT_ALLOWED {
        resp.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET"));
    }
    resp
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A hint is plain data; a panic elsewhere cannot leave it inconsistent.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
